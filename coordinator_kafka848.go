package kafkaconsumer

// The consumer group protocol of KIP-848 (GroupProtocolConsumer) for
// CoordinatorKafka: the same kafkaCoordinator, partition managers,
// offset store, fence and take-back as the classic protocol, with the
// membership and the assignment of ConsumerGroupHeartbeat instead of
// JoinGroup and SyncGroup, sent through the group transport
// (group_transport.go).
//
// Membership. Join sends the first heartbeat (epoch 0) itself, so that a
// broker without the protocol, an assignor it does not know, a classic
// group of the same name (GROUP_ID_NOT_FOUND) or an instance ID in use
// fail Join; a coordinator that moves or loads is waited for at most
// Consumer.Group.Session.Timeout. The guard (guardConsumer) then heartbeats every interval the
// broker gives, reporting the subscription (the topic names the client
// resolves from Kafka's metadata, as the classic mode does) and the
// partitions it owns (from the answer of an assignment until its
// reconciliation completes: unchanged, so that the broker takes nothing
// the member is about to start for a release); each answer carries the member's epoch, which
// commits carry (OffsetCommit v9: a zombie's commit is refused), and,
// when it changed, the assignment.
//
// One owner at a time: the broker assigns a partition to a member only
// once its previous owner reported it no longer owned (the epoch
// guarantees it). The manager reconciles each assignment as
// managePartitionManagers does for the classic mode: the revoked
// partitions stop first, with their final commits, while the others run
// on; the new ones start; then the guard heartbeats at once and reports
// the owned partitions. The broker fences a member that does not
// heartbeat within its session timeout, or does not release its revoked
// partitions within the rebalance timeout; the guard raises the fence at
// 0.8 × Consumer.Group.Session.Timeout after the send of the last
// heartbeat answered (which must be at most the broker's
// group.consumer.session.timeout.ms, 45 s by default), and, while a
// revocation is reconciled, at 0.8 × the rebalance timeout after the send
// of the heartbeat that brought it.
//
// Errors: UNKNOWN_MEMBER_ID loses the partitions (no final commit) and
// joins anew with a new member ID; FENCED_MEMBER_EPOCH loses them and
// joins again with the same member ID; UNRELEASED_INSTANCE_ID and
// FENCED_INSTANCE_ID are final (instanceFenced). A commit refused with
// FENCED_MEMBER_EPOCH or UNKNOWN_MEMBER_ID means the same loss; one
// refused STALE_MEMBER_EPOCH is retried with the epoch of the next
// heartbeat's answer (the member is behind, not removed). Leaving sends
// epoch -1, or -2 for a static member, whose partitions the broker keeps
// for it until its session timeout.

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/wvanbergen/kazoo-go"
)

// defaultRemoteAssignor is the broker-side assignor of
// GroupRemoteAssignor "": Kafka's default, uniform.
const defaultRemoteAssignor = "uniform"

// consumerHeartbeatKey is the API key of ConsumerGroupHeartbeat.
const consumerHeartbeatKey = 68

// The Kafka error codes of the consumer group protocol, as sarama.KError
// (sarama names none of them).
const (
	errFencedMemberEpoch     = sarama.KError(110) // FENCED_MEMBER_EPOCH
	errUnreleasedInstanceID  = sarama.KError(111) // UNRELEASED_INSTANCE_ID
	errUnsupportedAssignor   = sarama.KError(112) // UNSUPPORTED_ASSIGNOR
	errStaleMemberEpoch      = sarama.KError(113) // STALE_MEMBER_EPOCH
	leaveEpoch               = -1                 // the epoch of a member that leaves
	leaveStaticEpoch         = -2                 // that of a static member that leaves for now
	consumerRetryAfterFailed = 500 * time.Millisecond
)

// protocolError is a sarama.KError that sarama does not name: one of the
// consumer group protocol's (FENCED_MEMBER_EPOCH to STALE_MEMBER_EPOCH).
// Its text is franz-go's (the code's name and Kafka's message); errors.Is
// matches it to the sarama.KError, and it unwraps to franz-go's
// kerr.Error.
type protocolError sarama.KError

// Error implements error.
func (e protocolError) Error() string { return kerr.ErrorForCode(int16(e)).Error() }

// Is reports whether target is the sarama.KError of e.
func (e protocolError) Is(target error) bool {
	k, ok := target.(sarama.KError)
	return ok && k == sarama.KError(e)
}

// Unwrap returns franz-go's error of the code.
func (e protocolError) Unwrap() error { return kerr.ErrorForCode(int16(e)) }

