package main

import (
	"bytes"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/go-zookeeper/zk"
	"github.com/kafkaconsumer/kafkaconsumer"
	"github.com/kafkaconsumer/kafkaconsumer/internal/testcluster"
)

// runMigrateCmd runs the migrate verb and returns its exit status and
// output.
func runMigrateCmd(zookeeper, group, to string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := run([]string{"migrate", "--zookeeper", zookeeper, "--group", group, "--to", to, "--wait", "60s", "--timeout", "20s"}, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// migrateTo runs migrate --to to, which must succeed and say want, and
// returns what it printed.
func migrateTo(t *testing.T, zookeeper, group, to, want string) string {
	t.Helper()
	code, stdout, stderr := runMigrateCmd(zookeeper, group, to)
	if code != exitOK {
		t.Fatalf("migrate --to %s: exit status %d: %s", to, code, stderr)
	}
	if !strings.Contains(stdout, want) {
		t.Errorf("migrate --to %s said %q, want it to say %q", to, stdout, want)
	}
	return stdout
}

// joinForMigration joins a ZooKeeper-coordinated instance of the library.
func joinForMigration(t *testing.T, zookeeper, group, topic string) kafkaconsumer.Consumer {
	t.Helper()
	config := kafkaconsumer.NewConfig()
	config.Version = sarama.V2_4_0_0
	config.MaxProcessingTime = time.Second
	config.Zookeeper.Timeout = 3 * time.Second
	consumer, err := kafkaconsumer.Join(group, kafkaconsumer.TopicSubscription(topic), zookeeper, config)
	if err != nil {
		t.Fatalf("join: %s", err)
	}
	t.Cleanup(func() { _ = consumer.Close() })
	return consumer
}

// TestMigrateIntegration moves a group of two instances to Kafka's group
// coordinator and back with the migrate verb, and checks that the
// messages produced before, between and after are all consumed.
func TestMigrateIntegration(t *testing.T) {
	zookeeper, brokers := clusterPeers(t)
	topic := createTopic(t, brokers, 4)
	group := fmt.Sprintf("cli-migrate.%d", time.Now().UnixNano())
	a := joinForMigration(t, zookeeper, group, topic)
	b := joinForMigration(t, zookeeper, group, topic)
	produce(t, brokers, topic, 40)
	received := make(chan string, 1000)
	for _, c := range []kafkaconsumer.Consumer{a, b} {
		go func(c kafkaconsumer.Consumer) {
			for msg := range c.Messages() {
				received <- string(msg.Value)
				c.Ack(msg)
			}
		}(c)
	}
	count := func(n int) {
		t.Helper()
		timeout := time.After(60 * time.Second)
		for i := 0; i < n; i++ {
			select {
			case <-received:
			case <-timeout:
				t.Fatalf("received %d of %d messages within 60s", i, n)
			}
		}
	}
	count(40)

	migrateTo(t, zookeeper, group, "kafka", "Stable with 2 members")
	produce(t, brokers, topic, 40)
	count(40)

	// The switch says kafka: the group is described from Kafka, its two
	// members following the switch, every partition in an assignment.
	waitFor(t, 30*time.Second, "the command to describe the group from Kafka", func() error {
		desc, err := describeJSON(zookeeper, group)
		if err != nil {
			return err
		}
		if desc.Coordinator != CoordinatorKafka || desc.State != StateStable || len(desc.Instances) != 2 || len(desc.Partitions) != 4 {
			return fmt.Errorf("coordinator %s, state %s, %d instances, %d partitions; want kafka, Stable, 2, 4", desc.Coordinator, desc.State, len(desc.Instances), len(desc.Partitions))
		}
		for _, instance := range desc.Instances {
			if instance.Library != LibraryKafkaconsumer || instance.Migration != migrationVersion {
				return fmt.Errorf("member %+v: want the library's, following the switch", instance)
			}
		}
		for _, p := range desc.Partitions {
			if p.Owner == "" {
				return fmt.Errorf("partition %d in no assignment", p.Partition)
			}
		}
		return nil
	})

	stdout := migrateTo(t, zookeeper, group, "zookeeper", "2 instances are registered in ZooKeeper")
	produce(t, brokers, topic, 40)
	count(40)
	t.Logf("migrate --to kafka and back: %s", strings.ReplaceAll(stdout, "\n", " "))
}

// TestMigrateRefusedIntegration: migrate refuses while an instance of the
// original library, or a kafkaconsumer registration without the
// migration marker, is registered, names them, and leaves the switch.
func TestMigrateRefusedIntegration(t *testing.T) {
	zookeeper, brokers := clusterPeers(t)
	topic := createTopic(t, brokers, 2)
	group := fmt.Sprintf("cli-refused.%d", time.Now().UnixNano())
	joinForMigration(t, zookeeper, group, topic)

	nodes, chroot, err := parseZookeeper(zookeeper)
	if err != nil {
		t.Fatal(err)
	}
	conn, _, err := zk.Connect(nodes, 10*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ids := chroot + "/consumers/" + group + "/ids/"
	ms := time.Now().UnixMilli()
	original := fmt.Sprintf(`{"pattern":"static","subscription":{%q:1},"timestamp":"%d","version":1}`, topic, ms)
	oldPort := fmt.Sprintf(`{"client":%q,"pattern":"static","subscription":{%q:1},"timestamp":"%d","version":1}`, registrationClient, topic, ms)
	for id, data := range map[string]string{"original-1": original, "old-port-1": oldPort} {
		if _, err := conn.Create(ids+id, []byte(data), zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatalf("register %s: %s", id, err)
		}
	}
	code, _, stderr := runMigrateCmd(zookeeper, group, "kafka")
	if code != exitError {
		t.Fatalf("migrate with an original registered: exit status %d, want %d (%s)", code, exitError, stderr)
	}
	for _, want := range []string{"refused", "original-1 (original wvanbergen/kafka instance)", "old-port-1 (kafkaconsumer too old to migrate)"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("migrate said %q, want it to contain %q", stderr, want)
		}
	}
	data, _, err := conn.Get(chroot + "/consumers/" + group + "/coordinator")
	if err != nil || string(data) != "zookeeper" {
		t.Errorf("the switch holds %q (%v) after the refusal, want zookeeper", data, err)
	}
	t.Logf("refused: %s", strings.TrimSpace(stderr))
}

// TestRebalancing: the states of Kafka's group in which DescribeGroups
// gives no member's metadata.
func TestRebalancing(t *testing.T) {
	for state, want := range map[string]bool{
		"Stable": false, "Empty": false, "Dead": false,
		"PreparingRebalance": true, "CompletingRebalance": true, "AwaitingSync": true,
	} {
		if got := rebalancing(state); got != want {
			t.Errorf("rebalancing(%s) = %t, want %t", state, got, want)
		}
	}
}

// TestFollowsSwitch: which registrations and user data follow the
// coordinator switch.
func TestFollowsSwitch(t *testing.T) {
	for _, tc := range []struct {
		data    string
		follows bool
		what    string
	}{
		{`{"client":"github.com/kafkaconsumer/kafkaconsumer","migration":1,"version":1}`, true, ""},
		{`{"client":"github.com/kafkaconsumer/kafkaconsumer","version":1}`, false, "kafkaconsumer too old to migrate"},
		{`{"pattern":"static","version":1}`, false, "original wvanbergen/kafka instance"},
		{`not json`, false, "unreadable"},
	} {
		follows, what := followsSwitch([]byte(tc.data))
		if follows != tc.follows || what != tc.what {
			t.Errorf("followsSwitch(%s) = %t, %q; want %t, %q", tc.data, follows, what, tc.follows, tc.what)
		}
	}
}

// proxyDialer routes every Kafka connection of a consumer through a
// testcluster.Proxy of its own per broker (Config.Net.Proxy.Dialer), so
// that the test can cut that one consumer off.
type proxyDialer struct {
	mu      sync.Mutex
	proxies map[string]*testcluster.Proxy // by broker address; guarded by mu
}

// Dial implements proxy.Dialer: it dials the proxy of addr.
func (d *proxyDialer) Dial(network, addr string) (net.Conn, error) {
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
	d.mu.Unlock()
	return net.DialTimeout(network, p.Addr(), 10*time.Second)
}

// each applies f to every proxy.
func (d *proxyDialer) each(f func(*testcluster.Proxy)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range d.proxies {
		f(p)
	}
}

// TestMigrateBackDuringRebalanceIntegration: Kafka's DescribeGroups gives
// the members' metadata only while the group is Stable. A group migrated
// to Kafka rebalances: a member is frozen (its broker connections held
// through proxies, as a kill -9 leaves them) and a new instance joins, so
// that the rebalance waits for the frozen member's session timeout.
// migrate --to zookeeper run then must not name the members "not a
// consumer": it waits for the group to settle, judges the members then
// (the frozen one is gone), and moves the group back.
func TestMigrateBackDuringRebalanceIntegration(t *testing.T) {
	zookeeper, brokers := clusterPeers(t)
	topic := createTopic(t, brokers, 4)
	group := fmt.Sprintf("cli-migrate-rebalance.%d", time.Now().UnixNano())
	drain := func(c kafkaconsumer.Consumer) {
		done := make(chan struct{})
		go func() { // ends when c's Close closes Messages; waited for at cleanup
			defer close(done)
			for msg := range c.Messages() {
				c.Ack(msg)
			}
		}()
		t.Cleanup(func() { _ = c.Close(); <-done }) // a second Close is harmless
	}
	drain(joinForMigration(t, zookeeper, group, topic))
	drain(joinForMigration(t, zookeeper, group, topic))
	migrateTo(t, zookeeper, group, "kafka", "Stable with 2 members")

	// The member to freeze joins Kafka's group with a long session, so
	// that the rebalance below waits long for it.
	dialer := &proxyDialer{proxies: make(map[string]*testcluster.Proxy)}
	config := kafkaconsumer.NewConfig()
	config.Version = sarama.V2_4_0_0
	config.MaxProcessingTime = time.Second
	config.Zookeeper.Timeout = 3 * time.Second
	config.Consumer.Group.Session.Timeout = 20 * time.Second
	config.Net.Proxy.Enable = true
	config.Net.Proxy.Dialer = dialer
	frozen, err := kafkaconsumer.Join(group, kafkaconsumer.TopicSubscription(topic), zookeeper, config)
	if err != nil {
		t.Fatalf("join: %s", err)
	}
	t.Cleanup(func() {
		dialer.each(func(p *testcluster.Proxy) { p.Reset() }) // Close fails fast
		_ = frozen.Close()
		dialer.each(func(p *testcluster.Proxy) { _ = p.Close() })
	})
	drain(frozen)
	admin := newTestAdmin(t, brokers)
	describe := func() (*sarama.GroupDescription, error) {
		groups, err := admin.DescribeConsumerGroups([]string{group})
		if err != nil {
			return nil, err
		}
		return groups[0], nil
	}
	waitFor(t, time.Minute, "Kafka's group to be Stable with 3 members", func() error {
		g, err := describe()
		if err == nil && (g.State != "Stable" || len(g.Members) != 3) {
			err = fmt.Errorf("%s with %d members", g.State, len(g.Members))
		}
		return err
	})

	dialer.each(func(p *testcluster.Proxy) { p.Hold() })
	drain(joinForMigration(t, zookeeper, group, topic))
	waitFor(t, 30*time.Second, "Kafka's group to rebalance", func() error {
		g, err := describe()
		if err == nil && g.State == "Stable" {
			err = fmt.Errorf("%s with %d members", g.State, len(g.Members))
		}
		return err
	})
	// With --wait 0 it waits --timeout at most: too short here, it says
	// it cannot tell yet, and leaves the switch.
	var out, errOut bytes.Buffer
	code := run([]string{"migrate", "--zookeeper", zookeeper, "--group", group, "--to", "zookeeper", "--wait", "0s", "--timeout", "1s"}, &out, &errOut)
	if code != exitError || !strings.Contains(errOut.String(), "cannot tell yet") || strings.Contains(errOut.String(), "not a consumer") {
		t.Errorf("migrate --to zookeeper --wait 0 --timeout 1s during the rebalance: exit status %d, %q; want %d, saying it cannot tell yet", code, errOut.String(), exitError)
	}
	began := time.Now()
	code, stdout, stderr := runMigrateCmd(zookeeper, group, "zookeeper")
	t.Logf("migrate --to zookeeper during the rebalance, %s: exit status %d: %s%s", time.Since(began).Round(time.Millisecond), code, strings.ReplaceAll(stdout, "\n", " "), stderr)
	if code != exitOK {
		t.Fatalf("migrate --to zookeeper during the rebalance: exit status %d, want %d: %s", code, exitOK, stderr)
	}
	if !strings.Contains(stdout, "3 instances are registered in ZooKeeper") {
		t.Errorf("migrate --to zookeeper said %q; want the 3 live members registered in ZooKeeper", stdout)
	}
}

// newTestAdmin connects a cluster admin to brokers, closed at the end of
// the test.
func newTestAdmin(t *testing.T, brokers []string) sarama.ClusterAdmin {
	t.Helper()
	config := sarama.NewConfig()
	config.Version = sarama.V2_4_0_0
	admin, err := sarama.NewClusterAdmin(brokers, config)
	if err != nil {
		t.Fatalf("admin: %s", err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	return admin
}
