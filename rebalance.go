package kafkaconsumer

// The manager goroutine (run): it watches the subscription's partitions
// and the group's instances in ZooKeeper, registers again after a lost
// session, distributes the partitions, and starts and stops partition
// managers so that they are this instance's share.

import (
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/wvanbergen/kazoo-go"
)

// run is the manager goroutine:
//  1. watch the partitions of the subscription, and the group's instances;
//  2. register again if the registration is gone (the ZooKeeper session
//     expired), after stopping every partition, whose claims went with it;
//  3. distribute the partitions over the instances;
//  4. run a partition manager for each partition of this instance's share;
//  5. sleep until a watch fires, then go back to 1 for what changed.
func (cm *consumerManager) run() {
	defer cm.t.Done()
	defer cm.shutdown()

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
		if instancesChange == nil {
			readDeparted = true
			var kindsChanged bool
			if instances, instancesChange, kindsChanged, ok = cm.watchInstances(); !ok {
				return
			}
			if kindsChanged {
				partitionsChange = nil // the partitions to distribute depend on the kinds
			}
		}
		if partitionsChange == nil {
			if partitions, partitionsChange, ok = cm.watchSubscription(); !ok {
				return
			}
		}

		if instances.Find(cm.instance.ID) == nil {
			cm.logf(slog.LevelWarn, "This instance's registration is gone (ZooKeeper session expired?); stopping all partitions and registering again.")
			cm.sendError(ErrRegistrationLost)
			cm.config.metrics().RegistrationLost(cm.group)
			cm.loseClaims()
			cm.reportStops(cm.managePartitionManagers(nil))
			if !cm.register() {
				return
			}
			instancesChange = nil
			continue
		}
		if readDeparted {
			var stale bool
			if departed, stale, ok = cm.watchDeparted(instances); !ok {
				return
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

		if !cm.sleep(&partitionsChange, &instancesChange, graceOver(departed)) {
			return
		}
	}
}

// sleep waits until a watch fires, and clears that watch, or until the
// manager is interrupted (it returns false). Meanwhile it releases the
// orphan claims, retrying those that fail. When graceOver is not zero, the
// grace of a departed static member ends then: sleep clears the
// instances' watch then too, so that they are read again with the
// departed members.
func (cm *consumerManager) sleep(partitionsChange, instancesChange *<-chan zk.Event, graceOver time.Time) bool {
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
		case <-graceC:
			cm.logf(slog.LevelInfo, "Woke up because the grace of a departed static member ended.")
			*instancesChange = nil
			return true
		case <-retryC:
		}
	}
}

// reportStops sends to Errors() what did not complete in time when the
// given partition managers stopped.
func (cm *consumerManager) reportStops(stopped []*partitionManager) {
	for _, pm := range stopped {
		if err := pm.t.Err(); err != nil {
			cm.sendError(err)
		}
	}
}

func describeEvent(ev zk.Event) string {
	if ev.Err != nil {
		return fmt.Sprintf("%s: %s", ev.Type, ev.Err)
	}
	return ev.Type.String()
}

