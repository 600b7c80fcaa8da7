package main

// The migration variant (SOAK_COORDINATOR=migrate): the instances run with
// CoordinatorZooKeeper and follow the group's coordinator switch,
// /consumers/<group>/coordinator, which the nemesis flips with the groups
// tool (kafkaconsumer-groups migrate), as a user does: as a fault of its
// own, and at a random moment under the other faults (nemesis). The
// extra instances start with the other setting.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/kafkaconsumer/kafkaconsumer/internal/soakcheck"
)

// The values of the group's coordinator switch.
const (
	switchZookeeper = "zookeeper"
	switchKafka     = "kafka"
)

// The extra instances of the migration variant.
const (
	extraKafka     = "k0" // CoordinatorKafka
	extraZookeeper = "z0" // CoordinatorZooKeeper, following the switch
	extraOriginal  = "o0" // registers and claims as the original does (original.go)
)

// The kinds of the faults that flip the switch themselves: no switch is
// flipped under them.
const (
	kindSwitch           = "group switched to Kafka or back (kafkaconsumer-groups migrate)"
	kindKafkaInstance    = "instance with CoordinatorKafka joins the migrated group, leaves; the switch back is refused meanwhile"
	kindKafkaUnderSwitch = "instance with CoordinatorKafka started while the switch says zookeeper, stopped (SOAK_NONFOLLOWERS)"
	kindOriginal         = "instance registering as the original does while the switch says kafka, stopped (SOAK_ORIGINAL)"
)

// switchUnder is the chance, out of switchUnderOf, that the nemesis flips
// the switch under a fault, and switchUnderWithin how long after the
// injection at most.
const (
	switchUnder       = 1
	switchUnderOf     = 2
	switchUnderWithin = 6 * time.Second
)

// switchCounts counts the flips of the switch.
type switchCounts struct {
	toKafka, back int      // done: the tool wrote the switch
	under         int      // of those, under another fault
	refused       []string // the tool refused (when, why)
	failed        []string // the tool failed (when, why): it may have written the switch
}

// readSwitch reads the group's switch: switchKafka, or switchZookeeper
// (any other value, or none).
func (so *soak) readSwitch() (string, error) {
	data, _, err := so.zk.Get("/consumers/" + groupName + "/coordinator")
	if errors.Is(err, zk.ErrNoNode) {
		return switchZookeeper, nil
	}
	if err != nil {
		return "", err
	}
	if strings.TrimSpace(string(data)) == switchKafka {
		return switchKafka, nil
	}
	return switchZookeeper, nil
}

// errRefused is what migrate returns when the tool refused the switch.
var errRefused = errors.New("refused")

// migrate runs `kafkaconsumer-groups migrate --to to --wait wait`: it
// returns what the tool printed; errRefused (wrapped, with the tool's
// message) when it refused.
func (so *soak) migrate(to string, wait time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), wait+time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, so.s.groupsTool, "migrate", "--zookeeper", so.cluster.ZookeeperPeers(), "--group", groupName,
		"--to", to, "--wait", wait.String(), "--timeout", "10s")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	out := strings.Join(strings.Fields(stdout.String()+" "+stderr.String()), " ")
	switch {
	case err == nil:
		so.mu.Lock()
		so.switches.count(to)
		so.mu.Unlock()
		return out, nil
	case strings.Contains(stderr.String(), "migrate: refused: "): // the tool's ErrRefused; not "connection refused"
		return out, fmt.Errorf("%w: %s", errRefused, out)
	}
	return out, fmt.Errorf("kafkaconsumer-groups migrate --to %s: %w: %s", to, err, out)
}

func (c *switchCounts) count(to string) {
	if to == switchKafka {
		c.toKafka++
	} else {
		c.back++
	}
}

