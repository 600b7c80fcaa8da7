package kafkaconsumer

// The partition manager: one per partition of this instance's share, run
// on its own goroutine and owned by the manager goroutine. Its run claims
// (claims.go), starts (partition_start.go), hands out (handout.go) and
// finally stops: it waits for acks, commits and releases (stop, below).

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer/internal/commitmark"
	"github.com/kafkaconsumer/kafkaconsumer/internal/fetch"
	"github.com/wvanbergen/kazoo-go"
	"gopkg.in/tomb.v1"
)

// stopGrace is how long a stopping partition may take, past
// MaxProcessingTime, for its final commit and the release of its claim.
// With Kafka and ZooKeeper reachable both take milliseconds; the grace
// covers a coordinator that moves (a broker restart).
const stopGrace = 5 * time.Second

// releaseShare is the part of stopGrace kept for the release of the claim.
const releaseShare = time.Second

// partitionManager consumes one partition that its consumer manager assigned
// to this instance, in its own goroutine (run), owned by the consumer
// manager: it kills the tomb and waits for it.
//
// run claims the partition in ZooKeeper, reads its committed offset into
// the consumer's offset store, starts its partition consumer, and hands messages out on the shared Messages channel
// until it is killed. Then it stops (see stop): it waits for the acks of
// what it handed out, takes back what sits unread in the channel, commits
// the acked prefix and releases the claim, all within MaxProcessingTime +
// stopGrace of the kill.
type partitionManager struct {
	parent *consumerManager
	tp     TopicPartition
	log    *slog.Logger // the consumer's, with the partition's attributes
	// outOfRange is set by run when its partition fetcher ended because the
	// offset it fetched is out of range: the next start is at
	// Offsets.Initial (startAtInitial).
	outOfRange bool
	// claimOnly: run claims the partition and keeps the claim until killed,
	// but consumes nothing. In a group with instances of the original
	// library, whose white and black lists select Kafka's internal topics,
	// the internal topics' partitions that fall to this instance are
	// claim-only (see mixed.go). Stats and OnRebalance leave claim-only
	// partitions out.
	claimOnly bool
	// initial resolves Offsets.Initial, and committed reads the committed
	// offset, together with the other partitions that the same
	// distribution started; nil when started alone.
	initial, committed *offsetBatch
	// claims claims the partition together with the others that the same
	// distribution started; nil when started alone.
	claims *claimBatch

	t tomb.Tomb // run's lifecycle: killed by the consumer manager, Done by run

	// retired is set when the consumer manager removed this partition
	// manager, after it stopped: Ack's cache must not return it any more.
	retired atomic.Bool

	// wake receives a token, without blocking the sender, when waiting is set
	// and an ack or withdrawal resolves a pending message.
	wake chan struct{}

	// sending is set while the consume loop hands out on the shared
	// channel, not parked by a hand-out hold (see handOutHold); written
	// by the consume loop only.
	sending atomic.Bool

	// pauseMu orders Pause and Resume with each other and with the start
	// of a partition consumer, so that the partition consumer ends up
	// paused exactly when userPaused is set. Taken before mu.
	pauseMu sync.Mutex

	mu sync.Mutex // guards the fields below, shared with Ack's goroutines
	// pending is the ack bookkeeping of the handed-out messages.
	pending *pendingAcks
	// managed is set while the consumer's offset store keeps this
	// partition's offset (see startOffsets and closeOffsets). Marks go to
	// it under mu, so none is lost to Close.
	managed bool
	// pc is the running partition consumer, for its high-water mark; nil
	// when none runs.
	pc sarama.PartitionConsumer
	// waiting tells ack and withdraw to send a token on wake.
	waiting bool
	// lastHandedOut is the offset of the last message handed out, or -1.
	lastHandedOut int64
	// lastAcked is the highest offset acked, or -1.
	lastAcked int64
	// handedOut and acked count the messages handed out, and acked, since
	// this partition manager started.
	handedOut, acked uint64
	// claimed is set while this instance holds the partition's owner node;
	// the consumer manager clears it when the ZooKeeper session that held
	// the claim is gone.
	claimed bool
	// paused is set while MaxPendingAcks messages are pending, so that
	// nothing more is handed out.
	paused bool
	// userPaused is set between Pause and Resume: the partition's
	// consumer is paused (it fetches nothing) and enter takes nothing.
	userPaused bool
	// handingOut is set while consume runs (see takeBackAll).
	handingOut bool
	// skipped is the acked set that the partition's committed offset
	// carried when it started (Config.DurableAcks): offsets entered as
	// acked (pendingAcks.pushSkipped), never handed out; skipAt indexes
	// its first range that does not end at or before the last offset
	// entered.
	skipped []commitmark.Range
	skipAt  int
	// marked is what the acked set last marked was made of (markLocked).
	marked struct {
		changes     uint64
		base, limit int64
	}
	// lost is set when the claim went with an expired ZooKeeper session,
	// for good: the partition manager hands out nothing more, and stops
	// without a final commit (another instance may own the partition).
	lost bool

	// commitErr is ErrCommitTimeout when the final commit did not complete
	// in time; written by run before it ends, read after its tomb is done.
	commitErr error
}

