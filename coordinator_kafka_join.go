package kafkaconsumer

// The join of a Kafka-coordinated member (coordinator_kafka.go): the
// JoinGroup and SyncGroup of each generation, retried until the member
// has an assignment; what a removal from the group costs; the log line
// of a generation joined.

import (
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/IBM/sarama"
	"github.com/wvanbergen/kazoo-go"
)

// join joins the group and syncs, retrying until it has the assignment of
// a generation, or until the manager is interrupted (ok is false then).
func (k *kafkaCoordinator) join(partitions kazoo.PartitionList) (assigned map[TopicPartition]assignment, ok bool) {
	cm := k.cm
	k.joining.Store(true)
	defer k.joining.Store(false)
	for attempt := 0; ; attempt++ {
		assigned, err := k.joinOnce(partitions)
		if k.fencedOut.Load() {
			return nil, k.stayOut() // fenced by another request meanwhile
		}
		if err == nil {
			k.reportedJoin = nil // reported again should they come back
			return assigned, true
		}
		select {
		case <-cm.t.Dying():
			return nil, false
		default:
		}
		var kerr sarama.KError
		errors.As(err, &kerr)
		switch {
		case errors.Is(err, errRejoin):
			attempt = -1 // at once: the coordinator asked for it
			continue
		case errors.Is(kerr, sarama.ErrUnknownMemberId):
			cm.logf(slog.LevelWarn, "No longer a member of the group (%s): the partitions are lost, with what was acked since the last commit; joining anew.", err)
			k.removedFromGroup()
			cm.reportStops(cm.managePartitionManagers(nil))
			attempt = -1
			continue
		case errors.Is(kerr, sarama.ErrFencedInstancedId):
			k.instanceFenced(err)
			return nil, k.stayOut()
		case errors.Is(kerr, sarama.ErrInconsistentGroupProtocol):
			k.reportJoinError(kerr, fmt.Errorf("kafkaconsumer: join group %s: %w: its members use another protocol than %q (another kind of consumer, or instances coordinated otherwise); trying again until they leave", cm.group, err, kafkaProtocol))
		default:
			if permanent := k.permanentJoinError(err); permanent != nil {
				k.reportJoinError(kerr, fmt.Errorf("%w; trying again every second", permanent))
			}
		}
		cm.logf(slog.LevelWarn, "Failed to join the group: %s. Trying again.", err)
		if !sleepOrDie(&cm.t, attempt) {
			return nil, false
		}
	}
}

// reportJoinError sends err, the error of a JoinGroup answered kerr, to
// Errors(), unless an answer kerr was reported since the last generation
// joined.
func (k *kafkaCoordinator) reportJoinError(kerr sarama.KError, err error) {
	if k.reportedJoin[kerr] {
		return
	}
	if k.reportedJoin == nil {
		k.reportedJoin = make(map[sarama.KError]bool)
	}
	k.reportedJoin[kerr] = true
	k.cm.sendError(err)
}

// permanentJoinError returns the error of a JoinGroup answered err when
// no retry mends it, naming the error and what to change, nil for any
// other err: INVALID_SESSION_TIMEOUT (wrapping ErrInvalidConfig too),
// GROUP_AUTHORIZATION_FAILED, GROUP_MAX_SIZE_REACHED. Each wraps err.
func (k *kafkaCoordinator) permanentJoinError(err error) error {
	cm := k.cm
	switch {
	case errors.Is(err, sarama.ErrInvalidSessionTimeout):
		return fmt.Errorf("%w: join group %s: %w: Consumer.Group.Session.Timeout (%s) is outside the brokers' group.min.session.timeout.ms and group.max.session.timeout.ms; set it between them",
			ErrInvalidConfig, cm.group, err, k.sessionTimeout)
	case errors.Is(err, sarama.ErrGroupAuthorizationFailed):
		return fmt.Errorf("kafkaconsumer: join group %s: %w: the brokers' ACLs do not allow this client's principal (Net.SASL or Net.TLS) to READ the group; grant it READ on group %s",
			cm.group, err, cm.group)
	case errors.Is(err, sarama.ErrGroupMaxSizeReached):
		return fmt.Errorf("kafkaconsumer: join group %s: %w: the group has as many members as the brokers' group.max.size allows; raise group.max.size or run fewer instances (this one joins when a member leaves)",
			cm.group, err)
	}
	return nil
}

