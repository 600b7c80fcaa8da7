package kafkaconsumer

// The member of the consumer group protocol (KIP-848) against a fake
// coordinator (fakekafka_test.go): its join, reconciliation, heartbeats
// and error paths, without a cluster.

import (
	"context"
	"errors"
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
	// classic: the brokers converted the group to a classic one, which
	// answers GROUP_ID_NOT_FOUND to a heartbeat of a non-zero epoch; a
	// heartbeat of epoch 0 converts it back.
	classic bool
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

// downgrade converts the group to a classic one, as the brokers do when
// the last consumer-protocol member's session expires among classic
// members.
func (g *fakeGroup) downgrade() {
	g.mu.Lock()
	g.classic, g.epoch, g.assigned = true, 0, map[string][]int32{}
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
	if g.classic && req.MemberEpoch != 0 {
		resp.ErrorCode = kerr.GroupIDNotFound.Code
		return resp
	}
	g.classic = false
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
func joinFake(t *testing.T, f *fakeKafka, subscription Subscription, hooks *testHooks) Consumer {
	t.Helper()
	c, err := joinWithHooks("g", subscription, "", fakeConsumerConfig(f), hooks)
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
	joinFake(t, f, TopicSubscription("t1"), nil)
	waitFor(t, 10*time.Second, "t1/0 and t1/1 reported owned", owns(f, map[string][]int32{"t1": {0, 1}}))
	g.setTarget(map[string][]int32{"t1": {1}})
	waitFor(t, 10*time.Second, "t1/0 released", func() bool {
		_, ok := g.releasedAt(TopicPartition{Topic: "t1", Partition: 0})
		return ok && g.memberEpoch() == 2
	})
	waitFor(t, 10*time.Second, "t1/1 reported owned", owns(f, map[string][]int32{"t1": {1}}))
}

// holdLookups returns the hooks of a member whose lookups of the ID of
// topic wait until free is called (at the latest before Close, which
// waits for the lookup: a cleanup registered after the join), and that
// send a token on held (without blocking) for each.
func holdLookups(topic string) (hooks *testHooks, held <-chan struct{}, free func()) {
	release, token := make(chan struct{}), make(chan struct{}, 1)
	var once sync.Once
	free = func() { once.Do(func() { close(release) }) }
	return &testHooks{lookingUpTopics: func(ids [][16]byte) {
		if !slices.Contains(ids, topicID(topic)) {
			return
		}
		select {
		case token <- struct{}{}:
		default:
		}
		<-release
	}}, token, free
}

// lookingUpT2 returns a fake broker (topics t1 of 2 partitions, t2 of
// 1) with a member that owns t1/0 at epoch 1, then was assigned t1/0
// and t2/0 at epoch 2 and looks up t2's ID until free is called.
func lookingUpT2(t *testing.T) (f *fakeKafka, g *fakeGroup, free func()) {
	t.Helper()
	f = newFakeKafka(t, map[string]int32{"t1": 2, "t2": 1})
	g = newFakeGroup(f, map[string][]int32{"t1": {0}})
	hooks, held, free := holdLookups("t2")
	joinFake(t, f, TopicSubscription("t1", "t2"), hooks)
	t.Cleanup(free)
	waitFor(t, 10*time.Second, "t1/0 reported owned", owns(f, map[string][]int32{"t1": {0}}))
	g.setTarget(map[string][]int32{"t1": {0}, "t2": {0}})
	receiveWithin(t, held, "the lookup of t2's ID")
	return f, g, free
}

// mentions reports whether req names tp as one of its partitions: a
// request that a partition manager running tp sends.
func mentions(req kmsg.Request, tp TopicPartition) bool {
	switch r := req.(type) {
	case *kmsg.OffsetFetchRequest:
		for _, t := range r.Topics {
			if t.Topic == tp.Topic && slices.Contains(t.Partitions, tp.Partition) {
				return true
			}
		}
		for _, g := range r.Groups {
			for _, t := range g.Topics {
				if t.Topic == tp.Topic && slices.Contains(t.Partitions, tp.Partition) {
					return true
				}
			}
		}
	case *kmsg.OffsetCommitRequest:
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				if t.Topic == tp.Topic && p.Partition == tp.Partition {
					return true
				}
			}
		}
	case *kmsg.ListOffsetsRequest:
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				if t.Topic == tp.Topic && p.Partition == tp.Partition {
					return true
				}
			}
		}
	case *kmsg.FetchRequest:
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				if t.Topic == tp.Topic && p.Partition == tp.Partition {
					return true
				}
			}
		}
	}
	return false
}

