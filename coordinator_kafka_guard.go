package kafkaconsumer

// The Kafka coordinator's guard: the goroutine that heartbeats to the
// group's coordinator and keeps the fence (fence.go) of a
// Kafka-coordinated group, as the ZooKeeper guard does for a session.
//
// The margin: the coordinator removes a member the session timeout S
// after the last heartbeat it received, or after it handed out the
// assignments of the member's last generation (which follows the
// member's SyncGroup), so never before the send of the last heartbeat or
// SyncGroup it answered plus S. A completed join is such an answer: its
// deadline counts from the SyncGroup's send, and never moves the
// deadline backwards (a JoinGroup may wait longer than S for a member
// that died). The guard fences at 0.8 × S after that send
// (kafkaFenceFraction), which keeps 0.2 × S (2 s with sarama's default
// 10 s) for a coordinator whose clock runs faster, the network, and the
// partitions' stop. During a rebalance the heartbeats are answered
// (REBALANCE_IN_PROGRESS), but the coordinator removes a member that has
// not joined within the rebalance timeout R of the rebalance's start,
// which followed the send of the last heartbeat answered without error:
// until the member has joined, the fence's deadline is also at most that
// send + 0.8 × R. The manager joins at once, and R covers a member that
// first stops its revoked partitions (newKafkaCoordinator), so this
// deadline is one that a member meets unless it hangs.

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/IBM/sarama"
)

// kafkaFenceFraction is the share of the session timeout (or, during a
// rebalance, of the rebalance timeout), counted from the send of the last
// heartbeat answered, after which a member of a Kafka-coordinated group
// is fenced.
const kafkaFenceFraction = 0.8

// fenceAfter is how long after the send of the last heartbeat answered
// the member is fenced.
func (k *kafkaCoordinator) fenceAfter() time.Duration {
	return time.Duration(float64(k.sessionTimeout) * kafkaFenceFraction)
}

// startKafkaGuard starts the guard goroutine of k; closeConnections (or
// beforeKafkaClose) stops it with stopGuard.
func (cm *consumerManager) startKafkaGuard(k *kafkaCoordinator) {
	cm.guardStop, cm.guardDone = make(chan struct{}), make(chan struct{})
	go k.guard()
}

// guard is the guard goroutine of a Kafka-coordinated group. While the
// member is in a generation it sends a heartbeat every heartbeatInterval
// (every awaitingHeartbeat while it expects a rebalance: expectRebalance;
// one in flight at a time) and:
//   - answered without error, it moves the fence's deadline to the
//     heartbeat's send + 0.8 × S, and lifts the fence when that is ahead;
//   - answered REBALANCE_IN_PROGRESS, it asks the manager to join again,
//     and keeps the deadline within 0.8 × R of the last answer without
//     error (see the file's comment);
//   - answered UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION or
//     FENCED_INSTANCE_ID, the member was removed: the fence goes up, the
//     partitions are lost, and the manager joins anew (unless it is
//     joining already, which finds out itself);
//   - not answered, nothing: the deadline comes, and the fence goes up.
//
// When the fence is up (raised here, by the hand-out path or by a
// commit), it takes back what sits unread in Messages, as the ZooKeeper
// guard does. The manager tells it of each generation synced (joined):
// an answer as a heartbeat's, counted from the SyncGroup's send, which
// never moves the deadline backwards.
func (k *kafkaCoordinator) guard() {
	cm := k.cm
	defer close(cm.guardDone)
	g := &kafkaGuard{
		k:        k,
		results:  make(chan heartbeatResult, 1),
		next:     time.NewTimer(k.heartbeatInterval),
		deadline: time.NewTimer(time.Hour),
	}
	g.deadline.Stop()
	defer g.next.Stop()
	defer g.deadline.Stop()
	for {
		raised, _ := cm.fence.channels()
		if g.drained {
			raised = nil
		}
		ok := true
		select {
		case <-cm.guardStop:
			return
		case sent := <-k.joined:
			g.joined(sent)
		case <-g.next.C:
			g.sendHeartbeat()
		case r := <-g.results:
			ok = g.answered(r)
		case generation := <-k.removal:
			ok = g.removed(generation)
		case <-g.deadline.C:
			cm.fence.raise() // the case below takes back what sits unread
		case <-raised:
			if !k.fencedOut.Load() { // instanceFenced said why
				cm.logKafkaFence(g.stableSent)
			}
			ok = cm.takeBackAll()
			g.drained = ok
		}
		if !ok {
			return // stopped while taking back
		}
	}
}

// kafkaGuard is the state of the Kafka guard's goroutine (guard), which
// alone uses it.
type kafkaGuard struct {
	k        *kafkaCoordinator
	results  chan heartbeatResult // the heartbeat in flight's answer (buffer 1)
	inFlight bool                 // a heartbeat is in flight
	next     *time.Timer          // the next heartbeat
	deadline *time.Timer          // the fence's deadline
	// drained: what sat unread was taken back since the fence went up.
	drained bool
	// out: lose ran for a member fenced out (instanceFenced).
	out bool
	// stableSent is the send of the last heartbeat (or SyncGroup)
	// answered without error.
	stableSent time.Time
	// rebalancing: a heartbeat was answered REBALANCE_IN_PROGRESS since.
	rebalancing bool
}

