//go:build fetchtrace

package main

import "github.com/kafkaconsumer/kafkaconsumer"

// loopTraces returns the fetch engine's trace of each broker loop so
// far (kafkaconsumer.LoopTraces).
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
		}
		out = append(out, lt)
	}
	return out
}
