package kafkaconsumer

// A partition taken away from a share group's member while it holds
// records of it: the broker's assignor gives it to members that join,
// the member's fetch loop forgets it in its share session, and the member
// acknowledges the records it still holds afterwards.

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// TestIntegrationSharePartitionTakenAway: member A of a share group holds
// (unacknowledged) records of both partitions of a topic; members join
// until A's assignment loses a partition; then A acks every record it
// holds. Each ack counts, or is refused on A's Errors()
// (ErrShareAckRefused) and the record comes again to the others: a record
// A acked without a refusal never comes again (its lock, 45 s, expires
// meanwhile), every record is acked by someone, and A's Close returns.
// Half of the lost partition's records A releases instead: they come
// again to the others at once, not when their lock expires. A acks while
// its fetch loop waits to hand out more records, so that the acks go in
// a ShareAcknowledge, for a partition its share session forgot.
func TestIntegrationSharePartitionTakenAway(t *testing.T) {
	shareGroupTest(t)
	const lock = 45 * time.Second
	topic := newTopic(t, 2)
	group := uniqueName("share-moved")
	setShareGroupConfig(t, group, "share.record.lock.duration.ms", fmt.Sprint(lock.Milliseconds()))
	client := newTestClient(t)
	const n = 40
	values := produce(t, client, topic, "moved", n)

	a, _ := joinShareT(t, group, topic)
	errsA := logErrors(a)
	held := make(map[int32][]*sarama.ConsumerMessage) // A's, by partition
	acquiredBy := time.Now().Add(lock)                // a bound on when A's locks expire
	deadline := time.After(30 * time.Second)
	for total := 0; total < n; total++ {
		select {
		case msg := <-a.Messages():
			held[msg.Partition] = append(held[msg.Partition], msg)
		case <-deadline:
			t.Fatalf("A received %d of %d records in 30 s", total, n)
		}
	}
	if len(held) != 2 {
		t.Fatalf("A holds records of %d partitions, want both", len(held))
	}

	var others []*shareMembers // one member each, acking what it receives
	lost := int32(-1)
	for lost < 0 {
		if len(others) == 4 {
			t.Fatalf("A's assignment holds both partitions with %d other members", len(others))
		}
		others = append(others, startShareMembers(t, group, topic, 1, shareTestConfig, func(_ int, c Consumer, msg *sarama.ConsumerMessage) {
			c.Ack(msg)
		}))
		poll(10*time.Second, func() bool { lost = lostPartition(a, topic); return lost >= 0 })
	}
	t.Logf("A lost %s/%d when %d member(s) joined, %s before its locks expire", topic, lost, len(others), time.Until(acquiredBy).Round(time.Millisecond))
	if got := receivedBy(others); len(got) > 0 {
		t.Errorf("the others received %d records held by A before it acked them", len(got))
	}

	// Two records of the partition A kept, the second produced once A
	// received the first: the ShareFetch that brings the second was built
	// after A's assignment changed, so it forgot the lost partition in
	// A's share session.
	kept := 1 - lost
	for i := 0; i < 2; i++ {
		produceTo(t, topic, kept, fmt.Sprintf("probe%d", i), 1)
		select {
		case msg := <-a.Messages():
			a.Ack(msg)
		case <-time.After(30 * time.Second):
			t.Fatalf("A did not receive a record of %s/%d, the partition it kept, in 30 s", topic, kept)
		}
	}
	// A's fetch loop holds records it waits to hand out: its acks go in a
	// ShareAcknowledge of their own, not with a ShareFetch.
	produceTo(t, topic, kept, "moved-more", n)
	more := make([]string, n)
	for i := range more {
		more[i] = fmt.Sprintf("moved-more-%d-%d", kept, i)
	}
	waitFor(t, 30*time.Second, "A to hold records it waits to hand out", func() bool {
		return heldWithPrefix(a, "moved-more-") > 0
	})
	ackedAt := time.Now()
	t.Logf("A holds records it did not hand out, %s before its first locks expire", time.Until(acquiredBy).Round(time.Millisecond))
	shareA, _ := ShareOf(a)
	released := make(map[string]bool) // the second half of the lost partition's
	for p, msgs := range held {
		for i, msg := range msgs {
			if p == lost && i >= len(msgs)/2 {
				shareA.Release(msg)
				released[string(msg.Value)] = true
				continue
			}
			a.Ack(msg)
		}
	}
	waitFor(t, lock, "the records A released to come again, before their lock would have expired", func() bool {
		got := receivedBy(others)
		for v := range released {
			if got[v] < 2 {
				return false
			}
		}
		return true
	})
	if time.Now().After(acquiredBy) {
		t.Errorf("A's releases took effect after the lock expired at the latest: dropped?")
	}
	releasedIn := time.Since(ackedAt)
	var mu sync.Mutex
	gotA := make(map[string]bool) // what A receives from now on, and acks
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for msg := range a.Messages() {
			mu.Lock()
			gotA[string(msg.Value)] = true
			mu.Unlock()
			a.Ack(msg)
		}
	}()
	// The acks went out once A's Stats has nothing pending; the records
	// of the lost partition are counted nowhere, so wait for a refusal or
	// past the locks (a silently dropped ack shows as a redelivery).
	waitFor(t, lock+30*time.Second, "A's locks to expire, or its acks refused", func() bool {
		return time.Now().After(acquiredBy.Add(10*time.Second)) || errsA.count(ErrShareAckRefused) > 0
	})
	refused := errsA.matching(ErrShareAckRefused, fmt.Sprintf("%s/%d", topic, lost))
	if refused {
		waitFor(t, lock+30*time.Second, "the refused records of the lost partition to come again", func() bool {
			return len(receivedBy(others)) >= len(held[lost])
		})
	}
	waitFor(t, lock+30*time.Second, "the records produced later to be received", func() bool {
		got := receivedBy(others)
		mu.Lock()
		defer mu.Unlock()
		for _, v := range more {
			if _, ok := got[v]; !ok && !gotA[v] {
				return false
			}
		}
		return true
	})
	took := closeWithin(t, a, 30*time.Second)
	<-drained
	for _, o := range others {
		o.stop()
	}
	again := receivedBy(others) // value: delivery count
	for p, msgs := range held {
		for _, msg := range msgs {
			d, came := again[string(msg.Value)]
			switch {
			case released[string(msg.Value)]:
			case p == lost && refused && !came:
				t.Errorf("%s, of the lost partition, refused on A's Errors(), never came again: lost", msg.Value)
			case came && !(p == lost && refused):
				t.Errorf("%s of %s/%d, acked by A without a refusal, came again (delivery count %d): the ack was dropped silently", msg.Value, topic, p, d)
			}
		}
	}
	for _, o := range others {
		_, errs := o.snapshot()
		for _, err := range errs {
			t.Logf("the others' Errors(): %s", err)
		}
	}
	t.Logf("%d values; A acked or released %d+%d, the released came again in %s, +%s; refusal on A's Errors(): %v; %d came again; A's Close took %s; A: %s",
		len(values), len(held[0]), len(held[1]), releasedIn.Round(time.Millisecond), time.Since(ackedAt).Round(time.Millisecond), refused, len(again), took.Round(time.Millisecond), errsA.summary())
}

