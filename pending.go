package kafkaconsumer

// Pending acks: the bookkeeping of one partition's handed-out messages,
// acked in any order, whose acked prefix is what may be committed.

// slotState is the state of a message that a partition handed out.
type slotState uint8

const (
	slotPending   slotState = iota // handed out, not acked yet
	slotAcked                      // acked
	slotWithdrawn                  // taken back unprocessed (Close, withdrawUnread): resolved, never committed
)

type slot struct {
	offset int64
	state  slotState
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
	head  int   // index in ring of the oldest entry
	n     int   // entries in use
	limit int   // most entries it holds
	open  int   // entries in slotPending
	done  int64 // one past the last acked offset dropped from the prefix, or -1
	// stuck is set when a withdrawn entry reached the head: nothing after it
	// may be committed any more.
	stuck bool
	// skip is an offset past the last entry up to which the partition
	// holds nothing to hand out (skipTo), or -1.
	skip int64
}

func newPendingAcks(limit int) *pendingAcks {
	return &pendingAcks{limit: limit, done: -1, skip: -1}
}

// full tells whether push would refuse.
func (p *pendingAcks) full() bool { return p.n >= p.limit }

// pending returns how many handed-out messages wait for an ack.
func (p *pendingAcks) pending() int { return p.open }

// size returns how many entries are held.
func (p *pendingAcks) size() int { return p.n }

// push records that the message at offset was handed out. Offsets must
// increase. It returns false, and records nothing, when the limit is
// reached.
func (p *pendingAcks) push(offset int64) bool {
	if p.n >= p.limit {
		return false
	}
	if p.n == len(p.ring) {
		p.grow()
	}
	p.ring[(p.head+p.n)&(len(p.ring)-1)] = slot{offset: offset}
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
func (p *pendingAcks) unpushFrom(offset int64) {
	p.skip = -1
	for p.n > 0 {
		last := &p.ring[(p.head+p.n-1)&(len(p.ring)-1)]
		if last.offset < offset {
			return
		}
		if last.state == slotPending {
			p.open--
		}
		p.n--
	}
}

func (p *pendingAcks) grow() {
	size := 2 * len(p.ring)
	if size == 0 {
		size = 64
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
	if i != p.head {
		return true, false
	}
	// Drop the resolved prefix; acked entries move the commit point past
	// them, a withdrawn one stops it for good.
	mask := len(p.ring) - 1
	for p.n > 0 && p.ring[p.head].state != slotPending {
		s := p.ring[p.head]
		if s.state == slotWithdrawn {
			p.stuck = true
		}
		if !p.stuck {
			p.done = s.offset + 1
			advanced = true
		}
		p.head = (p.head + 1) & mask
		p.n--
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
