package kafkaconsumer

// A stopping partition's take-back of what it left unread in the shared
// channel (Messages, or Batches with BatchSize): withdrawUnread searches the
// channel under the hand-out hold (handOutHold), which keeps every
// partition manager from sending on it meanwhile, so that what the search
// puts back keeps its place in each partition's order.

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
)

// handOutHold keeps the partition managers from sending on the Messages
// and Batches channels while a take-back searches them (withdrawUnread).
// Its zero value is ready to use, released.
//
// A consume loop is sending from the start of a hand-out (send, sendBatch)
// to its end, or until it parks because a hold began (enterSend,
// leaveSend; partitionManager.sending). hold sets held and then waits
// until no partition manager is sending; a loop that starts a hand-out
// sets its sending flag and then checks held. Both are sequentially
// consistent atomics, so one of the two sees the other: no send begins
// unseen once held is set.
type handOutHold struct {
	held atomic.Bool // set while held; read at the start of every hand-out

	mu sync.Mutex // guards the channels below
	// begun is closed when a hold begins, and replaced when it is
	// released; ended is closed when it is released, and replaced when a
	// hold begins (nil: the zero value's, made on first use).
	begun, ended chan struct{}
	// left receives a token, without blocking the sender, when a consume
	// loop stops sending while held; hold waits on it.
	left chan struct{}
}

// initLocked makes the channels of a zero hold; h.mu held.
func (h *handOutHold) initLocked() {
	if h.begun == nil {
		h.begun, h.ended, h.left = make(chan struct{}), make(chan struct{}), make(chan struct{}, 1)
		close(h.ended)
	}
}

// channels returns the channel that is closed when a hold begins and the
// one closed when it is released, as of now.
func (h *handOutHold) channels() (begun, ended <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.initLocked()
	return h.begun, h.ended
}

// signal tells a hold that waits that a consume loop stopped sending.
func (h *handOutHold) signal() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.initLocked()
	select {
	case h.left <- struct{}{}:
	default:
	}
}

// hold begins a hold and waits until no partition manager of cm is
// sending, or until deadline: then it releases the hold and reports false.
// One hold at a time: the caller holds cm.takeBackMu. A consume loop that
// is sending either ends its hand-out with non-blocking sends (the channel
// has room) or parks at its first blocking one, so the wait is short.
func (h *handOutHold) hold(cm *consumerManager, deadline time.Time) bool {
	h.mu.Lock()
	h.initLocked()
	h.held.Store(true)
	close(h.begun)
	h.ended = make(chan struct{})
	left := h.left
	h.mu.Unlock()

	if cm.noneSending() {
		return true
	}
	timeout := time.NewTimer(time.Until(deadline))
	defer timeout.Stop()
	for !cm.noneSending() {
		select {
		case <-left:
		case <-timeout.C:
			h.release()
			return false
		}
	}
	return true
}

// release ends the hold: the parked consume loops go on.
func (h *handOutHold) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.held.Store(false)
	close(h.ended)
	h.begun = make(chan struct{})
}

// noneSending reports whether no partition manager is sending on the
// channel (see handOutHold).
func (cm *consumerManager) noneSending() bool {
	for _, pm := range *cm.pms.Load() {
		if pm.sending.Load() {
			return false
		}
	}
	return true
}

// enterSend marks the consume loop as sending, at the start of a
// hand-out, after waiting while a hold is on (see handOutHold). It reports
// false, not sending, when killed or fenced first.
func (h *handOut) enterSend() bool {
	hold := &h.pm.parent.hold
	for {
		h.pm.sending.Store(true)
		h.sending = true
		if !hold.held.Load() {
			return true
		}
		h.leaveSend()
		if !h.awaitRelease() {
			return false
		}
	}
}

// leaveSend marks the consume loop as not sending, at the end of a
// hand-out or when it parks for a hold, and tells a hold that waits for
// it. It does nothing when the loop is not sending.
func (h *handOut) leaveSend() {
	if !h.sending {
		return
	}
	h.sending = false
	h.pm.sending.Store(false)
	if hold := &h.pm.parent.hold; hold.held.Load() {
		hold.signal()
	}
}

// park waits, not sending, until the hold that began is released, then
// marks the loop as sending again. It reports false, not sending, when
// killed or fenced first.
func (h *handOut) park() bool {
	h.leaveSend()
	return h.awaitRelease() && h.enterSend()
}

