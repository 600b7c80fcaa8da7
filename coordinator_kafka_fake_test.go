package kafkaconsumer

// The Kafka coordinator's requests on sarama's in-memory mock brokers:
// which broker each group request goes to when the coordinator moves,
// and what the member does with the answers that no retry mends.

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// mockClassicMember is a Kafka-coordinated member on two mock brokers, 1 and 2,
// whose metadata lists both and whose FindCoordinator names coordinator.
type mockClassicMember struct {
	k                *kafkaCoordinator
	brokers          [2]*sarama.MockBroker
	groupClient      sarama.Client
	offsetsClient    sarama.Client
	reported, errors chan error
	meta             *sarama.MockMetadataResponse        // lists both brokers
	find             *sarama.MockFindCoordinatorResponse // names the coordinator
}

// newMockClassicMember returns the member "g" of a group on two mock brokers;
// FindCoordinator names broker coordinator (1 or 2). Close is a cleanup
// of t.
func newMockClassicMember(t *testing.T, coordinator int) *mockClassicMember {
	t.Helper()
	f := &mockClassicMember{reported: make(chan error, 1000)}
	for i := range f.brokers {
		f.brokers[i] = sarama.NewMockBroker(t, int32(i+1))
	}
	f.meta = sarama.NewMockMetadataResponse(t).SetController(1)
	for _, b := range f.brokers {
		f.meta.SetBroker(b.Addr(), b.BrokerID())
	}
	f.find = sarama.NewMockFindCoordinatorResponse(t).SetCoordinator(sarama.CoordinatorGroup, "g", f.brokers[coordinator-1])
	for i := range f.brokers {
		f.answer(i+1, nil)
	}
	cm, _ := fakeSessionManager(t)
	cm.config.Coordinator = CoordinatorKafka
	cm.config.Version = sarama.V2_4_0_0
	cm.config.ApiVersionsRequest = false // the mocks answer what they are told
	cm.config.Metadata.Retry.Max = 0
	cm.config.Consumer.Return.Errors = true
	f.errors = cm.errors
	var err error
	if f.offsetsClient, err = sarama.NewClient([]string{f.brokers[0].Addr()}, cm.config.Config); err != nil {
		t.Fatal(err)
	}
	cm.offsets = newOffsetStore(f.offsetsClient, "g", func(_ TopicPartition, err error) { f.reported <- err })
	f.k = newKafkaCoordinator(cm)
	if f.groupClient, err = sarama.NewClient([]string{f.brokers[0].Addr()}, cm.config.Config); err != nil {
		t.Fatal(err)
	}
	f.k.client = f.groupClient
	t.Cleanup(func() {
		cm.t.Kill(nil)
		_ = f.groupClient.Close()
		_ = f.offsetsClient.Close()
		f.k.calls.Wait()
		for _, b := range f.brokers {
			b.Close()
		}
	})
	return f
}

// answer sets the handlers of broker id (1 or 2) for the group's
// requests, on top of the metadata and FindCoordinator (naming the
// coordinator of newMockClassicMember).
func (f *mockClassicMember) answer(id int, handlers map[string]sarama.MockResponse) {
	all := map[string]sarama.MockResponse{"MetadataRequest": f.meta, "FindCoordinatorRequest": f.find}
	for name, h := range handlers {
		all[name] = h
	}
	f.brokers[id-1].SetHandlerByMap(all)
}

// requests counts the requests of the kind (e.g. *sarama.JoinGroupRequest)
// that broker id received.
func requests[T any](f *mockClassicMember, id int) int {
	n := 0
	for _, r := range f.brokers[id-1].History() {
		if _, ok := r.Request.(T); ok {
			n++
		}
	}
	return n
}

// cacheCoordinator makes broker id the coordinator that the offset store
// knows, as after its last commit.
func (f *mockClassicMember) cacheCoordinator(t *testing.T, id int) {
	t.Helper()
	b, err := f.offsetsClient.Broker(int32(id))
	if err != nil {
		t.Fatal(err)
	}
	f.k.cm.offsets.coordinator = b
}

