package kafkaconsumer

import (
	"errors"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/go-zookeeper/zk"

	"github.com/kafkaconsumer/kafkaconsumer/internal/testcluster"
)

// aclString formats ACLs as zkCli does, sorted: "scheme:id:cdrwa".
func aclString(acls []zk.ACL) string {
	var out []string
	for _, a := range acls {
		perms := ""
		for _, p := range []struct {
			bit  int32
			name string
		}{{zk.PermCreate, "c"}, {zk.PermDelete, "d"}, {zk.PermRead, "r"}, {zk.PermWrite, "w"}, {zk.PermAdmin, "a"}} {
			if a.Perms&p.bit != 0 {
				perms += p.name
			}
		}
		out = append(out, a.Scheme+":"+a.ID+":"+perms)
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

// TestIntegrationZooKeeperSASL runs a consumer against a cluster whose
// ZooKeeper has SASL enabled but not enforced, and whose brokers log in
// to it and create their nodes with ACLs (zookeeper.set.acl=true). The
// library connects to ZooKeeper without logging in (kazoo-go's client has
// no SASL): it reads the brokers' world-readable registrations, and
// registers the group under /consumers, which Kafka leaves open.
func TestIntegrationZooKeeperSASL(t *testing.T) {
	needCluster(t)
	skipKafkaDiscovery(t, "it starts a ZooKeeper-mode cluster whose brokers log in to ZooKeeper")
	began := time.Now()
	cluster, err := testcluster.Start(testcluster.Options{ZooKeeperSASL: true, QuickBrokers: true})
	if err != nil {
		t.Fatalf("start a cluster with ZooKeeper SASL: %s", err)
	}
	t.Cleanup(func() {
		if err := cluster.Close(); err != nil {
			t.Errorf("close the cluster: %s", err)
		}
	})
	t.Logf("cluster with ZooKeeper SASL started in %s", time.Since(began).Round(100*time.Millisecond))
	if err := cluster.CreateTopic("zksasl.4", 4, 1); err != nil {
		t.Fatal(err)
	}
	verifyNoClusterLeaks(t)
	zookeeper := cluster.ZookeeperPeers()

	// A client that does not log in, as the library's.
	nodes, _, err := parseZookeeper(zookeeper)
	if err != nil {
		t.Fatal(err)
	}
	conn, _, err := zk.Connect(nodes, 10*time.Second, zk.WithLogInfo(false), zk.WithLogger(zookeeperLogger{}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	checkACL := func(t *testing.T, path, want string) {
		t.Helper()
		acls, _, err := conn.GetACL(path)
		if err != nil {
			t.Errorf("GetACL(%s) = %s", path, err)
			return
		}
		if got := aclString(acls); got != want {
			t.Errorf("ACL of %s = %s, want %s", path, got, want)
		} else {
			t.Logf("ACL of %s: %s", path, got)
		}
	}
	broker := "sasl:" + testcluster.ZooKeeperSASLUser + ":cdrwa"
	open := "world:anyone:cdrwa"

	t.Run("Kafka's ACLs", func(t *testing.T) {
		// The brokers' nodes: all rights to the broker's SASL identity,
		// read to anyone.
		for _, path := range []string{"/brokers", "/brokers/ids", "/brokers/ids/0", "/brokers/topics", "/brokers/topics/zksasl.4"} {
			checkACL(t, path, broker+",world:anyone:r")
		}
		// Kept open for the consumers of Kafka 0.8 and this library.
		checkACL(t, "/consumers", open)
		// Sensitive: the broker's identity only; reading even its ACL
		// needs the right to read it.
		if _, _, err := conn.GetACL("/config/users"); !errors.Is(err, zk.ErrNoAuth) {
			t.Errorf("GetACL(/config/users) without logging in = %v, want %s", err, zk.ErrNoAuth)
		}

		if _, _, err := conn.Get("/brokers/ids/0"); err != nil {
			t.Errorf("read /brokers/ids/0 without logging in: %s", err)
		}
		if _, err := conn.Set("/brokers/ids/0", []byte("{}"), -1); !errors.Is(err, zk.ErrNoAuth) {
			t.Errorf("write /brokers/ids/0 without logging in = %v, want %s", err, zk.ErrNoAuth)
		}
		if _, err := conn.Create("/brokers/ids/99", []byte("{}"), zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); !errors.Is(err, zk.ErrNoAuth) {
			t.Errorf("create /brokers/ids/99 without logging in = %v, want %s", err, zk.ErrNoAuth)
		}
		if _, _, err := conn.Children("/config/users"); !errors.Is(err, zk.ErrNoAuth) {
			t.Errorf("list /config/users without logging in = %v, want %s", err, zk.ErrNoAuth)
		}
	})

	t.Run("consume", func(t *testing.T) {
		config := sarama.NewConfig()
		config.Producer.Return.Successes = true
		config.Producer.RequiredAcks = sarama.WaitForAll
		config.Producer.Partitioner = sarama.NewRoundRobinPartitioner
		client, err := sarama.NewClient(cluster.KafkaPeers(), config)
		if err != nil {
			t.Fatalf("connect to kafka: %s", err)
		}
		defer client.Close()
		group := uniqueName("it.zksasl")
		start := startGroupAt(t, client, group, "zksasl.4")
		c, err := Join(group, TopicSubscription("zksasl.4"), zookeeper, testConfig())
		if err != nil {
			t.Fatalf("Join = %s", err)
		}
		col := collect(c, nil)
		values := produce(t, client, "zksasl.4", group, 100)
		waitFor(t, 30*time.Second, "100 messages", func() bool { return col.has(values) })

		// The library's nodes are open to anyone: kazoo-go creates them
		// with world:anyone:cdrwa and cannot log in to set other ACLs.
		base := "/consumers/" + group
		id := c.(*consumerManager).instance.ID
		for _, path := range []string{base, base + "/ids", base + "/ids/" + id, base + "/owners", base + "/owners/zksasl.4", base + "/owners/zksasl.4/0"} {
			checkACL(t, path, open)
		}
		col.close(t)
		checkCommitted(t, client, group, start, map[string]int{"zksasl.4": 100})
		checkNoRegistrations(t, zookeeper, group)
	})
}

// TestIntegrationZooKeeperSASLRequired runs Join against a cluster whose
// ZooKeeper requires SASL authentication (the brokers log in, so the
// cluster works): kazoo-go's client cannot log in, ZooKeeper closes its
// session at its first request, and Join fails within about a second,
// saying why, before it registers anything.
func TestIntegrationZooKeeperSASLRequired(t *testing.T) {
	needCluster(t)
	skipKafkaDiscovery(t, "it starts a ZooKeeper-mode cluster whose brokers log in to ZooKeeper")
	began := time.Now()
	cluster, err := testcluster.Start(testcluster.Options{ZooKeeperSASLRequired: true, QuickBrokers: true})
	if err != nil {
		t.Fatalf("start a cluster with ZooKeeper SASL required: %s", err)
	}
	t.Cleanup(func() {
		if err := cluster.Close(); err != nil {
			t.Errorf("close the cluster: %s", err)
		}
	})
	t.Logf("cluster with ZooKeeper SASL required started in %s", time.Since(began).Round(100*time.Millisecond))
	if err := cluster.CreateTopic("zksasl.4", 4, 1); err != nil {
		t.Fatal(err)
	}
	verifyNoClusterLeaks(t)

	for _, brokers := range [][]string{nil, cluster.KafkaPeers()} {
		config := testConfig()
		config.Brokers = brokers // discovery through ZooKeeper, or not
		began := time.Now()
		c, err := Join(uniqueName("it.zksasl.required"), TopicSubscription("zksasl.4"), cluster.ZookeeperPeers(), config)
		took := time.Since(began)
		if err == nil {
			_ = c.Close()
			t.Fatalf("Join (Brokers %v) succeeded", brokers)
		}
		t.Logf("Join (Brokers %v) failed in %s: %s", brokers, took.Round(time.Millisecond), err)
		if !errors.Is(err, ErrZookeeperUnreachable) || !strings.Contains(err.Error(), "requires SASL authentication") {
			t.Errorf("Join = %q, want ErrZookeeperUnreachable saying that ZooKeeper requires SASL", err)
		}
		// 14 ms here, or about a second when closing the probe's
		// session waits for an answer that does not come (under -race).
		if took > 3*time.Second {
			t.Errorf("Join took %s to fail, want at most 3s", took)
		}
	}
	// Nothing can be registered: the server answers no request of a client
	// that has not logged in, this test's included.
}
