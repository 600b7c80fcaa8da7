package kafkaconsumer

// The ZooKeeper coordinator (CoordinatorZooKeeper): the manager loop of a
// ZooKeeper-coordinated group (watches on the group's instances and the
// subscription's partitions, the registration, the distribution computed
// by every instance), its part of connect and of the shutdown. Its claims
// are in claims.go, its nodes in session.go, its static members in
// static.go, its fence's guard in fence.go.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/wvanbergen/kazoo-go"
)

// zookeeperCoordinator is the coordinator of CoordinatorZooKeeper.
type zookeeperCoordinator struct{ cm *consumerManager }

func (z zookeeperCoordinator) manage()                         { z.cm.manageZookeeper(nil) }
func (z zookeeperCoordinator) claim(pm *partitionManager) bool { return pm.claim() }
func (z zookeeperCoordinator) claimBatch(tps []TopicPartition) *claimBatch {
	return newClaimBatch(z.cm, tps)
}
func (z zookeeperCoordinator) beforeKafkaClose() {}

// close stops the guard, deregisters the instance and closes the
// ZooKeeper connections (see closeConnections).
func (z zookeeperCoordinator) close() []error {
	cm := z.cm
	var errs []error
	cm.stopGuard()
	if cm.registered {
		err := errFenced
		if !cm.fenced() {
			// Bounded: a ZooKeeper that does not answer must not hold
			// Close up. The registration goes with the session, at once
			// when the close below reaches the server, else when it
			// expires.
			deregister := cm.deregisterNode
			if cm.config.InstanceID != "" {
				deregister = cm.deregisterStatic // and record the departure
			}
			err = cm.zkCall(cm.zkTimeout(), deregister)
		}
		if err != nil && !errors.Is(err, kazoo.ErrInstanceNotRegistered) {
			err = fmt.Errorf("deregister instance %s: %w", cm.instance.ID, convertError(err))
			cm.logf(slog.LevelError, "Failed to %s.", err)
			errs = append(errs, err)
		}
		cm.registered = false
	}
	if cm.kz != nil {
		if err := cm.kz.Close(); err != nil {
			cm.logf(slog.LevelWarn, "Failed to close ZooKeeper connection: %s.", err)
		}
	}
	if cm.zkProbe != nil {
		closeSession(cm.zkProbe, cm.zkConns)
	}
	cm.zkCalls.Wait() // the close ended their requests
	return errs
}

func (z zookeeperCoordinator) release(pm *partitionManager, deadline time.Time) error {
	return pm.release(deadline)
}

