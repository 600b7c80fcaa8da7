//go:build !fetchtrace

package main

// loopTraces returns nothing: the fetch engine's loops are traced only
// in a bench built with -tags fetchtrace (trace_on.go).
func loopTraces() []loopTrace { return nil }
