package kafkaconsumer

// Batches of a share group's consumer (GroupProtocolShare with
// Config.BatchSize) on a real KRaft cluster of Kafka 4.2 or later: what
// the members hand out, a reader frozen past the lock, Close with batches
// in flight.

import (
	"errors"
	"sync"
	"testing"
	"time"
)

// shareBatchConfig is shareTestConfig set to batches of up to size.
func shareBatchConfig(size int) *Config {
	config := shareTestConfig()
	config.BatchSize = size
	return config
}

// expectNoBatch fails the test if c hands out a batch before until.
func expectNoBatch(t *testing.T, c Consumer, until time.Time) {
	t.Helper()
	timer := time.NewTimer(time.Until(until))
	defer timer.Stop()
	for {
		select {
		case b := <-c.Batches():
			t.Errorf("received a batch of %d record(s) of %s/%d from offset %d: every record was accepted", len(b.Messages), b.Topic, b.Partition, b.Messages[0].Offset)
		case <-timer.C:
			return
		}
	}
}

// TestIntegrationShareGroupBatches: two members set to batches of 8 on a
// topic of two partitions: every batch holds 1 to 8 records of one
// partition in offset order, every record comes in exactly one batch,
// Messages is closed, and AckBatch accepts them: a third member gets
// none of them after the lock (15 s for the group) has passed.
func TestIntegrationShareGroupBatches(t *testing.T) {
	shareGroupTest(t)
	topic := newTopic(t, 2)
	group := uniqueName("share-batches")
	setShareGroupConfig(t, group, "share.record.lock.duration.ms", "15000")
	const n, size = 300, 8
	values := produce(t, newTestClient(t), topic, "batch", n)
	var mu sync.Mutex
	got := make(map[string]int)
	batches := 0
	for m := 0; m < 2; m++ {
		c := joinKafka(t, group, TopicSubscription(topic), shareBatchConfig(size))
		if _, open := <-c.Messages(); open {
			t.Error("Messages of a share consumer set to batches is open")
		}
		errs := logErrors(c)
		done := make(chan struct{}) // closed when the reader below ends, at c's Close
		t.Cleanup(func() {
			_ = c.Close()
			<-done
			<-errs.done
			for _, err := range errs.errs {
				t.Errorf("Errors(): %s", err)
			}
		})
		go func() {
			defer close(done)
			for b := range c.Batches() {
				checkShareBatch(t, b, size)
				mu.Lock()
				batches++
				for _, msg := range b.Messages {
					got[string(msg.Value)]++
				}
				mu.Unlock()
				c.AckBatch(b)
			}
		}()
	}
	waitFor(t, 60*time.Second, "every record received", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == n
	})
	ackedBy := time.Now()
	third := joinKafka(t, group, TopicSubscription(topic), shareBatchConfig(size))
	expectNoBatch(t, third, ackedBy.Add(shareLockForFaults+5*time.Second))
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d records in %d batches", n, batches)
	for _, v := range values {
		switch got[v] {
		case 0:
			t.Errorf("%s lost", v)
		case 1:
		default:
			t.Errorf("%s received %d times (accepted at once, within its lock)", v, got[v])
		}
	}
}

// checkShareBatch checks that b holds 1 to size records of its partition,
// in offset order.
func checkShareBatch(t *testing.T, b *Batch, size int) {
	if len(b.Messages) == 0 || len(b.Messages) > size {
		t.Errorf("a batch of %d records, want 1 to %d", len(b.Messages), size)
	}
	for i, msg := range b.Messages {
		if msg.Topic != b.Topic || msg.Partition != b.Partition {
			t.Errorf("a record of %s/%d in a batch of %s/%d", msg.Topic, msg.Partition, b.Topic, b.Partition)
		}
		if i > 0 && msg.Offset <= b.Messages[i-1].Offset {
			t.Errorf("offset %d after %d in a batch of %s/%d", msg.Offset, b.Messages[i-1].Offset, b.Topic, b.Partition)
		}
	}
}

