package kprom_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer"
	"github.com/kafkaconsumer/kafkaconsumer/kprom"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// cluster returns the ZooKeeper connection string and the Kafka brokers of
// the test cluster (make test starts one and exports them), or skips.
func cluster(t *testing.T) (string, []string) {
	t.Helper()
	zookeeper, kafka := os.Getenv("ZOOKEEPER_PEERS"), os.Getenv("KAFKA_PEERS")
	if testing.Short() || zookeeper == "" || kafka == "" {
		t.Skip("needs ZOOKEEPER_PEERS and KAFKA_PEERS (make test, or make cluster-up and . .cluster/env)")
	}
	return zookeeper, strings.Split(kafka, ",")
}

func kafkaVersion(t *testing.T) sarama.KafkaVersion {
	v := sarama.V2_8_0_0
	if s := os.Getenv("KAFKA_VERSION"); s != "" {
		var err error
		if v, err = sarama.ParseKafkaVersion(s); err != nil {
			t.Fatalf("KAFKA_VERSION=%q: %s", s, err)
		}
	}
	return v
}

// waitFor polls cond until it holds, failing the test after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond) // polling interval, not synchronisation
	}
}

// scrape gets the metrics page at url and returns its samples by name,
// each with its labels as written ("group=...,topic=...").
func scrape(t *testing.T, url string) map[string]map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("scrape: %s", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %s", resp.Status)
	}
	samples := make(map[string]map[string]float64)
	scanner := bufio.NewScanner(resp.Body)
	for scanner.Scan() {
		line := scanner.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		series, value, ok := strings.Cut(line, " ")
		if !ok {
			t.Fatalf("scrape: malformed line %q", line)
		}
		name, labels, _ := strings.Cut(strings.TrimSuffix(series, "}"), "{")
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			t.Fatalf("scrape: value of %q: %s", line, err)
		}
		if samples[name] == nil {
			samples[name] = make(map[string]float64)
		}
		samples[name][labels] = v
	}
	if err := scanner.Err(); err != nil {
		t.Fatalf("scrape: %s", err)
	}
	return samples
}

// sum adds the samples of name whose labels contain every one of want
// (e.g. `group="g"`).
func sum(samples map[string]map[string]float64, name string, want ...string) (total float64, n int) {
next:
	for labels, v := range samples[name] {
		for _, w := range want {
			if !strings.Contains(labels, w) {
				continue next
			}
		}
		total += v
		n++
	}
	return total, n
}

// TestScrapeRunningConsumer runs a consumer of a new topic of 4 partitions
// with kprom's Metrics against the real cluster, consumes and acks 30
// messages, and checks what a scrape over HTTP says about it.
func TestScrapeRunningConsumer(t *testing.T) {
	zookeeper, brokers := cluster(t)
	clientConfig := sarama.NewConfig()
	clientConfig.Version = kafkaVersion(t)
	clientConfig.Producer.Return.Successes = true
	clientConfig.Producer.Partitioner = sarama.NewRoundRobinPartitioner
	client, err := sarama.NewClient(brokers, clientConfig)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		t.Fatal(err)
	}
	suffix := fmt.Sprintf("%d.%06d", time.Now().UnixNano()%1e9, rand.Intn(1e6))
	topic, group := "kprom."+suffix, "kprom-group."+suffix
	if err := admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 4, ReplicationFactor: 1}, false); err != nil {
		t.Fatal(err)
	}
	producer, err := sarama.NewSyncProducerFromClient(client)
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	const n = 30
	for i := 0; i < n; i++ {
		if _, _, err := producer.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder(strconv.Itoa(i))}); err != nil {
			t.Fatal(err)
		}
	}

	metrics := kprom.New()
	registry := prometheus.NewRegistry()
	registry.MustRegister(metrics)
	server := httptest.NewServer(promhttp.HandlerFor(registry, promhttp.HandlerOpts{ErrorHandling: promhttp.PanicOnError}))
	defer server.Close()

	config := kafkaconsumer.NewConfig()
	config.Version = clientConfig.Version
	config.Metrics = metrics
	config.MaxProcessingTime = 2 * time.Second
	config.Consumer.Offsets.AutoCommit.Interval = 100 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	consumer, err := kafkaconsumer.JoinContext(ctx, group, kafkaconsumer.TopicSubscription(topic), zookeeper, config)
	if err != nil {
		t.Fatal(err)
	}
	metrics.Observe(group, consumer)
	received := 0
	for received < n {
		select {
		case msg := <-consumer.Messages():
			consumer.Ack(msg)
			received++
		case <-ctx.Done():
			t.Fatalf("received %d of %d messages", received, n)
		}
	}

	g := fmt.Sprintf("group=%q", group)
	var samples map[string]map[string]float64
	waitFor(t, 30*time.Second, "a scrape with the 30 messages committed", func() bool {
		samples = scrape(t, server.URL)
		lag, partitions := sum(samples, "kafkaconsumer_partition_lag_messages", g)
		commits, _ := sum(samples, "kafkaconsumer_commits_total", g)
		return partitions == 4 && lag == 0 && commits > 0
	})
	checks := []struct {
		name      string
		want      float64
		wantLines int
	}{
		{"kafkaconsumer_messages_handed_out_total", n, 4},
		{"kafkaconsumer_messages_acked_total", n, 4},
		{"kafkaconsumer_partition_claimed", 4, 4},
		{"kafkaconsumer_partition_pending_messages", 0, 4},
		{"kafkaconsumer_partition_paused", 0, 4},
		{"kafkaconsumer_partition_paused_by_user", 0, 4},
		{"kafkaconsumer_rebalances_total", 1, 1},
		{"kafkaconsumer_partitions_assigned_total", 4, 1},
		{"kafkaconsumer_rebalance_seconds_count", 1, 1},
	}
	for _, c := range checks {
		if got, lines := sum(samples, c.name, g); got != c.want || lines != c.wantLines {
			t.Errorf("%s: %v in %d series; want %v in %d", c.name, got, lines, c.want, c.wantLines)
		}
	}
	for p := 0; p < 4; p++ {
		series := fmt.Sprintf(`group=%q,partition="%d",topic=%q`, group, p, topic)
		if _, ok := samples["kafkaconsumer_messages_acked_total"][series]; !ok {
			t.Errorf("no kafkaconsumer_messages_acked_total{%s}", series)
		}
	}
	if _, lines := sum(samples, "kafkaconsumer_commit_errors_total", g); lines != 0 {
		t.Errorf("commit errors reported: %v", samples["kafkaconsumer_commit_errors_total"])
	}

	if err := consumer.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %s", err)
	}
	samples = scrape(t, server.URL)
	if _, lines := sum(samples, "kafkaconsumer_partition_claimed", g); lines != 0 {
		t.Errorf("a closed consumer still reports %d partitions", lines)
	}
	if got, _ := sum(samples, "kafkaconsumer_partitions_revoked_total", g); got != 4 {
		t.Errorf("kafkaconsumer_partitions_revoked_total = %v after Shutdown; want 4", got)
	}
	metrics.Forget(consumer)
}