// manageZookeeper is the manager loop of a ZooKeeper-coordinated group:
//  1. watch the partitions of the subscription, and the group's instances,
//     once they settled (watchSettledInstances);
//  2. register again if the registration is gone (the ZooKeeper session
//     expired), after stopping every partition, whose claims went with it;
//  3. distribute the partitions over the instances;
//  4. run a partition manager for each partition of this instance's share;
//  5. sleep until a watch fires, then go back to 1 for what changed.
//
// With sw (an instance that follows the group's coordinator switch,
// coordinator_migrate.go; nil: none), it also watches the switch, and
// when it says kafka, stops every partition with its final commit,
// releases the claims, deregisters and returns true. It returns false
// when the manager is interrupted.
func (cm *consumerManager) manageZookeeper(sw *coordinatorSwitch) (switched bool) {
	var (
		partitions       kazoo.PartitionList
		instances        kazoo.ConsumergroupInstanceList
		partitionsChange <-chan zk.Event
		instancesChange  <-chan zk.Event
		ok               bool
		// departed are the static members whose return the group waits
		// for (static.go), read again with the instances; readDeparted
		// says when.
		departed     []departure
		readDeparted bool
	)
	for {
		if sw != nil {
			if !sw.read() {
				return false
			}
			if sw.kafka() {
				return cm.leaveZookeeperForSwitch()
			}
		}
		if instancesChange == nil {
			readDeparted = true
			var kindsChanged, settled bool
			if instances, instancesChange, kindsChanged, settled, ok = cm.watchSettledInstances(sw); !ok {
				return false
			}
			if !settled { // the coordinator switch changed: read it first
				instancesChange = nil
				continue
			}
			if kindsChanged {
				partitionsChange = nil // the partitions to distribute depend on the kinds
			}
		}
		if partitionsChange == nil {
			if partitions, partitionsChange, ok = cm.watchSubscription(); !ok {
				return false
			}
		}

		if instances.Find(cm.instance.ID) == nil {
			cm.logf(slog.LevelWarn, "This instance's registration is gone (ZooKeeper session expired?); stopping all partitions and registering again.")
			cm.sendError(ErrRegistrationLost)
			cm.config.metrics().RegistrationLost(cm.group)
			cm.loseClaims()
			cm.reportStops(cm.managePartitionManagers(nil))
			if !cm.register(sw) {
				return false
			}
			instancesChange = nil
			continue
		}
		if readDeparted {
			var stale bool
			if departed, stale, ok = cm.watchDeparted(instances); !ok {
				return false
			}
			if stale { // a static member came back since the instances were read
				instancesChange = nil
				continue
			}
			readDeparted = false
		}

		leaders := retrievePartitionLeaders(partitions)
		members := cm.withDeparted(instances, departed)
		if len(departed) > 0 {
			cm.logf(slog.LevelInfo, "Currently, %d instances are registered, and %d departed static members are waited for, to consume %d partitions in total.", len(instances), len(departed), len(partitions))
		} else {
			cm.logf(slog.LevelInfo, "Currently, %d instances are registered, to consume %d partitions in total.", len(instances), len(partitions))
		}
		distribution := distributePartitionsBetweenConsumers(members, leaders)
		assigned := make(map[TopicPartition]assignment)
		for _, p := range distribution[cm.instance.ID] {
			tp := TopicPartition{Topic: p.Topic().Name, Partition: p.ID}
			assigned[tp] = assignment{partition: p, claimOnly: cm.claimOnlyTopic(tp.Topic, cm.originals)}
		}
		var awaiting []PartitionStats
		if len(departed) > 0 {
			awaiting = cm.awaitingReturn(departed, distribution, distributePartitionsBetweenConsumers(instances, leaders))
		}
		cm.awaiting.Store(&awaiting)
		cm.reportStops(cm.managePartitionManagers(assigned))
		cm.recordShare(assigned)

		if !cm.sleep(&partitionsChange, &instancesChange, sw, graceOver(departed)) {
			return false
		}
	}
}

// sleep waits until a watch fires, and clears that watch, or until the
// manager is interrupted (it returns false). Meanwhile it releases the
// orphan claims, retrying those that fail. A change of the coordinator
// switch (sw, when not nil) wakes it too. When graceOver is not zero, the
// grace of a departed static member ends then: sleep clears the
// instances' watch then too, so that they are read again with the
// departed members.
func (cm *consumerManager) sleep(partitionsChange, instancesChange *<-chan zk.Event, sw *coordinatorSwitch, graceOver time.Time) bool {
	var retry *time.Timer
	defer func() {
		if retry != nil {
			retry.Stop()
		}
	}()
	var graceC <-chan time.Time
	if !graceOver.IsZero() {
		grace := time.NewTimer(time.Until(graceOver))
		defer grace.Stop()
		graceC = grace.C
	}
	for attempt := 0; ; attempt++ {
		var retryC <-chan time.Time
		if left := cm.releaseOrphans(); len(left) > 0 {
			if retry == nil {
				retry = time.NewTimer(retryDelay(attempt))
			} else {
				retry.Reset(retryDelay(attempt))
			}
			retryC = retry.C
		}
		select {
		case <-cm.t.Dying():
			cm.logf(slog.LevelInfo, "Interrupted, shutting down...")
			return false
		case ev := <-*partitionsChange:
			cm.logf(slog.LevelInfo, "Woke up because the subscription reported a change in partitions (%s).", describeEvent(ev))
			*partitionsChange = nil
			return true
		case ev := <-*instancesChange:
			cm.logf(slog.LevelInfo, "Woke up because the list of running instances changed (%s).", describeEvent(ev))
			*instancesChange = nil
			return true
		case ev := <-sw.watch():
			cm.logf(slog.LevelInfo, "Woke up because the group's coordinator switch changed (%s).", describeEvent(ev))
			sw.changed = nil
			return true
		case <-graceC:
			cm.logf(slog.LevelInfo, "Woke up because the grace of a departed static member ended.")
			*instancesChange = nil
			return true
		case <-retryC:
		}
	}
}

