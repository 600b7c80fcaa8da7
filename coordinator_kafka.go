package kafkaconsumer

// The Kafka coordinator (CoordinatorKafka): the manager loop of a group
// that Kafka's group coordinator keeps, with the classic protocol. Each
// round reads the subscription's partitions from Kafka's metadata, joins
// the group (JoinGroup, then SyncGroup: the leader computes the
// assignment, coordinator_kafka_assign.go), and runs the partition
// managers of this member's assignment; the guard
// (coordinator_kafka_guard.go) heartbeats, fences, and asks for the next
// round when the coordinator starts a rebalance.
//
// One owner at a time. A member consumes a partition only while the
// assignment of its current generation holds it; a rebalance keeps
// running the partitions that stay, and stops the revoked ones, with
// their final commits, before the member joins again. The leader never
// assigns a partition that another member of the generation reports as
// owned (the owned partitions of each JoinGroup, KIP-429): a partition
// that moves is first revoked from its owner, which stops it and joins
// again, and only the generation after that gives it to its new owner.
// A member that is no longer in the generation reports nothing, so the
// leader may give its partitions away at once; such a member must have
// stopped handing out by then, which the fence ensures: the coordinator
// removes a member a session timeout after the last heartbeat it
// received, or, during a rebalance, when it has not joined within the
// rebalance timeout; the guard fences at 0.8 of each, counted from the
// send of the last heartbeat answered (coordinator_kafka_guard.go). A
// member that learns it was removed (UNKNOWN_MEMBER_ID,
// ILLEGAL_GENERATION, FENCED_INSTANCE_ID) loses its partitions without a
// final commit, which Kafka would refuse anyway: commits carry the
// generation and the member ID (offsetStore.member). FENCED_INSTANCE_ID
// is final: the member never joins again (instanceFenced).

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

// kafkaProtocolType is the protocol type of the group: Kafka's consumer
// protocol, whose member metadata and assignments the tools read.
const kafkaProtocolType = "consumer"

// kafkaProtocol is the name of the group's one protocol, the library's own
// assignor (sticky.go). Kafka refuses a member whose protocols share
// none with the group's (INCONSISTENT_GROUP_PROTOCOL).
const kafkaProtocol = "kafkaconsumer"

// groupMember is this instance's membership in a generation.
type groupMember struct {
	id         string // the member ID the coordinator gave; "" before
	generation int32  // sarama.GroupGenerationUndefined (-1) when not a member
}

