package kafkaconsumer

import (
	"crypto/tls"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/go-zookeeper/zk"

	"github.com/kafkaconsumer/kafkaconsumer/internal/testcluster"
)

// tlsConfigOf loads a ZooKeeper client's TLS configuration from PEM files
// (no client certificate when cert is "").
func tlsConfigOf(t *testing.T, ca, cert, key string) *tls.Config {
	t.Helper()
	config, err := testcluster.LoadZooKeeperTLSConfig(ca, cert, key)
	if err != nil {
		t.Fatal(err)
	}
	return config
}

// TestFaultZooKeeperTLS runs on a cluster of its own whose ZooKeeper has a
// TLS client port only, requires client certificates and knows sessions
// by their certificates' subjects:
//   - a group whose nodes have an x509 ACL consumes and commits; another
//     identity can delete none of its claims, register in none of its
//     nodes, change none of them, and fails Join with a clear error;
//   - a wrong CA, no client certificate, an expired one, and plaintext
//     each fail Join within Zookeeper.Timeout with an error that names the
//     server and the reason;
//   - an instance cut off from ZooKeeper (held past its session timeout)
//     hands out nothing another instance owns, loses nothing, and
//     registers again;
//   - Close with ZooKeeper frozen keeps its bound.
func TestFaultZooKeeperTLS(t *testing.T) {
	needFaults(t)
	t.Parallel()
	debugLogs(t)
	cluster := startFaultCluster(t, testcluster.Options{ZooKeepers: 1, Brokers: 1, ZooKeeperSecurity: testcluster.ZooKeeperSecurityTLS})
	files := cluster.ZooKeeperTLSFiles()
	zookeeper := cluster.ZookeeperPeers()
	groupTLS := tlsConfigOf(t, files.CA, files.Cert, files.Key)
	groupACL := []zk.ACL{{Perms: zk.PermAll, Scheme: "x509", ID: testcluster.ZooKeeperTLSIdentity}}
	config := func() *Config {
		c := testConfig()
		c.Discovery, c.Brokers = DiscoverFromZookeeper, nil
		c.ZookeeperTLS = groupTLS
		c.ZookeeperACL = groupACL
		return c
	}

	// The first three share the cluster at once; the freeze comes after.
	t.Run("unfrozen", func(t *testing.T) {
		t.Run("x509 ACL", func(t *testing.T) {
			t.Parallel()
			testZooKeeperTLSACL(t, cluster, config, groupTLS, groupACL)
		})
		t.Run("refused", func(t *testing.T) {
			t.Parallel()
			testZooKeeperTLSRefused(t, cluster, config)
		})
		t.Run("cut off", func(t *testing.T) {
			t.Parallel()
			proxy, throughProxy := zookeeperProxy(t, zookeeper)
			res := runZooKeeperCutOff(t, zookeeperCut{
				zookeeperA: throughProxy,
				zookeeperB: zookeeper,
				kafka:      cluster.KafkaPeers(),
				cut:        proxy.Hold,
				heal:       proxy.Pass,
				tls:        groupTLS,
				dial:       testcluster.ZooKeeperTLSDialer(groupTLS),
			}, 15*time.Second, false, 0)
			checkGray(t, res)
		})
	})

	t.Run("Close with ZooKeeper frozen", func(t *testing.T) {
		client := newTestClientOf(t, cluster.KafkaPeers())
		topic := uniqueName("tls.frozen")
		createTopic(t, newTestAdmin(t, client), topic, 2)
		c := config()
		c.Zookeeper.Timeout = 6 * time.Second
		c.MaxProcessingTime = 3 * time.Second
		consumer, err := Join(uniqueName("tls.frozen"), TopicSubscription(topic), zookeeper, c)
		if err != nil {
			t.Fatal(err)
		}
		values := produce(t, client, topic, "frozen", 20)
		col := collect(consumer, func(msg *sarama.ConsumerMessage) bool { return string(msg.Value) != values[5] })
		waitFor(t, 30*time.Second, "the messages", func() bool { return col.has(values) })
		resume := freeze(t, cluster.ZooKeeperPID(0))
		defer resume()
		stopWithin(t, "Close with ZooKeeper frozen", c.MaxProcessingTime+c.Zookeeper.Timeout+10*time.Second, consumer.Close)
	})
}

