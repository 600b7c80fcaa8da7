package kafkaconsumer

// The Kafka coordinator's rejoins on the assignment's account, against
// the real cluster: a member handed a topic it does not subscribe to (by
// a leader of an older release) joins again with backoff, in a way that
// makes the coordinator rebalance; the leader rebalances when a topic
// that only other members subscribe to gains partitions; and, without a
// cluster, the backoff, the user data and the comparison they use.

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// olderLeader is a member of a group of this library's protocol that
// assigns as an older release did: every partition of its own topic to
// the other members, whatever they subscribe to. It joins first, so it
// leads; its goroutine heartbeats and joins again at each rebalance
// until close.
type olderLeader struct {
	broker     *sarama.Broker // the group's coordinator
	version    sarama.KafkaVersion
	group      string
	topic      string
	partitions []int32
	member     groupMember // used by the goroutine only, after start
	// led counts the generations it led with another member in them.
	led atomic.Int32

	mu  sync.Mutex // guards err
	err error      // the first failure of the goroutine

	stop chan struct{} // closed by close
	done chan struct{} // closed by the goroutine when it ends
}

// startOlderLeader joins group as an olderLeader of topic (of
// partitions partitions), and stops it at the end of the test.
func startOlderLeader(t *testing.T, group, topic string, partitions int32) *olderLeader {
	t.Helper()
	client := newTestClient(t)
	o := &olderLeader{version: testKafkaVersion(), group: group, topic: topic,
		member: groupMember{generation: sarama.GroupGenerationUndefined},
		stop:   make(chan struct{}), done: make(chan struct{})}
	for p := int32(0); p < partitions; p++ {
		o.partitions = append(o.partitions, p)
	}
	// A fresh cluster's coordinators may still load (NOT_COORDINATOR,
	// COORDINATOR_LOAD_IN_PROGRESS): the coordinator is looked up again.
	var last error
	if !poll(30*time.Second, func() bool {
		if last = client.RefreshCoordinator(group); last != nil {
			return false
		}
		if o.broker, last = client.Coordinator(group); last != nil {
			return false
		}
		last = o.join()
		return last == nil
	}) {
		t.Fatalf("the older leader's first join: %s", last)
	}
	go o.run()
	t.Cleanup(func() {
		close(o.stop)
		select {
		case <-o.done:
		case <-time.After(30 * time.Second):
			t.Errorf("the older leader's goroutine still runs 30 s after its stop")
		}
		if err := o.failure(); err != nil {
			t.Errorf("the older leader: %s", err)
		}
	})
	return o
}

// run heartbeats every 200 ms and joins again when the group rebalances.
func (o *olderLeader) run() {
	defer close(o.done)
	ticker := time.NewTicker(200 * time.Millisecond)
	defer ticker.Stop()
	for {
		select {
		case <-o.stop:
			return
		case <-ticker.C:
		}
		resp, err := o.broker.Heartbeat(&sarama.HeartbeatRequest{GroupId: o.group, MemberId: o.member.id, GenerationId: o.member.generation})
		switch {
		case err != nil:
			o.fail(err)
			return
		case errors.Is(resp.Err, sarama.ErrRebalanceInProgress):
			if err := o.join(); err != nil {
				o.fail(err)
				return
			}
		case !errors.Is(resp.Err, sarama.ErrNoError):
			o.fail(fmt.Errorf("heartbeat: %w", resp.Err))
			return
		}
	}
}

