package kafkaconsumer

// A partition's start, after its claim: reserve it in the offset store,
// read its committed offset (batched with the others of its distribution),
// and start its partition consumer there, or at Offsets.Initial; restart
// the partition consumer when it stops by itself.

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer/internal/fetch"
	"gopkg.in/tomb.v1"
)

// startOffsets reserves the partition in the consumer's offset store, then
// reads its committed offset: with the others of its distribution when the
// partition was claimed with them, else alone. It retries until killed (an
// earlier partition manager of the partition may still be finishing its
// final commit), and reports false when killed.
func (pm *partitionManager) startOffsets() bool {
	offsets := pm.parent.offsets
	for attempt := 0; ; attempt++ {
		err := offsets.reserve(pm.tp)
		if err == nil {
			pm.mu.Lock()
			pm.managed = true
			pm.mu.Unlock()
			var committed int64
			if committed, err = pm.readCommitted(); err == nil {
				offsets.set(pm.tp, committed)
				// The acked set of the commit (Config.DurableAcks):
				// none of it is handed out again.
				acked, err := offsets.takeAcked(pm.tp)
				if err != nil {
					pm.ackedSetUnreadable(committed, err)
				}
				pm.mu.Lock()
				pm.skipped, pm.skipAt = acked, 0
				pm.mu.Unlock()
				if len(acked) > 0 {
					pm.logf(slog.LevelDebug, "The committed offset %d carries %d ranges of acked offsets beyond it, up to %d: not handed out again.",
						committed, len(acked), acked[len(acked)-1].To-1)
				}
				return true
			}
		}
		select {
		case <-pm.t.Dying():
			return false
		default:
		}
		pm.logf(slog.LevelWarn, "Failed to read the committed offset: %s. Trying again.", err)
		if !sleepOrDie(&pm.t, attempt) {
			return false
		}
	}
}

// ackedSetUnreadable reports that the commit at committed carries an
// acked set that cannot be read (err): the partition starts at the
// commit, and delivers again what the set said was acked.
func (pm *partitionManager) ackedSetUnreadable(committed int64, err error) {
	pm.parent.config.metrics().AckedSetUnreadable(pm.parent.group, pm.tp)
	err = pm.errorf("%w: at offset %d, %w; the messages after it are delivered again", ErrAckedSetUnreadable, committed, err)
	pm.logf(slog.LevelWarn, "%s.", err)
	pm.parent.sendError(err)
}

// readCommitted returns the partition's committed offset, -1 for none.
func (pm *partitionManager) readCommitted() (int64, error) {
	if pm.committed != nil {
		offset, ok := pm.committed.get(pm.tp, pm.t.Dying())
		pm.committed = nil // once: a retry reads alone
		if ok {
			return offset, nil
		}
	}
	return pm.parent.reads.read(pm.tp, pm.t.Dying())
}

// consumeUntilKilled runs partition consumers and hands their messages
// out until killed, starting a new consumer when one stops by itself.
//
// While the instance is fenced it consumes nothing: it closes the
// partition consumer and waits for the fence to be lifted, then starts
// again after the last message handed out (the fence's raise took back
// those that sat unread). A lost claim ends it for good.
func (pm *partitionManager) consumeUntilKilled() {
	for {
		if !pm.awaitLift() {
			return
		}
		pc := pm.startConsumer()
		if pc == nil {
			return
		}
		end := pm.consume(pc)
		pm.mu.Lock()
		pm.pc = nil
		pm.mu.Unlock()
		if f, ok := pc.(*fetch.Fetcher); ok && end == consumeClosed {
			pm.outOfRange = f.OutOfRange()
		}
		if end != consumeClosed {
			pm.parent.closeInBackground(pc)
			if end == consumeKilled {
				return
			}
			pm.logf(slog.LevelDebug, "Fenced: handing out nothing until the group's coordination (ZooKeeper session or group coordinator) answers again.")
			continue
		}
		if err := pc.Close(); err != nil {
			pm.logf(slog.LevelWarn, "Partition consumer stopped: %s.", err)
		}
		pm.logf(slog.LevelWarn, "Partition consumer stopped by itself; starting it again.")
	}
}

