package kafkaconsumer

import (
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/kafkaconsumer/kafkaconsumer/internal/testcluster"
)

// startRackCluster starts, for a parallel test, a cluster of its own of
// two brokers in racks rack-0 and rack-1 with Kafka's rack-aware replica
// selector; it skips the test before Kafka 2.4.
func startRackCluster(t *testing.T) *testcluster.Cluster {
	t.Helper()
	needFaults(t) // a cluster of its own
	t.Parallel()
	if kafkaVersion, _ := testcluster.VersionsFromEnv(); !testKafkaVersion().IsAtLeast(sarama.V2_4_0_0) {
		t.Skipf("rack-aware replica selection needs Kafka 2.4 (KIP-392), not %s", kafkaVersion)
	}
	return startFaultCluster(t, testcluster.Options{ZooKeepers: 1, Brokers: 2,
		BrokerRacks:  []string{"rack-0", "rack-1"},
		BrokerConfig: map[string]string{"replica.selector.class": "org.apache.kafka.common.replica.RackAwareReplicaSelector"}})
}

// TestRackAwareFetching: on two brokers in two racks with Kafka's
// rack-aware replica selector, a consumer with Config.RackID fetches each
// partition from the replica in its rack, which the leader names (KIP-392;
// a leader in another rack answers such a fetcher with no record). Every
// message arrives, single and in batches.
func TestRackAwareFetching(t *testing.T) {
	cluster := startRackCluster(t)
	client := newTestClientOf(t, cluster.KafkaPeers())
	topic := uniqueName("rack")
	// Half the partitions are led by the broker in the other rack, which
	// names its follower in the consumer's rack.
	if err := cluster.CreateTopic(topic, 6, 2); err != nil {
		t.Fatal(err)
	}
	values := produce(t, client, topic, "rack", 300)

	for _, batch := range []int{0, 50} {
		config := testConfig()
		config.Discovery, config.Brokers = DiscoverFromZookeeper, nil
		config.RackID = "rack-1"
		config.BatchSize = batch
		c, err := Join(uniqueName("rack"), TopicSubscription(topic), cluster.ZookeeperPeers(), config)
		if err != nil {
			t.Fatal(err)
		}
		received, done := receiveAll(c)
		t.Cleanup(func() { _ = c.Close(); <-done }) // a second Close is harmless
		if !poll(30*time.Second, func() bool { return received.has(values) }) {
			t.Errorf("BatchSize %d: received %d of %d messages", batch, received.received(values), len(values))
		}
		if err := c.Close(); err != nil {
			t.Errorf("Close() = %v", err)
		}
		<-done
	}
}

// TestRackAwareFetchingReplicaRestarted: the replica in the consumer's
// rack stops and starts again, as in a rolling restart. While it was
// down the consumer's client refreshed its metadata without it, so when
// the leader names it again the client does not know it: the fetcher
// must refresh the metadata and fetch from it, not ask the leader again
// and again until Metadata.RefreshFrequency has passed (a partition that
// makes no progress for 10 minutes by default).
func TestRackAwareFetchingReplicaRestarted(t *testing.T) {
	cluster := startRackCluster(t)
	client := newTestClientOf(t, cluster.KafkaPeers())
	topic := uniqueName("rack")
	if err := cluster.CreateTopic(topic, 4, 2); err != nil {
		t.Fatal(err)
	}
	for _, batch := range []int{0, 50} {
		config := testConfig()
		config.Discovery, config.Brokers = DiscoverFromZookeeper, nil
		config.RackID = "rack-1"
		config.BatchSize = batch
		config.Metadata.RefreshFrequency = 10 * time.Minute
		c, err := Join(uniqueName("rack"), TopicSubscription(topic), cluster.ZookeeperPeers(), config)
		if err != nil {
			t.Fatal(err)
		}
		received, done := receiveAll(c)
		t.Cleanup(func() { _ = c.Close(); <-done }) // a second Close is harmless
		before := produce(t, client, topic, "before", 40)
		if !poll(30*time.Second, func() bool { return received.has(before) }) {
			t.Fatalf("BatchSize %d: received %d of %d messages before the restart", batch, received.received(before), len(before))
		}
		// Broker 1, the consumer's rack, stops: its partitions' leadership
		// moves to broker 0, and the consumer's client learns the
		// metadata without broker 1.
		if err := cluster.StopBroker(1); err != nil {
			t.Fatal(err)
		}
		during := produce(t, client, topic, "during", 40)
		if !poll(30*time.Second, func() bool { return received.has(during) }) {
			t.Fatalf("BatchSize %d: received %d of %d messages with broker 1 down", batch, received.received(during), len(during))
		}
		if err := cluster.StartBroker(1); err != nil {
			t.Fatal(err)
		}
		// Once broker 1 is in sync again, the leader names it to the
		// consumer.
		waitFor(t, 30*time.Second, "broker 1 in sync again", func() bool {
			if err := client.RefreshMetadata(topic); err != nil {
				return false
			}
			for p := range int32(4) {
				if isr, err := client.InSyncReplicas(topic, p); err != nil || len(isr) != 2 {
					return false
				}
			}
			return true
		})
		after := produce(t, client, topic, "after", 200)
		if !poll(45*time.Second, func() bool { return received.has(after) }) {
			t.Errorf("BatchSize %d: received %d of %d messages once broker 1 was back", batch, received.received(after), len(after))
		}
		if err := c.Close(); err != nil {
			t.Errorf("Close() = %v", err)
		}
		<-done
	}
}
