package kafkaconsumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/go-zookeeper/zk"
)

// TestIntegrationShutdownDeadline: a Shutdown whose context expires while
// the user holds unacked messages returns in time with the context's
// error, commits only what was acked, and the next owner gets the rest.
// MaxProcessingTime is a minute, so only the context can end the wait.
func TestIntegrationShutdownDeadline(t *testing.T) {
	needCluster(t)
	verifyNoClusterLeaks(t)
	client := newTestClient(t)
	admin := newTestAdmin(t, client)
	topic := uniqueName("shutdown")
	createTopic(t, admin, topic, 1)
	group := uniqueName("it.shutdown")
	values := produce(t, client, topic, "m", 20)
	const acked = 8 // the first 8 messages are acked, the other 12 held

	config := testConfig()
	config.MaxProcessingTime = time.Minute
	first := join(t, group, TopicSubscription(topic), config)
	col1 := collect(first, func(msg *sarama.ConsumerMessage) bool { return msg.Offset < acked })
	waitFor(t, 30*time.Second, "every message to be received and the first 8 acked", func() bool {
		stats := first.Stats()
		return col1.has(values) && len(stats) == 1 && stats[0].Committed == acked && stats[0].Pending == len(values)-acked
	})

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	began := time.Now()
	err := first.Shutdown(ctx)
	took := time.Since(began)
	t.Logf("Shutdown with 12 unacked messages and a 1 s deadline took %s: %v", took, err)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown() = %v, want an error wrapping context.DeadlineExceeded", err)
	}
	if took < time.Second || took > 4*time.Second {
		t.Errorf("Shutdown took %s; want the 1 s deadline plus the final commit and release (well under 4 s)", took)
	}
	select {
	case <-col1.done:
	case <-time.After(10 * time.Second):
		t.Fatal("Messages not closed after Shutdown returned")
	}
	if err := first.Close(); err != nil {
		t.Errorf("Close after Shutdown = %v, want nil (what Close returns)", err)
	}
	if got := committedOffsets(t, client, group, topic)[0]; got != acked {
		t.Errorf("committed offset %d after Shutdown, want %d (the acked prefix)", got, acked)
	}

	second := join(t, group, TopicSubscription(topic), nil)
	col2 := collect(second, nil)
	waitFor(t, 30*time.Second, "the next owner to receive the 12 unacked messages", func() bool {
		return col2.has(values[acked:])
	})
	for _, v := range values[:acked] {
		if n := col2.count(v); n > 0 {
			t.Errorf("the next owner received acked message %s again", v)
		}
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	if err := second.Shutdown(ctx2); err != nil {
		t.Errorf("Shutdown with everything acked = %v, want nil", err)
	}
	<-col2.done
	checkDeregistered(t, group, first, second)
}

// TestIntegrationJoinContextCancelledInClaimWait: JoinContext whose context
// expires while a partition of its share is claimed by another instance
// returns the context's error and leaves ZooKeeper as it found it: no
// registration, no claim of its own (it had claimed the three other
// partitions), and no goroutine running.
func TestIntegrationJoinContextCancelledInClaimWait(t *testing.T) {
	needCluster(t)
	verifyNoClusterLeaks(t)
	conn, chroot := testZookeeper(t, zookeeperPeers)
	group := uniqueName("it.joinctx")
	base := chroot + "/consumers/" + group
	t.Cleanup(func() {
		if err := deleteRecursive(conn, base); err != nil {
			t.Errorf("delete %s: %s", base, err)
		}
	})
	for _, path := range []string{chroot + "/consumers", base, base + "/ids", base + "/owners", base + "/owners/test.4"} {
		if _, err := conn.Create(path, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			t.Fatalf("create %s: %s", path, err)
		}
	}
	const other = "another-instance"
	if _, err := conn.Create(base+"/owners/test.4/2", []byte(other), 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatalf("claim test.4/2 for %s: %s", other, err)
	}

	logger, rec := newRecordingLogger()
	config := testConfig()
	config.Logger = logger
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	began := time.Now()
	c, err := JoinContext(ctx, group, TopicSubscription("test.4"), zookeeperPeers, config)
	took := time.Since(began)
	t.Logf("JoinContext returned after %s: %v", took, err)
	if err == nil {
		_ = c.Close()
		t.Fatal("JoinContext succeeded while test.4/2 was claimed by another instance")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("JoinContext() = %v, want an error wrapping context.DeadlineExceeded", err)
	}
	if took > 8*time.Second {
		t.Errorf("JoinContext took %s with a 3 s deadline", took)
	}
	if _, ok := rec.find(slog.LevelDebug, "still owned by "+other, map[string]string{attrTopic: "test.4", attrPartition: "2"}); !ok {
		t.Error("JoinContext did not wait for the claim of test.4/2 (no such line)")
	}
	for p := 0; p < 4; p++ {
		if p == 2 {
			continue
		}
		if _, ok := rec.find(slog.LevelDebug, "Claimed partition", map[string]string{attrTopic: "test.4", attrPartition: fmt.Sprint(p)}); !ok {
			t.Errorf("test.4/%d was not claimed while JoinContext waited", p)
		}
	}

	ids, _, err := conn.Children(base + "/ids")
	if err != nil {
		t.Fatalf("list %s/ids: %s", base, err)
	}
	if len(ids) != 0 {
		t.Errorf("JoinContext failed but left registrations: %v", ids)
	}
	owners, _, err := conn.Children(base + "/owners/test.4")
	if err != nil {
		t.Fatalf("list owners: %s", err)
	}
	for _, p := range owners {
		owner, _, err := conn.Get(base + "/owners/test.4/" + p)
		if err != nil {
			t.Fatalf("get owner of test.4/%s: %s", p, err)
		}
		if p != "2" || string(owner) != other {
			t.Errorf("JoinContext failed but left the claim of test.4/%s (owner %s)", p, owner)
		}
	}
}

// TestIntegrationJoinContextCancelled: JoinContext with a context that is
// already cancelled returns its error at once and starts nothing.
func TestIntegrationJoinContextCancelled(t *testing.T) {
	needCluster(t)
	verifyNoClusterLeaks(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	began := time.Now()
	c, err := JoinContext(ctx, uniqueName("it.joinctx"), TopicSubscription("test.4"), zookeeperPeers, testConfig())
	if err == nil {
		_ = c.Close()
		t.Fatal("JoinContext with a cancelled context succeeded")
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("JoinContext() = %v, want an error wrapping context.Canceled", err)
	}
	if took := time.Since(began); took > 2*time.Second {
		t.Errorf("JoinContext with a cancelled context took %s", took)
	}
}