// receivedBy returns the values that members received, with their
// highest delivery count.
func receivedBy(members []*shareMembers) map[string]int {
	got := make(map[string]int)
	for _, m := range members {
		receipts, _ := m.snapshot()
		for _, r := range receipts {
			got[r.value] = max(got[r.value], r.delivery)
		}
	}
	return got
}

// heldWithPrefix returns how many records share consumer c holds (its
// fetch loop acquired, and no one acknowledged) whose value starts with
// prefix.
func heldWithPrefix(c Consumer, prefix string) int {
	sc := c.(*shareConsumer)
	sc.mu.Lock()
	defer sc.mu.Unlock()
	n := 0
	for _, r := range sc.held {
		if strings.HasPrefix(string(r.msg.Value), prefix) {
			n++
		}
	}
	return n
}

// lostPartition returns the partition of topic that c's assignment no
// longer holds (of 0 and 1), or -1 while it holds both.
func lostPartition(c Consumer, topic string) int32 {
	has := make(map[int32]bool)
	for _, s := range c.Stats() {
		if s.Topic == topic {
			has[s.Partition] = true
		}
	}
	switch {
	case has[0] && !has[1]:
		return 1
	case has[1] && !has[0]:
		return 0
	}
	return -1
}

// closeWithin closes c and returns how long it took, failing the test
// when it took more than bound.
func closeWithin(t *testing.T, c Consumer, bound time.Duration) time.Duration {
	t.Helper()
	began := time.Now()
	done := make(chan error, 1)
	go func() { done <- c.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Logf("Close = %s", err)
		}
	case <-time.After(bound):
		t.Fatalf("Close did not return within %s", bound)
	}
	return time.Since(began)
}

// matching reports whether an error of el wraps target and says text.
func (el *errorLog) matching(target error, text string) bool {
	el.mu.Lock()
	defer el.mu.Unlock()
	for _, err := range el.errs {
		if errors.Is(err, target) && strings.Contains(err.Error(), text) {
			return true
		}
	}
	return false
}