// startedAfter returns the first request after the first n received
// that a partition manager of tp sent; nil for none.
func startedAfter(f *fakeKafka, tp TopicPartition, n int) kmsg.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, req := range f.requests[n:] {
		if mentions(req, tp) {
			return req
		}
	}
	return nil
}

// heartbeatsAfter returns the heartbeats received after the first n
// requests.
func heartbeatsAfter(f *fakeKafka, n int) []*kmsg.ConsumerGroupHeartbeatRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*kmsg.ConsumerGroupHeartbeatRequest
	for _, req := range f.requests[n:] {
		if hb, ok := req.(*kmsg.ConsumerGroupHeartbeatRequest); ok {
			out = append(out, hb)
		}
	}
	return out
}

// TestConsumerProtocolFakeNoStartAfterRelease (finding 7): a partition
// assigned, whose topic's name the member is still looking up when the
// target moves it to another member, is neither reported released by a
// heartbeat in between nor started once the lookup completes: one owner
// at a time.
func TestConsumerProtocolFakeNoStartAfterRelease(t *testing.T) {
	t.Parallel()
	f, g, free := lookingUpT2(t)
	// Epoch 3 while t2's ID is looked up: t2/0 goes to another member.
	g.setTarget(map[string][]int32{"t1": {0}})
	n := f.count()
	waitFor(t, 10*time.Second, "3 heartbeats during the lookup", func() bool { return len(heartbeatsAfter(f, n)) >= 3 })
	m := f.count()
	free()
	waitFor(t, 10*time.Second, "a heartbeat of epoch 3 reporting the owned partitions after the lookup", func() bool {
		return slices.ContainsFunc(heartbeatsAfter(f, m), func(hb *kmsg.ConsumerGroupHeartbeatRequest) bool {
			return hb.MemberEpoch == 3 && hb.Topics != nil
		})
	})
	t20 := TopicPartition{Topic: "t2", Partition: 0}
	at, ok := g.releasedAt(t20)
	if !ok {
		t.Fatal("t2/0 never released")
	}
	for _, hb := range heartbeatsAfter(f, at) {
		for _, topic := range hb.Topics {
			if topic.TopicID == topicID("t2") && len(topic.Partitions) > 0 {
				t.Fatalf("a heartbeat of epoch %d reports t2/0 owned after an earlier heartbeat released it: two owners", hb.MemberEpoch)
			}
		}
	}
	if req := startedAfter(f, t20, at); req != nil {
		t.Fatalf("t2/0 started after a heartbeat released it (%T after the release): two owners", req)
	}
}

// TestConsumerProtocolFakeUnresolvedTopicSetAside (finding 8): an
// assignment with a topic ID that does not resolve (a topic deleted) is
// reconciled for the partitions that resolve.
func TestConsumerProtocolFakeUnresolvedTopicSetAside(t *testing.T) {
	t.Parallel()
	f := newFakeKafka(t, map[string]int32{"t1": 1})
	newFakeGroup(f, map[string][]int32{"t1": {0}, "gone": {0}})
	joinFake(t, f, TopicSubscription("t1"), nil)
	waitFor(t, 10*time.Second, "t1/0 reported owned", owns(f, map[string][]int32{"t1": {0}}))
}

// TestConsumerProtocolFakeNewerAssignmentAbortsLookup (finding 8): a
// lookup of topic names that hangs is abandoned for a newer assignment.
func TestConsumerProtocolFakeNewerAssignmentAbortsLookup(t *testing.T) {
	t.Parallel()
	f, g, _ := lookingUpT2(t)
	g.setTarget(map[string][]int32{"t1": {0, 1}})
	waitFor(t, 8*time.Second, "t1/0 and t1/1 reported owned", owns(f, map[string][]int32{"t1": {0, 1}}))
}

