package kafkaconsumer

// Fault tests of Kafka-coordinated groups (CoordinatorKafka), with the
// consumers as child processes (fault_harness_test.go): an instance
// killed with kill -9 (and one replaced at once, so that the rebalance
// waits for its session), an instance frozen (SIGSTOP) past its session
// timeout and resumed, a static member frozen, replaced under its
// InstanceID and resumed, the group coordinator's broker killed and
// frozen, and one instance cut off from the coordinator (through
// proxies) while the other brokers answer it. Each checks that nothing is lost, that no
// partition is handed out by two instances at once (overlaps), that no
// committed offset moves back, and that every Close is bounded.

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer/internal/testcluster"
)

// kafkaFaultSession is the group session timeout of the Kafka fault
// tests' children: the brokers' smallest (group.min.session.timeout.ms).
const kafkaFaultSession = 6 * time.Second

// newKafkaFaultRun is newFaultRun for a Kafka-coordinated group on
// brokers: its children join with CoordinatorKafka, and its client's
// requests time out after 5 s (a frozen broker holds them).
func newKafkaFaultRun(t *testing.T, brokers []string, partitions int32, replication int16) *faultRun {
	t.Helper()
	return kafkaFaultRun(newFaultRun(t, "", brokers, partitions, replication), brokers)
}

