package main

import (
	"errors"
	"fmt"
	"slices"
	"syscall"
	"time"

	"github.com/kafkaconsumer/kafkaconsumer/internal/soakcheck"
	"github.com/kafkaconsumer/kafkaconsumer/internal/testcluster"
)

// A fault is injected, held for a while, and healed; inject returns the
// heal, and a description of what it hit. It draws its targets and amounts
// from so.rng alone, so that SOAK_SEED replays them. When it fails after
// it broke something, it returns the heal with its error: the nemesis
// heals whatever inject returns.
type fault struct {
	kind   string // its row in the report
	inject func(so *soak) (what string, heal func() error, err error)
}

// How long the faults on one instance's network last: a broker cut off
// (no session to lose there: the client's requests wait, or fail and are
// retried), and a latency.
const (
	brokerCutHold = 6 * time.Second
	latencyHold   = 10 * time.Second
)

// faults are the kinds of fault, which the nemesis deals once per round
// in a random order; the report's table lists them in this order. Adding
// a kind is adding an entry.
var faults = []fault{
	{"instance killed (kill -9), restarted", func(so *soak) (string, func() error, error) {
		in := so.pickInstance()
		if err := in.cmd.Process.Kill(); err != nil {
			return "", nil, err
		}
		<-in.exited
		return in.name, func() error { return so.start(in) }, nil
	}},
	{"instance frozen past its session (SIGSTOP), resumed", func(so *soak) (string, func() error, error) {
		in := so.pickInstance()
		if err := in.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			return "", nil, err
		}
		// The checker does not count the frozen time against the
		// durable-acks bound (soakcheck's checkRehandled).
		so.log.write(soakcheck.Frozen, "", 0, 0, in.name)
		in.stopped = true
		so.hold(sessionTimeout + 2*time.Second)
		return in.name, func() error {
			in.stopped = false
			err := in.cmd.Process.Signal(syscall.SIGCONT)
			so.log.write(soakcheck.Resumed, "", 0, 0, in.name)
			return err
		}, nil
	}},
	{"instance leaves (Shutdown) and joins again", func(so *soak) (string, func() error, error) {
		in := so.pickInstance()
		if err := so.leave(in); err != nil {
			return in.name, nil, err
		}
		return in.name, func() error { return so.start(in) }, nil
	}},
	// The instance stops reading its messages, and acking, as a consumer
	// stuck in its processing does; while it is stuck another instance
	// leaves and joins again, and each of these rebalances may stop
	// partitions of the stuck one, which wait MaxProcessingTime for acks
	// that do not come, commit what was acked, and let go. Without a
	// rebalance a stall only stops the flow.
	{"instance stalls past MaxProcessingTime while another leaves and joins", func(so *soak) (string, func() error, error) {
		in := so.pickInstance()
		other := so.pickInstance(in)
		what := fmt.Sprintf("%s stalls, %s leaves and joins", in.name, other.name)
		if err := in.cmd.Process.Signal(stallSignal); err != nil {
			return what, nil, err
		}
		resume := func() error { return in.cmd.Process.Signal(resumeSignal) }
		if err := so.rejoin(other); err != nil {
			return what, resume, err
		}
		// The join's rebalance may have begun only now: the stall
		// outlasts the stops it makes.
		so.hold(maxProcessingTime + 2*time.Second)
		return what, resume, nil
	}},
	{"broker killed, restarted", func(so *soak) (string, func() error, error) {
		i := so.rng.Intn(3)
		if err := so.cluster.KillBroker(i); err != nil {
			return "", nil, err
		}
		so.hold(5 * time.Second)
		return fmt.Sprintf("broker %d", i), func() error { return so.cluster.StartBroker(i) }, nil
	}},
	{"broker frozen (SIGSTOP), resumed", func(so *soak) (string, func() error, error) {
		i := so.rng.Intn(3)
		pid := so.cluster.BrokerPID(i)
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			return "", nil, err
		}
		so.hold(5 * time.Second)
		return fmt.Sprintf("broker %d", i), func() error { return syscall.Kill(pid, syscall.SIGCONT) }, nil
	}},
	{"ZooKeeper node killed, restarted", func(so *soak) (string, func() error, error) {
		i := so.rng.Intn(3)
		if err := so.cluster.KillZooKeeper(i); err != nil {
			return "", nil, err
		}
		so.hold(5 * time.Second)
		return fmt.Sprintf("zookeeper %d", i), func() error { return so.cluster.StartZooKeeper(i) }, nil
	}},
	{"ZooKeeper quorum frozen briefly", func(so *soak) (string, func() error, error) {
		var pids []int
		for i := range 3 {
			pid := so.cluster.ZooKeeperPID(i)
			if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
				return "", nil, err
			}
			pids = append(pids, pid)
		}
		so.hold(2 * time.Second)
		return "all three", func() error {
			for _, pid := range pids {
				if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
					return err
				}
			}
			return nil
		}, nil
	}},
	// A follower cut off from the quorum leader (its quorum and election
	// traffic held) keeps its clients' connections and answers their
	// reads alone until syncLimit × tickTime later, while the leader
	// expires the sessions it no longer hears of: the instances on it must
	// fence themselves in time.
	{"ZooKeeper follower cut off from the quorum, healed", func(so *soak) (string, func() error, error) {
		leader, err := so.cluster.ZooKeeperLeader()
		if err != nil {
			return "", nil, err
		}
		i := (leader + 1 + so.rng.Intn(2)) % 3
		if err := so.cluster.CutZooKeeperFromQuorum(i); err != nil {
			return "", nil, err
		}
		so.hold(sessionTimeout + 3*time.Second)
		return fmt.Sprintf("zookeeper %d", i), func() error { return so.cluster.RestoreZooKeeperQuorum(i) }, nil
	}},
	// An instance's network: its own proxies to every ZooKeeper node,
	// to one broker or to every broker hold (packets dropped, connections
	// kept), reset, or delay what passes. The ZooKeeper cuts last past the
	// session timeout.
	{"instance cut off from ZooKeeper (held), healed", func(so *soak) (string, func() error, error) {
		in := so.pickInstance()
		return in.name, so.degrade(in.zookeeper, (*testcluster.Proxy).Hold, sessionTimeout+3*time.Second), nil
	}},
	{"instance cut off from ZooKeeper (reset), healed", func(so *soak) (string, func() error, error) {
		in := so.pickInstance()
		return in.name, so.degrade(in.zookeeper, (*testcluster.Proxy).Reset, sessionTimeout+3*time.Second), nil
	}},
	{"instance cut off from one broker (held), healed", func(so *soak) (string, func() error, error) {
		in := so.pickInstance()
		i := so.rng.Intn(len(in.brokers))
		return fmt.Sprintf("%s from broker %d", in.name, i), so.degrade(in.brokers[i:i+1], (*testcluster.Proxy).Hold, brokerCutHold), nil
	}},
	{"instance cut off from one broker (reset), healed", func(so *soak) (string, func() error, error) {
		in := so.pickInstance()
		i := so.rng.Intn(len(in.brokers))
		return fmt.Sprintf("%s from broker %d", in.name, i), so.degrade(in.brokers[i:i+1], (*testcluster.Proxy).Reset, brokerCutHold), nil
	}},
	{"instance cut off from every broker (held), healed", func(so *soak) (string, func() error, error) {
		in := so.pickInstance()
		return in.name, so.degrade(in.brokers, (*testcluster.Proxy).Hold, brokerCutHold), nil
	}},
	{"instance cut off from every broker (reset), healed", func(so *soak) (string, func() error, error) {
		in := so.pickInstance()
		return in.name, so.degrade(in.brokers, (*testcluster.Proxy).Reset, brokerCutHold), nil
	}},
	// Under a second each way: the round trip stays within go-zookeeper's
	// receive timeout (two thirds of the session timeout).
	{"ZooKeeper slow for an instance (latency), healed", func(so *soak) (string, func() error, error) {
		in := so.pickInstance()
		d := so.pickDuration(200*time.Millisecond, time.Second)
		return fmt.Sprintf("%s, %s each way", in.name, d), so.degrade(in.zookeeper, delay(d), latencyHold), nil
	}},
	{"Kafka slow for an instance (latency), healed", func(so *soak) (string, func() error, error) {
		in := so.pickInstance()
		d := so.pickDuration(100*time.Millisecond, 500*time.Millisecond)
		return fmt.Sprintf("%s, %s each way", in.name, d), so.degrade(in.brokers, delay(d), latencyHold), nil
	}},
	{"topic created (the white list picks it up)", func(so *soak) (string, func() error, error) {
		so.mu.Lock()
		name := fmt.Sprintf("soak.%d", len(so.topics))
		so.mu.Unlock()
		if err := so.cluster.CreateTopic(name, 4, 3); err != nil {
			return "", nil, err
		}
		so.mu.Lock()
		so.topics = append(so.topics, name)
		so.mu.Unlock()
		return name, func() error { return nil }, nil
	}},
}

