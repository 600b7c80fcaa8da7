package kafkaconsumer

// The member of the consumer group protocol (KIP-848) against a fake
// coordinator (fakekafka_test.go): its join, reconciliation, heartbeats
// and error paths, without a cluster.

import (
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// fakeGroup is the server side of one member of a consumer-protocol
// group, as Kafka's coordinator keeps it (simplified): a target
// assignment and its epoch, the partitions given to the member at its
// epoch, and those it must release before it moves on. A partition
// leaves the member (released) when a heartbeat reports the owned
// partitions without it; only then may the target give it to another.
type fakeGroup struct {
	f *fakeKafka

	mu sync.Mutex // guards the fields below
	// targetEpoch and target are the target assignment, by topic name.
	targetEpoch int32
	target      map[string][]int32
	// memberID and epoch are the member's; assigned what it was given.
	memberID string
	epoch    int32
	assigned map[string][]int32
	// released maps each partition released to the count of requests
	// the broker had received then.
	released map[TopicPartition]int
	// fence, when not 0, answers the next heartbeat with it.
	fence int16
}

// newFakeGroup answers f's heartbeats as the coordinator of a group whose
// target assignment is target at epoch 1.
func newFakeGroup(f *fakeKafka, target map[string][]int32) *fakeGroup {
	g := &fakeGroup{f: f, targetEpoch: 1, target: target, assigned: map[string][]int32{}, released: map[TopicPartition]int{}}
	f.setHeartbeat(g.heartbeat)
	return g
}

// setTarget sets a new target assignment, of the next epoch.
func (g *fakeGroup) setTarget(target map[string][]int32) {
	g.mu.Lock()
	g.targetEpoch++
	g.target = target
	g.mu.Unlock()
}

// fenceNext answers the next heartbeat with code.
func (g *fakeGroup) fenceNext(code int16) {
	g.mu.Lock()
	g.fence = code
	g.mu.Unlock()
}

// memberEpoch returns the member's epoch.
func (g *fakeGroup) memberEpoch() int32 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.epoch
}

// releasedAt returns the count of requests the broker had received when
// tp was released; false when it was not.
func (g *fakeGroup) releasedAt(tp TopicPartition) (int, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	n, ok := g.released[tp]
	return n, ok
}

// heartbeat answers a ConsumerGroupHeartbeat.
func (g *fakeGroup) heartbeat(req *kmsg.ConsumerGroupHeartbeatRequest) *kmsg.ConsumerGroupHeartbeatResponse {
	g.mu.Lock()
	defer g.mu.Unlock()
	resp := kmsg.NewPtrConsumerGroupHeartbeatResponse()
	resp.HeartbeatIntervalMillis = 100
	if g.fence != 0 {
		resp.ErrorCode, g.fence = g.fence, 0
		if resp.ErrorCode == kerr.UnknownMemberID.Code || resp.ErrorCode == int16(errFencedMemberEpoch) {
			g.epoch, g.assigned = 0, map[string][]int32{}
		}
		return resp
	}
	id := req.MemberID
	resp.MemberID = &id
	switch {
	case req.MemberEpoch == 0:
		g.memberID, g.epoch, g.assigned = req.MemberID, g.targetEpoch, g.target
		resp.Assignment = g.assignment(g.assigned)
	case req.MemberEpoch != g.epoch:
		resp.ErrorCode = int16(errFencedMemberEpoch)
		return resp
	case g.epoch != g.targetEpoch:
		g.reconcile(req, resp)
	}
	resp.MemberEpoch = g.epoch
	return resp
}

// reconcile moves the member towards the target: at once when it keeps
// all it was given; else it is answered what it keeps, at its epoch, and
// moves on once a heartbeat reports none of the partitions revoked as
// owned (released). g.mu is held.
func (g *fakeGroup) reconcile(req *kmsg.ConsumerGroupHeartbeatRequest, resp *kmsg.ConsumerGroupHeartbeatResponse) {
	var revoked []TopicPartition
	kept := map[string][]int32{}
	for topic, partitions := range g.assigned {
		for _, p := range partitions {
			if slices.Contains(g.target[topic], p) {
				kept[topic] = append(kept[topic], p)
			} else {
				revoked = append(revoked, TopicPartition{Topic: topic, Partition: p})
			}
		}
	}
	owns := func(tp TopicPartition) bool {
		for _, t := range req.Topics {
			if t.TopicID == topicID(tp.Topic) && slices.Contains(t.Partitions, tp.Partition) {
				return true
			}
		}
		return false
	}
	released := req.Topics != nil
	for _, tp := range revoked {
		released = released && !owns(tp)
	}
	if len(revoked) > 0 && !released {
		resp.Assignment = g.assignment(kept)
		return
	}
	for _, tp := range revoked {
		g.released[tp] = g.f.count()
	}
	g.epoch, g.assigned = g.targetEpoch, g.target
	resp.Assignment = g.assignment(g.assigned)
}