func describeEvent(ev zk.Event) string {
	if ev.Err != nil {
		return fmt.Sprintf("%s: %s", ev.Type, ev.Err)
	}
	return ev.Type.String()
}

// watchInstances returns the group's instances and a watch on them, and
// sets cm.originals (see originalsRegistered); it reports whether that
// changed. It retries errors until the manager is interrupted (ok is false
// then).
func (cm *consumerManager) watchInstances() (instances kazoo.ConsumergroupInstanceList, changed <-chan zk.Event, kindsChanged, ok bool) {
	for attempt := 0; ; attempt++ {
		instances, watch, err := cm.watchInstanceNodes()
		var originals bool
		if err == nil {
			originals, err = cm.originalsRegistered(instances)
		}
		if err == nil {
			changed = watch
			kindsChanged = originals != cm.originals
			if kindsChanged {
				if originals {
					cm.logf(slog.LevelInfo, "An instance of the original library is registered: distributing over the partitions it sees, Kafka's internal topics included (claimed, never consumed).")
				} else {
					cm.logf(slog.LevelInfo, "No instance of the original library is registered any more: distributing without Kafka's internal topics.")
				}
			}
			cm.originals = originals
			return instances, changed, kindsChanged, true
		}
		cm.logf(slog.LevelWarn, "Failed to watch consumer group instances: %s. Trying again.", convertError(err))
		if !sleepOrDie(&cm.t, attempt) {
			return nil, nil, false, false
		}
	}
}

// The manager loop distributes once the group's membership has settled:
// once its instances did not change for membershipQuiet, or, while they
// keep changing, membershipSettleMax after the first read. Instances
// that join or leave together (a scale-out, a scale-in, a rolling
// deployment) register within a few hundred milliseconds of each other,
// and each registration wakes every member: a member that distributed at
// each wake-up would hand partitions to the members seen so far and take
// them back at the next, every one of those moves a hand-off through
// ZooKeeper. The quiet spell is what a single join or leave waits more.
// A group read with fewer than membershipSettleFrom instances
// distributes at once, as the original does: its intermediate
// distributions move few partitions, and its starts, joins and leaves
// would otherwise each wait the spell (a lone consumer's start among
// them).
const (
	membershipQuiet      = 200 * time.Millisecond
	membershipSettleMax  = 2 * time.Second
	membershipSettleFrom = 5
)

// watchSettledInstances is watchInstances, read again each time the
// watch fires until the instances have not changed for membershipQuiet,
// or until membershipSettleMax has passed since the first read; it
// returns the last read, with kindsChanged true when any read changed
// cm.originals. settled is false when the coordinator switch (sw, nil
// for none) changed meanwhile, which the caller reads first; ok is false
// when the manager is interrupted.
func (cm *consumerManager) watchSettledInstances(sw *coordinatorSwitch) (instances kazoo.ConsumergroupInstanceList, changed <-chan zk.Event, kindsChanged, settled, ok bool) {
	instances, changed, kindsChanged, ok = cm.watchInstances()
	if !ok {
		return nil, nil, false, false, false
	}
	if len(instances) < membershipSettleFrom {
		return instances, changed, kindsChanged, true, true // a small group: distribute at once
	}
	began := time.Now()
	quiet := time.NewTimer(membershipQuiet)
	defer quiet.Stop()
	limit := time.NewTimer(membershipSettleMax)
	defer limit.Stop()
	for changes := 0; ; changes++ {
		select {
		case <-cm.t.Dying():
			return nil, nil, false, false, false
		case ev := <-sw.watch():
			cm.logf(slog.LevelInfo, "The group's coordinator switch changed (%s) while the group's instances settled.", describeEvent(ev))
			sw.changed = nil
			return instances, changed, kindsChanged, false, true
		case <-quiet.C:
			if changes > 0 {
				cm.logf(slog.LevelInfo, "The group's instances settled after %d changes in %s.", changes, time.Since(began).Round(time.Millisecond))
			}
			return instances, changed, kindsChanged, true, true
		case <-limit.C:
			cm.logf(slog.LevelInfo, "The group's instances changed %d times in %s; distributing without waiting for them to settle.", changes, membershipSettleMax)
			return instances, changed, kindsChanged, true, true
		case <-changed:
		}
		var kinds bool
		if instances, changed, kinds, ok = cm.watchInstances(); !ok {
			return nil, nil, false, false, false
		}
		kindsChanged = kindsChanged || kinds
		quiet.Reset(membershipQuiet)
	}
}

