//go:build fetchtrace

package kafkaconsumer

// The fetch engine's trace of its broker loops (internal/fetch, trace.go),
// built with the tag fetchtrace only (e.g. cd bench && go run -tags
// fetchtrace .).

import "github.com/kafkaconsumer/kafkaconsumer/internal/fetch"

// LoopTrace is what one broker loop did since it started (fetch.LoopTrace).
type LoopTrace = fetch.LoopTrace

// LoopWaits names the kinds of LoopTrace.Waits.
var LoopWaits = fetch.LoopWaits

// LoopTraces returns the traces of every broker loop so far, in no
// order. Safe from any goroutine.
func LoopTraces() []LoopTrace { return fetch.LoopTraces() }