// TestIntegrationShareGroupBatchFrozenPastLock: a member set to batches
// whose reader does not read until its records' lock (15 s) expired:
// the batch is not handed out, ErrShareLockExpired says so on Errors(),
// and the first batch the reader then receives holds only records
// delivered again (delivery count 2 or more), under a lock that holds.
func TestIntegrationShareGroupBatchFrozenPastLock(t *testing.T) {
	shareGroupTest(t)
	topic := newTopic(t, 1)
	group := uniqueName("share-batch-frozen")
	setShareGroupConfig(t, group, "share.record.lock.duration.ms", "15000")
	const n = 10
	produce(t, newTestClient(t), topic, "frozen", n)
	a := joinKafka(t, group, TopicSubscription(topic), shareBatchConfig(n))
	share, _ := ShareOf(a)
	deadline := time.After(shareLockForFaults + 30*time.Second)
	for expired := false; !expired; {
		select {
		case err := <-a.Errors():
			if expired = errors.Is(err, ErrShareLockExpired); !expired {
				t.Errorf("Errors(): %s", err)
			}
		case <-deadline:
			t.Fatalf("no ErrShareLockExpired within %s of a reader that did not read", shareLockForFaults+30*time.Second)
		}
	}
	got := make(map[int64]bool)
	deadline = time.After(shareLockForFaults + 30*time.Second)
	for len(got) < n {
		select {
		case b := <-a.Batches():
			checkShareBatch(t, b, n)
			for _, msg := range b.Messages {
				if d := share.DeliveryCount(msg); d < 2 {
					t.Errorf("offset %d handed out with delivery count %d after its first lock expired, want 2 or more", msg.Offset, d)
				}
				got[msg.Offset] = true
			}
			a.AckBatch(b)
		case err := <-a.Errors():
			t.Logf("Errors(): %s", err)
		case <-deadline:
			t.Fatalf("%d of %d records received again within %s", len(got), n, shareLockForFaults+30*time.Second)
		}
	}
}

// TestIntegrationShareGroupBatchCloseInFlight: a member set to batches
// holds a batch handed out (one record acked with Ack, the others not)
// and records not handed out yet; Close waits MaxProcessingTime for
// the batch, no longer than that + 5 s, and releases everything not
// acked: another member then receives all of it at once, the records of
// the batch with delivery count 2, never the acked one.
func TestIntegrationShareGroupBatchCloseInFlight(t *testing.T) {
	needCluster(t)
	shareGroupTestSerial(t)
	verifyNoClusterLeaks(t)
	topic := newTopic(t, 1)
	group := uniqueName("share-batch-close")
	const n = 10
	produce(t, newTestClient(t), topic, "close", n)
	config := shareBatchConfig(4)
	config.ChannelBufferSize = 4
	a, err := Join(group, TopicSubscription(topic), "", config)
	if err != nil {
		t.Fatal(err)
	}
	var b *Batch
	select {
	case b = <-a.Batches():
	case <-time.After(30 * time.Second):
		t.Fatal("no batch within 30 s")
	}
	a.Ack(b.Messages[0])

	began := time.Now()
	if err := a.Close(); err != nil {
		t.Errorf("Close = %s", err)
	}
	took := time.Since(began)
	if len(b.Messages) > 1 && (took < config.MaxProcessingTime || took > config.MaxProcessingTime+5*time.Second) {
		t.Errorf("Close took %s with %d records of a batch not acked, want MaxProcessingTime (%s) to MaxProcessingTime + 5 s", took, len(b.Messages)-1, config.MaxProcessingTime)
	}
	for err := range a.Errors() {
		t.Errorf("a: Errors(): %s", err)
	}

	got := receiveReleased(t, group, topic, n-1)
	if _, ok := got[b.Messages[0].Offset]; ok {
		t.Errorf("the record acked before Close (offset %d) came again", b.Messages[0].Offset)
	}
	for _, msg := range b.Messages[1:] {
		if got[msg.Offset] != 2 {
			t.Errorf("offset %d, handed out in a batch and not acked, came with delivery count %d, want 2", msg.Offset, got[msg.Offset])
		}
	}
}