// join sends JoinGroup and SyncGroup until a generation is synced, with
// the older release's assignment when it leads.
func (o *olderLeader) join() error {
	for {
		req := sarama.NewJoinGroupRequest(o.version)
		req.GroupId, req.MemberId = o.group, o.member.id
		req.SessionTimeout, req.RebalanceTimeout = 6000, 20000
		req.ProtocolType = kafkaProtocolType
		meta := &sarama.ConsumerGroupMemberMetadata{Version: 1, Topics: []string{o.topic}}
		if err := req.AddGroupProtocolMetadata(kafkaProtocol, meta); err != nil {
			return err
		}
		resp, err := o.broker.JoinGroup(req)
		switch {
		case err != nil:
			return err
		case errors.Is(resp.Err, sarama.ErrMemberIdRequired):
			o.member.id = resp.MemberId
			continue
		case !errors.Is(resp.Err, sarama.ErrNoError):
			return fmt.Errorf("join group: %w", resp.Err)
		}
		o.member = groupMember{id: resp.MemberId, generation: resp.GenerationId}
		sync := syncGroupRequest(o.version, o.group, o.member, nil)
		if resp.LeaderId == resp.MemberId {
			for _, m := range resp.Members {
				a := &sarama.ConsumerGroupMemberAssignment{Topics: map[string][]int32{}}
				if m.MemberId != o.member.id {
					a.Topics[o.topic] = o.partitions
				}
				if err := sync.AddGroupAssignmentMember(m.MemberId, a); err != nil {
					return err
				}
			}
		}
		syncResp, err := o.broker.SyncGroup(sync)
		switch {
		case err != nil:
			return err
		case errors.Is(syncResp.Err, sarama.ErrRebalanceInProgress):
			continue
		case !errors.Is(syncResp.Err, sarama.ErrNoError):
			return fmt.Errorf("sync group: %w", syncResp.Err)
		}
		if resp.LeaderId == resp.MemberId && len(resp.Members) > 1 {
			o.led.Add(1)
		}
		return nil
	}
}

func (o *olderLeader) fail(err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.err == nil {
		o.err = err
	}
}

func (o *olderLeader) failure() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.err
}