// firstJoin sends the first JoinGroup of a dynamic member (no
// InstanceID), which Join waits for: without a member ID, the
// coordinator answers it at once (KIP-394, JoinGroup v4, Version 2.2.0
// and later) with MEMBER_ID_REQUIRED and the ID that the manager's first
// JoinGroup then carries, or with an error. It returns the error of
// INVALID_SESSION_TIMEOUT and GROUP_AUTHORIZATION_FAILED
// (permanentJoinError), which fail Join; nil for any other answer, which
// the manager's JoinGroup meets again. A static member's JoinGroup waits
// for the rebalance: Join does not send it, and its errors go to
// Errors().
func (k *kafkaCoordinator) firstJoin() error {
	if k.instanceID != nil || sarama.NewJoinGroupRequest(k.cm.config.Version).Version < 4 {
		return nil
	}
	broker, err := k.coordinatorBroker()
	if err == nil {
		_, _, err = k.sendJoinGroup(broker, nil)
	}
	if errors.Is(err, sarama.ErrGroupMaxSizeReached) {
		return nil // a member may leave before the manager joins
	}
	return k.permanentJoinError(err)
}

// errRejoin is what joinOnce returns when the coordinator asks for a new
// JoinGroup at once (MEMBER_ID_REQUIRED, REBALANCE_IN_PROGRESS at the
// sync).
var errRejoin = errors.New("join again")

// removedFromGroup handles a removal from the group that the manager
// goroutine learnt of: the guard, as for one it learns of itself, raises
// the fence, takes back what sits unread once no partition hands out,
// and loses the membership (loseMembership); removedFromGroup waits for
// that, or until the manager is interrupted. A removal that the guard
// handled already (lost is set) is not signalled again. The next
// generation synced lifts the fence.
func (k *kafkaCoordinator) removedFromGroup() {
	cm := k.cm
	if !k.lost.Load() {
		k.signalRemoval()
	}
	for !k.lost.Load() {
		select {
		case <-k.rejoin:
		case <-cm.t.Dying():
			return
		}
	}
	k.lost.Store(false) // the caller stops the partitions
}

// signalRemoval tells the guard, without blocking, that this member was
// removed from its current generation, or fenced out.
func (k *kafkaCoordinator) signalRemoval() {
	select {
	case k.removal <- k.current().generation:
	default:
	}
}

// loseMembership records that this member was removed from the group:
// every partition is lost (no final commit: Kafka refuses it, and another
// member may own the partition), and the next JoinGroup is a new
// member's.
func (k *kafkaCoordinator) loseMembership() {
	for _, pm := range *k.cm.pms.Load() {
		pm.lose()
	}
	k.setMember(groupMember{generation: sarama.GroupGenerationUndefined})
}

// ownedPartitions returns the partitions this member runs, for its
// JoinGroup (KIP-429's owned partitions): every partition manager not
// lost. The manager goroutine calls it between rounds, when no partition
// is stopping.
func (k *kafkaCoordinator) ownedPartitions() map[string][]int32 {
	owned := make(map[string][]int32)
	for tp, pm := range *k.cm.pms.Load() {
		if !pm.isLost() {
			owned[tp.Topic] = append(owned[tp.Topic], tp.Partition)
		}
	}
	for _, ps := range owned {
		sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	}
	return owned
}

// joinOnce sends one JoinGroup and, when it succeeds, one SyncGroup, and
// returns this member's assignment. The leader computes the assignment of
// every member (assign).
func (k *kafkaCoordinator) joinOnce(partitions kazoo.PartitionList) (map[TopicPartition]assignment, error) {
	var broker *sarama.Broker
	// Through call: the offset store's lookup of the coordinator may
	// wait for one under way, to a broker that hangs.
	if err := k.call(func() (err error) { broker, err = k.coordinatorBroker(); return err }); err != nil {
		return nil, err
	}
	resp, meta, err := k.sendJoinGroup(broker, partitions)
	if err != nil {
		return nil, err
	}
	member := groupMember{id: resp.MemberId, generation: resp.GenerationId}
	mine, syncSent, err := k.sendSyncGroup(broker, resp, member, partitions)
	if err != nil {
		return nil, err
	}
	assigned := k.takeAssignment(member, mine, meta.Topics, syncSent)
	k.cm.logf(slog.LevelInfo, "%s", joinedLine(resp, len(assigned)))
	return assigned, nil
}

