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
// fail Join. The guard (guardConsumer) then heartbeats every interval the
// broker gives, reporting the subscription (the topic names the client
// resolves from Kafka's metadata, as the classic mode does) and the
// partitions it owns; each answer carries the member's epoch, which
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
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/go-zookeeper/zk"
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

// connectConsumer does connectKafka's work for GroupProtocolConsumer
// after the sarama clients: the group transport, a check that the brokers
// know the protocol, and the first heartbeat (the join), whose errors
// fail Join.
func (k *kafkaCoordinator) connectConsumer(ctx context.Context, brokers []string) error {
	cm := k.cm
	t, err := newGroupTransport(cm.config.Config, cm.dialer, brokers, cm.group)
	if err != nil {
		return err
	}
	c := newConsumerMembership(t, cm.config.GroupRemoteAssignor, k.heartbeatInterval)
	k.consumer = c
	versions, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, t.cl)
	if err != nil {
		return fmt.Errorf("connect to kafka at %s: %w", strings.Join(brokers, ","), err)
	}
	known := false
	for _, key := range versions.ApiKeys {
		known = known || key.ApiKey == consumerHeartbeatKey
	}
	if !known {
		return errProtocolUnsupported(cm.group, " (they do not list ConsumerGroupHeartbeat)")
	}
	sel, _ := cm.subscription.(topicSelector)
	view, err := readMetadata(cm.metadataClient(), sel)
	if err != nil {
		return fmt.Errorf("read the subscription's topics: %w", err)
	}
	c.topics = partitionTopics(view.partitions)
	k.setMember(groupMember{id: newMemberID(), generation: 0})
	for attempt := 0; ; attempt++ {
		sent := time.Now()
		resp, err := k.heartbeatConsumer(ctx, k.current())
		if err == nil {
			err = kerr.ErrorForCode(resp.ErrorCode)
		}
		switch {
		case err == nil:
			k.takeHeartbeat(resp, 0, sent)
			c.mu.Lock()
			if c.pending == nil {
				c.pending = map[[16]byte][]int32{} // the first round runs, empty
				poke(c.assignments)
			}
			c.mu.Unlock()
			k.tellJoined(sent)
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case coordinatorMovedCode(codeOf(resp)) || resp == nil && attempt < 3:
			t.forgetCoordinator()
			if !sleepCtx(ctx, min(100*time.Millisecond<<attempt, 2*time.Second)) {
				return ctx.Err()
			}
			continue
		}
		return k.joinError(resp, err)
	}
}

// codeOf returns the error code of resp, 0 for none.
func codeOf(resp *kmsg.ConsumerGroupHeartbeatResponse) int16 {
	if resp == nil {
		return 0
	}
	return resp.ErrorCode
}

