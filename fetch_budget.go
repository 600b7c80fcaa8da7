package kafkaconsumer

// The fetch budget: what the broker loops of one consumer may fetch ahead
// of the partitions, Config.MaxBufferedBytes (fetch_hub.go).

import (
	"sync/atomic"
)

// fetchBudget is Config.MaxBufferedBytes, shared by the fetch hubs of a
// consumer: the bytes of messages their fetchers hold in slabs that the
// partitions did not hand out yet, and the bytes that the requests in
// flight reserved (reserve). Its hubs are set before any loop runs.
//
// The bound it keeps: a request reserves only what is free, in one step,
// so that no two loops count the same free bytes; only a loop that holds
// nothing may reserve 1 byte of a spent budget. So the reservations and
// slabs together stay within limit plus 1 byte per broker loop, as long
// as each response stays within what its request reserved; what a
// response brings beyond comes on top (Kafka answers with a first record
// batch however large, and a slab counts the messages' own memory, which
// the request's MaxBytes does not).
type fetchBudget struct {
	limit int64 // 0: no bound
	hubs  []*fetchHub
	// buffered is the slabs' bytes and the reservations, changed only by
	// atomic adds, and by reserve's compare-and-swap.
	buffered atomic.Int64
	// starved counts the loops that wait for the budget to free: a
	// release wakes every loop while it is not zero.
	starved atomic.Int32
}

// release gives back the bytes of a slab that loop l fetched (nil: its
// loop is not counted any more), and wakes the loops that wait for them.
func (b *fetchBudget) release(l *brokerLoop, size int64) {
	if size == 0 {
		return
	}
	b.buffered.Add(-size)
	if l != nil {
		l.held.Add(-size)
	}
	if b.starved.Load() == 0 {
		return
	}
	for _, h := range b.hubs {
		h.mu.Lock()
		for _, l := range h.loops {
			l.notify()
		}
		h.mu.Unlock()
	}
}

// reserve returns the MaxBytes of the next request of loop l, and
// reserves what its response may count in the budget, in one step (a
// compare-and-swap). A slab counts its messages' memory, more than their
// bytes on the wire (see messageOverhead), so the reservation is in the
// budget's unit and the request asks for it divided by l's last ratio of
// counted to wire bytes (brokerLoop.expansion): at most half the budget, so that a
// second response may arrive while the first is handed out, and within
// Consumer.Fetch.MaxBytes (limit). It reports false, reserving nothing,
// when none is free while l holds slabs not taken yet. A loop that holds
// nothing may always fetch (MaxBytes at least 1: Kafka answers with at
// least the first record batch, however large), so that every partition
// makes progress. The reservation holds until the loop handled the
// response: the slabs it delivers take it over (count), and settle gives
// back the rest. Without a limit it reserves nothing. Called by l's
// goroutine only; safe beside the other loops'.
func (b *fetchBudget) reserve(l *brokerLoop, limit int32) (int32, bool) {
	if b.limit <= 0 {
		return limit, true
	}
	for {
		buffered := b.buffered.Load()
		free := b.limit - buffered
		if free <= 0 && l.held.Load() > 0 {
			return 0, false
		}
		expand := l.expansion()
		n := max(min(free, b.limit/2, int64(float64(limit)*expand)), 1)
		wire := max(min(int64(float64(n)/expand), int64(limit)), 1)
		if b.buffered.CompareAndSwap(buffered, buffered+n) {
			l.reserved = n
			return int32(wire), true
		}
	}
}

// count counts a slab of size bytes that loop l delivered: what the
// reservation of l's request covers of it is counted already, the rest
// is added. Called by l's goroutine only.
func (b *fetchBudget) count(l *brokerLoop, size int64) {
	covered := min(size, l.reserved)
	l.reserved -= covered
	b.buffered.Add(size - covered)
	l.held.Add(size)
}

// settle gives back what is left of the reservation of l's request, once
// its response is handled (or the request failed). Called by l's
// goroutine only.
func (b *fetchBudget) settle(l *brokerLoop) {
	left := l.reserved
	l.reserved = 0
	b.release(nil, left)
}

// defaultExpansion is a loop's ratio of counted to wire bytes before its
// first response with messages.
const defaultExpansion = 2

// expansion returns the ratio of the bytes a response's slabs counted in
// the budget to their partitions' records' bytes on the wire, in the
// loop's last response that had messages: what a request's MaxBytes is
// multiplied by in the budget (compressed records count their
// decompressed size). Called by the loop's goroutine only.
func (l *brokerLoop) expansion() float64 {
	if l.expand < 1 {
		return defaultExpansion
	}
	return l.expand
}

// measure records the counted and wire bytes of one response (see
// expansion).
func (l *brokerLoop) measure(counted, wire int64) {
	if counted > 0 && wire > 0 {
		l.expand = max(float64(counted)/float64(wire), 1)
	}
}
