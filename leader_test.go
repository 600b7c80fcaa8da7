package kafkaconsumer

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer/internal/fetch"

	"github.com/kafkaconsumer/kafkaconsumer/internal/testcluster"
)

// fetchingFrom returns the ID of the broker whose loop each partition of c
// fetches in now, or -1 for a partition between two subscriptions.
func fetchingFrom(c Consumer) map[TopicPartition]int32 {
	result := make(map[TopicPartition]int32)
	for tp, pm := range *c.(*consumerManager).pms.Load() {
		pm.mu.Lock()
		pc := pm.pc
		pm.mu.Unlock()
		result[tp] = -1
		if f, ok := pc.(*fetch.Fetcher); ok {
			result[tp] = f.Broker()
		}
	}
	return result
}

// allFrom reports whether every one of the n partitions of c fetches from
// broker id.
func allFrom(c Consumer, n int, id int32) bool {
	from := fetchingFrom(c)
	for _, b := range from {
		if b != id {
			return false
		}
	}
	return len(from) == n
}

// producedSoFar returns how many messages p produced so far.
func (p *steadyProducer) producedSoFar() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.produced)
}

// partitionsLedBy reports whether the metadata that client reads now
// names broker id as the leader of each of topic's partitions, and, with
// isr, whether id is in each one's in-sync replicas.
func partitionsLedBy(client sarama.Client, topic string, partitions []int32, id int32, isr bool) bool {
	if client.RefreshMetadata(topic) != nil {
		return false
	}
	for _, p := range partitions {
		if isr {
			replicas, err := client.InSyncReplicas(topic, p)
			if err != nil || !slices.Contains(replicas, id) {
				return false
			}
			continue
		}
		leader, err := client.Leader(topic, p)
		if err != nil || leader.ID() != id {
			return false
		}
	}
	return true
}