func newPartitionManager(parent *consumerManager, partition *kazoo.Partition) *partitionManager {
	tp := TopicPartition{Topic: partition.Topic().Name, Partition: partition.ID}
	return &partitionManager{
		parent:        parent,
		tp:            tp,
		log:           parent.log.With(attrTopic, tp.Topic, attrPartition, tp.Partition),
		wake:          make(chan struct{}, 1),
		pending:       newPendingAcks(parent.config.MaxPendingAcks),
		lastHandedOut: -1,
		lastAcked:     -1,
	}
}

// stats returns the partition's state for Stats.
func (pm *partitionManager) stats() PartitionStats {
	pm.mu.Lock()
	defer pm.mu.Unlock()
	s := PartitionStats{
		TopicPartition: pm.tp,
		Claimed:        pm.claimed,
		Paused:         pm.paused,
		PausedByUser:   pm.userPaused,
		LastHandedOut:  pm.lastHandedOut,
		LastAcked:      pm.lastAcked,
		HandedOut:      pm.handedOut,
		Acked:          pm.acked,
		Pending:        pm.pending.pending(),
		Committed:      -1,
		HighWaterMark:  -1,
		Lag:            -1,
	}
	if c := pm.pending.commitOffset(); c >= 0 {
		s.Committed = c
	} else if pm.managed {
		if next := pm.parent.offsets.next(pm.tp); next >= 0 {
			s.Committed = next // else nothing committed: Offsets.Initial
		}
	}
	if pm.pc != nil {
		s.HighWaterMark = pm.pc.HighWaterMarkOffset()
		if f, ok := pm.pc.(*fetch.Fetcher); ok {
			s.BufferedBytes = f.BufferedBytes()
		}
	}
	if s.Committed >= 0 && s.HighWaterMark >= 0 {
		s.Lag = max(s.HighWaterMark-s.Committed, 0)
	}
	return s
}

// logf writes a line of this partition at level (see Config.Logger).
func (pm *partitionManager) logf(level slog.Level, format string, args ...interface{}) {
	logf(pm.log, level, format, args...)
}

// errorf returns a *sarama.ConsumerError of this partition, as Errors()
// carries them, wrapping the formatted error.
func (pm *partitionManager) errorf(format string, args ...interface{}) error {
	return &sarama.ConsumerError{Topic: pm.tp.Topic, Partition: pm.tp.Partition, Err: fmt.Errorf(format, args...)}
}

// run is the partition manager's goroutine: claim, read the committed
// offset, consume until killed, then stop. What did not complete in time
// when it stopped is its tomb's reason.
func (pm *partitionManager) run() {
	defer pm.t.Done()
	if pm.parent.coordinator().claim(pm) {
		if pm.claimOnly {
			pm.logf(slog.LevelDebug, "Claimed; held for the instances of the original library, not consumed.")
			<-pm.t.Dying()
		} else if pm.startOffsets() {
			pm.consumeUntilKilled()
		}
	}
	pm.t.Kill(pm.stop())
}

// stop ends run once the partition manager is killed. One deadline bounds
// it: it waits for the acks of what was handed out until MaxProcessingTime
// has passed, then takes back what sits unread in the channel
// (withdrawUnread), commits the acked prefix and releases the claim within
// stopGrace more. It returns what did not complete in time. A partition
// whose claim was lost (see lost) commits nothing: another instance may
// own it now, and its next owner consumes again what was acked since the
// last commit.
func (pm *partitionManager) stop() error {
	acksDue := time.Now().Add(pm.parent.config.MaxProcessingTime)
	deadline := acksDue.Add(stopGrace)
	pm.mu.Lock()
	managed := pm.managed
	pm.mu.Unlock()
	if managed {
		pm.waitForAcks(acksDue)
		if pm.isLost() {
			// lose took the partition out of the offset store.
			pm.logf(slog.LevelWarn, "Claim lost with the ZooKeeper session: nothing committed; the next owner consumes again what was acked since the last commit.")
		} else {
			// The last second is the release's, which must be tried
			// even when the commit took its time. What sits unread in
			// the channel is taken back first: it is not committed, and
			// it cannot be received here once the claim is released.
			pm.withdrawUnread(deadline.Add(-releaseShare))
			pm.commitErr = pm.closeOffsets(deadline.Add(-releaseShare))
		}
	}
	err := errors.Join(pm.commitErr, pm.parent.coordinator().release(pm, deadline))
	pm.logf(slog.LevelDebug, "Stopped partition.")
	return err
}

