package kafkaconsumer

// The seam between the two coordinators of a group (Config.Coordinator)
// and what they share. Below the seam both run the same partition
// managers, hand-out, acks, offset store and fetch engine, and the same
// fence (fence.go) stops hand-out and commits; above it each coordinator
// decides which partitions this instance runs:
//
//   - ZooKeeper (coordinator_zookeeper.go, with claims.go, session.go,
//     static.go, topics.go, watch_cache.go, mixed.go and the guard of
//     fence.go): the manager loop watches the group's instances and the
//     subscription, every instance computes the distribution itself, and a
//     partition is consumed only under its owner node (its claim).
//   - Kafka (coordinator_kafka.go, coordinator_kafka_assign.go,
//     coordinator_kafka_guard.go): Kafka's group coordinator keeps the
//     membership (JoinGroup, SyncGroup, Heartbeat, LeaveGroup), the leader
//     computes the distribution, and the assignment of a generation is
//     the claim.

import (
	"fmt"
	"time"
)

// Coordinator says who coordinates the group's membership and the
// assignment of its partitions (Config.Coordinator). Offsets are
// committed to Kafka under the group's name either way.
type Coordinator int

const (
	// CoordinatorZooKeeper coordinates the group through ZooKeeper: the
	// instances register under /consumers/<group>/ids, each computes the
	// distribution, and a partition is consumed under its owner node
	// (/consumers/<group>/owners). The default, and the layout of the
	// original wvanbergen/kafka library (docs/zookeeper-layout.md).
	CoordinatorZooKeeper Coordinator = iota

	// CoordinatorKafka coordinates the group through Kafka's group
	// coordinator, with the classic group protocol (JoinGroup, SyncGroup,
	// Heartbeat, LeaveGroup; protocol type "consumer", protocol
	// "kafkaconsumer"): no ZooKeeper at all. Join takes "" for the
	// ZooKeeper connection string, and needs Config.Brokers; the
	// subscription's partitions come from Kafka's metadata, as with
	// DiscoverFromKafka, whatever Config.Discovery says. The group's
	// leader distributes the partitions as the ZooKeeper mode does
	// (distribution.go), over the members sorted by InstanceID (or member
	// ID), and a rebalance stops only the partitions that move: those stay
	// unassigned for one generation, until their previous owner has
	// stopped them with its final commit (KIP-429's cooperative protocol).
	// Commits carry the member's generation, so that Kafka refuses those
	// of a member that was removed from the group. See the README,
	// "Kafka-coordinated groups", and docs/configuration.md.
	CoordinatorKafka
)

// String returns the name of the constant.
func (c Coordinator) String() string {
	switch c {
	case CoordinatorZooKeeper:
		return "CoordinatorZooKeeper"
	case CoordinatorKafka:
		return "CoordinatorKafka"
	}
	return fmt.Sprintf("Coordinator(%d)", int(c))
}

// GroupProtocol is the group protocol of a Kafka-coordinated group
// (Config.GroupProtocol).
type GroupProtocol int

const (
	// GroupProtocolClassic is Kafka's classic group protocol: JoinGroup,
	// SyncGroup, Heartbeat and LeaveGroup, with the assignment computed
	// by this library on the group's leader (CoordinatorKafka's
	// documentation). The default.
	GroupProtocolClassic GroupProtocol = iota

	// GroupProtocolConsumer is the consumer group protocol of KIP-848
	// (Kafka 4.0 and later): membership by ConsumerGroupHeartbeat, the
	// assignment computed by the broker's assignor
	// (Config.GroupRemoteAssignor) and reconciled incrementally, and
	// commits fenced by the member's epoch. See
	// docs/consumer-protocol.md.
	GroupProtocolConsumer

	// GroupProtocolShare makes the consumer a member of a share group
	// (KIP-932, Kafka 4.2 and later, CoordinatorKafka only): the members
	// of the group consume the same partitions, each record acquired by
	// one member at a time under the broker's acquisition lock and
	// acknowledged one by one (Ack accepts it; ShareOf gives Release,
	// Reject and the delivery count). No order, no committed offsets:
	// at least once. See docs/share-groups.md.
	GroupProtocolShare
)

// String returns the name of the constant.
func (p GroupProtocol) String() string {
	switch p {
	case GroupProtocolClassic:
		return "GroupProtocolClassic"
	case GroupProtocolConsumer:
		return "GroupProtocolConsumer"
	case GroupProtocolShare:
		return "GroupProtocolShare"
	}
	return fmt.Sprintf("GroupProtocol(%d)", int(p))
}

// coordinator is the seam: the steps of the manager goroutine that depend
// on who coordinates the group. The consumer manager holds one (cm.coord),
// chosen by Join from Config.Coordinator.
type coordinator interface {
	// manage is the manager loop: it learns this instance's share of the
	// partitions and runs managePartitionManagers with it, again at every
	// change, until the manager goroutine's tomb is dying. shutdown runs
	// after it returns.
	manage()
	// claim takes pm's partition for this instance before it consumes,
	// and reports whether it holds it (false: killed first).
	claim(pm *partitionManager) bool
	// release gives pm's partition up after its final commit, by
	// deadline; it returns what did not complete.
	release(pm *partitionManager, deadline time.Time) error
	// claimBatch returns the claims of the partitions one distribution
	// starts, taken together, or nil when each partition claims alone.
	claimBatch(tps []TopicPartition) *claimBatch
	// beforeKafkaClose runs in closeKafka after the last commit round,
	// before the Kafka clients are closed.
	beforeKafkaClose()
	// close ends the membership and closes what connect opened for the
	// coordination, after closeKafka; it returns what did not complete.
	close() []error
}

// coordinator returns the coordinator of the consumer manager: that of
// Join, or the ZooKeeper one for a consumer manager of the unit tests,
// which set none.
func (cm *consumerManager) coordinator() coordinator {
	if cm.coord != nil {
		return cm.coord
	}
	return zookeeperCoordinator{cm}
}

// kafkaActive returns the Kafka coordinator when Kafka's group coordinator
// coordinates the group now: always with CoordinatorKafka, and after the
// switch for an instance that follows it (coordinator_migrate.go); nil
// otherwise.
func (cm *consumerManager) kafkaActive() *kafkaCoordinator {
	switch c := cm.coord.(type) {
	case *kafkaCoordinator:
		return c
	case *migratingCoordinator:
		return c.active.Load()
	}
	return nil
}
