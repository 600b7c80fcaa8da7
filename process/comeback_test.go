package process

// A partition that comes back to the instance while a handler of its
// earlier run still runs, against the real cluster.

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer"
)

// TestLateGiveBackAfterComeBack: the first message of each partition
// blocks its handler, which ignores its context. A second instance joins
// and takes one partition; the first instance stops it after
// MaxProcessingTime with the handler still running; the second instance
// reads nothing and leaves, and the partition comes back. The new run
// hands out the blocked message again, which waits behind the old
// handler (ByPartition). Once the old handler returns, its message is
// given back late: that must not withdraw the new run's hand-out of the
// same offset, and both partitions commit their end.
func TestLateGiveBackAfterComeBack(t *testing.T) {
	zookeeper, brokers := clusterPeers(t)
	topic, group := uniqueName("process.comeback"), uniqueName("process-comeback")
	createTopic(t, brokers, topic, 2)
	const n = 40
	produceKeyed(t, brokers, topic, 0, n, 10, 1)

	c1, _, handled := joinLogged(t, zookeeper, group, topic, func(c *kafkaconsumer.Config) { c.MaxProcessingTime = time.Second })
	defer c1.Close()
	release := make(chan struct{})
	var blocked sync.Map // partition -> struct{}: the first message of each blocks
	stop := runInBackground(t, c1, func(_ context.Context, msg *sarama.ConsumerMessage) error {
		if _, seen := blocked.LoadOrStore(msg.Partition, struct{}{}); !seen {
			<-release // ignores its context, as a handler stuck in a call does
		}
		handled.add(string(msg.Value))
		return nil
	}, Options{Concurrency: 8, Ordering: ByPartition})
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	waitFor(t, time.Minute, "a blocked handler on each partition", func() bool {
		k := 0
		blocked.Range(func(any, any) bool { k++; return true })
		return k == 2
	})

	c2, err := kafkaconsumer.Join(group, kafkaconsumer.TopicSubscription(topic), zookeeper, consumerConfig())
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the second instance to run a partition", func() bool { return len(c2.Stats()) == 1 && len(c1.Stats()) == 1 })
	moved := c2.Stats()[0].Partition
	if err := c2.Close(); err != nil {
		t.Fatalf("close the second instance: %s", err)
	}
	waitFor(t, time.Minute, "the partition to come back and hand out its messages again", func() bool {
		for _, s := range c1.Stats() {
			if s.Partition == moved && s.HandedOut > 0 {
				return true
			}
		}
		return false
	})

	close(release)
	waitFor(t, time.Minute, "both partitions to commit their end", func() bool {
		stats := c1.Stats()
		if len(stats) != 2 {
			return false
		}
		for _, s := range stats {
			if s.HighWaterMark < 0 || s.Committed != s.HighWaterMark {
				return false
			}
		}
		return true
	})
	if err := stop(); err != nil {
		t.Fatalf("Run: %s", err)
	}
	if err := c1.Close(); err != nil {
		t.Fatalf("close: %s", err)
	}
	if handled.len() != n {
		t.Fatalf("%d values handled, want %d", handled.len(), n)
	}
}
