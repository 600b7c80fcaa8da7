package kafkaconsumer

// Fault tests: consumers run as child processes (this test binary, started
// again in child mode), so that kill -9, SIGSTOP and SIGCONT hit a real
// process; brokers and ZooKeeper nodes are real JVMs that the tests stop,
// kill and start. Every test ends by checking that every produced message
// was handed out at least once, that the committed offsets equal the
// partition ends, and that no partition is owned by two live instances.

import (
	"errors"
	"math/rand"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer/internal/testcluster"
)

func TestFaultFrozenInstance(t *testing.T) {
	needFaults(t)
	t.Parallel()
	r := newFaultRun(t, zookeeperPeers, kafkaPeers, 8, 1)
	a, b, c := r.start(), r.start(), r.start()
	r.waitOwnedBy(30*time.Second, a, b, c)
	r.produce(300)
	r.waitAllReceived(30 * time.Second)

	// Freeze a past its session timeout: b and c take its partitions.
	a.signal(t, syscall.SIGSTOP)
	took := r.waitOwnedBy(30*time.Second, b, c)
	t.Logf("partitions of the frozen instance taken over in %s", took)
	r.produce(300)
	r.waitAllReceived(30 * time.Second)

	// Resume it: it notices its session is gone, registers again and gets
	// a share back.
	a.signal(t, syscall.SIGCONT)
	aID := a.output().id
	waitFor(t, 30*time.Second, "the resumed instance to own partitions again", func() bool {
		owners, registered, err := r.owners()
		if err != nil || !registered[aID] {
			return false
		}
		for _, id := range owners {
			if id == aID {
				return true
			}
		}
		return false
	})
	found := false
	for _, e := range a.output().errors {
		found = found || strings.Contains(e, ErrRegistrationLost.Error())
	}
	if !found {
		t.Error("the resumed instance did not report ErrRegistrationLost on Errors()")
	}
	r.produce(300)
	r.finish()
}

func TestFaultKilledInstance(t *testing.T) {
	needFaults(t)
	t.Parallel()
	r := newFaultRun(t, zookeeperPeers, kafkaPeers, 8, 1)
	a, b, c := r.start(), r.start(), r.start()
	r.waitOwnedBy(30*time.Second, a, b, c)
	wait := r.produceSteadily(1000, 3*time.Second)

	a.kill(t)
	took := r.waitOwnedBy(r.opts.session+10*time.Second, b, c)
	t.Logf("partitions of the killed instance taken over %s after kill -9 (session timeout %s)", took, r.opts.session)
	if limit := r.opts.session + 5*time.Second; took > limit {
		t.Errorf("take-over took %s, more than the session timeout plus 5 s", took)
	}
	wait()
	r.finish()
}

// TestFaultBrokerFailure kills the leader of a consumed partition, and
// starts it again, while two instances consume: nothing is lost. The
// instances read single messages, then (on the same cluster, a topic of
// its own) batches: the partition fetchers follow the leaders that move.
func TestFaultBrokerFailure(t *testing.T) {
	needFaults(t)
	t.Parallel() // on a cluster of its own; TestMain checks for leaked goroutines
	cluster := startFaultCluster(t, testcluster.Options{ZooKeepers: 1, Brokers: 3})
	t.Run("messages", func(t *testing.T) { runBrokerFailure(t, cluster, 0) })
	t.Run("batches", func(t *testing.T) { runBrokerFailure(t, cluster, 50) })
}

