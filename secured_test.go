package kafkaconsumer

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/go-zookeeper/zk"

	"github.com/kafkaconsumer/kafkaconsumer/internal/testcluster"
)

// startSecuredCluster starts a test cluster of one ZooKeeper node and one
// broker in the given security mode, with a topic of 4 partitions, for
// the test and its subtests; Close is a cleanup of t.
func startSecuredCluster(t *testing.T, security string) *testcluster.Cluster {
	t.Helper()
	began := time.Now()
	c, err := testcluster.Start(testcluster.Options{Security: security, QuickBrokers: true})
	if err != nil {
		t.Fatalf("start a %s cluster: %s", security, err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close the %s cluster: %s", security, err)
		}
	})
	t.Logf("%s cluster started in %s", security, time.Since(began).Round(100*time.Millisecond))
	if err := c.CreateTopic("secured.4", 4, 1); err != nil {
		t.Fatal(err)
	}
	return c
}

// securedClient returns a producing client for the cluster's SASL_SSL
// listener.
func securedClient(t testing.TB, c *testcluster.Cluster) sarama.Client {
	t.Helper()
	config := sarama.NewConfig()
	if err := c.SecureConfig(config); err != nil {
		t.Fatal(err)
	}
	config.Producer.Return.Successes = true
	config.Producer.RequiredAcks = sarama.WaitForAll
	config.Producer.Partitioner = sarama.NewRoundRobinPartitioner
	client, err := sarama.NewClient(c.SecureKafkaPeers(), config)
	if err != nil {
		t.Fatalf("connect to kafka over SASL_SSL: %s", err)
	}
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// securedConfig is testConfig speaking TLS with the cluster's CA and
// SASL/SCRAM-SHA-512.
func securedConfig(t testing.TB, c *testcluster.Cluster) *Config {
	t.Helper()
	config := testConfig()
	if err := c.SecureConfig(config.Config); err != nil {
		t.Fatal(err)
	}
	return config
}

// brokerAddrs returns the sorted addresses of the brokers a consumer's
// sarama client knows: those of the listener it connected to, which
// Kafka's metadata answers list.
func brokerAddrs(c Consumer) []string {
	var addrs []string
	for _, b := range c.(*consumerManager).client.Brokers() {
		addrs = append(addrs, b.Addr())
	}
	sort.Strings(addrs)
	return addrs
}

// consumeSome joins the group with config, checks the brokers it talks
// to, consumes n messages produced through client, checks that they are
// committed, closes, and checks that nothing of the instance is left in
// ZooKeeper.
func consumeSome(t *testing.T, zookeeper string, client sarama.Client, config *Config, wantBrokers []string, n int) {
	t.Helper()
	group := uniqueName("it.secured")
	start := startGroupAt(t, client, group, "secured.4")
	c, err := Join(group, TopicSubscription("secured.4"), zookeeper, config)
	if err != nil {
		t.Fatalf("Join = %s", err)
	}
	col := collect(c, nil)
	if got, want := strings.Join(brokerAddrs(c), ","), strings.Join(wantBrokers, ","); got != want {
		t.Errorf("the consumer talks to %s, want %s", got, want)
	}
	values := produce(t, client, "secured.4", group, n)
	waitFor(t, 30*time.Second, fmt.Sprintf("%d messages", n), func() bool { return col.has(values) })
	col.close(t)
	checkCommitted(t, client, group, start, map[string]int{"secured.4": n})
	checkNoRegistrations(t, zookeeper, group)
}

// joinFails checks that Join fails within bound, with an error that
// errors.Is matches to want (when not nil) and that contains each of
// texts, and leaves nothing registered.
func joinFails(t *testing.T, zookeeper string, config *Config, bound time.Duration, want error, texts ...string) {
	t.Helper()
	group := uniqueName("it.secured.fail")
	began := time.Now()
	c, err := Join(group, TopicSubscription("secured.4"), zookeeper, config)
	took := time.Since(began)
	if err == nil {
		_ = c.Close()
		t.Fatalf("Join succeeded (in %s)", took)
	}
	t.Logf("Join failed in %s: %s", took.Round(time.Millisecond), err)
	if want != nil && !errors.Is(err, want) {
		t.Errorf("Join = %q, want an error matching %q", err, want)
	}
	for _, text := range texts {
		if !strings.Contains(err.Error(), text) {
			t.Errorf("Join = %q, want it to name %q", err, text)
		}
	}
	if took > bound {
		t.Errorf("Join took %s to fail, want at most %s", took, bound)
	}
	checkNoRegistrations(t, zookeeper, group)
}

// TestIntegrationSecuredSASLSSL runs consumers against a cluster whose
// only listener is SASL_SSL with SCRAM-SHA-512 (between the brokers too):
// Kafka registers it with "host":null,"port":-1, which kazoo-go cannot
// read.
func TestIntegrationSecuredSASLSSL(t *testing.T) {
	needCluster(t)
	skipKafkaDiscovery(t, "it starts a ZooKeeper-mode secured cluster and tests listener discovery")
	cluster := startSecuredCluster(t, testcluster.SecuritySASLSSL)
	verifyNoClusterLeaks(t)
	client := securedClient(t, cluster)
	zookeeper := cluster.ZookeeperPeers()

	t.Run("TLS and SCRAM through ZooKeeper discovery", func(t *testing.T) {
		consumeSome(t, zookeeper, client, securedConfig(t, cluster), cluster.SecureKafkaPeers(), 100)
	})

	t.Run("wrong password", func(t *testing.T) {
		config := securedConfig(t, cluster)
		config.Net.SASL.Password = "wrong"
		joinFails(t, zookeeper, config, 15*time.Second, sarama.ErrSASLAuthenticationFailed, "connect to kafka at "+cluster.SecureKafkaPeers()[0])
	})

	t.Run("no TLS", func(t *testing.T) {
		joinFails(t, zookeeper, testConfig(), 5*time.Second, ErrNoBrokers, "protocol PLAINTEXT", "SASL_SSL (SASL_SSL)")
	})

	t.Run("Brokers bypass discovery", func(t *testing.T) {
		// A chroot where ZooKeeper lists no broker: without Brokers, Join
		// fails with ErrNoBrokers; with them, it connects.
		conn, _ := testZookeeper(t, zookeeper)
		chroot := "/" + uniqueName("nobrokers")
		if _, err := conn.Create(chroot, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatalf("create %s: %s", chroot, err)
		}
		defer func() {
			if err := deleteRecursive(conn, chroot); err != nil {
				t.Errorf("delete %s: %s", chroot, err)
			}
		}()
		joinFails(t, zookeeper+chroot, securedConfig(t, cluster), 5*time.Second, ErrNoBrokers)

		config := securedConfig(t, cluster)
		config.Brokers = cluster.SecureKafkaPeers()
		group := uniqueName("it.secured.bootstrap")
		c, err := Join(group, TopicSubscription("secured.4"), zookeeper+chroot, config)
		if err != nil {
			t.Fatalf("Join with Brokers in a chroot without brokers = %s", err)
		}
		if got, want := strings.Join(brokerAddrs(c), ","), strings.Join(cluster.SecureKafkaPeers(), ","); got != want {
			t.Errorf("the consumer talks to %s, want %s", got, want)
		}
		if err := c.Close(); err != nil {
			t.Errorf("Close = %s", err)
		}
		checkNoRegistrations(t, zookeeper+chroot, group)
	})
}

// TestIntegrationSecuredMixed runs consumers against a cluster with two
// listeners, PLAINTEXT and EXTERNAL (SASL_SSL with SCRAM-SHA-512): each
// consumer finds the one that fits its configuration, or the one it names.
func TestIntegrationSecuredMixed(t *testing.T) {
	needCluster(t)
	skipKafkaDiscovery(t, "it starts a ZooKeeper-mode secured cluster and tests listener discovery")
	cluster := startSecuredCluster(t, testcluster.SecurityMixed)
	verifyNoClusterLeaks(t)
	client := securedClient(t, cluster)
	zookeeper := cluster.ZookeeperPeers()

	t.Run("TLS and SASL: the SASL_SSL listener", func(t *testing.T) {
		consumeSome(t, zookeeper, client, securedConfig(t, cluster), cluster.SecureKafkaPeers(), 20)
	})
	t.Run("nothing configured: the PLAINTEXT listener", func(t *testing.T) {
		consumeSome(t, zookeeper, client, testConfig(), cluster.KafkaPeers(), 20)
	})
	t.Run("Listener names the SASL_SSL one", func(t *testing.T) {
		config := securedConfig(t, cluster)
		config.Listener = "external"
		consumeSome(t, zookeeper, client, config, cluster.SecureKafkaPeers(), 20)
	})
	t.Run("Brokers bypass discovery", func(t *testing.T) {
		config := securedConfig(t, cluster)
		config.Brokers = cluster.SecureKafkaPeers()
		consumeSome(t, zookeeper, client, config, cluster.SecureKafkaPeers(), 20)
	})
	t.Run("unknown listener", func(t *testing.T) {
		config := securedConfig(t, cluster)
		config.Listener = "INTERNAL"
		joinFails(t, zookeeper, config, 5*time.Second, ErrNoBrokers, "listener INTERNAL", "EXTERNAL (SASL_SSL), PLAINTEXT (PLAINTEXT)")
	})
	t.Run("Listener of another protocol", func(t *testing.T) {
		// TLS to the PLAINTEXT listener: the name wins over the protocol,
		// and the mistake fails Join in bounded time.
		config := securedConfig(t, cluster)
		config.Listener = "PLAINTEXT"
		config.Net.DialTimeout, config.Net.ReadTimeout, config.Net.WriteTimeout = 2*time.Second, 2*time.Second, 2*time.Second
		config.Metadata.Retry.Max = 1
		joinFails(t, zookeeper, config, 15*time.Second, nil, "connect to kafka at "+cluster.KafkaPeers()[0], "TLS handshake failed")
	})
}
