package main

import (
	"fmt"
	"syscall"
	"time"

	"github.com/kafkaconsumer/kafkaconsumer/internal/soakcheck"
	"github.com/kafkaconsumer/kafkaconsumer/internal/testcluster"
)

// A fault is injected, held for a while, and healed; inject returns the
// heal, and a description of what it hit.
type fault struct {
	kind   string
	inject func(so *soak) (what string, heal func() error, err error)
}

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
		in.stopped = true
		so.hold(sessionTimeout + 2*time.Second)
		return in.name, func() error {
			in.stopped = false
			return in.cmd.Process.Signal(syscall.SIGCONT)
		}, nil
	}},
	{"instance leaves (Shutdown) and joins again", func(so *soak) (string, func() error, error) {
		in := so.pickInstance()
		if err := in.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			return "", nil, err
		}
		select {
		case <-in.exited:
		case <-time.After(30 * time.Second):
			return in.name, nil, fmt.Errorf("%s did not exit within 30 s of SIGTERM", in.name)
		}
		return in.name, func() error { return so.start(in) }, nil
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
	{"instance cut off from ZooKeeper (held), healed", func(so *soak) (string, func() error, error) {
		return so.cut((*testcluster.Proxy).Hold)
	}},
	{"instance cut off from ZooKeeper (reset), healed", func(so *soak) (string, func() error, error) {
		return so.cut((*testcluster.Proxy).Reset)
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

// cut cuts an instance off from every ZooKeeper node past its session
// timeout.
func (so *soak) cut(mode func(*testcluster.Proxy)) (string, func() error, error) {
	in := so.pickInstance()
	for _, p := range in.proxies {
		mode(p)
	}
	so.hold(sessionTimeout + 3*time.Second)
	return in.name, func() error {
		for _, p := range in.proxies {
			p.Pass()
		}
		return nil
	}, nil
}

// pickInstance returns a live, running instance at random.
func (so *soak) pickInstance() *instance {
	var live []*instance
	for _, in := range so.insts {
		if in.alive() && !in.stopped {
			live = append(live, in)
		}
	}
	return live[so.rng.Intn(len(live))]
}

// hold keeps a fault in place for d: the length of the fault, not
// synchronisation.
func (so *soak) hold(d time.Duration) { time.Sleep(d) }

// nemesis injects faults until end, one at a time: every kind once per
// round, in a random order; after each heal it waits for the group to be
// stable again (at most a minute) and records how long that took, then
// pauses 1-3 s.
func (so *soak) nemesis(end time.Time) {
	var deck []int
	for time.Now().Before(end) {
		if len(deck) == 0 {
			deck = so.rng.Perm(len(faults))
		}
		f := faults[deck[0]]
		deck = deck[1:]
		so.log.write(soakcheck.Fault, "", 0, 0, f.kind)
		what, heal, err := f.inject(so)
		if err == nil && heal != nil {
			err = heal()
		}
		so.log.write(soakcheck.Healed, "", 0, 0, f.kind)
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
