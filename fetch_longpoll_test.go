package kafkaconsumer

// A long poll does not hold up the partitions that join its broker loop
// while it waits, on the real cluster.

import (
	"fmt"
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

// TestIntegrationResumeNotBehindLongPoll: a partition paused while its
// broker loop's other partition idles at the end of its log is left out
// of the loop's requests, which then wait Consumer.MaxWaitTime (here
// 20 s) at the broker. Resumed, it fetches again at once: what it held
// back, and the record batches after, are handed out well within
// MaxWaitTime.
func TestIntegrationResumeNotBehindLongPoll(t *testing.T) {
	resumeNotBehindLongPoll(t, 0)
}

// resumeNotBehindLongPoll is TestIntegrationResumeNotBehindLongPoll with
// Consumer.MaxProcessingTime maxProcessing (0: the default).
func resumeNotBehindLongPoll(t *testing.T, maxProcessing time.Duration) {
	parallelClusterTest(t)
	client := newTestClient(t)
	admin := newTestAdmin(t, client)
	topic := uniqueName("it-resume-longpoll")
	// Partitions 0 and 2 fetch on the same connection (fetcherOf).
	createTopic(t, admin, topic, 3)
	const quiet, paused = 0, 2
	produceTo(t, topic, quiet, "first", 1)
	produceTo(t, topic, paused, "first", 1)

	const maxWait = 20 * time.Second
	config := testConfig()
	config.Consumer.MaxWaitTime = maxWait
	config.Net.ReadTimeout = 2 * maxWait
	config.Consumer.Fetch.Default = 1 // a record batch per response
	if maxProcessing > 0 {
		config.Consumer.MaxProcessingTime = maxProcessing
	}
	c := joinWithCleanup(t, uniqueName("it.resume-longpoll"), TopicSubscription(topic), config)
	l := &deliveryLog{done: make(chan struct{})}
	l.record(c)
	first := []string{fmt.Sprintf("first-%d-0", quiet), fmt.Sprintf("first-%d-0", paused)}
	waitFor(t, 30*time.Second, "the first messages", func() bool { return l.hasAll(first) })

	if err := c.Pause(topic, paused); err != nil {
		t.Fatal(err)
	}
	// Batches of their own: a response brings one.
	var held []string
	for b := range 5 {
		prefix := fmt.Sprintf("held%d", b)
		produceTo(t, topic, paused, prefix, 10)
		for i := range 10 {
			held = append(held, fmt.Sprintf("%s-%d-%d", prefix, paused, i))
		}
	}
	// The long poll in flight returns with the paused partition's first
	// batch (not handed out); the next one holds only the quiet partition.
	waitFor(t, 30*time.Second, "the long poll in flight to return", func() bool {
		return statsOf(t, c, paused).HighWaterMark > 1
	})
	if n := countDelivered(l, held); n != 0 {
		t.Fatalf("%d messages of the paused partition handed out", n)
	}

	if err := c.Resume(topic, paused); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	const deadline = maxWait / 4
	if !poll(deadline, func() bool { return l.hasAll(held) }) {
		t.Fatalf("after Resume, %d of the %d held messages were handed out within %s (Consumer.MaxWaitTime %s)",
			countDelivered(l, held), len(held), deadline, maxWait)
	}
	t.Logf("after Resume, the %d held messages (5 record batches) were handed out in %s (Consumer.MaxWaitTime %s)",
		len(held), time.Since(start).Round(time.Millisecond), maxWait)
}