// kafkaCoordinator is the coordinator of CoordinatorKafka.
type kafkaCoordinator struct {
	cm *consumerManager
	// client is the group client: FindCoordinator, JoinGroup, SyncGroup
	// and LeaveGroup go through it, on a connection of their own (a
	// JoinGroup waits there for the whole rebalance). Its Net.ReadTimeout
	// covers the rebalance timeout. Opened by connectKafka, closed by
	// closeClients.
	client sarama.Client
	// instanceID is Config.InstanceID as GroupInstanceId, nil without.
	instanceID *string
	// sessionTimeout, rebalanceTimeout and heartbeatInterval are the
	// member's (see newKafkaCoordinator).
	sessionTimeout, rebalanceTimeout, heartbeatInterval time.Duration

	mu sync.Mutex // guards member
	// member is the membership of the last generation synced; the guard
	// heartbeats with it, the offset store commits with it.
	member groupMember
	// joining is set by the manager goroutine while its JoinGroup and
	// SyncGroup are in flight: the guard does not take an answer to the
	// previous generation's heartbeat for a removal then.
	joining atomic.Bool

	// rejoin receives a token, without blocking the sender, when the
	// guard learns that the group rebalances, or that this member was
	// removed (lost is set then); rejoinFor is the generation it was
	// learnt for, so that the manager ignores a token of a generation
	// it has left behind.
	rejoin    chan struct{}
	rejoinFor atomic.Int32
	lost      atomic.Bool
	// fencedOut is set once the group's coordinator answered a request
	// of this member FENCED_INSTANCE_ID (instanceFenced): final.
	fencedOut atomic.Bool
	// removal receives the generation (buffer 1) that the manager
	// goroutine learnt this member was removed from, or that it was
	// fenced out of (instanceFenced): the guard handles it, unless the
	// member is in another generation by then (it handled that removal
	// already, and a new generation was synced since).
	removal chan int32
	// joined passes the send time of the SyncGroup of each generation
	// synced to the guard, which moves the fence's deadline (buffer 1;
	// the manager goroutine replaces a value not taken yet).
	joined chan time.Time

	// calls counts the goroutines of group requests that nobody waits
	// for: heartbeats in flight, a JoinGroup or SyncGroup that the
	// shutdown abandoned. close waits for them after the clients closed,
	// which ends their requests.
	calls sync.WaitGroup
	// leaveErr is what the LeaveGroup of beforeKafkaClose returned;
	// close returns it.
	leaveErr error
	// followsSwitch is set for an instance that follows the group's
	// coordinator switch (coordinator_migrate.go): its JoinGroup says so
	// in the member metadata's user data (memberUserData), for the
	// groups tool.
	followsSwitch bool
	// reportedJoin holds the JoinGroup errors sent to Errors() since the
	// last generation joined (reportJoinError): each is reported once,
	// and retried quietly. Used by the manager goroutine only.
	reportedJoin map[sarama.KError]bool
	// consumer is the state of a GroupProtocolConsumer member
	// (coordinator_kafka848.go); nil with the classic protocol. Set by
	// connectKafka.
	consumer *consumerMembership
	// rejoins are the rejoins on the assignment's account
	// (coordinator_kafka_rejoin.go); used by the manager goroutine only.
	rejoins assignRejoins
	// awaitingUntil, when after now (Unix nanoseconds), is the end of the
	// wait for a generation that brings this member a partition withheld
	// from it (expectRebalance): the guard heartbeats every
	// awaitingHeartbeat meanwhile.
	awaitingUntil atomic.Int64
	// lister asks ListGroups v5 for a follower of the coordinator switch
	// (coordinator_migrate_list.go); close closes its connection.
	lister groupLister
}

// expectRebalance tells the guard that the generation just synced
// withheld partitions from this member, or from another, until their
// owners stop them and join again (expectsRebalance): it heartbeats every awaitingHeartbeat until a heartbeat is
// answered REBALANCE_IN_PROGRESS, or for as long as an owner may take to
// stop its partitions and join (MaxProcessingTime + stopGrace) plus a
// heartbeat interval, so that the member joins the next generation at
// once rather than a heartbeat interval later.
func (k *kafkaCoordinator) expectRebalance() {
	wait := k.cm.config.MaxProcessingTime + stopGrace + k.heartbeatInterval
	k.awaitingUntil.Store(time.Now().Add(wait).UnixNano())
}

// nextHeartbeat is the wait before the next heartbeat: heartbeatInterval,
// or awaitingHeartbeat while a rebalance is expected (expectRebalance).
func (k *kafkaCoordinator) nextHeartbeat() time.Duration {
	if time.Now().UnixNano() < k.awaitingUntil.Load() {
		return min(k.heartbeatInterval, awaitingHeartbeat)
	}
	return k.heartbeatInterval
}

// awaitingHeartbeat is the heartbeat interval of a member that expects a
// rebalance (expectRebalance).
const awaitingHeartbeat = 100 * time.Millisecond

// newKafkaCoordinator returns the Kafka coordinator of cm. The session
// timeout is Consumer.Group.Session.Timeout; heartbeats go every
// Consumer.Group.Heartbeat.Interval, at most a third of it. The rebalance
// timeout is Consumer.Group.Rebalance.Timeout, raised to cover a member
// that stops its revoked partitions before it joins again
// (MaxProcessingTime + stopGrace) plus a session timeout.
func newKafkaCoordinator(cm *consumerManager) *kafkaCoordinator {
	g := cm.config.Consumer.Group
	k := &kafkaCoordinator{
		cm:                cm,
		sessionTimeout:    g.Session.Timeout,
		heartbeatInterval: min(g.Heartbeat.Interval, g.Session.Timeout/3),
		rebalanceTimeout:  max(g.Rebalance.Timeout, cm.config.MaxProcessingTime+stopGrace+g.Session.Timeout),
		member:            groupMember{generation: sarama.GroupGenerationUndefined},
		rejoin:            make(chan struct{}, 1),
		removal:           make(chan int32, 1),
		joined:            make(chan time.Time, 1),
	}
	if cm.config.InstanceID != "" {
		id := cm.config.InstanceID
		k.instanceID = &id
	}
	return k
}

