package kafkaconsumer

// Batches (Config.BatchSize): the Batch type, the Batches channel, AckBatch,
// and the hand-out loop of a partition in batches (consumeBatches), beside
// the per-message one of handout.go.

import (
	"log/slog"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer/internal/fetch"
)

// Batch is messages of one partition, in offset order, handed out together
// on Consumer.Batches when Config.BatchSize is set. Each message is acked
// as one from Messages would be: with Consumer.Ack, in any order, or all at
// once with Consumer.AckBatch. The consumer does not touch a Batch after
// handing it out; Messages is the user's to keep.
type Batch struct {
	Topic     string
	Partition int32
	// Messages holds between 1 and Config.BatchSize messages, in offset
	// order (consecutive, but for offsets the log no longer holds:
	// compaction, transaction markers).
	Messages []*sarama.ConsumerMessage

	pm *partitionManager // the partition manager that handed it out
}

// batchBuffer is the capacity of the Batches channel: a partition prepares
// its next batch while these wait, and Close takes them back unread.
const batchBuffer = 4

// Batches implements Consumer.
func (cm *consumerManager) Batches() <-chan *Batch {
	if cm.config.BatchSize == 0 {
		cm.wrongChannelLogOnce.Do(func() {
			cm.logf(slog.LevelError, "Batches() called on a consumer that hands out single messages (Config.BatchSize is 0): it returns a closed channel; read Messages(), or set BatchSize.")
		})
		return cm.closedBatches
	}
	return cm.batches
}

// AckBatch implements Consumer.
func (cm *consumerManager) AckBatch(b *Batch) {
	if b == nil || len(b.Messages) == 0 {
		return
	}
	pm := b.pm
	if pm == nil || pm.parent != cm { // not a batch of this consumer's
		for _, msg := range b.Messages {
			cm.Ack(msg)
		}
		return
	}
	if o := cm.config.Observer; o != nil {
		defer cm.ackedBatch(o, b)
	}
	if pm.retired.Load() {
		cm.logf(slog.LevelDebug, "Acked a batch of %s/%d, but this instance does not run that partition any more.", b.Topic, b.Partition)
		return
	}
	pm.mu.Lock()
	for _, msg := range b.Messages {
		if known, _ := pm.pending.ack(msg.Offset); known {
			pm.acked++
			pm.lastAcked = max(pm.lastAcked, msg.Offset)
		}
	}
	wake := pm.waiting
	pm.mu.Unlock()
	if wake {
		pm.notify()
	}
}

// ackedBatch tells o that each message of b was acked (see Observer).
func (cm *consumerManager) ackedBatch(o Observer, b *Batch) {
	for _, msg := range b.Messages {
		o.Acked(msg)
	}
}

// withdrawBatch takes back a batch that was handed out but never received,
// at Close (see withdraw).
func (cm *consumerManager) withdrawBatch(b *Batch) {
	for _, msg := range b.Messages {
		cm.withdraw(msg)
	}
}

