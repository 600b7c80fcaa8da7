package kafkaconsumer

// Static membership (Config.InstanceID, Config.RestartGrace) against the
// real cluster: a rolling restart under load that moves nothing, a kill -9
// and a return within the grace, an immediate restart after a kill -9
// against a ZooKeeper that ticks every 2 s, no return within the grace, a
// duplicate ID.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer/internal/testcluster"
)

// rolloutResult is what a rolling restart measured.
type rolloutResult struct {
	produced, duplicates, lost, moves int
	lagPeaks                          []int64 // the group's total lag, the peak of each restart
	took                              time.Duration
}

// moveWatch polls the owner nodes of a topic's partitions and counts the
// moves: a partition claimed by an instance ID other than the one that
// held it last.
type moveWatch struct {
	mu    sync.Mutex
	last  map[string]string // topic/partition: the last owner seen
	moves int
	stop  chan struct{}
	done  chan struct{}
}

func watchMoves(t *testing.T, group, topic string, partitions int32) *moveWatch {
	t.Helper()
	conn, chroot := testZookeeper(t, zookeeperPeers)
	w := &moveWatch{last: make(map[string]string), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		ticker := time.NewTicker(20 * time.Millisecond)
		defer ticker.Stop()
		for {
			for p := int32(0); p < partitions; p++ {
				data, _, err := conn.Get(fmt.Sprintf("%s/consumers/%s/owners/%s/%d", chroot, group, topic, p))
				if err != nil {
					continue
				}
				key := fmt.Sprintf("%s/%d", topic, p)
				w.mu.Lock()
				if last, ok := w.last[key]; ok && last != string(data) {
					w.moves++
				}
				w.last[key] = string(data)
				w.mu.Unlock()
			}
			select {
			case <-w.stop:
				return
			case <-ticker.C:
			}
		}
	}()
	t.Cleanup(w.close)
	return w
}

func (w *moveWatch) close() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

func (w *moveWatch) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.moves
}

// lagWatch polls the group's total lag (the partitions' ends minus the
// committed offsets) and keeps its peak since the last reset.
type lagWatch struct {
	mu   sync.Mutex
	peak int64
	stop chan struct{}
	done chan struct{}
}

func watchLag(t *testing.T, client sarama.Client, group, topic string) *lagWatch {
	t.Helper()
	w := &lagWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		ticker := time.NewTicker(100 * time.Millisecond)
		defer ticker.Stop()
		for {
			if lag, ok := groupLag(client, group, topic); ok {
				w.mu.Lock()
				w.peak = max(w.peak, lag)
				w.mu.Unlock()
			}
			select {
			case <-w.stop:
				return
			case <-ticker.C:
			}
		}
	}()
	t.Cleanup(w.close)
	return w
}

func (w *lagWatch) close() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// reset returns the peak since the last reset, and starts a new one.
func (w *lagWatch) reset() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	peak := w.peak
	w.peak = 0
	return peak
}

// groupLag returns the total lag of group on topic, without failing a
// test (it runs on the lag watch's goroutine).
func groupLag(client sarama.Client, group, topic string) (int64, bool) {
	partitions, err := client.Partitions(topic)
	if err != nil {
		return 0, false
	}
	coordinator, err := client.Coordinator(group)
	if err != nil {
		return 0, false
	}
	req := &sarama.OffsetFetchRequest{ConsumerGroup: group, Version: 1}
	for _, p := range partitions {
		req.AddPartition(topic, p)
	}
	resp, err := coordinator.FetchOffset(req)
	if err != nil {
		return 0, false
	}
	var lag int64
	for _, p := range partitions {
		end, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			return 0, false
		}
		committed := int64(0)
		if block := resp.GetBlock(topic, p); block != nil && block.Offset >= 0 {
			committed = block.Offset
		}
		lag += end - committed
	}
	return lag, true
}