// testZooKeeperTLSACL: a group with an x509 ACL consumes and commits on
// cluster's TLS ZooKeeper; every node it made has the ACL; the other
// identity is locked out, and its Join fails with a clear error.
func testZooKeeperTLSACL(t *testing.T, cluster *testcluster.Cluster, config func() *Config, groupTLS *tls.Config, groupACL []zk.ACL) {
	files := cluster.ZooKeeperTLSFiles()
	zookeeper := cluster.ZookeeperPeers()
	client := newTestClientOf(t, cluster.KafkaPeers())
	topic := uniqueName("tls")
	createTopic(t, newTestAdmin(t, client), topic, 4)
	group := uniqueName("tls")
	start := startGroupAt(t, client, group, topic)
	c, err := Join(group, TopicSubscription(topic), zookeeper, config())
	if err != nil {
		t.Fatal(err)
	}
	col := collect(c, nil)
	values := produce(t, client, topic, group, 100)
	waitFor(t, 30*time.Second, "100 messages", func() bool { return col.has(values) })
	waitFor(t, 30*time.Second, "4 claimed partitions", func() bool { return claimedCount(c) == 4 })

	conn, chroot := testZookeeperWith(t, zookeeper, testcluster.ZooKeeperTLSDialer(groupTLS))
	persistent, ephemeral := groupNodes(t, conn, chroot, group, topic)
	checkACL(t, conn, append(persistent, ephemeral...), groupACL)
	otherTLS := tlsConfigOf(t, files.CA, files.Cert2, files.Key2)
	other, _ := testZookeeperWith(t, zookeeper, testcluster.ZooKeeperTLSDialer(otherTLS))
	checkLockedOut(t, persistent, ephemeral[1:], map[string]*zk.Conn{"x509:" + testcluster.ZooKeeperTLSIdentity2: other})
	intruder := config()
	intruder.ZookeeperTLS = otherTLS
	checkJoinDenied(t, zookeeper, group, topic, intruder, "x509:"+testcluster.ZooKeeperTLSIdentity2, conn, chroot)

	col.close(t)
	checkCommitted(t, client, group, start, map[string]int{topic: 100})
	checkDeregisteredOn(t, conn, chroot, group, c)
}

// testZooKeeperTLSRefused: a wrong CA, no client certificate, an expired
// one, and plaintext each fail Join within Zookeeper.Timeout, naming the
// server and the reason.
func testZooKeeperTLSRefused(t *testing.T, cluster *testcluster.Cluster, config func() *Config) {
	files := cluster.ZooKeeperTLSFiles()
	zookeeper := cluster.ZookeeperPeers()
	foreign, err := testcluster.WriteZooKeeperTLSFiles(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		tls  *tls.Config
		want []string
	}{
		{"wrong CA", tlsConfigOf(t, foreign.CA, files.Cert, files.Key), []string{"TLS handshake", "certificate signed by unknown authority", "did not verify with Config.ZookeeperTLS"}},
		{"no client certificate", tlsConfigOf(t, files.CA, "", ""), []string{"remote error: tls", "the server refused this client"}},
		{"expired client certificate", tlsConfigOf(t, files.CA, files.ExpiredCert, files.ExpiredKey), []string{"remote error: tls", "the server refused this client"}},
		{"plaintext", nil, []string{"closed the connection before answering", "a TLS port? see Config.ZookeeperTLS"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := config()
			c.ZookeeperTLS = tc.tls
			c.ZookeeperACL = nil
			c.Zookeeper.Timeout = 2 * time.Second
			began := time.Now()
			consumer, err := Join(uniqueName("tls.refused"), TopicSubscription("any"), zookeeper, c)
			took := time.Since(began)
			if err == nil {
				_ = consumer.Close()
				t.Fatal("Join = nil, want ErrZookeeperUnreachable")
			}
			t.Logf("Join failed in %s: %v", took.Round(time.Millisecond), err)
			if !errors.Is(err, ErrZookeeperUnreachable) {
				t.Errorf("Join = %v, want ErrZookeeperUnreachable", err)
			}
			for _, want := range append(tc.want, strings.Split(zookeeper, ",")[0]) {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the error does not say %q", want)
				}
			}
			if bound := c.Zookeeper.Timeout + 3*time.Second; took > bound {
				t.Errorf("Join took %s to fail, want at most %s", took.Round(time.Millisecond), bound)
			}
		})
	}
}
