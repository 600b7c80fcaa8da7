package fetch

// The fetch budget: what the broker loops of one consumer may fetch ahead
// of the partitions, the consumer's MaxBufferedBytes (hub.go).

import (
	"sync"
	"sync/atomic"
)

// Budget is the consumer's MaxBufferedBytes, shared by the fetch hubs of a
// consumer: the bytes of messages their fetchers hold in slabs that the
// partitions did not hand out yet, and the bytes that the requests in
// flight reserved (reserve). Each running broker loop has a share of it,
// the limit over the running loops (join, leave), so that no two loops
// hold it all while the others wait.
//
// The bound it keeps: a request reserves only what is free, in one step,
// so that no two loops count the same free bytes; only a loop that holds
// nothing may reserve 1 byte of a spent budget. So the reservations and
// slabs together stay within limit plus 1 byte per broker loop, as long
// as each response stays within what its request reserved; what a
// response brings beyond comes on top (Kafka answers with a first record
// batch however large, and a slab counts the messages' own memory, which
// the request's MaxBytes does not).
type Budget struct {
	limit int64 // 0: no bound
	// buffered is the slabs' bytes and the reservations, changed only by
	// atomic adds, and by reserve's compare-and-swap.
	buffered atomic.Int64
	// loops counts the running broker loops of the hubs (join, leave).
	loops atomic.Int32
	// mu guards waiters, the loops that wait for the budget to free
	// (wait); waiting is its length, read by release without mu.
	mu      sync.Mutex
	waiters []budgetWaiter
	waiting atomic.Int32
}

// NewBudget returns a budget of limit bytes (the consumer's
// MaxBufferedBytes; 0 or less: no bound), for the Config of each hub of
// one consumer.
func NewBudget(limit int64) *Budget { return &Budget{limit: limit} }

// budgetWaiter is a loop that waits for the budget, and the least free
// bytes that make a request of it worth sending.
type budgetWaiter struct {
	l     *brokerLoop
	least int64
}

// minRequestParts: a loop waits, while it holds slabs, until at least
// its share over minRequestParts is free for its next request (or all of
// Consumer.Fetch.MaxBytes), instead of fetching whatever scrap is free.
const minRequestParts = 4

// join counts a broker loop that starts; leave, one that ends (and wakes
// the waiting loops, whose shares grew). Safe from any goroutine.
func (b *Budget) join() { b.loops.Add(1) }

func (b *Budget) leave() {
	b.loops.Add(-1)
	b.wakeWaiters()
}

// Share returns each running loop's share of the limit: the limit over
// the loops running now. Safe from any goroutine.
func (b *Budget) Share() int64 {
	return b.limit / int64(max(b.loops.Load(), 1))
}

// release gives back the bytes of a slab that loop l fetched (nil: its
// loop is not counted any more), and wakes the waiting loops for which a
// request is worth sending now (wait).
func (b *Budget) release(l *brokerLoop, size int64) {
	if size == 0 {
		return
	}
	b.buffered.Add(-size)
	if l != nil {
		l.held.Add(-size)
	}
	b.wakeWaiters()
}

// wakeWaiters notifies each waiting loop that holds nothing, or for which
// at least its least request is free now.
func (b *Budget) wakeWaiters() {
	if b.waiting.Load() == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, w := range b.waiters {
		if w.l.held.Load() <= 0 || b.available(w.l) >= w.least {
			w.l.notify()
		}
	}
}

// available returns what loop l may reserve now: what is free of the
// limit, within what its slabs leave of its share.
func (b *Budget) available(l *brokerLoop) int64 {
	return min(b.limit-b.buffered.Load(), b.Share()-l.held.Load())
}

