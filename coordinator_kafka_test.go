package kafkaconsumer

// CoordinatorKafka against the real cluster: joining without ZooKeeper,
// consuming, a second member joining and partitions moving one owner at
// a time, a graceful leave, Close's bound, a zombie's commit refused,
// static membership; and, without a cluster, the validation and the
// assignor's encodings.

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/wvanbergen/kazoo-go"
)

// kafkaTestConfig is testConfig for CoordinatorKafka: Brokers set, short
// group timeouts (the broker's group.min.session.timeout.ms is 6 s).
// kafkaCoordinatorTest is parallelClusterTest for a test of
// CoordinatorKafka, which supports Kafka 2.4 and later: it skips older
// clusters (make test-matrix runs the integration suite on Kafka 1.1).
func kafkaCoordinatorTest(t *testing.T) {
	t.Helper()
	parallelClusterTest(t)
	if !testKafkaVersion().IsAtLeast(sarama.V2_4_0_0) {
		t.Skipf("CoordinatorKafka supports Kafka 2.4 and later, not %s", testKafkaVersion())
	}
}

func kafkaTestConfig() *Config {
	config := testConfig()
	config.Coordinator = CoordinatorKafka
	config.Brokers = kafkaPeers
	config.DiscoveryInterval = time.Second
	config.Consumer.Group.Session.Timeout = 6 * time.Second
	config.Consumer.Group.Heartbeat.Interval = 500 * time.Millisecond
	return config
}