// flip switches the group to the other coordinator, waiting up to wait
// for the instances to move (0: not at all); it returns what it did. The
// driver's log gets the switch as a fault, healed when the tool returned,
// so that the report's duplicates name it.
func (so *soak) flip(wait time.Duration) (string, error) {
	from, err := so.readSwitch()
	if err != nil {
		return "", fmt.Errorf("read the group's switch: %w", err)
	}
	to, kind := switchKafka, "switch to Kafka"
	if from == switchKafka {
		to, kind = switchZookeeper, "switch back to ZooKeeper"
	}
	so.log.write(soakcheck.Fault, "", 0, 0, kind)
	out, err := so.migrate(to, wait)
	so.log.write(soakcheck.Healed, "", 0, 0, kind)
	if err != nil {
		return "to " + to, err
	}
	return fmt.Sprintf("to %s: %s", to, out), nil
}

// flipUnder flips the switch after delay, on a goroutine of its own, and
// returns the wait for it, which returns what it did: the nemesis's flip
// under another fault. A refusal or a failure of the tool is counted, not
// an error: a fault may keep the tool from ZooKeeper or Kafka, or the
// group may not be ready to move (what the tool is for).
func (so *soak) flipUnder(kind string, delay time.Duration) (wait func() string) {
	done := make(chan string, 1)
	go func() { // owned by the nemesis, which waits for it after the heal
		time.Sleep(delay) // the random moment of the flip, not synchronisation
		what, err := so.flip(0)
		switch {
		case errors.Is(err, errRefused):
			so.mu.Lock()
			so.switches.refused = append(so.switches.refused, fmt.Sprintf("under %q, %s: %s", kind, what, err))
			so.mu.Unlock()
			what += ": refused"
		case err != nil:
			so.mu.Lock()
			so.switches.failed = append(so.switches.failed, fmt.Sprintf("under %q, %s: %s", kind, what, err))
			so.mu.Unlock()
			what += ": failed"
		default:
			so.mu.Lock()
			so.switches.under++
			so.mu.Unlock()
		}
		done <- what
	}()
	return func() string { return <-done }
}

// switchTo switches the group to the coordinator to when the switch says
// the other, and waits for the instances to move.
func (so *soak) switchTo(to string) error {
	value, err := so.readSwitch()
	if err != nil {
		return fmt.Errorf("read the group's switch: %w", err)
	}
	if value == to {
		return nil
	}
	_, err = so.flip(time.Minute)
	return err
}

// extra returns the extra instance named name.
func (so *soak) extra(name string) *instance {
	for _, in := range so.insts {
		if in.extra && in.name == name {
			return in
		}
	}
	panic("soak: no extra instance " + name)
}

// stopExtra stops an extra instance: gracefully (Shutdown), or kill -9
// when kill is set.
func (so *soak) stopExtra(in *instance, kill bool) error {
	if !kill {
		return so.leave(in)
	}
	if err := in.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	<-in.exited
	return nil
}

// stopHow draws how an extra instance stops.
func (so *soak) stopHow() (kill bool, how string) {
	if so.rng.Intn(2) == 0 {
		return true, "killed (kill -9)"
	}
	return false, "left (Shutdown)"
}

