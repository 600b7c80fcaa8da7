package fetch

// interruptPoll's timing, on a loop without a broker: a long poll is cut
// only once it waited pollCutDelay, and not at all when the loop's next
// request took the partition in meanwhile.

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/kafkaconsumer/kafkaconsumer/internal/fetch/fetchtest"
)

// pollLoop returns a broker loop without a broker, with a long poll in
// flight, and whether that poll was cut (its request's context
// cancelled).
func pollLoop(t *testing.T) (*brokerLoop, *atomic.Bool) {
	t.Helper()
	cut := new(atomic.Bool)
	l := &brokerLoop{hub: &Hub{stop: make(chan struct{})}}
	l.startPoll(func() { cut.Store(true) })
	return l, cut
}

// TestInterruptPollWaitsForAYoungPoll: a start during a long poll just
// sent does not cut it at once (a poll is answered as soon as a message
// comes, and a cut costs a connection), but once it waited
// pollCutDelay.
func TestInterruptPollWaitsForAYoungPoll(t *testing.T) {
	t.Parallel()
	l, cut := pollLoop(t)
	l.interruptPoll()
	if cut.Load() || l.poll.Load() == nil {
		t.Fatalf("a long poll %s old was cut at once; want it cut once it waited %s", time.Since(l.poll.Load().since), pollCutDelay)
	}
	fetchtest.WaitFor(t, 10*time.Second, "the long poll to be cut", func() bool { return cut.Load() })
	if l.poll.Load() != nil {
		t.Fatal("the cut poll is still the loop's poll")
	}
}

// TestInterruptPollSparesTheNextPoll: when the poll returns by itself
// before pollCutDelay, and the loop's next request (holding the started
// partition) is a long poll too, the cut put off for the first poll
// cuts neither, even if its timer fires late.
func TestInterruptPollSparesTheNextPoll(t *testing.T) {
	t.Parallel()
	l, cut := pollLoop(t)
	first := l.poll.Load()
	l.interruptPoll()
	if first.cut.Load() == nil {
		t.Fatal("no cut was put off for a young poll")
	}
	// The response comes; the loop chooses again and sends a new poll.
	l.endPoll()
	l.stale.Store(false)
	next := new(atomic.Bool)
	l.startPoll(func() { next.Store(true) })
	l.cutPoll(first) // the put-off cut, firing late
	if next.Load() {
		t.Fatal("the next long poll, which holds the partition, was cut")
	}
	if cut.Load() {
		t.Fatal("the poll that returned by itself was cut")
	}
}

// TestInterruptPollStoppingCutsAtOnce: once the hub is stopping, a long
// poll is cut at once, however young.
func TestInterruptPollStoppingCutsAtOnce(t *testing.T) {
	t.Parallel()
	l, cut := pollLoop(t)
	close(l.hub.stop)
	l.interruptPoll()
	if !cut.Load() {
		t.Fatal("a stopping hub's long poll was not cut at once")
	}
}
