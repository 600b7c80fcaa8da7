package kafkaconsumer

// The move of a Kafka-coordinated group between the classic protocol and
// the consumer protocol (KIP-848), live, by a rolling restart with
// Config.GroupProtocol changed (docs/consumer-protocol.md, "Moving a
// group"): the brokers' group.consumer.migration.policy (bidirectional by
// default) converts the group while members of both protocols share it.

import (
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// TestIntegrationConsumerProtocolRollingMove: a classic group of three
// instances (child processes) under a steady load is moved to the
// consumer protocol by a rolling restart (each classic instance is
// replaced by a consumer-protocol one, one at a time), and back the same
// way. After each step the live instances share every partition. Nothing
// is lost, no partition is handed out by two instances at once, no
// committed offset moves back, every Close is bounded.
func TestIntegrationConsumerProtocolRollingMove(t *testing.T) {
	consumerProtocolTest(t)
	needFaults(t)
	r := newKafkaFaultRun(t, kafkaPeers, 8, 1)
	sampler := sampleCommitted(t, r.client, r.group, r.topic)
	start := func(consumer bool) *child {
		r.opts.consumerProtocol = consumer
		return r.start()
	}
	live := []*child{start(false), start(false), start(false)}
	r.waitShared(30*time.Second, live...)
	wait := r.produceSteadily(3000, 40*time.Second)
	roll := func(to bool) {
		name := "classic"
		if to {
			name = "consumer"
		}
		began := time.Now()
		for i := range live {
			next := start(to)
			live[i].terminate(t)
			live[i] = next
			step := time.Now()
			r.waitShared(60*time.Second, live...)
			t.Logf("to the %s protocol: instance %d of %d replaced; the group shared every partition %s after the old one closed",
				name, i+1, len(live), time.Since(step).Round(time.Millisecond))
		}
		t.Logf("the group moved to the %s protocol in %s", name, time.Since(began).Round(time.Millisecond))
	}
	roll(true)
	roll(false)
	wait()
	r.finishKafka(sampler)
}

// TestMigrationSwitchBackWaitsForConsumerProtocolMembers: an instance
// that follows the coordinator switch runs under Kafka beside a
// consumer-protocol member (CoordinatorKafka, GroupProtocolConsumer: the
// broker converted the group); the switch goes back to zookeeper. Kafka
// 4 describes a consumer-protocol group to DescribeGroups as Dead with
// no members, yet the consumer-protocol member still owns its
// partitions: the follower must not register in ZooKeeper (and claim
// them) until that member left. Once it closed, the follower registers
// and takes every partition.
func TestMigrationSwitchBackWaitsForConsumerProtocolMembers(t *testing.T) {
	consumerProtocolTest(t)
	debugLogs(t)
	switchBackBesideConsumerProtocol(t, testKafkaVersion())
}

// TestMigrationSwitchBackWaitsForConsumerProtocolMembersOldVersion: as
// TestMigrationSwitchBackWaitsForConsumerProtocolMembers, with the
// follower's Config.Version sarama's default (2.1.0), below the 3.8.0
// of ListGroups v5: it must still tell the consumer-protocol group from
// an empty one.
func TestMigrationSwitchBackWaitsForConsumerProtocolMembersOldVersion(t *testing.T) {
	consumerProtocolTest(t)
	debugLogs(t)
	switchBackBesideConsumerProtocol(t, sarama.V2_1_0_0)
}

// switchBackBesideConsumerProtocol is the test of
// TestMigrationSwitchBackWaitsForConsumerProtocolMembers, with version as
// the follower's Config.Version.
func switchBackBesideConsumerProtocol(t *testing.T, version sarama.KafkaVersion) {
	const partitions = 4
	topic := newTopic(t, partitions)
	group := uniqueName("switch848")
	conn, chroot := testZookeeper(t, zookeeperPeers)
	config := testConfig()
	config.Version = version
	config.Discovery = DiscoverFromKafka
	config.Brokers = kafkaPeers
	config.DiscoveryInterval = testDiscoveryInterval
	a := join(t, group, TopicSubscription(topic), config)
	colA := collect(a, nil)
	defer colA.close(t)
	waitFor(t, 30*time.Second, "A to claim every partition in ZooKeeper", func() bool { return claimedCount(a) == partitions })
	setSwitch(t, conn, chroot, group, switchKafka)
	waitFor(t, 60*time.Second, "A to run every partition under Kafka", func() bool { return onKafka(a) && claimedCount(a) == partitions })

	b := joinKafka(t, group, TopicSubscription(topic), consumerTestConfig())
	colB := collect(b, nil)
	closedB := false
	defer func() {
		if !closedB {
			colB.close(t)
		}
	}()
	waitFor(t, 60*time.Second, "A and B to share the partitions", func() bool {
		return len(b.Stats()) > 0 && claimedCount(a) > 0 && claimedCount(a)+len(b.Stats()) == partitions
	})

	setSwitch(t, conn, chroot, group, switchZookeeper)
	ids := func() []string {
		children, _, err := conn.Children(chroot + "/consumers/" + group + "/ids")
		if err != nil {
			return nil
		}
		return children
	}
	// A follower that left Kafka's group asks every 200 ms whether it is
	// Empty (kafkaPollInterval): a second after it left, B holding every
	// partition, it has asked several times.
	var left time.Time
	waitFor(t, 60*time.Second, "A to leave Kafka's group and ask a while, or to register in ZooKeeper", func() bool {
		if left.IsZero() && !onKafka(a) {
			left = time.Now()
		}
		return len(ids()) > 0 || !left.IsZero() && len(b.Stats()) == partitions && time.Since(left) > 5*kafkaPollInterval
	})
	if registered := ids(); len(registered) > 0 {
		t.Fatalf("A registered in ZooKeeper (%v) while the consumer-protocol member B still owned %d partitions", registered, len(b.Stats()))
	}
	colB.close(t)
	closedB = true
	waitFor(t, 60*time.Second, "A to register in ZooKeeper and claim every partition", func() bool {
		return len(ids()) == 1 && claimedCount(a) == partitions
	})
}

// TestIntegrationConsumerProtocolMoveDuringRevocation: a
// consumer-protocol member joins while classic members stop partitions
// that the classic leader moves to a third member (they wait for slow
// acks, MaxProcessingTime 30 s). The brokers build the converted group
// from each classic member's last synced assignment, which no longer
// lists a partition still stopping: converted then, the group would give
// it to the consumer-protocol member while its old owner still holds
// it, and the old owner's final commit would land after the new
// owner's. The third member either stays (its assignment says it awaits
// partitions) or leaves as the stops begin. Join succeeds; no partition
// is in two instances' assignments at once (the OnRebalance lines:
// assigned to one before the other's stop ended), none is handed out by
// two, no committed offset moves back.
func TestIntegrationConsumerProtocolMoveDuringRevocation(t *testing.T) {
	consumerProtocolTest(t)
	needFaults(t)
	for _, leaves := range []bool{true, false} {
		name := "the third member stays"
		if leaves {
			name = "the third member leaves"
		}
		t.Run(name, func(t *testing.T) { moveDuringRevocation(t, leaves) })
	}
}

func moveDuringRevocation(t *testing.T, leaves bool) {
	r := newKafkaFaultRun(t, kafkaPeers, 8, 1)
	r.opts.maxProcessing = 30 * time.Second
	r.opts.workers, r.opts.delay = 128, 10*time.Second // every stop waits seconds for its acks
	sampler := sampleCommitted(t, r.client, r.group, r.topic)
	a, b := r.start(), r.start()
	r.waitShared(30*time.Second, a, b)
	wait := r.produceSteadily(400, 40*time.Second)
	before := stoppingRounds(a) + stoppingRounds(b)
	c := r.start() // classic: the leader moves partitions of a and b to c
	waitFor(t, 30*time.Second, "a or b to stop partitions that move to c", func() bool {
		return stoppingRounds(a)+stoppingRounds(b) > before
	})
	live := []*child{a, b, c}
	if leaves {
		c.terminate(t)
		live = live[:2]
	}
	r.opts.consumerProtocol = true
	d := r.start() // converts the group while the stops wait for acks
	live = append(live, d)
	r.waitShared(90*time.Second, live...)
	wait()
	if double := assignmentOverlaps(r, a, b, c, d); len(double) > 0 {
		t.Errorf("%d partitions were in two instances' assignments at once: %s", len(double), strings.Join(double, "; "))
	}
	r.finishKafka(sampler)
}

// stoppingRounds counts the rounds of the child that stopped partitions
// (managePartitionManagers' log lines).
func stoppingRounds(c *child) int {
	return c.logged("partitions (stopping ") - c.logged("partitions (stopping 0,")
}

// assignmentOverlaps returns, from the children's OnRebalance lines (A
// and R with their times), the partitions that one child was assigned
// while another still held them: assigned before the other's stop
// ended.
func assignmentOverlaps(r *faultRun, children ...*child) []string {
	type span struct {
		child    string
		from, to int64
	}
	spans := make(map[string][]span)
	for _, c := range children {
		data, err := os.ReadFile(c.out)
		if err != nil {
			r.t.Fatal(err)
		}
		open := make(map[string]int64)
		for _, line := range strings.Split(string(data), "\n") {
			f := strings.Fields(line)
			if len(f) != 4 || f[0] != "A" && f[0] != "R" {
				continue
			}
			tp := f[1] + "/" + f[2]
			at, _ := strconv.ParseInt(f[3], 10, 64)
			if f[0] == "A" {
				open[tp] = at
				continue
			}
			spans[tp] = append(spans[tp], span{c.name, open[tp], at})
			delete(open, tp)
		}
		for tp, from := range open {
			spans[tp] = append(spans[tp], span{c.name, from, math.MaxInt64})
		}
	}
	var found []string
	for tp, ss := range spans {
		for i, x := range ss {
			for _, y := range ss[i+1:] {
				if x.child != y.child && x.from < y.to && y.from < x.to {
					found = append(found, fmt.Sprintf("%s by %s and %s for %s", tp, x.child, y.child,
						time.Duration(min(x.to, y.to)-max(x.from, y.from)).Round(time.Millisecond)))
				}
			}
		}
	}
	sort.Strings(found)
	return found
}