// awaitLift waits while the instance is fenced. It reports false when the
// partition manager is killed first, or its claim is lost (then it waits
// for the kill).
func (pm *partitionManager) awaitLift() bool {
	for {
		pm.mu.Lock()
		lost := pm.lost
		pm.mu.Unlock()
		if lost {
			<-pm.t.Dying()
			return false
		}
		raised, lifted := pm.parent.fence.channels()
		select {
		case <-raised:
		default:
			return true // not fenced
		}
		select {
		case <-lifted:
		case <-pm.t.Dying():
			return false
		}
	}
}

// startConsumer starts consuming where the group left off: after the last
// handed-out message when this partition manager restarts its consumer, else
// at the committed offset; at Offsets.Initial when there is none, or when
// the offset is out of range (see startAtInitial). It retries errors until
// killed, and returns nil when killed. An error goes to Errors() when it
// differs from the last attempt's, not at every retry.
func (pm *partitionManager) startConsumer() sarama.PartitionConsumer {
	reported := ""
	for attempt := 0; ; attempt++ {
		offset, pc, err := pm.tryStartConsumer()
		if err == nil {
			pm.pauseMu.Lock()
			pm.mu.Lock()
			pm.pc = pc
			paused := pm.userPaused
			pm.mu.Unlock()
			if paused {
				pc.Pause()
			}
			pm.pauseMu.Unlock()
			pm.logf(slog.LevelDebug, "Consuming from offset %d.", offset)
			return pc
		}
		select {
		case <-pm.t.Dying():
			return nil
		default:
		}
		pm.logf(slog.LevelWarn, "Failed to start partition consumer at offset %d: %s. Trying again.", offset, err)
		if msg := err.Error(); msg != reported {
			reported = msg
			pm.parent.sendError(&sarama.ConsumerError{Topic: pm.tp.Topic, Partition: pm.tp.Partition, Err: err})
		}
		if !sleepOrDie(&pm.t, attempt) {
			return nil
		}
	}
}

// tryStartConsumer is one attempt of startConsumer; it returns the offset
// it started at, or tried (-1 for Offsets.Initial).
func (pm *partitionManager) tryStartConsumer() (int64, sarama.PartitionConsumer, error) {
	offset := pm.nextToHandOut()
	if offset == 0 {
		if offset = pm.parent.offsets.next(pm.tp); offset < 0 {
			// Nothing committed.
			pc, err := pm.startAtInitial(-1)
			if err == nil {
				offset = pm.nextToHandOut()
			}
			return offset, pc, err
		}
	}
	if pm.outOfRange { // the last partition fetcher's leader said so
		pm.outOfRange = false
		pc, err := pm.startAtInitial(offset)
		if err == nil {
			offset = pm.nextToHandOut()
		}
		return offset, pc, err
	}
	pc, err := pm.consumePartition(offset)
	if errors.Is(err, sarama.ErrOffsetOutOfRange) {
		if pc, err = pm.startAtInitial(offset); err == nil {
			offset = pm.nextToHandOut()
		}
	}
	return offset, pc, err
}

// nextToHandOut returns the offset after the last one handed out; 0 when
// none was, and startAtInitial did not set a start.
func (pm *partitionManager) nextToHandOut() int64 {
	pm.mu.Lock()
	defer pm.mu.Unlock()
	return pm.lastHandedOut + 1
}

