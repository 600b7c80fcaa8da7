//go:build fetchtrace

package fetch

// The broker loops' trace hook, built with the tag fetchtrace only (e.g.
// cd bench && go run -tags fetchtrace .): per broker, how long its loops
// waited on what.

import (
	"sync"
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
