package kafkaconsumer

// Joining: bad input, the ZooKeeper connection string, an unreachable
// ZooKeeper, the order of Join's steps, and JoinContext's cancellation.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/go-zookeeper/zk"
	"go.uber.org/goleak"
)

// leakOptions are the goroutines that outlive a consumer on purpose:
// go-metrics' meter ticker, which sarama starts once per process.
var leakOptions = []goleak.Option{
	goleak.IgnoreTopFunction("github.com/rcrowley/go-metrics.(*meterArbiter).tick"),
}

// verifyNoLeaks fails the test if goroutines started since it began are still
// running once the test is done, after waiting up to goleak's deadline.
func verifyNoLeaks(t *testing.T) {
	t.Helper()
	opts := append([]goleak.Option{goleak.IgnoreCurrent()}, leakOptions...)
	t.Cleanup(func() { goleak.VerifyNone(t, opts...) })
}

func TestJoinRejectsBadInput(t *testing.T) {
	verifyNoLeaks(t)
	badConfig := NewConfig()
	badConfig.MaxProcessingTime = 0
	cases := []struct {
		name         string
		group        string
		subscription Subscription
		zookeeper    string
		config       *Config
		want         error
	}{
		{"empty group", "", TopicSubscription("t"), "127.0.0.1:2181", nil, ErrInvalidGroup},
		{"group with slash", "a/b", TopicSubscription("t"), "127.0.0.1:2181", nil, ErrInvalidGroup},
		{"nil subscription", "g", nil, "127.0.0.1:2181", nil, ErrInvalidSubscription},
		{"empty subscription", "g", TopicSubscription(), "127.0.0.1:2181", nil, ErrInvalidSubscription},
		{"nil whitelist", "g", WhitelistSubscription(nil), "127.0.0.1:2181", nil, ErrInvalidSubscription},
		{"empty zookeeper", "g", TopicSubscription("t"), "", nil, ErrInvalidZookeeper},
		{"blank zookeeper", "g", TopicSubscription("t"), "  ", nil, ErrInvalidZookeeper},
		{"empty server", "g", TopicSubscription("t"), "127.0.0.1:2181,", nil, ErrInvalidZookeeper},
		{"bad port", "g", TopicSubscription("t"), "127.0.0.1:port", nil, ErrInvalidZookeeper},
		{"port out of range", "g", TopicSubscription("t"), "127.0.0.1:70000", nil, ErrInvalidZookeeper},
		{"empty chroot element", "g", TopicSubscription("t"), "127.0.0.1:2181/a//b", nil, ErrInvalidZookeeper},
		{"invalid config", "g", TopicSubscription("t"), "127.0.0.1:2181", badConfig, ErrInvalidConfig},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Join(tc.group, tc.subscription, tc.zookeeper, tc.config)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Join() = %v, %v; want %v", c, err, tc.want)
			}
			if c != nil {
				t.Fatal("Join returned a consumer with an error")
			}
		})
	}
}

func TestParseZookeeper(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in     string
		nodes  string // joined with ","
		chroot string
	}{
		{"zk1:2181", "zk1:2181", ""},
		{"zk1:2181,zk2:2181,zk3", "zk1:2181,zk2:2181,zk3:2181", ""},
		{"zk1:2181/kafka", "zk1:2181", "/kafka"},
		{"zk1:2181/kafka/", "zk1:2181", "/kafka"},
		{"zk1:2181/", "zk1:2181", ""},
		{"zk1:2181,zk2:2182/a/b", "zk1:2181,zk2:2182", "/a/b"},
		{"[::1]:2181", "[::1]:2181", ""},
		{"[::1]", "[::1]:2181", ""},
		{"[fe80::1]:2182,127.0.0.1:2181/kafka", "[fe80::1]:2182,127.0.0.1:2181", "/kafka"},
	}
	for _, tc := range cases {
		nodes, chroot, err := parseZookeeper(tc.in)
		if err != nil || strings.Join(nodes, ",") != tc.nodes || chroot != tc.chroot {
			t.Errorf("parseZookeeper(%q) = %v, %q, %v; want %s, %q", tc.in, nodes, chroot, err, tc.nodes, tc.chroot)
		}
	}
	for _, in := range []string{"::1:2181", "[::1", "[::1]:x", "[zk1]:2181", "[::1]:0", ":2181"} {
		if nodes, _, err := parseZookeeper(in); !errors.Is(err, ErrInvalidZookeeper) {
			t.Errorf("parseZookeeper(%q) = %v, %v; want ErrInvalidZookeeper", in, nodes, err)
		}
	}
}

