package fetch

// loopWait is a kind of wait of a broker loop, for its trace hook
// (trace.go, build tag fetchtrace).
type loopWait int

const (
	waitBusy     loopWait = iota // a partition's last slab not taken
	waitIdle                     // no partition ready
	waitBudget                   // the budget spent
	waitResponse                 // a request's response
	waitPoll                     // a long poll's response (every partition at its end)
	waitHandle                   // handing out a response's messages
	loopWaits
)
