package kafkaconsumer

// Offsets: the offset store, the start at the committed offset or at
// Offsets.Initial (committed before anything is handed out), an offset out
// of range, and a log that shrank below the position.

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer/internal/commitmark"
)

// TestOffsetStoreBookkeeping: what the store keeps for a partition between
// commits, without Kafka.
func TestOffsetStoreBookkeeping(t *testing.T) {
	t.Parallel()
	s := testOffsets()
	tp := TopicPartition{Topic: "t", Partition: 0}
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

	clean := TopicPartition{Topic: "t", Partition: 1}
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
	parallelClusterTest(t)
	client := newTestClient(t)
	admin := newTestAdmin(t, client)
	topic, group := uniqueName("kcstore"), uniqueName("kcstore")
	createTopic(t, admin, topic, 4)
	var (
		mu       sync.Mutex
		reported []error
	)
	s := newOffsetStore(client, group, func(_ TopicPartition, err error) {
		mu.Lock()
		reported = append(reported, err)
		mu.Unlock()
	})
	tps := make([]TopicPartition, 4)
	for p := range tps {
		tps[p] = TopicPartition{Topic: topic, Partition: int32(p)}
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
	parallelClusterTest(t)
	client := newTestClient(t)
	tp := TopicPartition{Topic: uniqueName("kcstore-missing"), Partition: 0}
	var reported []error
	s := newOffsetStore(client, uniqueName("kcstore"), func(got TopicPartition, err error) {
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

func TestIntegrationOffsetsNewestSkipsOldMessages(t *testing.T) {
	parallelClusterTest(t)
	topic4 := newTopic(t, 4)
	client := newTestClient(t)
	group := uniqueName("it.newest")
	old := produce(t, client, topic4, group+".old", 20)

	config := testConfig()
	config.Offsets.Initial = sarama.OffsetNewest
	c := join(t, group, TopicSubscription(topic4), config)
	col := collect(c, nil)
	waitFor(t, 30*time.Second, "all partitions to be consuming", func() bool {
		n := 0
		for _, s := range c.Stats() {
			if s.HighWaterMark >= 0 {
				n++
			}
		}
		return n == 4
	})
	fresh := produce(t, client, topic4, group+".new", 20)
	waitFor(t, 30*time.Second, "the new messages", func() bool { return col.has(fresh) })
	col.close(t)
	if n := col.received(old); n != 0 {
		t.Errorf("received %d messages produced before joining with OffsetNewest", n)
	}
}

// committedOutOfRange creates a topic of one partition with 20 messages,
// "gone" (10) then "kept" (10), commits offset 2 for group, and deletes the
// first 15 messages as retention would: the committed offset falls out of
// range. It returns the topic and the values.
func committedOutOfRange(t *testing.T, client sarama.Client, admin sarama.ClusterAdmin, prefix, group string) (topic string, gone, kept []string) {
	t.Helper()
	topic = uniqueName(prefix)
	createTopic(t, admin, topic, 1)
	gone = produce(t, client, topic, "gone", 10)
	commitOffsets(t, client, group, topic, map[int32]int64{0: 2})
	kept = produce(t, client, topic, "kept", 10)
	if err := admin.DeleteRecords(topic, map[int32]int64{0: 15}); err != nil {
		t.Fatalf("delete records: %s", err)
	}
	return topic, gone, kept
}

func TestIntegrationCommittedOffsetOutOfRange(t *testing.T) {
	parallelClusterTest(t)
	client := newTestClient(t)
	admin := newTestAdmin(t, client)
	group := uniqueName("it.retention")
	topic, gone, kept := committedOutOfRange(t, client, admin, "it-retention", group)

	c := join(t, group, TopicSubscription(topic), nil) // Offsets.Initial: oldest
	col := collect(c, nil)
	waitFor(t, 30*time.Second, "the messages still available", func() bool { return col.has(kept[5:]) })
	col.close(t)
	if n := col.received(gone); n != 0 {
		t.Errorf("received %d deleted messages", n)
	}
	checkCommitted(t, client, group, map[string]map[int32]int64{topic: {0: 15}}, map[string]int{topic: 5})
}

// TestIntegrationNewestStartIsCommitted: with Offsets.Initial = OffsetNewest, a
// partition without a committed offset starts at the newest offset. That
// start must be committed: otherwise, when the instance stops before any
// ack, the next owner starts at the then-newest offset, and skips what was
// produced in between.
func TestIntegrationNewestStartIsCommitted(t *testing.T) {
	parallelClusterTest(t)
	debugLogs(t)
	client := newTestClient(t)
	admin := newTestAdmin(t, client)
	topic := uniqueName("rv-newest")
	createTopic(t, admin, topic, 2)
	group := uniqueName("rv.newest")
	before := produce(t, client, topic, "before", 10)
	start := newestOffsets(t, client, topic) // nothing is produced from here until A closed

	config := testConfig()
	config.Offsets.Initial = sarama.OffsetNewest
	a := joinWithCleanup(t, group, TopicSubscription(topic), config)
	colA := collect(a, func(*sarama.ConsumerMessage) bool { return false })
	waitConsuming(t, a, 2, "A")
	colA.close(t)
	if n := colA.received(before); n != 0 {
		t.Errorf("A (OffsetNewest) received %d messages produced before it joined", n)
	}

	committed := waitCommitted(t, client, group, topic, start)
	for p, o := range start {
		if committed[p] != o {
			t.Errorf("%s/%d: after A closed, the committed offset is %d; want %d, the newest offset A started at (-1: nothing committed)",
				topic, p, committed[p], o)
		}
	}

	after := produce(t, client, topic, "after", 10)
	b := joinWithCleanup(t, group, TopicSubscription(topic), config)
	colB := collect(b, nil)
	waitConsuming(t, b, 2, "B")
	got := waitReceived(colB, after, 10*time.Second)
	stats := b.Stats()
	colB.close(t)
	if got != len(after) {
		t.Errorf("B received %d of the %d messages produced after A started at %v and closed: %d lost (B's stats: %+v)",
			got, len(after), start, len(after)-got, stats)
	}
	if n := colB.received(before); n != 0 {
		t.Errorf("B received %d messages produced before the group started", n)
	}
	checkDeregistered(t, group, a, b)
}

// TestIntegrationNewestResetIsCommitted: with Offsets.Initial = OffsetNewest, a
// committed offset that fell out of range makes the partition restart at the
// newest offset. That new start must be committed: sarama's ResetOffset
// ignores an offset above the stored one, so the old, out-of-range offset
// stays committed, and the next owner restarts at its own newest offset,
// skipping what was produced in between.
func TestIntegrationNewestResetIsCommitted(t *testing.T) {
	parallelClusterTest(t)
	debugLogs(t)
	client := newTestClient(t)
	admin := newTestAdmin(t, client)
	group := uniqueName("rv.reset")
	topic, gone, kept := committedOutOfRange(t, client, admin, "rv-reset", group)
	newest := newestOffsets(t, client, topic)[0] // 20; nothing is produced from here until A closed

	config := testConfig()
	config.Offsets.Initial = sarama.OffsetNewest
	a := joinWithCleanup(t, group, TopicSubscription(topic), config)
	colA := collect(a, func(*sarama.ConsumerMessage) bool { return false })
	waitConsuming(t, a, 1, "A")
	colA.close(t)
	if n := colA.received(gone) + colA.received(kept); n != 0 {
		t.Errorf("A (OffsetNewest) received %d messages produced before it joined", n)
	}

	if committed := waitCommitted(t, client, group, topic, map[int32]int64{0: newest})[0]; committed != newest {
		t.Errorf("%s/0: after A closed, the committed offset is %d; want %d, the newest offset A restarted at when the committed 2 was out of range",
			topic, committed, newest)
	}

	fresh := produce(t, client, topic, "fresh", 5)
	b := joinWithCleanup(t, group, TopicSubscription(topic), config)
	colB := collect(b, nil)
	waitConsuming(t, b, 1, "B")
	got := waitReceived(colB, fresh, 10*time.Second)
	stats := b.Stats()
	colB.close(t)
	if got != len(fresh) {
		t.Errorf("B received %d of the %d messages produced after A restarted at offset %d and closed: %d lost (B's stats: %+v)",
			got, len(fresh), newest, len(fresh)-got, stats)
	}
	if n := colB.received(gone) + colB.received(kept); n != 0 {
		t.Errorf("B received %d messages produced before the group restarted at %d", n, newest)
	}
	checkDeregistered(t, group, a, b)
}

// TestIntegrationLogShrinksBelowPosition: a partition's log shrinks below the
// position its partition manager consumed up to, here because the topic is
// deleted and created again while the partition manager lives on. The
// manager must start over at Offsets.Initial on the new log, not wait for
// the new log to grow past the old position.
//
// The consumer manager would stop the partition manager when the topic
// disappears from ZooKeeper; to keep it alive, the test blocks the manager
// goroutine in its first OnRebalance call, made after it started the
// partition manager (no rebalance proceeds until OnRebalance returns).
// The new log's 5 messages must all arrive.
func TestIntegrationLogShrinksBelowPosition(t *testing.T) {
	parallelClusterTest(t)
	debugLogs(t)
	client := newTestClient(t)
	admin := newTestAdmin(t, client)
	topic := uniqueName("rv-shrink")
	createTopic(t, admin, topic, 1)
	group := uniqueName("rv.shrink")
	old := produce(t, client, topic, "old", 20)

	release := make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	entered := make(chan Rebalance, 1)
	var calls atomic.Int32
	config := testConfig() // Offsets.Initial: oldest
	config.OnRebalance = func(r Rebalance) {
		if calls.Add(1) == 1 {
			entered <- r
			<-release
		}
	}
	c := join(t, group, TopicSubscription(topic), config)
	// Close must not wait for a blocked OnRebalance, whatever happens.
	t.Cleanup(func() {
		unblock()
		_ = c.Close()
	})
	errs := logErrors(c)
	col := collect(c, nil)

	select {
	case r := <-entered:
		if len(r.Assigned) != 1 {
			t.Fatalf("first OnRebalance = %+v; want the topic's partition assigned", r)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("OnRebalance was not called within 30s")
	}
	waitFor(t, 30*time.Second, "the 20 messages to be received", func() bool { return col.has(old) })
	waitFor(t, 30*time.Second, "the 20 acks to show as Committed 20", func() bool {
		stats := c.Stats()
		return len(stats) == 1 && stats[0].Committed == 20
	})

	if err := admin.DeleteTopic(topic); err != nil {
		t.Fatalf("delete topic %s: %s", topic, err)
	}
	waitFor(t, 30*time.Second, "the topic to be gone from the cluster", func() bool {
		topics, err := admin.ListTopics()
		if err != nil {
			t.Fatalf("list topics: %s", err)
		}
		_, ok := topics[topic]
		return !ok
	})
	// A fresh client: the first one cached the old topic's metadata.
	producerClient := recreateTopic(t, admin, topic)
	fresh := produce(t, producerClient, topic, "fresh", 5)

	got := waitReceived(col, fresh, 30*time.Second)
	stats := c.Stats()
	unblock()
	col.close(t)
	<-errs.done
	t.Logf("Errors: %s", errs.summary())
	if got != len(fresh) {
		t.Errorf("received %d of the %d messages produced to the topic created again (offsets 0-%d of the new log) within 30s: %d lost; stats: %+v",
			got, len(fresh), len(fresh)-1, len(fresh)-got, stats)
	}
	if n := calls.Load(); n < 1 {
		t.Errorf("OnRebalance called %d times", n)
	}
	checkDeregistered(t, group, c)
}

// recreateTopic creates topic again with one partition once its deletion
// completed, and returns a fresh client that sees the new topic.
func recreateTopic(t *testing.T, admin sarama.ClusterAdmin, topic string) sarama.Client {
	t.Helper()
	waitFor(t, 30*time.Second, "the topic to be created again", func() bool {
		err := admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1}, false)
		var topicErr *sarama.TopicError
		if errors.As(err, &topicErr) && (topicErr.Err == sarama.ErrTopicAlreadyExists || topicErr.Err == sarama.ErrInvalidTopic) {
			return false // its deletion is still being completed
		}
		if err != nil {
			t.Fatalf("create topic %s again: %s", topic, err)
		}
		return true
	})
	client := newTestClient(t)
	waitFor(t, 30*time.Second, "the new topic's partition to have a leader", func() bool {
		if err := client.RefreshMetadata(topic); err != nil {
			return false
		}
		_, err := client.Leader(topic, 0)
		return err == nil
	})
	return client
}

// TestIntegrationFinalCommitDoesNotOutliveClaim: a partition whose final
// commit cannot be made (its topic was deleted: UNKNOWN_TOPIC_OR_PARTITION)
// stops, and its offset must leave the offset store with its claim. It
// stayed, retried in every round: an error a round, a new partition
// manager of the same partition that waited (the store refused it), and,
// once the topic was created again, the old offset committed onto the new
// topic, where the new partition manager started: it skipped the new
// topic's first messages.
func TestIntegrationFinalCommitDoesNotOutliveClaim(t *testing.T) {
	parallelClusterTest(t)
	debugLogs(t)
	client := newTestClient(t)
	admin := newTestAdmin(t, client)
	topic := uniqueName("it-outlive")
	createTopic(t, admin, topic, 1)
	group := uniqueName("it.outlive")
	config := testConfig()
	config.MaxProcessingTime = 200 * time.Millisecond
	config.Consumer.Offsets.AutoCommit.Interval = time.Hour // commits only when a partition stops
	c := joinWithCleanup(t, group, TopicSubscription(topic), config)
	errs := logErrors(c)
	col := collect(c, nil)
	produce(t, client, topic, "old", 20)
	waitFor(t, 30*time.Second, "the 20 messages to be acked", func() bool {
		stats := c.Stats()
		return len(stats) == 1 && stats[0].Acked == 20
	})

	if err := admin.DeleteTopic(topic); err != nil {
		t.Fatalf("delete topic %s: %s", topic, err)
	}
	waitFor(t, 30*time.Second, "the partition to stop", func() bool { return len(c.Stats()) == 0 })
	fresh := recreateTopic(t, admin, topic)
	values := produce(t, fresh, topic, "new", 30)
	got := waitReceived(col, values, 20*time.Second)
	col.close(t)
	<-errs.done
	t.Logf("Errors: %s", errs.summary())
	if got != len(values) {
		t.Errorf("received %d of the %d messages of the new topic", got, len(values))
	}
	if committed := committedOffsets(t, fresh, group, topic); committed[0] != 30 {
		t.Errorf("committed offset of the new topic: %d, want 30", committed[0])
	}
	if n := errs.count(sarama.ErrUnknownTopicOrPartition); n > 3 {
		t.Errorf("%d commit errors for the deleted topic; want the final commit's attempts only", n)
	}
}

// TestCommitRequestsSplitBySize: a round's OffsetCommit is split so that
// the batch of records that the coordinator writes for one request to the
// offsets topic (whose size limit is 1 MB by default) stays below
// maxCommitBytes. One request for every dirty partition failed every
// round with INVALID_COMMIT_OFFSET_SIZE past about 7,000-13,000
// partitions.
func TestCommitRequestsSplitBySize(t *testing.T) {
	t.Parallel()
	store := testOffsets()
	store.group = strings.Repeat("g", 100)
	var tps []TopicPartition
	for i := range 40 {
		topic := fmt.Sprintf("%s.%03d", strings.Repeat("t", 120), i)
		for p := range int32(500) { // 20,000 partitions in all
			tps = append(tps, TopicPartition{Topic: topic, Partition: p})
		}
	}
	chunks := store.commitChunks(tps, nil)
	if len(chunks) < 2 {
		t.Fatalf("%d partitions of %d-byte topics in %d request(s); want them split", len(tps), len(tps[0].Topic), len(chunks))
	}
	seen := make(map[TopicPartition]bool)
	for i, chunk := range chunks {
		// What the coordinator writes per partition: a record of the key
		// (version, group, topic, partition) and the value (version,
		// offset, leader epoch, metadata, commit timestamp), with the
		// record's own framing: about 50 bytes more than the two names.
		written := 0
		for _, tp := range chunk {
			written += len(store.group) + len(tp.Topic) + len(commitmark.NextMark) + 50
			if seen[tp] {
				t.Fatalf("%s/%d in two requests", tp.Topic, tp.Partition)
			}
			seen[tp] = true
		}
		if written > maxCommitBytes {
			t.Errorf("request %d: %d bytes of records; want at most %d", i, written, maxCommitBytes)
		}
	}
	if len(seen) != len(tps) {
		t.Fatalf("%d of %d partitions in the requests", len(seen), len(tps))
	}
	if chunks := store.commitChunks(tps[:100], nil); len(chunks) != 1 {
		t.Errorf("100 partitions in %d requests; want 1", len(chunks))
	}
}

// TestIntegrationNewestStartWaitsForItsCommit: with Offsets.Initial =
// OffsetNewest, a partition without a committed offset must hand out
// nothing until its start is committed (else a stop before the first ack
// leaves nothing committed, and the next owner starts later, skipping what
// was handed out). It waited for a commit round, not for the round's
// success: with the rounds failing, it handed out at once.
func TestIntegrationNewestStartWaitsForItsCommit(t *testing.T) {
	parallelClusterTest(t)
	client := newTestClient(t)
	admin := newTestAdmin(t, client)
	topic := uniqueName("it-newest-wait")
	createTopic(t, admin, topic, 2)
	group := uniqueName("it.newest.wait")
	var failing atomic.Bool
	var failed atomic.Int32
	failing.Store(true)
	config := testConfig()
	config.Offsets.Initial = sarama.OffsetNewest
	hooks := &testHooks{commitRound: func() error {
		if failing.Load() {
			failed.Add(1)
			return errors.New("injected failure of the commit round")
		}
		return nil
	}}
	c := joinWithHooksCleanup(t, group, TopicSubscription(topic), config, hooks)
	var firstAt atomic.Int64 // when the first message was received
	col := collect(c, func(*sarama.ConsumerMessage) bool {
		firstAt.CompareAndSwap(0, time.Now().UnixNano())
		return true
	})
	waitFor(t, 30*time.Second, "both partitions to resolve their start", func() bool {
		stats := c.Stats()
		return len(stats) == 2 && stats[0].Committed >= 0 && stats[1].Committed >= 0
	})
	values := produce(t, client, topic, "v", 10)
	// While the rounds fail, nothing may be handed out: let a few more
	// rounds fail after the messages are in the partitions.
	after := failed.Load()
	waitFor(t, 30*time.Second, "three more failed commit rounds", func() bool { return failed.Load() >= after+3 })
	if at := firstAt.Load(); at != 0 {
		t.Errorf("a message was handed out while no commit round succeeded (the start is not committed)")
	}
	failing.Store(false)
	waitFor(t, 30*time.Second, "the messages once commits succeed", func() bool { return col.has(values) })
	col.close(t)
}

// TestCommitRequestCarriesRetention: every OffsetCommit request carries a
// retention of -1 (the broker's default), or Consumer.Offsets.Retention,
// whatever Config.Version: sarama lowers the request's version to the
// broker's highest, and Kafka 1.1 (version 3) and 2.0 (version 4) read
// the retention field, where 0 expires the offset at their next cleanup.
func TestCommitRequestCarriesRetention(t *testing.T) {
	for _, v := range []sarama.KafkaVersion{sarama.V1_1_0_0, sarama.V2_0_0_0, sarama.V2_8_0_0, sarama.V3_9_0_0} {
		conf := sarama.NewConfig()
		conf.Version = v
		s := &offsetStore{conf: conf, group: "group"}
		if got := s.commitRequest().RetentionTime; got != -1 {
			t.Errorf("Version %s: retention %d; want -1 (the broker's default)", v, got)
		}
		conf.Consumer.Offsets.Retention = 48 * time.Hour
		if got := s.commitRequest().RetentionTime; got != (48 * time.Hour).Milliseconds() {
			t.Errorf("Version %s, Retention 48h: retention %d ms; want %d", v, got, (48 * time.Hour).Milliseconds())
		}
	}
}

// TestIntegrationCommitLastProcessed: an instance with CommitLastProcessed
// commits the last processed offset, marked, from its very start (a start
// at offset 0 as -1); an instance without the setting that takes the
// partition over continues after it, and one with it after that, with
// nothing handed out twice or skipped.
func TestIntegrationCommitLastProcessed(t *testing.T) {
	parallelClusterTest(t)
	client := newTestClient(t)
	admin := newTestAdmin(t, client)
	topic := uniqueName("last-processed")
	createTopic(t, admin, topic, 1)
	t.Cleanup(func() { _ = admin.DeleteTopic(topic) })
	group := uniqueName("last-processed")
	last := testConfig()
	last.CommitLastProcessed = true
	last.Offsets.Initial = sarama.OffsetNewest

	committed := func() (int64, string) {
		t.Helper()
		resp, err := admin.ListConsumerGroupOffsets(group, map[string][]int32{topic: {0}})
		if err != nil {
			t.Fatal(err)
		}
		block := resp.GetBlock(topic, 0)
		if block == nil || !errors.Is(block.Err, sarama.ErrNoError) {
			t.Fatalf("committed offset of %s/0: %v", topic, block)
		}
		return block.Offset, block.Metadata
	}
	waitCommit := func(offset int64, metadata string) {
		t.Helper()
		var gotOffset int64
		var gotMetadata string
		if !poll(10*time.Second, func() bool {
			gotOffset, gotMetadata = committed()
			return gotOffset == offset && gotMetadata == metadata
		}) {
			t.Fatalf("committed %d %q; want %d %q", gotOffset, gotMetadata, offset, metadata)
		}
	}
	run := func(config *Config, prefix string, n int, before []string) []string {
		t.Helper()
		col := collect(join(t, group, TopicSubscription(topic), config), nil)
		waitConsuming(t, col.consumer, 1, prefix)
		values := produce(t, client, topic, prefix, n)
		if got := waitReceived(col, values, 30*time.Second); got != n {
			t.Errorf("%s: received %d of %d messages", prefix, got, n)
		}
		col.close(t)
		for _, v := range before {
			if c := col.count(v); c > 0 {
				t.Errorf("%s: %s, processed before, handed out again", prefix, v)
			}
		}
		for _, v := range values {
			if c := col.count(v); c > 1 {
				t.Errorf("%s: %s handed out %d times", prefix, v, c)
			}
		}
		return values
	}

	// The start (offset 0, Offsets.Initial newest) is committed as -1.
	col := collect(join(t, group, TopicSubscription(topic), last), nil)
	waitCommit(-1, commitmark.LastMark)
	values := produce(t, client, topic, "a", 10)
	if got := waitReceived(col, values, 30*time.Second); got != 10 {
		t.Errorf("received %d of 10 messages", got)
	}
	col.close(t)
	waitCommit(9, commitmark.LastMark)

	before := run(testConfig(), "b", 10, values)
	waitCommit(20, commitmark.NextMark)
	run(last, "c", 5, before)
	waitCommit(24, commitmark.LastMark)
}

// TestOffsetStoreBrokerWhileLookupsStop: broker() decides once whether
// lookups are stopped. It read the flag twice, to try the lock and to take
// it: set between the two reads (a Shutdown's context ending during a
// commit), no lock was taken and the deferred unlock killed the process
// ("fatal error: sync: unlock of unlocked mutex"); cleared between them,
// it locked twice and hung. The flag flips both ways here, to hit either
// within a second; each call must return within one.
func TestOffsetStoreBrokerWhileLookupsStop(t *testing.T) {
	t.Parallel()
	s := testOffsets()
	coordinator := sarama.NewBroker("127.0.0.1:1")
	s.coordinator = coordinator
	done := make(chan struct{})
	flipped := make(chan struct{})
	go func() {
		defer close(flipped)
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
				s.noLookup.Store(i%2 == 0)
			}
		}
	}()
	defer func() {
		close(done)
		<-flipped
	}()
	// The calls go on for a second; a call that has not returned after
	// 5 s is stuck.
	var made atomic.Int64
	calls := make(chan error)
	go func() {
		defer close(calls)
		for end := time.Now().Add(time.Second); time.Now().Before(end); {
			b, err := s.broker()
			made.Add(1)
			if err == nil && b != coordinator {
				err = fmt.Errorf("broker() = %v, not the coordinator", b)
			}
			if err != nil && !errors.Is(err, errNoLookup) {
				calls <- err
				return
			}
		}
	}()
	for last := int64(-1); ; {
		select {
		case err, ok := <-calls:
			if ok {
				t.Fatal(err)
			}
			return
		case <-time.After(5 * time.Second):
			if n := made.Load(); n == last {
				t.Fatalf("broker() did not return within 5 s, after %d calls: it locked its mutex twice", n)
			} else {
				last = n
			}
		}
	}
}

// metadataClient is a sarama.Client whose metadata knows topics; a
// refresh adds the topics of appearing (a topic created meanwhile), and
// Leader, for a topic it does not know, refreshes (as sarama's does, with
// retries: about a second each) and fails.
type metadataClient struct {
	sarama.Client
	topics    map[string]bool
	appearing []string
	refreshes int
	leaders   int
	broker    *sarama.Broker
}

func (c *metadataClient) Topics() ([]string, error) {
	var out []string
	for t := range c.topics {
		out = append(out, t)
	}
	return out, nil
}

func (c *metadataClient) RefreshMetadata(...string) error {
	c.refreshes++
	for _, t := range c.appearing {
		c.topics[t] = true
	}
	return nil
}

func (c *metadataClient) Leader(topic string, _ int32) (*sarama.Broker, error) {
	c.leaders++
	if !c.topics[topic] {
		c.refreshes++
		return nil, sarama.ErrUnknownTopicOrPartition
	}
	return c.broker, nil
}

func (c *metadataClient) Config() *sarama.Config {
	conf := sarama.NewConfig()
	conf.ApiVersionsRequest = false
	return conf
}

// TestListOffsetsRefreshesOnce: the batched Offsets.Initial of a round
// whose partitions include 200 of topics just deleted refreshes the
// metadata once, asks no leader of a topic it still does not know, and
// still resolves a topic created meanwhile. It asked sarama's Leader for
// each of them, which refreshed the metadata for each, one after the
// other: a new topic's partitions in the same round waited past 30 s on
// Kafka 4 (TestIntegrationBlacklistPicksUpNewTopics).
func TestListOffsetsRefreshesOnce(t *testing.T) {
	t.Parallel()
	broker := sarama.NewMockBroker(t, 1)
	defer broker.Close()
	broker.SetHandlerByMap(map[string]sarama.MockResponse{
		"OffsetRequest": sarama.NewMockOffsetResponse(t).SetOffset("new", 0, sarama.OffsetNewest, 7),
	})
	client := &metadataClient{topics: map[string]bool{}, appearing: []string{"new"}, broker: sarama.NewBroker(broker.Addr())}
	conf := sarama.NewConfig()
	conf.ApiVersionsRequest = false // the mock answers what it is told
	if err := client.broker.Open(conf); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = client.broker.Close() }()
	var tps []TopicPartition
	for p := range int32(200) {
		tps = append(tps, TopicPartition{Topic: "deleted", Partition: p})
	}
	tps = append(tps, TopicPartition{Topic: "new", Partition: 0})
	offsets := listOffsets(client, sarama.OffsetNewest, tps)
	if client.refreshes != 1 || client.leaders != 1 {
		t.Errorf("%d metadata refreshes and %d leader lookups, want 1 and 1 (the new topic's)", client.refreshes, client.leaders)
	}
	if got, ok := offsets[TopicPartition{Topic: "new", Partition: 0}]; !ok || got != 7 {
		t.Errorf("the new topic's offset: %d, %v; want 7", got, ok)
	}
}