// watchSubscription returns the subscription's partitions and a watch on
// them, retrying errors until the manager is interrupted (ok is false then).
func (cm *consumerManager) watchSubscription() (kazoo.PartitionList, <-chan zk.Event, bool) {
	if cm.config.Discovery == DiscoverFromKafka {
		return cm.watchMetadata()
	}
	for attempt := 0; ; attempt++ {
		topics := sessionTopics{conn: cm.zkConn, chroot: cm.config.Zookeeper.Chroot}
		partitions, changed, err := watchPartitions(cm.subscription, topics, cm.kz, &cm.watches, cm.originals)
		if err == nil {
			return partitions, changed, true
		}
		cm.logf(slog.LevelWarn, "Failed to watch subscription: %s. Trying again.", err)
		if !sleepOrDie(&cm.t, attempt) {
			return nil, nil, false
		}
	}
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
// is interrupted.
func (cm *consumerManager) register() bool {
	for attempt := 0; ; attempt++ {
		err := cm.registerInstance()
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

// assignment is a partition of this instance's share.
type assignment struct {
	partition *kazoo.Partition
	// claimOnly: claim the partition but do not consume it (see
	// partitionManager.claimOnly).
	claimOnly bool
}

// managePartitionManagers makes the running partition managers those of the
// assigned partitions: it stops the others, waiting until they are done,
// and starts the missing ones. Stopping managers stay visible to Ack until
// they are done, since they wait for acks. It returns the stopped ones.
// assigned is nil when the instance stops all its partitions without a
// distribution (a lost registration, the shutdown); the first call with a
// distribution closes firstRound.
func (cm *consumerManager) managePartitionManagers(assigned map[TopicPartition]assignment) (stopped []*partitionManager) {
	began := time.Now()
	current := *cm.pms.Load()
	var stopping []*partitionManager
	next := make(partitionManagers, len(assigned))
	for tp, pm := range current {
		if _, ok := assigned[tp]; ok {
			next[tp] = pm
		} else {
			stopping = append(stopping, pm)
			pm.t.Kill(nil)
		}
	}
	var started []*partitionManager
	for tp, a := range assigned {
		if _, ok := current[tp]; !ok {
			pm := newPartitionManager(cm, a.partition)
			pm.claimOnly = a.claimOnly
			next[tp] = pm
			started = append(started, pm)
		}
	}
	cm.logf(slog.LevelInfo, "This instance is assigned to consume %d partitions, and is currently consuming %d partitions (stopping %d, starting %d).",
		len(assigned), len(current), len(stopping), len(started))

	during := make(partitionManagers, len(next)+len(stopping))
	for tp, pm := range next {
		during[tp] = pm
	}
	for _, pm := range stopping {
		during[pm.tp] = pm
	}
	if len(started) > 0 {
		all := make([]TopicPartition, 0, len(started))
		consumed := make([]TopicPartition, 0, len(started)) // not claim-only
		for _, pm := range started {
			all = append(all, pm.tp)
			if !pm.claimOnly {
				consumed = append(consumed, pm.tp)
			}
		}
		initial := newInitialOffsets(&cm.kafkaCalls, cm.client, cm.config.Offsets.Initial, consumed)
		claims := newClaimBatch(cm, all)
		committed := newCommittedOffsets(&cm.kafkaCalls, cm.offsets, claims, consumed)
		for _, pm := range started {
			pm.initial, pm.claims, pm.committed = initial, claims, committed
		}
	}
	cm.pms.Store(&during)
	for _, pm := range started {
		go pm.run()
	}
	for _, pm := range stopping {
		_ = pm.t.Wait() // what did not complete is logged, and returned
		pm.retired.Store(true)
	}
	cm.pms.Store(&next)
	if assigned != nil && cm.firstRound != nil {
		// Before OnRebalance, which may block: JoinContext must not wait
		// for it. Only the manager goroutine closes it.
		select {
		case <-cm.firstRound:
		default:
			close(cm.firstRound)
		}
	}
	cm.notifyClaims()

	revoked, newly := sortedPartitions(stopping), sortedPartitions(started)
	if len(revoked)+len(newly) > 0 {
		r := Rebalance{Revoked: revoked, Assigned: newly}
		cm.config.metrics().Rebalanced(cm.group, r, time.Since(began))
		if cm.config.OnRebalance != nil {
			cm.config.OnRebalance(r)
		}
	}
	return stopping
}

// sortedPartitions returns the partitions of pms in order, leaving out the
// claim-only ones (which Stats and OnRebalance do not show).
func sortedPartitions(pms []*partitionManager) []TopicPartition {
	result := make([]TopicPartition, 0, len(pms))
	for _, pm := range pms {
		if !pm.claimOnly {
			result = append(result, pm.tp)
		}
	}
	sort.Slice(result, func(i, j int) bool { return result[i].less(result[j]) })
	return result
}
