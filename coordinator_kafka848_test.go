package kafkaconsumer

// GroupProtocolConsumer (KIP-848) against the real cluster, which must
// run KRaft with Kafka 4.0 or later (make test-kraft KAFKA_VERSION=4.4.0):
// joining, consuming and committing; two members sharing the partitions,
// each handed over once; the Join errors.

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kafkaconsumer/kafkaconsumer/internal/testcluster"
)

// consumerProtocolTest is kafkaCoordinatorTest for GroupProtocolConsumer:
// it skips, saying why, unless the cluster runs KRaft with Kafka 4.0 or
// later, the first whose brokers enable the consumer group protocol.
func consumerProtocolTest(t *testing.T) {
	t.Helper()
	kafkaCoordinatorTest(t)
	if os.Getenv("KAFKA_MODE") != "kraft" || !testKafkaVersion().IsAtLeast(sarama.V4_0_0_0) {
		t.Skipf("GroupProtocolConsumer needs a KRaft cluster of Kafka 4.0 or later (make test-kraft KAFKA_VERSION=4.4.0), not %s in %q mode", testKafkaVersion(), os.Getenv("KAFKA_MODE"))
	}
}

// consumerTestConfig is kafkaTestConfig with GroupProtocolConsumer.
func consumerTestConfig() *Config {
	config := kafkaTestConfig()
	config.GroupProtocol = GroupProtocolConsumer
	return config
}

// TestIntegrationConsumerProtocolJoinSplitLeave: joinSplitLeave with the
// consumer protocol, the broker splitting the partitions.
func TestIntegrationConsumerProtocolJoinSplitLeave(t *testing.T) {
	consumerProtocolTest(t)
	joinSplitLeave(t, "kip848", consumerTestConfig)
}

// collected collects the values callbacks pass from other goroutines.
type collected[T any] struct {
	mu     sync.Mutex
	values []T
}

func (r *collected[T]) add(v T) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.values = append(r.values, v)
}

// take returns the values added since the last take, in order.
func (r *collected[T]) take() []T {
	r.mu.Lock()
	defer r.mu.Unlock()
	values := r.values
	r.values = nil
	return values
}

// TestIntegrationConsumerProtocolJoinErrors: Join fails, clearly, for an
// assignor the broker does not know; Validate refuses the consumer
// protocol with the ZooKeeper coordinator.
func TestIntegrationConsumerProtocolJoinErrors(t *testing.T) {
	consumerProtocolTest(t)
	topic := newTopic(t, 1)
	config := consumerTestConfig()
	config.GroupRemoteAssignor = "nosuch"
	c, err := Join(uniqueName("kip848"), TopicSubscription(topic), "", config)
	if err == nil {
		_ = c.Close()
		t.Fatal("Join with GroupRemoteAssignor nosuch succeeded")
	}
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), `"nosuch"`) {
		t.Errorf("Join with GroupRemoteAssignor nosuch = %v, want ErrInvalidConfig naming it", err)
	}

	config = consumerTestConfig()
	config.Coordinator = CoordinatorZooKeeper
	config.Brokers = nil
	if _, err := Join(uniqueName("kip848"), TopicSubscription(topic), zookeeperPeers, config); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "set Coordinator to CoordinatorKafka") {
		t.Errorf("Join with GroupProtocolConsumer and CoordinatorZooKeeper = %v, want ErrInvalidConfig", err)
	}
}

// TestIntegrationConsumerProtocolKilledInstance: in a consumer-protocol
// group of three instances consuming under a steady produce rate, one is
// killed with kill -9; the other two take its partitions once the
// broker's session timeout (10 s on the test cluster) removed it, nothing
// is lost, no partition is handed out by two instances at once, no
// committed offset moves back, and every Close is bounded.
func TestIntegrationConsumerProtocolKilledInstance(t *testing.T) {
	consumerProtocolTest(t)
	needFaults(t)
	r := newKafkaFaultRun(t, kafkaPeers, 8, 1)
	r.opts.consumerProtocol = true
	sampler := sampleCommitted(t, r.client, r.group, r.topic)
	a, b, c := r.start(), r.start(), r.start()
	r.waitShared(30*time.Second, a, b, c)
	wait := r.produceSteadily(1000, 3*time.Second)

	a.kill(t)
	took := r.waitOwnedBy(40*time.Second, b, c)
	t.Logf("partitions of the killed instance taken over %s after kill -9", took.Round(time.Millisecond))
	wait()
	r.finishKafka(sampler)
}

