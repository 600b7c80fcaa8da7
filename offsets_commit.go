package kafkaconsumer

// The commit path: the marker goroutine, which moves each partition's
// acked prefix into the offset store (offsets.go) every markInterval, and
// the committer goroutine, which runs the offset store's commit rounds on
// a timer and when a stopping partition asks for one.

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer/internal/commitmark"
)

// startLoops starts the marker and committer goroutines, which shutdown
// stops.
func (cm *consumerManager) startLoops() {
	cm.markStop, cm.markDone = make(chan struct{}), make(chan struct{})
	cm.commitRequest = make(chan struct{}, 1)
	cm.commitStop, cm.commitDone = make(chan struct{}), make(chan struct{})
	go cm.markLoop()
	go cm.commitLoop()
}

// maxMarkDelay bounds how long the end of a partition's acked prefix waits
// before it is marked in the offset store, whence the next commit round
// takes it. Acks do not mark one by one: see partitionManager.ack.
const maxMarkDelay = 100 * time.Millisecond

// markInterval returns how often the marker marks: every maxMarkDelay, or
// every auto-commit interval when that is shorter.
func markInterval(cfg *sarama.Config) time.Duration {
	if i := cfg.Consumer.Offsets.AutoCommit.Interval; i > 0 && i < maxMarkDelay {
		return i
	}
	return maxMarkDelay
}

// markLoop is the marker goroutine: every markInterval it marks the acked
// prefix of every partition, until shutdown closes markStop.
func (cm *consumerManager) markLoop() {
	defer close(cm.markDone)
	ticker := time.NewTicker(markInterval(cm.config.Config))
	defer ticker.Stop()
	for {
		select {
		case <-cm.markStop:
			return
		case <-ticker.C:
			for _, pm := range *cm.pms.Load() {
				pm.markAcked()
			}
		}
	}
}

// commit asks the committer for a commit round of every partition, and
// returns a channel that is closed when a round that began after the call
// is over, or at once when the committer has stopped. Requests coalesce:
// many partitions stopping at once share rounds. Safe from any goroutine.
func (cm *consumerManager) commit() <-chan struct{} {
	cm.commitMu.Lock()
	defer cm.commitMu.Unlock()
	if cm.commitStopped {
		done := make(chan struct{})
		close(done)
		return done
	}
	if cm.nextRound == nil {
		cm.nextRound = make(chan struct{})
		select {
		case cm.commitRequest <- struct{}{}:
		default: // a round is asked for already; it takes this one along
		}
	}
	return cm.nextRound
}

// commitLoop is the committer goroutine: it runs the offset store's
// commit rounds, one at a time, those that commit asks for and, when the
// user's configuration enables auto-commit, one every
// Consumer.Offsets.AutoCommit.Interval, until closeKafka closes
// commitStop. A round blocks while Kafka is unreachable (the coordinator's
// lookup retries); the callers wait with their own deadlines.
func (cm *consumerManager) commitLoop() {
	defer close(cm.commitDone)
	var tick <-chan time.Time
	if cm.autoCommit {
		ticker := time.NewTicker(cm.config.Consumer.Offsets.AutoCommit.Interval)
		defer ticker.Stop()
		tick = ticker.C
	}
	for {
		select {
		case <-tick:
			cm.commitRound()
			continue
		case <-cm.commitStop:
			cm.commitMu.Lock()
			cm.commitStopped = true
			if cm.nextRound != nil {
				close(cm.nextRound)
				cm.nextRound = nil
			}
			cm.commitMu.Unlock()
			return
		case <-cm.commitRequest:
		}
		cm.commitMu.Lock()
		round := cm.nextRound
		cm.nextRound = nil
		cm.commitMu.Unlock()
		cm.commitRound()
		if round != nil {
			close(round)
		}
	}
}

// commitRound runs one commit round of the offset store, and reports it
// to Metrics.
func (cm *consumerManager) commitRound() {
	if cm.fenced() {
		return // the partitions may be another instance's: see fence.go
	}
	began := time.Now()
	cm.offsets.commitRound()
	cm.config.metrics().Committed(cm.group, time.Since(began))
}

