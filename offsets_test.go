package kafkaconsumer

import (
	"errors"
	"maps"
	"sync"
	"testing"

	"github.com/IBM/sarama"
)

// TestOffsetStoreBookkeeping: what the store keeps for a partition between
// commits, without Kafka.
func TestOffsetStoreBookkeeping(t *testing.T) {
	t.Parallel()
	s := testOffsets()
	tp := topicPartition{topic: "t", partition: 0}
	if got := s.next(tp); got != -1 {
		t.Fatalf("next of an unknown partition = %d, want -1", got)
	}
	if err := s.reserve(tp); err != nil {
		t.Fatal(err)
	}
	if err := s.reserve(tp); err != nil {
		t.Fatalf("a second reserve (a retry) = %v, want nil", err)
	}
	s.set(tp, 10)
	if got, n := s.next(tp), s.uncommitted(); got != 10 || n != 0 {
		t.Fatalf("after set(10): next %d, %d uncommitted; want 10 and 0 (it is the committed offset)", got, n)
	}
	s.mark(tp, 12)
	s.mark(tp, 11) // back: ignored
	if got, n := s.next(tp), s.uncommitted(); got != 12 || n != 1 {
		t.Fatalf("after marks 12 and 11: next %d, %d uncommitted; want 12 and 1", got, n)
	}
	s.reset(tp, 5) // out of range: start again lower
	if got := s.next(tp); got != 5 {
		t.Fatalf("after reset(5): next %d, want 5", got)
	}

	closed := s.close(tp)
	select {
	case <-closed:
		t.Fatal("close returned a closed channel with offset 5 not committed")
	default:
	}
	s.mark(tp, 20) // after close: ignored
	if got := s.next(tp); got != 5 {
		t.Fatalf("a mark after close moved next to %d", got)
	}
	if !s.closing(tp) || !errors.Is(s.reserve(tp), errAlreadyManaged) {
		t.Fatal("a new partition manager could reserve the partition while the old one's final commit is pending")
	}

	clean := topicPartition{topic: "t", partition: 1}
	_ = s.reserve(clean)
	s.set(clean, 3)
	select {
	case <-s.close(clean):
	default:
		t.Fatal("close of a partition with nothing to commit did not return at once")
	}
	if err := s.reserve(clean); err != nil {
		t.Fatalf("reserve after a clean close = %v", err)
	}
}

// TestIntegrationOffsetStoreRoundTrip: the store reads and commits offsets
// as sarama's offset manager does, which the original library and sarama's
// ConsumerGroup use: what one commits the other reads, on the real cluster.
func TestIntegrationOffsetStoreRoundTrip(t *testing.T) {
	needCluster(t)
	t.Parallel()
	client := newTestClient(t)
	admin := newTestAdmin(t, client)
	topic, group := uniqueName("kcstore"), uniqueName("kcstore")
	createTopic(t, admin, topic, 4)
	var (
		mu       sync.Mutex
		reported []error
	)
	s := newOffsetStore(client, group, func(_ topicPartition, err error) {
		mu.Lock()
		reported = append(reported, err)
		mu.Unlock()
	})
	tps := make([]topicPartition, 4)
	for p := range tps {
		tps[p] = topicPartition{topic: topic, partition: int32(p)}
	}

	// Nothing committed: -1 for each, in one request.
	got, err := s.fetch(tps)
	if err != nil || len(got) != 4 {
		t.Fatalf("fetch of a new group = %v, %v; want 4 partitions", got, err)
	}
	for tp, o := range got {
		if o != -1 {
			t.Fatalf("committed offset of %v in a new group = %d, want -1", tp, o)
		}
	}

	// Committed by sarama's offset manager, read by the store.
	commitOffsets(t, client, group, topic, map[int32]int64{0: 7})
	if got, err = s.fetch(tps[:1]); err != nil || got[tps[0]] != 7 {
		t.Fatalf("the store read %v, %v after sarama committed 7", got, err)
	}

	// Committed by the store in one round, read by sarama's.
	if got, err = s.fetch(tps); err != nil {
		t.Fatal(err)
	}
	for p, tp := range tps[:3] {
		if err := s.reserve(tp); err != nil {
			t.Fatal(err)
		}
		s.set(tp, got[tp])
		s.mark(tp, int64(10+p))
	}
	s.commitRound()
	if n := s.uncommitted(); n != 0 {
		t.Fatalf("%d partitions uncommitted after a round", n)
	}
	want := map[int32]int64{0: 10, 1: 11, 2: 12, 3: -1}
	if c := committedOffsets(t, client, group, topic); !maps.Equal(c, want) {
		t.Fatalf("committed %v, want %v", c, want)
	}
	om, err := sarama.NewOffsetManagerFromClient(group, client)
	if err != nil {
		t.Fatal(err)
	}
	pom, err := om.ManagePartition(topic, 1)
	if err != nil {
		t.Fatal(err)
	}
	if next, _ := pom.NextOffset(); next != 11 {
		t.Fatalf("sarama's offset manager reads %d, want 11", next)
	}
	pom.AsyncClose()
	_ = om.Close()

	// A close waits for the round that commits its last mark.
	s.mark(tps[2], 20)
	closed := s.close(tps[2])
	s.commitRound()
	select {
	case <-closed:
	default:
		t.Fatal("the round that committed the last mark did not end the close")
	}
	if c := committedOffsets(t, client, group, topic); c[2] != 20 {
		t.Fatalf("committed %d for partition 2, want 20", c[2])
	}

	mu.Lock()
	defer mu.Unlock()
	if len(reported) != 0 {
		t.Fatalf("errors reported: %v", reported)
	}
}

// TestIntegrationOffsetStoreReportsFailedCommit: a commit that Kafka
// refuses goes to the store's report, for Errors() and Metrics, and stays
// to commit.
func TestIntegrationOffsetStoreReportsFailedCommit(t *testing.T) {
	needCluster(t)
	t.Parallel()
	client := newTestClient(t)
	tp := topicPartition{topic: uniqueName("kcstore-missing"), partition: 0}
	var reported []error
	s := newOffsetStore(client, uniqueName("kcstore"), func(got topicPartition, err error) {
		if got == tp {
			reported = append(reported, err)
		}
	})
	_ = s.reserve(tp)
	s.set(tp, -1)
	s.mark(tp, 5)
	s.commitRound() // the committer's goroutine; report runs on it
	if len(reported) != 1 || !errors.Is(reported[0], sarama.ErrUnknownTopicOrPartition) {
		t.Fatalf("reported %v for a commit to a topic that does not exist; want ErrUnknownTopicOrPartition", reported)
	}
	if n := s.uncommitted(); n != 1 {
		t.Fatalf("%d uncommitted after the failed round, want 1 (tried again next round)", n)
	}
}
