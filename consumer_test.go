package kafkaconsumer

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/wvanbergen/kazoo-go"
	"go.uber.org/goleak"
)

// leakOptions are the goroutines that outlive a consumer on purpose:
// go-metrics' meter ticker, which sarama starts once per process.
var leakOptions = []goleak.Option{
	goleak.IgnoreTopFunction("github.com/rcrowley/go-metrics.(*meterArbiter).tick"),
}

// verifyNoLeaks fails the test if goroutines started since it began are still
// running once the test is done, after waiting up to goleak's deadline.
func verifyNoLeaks(t *testing.T) {
	t.Helper()
	opts := append([]goleak.Option{goleak.IgnoreCurrent()}, leakOptions...)
	t.Cleanup(func() { goleak.VerifyNone(t, opts...) })
}

func TestJoinRejectsBadInput(t *testing.T) {
	verifyNoLeaks(t)
	badConfig := NewConfig()
	badConfig.MaxProcessingTime = 0
	cases := []struct {
		name         string
		group        string
		subscription Subscription
		zookeeper    string
		config       *Config
		want         error
	}{
		{"empty group", "", TopicSubscription("t"), "127.0.0.1:2181", nil, ErrInvalidGroup},
		{"group with slash", "a/b", TopicSubscription("t"), "127.0.0.1:2181", nil, ErrInvalidGroup},
		{"nil subscription", "g", nil, "127.0.0.1:2181", nil, ErrInvalidSubscription},
		{"empty subscription", "g", TopicSubscription(), "127.0.0.1:2181", nil, ErrInvalidSubscription},
		{"nil whitelist", "g", WhitelistSubscription(nil), "127.0.0.1:2181", nil, ErrInvalidSubscription},
		{"empty zookeeper", "g", TopicSubscription("t"), "", nil, ErrInvalidZookeeper},
		{"blank zookeeper", "g", TopicSubscription("t"), "  ", nil, ErrInvalidZookeeper},
		{"empty server", "g", TopicSubscription("t"), "127.0.0.1:2181,", nil, ErrInvalidZookeeper},
		{"bad port", "g", TopicSubscription("t"), "127.0.0.1:port", nil, ErrInvalidZookeeper},
		{"port out of range", "g", TopicSubscription("t"), "127.0.0.1:70000", nil, ErrInvalidZookeeper},
		{"empty chroot element", "g", TopicSubscription("t"), "127.0.0.1:2181/a//b", nil, ErrInvalidZookeeper},
		{"invalid config", "g", TopicSubscription("t"), "127.0.0.1:2181", badConfig, ErrInvalidConfig},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Join(tc.group, tc.subscription, tc.zookeeper, tc.config)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Join() = %v, %v; want %v", c, err, tc.want)
			}
			if c != nil {
				t.Fatal("Join returned a consumer with an error")
			}
		})
	}
}

func TestParseZookeeper(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in     string
		nodes  string // joined with ","
		chroot string
	}{
		{"zk1:2181", "zk1:2181", ""},
		{"zk1:2181,zk2:2181,zk3", "zk1:2181,zk2:2181,zk3:2181", ""},
		{"zk1:2181/kafka", "zk1:2181", "/kafka"},
		{"zk1:2181/kafka/", "zk1:2181", "/kafka"},
		{"zk1:2181/", "zk1:2181", ""},
		{"zk1:2181,zk2:2182/a/b", "zk1:2181,zk2:2182", "/a/b"},
		{"[::1]:2181", "[::1]:2181", ""},
		{"[::1]", "[::1]:2181", ""},
		{"[fe80::1]:2182,127.0.0.1:2181/kafka", "[fe80::1]:2182,127.0.0.1:2181", "/kafka"},
	}
	for _, tc := range cases {
		nodes, chroot, err := parseZookeeper(tc.in)
		if err != nil || strings.Join(nodes, ",") != tc.nodes || chroot != tc.chroot {
			t.Errorf("parseZookeeper(%q) = %v, %q, %v; want %s, %q", tc.in, nodes, chroot, err, tc.nodes, tc.chroot)
		}
	}
	for _, in := range []string{"::1:2181", "[::1", "[::1]:x", "[zk1]:2181", "[::1]:0", ":2181"} {
		if nodes, _, err := parseZookeeper(in); !errors.Is(err, ErrInvalidZookeeper) {
			t.Errorf("parseZookeeper(%q) = %v, %v; want ErrInvalidZookeeper", in, nodes, err)
		}
	}
}