// kafkaFaultRun makes r, a new fault run, Kafka-coordinated (see
// newKafkaFaultRun).
func kafkaFaultRun(r *faultRun, brokers []string) *faultRun {
	t := r.t
	t.Helper()
	r.opts.kafka = true
	r.opts.brokers = brokers
	r.opts.session = kafkaFaultSession
	config := r.client.Config()
	c := *config
	c.Net.ReadTimeout = 5 * time.Second
	client, err := sarama.NewClient(brokers, &c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	r.client = client
	return r
}

// waitShared waits until the children's assignments (their OnRebalance
// lines) are disjoint, cover every partition, and give each child at
// least one: a group of them that has settled.
func (r *faultRun) waitShared(timeout time.Duration, children ...*child) {
	r.t.Helper()
	partitions, err := r.client.Partitions(r.topic)
	if err != nil {
		r.t.Fatal(err)
	}
	waitFor(r.t, timeout, fmt.Sprintf("the partitions to be shared by %d instances", len(children)), func() bool {
		for _, c := range children {
			if len(c.output().owned) == 0 {
				return false
			}
		}
		return r.assignedTo(partitions, children)
	})
}

// kafkaCloseBound is Close's bound for a child of r: MaxProcessingTime +
// the session timeout + 10 s (consumer.go), with 5 s for the process to
// stop and exit.
func (r *faultRun) kafkaCloseBound() time.Duration {
	return r.opts.maxProcessing + r.opts.session + 15*time.Second
}

// finishKafka ends a Kafka fault run: finish (nothing lost, the offsets
// committed to the ends, Close of every live child), and then no
// overlap, no committed offset moved back (sampler), and every Close
// within its bound.
func (r *faultRun) finishKafka(sampler *offsetSampler) {
	r.t.Helper()
	duplicates := r.finish()
	byHandOut, byReceipt := r.overlaps()
	backs := sampler.finish()
	r.mu.Lock()
	children := append([]*child(nil), r.children...)
	r.mu.Unlock()
	var closes []string
	for _, c := range children {
		c.mu.Lock()
		took := c.closeTook
		c.mu.Unlock()
		if took == 0 {
			continue // killed
		}
		closes = append(closes, fmt.Sprintf("%s %s", c.name, took.Round(time.Millisecond)))
		if took > r.kafkaCloseBound() {
			r.t.Errorf("Close of %s took %s, want at most %s", c.name, took.Round(time.Millisecond), r.kafkaCloseBound())
		}
	}
	r.t.Logf("duplicates %d; overlaps by hand-out %d, by receipt %d; offsets moved back %d; Close: %s",
		duplicates, len(byHandOut), len(byReceipt), len(backs), strings.Join(closes, ", "))
	if n := len(byHandOut); n > 0 {
		r.t.Errorf("%d messages handed out by an instance while another owned their partition, e.g. %s", n, strings.Join(byHandOut[:min(n, 5)], "; "))
	}
	if n := len(byReceipt); n > 0 {
		// Received from the channel's buffer after a freeze: handed out
		// before, so not the library's (see overlaps).
		r.t.Logf("%d messages received by an instance while another owned their partition (handed out before), e.g. %s", n, strings.Join(byReceipt[:min(n, 5)], "; "))
	}
	if n := len(backs); n > 0 {
		r.t.Errorf("committed offsets moved back %d times: %s", n, strings.Join(backs[:min(n, 5)], "; "))
	}
}

// overlaps returns the messages that an instance handed out while another
// instance owned their partition, by the times of their hand-outs, and by
// those of their receipts. Per partition, the deliveries of every child
// in time order form runs of one child each; a run of a child X that
// follows a run of another child Y, when X handed the partition out
// before Y's run, is an overlap unless X was assigned the partition anew
// (an OnRebalance line) after Y's run began: X resumed a partition that
// Y had taken meanwhile. (OnRebalance runs after the new partitions
// started, so the assignment may come up to 2 s after the run's first
// hand-out.) A message received from the channel's buffer after a freeze
// was handed out before it; the receipt times count it, the hand-out
// times do not.
func (r *faultRun) overlaps() (byHandOut, byReceipt []string) {
	r.mu.Lock()
	children := append([]*child(nil), r.children...)
	r.mu.Unlock()
	outputs := make([]childOutput, len(children))
	for i, c := range children {
		outputs[i] = c.output()
	}
	type event struct {
		child int
		at    int64
		d     childDelivery
	}
	const slack = int64(2 * time.Second)
	find := func(when func(childDelivery) int64) []string {
		byPartition := make(map[int32][]event)
		for i, o := range outputs {
			for _, d := range o.deliveries {
				byPartition[d.partition] = append(byPartition[d.partition], event{i, when(d), d})
			}
		}
		var found []string
		for p, events := range byPartition {
			sort.SliceStable(events, func(i, j int) bool { return events[i].at < events[j].at })
			seen := map[int]bool{}
			prevChild, prevRunStart := -1, int64(0)
			for i, e := range events {
				if e.child == prevChild {
					continue
				}
				// The first event of a run of e.child.
				if prevChild >= 0 && seen[e.child] {
					fresh := false
					for _, a := range outputs[e.child].assigned[p] {
						if a > prevRunStart && a <= e.at+slack {
							fresh = true
						}
					}
					if !fresh {
						// Every event of this run overlaps.
						for j := i; j < len(events) && events[j].child == e.child; j++ {
							found = append(found, fmt.Sprintf("%s/%d@%d by %s, %s after %s began to hand it out",
								r.topic, p, events[j].d.offset, children[e.child].name,
								time.Duration(events[j].at-prevRunStart).Round(time.Millisecond), children[prevChild].name))
						}
					}
				}
				seen[e.child] = true
				prevChild, prevRunStart = e.child, e.at
			}
		}
		sort.Strings(found)
		return found
	}
	byHandOut = find(func(d childDelivery) int64 {
		if d.handedOut != 0 {
			return d.handedOut
		}
		return d.received
	})
	byReceipt = find(func(d childDelivery) int64 { return d.received })
	return byHandOut, byReceipt
}

// TestFaultKafkaKilledInstance: in a Kafka-coordinated group of three
// instances consuming under a steady produce rate, one is killed with
// kill -9; the other two take its partitions within the session timeout
// + 5 s, nothing is lost, no partition is handed out by two instances at
// once, no committed offset moves back, and every Close is bounded.
func TestFaultKafkaKilledInstance(t *testing.T) {
	needFaults(t)
	t.Parallel()
	r := newKafkaFaultRun(t, kafkaPeers, 8, 1)
	sampler := sampleCommitted(t, r.client, r.group, r.topic)
	a, b, c := r.start(), r.start(), r.start()
	r.waitShared(30*time.Second, a, b, c)
	wait := r.produceSteadily(1000, 3*time.Second)

	a.kill(t)
	took := r.waitOwnedBy(r.opts.session+20*time.Second, b, c)
	t.Logf("partitions of the killed instance taken over %s after kill -9 (session timeout %s)", took.Round(time.Millisecond), r.opts.session)
	if limit := r.opts.session + 5*time.Second; took > limit {
		t.Errorf("take-over took %s, more than the session timeout plus 5 s", took)
	}
	wait()
	r.finishKafka(sampler)
}

// TestFaultKafkaFrozenInstance: one instance of a Kafka-coordinated
// group of three is frozen (SIGSTOP) past its session timeout while a
// producer writes, and resumed (SIGCONT) once the other two took its
// partitions. The frozen instance must fence itself: from its resumption
// it hands out nothing of the partitions that the others own now (the
// coordinator removed it), loses them, joins again and gets a share back.
// Nothing is lost, no committed offset moves back, every Close is
// bounded.
func TestFaultKafkaFrozenInstance(t *testing.T) {
	needFaults(t)
	t.Parallel()
	r := newKafkaFaultRun(t, kafkaPeers, 8, 1)
	r.opts.workers = 4 // acks out of order, some pending at the freeze
	r.opts.delay = 20 * time.Millisecond
	sampler := sampleCommitted(t, r.client, r.group, r.topic)
	a, b, c := r.start(), r.start(), r.start()
	r.waitShared(30*time.Second, a, b, c)
	wait := r.produceSteadily(1500, 15*time.Second)

	frozen := time.Now()
	a.signal(t, syscall.SIGSTOP)
	took := r.waitOwnedBy(r.opts.session+20*time.Second, b, c)
	t.Logf("partitions of the frozen instance taken over in %s", took.Round(time.Millisecond))
	// Resume it while the others consume its partitions and the producer
	// writes.
	waitFor(t, 10*time.Second, "messages of its partitions received by the others", func() bool {
		for _, o := range []*child{b, c} {
			for _, d := range o.output().deliveries {
				if d.received > frozen.Add(took).UnixNano() {
					return true
				}
			}
		}
		return false
	})
	a.signal(t, syscall.SIGCONT)
	t.Logf("resumed after %s frozen", time.Since(frozen).Round(time.Millisecond))
	r.waitShared(60*time.Second, a, b, c)
	wait()
	r.finishKafka(sampler)
}

// TestFaultKafkaFrozenStaticTwin: a static member (InstanceID) of a
// Kafka-coordinated group of two is frozen (SIGSTOP) past its session
// timeout, a new instance with the same InstanceID joins in its place,
// and the frozen one is resumed while a producer writes: two live
// instances with one InstanceID. The group's coordinator fences the
// resumed one (FENCED_INSTANCE_ID), which is final for it: it hands out
// nothing from its resumption, ErrInstanceIDInUse reaches its Errors(),
// and it never joins again (no new assignment, and the others' rebalances
// do not go on), until it is closed, within Close's bound. Nothing is
// lost, nothing is handed out by two instances at once, no committed
// offset moves back.
func TestFaultKafkaFrozenStaticTwin(t *testing.T) {
	needFaults(t)
	t.Parallel()
	r := newKafkaFaultRun(t, kafkaPeers, 8, 1)
	sampler := sampleCommitted(t, r.client, r.group, r.topic)
	id := uniqueName("twin")
	r.opts.instanceID = id
	a := r.start()
	r.opts.instanceID = ""
	c := r.start()
	r.waitShared(30*time.Second, a, c)
	wait := r.produceSteadily(2000, 25*time.Second)

	a.signal(t, syscall.SIGSTOP)
	took := r.waitOwnedBy(r.opts.session+20*time.Second, c)
	t.Logf("partitions of the frozen instance taken over in %s", took.Round(time.Millisecond))
	r.opts.instanceID = id
	b := r.start()
	r.opts.instanceID = ""
	r.waitShared(30*time.Second, b, c)
	joinsBefore := b.logged("Joined generation") + c.logged("Joined generation")
	resumed := time.Now()
	a.signal(t, syscall.SIGCONT)
	var fenced string
	waitFor(t, 30*time.Second, "ErrInstanceIDInUse on the resumed instance's Errors()", func() bool {
		for _, e := range a.output().errors {
			if strings.Contains(e, ErrInstanceIDInUse.Error()) {
				fenced = e
				return true
			}
		}
		return false
	})
	t.Logf("the resumed instance: %s", fenced)
	wait()
	r.finishKafka(sampler)

	out := a.output()
	handedOut, assigned := 0, 0
	for _, d := range out.deliveries {
		if d.handedOut > resumed.UnixNano() {
			handedOut++
		}
	}
	for _, times := range out.assigned {
		for _, at := range times {
			if at > resumed.UnixNano() {
				assigned++
			}
		}
	}
	joins := b.logged("Joined generation") + c.logged("Joined generation") - joinsBefore
	t.Logf("after its resumption, the fenced instance handed out %d messages and was assigned %d partitions; the others joined %d generations", handedOut, assigned, joins)
	if handedOut > 0 || assigned > 0 {
		t.Errorf("the fenced instance handed out %d messages and was assigned %d partitions after its resumption, want none", handedOut, assigned)
	}
	if joins > 4 {
		t.Errorf("the others joined %d generations after the fenced instance resumed: it joined again", joins)
	}
}

// TestFaultKafkaSlowRebalanceNotFenced: a member of a Kafka-coordinated
// group of three is killed with kill -9, and a new instance joins at
// once, so that the rebalance waits until the killed member's session
// expires: a session long enough that the rebalance outlasts the
// survivors' fencing threshold (0.8 of it). The survivors heartbeat
// throughout, and the completed join is an answer of the coordinator:
// none of them is fenced at any moment. Nothing is lost, nothing is
// handed out by two instances at once, no committed offset moves back.
func TestFaultKafkaSlowRebalanceNotFenced(t *testing.T) {
	needFaults(t)
	t.Parallel()
	r := newKafkaFaultRun(t, kafkaPeers, 8, 1)
	r.opts.session = 20 * time.Second
	sampler := sampleCommitted(t, r.client, r.group, r.topic)
	a, b, c := r.start(), r.start(), r.start()
	r.waitShared(30*time.Second, a, b, c)
	wait := r.produceSteadily(1000, 10*time.Second)

	a.kill(t)
	d := r.start()
	r.waitShared(r.opts.session+30*time.Second, b, c, d)
	wait()
	r.finishKafka(sampler)
	for _, s := range []*child{b, c, d} {
		if n := s.logged("No answer from the group's coordinator"); n > 0 {
			t.Errorf("%s was fenced %d times", s.name, n)
		}
	}
}

// logged counts the lines of the child's log that contain s.
func (c *child) logged(s string) int {
	data, err := os.ReadFile(strings.TrimSuffix(c.out, ".out") + ".stderr")
	if err != nil {
		return 0
	}
	return strings.Count(string(data), s)
}

// TestFaultKafkaCoordinator: the group coordinator's broker fails under
// a Kafka-coordinated group of two instances consuming a topic of
// replication factor 2, on a cluster of two brokers whose
// __consumer_offsets has replication factor 2: it is killed (kill -9) and
// started again; it is frozen (SIGSTOP) past its ZooKeeper session, so
// that the coordinator moves, and resumed; and one instance is cut off
// from it (its connections to that broker held by a proxy) while the
// other brokers answer. In each, nothing is lost, no partition is handed
// out by two instances at once, no committed offset moves back, and every
// Close is bounded, the Close of the instance cut off included. The
// children's Net.ReadTimeout is 3 s, so that a request held by a frozen
// or cut-off broker fails within the test's time.
//
// The frozen coordinator runs only with KAFKACONSUMER_LONG_FAULTS set:
// it lasts 25 to 70 s (see runCoordinatorFault), too long for the
// package's time budget.
//
// The topic's partitions are led by the brokers that do not coordinate
// (startCoordinatorRun). With KAFKACONSUMER_FAULT_STALE_LEADER set they
// are spread over every broker: then the frozen broker (with
// KAFKACONSUMER_LONG_FAULTS), resumed, answers some fetches as their
// stale leader, which the fetch path must not take for the truth
// (TestPartitionFetcherOutOfRangeConfirmed).
func TestFaultKafkaCoordinator(t *testing.T) {
	needFaults(t)
	t.Parallel() // on a cluster of its own
	cluster := startFaultCluster(t, testcluster.Options{ZooKeepers: 1, Brokers: 2})
	t.Run("killed", func(t *testing.T) {
		runCoordinatorFault(t, cluster, "kill", func(coordinator int) func() {
			if err := cluster.KillBroker(coordinator); err != nil {
				t.Fatal(err)
			}
			return func() {
				if err := cluster.StartBroker(coordinator); err != nil {
					t.Fatal(err)
				}
			}
		})
	})
	t.Run("frozen", func(t *testing.T) {
		if os.Getenv("KAFKACONSUMER_LONG_FAULTS") == "" {
			t.Skip("25 to 70 s; set KAFKACONSUMER_LONG_FAULTS to run it")
		}
		runCoordinatorFault(t, cluster, "freeze", func(coordinator int) func() {
			resume := freeze(t, cluster.BrokerPID(coordinator))
			return func() {
				resume()
				waitBrokersUp(t, cluster)
			}
		})
	})
	t.Run("cut-off", func(t *testing.T) {
		r, coordinator := startCoordinatorRun(t, cluster)
		sampler := sampleCommitted(t, r.client, r.group, r.topic)
		proxies := make(map[string]*testcluster.Proxy)
		routes := make(map[string]string)
		for _, addr := range cluster.KafkaPeers() {
			p, err := testcluster.NewProxy(addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Close() })
			proxies[addr], routes[addr] = p, p.Addr()
		}
		r.opts.kafkaProxies = routes
		a := r.start()
		r.opts.kafkaProxies = nil
		b := r.start()
		r.waitShared(30*time.Second, a, b)
		wait := r.produceSteadily(1500, 15*time.Second)
		cut := proxies[cluster.KafkaPeers()[coordinator]]
		cutAt := time.Now()
		cut.Hold()
		took := r.waitOwnedBy(r.opts.session+30*time.Second, b)
		t.Logf("the other instance took every partition %s after the cut", took.Round(time.Millisecond))
		// A stays cut off a while longer, with fetches answered by the
		// other brokers: what it hands out then is what the test checks.
		waitFor(t, 10*time.Second, "messages of A's partitions received by B", func() bool {
			for _, d := range b.output().deliveries {
				if d.received > cutAt.Add(took+2*time.Second).UnixNano() {
					return true
				}
			}
			return false
		})
		cut.Pass()
		healed := time.Now()
		r.waitShared(60*time.Second, a, b)
		t.Logf("A owned partitions again %s after the heal", time.Since(healed).Round(time.Millisecond))

		// A is cut off again, and closed once B took its partitions:
		// Close is bounded, though neither its final commits nor its
		// LeaveGroup can reach the coordinator.
		cut.Hold()
		r.waitOwnedBy(r.opts.session+30*time.Second, b)
		took = a.terminateCutOff(t, r.kafkaCloseBound())
		t.Logf("Close of A while cut off took %s", took.Round(time.Millisecond))
		cut.Pass()
		wait()
		r.finishKafka(sampler)
	})
}