// runBrokerFailure is a run of TestFaultBrokerFailure, with batches of up
// to batch messages when batch > 0.
func runBrokerFailure(t *testing.T, cluster *testcluster.Cluster, batch int) {
	r := newFaultRun(t, cluster.ZookeeperPeers(), cluster.KafkaPeers(), 6, 3)
	r.opts.batch = batch
	a, b := r.start(), r.start()
	r.waitOwnedBy(30*time.Second, a, b)
	r.produce(300)
	r.waitAllReceived(30 * time.Second)

	leader, err := r.client.Leader(r.topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	victim := brokerIndex(t, cluster, leader.Addr())
	t.Logf("killing broker %d (%s), leader of %s/0", victim, leader.Addr(), r.topic)
	if err := cluster.KillBroker(victim); err != nil {
		t.Fatal(err)
	}
	r.produce(300)
	r.waitAllReceived(60 * time.Second)

	if err := cluster.StartBroker(victim); err != nil {
		t.Fatal(err)
	}
	r.produce(300)
	r.finish()
}

// TestFaultZooKeeperFailure kills the leader of a 3-node ensemble, then
// stops the whole ensemble for less than the session timeout, while two
// instances consume: nothing is lost and the assignment stays.
func TestFaultZooKeeperFailure(t *testing.T) {
	needFaults(t)
	t.Parallel() // on a cluster of its own; TestMain checks for leaked goroutines
	cluster := startFaultCluster(t, testcluster.Options{
		ZooKeepers: 3, Brokers: 1,
		BrokerConfig: map[string]string{"zookeeper.session.timeout.ms": "30000"},
	})
	r := newFaultRun(t, cluster.ZookeeperPeers(), cluster.KafkaPeers(), 4, 1)
	r.opts.session = 30 * time.Second
	a, b := r.start(), r.start()
	r.waitOwnedBy(60*time.Second, a, b)
	before := r.waitBalanced(30 * time.Second)
	// The faults hit a group that consumes: its offsets are read, so the
	// broker's group coordinator is loaded. (A broker that creates its
	// offsets topic while a ZooKeeper node dies can leave the coordinator
	// unavailable for over a minute, which is Kafka's, not ours.)
	r.produce(100)
	r.waitAllReceived(30 * time.Second)

	// The leader dies and comes back: the other two keep a quorum.
	leader, err := cluster.ZooKeeperLeader()
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.KillZooKeeper(leader); err != nil {
		t.Fatal(err)
	}
	r.produce(200)
	r.waitAllReceived(30 * time.Second)
	if err := cluster.StartZooKeeper(leader); err != nil {
		t.Fatal(err)
	}

	// All nodes stop for less than the session timeout: consumption goes
	// on from Kafka, and the sessions survive, so no rebalance happens.
	outage := time.Now()
	for i := 0; i < 3; i++ {
		if err := cluster.StopZooKeeper(i); err != nil {
			t.Fatal(err)
		}
	}
	r.produce(200)
	r.waitAllReceived(30 * time.Second)
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			errs[i] = cluster.StartZooKeeper(i)
		}(i)
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("ZooKeeper ensemble was down for %s", time.Since(outage))
	r.produce(200)
	r.waitAllReceived(30 * time.Second)
	if after := r.waitBalanced(30 * time.Second); after != before {
		t.Errorf("the assignment changed across a ZooKeeper outage shorter than the session timeout: %s, then %s", before, after)
	}
	r.finish()
}

