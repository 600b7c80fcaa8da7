package kafkaconsumer

// The shutdown of a share group's member with records in flight, on a
// real KRaft cluster of Kafka 4.2 or later: its bounds, what it releases,
// and no goroutine left.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// TestIntegrationShareGroupCloseInFlight: a member holds records handed
// out (one acked, one not) and some not handed out yet (its Messages
// channel is unbuffered); Close waits MaxProcessingTime for the one not acked,
// no longer than that + 5 s, releases everything it did not see acked,
// and leaves no goroutine; another member then receives every released
// record at once (long before the 30 s lock would have expired), with a
// delivery count of 2 for those handed out, and never the acked one.
func TestIntegrationShareGroupCloseInFlight(t *testing.T) {
	needCluster(t)
	shareGroupTestSerial(t)
	verifyNoClusterLeaks(t)
	topic := newTopic(t, 1)
	group := uniqueName("share-close")
	const n = 10
	produce(t, newTestClient(t), topic, "close", n)
	config := shareTestConfig()
	config.ChannelBufferSize = 2 // the fetch size: some records wait in the fetch loop, not handed out
	a, err := Join(group, TopicSubscription(topic), "", config)
	if err != nil {
		t.Fatal(err)
	}
	acked := receiveShare(t, a, 30*time.Second)
	a.Ack(acked)
	pending := receiveShare(t, a, 30*time.Second) // never acked
	waitFor(t, 10*time.Second, "records acquired and not handed out", func() bool {
		sc := a.(*shareConsumer)
		sc.mu.Lock()
		defer sc.mu.Unlock()
		for _, r := range sc.held {
			if !r.handedOut.Load() {
				return true
			}
		}
		return false
	})

	began := time.Now()
	if err := a.Close(); err != nil {
		t.Errorf("Close = %s", err)
	}
	took := time.Since(began)
	if took < config.MaxProcessingTime || took > config.MaxProcessingTime+5*time.Second {
		t.Errorf("Close took %s with a record not acked, want MaxProcessingTime (%s) to MaxProcessingTime + 5 s", took, config.MaxProcessingTime)
	}
	for err := range a.Errors() {
		t.Errorf("a: Errors(): %s", err)
	}

	got := receiveReleased(t, group, topic, n-1)
	if _, ok := got[acked.Offset]; ok {
		t.Errorf("the record acked before Close (offset %d) came again", acked.Offset)
	}
	if got[pending.Offset] != 2 {
		t.Errorf("the record handed out and not acked came with delivery count %d, want 2", got[pending.Offset])
	}
}

// receiveReleased joins a second member of group and receives and acks
// want records within 10 s (released at once by a Close): it returns
// their delivery counts by offset.
func receiveReleased(t *testing.T, group, topic string, want int) map[int64]int {
	t.Helper()
	b, shareB := joinShareT(t, group, topic)
	got := make(map[int64]int)
	deadline := time.After(10 * time.Second)
	for len(got) < want {
		select {
		case msg := <-b.Messages():
			got[msg.Offset] = shareB.DeliveryCount(msg)
			b.Ack(msg)
		case err := <-b.Errors():
			t.Errorf("second member: Errors(): %s", err)
		case <-deadline:
			t.Fatalf("the second member received %d records within 10 s, want the %d released ones: %v", len(got), want, got)
		}
	}
	return got
}

// shareGroupTestSerial is shareGroupTest without t.Parallel, for the
// tests that check for leaked goroutines (needCluster first).
func shareGroupTestSerial(t *testing.T) {
	t.Helper()
	if !testKafkaVersion().IsAtLeast(sarama.V2_4_0_0) {
		t.Skipf("CoordinatorKafka supports Kafka 2.4 and later, not %s", testKafkaVersion())
	}
	skipUnlessShareGroups(t)
}

// TestIntegrationShareGroupShutdownBound: Shutdown with records handed
// out and not acked returns once its ctx is done (not after
// MaxProcessingTime), with ctx's error, releasing them.
func TestIntegrationShareGroupShutdownBound(t *testing.T) {
	shareGroupTest(t)
	topic := newTopic(t, 1)
	produce(t, newTestClient(t), topic, "shutdown", 3)
	config := shareTestConfig()
	config.MaxProcessingTime = 30 * time.Second
	c, err := Join(uniqueName("share-shutdown"), TopicSubscription(topic), "", config)
	if err != nil {
		t.Fatal(err)
	}
	receiveShare(t, c, 30*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	began := time.Now()
	err = c.Shutdown(ctx)
	took := time.Since(began)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown = %v, want context.DeadlineExceeded", err)
	}
	if took > 500*time.Millisecond+5*time.Second {
		t.Errorf("Shutdown took %s, want its ctx's 500 ms + 5 s at most", took)
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close after Shutdown = %v, want nil (what completed)", err)
	}
}
