//go:build fetchtrace

package fetch

// The broker loops' trace hook, built with the tag fetchtrace only (e.g.
// cd bench && go run -tags fetchtrace .): per broker, how long its loops
// waited on what.

import (
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
	"sync/atomic"
	"time"
)

// LoopTrace is what one broker loop did since it started: for each kind
// of wait (LoopWaits), the count and total time of its waits; and its
// requests. A broker has a loop per fetch hub, and a new one after its
// last partition left it.
type LoopTrace struct {
	Broker int32
	// Waits and Nanos are indexed as LoopWaits.
	Waits, Nanos [loopWaits]int64
	// Requests, Partitions and MaxBytes are the requests sent, and the
	// sums of their partitions and of their MaxBytes.
	Requests, Partitions, MaxBytes int64
	// Wire, Messages, Filled and Cut are the sums over the responses
	// handled of their records' bytes on the wire, their messages, their
	// partitions that brought messages, and those whose records ended
	// with a batch cut short.
	Wire, Messages, Filled, Cut int64
	// ReadWait and Read are the sums over the responses of the time
	// from the request's write until kgo began to read the response, and
	// of the time it read it (kgo.HookBrokerRead).
	ReadWait, Read time.Duration
}

// LoopWaits names the kinds of LoopTrace.Waits: a partition's last slab
// not taken yet (busy), no partition ready (idle), the budget spent
// (budget, reserve returning false), the response of a request
// (response) or of a long poll (poll: every partition of the request at
// its end), and handing the partitions their messages (handle).
var LoopWaits = [loopWaits]string{"busy", "idle", "budget", "response", "poll", "handle"}

// LoopTraces returns the traces of every broker loop so far, in no
// order. Safe from any goroutine.
func LoopTraces() []LoopTrace {
	var out []LoopTrace
	loopTraces.Range(func(_, v any) bool {
		c := v.(*loopCounters)
		t := LoopTrace{Broker: c.broker}
		for i := range loopWaits {
			t.Waits[i], t.Nanos[i] = c.waits[i].Load(), c.nanos[i].Load()
		}
		t.Requests, t.Partitions, t.MaxBytes = c.requests.Load(), c.partitions.Load(), c.maxBytes.Load()
		t.Wire, t.Messages, t.Filled, t.Cut = c.wire.Load(), c.messages.Load(), c.filled.Load(), c.cut.Load()
		t.ReadWait, t.Read = time.Duration(c.readWait.Load()), time.Duration(c.read.Load())
		out = append(out, t)
		return true
	})
	return out
}

// loopTraces holds a *loopCounters per *brokerLoop.
var loopTraces sync.Map

type loopCounters struct {
	broker                         int32
	waits, nanos                   [loopWaits]atomic.Int64
	requests, partitions, maxBytes atomic.Int64
	wire, messages, filled, cut    atomic.Int64
	readWait, read                 atomic.Int64
}

func (l *brokerLoop) counters() *loopCounters {
	if c, ok := loopTraces.Load(l); ok {
		return c.(*loopCounters)
	}
	c, _ := loopTraces.LoadOrStore(l, &loopCounters{broker: l.broker.ID()})
	return c.(*loopCounters)
}

// traceStart returns the time a wait of a broker loop starts.
func traceStart() int64 { return time.Now().UnixNano() }

// traceWait counts a wait of kind w of loop l that started at t0.
func (l *brokerLoop) traceWait(w loopWait, t0 int64) {
	c := l.counters()
	c.waits[w].Add(1)
	c.nanos[w].Add(time.Now().UnixNano() - t0)
}

// traceResponse counts the wait for a response that started at t0, a
// long poll's when poll.
func (l *brokerLoop) traceResponse(poll bool, t0 int64) {
	if poll {
		l.traceWait(waitPoll, t0)
		return
	}
	l.traceWait(waitResponse, t0)
}

// traceRequest counts a request of loop l for partitions partitions of
// at most maxBytes.
func (l *brokerLoop) traceRequest(partitions int, maxBytes int32) {
	c := l.counters()
	c.requests.Add(1)
	c.partitions.Add(int64(partitions))
	c.maxBytes.Add(int64(maxBytes))
}

// traceHandled counts a response of loop l handled: its records' bytes
// on the wire, its messages, its partitions that brought messages, and
// those whose records ended with a batch cut short.
func (l *brokerLoop) traceHandled(wire, messages, filled, cut int64) {
	c := l.counters()
	c.wire.Add(wire)
	c.messages.Add(messages)
	c.filled.Add(filled)
	c.cut.Add(cut)
}

// traceOpts returns the options of loop l's transport that trace its
// responses' reads (readHook).
func (l *brokerLoop) traceOpts() []kgo.Opt { return []kgo.Opt{kgo.WithHooks(readHook{l.counters()})} }

// readHook counts the reads of a loop's Fetch responses.
type readHook struct{ c *loopCounters }

// OnBrokerRead implements kgo.HookBrokerRead.
func (h readHook) OnBrokerRead(_ kgo.BrokerMetadata, key int16, _ int, readWait, timeToRead time.Duration, err error) {
	if key == 1 && err == nil {
		h.c.readWait.Add(int64(readWait))
		h.c.read.Add(int64(timeToRead))
	}
}
