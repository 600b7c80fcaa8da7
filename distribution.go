package kafkaconsumer

import (
	"sort"

	"github.com/wvanbergen/kazoo-go"
)

// partitionLeader is a partition with the broker that leads it when the
// cluster is balanced: its preferred replica.
type partitionLeader struct {
	id        int32
	leader    int32
	partition *kazoo.Partition
	key       string // "topic/partition", the secondary sort key
}

// retrievePartitionLeaders takes each partition's preferred replica (its
// first replica) as its leader. It reads nothing from ZooKeeper, so every
// instance computes the same result from the same partition list.
func retrievePartitionLeaders(partitions kazoo.PartitionList) []partitionLeader {
	result := make([]partitionLeader, 0, len(partitions))
	for _, p := range partitions {
		result = append(result, partitionLeader{
			id:        p.ID,
			leader:    p.PreferredReplica(),
			partition: p,
			key:       p.Key(),
		})
	}
	return result
}

// distributePartitionsBetweenConsumers assigns partitions to instances. The
// partitions are sorted by leader, then by their "topic/partition" key, and
// the instances by ID; with P partitions and C instances, instance i gets a
// contiguous run of P/C partitions, and the first P%C instances get one more.
// Sorting by leader makes an instance's partitions share few leaders, so it
// talks to few brokers. The result maps instance IDs to their partitions; it
// has no entry for an instance that gets none. Neither input is changed.
func distributePartitionsBetweenConsumers(instances kazoo.ConsumergroupInstanceList, partitions []partitionLeader) map[string][]*kazoo.Partition {
	if len(instances) == 0 || len(partitions) == 0 {
		return map[string][]*kazoo.Partition{}
	}

	sortedPartitions := append([]partitionLeader(nil), partitions...)
	sort.Slice(sortedPartitions, func(i, j int) bool {
		a, b := sortedPartitions[i], sortedPartitions[j]
		if a.leader != b.leader {
			return a.leader < b.leader
		}
		return a.key < b.key
	})

	ids := make([]string, len(instances))
	for i, instance := range instances {
		ids[i] = instance.ID
	}
	sort.Strings(ids)

	result := make(map[string][]*kazoo.Partition, len(ids))
	share, extra := len(sortedPartitions)/len(ids), len(sortedPartitions)%len(ids)
	next := 0
	for i, id := range ids {
		n := share
		if i < extra {
			n++
		}
		if n == 0 {
			break
		}
		for _, pl := range sortedPartitions[next : next+n] {
			result[id] = append(result[id], pl.partition)
		}
		next += n
	}
	return result
}
