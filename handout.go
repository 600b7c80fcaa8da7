package kafkaconsumer

// The hand-out path, the library's hot path: a partition manager takes
// what its partition consumer fetched, enters it into its pending acks
// (pending.go) and sends it on the Messages channel, pausing at
// MaxPendingAcks. See consume.

import (
	"log/slog"
	"runtime"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer/internal/fetch"
)

// handOutBatch is the most messages consume takes from its partition
// consumer, enters into the bookkeeping under one lock, and hands out in a
// row. It matches sarama's default ChannelBufferSize, so that one batch
// can empty the partition consumer's channel (BENCHMARKS.md, round 3, has
// the measurements).
const handOutBatch = 256

// consumeEnd tells why consume returned.
type consumeEnd int

const (
	consumeKilled consumeEnd = iota // the partition manager is stopping
	consumeClosed                   // the partition consumer stopped by itself
	consumeFenced                   // the instance is fenced (fence.go), or the claim lost
)

// consume hands messages of pc out on the Messages channel until killed,
// until pc stops by itself, or until the instance is fenced; it returns
// which (see consumeEnd). Each message enters the
// ack bookkeeping before it is sent, so that an ack can never come first.
// When MaxPendingAcks messages are pending, it pauses: it stops reading pc
// until an ack makes room. Errors of pc go to the Errors channel.
//
// This is the hot path. It takes what pc has ready, up to handOutBatch
// messages, without blocking (handOut.receive); enters them under one lock
// (enter); and sends each with a plain send first (handOut.send). It blocks
// in a select (with the tomb, errors and wake-ups) only when a channel is
// not ready.
//
// While it runs, the partition manager is handing out (handingOut); the
// fence's raise waits until no partition manager is.
func (pm *partitionManager) consume(pc sarama.PartitionConsumer) consumeEnd {
	if pm.parent.config.BatchSize > 0 {
		return pm.consumeBatches(pc)
	}
	pm.setHandingOut(true)
	defer pm.setHandingOut(false)
	raised, _ := pm.parent.fence.channels()
	h := &handOut{
		pm:    pm,
		dying: pm.t.Dying(),
		fence: raised,
		in:    pc.Messages(),
		errs:  pc.Errors(),
		out:   pm.parent.messages,
		size:  handOutBatch,

		observer: pm.parent.config.Observer,
	}
	receive := h.receive
	if f, ok := pc.(*fetch.Fetcher); ok {
		h.slabs, h.fetcher = f.Slabs(), f
		receive = h.receiveSlab
		defer f.HandedOut()        // what is left of the slab in hand is dropped
		defer h.releaseSpent(true) // and the batch
		defer h.entered()          // a wait at MaxPendingAcks ends with the loop
	}
	for {
		if !receive() {
			return h.end()
		}
		for len(h.batch) > 0 {
			n, out, before := pm.enter(h.batch, h.gap())
			if n < 0 {
				return consumeFenced
			}
			if n == 0 {
				if !h.waitForRoom() {
					return h.end()
				}
				continue
			}
			h.entered()
			if out > 0 && !h.send(out, before) {
				return h.end()
			}
			h.batch = h.batch[:copy(h.batch, h.batch[n:])]
			h.releaseSpent(false)
			// Let the receiver run: a send to it while it waited made
			// it runnable on this goroutine's P, where it would wait
			// behind this loop (BENCHMARKS.md, round 3).
			runtime.Gosched()
		}
		if h.closed && len(h.slab) == 0 {
			return consumeClosed
		}
	}
}

// end tells why the loop stopped, once a step reported false.
func (h *handOut) end() consumeEnd {
	switch {
	case h.killed:
		return consumeKilled
	case h.fencedOut:
		return consumeFenced
	}
	return consumeClosed
}

// setHandingOut records whether consume runs; when it stops, the fence's
// raise is told (handOutStopped).
func (pm *partitionManager) setHandingOut(on bool) {
	pm.mu.Lock()
	pm.handingOut = on
	pm.mu.Unlock()
	if !on {
		select {
		case pm.parent.handOutStopped <- struct{}{}:
		default:
		}
	}
}

