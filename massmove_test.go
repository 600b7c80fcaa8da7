package kafkaconsumer

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gopkg.in/tomb.v1"
)

// TestIntegrationMassMoveReadsOffsetsTogether: when an instance joins a
// group whose partitions another instance still holds, its partitions are
// claimed one by one as the other releases them, each too late for the
// claim batch of its distribution, so each reads its committed offset
// alone. Those reads must go out together, not as one OffsetFetch per
// partition: the coordinator answers a connection's requests one at a
// time, so the last of many reads would wait for every other's round
// trip. The test holds B's first read until every partition of B's
// share is claimed: the others' reads must then go out in one request.
func TestIntegrationMassMoveReadsOffsetsTogether(t *testing.T) {
	parallelClusterTest(t)
	const partitions = 100
	topic := newTopic(t, partitions)
	client := newTestClient(t)
	group := uniqueName("rv.massmove")
	startGroupAt(t, client, group, topic)

	// A holds its releases until B waits on every claim of its share, so
	// that B's claim batch fails and each of B's partitions claims alone.
	gate := make(chan struct{})
	var openGate sync.Once
	defer openGate.Do(func() { close(gate) })
	hooksA := &testHooks{releasePartition: func(string, int32) error {
		<-gate
		return nil
	}}
	a := joinWithHooksCleanup(t, group, TopicSubscription(topic), testConfig(), hooksA)
	colA := collect(a, nil)
	waitAllClaimed(t, a, partitions, 30*time.Second, "A")

	var watched, requests, read atomic.Int32
	claimedB := make(chan struct{})
	hooksB := &testHooks{
		watchOwner: func(string, int32) error {
			watched.Add(1)
			return nil
		},
		fetchingOffsets: func(tps []TopicPartition) {
			if requests.Add(1) == 1 {
				// The first read waits until every partition of B's
				// share is claimed, and so its read asked for.
				select {
				case <-claimedB:
				case <-time.After(30 * time.Second):
				}
			}
			read.Add(int32(len(tps)))
		},
	}
	b := joinWithHooksCleanup(t, group, TopicSubscription(topic), testConfig(), hooksB)
	colB := collect(b, nil)
	waitFor(t, 30*time.Second, "B to wait on the claims of its share", func() bool { return watched.Load() >= partitions/2 })
	openGate.Do(func() { close(gate) })
	waitAllClaimed(t, b, partitions/2, 30*time.Second, "B, once A released its share")
	close(claimedB)
	waitFor(t, 30*time.Second, "B to read the committed offsets of its share", func() bool { return read.Load() >= partitions/2 })
	n := requests.Load()
	t.Logf("B read the committed offsets of %d partitions with %d OffsetFetch requests", read.Load(), n)
	if n > 3 {
		t.Errorf("B read the committed offsets of its %d partitions with %d OffsetFetch requests; want 2 (the first, and one of the reads that waited for it), or a retry more", partitions/2, n)
	}
	colB.close(t)
	colA.close(t)
	checkDeregistered(t, group, a, b)
}

// TestCommittedReads: reads that come while an OffsetFetch is in flight go
// out together in the next; a partition left out of the answer gets the
// request's error; a read whose partition manager dies returns at once.
func TestCommittedReads(t *testing.T) {
	t.Parallel()
	var running sync.WaitGroup
	defer running.Wait()
	release := make(chan struct{})
	var rounds [][]TopicPartition
	var mu sync.Mutex
	failed := errors.New("coordinator gone")
	r := newCommittedReads(&running, func(tps []TopicPartition) (map[TopicPartition]int64, error) {
		mu.Lock()
		rounds = append(rounds, tps)
		first := len(rounds) == 1
		mu.Unlock()
		if first {
			<-release
		}
		offsets := make(map[TopicPartition]int64)
		for _, tp := range tps {
			if tp.Partition != 9 {
				offsets[tp] = int64(tp.Partition) * 10
			}
		}
		return offsets, failed
	})
	type result struct {
		offset int64
		err    error
	}
	results := make([]chan result, 10)
	read := func(p int32) {
		results[p] = make(chan result, 1)
		go func() {
			offset, err := r.read(TopicPartition{"t", p}, nil)
			results[p] <- result{offset, err}
		}()
	}
	read(0)
	waitFor(t, 5*time.Second, "the first read to be sent", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(rounds) == 1
	})
	for p := int32(1); p < 10; p++ {
		read(p)
	}
	waitFor(t, 5*time.Second, "the other reads to wait", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.next != nil && len(r.next.tps) == 9
	})
	dying := make(chan struct{})
	close(dying)
	if _, err := r.read(TopicPartition{"t", 10}, dying); !errors.Is(err, tomb.ErrDying) {
		t.Errorf("read of a dying partition manager = %v; want tomb.ErrDying", err)
	}
	close(release)
	for p := int32(0); p < 10; p++ {
		got := <-results[p]
		switch {
		case p == 9 && !errors.Is(got.err, failed):
			t.Errorf("read of partition 9, left out of the answer = %d, %v; want the request's error", got.offset, got.err)
		case p != 9 && (got.err != nil || got.offset != int64(p)*10):
			t.Errorf("read of partition %d = %d, %v; want %d", p, got.offset, got.err, p*10)
		}
	}
	running.Wait()
	if len(rounds) != 2 || len(rounds[1]) != 10 {
		t.Errorf("requests %v; want 2, the second of the 9 reads that waited and the dying one's", rounds)
	}
}