// joinKafka joins group with CoordinatorKafka (no ZooKeeper), and closes
// the consumer at the end of the test if the test did not.
func joinKafka(t *testing.T, group string, subscription Subscription, config *Config) Consumer {
	t.Helper()
	c, err := Join(group, subscription, "", config)
	if err != nil {
		t.Fatalf("Join(%s) = %s", group, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// handOuts records, per partition, which consumer handed out each message,
// in the order of the hand-outs: an Observer per consumer.
type handOuts struct {
	mu     sync.Mutex
	events map[TopicPartition][]string // the consumers' names, in order
}

type handOutObserver struct {
	h    *handOuts
	name string
}

func (o handOutObserver) HandingOut(msg *sarama.ConsumerMessage) {
	o.h.mu.Lock()
	defer o.h.mu.Unlock()
	if o.h.events == nil {
		o.h.events = make(map[TopicPartition][]string)
	}
	tp := TopicPartition{Topic: msg.Topic, Partition: msg.Partition}
	o.h.events[tp] = append(o.h.events[tp], o.name)
}
func (o handOutObserver) HandingOutBatch(*Batch)            {}
func (o handOutObserver) Acked(*sarama.ConsumerMessage)     {}
func (o handOutObserver) TakenBack(*sarama.ConsumerMessage) {}

// switches returns, per partition, how often the consumer handing it out
// changed.
func (h *handOuts) switches() map[TopicPartition]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	result := make(map[TopicPartition]int)
	for tp, names := range h.events {
		for i := 1; i < len(names); i++ {
			if names[i] != names[i-1] {
				result[tp]++
			}
		}
	}
	return result
}

// TestIntegrationKafkaCoordinatorJoinSplitLeave: joinSplitLeave with the
// classic protocol, with no ZooKeeper.
func TestIntegrationKafkaCoordinatorJoinSplitLeave(t *testing.T) {
	kafkaCoordinatorTest(t)
	joinSplitLeave(t, "kafkacoord", kafkaTestConfig)
}

// joinSplitLeave: a member of config joins and consumes everything; a
// second joins and the partitions split, each handed over once (no
// partition handed out by both in turn); the first leaves gracefully and
// the second takes everything; nothing is lost, nothing is delivered
// twice, every offset is committed, Close is bounded. The group's name
// begins with prefix; config returns a new configuration for each member.
func joinSplitLeave(t *testing.T, prefix string, config func() *Config) {
	debugLogs(t)
	topic := newTopic(t, 8)
	group := uniqueName(prefix)
	client := newTestClient(t)
	var h handOuts
	first := produce(t, client, topic, "a", 200)

	configA := config()
	configA.Observer = handOutObserver{&h, "A"}
	began := time.Now()
	a := joinKafka(t, group, TopicSubscription(topic), configA)
	colA := collect(a, nil)
	waitFor(t, 30*time.Second, "A to receive the first messages", func() bool { return colA.received(first) == len(first) })
	t.Logf("A joined and received %d messages in %s", len(first), time.Since(began).Round(time.Millisecond))

	configB := config()
	configB.Observer = handOutObserver{&h, "B"}
	began = time.Now()
	b := joinKafka(t, group, TopicSubscription(topic), configB)
	colB := collect(b, nil)
	waitFor(t, 30*time.Second, "the partitions to split 4/4", func() bool { return len(a.Stats()) == 4 && len(b.Stats()) == 4 })
	t.Logf("split settled %s after B's Join", time.Since(began).Round(time.Millisecond))
	second := produce(t, client, topic, "b", 200)
	waitFor(t, 30*time.Second, "the second messages", func() bool { return colA.received(second)+colB.received(second) >= len(second) })

	began = time.Now()
	colA.close(t)
	closed := time.Since(began)
	if closed > 10*time.Second {
		t.Errorf("A's Close took %s", closed)
	}
	waitFor(t, 30*time.Second, "B to take every partition", func() bool { return len(b.Stats()) == 8 })
	t.Logf("A closed in %s; B had all 8 partitions %s after", closed.Round(time.Millisecond), (time.Since(began) - closed).Round(time.Millisecond))
	third := produce(t, client, topic, "c", 200)
	waitFor(t, 30*time.Second, "B to receive the third messages", func() bool { return colB.received(third) == len(third) })
	colB.close(t)

	all := append(append(append([]string(nil), first...), second...), third...)
	ok, duplicates := union(all, colA, colB)
	if !ok || duplicates != 0 {
		t.Errorf("received every message: %t, duplicates %d", ok, duplicates)
	}
	for tp, n := range h.switches() {
		if n > 1 {
			t.Errorf("%s/%d changed hands %d times: two members handed it out in turn", tp.Topic, tp.Partition, n)
		}
	}
	committed := committedOffsets(t, client, group, topic)
	newest := newestOffsets(t, client, topic)
	for p, want := range newest {
		if committed[p] != want {
			t.Errorf("partition %d: committed %d, want %d", p, committed[p], want)
		}
	}
}

// TestValidateCoordinator: what CoordinatorKafka asks of the
// configuration, and of Join's arguments.
func TestValidateCoordinator(t *testing.T) {
	t.Parallel()
	kafka := func(change func(*Config)) *Config {
		config := NewConfig()
		config.Coordinator = CoordinatorKafka
		config.Brokers = []string{"127.0.0.1:9092"}
		config.Version = sarama.V2_8_0_0
		change(config)
		return config
	}
	for _, tc := range []struct {
		name   string
		config *Config
		want   string // in the error; "" for none
	}{
		{"kafka", kafka(func(*Config) {}), ""},
		{"no brokers", kafka(func(c *Config) { c.Brokers = nil }), "Coordinator is CoordinatorKafka but Brokers is empty"},
		{"restart grace", kafka(func(c *Config) { c.InstanceID, c.RestartGrace = "a", time.Second }), "RestartGrace is 1s but Coordinator is CoordinatorKafka"},
		{"static on 2.2", kafka(func(c *Config) { c.InstanceID, c.Version = "a", sarama.V2_2_0_0 }), "older than 2.3.0"},
		{"static on 2.3", kafka(func(c *Config) { c.InstanceID, c.Version = "a", sarama.V2_3_0_0 }), ""},
		{"too old", kafka(func(c *Config) { c.Version = sarama.V0_10_2_0 }), "too old for CoordinatorKafka"},
		{"unknown", kafka(func(c *Config) { c.Coordinator = 7 }), "Coordinator(7)"},
		{"consumer protocol", kafka(func(c *Config) { c.GroupProtocol = GroupProtocolConsumer }), ""},
		{"consumer protocol on zookeeper", kafka(func(c *Config) { c.GroupProtocol, c.Coordinator = GroupProtocolConsumer, CoordinatorZooKeeper }), "set Coordinator to CoordinatorKafka"},
		{"assignor with classic", kafka(func(c *Config) { c.GroupRemoteAssignor = "range" }), `GroupRemoteAssignor is "range" but GroupProtocol is GroupProtocolClassic`},
		{"unknown protocol", kafka(func(c *Config) { c.GroupProtocol = 5 }), "GroupProtocol(5)"},
		{"consumer protocol with GSSAPI", kafka(func(c *Config) {
			c.GroupProtocol, c.Net.SASL.Enable, c.Net.SASL.Mechanism = GroupProtocolConsumer, true, sarama.SASLTypeGSSAPI
		}), "support PLAIN, SCRAM-SHA-256"},
	} {
		err := tc.config.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: Validate() = %s", tc.name, err)
		case tc.want != "" && (!errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: Validate() = %v, want ErrInvalidConfig with %q", tc.name, err, tc.want)
		}
	}

	config := kafka(func(*Config) {})
	if _, err := Join("g", TopicSubscription("t"), "127.0.0.1:2181", config); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "uses no ZooKeeper") {
		t.Errorf("Join with a ZooKeeper connection string = %v, want ErrInvalidConfig", err)
	}
	if _, err := Join("g", customSubscription{TopicSubscription("t")}, "", config); !errors.Is(err, ErrInvalidSubscription) || !strings.Contains(err.Error(), "CoordinatorKafka") {
		t.Errorf("Join with a custom Subscription = %v, want ErrInvalidSubscription", err)
	}
}

// kafkaTopicPartitions returns the partitions of topics, each led by
// broker 1.
func kafkaTopicPartitions(counts map[string]int32) kazoo.PartitionList {
	var result kazoo.PartitionList
	names := make([]string, 0, len(counts))
	for name := range counts {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		topic := kazooValues.Topic(name)
		for p := int32(0); p < counts[name]; p++ {
			result = append(result, topic.Partition(p, []int32{1}))
		}
	}
	return result
}

// TestAssignCooperativeMovesOneOwnerAtATime: a partition that moves is
// first withheld from both its owner and its next owner, and given to
// the next owner once its owner no longer reports it; the next owner is
// told to await it (awaitingUserData), so that it heartbeats more often.
func TestAssignCooperativeMovesOneOwnerAtATime(t *testing.T) {
	t.Parallel()
	partitions := map[string]int32{"t": 4}
	all := []TopicPartition{{"t", 0}, {"t", 1}, {"t", 2}, {"t", 3}}
	sub := []string{"t"}

	// m2 joins while m1 owns everything: m1 keeps its target, m2 gets
	// nothing yet.
	// m2 awaits them.
	plan, awaiting := assignCooperative([]kafkaMember{{id: "m1", key: "a", topics: sub, owned: all}, {id: "m2", key: "b", topics: sub}}, partitions)
	if got := fmt.Sprint(plan, awaiting); got != "map[m1:map[t:[0 1]] m2:map[]] map[m2:true]" {
		t.Errorf("first generation: %s", got)
	}
	// m1 stopped 2 and 3 and joined again: m2 gets them; nobody awaits.
	plan, awaiting = assignCooperative([]kafkaMember{{id: "m1", key: "a", topics: sub, owned: all[:2]}, {id: "m2", key: "b", topics: sub}}, partitions)
	if got := fmt.Sprint(plan, awaiting); got != "map[m1:map[t:[0 1]] m2:map[t:[2 3]]] map[]" {
		t.Errorf("second generation: %s", got)
	}
	// A static member that comes back with a new member ID, owning
	// nothing, gets the partitions that nobody owns.
	plan, _ = assignCooperative([]kafkaMember{{id: "zz-new", key: "a", topics: sub}, {id: "m2", key: "b", topics: sub, owned: all[2:]}}, partitions)
	if got := fmt.Sprint(plan); got != "map[m2:map[t:[2 3]] zz-new:map[t:[0 1]]]" {
		t.Errorf("static member back: %s", got)
	}
	// A partition reported by two members goes to neither.
	plan, awaiting = assignCooperative([]kafkaMember{{id: "m1", key: "a", topics: sub, owned: all[:1]}, {id: "m2", key: "b", topics: sub, owned: all[:1]}}, partitions)
	if got := fmt.Sprint(plan, awaiting); got != "map[m1:map[t:[1]] m2:map[t:[2 3]]] map[m1:true]" {
		t.Errorf("conflict: %s", got)
	}
}

// TestAssignmentUserDataMarksRevocations: a generation that moves a
// partition marks the assignment of its owner (revoking) as well as that
// of its next owner (awaiting), so that no stored assignment of a
// generation that revokes is free of user data: Kafka 4's brokers do not
// convert such a group (assignmentUserData).
func TestAssignmentUserDataMarksRevocations(t *testing.T) {
	t.Parallel()
	partitions := map[string]int32{"t": 4}
	all := []TopicPartition{{"t", 0}, {"t", 1}, {"t", 2}, {"t", 3}}
	sub := []string{"t"}
	members := []kafkaMember{{id: "m1", key: "a", topics: sub, owned: all}, {id: "m2", key: "b", topics: sub}, {id: "m3", key: "c", topics: sub, owned: nil}}
	plan, awaiting := assignCooperative(members, partitions)
	revoking := revokingMembers(members, plan)
	var got []string
	for _, m := range members {
		got = append(got, m.id+" "+string(assignmentUserData(awaiting[m.id], revoking[m.id], len(revoking) > 0)))
	}
	if want := `m1 {"revoking":true}, m2 {"awaiting":true}, m3 {"awaiting":true}`; strings.Join(got, ", ") != want {
		t.Errorf("user data %s, want %s", strings.Join(got, ", "), want)
	}
	// m1 stopped what moves and joined again: no user data.
	members[0].owned = nil
	for id, ps := range plan["m1"] {
		for _, p := range ps {
			members[0].owned = append(members[0].owned, TopicPartition{id, p})
		}
	}
	plan, awaiting = assignCooperative(members, partitions)
	revoking = revokingMembers(members, plan)
	for _, m := range members {
		if data := assignmentUserData(awaiting[m.id], revoking[m.id], len(revoking) > 0); data != nil {
			t.Errorf("the next generation's assignment of %s carries %s", m.id, data)
		}
	}
	if !awaitingAssignment(awaitingRevokingUserData) || awaitingAssignment(revokingUserData) {
		t.Error("awaitingAssignment misreads the combined or the revoking user data")
	}
	if !expectsRebalance(followingUserData) || expectsRebalance(revokingUserData) || expectsRebalance(nil) {
		t.Error("expectsRebalance misreads the following, the revoking or no user data")
	}
}

// TestKafkaAssignmentEncoding: the member metadata and the assignments
// go through Kafka's consumer protocol encodings (sarama's), which the
// tools read.
func TestKafkaAssignmentEncoding(t *testing.T) {
	t.Parallel()
	partitions := kafkaTopicPartitions(map[string]int32{"a": 2, "b": 1})
	meta := memberMetadata(partitions, map[string][]int32{"b": {0}, "a": {1, 0}})
	join := &sarama.JoinGroupRequest{}
	if err := join.AddGroupProtocolMetadata(kafkaProtocol, meta); err != nil {
		t.Fatal(err)
	}
	instance := "pod-1"
	resp := &sarama.JoinGroupResponse{Members: []sarama.GroupMember{
		{MemberId: "m1", GroupInstanceId: &instance, Metadata: join.OrderedGroupProtocols[0].Metadata},
		{MemberId: "m2", Metadata: join.OrderedGroupProtocols[0].Metadata},
	}}
	decoded, err := resp.GetMembers()
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(decoded["m1"].Version, decoded["m1"].Topics); got != "1 [a b]" {
		t.Errorf("topics: %s", got)
	}
	members, err := kafkaMembers(resp)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(members); got != "[{m1 pod-1 [a b] [{a 0} {a 1} {b 0}]} {m2 m2 [a b] [{a 0} {a 1} {b 0}]}]" {
		t.Errorf("members: %s", got)
	}

	sync := syncGroupRequest(sarama.V3_9_0_0, "g", groupMember{id: "m1", generation: 3}, &instance)
	if sync.Version != 5 || *sync.ProtocolType != "consumer" || *sync.ProtocolName != "kafkaconsumer" || *sync.GroupInstanceId != instance {
		t.Errorf("SyncGroup request: %+v", sync)
	}
	want := map[string][]int32{"a": {0, 1}, "b": {0}}
	if err := sync.AddGroupAssignmentMember("m1", &sarama.ConsumerGroupMemberAssignment{Topics: want}); err != nil {
		t.Fatal(err)
	}
	assignment, err := (&sarama.SyncGroupResponse{MemberAssignment: sync.GroupAssignments[0].Assignment}).GetMemberAssignment()
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(assignment.Topics) != fmt.Sprint(want) {
		t.Errorf("assignment %v, want %v", assignment.Topics, want)
	}
}

// TestIntegrationKafkaCoordinatorZombieCommitRefused: a commit with a
// generation the group has left behind, as a member removed from the
// group would send it, is refused by the broker, and the committed
// offset stays the live members'.
func TestIntegrationKafkaCoordinatorZombieCommitRefused(t *testing.T) {
	kafkaCoordinatorTest(t)
	topic := newTopic(t, 2)
	group := uniqueName("kafkacoord-zombie")
	client := newTestClient(t)
	values := produce(t, client, topic, "z", 20)
	a := joinKafka(t, group, TopicSubscription(topic), kafkaTestConfig())
	colA := collect(a, nil)
	waitFor(t, 30*time.Second, "A to receive everything", func() bool { return colA.received(values) == len(values) })
	oldGeneration, oldMember := kafkaMemberOf(a)
	b := joinKafka(t, group, TopicSubscription(topic), kafkaTestConfig())
	colB := collect(b, nil)
	waitFor(t, 30*time.Second, "the partitions to split", func() bool { return len(a.Stats()) == 1 && len(b.Stats()) == 1 })
	newest := newestOffsets(t, client, topic)
	waitCommitted(t, client, group, topic, newest)

	for _, tc := range []struct {
		name       string
		generation int32
		member     string
		want       error
	}{
		{"an old generation", oldGeneration, oldMember, sarama.ErrIllegalGeneration},
		{"an unknown member", func() int32 { g, _ := kafkaMemberOf(a); return g }(), "zombie", sarama.ErrUnknownMemberId},
	} {
		var mu sync.Mutex
		var reported []error
		store := newOffsetStore(client, group, func(_ TopicPartition, err error) {
			mu.Lock()
			reported = append(reported, err)
			mu.Unlock()
		})
		store.member = func() (int32, string, *string) { return tc.generation, tc.member, nil }
		tp := TopicPartition{Topic: topic, Partition: 0}
		if err := store.reserve(tp); err != nil {
			t.Fatal(err)
		}
		store.set(tp, 0)
		store.mark(tp, 1) // back to the start: what a zombie's late commit does
		store.commitRound()
		mu.Lock()
		if len(reported) != 1 || !errors.Is(reported[0], tc.want) {
			t.Errorf("%s: reported %v, want %s", tc.name, reported, tc.want)
		}
		mu.Unlock()
	}
	if got := committedOffsets(t, client, group, topic); got[0] != newest[0] {
		t.Errorf("partition 0 committed at %d after the zombie's commits, want %d", got[0], newest[0])
	}
	colA.close(t)
	colB.close(t)
}

// TestIntegrationKafkaCoordinatorStaticRejoinKeepsPartitions: a static
// member (InstanceID) that closes does not leave the group: its
// partitions wait for it, the other member's do not move, and it gets
// the same ones back when it returns within the session timeout.
func TestIntegrationKafkaCoordinatorStaticRejoinKeepsPartitions(t *testing.T) {
	kafkaCoordinatorTest(t)
	topic := newTopic(t, 4)
	group := uniqueName("kafkacoord-static")
	client := newTestClient(t)
	idA, idB := uniqueName("a"), uniqueName("b")
	configA := kafkaTestConfig()
	configA.InstanceID = idA
	configA.Consumer.Group.Session.Timeout = 20 * time.Second // the grace
	var rebalancesB sync.Mutex
	var changesB []Rebalance
	configB := kafkaTestConfig()
	configB.InstanceID = idB
	configB.Consumer.Group.Session.Timeout = 20 * time.Second
	configB.OnRebalance = func(r Rebalance) {
		rebalancesB.Lock()
		changesB = append(changesB, r)
		rebalancesB.Unlock()
	}
	a := joinKafka(t, group, TopicSubscription(topic), configA)
	colA := collect(a, nil)
	b := joinKafka(t, group, TopicSubscription(topic), configB)
	colB := collect(b, nil)
	waitFor(t, 30*time.Second, "the partitions to split 2/2", func() bool { return len(a.Stats()) == 2 && len(b.Stats()) == 2 })
	sharesA := fmt.Sprint(a.Stats()[0].TopicPartition, a.Stats()[1].TopicPartition)
	rebalancesB.Lock()
	changesB = nil
	rebalancesB.Unlock()

	colA.close(t)
	values := produce(t, client, topic, "s", 40)
	a2 := joinKafka(t, group, TopicSubscription(topic), configA)
	colA2 := collect(a2, nil)
	waitFor(t, 30*time.Second, "everything to be received", func() bool { return colA2.received(values)+colB.received(values) == len(values) })
	if st := a2.Stats(); len(st) != 2 || fmt.Sprint(st[0].TopicPartition, st[1].TopicPartition) != sharesA {
		t.Errorf("the static member came back with %v, want %s", st, sharesA)
	}
	rebalancesB.Lock()
	if len(changesB) != 0 {
		t.Errorf("the other member's partitions changed: %v", changesB)
	}
	rebalancesB.Unlock()
	colA2.close(t)
	colB.close(t)
}

// TestIntegrationKafkaCoordinatorJoinContext: JoinContext returns once
// the first generation's partitions are claimed.
func TestIntegrationKafkaCoordinatorJoinContext(t *testing.T) {
	kafkaCoordinatorTest(t)
	topic := newTopic(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := JoinContext(ctx, uniqueName("kafkacoord-ctx"), TopicSubscription(topic), "", kafkaTestConfig())
	if err != nil {
		t.Fatalf("JoinContext = %s", err)
	}
	stats := c.Stats()
	if len(stats) != 2 || !stats[0].Claimed || !stats[1].Claimed {
		t.Errorf("after JoinContext: %+v", stats)
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close() = %s", err)
	}
}

// TestIntegrationKafkaCoordinatorFencedInstanceStaysOut: a second live
// instance joins with the InstanceID of a running one, and the group's
// coordinator fences the first (FENCED_INSTANCE_ID). That is final for
// the first: an error wrapping ErrInstanceIDInUse reaches its Errors(),
// it hands out nothing more and never joins again, so that the second
// keeps its generation and every partition; the first's Close works.
func TestIntegrationKafkaCoordinatorFencedInstanceStaysOut(t *testing.T) {
	kafkaCoordinatorTest(t)
	topic := newTopic(t, 2)
	group := uniqueName("kafkacoord-fenced")
	client := newTestClient(t)
	id := uniqueName("twin")
	var h handOuts
	configA := kafkaTestConfig()
	configA.InstanceID = id
	configA.Observer = handOutObserver{&h, "a"}
	a := joinKafka(t, group, TopicSubscription(topic), configA)
	errsA := make(chan error, 16)
	go func() { // ends when Close closes Errors
		for err := range a.Errors() {
			errsA <- err
		}
		close(errsA)
	}()
	colA := collect(a, nil)
	first := produce(t, client, topic, "f", 20)
	waitFor(t, 30*time.Second, "the first instance to receive everything", func() bool { return colA.received(first) == len(first) })

	configB := kafkaTestConfig()
	configB.InstanceID = id
	configB.Observer = handOutObserver{&h, "b"}
	b := joinKafka(t, group, TopicSubscription(topic), configB)
	colB := collect(b, nil)
	var fenced error
	waitFor(t, 30*time.Second, "ErrInstanceIDInUse on the first instance's Errors()", func() bool {
		for {
			select {
			case err := <-errsA:
				if errors.Is(err, ErrInstanceIDInUse) {
					fenced = err
					return true
				}
				t.Logf("the first instance's Errors(): %s", err)
			default:
				return false
			}
		}
	})
	t.Logf("the first instance: %s", fenced)
	waitFor(t, 30*time.Second, "the second instance to hold both partitions", func() bool { return len(b.Stats()) == 2 })
	generation, member := kafkaMemberOf(b)
	second := produce(t, client, topic, "s", 20)
	waitFor(t, 30*time.Second, "the second instance to receive the second messages", func() bool { return colB.received(second) == len(second) })
	began := time.Now()
	colA.close(t)
	t.Logf("Close of the fenced instance took %s", time.Since(began).Round(time.Millisecond))
	if n := colA.received(second); n > 0 {
		t.Errorf("the fenced instance received %d of the second messages", n)
	}
	if g, m := kafkaMemberOf(b); g != generation || m != member {
		t.Errorf("the second instance went from generation %d (%s) to %d (%s): the fenced one joined again", generation, member, g, m)
	}
	for tp, n := range h.switches() {
		if n > 1 {
			t.Errorf("%v changed hands %d times, want 1", tp, n)
		}
	}
	colB.close(t)
}

// TestJoinedLine: the leader's line of a generation joined counts the
// members (its JoinGroup's answer lists them); a follower's answer lists
// none, so its line gives no count but names the leader.
func TestJoinedLine(t *testing.T) {
	members := []sarama.GroupMember{{MemberId: "a"}, {MemberId: "b"}, {MemberId: "c"}}
	leader := joinedLine(&sarama.JoinGroupResponse{GenerationId: 1, LeaderId: "a", MemberId: "a", Members: members}, 3)
	if want := "Joined generation 1 of the group as a, as the leader: 3 members, 3 partitions assigned to this member."; leader != want {
		t.Errorf("the leader's line:\n%s\nwant\n%s", leader, want)
	}
	follower := joinedLine(&sarama.JoinGroupResponse{GenerationId: 1, LeaderId: "a", MemberId: "b"}, 2)
	if want := "Joined generation 1 of the group as b (the leader is a): 2 partitions assigned to this member."; follower != want {
		t.Errorf("a follower's line:\n%s\nwant\n%s", follower, want)
	}
}

// TestAssignCooperativeBySubscription: a topic is assigned only to the
// members that subscribe to it: a rolling deploy that adds topic b to
// some members' subscriptions must not hand b to the others.
func TestAssignCooperativeBySubscription(t *testing.T) {
	t.Parallel()
	partitions := map[string]int32{"a": 2, "b": 4}
	plan, awaiting := assignCooperative([]kafkaMember{
		{id: "m1", key: "1", topics: []string{"a"}},
		{id: "m2", key: "2", topics: []string{"a", "b"}},
	}, partitions)
	if got := fmt.Sprint(plan, awaiting); got != "map[m1:map[a:[0]] m2:map[a:[1] b:[0 1 2 3]]] map[]" {
		t.Errorf("assignment: %s", got)
	}
}

// TestIntegrationKafkaCoordinatorSubscriptions: members with different
// subscriptions (a rolling deploy that adds topic b). The a-only member
// joins first, so it leads the group (the coordinator keeps the first
// member as the leader while it stays); every partition of b is
// assigned nevertheless, only to the members that subscribe to b, and
// no message of b reaches the a-only member.
func TestIntegrationKafkaCoordinatorSubscriptions(t *testing.T) {
	kafkaCoordinatorTest(t)
	topicA, topicB := newTopic(t, 4), newTopic(t, 8)
	group := uniqueName("kafkasubs")
	client := newTestClient(t)
	var h handOuts

	configA := kafkaTestConfig()
	configA.Observer = handOutObserver{&h, "A"}
	a := joinKafka(t, group, TopicSubscription(topicA), configA)
	colA := collect(a, nil)
	waitFor(t, 30*time.Second, "A to run every partition of a", func() bool { return len(a.Stats()) == 4 })

	var cols []*collector
	var both []Consumer
	for _, name := range []string{"B", "C"} {
		config := kafkaTestConfig()
		config.Observer = handOutObserver{&h, name}
		c := joinKafka(t, group, TopicSubscription(topicA, topicB), config)
		both = append(both, c)
		cols = append(cols, collect(c, nil))
	}
	count := func(c Consumer, topic string) int {
		n := 0
		for _, s := range c.Stats() {
			if s.Topic == topic {
				n++
			}
		}
		return n
	}
	if !poll(60*time.Second, func() bool {
		return count(both[0], topicB)+count(both[1], topicB) == 8 && count(a, topicA) >= 1 && count(a, topicB) == 0
	}) {
		t.Fatalf("after 1m: B and C run %d of b's 8 partitions, A runs %d of a and %d of b",
			count(both[0], topicB)+count(both[1], topicB), count(a, topicA), count(a, topicB))
	}
	valuesA := produce(t, client, topicA, "a", 200)
	valuesB := produce(t, client, topicB, "b", 400)
	waitFor(t, 30*time.Second, "every message", func() bool {
		all, _ := union(append(append([]string(nil), valuesA...), valuesB...), colA, cols[0], cols[1])
		return all
	})
	if n := colA.received(valuesB); n > 0 {
		t.Errorf("the a-only member received %d messages of b", n)
	}
	h.mu.Lock()
	for tp, names := range h.events {
		if tp.Topic != topicB {
			continue
		}
		for _, name := range names {
			if name == "A" {
				t.Errorf("%s/%d handed out by the a-only member", tp.Topic, tp.Partition)
				break
			}
		}
	}
	h.mu.Unlock()
	if n := count(a, topicB); n > 0 {
		t.Errorf("the a-only member runs %d partitions of b", n)
	}
}

// TestSubscribedOnly: a member drops the partitions of topics it does not
// subscribe to (handed out by a leader of an older version) and names
// them, so that it consumes none of them and joins again.
func TestSubscribedOnly(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		assigned   map[string][]int32
		subscribed []string
		want       string
	}{
		{map[string][]int32{"a": {0, 1}}, []string{"a"}, "map[a:[0 1]] []"},
		{map[string][]int32{"a": {0}, "c": {1}, "b": {0, 2}}, []string{"a"}, "map[a:[0]] [b c]"},
		{map[string][]int32{"b": {0}}, nil, "map[] [b]"},
		{map[string][]int32{}, []string{"a"}, "map[] []"},
	} {
		kept, foreign := subscribedOnly(tc.assigned, tc.subscribed)
		if got := fmt.Sprint(kept, foreign); got != tc.want {
			t.Errorf("subscribedOnly(%v, %v) = %s, want %s", tc.assigned, tc.subscribed, got, tc.want)
		}
	}
}