// TestPreferredLeaderElection: on two brokers, A the preferred leader of
// every partition, consumers (single and in batches) under steady
// production follow the leaders to B while A restarts, and back to A after
// a preferred-leader election, although B, now a follower, would go on
// answering their fetches (followers serve them from Fetch v11 on): every
// partition fetches from A again within seconds. Then the consumers'
// connections to B are held (nothing gets through): every message
// produced, before and after, arrives, none lost.
//
// What moves the fetchers is the leader epoch they send (KIP-320): B
// answers the old epoch with FENCED_LEADER_EPOCH. With the engine sending
// -1 as it did, the fetchers stayed on B (15 s after the election, and
// about 100 messages missing 10 s after B was held), whether or not the
// loop re-checks the leader after each response (errLeaderMoved), since
// the client's metadata still named B.
func TestPreferredLeaderElection(t *testing.T) {
	needFaults(t) // a cluster of its own
	t.Parallel()
	if kafkaVersion, _ := testcluster.VersionsFromEnv(); !testKafkaVersion().IsAtLeast(sarama.V2_4_0_0) {
		t.Skipf("a preferred-leader election through the admin API with an election type (KIP-460), and fetches from followers (KIP-392), need Kafka 2.4, not %s", kafkaVersion)
	}
	const a, b = int32(0), int32(1) // broker i has broker.id i
	cluster := startFaultCluster(t, testcluster.Options{ZooKeepers: 1, Brokers: 2,
		// The election is the test's, not the controller's own.
		BrokerConfig: map[string]string{"auto.leader.rebalance.enable": "false"}})
	client := newTestClientOf(t, cluster.KafkaPeers())
	topic := uniqueName("leader")
	partitions := []int32{0, 1}
	assignment := map[int32][]int32{0: {a, b}, 1: {a, b}}
	if err := newTestAdmin(t, client).CreateTopic(topic, &sarama.TopicDetail{NumPartitions: -1, ReplicationFactor: -1, ReplicaAssignment: assignment}, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "A to lead every partition", func() bool { return partitionsLedBy(client, topic, partitions, a, false) })

	modes := []int{0, 10}
	consumers := make(map[int]Consumer)
	received := make(map[int]*valueCounts)
	proxies := make(map[int]*kafkaProxies)
	for _, batch := range modes {
		config := testConfig()
		config.Discovery, config.Brokers = DiscoverFromZookeeper, nil
		config.BatchSize = batch
		config.Offsets.Initial = sarama.OffsetOldest
		proxies[batch] = newKafkaProxies(t, nil)
		c, err := joinWithHooks(uniqueName("leader"), TopicSubscription(topic), cluster.ZookeeperPeers(), config, &testHooks{kafkaAddress: proxies[batch].address})
		if err != nil {
			t.Fatal(err)
		}
		consumers[batch] = c
		var done <-chan struct{}
		received[batch], done = receiveAll(c)
		t.Cleanup(func() {
			_ = c.Close()
			<-done
		})
	}
	// waitAll waits until every consumer fetches every partition from
	// broker id, and returns how long that took; it reports a timeout as
	// an error.
	waitAll := func(timeout time.Duration, what string, id int32) time.Duration {
		t.Helper()
		start := time.Now()
		for _, batch := range modes {
			if !poll(timeout-time.Since(start), func() bool { return allFrom(consumers[batch], len(partitions), id) }) {
				t.Errorf("BatchSize %d: %s: the partitions fetch from %v (broker IDs) after %s", batch, what, fetchingFrom(consumers[batch]), timeout)
			}
		}
		return time.Since(start)
	}
	if waitAll(30*time.Second, "at the start", a); t.Failed() {
		t.FailNow()
	}
	// Each send waits for every in-sync replica, so that none is lost in
	// a change of leader, and retries through one.
	producerConfig := sarama.NewConfig()
	producerConfig.Version = testKafkaVersion()
	producerConfig.Producer.RequiredAcks = sarama.WaitForAll
	producerConfig.Producer.Return.Successes = true
	producerConfig.Producer.Retry.Max = 50
	producerConfig.Producer.Retry.Backoff = 200 * time.Millisecond
	producerClient, err := sarama.NewClient(cluster.KafkaPeers(), producerConfig)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = producerClient.Close() })
	producer := produceSteadily(t, producerClient, topic, 100)

	// A restarts: B leads.
	if err := cluster.StopBroker(int(a)); err != nil {
		t.Fatal(err)
	}
	took := waitAll(30*time.Second, "after A stopped", b)
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("A stopped: the consumers fetch from B after %s", took.Round(time.Millisecond))
	if err := cluster.StartBroker(int(a)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "A to be in sync again", func() bool { return partitionsLedBy(client, topic, partitions, a, true) })

	// The preferred-leader election: A leads again, and B, a follower,
	// would go on serving fetches.
	admin := newTestAdmin(t, newTestClientOf(t, cluster.KafkaPeers())) // the controller moved with A's restart
	results, err := admin.ElectLeaders(sarama.PreferredElection, map[string][]int32{topic: partitions})
	if err != nil {
		t.Fatalf("ElectLeaders: %v", err)
	}
	for p, r := range results[topic] {
		if !errors.Is(r.ErrorCode, sarama.ErrNoError) {
			t.Fatalf("the election of partition %d: %v", p, r.ErrorCode)
		}
	}
	waitFor(t, 30*time.Second, "A to lead every partition again", func() bool { return partitionsLedBy(client, topic, partitions, a, false) })
	if took = waitAll(15*time.Second, "after the preferred-leader election", a); !t.Failed() {
		t.Logf("the election: the consumers fetch from A again after %s", took.Round(time.Millisecond))
	}

	// B answers the consumers nothing any more: they go on.
	var held []*testcluster.Proxy
	for _, batch := range modes {
		kp := proxies[batch]
		kp.mu.Lock()
		p := kp.byAdr[cluster.KafkaPeers()[b]]
		kp.mu.Unlock()
		if p == nil {
			t.Fatalf("BatchSize %d: no connection to B went through the proxies", batch)
		}
		p.Hold()
		t.Cleanup(p.Pass)
		held = append(held, p)
	}
	before := producer.producedSoFar()
	waitFor(t, 10*time.Second, "100 more messages to be produced", func() bool { return producer.producedSoFar() >= before+100 })
	values := producer.finish()
	stopped := time.Now()
	for _, batch := range modes {
		if !poll(10*time.Second-time.Since(stopped), func() bool { return received[batch].has(values) }) {
			t.Errorf("BatchSize %d: received %d of the %d messages produced within 10 s; the partitions fetch from %v",
				batch, received[batch].received(values), len(values), fetchingFrom(consumers[batch]))
		}
	}
	t.Logf("%d messages produced, the last %d while B was held; %s after the production stopped, the consumers had received %d and %d of them",
		len(values), len(values)-before, time.Since(stopped).Round(time.Millisecond), received[0].received(values), received[10].received(values))
	for _, p := range held {
		p.Pass() // so that Close commits
	}
	for _, batch := range modes {
		if err := consumers[batch].Close(); err != nil {
			t.Errorf("BatchSize %d: Close() = %v", batch, err)
		}
	}
}