// awaitRelease waits until no hold is on, forwarding errors meanwhile. It
// reports false when killed or fenced first.
func (h *handOut) awaitRelease() bool {
	_, ended := h.pm.parent.hold.channels()
	for {
		select {
		case <-ended:
			return true
		case <-h.dying:
			h.killed = true
			return false
		case <-h.fence:
			h.fencedOut = true
			return false
		case err, ok := <-h.errs:
			h.forward(err, ok)
		}
	}
}

// withdrawUnread takes back this partition's messages (in batch mode, its
// batches) that sit unread in the shared channel, as Close does: each is
// resolved unprocessed (withdrawn), so that it is neither waited for nor
// committed past, and the partition's next owner consumes it. A stopping
// partition calls it, once its consume loop ended, before its final commit
// and the release of its claim: what it takes back can no longer be
// received here after another instance may own the partition. It returns
// how many messages it took back; it does nothing when no handed-out
// message is pending (nothing of the partition can be in the channel).
//
// The channel is shared by every partition, so the search receives all
// that is in it and sends the other partitions' messages back, in the
// order it received them. That keeps each partition's order, step by step:
//  1. takeBackMu keeps the fence's take-back (takeBackUnread) from
//     receiving between the search and its sends back;
//  2. the hand-out hold stops every partition manager from sending, and
//     the search begins only once none is (a sender parks at its next
//     blocking send): nothing of a partition is sent after its messages
//     that the search holds;
//  3. the search receives until the channel is empty, then sends back what
//     it kept: into an empty channel, in the order it was in, and never
//     blocking, since nothing else sends and the channel held at least as
//     much before;
//  4. the hold is released: the partition managers send behind it.
//
// A receive of the user's cannot be held: one that takes a message while
// the search runs (for microseconds) may take a later message of another
// partition than one that the search holds and sends back behind it. The
// search runs only for a partition whose handed-out messages were not all
// acked within MaxProcessingTime. If the partition managers do not stop
// sending by deadline, it takes nothing back and says so.
func (pm *partitionManager) withdrawUnread(deadline time.Time) int {
	pm.mu.Lock()
	pending := pm.pending.pending()
	pm.mu.Unlock()
	if pending == 0 {
		return 0
	}
	cm := pm.parent
	cm.takeBackMu.Lock()
	defer cm.takeBackMu.Unlock()
	if !cm.hold.hold(cm, deadline) {
		pm.logf(slog.LevelWarn, "The other partitions did not stop handing out in time: messages of this partition still unread in the channel were not taken back.")
		return 0
	}
	defer cm.hold.release()

	n := 0
	if cm.config.BatchSize > 0 {
		var others []*Batch
	batches:
		for {
			select {
			case b := <-cm.batches:
				if b.pm == pm {
					cm.tookBackBatch(b)
					pm.withdrawAll(b.Messages)
					n += len(b.Messages)
				} else {
					others = append(others, b)
				}
			default:
				break batches
			}
		}
		for _, b := range others {
			cm.batches <- b // never blocks: see above, step 3
		}
	} else {
		var others []*sarama.ConsumerMessage
	messages:
		for {
			select {
			case msg := <-cm.messages:
				if msg.Partition == pm.tp.Partition && msg.Topic == pm.tp.Topic {
					cm.tookBack(msg)
					pm.withdrawAll([]*sarama.ConsumerMessage{msg})
					n++
				} else {
					others = append(others, msg)
				}
			default:
				break messages
			}
		}
		for _, msg := range others {
			cm.messages <- msg // never blocks: see above, step 3
		}
	}
	if n > 0 {
		pm.logf(slog.LevelInfo, "Took back %d messages still unread in the channel: never received here, not committed; the next owner consumes them.", n)
	}
	return n
}

// withdrawAll takes back msgs, handed out by this partition manager and
// never received (see withdraw), under one lock.
func (pm *partitionManager) withdrawAll(msgs []*sarama.ConsumerMessage) {
	pm.mu.Lock()
	for _, msg := range msgs {
		pm.pending.withdraw(msg.Offset)
	}
	wake := pm.waiting
	pm.mu.Unlock()
	if wake {
		pm.notify()
	}
}