func TestJoinUnreachableZookeeperIsBounded(t *testing.T) {
	verifyNoLeaks(t)
	config := NewConfig()
	config.Zookeeper.Timeout = 500 * time.Millisecond
	start := time.Now()
	// Port 1 on loopback: nothing listens there.
	c, err := Join("g", TopicSubscription("t"), "127.0.0.1:1", config)
	elapsed := time.Since(start)
	if !errors.Is(err, ErrZookeeperUnreachable) || c != nil {
		t.Fatalf("Join() = %v, %v; want ErrZookeeperUnreachable", c, err)
	}
	// The probe waits for the timeout, then up to a second to close.
	if limit := config.Zookeeper.Timeout + 2*time.Second; elapsed > limit {
		t.Fatalf("Join took %s, want at most %s", elapsed, limit)
	}
}

func TestJoinDoesNotChangeCallerConfig(t *testing.T) {
	verifyNoLeaks(t)
	config := NewConfig()
	config.Zookeeper.Timeout = 200 * time.Millisecond
	config.Offsets.Initial = sarama.OffsetOldest
	before := config.Consumer.Offsets.Initial
	_, _ = Join("g", TopicSubscription("t"), "127.0.0.1:1/chroot", config)
	if config.Zookeeper.Chroot != "" {
		t.Errorf("Join set the caller's Zookeeper.Chroot to %q", config.Zookeeper.Chroot)
	}
	if config.Consumer.Offsets.Initial != before {
		t.Error("Join changed the caller's sarama config")
	}
}

// testOffsets returns an offset store without a Kafka client: it keeps
// marks, and nothing commits them. For tests of the ack bookkeeping.
func testOffsets() *offsetStore {
	return &offsetStore{parts: make(map[topicPartition]*storedOffset), report: func(topicPartition, error) {}}
}

// manageOffsets has pm's offsets kept in its consumer's store, from the
// committed offset committed (-1 for none), as startOffsets does.
func manageOffsets(pm *partitionManager, committed int64) {
	pm.parent.offsets.reserve(pm.tp)
	pm.parent.offsets.set(pm.tp, committed)
	pm.mu.Lock()
	pm.managed = true
	pm.mu.Unlock()
}

// markProbe reads what a partition manager marked in its offset store.
type markProbe struct{ pm *partitionManager }

// last returns the partition's offset to commit after a mark of the acked
// prefix, as the marker goroutine makes every markInterval; -1 for none.
func (p markProbe) last() int64 {
	p.pm.markAcked()
	return p.marked()
}

// marked returns the partition's offset to commit, as marked so far.
func (p markProbe) marked() int64 {
	return p.pm.parent.offsets.next(p.pm.tp)
}

// testManager returns a consumer manager without connections that runs one
// partition manager of topic "t", partition 0, whose offsets are kept in a
// store without a Kafka client. handOut records the given offsets as
// handed out.
func testManager(t *testing.T, config *Config) (*consumerManager, *partitionManager, markProbe, func(...int64)) {
	t.Helper()
	if config == nil {
		config = NewConfig()
	}
	cm := &consumerManager{config: config, log: newLogger(nil, "group", "instance"), offsets: testOffsets()}
	partition := (&kazoo.Kazoo{}).Topic("t").Partition(0, []int32{1})
	pm := newPartitionManager(cm, partition)
	manageOffsets(pm, -1)
	pom := markProbe{pm}
	cm.pms.Store(&partitionManagers{pm.tp: pm})
	handOut := func(offsets ...int64) {
		pm.mu.Lock()
		defer pm.mu.Unlock()
		for _, o := range offsets {
			if !pm.pending.push(o) {
				t.Fatalf("push(%d) refused", o)
			}
			pm.lastHandedOut = o
		}
	}
	return cm, pm, pom, handOut
}

func message(offset int64) *sarama.ConsumerMessage {
	return &sarama.ConsumerMessage{Topic: "t", Partition: 0, Offset: offset}
}

func TestAckCommitsNextOffset(t *testing.T) {
	t.Parallel()
	cm, _, pom, handOut := testManager(t, nil)
	handOut(0, 1, 2)
	cm.Ack(message(0))
	if got := pom.last(); got != 1 {
		t.Fatalf("after acking offset 0, marked %d, want 1 (the next offset to read)", got)
	}
	cm.Ack(message(2))
	if got := pom.last(); got != 1 {
		t.Fatalf("after acking 2 before 1, marked %d, want 1", got)
	}
	cm.Ack(message(1))
	if got := pom.last(); got != 3 {
		t.Fatalf("after acking 1, marked %d, want 3", got)
	}
}

