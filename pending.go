package kafkaconsumer

// Pending acks: the bookkeeping of one partition's handed-out messages,
// acked in any order, whose acked prefix is what may be committed.

import (
	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer/internal/commitmark"
)

// slotState is the state of a message that a partition handed out.
type slotState uint8

const (
	slotPending   slotState = iota // handed out, not acked yet
	slotAcked                      // acked
	slotWithdrawn                  // taken back unprocessed (Close, withdrawUnread): resolved, never committed
	slotSkipped                    // acked before the partition started (Config.DurableAcks): never handed out, counts as acked
)

type slot struct {
	offset int64
	// msg is the message handed out (pushMessage), by which giveBack
	// knows it; nil for an entry pushed by offset alone, or skipped. It
	// is cleared when the entry leaves, so that the ring keeps no
	// message alive.
	msg   *sarama.ConsumerMessage
	state slotState
}

// pendingAcks is the ack bookkeeping of one partition: the offsets it handed
// out, in increasing order, from the first one that is not committable yet.
// Acks may come in any order; what is committable is the end of the acked
// prefix. It is a ring buffer that grows by doubling up to limit entries, so
// in-order acks never allocate once it has grown to the number of messages
// in flight. It is not safe for concurrent use: the partition manager guards
// it with its mutex.
type pendingAcks struct {
	ring  []slot
	head  int // index in ring of the oldest entry
	n     int // entries in use
	limit int // most entries it holds
	open  int // entries in slotPending
	// done is one past the last acked offset dropped from the prefix, or
	// -1; once stuck, the withdrawn offset.
	done int64
	// stuck is set when a withdrawn entry reached the head: the commit
	// point stays at its offset (done), nothing after it may be committed
	// any more. The entries after it stay, for the acked set of the final
	// commit (ackedRanges).
	stuck bool
	// held is set by hold: push refuses until the commit point moves.
	held bool
	// changes counts the changes of what ackedRanges returns.
	changes uint64
	// skip is an offset past the last entry up to which the partition
	// holds nothing to hand out (skipTo), or -1.
	skip int64
}

func newPendingAcks(limit int) *pendingAcks {
	return &pendingAcks{limit: limit, done: -1, skip: -1}
}

// full tells whether push would refuse.
func (p *pendingAcks) full() bool { return p.n >= p.limit || p.held }

// hold makes push refuse until the commit point moves (an ack of the
// first entry), as if limit was reached: the acked set beyond the commit
// point grows no further. It holds nothing when no entry is pending
// (nothing could move the commit point).
func (p *pendingAcks) hold() { p.held = p.open > 0 && !p.stuck }

// pending returns how many handed-out messages wait for an ack.
func (p *pendingAcks) pending() int { return p.open }

// size returns how many entries are held.
func (p *pendingAcks) size() int { return p.n }

// push records that the message at offset was handed out. Offsets must
// increase. It returns false, and records nothing, when the limit is
// reached.
func (p *pendingAcks) push(offset int64) bool {
	return p.pushSlot(slot{offset: offset})
}

// pushMessage is push for msg, the message handed out: giveBack takes
// back this message only, not another one at its offset.
func (p *pendingAcks) pushMessage(msg *sarama.ConsumerMessage) bool {
	return p.pushSlot(slot{offset: msg.Offset, msg: msg})
}

// pushSlot appends s, pending, unless full.
func (p *pendingAcks) pushSlot(s slot) bool {
	if p.full() {
		return false
	}
	if p.n == len(p.ring) {
		p.grow()
	}
	p.ring[(p.head+p.n)&(len(p.ring)-1)] = s
	p.n++
	p.open++
	return true
}

// skipTo records that the offsets after the last entry, up to next, hold
// no message to hand out: once every entry is acked, the commit point is
// next. An entry pushed later is at next or after.
func (p *pendingAcks) skipTo(next int64) {
	p.skip = max(p.skip, next)
}

// unpushFrom forgets the entries at offset and after, for messages that
// were entered but not handed out after all; they will be handed out
// again, so a skipTo past them no longer holds. An entry among them may have
// been resolved already by a stale ack (of an earlier owner's hand-out of
// the same offset): it is not pending any more, so it is not counted
// again; one that the ack dropped from the prefix is gone already.
//
// It returns how many of the forgotten entries were handed out (not
// skipped).
func (p *pendingAcks) unpushFrom(offset int64) (handedOut int) {
	p.skip = -1
	p.held = false
	p.changes++
	for p.n > 0 {
		last := &p.ring[(p.head+p.n-1)&(len(p.ring)-1)]
		if last.offset < offset {
			break
		}
		switch last.state {
		case slotPending:
			p.open--
			handedOut++
		case slotSkipped:
		default:
			handedOut++
		}
		last.msg = nil
		p.n--
	}
	return handedOut
}

// lastEntered returns the offset of the last entry, else the offset
// before the commit point; -1 when neither is known.
func (p *pendingAcks) lastEntered() int64 {
	if p.n > 0 {
		return p.ring[(p.head+p.n-1)&(len(p.ring)-1)].offset
	}
	return max(p.done-1, -1)
}