// consumeBatches is consume (handout.go) for a consumer set to batches: it
// hands messages of pc out in batches on the Batches channel. A batch is
// what receive took (the first message waited for, then what pc has
// ready), filled up to BatchSize for at most BatchLinger; enter takes as
// many as MaxPendingAcks leaves room for, and a paused partition (Pause)
// none. Batches are made only here, one allocation of the slice and one
// of the Batch each; the per-message path (consume) is left as it was.
func (pm *partitionManager) consumeBatches(pc sarama.PartitionConsumer) consumeEnd {
	pm.setHandingOut(true)
	defer pm.setHandingOut(false)
	cm := pm.parent
	raised, _ := cm.fence.channels()
	h := &handOut{
		pm:      pm,
		dying:   pm.t.Dying(),
		fence:   raised,
		in:      pc.Messages(),
		errs:    pc.Errors(),
		batches: cm.batches,
		size:    cm.config.BatchSize,

		observer: cm.config.Observer,
	}
	receive, fill, topUp := h.receive, h.fill, h.topUp
	if f, ok := pc.(*fetch.Fetcher); ok {
		h.slabs, h.fetcher = f.Slabs(), f
		receive, fill, topUp = h.receiveSlab, h.fillSlabs, h.topUpSlabs
		defer f.HandedOut()        // what is left of the slab in hand is dropped
		defer h.releaseSpent(true) // and the batch
		defer h.entered()          // a wait at MaxPendingAcks ends with the loop
	}
	var linger *time.Timer
	if cm.config.BatchLinger > 0 {
		linger = time.NewTimer(time.Hour)
		linger.Stop()
		defer linger.Stop()
	}
	for {
		switch {
		case len(h.batch) == 0 && h.closed && len(h.slab) == 0:
			return consumeClosed
		case len(h.batch) == 0:
			if !receive() || !fill(linger, cm.config.BatchLinger) {
				return h.end()
			}
		default:
			topUp() // what a cut batch left, with what is ready since
		}
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
		if out > 0 && !h.sendBatch(out, before) {
			return h.end()
		}
		h.batch = h.batch[:copy(h.batch, h.batch[n:])]
		h.releaseSpent(false)
	}
}

// receiveSlab is receive for a partition fetcher: it fills the empty batch
// from the fetched slabs, waiting for one when none is left. It reports
// false, with nothing in the batch, when killed, fenced, or when the
// fetcher stopped.
func (h *handOut) receiveSlab() bool {
	// Killed or fenced, hand out nothing more, though the slab holds more
	// (a response holds up to Fetch.Default per partition): a stopping
	// partition must not go on filling the channel that Close drains.
	select {
	case <-h.dying:
		h.killed = true
		return false
	case <-h.fence:
		h.fencedOut = true
		return false
	default:
	}
	for len(h.slab) == 0 {
		if h.closed {
			return false
		}
		select {
		case <-h.dying:
			h.killed = true
			return false
		case <-h.fence:
			h.fencedOut = true
			return false
		case s, ok := <-h.slabs:
			h.took(s, ok)
		case err, ok := <-h.errs:
			h.forward(err, ok)
		}
	}
	h.batch = h.batch[:0]
	h.topUpSlabs()
	return true
}

// took takes s, received from the fetcher's slabs (ok false: they are
// closed). A slab without messages moves the commit point past the
// offsets it covers, once everything before it is entered (see enter).
func (h *handOut) took(s fetch.Slab, ok bool) {
	if !ok {
		h.closed = true
		return
	}
	h.slab, h.slabNext = s.Msgs, s.Next
	h.fetcher.Taken(s)
	if len(s.Msgs) == 0 {
		h.fetcher.HandedOut()
		if len(h.batch) == 0 {
			h.pm.skipTo(s.Next)
		}
	}
}

// gap returns the offset that the commit point may move to once the whole
// batch is entered and acked: the end of the last slab, when nothing of
// it is left; -1 otherwise.
func (h *handOut) gap() int64 {
	if h.fetcher == nil || len(h.slab) > 0 {
		return -1
	}
	return h.slabNext
}

// takeSlab moves what fits of the current slab into the batch.
func (h *handOut) takeSlab() {
	n := min(len(h.slab), h.size-len(h.batch))
	h.batch = append(h.batch, h.slab[:n]...)
	h.slab = h.slab[n:]
	if len(h.slab) == 0 && len(h.batch) > 0 {
		if a := h.fetcher.Spend(); a != nil {
			h.spent = append(h.spent, spentSlab{acct: a, last: h.batch[len(h.batch)-1].Offset})
		}
	}
}

// spentSlab is the account of a slab all of whose messages are in the
// batch, and the offset of the last of them: the slab counts in the
// budget until that message left the batch (releaseSpent).
type spentSlab struct {
	acct *fetch.Account
	last int64
}

