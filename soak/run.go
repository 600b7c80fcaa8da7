package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/IBM/sarama"
	"github.com/go-zookeeper/zk"
	"github.com/kafkaconsumer/kafkaconsumer/internal/soakcheck"
	"github.com/kafkaconsumer/kafkaconsumer/internal/testcluster"
	"github.com/twmb/franz-go/pkg/kgo"
)

type settings struct {
	duration  time.Duration
	seed      int64
	dir       string
	instances int
	rate      int
	// coordinator is coordinatorZookeeper, coordinatorKafka or
	// coordinatorMigrate: who coordinates the consumers' group.
	coordinator string
	// groupsTool is the kafkaconsumer-groups binary (coordinatorMigrate).
	groupsTool string
	// nonFollowers adds the faults of CoordinatorKafka instances while
	// the group's switch says zookeeper (coordinatorMigrate).
	nonFollowers bool
	// original adds the fault of an original-like instance registering
	// while the switch says kafka (coordinatorMigrate).
	original bool
	// switchCutFromBrokers lets the nemesis flip the switch under the
	// kinds of cutFromBrokers (coordinatorMigrate).
	switchCutFromBrokers bool
	// process: the instances run process.Run (process.go).
	process bool
	// protocolMove adds the rolling move between the group protocols
	// (coordinatorConsumer).
	protocolMove bool
}

// kafkaCoordinated tells whether the run's consumers are coordinated by
// Kafka's group coordinator (CoordinatorKafka).
func (s settings) kafkaCoordinated() bool { return s.coordinator == coordinatorKafka }

// migrating tells whether the run's consumers follow the group's switch,
// which the nemesis flips (coordinatorMigrate).
func (s settings) migrating() bool { return s.coordinator == coordinatorMigrate }

// soak is one run.
type soak struct {
	s       settings
	rng     *rand.Rand
	cluster *testcluster.Cluster
	client  sarama.Client
	admin   sarama.ClusterAdmin // on client, for Kafka's view of the group
	zk      *zk.Conn            // direct, for the owners
	log     *eventLog
	insts   []*instance // the group's instances, then the extra ones (instance.extra)

	mu     sync.Mutex // guards topics, switches, moves and movingTo
	topics []string

	kinds      []fault                  // the faults of this run's coordinator (faultsFor)
	faults     map[string]int           // injected, by kind
	under      map[string]int           // injected with a switch of the group under it, by kind
	recoveries map[string]time.Duration // slowest time to stable, by kind
	unstable   []string                 // faults after which the group was not stable in time

	switches switchCounts // the group's switch flipped (coordinatorMigrate)

	franz    *kgo.Client // describes the group (coordinatorConsumer)
	moves    moveCounts  // the rolling moves (coordinatorConsumer)
	movingTo string      // the setting the rolling moves go to (moveTarget)
}

// instance is one consumer process and the proxies it reaches the cluster
// through, its own: one per ZooKeeper node (its connection string names
// them) and one per broker (its dialer routes each broker's address to
// its proxy; the brokers advertise their own addresses), so that a fault
// can cut or slow one instance's connections, to one broker or to all,
// while the others' pass. The proxies outlive the process: a restarted
// instance is given the same.
type instance struct {
	name string
	// coordinator is the setting it runs with (childEnv): the run's, or,
	// for an extra instance, the other one.
	coordinator string
	// extra: an instance that only its own kind of fault starts, and
	// stops before it heals; the other faults do not pick it.
	extra     bool
	zookeeper []*testcluster.Proxy // to ZooKeeper node i
	brokers   []*testcluster.Proxy // to broker i
	path      string               // its event log
	seed      int64
	cmd       *exec.Cmd
	exited    chan struct{} // closed when cmd ended
	stopped   bool          // SIGSTOPped
}

