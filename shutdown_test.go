package kafkaconsumer

// Stopping: a partition's wait for acks (MaxProcessingTime, withdrawn
// messages), Close draining Messages, and Shutdown's deadline.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// TestIntegrationShutdownDeadline: a Shutdown whose context expires while
// the user holds unacked messages returns in time with the context's
// error, commits only what was acked, and the next owner gets the rest.
// MaxProcessingTime is a minute, so only the context can end the wait.
func TestIntegrationShutdownDeadline(t *testing.T) {
	parallelClusterTest(t)
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

func TestIntegrationCloseDrainsAndRedelivers(t *testing.T) {
	parallelClusterTest(t)
	topic := newTopic(t, 4)
	client := newTestClient(t)
	group := uniqueName("it.drain")
	start := startGroupAt(t, client, group, topic)
	values := produce(t, client, topic, group, 100)

	config := testConfig()
	config.MaxProcessingTime = 500 * time.Millisecond
	// The first instance receives messages and acks none of them.
	first := join(t, group, TopicSubscription(topic), config)
	col1 := collect(first, func(*sarama.ConsumerMessage) bool { return false })
	waitFor(t, 30*time.Second, "some messages", func() bool { return col1.received(values) >= 10 })
	closed := time.Now()
	col1.close(t)
	t.Logf("Close with unacked messages took %s", time.Since(closed))
	if _, ok := <-first.Messages(); ok {
		t.Fatal("Messages delivered after Close")
	}

	// Everything it received is consumed again.
	second := join(t, group, TopicSubscription(topic), nil)
	col2 := collect(second, nil)
	waitFor(t, 30*time.Second, "every message again", func() bool { return col2.has(values) })
	col2.close(t)
	checkCommitted(t, client, group, start, map[string]int{topic: 100})
	checkDeregistered(t, group, first, second)
}

// TestIntegrationCloseErrorAgreesWithCommit: when Close says that a final
// commit was not confirmed (ErrCommitTimeout), it does not make that
// commit afterwards. While Close runs, a hook fails every commit round as
// long as a claim of the group remains in ZooKeeper: the partitions' final
// commits fail until they give up and release their claims; a round after
// that succeeds, and must not commit the given-up offsets.
func TestIntegrationCloseErrorAgreesWithCommit(t *testing.T) {
	parallelClusterTest(t)
	client := newTestClient(t)
	admin := newTestAdmin(t, client)
	topic := uniqueName("it-agrees")
	createTopic(t, admin, topic, 2)
	group := uniqueName("it.agrees")
	values := produce(t, client, topic, "v", 20)

	conn, chroot := testZookeeper(t, zookeeperPeers)
	owners := fmt.Sprintf("%s/consumers/%s/owners/%s", chroot, group, topic)
	var closing, failed, after atomic.Bool
	config := testConfig()
	config.MaxProcessingTime = time.Second
	hooks := &testHooks{commitRound: func() error {
		if !closing.Load() {
			return nil
		}
		if claims, _, err := conn.Children(owners); err != nil || len(claims) > 0 {
			failed.Store(true)
			return errors.New("injected failure of the commit round")
		}
		after.Store(true)
		return nil
	}}
	c, err := joinWithHooks(group, TopicSubscription(topic), zookeeperPeers, config, hooks)
	if err != nil {
		t.Fatal(err)
	}
	col := collect(c, nil)
	var before map[int32]int64
	waitFor(t, 30*time.Second, "every message acked and committed", func() bool {
		before = committedOffsets(t, client, group, topic)
		return col.has(values) && before[0]+before[1] == int64(len(values))
	})

	closing.Store(true) // from here the rounds fail while claims remain
	values = produce(t, client, topic, "w", 20)
	waitFor(t, 30*time.Second, "the new messages acked", func() bool {
		for _, v := range values {
			if !col.wasAcked(v) {
				return false
			}
		}
		return true
	})
	err = c.Close()
	<-col.done
	if !failed.Load() {
		t.Fatal("no commit round failed")
	}
	if !errors.Is(err, ErrCommitTimeout) {
		t.Fatalf("Close = %v; want ErrCommitTimeout (every round of the final commits failed)", err)
	}
	now := committedOffsets(t, client, group, topic)
	t.Logf("committed before Close %v, after %v", before, now)
	if !maps.Equal(now, before) {
		t.Errorf("Close said the final commits were not confirmed, but committed them after the claims were released (a round ran then: %v)",
			after.Load())
	}
}