// releaseSpent gives back to the budget the spent slabs none of whose
// messages is in the batch any more, or all of them (all: the batch
// waits outside the budget, or the hand-out ends).
func (h *handOut) releaseSpent(all bool) {
	i := 0
	for ; i < len(h.spent); i++ {
		if !all && len(h.batch) > 0 && h.spent[i].last >= h.batch[0].Offset {
			break
		}
		h.fetcher.Release(h.spent[i].acct)
	}
	clear(h.spent[:i])
	h.spent = h.spent[:copy(h.spent, h.spent[i:])]
}

// topUpSlabs is topUp for a partition fetcher.
func (h *handOut) topUpSlabs() {
	for len(h.batch) < h.size {
		if len(h.slab) == 0 {
			if h.closed {
				return
			}
			select {
			case s, ok := <-h.slabs:
				h.took(s, ok)
				continue
			default:
				return
			}
		}
		h.takeSlab()
	}
}

// fillSlabs is fill for a partition fetcher; it ends the wait early when
// its broker loop waits for the budget (SpentUp).
func (h *handOut) fillSlabs(timer *time.Timer, linger time.Duration) bool {
	if timer == nil || h.closed || len(h.batch) == h.size {
		return true
	}
	timer.Reset(linger)
	defer timer.Stop()
	for len(h.batch) < h.size {
		if len(h.slab) > 0 {
			h.takeSlab()
			continue
		}
		select {
		case s, ok := <-h.slabs:
			if h.took(s, ok); !ok {
				return true
			}
		case <-timer.C:
			return true
		case <-h.fetcher.SpentUp(): // the budget is spent: no more comes
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
	return true
}

// topUp adds to the batch what the partition consumer has ready, without
// waiting, up to the batch's capacity.
func (h *handOut) topUp() {
	for !h.closed && len(h.batch) < h.size {
		select {
		case msg, ok := <-h.in:
			if !ok {
				h.closed = true
				return
			}
			h.batch = append(h.batch, msg)
		default:
			return
		}
	}
}

// fill waits, while the batch is not full, for more messages until linger
// has passed (timer is its timer; nil for no wait). It reports false when
// killed or fenced first.
func (h *handOut) fill(timer *time.Timer, linger time.Duration) bool {
	if timer == nil || h.closed || len(h.batch) == h.size {
		return true
	}
	timer.Reset(linger)
	defer timer.Stop()
	for len(h.batch) < h.size {
		select {
		case msg, ok := <-h.in:
			if !ok {
				h.closed = true
				return true
			}
			h.batch = append(h.batch, msg)
		case <-timer.C:
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
	return true
}

// sendBatch hands out the first n messages of the batch as one Batch,
// forwarding errors while the Batches channel is full, and parking while a
// hand-out hold (handOutHold) is on. Killed or fenced first, it takes them
// back (before is lastHandedOut before them) and reports false.
// Config.Observer, when set, is told of the batch before its send
// (HandingOutBatch), and of each of its messages when the send is cut
// short (TakenBack).
func (h *handOut) sendBatch(n int, before int64) bool {
	defer h.leaveSend()
	if !h.enterSend() {
		h.pm.takeBack(h.batch[0].Offset, before)
		return false
	}
	msgs := make([]*sarama.ConsumerMessage, n)
	copy(msgs, h.batch[:n])
	b := &Batch{Topic: h.pm.tp.Topic, Partition: h.pm.tp.Partition, Messages: msgs, pm: h.pm}
	if h.observer != nil {
		h.observer.HandingOutBatch(b)
	}
	select {
	case h.batches <- b:
		return true
	default:
	}
	for {
		held, _ := h.pm.parent.hold.channels()
		select {
		case h.batches <- b:
			return true
		case <-h.dying:
			h.killed = true
		case <-h.fence:
			h.fencedOut = true
		case err, ok := <-h.errs:
			h.forward(err, ok)
			continue
		case <-held:
			if h.park() {
				continue
			}
		}
		h.pm.parent.tookBackBatch(b)
		h.pm.takeBack(msgs[0].Offset, before)
		return false
	}
}
