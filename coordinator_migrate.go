package kafkaconsumer

// The live migration of a group between ZooKeeper's coordination and
// Kafka's group coordinator, and back (kafkaconsumer-groups migrate).
//
// Every instance with Config.Coordinator CoordinatorZooKeeper follows the
// group's coordinator switch, /consumers/<group>/coordinator, holding
// "zookeeper" (created so when missing) or "kafka": its coordinator is a
// migratingCoordinator, which runs the ZooKeeper coordinator's manager
// loop while the switch says zookeeper, and the Kafka coordinator's while
// it says kafka, on the same partition managers, offset store and fetch
// engine. Its registration carries the "migration" field (mixed.go), by
// which the groups tool tells it from instances that do not follow the
// switch.
//
// To Kafka. An instance on ZooKeeper that sees the switch say kafka stops
// every partition with its final commit (generation -1: Kafka takes it,
// its group being Empty, below), releases its claims and deregisters
// (leaveZookeeperForSwitch). Then it waits until no instance is
// registered under /consumers/<group>/ids, and only then sends its first
// JoinGroup (awaitZookeeperEmpty).
//
// Back to ZooKeeper. A member of Kafka's group that sees the switch say
// zookeeper stops every partition with its final commit (its generation),
// leaves the group (LeaveGroup, a static member's included), and waits
// until Kafka's group is Empty (DescribeGroups; for a group converted to
// the consumer protocol by members of CoordinatorKafka, which Kafka 4
// describes as Dead with no members, ListGroups v5) before it registers
// in ZooKeeper and claims again (awaitKafkaEmpty).
//
// One owner at a time across the switch:
//
//   - A registration is created only in one multi with a check of the
//     switch node's version, read saying zookeeper (registerUnderSwitch):
//     once the switch says kafka, no instance registers any more, Join's
//     included (an instance started with the old setting finds the
//     switch at kafka and joins Kafka's group instead). So when a member
//     to be sees the switch at kafka and then /ids empty, no instance is
//     or will be coordinated through ZooKeeper until the switch goes back:
//     each one stopped its partitions before it deregistered, or its
//     session expired, and its fence (fence.go, 0.6 of the session
//     timeout) stopped it handing out before that. Kafka's group is
//     joined only then; a ZooKeeper server that lags shows a state that
//     comes after the switch's write, so /ids empty there is empty for
//     good.
//   - Back: a member leaves Kafka's group only after its partitions
//     stopped, or is removed by the coordinator after its session
//     timeout, and its fence (0.8 of that) stopped it handing out before.
//     So an Empty group means no member consumes; the first ZooKeeper
//     instance registers after that. A member whose JoinGroup was sent
//     before the switch but completed after the group was found Empty
//     would consume beside the ZooKeeper instances: so after each
//     generation synced, a member reads the switch afresh (a ZooKeeper
//     sync, then a read: confirm) before it runs any partition of it,
//     and leaves when the switch says zookeeper. That read follows the
//     Empty the ZooKeeper instance saw, which followed the switch's
//     write.
//   - Kafka takes commits of generation -1 only while its group is Empty:
//     the ZooKeeper instances' final commits precede their deregistration,
//     which precedes the first JoinGroup; the members' final commits
//     precede their LeaveGroup, which precedes the first claim in
//     ZooKeeper.
//
// While Kafka coordinates the group, an instance does not claim in
// ZooKeeper: the generation's assignment is the claim, as with
// CoordinatorKafka, and the ZooKeeper session only watches the switch
// and the registrations. The owner nodes are sealed meanwhile
// (owners_seal.go): ZooKeeper refuses the claims of an instance that
// registers all the same, which the members name on Errors().
// ZooKeeper's claims, and its fence, are the lock again after the
// switch back. A killed instance costs at most its session timeout: its
// registration, or its membership, goes at its expiry.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/go-zookeeper/zk"
	"github.com/wvanbergen/kazoo-go"
)

// migratingCoordinator is the coordinator of CoordinatorZooKeeper: the
// ZooKeeper coordinator, or the Kafka one after the group's coordinator
// switch (see the file's comment).
type migratingCoordinator struct {
	zookeeperCoordinator
	sw coordinatorSwitch
	// k is the Kafka coordinator, made at the first switch to Kafka
	// (kafka); manager goroutine only.
	k *kafkaCoordinator
	// active is k while Kafka coordinates the group, nil while ZooKeeper
	// does; set by the manager goroutine while no partition runs.
	active atomic.Pointer[kafkaCoordinator]
	// startOnKafka is set by connect when it found the switch at kafka,
	// or the owner nodes sealed (owners_seal.go): the instance did not
	// register.
	startOnKafka bool
	// intruders watches the registrations while Kafka coordinates the
	// group (owners_seal.go); started and stopped by setActive, stopped
	// by close; manager goroutine only.
	intruders *intruderWatch
}

