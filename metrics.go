package kafkaconsumer

import "time"

// Metrics receives the events of a consumer, for a metrics system: set it
// in Config.Metrics. The kprom module adapts it to Prometheus.
//
// Its methods are called from the consumer's goroutines, concurrently and
// without a lock: they must be safe for concurrent use, return quickly, and
// not call the Consumer. None is called per message (but Retried,
// DeadLettered and DeadLetterFailed, per failure of package process's
// handlers): the counts of
// messages handed out and acked, and the gauges (claimed, paused, pending,
// lag), are read from Consumer.Stats, e.g. at scrape time.
//
// Methods may be added to this interface: embed BaseMetrics in an
// implementation so that it keeps compiling.
type Metrics interface {
	// Rebalanced is called after each change of the partitions the
	// instance runs, with those it stopped and started (as
	// Config.OnRebalance receives them), and how long the change took:
	// stopping partitions wait for acks, commit and release their claims.
	Rebalanced(group string, r Rebalance, took time.Duration)

	// ClaimWaited is called when a partition was claimed after it had to
	// wait for another instance to let go of it, or when it stopped
	// waiting (the partition was stopped first), with how long it waited.
	ClaimWaited(group string, tp TopicPartition, waited time.Duration)

	// RegistrationLost is called when the instance finds its registration
	// gone (its ZooKeeper session expired; see ErrRegistrationLost).
	RegistrationLost(group string)

	// Committed is called after each commit round,
	// one every Consumer.Offsets.AutoCommit.Interval plus those of
	// stopping partitions, with how long it took. A round commits every
	// partition's marked offset; the partitions whose commit failed are
	// told by CommitFailed.
	Committed(group string, took time.Duration)

	// CommitFailed is called when the commit of a partition's offset
	// failed (the error that goes to Errors()); sarama tries again in the
	// next round.
	CommitFailed(group string, tp TopicPartition, err error)

	// Paused is called when a partition pauses at MaxPendingAcks (see
	// ErrMaxPendingAcks).
	Paused(group string, tp TopicPartition)

	// Retried is called by package process (through
	// Consumer.Processing) when a handler failed on a message of tp that
	// will be tried again.
	Retried(group string, tp TopicPartition)

	// DeadLettered is called by package process when a message of tp was
	// produced to the dead-letter topic after its last attempt failed
	// (it is then acked).
	DeadLettered(group string, tp TopicPartition)

	// DeadLetterFailed is called by package process when the produce of
	// the dead letter of a message of tp failed, once per message (it is
	// tried again); the error goes to Errors().
	DeadLetterFailed(group string, tp TopicPartition)

	// AckedSetUnreadable is called when tp starts at a commit whose acked
	// set (Config.DurableAcks) cannot be decoded (ErrAckedSetUnreadable).
	AckedSetUnreadable(group string, tp TopicPartition)

	// InFlight is called by package process, about once a second while a
	// process.Run runs and once when it returns, with the change of the
	// number of its handlers running since its last call: the sum of the
	// deltas is the number running now (0 once every Run returned).
	InFlight(group string, delta int)
}

// BaseMetrics implements Metrics with methods that do nothing. Embed it in
// an implementation that needs only some of them, or that must keep
// compiling when methods are added to Metrics.
type BaseMetrics struct{}

// Rebalanced implements Metrics.
func (BaseMetrics) Rebalanced(string, Rebalance, time.Duration) {}

// ClaimWaited implements Metrics.
func (BaseMetrics) ClaimWaited(string, TopicPartition, time.Duration) {}

// RegistrationLost implements Metrics.
func (BaseMetrics) RegistrationLost(string) {}

// Committed implements Metrics.
func (BaseMetrics) Committed(string, time.Duration) {}

// CommitFailed implements Metrics.
func (BaseMetrics) CommitFailed(string, TopicPartition, error) {}

// Paused implements Metrics.
func (BaseMetrics) Paused(string, TopicPartition) {}

// Retried implements Metrics.
func (BaseMetrics) Retried(string, TopicPartition) {}

// DeadLettered implements Metrics.
func (BaseMetrics) DeadLettered(string, TopicPartition) {}

// DeadLetterFailed implements Metrics.
func (BaseMetrics) DeadLetterFailed(string, TopicPartition) {}

// AckedSetUnreadable implements Metrics.
func (BaseMetrics) AckedSetUnreadable(string, TopicPartition) {}

// InFlight implements Metrics.
func (BaseMetrics) InFlight(string, int) {}

var _ Metrics = BaseMetrics{}

// metrics returns the configured Metrics, or BaseMetrics when none is.
func (c *Config) metrics() Metrics {
	if c.Metrics == nil {
		return BaseMetrics{}
	}
	return c.Metrics
}
