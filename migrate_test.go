package kafkaconsumer

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/go-zookeeper/zk"
	"github.com/wvanbergen/kazoo-go"

	"github.com/kafkaconsumer/kafkaconsumer/internal/testcluster"
)

// timedDelivery is a delivery of a partition's message by an instance.
type timedDelivery struct {
	who       string
	partition int32
	offset    int64
	value     string
	at        time.Time
}

// tenure is a span in which one instance handed out a partition without
// a revocation between: from its first delivery to its last.
type tenure struct {
	who      string
	from, to time.Time
}

// tenures splits each instance's deliveries of each partition at its
// revocations of the partition.
func tenures(deliveries []timedDelivery, revoked map[string]map[int32][]time.Time) map[int32][]tenure {
	type key struct {
		who string
		p   int32
	}
	byKey := make(map[key][]timedDelivery)
	for _, d := range deliveries {
		k := key{d.who, d.partition}
		byKey[k] = append(byKey[k], d)
	}
	result := make(map[int32][]tenure)
	for k, ds := range byKey {
		sort.Slice(ds, func(i, j int) bool { return ds[i].at.Before(ds[j].at) })
		revokes := revoked[k.who][k.p]
		cur := tenure{who: k.who, from: ds[0].at, to: ds[0].at}
		for _, d := range ds[1:] {
			split := false
			for _, r := range revokes {
				if r.After(cur.to) && !r.After(d.at) {
					split = true
				}
			}
			if split {
				result[k.p] = append(result[k.p], cur)
				cur = tenure{who: k.who, from: d.at}
			}
			cur.to = d.at
		}
		result[k.p] = append(result[k.p], cur)
	}
	return result
}

// doubleOwned returns the overlaps of two instances' tenures of a
// partition: a partition handed out by both at once.
func doubleOwned(ts map[int32][]tenure) []string {
	var overlaps []string
	for p, list := range ts {
		for i, a := range list {
			for _, b := range list[i+1:] {
				if a.who != b.who && a.from.Before(b.to) && b.from.Before(a.to) {
					overlaps = append(overlaps, fmt.Sprintf("partition %d: %s %s–%s and %s %s–%s", p,
						a.who, a.from.Format("15:04:05.000"), a.to.Format("15:04:05.000"),
						b.who, b.from.Format("15:04:05.000"), b.to.Format("15:04:05.000")))
				}
			}
		}
	}
	sort.Strings(overlaps)
	return overlaps
}

// longestGap returns the longest time a partition went without a delivery
// between from and to (counting from the last delivery before from).
func longestGap(deliveries []timedDelivery, from, to time.Time) (time.Duration, int32) {
	byPartition := make(map[int32][]time.Time)
	for _, d := range deliveries {
		byPartition[d.partition] = append(byPartition[d.partition], d.at)
	}
	var longest time.Duration
	var which int32
	for p, ats := range byPartition {
		sort.Slice(ats, func(i, j int) bool { return ats[i].Before(ats[j]) })
		for i := 1; i < len(ats); i++ {
			if ats[i].Before(from) || ats[i-1].After(to) {
				continue
			}
			if gap := ats[i].Sub(ats[i-1]); gap > longest {
				longest, which = gap, p
			}
		}
	}
	return longest, which
}

// childDeliveries reads the timed lines of a child's output (KC_TIMES).
func childDeliveries(t *testing.T, c *child) ([]timedDelivery, map[int32][]time.Time) {
	t.Helper()
	f, err := os.Open(c.out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ds []timedDelivery
	revoked := make(map[int32][]time.Time)
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		fields := strings.Fields(scanner.Text())
		if len(fields) < 3 {
			continue
		}
		ns, _ := strconv.ParseInt(fields[1], 10, 64)
		p, _ := strconv.ParseInt(fields[2], 10, 32)
		switch fields[0] {
		case "D":
			if len(fields) == 5 {
				offset, _ := strconv.ParseInt(fields[3], 10, 64)
				ds = append(ds, timedDelivery{who: c.name, partition: int32(p), offset: offset, value: fields[4], at: time.Unix(0, ns)})
			}
		case "X":
			revoked[int32(p)] = append(revoked[int32(p)], time.Unix(0, ns))
		}
	}
	return ds, revoked
}