// newMigratingCoordinator returns the coordinator of a
// CoordinatorZooKeeper instance.
func newMigratingCoordinator(cm *consumerManager) *migratingCoordinator {
	return &migratingCoordinator{zookeeperCoordinator: zookeeperCoordinator{cm}, sw: coordinatorSwitch{cm: cm}}
}

// attach makes the offset store commit as a member of Kafka's group while
// Kafka coordinates it; connect calls it once the store exists.
func (m *migratingCoordinator) attach() {
	m.cm.offsets.member = func() (int32, string, *string) {
		if k := m.active.Load(); k != nil {
			return k.commitMember()
		}
		return sarama.GroupGenerationUndefined, "", nil
	}
	m.cm.offsets.kafkaNow = func() bool { return m.active.Load() != nil }
}

// manage implements coordinator: the ZooKeeper coordinator's loop while
// the switch says zookeeper, the Kafka coordinator's while it says kafka,
// and the hand-over between them (see the file's comment).
func (m *migratingCoordinator) manage() {
	cm := m.cm
	onKafka := m.startOnKafka
	for {
		if !onKafka {
			if !cm.manageZookeeper(&m.sw) {
				return
			}
			// Every partition stopped, the instance deregistered: its
			// ZooKeeper guard stops, so that a switch back before Kafka's
			// group is joined registers under a guard of its own.
			m.setActive(nil)
		}
		waited, ok := m.awaitZookeeperEmpty()
		if waited && ok {
			waited, ok = m.sealForKafka() // owners_seal.go
		}
		if !ok {
			return
		}
		if !waited { // the switch went back meanwhile
			if onKafka, ok = m.reopen(); !ok {
				return
			}
			continue
		}
		k, switched, ok := m.kafka()
		if !ok {
			return
		}
		if switched { // the switch went back while connecting
			if onKafka, ok = m.reopen(); !ok {
				return
			}
			continue
		}
		m.setActive(k)
		if !k.manageUntil(&m.sw) {
			return
		}
		// Every partition stopped, the member left the group.
		m.setActive(nil)
		empty, ok := m.awaitKafkaEmpty()
		if !ok {
			return
		}
		onKafka = !empty
		if empty {
			if onKafka, ok = m.reopen(); !ok {
				return
			}
		}
	}
}

// setActive hands the group's coordination to k (nil: ZooKeeper) while
// no partition runs, with the fence down and no deadline: the next
// coordinator's guard sets it. While k coordinates, the registrations
// are watched for intruders.
func (m *migratingCoordinator) setActive(k *kafkaCoordinator) {
	cm := m.cm
	cm.stopGuard()
	m.intruders.stop()
	m.intruders = nil
	m.active.Store(k)
	cm.fenceBy.Store(0)
	cm.fence.lift()
	if k != nil {
		m.intruders = cm.startIntruderWatch()
	}
}

// leaveZookeeperForSwitch stops every partition with its final commit,
// releases the claims and deregisters the instance, for the switch to
// Kafka; it reports whether the manager goes on (false: interrupted).
func (cm *consumerManager) leaveZookeeperForSwitch() bool {
	cm.logf(slog.LevelInfo, "The group moves to Kafka's group coordinator: stopping every partition (final commits), releasing the claims and deregistering.")
	began := time.Now()
	cm.awaiting.Store(nil)
	cm.reportStops(cm.managePartitionManagers(nil))
	for attempt := 0; len(cm.releaseOrphans()) > 0; attempt++ {
		if attempt == 5 {
			cm.logf(slog.LevelWarn, "Some claims could not be released; the sweep tries again after a switch back, and Close.")
			break
		}
		if !sleepOrDie(&cm.t, attempt) {
			return false
		}
	}
	for attempt := 0; cm.registered; attempt++ {
		deregister := cm.deregisterNode
		if cm.config.InstanceID != "" {
			deregister = cm.deregisterStatic
		}
		err := cm.zkCall(cm.zkTimeout(), deregister)
		if err == nil || errors.Is(err, kazoo.ErrInstanceNotRegistered) {
			cm.registered = false
			break
		}
		cm.logf(slog.LevelWarn, "Failed to deregister: %s. Trying again.", convertError(err))
		if !sleepOrDie(&cm.t, attempt) {
			return false
		}
	}
	cm.logf(slog.LevelInfo, "Left ZooKeeper's coordination in %s.", time.Since(began).Round(time.Millisecond))
	return true
}