// assignment returns a as a heartbeat's answer has it.
func (g *fakeGroup) assignment(a map[string][]int32) *kmsg.ConsumerGroupHeartbeatResponseAssignment {
	out := kmsg.NewConsumerGroupHeartbeatResponseAssignment()
	for topic, partitions := range a {
		out.Topics = append(out.Topics, kmsg.ConsumerGroupHeartbeatResponseAssignmentTopic{TopicID: topicID(topic), Partitions: partitions})
	}
	return &out
}

// fakeConsumerConfig is the configuration of a GroupProtocolConsumer
// member of the fake broker f.
func fakeConsumerConfig(f *fakeKafka) *Config {
	config := NewConfig()
	config.Version = sarama.V4_0_0_0
	config.Coordinator = CoordinatorKafka
	config.GroupProtocol = GroupProtocolConsumer
	config.Brokers = []string{f.addr()}
	config.DiscoveryInterval = time.Second
	config.MaxProcessingTime = 500 * time.Millisecond
	config.Consumer.Return.Errors = true
	config.Consumer.Group.Session.Timeout = 6 * time.Second
	config.Consumer.Group.Heartbeat.Interval = 100 * time.Millisecond
	config.Consumer.Offsets.AutoCommit.Interval = 100 * time.Millisecond
	config.Net.ReadTimeout = 3 * time.Second
	config.Metadata.Retry.Backoff = 10 * time.Millisecond
	return config
}

// joinFake joins group on the fake broker f, and closes the consumer at
// the end of the test.
func joinFake(t *testing.T, f *fakeKafka, subscription Subscription) Consumer {
	t.Helper()
	c, err := Join("g", subscription, "", fakeConsumerConfig(f))
	if err != nil {
		t.Fatalf("Join = %s", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// lastOwned returns the owned partitions of the last heartbeat of an
// epoch above 0 that reported them (nil for none).
func lastOwned(f *fakeKafka) map[string][]int32 {
	hbs := f.received(consumerHeartbeatKey)
	for i := len(hbs) - 1; i >= 0; i-- {
		req := hbs[i].(*kmsg.ConsumerGroupHeartbeatRequest)
		if req.MemberEpoch <= 0 || req.Topics == nil {
			continue
		}
		owned := map[string][]int32{}
		f.mu.Lock()
		names := slices.Collect(maps.Keys(f.topics))
		f.mu.Unlock()
		for _, t := range req.Topics {
			for _, name := range names {
				if topicID(name) == t.TopicID {
					owned[name] = slices.Sorted(slices.Values(t.Partitions))
				}
			}
		}
		return owned
	}
	return nil
}

// owns returns a condition: the last heartbeat reported exactly want as
// owned.
func owns(f *fakeKafka, want map[string][]int32) func() bool {
	return func() bool {
		owned := lastOwned(f)
		if owned == nil || len(owned) != len(want) {
			return false
		}
		for topic, partitions := range want {
			if !slices.Equal(owned[topic], partitions) {
				return false
			}
		}
		return true
	}
}

// TestConsumerProtocolFakeJoinReconcilesAndMoves: on the fake
// coordinator, a member joins, runs its assignment and reports it owned,
// then releases what a new target takes away.
func TestConsumerProtocolFakeJoinReconcilesAndMoves(t *testing.T) {
	t.Parallel()
	f := newFakeKafka(t, map[string]int32{"t1": 2})
	g := newFakeGroup(f, map[string][]int32{"t1": {0, 1}})
	joinFake(t, f, TopicSubscription("t1"))
	waitFor(t, 10*time.Second, "t1/0 and t1/1 reported owned", owns(f, map[string][]int32{"t1": {0, 1}}))
	g.setTarget(map[string][]int32{"t1": {1}})
	waitFor(t, 10*time.Second, "t1/0 released", func() bool {
		_, ok := g.releasedAt(TopicPartition{Topic: "t1", Partition: 0})
		return ok && g.memberEpoch() == 2
	})
	waitFor(t, 10*time.Second, "t1/1 reported owned", owns(f, map[string][]int32{"t1": {1}}))
}
