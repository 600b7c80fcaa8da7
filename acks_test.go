package kafkaconsumer

// Acks, without a cluster: what Ack commits, the marker, Ack's cache, and
// misuse; BenchmarkAck.

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/wvanbergen/kazoo-go"
)

// testOffsets returns an offset store without a Kafka client: it keeps
// marks, and nothing commits them. For tests of the ack bookkeeping.
func testOffsets() *offsetStore {
	return &offsetStore{parts: make(map[TopicPartition]*storedOffset), report: func(TopicPartition, error) {}}
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

// TestLostPartitionCommitsNothing: once a partition's claim is lost with
// an expired session, nothing of it may be committed: another instance
// may own it and have committed further. Its entry stayed in the offset
// store until the manager goroutine stopped it, and the acks made while
// the instance was fenced marked it dirty: the first round after the new
// session lifted the fence committed it, behind the new owner's commits
// (TestFaultZooKeeperCutOffManagerBusy saw 201 -> 59).
func TestLostPartitionCommitsNothing(t *testing.T) {
	t.Parallel()
	cm, pm, _, handOut := testManager(t, nil)
	handOut(0, 1, 2, 3)
	cm.Ack(message(0))
	cm.Ack(message(1))
	pm.lose()
	cm.Ack(message(2)) // an ack of a message handed out before the fence
	pm.markAcked()
	if n := cm.offsets.uncommitted(); n != 0 {
		t.Fatalf("%d partitions to commit after the claim was lost; want none", n)
	}
	if err := cm.offsets.reserve(pm.tp); err != nil {
		t.Fatalf("reserve for the partition's next manager: %v", err)
	}
}

// TestNoCommitPastFenceDeadline: once the fence's deadline has passed, no
// commit goes out, even before the guard goroutine raised the fence. A
// process frozen past its session timeout (SIGSTOP, a long GC pause) runs
// its committer's timer and its guard's together when it wakes: the soak
// saw the committer commit first, behind the partition's new owner
// (soak.5/2: 1162, then 1107).
func TestNoCommitPastFenceDeadline(t *testing.T) {
	t.Parallel()
	cm, pm, _, handOut := testManager(t, nil)
	handOut(0, 1, 2)
	cm.Ack(message(0))
	pm.markAcked()
	if cm.offsets.uncommitted() != 1 {
		t.Fatal("nothing to commit")
	}
	ran := false
	cm.offsets.failRound = func() error {
		ran = true
		return errors.New("the round ran")
	}
	cm.fenceBase = time.Now().Add(-time.Minute)
	cm.fenceBy.Store(int64(time.Second)) // the deadline passed 59 s ago
	cm.commitRound()
	if ran {
		t.Fatal("a commit round ran past the fence's deadline")
	}
	if !cm.fence.on.Load() {
		t.Fatal("the fence is not up after its deadline")
	}
}

// TestDurableAcksHoldBeforeInflatedLimit: with DurableAcks, alternating
// acks make an acked set that deflates to little but inflates towards
// what commitmark.Acked reads: the partition holds its hand-out before
// the set must be cut, as it does near the metadata limit.
func TestDurableAcksHoldBeforeInflatedLimit(t *testing.T) {
	t.Parallel()
	config := NewConfig()
	config.DurableAcks = true
	config.MaxPendingAcks = 1 << 17
	cm, pm, _, handOut := testManager(t, config)
	cm.offsets.ackedLimit.Store(maxMetadataBytes)
	pm.parent.offsets.set(pm.tp, 0)
	const n = 52000 // 26000 acked ranges of 1, 2 bytes each raw: past 3/4 of 64 KiB, not beyond
	offsets := make([]int64, n)
	for i := range offsets {
		offsets[i] = int64(i)
	}
	handOut(offsets...)
	for o := int64(1); o < n; o += 2 {
		cm.Ack(message(o))
	}
	pm.markAcked()
	pm.mu.Lock()
	held := pm.pending.held
	pm.mu.Unlock()
	if !held {
		t.Fatal("the partition hands out more while its acked set nears what a commit's reader inflates")
	}
}