// zookeeperOnly are the kinds of fault left out with CoordinatorKafka:
// they hit an instance's own ZooKeeper connection, which an instance of
// CoordinatorKafka does not have, or (the follower cut) what only that
// connection sees. The faults on the ensemble itself stay: the brokers
// (ZooKeeper mode) keep their controller and metadata there.
var zookeeperOnly = map[string]bool{
	"ZooKeeper follower cut off from the quorum, healed": true,
	"instance cut off from ZooKeeper (held), healed":     true,
	"instance cut off from ZooKeeper (reset), healed":    true,
	"ZooKeeper slow for an instance (latency), healed":   true,
}

// kafkaFaults are the kinds of fault of CoordinatorKafka alone, on the
// group's coordinator: the broker that Kafka names the group's
// coordinator, killed or frozen, and one instance cut off from it (its
// heartbeats unanswered past the session, while the other brokers
// answer its fetches), which must fence before the coordinator gives its
// partitions away.
var kafkaFaults = []fault{
	{"instance cut off from the group coordinator (held), healed", func(so *soak) (string, func() error, error) {
		in := so.pickInstance()
		i, err := so.coordinatorBroker()
		if err != nil {
			return in.name, nil, err
		}
		return fmt.Sprintf("%s from broker %d", in.name, i), so.degrade(in.brokers[i:i+1], (*testcluster.Proxy).Hold, sessionTimeout+3*time.Second), nil
	}},
	{"group coordinator's broker killed, restarted", func(so *soak) (string, func() error, error) {
		i, err := so.coordinatorBroker()
		if err != nil {
			return "", nil, err
		}
		if err := so.cluster.KillBroker(i); err != nil {
			return "", nil, err
		}
		so.hold(5 * time.Second)
		return fmt.Sprintf("broker %d", i), func() error { return so.cluster.StartBroker(i) }, nil
	}},
	{"group coordinator's broker frozen (SIGSTOP), resumed", func(so *soak) (string, func() error, error) {
		i, err := so.coordinatorBroker()
		if err != nil {
			return "", nil, err
		}
		pid := so.cluster.BrokerPID(i)
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			return "", nil, err
		}
		so.hold(5 * time.Second)
		return fmt.Sprintf("broker %d", i), func() error { return syscall.Kill(pid, syscall.SIGCONT) }, nil
	}},
}

