package kafkaconsumer

// A long poll does not hold up the partitions that join its broker loop
// while it waits, on the real cluster.

import (
	"regexp"
	"testing"
	"time"
)

// TestIntegrationNoStallBehindLongPoll: while the instance's partitions
// are at the ends of their logs, each broker loop's request waits
// Consumer.MaxWaitTime (here 20 s) at the broker for new messages. A
// topic created then, with messages, joins the subscription: its
// partitions start (their initial offsets resolved, then fetched) and
// hand out their messages well within MaxWaitTime, not behind the long
// polls in flight.
func TestIntegrationNoStallBehindLongPoll(t *testing.T) {
	parallelClusterTest(t)
	client := newTestClient(t)
	admin := newTestAdmin(t, client)
	prefix := uniqueName("it-longpoll")
	first, second := prefix+".a", prefix+".b"
	createTopic(t, admin, first, 2) // a partition on each fetch connection (fetcherOf)

	const maxWait = 20 * time.Second
	config := testConfig()
	config.Consumer.MaxWaitTime = maxWait
	config.Net.ReadTimeout = 2 * maxWait
	group := uniqueName("it.longpoll")
	c := joinWithCleanup(t, group, WhitelistSubscription(regexp.MustCompile("^"+regexp.QuoteMeta(prefix)+`\.`)), config)
	l := &deliveryLog{done: make(chan struct{})}
	l.record(c)
	// A message in each partition: the first fetches answer at once, and
	// the next ones, at the ends of the logs, wait at the broker.
	before := produce(t, client, first, "before", 2)
	waitFor(t, 30*time.Second, "the first topic's messages", func() bool { return l.hasAll(before) })
	waitConsuming(t, c, 2, "the instance")

	createTopic(t, admin, second, 2)
	start := time.Now()
	after := produce(t, client, second, "after", 20)
	// Far below MaxWaitTime: a partition that waits behind a long poll
	// misses it.
	const deadline = maxWait / 4
	if !poll(deadline, func() bool { return l.hasAll(after) }) {
		t.Fatalf("the new topic's messages were not handed out within %s (Consumer.MaxWaitTime %s): %d of %d delivered",
			deadline, maxWait, countDelivered(l, after), len(after))
	}
	t.Logf("the new topic's messages were handed out %s after they were produced (Consumer.MaxWaitTime %s)",
		time.Since(start).Round(time.Millisecond), maxWait)
}

// countDelivered returns how many of values l recorded.
func countDelivered(l *deliveryLog, values []string) int {
	counts, n := l.delivered(), 0
	for _, v := range values {
		if counts[v] > 0 {
			n++
		}
	}
	return n
}
