package kafkaconsumer

// GroupProtocolConsumer's connections (the group transport's and
// sarama's): Net.TLS, Net.SASL (PLAIN, SCRAM-SHA-256/512, OAUTHBEARER)
// and Net.Proxy as on the sarama side, and Close cutting them. On a KRaft
// cluster of Kafka 4.0 or later (make test-kraft KAFKA_VERSION=4.4.0).

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/kafkaconsumer/kafkaconsumer/internal/testcluster"
)

// startSecuredKRaftCluster starts a KRaft cluster of the test's Kafka
// release, one broker, SecurityMixed (its EXTERNAL listener takes every
// mechanism of testcluster.KRaftSASLMechanisms), with a topic of 4
// partitions; Close is a cleanup of t.
func startSecuredKRaftCluster(t *testing.T) *testcluster.Cluster {
	t.Helper()
	began := time.Now()
	kafka, _ := testcluster.VersionsFromEnv()
	c, err := testcluster.Start(testcluster.Options{Mode: testcluster.ModeKRaft, Security: testcluster.SecurityMixed,
		KafkaVersion: kafka, QuickBrokers: true})
	if err != nil {
		t.Fatalf("start a KRaft cluster with SASL_SSL: %s", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close the KRaft cluster with SASL_SSL: %s", err)
		}
	})
	t.Logf("KRaft cluster with SASL_SSL (%s) started in %s", strings.Join(testcluster.KRaftSASLMechanisms, ", "), time.Since(began).Round(100*time.Millisecond))
	if err := c.CreateTopic("secured.4", 4, 1); err != nil {
		t.Fatal(err)
	}
	return c
}

// consumeConsumerProtocol joins a new group of topic with config,
// consumes n messages produced through client, closes, and checks that
// every offset was committed.
func consumeConsumerProtocol(t *testing.T, client sarama.Client, topic string, config *Config, n int) {
	t.Helper()
	group := uniqueName("kip848-net")
	c, err := Join(group, TopicSubscription(topic), "", config)
	if err != nil {
		t.Fatalf("Join = %s", err)
	}
	col := collect(c, nil)
	values := produce(t, client, topic, group, n)
	waitFor(t, 30*time.Second, fmt.Sprintf("%d messages", n), func() bool { return col.has(values) })
	col.close(t)
	committed := committedOffsets(t, client, group, topic)
	for p, want := range newestOffsets(t, client, topic) {
		if committed[p] != want {
			t.Errorf("partition %d: committed %d, want %d", p, committed[p], want)
		}
	}
}

// proxyDialer is a user's Net.Proxy.Dialer (a proxy.ContextDialer) that
// dials each broker through a testcluster.Proxy of its own, as a SOCKS
// proxy would connect on the client's behalf, and counts the dials that
// franz-go's client (the group transport) made.
type proxyDialer struct {
	t *testing.T

	mu      sync.Mutex                    // guards the fields below
	proxies map[string]*testcluster.Proxy // by broker address
	dials   int                           // every dial
	kgo     int                           // the dials of the group transport
}

// Dial implements proxy.Dialer.
func (d *proxyDialer) Dial(network, addr string) (net.Conn, error) {
	return d.DialContext(context.Background(), network, addr)
}

// DialContext implements proxy.ContextDialer.
func (d *proxyDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	buf := make([]byte, 16<<10)
	fromKgo := strings.Contains(string(buf[:runtime.Stack(buf, false)]), "github.com/twmb/franz-go/pkg/kgo.")
	d.mu.Lock()
	p := d.proxies[addr]
	if p == nil {
		var err error
		if p, err = testcluster.NewProxy(addr); err != nil {
			d.mu.Unlock()
			return nil, err
		}
		d.proxies[addr] = p
	}
	d.dials++
	if fromKgo {
		d.kgo++
	}
	d.mu.Unlock()
	var nd net.Dialer
	return nd.DialContext(ctx, network, p.Addr())
}

// counts returns the dials and those of the group transport.
func (d *proxyDialer) counts() (dials, kgo int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.dials, d.kgo
}

// open returns the connections open through the proxies.
func (d *proxyDialer) open() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, p := range d.proxies {
		n += p.Conns()
	}
	return n
}

// newProxyDialer returns a proxyDialer whose proxies are closed at the
// end of the test.
func newProxyDialer(t *testing.T) *proxyDialer {
	d := &proxyDialer{t: t, proxies: make(map[string]*testcluster.Proxy)}
	t.Cleanup(func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		for _, p := range d.proxies {
			_ = p.Close()
		}
	})
	return d
}