func TestMarkerMarksAckedPrefix(t *testing.T) {
	t.Parallel()
	cm, _, pom, handOut := testManager(t, nil)
	handOut(0, 1, 2)
	cm.markStop, cm.markDone = make(chan struct{}), make(chan struct{})
	go cm.markLoop()
	defer func() {
		close(cm.markStop)
		<-cm.markDone
	}()
	cm.Ack(message(1))
	cm.Ack(message(0))
	deadline := time.Now().Add(10 * time.Second)
	for pom.marked() != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the marker marked %d within 10 s, want 2", pom.marked())
		}
		time.Sleep(time.Millisecond)
	}
}

func TestAckCacheFollowsNewManager(t *testing.T) {
	t.Parallel()
	cm, old, _, handOut := testManager(t, nil)
	handOut(0, 1)
	cm.Ack(message(0)) // caches old
	// A rebalance stops old and, later, starts a new manager of the
	// same partition.
	old.retired.Store(true)
	// Its store is the consumer's, where the old one's entry was removed.
	cm.offsets.close(old.tp)
	pm := newPartitionManager(cm, (&kazoo.Kazoo{}).Topic("t").Partition(0, []int32{1}))
	manageOffsets(pm, -1)
	pom := markProbe{pm}
	pm.pending.push(1)
	cm.pms.Store(&partitionManagers{pm.tp: pm})
	cm.Ack(message(1))
	if got := pom.last(); got != 2 {
		t.Fatalf("the new manager marked %d, want 2: the ack went to the retired one", got)
	}
	if got := old.pending.pending(); got != 1 {
		t.Fatalf("the retired manager has %d pending, want 1", got)
	}
}

func TestMarkInterval(t *testing.T) {
	t.Parallel()
	cfg := NewConfig()
	if got := markInterval(cfg.Config); got != maxMarkDelay {
		t.Fatalf("markInterval with the default auto-commit interval = %s, want %s", got, maxMarkDelay)
	}
	cfg.Consumer.Offsets.AutoCommit.Interval = 20 * time.Millisecond
	if got := markInterval(cfg.Config); got != 20*time.Millisecond {
		t.Fatalf("markInterval with a 20ms auto-commit interval = %s, want 20ms", got)
	}
}

func TestAckMisuseDoesNotPanic(t *testing.T) {
	t.Parallel()
	cm, _, pom, handOut := testManager(t, nil)
	handOut(5)
	cm.Ack(nil)
	cm.Ack(&sarama.ConsumerMessage{Topic: "other", Partition: 0, Offset: 5}) // not owned
	cm.Ack(&sarama.ConsumerMessage{Topic: "t", Partition: 9, Offset: 5})     // not owned
	cm.Ack(message(3))                                                       // stale
	cm.Ack(message(5))
	cm.Ack(message(5)) // double ack
	if got := pom.last(); got != 6 {
		t.Fatalf("marked %d, want 6", got)
	}
}

func TestEarlyAckBeforeOffsetManager(t *testing.T) {
	t.Parallel()
	// A partition manager is visible to Ack before its offset manager runs;
	// a stale message of an earlier owner acked then is ignored.
	cm, pm, _, _ := testManager(t, nil)
	pm.mu.Lock()
	pm.managed = false
	pm.mu.Unlock()
	cm.Ack(message(7))
}

func TestAckAfterClose(t *testing.T) {
	t.Parallel()
	cm, _, pom, handOut := testManager(t, nil)
	handOut(0)
	cm.pms.Store(&partitionManagers{}) // what Close leaves behind
	cm.Ack(message(0))
	if got := pom.last(); got != -1 {
		t.Fatalf("ack after close marked %d", got)
	}
}

// waitForAcksAsync runs pm.waitForAcks, with MaxProcessingTime from now,
// in a goroutine; the channel is closed when it returns.
func waitForAcksAsync(pm *partitionManager) <-chan struct{} {
	done := make(chan struct{})
	due := time.Now().Add(pm.parent.config.MaxProcessingTime)
	go func() {
		defer close(done)
		pm.waitForAcks(due)
	}()
	return done
}

// waitClosed fails the test with what unless done is closed within 10 s.
func waitClosed(t *testing.T, done <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal(what)
	}
}

func TestWaitForAcksReturnsWhenAllAcked(t *testing.T) {
	t.Parallel()
	config := NewConfig()
	config.MaxProcessingTime = time.Minute
	cm, pm, pom, handOut := testManager(t, config)
	handOut(0, 1, 2)
	cm.Ack(message(1))

	done := waitForAcksAsync(pm)
	cm.Ack(message(2))
	cm.Ack(message(2)) // a double ack of the last one: no double close
	select {
	case <-done:
		t.Fatal("waitForAcks returned with message 0 not acked")
	case <-time.After(50 * time.Millisecond):
	}
	cm.Ack(message(0))
	waitClosed(t, done, "waitForAcks did not return after every message was acked")
	if got := pom.last(); got != 3 {
		t.Fatalf("marked %d, want 3", got)
	}
}