// pushSkipped records that the message at offset, the next one, was acked
// before the partition started (commitmark.Acked): it is not handed out,
// and counts as acked. It returns false, and records nothing, when push
// would refuse.
func (p *pendingAcks) pushSkipped(offset int64) bool {
	if !p.push(offset) {
		return false
	}
	p.resolve(offset, slotSkipped)
	return true
}

// ackedRanges appends to rs the offsets beyond the commit point that are
// acked (or skipped): each acked entry with the offsets up to the next
// entry, which hold no message. It returns rs as it is when the commit
// point stopped for good before a withdrawn entry that the later ones
// follow (stuck) and nothing was kept after it.
func (p *pendingAcks) ackedRanges(rs []commitmark.Range) []commitmark.Range {
	mask := len(p.ring) - 1
	for i := 0; i < p.n; i++ {
		s := p.ring[(p.head+i)&mask]
		if s.state != slotAcked && s.state != slotSkipped {
			continue
		}
		to := s.offset + 1
		if i+1 < p.n {
			to = p.ring[(p.head+i+1)&mask].offset
		}
		if k := len(rs); k > 0 && rs[k-1].To == s.offset {
			rs[k-1].To = to
		} else {
			rs = append(rs, commitmark.Range{From: s.offset, To: to})
		}
	}
	return rs
}

// grow doubles the ring, from 8 entries: it grows to the messages in
// flight, and a consumer of a thousand partitions starts them all at
// once.
func (p *pendingAcks) grow() {
	size := 2 * len(p.ring)
	if size == 0 {
		size = 8
	}
	ring := make([]slot, size)
	for i := 0; i < p.n; i++ {
		ring[i] = p.ring[(p.head+i)&(len(p.ring)-1)]
	}
	p.ring, p.head = ring, 0
}

// find returns the ring index of the entry at offset, or -1.
func (p *pendingAcks) find(offset int64) int {
	mask := len(p.ring) - 1
	lo, hi := 0, p.n
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if p.ring[(p.head+mid)&mask].offset < offset {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo < p.n && p.ring[(p.head+lo)&mask].offset == offset {
		return (p.head + lo) & mask
	}
	return -1
}

// resolve moves the pending entry at offset to state. It returns whether the
// entry was pending (false for an offset it does not hold, or one already
// resolved: a double or stale ack), and whether the commit point advanced.
func (p *pendingAcks) resolve(offset int64, state slotState) (known, advanced bool) {
	if p.n == 0 {
		return false, false
	}
	i := p.head
	if p.ring[i].offset != offset {
		if i = p.find(offset); i < 0 {
			return false, false
		}
	}
	if p.ring[i].state != slotPending {
		return false, false
	}
	p.ring[i].state = state
	p.open--
	p.changes++
	if i != p.head || p.stuck {
		return true, false
	}
	// Drop the resolved prefix; acked entries move the commit point past
	// them, a withdrawn one stops it for good (the entries after it stay).
	p.held = false
	mask := len(p.ring) - 1
	for p.n > 0 && p.ring[p.head].state != slotPending {
		s := p.ring[p.head]
		p.ring[p.head].msg = nil
		p.head = (p.head + 1) & mask
		p.n--
		if s.state == slotWithdrawn {
			// The commit point is the withdrawn offset, not one past the
			// last acked: offsets between them hold no message (a
			// transaction marker), and the commit must not step back
			// from where the head's offset put it.
			p.done, p.stuck = s.offset, true
			break
		}
		p.done = s.offset + 1
		advanced = true
	}
	return true, advanced
}

// ack marks the message at offset as processed.
func (p *pendingAcks) ack(offset int64) (known, advanced bool) {
	return p.resolve(offset, slotAcked)
}

// withdraw marks the message at offset as taken back unprocessed.
func (p *pendingAcks) withdraw(offset int64) (known bool) {
	known, _ = p.resolve(offset, slotWithdrawn)
	return known
}

// giveBack withdraws msg, handed out by pushMessage. It does nothing for
// another message at msg's offset: one that an earlier run of the
// partition handed out, given back after this run handed the offset out
// again, is not this run's to withdraw.
func (p *pendingAcks) giveBack(msg *sarama.ConsumerMessage) (known bool) {
	if i := p.find(msg.Offset); i < 0 || p.ring[i].msg != msg {
		return false
	}
	return p.withdraw(msg.Offset)
}

// commitOffset returns the offset to commit, the offset of the next message
// to read: the first entry's when one waits, else one past the last acked
// message of the prefix, or past the offsets skipTo named; -1 when nothing
// was acked or skipped yet.
func (p *pendingAcks) commitOffset() int64 {
	switch {
	case p.stuck:
		return p.done
	case p.n > 0 && p.done >= 0:
		return p.ring[p.head].offset
	case p.n == 0:
		return max(p.done, p.skip)
	}
	return p.done
}
