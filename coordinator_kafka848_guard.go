package kafkaconsumer

// The guard of a GroupProtocolConsumer member (coordinator_kafka848.go):
// its heartbeats, the fence, and the losses of the membership.

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

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

// consumerGuard is the state of guardConsumer's loop, owned by the guard
// goroutine.
type consumerGuard struct {
	k *kafkaCoordinator
	// results receives the answer of the heartbeat in flight (buffer 1:
	// one in flight at a time).
	results chan consumerHeartbeat
	// next fires at the next heartbeat; deadline when the fence goes up.
	next, deadline *time.Timer
	// inFlight: a heartbeat is in flight; again: send the next one as
	// soon as it is answered; drained: what sat unread was taken back
	// since the fence went up; out: fenced out for good.
	inFlight, again, drained, out bool
	// lastAnswered is the send of the last heartbeat answered.
	lastAnswered time.Time
	// reported holds the error codes sent to Errors() already.
	reported map[int16]bool
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
	g := &consumerGuard{
		k:            k,
		results:      make(chan consumerHeartbeat, 1),
		next:         time.NewTimer(k.consumerInterval()),
		deadline:     time.NewTimer(time.Hour),
		lastAnswered: time.Now(),
		reported:     map[int16]bool{},
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
			g.answered(sent, cm.notBefore(sent.Add(k.fenceAfter())))
		case <-g.next.C:
			g.send()
			g.next.Reset(k.consumerInterval())
		case <-c.reconciled:
			if g.inFlight {
				g.again = true
			} else {
				g.send()
			}
		case r := <-g.results:
			ok = g.take(r)
		case <-k.removal:
			ok = g.removed()
		case <-g.deadline.C:
			cm.fence.raise() // the case below takes back what sits unread
		case <-raised:
			if !k.fencedOut.Load() {
				cm.logKafkaFence(g.lastAnswered)
			}
			ok = cm.takeBackAll()
			g.drained = ok
		}
		if !ok {
			return // stopped while taking back
		}
	}
}

// send sends a heartbeat of the current membership on a goroutine of its
// own, unless one is in flight or the member is out of the group.
func (g *consumerGuard) send() {
	k, c := g.k, g.k.consumer
	c.mu.Lock()
	lostAt := c.lostAt
	c.mu.Unlock()
	m := k.current()
	if g.inFlight || m.generation < 0 || k.lost.Load() || k.fencedOut.Load() {
		return
	}
	g.inFlight = true
	k.calls.Add(1)
	go func(m groupMember, sent time.Time) { // owned by close, which waits for calls
		defer k.calls.Done()
		resp, err := k.heartbeatConsumer(context.Background(), m)
		g.results <- consumerHeartbeat{m, lostAt, sent, resp, err}
	}(m, time.Now())
}

// answered moves the fence's deadline to by after a heartbeat sent at
// sent was answered.
func (g *consumerGuard) answered(sent, by time.Time) {
	cm := g.k.cm
	g.lastAnswered = sent
	if cm.answeredBy(by, g.deadline) {
		g.drained = false
	}
}

// take handles the answer r of a heartbeat (see guardConsumer) and sets
// the timer of the next. It reports false when the guard is stopped
// meanwhile.
func (g *consumerGuard) take(r consumerHeartbeat) bool {
	k, cm := g.k, g.k.cm
	g.inFlight = false
	wait := k.consumerInterval()
	err := r.err
	if err == nil {
		err = kerr.ErrorForCode(r.resp.ErrorCode)
	}
	ok := true
	switch code := codeOf(r.resp); {
	case r.err == nil && code == 0:
		if k.takeHeartbeat(r.resp, r.lostAt, r.sent) {
			g.answeredConsumer(r.sent)
		}
	case r.err != nil:
		cm.logf(slog.LevelWarn, "Heartbeat to the group's coordinator failed: %s.", r.err)
		wait = min(wait, consumerRetryAfterFailed)
	case coordinatorMovedCode(code):
		wait = min(wait, consumerRetryAfterFailed)
	case code == kerr.UnknownMemberID.Code || code == int16(errFencedMemberEpoch):
		ok = k.loseConsumer(r.lostAt, code == kerr.UnknownMemberID.Code, err.Error(), &g.drained, g.lastAnswered)
	case code == kerr.GroupIDNotFound.Code && r.member.generation > 0:
		// The brokers converted the group to a classic one once this
		// member's session ended (the last consumer-protocol member among
		// classic ones): only a heartbeat of epoch 0 converts it back.
		ok = k.loseConsumer(r.lostAt, true, err.Error()+" (the group became a classic group)", &g.drained, g.lastAnswered)
	case code == int16(errUnreleasedInstanceID) || code == kerr.FencedInstanceID.Code:
		k.instanceFenced(fmt.Errorf("heartbeat: %w", err)) // its removal token loses the partitions
	default:
		g.refused(code, err)
	}
	if g.again {
		g.again, wait = false, 0
	}
	g.next.Reset(wait)
	return ok
}

// answeredConsumer moves the fence's deadline after a heartbeat sent at
// sent was answered without error: 0.8 × the session timeout after the
// send, and while a revocation is reconciled at most 0.8 × the rebalance
// timeout after the send of the heartbeat that brought it.
func (g *consumerGuard) answeredConsumer(sent time.Time) {
	k, c := g.k, g.k.consumer
	by := sent.Add(k.fenceAfter())
	c.mu.Lock()
	if !c.revoking.IsZero() {
		if limit := c.revoking.Add(time.Duration(float64(k.rebalanceTimeout) * kafkaFenceFraction)); limit.Before(by) {
			by = limit
		}
	}
	c.mu.Unlock()
	g.answered(sent, by)
}

// refused handles a heartbeat refused with an error that is neither a
// loss nor a move of the coordinator: sent to Errors() once per code,
// logged each time.
func (g *consumerGuard) refused(code int16, err error) {
	cm := g.k.cm
	if !g.reported[code] {
		g.reported[code] = true
		cm.sendError(fmt.Errorf("kafkaconsumer: heartbeat of group %s: %w (reported once; trying again)", cm.group, err))
	}
	cm.logf(slog.LevelWarn, "Heartbeat to the group's coordinator refused: %s.", err)
}

// removed handles a removal that another request of the member learnt
// (commitLost, instanceFenced). It reports false when the guard is
// stopped meanwhile.
func (g *consumerGuard) removed() bool {
	k, c := g.k, g.k.consumer
	if g.out {
		return true
	}
	c.mu.Lock()
	lostAt := c.lostAt
	c.mu.Unlock()
	ok := k.loseConsumer(lostAt, false, "the group's coordinator refused a request of this member", &g.drained, g.lastAnswered)
	g.out = k.fencedOut.Load()
	return ok
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