// awaitZookeeperEmpty waits, before the first JoinGroup, until no
// instance is registered in ZooKeeper. It returns false when the switch
// went back to zookeeper meanwhile (waited false) or the manager was
// interrupted (ok false).
func (m *migratingCoordinator) awaitZookeeperEmpty() (waited, ok bool) {
	cm := m.cm
	began := time.Now()
	logged := ""
	for attempt := 0; ; {
		if !m.sw.read() {
			return false, false
		}
		if !m.sw.kafka() {
			return false, true
		}
		var (
			ids   []string
			watch <-chan zk.Event
		)
		err := cm.zkCall(cm.zkTimeout(), func() (err error) {
			ids, _, watch, err = cm.zkConn.ChildrenW(cm.groupNode("ids"))
			if errors.Is(err, zk.ErrNoNode) {
				ids, watch, err = nil, nil, nil
			}
			return err
		})
		if err != nil {
			cm.logf(slog.LevelWarn, "Failed to read the group's instances: %s. Trying again.", convertError(err))
			if !sleepOrDie(&cm.t, attempt) {
				return false, false
			}
			attempt++
			continue
		}
		attempt = 0
		if len(ids) == 0 {
			cm.logf(slog.LevelInfo, "No instance is registered in ZooKeeper any more (waited %s): joining Kafka's group.", time.Since(began).Round(time.Millisecond))
			return true, true
		}
		if list := strings.Join(ids, ", "); list != logged {
			logged = list
			cm.logf(slog.LevelInfo, "Waiting for the instances still registered in ZooKeeper to deregister before joining Kafka's group: %s.", list)
		}
		select {
		case <-cm.t.Dying():
			return false, false
		case <-watch:
		case <-m.sw.changed:
			m.sw.changed = nil
		}
	}
}

// kafkaPollInterval is how often an instance that goes back to ZooKeeper
// asks whether Kafka's group is Empty.
const kafkaPollInterval = 200 * time.Millisecond

// awaitKafkaEmpty waits, before the instance registers in ZooKeeper
// again, until Kafka's group is Empty (or Dead). It returns false when the
// switch went back to kafka meanwhile (empty false) or the manager was
// interrupted (ok false).
func (m *migratingCoordinator) awaitKafkaEmpty() (empty, ok bool) {
	cm := m.cm
	began := time.Now()
	logged := ""
	poll := time.NewTimer(0)
	defer poll.Stop()
	for attempt := 0; ; {
		select {
		case <-cm.t.Dying():
			return false, false
		case <-m.sw.watch():
			m.sw.changed = nil
			continue
		case <-poll.C:
		}
		if !m.sw.read() {
			return false, false
		}
		if m.sw.kafka() {
			return false, true
		}
		var state string
		var members []string
		err := m.k.call(func() (err error) { state, members, err = m.k.describe(); return err })
		if errors.Is(err, errAbandoned) {
			return false, false
		}
		if err != nil {
			cm.logf(slog.LevelWarn, "Failed to describe Kafka's group: %s. Trying again.", err)
			poll.Reset(retryDelay(attempt))
			attempt++
			continue
		}
		attempt = 0
		if state == "Empty" || state == "Dead" {
			cm.logf(slog.LevelInfo, "Kafka's group is %s (waited %s): registering in ZooKeeper.", state, time.Since(began).Round(time.Millisecond))
			return true, true
		}
		if list := state + ": " + strings.Join(members, ", "); list != logged {
			logged = list
			cm.logf(slog.LevelInfo, "Waiting for Kafka's group to be Empty before registering in ZooKeeper; it is %s.", list)
		}
		poll.Reset(kafkaPollInterval)
	}
}