// migrateFaults are the kinds of fault of the migration variant, besides
// those of ZooKeeper's (every one: the instances have ZooKeeper and
// brokers) and kafkaFaults:
//
//   - the switch flipped by the tool, waiting until the instances moved;
//   - an instance with CoordinatorKafka, which the library supports once
//     the group is on Kafka (docs/migration.md: the rolling restart after
//     the move), joins, and leaves or is killed; meanwhile the tool must
//     refuse the switch back and name it, as a CoordinatorKafka instance
//     cannot see the switch;
//   - an instance with CoordinatorZooKeeper (following the switch) joins
//     at either value of the switch, as a replacement started with the old
//     setting, and leaves or is killed.
var migrateFaults = []fault{
	{kindSwitch, func(so *soak) (string, func() error, error) {
		what, err := so.flip(time.Minute)
		return what, func() error { return nil }, err
	}},
	{kindKafkaInstance, func(so *soak) (string, func() error, error) {
		if err := so.switchTo(switchKafka); err != nil {
			return "", nil, err
		}
		in := so.extra(extraKafka)
		kill, how := so.stopHow()
		what := fmt.Sprintf("%s joins, %s", in.name, how)
		if err := so.start(in); err != nil {
			return what, nil, err
		}
		heal := func() error { return so.stopExtra(in, kill) }
		if _, ok := so.waitStable(time.Minute); !ok {
			return what, heal, fmt.Errorf("the group was not stable a minute after %s joined", in.name)
		}
		out, err := so.migrate(switchZookeeper, 0)
		switch {
		case err == nil:
			return what, heal, fmt.Errorf("the tool switched the group back to ZooKeeper while %s (CoordinatorKafka) was a member: %s", in.name, out)
		case !errors.Is(err, errRefused):
			return what, heal, err
		case !strings.Contains(out, childClientID(in.name, in.cmd.Process.Pid)):
			return what, heal, fmt.Errorf("the tool refused the switch back without naming %s: %s", in.name, out)
		}
		so.hold(3 * time.Second)
		return what + "; the switch back refused", heal, nil
	}},
	{"instance with CoordinatorZooKeeper joins at either value of the switch, leaves", func(so *soak) (string, func() error, error) {
		in := so.extra(extraZookeeper)
		kill, how := so.stopHow()
		value, err := so.readSwitch()
		if err != nil {
			return "", nil, err
		}
		what := fmt.Sprintf("%s joins, the switch saying %s, %s", in.name, value, how)
		if err := so.start(in); err != nil {
			return what, nil, err
		}
		heal := func() error { return so.stopExtra(in, kill) }
		if _, ok := so.waitStable(time.Minute); !ok {
			return what, heal, fmt.Errorf("the group was not stable a minute after %s joined", in.name)
		}
		so.hold(3 * time.Second)
		return what, heal, nil
	}},
}

// nonFollowerFaults are the kinds of fault of instances that do not follow
// the group's switch and that the library does not keep apart from the
// group's (SOAK_NONFOLLOWERS=1): a CoordinatorKafka instance has no
// ZooKeeper, so it joins Kafka's group, Empty while the switch says
// zookeeper, and consumes every partition beside the registered
// instances. The checker is expected to find it double-owned.
var nonFollowerFaults = []fault{
	{kindKafkaUnderSwitch, func(so *soak) (string, func() error, error) {
		if err := so.switchTo(switchZookeeper); err != nil {
			return "", nil, err
		}
		in := so.extra(extraKafka)
		if err := so.start(in); err != nil {
			return in.name, nil, err
		}
		so.hold(10 * time.Second)
		return in.name, func() error { return so.leave(in) }, nil
	}},
}

// cutFromBrokers are the kinds under which the nemesis flips the switch
// only with SOAK_SWITCH_CUT_FROM_BROKERS=1: an instance whose brokers are
// all unreachable when the switch says kafka must join Kafka's group once
// they answer again, and follow the switch back (docs/soak.md). Off by
// default until a run that draws such a switch is recorded.
var cutFromBrokers = map[string]bool{
	"instance cut off from every broker (held), healed":  true,
	"instance cut off from every broker (reset), healed": true,
}

// noSwitchUnder are the kinds under which the nemesis flips no switch:
// they set it themselves.
var noSwitchUnder = map[string]bool{kindSwitch: true, kindKafkaInstance: true, kindKafkaUnderSwitch: true, kindOriginal: true}

// originalFaults is the kind of fault of an instance that registers and
// claims as the original wvanbergen/kafka does, started while the switch
// says kafka (SOAK_ORIGINAL=1): it must never consume a partition a
// Kafka member holds, and the tool and Errors() name it. It holds 10 s, then leaves (its session closed).
var originalFaults = []fault{
	{kindOriginal, func(so *soak) (string, func() error, error) {
		if err := so.switchTo(switchKafka); err != nil {
			return "", nil, err
		}
		in := so.extra(extraOriginal)
		if err := so.start(in); err != nil {
			return in.name, nil, err
		}
		so.hold(10 * time.Second)
		return in.name, func() error { return so.leave(in) }, nil
	}},
}