// rollingRestart runs 4 instances on a topic of 8 partitions under load
// and restarts each in turn (Shutdown, then JoinContext with the same
// configuration), with static IDs and grace or without.
func rollingRestart(t *testing.T, static bool) rolloutResult {
	const instances, partitions = 4, 8
	topic := newTopic(t, partitions)
	client := newTestClient(t)
	group := uniqueName("static.rollout")
	startGroupAt(t, client, group, topic)

	configOf := func(i int) *Config {
		config := testConfig()
		if static {
			config.InstanceID = "pod-" + strconv.Itoa(i)
			config.RestartGrace = 30 * time.Second
		}
		return config
	}
	received := new(valueCounts)
	type running struct {
		c    Consumer
		done <-chan struct{}
	}
	start := func(i int) running {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := JoinContext(ctx, group, TopicSubscription(topic), zookeeperPeers, configOf(i))
		if err != nil {
			t.Fatalf("JoinContext of instance %d: %s", i, err)
		}
		t.Cleanup(func() { _ = c.Close() })
		done := make(chan struct{})
		go func() {
			defer close(done)
			for msg := range c.Messages() {
				received.add(string(msg.Value))
				c.Ack(msg)
			}
		}()
		return running{c, done}
	}
	group4 := make([]running, instances)
	for i := range group4 {
		group4[i] = start(i)
	}
	for i, r := range group4 {
		waitAllClaimed(t, r.c, partitions/instances, 30*time.Second, fmt.Sprintf("instance %d", i))
	}

	// Load: 10 messages every 20 ms (500 a second) until the rollout ends.
	var (
		valuesMu sync.Mutex
		values   []string
	)
	stopLoad, loadDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(loadDone)
		ticker := time.NewTicker(20 * time.Millisecond)
		defer ticker.Stop()
		for n := 0; ; n++ {
			batch := produce(t, client, topic, fmt.Sprintf("%s-%d", group, n), 10)
			valuesMu.Lock()
			values = append(values, batch...)
			valuesMu.Unlock()
			select {
			case <-stopLoad:
				return
			case <-ticker.C:
			}
		}
	}()
	owners := watchMoves(t, group, topic, partitions)
	lag := watchLag(t, client, group, topic)

	began := time.Now()
	var result rolloutResult
	for i := range group4 {
		lag.reset()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := group4[i].c.Shutdown(ctx)
		cancel()
		if err != nil {
			t.Fatalf("Shutdown of instance %d: %s", i, err)
		}
		<-group4[i].done
		// The process is down for a second, as a pod restarting (a
		// simulated downtime, not a synchronisation).
		time.Sleep(time.Second)
		group4[i] = start(i)
		for j, r := range group4 {
			waitAllClaimed(t, r.c, partitions/instances, 30*time.Second, fmt.Sprintf("instance %d after restart %d", j, i))
		}
		// The restarted instance catches up: wait until the group's lag
		// is back to what the load keeps in flight.
		poll(10*time.Second, func() bool { l, ok := groupLag(client, group, topic); return ok && l < 200 })
		result.lagPeaks = append(result.lagPeaks, lag.reset())
	}
	result.took = time.Since(began)
	close(stopLoad)
	<-loadDone
	owners.close()
	result.moves = owners.count()

	valuesMu.Lock()
	all := append([]string(nil), values...)
	valuesMu.Unlock()
	waitFor(t, 30*time.Second, "every produced message", func() bool { return received.has(all) })
	for _, r := range group4 {
		if err := r.c.Close(); err != nil {
			t.Errorf("Close: %s", err)
		}
		<-r.done
	}
	result.produced = len(all)
	for _, v := range all {
		switch n := received.count(v); {
		case n == 0:
			result.lost++
		case n > 1:
			result.duplicates += n - 1
		}
	}
	return result
}

// TestIntegrationStaticRollingRestart: a rolling restart of 4 instances
// with InstanceIDs and a RestartGrace of 30 s under load, each stopped
// with Shutdown and started again: no partition moves between instances,
// nothing is duplicated or lost. With KAFKACONSUMER_ROLLOUT_COMPARE=1 the
// same rollout runs without the settings too, for the comparison the
// README states (it moves partitions twice per restart, and takes longer).
func TestIntegrationStaticRollingRestart(t *testing.T) {
	parallelClusterTest(t)
	t.Run("static", func(t *testing.T) {
		r := rollingRestart(t, true)
		t.Logf("static: produced %d, partitions moved %d, duplicates %d, lost %d, lag peaks %v, rollout %s",
			r.produced, r.moves, r.duplicates, r.lost, r.lagPeaks, r.took.Round(100*time.Millisecond))
		if r.moves != 0 || r.duplicates != 0 || r.lost != 0 {
			t.Errorf("partitions moved %d, duplicates %d, lost %d; want 0, 0, 0", r.moves, r.duplicates, r.lost)
		}
	})
	if os.Getenv("KAFKACONSUMER_ROLLOUT_COMPARE") == "" {
		return
	}
	t.Run("random IDs", func(t *testing.T) {
		r := rollingRestart(t, false)
		t.Logf("random IDs: produced %d, partitions moved %d, duplicates %d, lost %d, lag peaks %v, rollout %s",
			r.produced, r.moves, r.duplicates, r.lost, r.lagPeaks, r.took.Round(100*time.Millisecond))
		if r.lost != 0 {
			t.Errorf("lost %d", r.lost)
		}
	})
}

