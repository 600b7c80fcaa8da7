//go:build !fetchtrace

package main

import "github.com/twmb/franz-go/pkg/kgo"

// loopTraces returns nothing: the fetch engine's loops are traced only
// in a bench built with -tags fetchtrace (trace_on.go).
func loopTraces() []loopTrace { return nil }

// franzTraceOpts returns no option: franz-go's fetches are traced only
// in a bench built with -tags fetchtrace (trace_on.go).
func franzTraceOpts() []kgo.Opt { return nil }
