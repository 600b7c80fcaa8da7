package kafkaconsumer

// The fence's decisions, on a consumer manager of the fake ZooKeeper
// session (fakezk_test.go): raise and lift, the deadline, what an answer
// of the session does, the take-back of what sits unread, a session's
// expiry, and the bounded ZooKeeper requests (zkCall).

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/go-zookeeper/zk"
)

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestFenceRaisesAndLiftsOnce: a raise or lift tells whether it changed
// the fence, and closes the channel of that change once; the other
// channel is a new one, open.
func TestFenceRaisesAndLiftsOnce(t *testing.T) {
	t.Parallel()
	var f fence
	raised, lifted := f.channels()
	if closed(raised) || !closed(lifted) || f.on.Load() {
		t.Fatal("a zero fence is not down")
	}
	if !f.raise() || f.raise() {
		t.Fatal("raise() did not report true, then false")
	}
	if !closed(raised) || !f.on.Load() {
		t.Fatal("the raise did not close raised")
	}
	_, lifted = f.channels()
	if closed(lifted) {
		t.Fatal("lifted is closed while the fence is up")
	}
	if !f.lift() || f.lift() {
		t.Fatal("lift() did not report true, then false")
	}
	if !closed(lifted) || f.on.Load() {
		t.Fatal("the lift did not close lifted")
	}
	if raised, _ = f.channels(); closed(raised) {
		t.Fatal("raised is closed after the lift")
	}
}

// TestFencedOncePastTheDeadline: an instance is fenced when the fence is
// up, or when the deadline passed before the guard raised it (then
// fenced raises it); not before the guard set a deadline.
func TestFencedOncePastTheDeadline(t *testing.T) {
	t.Parallel()
	cm, _ := fakeSessionManager(t)
	if cm.fenced() {
		t.Fatal("fenced without a deadline")
	}
	cm.fenceBase = time.Now().Add(-time.Minute)
	cm.fenceBy.Store(int64(2 * time.Minute))
	if cm.fenced() || cm.pastFenceDeadline() {
		t.Fatal("fenced before the deadline")
	}
	cm.fenceBy.Store(int64(30 * time.Second))
	if !cm.pastFenceDeadline() || !cm.fenced() || !cm.fence.on.Load() {
		t.Fatal("not fenced, or the fence not raised, past the deadline")
	}
}

// TestAnsweredMovesTheDeadlineAndLiftsTheFence: an answer of the session
// moves the deadline to its send time + fenceFraction of the session
// timeout, and lifts the fence when that is ahead, not when it has passed.
func TestAnsweredMovesTheDeadlineAndLiftsTheFence(t *testing.T) {
	t.Parallel()
	cm, _ := fakeSessionManager(t)
	cm.negotiated = new(atomic.Int64)
	cm.negotiated.Store(10_000) // ms: the server's, not the configured 2 s
	if got, want := cm.fenceAfter(), 6*time.Second; got != want {
		t.Fatalf("fenceAfter() = %s, want %s", got, want)
	}
	deadline := time.NewTimer(time.Hour)
	defer deadline.Stop()
	cm.fence.raise()
	if cm.answered(time.Now().Add(-7*time.Second), deadline) || !cm.fence.on.Load() {
		t.Fatal("an answer to a request sent before the deadline's span lifted the fence")
	}
	sent := time.Now()
	if !cm.answered(sent, deadline) || cm.fence.on.Load() {
		t.Fatal("a fresh answer did not lift the fence")
	}
	if by := cm.fenceBase.Add(time.Duration(cm.fenceBy.Load())); !by.Equal(sent.Add(6 * time.Second)) {
		t.Fatalf("deadline %s after the send, want 6s", by.Sub(sent))
	}
	if cm.answered(time.Now(), deadline) {
		t.Fatal("answered reported a lift of a fence that was down")
	}
}

// TestTakeBackAllWaitsUntilNoPartitionHandsOut: once the fence is up, what
// sits unread in Messages is taken back (the partition hands it out again
// after the lift), until no partition hands out any more; a stopped guard
// ends the wait.
func TestTakeBackAllWaitsUntilNoPartitionHandsOut(t *testing.T) {
	t.Parallel()
	cm, _ := fakeSessionManager(t)
	pm := newPartitionManager(cm, fakePartition("t", 0))
	manageOffsets(pm, -1)
	cm.pms.Store(&partitionManagers{pm.tp: pm})
	handOut := func(offsets ...int64) {
		pm.mu.Lock()
		defer pm.mu.Unlock()
		for _, o := range offsets {
			pm.pending.push(o)
			pm.lastHandedOut = o
			pm.handedOut++
		}
	}
	pm.setHandingOut(true)
	handOut(5, 6, 7)
	cm.messages <- &sarama.ConsumerMessage{Topic: "t", Partition: 0, Offset: 6}
	cm.messages <- &sarama.ConsumerMessage{Topic: "t", Partition: 0, Offset: 7}
	cm.guardStop = make(chan struct{})
	done := runDone(cm.takeBackAll)
	waitFor(t, 3*time.Second, "the unread messages taken back", func() bool {
		s := pm.stats()
		return len(cm.messages) == 0 && s.LastHandedOut == 5 && s.HandedOut == 1
	})
	if len(done) > 0 {
		t.Fatal("takeBackAll returned while a partition hands out")
	}
	handOut(6) // handed out again before the partition saw the fence
	cm.messages <- &sarama.ConsumerMessage{Topic: "t", Partition: 0, Offset: 6}
	pm.setHandingOut(false)
	if !receiveWithin(t, done, "takeBackAll") {
		t.Fatal("takeBackAll() = false")
	}
	if len(cm.messages) != 0 || pm.stats().LastHandedOut != 5 {
		t.Fatal("a message sent before the partition stopped handing out was not taken back")
	}

	pm.setHandingOut(true)
	close(cm.guardStop)
	if cm.takeBackAll() {
		t.Fatal("takeBackAll() = true with the guard stopped")
	}
}