// TestIntegrationStaticKillRestartWithinGrace: an instance with an
// InstanceID killed with SIGKILL and started again within its grace gets
// the same partitions back, which no other instance took meanwhile, and
// resumes at its commits: it had committed all it received, so nothing is
// consumed twice.
func TestIntegrationStaticKillRestartWithinGrace(t *testing.T) {
	parallelClusterTest(t)
	skipKafkaDiscovery(t, "its child processes find the brokers in ZooKeeper")
	r := newFaultRun(t, zookeeperPeers, kafkaPeers, 4, 1)
	r.opts.restartGrace = 20 * time.Second
	r.opts.instanceID = "a"
	a := r.start()
	r.opts.instanceID = "b"
	r.start()
	r.produce(200)
	r.waitBalanced(30 * time.Second)
	before, _, err := r.owners()
	if err != nil {
		t.Fatal(err)
	}
	var mine []int32
	for p, owner := range before {
		if owner == "a" {
			mine = append(mine, p)
		}
	}
	sort.Slice(mine, func(i, j int) bool { return mine[i] < mine[j] })
	if len(mine) != 2 {
		t.Fatalf("owners %v, want 2 partitions of a", before)
	}

	// Everything a received is committed: it comes back where it was.
	ends := newestOffsets(t, r.client, r.topic)
	waitFor(t, 30*time.Second, "the commits to reach the ends", func() bool {
		committed := committedOffsets(t, r.client, r.group, r.topic)
		for p, end := range ends {
			if committed[p] != end {
				return false
			}
		}
		return true
	})
	a.kill(t)
	r.produce(200)
	killed := time.Now()
	// Until a is back, its partitions are nobody's: b keeps its own.
	r.opts.instanceID = "a"
	back := r.start() // Join waits for the killed session to expire
	waitFor(t, 30*time.Second, "a's partitions to be a's again", func() bool {
		owners, _, err := r.owners()
		if err != nil {
			return false
		}
		for p, owner := range owners {
			if owner == "b" && (p == mine[0] || p == mine[1]) {
				t.Fatalf("b took a's partition %d during a's grace", p)
			}
		}
		return owners[mine[0]] == "a" && owners[mine[1]] == "a"
	})
	t.Logf("a back with partitions %v %s after the kill", mine, time.Since(killed).Round(100*time.Millisecond))
	if got := back.output().owned; len(got) != 2 {
		t.Errorf("the restarted a runs %v, want 2 partitions", got)
	}
	r.produce(200)
	// a had committed all it received before it was killed: none is
	// consumed again.
	if duplicates := r.finish(); duplicates != 0 {
		t.Errorf("%d duplicates, want 0: a had committed all it received", duplicates)
	}
}

// TestIntegrationStaticKillRestartSlowTick: against a ZooKeeper that
// ticks every 2 s, as production ensembles do (so minSessionTimeout is
// 4 s, and a session expires up to 2 s after its timeout), an instance
// with an InstanceID killed with SIGKILL and started again at once under
// the same ID joins: Join waits until ZooKeeper removes the killed
// session's registration. Three kills and restarts, each a new chance for
// the expiry to fall late in its tick.
func TestIntegrationStaticKillRestartSlowTick(t *testing.T) {
	parallelClusterTest(t)
	skipKafkaDiscovery(t, "its child processes find the brokers in ZooKeeper")
	const tick = 2 * time.Second
	cluster := startFaultCluster(t, testcluster.Options{ZooKeepers: 1, Brokers: 1, ZooKeeperTickTime: tick})
	r := newFaultRun(t, cluster.ZookeeperPeers(), cluster.KafkaPeers(), 2, 1)
	r.opts.instanceID = "a"
	r.opts.session = 2 * tick // minSessionTimeout: the shortest session there is
	a := r.start()
	r.produce(20)
	r.waitSettled(30 * time.Second)
	for i := 0; i < 3; i++ {
		a.kill(t)
		killed := time.Now()
		a = r.start() // fails the test when Join fails (ErrInstanceIDInUse)
		t.Logf("restart %d: joined %s after the kill", i+1, time.Since(killed).Round(10*time.Millisecond))
		r.waitSettled(30 * time.Second)
	}
	r.produce(20)
	r.finish() // what the killed ones received and had not committed comes again
}