// terminateCutOff sends SIGTERM to c, which is cut off from the group's
// coordinator, waits until it exited, and returns how long that took.
// Its Close may return an error (what did not reach the coordinator). A
// child not gone within bound fails the test: it gets SIGQUIT, and its
// goroutines go to its stderr, which the test prints.
func (c *child) terminateCutOff(t *testing.T, bound time.Duration) time.Duration {
	t.Helper()
	began := time.Now()
	c.stop(t, syscall.SIGTERM)
	select {
	case <-c.exited:
		return time.Since(began)
	case <-time.After(bound):
	}
	t.Errorf("Close of child %s while cut off took more than %s: its goroutines follow (SIGQUIT)", c.name, bound)
	c.signal(t, syscall.SIGQUIT)
	select {
	case <-c.exited:
	case <-time.After(time.Minute):
		t.Fatalf("child %s did not exit within a minute of SIGQUIT", c.name)
	}
	return time.Since(began)
}

// runCoordinatorFault runs two instances on a topic of cluster, and
// applies fault to the broker that coordinates their group while a
// producer writes for 5 s; once every message was received, it undoes
// the fault (what fault returned), produces more and finishes.
func runCoordinatorFault(t *testing.T, cluster *testcluster.Cluster, what string, fault func(coordinator int) (undo func())) {
	r, coordinator := startCoordinatorRun(t, cluster)
	sampler := sampleCommitted(t, r.client, r.group, r.topic)
	a, b := r.start(), r.start()
	r.waitShared(30*time.Second, a, b)
	wait := r.produceSteadily(1000, 5*time.Second)
	began := time.Now()
	undo := fault(coordinator)
	wait()
	// With the coordinator frozen this takes tens of seconds: each
	// coordinator lookup and metadata read that sarama sends to the frozen
	// broker (its least loaded one, in random order) waits for
	// Net.ReadTimeout, and the guard's heartbeat waits for the offset
	// store's lookup; the members stay fenced meanwhile, and may be
	// removed.
	r.waitAllReceived(2 * time.Minute)
	t.Logf("every message produced in the 5 s after the %s received %s after it", what, time.Since(began).Round(time.Millisecond))
	undo()
	r.produce(300)
	r.finishKafka(sampler)
}