// registerInstance creates the instance's registration node (see
// session.go). An ID of this instance's own can be registered already only
// by an earlier attempt whose answer was lost: then it checks that the
// node is there, and tries again when it is not.
func (cm *consumerManager) registerInstance() error {
	for attempt := 0; ; attempt++ {
		err := cm.registerNode()
		if !errors.Is(err, kazoo.ErrInstanceAlreadyRegistered) || attempt == 10 {
			return err
		}
		if registered, err := cm.registeredNode(); err != nil {
			return err
		} else if registered {
			return nil // an earlier attempt went through before its answer was lost
		}
	}
}

// register registers the instance again, retrying errors until the manager
// is interrupted. When the coordinator switch (sw) says kafka, it does not
// register, and has sw read again: the manager loop leaves ZooKeeper's
// coordination then.
func (cm *consumerManager) register(sw *coordinatorSwitch) bool {
	for attempt := 0; ; attempt++ {
		err := cm.registerInstance()
		if errors.Is(err, errCoordinatorSwitched) {
			cm.registered = false
			if sw != nil {
				sw.changed = nil
			}
			return true
		}
		if err == nil && cm.config.InstanceID != "" {
			err = cm.markStatic(staticRegistered) // after the registration: see departedMembers
		}
		if err == nil {
			cm.logf(slog.LevelInfo, "Consumer instance registered again.")
			return true
		}
		cm.logf(slog.LevelWarn, "Failed to register: %s. Trying again.", convertError(err))
		if !sleepOrDie(&cm.t, attempt) {
			return false
		}
	}
}

// connectZookeeper does the work of Join after validation for a
// ZooKeeper-coordinated group: broker discovery (see discoverBrokers), the
// sarama clients, offset store and consumer (openKafka), and last the
// registration, so that the group never hands a share to an instance that
// cannot consume it. On error, closeConnections undoes what was done.
func (cm *consumerManager) connectZookeeper(ctx context.Context, nodes []string, probe *zk.Conn, id string, subscriptionJSON []byte) error {
	cm.kzGroup = kazooValues.Consumergroup(cm.group)
	cm.instance = cm.kzGroup.Instance(id)
	cm.subscriptionJSON = subscriptionJSON
	if _, ok := cm.subscription.(cachingSubscription); !ok {
		// A custom Subscription reads ZooKeeper through kazoo-go (see
		// Subscription.WatchPartitions): it gets a connection of its own.
		kz, err := kazoo.NewKazoo(nodes, cm.config.Zookeeper)
		if err != nil {
			return fmt.Errorf("connect to zookeeper: %w", convertError(err))
		}
		cm.kz = kz
	}

	brokers, err := cm.discoverBrokers(probe)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}

	if err := cm.openKafka(ctx, brokers); err != nil {
		return err
	}

	if err := cm.zkCall(cm.zkTimeout(), func() error { return cm.mkdirs(cm.groupNode()) }); err != nil {
		return fmt.Errorf("create consumer group %s: %w", cm.group, convertError(err))
	}

	if err := cm.zkCall(cm.zkTimeout(), cm.checkAccess); err != nil {
		return fmt.Errorf("join group %s: %w", cm.group, convertError(err))
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if cm.config.InstanceID != "" {
		if err := cm.awaitPreviousInstance(ctx); err != nil {
			return fmt.Errorf("register instance %s: %w", id, convertError(err))
		}
	}
	var sealed bool
	if err := cm.zkCall(cm.zkTimeout(), func() (err error) { sealed, err = cm.ownersSealed(); return err }); err != nil {
		return fmt.Errorf("join group %s: %w", cm.group, convertError(err))
	}
	if sealed {
		// The owner nodes are sealed (owners_seal.go): Kafka coordinates
		// the group, or did until the switch went back; this instance
		// registers once Kafka's group is Empty.
		cm.logf(slog.LevelInfo, "The group's owner nodes are sealed for Kafka's group coordinator: this instance registers once Kafka's group is Empty and the switch (%s) says zookeeper.", cm.switchNode())
		cm.coord.(*migratingCoordinator).startOnKafka = true
		return nil
	}
	sent := time.Now()
	if err := cm.zkCall(cm.zkTimeout(), cm.registerInstance); errors.Is(err, errCoordinatorSwitched) {
		// Kafka coordinates the group: this instance follows it, without
		// a registration (coordinator_migrate.go).
		cm.logf(slog.LevelInfo, "The group's coordinator switch (%s) says kafka: this instance joins Kafka's group instead of registering.", cm.switchNode())
		cm.coord.(*migratingCoordinator).startOnKafka = true
		return nil
	} else if err != nil {
		return fmt.Errorf("register instance %s: %w", id, convertError(cm.registrationDenied(err)))
	}
	cm.registered = true
	if cm.config.InstanceID != "" {
		// After the registration: see departedMembers.
		if err := cm.zkCall(cm.zkTimeout(), func() error { return cm.markStatic(staticRegistered) }); err != nil {
			return fmt.Errorf("record static member %s: %w", id, convertError(cm.denied(err, cm.staticNode(), "create and write its static record", zk.PermCreate|zk.PermWrite)))
		}
	}
	cm.startGuard(sent)
	cm.logf(slog.LevelInfo, "Consumer instance registered (%s).", id)
	return nil
}