// TestIntegrationConsumerProtocolCutOff: one instance of a
// consumer-protocol group of two is cut off from the cluster (its only
// broker, the coordinator, through a proxy that holds its connections)
// while a producer writes; it fences itself before the broker removes it,
// the other takes its partitions, and once the proxy passes again it
// joins anew and gets a share back. No partition is handed out by two
// instances at once, no committed offset moves back, nothing is lost.
func TestIntegrationConsumerProtocolCutOff(t *testing.T) {
	consumerProtocolTest(t)
	needFaults(t)
	r := newKafkaFaultRun(t, kafkaPeers, 8, 1)
	r.opts.consumerProtocol = true
	sampler := sampleCommitted(t, r.client, r.group, r.topic)
	proxies := make(map[string]*testcluster.Proxy)
	routes := make(map[string]string)
	for _, addr := range kafkaPeers {
		p, err := testcluster.NewProxy(addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		proxies[addr], routes[addr] = p, p.Addr()
	}
	r.opts.kafkaProxies = routes
	a := r.start()
	r.opts.kafkaProxies = nil
	b := r.start()
	r.waitShared(30*time.Second, a, b)
	wait := r.produceSteadily(1500, 15*time.Second)
	for _, p := range proxies {
		p.Hold()
	}
	took := r.waitOwnedBy(40*time.Second, b)
	t.Logf("the other instance took every partition %s after the cut", took.Round(time.Millisecond))
	for _, p := range proxies {
		p.Pass()
	}
	healed := time.Now()
	r.waitShared(60*time.Second, a, b)
	t.Logf("the cut-off instance owned partitions again %s after the heal", time.Since(healed).Round(time.Millisecond))
	wait()
	r.finishKafka(sampler)
}

// TestIntegrationConsumerProtocolZombieCommitRefused: a commit with an
// epoch the member has left behind, or of a member the group does not
// know, as a zombie would send it, is refused by the broker
// (STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID), and the committed offset stays
// the live member's.
func TestIntegrationConsumerProtocolZombieCommitRefused(t *testing.T) {
	consumerProtocolTest(t)
	topic := newTopic(t, 2)
	group := uniqueName("kip848-zombie")
	client := newTestClient(t)
	values := produce(t, client, topic, "z", 20)
	a := joinKafka(t, group, TopicSubscription(topic), consumerTestConfig())
	colA := collect(a, nil)
	waitFor(t, 30*time.Second, "A to receive everything", func() bool { return colA.received(values) == len(values) })
	k := a.(*consumerManager).kafkaActive()
	newest := newestOffsets(t, client, topic)
	waitCommitted(t, client, group, topic, newest)
	live := k.current()
	if live.generation < 1 {
		t.Fatalf("member epoch %d, want a member", live.generation)
	}

	for _, tc := range []struct {
		name   string
		member groupMember
		want   error
	}{
		{"an old epoch", groupMember{id: live.id, generation: live.generation - 1}, errStaleMemberEpoch},
		{"an unknown member", groupMember{id: "zombie", generation: live.generation}, sarama.ErrUnknownMemberId},
	} {
		var reported collected[error]
		store := newOffsetStore(client, group, func(_ TopicPartition, err error) { reported.add(err) })
		store.member = func() (int32, string, *string) { return tc.member.generation, tc.member.id, nil }
		store.send = k.commitConsumer
		tp := TopicPartition{Topic: topic, Partition: 0}
		if err := store.reserve(tp); err != nil {
			t.Fatal(err)
		}
		store.set(tp, 0)
		store.mark(tp, 1) // back to the start: what a zombie's late commit does
		store.commitRound()
		if got := reported.take(); len(got) != 1 || !errors.Is(got[0], tc.want) {
			t.Errorf("%s: reported %v, want %s", tc.name, got, tc.want)
		}
	}
	if got := committedOffsets(t, client, group, topic); got[0] != newest[0] {
		t.Errorf("partition 0 committed at %d after the zombie's commits, want %d", got[0], newest[0])
	}
	colA.close(t)
}

// TestIntegrationConsumerProtocolStaticRestart: a static member
// (InstanceID) that closes leaves with epoch -2: the broker keeps its
// partitions for it, the other member's do not move, and it gets the
// same ones back when it returns within the session timeout.
func TestIntegrationConsumerProtocolStaticRestart(t *testing.T) {
	consumerProtocolTest(t)
	topic := newTopic(t, 4)
	group := uniqueName("kip848-static")
	client := newTestClient(t)
	configA := consumerTestConfig()
	configA.InstanceID = uniqueName("a")
	var changesB collected[Rebalance]
	configB := consumerTestConfig()
	configB.InstanceID = uniqueName("b")
	configB.OnRebalance = changesB.add
	a := joinKafka(t, group, TopicSubscription(topic), configA)
	colA := collect(a, nil)
	b := joinKafka(t, group, TopicSubscription(topic), configB)
	colB := collect(b, nil)
	waitFor(t, 30*time.Second, "the partitions to split 2/2", func() bool { return len(a.Stats()) == 2 && len(b.Stats()) == 2 })
	sharesA := fmt.Sprint(a.Stats()[0].TopicPartition, a.Stats()[1].TopicPartition)
	changesB.take()

	colA.close(t)
	values := produce(t, client, topic, "s", 40)
	a2 := joinKafka(t, group, TopicSubscription(topic), configA)
	colA2 := collect(a2, nil)
	waitFor(t, 30*time.Second, "everything to be received", func() bool { return colA2.received(values)+colB.received(values) == len(values) })
	if st := a2.Stats(); len(st) != 2 || fmt.Sprint(st[0].TopicPartition, st[1].TopicPartition) != sharesA {
		t.Errorf("the static member came back with %v, want %s", st, sharesA)
	}
	if changes := changesB.take(); len(changes) != 0 {
		t.Errorf("the other member's partitions changed: %v", changes)
	}
	colA2.close(t)
	colB.close(t)
}

// TestIntegrationConsumerProtocolUnsupportedBroker: against brokers
// without the consumer group protocol (ZooKeeper-mode brokers never have
// it: the default test cluster, Kafka 3.9.1), Join with
// GroupProtocolConsumer fails at once with an error wrapping
// ErrInvalidConfig that names the cause and the way out, and leaves
// nothing running: no goroutine, no connection open at the brokers.
func TestIntegrationConsumerProtocolUnsupportedBroker(t *testing.T) {
	needCluster(t)
	if os.Getenv("KAFKA_MODE") == "kraft" {
		t.Skip("ZooKeeper-mode brokers only: KRaft brokers may have the consumer group protocol")
	}
	if !testKafkaVersion().IsAtLeast(sarama.V2_4_0_0) {
		t.Skipf("CoordinatorKafka supports Kafka 2.4 and later, not %s", testKafkaVersion())
	}
	verifyNoClusterLeaks(t)
	topic := newTopic(t, 1)
	kp := newKafkaProxies(t, nil)
	config := consumerTestConfig()
	began := time.Now()
	c, err := joinWithHooks(uniqueName("kip848-unsupported"), TopicSubscription(topic), "", config, &testHooks{kafkaAddress: kp.address})
	took := time.Since(began)
	if err == nil {
		_ = c.Close()
		t.Fatalf("Join with GroupProtocolConsumer against Kafka %s in ZooKeeper mode succeeded", testKafkaVersion())
	}
	t.Logf("Join failed in %s: %s", took.Round(time.Millisecond), err)
	if !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("Join = %v, want an error wrapping ErrInvalidConfig", err)
	}
	for _, text := range []string{"do not support the consumer group protocol", "Kafka 4.0 or later in KRaft mode", "group.coordinator.rebalance.protocols", "use GroupProtocolClassic"} {
		if !strings.Contains(err.Error(), text) {
			t.Errorf("Join = %q, want it to say %q", err, text)
		}
	}
	if took > 10*time.Second {
		t.Errorf("Join took %s to fail, want at most 10s", took)
	}
	waitFor(t, 10*time.Second, "every connection through the proxies to close", func() bool {
		open := 0
		kp.mu.Lock()
		for _, p := range kp.byAdr {
			open += p.Conns()
		}
		kp.mu.Unlock()
		return open == 0
	})
}