// startCoordinatorRun starts a Kafka fault run on cluster, a topic of 6
// partitions replicated on every broker, and returns it with the index of
// the broker that coordinates its group.
//
// The topic's partitions are led by the other brokers: the tests fault
// the coordinator, not the partitions' leaders. (A broker resumed after
// a freeze that led partitions can answer a fetch as their stale leader,
// OFFSET_OUT_OF_RANGE for an offset past its log's end; the partition
// then starts again at Offsets.Initial, and its committed offset moves
// back: see KAFKACONSUMER_FAULT_STALE_LEADER in TestFaultKafkaCoordinator.)
func startCoordinatorRun(t *testing.T, cluster *testcluster.Cluster) (*faultRun, int) {
	t.Helper()
	waitBrokersUp(t, cluster)
	const partitions = 6
	i := -1
	peers := cluster.KafkaPeers()
	r := newFaultRunWith(t, "", peers, partitions, func(client sarama.Client, group string) *sarama.TopicDetail {
		var coordinator *sarama.Broker
		waitFor(t, 30*time.Second, "the group's coordinator", func() bool {
			if err := client.RefreshCoordinator(group); err != nil {
				return false
			}
			var err error
			coordinator, err = client.Coordinator(group)
			return err == nil
		})
		i = brokerIndex(t, cluster, coordinator.Addr())
		t.Logf("broker %d (%s) coordinates group %s", i, coordinator.Addr(), group)
		if os.Getenv("KAFKACONSUMER_FAULT_STALE_LEADER") != "" {
			return &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: int16(len(peers))}
		}
		// Broker ids are the indexes; the first replica leads.
		detail := &sarama.TopicDetail{NumPartitions: -1, ReplicationFactor: -1, ReplicaAssignment: map[int32][]int32{}}
		for p := int32(0); p < partitions; p++ {
			var replicas []int32
			for k := range peers {
				if b := (int(p) + k) % len(peers); b != i {
					replicas = append(replicas, int32(b))
				}
			}
			detail.ReplicaAssignment[p] = append(replicas, int32(i))
		}
		return detail
	})
	kafkaFaultRun(r, peers)
	r.opts.readTimeout = 3 * time.Second
	return r, i
}

