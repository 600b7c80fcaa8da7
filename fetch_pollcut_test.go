package kafkaconsumer

// interruptPoll's timing, on a loop without a broker: a long poll is cut
// only once it waited pollCutDelay, and not at all when the loop's next
// request took the partition in meanwhile.

import (
	"net"
	"testing"
	"time"
)

// pollLoop returns a broker loop whose connection is one end of a pipe,
// with a long poll in flight on it.
func pollLoop(t *testing.T) (*brokerLoop, *loopDialer) {
	t.Helper()
	client, server := net.Pipe()
	t.Cleanup(func() { client.Close(); server.Close() })
	d := &loopDialer{conn: client}
	l := &brokerLoop{hub: &fetchHub{stop: make(chan struct{})}, dialer: d}
	l.startPoll()
	return l, d
}

func interrupted(d *loopDialer) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.interrupted
}

// TestInterruptPollWaitsForAYoungPoll: a start during a long poll just
// sent does not cut it at once (a poll is answered as soon as a message
// comes, and a cut costs a connection), but once it waited
// pollCutDelay.
func TestInterruptPollWaitsForAYoungPoll(t *testing.T) {
	t.Parallel()
	l, d := pollLoop(t)
	l.interruptPoll()
	if interrupted(d) || l.poll.Load() == nil {
		t.Fatalf("a long poll %s old was cut at once; want it cut once it waited %s", time.Since(time.Unix(0, d.pollSince.Load())), pollCutDelay)
	}
	waitFor(t, 10*time.Second, "the long poll to be cut", func() bool { return interrupted(d) })
	if l.poll.Load() != nil {
		t.Fatal("the cut poll is still the loop's poll")
	}
}

// TestInterruptPollSparesTheNextPoll: when the poll returns by itself
// before pollCutDelay, and the loop's next request (holding the started
// partition) is a long poll too, the pending cut does not cut that one.
func TestInterruptPollSparesTheNextPoll(t *testing.T) {
	t.Parallel()
	l, d := pollLoop(t)
	l.interruptPoll()
	// The response comes; the loop chooses again and sends a new poll.
	l.poll.Swap(nil)
	l.stale.Store(false)
	l.startPoll()
	deadline := time.Now().Add(4 * pollCutDelay)
	for time.Now().Before(deadline) {
		if interrupted(d) {
			t.Fatal("the next long poll, which holds the partition, was cut")
		}
		time.Sleep(pollCutDelay / 10) // observing that nothing happens
	}
}

// TestInterruptPollStoppingCutsAtOnce: once the hub is stopping, a long
// poll is cut at once, however young.
func TestInterruptPollStoppingCutsAtOnce(t *testing.T) {
	t.Parallel()
	l, d := pollLoop(t)
	close(l.hub.stop)
	l.interruptPoll()
	if !interrupted(d) {
		t.Fatal("a stopping hub's long poll was not cut at once")
	}
}
