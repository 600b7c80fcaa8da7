package kafkaconsumer

// The integration scenarios, on the real cluster: one instance consuming
// one and two topics, misuse of the API, instances joining one after the
// other and at once, an instance taking over the partitions of one that
// left, and many instances creating a new group at once. Each owns its
// topics and groups and runs in parallel with the others.

import (
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

func TestIntegrationOneInstanceOneTopic(t *testing.T) {
	parallelClusterTest(t)
	topic := newTopic(t, 4)
	client := newTestClient(t)
	group := uniqueName("it.one")
	start := startGroupAt(t, client, group, topic)

	c := join(t, group, TopicSubscription(topic), nil)
	col := collect(c, nil)
	values := produce(t, client, topic, group, 100)
	waitFor(t, 30*time.Second, "100 messages", func() bool { return col.has(values) })
	col.close(t)

	checkCommitted(t, client, group, start, map[string]int{topic: 100})
	checkDeregistered(t, group, c)
}

func TestIntegrationOneInstanceTwoTopics(t *testing.T) {
	parallelClusterTest(t)
	topic1 := newTopic(t, 1)
	topic4 := newTopic(t, 4)
	client := newTestClient(t)
	group := uniqueName("it.two")
	start := startGroupAt(t, client, group, topic4, topic1)

	c := join(t, group, TopicSubscription(topic4, topic1), nil)
	col := collect(c, nil)
	values := append(produce(t, client, topic4, group+".a", 100), produce(t, client, topic1, group+".b", 200)...)
	waitFor(t, 30*time.Second, "300 messages", func() bool { return col.has(values) })
	col.close(t)

	checkCommitted(t, client, group, start, map[string]int{topic4: 100, topic1: 200})
	checkDeregistered(t, group, c)
}

func TestIntegrationMisuse(t *testing.T) {
	parallelClusterTest(t)
	topic := newTopic(t, 1)
	c := join(t, uniqueName("it.misuse"), TopicSubscription(topic), nil)
	c.Ack(nil)
	c.Ack(&sarama.ConsumerMessage{Topic: "nope", Partition: 3, Offset: 1})
	c.Interrupt()
	c.Interrupt()
	if err := c.Close(); err != nil {
		t.Fatalf("Close after Interrupt = %s", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close = %s", err)
	}
	c.Ack(&sarama.ConsumerMessage{Topic: topic, Partition: 0, Offset: 1})
	if stats := c.Stats(); len(stats) != 0 {
		t.Errorf("Stats after Close = %v", stats)
	}
	for range c.Errors() {
	}
}

func TestIntegrationSerialInstances(t *testing.T) {
	parallelClusterTest(t)
	topic := newTopic(t, 4)
	client := newTestClient(t)
	group := uniqueName("it.serial")
	start := startGroupAt(t, client, group, topic)
	values := produce(t, client, topic, group, 100)

	// The first instance processes 50 messages, then closes; what it
	// received beyond those is not acked, and goes to the second.
	var mu sync.Mutex
	processed := 0
	first := join(t, group, TopicSubscription(topic), nil)
	col1 := collect(first, func(*sarama.ConsumerMessage) bool {
		mu.Lock()
		defer mu.Unlock()
		processed++
		return processed <= 50
	})
	waitFor(t, 30*time.Second, "50 messages", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return processed >= 50
	})
	col1.close(t)

	// The second processes every message the first did not ack (messages
	// the first received without acking must come again).
	second := join(t, group, TopicSubscription(topic), nil)
	col2 := collect(second, nil)
	waitFor(t, 30*time.Second, "the rest of the messages", func() bool {
		for _, v := range values {
			if !col1.wasAcked(v) && col2.count(v) == 0 {
				return false
			}
		}
		return true
	})
	col2.close(t)

	_, duplicates := union(values, col1, col2)
	t.Logf("duplicates: %d", duplicates)
	checkCommitted(t, client, group, start, map[string]int{topic: 100})
	checkDeregistered(t, group, first, second)
}

func TestIntegrationParallelInstances(t *testing.T) {
	parallelClusterTest(t)
	topic := newTopic(t, 64)
	client := newTestClient(t)
	group := uniqueName("it.parallel")
	start := startGroupAt(t, client, group, topic)

	var consumers []Consumer
	var cols []*collector
	for i := 0; i < 10; i++ {
		c := join(t, group, TopicSubscription(topic), nil)
		consumers = append(consumers, c)
		cols = append(cols, collect(c, nil))
	}
	// Wait until the group settled: each instance claimed its 6 or 7 of
	// the 64 partitions.
	waitFor(t, 60*time.Second, "64 partitions claimed by 10 instances, 6 or 7 each", func() bool {
		claimed := 0
		for _, c := range consumers {
			stats := c.Stats()
			if len(stats) < 6 || len(stats) > 7 {
				return false
			}
			for _, s := range stats {
				if s.Claimed {
					claimed++
				}
			}
		}
		return claimed == 64
	})
	values := produce(t, client, topic, group, 1000)
	waitFor(t, 60*time.Second, "1000 messages", func() bool {
		all, _ := union(values, cols...)
		return all
	})
	for _, col := range cols {
		col.close(t)
	}
	_, duplicates := union(values, cols...)
	if duplicates != 0 {
		t.Errorf("%d duplicates in a settled group", duplicates)
	}
	checkCommitted(t, client, group, start, map[string]int{topic: 1000})
	checkDeregistered(t, group, consumers...)
}

func TestIntegrationTakeOver(t *testing.T) {
	parallelClusterTest(t)
	topic := newTopic(t, 4)
	client := newTestClient(t)
	group := uniqueName("it.takeover")
	start := startGroupAt(t, client, group, topic)
	config := testConfig()
	config.MaxProcessingTime = 500 * time.Millisecond

	var rebalances sync.Map
	a := join(t, group, TopicSubscription(topic), config)
	colA := collect(a, nil)
	configB := testConfig()
	configB.MaxProcessingTime = 500 * time.Millisecond
	configB.OnRebalance = func(r Rebalance) { rebalances.Store(len(r.Assigned), r) }
	b := join(t, group, TopicSubscription(topic), configB)
	colB := collect(b, nil)
	waitFor(t, 30*time.Second, "both instances to own 2 partitions", func() bool {
		return len(a.Stats()) == 2 && len(b.Stats()) == 2
	})

	first := produce(t, client, topic, group+".first", 100)
	waitFor(t, 30*time.Second, "the first 100 messages", func() bool {
		all, _ := union(first, colA, colB)
		return all
	})
	colA.close(t)
	waitFor(t, 30*time.Second, "the survivor to own all 4 partitions", func() bool {
		stats := b.Stats()
		claimed := 0
		for _, s := range stats {
			if s.Claimed {
				claimed++
			}
		}
		return claimed == 4
	})
	second := produce(t, client, topic, group+".second", 100)
	waitFor(t, 30*time.Second, "the second 100 messages", func() bool { return colB.has(second) })
	colB.close(t)

	if _, ok := rebalances.Load(2); !ok {
		t.Error("OnRebalance did not report the survivor taking 2 more partitions")
	}
	checkCommitted(t, client, group, start, map[string]int{topic: 200})
	checkDeregistered(t, group, a, b)
}

// TestIntegrationConcurrentJoinOfNewGroup: instances that join a group that
// does not exist yet, all at once, all get in.
func TestIntegrationConcurrentJoinOfNewGroup(t *testing.T) {
	parallelClusterTest(t)
	topic := newTopic(t, 4)
	for round := 0; round < 3; round++ {
		group := uniqueName("it.concurrent")
		var wg sync.WaitGroup
		consumers := make([]Consumer, 4)
		errs := make([]error, len(consumers))
		for i := range consumers {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				consumers[i], errs[i] = Join(group, TopicSubscription(topic), zookeeperPeers, testConfig())
			}(i)
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("round %d: Join %d of a new group: %s", round, i, err)
			}
		}
		for _, c := range consumers {
			if c != nil {
				if err := c.Close(); err != nil {
					t.Error(err)
				}
			}
		}
	}
}
