package kafkaconsumer

// Processing: what a layer that processes a consumer's messages
// concurrently (package process) needs of the consumer beyond Messages,
// Batches and Ack: when a partition it holds messages of is revoked, a way
// to give messages back unprocessed, and the consumer's Metrics.

import (
	"log/slog"

	"github.com/IBM/sarama"
)

// Processing is the part of a consumer that a processing layer built on
// it uses beyond Messages, Batches and Ack: package process runs handlers
// on it. Get it from Consumer.Processing. Its methods are safe for
// concurrent use, never block on the network, and may be called after the
// consumer closed. The zero Processing belongs to no consumer: Revoked
// returns nil (a channel never closed), Batches false, and the other
// methods do nothing. A share group's consumer (GroupProtocolShare) has
// no revocation and nothing to give back (see Share.Release): its
// Processing is the zero one but for the metrics, DeadLetterFailed and
// Report.
type Processing struct {
	cm *consumerManager
	sc *shareConsumer // set for a share group's consumer only
}

// closedSignal is a closed channel: what Revoked returns for a message of
// a partition this instance does not run.
var closedSignal = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Processing implements Consumer.
func (cm *consumerManager) Processing() Processing { return Processing{cm: cm} }

// Batches reports whether the consumer hands out batches (Config.BatchSize
// is set), a share group's consumer too: then its messages come on
// Batches, else on Messages.
func (p Processing) Batches() bool {
	return (p.cm != nil && p.cm.config.BatchSize > 0) || (p.sc != nil && p.sc.config.BatchSize > 0)
}

// Revoked returns a channel that is closed when this instance begins to
// give up the partition that handed out msg: the partition stops in a
// rebalance, at Close or Shutdown, or because its claim was lost with the
// ZooKeeper session. From then on the partition hands out nothing more
// and waits, up to MaxProcessingTime, for the acks of what it handed out,
// or for those messages to be given back (GiveBack); then it commits the
// acked prefix and releases its claim. The channel is closed already when
// the instance does not run the partition any more.
//
// The channel is that of the partition's run on this instance: when the
// partition comes back later, its messages have another channel. Revoked
// costs a map lookup and does not allocate.
func (p Processing) Revoked(msg *sarama.ConsumerMessage) <-chan struct{} {
	if p.cm == nil {
		return nil
	}
	if msg == nil {
		return closedSignal
	}
	pm := (*p.cm.pms.Load())[TopicPartition{Topic: msg.Topic, Partition: msg.Partition}]
	if pm == nil || pm.retired.Load() {
		return closedSignal
	}
	return pm.t.Dying()
}

// GiveBack returns a handed-out message unprocessed: it is not acked, and
// the partition does not wait for it when it stops. Nothing at or after
// msg's offset in its partition is committed by this instance any more, so
// the partition's next owner consumes msg again; acks of later messages
// are still recorded, but cannot move the commit past msg. Give back the
// messages whose partition is revoked (Revoked) and that will not be
// processed, or whose processing was cut short: the partition then stops
// without waiting out MaxProcessingTime for them. While the partition
// runs, a message given back holds its commit where it is for as long as
// this instance runs the partition, and the messages handed out after it
// stay pending: after MaxPendingAcks of them the partition pauses
// (ErrMaxPendingAcks). With Config.DurableAcks, the acks of later
// messages go in the acked set of the commit at msg's offset, so that
// the next owner consumes msg again but not them. msg must be the message
// as handed out (the same pointer, not a copy): giving back nil, a
// message acked or given back before, one of a partition this instance
// no longer runs, or one of an earlier run of the partition on this
// instance (given back after the partition came back) does nothing.
// Config.Observer is told with TakenBack.
func (p Processing) GiveBack(msg *sarama.ConsumerMessage) {
	if p.cm == nil || msg == nil {
		return
	}
	cm := p.cm
	pm := (*cm.pms.Load())[TopicPartition{Topic: msg.Topic, Partition: msg.Partition}]
	if pm == nil || pm.retired.Load() {
		cm.logf(slog.LevelDebug, "Gave back message %d of %s/%d, but this instance does not own that partition (any more).", msg.Offset, msg.Topic, msg.Partition)
		return
	}
	if !pm.giveBack(msg) {
		cm.logf(slog.LevelDebug, "Gave back message %d of %s/%d, but the partition's run on this instance did not hand it out, or it was acked or given back already.", msg.Offset, msg.Topic, msg.Partition)
	}
	cm.tookBack(msg)
}

// Retried tells Config.Metrics (Metrics.Retried) that the processing of
// msg failed and will be tried again.
func (p Processing) Retried(msg *sarama.ConsumerMessage) {
	if m, group, ok := p.metrics(); ok && msg != nil {
		m.Retried(group, TopicPartition{Topic: msg.Topic, Partition: msg.Partition})
	}
}

// DeadLettered tells Config.Metrics (Metrics.DeadLettered) that msg was
// produced to a dead-letter topic after its last attempt failed.
func (p Processing) DeadLettered(msg *sarama.ConsumerMessage) {
	if m, group, ok := p.metrics(); ok && msg != nil {
		m.DeadLettered(group, TopicPartition{Topic: msg.Topic, Partition: msg.Partition})
	}
}

// DeadLetterFailed reports that the produce of msg's dead letter failed
// with err: err goes to Errors() in a *sarama.ConsumerError that names
// msg's topic and partition (after Close, to the log only), and
// Config.Metrics is told (Metrics.DeadLetterFailed). Package process
// calls it once per message whose produce fails; it produces again.
func (p Processing) DeadLetterFailed(msg *sarama.ConsumerMessage, err error) {
	m, group, ok := p.metrics()
	if !ok || msg == nil {
		return
	}
	tp := TopicPartition{Topic: msg.Topic, Partition: msg.Partition}
	m.DeadLetterFailed(group, tp)
	err = &sarama.ConsumerError{Topic: msg.Topic, Partition: msg.Partition, Err: err}
	if p.sc != nil {
		p.sc.logf(slog.LevelWarn, "%s.", err)
		p.sc.sendError(err)
		return
	}
	p.cm.logf(slog.LevelWarn, "%s.", err)
	p.cm.sendError(err)
}

// Report sends err, an error of the processing layer that concerns no
// single message (package process: a share group's delivery count limit
// it could not read), on Errors() as it is, and logs it (after Close, it
// is logged only). The zero Processing drops it.
func (p Processing) Report(err error) {
	switch {
	case err == nil:
	case p.sc != nil:
		p.sc.logf(slog.LevelWarn, "%s.", err)
		p.sc.sendError(err)
	case p.cm != nil:
		p.cm.logf(slog.LevelWarn, "%s.", err)
		p.cm.sendError(err)
	}
}

// InFlight tells Config.Metrics (Metrics.InFlight) that the number of
// handlers running changed by delta since the last call.
func (p Processing) InFlight(delta int) {
	if m, group, ok := p.metrics(); ok && delta != 0 {
		m.InFlight(group, delta)
	}
}

// metrics returns the consumer's Metrics and group; false for the zero
// Processing.
func (p Processing) metrics() (Metrics, string, bool) {
	switch {
	case p.cm != nil:
		return p.cm.config.metrics(), p.cm.group, true
	case p.sc != nil:
		return p.sc.config.metrics(), p.sc.group, true
	}
	return nil, "", false
}