// current returns the membership of the last generation synced.
func (k *kafkaCoordinator) current() groupMember {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.member
}

// setMember records the membership of a generation synced.
func (k *kafkaCoordinator) setMember(m groupMember) {
	k.mu.Lock()
	k.member = m
	k.mu.Unlock()
}

// commitMember is the offset store's member: the generation and member ID
// its commits carry, and the instance ID.
func (k *kafkaCoordinator) commitMember() (generation int32, memberID string, instanceID *string) {
	m := k.current()
	return m.generation, m.id, k.instanceID
}

// connectKafka does the work of Join after validation for a
// Kafka-coordinated group: the sarama clients, offset store and consumer
// (openKafka) from Config.Brokers, the group client, and a lookup of the
// group's coordinator, so that Join fails when there is none to join, and
// a dynamic member's first JoinGroup, so that Join fails when the
// coordinator refuses the member for good (firstJoin). The group is
// joined by the manager loop. On error, closeConnections undoes
// what was done.
func (k *kafkaCoordinator) connectKafka(ctx context.Context) error {
	cm := k.cm
	brokers := append([]string(nil), cm.config.Brokers...)
	cm.logf(slog.LevelInfo, "Kafka coordinates the group (CoordinatorKafka); brokers %s, topics and partitions from Kafka's metadata every %s.",
		strings.Join(brokers, ","), cm.config.DiscoveryInterval)
	if err := cm.openKafka(ctx, brokers); err != nil {
		return err
	}
	cm.offsets.member = k.commitMember
	if cm.config.GroupProtocol == GroupProtocolConsumer {
		cm.offsets.send = k.commitConsumer
		return k.connectConsumer(ctx, brokers)
	}
	if err := k.openGroupClient(ctx, brokers); err != nil {
		return err
	}
	return k.firstJoin()
}

// openGroupClient opens the group client on brokers and looks up the
// group's coordinator. closeClients closes the client.
func (k *kafkaCoordinator) openGroupClient(ctx context.Context, brokers []string) error {
	client, err := k.dialGroupClient(ctx, brokers)
	if client != nil {
		k.cm.groupClient, k.client = client, client // closeClients closes it
	}
	return err
}

// dialGroupClient opens a group client on brokers and looks up the
// group's coordinator. It returns the client when it opened it, also
// when the lookup failed (err).
func (k *kafkaCoordinator) dialGroupClient(ctx context.Context, brokers []string) (sarama.Client, error) {
	cm := k.cm
	conf := *cm.config.Config
	// A JoinGroup is answered when the rebalance completes: up to the
	// rebalance timeout.
	conf.Net.ReadTimeout = max(conf.Net.ReadTimeout, k.rebalanceTimeout+5*time.Second)
	client, err := sarama.NewClient(brokers, &conf)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("connect to kafka at %s: %w", strings.Join(brokers, ","), ctx.Err())
		}
		return nil, fmt.Errorf("connect to kafka at %s: %w", strings.Join(brokers, ","), err)
	}
	if err := client.RefreshCoordinator(cm.group); err != nil {
		if ctx.Err() != nil {
			return client, ctx.Err()
		}
		return client, fmt.Errorf("find the coordinator of group %s: %w", cm.group, err)
	}
	return client, ctx.Err()
}