// faultsFor returns the kinds of fault of a run: every kind of faults with
// ZooKeeper; with Kafka, those that are not zookeeperOnly, then
// kafkaFaults; with the migration, every kind of faults, kafkaFaults and
// migrateFaults (and nonFollowerFaults with s.nonFollowers, originalFaults
// with s.original); with the consumer protocol, consumerFaults.
func faultsFor(s settings) []fault {
	switch s.coordinator {
	case coordinatorZookeeper:
		return faults
	case coordinatorConsumer:
		return consumerFaults(s)
	case coordinatorMigrate:
		kinds := append(append(append([]fault(nil), faults...), kafkaFaults...), migrateFaults...)
		if s.nonFollowers {
			kinds = append(kinds, nonFollowerFaults...)
		}
		if s.original {
			kinds = append(kinds, originalFaults...)
		}
		return kinds
	}
	var kinds []fault
	left := 0
	for _, f := range faults {
		if zookeeperOnly[f.kind] {
			left++
			continue
		}
		kinds = append(kinds, f)
	}
	if left != len(zookeeperOnly) {
		panic("soak: zookeeperOnly names a kind of fault that faults does not have")
	}
	return append(kinds, kafkaFaults...)
}

// coordinatorBroker returns the index of the broker that Kafka names the
// group's coordinator now.
func (so *soak) coordinatorBroker() (int, error) {
	if err := so.client.RefreshCoordinator(groupName); err != nil {
		return 0, fmt.Errorf("find the group coordinator: %w", err)
	}
	b, err := so.client.Coordinator(groupName)
	if err != nil {
		return 0, fmt.Errorf("find the group coordinator: %w", err)
	}
	if i := slices.Index(so.cluster.KafkaPeers(), b.Addr()); i >= 0 {
		return i, nil
	}
	return 0, fmt.Errorf("the group coordinator %s is none of the brokers %v", b.Addr(), so.cluster.KafkaPeers())
}

