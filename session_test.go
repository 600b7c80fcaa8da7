package kafkaconsumer

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
)

// TestIntegrationClaimBatchFallsBack: the partitions a distribution starts
// are claimed with one ZooKeeper multi (claimBatch); a multi is atomic, so
// when one partition is still owned by another instance, none is created
// by it, and each partition must be claimed alone: the free ones at once,
// the owned one once its owner lets go.
func TestIntegrationClaimBatchFallsBack(t *testing.T) {
	needCluster(t)
	verifyNoClusterLeaks(t)
	group := uniqueName("it.claims")
	conn, chroot := testZookeeper(t, zookeeperPeers)
	owners := fmt.Sprintf("%s/consumers/%s/owners/test.4", chroot, group)
	for _, node := range []string{chroot + "/consumers", chroot + "/consumers/" + group, chroot + "/consumers/" + group + "/owners", owners} {
		if _, err := conn.Create(node, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			t.Fatalf("create %s: %s", node, err)
		}
	}
	held := owners + "/2"
	if _, err := conn.Create(held, []byte("another-instance"), zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatalf("create %s: %s", held, err)
	}

	c := joinReview(t, group, TopicSubscription("test.4"), testConfig())
	id := c.(*consumerManager).instance.ID
	waitFor(t, 30*time.Second, "partitions 0, 1 and 3 claimed", func() bool {
		for _, p := range []int32{0, 1, 3} {
			if ownerNode(t, conn, chroot, group, "test.4", p) != id {
				return false
			}
		}
		return true
	})
	if owner := ownerNode(t, conn, chroot, group, "test.4", 2); owner != "another-instance" {
		t.Fatalf("partition 2 is owned by %q, want the other instance's", owner)
	}
	if err := conn.Delete(held, -1); err != nil {
		t.Fatalf("delete %s: %s", held, err)
	}
	waitAllClaimed(t, c, 4, 30*time.Second, "the consumer, once partition 2 was released")
	if owner := ownerNode(t, conn, chroot, group, "test.4", 2); owner != id {
		t.Fatalf("partition 2 is owned by %q, want %s", owner, id)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("close: %s", err)
	}
	for p := range int32(4) {
		if owner := ownerNode(t, conn, chroot, group, "test.4", p); owner != "" {
			t.Errorf("partition %d still owned by %q after Close", p, owner)
		}
	}
}