// handOut is the state of one consume loop. Its channels are read once, up
// front: tomb.v1's Dying takes a mutex on every call.
type handOut struct {
	pm    *partitionManager
	dying <-chan struct{}                // the partition manager's tomb
	fence <-chan struct{}                // closed when the fence goes up
	in    <-chan *sarama.ConsumerMessage // the partition consumer's messages
	errs  <-chan *sarama.ConsumerError   // its errors; nil once it closed them
	out   chan<- *sarama.ConsumerMessage // the consumer's Messages channel
	// observer is Config.Observer, read once: nil when unset.
	observer Observer
	// batches is the consumer's Batches channel (consumeBatches).
	batches chan<- *Batch
	// slabs are a partition fetcher's responses, instead of in; slab is
	// what is left of the last one (consumeBatches).
	slabs    <-chan fetch.Slab
	slab     []*sarama.ConsumerMessage
	slabNext int64                     // the next offset to fetch after the last slab taken
	fetcher  *fetch.Fetcher            // of slabs: told when a slab is taken
	batch    []*sarama.ConsumerMessage // received, not handed out yet
	// spent is the slabs all in batch, which count in the budget until
	// their messages left it (releaseSpent).
	spent []spentSlab
	// size is the most messages batch holds: handOutBatch, or BatchSize.
	// batch grows to it (append): a thousand partitions that start
	// together allocate a few messages' room each, not 256.
	size    int
	waited  bool // the fetcher was told that the partition waits (waitForRoom)
	closed  bool // the partition consumer closed in
	killed  bool // the tomb is dying
	sending bool // as pm.sending (enterSend, leaveSend)

	fencedOut bool // the fence went up
}

// receive fills the batch with what the partition consumer has ready, up to
// handOutBatch messages, blocking only for the first. It reports false,
// with nothing in the batch, when killed or when the partition consumer
// stopped; closed tells that it stopped after the batch.
func (h *handOut) receive() bool {
	msg, ok := h.next()
	if !ok {
		return false
	}
	h.batch = append(h.batch[:0], msg)
	for len(h.batch) < h.size {
		select {
		case msg, ok := <-h.in:
			if !ok {
				h.closed = true
				return true
			}
			h.batch = append(h.batch, msg)
		default:
			return true
		}
	}
	return true
}

// next returns the next message, waiting for one and forwarding errors
// meanwhile. It reports false when killed, fenced, or when the partition
// consumer stopped.
func (h *handOut) next() (*sarama.ConsumerMessage, bool) {
	select {
	case <-h.dying:
		h.killed = true
		return nil, false
	case <-h.fence:
		h.fencedOut = true
		return nil, false
	default:
	}
	for {
		select {
		case msg, ok := <-h.in:
			h.closed = !ok
			return msg, ok
		default:
		}
		select {
		case <-h.dying:
			h.killed = true
			return nil, false
		case <-h.fence:
			h.fencedOut = true
			return nil, false
		case msg, ok := <-h.in:
			h.closed = !ok
			return msg, ok
		case err, ok := <-h.errs:
			h.forward(err, ok)
		}
	}
}

// enter records the first messages of batch as handed out, as many as
// MaxPendingAcks leaves room for, under one lock. It returns how many (n),
// and lastHandedOut before them. Of those, the messages that the
// partition's commit said were acked (skipped, Config.DurableAcks) are
// entered as acked and not to be handed out: the others move to the
// front of batch, and out says how many they are. When it enters them all
// and gap is not -1, the offsets from the last of them up to gap hold
// nothing to hand out (see skipTo). With no room it pauses the partition: an ack
// wakes the consume loop when there is (waiting). A partition paused by
// Pause takes none, until Resume wakes the loop. While the instance is
// fenced, or the claim is lost, it records nothing and returns -1: the
// check is under the lock that takeBackUnread's unhand takes, so nothing
// enters after the fence's raise took messages back.
func (pm *partitionManager) enter(batch []*sarama.ConsumerMessage, gap int64) (n, out int, before int64) {
	pm.mu.Lock()
	if pm.lost || pm.parent.fence.on.Load() || pm.parent.pastFenceDeadline() {
		pm.mu.Unlock()
		if !pm.lost && pm.parent.pastFenceDeadline() {
			// The guard has not seen the deadline yet (it ran late, or
			// the process was frozen): raise the fence here; the guard
			// takes back what sits unread.
			pm.parent.fence.raise()
		}
		return -1, 0, 0
	}
	if pm.userPaused { // Pause: Resume wakes the consume loop
		pm.waiting = true
		pm.mu.Unlock()
		return 0, 0, 0
	}
	before = pm.lastHandedOut
	if pm.skipped == nil {
		for n < len(batch) && pm.pending.pushMessage(batch[n]) {
			n++
		}
		out = n
		if n > 0 {
			pm.lastHandedOut = batch[n-1].Offset
		}
	} else {
		n, out = pm.enterSkipping(batch)
	}
	pm.handedOut += uint64(out)
	if n == len(batch) && gap >= 0 {
		pm.pending.skipTo(gap)
	}
	pm.waiting = n == 0
	changed := pm.paused != (n == 0)
	pm.paused = n == 0
	held := pm.pending.held
	pm.mu.Unlock()
	if changed {
		pm.reportPause(n == 0, held)
	}
	return n, out, before
}

