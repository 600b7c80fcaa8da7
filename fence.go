package kafkaconsumer

// Fencing: an instance must not act as the owner of its partitions once
// its ZooKeeper session may have expired on the server, since another
// instance takes them at that expiry. The guard goroutine heartbeats on the
// session with a sync, which a follower answers only after the quorum
// leader did: an answered heartbeat proves that the leader heard from the
// session around its send (a read would not: a follower cut off from the
// leader answers reads alone until it notices, syncLimit × tickTime
// later, while the leader expires the session). At fenceFraction of the
// session timeout after the send of the last answered heartbeat, the
// guard fences the instance: every partition stops handing out, what sits
// unread in Messages is taken back, and no commit goes out, until the same
// session answers again (the fence is lifted: nothing was lost) or the
// session is known to have expired (the partitions are lost: they stop
// without a final commit, and the manager goroutine registers again).
//
// The margin: the leader expires a session the timeout S after the last
// activity it knows of. A follower reports its sessions' activity to the
// leader when the leader pings it, every tickTime/2, so the leader's
// knowledge can lag a heartbeat's send by tickTime/2 plus the interval
// between two heartbeats (S/heartbeatsPerTimeout): the session cannot
// expire before send + S − tickTime/2 − S/10. ZooKeeper negotiates no
// timeout below 2 × tickTime (its default minSessionTimeout), so
// tickTime/2 ≤ S/4, and expiry comes after send + 0.65 × S. Fencing at
// 0.6 × S keeps 0.05 × S for a server clock that runs faster than ours,
// the network and the milliseconds the partitions take to stop; with the
// common tickTime of 2 s and S = 6 s, the margin is 0.8 s.

import (
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
)

// fenceFraction is the share of the session timeout, counted from the
// send time of the last answered heartbeat, after which an instance is
// fenced (the margin it keeps is derived above).
const fenceFraction = 0.6

// heartbeatsPerTimeout is how many heartbeats the guard sends per session
// timeout while they are answered.
const heartbeatsPerTimeout = 10

// errFenced is what a request returns that was not sent because the
// instance is fenced.
var errFenced = errors.New("fenced: the ZooKeeper session may have expired")

// fence is the fencing state of a consumer manager. Its zero value is
// ready to use, down.
type fence struct {
	on atomic.Bool // read on the hand-out path

	mu     sync.Mutex    // guards the channels
	raised chan struct{} // closed when the fence goes up; replaced when it is lifted
	lifted chan struct{} // closed when the fence is lifted; replaced when it goes up
}

// initLocked makes the channels of a zero fence; f.mu held.
func (f *fence) initLocked() {
	if f.raised == nil {
		f.raised, f.lifted = make(chan struct{}), make(chan struct{})
		close(f.lifted)
	}
}

// channels returns the channel that is closed when the fence goes up and
// the one closed when it is lifted, as of now.
func (f *fence) channels() (raised, lifted <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.initLocked()
	return f.raised, f.lifted
}

// raise puts the fence up; it reports false when it was up already.
func (f *fence) raise() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.initLocked()
	if f.on.Load() {
		return false
	}
	f.on.Store(true)
	close(f.raised)
	f.lifted = make(chan struct{})
	return true
}

// lift takes the fence down; it reports false when it was down already.
func (f *fence) lift() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.initLocked()
	if !f.on.Load() {
		return false
	}
	f.on.Store(false)
	close(f.lifted)
	f.raised = make(chan struct{})
	return true
}

// startGuard starts the guard goroutine; lastAnswered is the send time of
// the last request of the session that the quorum leader answered (a
// write, or a sync). shutdown stops it.
func (cm *consumerManager) startGuard(lastAnswered time.Time) {
	cm.guardStop, cm.guardDone = make(chan struct{}), make(chan struct{})
	go cm.guard(cm.zkProbe.SessionID(), lastAnswered)
}

// stopGuard stops the guard goroutine and waits for it.
func (cm *consumerManager) stopGuard() {
	if cm.guardStop != nil {
		close(cm.guardStop)
		<-cm.guardDone
		cm.guardStop = nil
	}
}

