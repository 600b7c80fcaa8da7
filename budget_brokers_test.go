package kafkaconsumer

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer/internal/testcluster"
)

// TestBudgetSharedByBrokers: on three brokers that lead 16 of a topic's
// 48 partitions each, under a Config.MaxBufferedBytes small enough to
// bind, the user takes the messages of broker 0's partitions slowly; no
// broker's partitions starve: once every partition has handed out a
// message (the partitions start at different times, the more so on a
// loaded machine), each broker's share of the messages handed out in the
// next second (at most a third of the messages) is within a factor of 2
// of its share of the partitions.
func TestBudgetSharedByBrokers(t *testing.T) {
	needFaults(t)
	t.Parallel() // on a cluster of its own
	const (
		brokers      = 3
		partitions   = 48
		perPartition = 600
		size         = 100
		budget       = 64 << 10
		slowBroker   = 0
		slowTake     = 500 * time.Microsecond // the user's time for a message of slowBroker
		window       = time.Second
	)
	cluster := startFaultCluster(t, testcluster.Options{ZooKeepers: 1, Brokers: brokers})
	waitBrokersUp(t, cluster)
	topic := uniqueName("budget3")
	createLedTopic(t, cluster, topic, partitions, brokers)
	produceEach(t, cluster.KafkaPeers(), topic, partitions, perPartition, size)

	config := testConfig()
	config.Discovery, config.Brokers = DiscoverFromZookeeper, nil // the test's own cluster
	config.MaxBufferedBytes = budget
	c := joinAt(t, cluster.ZookeeperPeers(), uniqueName("budget3"), topic, config)

	var (
		mu      sync.Mutex
		seen    = make(map[int32]bool) // the partitions that handed out a message
		started time.Time              // when the last of them did; zero before
		shares  [brokers]int           // the window's messages, by leader
		counted int                    // the window's messages
		closed  bool                   // the window ended
		ended   = make(chan struct{})
	)
	limit := partitions * perPartition / 3
	go func() { // owned by the test: it ends when c's Messages close
		defer close(ended)
		for msg := range c.Messages() {
			if msg.Partition%brokers == slowBroker {
				time.Sleep(slowTake) // the user's work on the message
			}
			c.Ack(msg)
			mu.Lock()
			if started.IsZero() {
				seen[msg.Partition] = true
				if len(seen) == partitions {
					started = time.Now()
				}
			}
			if !started.IsZero() && !closed {
				if time.Since(started) >= window || counted == limit {
					closed = true
				} else {
					shares[msg.Partition%brokers]++
					counted++
				}
			}
			mu.Unlock()
		}
	}()
	t.Cleanup(func() { _ = c.Close(); <-ended })
	waitFor(t, 60*time.Second, "the window to end", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return closed
	})
	mu.Lock()
	defer mu.Unlock()
	var report strings.Builder
	for b, n := range shares {
		fmt.Fprintf(&report, " broker %d %.2f", b, float64(n)/float64(counted))
	}
	t.Logf("%d messages in the window; shares:%s", counted, report.String())
	for b, n := range shares {
		share, want := float64(n)/float64(counted), 1.0/brokers
		if share < want/2 || share > want*2 {
			t.Errorf("broker %d's partitions had %.2f of the window's %d messages; want within a factor of 2 of %.2f (shares:%s)",
				b, share, counted, want, report.String())
		}
	}
}

// createLedTopic creates topic with partitions partitions on cluster,
// partition p led by broker p%brokers (its only replica), and waits until
// the metadata names those leaders.
func createLedTopic(t *testing.T, cluster *testcluster.Cluster, topic string, partitions, brokers int32) {
	t.Helper()
	client := faultClient(t, cluster.KafkaPeers())
	assignment := make(map[int32][]int32, partitions)
	for p := range partitions {
		assignment[p] = []int32{p % brokers}
	}
	detail := &sarama.TopicDetail{NumPartitions: -1, ReplicationFactor: -1, ReplicaAssignment: assignment}
	// A creation the controller did not finish within Admin.Timeout goes
	// on: the wait for the leaders below tells.
	if err := newTestAdmin(t, client).CreateTopic(topic, detail, false); err != nil && !errors.Is(err, sarama.ErrRequestTimedOut) {
		t.Fatalf("create %s: %s", topic, err)
	}
	waitFor(t, 60*time.Second, "the topic's leaders", func() bool {
		if client.RefreshMetadata(topic) != nil {
			return false
		}
		for p := range partitions {
			leader, err := client.Leader(topic, p)
			if err != nil || leader.ID() != p%brokers {
				return false
			}
			if _, err := client.GetOffset(topic, p, sarama.OffsetNewest); err != nil {
				return false
			}
		}
		return true
	})
}

// faultClient returns a sarama client of peers (faultClientConfig),
// closed at the test's end.
func faultClient(t *testing.T, peers []string) sarama.Client {
	t.Helper()
	client, err := sarama.NewClient(peers, faultClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// faultClientConfig is faultClient's configuration: a producer of
// small record batches to chosen partitions, and an admin.
func faultClientConfig() *sarama.Config {
	config := sarama.NewConfig()
	config.Version = testKafkaVersion()
	config.Admin.Timeout = 30 * time.Second // 48 partitions on a loaded machine
	config.Net.ReadTimeout = config.Admin.Timeout + 10*time.Second
	config.Producer.Return.Successes = true
	config.Producer.Partitioner = sarama.NewManualPartitioner
	config.Producer.Flush.MaxMessages = 4 // record batches of at most 4 messages
	return config
}

// TestFaultClientWaitsForTheAdminTimeout: faultClient's admin requests
// ask the controller to answer within Admin.Timeout; its connections
// wait longer than that for the answer, or a creation the controller is
// still at on a loaded machine fails with an i/o timeout.
func TestFaultClientWaitsForTheAdminTimeout(t *testing.T) {
	t.Parallel()
	config := faultClientConfig()
	if config.Net.ReadTimeout <= config.Admin.Timeout {
		t.Errorf("faultClient's Net.ReadTimeout is %s, not longer than its Admin.Timeout %s", config.Net.ReadTimeout, config.Admin.Timeout)
	}
}

// produceEach writes n messages of size bytes to each of topic's
// partitions on peers.
func produceEach(t *testing.T, peers []string, topic string, partitions int32, n, size int) {
	t.Helper()
	producer, err := sarama.NewSyncProducerFromClient(faultClient(t, peers))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = producer.Close() }()
	pad := strings.Repeat("x", size)
	msgs := make([]*sarama.ProducerMessage, 0, int(partitions)*n)
	for i := range n {
		for p := range partitions {
			value := fmt.Sprintf("%d-%d-%s", p, i, pad)[:size]
			msgs = append(msgs, &sarama.ProducerMessage{Topic: topic, Partition: p, Value: sarama.StringEncoder(value)})
		}
	}
	if err := producer.SendMessages(msgs); err != nil {
		t.Fatalf("produce to %s: %s", topic, err)
	}
}