// statsOnly is a Consumer whose Stats are given; its other methods are
// not called by the collector.
type statsOnly struct {
	kafkaconsumer.Consumer
	stats []kafkaconsumer.PartitionStats
}

func (s statsOnly) Stats() []kafkaconsumer.PartitionStats { return s.stats }

// TestAwaitingReturn: a partition awaiting its departed owner's return is
// exported as partition_awaiting_return 1 and partition_claimed 0 alone;
// a running one as partition_awaiting_return 0 with the rest.
func TestAwaitingReturn(t *testing.T) {
	t.Parallel()
	m := kprom.New()
	registry := prometheus.NewRegistry()
	registry.MustRegister(m)
	m.Observe("g", &statsOnly{stats: []kafkaconsumer.PartitionStats{
		{TopicPartition: kafkaconsumer.TopicPartition{Topic: "t", Partition: 0}, Claimed: true, Lag: 3},
		{TopicPartition: kafkaconsumer.TopicPartition{Topic: "t", Partition: 1}, Lag: -1, AwaitingReturn: "pod-1", AwaitingReturnUntil: time.Now().Add(time.Minute)},
	}})
	families, err := registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := make(map[string]float64)
	for _, f := range families {
		for _, metric := range f.GetMetric() {
			partition := ""
			for _, l := range metric.GetLabel() {
				if l.GetName() == "partition" {
					partition = l.GetValue()
				}
			}
			got[f.GetName()+"/"+partition] = metric.GetGauge().GetValue() + metric.GetCounter().GetValue()
		}
	}
	for key, want := range map[string]float64{
		"kafkaconsumer_partition_awaiting_return/0": 0,
		"kafkaconsumer_partition_awaiting_return/1": 1,
		"kafkaconsumer_partition_claimed/0":         1,
		"kafkaconsumer_partition_claimed/1":         0,
		"kafkaconsumer_partition_lag_messages/0":    3,
	} {
		if v, ok := got[key]; !ok || v != want {
			t.Errorf("%s = %v (exported %t), want %v", key, v, ok, want)
		}
	}
	if _, ok := got["kafkaconsumer_partition_pending_messages/1"]; ok {
		t.Error("a partition awaiting its owner's return has a pending-messages series")
	}
}

// TestProcessingMetrics checks the series of package process's events:
// retries and dead letters per partition, and the in-flight gauge as the
// sum of the deltas.
func TestProcessingMetrics(t *testing.T) {
	t.Parallel()
	m := kprom.New()
	registry := prometheus.NewRegistry()
	registry.MustRegister(m)
	server := httptest.NewServer(promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	defer server.Close()

	tp := kafkaconsumer.TopicPartition{Topic: "orders", Partition: 3}
	m.Retried("g", tp)
	m.Retried("g", tp)
	m.DeadLettered("g", tp)
	m.DeadLetterFailed("g", tp)
	m.AckedSetUnreadable("g", tp)
	m.InFlight("g", 5)
	m.InFlight("g", -2)

	samples := scrape(t, server.URL)
	for _, c := range []struct {
		name string
		want float64
	}{
		{"kafkaconsumer_processing_retries_total", 2},
		{"kafkaconsumer_processing_dead_lettered_total", 1},
		{"kafkaconsumer_processing_dead_letter_failures_total", 1},
		{"kafkaconsumer_acked_sets_unreadable_total", 1},
		{"kafkaconsumer_processing_in_flight", 3},
	} {
		if got, n := sum(samples, c.name, `group="g"`); n != 1 || got != c.want {
			t.Errorf("%s: %v in %d series, want %v in 1", c.name, got, n, c.want)
		}
	}
	if _, n := sum(samples, "kafkaconsumer_processing_retries_total", `topic="orders"`, `partition="3"`); n != 1 {
		t.Errorf("retries: no series labelled with the partition: %v", samples["kafkaconsumer_processing_retries_total"])
	}
}
