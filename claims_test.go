package kafkaconsumer

// Claims: batched claims, a failed release retried, orphan claims swept,
// and Stats' Claimed after a lost session.

import (
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/go-zookeeper/zk"
)

// TestOrphanSweepStopsAtFirstFailure: while ZooKeeper is unreachable each
// release attempt takes about a second per server, so a sweep of the claims
// left behind tries one and keeps the rest for the next sweep, rather than
// keeping the manager goroutine from its watches for one attempt each.
func TestOrphanSweepStopsAtFirstFailure(t *testing.T) {
	config := NewConfig()
	attempts := 0
	cm, _ := fakeManager(config, nil)
	cm.hooks = &testHooks{releasePartition: func(string, int32) error {
		attempts++
		return zk.ErrNoServer
	}}
	for p := int32(0); p < 3; p++ {
		cm.addOrphan(TopicPartition{Topic: "t", Partition: p})
	}
	if left := cm.releaseOrphans(); len(left) != 3 {
		t.Fatalf("%d orphans left after a failed sweep; want 3", len(left))
	}
	if attempts != 1 {
		t.Fatalf("the sweep made %d release attempts with ZooKeeper unreachable; want 1", attempts)
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

// TestIntegrationFailedReleaseIsRetried: a release of a claim that fails once
// (a ZooKeeper connection blip at that moment, with the session alive) must
// be tried again. It was tried once and only logged: the owner node stayed,
// and the next owner waited on it for ever.
func TestIntegrationFailedReleaseIsRetried(t *testing.T) {
	parallelClusterTest(t)
	topic := newTopic(t, 4)
	debugLogs(t)
	group := uniqueName("rv.release")
	var calls atomic.Int32
	config := testConfig()
	hooks := &testHooks{releasePartition: func(string, int32) error {
		if calls.Add(1) == 1 {
			return zk.ErrConnectionClosed // the first release fails
		}
		return nil
	}}
	a := joinWithHooksCleanup(t, group, TopicSubscription(topic), config, hooks)
	colA := collect(a, nil)
	waitAllClaimed(t, a, 4, 30*time.Second, "A")

	b := joinWithCleanup(t, group, TopicSubscription(topic), nil)
	colB := collect(b, nil)
	waitAllClaimed(t, b, 2, 20*time.Second, "B, after A released 2 partitions with one failed release")
	if n := calls.Load(); n < 3 {
		t.Errorf("A tried %d releases; want 2 and a retry", n)
	}
	colB.close(t)
	colA.close(t)
	checkDeregistered(t, group, a, b)
}

// TestIntegrationOrphanClaimIsSwept: when the release of a claim keeps failing
// past the stop's deadline (ZooKeeper unreachable for longer), the
// partition manager gives up and reports ErrReleaseFailed; the consumer
// manager goes on trying, so that the claim goes once ZooKeeper answers.
func TestIntegrationOrphanClaimIsSwept(t *testing.T) {
	parallelClusterTest(t)
	topic := newTopic(t, 4)
	debugLogs(t)
	group := uniqueName("rv.orphan")
	var failing atomic.Bool
	config := testConfig()
	config.MaxProcessingTime = 200 * time.Millisecond
	hooks := &testHooks{releasePartition: func(string, int32) error {
		if failing.Load() {
			return zk.ErrNoServer
		}
		return nil
	}}
	a := joinWithHooksCleanup(t, group, TopicSubscription(topic), config, hooks)
	colA := collect(a, nil)
	errsA := logErrors(a)
	waitAllClaimed(t, a, 4, 30*time.Second, "A")

	failing.Store(true)
	b := joinWithCleanup(t, group, TopicSubscription(topic), nil)
	colB := collect(b, nil)
	waitFor(t, 20*time.Second, "A to report ErrReleaseFailed", func() bool { return errsA.count(ErrReleaseFailed) > 0 })
	conn, chroot := testZookeeper(t, zookeeperPeers)
	idA := a.(*consumerManager).instance.ID
	left := 0
	for p := int32(0); p < 4; p++ {
		if ownerNode(t, conn, chroot, group, topic, p) == idA {
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

// TestIntegrationClaimedFalseAfterSessionLoss: when the ZooKeeper session that
// held the claims is lost, Stats must stop showing the partitions claimed
// while they stop (which waits up to MaxProcessingTime for acks). The test
// does to ZooKeeper what a session expiry does: it deletes the instance's
// registration and owner nodes.
func TestIntegrationClaimedFalseAfterSessionLoss(t *testing.T) {
	parallelClusterTest(t)
	topic := newTopic(t, 4)
	debugLogs(t)
	client := newTestClient(t)
	group := uniqueName("rv.session")
	startGroupAt(t, client, group, topic)
	config := testConfig()
	config.MaxProcessingTime = 3 * time.Second
	a := joinWithCleanup(t, group, TopicSubscription(topic), config)
	col := collect(a, func(*sarama.ConsumerMessage) bool { return false }) // hold every message: the stop waits
	errs := logErrors(a)
	waitAllClaimed(t, a, 4, 30*time.Second, "A")
	values := produce(t, client, topic, group, 8)
	waitFor(t, 30*time.Second, "the messages", func() bool { return col.has(values) })

	conn, chroot := testZookeeper(t, zookeeperPeers)
	id := a.(*consumerManager).instance.ID
	base := fmt.Sprintf("%s/consumers/%s", chroot, group)
	for p := 0; p < 4; p++ {
		if err := conn.Delete(fmt.Sprintf("%s/owners/%s/%d", base, topic, p), -1); err != nil {
			t.Fatalf("delete owner node of %s/%d: %s", topic, p, err)
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

// TestIntegrationClaimBatchFallsBack: the partitions a distribution starts
// are claimed with one ZooKeeper multi (claimBatch); a multi is atomic, so
// when one partition is still owned by another instance, none is created
// by it, and each partition must be claimed alone: the free ones at once,
// the owned one once its owner lets go.
func TestIntegrationClaimBatchFallsBack(t *testing.T) {
	parallelClusterTest(t)
	topic := newTopic(t, 4)
	group := uniqueName("it.claims")
	conn, chroot := testZookeeper(t, zookeeperPeers)
	owners := createOwnersNode(t, conn, chroot, group, topic)
	held := owners + "/2"
	if _, err := conn.Create(held, []byte("another-instance"), zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatalf("create %s: %s", held, err)
	}

	c := joinWithCleanup(t, group, TopicSubscription(topic), testConfig())
	id := c.(*consumerManager).instance.ID
	waitFor(t, 30*time.Second, "partitions 0, 1 and 3 claimed", func() bool {
		for _, p := range []int32{0, 1, 3} {
			if ownerNode(t, conn, chroot, group, topic, p) != id {
				return false
			}
		}
		return true
	})
	if owner := ownerNode(t, conn, chroot, group, topic, 2); owner != "another-instance" {
		t.Fatalf("partition 2 is owned by %q, want the other instance's", owner)
	}
	if err := conn.Delete(held, -1); err != nil {
		t.Fatalf("delete %s: %s", held, err)
	}
	waitAllClaimed(t, c, 4, 30*time.Second, "the consumer, once partition 2 was released")
	if owner := ownerNode(t, conn, chroot, group, topic, 2); owner != id {
		t.Fatalf("partition 2 is owned by %q, want %s", owner, id)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("close: %s", err)
	}
	for p := range int32(4) {
		if owner := ownerNode(t, conn, chroot, group, topic, p); owner != "" {
			t.Errorf("partition %d still owned by %q after Close", p, owner)
		}
	}
}

// TestIntegrationFailedOwnerWatchIsReported: while another instance owns a
// partition, the claim watches the owner node; when that watch fails, the
// retry's log line must name the watch's error. It named "claimed by
// another instance" (the claim's error, shadowed).
func TestIntegrationFailedOwnerWatchIsReported(t *testing.T) {
	parallelClusterTest(t)
	topic4 := newTopic(t, 4)
	group := uniqueName("it.watch")
	conn, chroot := testZookeeper(t, zookeeperPeers)
	owners := createOwnersNode(t, conn, chroot, group, topic4)
	if _, err := conn.Create(owners+"/1", []byte("another-instance"), zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	injected := errors.New("injected failure of the owner watch")
	var failed atomic.Bool
	config := testConfig()
	logger, rec := newRecordingLogger()
	config.Logger = logger
	hooks := &testHooks{watchOwner: func(string, int32) error {
		if failed.CompareAndSwap(false, true) {
			return injected
		}
		return nil
	}}
	c := joinWithHooksCleanup(t, group, TopicSubscription(topic4), config, hooks)
	waitFor(t, 30*time.Second, "the watch to fail", failed.Load)
	waitFor(t, 10*time.Second, "a log line naming the watch's error", func() bool {
		_, ok := rec.find(slog.LevelWarn, injected.Error(), nil)
		return ok
	})
	if err := conn.Delete(owners+"/1", -1); err != nil {
		t.Fatal(err)
	}
	waitAllClaimed(t, c, 4, 30*time.Second, "the consumer, once partition 1 was released")
}

// createOwnersNode creates the node of the owners of topic's partitions in
// group, and its parents, and returns its path.
func createOwnersNode(t *testing.T, conn *zk.Conn, chroot, group, topic string) string {
	t.Helper()
	owners := fmt.Sprintf("%s/consumers/%s/owners/%s", chroot, group, topic)
	for _, node := range []string{chroot + "/consumers", chroot + "/consumers/" + group, chroot + "/consumers/" + group + "/owners", owners} {
		if _, err := conn.Create(node, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			t.Fatalf("create %s: %s", node, err)
		}
	}
	return owners
}
