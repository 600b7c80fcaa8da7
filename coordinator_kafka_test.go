package kafkaconsumer

// CoordinatorKafka against the real cluster: joining without ZooKeeper,
// consuming, a second member joining and partitions moving one owner at
// a time, a graceful leave, Close's bound, a zombie's commit refused,
// static membership; and, without a cluster, the validation and the
// assignor's encodings.

import (
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// kafkaTestConfig is testConfig for CoordinatorKafka: Brokers set, short
// group timeouts (the broker's group.min.session.timeout.ms is 6 s).
func kafkaTestConfig() *Config {
	config := testConfig()
	config.Coordinator = CoordinatorKafka
	config.Brokers = kafkaPeers
	config.DiscoveryInterval = time.Second
	config.Consumer.Group.Session.Timeout = 6 * time.Second
	config.Consumer.Group.Heartbeat.Interval = 500 * time.Millisecond
	return config
}

// joinKafka joins group with CoordinatorKafka (no ZooKeeper), and closes
// the consumer at the end of the test if the test did not.
func joinKafka(t *testing.T, group string, subscription Subscription, config *Config) Consumer {
	t.Helper()
	c, err := Join(group, subscription, "", config)
	if err != nil {
		t.Fatalf("Join(%s) = %s", group, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// handOuts records, per partition, which consumer handed out each message,
// in the order of the hand-outs: an Observer per consumer.
type handOuts struct {
	mu     sync.Mutex
	events map[TopicPartition][]string // the consumers' names, in order
}

type handOutObserver struct {
	h    *handOuts
	name string
}

func (o handOutObserver) HandingOut(msg *sarama.ConsumerMessage) {
	o.h.mu.Lock()
	defer o.h.mu.Unlock()
	if o.h.events == nil {
		o.h.events = make(map[TopicPartition][]string)
	}
	tp := TopicPartition{Topic: msg.Topic, Partition: msg.Partition}
	o.h.events[tp] = append(o.h.events[tp], o.name)
}
func (o handOutObserver) HandingOutBatch(*Batch)            {}
func (o handOutObserver) Acked(*sarama.ConsumerMessage)     {}
func (o handOutObserver) TakenBack(*sarama.ConsumerMessage) {}

// switches returns, per partition, how often the consumer handing it out
// changed.
func (h *handOuts) switches() map[TopicPartition]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	result := make(map[TopicPartition]int)
	for tp, names := range h.events {
		for i := 1; i < len(names); i++ {
			if names[i] != names[i-1] {
				result[tp]++
			}
		}
	}
	return result
}

// TestIntegrationKafkaCoordinatorJoinSplitLeave: a member joins with no
// ZooKeeper and consumes everything; a second joins and the partitions
// split, each handed over once (no partition handed out by both in
// turn); the first leaves gracefully and the second takes everything;
// nothing is lost, nothing is delivered twice, Close is bounded.
func TestIntegrationKafkaCoordinatorJoinSplitLeave(t *testing.T) {
	parallelClusterTest(t)
	debugLogs(t)
	topic := newTopic(t, 8)
	group := uniqueName("kafkacoord")
	client := newTestClient(t)
	var h handOuts
	first := produce(t, client, topic, "a", 200)

	configA := kafkaTestConfig()
	configA.Observer = handOutObserver{&h, "A"}
	began := time.Now()
	a := joinKafka(t, group, TopicSubscription(topic), configA)
	colA := collect(a, nil)
	waitFor(t, 30*time.Second, "A to receive the first messages", func() bool { return colA.received(first) == len(first) })
	t.Logf("A joined and received %d messages in %s", len(first), time.Since(began).Round(time.Millisecond))

	configB := kafkaTestConfig()
	configB.Observer = handOutObserver{&h, "B"}
	began = time.Now()
	b := joinKafka(t, group, TopicSubscription(topic), configB)
	colB := collect(b, nil)
	waitFor(t, 30*time.Second, "the partitions to split 4/4", func() bool { return len(a.Stats()) == 4 && len(b.Stats()) == 4 })
	t.Logf("split settled %s after B's Join", time.Since(began).Round(time.Millisecond))
	second := produce(t, client, topic, "b", 200)
	waitFor(t, 30*time.Second, "the second messages", func() bool { return colA.received(second)+colB.received(second) >= len(second) })

	began = time.Now()
	colA.close(t)
	closed := time.Since(began)
	if closed > 10*time.Second {
		t.Errorf("A's Close took %s", closed)
	}
	waitFor(t, 30*time.Second, "B to take every partition", func() bool { return len(b.Stats()) == 8 })
	t.Logf("A closed in %s; B had all 8 partitions %s after", closed.Round(time.Millisecond), (time.Since(began) - closed).Round(time.Millisecond))
	third := produce(t, client, topic, "c", 200)
	waitFor(t, 30*time.Second, "B to receive the third messages", func() bool { return colB.received(third) == len(third) })
	colB.close(t)

	all := append(append(append([]string(nil), first...), second...), third...)
	ok, duplicates := union(all, colA, colB)
	if !ok || duplicates != 0 {
		t.Errorf("received every message: %t, duplicates %d", ok, duplicates)
	}
	for tp, n := range h.switches() {
		if n > 2 {
			t.Errorf("%s/%d changed hands %d times: two members handed it out in turn", tp.Topic, tp.Partition, n)
		}
	}
	committed := committedOffsets(t, client, group, topic)
	newest := newestOffsets(t, client, topic)
	for p, want := range newest {
		if committed[p] != want {
			t.Errorf("partition %d: committed %d, want %d", p, committed[p], want)
		}
	}
}