// TestConsumerProtocolFakeFencedDuringLookupRejoins (finding 8): a member
// fenced while it looks up the names of its assignment's topics joins
// again (epoch 0) rather than staying idle.
func TestConsumerProtocolFakeFencedDuringLookupRejoins(t *testing.T) {
	t.Parallel()
	f, g, _ := lookingUpT2(t)
	g.setTarget(map[string][]int32{"t1": {0}})
	g.fenceNext(int16(errFencedMemberEpoch))
	n := f.count()
	waitFor(t, 8*time.Second, "a heartbeat of epoch 0 after the fence", func() bool {
		return slices.ContainsFunc(heartbeatsAfter(f, n), func(hb *kmsg.ConsumerGroupHeartbeatRequest) bool { return hb.MemberEpoch == 0 })
	})
	waitFor(t, 8*time.Second, "t1/0 reported owned again", owns(f, map[string][]int32{"t1": {0}}))
}

// TestConsumerProtocolFakeJoinBoundedOnNotCoordinator (finding 9): a
// coordinator that answers NOT_COORDINATOR for ever fails Join within
// the session timeout, with an error that names it.
func TestConsumerProtocolFakeJoinBoundedOnNotCoordinator(t *testing.T) {
	t.Parallel()
	f := newFakeKafka(t, map[string]int32{"t1": 1}) // no heartbeat function: NOT_COORDINATOR
	config := fakeConsumerConfig(f)
	config.Consumer.Group.Session.Timeout = 3 * time.Second
	done := make(chan error, 1)
	began := time.Now()
	go func() { // ends with Join, at the latest when the broker closes
		c, err := Join("g", TopicSubscription("t1"), "", config)
		if err == nil {
			_ = c.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, kerr.NotCoordinator) {
			t.Fatalf("Join = %v, want NOT_COORDINATOR", err)
		}
		t.Logf("Join failed after %s: %s", time.Since(began).Round(10*time.Millisecond), err)
	case <-time.After(config.Consumer.Group.Session.Timeout + 5*time.Second):
		t.Fatalf("Join still blocked %s after it began, on a coordinator that answers NOT_COORDINATOR", time.Since(began).Round(time.Second))
	}
}

// TestConsumerProtocolFakeJoinContextCancelled (finding 9): JoinContext
// returns ctx's error once ctx is done, while the coordinator loads.
func TestConsumerProtocolFakeJoinContextCancelled(t *testing.T) {
	t.Parallel()
	f := newFakeKafka(t, map[string]int32{"t1": 1})
	f.setHeartbeat(func(*kmsg.ConsumerGroupHeartbeatRequest) *kmsg.ConsumerGroupHeartbeatResponse {
		resp := kmsg.NewPtrConsumerGroupHeartbeatResponse()
		resp.ErrorCode = kerr.CoordinatorLoadInProgress.Code
		return resp
	})
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	began := time.Now()
	c, err := JoinContext(ctx, "g", TopicSubscription("t1"), "", fakeConsumerConfig(f))
	if err == nil {
		_ = c.Close()
		t.Fatal("JoinContext = nil, want ctx's error")
	}
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(began) > 3*time.Second {
		t.Fatalf("JoinContext = %v after %s, want ctx's error within a few seconds", err, time.Since(began))
	}
}

// TestConsumerProtocolFakeJoinRetriesCoordinatorLookup (finding 9): a
// lookup of the coordinator answered COORDINATOR_NOT_AVAILABLE is retried
// until the coordinator is ready, and Join then succeeds.
func TestConsumerProtocolFakeJoinRetriesCoordinatorLookup(t *testing.T) {
	t.Parallel()
	f := newFakeKafka(t, map[string]int32{"t1": 1})
	newFakeGroup(f, map[string][]int32{"t1": {0}})
	var mu sync.Mutex
	refused := 0
	f.setAnswer(func(req kmsg.Request) kmsg.Response {
		r, ok := req.(*kmsg.FindCoordinatorRequest)
		mu.Lock()
		defer mu.Unlock()
		if !ok || refused == 5 {
			return nil
		}
		refused++
		return f.findCoordinator(r, kerr.CoordinatorNotAvailable.Code)
	})
	joinFake(t, f, TopicSubscription("t1"), nil)
	waitFor(t, 10*time.Second, "t1/0 reported owned", owns(f, map[string][]int32{"t1": {0}}))
}