// setSwitch writes the group's coordinator switch, as kafkaconsumer-groups
// migrate does.
func setSwitch(t *testing.T, conn *zk.Conn, chroot, group, value string) {
	t.Helper()
	node := chroot + "/consumers/" + group + "/coordinator"
	if _, err := conn.Set(node, []byte(value), -1); err != nil {
		t.Fatalf("set %s to %s: %s", node, value, err)
	}
}

// onKafka reports whether c runs under Kafka's group coordinator.
func onKafka(c Consumer) bool { return c.(*consumerManager).kafkaActive() != nil }

// TestSwitchToKafkaAndBackUnderLoad moves a group of three instances
// (two in this process, one a child process) from ZooKeeper's
// coordination to Kafka's group coordinator under a steady load, kills
// the child with SIGKILL right after the switch, and moves the two others
// back; and the same without the child and the kill. Every delivery is
// recorded with its instance and time: no message may be lost, no
// partition handed out by two instances at once (their tenures must not
// overlap), and the longest time a partition went without a delivery
// (the gap) is measured for each switch: with a kill, within the killed
// instance's longer session timeout (ZooKeeper's, or Kafka's group
// coordinator's if it joined there before it died) + MaxProcessingTime +
// 2 s; graceful (the switch back), within MaxProcessingTime + 2 s.
func TestSwitchToKafkaAndBackUnderLoad(t *testing.T) {
	t.Run("kill", func(t *testing.T) { testSwitchUnderLoad(t, true) })
	t.Run("graceful", func(t *testing.T) { testSwitchUnderLoad(t, false) })
}