// TestFaultOverlapsCheck: the check of the Kafka fault tests finds an
// instance that hands a partition out again after another took it
// without being assigned it anew, passes a partition that moves back
// with a new assignment, and tells a message handed out before another
// instance took the partition but received after (from the channel's
// buffer) by its receipt only.
func TestFaultOverlapsCheck(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const s = int64(time.Second)
	lines := [][]string{
		{ // child0
			fmt.Sprintf("A t 0 %d", 1*s), fmt.Sprintf("A t 1 %d", 1*s), fmt.Sprintf("A t 2 %d", 1*s),
			fmt.Sprintf("M v0 0 0 %d %d", 2*s, 2*s), fmt.Sprintf("M v1 0 3 %d %d", 20*s, 20*s), // resumes 0 without an assignment
			fmt.Sprintf("M v2 1 0 %d %d", 2*s, 2*s), fmt.Sprintf("A t 1 %d", 15*s), fmt.Sprintf("M v3 1 2 %d %d", 16*s, 16*s), // 1 moves back
			fmt.Sprintf("M v4 2 0 %d %d", 2*s, 2*s), fmt.Sprintf("M v5 2 1 %d %d", 3*s, 20*s), // 2: received late from the buffer
		},
		{ // child1
			fmt.Sprintf("A t 0 %d", 10*s), fmt.Sprintf("M w0 0 1 %d %d", 11*s, 11*s), fmt.Sprintf("M w1 0 2 %d %d", 12*s, 12*s),
			fmt.Sprintf("A t 1 %d", 10*s), fmt.Sprintf("M w2 1 1 %d %d", 11*s, 11*s),
			fmt.Sprintf("A t 2 %d", 10*s), fmt.Sprintf("M w3 2 2 %d %d", 11*s, 11*s),
		},
	}
	r := &faultRun{t: t, topic: "t"}
	for i, ls := range lines {
		c := &child{name: fmt.Sprintf("child%d", i), out: fmt.Sprintf("%s/child%d.out", dir, i)}
		if err := os.WriteFile(c.out, []byte(strings.Join(ls, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		r.children = append(r.children, c)
	}
	byHandOut, byReceipt := r.overlaps()
	if got := fmt.Sprint(byHandOut); got != "[t/0@3 by child0, 9s after child1 began to hand it out]" {
		t.Errorf("by hand-out: %s", got)
	}
	if got := fmt.Sprint(byReceipt); got != "[t/0@3 by child0, 9s after child1 began to hand it out t/2@1 by child0, 9s after child1 began to hand it out]" {
		t.Errorf("by receipt: %s", got)
	}
}

// waitBrokersUp waits until the metadata lists every broker of cluster:
// one resumed after a freeze registers again when its ZooKeeper session
// expired meanwhile.
func waitBrokersUp(t *testing.T, cluster *testcluster.Cluster) {
	t.Helper()
	config := sarama.NewConfig()
	config.Version = testKafkaVersion()
	config.Net.ReadTimeout = 5 * time.Second
	client, err := sarama.NewClient(cluster.KafkaPeers(), config)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	waitFor(t, 60*time.Second, "every broker in the metadata", func() bool {
		return client.RefreshMetadata() == nil && len(client.Brokers()) == len(cluster.KafkaPeers())
	})
}