// manage is the manager loop of a Kafka-coordinated group:
//  1. read the subscription's partitions from Kafka's metadata (a poller
//     watches them for changes);
//  2. join the group and sync: the assignment of the new generation;
//  3. run the partition managers of the assignment: those that stay run
//     on, the revoked ones stop (final commit) before anything else, and
//     then the member joins again at once, so that their new owners get
//     them in the next generation;
//  4. sleep until the metadata change (then back to 1), the guard asks for
//     a rebalance (then back to 2: the poller keeps watching), or the
//     manager is interrupted.
func (k *kafkaCoordinator) manage() {
	if k.consumer != nil {
		k.manageConsumer() // GroupProtocolConsumer: coordinator_kafka848.go
		return
	}
	k.manageUntil(nil)
}

// manageUntil is manage for an instance that follows the group's
// coordinator switch (sw, coordinator_migrate.go; nil: none). It starts
// the guard, and returns true when sw says that ZooKeeper coordinates
// the group now: then every partition stopped with its final commit, the
// guard stopped, and the member left the group (leaveForSwitch). Before
// a new member runs the partitions of its first generation, it reads the
// switch afresh (confirmSwitch): a member whose JoinGroup completed after
// the group was switched back and emptied must not consume (see
// coordinator_migrate.go).
// It returns false when the manager is interrupted.
func (k *kafkaCoordinator) manageUntil(sw *coordinatorSwitch) bool {
	cm := k.cm
	cm.startKafkaGuard(k)
	var (
		partitions kazoo.PartitionList
		changed    <-chan zk.Event
		ok         bool
		// read: the metadata is read again before the next join; only
		// at the start and when the poller saw it change (the poller
		// keeps watching meanwhile). A rejoin that read it first would
		// wait for a broker that hangs (Net.ReadTimeout, again at each
		// retry), and the whole group's rebalance with it.
		read = true
	)
	for {
		if k.lost.Swap(false) {
			// Removed from the group: the guard lost every partition
			// (no final commit); stop them before joining anew.
			cm.reportStops(cm.managePartitionManagers(nil))
		}
		if k.fencedOut.Load() {
			return k.stayOut()
		}
		if sw != nil {
			if !sw.read() {
				return false
			}
			if !sw.kafka() {
				return k.leaveForSwitch()
			}
		}
		if read {
			if partitions, changed, ok = cm.watchSubscription(); !ok {
				return false
			}
		}
		assigned, ok := k.join(partitions)
		if !ok {
			return false
		}
		if sw != nil {
			switch confirmed, ok := k.confirmSwitch(sw); {
			case !ok:
				return false
			case !sw.kafka():
				return k.leaveForSwitch()
			case !confirmed: // left the group: joins anew once ZooKeeper answers
				continue
			}
		}
		stopped := cm.managePartitionManagers(assigned)
		cm.reportStops(stopped)
		if len(stopped) > 0 {
			// The revoked partitions stopped: join again, so that their
			// new owners get them (see the file's comment).
			read = false
			continue
		}
		var switched <-chan zk.Event
		if sw != nil {
			switched = sw.changed
		}
		if read, ok = k.sleep(changed, switched); !ok {
			return false
		}
	}
}

// sleep waits until the metadata poller fires (changed is true), the
// guard asks for a new generation, a rejoin on the assignment's account
// is due (coordinator_kafka_rejoin.go), the coordinator switch changes
// (switched; nil without), or the manager is interrupted (ok is false).
func (k *kafkaCoordinator) sleep(changedMetadata, switched <-chan zk.Event) (changed, ok bool) {
	cm := k.cm
	for {
		select {
		case <-cm.t.Dying():
			cm.logf(slog.LevelInfo, "Interrupted, shutting down...")
			return false, false
		case <-switched:
			cm.logf(slog.LevelInfo, "Woke up because the group's coordinator switch changed.")
			return false, true
		case <-changedMetadata:
			cm.logf(slog.LevelInfo, "Woke up because the subscription's partitions changed in Kafka's metadata; joining the group again.")
			return true, true
		case <-k.rejoins.retryDue():
			cm.logf(slog.LevelInfo, "Joining the group again to refuse the partitions of topics this member does not subscribe to.")
			return false, true
		case <-k.rejoins.changed:
			cm.logf(slog.LevelInfo, "Woke up because the partitions of topics that only other members subscribe to changed in Kafka's metadata; joining the group again, as its leader, so that it rebalances.")
			return false, true
		case <-k.rejoin:
			if k.lost.Load() || k.rejoinFor.Load() >= k.current().generation {
				cm.logf(slog.LevelInfo, "Woke up because the group rebalances; joining again.")
				return false, true
			}
		}
	}
}

