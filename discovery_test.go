package kafkaconsumer

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/go-zookeeper/zk"
	"github.com/wvanbergen/kazoo-go"
)

func TestValidateDiscovery(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string // "" for valid
	}{
		{"default", func(*Config) {}, ""},
		{"kafka", func(c *Config) { c.Discovery = DiscoverFromKafka; c.Brokers = []string{"k1:9092"} }, ""},
		{"kafka without brokers", func(c *Config) { c.Discovery = DiscoverFromKafka }, "Brokers is empty"},
		{"kafka with Version 0.10.2", func(c *Config) {
			c.Discovery = DiscoverFromKafka
			c.Brokers = []string{"k1:9092"}
			c.Version = sarama.V0_10_2_0
		}, "too old for DiscoverFromKafka"},
		{"kafka with Version 0.11", func(c *Config) {
			c.Discovery = DiscoverFromKafka
			c.Brokers = []string{"k1:9092"}
			c.Version = sarama.V0_11_0_0
		}, ""},
		{"zookeeper with Version 1.0", func(c *Config) { c.Version = sarama.V1_0_0_0 }, ""},
		{"unknown", func(c *Config) { c.Discovery = 7 }, "Discovery(7)"},
		{"no interval", func(c *Config) { c.DiscoveryInterval = 0 }, "DiscoveryInterval"},
	} {
		c := NewConfig()
		tc.change(c)
		err := c.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: Validate() = %s, want nil", tc.name, err)
		case tc.want != "" && (!errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: Validate() = %v, want ErrInvalidConfig naming %q", tc.name, err, tc.want)
		}
	}
}

// customSubscription is a Subscription of the user's own.
type customSubscription struct{ Subscription }

func TestJoinRefusesCustomSubscriptionWithKafkaDiscovery(t *testing.T) {
	config := NewConfig()
	config.Discovery = DiscoverFromKafka
	config.Brokers = []string{"127.0.0.1:1"}
	_, err := Join("group", customSubscription{TopicSubscription("t")}, "127.0.0.1:1", config)
	if !errors.Is(err, ErrInvalidSubscription) || !strings.Contains(err.Error(), "DiscoverFromZookeeper only") {
		t.Errorf("Join = %v, want ErrInvalidSubscription saying a custom Subscription needs DiscoverFromZookeeper", err)
	}
}

func TestSelectsTopic(t *testing.T) {
	t.Parallel()
	static := TopicSubscription("a", "__consumer_offsets").(topicSelector)
	white := WhitelistSubscription(regexp.MustCompile(`^a`)).(topicSelector)
	black := BlacklistSubscription(regexp.MustCompile(`^b`)).(topicSelector)
	for _, tc := range []struct {
		sel      topicSelector
		name     string
		internal bool
		want     bool
	}{
		{static, "a", false, true},
		{static, "b", false, false},
		{static, "__consumer_offsets", true, true}, // named: taken, as in ZooKeeper mode
		{white, "abc", false, true},
		{white, "abc", true, false}, // marked internal by the metadata
		{white, "bcd", false, false},
		{black, "abc", false, true},
		{black, "bcd", false, false},
		{black, "__transaction_state", false, false},
		{black, "__share_group_state", true, false}, // Kafka 4's, known by its flag only
	} {
		if got := tc.sel.selectsTopic(tc.name, tc.internal); got != tc.want {
			t.Errorf("%T.selectsTopic(%q, %v) = %v, want %v", tc.sel, tc.name, tc.internal, got, tc.want)
		}
	}
	// With an instance of the original library in the group (mixed.go).
	if !(internalToo{black}).selectsTopic("__consumer_offsets", true) || (internalToo{white}).selectsTopic("__consumer_offsets", true) {
		t.Error("internalToo: a blacklist of ^b does not select __consumer_offsets, or a whitelist of ^a does")
	}
	if got := static.metadataTopics(); strings.Join(got, ",") != "__consumer_offsets,a" {
		t.Errorf("static metadataTopics() = %v", got)
	}
	if got := white.metadataTopics(); got != nil {
		t.Errorf("white list metadataTopics() = %v, want nil (all)", got)
	}
}

