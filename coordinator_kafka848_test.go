package kafkaconsumer

// GroupProtocolConsumer (KIP-848) against the real cluster, which must
// run KRaft with Kafka 4.0 or later (make test-kraft KAFKA_VERSION=4.4.0):
// joining, consuming and committing; two members sharing the partitions,
// each handed over once; the Join errors.

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// consumerProtocolTest is kafkaCoordinatorTest for GroupProtocolConsumer:
// it skips, saying why, unless the cluster runs KRaft with Kafka 4.0 or
// later, the first whose brokers enable the consumer group protocol.
func consumerProtocolTest(t *testing.T) {
	t.Helper()
	kafkaCoordinatorTest(t)
	if os.Getenv("KAFKA_MODE") != "kraft" || !testKafkaVersion().IsAtLeast(sarama.V4_0_0_0) {
		t.Skipf("GroupProtocolConsumer needs a KRaft cluster of Kafka 4.0 or later (make test-kraft KAFKA_VERSION=4.4.0), not %s in %q mode", testKafkaVersion(), os.Getenv("KAFKA_MODE"))
	}
}

// consumerTestConfig is kafkaTestConfig with GroupProtocolConsumer.
func consumerTestConfig() *Config {
	config := kafkaTestConfig()
	config.GroupProtocol = GroupProtocolConsumer
	return config
}

// TestIntegrationConsumerProtocolJoinSplitLeave: a member joins with the
// consumer protocol and consumes everything; a second joins and the
// broker splits the partitions, each handed over once; the first leaves
// and the second takes everything; nothing is lost, nothing is delivered
// twice, every offset is committed, Close is bounded.
func TestIntegrationConsumerProtocolJoinSplitLeave(t *testing.T) {
	consumerProtocolTest(t)
	debugLogs(t)
	topic := newTopic(t, 8)
	group := uniqueName("kip848")
	client := newTestClient(t)
	var h handOuts
	first := produce(t, client, topic, "a", 200)

	configA := consumerTestConfig()
	configA.Observer = handOutObserver{&h, "A"}
	began := time.Now()
	a := joinKafka(t, group, TopicSubscription(topic), configA)
	colA := collect(a, nil)
	waitFor(t, 30*time.Second, "A to receive the first messages", func() bool { return colA.received(first) == len(first) })
	t.Logf("A joined and received %d messages in %s", len(first), time.Since(began).Round(time.Millisecond))

	configB := consumerTestConfig()
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
		if n > 1 {
			t.Errorf("%s/%d changed hands %d times: two members handed it out in turn", tp.Topic, tp.Partition, n)
		}
	}
	committed := committedOffsets(t, client, group, topic)
	for p, want := range newestOffsets(t, client, topic) {
		if committed[p] != want {
			t.Errorf("partition %d: committed %d, want %d", p, committed[p], want)
		}
	}
}

// TestIntegrationConsumerProtocolJoinErrors: Join fails, clearly, for an
// assignor the broker does not know; Validate refuses the consumer
// protocol with the ZooKeeper coordinator.
func TestIntegrationConsumerProtocolJoinErrors(t *testing.T) {
	consumerProtocolTest(t)
	topic := newTopic(t, 1)
	config := consumerTestConfig()
	config.GroupRemoteAssignor = "nosuch"
	c, err := Join(uniqueName("kip848"), TopicSubscription(topic), "", config)
	if err == nil {
		_ = c.Close()
		t.Fatal("Join with GroupRemoteAssignor nosuch succeeded")
	}
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), `"nosuch"`) {
		t.Errorf("Join with GroupRemoteAssignor nosuch = %v, want ErrInvalidConfig naming it", err)
	}

	config = consumerTestConfig()
	config.Coordinator = CoordinatorZooKeeper
	config.Brokers = nil
	if _, err := Join(uniqueName("kip848"), TopicSubscription(topic), zookeeperPeers, config); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "set Coordinator to CoordinatorKafka") {
		t.Errorf("Join with GroupProtocolConsumer and CoordinatorZooKeeper = %v, want ErrInvalidConfig", err)
	}
}