// heartbeatResult is the answer to the heartbeat of member sent at sent.
type heartbeatResult struct {
	member groupMember
	sent   time.Time
	err    error
}

// joined handles a generation synced, with the SyncGroup sent at sent:
// an answer as a heartbeat's, which never moves the deadline backwards.
func (g *kafkaGuard) joined(sent time.Time) {
	k, cm := g.k, g.k.cm
	if k.fencedOut.Load() {
		return // final: the fence stays up
	}
	g.stableSent, g.rebalancing = sent, false
	if cm.answeredBy(cm.notBefore(sent.Add(k.fenceAfter())), g.deadline) {
		g.drained = false
	}
	if !g.inFlight {
		g.next.Reset(k.nextHeartbeat())
	}
}

// sendHeartbeat sends the member's heartbeat on a goroutine of its own,
// unless one is in flight or the member is in no generation (joined
// tells when there is one).
func (g *kafkaGuard) sendHeartbeat() {
	k := g.k
	m := k.current()
	if m.generation < 0 || g.inFlight || k.fencedOut.Load() {
		return
	}
	g.inFlight = true
	k.calls.Add(1)
	go func(m groupMember, sent time.Time) { // owned by close, which waits for calls
		defer k.calls.Done()
		g.results <- heartbeatResult{m, sent, k.heartbeat(m)}
	}(m, time.Now())
}

// answered handles the answer r to a heartbeat (see guard). It reports
// false when the guard is stopped meanwhile.
func (g *kafkaGuard) answered(r heartbeatResult) bool {
	k, cm := g.k, g.k.cm
	g.inFlight = false
	current := r.member == k.current()
	if current && errors.Is(r.err, sarama.ErrRebalanceInProgress) {
		// The rebalance expected came. An answer to a heartbeat of a
		// generation left behind tells nothing of the current one's.
		k.awaitingUntil.Store(0)
	}
	g.next.Reset(k.nextHeartbeat())
	if !current || k.fencedOut.Load() {
		return true // a generation left behind, or fenced out for good
	}
	switch {
	case r.err == nil:
		g.stableSent, g.rebalancing = r.sent, false
		if cm.answeredBy(r.sent.Add(k.fenceAfter()), g.deadline) {
			g.drained = false
		}
	case errors.Is(r.err, sarama.ErrRebalanceInProgress):
		if !g.rebalancing {
			g.rebalancing = true
			cm.logf(slog.LevelInfo, "The group rebalances (generation %d ends); joining again.", r.member.generation)
		}
		k.requestRejoin(r.member.generation)
		by := r.sent.Add(k.fenceAfter())
		if limit := g.stableSent.Add(time.Duration(float64(k.rebalanceTimeout) * kafkaFenceFraction)); limit.Before(by) {
			by = limit
		}
		if cm.answeredBy(by, g.deadline) {
			g.drained = false
		}
	case errors.Is(r.err, sarama.ErrFencedInstancedId):
		k.instanceFenced(fmt.Errorf("heartbeat: %w", r.err)) // its removal token makes guard lose the partitions
	case removed(r.err):
		if k.joining.Load() {
			return true // the manager's JoinGroup finds out itself
		}
		return g.lose(r.member.generation, r.err.Error())
	default:
		cm.logf(slog.LevelWarn, "Heartbeat to the group's coordinator failed: %s.", r.err)
	}
	return true
}

// removed handles the removal from generation that the manager goroutine
// learnt of (removedFromGroup), or a fence out (instanceFenced): lose,
// unless the member synced another generation since. It reports false
// when the guard is stopped meanwhile.
func (g *kafkaGuard) removed(generation int32) bool {
	k := g.k
	if k.fencedOut.Load() {
		return g.lose(k.current().generation, "FENCED_INSTANCE_ID")
	}
	if generation != k.current().generation {
		return true // handled already: a later generation was synced since
	}
	return g.lose(generation, "the group's coordinator answered the JoinGroup or SyncGroup so")
}

// lose handles a removal from the group: the fence goes up, what sits
// unread is taken back, the partitions are lost, and the manager joins
// anew (or, fenced out, stays out). It reports false when the guard is
// stopped meanwhile.
func (g *kafkaGuard) lose(generation int32, reason string) bool {
	k, cm := g.k, g.k.cm
	if g.out {
		k.lost.Store(true) // lost already: tell the manager again
		k.requestRejoin(generation)
		return true
	}
	if cm.fence.raise() {
		cm.logKafkaFence(g.stableSent)
	}
	if !cm.takeBackAll() {
		return false
	}
	g.drained = true
	if g.out = k.fencedOut.Load(); g.out {
		cm.logf(slog.LevelWarn, "Fenced out of the group's generation %d (%s): its partitions are lost, with what was acked since the last commit; consuming nothing until closed.", generation, reason)
	} else {
		cm.logf(slog.LevelWarn, "Removed from the group's generation %d (%s): its partitions are lost, with what was acked since the last commit; joining anew.", generation, reason)
	}
	k.loseMembership()
	k.lost.Store(true)
	k.requestRejoin(generation)
	return true
}