func TestMetadataViewSameAs(t *testing.T) {
	t.Parallel()
	kz := &kazoo.Kazoo{}
	view := func(missing []string, parts ...[3]int32) metadataView {
		v := metadataView{missing: missing}
		for _, p := range parts {
			v.partitions = append(v.partitions, kz.Topic(string(rune('a'+p[0]))).Partition(p[1], []int32{p[2], 9}))
		}
		return v
	}
	base := view(nil, [3]int32{0, 0, 1}, [3]int32{0, 1, 2})
	for _, tc := range []struct {
		name  string
		other metadataView
		want  bool
	}{
		{"same", view(nil, [3]int32{0, 0, 1}, [3]int32{0, 1, 2}), true},
		{"partition added", view(nil, [3]int32{0, 0, 1}, [3]int32{0, 1, 2}, [3]int32{0, 2, 1}), false},
		{"preferred replica moved", view(nil, [3]int32{0, 0, 1}, [3]int32{0, 1, 1}), false},
		{"other topic", view(nil, [3]int32{0, 0, 1}, [3]int32{1, 1, 2}), false},
		{"a topic missing", view([]string{"x"}, [3]int32{0, 0, 1}, [3]int32{0, 1, 2}), false},
	} {
		if got := base.sameAs(tc.other); got != tc.want {
			t.Errorf("%s: sameAs = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// kafkaDiscoveryConfig is testConfig with DiscoverFromKafka, whatever the
// mode of the run.
func kafkaDiscoveryConfig() *Config {
	config := testConfig()
	config.Discovery = DiscoverFromKafka
	config.Brokers = kafkaPeers
	config.DiscoveryInterval = testDiscoveryInterval
	return config
}

// zookeeperDiscoveryConfig is testConfig with DiscoverFromZookeeper.
func zookeeperDiscoveryConfig() *Config {
	config := testConfig()
	config.Discovery = DiscoverFromZookeeper
	config.Brokers = nil
	return config
}

// onKRaft tells whether the test cluster runs in KRaft mode (its ZooKeeper
// has no /brokers).
func onKRaft(t *testing.T) bool {
	conn, chroot := testZookeeper(t, zookeeperPeers)
	ok, _, err := conn.Exists(chroot + "/brokers")
	if err != nil {
		t.Fatal(err)
	}
	return !ok
}

// A ZooKeeper without /brokers (a KRaft cluster's, or any ensemble) and
// DiscoverFromZookeeper: Join says what to set.
func TestKafkaDiscoveryZookeeperWithoutBrokers(t *testing.T) {
	parallelClusterTest(t)
	topic := newTopic(t, 4)
	conn, chroot := testZookeeper(t, zookeeperPeers)
	empty := chroot + "/" + uniqueName("no-brokers")
	if _, err := conn.Create(empty, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = deleteRecursive(conn, empty) })
	_, err := Join(uniqueName("kd.nobrokers"), TopicSubscription(topic), zookeeperPeers+empty, zookeeperDiscoveryConfig())
	if !errors.Is(err, ErrNoBrokers) || !strings.Contains(err.Error(), "DiscoverFromKafka") || !strings.Contains(err.Error(), "Config.Brokers") {
		t.Errorf("Join = %v, want ErrNoBrokers telling to set Config.Discovery and Config.Brokers", err)
	}
	// With DiscoverFromKafka the same ZooKeeper serves the group.
	c := join(t, uniqueName("kd.nobrokers"), TopicSubscription(topic), kafkaDiscoveryConfig())
	waitConsuming(t, c, 4, "the instance on a ZooKeeper without /brokers")
	if err := c.Close(); err != nil {
		t.Error(err)
	}
}

// Kafka 4 refuses what sarama sends for a Version older than
// MinKafkaVersionForKafkaDiscovery, which Validate rejects; that version,
// 2.1 (Kafka's documented baseline) and sarama's default consume and
// commit. Only against a Kafka 4 cluster.
func TestKafkaDiscoveryVersionBaseline(t *testing.T) {
	parallelClusterTest(t)
	topic4 := newTopic(t, 4)
	if !testKafkaVersion().IsAtLeast(sarama.V4_0_0_0) {
		t.Skip("needs a Kafka 4 cluster (make cluster-up MODE=kraft KAFKA_VERSION=4.1.1)")
	}
	client := newTestClient(t)
	consume := func(v sarama.KafkaVersion) (consumed bool, committed map[int32]int64) {
		t.Helper()
		group := uniqueName("kd.baseline")
		config := kafkaDiscoveryConfig()
		config.Version = v
		c := join(t, group, TopicSubscription(topic4), config)
		col := collect(c, nil)
		values := produce(t, client, topic4, group, 8)
		consumed = poll(10*time.Second, func() bool { return col.has(values) })
		col.close(t)
		return consumed, committedOffsets(t, client, group, topic4)
	}
	for _, v := range []sarama.KafkaVersion{MinKafkaVersionForKafkaDiscovery, sarama.V2_1_0_0, NewConfig().Version} {
		if ok, committed := consume(v); !ok || len(committed) != 4 {
			t.Errorf("Version %s: consumed all: %v, committed %v; want all, 4 partitions committed", v, ok, committed)
		}
	}
	// The version below, let through Validate: Kafka 4 refuses its Fetch.
	const older = "0.10.2.0"
	min := MinKafkaVersionForKafkaDiscovery
	MinKafkaVersionForKafkaDiscovery = sarama.V0_10_2_0
	defer func() { MinKafkaVersionForKafkaDiscovery = min }()
	if ok, _ := consume(sarama.V0_10_2_0); ok {
		t.Errorf("Version %s consumed from Kafka 4; MinKafkaVersionForKafkaDiscovery may be too high", older)
	}
}

// TestKafkaDiscoveryTimes measures, in one run, how long a new topic waits
// before its first message is consumed, and how long a rebalance takes
// (a second instance joins until both consume), with each Discovery the
// cluster supports: both on a ZooKeeper-mode cluster, DiscoverFromKafka
// on a KRaft one.
func TestKafkaDiscoveryTimes(t *testing.T) {
	parallelClusterTest(t)
	client := newTestClient(t)
	admin := newTestAdmin(t, client)
	modes := []Discovery{DiscoverFromZookeeper, DiscoverFromKafka}
	if onKRaft(t) {
		modes = modes[1:]
	}
	for _, mode := range modes {
		config := zookeeperDiscoveryConfig()
		if mode == DiscoverFromKafka {
			config = kafkaDiscoveryConfig()
		}
		prefix := uniqueName("kd-times")
		a := join(t, prefix, WhitelistSubscription(regexp.MustCompile("^"+regexp.QuoteMeta(prefix)+`\.`)), config)
		colA := collect(a, nil)
		began := time.Now()
		createTopic(t, admin, prefix+".new", 4)
		values := produce(t, client, prefix+".new", "v", 40)
		waitFor(t, 30*time.Second, "the new topic's first message", func() bool { return colA.received(values) > 0 })
		created := time.Since(began)
		waitFor(t, 30*time.Second, "all messages", func() bool { return colA.has(values) })

		began = time.Now()
		b := join(t, prefix, WhitelistSubscription(regexp.MustCompile("^"+regexp.QuoteMeta(prefix)+`\.`)), config)
		colB := collect(b, nil)
		waitFor(t, 60*time.Second, "both instances consuming two partitions each", func() bool {
			return len(a.Stats()) == 2 && allClaimed(b, 2)
		})
		rebalance := time.Since(began)
		t.Logf("%s (DiscoveryInterval %s): topic created -> first message consumed %s; rebalance (second instance joins -> both consume) %s",
			mode, config.DiscoveryInterval, created.Round(time.Millisecond), rebalance.Round(time.Millisecond))
		if mode == DiscoverFromKafka && created > 2*config.DiscoveryInterval+2*time.Second {
			t.Errorf("DiscoverFromKafka: a new topic waited %s, want at most about 2 x DiscoveryInterval (%s)", created, config.DiscoveryInterval)
		}
		colB.close(t)
		colA.close(t)
	}
}

// agreed tells whether the instances together run n partitions, each
// claimed: none waits for a partition that another instance holds, as
// when two instances see different partition lists.
func agreed(n int, cs ...Consumer) bool {
	running, claimed := 0, 0
	for _, c := range cs {
		for _, s := range c.Stats() {
			running++
			if s.Claimed {
				claimed++
			}
		}
	}
	return running == n && claimed == n
}

// allClaimed tells whether c runs n partitions, all claimed.
func allClaimed(c Consumer, n int) bool {
	stats := c.Stats()
	if len(stats) != n {
		return false
	}
	for _, s := range stats {
		if !s.Claimed {
			return false
		}
	}
	return true
}

// The move of a group from DiscoverFromZookeeper to DiscoverFromKafka, and
// on to a Kafka-coordinated group, on a ZooKeeper-mode cluster (before its
// migration to KRaft; after it, only the last two steps are possible):
//  1. two instances consume in DiscoverFromZookeeper mode;
//  2. one at a time, each is replaced by one in DiscoverFromKafka mode: the
//     group is mixed meanwhile, and the two modes agree on the partitions
//     and their distribution (every partition claimed, once);
//  3. every instance stops; a sarama ConsumerGroup of the same name takes
//     over from the committed offsets.
//
// No message is lost at any step; the duplicates are counted.
func TestMigrationToKafkaDiscoveryAndOut(t *testing.T) {
	parallelClusterTest(t)
	if onKRaft(t) {
		t.Skip("starts in DiscoverFromZookeeper mode: needs a ZooKeeper-mode cluster")
	}
	client := newTestClient(t)
	admin := newTestAdmin(t, client)
	group := uniqueName("kd-migrate")
	topic := group + ".t"
	createTopic(t, admin, topic, 8)
	sub := TopicSubscription(topic)

	var all []string
	var cols []*collector
	step := func(name string, n int) {
		t.Helper()
		values := produce(t, client, topic, name, n)
		all = append(all, values...)
	}
	// 1. ZooKeeper mode.
	zk1 := collect(join(t, group, sub, zookeeperDiscoveryConfig()), nil)
	zk2 := collect(join(t, group, sub, zookeeperDiscoveryConfig()), nil)
	cols = append(cols, zk1, zk2)
	step("zk", 200)
	waitFor(t, 30*time.Second, "step 1's messages", func() bool { ok, _ := union(all, cols...); return ok })

	// 2. One at a time: a Kafka-mode instance joins, a ZooKeeper-mode one
	// leaves, with messages flowing.
	var pause time.Duration
	for i, old := range []*collector{zk1, zk2} {
		k := collect(join(t, group, sub, kafkaDiscoveryConfig()), nil)
		cols = append(cols, k)
		began := time.Now()
		var live []Consumer
		for _, col := range cols[i:] { // those not closed yet
			live = append(live, col.consumer)
		}
		waitFor(t, 60*time.Second, "the mixed group to agree (8 partitions run, all claimed)", func() bool { return agreed(8, live...) })
		step("mixed"+string(rune('0'+i)), 100)
		old.close(t)
		live = slices.DeleteFunc(live, func(c Consumer) bool { return c == old.consumer })
		waitFor(t, 60*time.Second, "the remaining instances to take over", func() bool { return agreed(8, live...) })
		if d := time.Since(began); d > pause {
			pause = d
		}
	}
	step("kafka", 200)
	waitFor(t, 30*time.Second, "step 2's messages", func() bool { ok, _ := union(all, cols...); return ok })
	_, dupsOurs := union(all, cols...)
	for _, col := range cols[2:] {
		col.close(t)
	}

	// 3. A Kafka-coordinated group of the same name takes over.
	step("exit", 200)
	sc := sarama.NewConfig()
	sc.Version = testKafkaVersion()
	sc.Consumer.Offsets.Initial = sarama.OffsetOldest // only if nothing was committed: must not happen
	cg, err := sarama.NewConsumerGroup(kafkaPeers, group, sc)
	if err != nil {
		t.Fatal(err)
	}
	h := &takeOver{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cg.Consume(ctx, []string{topic}, h) }()
	exit := all[len(all)-200:]
	waitFor(t, 60*time.Second, "the ConsumerGroup to consume the exit messages", func() bool { return h.has(exit) })
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("ConsumerGroup.Consume = %s", err)
	}
	if err := cg.Close(); err != nil {
		t.Error(err)
	}
	again := h.received(all[:len(all)-200])
	t.Logf("migration: %d messages; duplicates among our instances %d; the longest switch of one instance %s; the ConsumerGroup read %d messages our instances had committed (duplicates at the exit)",
		len(all), dupsOurs, pause.Round(time.Millisecond), again)
	if again != 0 {
		t.Errorf("the ConsumerGroup consumed again %d messages that our instances had acked and committed", again)
	}
}

// takeOver is the sarama ConsumerGroupHandler of the exit step: it counts
// the values and marks every message.
type takeOver struct {
	valueCounts
}

func (h *takeOver) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *takeOver) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (h *takeOver) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for msg := range claim.Messages() {
		h.add(string(msg.Value))
		s.MarkMessage(msg, "")
	}
	return nil
}