// reserve returns the MaxBytes of the next request of loop l, and
// reserves what its response may count in the budget, in one step (a
// compare-and-swap). A slab counts its messages' memory, more than their
// bytes on the wire (see MessageOverhead), so the reservation is in the
// budget's unit and the request asks for it divided by l's ratio of
// counted to wire bytes (brokerLoop.expansion): at most what is free,
// what l's slabs leave of its share (Budget.share), and
// Consumer.Fetch.MaxBytes (limit). It reports false, reserving nothing,
// when less than the least request worth sending is free while l holds
// slabs not taken yet: its share over minRequestParts, or all of limit if
// smaller. A loop that holds nothing may always fetch (MaxBytes at least
// 1: Kafka answers with at least the first record batch, however large),
// so that every partition makes progress. The reservation holds until
// the loop handled the response: the slabs it delivers take it over
// (count), and settle gives back the rest. Without a limit it reserves
// nothing. Called by l's goroutine only; safe beside the other loops'.
func (b *Budget) reserve(l *brokerLoop, limit int32) (int32, bool) {
	if b.limit <= 0 {
		return limit, true
	}
	expand := l.expansion()
	most := int64(float64(limit) * expand)
	for {
		buffered := b.buffered.Load()
		held := l.held.Load()
		share := b.Share()
		n := min(b.limit-buffered, share-held, most)
		if n < max(b.least(l, limit), 1) {
			if held > 0 {
				return 0, false
			}
			n = max(n, 1)
		}
		wire := max(min(int64(float64(n)/expand), int64(limit)), 1)
		if b.buffered.CompareAndSwap(buffered, buffered+n) {
			l.reserved = n
			return int32(wire), true
		}
	}
}

// least returns the least reservation that a request of loop l is worth
// sending for while l holds slabs (reserve). Called by l's goroutine
// only.
func (b *Budget) least(l *brokerLoop, limit int32) int64 {
	return min(b.Share()/minRequestParts, int64(float64(limit)*l.expansion()))
}

// wait adds loop l to the loops that wait for the budget (on), or
// removes it (off): while it waits, a release notifies it once its least
// request is free (reserve), or it holds nothing. Waiting, it tells its
// partitions that gather batches to hand them out (spentUp): their
// messages count in the budget, and no more may be fetched for them.
// Called by l's goroutine only.
func (b *Budget) wait(l *brokerLoop, limit int32, on bool) {
	if on {
		for _, f := range l.subs {
			select {
			case f.spentUp <- struct{}{}:
			default:
			}
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if on {
		b.waiters = append(b.waiters, budgetWaiter{l: l, least: max(b.least(l, limit), 1)})
	} else {
		for i, w := range b.waiters {
			if w.l == l {
				b.waiters = append(b.waiters[:i], b.waiters[i+1:]...)
				break
			}
		}
	}
	b.waiting.Store(int32(len(b.waiters)))
}

// count counts a slab of size bytes that loop l delivered: what the
// reservation of l's request covers of it is counted already, the rest
// is added. Called by l's goroutine only.
func (b *Budget) count(l *brokerLoop, size int64) {
	covered := min(size, l.reserved)
	l.reserved -= covered
	b.buffered.Add(size - covered)
	l.held.Add(size)
}

// settle gives back what is left of the reservation of l's request, once
// its response is handled (or the request failed). Called by l's
// goroutine only.
func (b *Budget) settle(l *brokerLoop) {
	left := l.reserved
	l.reserved = 0
	b.release(nil, left)
}

// defaultExpansion is a loop's ratio of counted to wire bytes before its
// first response with messages.
const defaultExpansion = 2

// expansionResponses is how many of a loop's last responses with
// messages its ratio of counted to wire bytes is the maximum of.
const expansionResponses = 8

// expansionWindow holds the ratios of counted to wire bytes of a loop's
// last expansionResponses responses with messages.
type expansionWindow struct {
	ratios [expansionResponses]float64 // 0: none yet
	next   int                         // where the next ratio goes
}

// expansion returns the largest ratio of the bytes a response's slabs
// counted in the budget to its bytes on the wire, over the loop's last
// expansionResponses responses with messages: what a request's MaxBytes
// is multiplied by in the budget. The maximum, not the last, so that a
// response of small messages after one of large ones stays within its
// reservation. The wire bytes are the partitions' records as sent
// (compressed records count their decompressed size against them).
// Called by the loop's goroutine only.
func (l *brokerLoop) expansion() float64 {
	most := 0.0
	for _, r := range l.expand.ratios {
		most = max(most, r)
	}
	if most < 1 {
		return defaultExpansion
	}
	return most
}

// measure records the counted and wire bytes of one response (see
// expansion). Called by the loop's goroutine only.
func (l *brokerLoop) measure(counted, wire int64) {
	if counted > 0 && wire > 0 {
		w := &l.expand
		w.ratios[w.next] = max(float64(counted)/float64(wire), 1)
		w.next = (w.next + 1) % expansionResponses
	}
}
