package kafkaconsumer

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
)

// TestIntegrationBrokersOnPlainCluster checks broker discovery against the
// plaintext test cluster: a TLS configuration finds no listener and says
// which ones exist, without registering; Config.Brokers is used instead of
// the registrations; Config.Listener picks the PLAINTEXT listener by name.
func TestIntegrationBrokersOnPlainCluster(t *testing.T) {
	parallelClusterTest(t)
	topic1 := newTopic(t, 1)
	topic4 := newTopic(t, 4)
	skipKafkaDiscovery(t, "it tests broker discovery through ZooKeeper's registrations")

	t.Run("TLS wanted, none registered", func(t *testing.T) {
		group := uniqueName("it.nolistener")
		config := testConfig()
		config.Net.TLS.Enable = true
		began := time.Now()
		c, err := Join(group, TopicSubscription(topic1), zookeeperPeers, config)
		if err == nil {
			_ = c.Close()
			t.Fatal("Join with TLS on a plaintext cluster succeeded")
		}
		if !errors.Is(err, ErrNoBrokers) || !strings.Contains(err.Error(), "protocol SSL") || !strings.Contains(err.Error(), "PLAINTEXT (PLAINTEXT)") {
			t.Fatalf("Join = %q, want ErrNoBrokers naming SSL and the PLAINTEXT listener", err)
		}
		if took := time.Since(began); took > config.Zookeeper.Timeout+2*time.Second {
			t.Errorf("Join took %s to fail", took)
		}
		checkNoRegistrations(t, zookeeperPeers, group)
	})

	t.Run("unknown listener name", func(t *testing.T) {
		group := uniqueName("it.badlistener")
		config := testConfig()
		config.Listener = "EXTERNAL"
		c, err := Join(group, TopicSubscription(topic1), zookeeperPeers, config)
		if err == nil {
			_ = c.Close()
			t.Fatal("Join with an unknown listener succeeded")
		}
		if !errors.Is(err, ErrNoBrokers) || !strings.Contains(err.Error(), "listener EXTERNAL") {
			t.Fatalf("Join = %q, want ErrNoBrokers naming listener EXTERNAL", err)
		}
		checkNoRegistrations(t, zookeeperPeers, group)
	})

	t.Run("Brokers bypass ZooKeeper", func(t *testing.T) {
		group := uniqueName("it.bootstrap")
		config := testConfig()
		config.Brokers = []string{"127.0.0.1:1"} // nothing listens there
		config.Net.DialTimeout = 500 * time.Millisecond
		config.Metadata.Retry.Max = 1
		config.Metadata.Retry.Backoff = 10 * time.Millisecond
		c, err := Join(group, TopicSubscription(topic1), zookeeperPeers, config)
		if err == nil {
			_ = c.Close()
			t.Fatal("Join with Brokers where nothing listens succeeded: the registered brokers were used")
		}
		if !strings.Contains(err.Error(), "127.0.0.1:1") {
			t.Fatalf("Join = %q, want an error naming 127.0.0.1:1", err)
		}
		checkNoRegistrations(t, zookeeperPeers, group)
	})

	t.Run("Brokers and Listener consume", func(t *testing.T) {
		client := newTestClient(t)
		for _, change := range []func(*Config){
			func(c *Config) { c.Brokers = kafkaPeers },
			func(c *Config) { c.Listener = "plaintext" },
		} {
			group := uniqueName("it.bootstrap")
			start := startGroupAt(t, client, group, topic4)
			config := testConfig()
			change(config)
			c := join(t, group, TopicSubscription(topic4), config)
			col := collect(c, nil)
			values := produce(t, client, topic4, group, 20)
			waitFor(t, 30*time.Second, "20 messages", func() bool { return col.has(values) })
			col.close(t)
			checkCommitted(t, client, group, start, map[string]int{topic4: 20})
			checkDeregistered(t, group, c)
		}
	})
}

// checkNoRegistrations checks that the group has no registered instance
// and no partition claim in the ZooKeeper of connection string zookeeper.
func checkNoRegistrations(t testing.TB, zookeeper, group string) {
	t.Helper()
	conn, chroot := testZookeeper(t, zookeeper)
	base := chroot + "/consumers/" + group
	ids, _, err := conn.Children(base + "/ids")
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		t.Fatalf("list the registrations of %s: %s", group, err)
	}
	if len(ids) > 0 {
		t.Errorf("group %s has registered instances: %v", group, ids)
	}
	topics, _, err := conn.Children(base + "/owners")
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		t.Fatalf("list the claims of %s: %s", group, err)
	}
	for _, topic := range topics {
		claims, _, err := conn.Children(base + "/owners/" + topic)
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			t.Fatalf("list the claims of %s on %s: %s", group, topic, err)
		}
		if len(claims) > 0 {
			t.Errorf("group %s has claims on %s: %v", group, topic, claims)
		}
	}
}