func TestJoinUnreachableZookeeperIsBounded(t *testing.T) {
	verifyNoLeaks(t)
	config := NewConfig()
	config.Zookeeper.Timeout = 500 * time.Millisecond
	start := time.Now()
	// Port 1 on loopback: nothing listens there.
	c, err := Join("g", TopicSubscription("t"), "127.0.0.1:1", config)
	elapsed := time.Since(start)
	if !errors.Is(err, ErrZookeeperUnreachable) || c != nil {
		t.Fatalf("Join() = %v, %v; want ErrZookeeperUnreachable", c, err)
	}
	// The probe waits for the timeout, then up to a second to close.
	if limit := config.Zookeeper.Timeout + 2*time.Second; elapsed > limit {
		t.Fatalf("Join took %s, want at most %s", elapsed, limit)
	}
}

func TestJoinDoesNotChangeCallerConfig(t *testing.T) {
	verifyNoLeaks(t)
	config := NewConfig()
	config.Zookeeper.Timeout = 200 * time.Millisecond
	config.Offsets.Initial = sarama.OffsetOldest
	before := config.Consumer.Offsets.Initial
	_, _ = Join("g", TopicSubscription("t"), "127.0.0.1:1/chroot", config)
	if config.Zookeeper.Chroot != "" {
		t.Errorf("Join set the caller's Zookeeper.Chroot to %q", config.Zookeeper.Chroot)
	}
	if config.Consumer.Offsets.Initial != before {
		t.Error("Join changed the caller's sarama config")
	}
}

// TestIntegrationJoinContextCancelledInClaimWait: JoinContext whose context
// expires while a partition of its share is claimed by another instance
// returns the context's error and leaves ZooKeeper as it found it: no
// registration, no claim of its own (it had claimed the three other
// partitions), and no goroutine running.
func TestIntegrationJoinContextCancelledInClaimWait(t *testing.T) {
	parallelClusterTest(t)
	topic := newTopic(t, 4)
	conn, chroot := testZookeeper(t, zookeeperPeers)
	group := uniqueName("it.joinctx")
	base := chroot + "/consumers/" + group
	t.Cleanup(func() {
		if err := deleteRecursive(conn, base); err != nil {
			t.Errorf("delete %s: %s", base, err)
		}
	})
	for _, path := range []string{chroot + "/consumers", base, base + "/ids", base + "/owners", base + "/owners/" + topic} {
		if _, err := conn.Create(path, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			t.Fatalf("create %s: %s", path, err)
		}
	}
	const other = "another-instance"
	if _, err := conn.Create(base+"/owners/"+topic+"/2", []byte(other), 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatalf("claim %s/2 for %s: %s", topic, other, err)
	}

	logger, rec := newRecordingLogger()
	config := testConfig()
	config.Logger = logger
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	began := time.Now()
	c, err := JoinContext(ctx, group, TopicSubscription(topic), zookeeperPeers, config)
	took := time.Since(began)
	t.Logf("JoinContext returned after %s: %v", took, err)
	if err == nil {
		_ = c.Close()
		t.Fatalf("JoinContext succeeded while %s/2 was claimed by another instance", topic)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("JoinContext() = %v, want an error wrapping context.DeadlineExceeded", err)
	}
	if took > 8*time.Second {
		t.Errorf("JoinContext took %s with a 3 s deadline", took)
	}
	if _, ok := rec.find(slog.LevelDebug, "still owned by "+other, map[string]string{attrTopic: topic, attrPartition: "2"}); !ok {
		t.Errorf("JoinContext did not wait for the claim of %s/2 (no such line)", topic)
	}
	for p := 0; p < 4; p++ {
		if p == 2 {
			continue
		}
		if _, ok := rec.find(slog.LevelDebug, "Claimed partition", map[string]string{attrTopic: topic, attrPartition: fmt.Sprint(p)}); !ok {
			t.Errorf("%s/%d was not claimed while JoinContext waited", topic, p)
		}
	}

	ids, _, err := conn.Children(base + "/ids")
	if err != nil {
		t.Fatalf("list %s/ids: %s", base, err)
	}
	if len(ids) != 0 {
		t.Errorf("JoinContext failed but left registrations: %v", ids)
	}
	owners, _, err := conn.Children(base + "/owners/" + topic)
	if err != nil {
		t.Fatalf("list owners: %s", err)
	}
	for _, p := range owners {
		owner, _, err := conn.Get(base + "/owners/" + topic + "/" + p)
		if err != nil {
			t.Fatalf("get owner of %s/%s: %s", topic, p, err)
		}
		if p != "2" || string(owner) != other {
			t.Errorf("JoinContext failed but left the claim of %s/%s (owner %s)", topic, p, owner)
		}
	}
}