// joinedAnswers are the handlers of a coordinator that lets member m-1
// join generation 1 as a follower, with no partition.
func joinedAnswers(t *testing.T) map[string]sarama.MockResponse {
	return map[string]sarama.MockResponse{
		"JoinGroupRequest": sarama.NewMockJoinGroupResponse(t).SetMemberId("m-1").SetGenerationId(1).
			SetLeaderId("leader").SetGroupProtocol(kafkaProtocol),
		"SyncGroupRequest": sarama.NewMockSyncGroupResponse(t).SetMemberAssignment(&sarama.ConsumerGroupMemberAssignment{}),
	}
}

// TestJoinAfterNotCoordinatorAsksTheNewCoordinator: the offset store
// knew broker 1 as the coordinator; the group moved to broker 2, and
// broker 1 answers NOT_COORDINATOR. The JoinGroup goes to broker 2 after
// the first refusal. It went to broker 1 for ever (the store's
// coordinator was forgotten only by heartbeats and commits, which a
// member without a generation does not send): the soak's stall.
func TestJoinAfterNotCoordinatorAsksTheNewCoordinator(t *testing.T) {
	t.Parallel()
	f := newMockClassicMember(t, 2)
	f.answer(1, map[string]sarama.MockResponse{
		"JoinGroupRequest": sarama.NewMockJoinGroupResponse(t).SetError(sarama.ErrNotCoordinatorForConsumer),
	})
	f.answer(2, joinedAnswers(t))
	f.cacheCoordinator(t, 1)
	done := runDone(func() bool { _, ok := f.k.join(nil); return ok })
	select {
	case ok := <-done:
		if !ok {
			t.Fatal("join() = false")
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("not joined within 10 s: %d JoinGroups to broker 1 (NOT_COORDINATOR), %d to broker 2 (the coordinator)",
			requests[*sarama.JoinGroupRequest](f, 1), requests[*sarama.JoinGroupRequest](f, 2))
	}
	if n := requests[*sarama.JoinGroupRequest](f, 1); n != 1 {
		t.Errorf("%d JoinGroups to broker 1, want 1", n)
	}
	if m := f.k.current(); m.generation != 1 || m.id != "m-1" {
		t.Errorf("member %+v, want m-1 in generation 1", m)
	}
}

// TestPermanentJoinErrorsReachErrors: a JoinGroup refused for a reason
// that no retry mends (a session timeout outside the brokers' bounds, no
// ACL for the group, a full group) is reported on Errors(), once, naming
// the error and what to change, while the member keeps trying. They were
// only logged, every second, for ever.
func TestPermanentJoinErrorsReachErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		kerr sarama.KError
		says string
	}{
		{"INVALID_SESSION_TIMEOUT", sarama.ErrInvalidSessionTimeout, "group.min.session.timeout.ms"},
		{"GROUP_AUTHORIZATION_FAILED", sarama.ErrGroupAuthorizationFailed, "READ"},
		{"GROUP_MAX_SIZE_REACHED", sarama.ErrGroupMaxSizeReached, "group.max.size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := refusingJoins(t, tc.kerr)
			go f.k.join(nil) // ends when the cleanup kills the tomb
			select {
			case err := <-f.errors:
				if !errors.Is(err, tc.kerr) || !strings.Contains(err.Error(), tc.says) {
					t.Fatalf("Errors() = %q, want one wrapping %s that says %q", err, tc.kerr, tc.says)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("nothing on Errors() within 10 s; %d JoinGroups refused with %s", requests[*sarama.JoinGroupRequest](f, 1), tc.kerr)
			}
			waitFor(t, 10*time.Second, "two more JoinGroups", func() bool { return requests[*sarama.JoinGroupRequest](f, 1) >= 3 })
			select {
			case err := <-f.errors:
				t.Fatalf("reported again: %s", err)
			default:
			}
		})
	}
}

// refusingJoins returns a fake group whose coordinator, broker 1,
// answers every JoinGroup kerr, naming the member m-1.
func refusingJoins(t *testing.T, kerr sarama.KError) *mockClassicMember {
	f := newMockClassicMember(t, 1)
	f.answer(1, map[string]sarama.MockResponse{
		"JoinGroupRequest": sarama.NewMockJoinGroupResponse(t).SetError(kerr).SetMemberId("m-1"),
	})
	return f
}