// degrade sets proxies to a mode (a cut, a reset, a delay) for d, and
// returns the heal, which lets them pass again.
func (so *soak) degrade(proxies []*testcluster.Proxy, mode func(*testcluster.Proxy), d time.Duration) func() error {
	for _, p := range proxies {
		mode(p)
	}
	so.hold(d)
	return func() error {
		for _, p := range proxies {
			p.Pass()
		}
		return nil
	}
}

// delay is the mode of a proxy that delays what passes by d.
func delay(d time.Duration) func(*testcluster.Proxy) {
	return func(p *testcluster.Proxy) { p.Delay(d) }
}

// leave stops an instance gracefully (SIGTERM: Shutdown) and waits until
// it exited, at most 30 s.
func (so *soak) leave(in *instance) error {
	if err := in.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	timeout := time.NewTimer(30 * time.Second)
	defer timeout.Stop()
	select {
	case <-in.exited:
		return nil
	case <-timeout.C:
		return fmt.Errorf("%s did not exit within 30 s of SIGTERM", in.name)
	}
}

// rejoin makes an instance leave and join again, and waits until the
// group is stable (at most a minute): two rebalances, during another
// instance's fault.
func (so *soak) rejoin(in *instance) error {
	if err := so.leave(in); err != nil {
		return err
	}
	if err := so.start(in); err != nil {
		return err
	}
	if _, ok := so.waitStable(time.Minute); !ok {
		return fmt.Errorf("the group was not stable a minute after %s joined again", in.name)
	}
	return nil
}

// pickInstance returns a live, running instance of the group at random
// (not an extra one), other than those of except.
func (so *soak) pickInstance(except ...*instance) *instance {
	var live []*instance
	for _, in := range so.insts {
		if !in.extra && in.alive() && !in.stopped && !slices.Contains(except, in) {
			live = append(live, in)
		}
	}
	return live[so.rng.Intn(len(live))]
}

// pickDuration returns a duration in [lo, hi) at random, in milliseconds.
func (so *soak) pickDuration(lo, hi time.Duration) time.Duration {
	return (lo + time.Duration(so.rng.Int63n(int64(hi-lo)))).Truncate(time.Millisecond)
}

// hold keeps a fault in place for d: the length of the fault, not
// synchronisation.
func (so *soak) hold(d time.Duration) { time.Sleep(d) }

// nemesis injects faults until end, one at a time: every kind once per
// round, in a random order; after each heal it waits for the group to be
// stable again (at most a minute) and records how long that took, then
// pauses 1-3 s. With the migration, it flips the group's switch under
// half the faults (those not of noSwitchUnder, nor of cutFromBrokers
// without its knob), at a random moment from
// the injection to switchUnderWithin later, and waits for the flip after
// the heal.
func (so *soak) nemesis(end time.Time) {
	var deck []int
	for time.Now().Before(end) {
		if len(deck) == 0 {
			deck = so.rng.Perm(len(so.kinds))
		}
		f := so.kinds[deck[0]]
		deck = deck[1:]
		flipAfter := time.Duration(-1)
		if so.s.migrating() && !noSwitchUnder[f.kind] && so.rng.Intn(switchUnderOf) < switchUnder {
			flipAfter = so.pickDuration(0, switchUnderWithin)
			if cutFromBrokers[f.kind] && !so.s.switchCutFromBrokers {
				flipAfter = -1 // drawn all the same: the knob changes no other draw
			}
		}
		so.log.write(soakcheck.Fault, "", 0, 0, f.kind)
		var flipped func() string
		if flipAfter >= 0 {
			flipped = so.flipUnder(f.kind, flipAfter)
		}
		what, heal, err := f.inject(so)
		if heal != nil {
			err = errors.Join(err, heal())
		}
		so.log.write(soakcheck.Healed, "", 0, 0, f.kind)
		if flipped != nil {
			what += "; the switch flipped under it, " + flipped()
			so.under[f.kind]++
		}
		if err != nil {
			logf("%s (%s): %s", f.kind, what, err)
			so.unstable = append(so.unstable, fmt.Sprintf("%s (%s): %s", f.kind, what, err))
			continue
		}
		so.faults[f.kind]++
		took, ok := so.waitStable(time.Minute)
		logf("%s (%s): stable %s after the heal", f.kind, what, took.Round(time.Millisecond))
		if !ok {
			so.unstable = append(so.unstable, fmt.Sprintf("%s (%s): not stable a minute after the heal", f.kind, what))
		}
		if took > so.recoveries[f.kind] {
			so.recoveries[f.kind] = took
		}
		so.hold(time.Second + time.Duration(so.rng.Int63n(int64(2*time.Second))))
	}
}
