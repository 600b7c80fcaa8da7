package kafkaconsumer

import (
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer/internal/testcluster"
)

// TestSwitchToKafkaAfterTheCoordinatorMoved: the group's coordinator
// moves while the group, coordinated by ZooKeeper, is idle (its broker
// killed, the coordinator elected elsewhere, the broker restarted, and
// ZooKeeper frozen a few seconds, as in the migration soak's failing
// run); then the group switches to Kafka. Its instances, whose offset
// stores knew the old coordinator, consume every partition under Kafka
// within the session timeout plus 5 s of the switch. Their JoinGroups
// went to the old coordinator's broker for ever, answered
// NOT_COORDINATOR (a member without a generation sends no heartbeat nor
// commit, which alone forgot it): the soak's stall.
func TestSwitchToKafkaAfterTheCoordinatorMoved(t *testing.T) {
	needFaults(t)
	debugLogs(t)
	t.Parallel() // on a cluster of its own
	cluster := startFaultCluster(t, testcluster.Options{ZooKeepers: 1, Brokers: 3})
	waitBrokersUp(t, cluster)
	const partitions = 4
	topic, group := uniqueName("moved"), uniqueName("moved")
	if err := cluster.CreateTopic(topic, partitions, 3); err != nil {
		t.Fatal(err)
	}
	clientConfig := sarama.NewConfig()
	clientConfig.Version = testKafkaVersion()
	clientConfig.Net.ReadTimeout = 5 * time.Second
	clientConfig.Producer.Return.Successes = true
	client, err := sarama.NewClient(cluster.KafkaPeers(), clientConfig)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	conn, _ := testZookeeper(t, cluster.ZookeeperPeers())

	config := func() *Config {
		c := testConfig()
		c.Consumer.Group.Session.Timeout = 6 * time.Second
		c.Consumer.Group.Heartbeat.Interval = time.Second
		return c
	}
	a := joinAt(t, cluster.ZookeeperPeers(), group, topic, config())
	b := joinAt(t, cluster.ZookeeperPeers(), group, topic, config())
	values := produce(t, client, topic, group, 40)
	colA, colB := collect(a, nil), collect(b, nil)
	waitFor(t, 60*time.Second, "every message consumed and committed", func() bool {
		for _, v := range values {
			if !colA.has([]string{v}) && !colB.has([]string{v}) {
				return false
			}
		}
		committed, newest := committedOffsets(t, client, group, topic), newestOffsets(t, client, topic)
		for p, n := range newest {
			if committed[p] != n {
				return false
			}
		}
		return true
	})

	// Move the coordinator: kill its broker until another leads the
	// group's partition of the offsets topic, restart it, freeze ZooKeeper.
	old := coordinatorIndex(t, cluster, client, group)
	if err := cluster.KillBroker(old); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "another broker to coordinate the group", func() bool {
		c, err := freshCoordinator(cluster, group)
		return err == nil && c != old
	})
	if err := cluster.StartBroker(old); err != nil {
		t.Fatal(err)
	}
	resume := freeze(t, cluster.ZooKeeperPID(0))
	frozen := time.Now().Add(3 * time.Second)
	waitFor(t, 10*time.Second, "3 s of ZooKeeper frozen", func() bool { return time.Now().After(frozen) })
	resume()
	waitBrokersUp(t, cluster)
	now, err := freshCoordinator(cluster, group)
	t.Logf("the group's coordinator moved from broker %d to broker %d (%v)", old, now, err)

	switched := time.Now()
	setSwitch(t, conn, "", group, switchKafka)
	limit := config().Consumer.Group.Session.Timeout + 5*time.Second
	waitFor(t, limit+30*time.Second, "both instances to consume every partition under Kafka", func() bool {
		return onKafka(a) && onKafka(b) && claimedCount(a)+claimedCount(b) == partitions
	})
	took := time.Since(switched)
	t.Logf("every partition consumed under Kafka %s after the switch", took.Round(100*time.Millisecond))
	if took > limit {
		t.Errorf("every partition consumed under Kafka %s after the switch, want within %s (the session timeout + 5 s)", took.Round(100*time.Millisecond), limit)
	}
	colA.close(t)
	colB.close(t)
}

// joinAt joins group, consuming topic, through the ZooKeeper at
// zookeeper; the consumer is closed at the end of the test.
func joinAt(t *testing.T, zookeeper, group, topic string, config *Config) Consumer {
	t.Helper()
	c, err := Join(group, TopicSubscription(topic), zookeeper, config)
	if err != nil {
		t.Fatalf("Join(%s) = %s", group, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// coordinatorIndex returns the index in cluster of the group's
// coordinator, as client finds it.
func coordinatorIndex(t *testing.T, cluster *testcluster.Cluster, client sarama.Client, group string) int {
	t.Helper()
	if err := client.RefreshCoordinator(group); err != nil {
		t.Fatal(err)
	}
	b, err := client.Coordinator(group)
	if err != nil {
		t.Fatal(err)
	}
	return brokerIndex(t, cluster, b.Addr())
}

// freshCoordinator returns the index in cluster of the group's
// coordinator as a new client finds it.
func freshCoordinator(cluster *testcluster.Cluster, group string) (int, error) {
	config := sarama.NewConfig()
	config.Version = testKafkaVersion()
	config.Net.ReadTimeout = 5 * time.Second
	config.Metadata.Retry.Max = 0
	client, err := sarama.NewClient(cluster.KafkaPeers(), config)
	if err != nil {
		return -1, err
	}
	defer func() { _ = client.Close() }()
	if err := client.RefreshCoordinator(group); err != nil {
		return -1, err
	}
	b, err := client.Coordinator(group)
	if err != nil {
		return -1, err
	}
	for i, addr := range cluster.KafkaPeers() {
		if addr == b.Addr() {
			return i, nil
		}
	}
	return -1, nil
}