// namedKError returns err, or the protocolError of a sarama.KError of the
// consumer group protocol, whose own text sarama does not know ("Unknown
// error, how did this happen?").
func namedKError(err error) error {
	if k, ok := err.(sarama.KError); ok && k >= errFencedMemberEpoch && k <= errStaleMemberEpoch {
		return protocolError(k)
	}
	return err
}

// consumerMembership is the state of a GroupProtocolConsumer member that
// the kafkaCoordinator keeps besides its member (ID and epoch).
type consumerMembership struct {
	t        *groupTransport
	assignor string

	// assignments receives a token (buffer 1) when pending is set: the
	// manager reconciles it. reconciled receives a token (buffer 1) when
	// the manager changed the partitions owned or the subscription: the
	// guard heartbeats at once.
	assignments, reconciled chan struct{}

	mu sync.Mutex // guards the fields below
	// interval is the broker's heartbeat interval.
	interval time.Duration
	// topics is the subscription: the topic names, sorted.
	topics []string
	// ids and names map the topics assigned to their IDs and back.
	ids   map[string][16]byte
	names map[[16]byte]string
	// pending is the last assignment answered and not reconciled yet;
	// nil for none.
	pending map[[16]byte][]int32
	// reconciling is set while the manager reconciles an assignment it
	// took from pending. From the answer of an assignment until its
	// reconciliation completes, heartbeats report the owned partitions
	// as unchanged (none listed): a list without a partition the member
	// is about to start would release it, and the broker could give it
	// to another member at once.
	reconciling bool
	// assigned is the last assignment reconciled, with the partitions of
	// topic IDs that did not resolve; setAside counts those, looked up
	// again once the assignment is answered after retryAt (backoff, in
	// setAsideFor).
	assigned    map[[16]byte][]int32
	setAside    int
	retryAt     time.Time
	setAsideFor time.Duration
	// revoking, when not zero, is the send of the heartbeat whose answer
	// revoked partitions not released yet.
	revoking time.Time
	// lostAt counts the losses of the membership: a heartbeat's answer
	// of an earlier count is ignored.
	lostAt int
}

// newConsumerMembership returns the state of a member on transport t.
func newConsumerMembership(t *groupTransport, assignor string, interval time.Duration) *consumerMembership {
	if assignor == "" {
		assignor = defaultRemoteAssignor
	}
	return &consumerMembership{
		t:           t,
		assignor:    assignor,
		assignments: make(chan struct{}, 1),
		reconciled:  make(chan struct{}, 1),
		interval:    interval,
		topics:      []string{},
		ids:         make(map[string][16]byte),
		names:       make(map[[16]byte]string),
	}
}

