package kafkaconsumer

import (
	"fmt"
	"math/rand"
	"reflect"
	"sort"
	"testing"

	"github.com/wvanbergen/kazoo-go"
)

// testPartitions returns n partitions spread over topics and brokers.
func testPartitions(n, topics, brokers int) kazoo.PartitionList {
	kz := &kazoo.Kazoo{}
	var result kazoo.PartitionList
	for i := 0; i < n; i++ {
		topic := kz.Topic(fmt.Sprintf("topic-%d", i%topics))
		leader := int32(i % brokers)
		result = append(result, topic.Partition(int32(i/topics), []int32{leader, (leader + 1) % int32(brokers)}))
	}
	return result
}

func testInstances(n int) kazoo.ConsumergroupInstanceList {
	group := (&kazoo.Kazoo{}).Consumergroup("group")
	var result kazoo.ConsumergroupInstanceList
	for i := 0; i < n; i++ {
		result = append(result, group.Instance(fmt.Sprintf("host:%08x", (i*7919)%1000003)))
	}
	return result
}

// checkDistribution checks the invariants of a distribution.
func checkDistribution(t *testing.T, instances kazoo.ConsumergroupInstanceList, partitions kazoo.PartitionList, got map[string][]*kazoo.Partition) {
	t.Helper()
	seen := make(map[string]int)
	ids := make(map[string]bool)
	for _, instance := range instances {
		ids[instance.ID] = true
	}
	min, max := len(partitions)+1, -1
	for _, instance := range instances {
		share := got[instance.ID]
		if len(share) < min {
			min = len(share)
		}
		if len(share) > max {
			max = len(share)
		}
		for i, p := range share {
			seen[p.Key()]++
			if i > 0 {
				prev := share[i-1]
				if prev.PreferredReplica() > p.PreferredReplica() ||
					(prev.PreferredReplica() == p.PreferredReplica() && prev.Key() >= p.Key()) {
					t.Errorf("instance %s: %s (leader %d) comes before %s (leader %d)", instance.ID, prev.Key(), prev.PreferredReplica(), p.Key(), p.PreferredReplica())
				}
			}
		}
	}
	for id := range got {
		if !ids[id] {
			t.Errorf("partitions assigned to unknown instance %s", id)
		}
	}
	for _, p := range partitions {
		if len(instances) == 0 {
			if seen[p.Key()] != 0 {
				t.Errorf("partition %s assigned without instances", p.Key())
			}
			continue
		}
		if seen[p.Key()] != 1 {
			t.Errorf("partition %s assigned %d times, want 1", p.Key(), seen[p.Key()])
		}
	}
	if len(instances) > 0 && max-min > 1 {
		t.Errorf("shares differ by %d (min %d, max %d), want at most 1", max-min, min, max)
	}
}

func TestDistributePartitionsBetweenConsumers(t *testing.T) {
	t.Parallel()
	cases := []struct{ instances, partitions int }{
		{0, 1}, {1, 0}, {2, 5}, {5, 2}, {9, 32}, {10, 50}, {232, 592},
	}
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 20; i++ {
		cases = append(cases, struct{ instances, partitions int }{rng.Intn(50), rng.Intn(500)})
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%d_instances_%d_partitions", tc.instances, tc.partitions), func(t *testing.T) {
			instances := testInstances(tc.instances)
			partitions := testPartitions(tc.partitions, 3, 5)
			got := distributePartitionsBetweenConsumers(instances, retrievePartitionLeaders(partitions))
			checkDistribution(t, instances, partitions, got)

			// Same input in another order: same result.
			shuffledInstances := append(kazoo.ConsumergroupInstanceList(nil), instances...)
			shuffledPartitions := append(kazoo.PartitionList(nil), partitions...)
			rng.Shuffle(len(shuffledInstances), func(i, j int) {
				shuffledInstances[i], shuffledInstances[j] = shuffledInstances[j], shuffledInstances[i]
			})
			rng.Shuffle(len(shuffledPartitions), func(i, j int) {
				shuffledPartitions[i], shuffledPartitions[j] = shuffledPartitions[j], shuffledPartitions[i]
			})
			again := distributePartitionsBetweenConsumers(shuffledInstances, retrievePartitionLeaders(shuffledPartitions))
			if !reflect.DeepEqual(keys(got), keys(again)) {
				t.Errorf("distribution depends on input order")
			}
		})
	}
}

func keys(d map[string][]*kazoo.Partition) map[string][]string {
	result := make(map[string][]string, len(d))
	for id, ps := range d {
		for _, p := range ps {
			result[id] = append(result[id], p.Key())
		}
	}
	return result
}

func TestDistributionOrdersByLeaderThenKey(t *testing.T) {
	t.Parallel()
	kz := &kazoo.Kazoo{}
	a, b := kz.Topic("a"), kz.Topic("b")
	partitions := kazoo.PartitionList{
		b.Partition(0, []int32{2}),
		a.Partition(1, []int32{1}),
		a.Partition(0, []int32{2}),
		b.Partition(1, []int32{1}),
	}
	instances := testInstances(1)
	got := keys(distributePartitionsBetweenConsumers(instances, retrievePartitionLeaders(partitions)))
	want := []string{"a/1", "b/1", "a/0", "b/0"}
	if !reflect.DeepEqual(got[instances[0].ID], want) {
		t.Fatalf("got %v, want %v", got[instances[0].ID], want)
	}
}

func TestDistributionContiguousShares(t *testing.T) {
	t.Parallel()
	instances := testInstances(3)
	partitions := testPartitions(7, 1, 1)
	got := distributePartitionsBetweenConsumers(instances, retrievePartitionLeaders(partitions))
	ids := []string{instances[0].ID, instances[1].ID, instances[2].ID}
	// Instances sorted by ID get 3, 2, 2 partitions in key order.
	sort.Strings(ids)
	wantSizes := []int{3, 2, 2}
	for i, id := range ids {
		if len(got[id]) != wantSizes[i] {
			t.Errorf("instance %d (%s) got %d partitions, want %d", i, id, len(got[id]), wantSizes[i])
		}
	}
	if first := got[ids[0]][0].Key(); first != "topic-0/0" {
		t.Errorf("first partition of first instance is %s, want topic-0/0", first)
	}
}