// testSwitchUnderLoad is TestSwitchToKafkaAndBackUnderLoad, with the
// child killed (kill) or without a child.
func testSwitchUnderLoad(t *testing.T, kill bool) {
	debugLogs(t)
	parallelClusterTest(t)
	if testDiscovery == DiscoverFromKafka {
		t.Skip("runs on ZooKeeper discovery; the switch does not depend on it")
	}
	const partitions = 8
	topic := newTopic(t, partitions)
	group := uniqueName("switch")
	dir := t.TempDir()
	conn, chroot := testZookeeper(t, zookeeperPeers)

	const session = 3 * time.Second
	config := func(log *deliveryLog) *Config {
		c := testConfig()
		c.Zookeeper.Timeout = session
		c.Consumer.Group.Session.Timeout = 6 * time.Second
		c.Consumer.Group.Heartbeat.Interval = time.Second
		c.OnRebalance = log.onRebalance
		return c
	}
	logA, logB := &deliveryLog{done: make(chan struct{})}, &deliveryLog{done: make(chan struct{})}
	a := join(t, group, TopicSubscription(topic), config(logA))
	logA.record(a)
	closedA, closedB := false, false
	defer func() {
		if !closedA {
			_ = a.Close()
		}
	}()
	var victim *child
	instances := 2
	if kill {
		instances = 3
		victim = startChild(t, dir, "child", childOptions{
			zookeeper: zookeeperPeers, group: group, topics: []string{topic},
			session: session, maxProcessing: 2 * time.Second, times: true,
		})
	}
	b := join(t, group, TopicSubscription(topic), config(logB))
	logB.record(b)
	defer func() {
		if !closedB {
			_ = b.Close()
		}
	}()
	producer := produceSteadily(t, newTestClient(t), topic, 400)
	waitFor(t, 30*time.Second, "the instances to share the partitions", func() bool {
		ids, _, err := conn.Children(chroot + "/consumers/" + group + "/ids")
		held := claimedCount(a) + claimedCount(b)
		return err == nil && len(ids) == instances && claimedCount(a) > 0 && claimedCount(b) > 0 &&
			(held == partitions || kill && held >= partitions-3)
	})
	if kill {
		waitFor(t, 30*time.Second, "the child to consume", func() bool { return len(victim.output().received) > 0 })
	}

	// To Kafka, with the child killed midway.
	toKafka := time.Now()
	setSwitch(t, conn, chroot, group, switchKafka)
	if kill {
		victim.kill(t)
	}
	waitFor(t, time.Minute, "both instances to consume every partition under Kafka", func() bool {
		return onKafka(a) && onKafka(b) && claimedCount(a)+claimedCount(b) == partitions && claimedCount(a) > 0 && claimedCount(b) > 0
	})
	onKafkaAt := time.Now()
	if ids, _, err := conn.Children(chroot + "/consumers/" + group + "/ids"); err != nil || len(ids) != 0 {
		t.Errorf("instances still registered in ZooKeeper after the switch: %v (%v)", ids, err)
	}
	// Let the group consume a while under Kafka: the deliveries after the
	// switch count in its gap.
	settle := time.Now().Add(2 * time.Second)
	waitFor(t, 10*time.Second, "deliveries under Kafka", func() bool { return time.Now().After(settle) })

	// Back to ZooKeeper, gracefully.
	toZookeeper := time.Now()
	setSwitch(t, conn, chroot, group, switchZookeeper)
	waitFor(t, time.Minute, "both instances to consume every partition under ZooKeeper again", func() bool {
		ids, _, err := conn.Children(chroot + "/consumers/" + group + "/ids")
		return err == nil && len(ids) == 2 && !onKafka(a) && !onKafka(b) && claimedCount(a)+claimedCount(b) == partitions
	})
	onZookeeperAt := time.Now()
	settle = time.Now().Add(2 * time.Second)
	waitFor(t, 10*time.Second, "deliveries under ZooKeeper", func() bool { return time.Now().After(settle) })

	produced := producer.finish()
	all := func() []timedDelivery {
		var ds []timedDelivery
		for who, l := range map[string]*deliveryLog{"a": logA, "b": logB} {
			d, _ := l.snapshot()
			for _, x := range d {
				ds = append(ds, timedDelivery{who, x.partition, x.offset, x.value, x.at})
			}
		}
		if victim == nil {
			return ds
		}
		cd, _ := childDeliveries(t, victim)
		return append(ds, cd...)
	}
	waitFor(t, 30*time.Second, "every produced message", func() bool {
		seen := make(map[string]bool)
		for _, d := range all() {
			seen[d.value] = true
		}
		for _, v := range produced {
			if !seen[v] {
				return false
			}
		}
		return true
	})
	if err := a.Close(); err != nil {
		t.Errorf("Close of a: %s", err)
	}
	closedA = true
	if err := b.Close(); err != nil {
		t.Errorf("Close of b: %s", err)
	}
	closedB = true
	<-logA.done
	<-logB.done

	deliveries := all()
	revoked := map[string]map[int32][]time.Time{"a": {}, "b": {}}
	for who, l := range map[string]*deliveryLog{"a": logA, "b": logB} {
		_, rebalances := l.snapshot()
		for _, r := range rebalances {
			for _, tp := range r.Revoked {
				revoked[who][tp.Partition] = append(revoked[who][tp.Partition], r.at)
			}
		}
	}
	if victim != nil {
		_, revoked["child"] = childDeliveries(t, victim)
	}
	counts := make(map[string]int)
	for _, d := range deliveries {
		counts[d.value]++
	}
	lost, duplicates := 0, 0
	for _, v := range produced {
		switch n := counts[v]; {
		case n == 0:
			lost++
		case n > 1:
			duplicates += n - 1
		}
	}
	overlaps := doubleOwned(tenures(deliveries, revoked))
	gapKafka, pKafka := longestGap(deliveries, toKafka, onKafkaAt.Add(2*time.Second))
	gapBack, pBack := longestGap(deliveries, toZookeeper, onZookeeperAt.Add(2*time.Second))
	how := "gracefully"
	if kill {
		how = "with a kill -9"
	}
	t.Logf("produced %d, delivered %d, lost %d, duplicates %d, double-owned %d; to Kafka %s: all partitions consumed after %s, longest gap %s (partition %d); back to ZooKeeper: after %s, longest gap %s (partition %d)",
		len(produced), len(deliveries), lost, duplicates, len(overlaps), how,
		onKafkaAt.Sub(toKafka).Round(time.Millisecond), gapKafka.Round(time.Millisecond), pKafka,
		onZookeeperAt.Sub(toZookeeper).Round(time.Millisecond), gapBack.Round(time.Millisecond), pBack)
	if lost > 0 {
		t.Errorf("%d of %d messages lost", lost, len(produced))
	}
	if len(overlaps) > 0 {
		t.Errorf("%d partitions handed out by two instances at once, e.g. %s", len(overlaps), strings.Join(overlaps[:min(5, len(overlaps))], "; "))
	}
	maxProcessing := testConfig().MaxProcessingTime
	bound := maxProcessing + 2*time.Second
	if kill {
		// Killed right after the switch, the child may have died in
		// ZooKeeper's group or after joining Kafka's: the later of the two
		// sessions to expire bounds the wait for its partitions.
		bound += max(session, childKafkaSession)
	}
	if gapKafka > bound {
		t.Errorf("the switch to Kafka %s left partition %d without deliveries for %s, more than %s", how, pKafka, gapKafka.Round(time.Millisecond), bound)
	}
	if bound := maxProcessing + 2*time.Second; gapBack > bound {
		t.Errorf("the graceful switch back left partition %d without deliveries for %s, more than MaxProcessingTime + 2 s (%s)", pBack, gapBack.Round(time.Millisecond), bound)
	}
}

