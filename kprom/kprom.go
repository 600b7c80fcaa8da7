// Package kprom exports the metrics of kafkaconsumer consumers to
// Prometheus. It is a module of its own, so that the kafkaconsumer package
// does not depend on the Prometheus client.
//
// A Metrics is both the consumers' Config.Metrics, which counts their
// events as they happen, and a prometheus.Collector, which reads the
// gauges and message counts of the consumers it observes from their Stats
// at scrape time:
//
//	m := kprom.New()
//	prometheus.MustRegister(m)
//	config.Metrics = m
//	consumer, err := kafkaconsumer.Join(group, subscription, zookeeper, config)
//	...
//	m.Observe(group, consumer)
//
// The metrics, all with the label group, and topic and partition where
// they are per partition:
//
//	kafkaconsumer_rebalances_total                 counter   group
//	kafkaconsumer_rebalance_seconds                histogram group
//	kafkaconsumer_partitions_assigned_total        counter   group
//	kafkaconsumer_partitions_revoked_total         counter   group
//	kafkaconsumer_claim_waits_total                counter   group, topic, partition
//	kafkaconsumer_claim_wait_seconds               histogram group
//	kafkaconsumer_registrations_lost_total         counter   group
//	kafkaconsumer_commits_total                    counter   group
//	kafkaconsumer_commit_seconds                   histogram group
//	kafkaconsumer_commit_errors_total              counter   group, topic, partition
//	kafkaconsumer_pauses_total                     counter   group, topic, partition
//	kafkaconsumer_acked_sets_unreadable_total      counter   group, topic, partition
//	kafkaconsumer_processing_retries_total         counter   group, topic, partition (package process)
//	kafkaconsumer_processing_dead_lettered_total   counter   group, topic, partition (package process)
//	kafkaconsumer_processing_dead_letter_failures_total counter group, topic, partition (package process)
//	kafkaconsumer_processing_in_flight             gauge     group (package process)
//	kafkaconsumer_messages_handed_out_total        counter   group, topic, partition (Stats)
//	kafkaconsumer_messages_acked_total             counter   group, topic, partition (Stats)
//	kafkaconsumer_partition_claimed                gauge     group, topic, partition (Stats)
//	kafkaconsumer_partition_paused                 gauge     group, topic, partition (Stats)
//	kafkaconsumer_partition_paused_by_user         gauge     group, topic, partition (Stats)
//	kafkaconsumer_partition_pending_messages       gauge     group, topic, partition (Stats)
//	kafkaconsumer_partition_lag_messages           gauge     group, topic, partition (Stats)
//	kafkaconsumer_partition_awaiting_return        gauge     group, topic, partition (Stats)
//
// The per-partition series read from Stats exist while the observed
// consumer runs the partition, or, for partition_awaiting_return (1) and
// partition_claimed (0) alone, while the partition awaits the return of its
// departed owner (a static member, see kafkaconsumer.Config.RestartGrace)
// and falls to the observed consumer if it does not return: the sum of
// partition_awaiting_return over a group counts the partitions nobody
// consumes meanwhile; its message counters start from 0 each
// time it starts running it (rate and increase handle such resets).
package kprom

import (
	"strconv"
	"sync"
	"time"

	"github.com/kafkaconsumer/kafkaconsumer"
	"github.com/prometheus/client_golang/prometheus"
)

const namespace = "kafkaconsumer"

var partitionLabels = []string{"group", "topic", "partition"}

// Metrics implements kafkaconsumer.Metrics and prometheus.Collector. Create
// it with New, register it once, and share it among any number of
// consumers. It is safe for concurrent use.
type Metrics struct {
	rebalances         *prometheus.CounterVec
	rebalanceSeconds   *prometheus.HistogramVec
	partitionsAssigned *prometheus.CounterVec
	partitionsRevoked  *prometheus.CounterVec
	claimWaits         *prometheus.CounterVec
	claimWaitSeconds   *prometheus.HistogramVec
	registrationsLost  *prometheus.CounterVec
	commits            *prometheus.CounterVec
	commitSeconds      *prometheus.HistogramVec
	commitErrors       *prometheus.CounterVec
	pauses             *prometheus.CounterVec
	retries            *prometheus.CounterVec
	deadLettered       *prometheus.CounterVec
	deadLetterFailures *prometheus.CounterVec
	ackedUnreadable    *prometheus.CounterVec
	inFlight           *prometheus.GaugeVec

	handedOut, acked, claimed, paused, pausedByUser, pending, lag, buffered, awaiting *prometheus.Desc

	mu        sync.Mutex                        // guards consumers
	consumers map[kafkaconsumer.Consumer]string // observed consumers and their groups
}

var _ kafkaconsumer.Metrics = (*Metrics)(nil)
var _ prometheus.Collector = (*Metrics)(nil)

