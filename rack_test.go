package kafkaconsumer

import (
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/kafkaconsumer/kafkaconsumer/internal/testcluster"
)

// TestRackAwareFetching: on two brokers in two racks with Kafka's
// rack-aware replica selector, a consumer with Config.RackID fetches each
// partition from the replica in its rack, which the leader names (KIP-392;
// a leader in another rack answers such a fetcher with no record). Every
// message arrives, single and in batches. Batch mode delivered none.
func TestRackAwareFetching(t *testing.T) {
	needFaults(t) // a cluster of its own
	t.Parallel()
	if kafkaVersion, _ := testcluster.VersionsFromEnv(); !testKafkaVersion().IsAtLeast(sarama.V2_4_0_0) {
		t.Skipf("rack-aware replica selection needs Kafka 2.4 (KIP-392), not %s", kafkaVersion)
	}
	cluster := startFaultCluster(t, testcluster.Options{ZooKeepers: 1, Brokers: 2,
		BrokerRacks:  []string{"rack-0", "rack-1"},
		BrokerConfig: map[string]string{"replica.selector.class": "org.apache.kafka.common.replica.RackAwareReplicaSelector"}})
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
		if !poll(30*time.Second, func() bool { return received.has(values) }) {
			t.Errorf("BatchSize %d: received %d of %d messages", batch, received.received(values), len(values))
		}
		if err := c.Close(); err != nil {
			t.Errorf("Close() = %v", err)
		}
		<-done
	}
}
