package main

import (
	"fmt"
	"strings"
)

// loopTrace is what one of the fetch engine's broker loops did in a
// drain: built with -tags fetchtrace only (see trace_on.go).
type loopTrace struct {
	Broker int32 `json:"broker"`
	// Seconds and Waits are the total time and the count of each kind of
	// wait (busy: a partition's slab not taken; idle: no partition
	// ready; budget: MaxBufferedBytes spent; response; poll: a long
	// poll's response; handle: handing out a response).
	Seconds map[string]float64 `json:"seconds"`
	Waits   map[string]int64   `json:"waits"`
	// Requests sent, and their mean partitions and MaxBytes.
	Requests   int64   `json:"requests"`
	Partitions float64 `json:"partitions_per_request"`
	MaxBytes   float64 `json:"max_bytes_per_request"`
	// Wire, Messages and Filled are the means per response of the
	// records' bytes on the wire, the messages, and the partitions that
	// brought messages.
	Wire     float64 `json:"wire_bytes_per_response"`
	Messages float64 `json:"messages_per_response"`
	Filled   float64 `json:"filled_partitions_per_response"`
	// Cut is the mean per response of the partitions whose records ended
	// with a batch cut short.
	Cut float64 `json:"cut_partitions_per_response"`
	// ReadWait and Read are the means per response of the time from the
	// request's write until the response began to be read, and of its
	// read, in milliseconds.
	ReadWait float64 `json:"read_wait_ms"`
	Read     float64 `json:"read_ms"`
}

// loopWaitNames are the kinds of wait of loopTrace, in the order logged.
var loopWaitNames = []string{"busy", "idle", "budget", "response", "poll", "handle"}

// String is the trace in one line for the log.
func (t loopTrace) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "broker %d: %d requests (%.1f partitions, %.0f KiB max; responses %.0f KiB, %.0f msgs, %.1f partitions filled, %.1f cut)",
		t.Broker, t.Requests, t.Partitions, t.MaxBytes/1024, t.Wire/1024, t.Messages, t.Filled, t.Cut)
	fmt.Fprintf(&b, ", read wait %.1f ms, read %.1f ms", t.ReadWait, t.Read)
	for _, w := range loopWaitNames {
		fmt.Fprintf(&b, ", %s %.2fs/%d", w, t.Seconds[w], t.Waits[w])
	}
	return b.String()
}