func TestWaitForAcksGivesUpAfterMaxProcessingTime(t *testing.T) {
	t.Parallel()
	config := NewConfig()
	config.MaxProcessingTime = 100 * time.Millisecond
	_, pm, pom, handOut := testManager(t, config)
	handOut(0)
	done := waitForAcksAsync(pm)
	waitClosed(t, done, "waitForAcks did not give up after MaxProcessingTime")
	if got := pom.last(); got != -1 {
		t.Fatalf("marked %d without any ack", got)
	}
}

func TestWaitForAcksCountsWithdrawn(t *testing.T) {
	t.Parallel()
	cm, pm, pom, handOut := testManager(t, nil)
	handOut(0, 1)
	cm.Ack(message(0))
	done := waitForAcksAsync(pm)
	cm.withdraw(message(1))
	waitClosed(t, done, "waitForAcks waited for a withdrawn message")
	if got := pom.last(); got != 1 {
		t.Fatalf("marked %d, want 1", got)
	}
}

// benchManager returns a consumer manager without connections running one
// partition manager (topic "topic", partition 3) and a message of it.
func benchManager() (*consumerManager, *partitionManager, *sarama.ConsumerMessage) {
	cm := &consumerManager{config: NewConfig(), log: newLogger(nil, "group", "instance"), offsets: testOffsets()}
	pm := newPartitionManager(cm, (&kazoo.Kazoo{}).Topic("topic").Partition(3, []int32{1}))
	manageOffsets(pm, -1)
	cm.pms.Store(&partitionManagers{pm.tp: pm})
	return cm, pm, &sarama.ConsumerMessage{Topic: "topic", Partition: 3}
}

// BenchmarkAck measures the hot path: Ack of in-order messages of an owned
// partition, each handed out first. It allocates nothing.
func BenchmarkAck(b *testing.B) {
	cm, pm, msg := benchManager()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		pm.mu.Lock()
		pm.pending.push(int64(i))
		pm.mu.Unlock()
		msg.Offset = int64(i)
		cm.Ack(msg)
	}
}

// BenchmarkAckOutOfOrder acks each window of 64 messages in reverse order.
func BenchmarkAckOutOfOrder(b *testing.B) {
	cm, pm, msg := benchManager()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += 64 {
		pm.mu.Lock()
		for j := 0; j < 64; j++ {
			pm.pending.push(int64(i + j))
		}
		pm.mu.Unlock()
		for j := 63; j >= 0; j-- {
			msg.Offset = int64(i + j)
			cm.Ack(msg)
		}
	}
}

func TestStatsAndRebalanceNames(t *testing.T) {
	t.Parallel()
	cm, _, _, handOut := testManager(t, nil)
	handOut(0, 1, 2)
	cm.Ack(message(1))
	stats := cm.Stats()
	if len(stats) != 1 {
		t.Fatalf("Stats() has %d partitions, want 1", len(stats))
	}
	s := stats[0]
	if s.Topic != "t" || s.Partition != 0 || s.LastHandedOut != 2 || s.LastAcked != 1 || s.Pending != 2 || s.Lag != -1 {
		t.Fatalf("Stats() = %+v", s)
	}
}

// BenchmarkAckSeedBaseline is the seed design's Ack, for comparison in the
// same run: a string key formatted per ack, a map lookup under a read lock,
// and the highest mark wins (unsafe out of order).
func BenchmarkAckSeedBaseline(b *testing.B) {
	var mu sync.RWMutex
	managers := map[string]*seedMarks{"topic/3": {mark: -1}}
	msg := &sarama.ConsumerMessage{Topic: "topic", Partition: 3}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		msg.Offset = int64(i)
		mu.RLock()
		m := managers[fmt.Sprintf("%s/%d", msg.Topic, msg.Partition)]
		mu.RUnlock()
		m.markOffset(msg.Offset + 1)
	}
}

// seedMarks is the seed design's partition offset manager, as far as Ack
// reaches it: the highest mark wins.
type seedMarks struct {
	mu   sync.Mutex
	mark int64
}

func (m *seedMarks) markOffset(offset int64) {
	m.mu.Lock()
	if offset > m.mark {
		m.mark = offset
	}
	m.mu.Unlock()
}