// guard is the guard goroutine: it heartbeats on the session with a sync
// (one in flight at a time, heartbeatsPerTimeout per session timeout), raises
// the fence when the session may have expired, takes back what sits
// unread in Messages once the fence is up (whoever raised it: enter does
// too, when it finds the deadline passed before the guard did, as after
// the process was frozen), and lifts the fence when the session answers
// again and the new deadline is ahead.
func (cm *consumerManager) guard(session int64, lastAnswered time.Time) {
	defer close(cm.guardDone)
	var (
		result   chan error // the heartbeat in flight, or nil
		sent     time.Time  // when it was sent
		next     = time.NewTimer(0)
		deadline = time.NewTimer(0)
		drained  bool // what sat unread was taken back since the fence went up
	)
	defer next.Stop()
	defer deadline.Stop()
	cm.answered(lastAnswered, deadline)
	for {
		raised, _ := cm.fence.channels()
		if drained {
			raised = nil
		}
		select {
		case <-cm.guardStop:
			return
		case <-cm.zkStateChanged:
			if result == nil && cm.zkProbe.State() == zk.StateHasSession {
				next.Reset(0)
			}
		case <-next.C:
			if cm.zkProbe.State() != zk.StateHasSession {
				// Sent now, it would wait in go-zookeeper's queue for a
				// connection; zkStateChanged tells when there is one.
				continue
			}
			result, sent = make(chan error, 1), time.Now()
			cm.zkCalls.Add(1)
			go func(result chan<- error) { // owned by closeConnections, which waits for it
				defer cm.zkCalls.Done()
				_, err := cm.zkConn.Sync("/")
				result <- err
			}(result)
		case err := <-result:
			result = nil
			id := cm.zkProbe.SessionID()
			switch {
			case err == nil && (id == session || session == 0):
				session = id // 0: the first answer of a new session
				lastAnswered = sent
				if cm.answered(sent, deadline) {
					drained = false
				}
			case err == nil:
				// Answered by a new session: the old one expired.
				cm.sessionExpired(lastAnswered)
				session, lastAnswered, drained = id, sent, true
				if cm.answered(sent, deadline) {
					drained = false
				}
			case errors.Is(err, zk.ErrSessionExpired):
				cm.sessionExpired(lastAnswered)
				session, drained = 0, true // until a new session answers
			}
			next.Reset(cm.sessionTimeout() / heartbeatsPerTimeout)
		case <-deadline.C:
			cm.fence.raise() // the case below takes back what sits unread
		case <-raised:
			// Raised here, by the hand-out path, or by a commit that found
			// the deadline passed first: said once, here.
			cm.logFence(lastAnswered)
			if !cm.takeBackAll() {
				return
			}
			drained = true
		}
	}
}

// answered records that a request sent at sent was answered by the
// session: the fence's deadline moves to sent + fenceAfter, and the fence
// is lifted when that is ahead. It reports whether it lifted the fence.
func (cm *consumerManager) answered(sent time.Time, deadline *time.Timer) bool {
	return cm.answeredBy(sent.Add(cm.fenceAfter()), deadline)
}

// answeredBy moves the fence's deadline to by, and lifts the fence when
// that is ahead; it reports whether it lifted the fence. The guard of
// either coordinator calls it (deadline is its timer).
func (cm *consumerManager) answeredBy(by time.Time, deadline *time.Timer) bool {
	cm.fenceBy.Store(int64(by.Sub(cm.fenceBase)))
	deadline.Reset(time.Until(by))
	if !time.Now().Before(by) || !cm.fence.lift() {
		return false
	}
	who := "The ZooKeeper session"
	if cm.kafkaActive() != nil {
		who = "The group's coordinator"
	}
	cm.logf(slog.LevelWarn, "%s answered again: partitions resume (fenced for %s).", who, time.Since(cm.fencedAt).Round(time.Millisecond))
	return true
}

// fenced reports whether the instance must not act as the owner of its
// partitions: the fence is up, or its deadline passed before the guard
// raised it (it may not have run yet, as after the process was frozen:
// then the fence goes up here).
func (cm *consumerManager) fenced() bool {
	if cm.fence.on.Load() {
		return true
	}
	if cm.pastFenceDeadline() {
		cm.fence.raise()
		return true
	}
	return false
}

