package kafkaconsumer

// The records a share consumer holds and their acknowledgements: each
// record acquired from a ShareFetch response is held (shareConsumer.held)
// until it is acknowledged, its lock expires or its share session ends;
// an acknowledgement moves it to its fetcher's pending acks, which the
// fetcher sends with its next request (share_fetch.go), as ranges of
// offsets of one type (ackRanges).

import (
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
)

// The acknowledgement types of KIP-932 (ShareFetch and ShareAcknowledge's
// AcknowledgeTypes).
const (
	ackGap     int8 = 0 // an offset of an acquired range that holds no record (a marker, a compacted gap)
	ackAccept  int8 = 1
	ackRelease int8 = 2
	ackReject  int8 = 3
	ackRenew   int8 = 4 // KIP-1222: the lock starts again; the record stays held
)

// ackName names an acknowledgement type in errors and logs.
func ackName(typ int8) string {
	switch typ {
	case ackAccept:
		return "accept"
	case ackRelease:
		return "release"
	case ackReject:
		return "reject"
	case ackRenew:
		return "renew"
	}
	return "gap"
}

// heldRecord is a record this member acquired and has not acknowledged,
// held (shareConsumer.held) by its message: the one delivery of it that
// was handed out, or will be.
type heldRecord struct {
	msg       *sarama.ConsumerMessage
	f         *shareFetcher // the fetch loop whose session acquired it
	c         *shareCounts  // its partition's counts
	topicID   [16]byte
	delivery  int16       // the broker's delivery count
	deadline  time.Time   // when its acquisition lock expires, measured from the request's send; guarded by sc.mu
	handedOut atomic.Bool // set by the fetch loop before the send, unset when the send did not happen
}

// ackRange is a run of offsets of one partition acknowledged alike.
type ackRange struct {
	first, last int64
	typ         int8
}

// tidp is a partition by topic ID, as the share requests name it.
type tidp struct {
	id        [16]byte
	partition int32
}

// acknowledge acknowledges msg with typ: it leaves the records held
// (unless typ is ackRenew) and joins its fetcher's pending acks (or
// renews), and the fetcher is woken. A message not held (see
// ErrShareAckRefused) is reported.
func (sc *shareConsumer) acknowledge(msg *sarama.ConsumerMessage, typ int8) {
	if msg == nil {
		return
	}
	sc.mu.Lock()
	r, why := sc.holding(msg)
	if why != "" {
		sc.mu.Unlock()
		sc.sendError(fmt.Errorf("%w: %s of %s/%d offset %d: %s", ErrShareAckRefused, ackName(typ), msg.Topic, msg.Partition, msg.Offset, why))
		return
	}
	f := r.f
	wake := len(f.acks) == 0 // else f was woken for the first of them
	if typ == ackRenew {
		f.renews[msg] = r.topicID
		f.renewsPending.Store(true)
		wake = true
	} else {
		delete(sc.held, msg)
		if f.renewsPending.Load() {
			delete(f.renews, msg)
			f.renewsPending.Store(len(f.renews) > 0)
		}
		f.addAck(tidp{r.topicID, msg.Partition}, ackRange{first: msg.Offset, last: msg.Offset, typ: typ})
		r.c.acked++
		r.c.lastAcked = max(r.c.lastAcked, msg.Offset)
	}
	sc.mu.Unlock()
	if wake {
		poke(f.wake)
	}
}

// holding returns the record held as msg, handed out, its lock not
// expired; else why not. sc.mu is held.
func (sc *shareConsumer) holding(msg *sarama.ConsumerMessage) (*heldRecord, string) {
	r := sc.held[msg]
	switch {
	case r == nil:
		return nil, "not held by this consumer: acknowledged already, or its share session ended, or handed out by another delivery"
	case !r.handedOut.Load():
		return nil, "not handed out yet"
	case !time.Now().Before(r.deadline):
		delete(sc.held, msg)
		return nil, "its acquisition lock expired"
	}
	return r, ""
}

// renewal is a record to renew, with its topic ID.
type renewal struct {
	msg *sarama.ConsumerMessage
	id  [16]byte
}

// takeRenews removes and returns f's pending renews of records it still
// holds, adding them to acks as ackRenew ranges. sc.mu is held.
func (f *shareFetcher) takeRenews(acks map[tidp][]ackRange) []renewal {
	var renews []renewal
	for msg, id := range f.renews {
		if r := f.sc.held[msg]; r != nil && r.f == f {
			p := tidp{id, msg.Partition}
			acks[p] = append(acks[p], ackRange{first: msg.Offset, last: msg.Offset, typ: ackRenew})
			renews = append(renews, renewal{msg: msg, id: id})
		}
	}
	clear(f.renews)
	f.renewsPending.Store(false)
	for p, as := range acks {
		acks[p] = ackRanges(as)
	}
	return renews
}