// TestSwitchToKafkaCloseWithBrokersHung: the brokers hang (connections
// accepted, nothing answered) as the group switches to Kafka's
// coordinator. The instance gives up its final commits, deregisters, and
// connects its group client, whose requests wait for a rebalance (its
// Net.ReadTimeout: the rebalance timeout + 5 s, 65 s by default) on a
// hung broker. Close must not wait for that: it returns within
// closeGrace + 5 s of being called.
func TestSwitchToKafkaCloseWithBrokersHung(t *testing.T) {
	parallelClusterTest(t)
	if testDiscovery == DiscoverFromKafka {
		t.Skip("runs on ZooKeeper discovery; the switch does not depend on it")
	}
	topic := newTopic(t, 2)
	group := uniqueName("switch-hung")
	c, kp, logged, conn, chroot := joinBehindProxies(t, group, topic, testConfig())
	received, done := receiveAll(c)
	values := produce(t, newTestClient(t), topic, "hung", 20)
	waitFor(t, 30*time.Second, "the messages", func() bool { return received.has(values) })

	kp.hold(t)
	setSwitch(t, conn, chroot, group, switchKafka)
	// Its next step connects the group client, to the held brokers.
	waitFor(t, 30*time.Second, "the instance to leave ZooKeeper's coordination", func() bool {
		_, ok := logged.find(slog.LevelInfo, "joining Kafka's group", nil)
		return ok
	})
	_, _ = returnsWithin(t, "Close", closeGrace+5*time.Second, c.Close)
	<-done
}

// TestSwitchToKafkaWhileCutOffFromBrokers: an instance is cut off from
// every broker (its connections through the proxies reset) when the
// group switches to Kafka's coordinator, long enough for sarama to drop
// every broker it knew. The addresses of its group client must be read
// afresh at each attempt, from the discovery (ZooKeeper's /brokers/ids,
// or Config.Brokers) as well as from the client:
//   - "heal": once the brokers are reachable again it joins Kafka's group
//     and consumes; then the switch goes back, and it follows it;
//   - "back": the switch goes back while it is still cut off; its retries
//     follow the switch, and once healed it registers in ZooKeeper again
//     (after finding Kafka's group Empty: it sealed the owners) and
//     consumes.
func TestSwitchToKafkaWhileCutOffFromBrokers(t *testing.T) {
	parallelClusterTest(t)
	t.Run("heal", func(t *testing.T) { testSwitchWhileCutOff(t, false) })
	t.Run("back", func(t *testing.T) { testSwitchWhileCutOff(t, true) })
}