// TestIntegrationConsumerProtocolGroupIDNotFound: Join with
// GroupProtocolConsumer to a group that is a live classic group the
// broker cannot convert to the consumer protocol (its members' protocol
// type is not "consumer": a Kafka Connect group, say) fails with
// GROUP_ID_NOT_FOUND, fast, with an error that says why, and leaves the
// classic group's member in place.
func TestIntegrationConsumerProtocolGroupIDNotFound(t *testing.T) {
	consumerProtocolTest(t)
	topic := newTopic(t, 2)
	group := uniqueName("kip848-connect")
	client := newTestClient(t)
	member := joinForeignClassicGroup(t, client, group)

	began := time.Now()
	c, err := Join(group, TopicSubscription(topic), "", consumerTestConfig())
	took := time.Since(began)
	if err == nil {
		_ = c.Close()
		t.Fatal("Join with GroupProtocolConsumer to a live classic group of protocol type connect succeeded")
	}
	t.Logf("Join failed in %s: %s", took.Round(time.Millisecond), err)
	if !errors.Is(err, kerr.GroupIDNotFound) {
		t.Errorf("Join = %v, want an error wrapping GROUP_ID_NOT_FOUND", err)
	}
	for _, text := range []string{"not a consumer-protocol group", "classic group", "group.consumer.migration.policy"} {
		if !strings.Contains(err.Error(), text) {
			t.Errorf("Join = %q, want it to say %q", err, text)
		}
	}
	if took > 10*time.Second {
		t.Errorf("Join took %s to fail, want at most 10s", took)
	}
	admin := newTestAdmin(t, client)
	groups, err := admin.DescribeConsumerGroups([]string{group})
	if err != nil || len(groups) != 1 || len(groups[0].Members) != 1 || groups[0].Members[member] == nil {
		t.Errorf("the classic group after the failed Join: %+v, %v; want its one member %s", groups, err, member)
	}
}