// TestFaultChurn has instances join, leave gracefully and die with kill -9
// at random while a producer writes, with acks out of order.
func TestFaultChurn(t *testing.T) {
	needFaults(t)
	t.Parallel()
	r := newFaultRun(t, zookeeperPeers, kafkaPeers, 16, 1)
	r.opts.workers = 4
	r.opts.delay = 2 * time.Millisecond
	r.start()
	r.start()

	// 30 s of churn by default (KAFKACONSUMER_CHURN for longer; the chaos
	// soak churns for minutes), at 800 messages a second.
	churn := envDuration("KAFKACONSUMER_CHURN", 30*time.Second)
	total := int(churn.Seconds() * 800)
	wait := r.produceSteadily(total, churn)
	seed := time.Now().UnixNano()
	t.Logf("churn seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	deadline := time.Now().Add(churn)
	var joins, leaves, kills int
	for time.Now().Before(deadline) {
		time.Sleep(time.Duration(1000+rng.Intn(3000)) * time.Millisecond) // pace of the churn, not synchronisation
		live := r.live()
		switch action := rng.Intn(3); {
		case len(live) < 2 || (action == 0 && len(live) < 5):
			r.start()
			joins++
		case action == 1:
			live[rng.Intn(len(live))].terminate(t)
			leaves++
		default:
			live[rng.Intn(len(live))].kill(t)
			kills++
		}
	}
	wait()
	for len(r.live()) < 2 {
		r.start()
		joins++
	}
	duplicates := r.finish()
	t.Logf("churn: %d joins, %d graceful leaves, %d kills; %d messages, %d duplicates", joins, leaves, kills, total, duplicates)
}

// TestAckAnyOrderCrashRestart kills a consumer that acks out of order at
// random points and starts another, again and again: no message is lost.
func TestAckAnyOrderCrashRestart(t *testing.T) {
	needFaults(t)
	t.Parallel()
	r := newFaultRun(t, zookeeperPeers, kafkaPeers, 4, 1)
	r.opts.workers = 8
	r.opts.delay = 20 * time.Millisecond
	wait := r.produceSteadily(5000, 10*time.Second)
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	kills := 0
	for i := 0; i < 6; i++ {
		c := r.start()
		time.Sleep(time.Duration(300+rng.Intn(1500)) * time.Millisecond) // a random point to crash at
		c.kill(t)
		kills++
	}
	wait()
	r.start()
	duplicates := r.finish()
	t.Logf("crash/restart: %d kills, %d messages, 0 lost, %d duplicates", kills, 5000, duplicates)
}

// TestFaultMisuseUnderLoad: acks out of order and twice, acks after Close,
// an Errors channel nobody reads, and a user who stops reading Messages
// while Close waits.
func TestFaultMisuseUnderLoad(t *testing.T) {
	needFaults(t)
	t.Parallel()
	topic := newTopic(t, 4)
	client := newTestClient(t)
	group := uniqueName("fault.misuse")
	start := startGroupAt(t, client, group, topic)
	values := produce(t, client, topic, group, 2000)

	config := testConfig()
	config.MaxProcessingTime = time.Second
	c := join(t, group, TopicSubscription(topic), config) // Errors never read
	acked := make(map[string]bool)
	received := 0
	var held []*sarama.ConsumerMessage
	for received < 1010 {
		msg := <-c.Messages()
		received++
		held = append(held, msg)
		if len(held) == 50 { // ack a batch in reverse, each twice
			for i := len(held) - 1; i >= 0; i-- {
				c.Ack(held[i])
				c.Ack(held[i])
				acked[string(held[i].Value)] = true
			}
			held = held[:0]
		}
	}
	// Stop reading with a batch unacked and messages buffered, and close.
	closing := time.Now()
	if err := c.Close(); err != nil {
		t.Fatalf("Close = %s", err)
	}
	t.Logf("Close with %d unacked messages and a full Messages channel took %s", len(held), time.Since(closing))
	for _, msg := range held {
		c.Ack(msg) // after Close: ignored
	}

	second := join(t, group, TopicSubscription(topic), nil)
	col := collect(second, nil)
	// Every message the first did not ack comes to the second.
	waitFor(t, 30*time.Second, "the rest of the messages", func() bool {
		for _, v := range values {
			if !acked[v] && col.count(v) == 0 {
				return false
			}
		}
		return true
	})
	col.close(t)
	checkCommitted(t, client, group, start, map[string]int{topic: 2000})
}

// TestFaultCloseIsBounded: Close returns within its documented bound when
// Kafka hangs (the broker's JVM stopped with SIGSTOP: connections are
// accepted, nothing answers) and when ZooKeeper is down, and it says what
// did not complete.
func TestFaultCloseIsBounded(t *testing.T) {
	needFaults(t)
	verifyNoClusterLeaks(t)
	debugLogs(t)
	cluster, topic, client := startSmallFaultCluster(t, "rv-bounded")
	var err error

	config := testConfig()
	config.MaxProcessingTime = time.Second
	config.Net.ReadTimeout = 3 * time.Second
	config.Net.DialTimeout = 3 * time.Second
	config.Net.WriteTimeout = 3 * time.Second
	bound := config.MaxProcessingTime + stopGrace + closeGrace + config.Net.ReadTimeout + 3*time.Second

	// closeWithin closes c, which holds an unacked message, and checks the
	// time it took and its error.
	closeWithin := func(c Consumer, what string, want error) {
		t.Helper()
		if err := stopWithin(t, "Close with "+what, bound, c.Close); !errors.Is(err, want) {
			t.Errorf("Close with %s = %v; want %v", what, err, want)
		}
	}

	// Phase 1: the broker hangs.
	group := uniqueName("rv.bounded")
	values := produce(t, client, topic, "hung", 20)
	c, err := Join(group, TopicSubscription(topic), cluster.ZookeeperPeers(), config)
	if err != nil {
		t.Fatal(err)
	}
	var held atomic.Pointer[sarama.ConsumerMessage] // acked once the broker hangs
	col := collect(c, func(msg *sarama.ConsumerMessage) bool {
		if string(msg.Value) == values[5] {
			held.Store(msg)
			return false
		}
		return true
	})
	// (collect records a message before it asks whether to ack it.)
	waitFor(t, 30*time.Second, "the messages", func() bool { return col.has(values) && held.Load() != nil })
	conn, _ := testZookeeper(t, cluster.ZookeeperPeers())
	registration := brokerRegistration(t, conn)
	resume := freeze(t, cluster.BrokerPID(0))
	// An ack after the freeze: the final commit has something to commit,
	// whatever the rounds before the freeze committed (they may have
	// committed every ack made before it).
	c.Ack(held.Load())
	closeWithin(c, "the broker hung", ErrCommitTimeout)
	resume()
	<-col.done
	sameBrokerRegistration(t, conn, registration)

	// Phase 2: ZooKeeper is down.
	group = uniqueName("rv.bounded")
	values = produce(t, client, topic, "zk", 20)
	c, err = Join(group, TopicSubscription(topic), cluster.ZookeeperPeers(), config)
	if err != nil {
		t.Fatal(err)
	}
	col = collect(c, func(msg *sarama.ConsumerMessage) bool { return string(msg.Value) != values[5] })
	waitFor(t, 30*time.Second, "the messages", func() bool { return col.has(values) })
	if err := cluster.StopZooKeeper(0); err != nil {
		t.Fatal(err)
	}
	closeWithin(c, "ZooKeeper down", ErrReleaseFailed)
	<-col.done
	if err := cluster.StartZooKeeper(0); err != nil {
		t.Fatal(err)
	}
}

// TestFaultOffsetFetchAfterTimeout: an OffsetFetch that times out (the
// broker hangs) must not leave the offset store on the dead connection.
// sarama's broker answers every later request on a connection whose read
// failed with the same error until it is closed; the store released the
// coordinator but did not close it, and the client handed the same broker
// back: every later fetch failed, and partitions could not start. A
// coordinator lookup sent to the dead connection itself closes it, so the
// client here answers lookups without one, as a lookup that another
// broker of a larger cluster answers (the coordinator did not move).
func TestFaultOffsetFetchAfterTimeout(t *testing.T) {
	needFaults(t)
	cluster := startFaultCluster(t, testcluster.Options{ZooKeepers: 1, Brokers: 1})
	topic := uniqueName("fetch-timeout")
	if err := cluster.CreateTopic(topic, 1, 1); err != nil {
		t.Fatal(err)
	}
	config := sarama.NewConfig()
	config.Version = testKafkaVersion()
	config.Net.ReadTimeout = time.Second
	client, err := sarama.NewClient(cluster.KafkaPeers(), config)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	s := newOffsetStore(knownCoordinator{client}, uniqueName("fetch-timeout"), func(TopicPartition, error) {})
	tps := []TopicPartition{{Topic: topic, Partition: 0}}
	if _, err := s.fetch(tps); err != nil {
		t.Fatalf("first fetch: %v", err)
	}

	resume := freeze(t, cluster.BrokerPID(0))
	if _, err := s.fetch(tps); err == nil {
		t.Fatal("fetch from a frozen broker succeeded")
	}
	resume()
	var last error
	if !poll(20*time.Second, func() bool {
		_, last = s.fetch(tps)
		return last == nil
	}) {
		t.Fatalf("fetch after the broker resumed still fails: %v", last)
	}
}

// knownCoordinator is a sarama client whose coordinator lookups find the
// coordinator it knows (after a first lookup), without a request.
type knownCoordinator struct{ sarama.Client }

func (c knownCoordinator) RefreshCoordinator(group string) error {
	if _, err := c.Client.Coordinator(group); err != nil {
		return c.Client.RefreshCoordinator(group)
	}
	return nil
}