// TestIntegrationStaticNoReturnWithinGrace: when a departed static member
// does not come back within its RestartGrace (3 s here), the others wait
// that long, showing its partitions as awaiting its return, then take
// them.
func TestIntegrationStaticNoReturnWithinGrace(t *testing.T) {
	parallelClusterTest(t)
	topic := newTopic(t, 4)
	client := newTestClient(t)
	group := uniqueName("static.grace")
	startGroupAt(t, client, group, topic)
	const grace = 3 * time.Second
	configOf := func(id string) *Config {
		config := testConfig()
		config.InstanceID, config.RestartGrace = id, grace
		return config
	}
	a := joinWithCleanup(t, group, TopicSubscription(topic), configOf("a"))
	b := joinWithCleanup(t, group, TopicSubscription(topic), configOf("b"))
	colA, colB := collect(a, nil), collect(b, nil)
	waitAllClaimed(t, a, 2, 30*time.Second, "a")
	waitAllClaimed(t, b, 2, 30*time.Second, "b")

	colA.close(t)
	left := time.Now()
	waitFor(t, 5*time.Second, "b's Stats to show a's partitions awaiting its return", func() bool {
		n := 0
		for _, s := range b.Stats() {
			if s.AwaitingReturn == "a" && !s.Claimed && s.AwaitingReturnUntil.After(time.Now()) {
				n++
			}
		}
		return n == 2
	})
	waitFor(t, 3*grace, "b to take a's partitions once the grace is over", func() bool { return allClaimed(b, 4) })
	took := time.Since(left)
	t.Logf("b took a's partitions %s after a left (RestartGrace %s)", took.Round(10*time.Millisecond), grace)
	if took < grace-500*time.Millisecond {
		t.Errorf("b took a's partitions %s after a left, before the grace of %s was over", took, grace)
	}
	for _, s := range b.Stats() {
		if s.AwaitingReturn != "" {
			t.Errorf("after the grace, Stats still shows %v awaiting %s", s.TopicPartition, s.AwaitingReturn)
		}
	}
	values := produce(t, client, topic, group, 20)
	waitFor(t, 30*time.Second, "b to receive every message", func() bool { return colB.has(values) })
	colB.close(t)
	conn, chroot := testZookeeper(t, zookeeperPeers)
	if exists, _, err := conn.Exists(chroot + "/consumers/" + group + "/static/a"); err != nil || exists {
		t.Errorf("a's static record after its grace: exists %t, %v; want deleted", exists, err)
	}
	checkDeregistered(t, group, a, b)
}

// TestIntegrationStaticDuplicateInstanceID: a second live instance with
// the same InstanceID is refused with ErrInstanceIDInUse, leaves nothing
// registered, and the first goes on unharmed.
func TestIntegrationStaticDuplicateInstanceID(t *testing.T) {
	parallelClusterTest(t)
	topic := newTopic(t, 2)
	group := uniqueName("static.duplicate")
	config := testConfig()
	config.InstanceID, config.RestartGrace = "twin", 10*time.Second
	config.Zookeeper.Timeout = 2 * time.Second
	first := joinWithCleanup(t, group, TopicSubscription(topic), config)
	waitAllClaimed(t, first, 2, 30*time.Second, "the first")
	conn, chroot := testZookeeper(t, zookeeperPeers)
	node := chroot + "/consumers/" + group + "/ids/twin"
	_, stat, err := conn.Get(node)
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	began := time.Now()
	second, err := JoinContext(ctx, group, TopicSubscription(topic), zookeeperPeers, config)
	if err == nil {
		_ = second.Close()
		t.Fatal("JoinContext of a second instance with the same InstanceID succeeded")
	}
	if !errors.Is(err, ErrInstanceIDInUse) || !strings.Contains(err.Error(), "twin") {
		t.Fatalf("JoinContext = %v, want ErrInstanceIDInUse naming the ID", err)
	}
	t.Logf("refused after %s: %s", time.Since(began).Round(10*time.Millisecond), err)
	ids, _, err := conn.Children(chroot + "/consumers/" + group + "/ids")
	if err != nil || len(ids) != 1 {
		t.Fatalf("registered %v, %v; want the first alone", ids, err)
	}
	if _, now, err := conn.Get(node); err != nil || now.EphemeralOwner != stat.EphemeralOwner {
		t.Fatalf("the first's registration changed: %v", err)
	}
	if !allClaimed(first, 2) {
		t.Fatal("the first lost its partitions")
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	checkDeregistered(t, group, first)
}
