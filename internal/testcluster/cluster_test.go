package testcluster_test

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/go-zookeeper/zk"
	"go.uber.org/goleak"

	"github.com/kafkaconsumer/kafkaconsumer/internal/testcluster"
)

func skipShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts ZooKeeper and Kafka JVMs; skipped under -short")
	}
}

func TestEnsureJarsConcurrent(t *testing.T) {
	skipShort(t)
	if _, err := exec.LookPath("mvn"); err != nil {
		t.Skip("needs Maven")
	}
	t.Setenv(testcluster.JarsEnv, t.TempDir()+"/jars")
	var wg sync.WaitGroup
	dirs := make([]string, 3)
	errs := make([]error, 3)
	for i := range dirs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dirs[i], errs[i] = testcluster.EnsureJars()
		}()
	}
	wg.Wait()
	for i := range dirs {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if dirs[i] != dirs[0] {
			t.Fatalf("EnsureJars returned %q and %q", dirs[0], dirs[i])
		}
	}
	began := time.Now()
	if _, err := testcluster.EnsureJars(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(began); d > time.Second {
		t.Errorf("a second EnsureJars took %s; want no download", d)
	}
}

func produce(t *testing.T, c *testcluster.Cluster, topic, value string) {
	t.Helper()
	cfg := sarama.NewConfig()
	cfg.Producer.Return.Successes = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	p, err := sarama.NewSyncProducer(c.KafkaPeers(), cfg)
	if err != nil {
		t.Fatalf("producer: %v", err)
	}
	defer p.Close()
	if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Partition: 0, Value: sarama.StringEncoder(value)}); err != nil {
		t.Fatalf("produce %q: %v", value, err)
	}
}

// consume reads partition 0 of topic from the start and checks that it
// holds exactly want.
func consume(t *testing.T, c *testcluster.Cluster, topic string, want ...string) {
	t.Helper()
	consumer, err := sarama.NewConsumer(c.KafkaPeers(), sarama.NewConfig())
	if err != nil {
		t.Fatalf("consumer: %v", err)
	}
	defer consumer.Close()
	pc, err := consumer.ConsumePartition(topic, 0, sarama.OffsetOldest)
	if err != nil {
		t.Fatalf("consume: %v", err)
	}
	defer pc.Close()
	timeout := time.NewTimer(30 * time.Second)
	defer timeout.Stop()
	for i, w := range want {
		select {
		case m := <-pc.Messages():
			if string(m.Value) != w || m.Offset != int64(i) {
				t.Fatalf("message at offset %d is %q, want %q at offset %d", m.Offset, m.Value, w, i)
			}
		case <-timeout.C:
			t.Fatalf("timed out waiting for message %d (%q)", i, w)
		}
	}
}

// closeCluster closes c and waits until its processes are gone.
func closeCluster(t *testing.T, c *testcluster.Cluster) {
	t.Helper()
	pids := c.Pids()
	if err := c.Close(); err != nil {
		t.Error(err)
	}
	if err := testcluster.WaitGone(pids, 10*time.Second); err != nil {
		t.Error(err)
	}
}