// newMemberID returns a new member ID, generated by the client as
// ConsumerGroupHeartbeat v1 wants: 16 random bytes in URL-safe base64,
// as Kafka's Uuid.
func newMemberID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// poke sends a token on c without blocking.
func poke(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// partitionTopics returns the sorted names of the topics of partitions.
func partitionTopics(partitions kazoo.PartitionList) []string {
	topics := []string{}
	for _, p := range partitions {
		if p.Topic() != nil && !slices.Contains(topics, p.Topic().Name) {
			topics = append(topics, p.Topic().Name)
		}
	}
	sort.Strings(topics)
	return topics
}

// heartbeatConsumer sends one ConsumerGroupHeartbeat of m, with the full
// state: subscription, assignor, rebalance timeout and owned partitions
// (the broker takes them whether or not they changed).
func (k *kafkaCoordinator) heartbeatConsumer(ctx context.Context, m groupMember) (*kmsg.ConsumerGroupHeartbeatResponse, error) {
	cm, c := k.cm, k.consumer
	if h := cm.hooks; h != nil && h.consumerHeartbeat != nil {
		h.consumerHeartbeat()
	}
	req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	req.Group = cm.group
	req.MemberID = m.id
	req.MemberEpoch = m.generation
	req.InstanceID = k.instanceID
	req.RebalanceTimeoutMillis = int32(k.rebalanceTimeout / time.Millisecond)
	assignor := c.assignor
	req.ServerAssignor = &assignor
	c.mu.Lock()
	req.SubscribedTopicNames = append([]string{}, c.topics...)
	req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	if m.generation > 0 && (c.pending != nil || c.reconciling) {
		req.Topics = nil // owned: unchanged (see reconciling)
	} else if m.generation > 0 {
		for topic, partitions := range k.ownedPartitions() {
			if id, ok := c.ids[topic]; ok {
				req.Topics = append(req.Topics, kmsg.ConsumerGroupHeartbeatRequestTopic{TopicID: id, Partitions: partitions})
			}
		}
	}
	c.mu.Unlock()
	resp, err := c.t.coordinatorRequest(ctx, req)
	if err != nil {
		return nil, err
	}
	r := resp.(*kmsg.ConsumerGroupHeartbeatResponse)
	if coordinatorMovedCode(r.ErrorCode) {
		c.t.forgetCoordinator()
	}
	return r, nil
}

// takeHeartbeat records the answer resp, without error, to a heartbeat
// sent at sent while the membership's loss count was lostAt: the member
// ID and epoch, the interval, and the assignment when it changed. It
// reports false for the answer of a membership lost since.
func (k *kafkaCoordinator) takeHeartbeat(resp *kmsg.ConsumerGroupHeartbeatResponse, lostAt int, sent time.Time) bool {
	c := k.consumer
	c.mu.Lock()
	defer c.mu.Unlock()
	if lostAt != c.lostAt {
		return false
	}
	id := k.current().id
	if resp.MemberID != nil && *resp.MemberID != "" {
		id = *resp.MemberID
	}
	k.setMember(groupMember{id: id, generation: resp.MemberEpoch})
	if resp.HeartbeatIntervalMillis > 0 {
		c.interval = time.Duration(resp.HeartbeatIntervalMillis) * time.Millisecond
	}
	if a := resp.Assignment; a != nil {
		pending := make(map[[16]byte][]int32, len(a.Topics))
		for _, t := range a.Topics {
			pending[t.TopicID] = append(pending[t.TopicID], t.Partitions...)
		}
		if c.pending == nil && !c.reconciling && (k.holds(pending) || c.setAside > 0 && sameAssignment(pending, c.assigned) && time.Now().Before(c.retryAt)) {
			// The broker repeats the assignment in its answer to every
			// heartbeat that carries the subscription and the owned
			// partitions: one the member holds already needs no
			// reconciling, nor the heartbeat at once that follows one;
			// nor one whose partitions set aside are not due to be
			// looked up again.
			return true
		}
		c.pending = pending
		if c.revoking.IsZero() && k.revokes(pending) {
			c.revoking = sent
		}
		poke(c.assignments)
	}
	return true
}

// holds reports whether this member owns exactly the partitions of the
// assignment a. c.mu is held.
func (k *kafkaCoordinator) holds(a map[[16]byte][]int32) bool {
	c := k.consumer
	owned := map[[16]byte][]int32{}
	for topic, partitions := range k.ownedPartitions() {
		id, ok := c.ids[topic]
		if !ok {
			return false
		}
		owned[id] = partitions // sorted
	}
	for id, partitions := range a {
		if len(partitions) == 0 {
			continue
		}
		sorted := slices.Sorted(slices.Values(partitions))
		if !slices.Equal(sorted, owned[id]) {
			return false
		}
		delete(owned, id)
	}
	return len(owned) == 0
}

// sameAssignment reports whether the assignments a and b hold the same
// partitions.
func sameAssignment(a, b map[[16]byte][]int32) bool {
	count := func(m map[[16]byte][]int32) int {
		n := 0
		for _, partitions := range m {
			n += len(partitions)
		}
		return n
	}
	if count(a) != count(b) {
		return false
	}
	for id, partitions := range a {
		for _, p := range partitions {
			if !slices.Contains(b[id], p) {
				return false
			}
		}
	}
	return true
}

// revokes reports whether the assignment a leaves out a partition this
// member owns. c.mu is held.
func (k *kafkaCoordinator) revokes(a map[[16]byte][]int32) bool {
	c := k.consumer
	for topic, partitions := range k.ownedPartitions() {
		id, ok := c.ids[topic]
		if !ok {
			return true
		}
		for _, p := range partitions {
			if !slices.Contains(a[id], p) {
				return true
			}
		}
	}
	return false
}

// leaveConsumer sends the heartbeat that leaves the group: epoch -1, or
// -2 for a static member, whose partitions the broker keeps for it until
// its session timeout.
func (k *kafkaCoordinator) leaveConsumer(m groupMember) error {
	cm := k.cm
	req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	req.Group = cm.group
	req.MemberID = m.id
	req.MemberEpoch = leaveEpoch
	if k.instanceID != nil {
		req.MemberEpoch = leaveStaticEpoch
		req.InstanceID = k.instanceID
	}
	resp, err := k.consumer.t.coordinatorRequest(context.Background(), req)
	if err != nil {
		return err
	}
	code := resp.(*kmsg.ConsumerGroupHeartbeatResponse).ErrorCode
	if code == 0 || code == kerr.UnknownMemberID.Code || code == int16(errFencedMemberEpoch) {
		return nil
	}
	return kerr.ErrorForCode(code)
}