// TestFirstJoinGroupFailsJoin: the first JoinGroup of a dynamic member,
// which Join sends, fails Join when it is refused with
// INVALID_SESSION_TIMEOUT or GROUP_AUTHORIZATION_FAILED, and only then;
// MEMBER_ID_REQUIRED gives the member its ID.
func TestFirstJoinGroupFailsJoin(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		kerr sarama.KError
		fail bool
	}{
		{"INVALID_SESSION_TIMEOUT", sarama.ErrInvalidSessionTimeout, true},
		{"GROUP_AUTHORIZATION_FAILED", sarama.ErrGroupAuthorizationFailed, true},
		{"GROUP_MAX_SIZE_REACHED", sarama.ErrGroupMaxSizeReached, false},
		{"NOT_COORDINATOR", sarama.ErrNotCoordinatorForConsumer, false},
		{"MEMBER_ID_REQUIRED", sarama.ErrMemberIdRequired, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := refusingJoins(t, tc.kerr)
			err := f.k.firstJoin()
			if fail := err != nil; fail != tc.fail || err != nil && !errors.Is(err, tc.kerr) {
				t.Fatalf("firstJoin() = %v, want an error wrapping %s: %t", err, tc.kerr, tc.fail)
			}
			if id := f.k.current().id; tc.kerr == sarama.ErrMemberIdRequired && id != "m-1" {
				t.Errorf("member ID %q after MEMBER_ID_REQUIRED, want m-1", id)
			}
		})
	}
}

// TestRemovalHandledByTheGuardIsNotSignalledAgain: the guard handled a
// removal (its heartbeat was answered UNKNOWN_MEMBER_ID) and the
// manager's JoinGroup learnt it too (removedFromGroup). The member then
// joins generation 2, which it keeps: removedFromGroup sent the guard a
// removal signal all the same, left over, and the guard took it for a
// removal from generation 2 (one needless rebalance).
func TestRemovalHandledByTheGuardIsNotSignalledAgain(t *testing.T) {
	t.Parallel()
	f := newMockClassicMember(t, 1)
	f.answer(1, map[string]sarama.MockResponse{
		"HeartbeatRequest": sarama.NewMockHeartbeatResponse(t),
	})
	f.cacheCoordinator(t, 1)
	k, cm := f.k, f.k.cm
	k.heartbeatInterval = 200 * time.Millisecond
	k.setMember(groupMember{id: "m-1", generation: 1})
	k.lost.Store(true) // the guard lost generation 1
	k.removedFromGroup()
	cm.startKafkaGuard(k)
	defer cm.stopGuard()
	k.setMember(groupMember{id: "m-1", generation: 2})
	k.tellJoined(time.Now())
	waitFor(t, 10*time.Second, "a heartbeat of generation 2, or its loss", func() bool {
		if k.current().generation != 2 {
			return true
		}
		for _, r := range f.brokers[0].History() {
			if hb, ok := r.Request.(*sarama.HeartbeatRequest); ok && hb.GenerationId == 2 && r.Response != nil {
				return true
			}
		}
		return false
	})
	if m := k.current(); m.generation != 2 || k.lost.Load() {
		t.Fatalf("member %+v (lost %t): the guard lost generation 2", m, k.lost.Load())
	}
}

// TestFenceLogBeforeAnyAnswer: the fence's log line of a member that no
// heartbeat was answered for says so, not the time since the zero time
// ("since 2562047h47m16.854775807s ago").
func TestFenceLogBeforeAnyAnswer(t *testing.T) {
	t.Parallel()
	cm, _ := fakeSessionManager(t)
	var rec *recorded
	cm.log, rec = newRecordingLogger()
	cm.logKafkaFence(time.Time{})
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.records) != 1 || strings.Contains(rec.records[0].msg, "2562047h") || !strings.Contains(rec.records[0].msg, "coordinator") {
		t.Fatalf("logged %+v, want one line about the coordinator without the time since the zero time", rec.records)
	}
}