func TestCluster(t *testing.T) {
	skipShort(t)
	began := time.Now()
	c, err := testcluster.Start(testcluster.Options{QuickBrokers: true, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	dir := c.Dir()
	defer func() {
		closeCluster(t, c)
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("Close left %s behind (%v)", dir, err)
		}
		// Nothing of the harness (process waiters, ZooKeeper or Kafka
		// connections) outlives Close.
		// (go-metrics runs one global meter goroutine for sarama, for good.)
		goleak.VerifyNone(t, goleak.IgnoreTopFunction("github.com/rcrowley/go-metrics.(*meterArbiter).tick"))
	}()
	t.Logf("started in %s", time.Since(began))

	if got := c.ZookeeperPeers(); !strings.HasPrefix(got, "127.0.0.1:") || strings.Contains(got, ",") {
		t.Errorf("ZookeeperPeers() = %q", got)
	}
	if got := c.KafkaPeers(); len(got) != 1 || !strings.HasPrefix(got[0], "127.0.0.1:") {
		t.Errorf("KafkaPeers() = %q", got)
	}
	if err := c.CreateTopic("harness", 2, 1); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateTopic("harness", 2, 1); !errors.Is(err, sarama.ErrTopicAlreadyExists) {
		t.Errorf("creating it again: %v, want ErrTopicAlreadyExists", err)
	}
	produce(t, c, "harness", "one")
	consume(t, c, "harness", "one")

	// A graceful stop and a restart keep the data.
	pid := c.BrokerPID(0)
	if err := c.StopBroker(0); err != nil {
		t.Fatal(err)
	}
	if c.BrokerPID(0) != 0 {
		t.Error("BrokerPID is not 0 after StopBroker")
	}
	if err := testcluster.WaitGone([]int{pid}, time.Second); err != nil {
		t.Error(err)
	}
	if err := c.StartBroker(0); err != nil {
		t.Fatal(err)
	}
	if c.BrokerPID(0) == 0 || c.BrokerPID(0) == pid {
		t.Errorf("BrokerPID after restart = %d (before: %d)", c.BrokerPID(0), pid)
	}
	produce(t, c, "harness", "two")
	consume(t, c, "harness", "one", "two")

	// ZooKeeper goes away and comes back under the broker's feet.
	if err := c.KillZooKeeper(0); err != nil {
		t.Fatal(err)
	}
	if err := c.StartZooKeeper(0); err != nil {
		t.Fatal(err)
	}

	// A crashed broker restarts once its old registration has expired.
	if err := c.KillBroker(0); err != nil {
		t.Fatal(err)
	}
	if err := c.StartBroker(0); err != nil {
		t.Fatal(err)
	}
	produce(t, c, "harness", "three")
	consume(t, c, "harness", "one", "two", "three")
	if err := c.DeleteTopic("harness"); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateTopic("harness", 1, 1); err != nil {
		t.Fatalf("re-creating a deleted topic: %v", err)
	}
	if err := c.Healthy(10 * time.Second); err != nil {
		t.Fatal(err)
	}
}

// A KRaft cluster: the brokers serve without ZooKeeper, whose tree holds
// no /brokers; topics, restarts and the state file work as in ZooKeeper
// mode. KAFKA_VERSION picks the release (4.x runs only in this mode).
func TestKRaftCluster(t *testing.T) {
	skipShort(t)
	kafka, zookeeper := testcluster.VersionsFromEnv()
	dir := t.TempDir()
	c, err := testcluster.Start(testcluster.Options{QuickBrokers: true, Logf: t.Logf, Mode: testcluster.ModeKRaft, Dir: dir, Detached: true,
		KafkaVersion: kafka, ZooKeeperVersion: zookeeper})
	if err != nil {
		t.Fatal(err)
	}
	defer closeCluster(t, c)
	if c.Mode() != testcluster.ModeKRaft {
		t.Errorf("Mode() = %q", c.Mode())
	}
	conn, _, err := zk.Connect(strings.Split(c.ZookeeperPeers(), ","), 10*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if ok, _, err := conn.Exists("/brokers"); err != nil || ok {
		t.Errorf("ZooKeeper has /brokers (%v, %v); KRaft brokers must not use it", ok, err)
	}
	if err := c.CreateTopic("harness", 2, 1); err != nil {
		t.Fatal(err)
	}
	produce(t, c, "harness", "one")
	loaded, err := testcluster.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer loaded.Close() // the broker it restarts; c's Close kills the others
	if loaded.Mode() != testcluster.ModeKRaft {
		t.Errorf("Load: Mode() = %q", loaded.Mode())
	}
	if err := loaded.KillBroker(0); err != nil {
		t.Fatal(err)
	}
	if err := loaded.StartBroker(0); err != nil {
		t.Fatal(err)
	}
	produce(t, c, "harness", "two")
	consume(t, c, "harness", "one", "two")
	if err := loaded.Healthy(10 * time.Second); err != nil {
		t.Fatal(err)
	}
}