// notBefore returns by, or the fence's deadline when that is later: an
// answer of the coordinator never moves the deadline backwards.
func (cm *consumerManager) notBefore(by time.Time) time.Time {
	if current, ok := cm.fenceDeadline(); ok && current.After(by) {
		return current
	}
	return by
}

// instanceFenced handles FENCED_INSTANCE_ID, the answer cause, to any
// request of this member (heartbeat, JoinGroup, SyncGroup, OffsetCommit,
// LeaveGroup): another live instance joined the group with this
// Config.InstanceID, and the coordinator gave it this member's place.
// That is final, as in Kafka's own clients: were this instance to join
// again, it would fence the other in turn, and the two would alternate
// for ever, each swap a window in which both hand out the same
// partitions. The fence goes up at once (no hand-out, no commit), an
// error wrapping ErrInstanceIDInUse goes to Errors(), the guard loses
// every partition (no final commit), and the manager never joins again
// (stayOut) until the consumer is closed. Any goroutine may call it;
// only the first call acts.
func (k *kafkaCoordinator) instanceFenced(cause error) {
	if k.fencedOut.Swap(true) {
		return
	}
	cm := k.cm
	cm.fence.raise()
	err := fmt.Errorf("%w: %s: another live instance joined the group with this Config.InstanceID, and the group's coordinator fenced this one (%s); it consumes nothing more until it is closed", ErrInstanceIDInUse, cm.config.InstanceID, cause)
	cm.sendError(err)
	k.signalRemoval()
}

// stayOut keeps a member fenced out (instanceFenced) out of the group:
// once the guard lost its partitions, they stop (no final commit), and
// the manager waits until it is interrupted, without joining again. It
// returns false, as the manager does when interrupted.
func (k *kafkaCoordinator) stayOut() bool {
	cm := k.cm
	k.removedFromGroup()
	cm.reportStops(cm.managePartitionManagers(nil))
	<-cm.t.Dying()
	return false
}

// removed reports whether err means that the member is not in the
// group's generation any more.
func removed(err error) bool {
	return errors.Is(err, sarama.ErrUnknownMemberId) || errors.Is(err, sarama.ErrIllegalGeneration) || errors.Is(err, sarama.ErrFencedInstancedId)
}

// requestRejoin asks the manager goroutine, without blocking, to join the
// group again; generation is the one the guard learnt it for.
func (k *kafkaCoordinator) requestRejoin(generation int32) {
	k.rejoinFor.Store(generation)
	select {
	case k.rejoin <- struct{}{}:
	default:
	}
}

// heartbeat sends one heartbeat of m to the group's coordinator (on the
// offset store's connection to it: the group client's may be held by a
// JoinGroup), and returns the error of the request or of its answer; one
// that forgets the coordinator (coordinatorMoved, a failed request)
// names its broker.
func (k *kafkaCoordinator) heartbeat(m groupMember) error {
	cm := k.cm
	broker, err := cm.offsets.broker()
	if err != nil {
		return err
	}
	req := &sarama.HeartbeatRequest{GroupId: cm.group, MemberId: m.id, GenerationId: m.generation}
	v := cm.config.Version
	for _, step := range []struct {
		from    sarama.KafkaVersion
		version int16
	}{{sarama.V0_11_0_0, 1}, {sarama.V2_0_0_0, 2}, {sarama.V2_3_0_0, 3}, {sarama.V2_4_0_0, 4}} {
		if v.IsAtLeast(step.from) {
			req.Version = step.version
		}
	}
	if req.Version >= 3 {
		req.GroupInstanceId = k.instanceID
	}
	resp, err := broker.Heartbeat(req)
	if err != nil {
		cm.offsets.forget(broker.ID())
		_ = broker.Close() // the client opens it again on its next use
		return fmt.Errorf("%w (the group's coordinator, %s)", err, brokerName(broker))
	}
	if errors.Is(resp.Err, sarama.ErrNoError) {
		return nil
	}
	if coordinatorMoved(resp.Err) {
		cm.offsets.forget(broker.ID())
		return fmt.Errorf("%w (the group's coordinator, %s)", resp.Err, brokerName(broker))
	}
	return resp.Err
}

// logKafkaFence tells that the fence went up in a Kafka-coordinated group,
// with the send of the last heartbeat or SyncGroup answered (zero for
// none).
func (cm *consumerManager) logKafkaFence(lastAnswered time.Time) {
	cm.fencedAt = time.Now()
	since := "yet"
	if !lastAnswered.IsZero() {
		since = "since " + time.Since(lastAnswered).Round(time.Millisecond).String() + " ago"
	}
	cm.logf(slog.LevelWarn, "No answer from the group's coordinator %s: this member may be removed from the group; handing out and committing nothing until it answers again.", since)
}