// TestCommitRefusedBetweenJoinAndSyncIsRetried: a commit refused with
// ILLEGAL_GENERATION while the member is joining (the group's next
// generation began; the member's SyncGroup is to come) is not reported
// on Errors(), and the next round commits the offset with the new
// generation. It was reported: thousands of errors in a large group's
// rebalances, none of them a user's to act on.
func TestCommitRefusedBetweenJoinAndSyncIsRetried(t *testing.T) {
	t.Parallel()
	f := newMockClassicMember(t, 1)
	refused := sarama.NewMockOffsetCommitResponse(t).SetError("g", "t", 0, sarama.ErrIllegalGeneration)
	f.answer(1, map[string]sarama.MockResponse{"OffsetCommitRequest": refused})
	f.cacheCoordinator(t, 1)
	k, cm := f.k, f.k.cm
	cm.coord = k
	cm.offsets.report = cm.commitFailed
	cm.offsets.member = k.commitMember
	tp := TopicPartition{Topic: "t", Partition: 0}
	if err := cm.offsets.reserve(tp); err != nil {
		t.Fatal(err)
	}
	cm.offsets.set(tp, 5)
	cm.offsets.mark(tp, 9)
	k.setMember(groupMember{id: "m-1", generation: 1})
	k.joining.Store(true) // JoinGroup of generation 2 answered, SyncGroup to come
	cm.offsets.commitRound()
	select {
	case err := <-cm.errors:
		t.Fatalf("Errors() = %q while the member joins the next generation", err)
	default:
	}
	k.setMember(groupMember{id: "m-1", generation: 2})
	k.joining.Store(false)
	f.answer(1, map[string]sarama.MockResponse{"OffsetCommitRequest": sarama.NewMockOffsetCommitResponse(t)})
	cm.offsets.commitRound()
	if !cm.offsets.isCommitted(tp, 9) {
		t.Fatal("offset 9 not committed with the next generation")
	}
	var generations []int32
	for _, r := range f.brokers[0].History() {
		if c, ok := r.Request.(*sarama.OffsetCommitRequest); ok {
			generations = append(generations, c.ConsumerGroupGeneration)
		}
	}
	if len(generations) != 2 || generations[1] != 2 {
		t.Errorf("commits of generations %v, want [1 2]", generations)
	}
}

// TestGroupRequestsForgetAMovedCoordinator: a LeaveGroup, Heartbeat or
// DescribeGroups answered NOT_COORDINATOR makes the offset store forget
// the coordinator, so that the next request of the group looks it up
// again. LeaveGroup and DescribeGroups did not.
func TestGroupRequestsForgetAMovedCoordinator(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		request string
		answer  func(t *testing.T) sarama.MockResponse
		send    func(k *kafkaCoordinator) error
	}{
		{"LeaveGroup", "LeaveGroupRequest",
			func(t *testing.T) sarama.MockResponse {
				return sarama.NewMockLeaveGroupResponse(t).SetError(sarama.ErrNotCoordinatorForConsumer)
			},
			func(k *kafkaCoordinator) error { return k.leave(groupMember{id: "m-1", generation: 1}, nil) }},
		{"Heartbeat", "HeartbeatRequest",
			func(t *testing.T) sarama.MockResponse {
				return sarama.NewMockHeartbeatResponse(t).SetError(sarama.ErrNotCoordinatorForConsumer)
			},
			func(k *kafkaCoordinator) error { return k.heartbeat(groupMember{id: "m-1", generation: 1}) }},
		{"DescribeGroups", "DescribeGroupsRequest",
			func(t *testing.T) sarama.MockResponse {
				return sarama.NewMockDescribeGroupsResponse(t).AddGroupDescription("g", &sarama.GroupDescription{
					GroupId: "g", ErrorCode: int16(sarama.ErrNotCoordinatorForConsumer), Err: sarama.ErrNotCoordinatorForConsumer})
			},
			func(k *kafkaCoordinator) error { _, _, err := k.describe(); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newMockClassicMember(t, 2)
			f.answer(1, map[string]sarama.MockResponse{tc.request: tc.answer(t)})
			f.cacheCoordinator(t, 1)
			if err := tc.send(f.k); !errors.Is(err, sarama.ErrNotCoordinatorForConsumer) {
				t.Fatalf("%s = %v, want NOT_COORDINATOR", tc.name, err)
			}
			if b := f.k.cm.offsets.coordinator; b != nil {
				t.Fatalf("after NOT_COORDINATOR to its %s, the offset store still knows broker %d as the coordinator", tc.name, b.ID())
			}
		})
	}
}