// registerAgain registers the instance in ZooKeeper after a switch back,
// and starts the ZooKeeper guard; onKafka is true when the switch says
// kafka again (not registered), ok false when the manager was interrupted.
func (m *migratingCoordinator) registerAgain() (onKafka, ok bool) {
	cm := m.cm
	for attempt := 0; ; attempt++ {
		sent := time.Now()
		err := cm.registerInstance()
		if err == nil {
			cm.registered = true
			if cm.config.InstanceID != "" {
				err = cm.markStatic(staticRegistered)
			}
		}
		if err == nil {
			cm.startGuard(sent)
			cm.logf(slog.LevelInfo, "Consumer instance registered in ZooKeeper again: ZooKeeper coordinates the group.")
			return false, true
		}
		if errors.Is(err, errCoordinatorSwitched) {
			m.sw.changed = nil
			return true, true
		}
		cm.logf(slog.LevelWarn, "Failed to register: %s. Trying again.", convertError(err))
		if !sleepOrDie(&cm.t, attempt) {
			return false, false
		}
	}
}

// kafka returns the Kafka coordinator, made and its group client
// connected at the first switch to Kafka (connectKafka). It tries again
// while the switch says kafka: switched is true when it says zookeeper
// (k nil then), ok false when the manager was interrupted.
func (m *migratingCoordinator) kafka() (k *kafkaCoordinator, switched, ok bool) {
	for attempt := 0; ; attempt++ {
		if !m.sw.read() {
			return nil, false, false
		}
		if !m.sw.kafka() {
			return nil, true, true
		}
		k, err := m.connectKafka()
		if err == nil {
			return k, false, true
		}
		if errors.Is(err, errAbandoned) {
			return nil, false, false
		}
		m.cm.logf(slog.LevelWarn, "Failed to connect to Kafka's group coordinator: %s. Trying again.", err)
		if !m.pause(attempt) {
			return nil, false, false
		}
	}
}

// connectKafka makes the Kafka coordinator and connects its group client
// when there is none yet, in one attempt, on the brokers read afresh
// (currentBrokers): after the brokers were unreachable, the first
// client knows none of them. errAbandoned when the manager was
// interrupted.
func (m *migratingCoordinator) connectKafka() (*kafkaCoordinator, error) {
	cm := m.cm
	if m.k != nil {
		return m.k, nil
	}
	brokers, err := cm.currentBrokers()
	if err != nil {
		return nil, fmt.Errorf("connect to kafka: %w", err)
	}
	k := newKafkaCoordinator(cm)
	k.followsSwitch = true
	if err := m.openGroupClient(k, brokers); err != nil {
		if cm.groupClient != nil {
			_ = cm.groupClient.Close()
			cm.groupClient = nil
		}
		return nil, err
	}
	m.k = k
	return k, nil
}

// pause waits the retry delay of attempt, or until the switch's watch
// fires (the next read of the switch reads it again); false when the
// manager was interrupted.
func (m *migratingCoordinator) pause(attempt int) bool {
	timer := time.NewTimer(retryDelay(attempt))
	defer timer.Stop()
	select {
	case <-m.cm.t.Dying():
		return false
	case <-m.sw.watch():
		m.sw.changed = nil
	case <-timer.C:
	}
	return true
}

// openGroupClient is k.openGroupClient on a goroutine of its own, which
// the manager stops waiting for when it is interrupted (errAbandoned):
// with the brokers hung, the client's requests wait for its read timeout
// (the rebalance timeout + 5 s, at each retry), and a Close with them.
// The goroutine counts in kafkaCalls: closeKafka cuts the connections
// under it after closeGrace, and it closes the client it opened, which
// nobody took.
func (m *migratingCoordinator) openGroupClient(k *kafkaCoordinator, brokers []string) error {
	cm := m.cm
	var (
		mu        sync.Mutex // guards abandoned and result
		abandoned bool
		result    error
		done      = make(chan struct{}) // closed once result is set
	)
	cm.kafkaCalls.Add(1)
	go func() { // owned by closeKafka, which waits for kafkaCalls
		defer cm.kafkaCalls.Done()
		client, err := k.dialGroupClient(context.Background(), brokers)
		mu.Lock()
		defer mu.Unlock()
		if abandoned {
			if client != nil {
				_ = client.Close()
			}
			return
		}
		if client != nil {
			cm.groupClient, k.client = client, client // closeClients closes it
		}
		result = err
		close(done)
	}()
	select {
	case <-done:
	case <-cm.t.Dying():
		mu.Lock()
		defer mu.Unlock()
		select {
		case <-done: // it ended first: its client is cm.groupClient's
		default:
			abandoned = true
			return errAbandoned
		}
	}
	return result
}