// sendJoinGroup sends this member's JoinGroup, with its subscription and
// the partitions it owns, to broker, the group's coordinator, and returns
// the answer and the metadata sent. An answer that asks for another
// JoinGroup at once is errRejoin.
func (k *kafkaCoordinator) sendJoinGroup(broker *sarama.Broker, partitions kazoo.PartitionList) (*sarama.JoinGroupResponse, *sarama.ConsumerGroupMemberMetadata, error) {
	cm := k.cm
	req := sarama.NewJoinGroupRequest(cm.config.Version)
	req.GroupId = cm.group
	req.MemberId = k.current().id
	req.SessionTimeout = int32(k.sessionTimeout / time.Millisecond)
	req.RebalanceTimeout = int32(k.rebalanceTimeout / time.Millisecond)
	req.ProtocolType = kafkaProtocolType
	if req.Version >= 5 {
		req.GroupInstanceId = k.instanceID
	}
	meta := k.joinMetadata(partitions)
	if err := req.AddGroupProtocolMetadata(kafkaProtocol, meta); err != nil {
		return nil, nil, err
	}
	cm.logf(slog.LevelDebug, "Joining the group (member %q, generation %d, %d topics owned).", req.MemberId, k.current().generation, len(meta.OwnedPartitions))
	var resp *sarama.JoinGroupResponse
	if err := k.call(func() (err error) { resp, err = broker.JoinGroup(req); return err }); err != nil {
		return nil, nil, k.coordinatorFailed(broker, err)
	}
	switch {
	case errors.Is(resp.Err, sarama.ErrMemberIdRequired):
		k.setMember(groupMember{id: resp.MemberId, generation: sarama.GroupGenerationUndefined})
		return nil, nil, errRejoin
	case !errors.Is(resp.Err, sarama.ErrNoError):
		if errors.Is(resp.Err, sarama.ErrUnknownMemberId) && k.current().generation < 0 {
			k.setMember(groupMember{generation: sarama.GroupGenerationUndefined}) // a member ID that expired before its first generation
			return nil, nil, errRejoin
		}
		return nil, nil, fmt.Errorf("join group %s: %w", cm.group, k.coordinatorFailed(broker, resp.Err))
	}
	if cur := k.current(); cur.id == "" {
		// The coordinator named this member (a Kafka before 2.2 does so
		// in the first JoinGroup's answer): the next JoinGroup, should
		// the SyncGroup fail, must carry the ID, or the coordinator
		// counts a second member and waits for the first to expire.
		k.setMember(groupMember{id: resp.MemberId, generation: cur.generation})
	}
	return resp, meta, nil
}

// sendSyncGroup sends member's SyncGroup of the generation that the
// JoinGroup answered resp, with every member's assignment when this
// member leads, and returns this member's assignment (nil: none) and the
// time the SyncGroup was sent. An answer that asks for another JoinGroup
// is errRejoin.
func (k *kafkaCoordinator) sendSyncGroup(broker *sarama.Broker, resp *sarama.JoinGroupResponse, member groupMember, partitions kazoo.PartitionList) (*sarama.ConsumerGroupMemberAssignment, time.Time, error) {
	cm := k.cm
	sync := syncGroupRequest(cm.config.Version, cm.group, member, k.instanceID)
	if resp.LeaderId == resp.MemberId {
		plan, userData, err := k.assign(resp, partitions)
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("assign the group's partitions: %w", err)
		}
		for id, topics := range plan {
			a := &sarama.ConsumerGroupMemberAssignment{Topics: topics, UserData: userData[id]}
			if err := sync.AddGroupAssignmentMember(id, a); err != nil {
				return nil, time.Time{}, err
			}
		}
	}
	var syncResp *sarama.SyncGroupResponse
	sent := time.Now()
	if err := k.call(func() (err error) { syncResp, err = broker.SyncGroup(sync); return err }); err != nil {
		return nil, sent, k.coordinatorFailed(broker, err)
	}
	switch {
	case errors.Is(syncResp.Err, sarama.ErrRebalanceInProgress):
		return nil, sent, errRejoin // another member joined meanwhile
	case errors.Is(syncResp.Err, sarama.ErrIllegalGeneration):
		// A later generation completed meanwhile: the next JoinGroup
		// tells whether this member is still in the group.
		return nil, sent, errRejoin
	case !errors.Is(syncResp.Err, sarama.ErrNoError):
		return nil, sent, fmt.Errorf("sync group %s: %w", cm.group, k.coordinatorFailed(broker, syncResp.Err))
	}
	mine, err := syncResp.GetMemberAssignment()
	if err != nil {
		return nil, sent, fmt.Errorf("sync group %s: the assignment: %w", cm.group, err)
	}
	return mine, sent, nil
}