// enterSkipping is enter's loop for a partition that started with an
// acked set (skipped): messages in it are entered as acked, the others as
// handed out and moved to the front of batch. It returns how many messages
// were entered, and how many are to be handed out. pm.mu is held.
func (pm *partitionManager) enterSkipping(batch []*sarama.ConsumerMessage) (n, out int) {
	rs := pm.skipped
	for ; n < len(batch); n++ {
		msg := batch[n]
		for pm.skipAt < len(rs) && rs[pm.skipAt].To <= msg.Offset {
			pm.skipAt++
		}
		if pm.skipAt < len(rs) && rs[pm.skipAt].From <= msg.Offset {
			if !pm.pending.pushSkipped(msg.Offset) {
				break
			}
		} else {
			if !pm.pending.pushMessage(msg) {
				break
			}
			batch[out] = msg
			out++
		}
		pm.lastHandedOut = msg.Offset
	}
	return n, out
}

// skipTo records that the offsets after the last message handed out, up
// to next, hold nothing to hand out (control batches, aborted
// transactions, batches compaction emptied): once every message handed
// out is acked, the commit point moves to next, so that lag reaches 0.
func (pm *partitionManager) skipTo(next int64) {
	pm.mu.Lock()
	pm.pending.skipTo(next)
	pm.mu.Unlock()
}

// reportPause tells, once per pause, that the partition stopped handing out
// because MaxPendingAcks messages are not committable yet, or (held) because
// the acked set beyond the commit point nears the size that a commit's
// metadata may have (Config.DurableAcks), and when it goes on.
func (pm *partitionManager) reportPause(paused, held bool) {
	if !paused {
		pm.logf(slog.LevelDebug, "Resumed: an ack made room below MaxPendingAcks.")
		return
	}
	pm.parent.config.metrics().Paused(pm.parent.group, pm.tp)
	var err error
	if held {
		err = pm.errorf("%w: the acked messages beyond the oldest one not acked near the most that a commit's metadata holds (Config.DurableAcks: offset.metadata.max.bytes, and 64 KiB before compression); handing out nothing more until it is acked",
			ErrMaxPendingAcks)
	} else {
		err = pm.errorf("%w: %d handed-out messages are not committable yet (the oldest of them is not acked); handing out nothing more until it is",
			ErrMaxPendingAcks, pm.parent.config.MaxPendingAcks)
	}
	pm.logf(slog.LevelWarn, "%s.", err)
	pm.parent.sendError(err)
}