// coordinatorBroker returns the group client's broker for the group's
// coordinator as the offset store knows it (offsets_coordinator.go):
// every request of the group goes to that one coordinator, which a
// request that failed, or an answer that it is not the coordinator,
// makes the store forget (coordinatorFailed), so that the next one looks
// it up again. The group client has a connection of its own to it (a
// JoinGroup waits there for the whole rebalance).
func (k *kafkaCoordinator) coordinatorBroker() (*sarama.Broker, error) {
	cm := k.cm
	b, err := cm.offsets.broker()
	if err != nil {
		return nil, fmt.Errorf("find the coordinator of group %s: %w", cm.group, err)
	}
	broker, err := k.client.Broker(b.ID())
	if err != nil {
		// Not in the group client's metadata yet (a broker that joined
		// the cluster since): its lookup of the coordinator adds it.
		if err = k.client.RefreshCoordinator(cm.group); err == nil {
			broker, err = k.client.Broker(b.ID())
		}
	}
	if err != nil {
		cm.offsets.forget(b.ID())
		return nil, fmt.Errorf("find the coordinator of group %s: %s: %w", cm.group, brokerName(b), err)
	}
	return broker, nil
}

// coordinatorFailed handles err, what a group request to broker, the
// group's coordinator, returned (the request's error, or its answer's):
// when the request failed, or the broker answered that it is not the
// coordinator (coordinatorMoved), the offset store forgets it, and the
// next request looks the coordinator up again; a failed request's
// connection is closed (closeFailed). It returns err naming broker
// (its ID and address), for the log line.
func (k *kafkaCoordinator) coordinatorFailed(broker *sarama.Broker, err error) error {
	if err == nil || errors.Is(err, errAbandoned) {
		return err
	}
	var kerr sarama.KError
	if !errors.As(err, &kerr) {
		closeFailed(broker, err)
		k.cm.offsets.forget(broker.ID())
	} else if coordinatorMoved(kerr) {
		k.cm.offsets.forget(broker.ID())
	}
	return fmt.Errorf("%w (the group's coordinator, %s)", err, brokerName(broker))
}

// errAbandoned is what call returns for a request it stopped waiting
// for: the manager was interrupted.
var errAbandoned = errors.New("interrupted")

// call runs a group request on a goroutine of its own, and waits for it
// or until the manager is interrupted (errAbandoned): a JoinGroup may
// wait for the whole rebalance, and a hung broker for Net.ReadTimeout.
// An abandoned request ends when the shutdown cuts the connections under
// it (closeKafka; close waits for it). Its broker must not be closed
// meanwhile: sarama's Broker.Close waits for the request in flight.
func (k *kafkaCoordinator) call(f func() error) error {
	done := make(chan error, 1)
	k.calls.Add(1)
	go func() { // owned by close, which waits for calls
		defer k.calls.Done()
		done <- f()
	}()
	select {
	case err := <-done:
		return err
	case <-k.cm.t.Dying():
		return errAbandoned
	}
}

// closeFailed closes broker after its request failed with err, so that
// the client opens it again (sarama fails every later request on a
// connection whose read failed); not after an abandoned request, which
// still holds it (see call).
func closeFailed(broker *sarama.Broker, err error) {
	if !errors.Is(err, errAbandoned) {
		_ = broker.Close()
	}
}

// claim implements coordinator: the generation's assignment is the claim.
func (k *kafkaCoordinator) claim(pm *partitionManager) bool {
	pm.setClaimed()
	return true
}