func logf(format string, args ...any) {
	fmt.Printf("soak %s: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

func run(s settings) (bool, error) {
	so := &soak{s: s, rng: rand.New(rand.NewSource(s.seed)), kinds: faultsFor(s), faults: make(map[string]int), under: make(map[string]int), recoveries: make(map[string]time.Duration)}
	kafka, zookeeper := testcluster.VersionsFromEnv()
	defer keepClusterLogs(s.dir) // logs.go: after the cluster's Close, failed or not
	opts := testcluster.Options{Dir: filepath.Join(s.dir, clusterSubdir), ZooKeepers: 3, Brokers: 3, KafkaVersion: kafka, ZooKeeperVersion: zookeeper,
		ZooKeeperQuorumProxies: true, // for the follower cut off from the quorum
		Logf:                   func(format string, args ...any) { logf("cluster: "+format, args...) }}
	if s.consumerProtocol() {
		if err := consumerCluster(&opts); err != nil {
			return false, err
		}
	}
	cluster, err := testcluster.Start(opts)
	if err != nil {
		return false, err
	}
	defer cluster.Close()
	so.cluster = cluster
	if s.consumerProtocol() {
		closeFranz, err := so.openConsumerProtocol()
		if err != nil {
			return false, err
		}
		defer closeFranz()
	}
	if err := cluster.CreateTopic("soak.0", 12, 3); err != nil {
		return false, err
	}
	so.topics = []string{"soak.0"}
	if err := so.createDeadLetterTopic(); err != nil { // process.go
		return false, err
	}
	config := sarama.NewConfig()
	config.Version = sarama.V2_8_0_0
	config.Producer.Return.Successes = true
	config.Producer.RequiredAcks = sarama.WaitForAll
	config.Producer.Idempotent = true
	config.Net.MaxOpenRequests = 1
	config.Producer.Retry.Max = 20
	if so.client, err = sarama.NewClient(cluster.KafkaPeers(), config); err != nil {
		return false, err
	}
	defer so.client.Close()
	if so.admin, err = sarama.NewClusterAdminFromClient(so.client); err != nil {
		return false, err
	}
	if so.zk, _, err = zk.Connect(strings.Split(cluster.ZookeeperPeers(), ","), 10*time.Second, zk.WithLogInfo(false), zk.WithLogger(quiet{})); err != nil {
		return false, err
	}
	defer so.zk.Close()

	for _, name := range []string{"events.jsonl", "report.md", "timeline.png"} {
		_ = os.Remove(filepath.Join(s.dir, name))
	}
	old, _ := filepath.Glob(filepath.Join(s.dir, "*.log.jsonl"))
	for _, f := range old {
		_ = os.Remove(f)
	}
	if so.log, err = openEventLog(filepath.Join(s.dir, "driver.log.jsonl"), "driver"); err != nil {
		return false, err
	}
	defer so.log.f.Close()

	nodes := strings.Split(cluster.ZookeeperPeers(), ",")
	newInstance := func(name, coordinator string, seed int64) (*instance, error) {
		in := &instance{name: name, coordinator: coordinator, path: filepath.Join(s.dir, name+".log.jsonl"), seed: seed}
		var err error
		for _, addr := range append(append([]string(nil), nodes...), cluster.KafkaPeers()...) {
			var p *testcluster.Proxy
			if p, err = testcluster.NewProxy(addr); err != nil {
				break
			}
			if len(in.zookeeper) < len(nodes) {
				in.zookeeper = append(in.zookeeper, p)
			} else {
				in.brokers = append(in.brokers, p)
			}
		}
		if err != nil {
			for _, p := range append(in.zookeeper, in.brokers...) {
				p.Close()
			}
			return nil, err
		}
		return in, nil
	}
	defer func() {
		for _, in := range so.insts {
			for _, p := range append(in.zookeeper, in.brokers...) {
				p.Close()
			}
		}
	}()
	for i := range s.instances {
		in, err := newInstance(fmt.Sprintf("i%d", i), s.coordinator, s.seed+int64(i))
		if err != nil {
			return false, err
		}
		so.insts = append(so.insts, in)
		if err := so.start(in); err != nil {
			return false, err
		}
	}
	if s.migrating() {
		// The instances with the other setting, which their faults start:
		// k0 with CoordinatorKafka, z0 with CoordinatorZooKeeper (it
		// follows the switch, as the group's instances do), o0 the
		// original-like instance.
		for i, extra := range []struct{ name, coordinator string }{{extraKafka, coordinatorKafka}, {extraZookeeper, coordinatorMigrate}, {extraOriginal, coordinatorOriginal}} {
			in, err := newInstance(extra.name, extra.coordinator, s.seed+int64(s.instances+i))
			if err != nil {
				return false, err
			}
			in.extra = true
			so.insts = append(so.insts, in)
		}
	}
	defer so.killAll()

	stopProducer, producerDone := make(chan struct{}), make(chan error, 1)
	go func() { producerDone <- so.produce(stopProducer) }()
	stopSampler, samplerDone := make(chan struct{}), make(chan struct{})
	go so.sample(stopSampler, samplerDone)

	if _, ok := so.waitStable(90 * time.Second); !ok {
		return false, errors.New("the group did not become stable before the faults")
	}
	logf("stable; injecting faults for %s", s.duration)
	so.nemesis(time.Now().Add(s.duration))

	close(stopProducer)
	if err := <-producerDone; err != nil {
		logf("producer: %s", err)
	}
	logf("faults over; waiting for the group to consume everything")
	caughtUp := so.waitCaughtUp(2 * time.Minute)
	so.log.write(soakcheck.End, "", 0, 0, "") // liveness is judged up to here
	so.stopAll()
	close(stopSampler)
	<-samplerDone

	events, err := so.readBack()
	if err != nil {
		return false, err
	}
	report := soakcheck.CheckWith(events, so.checkOptions()) // checks.go
	if err := so.writeReport(events, report, caughtUp); err != nil {
		return false, err
	}
	fmt.Print(so.summary(report, caughtUp))
	return report.OK() && caughtUp && len(so.unstable) == 0, nil
}

type quiet struct{}

func (quiet) Printf(string, ...any) {}

// openEventLog opens an event log for appending.
func openEventLog(path, inst string) (*eventLog, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &eventLog{f: f, inst: inst}, nil
}

// start starts an instance's process.
func (so *soak) start(in *instance) error {
	zookeeper := make([]string, len(in.zookeeper))
	for i, p := range in.zookeeper {
		zookeeper[i] = p.Addr()
	}
	routes := make([]string, len(in.brokers))
	for i, p := range in.brokers {
		routes[i] = p.Target() + "=" + p.Addr()
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	_ = os.Remove(idPath(in.path)) // the new process writes its own
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %s %s %d %s %s", childEnv, in.name, strings.Join(zookeeper, ","), in.path, in.seed, strings.Join(routes, ","), in.coordinator))
	cmd.Env = append(cmd.Env, so.processEnv()...) // process.go
	stderr, err := os.OpenFile(filepath.Join(so.s.dir, in.name+".stderr"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = stderr, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		stderr.Close()
		return err
	}
	in.cmd, in.exited, in.stopped = cmd, make(chan struct{}), false
	go func(exited chan struct{}) { // owned by run: stopAll and killAll wait for it
		_ = cmd.Wait()
		stderr.Close()
		close(exited)
	}(in.exited)
	return nil
}

// alive tells whether its process runs (SIGSTOPped included); false for
// an extra instance never started.
func (in *instance) alive() bool {
	if in.exited == nil {
		return false
	}
	select {
	case <-in.exited:
		return false
	default:
		return true
	}
}

// stopAll stops every instance gracefully (SIGTERM: Shutdown), and kills
// those that did not exit within 30 s.
func (so *soak) stopAll() {
	for _, in := range so.insts {
		if in.alive() {
			if in.stopped {
				_ = in.cmd.Process.Signal(syscall.SIGCONT)
			}
			_ = in.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, in := range so.insts {
		if in.exited == nil {
			continue
		}
		select {
		case <-in.exited:
		case <-time.After(30 * time.Second):
			logf("%s did not exit within 30 s of SIGTERM; killing it", in.name)
			_ = in.cmd.Process.Kill()
			<-in.exited
		}
	}
}

// killAll kills what is left (a run that failed half-way).
func (so *soak) killAll() {
	for _, in := range so.insts {
		if in.cmd != nil && in.alive() {
			_ = in.cmd.Process.Kill()
			<-in.exited
		}
	}
}

// produce produces unique values to the soak topics at the rate until
// stop is closed.
func (so *soak) produce(stop <-chan struct{}) error {
	producer, err := sarama.NewSyncProducerFromClient(so.client)
	if err != nil {
		return err
	}
	defer producer.Close()
	const batch = 10
	tick := time.NewTicker(time.Second * batch / time.Duration(so.s.rate))
	defer tick.Stop()
	for seq := 0; ; {
		select {
		case <-stop:
			return nil
		case <-tick.C:
		}
		so.mu.Lock()
		topics := append([]string(nil), so.topics...)
		so.mu.Unlock()
		msgs := make([]*sarama.ProducerMessage, batch)
		for i := range msgs {
			msgs[i] = &sarama.ProducerMessage{Topic: topics[seq%len(topics)], Key: so.messageKey(seq), Value: sarama.StringEncoder(fmt.Sprintf("m%d", seq))}
			seq++
		}
		if err := producer.SendMessages(msgs); err != nil {
			logf("produce: %s (the values of the batch may or may not be in Kafka; the check reads Kafka)", err)
		}
	}
}

// partitions returns every partition of the soak topics.
func (so *soak) partitions() map[string][]int32 {
	so.mu.Lock()
	topics := append([]string(nil), so.topics...)
	so.mu.Unlock()
	result := make(map[string][]int32, len(topics))
	for _, t := range topics {
		ps, err := so.client.Partitions(t)
		if err == nil {
			result[t] = ps
		}
	}
	return result
}

// sample writes the group's committed offsets every 500 ms until stop is
// closed (and once more then).
func (so *soak) sample(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	admin, err := sarama.NewClusterAdminFromClient(so.client)
	if err != nil {
		logf("sampler: %s", err)
		return
	}
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for last := false; !last; {
		select {
		case <-stop:
			last = true
		case <-tick.C:
		}
		parts := so.partitions()
		resp, err := admin.ListConsumerGroupOffsets(groupName, parts)
		if err != nil {
			continue
		}
		// Stamped when the answer came: what it reads was committed, and
		// so acked, before then.
		at := time.Now().UnixNano()
		for t, ps := range parts {
			for _, p := range ps {
				if b := resp.GetBlock(t, p); b != nil && b.Err == sarama.ErrNoError && b.Offset >= 0 {
					so.log.writeAt(at, soakcheck.Committed, t, p, b.Offset, "")
				}
			}
		}
	}
}

// waitStable waits until every partition of the soak topics is owned by a
// registered instance, every live instance is registered (with
// CoordinatorKafka: stableKafka), and it returns how long that took. It
// restarts the group's instances that exited on their own (restartExited).
func (so *soak) waitStable(timeout time.Duration) (time.Duration, bool) {
	start := time.Now()
	for time.Since(start) < timeout {
		so.restartExited()
		if so.stable() {
			return time.Since(start), true
		}
		time.Sleep(100 * time.Millisecond) // polling interval
	}
	return time.Since(start), false
}

func (so *soak) stable() bool {
	switch {
	case so.s.kafkaCoordinated():
		return so.stableKafka()
	case so.s.consumerProtocol():
		return so.stableConsumer()
	case so.s.migrating():
		return so.stableMigrating()
	}
	return so.stableZookeeper()
}

// stableZookeeper is stable for a group that ZooKeeper coordinates: every
// live instance registered, no other, and every partition owned by one of
// them.
func (so *soak) stableZookeeper() bool {
	ids, _, err := so.zk.Children("/consumers/" + groupName + "/ids")
	if err != nil {
		return false
	}
	// The registrations must be those of the running processes, no more:
	// a killed or frozen one's goes when its session expires.
	registered := make(map[string]bool, len(ids))
	for _, id := range ids {
		registered[id] = true
	}
	live := 0
	for _, in := range so.insts {
		if !in.alive() || in.stopped {
			continue
		}
		id, err := os.ReadFile(idPath(in.path))
		if err != nil || !registered[string(id)] {
			return false
		}
		live++
	}
	if len(ids) != live {
		return false
	}
	for t, ps := range so.partitions() {
		for _, p := range ps {
			owner, _, err := so.zk.Get(fmt.Sprintf("/consumers/%s/owners/%s/%d", groupName, t, p))
			if err != nil || !registered[string(owner)] {
				return false
			}
		}
	}
	return true
}

// stableMigrating is stable for a group whose instances follow its
// switch: with the switch at zookeeper, stableZookeeper and Kafka's group
// Empty (no member left); at kafka, no instance registered in ZooKeeper
// and stableKafka.
func (so *soak) stableMigrating() bool {
	value, err := so.readSwitch()
	if err != nil {
		return false
	}
	if value == switchKafka {
		ids, _, err := so.zk.Children("/consumers/" + groupName + "/ids")
		if err != nil && !errors.Is(err, zk.ErrNoNode) || len(ids) > 0 {
			return false
		}
		return so.stableKafka()
	}
	if !so.stableZookeeper() {
		return false
	}
	groups, err := so.admin.DescribeConsumerGroups([]string{groupName})
	if err != nil || len(groups) != 1 || groups[0].Err != sarama.ErrNoError {
		return false
	}
	return groups[0].State == "Empty" || groups[0].State == "Dead"
}

// stableKafka is stable for a group that Kafka's group coordinator keeps:
// the group is Stable, its members are the running processes, one each
// (a member's client ID names its instance and process, childClientID; a
// killed or frozen one's member goes when its session expires), and the
// generation's assignment gives every partition of the soak topics to
// exactly one member.
func (so *soak) stableKafka() bool {
	groups, err := so.admin.DescribeConsumerGroups([]string{groupName})
	if err != nil || len(groups) != 1 || groups[0].Err != sarama.ErrNoError || groups[0].State != "Stable" {
		return false
	}
	var m kafkaMembers
	for _, member := range groups[0].Members {
		a, err := member.GetMemberAssignment()
		if err != nil {
			return false
		}
		m.add(member.ClientId)
		if a == nil {
			continue
		}
		for t, ps := range a.Topics {
			m.assign(t, ps)
		}
	}
	return so.membersStable(m)
}

// waitCaughtUp waits until the group's committed offsets reach the end of
// every partition.
func (so *soak) waitCaughtUp(timeout time.Duration) bool {
	admin, err := sarama.NewClusterAdminFromClient(so.client)
	if err != nil {
		return false
	}
	start := time.Now()
	for time.Since(start) < timeout {
		parts := so.partitions()
		resp, err := admin.ListConsumerGroupOffsets(groupName, parts)
		done := err == nil
		for t, ps := range parts {
			for _, p := range ps {
				end, err := so.client.GetOffset(t, p, sarama.OffsetNewest)
				b := resp.GetBlock(t, p)
				if err != nil || b == nil || b.Offset < end {
					done = false
				}
			}
		}
		if done {
			return true
		}
		time.Sleep(500 * time.Millisecond) // polling interval
	}
	return false
}

// readBack reads every soak topic's log from Kafka (the produced values,
// whatever the producer was told), and the events the processes wrote.
func (so *soak) readBack() ([]soakcheck.Event, error) {
	if err := so.client.RefreshMetadata(); err != nil {
		return nil, err
	}
	consumer, err := sarama.NewConsumerFromClient(so.client)
	if err != nil {
		return nil, err
	}
	defer consumer.Close()
	var events []soakcheck.Event
	for t, ps := range so.partitions() {
		for _, p := range ps {
			end, err := so.client.GetOffset(t, p, sarama.OffsetNewest)
			if err != nil {
				return nil, err
			}
			start, err := so.client.GetOffset(t, p, sarama.OffsetOldest)
			if err != nil {
				return nil, err
			}
			if start >= end {
				continue
			}
			pc, err := consumer.ConsumePartition(t, p, start)
			if err != nil {
				return nil, err
			}
			for msg := range pc.Messages() {
				events = append(events, soakcheck.Event{Kind: soakcheck.Produced, Time: msg.Timestamp.UnixNano(), Topic: t, Partition: p, Offset: msg.Offset, Value: string(msg.Value), Key: string(msg.Key)})
				if msg.Offset >= end-1 {
					break
				}
			}
			pc.AsyncClose()
			for range pc.Messages() {
			}
		}
	}
	logs, err := filepath.Glob(filepath.Join(so.s.dir, "*.log.jsonl"))
	if err != nil {
		return nil, err
	}
	sort.Strings(logs)
	all, err := os.Create(filepath.Join(so.s.dir, "events.jsonl"))
	if err != nil {
		return nil, err
	}
	defer all.Close()
	for _, path := range logs {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		evs, bad, err := soakcheck.ReadEvents(f)
		f.Close()
		if err != nil {
			return nil, err
		}
		if bad > 0 {
			logf("%s: %d lines torn (a process killed while writing)", filepath.Base(path), bad)
		}
		events = append(events, evs...)
	}
	enc := json.NewEncoder(all)
	for _, e := range events {
		if err := enc.Encode(e); err != nil {
			return nil, err
		}
	}
	return events, nil
}