// TestConsumerProtocolFakeJoinErrors: the first heartbeat's refusals
// fail Join with an error that says what to change.
func TestConsumerProtocolFakeJoinErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		code int16
		want error
	}{
		{"unsupported assignor", int16(errUnsupportedAssignor), ErrInvalidConfig},
		{"unsupported version", kerr.UnsupportedVersion.Code, ErrInvalidConfig},
		{"instance ID in use", int16(errUnreleasedInstanceID), ErrInstanceIDInUse},
		{"classic group", kerr.GroupIDNotFound.Code, kerr.GroupIDNotFound},
		{"not authorized", kerr.GroupAuthorizationFailed.Code, kerr.GroupAuthorizationFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeKafka(t, map[string]int32{"t1": 1})
			f.setHeartbeat(func(*kmsg.ConsumerGroupHeartbeatRequest) *kmsg.ConsumerGroupHeartbeatResponse {
				resp := kmsg.NewPtrConsumerGroupHeartbeatResponse()
				resp.ErrorCode = tc.code
				return resp
			})
			c, err := Join("g", TopicSubscription("t1"), "", fakeConsumerConfig(f))
			if err == nil {
				_ = c.Close()
				t.Fatal("Join = nil")
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("Join = %s, want %v", err, tc.want)
			}
		})
	}
}

// TestConsumerProtocolFakeBrokerWithoutProtocol: brokers that do not
// list ConsumerGroupHeartbeat fail Join with ErrInvalidConfig.
func TestConsumerProtocolFakeBrokerWithoutProtocol(t *testing.T) {
	t.Parallel()
	f := newFakeKafka(t, map[string]int32{"t1": 1})
	f.setAnswer(func(req kmsg.Request) kmsg.Response {
		if _, ok := req.(*kmsg.ApiVersionsRequest); !ok {
			return nil
		}
		resp := f.apiVersions().(*kmsg.ApiVersionsResponse)
		resp.ApiKeys = slices.DeleteFunc(resp.ApiKeys, func(k kmsg.ApiVersionsResponseApiKey) bool { return k.ApiKey == consumerHeartbeatKey })
		return resp
	})
	c, err := Join("g", TopicSubscription("t1"), "", fakeConsumerConfig(f))
	if err == nil {
		_ = c.Close()
		t.Fatal("Join = nil")
	}
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("Join = %s, want ErrInvalidConfig", err)
	}
}

// TestConsumerProtocolFakeUnknownMemberJoinsAnew: a heartbeat answered
// UNKNOWN_MEMBER_ID loses the partitions and joins again (epoch 0) under
// a new member ID; FENCED_MEMBER_EPOCH under the same.
func TestConsumerProtocolFakeUnknownMemberJoinsAnew(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		code  int16
		newID bool
	}{{"unknown member", kerr.UnknownMemberID.Code, true}, {"fenced epoch", int16(errFencedMemberEpoch), false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeKafka(t, map[string]int32{"t1": 1})
			g := newFakeGroup(f, map[string][]int32{"t1": {0}})
			joinFake(t, f, TopicSubscription("t1"), nil)
			waitFor(t, 10*time.Second, "t1/0 reported owned", owns(f, map[string][]int32{"t1": {0}}))
			first := heartbeatsAfter(f, 0)[0].MemberID
			n := f.count()
			g.fenceNext(tc.code)
			waitFor(t, 10*time.Second, "a heartbeat of epoch 0", func() bool {
				return slices.ContainsFunc(heartbeatsAfter(f, n), func(hb *kmsg.ConsumerGroupHeartbeatRequest) bool {
					if hb.MemberEpoch == 0 && (hb.MemberID != first) != tc.newID {
						t.Errorf("joined again as %q, first %q: want a new ID %t", hb.MemberID, first, tc.newID)
					}
					return hb.MemberEpoch == 0
				})
			})
			waitFor(t, 10*time.Second, "t1/0 reported owned again", owns(f, map[string][]int32{"t1": {0}}))
		})
	}
}