// startAtInitial starts the consumer at Offsets.Initial, for a partition
// with no committed offset (from is -1) or whose offset to resume at, from,
// is out of range. It resolves Initial to a concrete offset and makes that
// the offset to commit before anything is handed out, as Kafka's own
// consumer does: else a partition that stops before its first ack commits
// nothing, and with OffsetNewest its next owner starts at the then-newest
// offset, skipping what was produced in between. With OffsetNewest it
// waits until that commit succeeded; with OffsetOldest a missing commit
// loses nothing.
//
// When from is above the new start, the log no longer holds the consumed
// position: the topic was deleted and created again, or an unclean leader
// election truncated it. Then the bookkeeping starts afresh at the new
// start, and ErrLogTruncated goes to Errors(). That waits until every
// handed-out message is resolved: offsets must increase while any is
// pending.
func (pm *partitionManager) startAtInitial(from int64) (sarama.PartitionConsumer, error) {
	cm := pm.parent
	start, batched := int64(0), false
	if from < 0 && pm.initial != nil {
		start, batched = pm.initial.get(pm.tp, pm.t.Dying())
	}
	var err error
	if !batched {
		err = pm.call(func() (err error) {
			start, err = listOffset(cm.fetcherOf(pm.tp).client, pm.tp, cm.config.Offsets.Initial)
			return err
		})
	}
	if err != nil {
		return nil, err
	}
	pm.mu.Lock()
	if n := pm.pending.size(); n > 0 {
		pm.mu.Unlock()
		return nil, fmt.Errorf("offset %d out of range, and %d handed-out messages pending: %w", from, n, sarama.ErrOffsetOutOfRange)
	}
	truncated := from >= 0 && start <= pm.lastHandedOut
	if truncated {
		pm.lastAcked = -1
	}
	pm.pending = newPendingAcks(cm.config.MaxPendingAcks) // forget the old prefix's end
	pm.lastHandedOut = start - 1
	pm.skipped, pm.skipAt = nil, 0 // of another offset, or of the log before
	pm.mu.Unlock()

	cm.offsets.reset(pm.tp, start)
	switch {
	case truncated:
		err := pm.errorf("%w: offset %d is past the end of the log; consuming again from offset %d (Offsets.Initial %d)",
			ErrLogTruncated, from, start, cm.config.Offsets.Initial)
		pm.logf(slog.LevelError, "%s.", err)
		cm.sendError(err)
	case from >= 0:
		pm.logf(slog.LevelWarn, "Offset %d is out of range; starting at %d (Offsets.Initial %d).", from, start, cm.config.Offsets.Initial)
	default:
		pm.logf(slog.LevelDebug, "No committed offset; starting at %d (Offsets.Initial %d).", start, cm.config.Offsets.Initial)
	}
	if cm.config.Offsets.Initial == sarama.OffsetNewest {
		// Until the start is committed: a round that failed is asked
		// for again after a delay.
		for attempt := 0; !cm.offsets.isCommitted(pm.tp, start); attempt++ {
			if attempt > 0 && !sleepOrDie(&pm.t, attempt-1) {
				return nil, tomb.ErrDying
			}
			select {
			case <-cm.commit():
			case <-pm.t.Dying():
				return nil, tomb.ErrDying
			}
		}
	}
	pc, err := pm.consumePartition(start)
	if batched && errors.Is(err, sarama.ErrOffsetOutOfRange) {
		// Retention moved the log start since the batch resolved it.
		pm.initial = nil
		return pm.startAtInitial(from)
	}
	return pc, err
}

// call runs f, a Kafka request of the starting partition, on a goroutine
// of its own, and returns its error, or tomb.ErrDying when the partition
// manager is killed first: sarama's requests cannot be interrupted, and
// against a hung broker a coordinator lookup lasts several Net.ReadTimeout.
// The goroutine is counted in the consumer manager's kafkaCalls: closeKafka
// waits for it, after it cut the connections under it if need be. f must
// only write what its caller reads after a nil or f's error.
func (pm *partitionManager) call(f func() error) error {
	done := make(chan error, 1)
	pm.parent.kafkaCalls.Add(1)
	go func() { // owned by closeKafka, which waits for kafkaCalls
		defer pm.parent.kafkaCalls.Done()
		done <- f()
	}()
	select {
	case err := <-done:
		return err
	case <-pm.t.Dying():
		return tomb.ErrDying
	}
}

// consumePartition is ConsumePartition of the partition at offset. A
// partition fetcher starts at once (it sends no request itself); sarama's
// partition consumer, which asks for the partition's offsets first, runs
// as call runs it: a partition consumer that starts after the partition
// manager was killed is closed.
func (pm *partitionManager) consumePartition(offset int64) (sarama.PartitionConsumer, error) {
	type started struct {
		pc  sarama.PartitionConsumer
		err error
	}
	cm, dying := pm.parent, pm.t.Dying()
	if hub := cm.fetcherOf(pm.tp).hub; hub != nil {
		select {
		case <-dying:
			return nil, tomb.ErrDying
		default:
		}
		return hub.Start(pm.tp.Topic, pm.tp.Partition, offset), nil
	}
	done := make(chan started) // unbuffered: the partition consumer is handed over, or closed
	cm.kafkaCalls.Add(1)
	go func() { // owned by closeKafka, which waits for kafkaCalls
		defer cm.kafkaCalls.Done()
		pc, err := cm.fetcherOf(pm.tp).consumer.ConsumePartition(pm.tp.Topic, pm.tp.Partition, offset)
		select {
		case done <- started{pc, err}:
		case <-dying:
			if pc != nil {
				cm.closeInBackground(pc)
			}
		}
	}()
	select {
	case s := <-done:
		return s.pc, s.err
	case <-dying:
		return nil, tomb.ErrDying
	}
}