// sleepCtx sleeps for d, or until ctx is done (false).
func sleepCtx(ctx context.Context, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// joinError returns the error of Join for the first heartbeat's answer
// resp (nil when the request failed: err).
func (k *kafkaCoordinator) joinError(resp *kmsg.ConsumerGroupHeartbeatResponse, err error) error {
	cm, c := k.cm, k.consumer
	msg := ""
	if resp != nil && resp.ErrorMessage != nil {
		msg = " (" + *resp.ErrorMessage + ")"
	}
	switch code := codeOf(resp); code {
	case kerr.UnsupportedVersion.Code:
		return errProtocolUnsupported(cm.group, " (ConsumerGroupHeartbeat answered UNSUPPORTED_VERSION)"+msg)
	case int16(errUnsupportedAssignor):
		return fmt.Errorf("%w: join group %s: the brokers do not know the assignor %q of GroupRemoteAssignor%s (group.consumer.assignors)", ErrInvalidConfig, cm.group, c.assignor, msg)
	case kerr.GroupIDNotFound.Code:
		return fmt.Errorf("join group %s: %w%s: it is not a consumer-protocol group but a classic group with members that the brokers do not convert "+
			"(their protocol type is not consumer, or group.consumer.migration.policy forbids the upgrade); join it with GroupProtocolClassic", cm.group, err, msg)
	case int16(errUnreleasedInstanceID), kerr.FencedInstanceID.Code:
		return fmt.Errorf("%w: %s: join group %s: %w%s", ErrInstanceIDInUse, cm.config.InstanceID, cm.group, err, msg)
	}
	return fmt.Errorf("join group %s: %w%s", cm.group, err, msg)
}

// errProtocolUnsupported returns the error of Join for brokers without
// the consumer group protocol: it wraps ErrInvalidConfig, and says what
// the protocol needs and what to use instead; detail says how the brokers
// told.
func errProtocolUnsupported(group, detail string) error {
	return fmt.Errorf("%w: join group %s: GroupProtocol is GroupProtocolConsumer but the brokers do not support the consumer group protocol%s; "+
		"it needs Kafka 4.0 or later in KRaft mode, with group.coordinator.rebalance.protocols including consumer; use GroupProtocolClassic",
		ErrInvalidConfig, group, detail)
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
	if m.generation > 0 {
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
		if c.pending == nil && k.holds(pending) {
			// The broker repeats the assignment in its answer to every
			// heartbeat that carries the subscription and the owned
			// partitions: one the member holds already needs no
			// reconciling, nor the heartbeat at once that follows one.
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

// manageConsumer is the manager loop of a GroupProtocolConsumer member:
//  1. read the subscription's topics from Kafka's metadata (a poller
//     watches them for changes), and tell the guard when they changed;
//  2. reconcile the last assignment answered: the revoked partitions stop
//     first (final commit), the new ones start, and the guard heartbeats
//     at once with the partitions owned;
//  3. after a loss of the membership, stop every partition (lost: no
//     final commit) before the guard joins again;
//  4. sleep until one of these is due, or the manager is interrupted.
func (k *kafkaCoordinator) manageConsumer() {
	cm, c := k.cm, k.consumer
	cm.startConsumerGuard(k)
	read := true
	var changed <-chan zk.Event
	for {
		if k.fencedOut.Load() {
			k.stayOut()
			return
		}
		if k.lost.Load() {
			cm.reportStops(cm.managePartitionManagers(nil))
			k.lost.Store(false)
			poke(c.reconciled) // the guard joins again
		}
		if read {
			partitions, watch, ok := cm.watchSubscription()
			if !ok {
				return
			}
			changed = watch
			topics := partitionTopics(partitions)
			c.mu.Lock()
			if !slices.Equal(topics, c.topics) {
				c.topics = topics
				poke(c.reconciled)
			}
			c.mu.Unlock()
			read = false
		}
		c.mu.Lock()
		pending := c.pending
		c.pending = nil
		c.mu.Unlock()
		if pending != nil {
			assigned, ok := k.resolveAssignment(pending)
			if !ok {
				return
			}
			cm.reportStops(cm.managePartitionManagers(assigned))
			c.mu.Lock()
			if c.pending == nil || !k.revokes(c.pending) {
				c.revoking = time.Time{}
			}
			c.mu.Unlock()
			poke(c.reconciled)
			continue
		}
		select {
		case <-cm.t.Dying():
			cm.logf(slog.LevelInfo, "Interrupted, shutting down...")
			return
		case <-changed:
			cm.logf(slog.LevelInfo, "Woke up because the subscription's partitions changed in Kafka's metadata.")
			read = true
		case <-k.rejoin:
		case <-c.assignments:
		}
	}
}

// resolveAssignment returns the partitions of the assignment a by topic
// name, looking up the names of topic IDs not known yet, retrying until
// the manager is interrupted (ok is false then).
func (k *kafkaCoordinator) resolveAssignment(a map[[16]byte][]int32) (map[TopicPartition]assignment, bool) {
	cm, c := k.cm, k.consumer
	for attempt := 0; ; attempt++ {
		var unknown [][16]byte
		c.mu.Lock()
		for id := range a {
			if _, ok := c.names[id]; !ok {
				unknown = append(unknown, id)
			}
		}
		c.mu.Unlock()
		if len(unknown) == 0 {
			break
		}
		err := cm.kafkaCall(func() error { return k.lookUpTopicNames(unknown) })
		if errors.Is(err, errAbandoned) {
			return nil, false
		}
		if err == nil {
			continue
		}
		cm.logf(slog.LevelWarn, "Failed to look up the names of the topics assigned: %s. Trying again.", err)
		if !sleepOrDie(&cm.t, attempt) {
			return nil, false
		}
	}
	assigned := make(map[TopicPartition]assignment)
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, partitions := range a {
		name := c.names[id]
		t := kazooValues.Topic(name)
		for _, p := range partitions {
			assigned[TopicPartition{Topic: name, Partition: p}] = assignment{partition: t.Partition(p, nil)}
		}
	}
	return assigned, true
}

// lookUpTopicNames asks Kafka's metadata for the names of the topic IDs
// ids, and records them.
func (k *kafkaCoordinator) lookUpTopicNames(ids [][16]byte) error {
	c := k.consumer
	req := kmsg.NewPtrMetadataRequest()
	for _, id := range ids {
		req.Topics = append(req.Topics, kmsg.MetadataRequestTopic{TopicID: id})
	}
	kresp, err := c.t.request(context.Background(), req)
	if err != nil {
		return err
	}
	resp := kresp.(*kmsg.MetadataResponse)
	found := 0
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range resp.Topics {
		if t.Topic == nil || t.ErrorCode != 0 {
			continue
		}
		c.names[t.TopicID], c.ids[*t.Topic] = *t.Topic, t.TopicID
		found++
	}
	if found < len(ids) {
		return fmt.Errorf("%d of %d topic IDs not found in the metadata", len(ids)-found, len(ids))
	}
	return nil
}

// startConsumerGuard starts the guard goroutine of a GroupProtocolConsumer
// member; beforeKafkaClose (or close) stops it with stopGuard.
func (cm *consumerManager) startConsumerGuard(k *kafkaCoordinator) {
	cm.guardStop, cm.guardDone = make(chan struct{}), make(chan struct{})
	go k.guardConsumer()
}

// consumerHeartbeat is the answer to a heartbeat of member sent at sent,
// while the membership's loss count was lostAt.
type consumerHeartbeat struct {
	member groupMember
	lostAt int
	sent   time.Time
	resp   *kmsg.ConsumerGroupHeartbeatResponse
	err    error
}

// guardConsumer is the guard goroutine of a GroupProtocolConsumer member.
// While the member is in the group it heartbeats every interval the
// broker gives (at once after the manager reconciled; one in flight at a
// time), and:
//   - answered without error: it records the epoch and the assignment
//     (takeHeartbeat), and moves the fence's deadline to the send + 0.8 ×
//     the session timeout (while a revocation is reconciled, at most 0.8 ×
//     the rebalance timeout after the send that brought it);
//   - answered UNKNOWN_MEMBER_ID or FENCED_MEMBER_EPOCH: the member was
//     removed (loseConsumer), and joins again once the manager stopped
//     its partitions;
//   - answered UNRELEASED_INSTANCE_ID or FENCED_INSTANCE_ID: final
//     (instanceFenced);
//   - not answered: nothing; the deadline comes and the fence goes up.
//
// When the fence is up it takes back what sits unread, as the classic
// guard does.
func (k *kafkaCoordinator) guardConsumer() {
	cm, c := k.cm, k.consumer
	defer close(cm.guardDone)
	results := make(chan consumerHeartbeat, 1)
	next, deadline := time.NewTimer(k.consumerInterval()), time.NewTimer(time.Hour)
	deadline.Stop()
	defer next.Stop()
	defer deadline.Stop()
	var (
		inFlight, again, drained, out bool
		lastAnswered                  = time.Now()
		reported                      = map[int16]bool{}
	)
	send := func() {
		c.mu.Lock()
		lostAt := c.lostAt
		c.mu.Unlock()
		m := k.current()
		if inFlight || m.generation < 0 || k.lost.Load() || k.fencedOut.Load() {
			return
		}
		inFlight = true
		k.calls.Add(1)
		go func(m groupMember, sent time.Time) { // owned by close, which waits for calls
			defer k.calls.Done()
			resp, err := k.heartbeatConsumer(context.Background(), m)
			results <- consumerHeartbeat{m, lostAt, sent, resp, err}
		}(m, time.Now())
	}
	for {
		raised, _ := cm.fence.channels()
		if drained {
			raised = nil
		}
		ok := true
		select {
		case <-cm.guardStop:
			return
		case sent := <-k.joined:
			lastAnswered = sent
			if cm.answeredBy(cm.notBefore(sent.Add(k.fenceAfter())), deadline) {
				drained = false
			}
		case <-next.C:
			send()
			next.Reset(k.consumerInterval())
		case <-c.reconciled:
			if inFlight {
				again = true
			} else {
				send()
			}
		case r := <-results:
			inFlight = false
			wait := k.consumerInterval()
			var err error
			if r.err != nil {
				err = r.err
			} else {
				err = kerr.ErrorForCode(r.resp.ErrorCode)
			}
			switch code := codeOf(r.resp); {
			case r.err == nil && code == 0:
				if !k.takeHeartbeat(r.resp, r.lostAt, r.sent) {
					break
				}
				lastAnswered = r.sent
				by := r.sent.Add(k.fenceAfter())
				c.mu.Lock()
				if !c.revoking.IsZero() {
					if limit := c.revoking.Add(time.Duration(float64(k.rebalanceTimeout) * kafkaFenceFraction)); limit.Before(by) {
						by = limit
					}
				}
				c.mu.Unlock()
				if cm.answeredBy(by, deadline) {
					drained = false
				}
			case r.err != nil:
				cm.logf(slog.LevelWarn, "Heartbeat to the group's coordinator failed: %s.", r.err)
				wait = min(wait, consumerRetryAfterFailed)
			case coordinatorMovedCode(code):
				wait = min(wait, consumerRetryAfterFailed)
			case code == kerr.UnknownMemberID.Code || code == int16(errFencedMemberEpoch):
				ok = k.loseConsumer(r.lostAt, code == kerr.UnknownMemberID.Code, err.Error(), &drained, lastAnswered)
			case code == int16(errUnreleasedInstanceID) || code == kerr.FencedInstanceID.Code:
				k.instanceFenced(fmt.Errorf("heartbeat: %w", err)) // its removal token loses the partitions
			default:
				if !reported[code] {
					reported[code] = true
					cm.sendError(fmt.Errorf("kafkaconsumer: heartbeat of group %s: %w (reported once; trying again)", cm.group, err))
				}
				cm.logf(slog.LevelWarn, "Heartbeat to the group's coordinator refused: %s.", err)
			}
			if again {
				again, wait = false, 0
			}
			next.Reset(wait)
		case <-k.removal:
			if !out {
				c.mu.Lock()
				lostAt := c.lostAt
				c.mu.Unlock()
				ok = k.loseConsumer(lostAt, false, "the group's coordinator refused a request of this member", &drained, lastAnswered)
				out = k.fencedOut.Load()
			}
		case <-deadline.C:
			cm.fence.raise() // the case below takes back what sits unread
		case <-raised:
			if !k.fencedOut.Load() {
				cm.logKafkaFence(lastAnswered)
			}
			ok = cm.takeBackAll()
			drained = ok
		}
		if !ok {
			return // stopped while taking back
		}
	}
}

// consumerInterval returns the interval between heartbeats: the
// broker's, or the member's own when shorter (Consumer.Group.Heartbeat.Interval,
// at most a third of Consumer.Group.Session.Timeout), so that the fence,
// counted in the member's session timeout, is not raised between two
// heartbeats answered.
func (k *kafkaCoordinator) consumerInterval() time.Duration {
	c := k.consumer
	c.mu.Lock()
	defer c.mu.Unlock()
	return min(c.interval, k.heartbeatInterval)
}

// loseConsumer handles a removal of the membership of loss count lostAt
// (a later loss was handled already: nothing): the fence goes up, what
// sits unread is taken back, the partitions are lost (no final commit),
// and the manager stops them; then the guard joins again with epoch 0,
// under a new member ID when newID is set. It reports false when the
// guard is stopped meanwhile.
func (k *kafkaCoordinator) loseConsumer(lostAt int, newID bool, reason string, drained *bool, lastAnswered time.Time) bool {
	cm, c := k.cm, k.consumer
	c.mu.Lock()
	if lostAt != c.lostAt {
		c.mu.Unlock()
		return true
	}
	c.lostAt++
	c.pending, c.revoking = nil, time.Time{}
	c.mu.Unlock()
	if cm.fence.raise() {
		cm.logKafkaFence(lastAnswered)
	}
	if !cm.takeBackAll() {
		return false
	}
	*drained = true
	m := k.current()
	for _, pm := range *cm.pms.Load() {
		pm.lose()
	}
	if k.fencedOut.Load() {
		cm.logf(slog.LevelWarn, "Fenced out of the group at epoch %d (%s): its partitions are lost, with what was acked since the last commit; consuming nothing until closed.", m.generation, reason)
		k.setMember(groupMember{id: m.id, generation: sarama.GroupGenerationUndefined})
	} else {
		cm.logf(slog.LevelWarn, "Removed from the group at epoch %d (%s): its partitions are lost, with what was acked since the last commit; joining again.", m.generation, reason)
		id := m.id
		if newID {
			id = newMemberID()
		}
		k.setMember(groupMember{id: id, generation: 0})
	}
	k.lost.Store(true)
	k.requestRejoin(m.generation)
	return true
}

// commitLost handles a commit that the coordinator refused because this
// member lost its partitions (FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID):
// the guard loses them, as for a heartbeat answered so.
func (k *kafkaCoordinator) commitLost() {
	if k.consumer != nil {
		k.signalRemoval()
	}
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

// offsetCommitV9 is an OffsetCommit request of version 9 at most: the
// last that names the topics (10 takes their IDs), and the first whose
// member epoch the coordinator of a consumer-protocol group takes.
type offsetCommitV9 struct{ *kmsg.OffsetCommitRequest }

// MaxVersion implements kmsg.Request.
func (offsetCommitV9) MaxVersion() int16 { return 9 }

// commitConsumer sends the sarama OffsetCommit req as OffsetCommit v9,
// with the member's epoch in its generation field, and returns the answer
// as sarama's, for the offset store (commitChunk).
func (k *kafkaCoordinator) commitConsumer(req *sarama.OffsetCommitRequest, tps []TopicPartition) (*sarama.OffsetCommitResponse, error) {
	kreq := kmsg.NewPtrOffsetCommitRequest()
	kreq.Group = req.ConsumerGroup
	kreq.Generation = req.ConsumerGroupGeneration
	kreq.MemberID = req.ConsumerID
	kreq.InstanceID = req.GroupInstanceId
	topics := make(map[string]int)
	for _, tp := range tps {
		offset, metadata, err := req.Offset(tp.Topic, tp.Partition)
		if err != nil {
			continue // not in the request
		}
		i, ok := topics[tp.Topic]
		if !ok {
			i = len(kreq.Topics)
			topics[tp.Topic] = i
			kreq.Topics = append(kreq.Topics, kmsg.OffsetCommitRequestTopic{Topic: tp.Topic})
		}
		p := kmsg.NewOffsetCommitRequestTopicPartition()
		p.Partition, p.Offset, p.LeaderEpoch, p.Metadata = tp.Partition, offset, -1, &metadata
		kreq.Topics[i].Partitions = append(kreq.Topics[i].Partitions, p)
	}
	resp, err := k.consumer.t.coordinatorRequest(context.Background(), offsetCommitV9{kreq})
	if err != nil {
		return nil, err
	}
	out := &sarama.OffsetCommitResponse{Version: 8}
	moved := false
	for _, t := range resp.(*kmsg.OffsetCommitResponse).Topics {
		for _, p := range t.Partitions {
			out.AddError(t.Topic, p.Partition, sarama.KError(p.ErrorCode))
			moved = moved || coordinatorMovedCode(p.ErrorCode)
		}
	}
	if moved {
		k.consumer.t.forgetCoordinator()
	}
	return out, nil
}