// joinForeignClassicGroup makes group a live classic group of protocol
// type "connect", as a Kafka Connect worker's, with one member (a 60 s
// session, no heartbeats), which leaves at the end of the test; it
// returns the member's ID.
func joinForeignClassicGroup(t *testing.T, client sarama.Client, group string) string {
	t.Helper()
	join := &sarama.JoinGroupRequest{Version: 2, GroupId: group, SessionTimeout: 60000, RebalanceTimeout: 60000, ProtocolType: "connect"}
	join.AddGroupProtocol("sessioned", []byte{0})
	return joinRawMember(t, client, join, []byte{0})
}

// TestIntegrationConsumerProtocolStaleEpochCommitRetried: a commit
// refused STALE_MEMBER_EPOCH because the member's epoch moved on while it
// was in flight is not reported, and the offset store's next round
// commits it with the newer epoch.
func TestIntegrationConsumerProtocolStaleEpochCommitRetried(t *testing.T) {
	consumerProtocolTest(t)
	topic := newTopic(t, 2)
	group := uniqueName("kip848-stale")
	client := newTestClient(t)
	values := produce(t, client, topic, "s", 20)
	a := joinKafka(t, group, TopicSubscription(topic), consumerTestConfig())
	colA := collect(a, nil)
	waitFor(t, 30*time.Second, "A to receive everything", func() bool { return colA.received(values) == len(values) })
	k := a.(*consumerManager).kafkaActive()
	waitCommitted(t, client, group, topic, newestOffsets(t, client, topic))
	live := k.current()

	var mu sync.Mutex
	var reported []error
	stale, sent := true, 0 // guarded by mu
	store := newOffsetStore(client, group, func(_ TopicPartition, err error) {
		mu.Lock()
		reported = append(reported, err)
		mu.Unlock()
	})
	store.member = func() (int32, string, *string) {
		mu.Lock()
		defer mu.Unlock()
		if stale {
			return live.generation - 1, live.id, nil
		}
		return k.current().generation, live.id, nil
	}
	var refusals []error
	store.send = func(req *sarama.OffsetCommitRequest, tps []TopicPartition) (*sarama.OffsetCommitResponse, error) {
		resp, err := k.commitConsumer(req, tps)
		mu.Lock()
		defer mu.Unlock()
		sent++
		if err == nil {
			for _, partitions := range resp.Errors {
				for _, e := range partitions {
					if !errors.Is(e, sarama.ErrNoError) {
						refusals = append(refusals, e)
					}
				}
			}
		}
		stale = false // the heartbeat's answer with the newer epoch came meanwhile
		return resp, err
	}
	tp := TopicPartition{Topic: topic, Partition: 0}
	if err := store.reserve(tp); err != nil {
		t.Fatal(err)
	}
	store.set(tp, 0)
	store.mark(tp, 3)
	store.commitRound() // refused: STALE_MEMBER_EPOCH
	store.commitRound() // with the newer epoch
	mu.Lock()
	t.Logf("%d commits sent; refused: %v; reported: %v", sent, refusals, reported)
	if len(refusals) != 1 || !errors.Is(refusals[0], errStaleMemberEpoch) {
		t.Errorf("the first commit was refused with %v, want STALE_MEMBER_EPOCH", refusals)
	}
	if len(reported) != 0 {
		t.Errorf("reported %v, want nothing: the refusal was of an epoch left behind", reported)
	}
	mu.Unlock()
	if got := committedOffsets(t, client, group, topic); got[0] != 3 {
		t.Errorf("partition 0 committed at %d, want 3, the retried commit's", got[0])
	}
	colA.close(t)
}