// renewed moves the deadline of the records of msgs still held by f to
// until: their renew was answered.
func (f *shareFetcher) renewed(msgs []*sarama.ConsumerMessage, until time.Time) {
	f.sc.mu.Lock()
	defer f.sc.mu.Unlock()
	for _, msg := range msgs {
		if r := f.sc.held[msg]; r != nil && r.f == f {
			r.deadline = until
		}
	}
}

// deliveryCount returns the delivery count of msg, 0 when not held.
func (sc *shareConsumer) deliveryCount(msg *sarama.ConsumerMessage) int {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if r := sc.held[msg]; r != nil {
		return int(r.delivery)
	}
	return 0
}

// addAck adds a to the pending acks of partition p. sc.mu is held.
func (f *shareFetcher) addAck(p tidp, a ackRange) {
	if len(f.acks) == 0 {
		f.acksSince = time.Now()
	}
	f.acks[p] = append(f.acks[p], a)
}

// takeAcks removes and returns the pending acks, each partition's merged
// into ranges (ackRanges). sc.mu is held.
func (f *shareFetcher) takeAcks() map[tidp][]ackRange {
	if len(f.acks) == 0 {
		return nil
	}
	acks := f.acks
	f.acks = make(map[tidp][]ackRange)
	for p, as := range acks {
		acks[p] = ackRanges(as)
	}
	return acks
}

// ackRanges sorts as by offset and merges adjacent ranges of one type.
func ackRanges(as []ackRange) []ackRange {
	slices.SortFunc(as, func(a, b ackRange) int {
		switch {
		case a.first < b.first:
			return -1
		case a.first > b.first:
			return 1
		}
		return 0
	})
	out := as[:0]
	for _, a := range as {
		if n := len(out); n > 0 && out[n-1].typ == a.typ && out[n-1].last+1 == a.first {
			out[n-1].last = a.last
			continue
		}
		out = append(out, a)
	}
	return out
}

// releaseHeld releases the records of f still held: those handed out too
// when all is set (the end of the shutdown's wait), else only those not
// handed out. It returns how many. sc.mu is held.
func (sc *shareConsumer) releaseHeld(f *shareFetcher, all bool) int {
	n := 0
	for msg, r := range sc.held {
		if r.f == f && (all || !r.handedOut.Load()) {
			delete(sc.held, msg)
			f.addAck(tidp{r.topicID, msg.Partition}, ackRange{first: msg.Offset, last: msg.Offset, typ: ackRelease})
			n++
		}
	}
	return n
}

// dropHeld forgets the records of f held in its share session, which
// ended (the broker released them), with its pending acks and renews; it
// reports the acks lost. sc.mu is not held.
func (sc *shareConsumer) dropHeld(f *shareFetcher, cause error) {
	sc.mu.Lock()
	for msg, r := range sc.held {
		if r.f == f {
			delete(sc.held, msg)
		}
	}
	lost := f.takeAcks()
	clear(f.renews)
	f.renewsPending.Store(false)
	sc.mu.Unlock()
	for p, ranges := range lost {
		sc.reportRefused(p, ranges, cause)
	}
}

// handedOutHeld returns how many records f acquired and handed out are
// not acknowledged yet.
func (sc *shareConsumer) handedOutHeld(f *shareFetcher) int {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	n := 0
	for _, r := range sc.held {
		if r.f == f && r.handedOut.Load() {
			n++
		}
	}
	return n
}

// reportRefused reports the acknowledgements ranges of partition p that
// the broker refused, or that were lost, with cause: one error per
// partition.
func (sc *shareConsumer) reportRefused(p tidp, ranges []ackRange, cause error) {
	n := 0
	for _, a := range ranges {
		if a.typ != ackGap {
			n += int(a.last - a.first + 1)
		}
	}
	if n == 0 {
		return
	}
	sc.mu.Lock()
	name := sc.names[p.id]
	sc.mu.Unlock()
	err := fmt.Errorf("%w: %d acknowledgement(s) of %s/%d, offsets %d to %d: %w", ErrShareAckRefused, n, name, p.partition, ranges[0].first, ranges[len(ranges)-1].last, cause)
	sc.logf(slog.LevelWarn, "%s.", err)
	sc.sendError(err)
}