// TestSessionExpiredLosesEveryClaim: when the session that held the claims
// expired, the fence goes up and every partition manager loses its claim
// for good: it shows unclaimed, and its offsets leave the store, so that
// nothing of it is committed behind the next owner.
func TestSessionExpiredLosesEveryClaim(t *testing.T) {
	t.Parallel()
	cm, _ := fakeSessionManager(t)
	consuming := newPartitionManager(cm, fakePartition("t", 0))
	consuming.claimed = true
	manageOffsets(consuming, 41)
	held := newPartitionManager(cm, fakePartition("t", 1))
	held.claimed = true
	cm.pms.Store(&partitionManagers{consuming.tp: consuming, held.tp: held})
	if cm.offsets.next(consuming.tp) == -1 {
		t.Fatal("the partition's offset is not in the store")
	}
	cm.sessionExpired(time.Now().Add(-time.Minute))
	if !cm.fence.on.Load() {
		t.Fatal("the fence is down after the session expired")
	}
	for _, pm := range []*partitionManager{consuming, held} {
		if pm.stats().Claimed || !pm.isLost() {
			t.Fatalf("%v: claimed %t, lost %t", pm.tp, pm.stats().Claimed, pm.isLost())
		}
	}
	if next := cm.offsets.next(consuming.tp); next != -1 {
		t.Fatalf("the lost partition's offset %d is still in the store", next)
	}
	if len(cm.orphans) != 0 {
		t.Fatal("an expired session's claims were made orphans: they went with it")
	}
}

// TestZookeeperCallsAreBounded: a request that ZooKeeper does not answer
// is waited for at most its timeout, and at most the session timeout; it
// goes on until the connection closes (zkCalls counts it). A timeout
// already passed sends nothing.
func TestZookeeperCallsAreBounded(t *testing.T) {
	t.Parallel()
	cm, fake := fakeSessionManager(t)
	cm.config.Zookeeper.Timeout = 200 * time.Millisecond
	if err := cm.zkCall(0, func() error { _, _, err := fake.Get("/"); return err }); !errors.Is(err, errZookeeperTimeout) || fake.count("") != 0 {
		t.Fatalf("zkCall(0) = %v, with %d requests", err, fake.count(""))
	}
	release := fake.block()
	get := func() error { _, _, err := fake.Get("/"); return err }
	if err := cm.zkCall(50*time.Millisecond, get); !errors.Is(err, errZookeeperTimeout) {
		t.Fatalf("zkCall = %v, want errZookeeperTimeout", err)
	}
	began := time.Now()
	if err := cm.zkCall(time.Hour, get); !errors.Is(err, errZookeeperTimeout) {
		t.Fatalf("zkCall = %v, want errZookeeperTimeout", err)
	}
	if took := time.Since(began); took > 2*time.Second {
		t.Fatalf("zkCall(1h) took %s with a session timeout of 200 ms", took)
	}
	if n := fake.held(); n != 2 {
		t.Fatalf("%d requests held, want 2", n)
	}
	release(zk.ErrConnectionClosed)
	cm.zkCalls.Wait()
}

// TestShutdownCtxDoneShortensZookeeperCalls: once a Shutdown's context is
// done, a request on the session may wait only until the ZooKeeper step of
// the shutdown ends (zookeeperAfterCtxDone).
func TestShutdownCtxDoneShortensZookeeperCalls(t *testing.T) {
	t.Parallel()
	cm, _ := fakeSessionManager(t)
	cm.config.Zookeeper.Timeout = time.Minute
	if got := cm.zkTimeout(); got < 59*time.Second {
		t.Fatalf("zkTimeout() = %s, want the session timeout", got)
	}
	cm.markShutdownCtxDone()
	if got := cm.zkTimeout(); got > zookeeperAfterCtxDone || got < zookeeperAfterCtxDone-time.Second {
		t.Fatalf("zkTimeout() = %s once the context is done, want about %s", got, zookeeperAfterCtxDone)
	}
}