// New returns a Metrics with no consumer observed yet.
func New() *Metrics {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help}, labels)
	}
	histogram := func(name, help string, buckets []float64) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: name, Help: help, Buckets: buckets}, []string{"group"})
	}
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(namespace, "", name), help, partitionLabels, nil)
	}
	// From 10 ms to about 11 minutes: stopping partitions wait up to
	// MaxProcessingTime for acks, and claims up to a session timeout.
	slow := prometheus.ExponentialBuckets(0.01, 4, 9)
	return &Metrics{
		rebalances:         counter("rebalances_total", "Changes of the partitions an instance runs.", "group"),
		rebalanceSeconds:   histogram("rebalance_seconds", "How long a change of the partitions an instance runs took, stopping partitions included.", slow),
		partitionsAssigned: counter("partitions_assigned_total", "Partitions an instance started to run.", "group"),
		partitionsRevoked:  counter("partitions_revoked_total", "Partitions an instance stopped running.", "group"),
		claimWaits:         counter("claim_waits_total", "Claims of a partition that waited for another instance to release it.", partitionLabels...),
		claimWaitSeconds:   histogram("claim_wait_seconds", "How long claims waited for another instance to release the partition.", slow),
		registrationsLost:  counter("registrations_lost_total", "Times an instance found its registration gone (ZooKeeper session expired).", "group"),
		commits:            counter("commits_total", "Offset commit rounds.", "group"),
		commitSeconds:      histogram("commit_seconds", "How long offset commit rounds took.", prometheus.DefBuckets),
		commitErrors:       counter("commit_errors_total", "Offset commits of a partition that failed.", partitionLabels...),
		pauses:             counter("pauses_total", "Times a partition paused at MaxPendingAcks.", partitionLabels...),
		retries:            counter("processing_retries_total", "Handler failures of package process whose message is tried again.", partitionLabels...),
		deadLettered:       counter("processing_dead_lettered_total", "Messages that package process produced to the dead-letter topic after their last attempt.", partitionLabels...),
		deadLetterFailures: counter("processing_dead_letter_failures_total", "Messages whose dead letter package process failed to produce (it tries again).", partitionLabels...),
		ackedUnreadable:    counter("acked_sets_unreadable_total", "Commits whose acked set (DurableAcks) could not be read when the partition started.", partitionLabels...),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "processing_in_flight",
			Help: "Handlers of package process running, as of the last second."}, []string{"group"}),
		handedOut:    desc("messages_handed_out_total", "Messages handed out on Messages since the instance started running the partition."),
		acked:        desc("messages_acked_total", "Messages acked since the instance started running the partition."),
		claimed:      desc("partition_claimed", "1 while the instance holds the partition's claim in ZooKeeper."),
		paused:       desc("partition_paused", "1 while the partition is paused at MaxPendingAcks."),
		pausedByUser: desc("partition_paused_by_user", "1 while the partition is paused by Consumer.Pause."),
		pending:      desc("partition_pending_messages", "Messages handed out and not acked yet."),
		lag:          desc("partition_lag_messages", "Messages not processed yet: the high-water mark minus the offset to commit."),
		buffered:     desc("partition_buffered_bytes", "Bytes of messages fetched for the partition that it has not begun to hand out (its share of Config.MaxBufferedBytes)."),
		awaiting:     desc("partition_awaiting_return", "1 while the partition awaits the return of its departed owner (RestartGrace), consumed by nobody."),
		consumers:    make(map[kafkaconsumer.Consumer]string),
	}
}

// Observe adds a consumer of group whose Stats the collector reads at each
// scrape, until Forget. Observe a consumer once; a closed consumer
// reports no partitions.
func (m *Metrics) Observe(group string, c kafkaconsumer.Consumer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.consumers[c] = group
}

// Forget stops reading the Stats of a consumer.
func (m *Metrics) Forget(c kafkaconsumer.Consumer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.consumers, c)
}