// claim implements coordinator: a ZooKeeper claim, or none while Kafka
// coordinates the group (the generation's assignment is the claim).
func (m *migratingCoordinator) claim(pm *partitionManager) bool {
	if k := m.active.Load(); k != nil {
		return k.claim(pm)
	}
	return pm.claim()
}

// release implements coordinator.
func (m *migratingCoordinator) release(pm *partitionManager, deadline time.Time) error {
	if k := m.active.Load(); k != nil {
		return k.release(pm, deadline)
	}
	return pm.release(deadline)
}

// claimBatch implements coordinator.
func (m *migratingCoordinator) claimBatch(tps []TopicPartition) *claimBatch {
	if m.active.Load() != nil {
		return nil
	}
	return newClaimBatch(m.cm, tps)
}

// beforeKafkaClose implements coordinator: the LeaveGroup of a member of
// Kafka's group.
func (m *migratingCoordinator) beforeKafkaClose() {
	if k := m.active.Load(); k != nil {
		k.beforeKafkaClose()
	}
}

// close implements coordinator: the Kafka coordinator's close when it
// ran, then the ZooKeeper coordinator's (the deregistration, when
// registered, and the session).
func (m *migratingCoordinator) close() []error {
	m.intruders.stop()
	m.intruders = nil
	var errs []error
	if m.k != nil {
		errs = append(errs, m.k.close()...)
	}
	return append(errs, m.zookeeperCoordinator.close()...)
}

// describe returns the state of Kafka's group and its members' IDs
// (DescribeGroups).
func (k *kafkaCoordinator) describe() (state string, members []string, err error) {
	broker, err := k.coordinatorBroker()
	if err != nil {
		return "", nil, err
	}
	resp, err := broker.DescribeGroups(&sarama.DescribeGroupsRequest{Groups: []string{k.cm.group}})
	if err != nil {
		return "", nil, k.coordinatorFailed(broker, err)
	}
	if len(resp.Groups) != 1 {
		return "", nil, fmt.Errorf("describe group %s: %d groups in the answer", k.cm.group, len(resp.Groups))
	}
	g := resp.Groups[0]
	if !errors.Is(g.Err, sarama.ErrNoError) {
		return "", nil, fmt.Errorf("describe group %s: %w", k.cm.group, k.coordinatorFailed(broker, g.Err))
	}
	if g.State == "Dead" && len(g.Members) == 0 {
		// Kafka 4 answers DescribeGroups so for a group of the consumer
		// protocol (KIP-848), its members' partitions owned all the
		// same: ListGroups v5 tells its type and state.
		if state, ok := k.lister.consumerGroupState(k.client, broker, k.cm.group); ok {
			return state, []string{"members of the consumer protocol, which DescribeGroups does not list"}, nil
		}
	}
	for id, member := range g.Members {
		members = append(members, id+" ("+member.ClientHost+")")
	}
	return g.State, members, nil
}

// leaveForSwitch stops every partition with its final commit, stops the
// guard and leaves the group (a static member too), for the switch back
// to ZooKeeper. It returns true: the manager goes on (an interrupted
// one finds out at its next wait).
func (k *kafkaCoordinator) leaveForSwitch() bool {
	cm := k.cm
	cm.logf(slog.LevelInfo, "The group moves back to ZooKeeper's coordination: stopping every partition (final commits) and leaving Kafka's group.")
	cm.reportStops(cm.managePartitionManagers(nil))
	cm.stopGuard()
	k.rejoins.stop()
	if m := k.current(); m.id != "" && !cm.fenced() {
		// Through call: against a hung coordinator a LeaveGroup waits
		// for the group client's read timeout (the rebalance timeout
		// + 5 s), and a Close with it.
		if err := k.call(func() error { return k.leave(m, k.instanceID) }); errors.Is(err, errAbandoned) {
			cm.logf(slog.LevelInfo, "Interrupted while leaving the group; the coordinator removes this member after its session timeout (%s).", k.sessionTimeout)
		} else if err != nil {
			cm.logf(slog.LevelWarn, "Failed to leave the group: %s; the coordinator removes this member after its session timeout (%s).", err, k.sessionTimeout)
		} else {
			cm.logf(slog.LevelInfo, "Left the group.")
		}
	}
	k.setMember(groupMember{generation: sarama.GroupGenerationUndefined})
	k.lost.Store(false)
	select {
	case <-k.rejoin:
	default:
	}
	return true
}