// pastFenceDeadline reports whether the fence's deadline has passed,
// whether or not the guard raised the fence yet (the hand-out path asks).
func (cm *consumerManager) pastFenceDeadline() bool {
	deadline, ok := cm.fenceDeadline()
	return ok && time.Now().After(deadline)
}

// fenceDeadline returns the fence's deadline, and false when there is
// none yet.
func (cm *consumerManager) fenceDeadline() (time.Time, bool) {
	by := cm.fenceBy.Load()
	return cm.fenceBase.Add(time.Duration(by)), by > 0
}

// fenceAfter is how long after the send time of the last answered request
// the instance is fenced: fenceFraction of the ZooKeeper session timeout,
// or, in a Kafka-coordinated group, kafkaFenceFraction of the group's
// (coordinator_kafka_guard.go).
func (cm *consumerManager) fenceAfter() time.Duration {
	if k := cm.kafkaActive(); k != nil {
		return k.fenceAfter()
	}
	return time.Duration(float64(cm.sessionTimeout()) * fenceFraction)
}

// logFence tells that the fence went up.
func (cm *consumerManager) logFence(lastAnswered time.Time) {
	cm.fencedAt = time.Now()
	cm.logf(slog.LevelWarn, "No answer from ZooKeeper since %s ago: the session may expire (timeout %s); handing out and committing nothing until it answers again.",
		time.Since(lastAnswered).Round(time.Millisecond), cm.sessionTimeout())
}

// takeBackAll takes back what sits unread in Messages until no partition
// hands out any more. It reports false when the guard is stopped first.
func (cm *consumerManager) takeBackAll() bool {
	for {
		cm.takeBackUnread()
		if cm.noneHandingOut() {
			cm.takeBackUnread()
			return true
		}
		select {
		case <-cm.handOutStopped:
		case <-cm.guardStop:
			return false
		}
	}
}

// takeBackUnread takes back the messages that sit unread in Messages, as
// if they had never been handed out: each partition hands them out again
// after the fence is lifted. It waits for a stopping partition's search of
// the channel (withdrawUnread) to send back what it holds.
func (cm *consumerManager) takeBackUnread() {
	cm.takeBackMu.Lock()
	defer cm.takeBackMu.Unlock()
	for {
		select {
		case msg := <-cm.messages:
			cm.tookBack(msg)
			if pm := (*cm.pms.Load())[TopicPartition{Topic: msg.Topic, Partition: msg.Partition}]; pm != nil {
				pm.unhand(msg.Offset)
			}
		case b := <-cm.batches: // taken back whole: unhand forgets what follows its first message
			cm.tookBackBatch(b)
			if pm := (*cm.pms.Load())[TopicPartition{Topic: b.Topic, Partition: b.Partition}]; pm != nil {
				pm.unhand(b.Messages[0].Offset)
			}
		default:
			return
		}
	}
}

// noneHandingOut reports whether no partition manager is handing out.
func (cm *consumerManager) noneHandingOut() bool {
	for _, pm := range *cm.pms.Load() {
		pm.mu.Lock()
		busy := pm.handingOut
		pm.mu.Unlock()
		if busy {
			return false
		}
	}
	return true
}

// sessionExpired handles the end of the session that held the claims:
// the fence goes up (if it was not), what sits unread is taken back, and
// every partition manager of the old session loses its claim for good (it
// stops without a final commit: another instance may own the partition
// now). The manager goroutine learns of it from its watch on the
// instances, and registers again; the fence is lifted when the new
// session answers.
func (cm *consumerManager) sessionExpired(lastAnswered time.Time) {
	if cm.fence.raise() {
		cm.logFence(lastAnswered)
	}
	if !cm.takeBackAll() {
		return
	}
	lost := 0
	for _, pm := range *cm.pms.Load() {
		if pm.lose() {
			lost++
		}
	}
	cm.logf(slog.LevelWarn, "The ZooKeeper session expired: %d partitions are lost, with what was acked since the last commit; registering again.", lost)
}

// notifyStates returns a go-zookeeper event callback that sends a token on
// changed, without blocking, at every change of the session's state.
func notifyStates(changed chan<- struct{}) zk.EventCallback {
	return func(ev zk.Event) {
		if ev.Type == zk.EventSession {
			select {
			case changed <- struct{}{}:
			default:
			}
		}
	}
}