// TestIntegrationConsumerProtocolHeartbeatPace: a member whose assignment
// does not change heartbeats at its interval, not again at once after
// each answer (the broker repeats the assignment in every answer to a
// heartbeat that carries the subscription and the owned partitions).
func TestIntegrationConsumerProtocolHeartbeatPace(t *testing.T) {
	consumerProtocolTest(t)
	topic := newTopic(t, 4)
	group := uniqueName("kip848-pace")
	var heartbeats atomic.Int64
	config := consumerTestConfig()
	interval := config.Consumer.Group.Heartbeat.Interval
	c, err := joinWithHooks(group, TopicSubscription(topic), "", config, &testHooks{consumerHeartbeat: func() { heartbeats.Add(1) }})
	if err != nil {
		t.Fatalf("Join(%s) = %s", group, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	waitFor(t, 30*time.Second, "the member to own the 4 partitions", func() bool { return len(c.Stats()) == 4 })

	const watched = 3 * time.Second
	before := heartbeats.Load()
	began := time.Now()
	time.Sleep(watched) // the span counted over, not a wait for a condition
	sent := heartbeats.Load() - before
	elapsed := time.Since(began)
	if most := int64(elapsed/interval) + 3; sent > most {
		t.Errorf("a stable member sent %d heartbeats in %s, want at most %d (one per %s)", sent, elapsed.Round(time.Millisecond), most, interval)
	}
	t.Logf("%d heartbeats in %s (interval %s)", sent, elapsed.Round(time.Millisecond), interval)
}