func testSwitchWhileCutOff(t *testing.T, backWhileCut bool) {
	topic := newTopic(t, 2)
	group := uniqueName("switch-cut-off")
	config := testConfig()
	config.Consumer.Group.Session.Timeout = 6 * time.Second
	config.Consumer.Group.Heartbeat.Interval = time.Second
	c, kp, logged, conn, chroot := joinBehindProxies(t, group, topic, config)
	cm := c.(*consumerManager)
	received, _ := receiveAll(c)
	client := newTestClient(t)
	values := produce(t, client, topic, "before", 20)
	waitFor(t, 30*time.Second, "the messages before the cut", func() bool { return received.has(values) })

	kp.faultAll(t, func(p *testcluster.Proxy) error { p.Reset(); return nil })
	// A metadata refresh that fails on every broker drops them all, as
	// the fetchers' refreshes do within seconds.
	waitFor(t, 30*time.Second, "sarama to drop every broker", func() bool {
		_ = cm.client.RefreshMetadata()
		return len(cm.client.Brokers()) == 0
	})
	setSwitch(t, conn, chroot, group, switchKafka)
	waitFor(t, time.Minute, "a connection to Kafka's group coordinator to fail", func() bool {
		_, ok := logged.find(slog.LevelWarn, "Failed to connect to Kafka's group coordinator", nil)
		return ok
	})
	ids := chroot + "/consumers/" + group + "/ids"
	registered := func() bool {
		children, _, err := conn.Children(ids)
		return err == nil && len(children) == 1 && !onKafka(c) && claimedCount(c) == 2
	}
	heal := func() time.Time {
		kp.faultAll(t, func(p *testcluster.Proxy) error { p.Pass(); return nil })
		return time.Now()
	}
	if backWhileCut {
		setSwitch(t, conn, chroot, group, switchZookeeper)
		waitFor(t, time.Minute, "the retries to read the switch back", func() bool {
			_, ok := logged.find(slog.LevelInfo, "says zookeeper", nil)
			return ok
		})
		healed := heal()
		if !poll(time.Minute, registered) {
			lr, _ := logged.findLast(slog.LevelWarn, "Failed to connect to Kafka's group coordinator")
			t.Fatalf("the instance did not register in ZooKeeper again within a minute of the heal; its last failure: %s", lr.msg)
		}
		t.Logf("registered in ZooKeeper again %s after the heal", time.Since(healed).Round(time.Millisecond))
		values = produce(t, client, topic, "back", 20)
		waitFor(t, 30*time.Second, "the messages after the switch back", func() bool { return received.has(values) })
		return
	}
	healed := heal()
	if !poll(time.Minute, func() bool { return onKafka(c) && claimedCount(c) == 2 }) {
		lr, _ := logged.findLast(slog.LevelWarn, "Failed to connect to Kafka's group coordinator")
		t.Fatalf("the instance did not join Kafka's group within a minute of the heal; its last failure: %s", lr.msg)
	}
	t.Logf("joined Kafka's group %s after the heal", time.Since(healed).Round(time.Millisecond))
	values = produce(t, client, topic, "kafka", 20)
	waitFor(t, 30*time.Second, "the messages under Kafka", func() bool { return received.has(values) })

	setSwitch(t, conn, chroot, group, switchZookeeper)
	waitFor(t, time.Minute, "the instance to register in ZooKeeper again and claim", registered)
	values = produce(t, client, topic, "back", 20)
	waitFor(t, 30*time.Second, "the messages after the switch back", func() bool { return received.has(values) })
}