// TestIntegrationConsumerProtocolSecured: a consumer-protocol member
// joins, consumes and commits over TLS with each SASL mechanism the
// group transport maps (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER)
// on a KRaft cluster whose only listener these clients reach is
// SASL_SSL, and over TLS and SCRAM through the user's Net.Proxy, which
// the transport dials through too and whose connections are all closed
// after Close.
func TestIntegrationConsumerProtocolSecured(t *testing.T) {
	consumerProtocolTest(t)
	cluster := startSecuredKRaftCluster(t)
	client := securedClient(t, cluster)
	secured := func(t *testing.T, mechanism string) *Config {
		config := consumerTestConfig()
		config.Brokers = cluster.SecureKafkaPeers()
		if err := cluster.SASLConfig(config.Config, mechanism); err != nil {
			t.Fatal(err)
		}
		return config
	}
	for _, mechanism := range testcluster.KRaftSASLMechanisms {
		t.Run("TLS and "+mechanism, func(t *testing.T) {
			consumeConsumerProtocol(t, client, "secured.4", secured(t, mechanism), 40)
		})
	}
	t.Run("wrong password", func(t *testing.T) {
		config := secured(t, sarama.SASLTypeSCRAMSHA256)
		config.Net.SASL.Password = "wrong"
		c, err := Join(uniqueName("kip848-net"), TopicSubscription("secured.4"), "", config)
		if err == nil {
			_ = c.Close()
			t.Fatal("Join with a wrong password succeeded")
		}
		if !strings.Contains(err.Error(), "SASL") {
			t.Errorf("Join = %v, want it to name SASL", err)
		}
	})
	t.Run("TLS and SCRAM-SHA-512 through Net.Proxy", func(t *testing.T) {
		d := newProxyDialer(t)
		config := secured(t, sarama.SASLTypeSCRAMSHA512)
		config.Net.Proxy.Enable, config.Net.Proxy.Dialer = true, d
		consumeConsumerProtocol(t, client, "secured.4", config, 40)
		dials, kgo := d.counts()
		t.Logf("%d dials through the proxy, %d of them the group transport's", dials, kgo)
		if kgo == 0 {
			t.Error("the group transport dialed nothing through Net.Proxy")
		}
		waitFor(t, 10*time.Second, "every connection through the proxy to close after Close", func() bool { return d.open() == 0 })
	})
}

// consumerProtocolSerialTest is consumerProtocolTest for a test that
// checks for leaked goroutines itself: not parallel, so that no other
// test's goroutines run meanwhile.
func consumerProtocolSerialTest(t *testing.T) {
	t.Helper()
	needCluster(t)
	if os.Getenv("KAFKA_MODE") != "kraft" || !testKafkaVersion().IsAtLeast(sarama.V4_0_0_0) {
		t.Skipf("GroupProtocolConsumer needs a KRaft cluster of Kafka 4.0 or later (make test-kraft KAFKA_VERSION=4.4.0), not %s in %q mode", testKafkaVersion(), os.Getenv("KAFKA_MODE"))
	}
}

// openThrough returns the connections open through the proxies of kp.
func openThrough(kp *kafkaProxies) int {
	kp.mu.Lock()
	defer kp.mu.Unlock()
	n := 0
	for _, p := range kp.byAdr {
		n += p.Conns()
	}
	return n
}

// TestIntegrationConsumerProtocolCloseCutsConnections: every Kafka
// connection of a consumer-protocol member (the group transport's and
// sarama's) goes through proxies; after Close none is open at the
// proxies and no goroutine is left, both when the brokers answer and
// when the proxies hold every connection (the member cut off, its
// heartbeat in flight): then Close is bounded too, and its connections
// are closed on the client's side at once.
func TestIntegrationConsumerProtocolCloseCutsConnections(t *testing.T) {
	consumerProtocolSerialTest(t)
	verifyNoClusterLeaks(t)
	topic := newTopic(t, 4)
	client := newTestClient(t)
	for _, cut := range []bool{false, true} {
		t.Run(fmt.Sprintf("cut %t", cut), func(t *testing.T) {
			kp := newKafkaProxies(t, nil)
			group := uniqueName("kip848-close")
			c, err := joinWithHooks(group, TopicSubscription(topic), "", consumerTestConfig(), &testHooks{kafkaAddress: kp.address})
			if err != nil {
				t.Fatalf("Join = %s", err)
			}
			col := collect(c, nil)
			values := produce(t, client, topic, group, 20)
			waitFor(t, 30*time.Second, "the messages", func() bool { return col.has(values) })
			cm := c.(*consumerManager)
			t.Logf("%d connections open through the proxies, %d in the consumer's dialer", openThrough(kp), openConns(cm.dialer.connSet))
			if cut {
				kp.hold(t)
			}
			began := time.Now()
			err = c.Close()
			took := time.Since(began)
			t.Logf("Close took %s: %v", took.Round(time.Millisecond), err)
			if err != nil && !cut {
				t.Errorf("Close = %v", err)
			}
			if cut && !errors.Is(err, ErrCommitTimeout) {
				t.Errorf("Close cut off = %v, want ErrCommitTimeout", err)
			}
			if bound := testConfig().MaxProcessingTime + consumerTestConfig().Consumer.Group.Session.Timeout + 10*time.Second; took > bound {
				t.Errorf("Close took %s, want at most %s", took, bound)
			}
			if n := openConns(cm.dialer.connSet); n != 0 {
				t.Errorf("%d connections of the consumer's dialer open after Close", n)
			}
			if cut {
				kp.faultAll(t, func(p *testcluster.Proxy) error { p.Pass(); return nil })
			}
			waitFor(t, 10*time.Second, "every connection through the proxies to close", func() bool { return openThrough(kp) == 0 })
		})
	}
}
