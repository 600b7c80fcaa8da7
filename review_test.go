package kafkaconsumer

// Real-cluster reproductions of defects found by a review. Each test fails
// on the code it was written against (see the comment of each for what it
// showed) and should pass once the defect is fixed.
//
// Set KAFKACONSUMER_REVIEW_LOG=1 to see the package's and sarama's log lines
// on stderr while they run (see reviewLogs).

import (
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/go-zookeeper/zk"
	"github.com/kafkaconsumer/kafkaconsumer/internal/testcluster"
)

// reviewLogs routes the package's and sarama's logs to stderr when
// KAFKACONSUMER_REVIEW_LOG is set, for investigation; otherwise it leaves
// the loggers untouched. Once set, they stay set for the rest of the test
// binary: restoring them would race with the goroutines that sarama leaves
// behind to close broker connections asynchronously.
func reviewLogs(t *testing.T) {
	t.Helper()
	if os.Getenv("KAFKACONSUMER_REVIEW_LOG") == "" {
		return
	}
	reviewLogsOnce.Do(func() {
		Logger = log.New(os.Stderr, "[kafkaconsumer] ", log.LstdFlags|log.Lmicroseconds)
		sarama.Logger = log.New(os.Stderr, "[sarama] ", log.LstdFlags|log.Lmicroseconds)
	})
}

var reviewLogsOnce sync.Once