// commitFailed passes on a failed commit of tp, to Errors() and Metrics,
// but for one refused with ILLEGAL_GENERATION while a member of Kafka's
// classic group joins: it is in the next generation, whose SyncGroup is
// to come, and the offset is committed with it.
// A commit refused with FENCED_INSTANCE_ID is final for a member of
// Kafka's group (kafkaCoordinator.instanceFenced); one refused with
// FENCED_MEMBER_EPOCH or UNKNOWN_MEMBER_ID loses a consumer-protocol
// member's partitions (kafkaCoordinator.commitLost). The consumer
// protocol's codes, which sarama does not name, are reported by name
// (namedKError).
func (cm *consumerManager) commitFailed(tp TopicPartition, err error) {
	k := cm.kafkaActive()
	if k != nil && k.consumer == nil && k.joining.Load() && errors.Is(err, sarama.ErrIllegalGeneration) {
		// The group's next generation began and this member is in it,
		// its SyncGroup to come: the offset stays to commit, and the
		// next round commits it with that generation.
		cm.logf(slog.LevelDebug, "The commit of %s/%d waits for the group's next generation (%s).", tp.Topic, tp.Partition, err)
		return
	}
	err = namedKError(err)
	cm.config.metrics().CommitFailed(cm.group, tp, err)
	cm.sendError(&sarama.ConsumerError{Topic: tp.Topic, Partition: tp.Partition, Err: err})
	switch {
	case k == nil:
	case errors.Is(err, sarama.ErrFencedInstancedId):
		k.instanceFenced(fmt.Errorf("the commit of %s/%d: %w", tp.Topic, tp.Partition, err))
	case errors.Is(err, errFencedMemberEpoch), errors.Is(err, sarama.ErrUnknownMemberId):
		k.commitLost() // GroupProtocolConsumer: the partitions are lost
	}
}

// markAcked marks the end of the acked prefix in the offset store, which
// ignores a mark that does not move it forward. The consumer manager's
// marker calls it every markInterval, and closeOffsets once more before
// the final commit.
func (pm *partitionManager) markAcked() {
	pm.mu.Lock()
	pm.markLocked()
	pm.mu.Unlock()
}

// markLocked is markAcked with pm.mu held.
func (pm *partitionManager) markLocked() {
	if !pm.managed {
		return
	}
	c := pm.pending.commitOffset()
	if !pm.parent.config.DurableAcks {
		if c >= 0 {
			pm.parent.offsets.mark(pm.tp, c)
		}
		return
	}
	pm.markAckedSet(c)
}

// markAckedSet marks, with Config.DurableAcks, the end of the acked prefix
// c (-1 for none yet: the committed offset) with the acked set beyond it:
// the acked entries of the pending acks, and what is left of the set the
// partition started with (skipped) beyond the last offset entered. A set
// that nears what a commit holds (3/4 of the offset store's ackedLimit,
// or of what commitmark.Acked inflates; or cut to fit) holds the pending
// acks: the partition hands out nothing more until the
// commit point moves, the pause of MaxPendingAcks. The set is encoded
// again only when it changed. pm.mu is held.
func (pm *partitionManager) markAckedSet(c int64) {
	offsets := pm.parent.offsets
	base := c
	if base < 0 {
		if base = offsets.next(pm.tp); base < 0 {
			return // nothing committed, nothing acked
		}
	}
	limit := offsets.ackedLimit.Load()
	m := &pm.marked
	if m.changes == pm.pending.changes && m.base == base && m.limit == limit {
		return // marked already
	}
	m.changes, m.base, m.limit = pm.pending.changes, base, limit
	acked := ""
	if limit > 0 {
		rs := pm.pending.ackedRanges(nil)
		for _, r := range pm.skipped[pm.skipAt:] {
			if from := max(r.From, pm.lastHandedOut+1); from < r.To {
				rs = append(rs, commitmark.Range{From: from, To: r.To})
			}
		}
		metadata, full := commitmark.WithAcked(commitmark.NextMark, base, rs, int(limit))
		acked = metadata[len(commitmark.NextMark):]
		if full {
			pm.pending.hold()
		}
	}
	offsets.markAcked(pm.tp, base, acked)
}