// TestSwitchBackCloseWithBrokersHung: the brokers hang (connections
// accepted, nothing answered) as a group on Kafka's coordinator switches
// back to ZooKeeper. The member stops its partitions (nothing to commit)
// and leaves Kafka's group; its LeaveGroup waits on a hung broker for the
// group client's read timeout (the rebalance timeout + 5 s, 65 s by
// default). Close must not wait for that: it returns within closeGrace +
// 5 s of being called.
func TestSwitchBackCloseWithBrokersHung(t *testing.T) {
	parallelClusterTest(t)
	if testDiscovery == DiscoverFromKafka {
		t.Skip("runs on ZooKeeper discovery; the switch does not depend on it")
	}
	topic := newTopic(t, 2)
	group := uniqueName("switch-back-hung")
	config := testConfig()
	config.Consumer.Group.Session.Timeout = 6 * time.Second
	config.Consumer.Group.Heartbeat.Interval = time.Second
	c, kp, logged, conn, chroot := joinBehindProxies(t, group, topic, config)
	_, done := receiveAll(c)
	setSwitch(t, conn, chroot, group, switchKafka)
	waitFor(t, time.Minute, "the instance to consume under Kafka", func() bool { return onKafka(c) && claimedCount(c) == 2 })

	// Nothing was consumed: the partitions stop at once, with nothing
	// to commit, and the LeaveGroup follows.
	kp.hold(t)
	setSwitch(t, conn, chroot, group, switchZookeeper)
	waitFor(t, 30*time.Second, "the member to stop its partitions for the switch back", func() bool {
		_, ok := logged.find(slog.LevelInfo, "The group moves back to ZooKeeper's coordination", nil)
		return ok && len(c.Stats()) == 0
	})
	_, _ = returnsWithin(t, "Close", closeGrace+5*time.Second, c.Close)
	<-done
}

// TestKafkaCloseDuringMetadataReadWithBrokersHung: under CoordinatorKafka
// the manager reads the subscription's partitions from Kafka's metadata
// before it joins; the brokers hang (connections accepted, nothing
// answered) as it does. The read waits for Net.ReadTimeout (30 s by
// default) at each attempt; Close must not wait for it: it returns within
// closeGrace + 5 s of being called.
func TestKafkaCloseDuringMetadataReadWithBrokersHung(t *testing.T) {
	kafkaCoordinatorTest(t)
	topic := newTopic(t, 2)
	group := uniqueName("metadata-hung")
	kp := newKafkaProxies(t, nil)
	reading := make(chan struct{})
	var once sync.Once
	hooks := &testHooks{kafkaAddress: kp.address, readingMetadata: func() {
		once.Do(func() {
			kp.hold(t)
			close(reading)
		})
	}}
	c, err := joinWithHooks(group, TopicSubscription(topic), "", kafkaTestConfig(), hooks)
	if err != nil {
		t.Fatalf("Join(%s) = %s", group, err)
	}
	select {
	case <-reading:
	case <-time.After(30 * time.Second):
		_ = c.Close()
		t.Fatal("the manager did not read the metadata within 30 s")
	}
	_, _ = returnsWithin(t, "Close", closeGrace+5*time.Second, c.Close)
}

// lateOriginal does what an instance of the original library does in
// ZooKeeper, no more: it registers /consumers/<group>/ids/<id> with the
// subscription JSON of Kafka's old high-level consumer (no "client"
// field), and claims partitions with kazoo-go's ClaimPartition, the
// original's call (the owner node /consumers/<group>/owners/<topic>/<p>,
// ephemeral, holding its ID). Its session is closed at the end of the
// test.
type lateOriginal struct {
	id       string
	kz       *kazoo.Kazoo
	instance *kazoo.ConsumergroupInstance
}

// registerLateOriginal registers a lateOriginal in group, subscribed to
// topic.
func registerLateOriginal(t *testing.T, group, topic string) *lateOriginal {
	t.Helper()
	id, err := newInstanceID()
	if err != nil {
		t.Fatal(err)
	}
	o := &lateOriginal{id: id, kz: testKazoo(t)}
	t.Cleanup(func() { _ = o.kz.Close() })
	o.instance = o.kz.Consumergroup(group).Instance(id)
	reg, _ := json.Marshal(map[string]any{"pattern": "static", "subscription": map[string]int{topic: 1},
		"timestamp": strconv.FormatInt(time.Now().UnixMilli(), 10), "version": 1})
	if err := o.instance.RegisterWithSubscription(reg); err != nil {
		t.Fatalf("register the late original: %s", err)
	}
	return o
}