func (m *Metrics) vecs() []prometheus.Collector {
	return []prometheus.Collector{m.rebalances, m.rebalanceSeconds, m.partitionsAssigned, m.partitionsRevoked,
		m.claimWaits, m.claimWaitSeconds, m.registrationsLost, m.commits, m.commitSeconds, m.commitErrors, m.pauses,
		m.retries, m.deadLettered, m.deadLetterFailures, m.ackedUnreadable, m.inFlight}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, v := range m.vecs() {
		v.Describe(ch)
	}
	for _, d := range []*prometheus.Desc{m.handedOut, m.acked, m.claimed, m.paused, m.pausedByUser, m.pending, m.lag, m.buffered, m.awaiting} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: the counted events, and the
// Stats of the observed consumers. A partition run by two observed
// consumers of a group at once (the previous owner stopping while the next
// one waits for the claim) is reported once, by the one that holds the
// claim.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, v := range m.vecs() {
		v.Collect(ch)
	}
	m.mu.Lock()
	consumers := make(map[kafkaconsumer.Consumer]string, len(m.consumers))
	for c, g := range m.consumers {
		consumers[c] = g
	}
	m.mu.Unlock()

	type key struct {
		group string
		tp    kafkaconsumer.TopicPartition
	}
	seen := make(map[key]kafkaconsumer.PartitionStats)
	for c, group := range consumers {
		for _, s := range c.Stats() {
			k := key{group, s.TopicPartition}
			if old, ok := seen[k]; !ok || (!old.Claimed && s.Claimed) {
				seen[k] = s
			}
		}
	}
	gauge := func(d *prometheus.Desc, t prometheus.ValueType, v float64, labels []string) {
		ch <- prometheus.MustNewConstMetric(d, t, v, labels...)
	}
	for k, s := range seen {
		labels := []string{k.group, s.Topic, strconv.Itoa(int(s.Partition))}
		gauge(m.awaiting, prometheus.GaugeValue, boolValue(s.AwaitingReturn != ""), labels)
		if s.AwaitingReturn != "" {
			gauge(m.claimed, prometheus.GaugeValue, 0, labels)
			continue
		}
		gauge(m.handedOut, prometheus.CounterValue, float64(s.HandedOut), labels)
		gauge(m.acked, prometheus.CounterValue, float64(s.Acked), labels)
		gauge(m.claimed, prometheus.GaugeValue, boolValue(s.Claimed), labels)
		gauge(m.paused, prometheus.GaugeValue, boolValue(s.Paused), labels)
		gauge(m.pausedByUser, prometheus.GaugeValue, boolValue(s.PausedByUser), labels)
		gauge(m.pending, prometheus.GaugeValue, float64(s.Pending), labels)
		gauge(m.buffered, prometheus.GaugeValue, float64(s.BufferedBytes), labels)
		if s.Lag >= 0 {
			gauge(m.lag, prometheus.GaugeValue, float64(s.Lag), labels)
		}
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func partitionValues(group string, tp kafkaconsumer.TopicPartition) []string {
	return []string{group, tp.Topic, strconv.Itoa(int(tp.Partition))}
}

// Rebalanced implements kafkaconsumer.Metrics.
func (m *Metrics) Rebalanced(group string, r kafkaconsumer.Rebalance, took time.Duration) {
	m.rebalances.WithLabelValues(group).Inc()
	m.rebalanceSeconds.WithLabelValues(group).Observe(took.Seconds())
	m.partitionsAssigned.WithLabelValues(group).Add(float64(len(r.Assigned)))
	m.partitionsRevoked.WithLabelValues(group).Add(float64(len(r.Revoked)))
}

// ClaimWaited implements kafkaconsumer.Metrics.
func (m *Metrics) ClaimWaited(group string, tp kafkaconsumer.TopicPartition, waited time.Duration) {
	m.claimWaits.WithLabelValues(partitionValues(group, tp)...).Inc()
	m.claimWaitSeconds.WithLabelValues(group).Observe(waited.Seconds())
}

// RegistrationLost implements kafkaconsumer.Metrics.
func (m *Metrics) RegistrationLost(group string) {
	m.registrationsLost.WithLabelValues(group).Inc()
}

// Committed implements kafkaconsumer.Metrics.
func (m *Metrics) Committed(group string, took time.Duration) {
	m.commits.WithLabelValues(group).Inc()
	m.commitSeconds.WithLabelValues(group).Observe(took.Seconds())
}

// CommitFailed implements kafkaconsumer.Metrics.
func (m *Metrics) CommitFailed(group string, tp kafkaconsumer.TopicPartition, _ error) {
	m.commitErrors.WithLabelValues(partitionValues(group, tp)...).Inc()
}

// Paused implements kafkaconsumer.Metrics.
func (m *Metrics) Paused(group string, tp kafkaconsumer.TopicPartition) {
	m.pauses.WithLabelValues(partitionValues(group, tp)...).Inc()
}

// Retried implements kafkaconsumer.Metrics.
func (m *Metrics) Retried(group string, tp kafkaconsumer.TopicPartition) {
	m.retries.WithLabelValues(partitionValues(group, tp)...).Inc()
}

// DeadLettered implements kafkaconsumer.Metrics.
func (m *Metrics) DeadLettered(group string, tp kafkaconsumer.TopicPartition) {
	m.deadLettered.WithLabelValues(partitionValues(group, tp)...).Inc()
}

// DeadLetterFailed implements kafkaconsumer.Metrics.
func (m *Metrics) DeadLetterFailed(group string, tp kafkaconsumer.TopicPartition) {
	m.deadLetterFailures.WithLabelValues(partitionValues(group, tp)...).Inc()
}

// AckedSetUnreadable implements kafkaconsumer.Metrics.
func (m *Metrics) AckedSetUnreadable(group string, tp kafkaconsumer.TopicPartition) {
	m.ackedUnreadable.WithLabelValues(partitionValues(group, tp)...).Inc()
}

// InFlight implements kafkaconsumer.Metrics.
func (m *Metrics) InFlight(group string, delta int) {
	m.inFlight.WithLabelValues(group).Add(float64(delta))
}
