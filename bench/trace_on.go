//go:build fetchtrace

package main

import (
	"sync"
	"time"

	"github.com/kafkaconsumer/kafkaconsumer"
	"github.com/twmb/franz-go/pkg/kgo"
)

// loopTraces returns the fetch engine's trace of each broker loop so
// far (kafkaconsumer.LoopTraces), and franz-go's fetches per broker
// (franzTrace).
func loopTraces() []loopTrace {
	var out []loopTrace
	for _, t := range kafkaconsumer.LoopTraces() {
		lt := loopTrace{Broker: t.Broker, Seconds: map[string]float64{}, Waits: map[string]int64{}, Requests: t.Requests}
		for i, w := range kafkaconsumer.LoopWaits {
			lt.Seconds[w], lt.Waits[w] = float64(t.Nanos[i])/1e9, t.Waits[i]
		}
		if t.Requests > 0 {
			lt.Partitions = float64(t.Partitions) / float64(t.Requests)
			lt.MaxBytes = float64(t.MaxBytes) / float64(t.Requests)
			lt.Wire = float64(t.Wire) / float64(t.Requests)
			lt.Messages = float64(t.Messages) / float64(t.Requests)
			lt.Filled = float64(t.Filled) / float64(t.Requests)
			lt.Cut = float64(t.Cut) / float64(t.Requests)
			lt.ReadWait = float64(t.ReadWait.Milliseconds()) / float64(t.Requests)
			lt.Read = float64(t.Read.Milliseconds()) / float64(t.Requests)
		}
		out = append(out, lt)
	}
	return append(out, franzTraces.loops()...)
}

// franzTraceOpts hooks franz-go's broker reads, for franzTraces.
func franzTraceOpts() []kgo.Opt { return []kgo.Opt{kgo.WithHooks(&franzTraces)} }

// franzTraces counts franz-go's Fetch responses per broker: how many,
// their bytes, and the time from the request's write to the response's
// end (the response wait of a broker loop).
var franzTraces franzTrace

type franzTrace struct {
	mu       sync.Mutex
	byBroker map[int32]*loopTrace
}

// OnBrokerRead implements kgo.HookBrokerRead.
func (f *franzTrace) OnBrokerRead(meta kgo.BrokerMetadata, key int16, bytesRead int, readWait, timeToRead time.Duration, err error) {
	if key != 1 || err != nil { // Fetch
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.byBroker == nil {
		f.byBroker = map[int32]*loopTrace{}
	}
	t := f.byBroker[meta.NodeID]
	if t == nil {
		t = &loopTrace{Broker: meta.NodeID, Seconds: map[string]float64{}, Waits: map[string]int64{}}
		f.byBroker[meta.NodeID] = t
	}
	t.Requests++
	t.Wire += float64(bytesRead)
	t.ReadWait += float64(readWait.Microseconds()) / 1e3
	t.Read += float64(timeToRead.Microseconds()) / 1e3
	t.Waits["response"]++
	t.Seconds["response"] += (readWait + timeToRead).Seconds()
}

func (f *franzTrace) loops() []loopTrace {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []loopTrace
	for _, t := range f.byBroker {
		c := *t
		if c.Requests > 0 {
			c.Wire /= float64(c.Requests)
			c.ReadWait /= float64(c.Requests)
			c.Read /= float64(c.Requests)
		}
		out = append(out, c)
	}
	return out
}
