package kafkaconsumer

// How many ZooKeeper sessions an instance opens, and that nothing of it
// connects to ZooKeeper after Close: every ZooKeeper connection of the
// instance goes through a testcluster.Proxy, which counts them.

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestIntegrationOneZooKeeperSessionPerInstance: a consuming instance has
// one ZooKeeper connection, its session, which carries the registration,
// the claims and the subscription's watches alike.
func TestIntegrationOneZooKeeperSessionPerInstance(t *testing.T) {
	parallelClusterTest(t)
	proxy, throughProxy := zookeeperProxy(t, zookeeperPeers)
	client := newTestClient(t)
	admin := newTestAdmin(t, client)
	topic := uniqueName("it-one-session")
	createTopic(t, admin, topic, 2)
	group := uniqueName("it-one-session")

	c, err := Join(group, TopicSubscription(topic), throughProxy, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	col := collect(c, nil)
	values := produce(t, client, topic, "v", 10)
	waitFor(t, 30*time.Second, "the messages", func() bool { return col.has(values) })
	accepted, open := proxy.Accepted(), proxy.Conns()
	t.Logf("while consuming: %d ZooKeeper connections opened, %d open", accepted, open)
	if accepted != 1 || open != 1 {
		t.Errorf("the instance opened %d ZooKeeper connections (%d open); want 1, its session", accepted, open)
	}
	col.close(t)
	checkDeregistered(t, group, c)
}

// TestIntegrationNoZooKeeperConnectionAfterClose: an instance closed while
// ZooKeeper does not answer (the proxy holds every byte and every new
// connection) leaves nothing that connects to ZooKeeper once it answers
// again: no connection is opened after Close returned, and no client of
// the instance exchanges anything with ZooKeeper on the connections it
// had opened (a client that had only sent its connect request and then
// closed does not count: see Proxy.Conversations).
func TestIntegrationNoZooKeeperConnectionAfterClose(t *testing.T) {
	parallelClusterTest(t)
	proxy, throughProxy := zookeeperProxy(t, zookeeperPeers)
	config := testConfig()
	// The sessions must not expire while the proxy holds them: ZooKeeper
	// would then refuse a client that gets through afterwards rather than
	// answer it. They are held for a few seconds.
	config.Zookeeper.Timeout = 15 * time.Second
	// A topic that does not exist: no partition to stop, so that Close is
	// quick; the subscription watches the topic list for it.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := JoinContext(ctx, uniqueName("it-after-close"), TopicSubscription(uniqueName("it-after-close")), throughProxy, config)
	if err != nil {
		t.Fatal(err)
	}
	sessions := proxy.Conns()
	t.Logf("running: %d ZooKeeper connections open", sessions)

	// Every client of the instance loses its connection and connects
	// again, into the hold: it waits for the answer to its connect
	// request.
	proxy.Reset()
	proxy.Hold()
	waitFor(t, 20*time.Second, fmt.Sprintf("%d held connection attempts", sessions), func() bool { return proxy.Held() == sessions })

	start := time.Now()
	err = c.Close()
	t.Logf("Close with ZooKeeper held took %s: %v", time.Since(start).Round(time.Millisecond), err)
	accepted, conversations := proxy.Accepted(), proxy.Conversations()
	proxy.Pass()
	// A client that was not cut connects at once: its held connection
	// goes through, it gets its answer and sends its next request (go-zookeeper's
	// reconnection delay is a second). Three seconds leave room to spare.
	if poll(3*time.Second, func() bool { return proxy.Accepted() > accepted || proxy.Conversations() > conversations }) {
		t.Errorf("after Close returned: %d new connections to ZooKeeper, %d that exchanged requests with it; want none",
			proxy.Accepted()-accepted, proxy.Conversations()-conversations)
	}
}

// TestCustomSubscriptionHasAKazooSession: a custom Subscription reads
// ZooKeeper through the *kazoo.Kazoo its WatchPartitions is given, which
// the instance connects for it alone: the one exception to one session
// per instance. It consumes as ever, and Close closes both sessions.
// ZooKeeper discovery only (Join refuses a custom Subscription with
// DiscoverFromKafka).
func TestCustomSubscriptionHasAKazooSession(t *testing.T) {
	parallelClusterTest(t)
	skipKafkaDiscovery(t, "Join refuses a custom Subscription with DiscoverFromKafka")
	proxy, throughProxy := zookeeperProxy(t, zookeeperPeers)
	client := newTestClient(t)
	admin := newTestAdmin(t, client)
	topic := uniqueName("custom-subscription")
	createTopic(t, admin, topic, 2)
	group := uniqueName("custom-subscription")

	c, err := Join(group, customSubscription{TopicSubscription(topic)}, throughProxy, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	col := collect(c, nil)
	values := produce(t, client, topic, "v", 10)
	waitFor(t, 30*time.Second, "the messages", func() bool { return col.has(values) })
	if accepted := proxy.Accepted(); accepted != 2 {
		t.Errorf("the instance opened %d ZooKeeper connections; want 2, its session and kazoo-go's", accepted)
	}
	col.close(t)
	checkDeregistered(t, group, c)
	waitFor(t, 10*time.Second, "both sessions to close", func() bool { return proxy.Conns() == 0 })
}