// send hands out the first n messages of the batch, forwarding errors while
// the Messages channel is full. Killed or fenced first, it takes back what
// it did not send (before is lastHandedOut before the batch) and reports
// false. The fence is checked only when the channel is full, not per
// message: a batch that enter took before the fence went up may still go
// into the channel, whence the guard takes it back (takeBackAll) (it drains until no
// partition hands out); the fence goes up well before the session can
// have expired (fenceFraction). A hand-out hold (handOutHold) is checked
// at the start and when the channel is full; it parks the loop until the
// hold is released. Config.Observer, when set, is told of each message
// before its send (HandingOut), and of one whose send was cut short
// (TakenBack).
func (h *handOut) send(n int, before int64) bool {
	defer h.leaveSend()
	if !h.enterSend() {
		h.pm.takeBack(h.batch[0].Offset, before)
		return false
	}
	for i, msg := range h.batch[:n] {
		if h.observer != nil {
			h.observer.HandingOut(msg)
		}
		select {
		case h.out <- msg:
			continue
		default:
		}
		if !h.sendWaiting(msg) {
			if h.observer != nil {
				h.observer.TakenBack(msg)
			}
			if i > 0 {
				before = h.batch[i-1].Offset
			}
			h.pm.takeBack(msg.Offset, before)
			return false
		}
	}
	return true
}

// sendWaiting sends msg on the Messages channel, forwarding errors
// meanwhile, and parking while a hand-out hold is on. It reports false
// when killed or fenced first.
func (h *handOut) sendWaiting(msg *sarama.ConsumerMessage) bool {
	for {
		held, _ := h.pm.parent.hold.channels()
		select {
		case h.out <- msg:
			return true
		case <-h.dying:
			h.killed = true
			return false
		case <-h.fence:
			h.fencedOut = true
			return false
		case err, ok := <-h.errs:
			h.forward(err, ok)
		case <-held:
			if !h.park() {
				return false
			}
		}
	}
}

// waitForRoom waits, while paused, for an ack that may have made room. It
// reports false when killed. The partition's fetcher is told that it
// waits (SetWaiting), until enter takes messages again (entered): its
// slabs leave the fetch budget, and it is in no request meanwhile. The
// partition's wait is the user's, and the other partitions must not wait
// for it.
func (h *handOut) waitForRoom() bool {
	if h.fetcher != nil {
		h.fetcher.HandedOut()
		h.releaseSpent(true) // the batch waits outside the budget
		if !h.waited {
			h.waited = true
			h.fetcher.SetWaiting(true)
		}
	}
	select {
	case <-h.dying:
		h.killed = true
		return false
	case <-h.fence:
		h.fencedOut = true
		return false
	case <-h.pm.wake:
	case err, ok := <-h.errs:
		h.forward(err, ok)
	}
	return true
}

// entered tells the partition's fetcher, after waitForRoom, that the
// partition hands out again: it is in the requests again.
func (h *handOut) entered() {
	if h.waited {
		h.waited = false
		h.fetcher.SetWaiting(false)
	}
}

// forward passes an error of the partition consumer on; ok is false when
// its channel is closed.
func (h *handOut) forward(err *sarama.ConsumerError, ok bool) {
	if !ok {
		h.errs = nil
		return
	}
	h.pm.parent.sendError(err)
}

// takeBack forgets the messages from offset on, entered but not handed
// out; lastHandedOut goes back to last. Messages from offset on that are
// forgotten already (unhand took back an earlier one) are left alone.
func (pm *partitionManager) takeBack(offset, last int64) {
	pm.mu.Lock()
	pm.takeBackLocked(offset, last)
	pm.mu.Unlock()
}

// takeBackLocked is takeBack with pm.mu held.
func (pm *partitionManager) takeBackLocked(offset, last int64) {
	if offset > pm.lastHandedOut {
		return
	}
	pm.handedOut -= uint64(pm.pending.unpushFrom(offset))
	pm.lastHandedOut = last
	if pm.skipped != nil {
		// Skipped entries before offset stay entered: the next
		// hand-out starts after them. The set is searched from its
		// start again.
		pm.lastHandedOut = max(last, pm.pending.lastEntered())
		pm.skipAt = 0
	}
}

// unhand takes back a message that sat unread in Messages when the fence
// went up: it and everything the partition handed out after it are
// forgotten, as if never handed out, so that the partition hands them out
// again once the fence is lifted. The messages of a partition are taken
// back in the order they were handed out, so its first one is the
// earliest; the later ones are forgotten with it.
func (pm *partitionManager) unhand(offset int64) {
	pm.mu.Lock()
	pm.takeBackLocked(offset, offset-1)
	wake := pm.waiting
	pm.mu.Unlock()
	if wake {
		pm.notify()
	}
}