// TestConsumerProtocolFakeJoinsADowngradedGroupAgain: a member whose
// session expired after which the brokers converted the group to a
// classic one is answered GROUP_ID_NOT_FOUND at its old epoch; it joins
// again with epoch 0, which converts the group back, and runs its
// partitions again.
func TestConsumerProtocolFakeJoinsADowngradedGroupAgain(t *testing.T) {
	t.Parallel()
	f := newFakeKafka(t, map[string]int32{"t1": 1})
	g := newFakeGroup(f, map[string][]int32{"t1": {0}})
	joinFake(t, f, TopicSubscription("t1"), nil)
	waitFor(t, 10*time.Second, "t1/0 reported owned", owns(f, map[string][]int32{"t1": {0}}))
	n := f.count()
	g.downgrade()
	waitFor(t, 10*time.Second, "a heartbeat of epoch 0 after the downgrade", func() bool {
		return slices.ContainsFunc(heartbeatsAfter(f, n), func(hb *kmsg.ConsumerGroupHeartbeatRequest) bool {
			return hb.MemberEpoch == 0
		})
	})
	waitFor(t, 10*time.Second, "t1/0 reported owned again", owns(f, map[string][]int32{"t1": {0}}))
}

// TestConsumerProtocolFakeFencedInstance: FENCED_INSTANCE_ID is final: it
// reaches Errors() as ErrInstanceIDInUse, and the member does not join
// again.
func TestConsumerProtocolFakeFencedInstance(t *testing.T) {
	t.Parallel()
	f := newFakeKafka(t, map[string]int32{"t1": 1})
	g := newFakeGroup(f, map[string][]int32{"t1": {0}})
	config := fakeConsumerConfig(f)
	config.InstanceID = "static-1"
	c, err := Join("g", TopicSubscription("t1"), "", config)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	waitFor(t, 10*time.Second, "t1/0 reported owned", owns(f, map[string][]int32{"t1": {0}}))
	g.fenceNext(kerr.FencedInstanceID.Code)
	select {
	case err := <-c.Errors():
		if !errors.Is(err, ErrInstanceIDInUse) {
			t.Fatalf("Errors() = %s, want ErrInstanceIDInUse", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no error on Errors() 10s after FENCED_INSTANCE_ID")
	}
	n := f.count()
	waitFor(t, 10*time.Second, "every partition stopped", func() bool { return len(c.(*consumerManager).Stats()) == 0 })
	if hbs := heartbeatsAfter(f, n); slices.ContainsFunc(hbs, func(hb *kmsg.ConsumerGroupHeartbeatRequest) bool { return hb.MemberEpoch == 0 }) {
		t.Fatal("a fenced instance joined again")
	}
}

// TestConsumerProtocolFakeRefusedHeartbeatReportedOnce: a heartbeat
// refused with an error that is neither a loss nor a move of the
// coordinator reaches Errors() once, with its code, however often it
// repeats.
func TestConsumerProtocolFakeRefusedHeartbeatReportedOnce(t *testing.T) {
	t.Parallel()
	f := newFakeKafka(t, map[string]int32{"t1": 1})
	newFakeGroup(f, map[string][]int32{"t1": {0}})
	c := joinFake(t, f, TopicSubscription("t1"), nil)
	waitFor(t, 10*time.Second, "t1/0 reported owned", owns(f, map[string][]int32{"t1": {0}}))
	f.setHeartbeat(func(*kmsg.ConsumerGroupHeartbeatRequest) *kmsg.ConsumerGroupHeartbeatResponse {
		resp := kmsg.NewPtrConsumerGroupHeartbeatResponse()
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		return resp
	})
	select {
	case err := <-c.Errors():
		if !errors.Is(err, kerr.GroupAuthorizationFailed) {
			t.Fatalf("Errors() = %s, want GROUP_AUTHORIZATION_FAILED", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("nothing on Errors() 10s after the heartbeats were refused")
	}
	n := f.count()
	waitFor(t, 10*time.Second, "5 more heartbeats refused", func() bool { return len(heartbeatsAfter(f, n)) >= 5 })
	select {
	case err := <-c.Errors():
		t.Fatalf("Errors() again: %s", err)
	default:
	}
}