// TestIntegrationJoinContextCancelled: JoinContext with a context that is
// already cancelled returns its error at once and starts nothing.
func TestIntegrationJoinContextCancelled(t *testing.T) {
	parallelClusterTest(t)
	topic := newTopic(t, 4)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	began := time.Now()
	c, err := JoinContext(ctx, uniqueName("it.joinctx"), TopicSubscription(topic), zookeeperPeers, testConfig())
	if err == nil {
		_ = c.Close()
		t.Fatal("JoinContext with a cancelled context succeeded")
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("JoinContext() = %v, want an error wrapping context.Canceled", err)
	}
	if took := time.Since(began); took > 2*time.Second {
		t.Errorf("JoinContext with a cancelled context took %s", took)
	}
}

// TestIntegrationJoinRegistersLast: Join must connect to Kafka before it registers
// the instance in ZooKeeper. An instance that registers first and then
// cannot reach Kafka makes the group hand it a share of the partitions,
// which nobody consumes while sarama retries; then Join fails and the group
// rebalances again.
//
// The test points Join at a chroot of the test ZooKeeper that lists one
// Kafka broker at 127.0.0.1:1, where nothing listens, and watches the
// group's registrations while Join runs: the watch must not fire.
func TestIntegrationJoinRegistersLast(t *testing.T) {
	parallelClusterTest(t)
	skipKafkaDiscovery(t, "it fakes a broker registration in ZooKeeper")
	debugLogs(t)
	nodes, baseChroot, err := parseZookeeper(zookeeperPeers)
	if err != nil {
		t.Fatal(err)
	}
	conn, _, err := zk.Connect(nodes, 10*time.Second, zk.WithLogInfo(false), zk.WithLogger(zookeeperLogger{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)

	chroot := baseChroot + "/" + uniqueName("join-registers-last")
	group := uniqueName("rv.join")
	t.Cleanup(func() {
		if err := deleteRecursive(conn, chroot); err != nil {
			t.Errorf("delete %s: %s", chroot, err)
		}
	})
	broker := []byte(`{"version":5,"host":"127.0.0.1","port":1,"jmx_port":-1,"timestamp":"0",` +
		`"endpoints":["PLAINTEXT://127.0.0.1:1"],"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"}}`)
	ids := chroot + "/consumers/" + group + "/ids"
	for _, node := range []struct {
		path string
		data []byte
	}{
		{chroot, nil},
		{chroot + "/brokers", nil},
		{chroot + "/brokers/ids", nil},
		{chroot + "/brokers/ids/1", broker},
		{chroot + "/brokers/topics", nil},
		{chroot + "/consumers", nil},
		{chroot + "/consumers/" + group, nil},
		{ids, nil},
	} {
		if _, err := conn.Create(node.path, node.data, 0, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatalf("create %s: %s", node.path, err)
		}
	}
	children, _, registrations, err := conn.ChildrenW(ids)
	if err != nil {
		t.Fatalf("watch %s: %s", ids, err)
	}
	if len(children) != 0 {
		t.Fatalf("%s has children before Join: %v", ids, children)
	}

	config := testConfig()
	config.Net.DialTimeout = 500 * time.Millisecond
	config.Metadata.Retry.Max = 1
	config.Metadata.Retry.Backoff = 10 * time.Millisecond
	began := time.Now()
	c, err := Join(group, TopicSubscription("rv-join-topic"), strings.Join(nodes, ",")+chroot, config)
	took := time.Since(began)
	if err == nil {
		_ = c.Close()
		t.Fatalf("Join with an unreachable Kafka succeeded (in %s)", took)
	}
	t.Logf("Join failed after %s: %s", took, err)
	if took > 15*time.Second {
		t.Errorf("Join took %s to fail; want it bounded by the sarama timeouts (about a second)", took)
	}

	// ZooKeeper delivers a watch event before the answer to any later
	// request that sees the change: after this Children call, the watch
	// channel holds the event if a registration was created meanwhile.
	left, _, err := conn.Children(ids)
	if err != nil {
		t.Fatalf("list %s: %s", ids, err)
	}
	if len(left) != 0 {
		t.Errorf("Join failed but left registrations in %s: %v", ids, left)
	}
	select {
	case ev := <-registrations:
		t.Errorf("Join registered the instance in %s before it failed to reach Kafka (watch fired: %s on %s), so the group would have rebalanced twice for an instance that never consumed",
			ids, ev.Type, ev.Path)
	default:
	}
	owners, _, err := conn.Children(chroot + "/consumers/" + group + "/owners")
	if err != nil && err != zk.ErrNoNode {
		t.Fatalf("list owners: %s", err)
	}
	if len(owners) != 0 {
		t.Errorf("Join failed but left partition claims: %v", owners)
	}
}