// takeAssignment makes member, synced with the SyncGroup sent at
// syncSent, the current member, tells the guard, and returns its
// assignment mine as partitions to run: those of the topics it
// subscribes to (subscribed) only. Partitions of other topics (a leader
// running older code) are not run, and the member joins again, with
// backoff (refuseForeign). A leader watches the topics that only the
// other members subscribe to (watchOthers).
func (k *kafkaCoordinator) takeAssignment(member groupMember, mine *sarama.ConsumerGroupMemberAssignment, subscribed []string, syncSent time.Time) map[TopicPartition]assignment {
	k.setMember(member)
	if mine != nil && expectsRebalance(mine.UserData) {
		k.expectRebalance()
	}
	k.tellJoined(syncSent)
	k.watchOthers(member.generation)
	var topics map[string][]int32
	if mine != nil {
		topics = mine.Topics
	}
	topics, foreign := subscribedOnly(topics, subscribed)
	k.refuseForeign(member.generation, foreign)
	assigned := make(map[TopicPartition]assignment)
	for topic, ids := range topics {
		t := kazooValues.Topic(topic)
		for _, id := range ids {
			assigned[TopicPartition{Topic: topic, Partition: id}] = assignment{partition: t.Partition(id, nil)}
		}
	}
	return assigned
}

// joinedLine is the log line of a generation joined, with the JoinGroup's
// answer resp and the number of partitions assigned to this member. The
// coordinator lists the members to the leader alone: a follower's line
// names the leader instead.
func joinedLine(resp *sarama.JoinGroupResponse, assigned int) string {
	if resp.LeaderId == resp.MemberId {
		return fmt.Sprintf("Joined generation %d of the group as %s, as the leader: %d members, %d partitions assigned to this member.",
			resp.GenerationId, resp.MemberId, len(resp.Members), assigned)
	}
	return fmt.Sprintf("Joined generation %d of the group as %s (the leader is %s): %d partitions assigned to this member.",
		resp.GenerationId, resp.MemberId, resp.LeaderId, assigned)
}

// tellJoined tells the guard that the SyncGroup sent at sent made this
// member part of a generation: an answer of the coordinator, which
// counts the member's session anew when it hands out the generation's
// assignments, after it received every member's SyncGroup (so after
// sent).
func (k *kafkaCoordinator) tellJoined(sent time.Time) {
	for {
		select {
		case k.joined <- sent:
			return
		default:
		}
		select {
		case <-k.joined: // not taken yet: replaced
		default:
		}
	}
}

// syncGroupRequest returns a SyncGroup request of member, of the version
// sarama's consumer group sends for version.
func syncGroupRequest(version sarama.KafkaVersion, group string, member groupMember, instanceID *string) *sarama.SyncGroupRequest {
	req := &sarama.SyncGroupRequest{GroupId: group, MemberId: member.id, GenerationId: member.generation}
	for _, step := range []struct {
		from    sarama.KafkaVersion
		version int16
	}{{sarama.V0_11_0_0, 1}, {sarama.V2_0_0_0, 2}, {sarama.V2_3_0_0, 3}, {sarama.V2_4_0_0, 4}, {sarama.V2_5_0_0, 5}} {
		if version.IsAtLeast(step.from) {
			req.Version = step.version
		}
	}
	if req.Version >= 3 {
		req.GroupInstanceId = instanceID
	}
	if req.Version >= 5 {
		protocolType, protocol := kafkaProtocolType, kafkaProtocol
		req.ProtocolType, req.ProtocolName = &protocolType, &protocol
	}
	return req
}