// isLost reports whether the claim was lost for good (see lost).
func (pm *partitionManager) isLost() bool {
	pm.mu.Lock()
	defer pm.mu.Unlock()
	return pm.lost
}

// waitForAcks waits until no handed-out message is pending, until due, or
// until a Shutdown's context is done (the consumer manager's
// shutdownCtxDone).
func (pm *partitionManager) waitForAcks(due time.Time) {
	pm.mu.Lock()
	left := pm.pending.pending()
	pm.waiting = left > 0
	pm.mu.Unlock()
	if left == 0 {
		return
	}
	timeout := time.NewTimer(time.Until(due))
	defer timeout.Stop()
	for {
		select {
		case <-pm.wake:
			pm.mu.Lock()
			left = pm.pending.pending()
			lost := pm.lost
			pm.mu.Unlock()
			if left == 0 || lost {
				return
			}
		case <-timeout.C:
			pm.logf(slog.LevelWarn, "%d handed-out messages were not acked within MaxProcessingTime (%s); the next owner consumes them again.",
				left, pm.parent.config.MaxProcessingTime)
			return
		case <-pm.parent.shutdownCtxDone:
			pm.logf(slog.LevelWarn, "%d handed-out messages were not acked before the deadline of Shutdown; the next owner consumes them again.", left)
			return
		}
	}
}

// closeOffsets marks the acked prefix, takes the partition out of the
// offset store and waits until deadline for the commit of that mark. It
// asks the committer for rounds rather than waiting for the next
// auto-commit tick, so the partition is handed over without delay. It
// returns ErrCommitTimeout when the commit was not confirmed by the
// deadline: the offset store goes on trying in its rounds, and the next
// owner may consume again what was acked.
func (pm *partitionManager) closeOffsets(deadline time.Time) error {
	cm := pm.parent
	pm.mu.Lock()
	pm.markLocked()
	pm.managed = false
	pm.mu.Unlock()
	committed := cm.offsets.close(pm.tp)

	// A Shutdown's context that ends moves the deadline closer (bound).
	ctxDone := cm.shutdownCtxDone
	timeout := time.NewTimer(time.Until(cm.bound(deadline, commitsAfterCtxDone)))
	defer timeout.Stop()
	for attempt := 0; ; {
		select {
		case <-committed:
			return nil
		case <-cm.commit():
		case <-ctxDone:
			ctxDone = nil
			timeout.Reset(time.Until(cm.bound(deadline, commitsAfterCtxDone)))
			continue
		case <-timeout.C:
			return pm.commitTimeout(committed)
		}
		// The round is over, and its commit failed: ask again after a
		// delay.
		retry := time.NewTimer(retryDelay(attempt))
		attempt++
	wait:
		select {
		case <-committed:
			retry.Stop()
			return nil
		case <-retry.C:
		case <-ctxDone:
			ctxDone = nil
			timeout.Reset(time.Until(cm.bound(deadline, commitsAfterCtxDone)))
			goto wait
		case <-timeout.C:
			retry.Stop()
			return pm.commitTimeout(committed)
		}
	}
}

// commitTimeout gives up the final commit: the partition leaves the offset
// store before its claim is released, so that no later round commits it
// after its next owner did (that would move the offset back, or onto a
// topic of the same name created later). A round in flight may still
// commit it; committed tells when that happened already.
func (pm *partitionManager) commitTimeout(committed <-chan struct{}) error {
	pm.parent.offsets.dropClosing(pm.tp, committed)
	select {
	case <-committed:
		return nil // the last round made it after all
	default:
	}
	err := pm.errorf("%w: the final offset commit was not confirmed in time (MaxProcessingTime %s + %s); the next owner consumes again what was acked since the last commit",
		ErrCommitTimeout, pm.parent.config.MaxProcessingTime, stopGrace)
	pm.logf(slog.LevelError, "%s.", err)
	return err
}

// retryDelay is the delay before retry number attempt (from 0): 100 ms
// doubling to at most 1 s.
func retryDelay(attempt int) time.Duration {
	if attempt < 4 {
		return 100 * time.Millisecond << attempt
	}
	return time.Second
}

// sleepOrDie waits the retry delay of the given attempt and reports whether
// t is still alive.
func sleepOrDie(t *tomb.Tomb, attempt int) bool {
	timer := time.NewTimer(retryDelay(attempt))
	defer timer.Stop()
	select {
	case <-t.Dying():
		return false
	case <-timer.C:
		return true
	}
}