// TestIntegrationKafkaCoordinatorForeignAssignmentBacksOff: a leader of
// an older release hands a member every partition of a topic the member
// does not subscribe to. The member consumes none of them and joins
// again, but with backoff (a few JoinGroups in seconds, not thousands),
// and its JoinGroup makes the coordinator rebalance (a follower's
// JoinGroup with the metadata of its last one, in a Stable group, is
// answered with the same generation and assignment).
func TestIntegrationKafkaCoordinatorForeignAssignmentBacksOff(t *testing.T) {
	kafkaCoordinatorTest(t)
	debugLogs(t)
	mine, foreign := newTopic(t, 2), newTopic(t, 4)
	group := uniqueName("kafkaforeign")
	older := startOlderLeader(t, group, foreign, 4)

	var joins atomic.Int64
	hooks := &testHooks{joiningGroup: func() { joins.Add(1) }}
	c, err := joinWithHooks(group, TopicSubscription(mine), "", kafkaTestConfig(), hooks)
	if err != nil {
		t.Fatalf("Join(%s) = %s", group, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	waitFor(t, 30*time.Second, "the older leader to assign the foreign topic to the member", func() bool { return older.led.Load() >= 1 })

	from, led, began := joins.Load(), older.led.Load(), time.Now()
	const window, most = 5 * time.Second, 6
	hot := poll(window, func() bool { return joins.Load()-from > most })
	if n := joins.Load() - from; hot {
		t.Errorf("%d JoinGroups in %s after the foreign assignment, want at most %d", n, time.Since(began).Round(time.Millisecond), most)
	} else {
		t.Logf("%d JoinGroups in %s after the foreign assignment", n, window)
	}
	if !poll(10*time.Second, func() bool { return older.led.Load() > led }) {
		t.Errorf("no rebalance %s after the foreign assignment: the member's JoinGroups left the group's generation as it was",
			time.Since(began).Round(time.Millisecond))
	}
	if s := c.Stats(); len(s) > 0 {
		t.Errorf("the member runs %d partitions of a topic it does not subscribe to", len(s))
	}
}

// TestIntegrationKafkaCoordinatorOthersTopicGrows: the leader and a
// third member subscribe to topic a only, a follower to topic b only.
// When b gains partitions,
// the leader rebalances (it watches the topics of the whole group, as
// Kafka's consumer does), and the follower runs them within seconds:
// the follower's own JoinGroup, with its metadata unchanged, brings no
// rebalance.
func TestIntegrationKafkaCoordinatorOthersTopicGrows(t *testing.T) {
	kafkaCoordinatorTest(t)
	debugLogs(t)
	topicA, topicB := newTopic(t, 2), newTopic(t, 2)
	group := uniqueName("kafkagrow")
	client := newTestClient(t)
	a := joinKafka(t, group, TopicSubscription(topicA), kafkaTestConfig()) // first: the leader
	waitFor(t, 30*time.Second, "A to run a's 2 partitions", func() bool { return len(a.Stats()) == 2 })
	b := joinKafka(t, group, TopicSubscription(topicB), kafkaTestConfig())
	waitFor(t, 30*time.Second, "B to run b's 2 partitions", func() bool { return len(b.Stats()) == 2 })
	// A third member takes a partition of a: B joins the generations of
	// the move already owning b's partitions, so that its next JoinGroup
	// repeats its last one.
	c := joinKafka(t, group, TopicSubscription(topicA), kafkaTestConfig())
	waitFor(t, 30*time.Second, "A and C to run a partition of a each", func() bool { return len(a.Stats()) == 1 && len(c.Stats()) == 1 })

	if err := newTestAdmin(t, client).CreatePartitions(topicB, 4, nil, false); err != nil {
		t.Fatalf("add partitions to %s: %s", topicB, err)
	}
	began := time.Now()
	if !poll(20*time.Second, func() bool { return len(b.Stats()) == 4 }) {
		t.Fatalf("B runs %d of b's 4 partitions 20 s after 2 were added", len(b.Stats()))
	}
	t.Logf("B runs b's 4 partitions %s after 2 were added", time.Since(began).Round(time.Millisecond))
	values := produce(t, client, topicB, "b", 40)
	col := collect(b, nil)
	waitFor(t, 30*time.Second, "every message of b", func() bool { return col.received(values) == len(values) })
	if len(a.Stats())+len(c.Stats()) != 2 {
		t.Errorf("A and C run %d partitions, want a's 2", len(a.Stats())+len(c.Stats()))
	}
}

// TestRefusalDelay: 1 s doubling with each refusal in a row, to a minute.
func TestRefusalDelay(t *testing.T) {
	t.Parallel()
	for n, want := range map[int]time.Duration{0: time.Second, 1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second,
		6: 32 * time.Second, 7: time.Minute, 8: time.Minute, 1000: time.Minute} {
		if got := refusalDelay(n); got != want {
			t.Errorf("refusalDelay(%d) = %s, want %s", n, got, want)
		}
	}
}

// TestMemberUserData: the client, the migration field of a member that
// follows the switch, and the generation of an assignment refused.
func TestMemberUserData(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		followsSwitch bool
		refused       int32
		want          string
	}{
		{false, 0, `{"client":"github.com/kafkaconsumer/kafkaconsumer"}`},
		{true, 0, `{"client":"github.com/kafkaconsumer/kafkaconsumer","migration":1}`},
		{false, 7, `{"client":"github.com/kafkaconsumer/kafkaconsumer","refused":7}`},
		{true, 12, `{"client":"github.com/kafkaconsumer/kafkaconsumer","migration":1,"refused":12}`},
	} {
		if got := string(memberUserData(tc.followsSwitch, tc.refused)); got != tc.want {
			t.Errorf("memberUserData(%t, %d) = %s, want %s", tc.followsSwitch, tc.refused, got, tc.want)
		}
	}
}

// TestMetadataViewSameCounts: only the partition counts of the topics
// count, not the replicas.
func TestMetadataViewSameCounts(t *testing.T) {
	t.Parallel()
	view := func(replicas []int32, counts map[string]int32) metadataView {
		var v metadataView
		for topic, n := range counts {
			for p := int32(0); p < n; p++ {
				v.partitions = append(v.partitions, kazooValues.Topic(topic).Partition(p, replicas))
			}
		}
		return v
	}
	base := view([]int32{1, 2}, map[string]int32{"a": 2, "b": 3})
	for _, tc := range []struct {
		other metadataView
		want  bool
	}{
		{view([]int32{1, 2}, map[string]int32{"a": 2, "b": 3}), true},
		{view([]int32{2, 1}, map[string]int32{"a": 2, "b": 3}), true},
		{view([]int32{1, 2}, map[string]int32{"a": 2, "b": 4}), false},
		{view([]int32{1, 2}, map[string]int32{"a": 2}), false},
		{view([]int32{1, 2}, map[string]int32{"a": 2, "b": 3, "c": 1}), false},
	} {
		if got := base.sameCounts(tc.other); got != tc.want {
			t.Errorf("sameCounts(%v) = %t, want %t", tc.other.counts(), got, tc.want)
		}
	}
}
