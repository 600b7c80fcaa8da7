//go:build !fetchtrace

package fetch

import "github.com/twmb/franz-go/pkg/kgo"

// The broker loops' trace hook, off: see trace.go (build tag
// fetchtrace). Every call compiles to nothing.

// traceStart returns the time a wait of a broker loop starts (none when
// the trace is off).
func traceStart() int64 { return 0 }

// traceWait counts a wait of kind w of loop l that started at t0.
func (l *brokerLoop) traceWait(loopWait, int64) {}

// traceResponse counts the wait for a response that started at t0, a
// long poll's when poll.
func (l *brokerLoop) traceResponse(bool, int64) {}

// traceRequest counts a request of loop l for partitions partitions of
// at most maxBytes.
func (l *brokerLoop) traceRequest(int, int32) {}

// traceHandled counts a response of loop l handled: its records' bytes
// on the wire, its messages, its partitions that brought messages, and
// those whose records ended with a batch cut short.
func (l *brokerLoop) traceHandled(int64, int64, int64, int64) {}

// traceOpts returns no option of loop l's transport.
func (l *brokerLoop) traceOpts() []kgo.Opt { return nil }