// claim tries to claim each partition of topic once, as the original's
// partition managers do (they retry every second until they hold it), and
// returns the partitions it holds and the errors of the others.
func (o *lateOriginal) claim(topic string, partitions int32) (held []int32, errs map[int32]error) {
	errs = make(map[int32]error)
	for p := range partitions {
		if err := o.instance.ClaimPartition(topic, p); err != nil {
			errs[p] = err
			continue
		}
		held = append(held, p)
	}
	return held, errs
}

// TestSwitchToKafkaLateOriginalClaimsNothing: after the switch to Kafka,
// an instance that registers and claims as the original does (it does
// not read the switch) must get no partition that a member of Kafka's
// group holds, and the members must name it on Errors(). Two instances
// consume 4 partitions under Kafka's coordinator; the late original
// registers and claims every partition (and again, as its retries do,
// after the members rebalance).
func TestSwitchToKafkaLateOriginalClaimsNothing(t *testing.T) {
	parallelClusterTest(t)
	if testDiscovery == DiscoverFromKafka {
		t.Skip("runs on ZooKeeper discovery; the switch does not depend on it")
	}
	const partitions = 4
	topic := newTopic(t, partitions)
	group := uniqueName("late-original")
	conn, chroot := testZookeeper(t, zookeeperPeers)
	config := func() *Config {
		c := testConfig()
		c.Consumer.Group.Session.Timeout = 6 * time.Second
		c.Consumer.Group.Heartbeat.Interval = time.Second
		return c
	}
	a := joinWithCleanup(t, group, TopicSubscription(topic), config())
	b := joinWithCleanup(t, group, TopicSubscription(topic), config())
	errsA := logErrors(a)
	_, _ = receiveAll(b)
	setSwitch(t, conn, chroot, group, switchKafka)
	waitFor(t, time.Minute, "both instances to consume every partition under Kafka", func() bool {
		return onKafka(a) && onKafka(b) && claimedCount(a)+claimedCount(b) == partitions && claimedCount(a) > 0 && claimedCount(b) > 0
	})

	late := registerLateOriginal(t, group, topic)
	heldByKafka := func() map[int32]bool {
		held := make(map[int32]bool)
		for _, c := range []Consumer{a, b} {
			for _, s := range c.Stats() {
				if s.Claimed {
					held[s.Partition] = true
				}
			}
		}
		return held
	}
	var both []int32
	claimed, errs := late.claim(topic, partitions)
	kafka := heldByKafka()
	for _, p := range claimed {
		if kafka[p] {
			both = append(both, p)
		}
	}
	t.Logf("the late original claimed %v; refused: %v", claimed, errs)
	if len(both) > 0 {
		t.Errorf("the late original claimed partitions %v, which the members of Kafka's group hold (%d held by both)", both, len(both))
	}
	waitFor(t, 30*time.Second, "a member to name the late original on Errors()", func() bool {
		errsA.mu.Lock()
		defer errsA.mu.Unlock()
		for _, err := range errsA.errs {
			if errors.Is(err, ErrZookeeperIntruder) && strings.Contains(err.Error(), late.id) {
				return true
			}
		}
		return false
	})
}