// release implements coordinator: nothing to release, the next JoinGroup
// reports the partition as no longer owned.
func (k *kafkaCoordinator) release(pm *partitionManager, _ time.Time) error {
	pm.mu.Lock()
	pm.claimed = false
	pm.mu.Unlock()
	return nil
}

// claimBatch implements coordinator: none.
func (k *kafkaCoordinator) claimBatch([]TopicPartition) *claimBatch { return nil }

// beforeKafkaClose implements coordinator: after the last commits, the
// guard stops and the member leaves the group (LeaveGroup), so that the
// others take its partitions at once; a static member (InstanceID) does
// not leave: the coordinator keeps its partitions for it until its
// session timeout (KIP-345).
func (k *kafkaCoordinator) beforeKafkaClose() {
	cm := k.cm
	cm.stopGuard()
	m := k.current()
	if k.consumer != nil {
		// GroupProtocolConsumer: a static member leaves too, with epoch
		// -2, and the broker keeps its partitions for it.
		if m.generation <= 0 || k.fencedOut.Load() {
			return
		}
		if k.leaveErr = k.leaveConsumer(m); k.leaveErr != nil {
			cm.logf(slog.LevelWarn, "Failed to leave the group: %s; the coordinator removes this member after its session timeout.", k.leaveErr)
		} else {
			cm.logf(slog.LevelInfo, "Left the group.")
		}
		return
	}
	if m.id == "" || k.instanceID != nil || cm.fenced() {
		return
	}
	k.leaveErr = k.leave(m, nil)
	if k.leaveErr != nil {
		cm.logf(slog.LevelWarn, "Failed to leave the group: %s; the coordinator removes this member after its session timeout (%s).", k.leaveErr, k.sessionTimeout)
	} else {
		cm.logf(slog.LevelInfo, "Left the group.")
	}
}

// leave sends the LeaveGroup of m; with instanceID, that of a static
// member (KIP-345: LeaveGroup v3 and later), which the coordinator removes
// at once too.
func (k *kafkaCoordinator) leave(m groupMember, instanceID *string) error {
	cm := k.cm
	// On the offset store's connection, as a heartbeat: on the group
	// client's, it would wait behind a JoinGroup that a Close abandoned,
	// which the coordinator answers when the rebalance completes.
	broker, err := cm.offsets.broker()
	if err != nil {
		return err
	}
	req := &sarama.LeaveGroupRequest{GroupId: cm.group, MemberId: m.id}
	v := cm.config.Version
	for _, step := range []struct {
		from    sarama.KafkaVersion
		version int16
	}{{sarama.V0_11_0_0, 1}, {sarama.V2_0_0_0, 2}, {sarama.V2_4_0_0, 4}} {
		if v.IsAtLeast(step.from) {
			req.Version = step.version
		}
	}
	if req.Version >= 3 {
		req.Members = []sarama.MemberIdentity{{MemberId: m.id, GroupInstanceId: instanceID}}
	}
	resp, err := broker.LeaveGroup(req)
	if err != nil {
		return k.coordinatorFailed(broker, err)
	}
	errs := []sarama.KError{resp.Err}
	for _, r := range resp.Members {
		errs = append(errs, r.Err)
	}
	for _, kerr := range errs {
		if errors.Is(kerr, sarama.ErrFencedInstancedId) {
			k.instanceFenced(fmt.Errorf("leave group %s: %w", cm.group, kerr))
		}
		if !errors.Is(kerr, sarama.ErrNoError) && !errors.Is(kerr, sarama.ErrUnknownMemberId) {
			return k.coordinatorFailed(broker, kerr)
		}
	}
	return nil
}

// close implements coordinator: the guard is stopped (if beforeKafkaClose
// did not run), the group requests abandoned in flight ended with the
// clients, which closeKafka closed.
func (k *kafkaCoordinator) close() []error {
	k.cm.stopGuard()
	k.calls.Wait()
	k.rejoins.stop()
	k.lister.close()
	if k.consumer != nil {
		k.consumer.t.close()
	}
	if k.leaveErr != nil {
		return []error{fmt.Errorf("leave group %s: %w", k.cm.group, k.leaveErr)}
	}
	return nil
}