// joinReview joins like join, and closes the consumer at the end of the test
// if the test did not (Close is idempotent), so that a failing test leaves
// nothing running.
func joinReview(t *testing.T, group string, subscription Subscription, config *Config) Consumer {
	t.Helper()
	c := join(t, group, subscription, config)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// waitConsuming waits until the consumer runs n partitions and every one of
// them is consuming (its partition consumer reported a high-water mark).
func waitConsuming(t *testing.T, c Consumer, n int, who string) {
	t.Helper()
	waitFor(t, 30*time.Second, fmt.Sprintf("%s to consume %d partitions", who, n), func() bool {
		stats := c.Stats()
		if len(stats) != n {
			return false
		}
		for _, s := range stats {
			if s.HighWaterMark < 0 {
				return false
			}
		}
		return true
	})
}

// waitReceived waits up to timeout until col received every one of values,
// and returns how many it received. Unlike waitFor it does not fail the
// test: the caller reports what was lost.
func waitReceived(col *collector, values []string, timeout time.Duration) int {
	poll(timeout, func() bool { return col.has(values) })
	return col.received(values)
}

// waitCommitted polls the group's committed offsets of topic for up to 5 s
// until they are want, and returns the last ones read. Close commits before
// it returns; the grace covers the coordinator's view catching up.
func waitCommitted(t testing.TB, client sarama.Client, group, topic string, want map[int32]int64) map[int32]int64 {
	t.Helper()
	var committed map[int32]int64
	poll(5*time.Second, func() bool {
		committed = committedOffsets(t, client, group, topic)
		same := len(committed) == len(want)
		for p, o := range want {
			same = same && committed[p] == o
		}
		return same
	})
	return committed
}

// errorLog records what a consumer reports on Errors until it is closed.
type errorLog struct {
	mu   sync.Mutex
	errs []error
	done chan struct{}
}

func logErrors(c Consumer) *errorLog {
	el := &errorLog{done: make(chan struct{})}
	go func() {
		defer close(el.done)
		for err := range c.Errors() {
			el.mu.Lock()
			el.errs = append(el.errs, err)
			el.mu.Unlock()
		}
	}()
	return el
}

// summary returns the number of errors and the distinct messages among them.
func (el *errorLog) summary() string {
	el.mu.Lock()
	defer el.mu.Unlock()
	distinct := make(map[string]int)
	var order []string
	for _, err := range el.errs {
		e := err.Error()
		if distinct[e] == 0 {
			order = append(order, e)
		}
		distinct[e]++
	}
	parts := make([]string, 0, len(order))
	for _, e := range order {
		parts = append(parts, fmt.Sprintf("%dx %q", distinct[e], e))
	}
	return fmt.Sprintf("%d errors: %s", len(el.errs), strings.Join(parts, "; "))
}

// count returns how many of the errors so far match target (errors.Is).
func (el *errorLog) count(target error) int {
	el.mu.Lock()
	defer el.mu.Unlock()
	n := 0
	for _, err := range el.errs {
		if errors.Is(err, target) {
			n++
		}
	}
	return n
}

// TestReviewNewestStartIsCommitted: with Offsets.Initial = OffsetNewest, a
// partition without a committed offset starts at the newest offset. That
// start must be committed: otherwise, when the instance stops before any
// ack, the next owner starts at the then-newest offset, and skips what was
// produced in between.
//
// On the code it was written against: nothing is committed (-1 for each
// partition) after A closes, and B receives none of the 10 messages.
func TestReviewNewestStartIsCommitted(t *testing.T) {
	needCluster(t)
	reviewLogs(t)
	verifyNoClusterLeaks(t)
	client := newTestClient(t)
	admin := newTestAdmin(t, client)
	topic := uniqueName("rv-newest")
	createTopic(t, admin, topic, 2)
	group := uniqueName("rv.newest")
	before := produce(t, client, topic, "before", 10)
	start := newestOffsets(t, client, topic) // nothing is produced from here until A closed

	config := testConfig()
	config.Offsets.Initial = sarama.OffsetNewest
	a := joinReview(t, group, TopicSubscription(topic), config)
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
	b := joinReview(t, group, TopicSubscription(topic), config)
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

// TestReviewNewestResetIsCommitted: with Offsets.Initial = OffsetNewest, a
// committed offset that fell out of range makes the partition restart at the
// newest offset. That new start must be committed: sarama's ResetOffset
// ignores an offset above the stored one, so the old, out-of-range offset
// stays committed, and the next owner restarts at its own newest offset,
// skipping what was produced in between.
//
// On the code it was written against: the committed offset after A closes
// is still 2, not 20, and B receives none of the 5 messages.
func TestReviewNewestResetIsCommitted(t *testing.T) {
	needCluster(t)
	reviewLogs(t)
	verifyNoClusterLeaks(t)
	client := newTestClient(t)
	admin := newTestAdmin(t, client)
	group := uniqueName("rv.reset")
	topic, gone, kept := committedOutOfRange(t, client, admin, "rv-reset", group)
	newest := newestOffsets(t, client, topic)[0] // 20; nothing is produced from here until A closed

	config := testConfig()
	config.Offsets.Initial = sarama.OffsetNewest
	a := joinReview(t, group, TopicSubscription(topic), config)
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
	b := joinReview(t, group, TopicSubscription(topic), config)
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

// TestReviewLogShrinksBelowPosition: a partition's log shrinks below the
// position its partition manager consumed up to, here because the topic is
// deleted and created again while the partition manager lives on. The
// manager must start over at Offsets.Initial on the new log, not wait for
// the new log to grow past the old position.
//
// The consumer manager would stop the partition manager when the topic
// disappears from ZooKeeper; to keep it alive, the test blocks the manager
// goroutine in its first OnRebalance call, made after it started the
// partition manager (no rebalance proceeds until OnRebalance returns).
//
// What happens on the code it was written against (seen in the logs with
// KAFKACONSUMER_REVIEW_LOG=1; Kafka 3.9 in ZooKeeper mode, where deleting
// and creating the topic again took about 0.3 s):
//
//   - The broker answers the partition consumer's next fetch with
//     UNKNOWN_TOPIC_OR_PARTITION. sarama abandons the subscription and
//     re-dispatches by itself after Consumer.Retry.Backoff (2 s); the
//     partition manager sees only the one error it forwards to Errors. The
//     partition consumer does not stop.
//   - By then the topic exists again. The partition consumer fetches offset
//     20 from the new, 5-message log, gets OFFSET_OUT_OF_RANGE and shuts
//     down ("Partition consumer stopped by itself; starting it again").
//   - The partition manager retries ConsumePartition at lastHandedOut+1 =
//     20, which sarama refuses (ErrOffsetOutOfRange: above the newest offset
//     5); restartAtInitial refuses the oldest offset 0 because it is not
//     above lastHandedOut 19, with the misleading "offset 20 out of range,
//     and 0 handed-out messages pending". This repeats every second (31
//     times in the 30 s, each also sent to Errors) and would go on until
//     the new log grows past offset 20, where consumption would resume: the
//     new log's first 20 messages would never be delivered. Stats meanwhile
//     show LastHandedOut 19, Committed 20, HighWaterMark -1. None of the 5
//     arrives.
func TestReviewLogShrinksBelowPosition(t *testing.T) {
	needCluster(t)
	reviewLogs(t)
	verifyNoClusterLeaks(t)
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
	waitFor(t, 30*time.Second, "the topic to be created again", func() bool {
		err := admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1}, false)
		var topicErr *sarama.TopicError
		if errors.As(err, &topicErr) && topicErr.Err == sarama.ErrTopicAlreadyExists {
			return false // its deletion is still being completed
		}
		if err != nil {
			t.Fatalf("create topic %s again: %s", topic, err)
		}
		return true
	})
	// A fresh client: the first one cached the old topic's metadata.
	producerClient := newTestClient(t)
	waitFor(t, 30*time.Second, "the new topic's partition to have a leader", func() bool {
		if err := producerClient.RefreshMetadata(topic); err != nil {
			return false
		}
		_, err := producerClient.Leader(topic, 0)
		return err == nil
	})
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

// TestReviewJoinRegistersLast: Join must connect to Kafka before it registers
// the instance in ZooKeeper. An instance that registers first and then
// cannot reach Kafka makes the group hand it a share of the partitions,
// which nobody consumes while sarama retries; then Join fails and the group
// rebalances again.
//
// The test points Join at a chroot of the test ZooKeeper that lists one
// Kafka broker at 127.0.0.1:1, where nothing listens, and watches the
// group's registrations while Join runs.
//
// On the code it was written against: Join registers the instance, fails to
// connect to Kafka, and deregisters it: the watch fires.
func TestReviewJoinRegistersLast(t *testing.T) {
	needCluster(t)
	skipKafkaDiscovery(t, "it fakes a broker registration in ZooKeeper")
	reviewLogs(t)
	verifyNoClusterLeaks(t)
	nodes, baseChroot, err := parseZookeeper(zookeeperPeers)
	if err != nil {
		t.Fatal(err)
	}
	conn, _, err := zk.Connect(nodes, 10*time.Second, zk.WithLogInfo(false), zk.WithLogger(zookeeperLogger{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)

	chroot := baseChroot + "/" + uniqueName("review-join")
	group := uniqueName("rv.join")
	t.Cleanup(func() {
		if err := deleteRecursive(conn, chroot); err != nil {
			t.Errorf("delete %s: %s", chroot, err)
		}
	})
	broker := []byte(`{"version":5,"host":"127.0.0.1","port":1,"jmx_port":-1,"timestamp":"0",` +
		`"endpoints":["PLAINTEXT://127.0.0.1:1"],"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"}}`)
	ids := chroot + "/consumers/" + group + "/ids"
	for _, node := range []struct {
		path string
		data []byte
	}{
		{chroot, nil},
		{chroot + "/brokers", nil},
		{chroot + "/brokers/ids", nil},
		{chroot + "/brokers/ids/1", broker},
		{chroot + "/brokers/topics", nil},
		{chroot + "/consumers", nil},
		{chroot + "/consumers/" + group, nil},
		{ids, nil},
	} {
		if _, err := conn.Create(node.path, node.data, 0, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatalf("create %s: %s", node.path, err)
		}
	}
	children, _, registrations, err := conn.ChildrenW(ids)
	if err != nil {
		t.Fatalf("watch %s: %s", ids, err)
	}
	if len(children) != 0 {
		t.Fatalf("%s has children before Join: %v", ids, children)
	}

	config := testConfig()
	config.Net.DialTimeout = 500 * time.Millisecond
	config.Metadata.Retry.Max = 1
	config.Metadata.Retry.Backoff = 10 * time.Millisecond
	began := time.Now()
	c, err := Join(group, TopicSubscription("rv-join-topic"), strings.Join(nodes, ",")+chroot, config)
	took := time.Since(began)
	if err == nil {
		_ = c.Close()
		t.Fatalf("Join with an unreachable Kafka succeeded (in %s)", took)
	}
	t.Logf("Join failed after %s: %s", took, err)
	if took > 15*time.Second {
		t.Errorf("Join took %s to fail; want it bounded by the sarama timeouts (about a second)", took)
	}

	// ZooKeeper delivers a watch event before the answer to any later
	// request that sees the change: after this Children call, the watch
	// channel holds the event if a registration was created meanwhile.
	left, _, err := conn.Children(ids)
	if err != nil {
		t.Fatalf("list %s: %s", ids, err)
	}
	if len(left) != 0 {
		t.Errorf("Join failed but left registrations in %s: %v", ids, left)
	}
	select {
	case ev := <-registrations:
		t.Errorf("Join registered the instance in %s before it failed to reach Kafka (watch fired: %s on %s), so the group would have rebalanced twice for an instance that never consumed",
			ids, ev.Type, ev.Path)
	default:
	}
	owners, _, err := conn.Children(chroot + "/consumers/" + group + "/owners")
	if err != nil && err != zk.ErrNoNode {
		t.Fatalf("list owners: %s", err)
	}
	if len(owners) != 0 {
		t.Errorf("Join failed but left partition claims: %v", owners)
	}
}

// deleteRecursive deletes path and everything below it; a missing node is
// not an error.
func deleteRecursive(conn *zk.Conn, path string) error {
	children, _, err := conn.Children(path)
	if err == zk.ErrNoNode {
		return nil
	}
	if err != nil {
		return err
	}
	for _, child := range children {
		if err := deleteRecursive(conn, path+"/"+child); err != nil {
			return err
		}
	}
	if err := conn.Delete(path, -1); err != nil && err != zk.ErrNoNode {
		return err
	}
	return nil
}

// ownerNode returns the instance ID in the owner node of a partition of
// group, or "" when there is none.
func ownerNode(t testing.TB, conn *zk.Conn, chroot, group, topic string, partition int32) string {
	t.Helper()
	data, _, err := conn.Get(fmt.Sprintf("%s/consumers/%s/owners/%s/%d", chroot, group, topic, partition))
	if errors.Is(err, zk.ErrNoNode) {
		return ""
	} else if err != nil {
		t.Fatalf("get owner of %s/%d: %s", topic, partition, err)
	}
	return string(data)
}

// waitAllClaimed waits until the consumer runs n partitions, each claimed.
func waitAllClaimed(t *testing.T, c Consumer, n int, timeout time.Duration, who string) {
	t.Helper()
	waitFor(t, timeout, fmt.Sprintf("%s to claim its %d partitions", who, n), func() bool { return allClaimed(c, n) })
}

// TestReviewFailedReleaseIsRetried: a release of a claim that fails once
// (a ZooKeeper connection blip at that moment, with the session alive) must
// be tried again. It was tried once and only logged: the owner node stayed,
// and the next owner waited on it for ever.
func TestReviewFailedReleaseIsRetried(t *testing.T) {
	needCluster(t)
	verifyNoClusterLeaks(t)
	reviewLogs(t)
	group := uniqueName("rv.release")
	var calls atomic.Int32
	config := testConfig()
	config.hooks = &testHooks{releasePartition: func(string, int32) error {
		if calls.Add(1) == 1 {
			return zk.ErrConnectionClosed // the first release fails
		}
		return nil
	}}
	a := joinReview(t, group, TopicSubscription("test.4"), config)
	colA := collect(a, nil)
	waitAllClaimed(t, a, 4, 30*time.Second, "A")

	b := joinReview(t, group, TopicSubscription("test.4"), nil)
	colB := collect(b, nil)
	waitAllClaimed(t, b, 2, 20*time.Second, "B, after A released 2 partitions with one failed release")
	if n := calls.Load(); n < 3 {
		t.Errorf("A tried %d releases; want 2 and a retry", n)
	}
	colB.close(t)
	colA.close(t)
	checkDeregistered(t, group, a, b)
}

// TestReviewOrphanClaimIsSwept: when the release of a claim keeps failing
// past the stop's deadline (ZooKeeper unreachable for longer), the
// partition manager gives up and reports ErrReleaseFailed; the consumer
// manager goes on trying, so that the claim goes once ZooKeeper answers.
func TestReviewOrphanClaimIsSwept(t *testing.T) {
	needCluster(t)
	verifyNoClusterLeaks(t)
	reviewLogs(t)
	group := uniqueName("rv.orphan")
	var failing atomic.Bool
	config := testConfig()
	config.MaxProcessingTime = 200 * time.Millisecond
	config.hooks = &testHooks{releasePartition: func(string, int32) error {
		if failing.Load() {
			return zk.ErrNoServer
		}
		return nil
	}}
	a := joinReview(t, group, TopicSubscription("test.4"), config)
	colA := collect(a, nil)
	errsA := logErrors(a)
	waitAllClaimed(t, a, 4, 30*time.Second, "A")

	failing.Store(true)
	b := joinReview(t, group, TopicSubscription("test.4"), nil)
	colB := collect(b, nil)
	waitFor(t, 20*time.Second, "A to report ErrReleaseFailed", func() bool { return errsA.count(ErrReleaseFailed) > 0 })
	conn, chroot := testZookeeper(t, zookeeperPeers)
	idA := a.(*consumerManager).instance.ID
	left := 0
	for p := int32(0); p < 4; p++ {
		if ownerNode(t, conn, chroot, group, "test.4", p) == idA {
			left++
		}
	}
	if left != 4 {
		t.Errorf("A's ID is on %d owner nodes after its failed releases; want 4 (2 kept, 2 left behind)", left)
	}

	failing.Store(false) // ZooKeeper answers again
	waitAllClaimed(t, b, 2, 10*time.Second, "B, once A's claims left behind are released")
	colB.close(t)
	colA.close(t)
	checkDeregistered(t, group, a, b)
}

// TestReviewClaimedFalseAfterSessionLoss: when the ZooKeeper session that
// held the claims is lost, Stats must stop showing the partitions claimed
// while they stop (which waits up to MaxProcessingTime for acks). The test
// does to ZooKeeper what a session expiry does: it deletes the instance's
// registration and owner nodes.
func TestReviewClaimedFalseAfterSessionLoss(t *testing.T) {
	needCluster(t)
	verifyNoClusterLeaks(t)
	reviewLogs(t)
	client := newTestClient(t)
	group := uniqueName("rv.session")
	startGroupAt(t, client, group, "test.4")
	config := testConfig()
	config.MaxProcessingTime = 3 * time.Second
	a := joinReview(t, group, TopicSubscription("test.4"), config)
	col := collect(a, func(*sarama.ConsumerMessage) bool { return false }) // hold every message: the stop waits
	errs := logErrors(a)
	waitAllClaimed(t, a, 4, 30*time.Second, "A")
	values := produce(t, client, "test.4", group, 8)
	waitFor(t, 30*time.Second, "the messages", func() bool { return col.has(values) })

	conn, chroot := testZookeeper(t, zookeeperPeers)
	id := a.(*consumerManager).instance.ID
	base := fmt.Sprintf("%s/consumers/%s", chroot, group)
	for p := 0; p < 4; p++ {
		if err := conn.Delete(fmt.Sprintf("%s/owners/test.4/%d", base, p), -1); err != nil {
			t.Fatalf("delete owner node of test.4/%d: %s", p, err)
		}
	}
	if err := conn.Delete(base+"/ids/"+id, -1); err != nil {
		t.Fatalf("delete registration: %s", err)
	}

	waitFor(t, 20*time.Second, "ErrRegistrationLost", func() bool { return errs.count(ErrRegistrationLost) > 0 })
	deadline := time.Now().Add(2 * time.Second) // within the stop, which waits 3 s for acks
	for time.Now().Before(deadline) {
		for _, s := range a.Stats() {
			if s.Claimed && ownerNode(t, conn, chroot, group, s.Topic, s.Partition) != id {
				t.Fatalf("Stats shows %s/%d claimed after the session that held the claim was lost", s.Topic, s.Partition)
			}
		}
		time.Sleep(20 * time.Millisecond) // polling interval, not synchronisation
	}
	waitAllClaimed(t, a, 4, 30*time.Second, "A, registered again")
	col.close(t)
	checkDeregistered(t, group, a)
}

// TestFaultCloseIsBounded: Close returns within its documented bound when
// Kafka hangs (the broker's JVM stopped with SIGSTOP: connections are
// accepted, nothing answers) and when ZooKeeper is down, and it says what
// did not complete. Before, the final commit ran before the wait's timer,
// each commit waited Net.ReadTimeout, and the offset manager's Close
// retried its flush: minutes.
func TestFaultCloseIsBounded(t *testing.T) {
	needFaults(t)
	verifyNoClusterLeaks(t)
	reviewLogs(t)
	cluster := startFaultCluster(t, testcluster.Options{ZooKeepers: 1, Brokers: 1})
	topic := uniqueName("rv-bounded")
	if err := cluster.CreateTopic(topic, 2, 1); err != nil {
		t.Fatal(err)
	}
	producerConfig := sarama.NewConfig()
	producerConfig.Producer.Return.Successes = true
	producerConfig.Producer.Partitioner = sarama.NewRoundRobinPartitioner
	client, err := sarama.NewClient(cluster.KafkaPeers(), producerConfig)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()

	config := testConfig()
	config.MaxProcessingTime = time.Second
	config.Net.ReadTimeout = 3 * time.Second
	config.Net.DialTimeout = 3 * time.Second
	config.Net.WriteTimeout = 3 * time.Second
	bound := config.MaxProcessingTime + stopGrace + closeGrace + config.Net.ReadTimeout + 3*time.Second

	// closeWithin closes c, which holds an unacked message, and checks the
	// time it took and its error.
	closeWithin := func(c Consumer, what string, want error) {
		t.Helper()
		start := time.Now()
		closed := make(chan error, 1)
		go func() { closed <- c.Close() }()
		select {
		case err = <-closed:
		case <-time.After(bound + time.Minute):
			t.Fatalf("Close with %s did not return within %s", what, bound+time.Minute)
		}
		took := time.Since(start)
		t.Logf("Close with %s took %s (bound %s): %v", what, took.Round(time.Millisecond), bound, err)
		if took > bound {
			t.Errorf("Close with %s took %s; want at most %s", what, took.Round(time.Millisecond), bound)
		}
		if !errors.Is(err, want) {
			t.Errorf("Close with %s = %v; want %v", what, err, want)
		}
	}

	// Phase 1: the broker hangs.
	group := uniqueName("rv.bounded")
	values := produce(t, client, topic, "hung", 20)
	c, err := Join(group, TopicSubscription(topic), cluster.ZookeeperPeers(), config)
	if err != nil {
		t.Fatal(err)
	}
	col := collect(c, func(msg *sarama.ConsumerMessage) bool { return string(msg.Value) != values[5] })
	waitFor(t, 30*time.Second, "the messages", func() bool { return col.has(values) })
	pid := cluster.BrokerPID(0)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	t.Cleanup(resume)
	closeWithin(c, "the broker hung", ErrCommitTimeout)
	resume()
	<-col.done
	// The broker's ZooKeeper session may have expired while it was stopped:
	// wait until it registered again.
	conn, _ := testZookeeper(t, cluster.ZookeeperPeers())
	waitFor(t, time.Minute, "the broker to register again", func() bool {
		ids, _, err := conn.Children("/brokers/ids")
		return err == nil && len(ids) == 1
	})

	// Phase 2: ZooKeeper is down.
	group = uniqueName("rv.bounded")
	values = produce(t, client, topic, "zk", 20)
	c, err = Join(group, TopicSubscription(topic), cluster.ZookeeperPeers(), config)
	if err != nil {
		t.Fatal(err)
	}
	col = collect(c, func(msg *sarama.ConsumerMessage) bool { return string(msg.Value) != values[5] })
	waitFor(t, 30*time.Second, "the messages", func() bool { return col.has(values) })
	if err := cluster.StopZooKeeper(0); err != nil {
		t.Fatal(err)
	}
	closeWithin(c, "ZooKeeper down", ErrReleaseFailed)
	<-col.done
	if err := cluster.StartZooKeeper(0); err != nil {
		t.Fatal(err)
	}
}