// TestSwitchedGroupRebalancesThroughZookeeperOutage: ZooKeeper stops
// answering (its connections held behind a proxy) while a group on
// Kafka's coordinator rebalances: one of its two members leaves. The
// other must take the leaver's partitions and consume them, ZooKeeper
// or not: a member that stayed in the group needs no read of the switch
// (its session keeps the group from being Empty, and so from going
// back).
func TestSwitchedGroupRebalancesThroughZookeeperOutage(t *testing.T) {
	parallelClusterTest(t)
	if testDiscovery == DiscoverFromKafka {
		t.Skip("runs on ZooKeeper discovery; the switch does not depend on it")
	}
	const partitions = 4
	topic := newTopic(t, partitions)
	group := uniqueName("switch-zk-outage")
	conn, chroot := testZookeeper(t, zookeeperPeers)
	proxy, zookeeper := zookeeperProxy(t, zookeeperPeers)
	config := testConfig()
	config.Consumer.Group.Session.Timeout = 6 * time.Second
	config.Consumer.Group.Heartbeat.Interval = time.Second
	open := func() Consumer {
		c, err := Join(group, TopicSubscription(topic), zookeeper, config)
		if err != nil {
			t.Fatalf("Join(%s) = %s", group, err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	a, b := open(), open()
	received, _ := receiveAll(a)
	_, _ = receiveAll(b)
	setSwitch(t, conn, chroot, group, switchKafka)
	waitFor(t, time.Minute, "both instances to consume every partition under Kafka", func() bool {
		return onKafka(a) && onKafka(b) && claimedCount(a) == partitions/2 && claimedCount(b) == partitions/2
	})

	proxy.Hold()
	defer proxy.Pass()
	outage := time.Now()
	closed := make(chan error, 1)
	go func() { closed <- b.Close() }() // it leaves Kafka's group first
	t.Cleanup(func() { proxy.Pass(); <-closed })
	values := produce(t, newTestClient(t), topic, "zk-outage", 40)
	waitFor(t, time.Minute, "the remaining member to take every partition and consume it during the outage", func() bool {
		return claimedCount(a) == partitions && received.has(values)
	})
	t.Logf("the remaining member consumed every partition %s after ZooKeeper stopped answering", time.Since(outage).Round(time.Millisecond))
}

// TestKafkaInstanceWhileSwitchSaysZookeeper pins what docs/migration.md
// says of a CoordinatorKafka instance started while the group's switch
// says zookeeper: it has no ZooKeeper, so it cannot see the switch; it
// joins Kafka's group, Empty, alone, and consumes every partition beside
// the ZooKeeper-coordinated instance. That instance's commits (of
// generation -1) are refused by Kafka while its group has a member: it
// reports them on Errors() as sarama.ErrUnknownMemberId, and consumes on.
func TestKafkaInstanceWhileSwitchSaysZookeeper(t *testing.T) {
	kafkaCoordinatorTest(t)
	topic := newTopic(t, 2)
	group := uniqueName("kafka-beside-zookeeper")
	z := joinWithCleanup(t, group, TopicSubscription(topic), testConfig())
	zErrs := logErrors(z)
	zReceived, _ := receiveAll(z)
	client := newTestClient(t)
	values := produce(t, client, topic, "before", 20)
	waitFor(t, 30*time.Second, "the ZooKeeper-coordinated instance to consume", func() bool { return zReceived.has(values) })

	k := joinKafka(t, group, TopicSubscription(topic), kafkaTestConfig())
	kReceived, _ := receiveAll(k)
	waitFor(t, time.Minute, "the CoordinatorKafka instance to take every partition, beside the other", func() bool {
		return claimedCount(k) == 2 && claimedCount(z) == 2
	})
	values = produce(t, client, topic, "beside", 20)
	waitFor(t, 30*time.Second, "both instances to consume every message", func() bool {
		return zReceived.has(values) && kReceived.has(values)
	})
	waitFor(t, 30*time.Second, "a refused commit on the ZooKeeper-coordinated instance's Errors()", func() bool {
		zErrs.mu.Lock()
		defer zErrs.mu.Unlock()
		for _, err := range zErrs.errs {
			if errors.Is(err, sarama.ErrUnknownMemberId) {
				return true
			}
		}
		return false
	})
	t.Logf("the ZooKeeper-coordinated instance's Errors(): %s", zErrs.summary())
}

// joinBehindProxies joins group, subscribed to topic, with config, its
// broker connections through proxies of its own (kp) and its log
// recorded (logged), and returns it with the group's ZooKeeper
// connection and chroot. The consumer is closed at the test's end; a
// second Close there is harmless.
func joinBehindProxies(t *testing.T, group, topic string, config *Config) (c Consumer, kp *kafkaProxies, logged *recorded, conn *zk.Conn, chroot string) {
	t.Helper()
	conn, chroot = testZookeeper(t, zookeeperPeers)
	kp = newKafkaProxies(t, nil)
	logger, logged := newRecordingLogger()
	config.Logger = logger
	c, err := joinWithHooks(group, TopicSubscription(topic), zookeeperPeers, config, &testHooks{kafkaAddress: kp.address})
	if err != nil {
		t.Fatalf("Join(%s) = %s", group, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, kp, logged, conn, chroot
}