// awaitPreviousInstance waits, for a Config.InstanceID, until no other
// ZooKeeper session holds the registration of the ID: that of a previous
// instance of the ID that died goes when its session expires. It waits up
// to previousInstanceWait (of the previous instance's session timeout as
// its static record says, and this instance's), or until ctx is done;
// then, with the registration still there, it returns an error wrapping
// ErrInstanceIDInUse: another live instance holds it.
func (cm *consumerManager) awaitPreviousInstance(ctx context.Context) error {
	node := cm.groupNode("ids", cm.instance.ID)
	var (
		wait     time.Duration
		deadline <-chan time.Time // nil until the registration is found another session's
	)
	for {
		var (
			owner    int64
			watch    <-chan zk.Event
			previous time.Duration
		)
		err := cm.zkCall(cm.zkTimeout(), func() error {
			_, stat, w, err := cm.zkConn.GetW(node)
			if errors.Is(err, zk.ErrNoNode) {
				return nil
			} else if err != nil {
				return err
			}
			owner, watch = stat.EphemeralOwner, w
			if deadline == nil && owner != cm.zkConn.SessionID() {
				previous = cm.recordedSessionTimeout()
			}
			return nil
		})
		if err != nil {
			return err
		}
		if watch == nil || owner == cm.zkConn.SessionID() {
			return nil
		}
		if deadline == nil {
			wait = previousInstanceWait(previous, cm.sessionTimeout())
			timer := time.NewTimer(wait)
			defer timer.Stop()
			deadline = timer.C
			cm.logf(slog.LevelInfo, "Instance ID %s is registered by another ZooKeeper session (0x%x); waiting up to %s for it to expire.", cm.instance.ID, owner, wait)
		}
		select {
		case <-watch:
		case <-deadline:
			return fmt.Errorf("%w: %s is registered by another ZooKeeper session (0x%x), still alive after %s", ErrInstanceIDInUse, cm.instance.ID, owner, wait)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// previousInstanceWait is how long Join waits for the registration of a
// previous instance of its InstanceID to go, given that instance's
// session timeout previous (0: unknown, taken as own) and this
// instance's negotiated session timeout own: max(previous, own) plus one
// and a half ticks of ZooKeeper's, plus a second.
//
// ZooKeeper expires a session up to a tick after its timeout: it files
// sessions by expiry in buckets of a tick, rounded up. In an ensemble the
// leader, which expires sessions, hears of a request served by a follower
// at its next ping of the follower, up to half a tick later. The tick is
// at most own / 2: ZooKeeper negotiates no session timeout below
// minSessionTimeout, 2 ticks unless the servers set it lower. The second
// covers the closing of the expired session and the watch's news of it.
func previousInstanceWait(previous, own time.Duration) time.Duration {
	tick := own / 2
	return max(previous, own) + tick + tick/2 + time.Second
}
