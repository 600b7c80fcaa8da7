package kafkaconsumer

// The manager goroutine (run): its coordinator's loop (coordinator.go)
// learns this instance's share of the partitions, and
// managePartitionManagers, which both coordinators share, starts and stops
// partition managers so that they are that share.

import (
	"log/slog"
	"sort"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/wvanbergen/kazoo-go"
)

// run is the manager goroutine: the loop of the group's coordinator
// (manageZookeeper or manageKafka),
// until the tomb is dying, then the shutdown.
func (cm *consumerManager) run() {
	defer cm.t.Done()
	defer cm.shutdown()
	cm.coordinator().manage()
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
		claims := cm.coordinator().claimBatch(all)
		committed := newCommittedOffsets(&cm.kafkaCalls, cm.offsets, claims, consumed)
		for _, pm := range started {
			pm.initial, pm.claims, pm.committed = initial, claims, committed
		}
	}
	cm.pms.Store(&during)
	for _, pm := range started {
		go pm.run()
	}
	cm.waitStopped(stopping, next)
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

// waitStopped waits until the partition managers stopping have stopped
// (what did not complete is logged, and returned). When the manager is
// interrupted meanwhile (Close), those of next are stopped at once too,
// so that the shutdown waits for one stop of every partition, all at
// once, rather than for theirs after these: Close's bound counts one
// MaxProcessingTime.
func (cm *consumerManager) waitStopped(stopping []*partitionManager, next partitionManagers) {
	dying := cm.t.Dying()
	for _, pm := range stopping {
		select {
		case <-pm.t.Dead():
		case <-dying:
			dying = nil
			for _, other := range next {
				other.t.Kill(nil)
			}
			<-pm.t.Dead()
		}
		pm.retired.Store(true)
	}
}
