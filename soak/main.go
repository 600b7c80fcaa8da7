// Command soak is the chaos soak of kafkaconsumer (make soak): a real
// cluster of 3 ZooKeeper nodes and 3 brokers, a producer of unique values,
// and consumer instances as processes of their own that ack in a random
// order, while a nemesis injects a fault every few seconds, picked at
// random with a seed that SOAK_SEED replays. At the end an independent
// checker (internal/soakcheck) reads what the processes wrote down and
// what Kafka holds, and the run writes its report to .soak/: report.md,
// timeline.png and the events (events.jsonl). It exits 1 on any violation.
//
// SOAK_COORDINATOR=kafka (-coordinator kafka) runs the consumers with
// Config.Coordinator CoordinatorKafka: Kafka's group coordinator keeps the
// group, the instances have no ZooKeeper connection, and the faults on
// that connection are left out (see faults).
//
// SOAK_COORDINATOR=consumer (-coordinator consumer) runs the consumers
// with CoordinatorKafka and GroupProtocolConsumer (KIP-848) on a KRaft
// cluster of Kafka 4 (consumer.go), under the faults that need no
// ZooKeeper; SOAK_PROTOCOL_MOVE=1 (-protocol-move) adds the rolling move
// between the classic and the consumer protocol as a fault of its own.
//
// SOAK_COORDINATOR=migrate (-coordinator migrate) runs the consumers with
// CoordinatorZooKeeper, so that they follow the group's coordinator
// switch, and adds the migration as a fault: the groups tool
// (-groups-tool, SOAK_GROUPS_TOOL; make soak builds it) switches the group
// to Kafka's group coordinator and back at random moments, alone and
// under every other fault, and instances with the other setting
// (CoordinatorKafka once the group is on Kafka, CoordinatorZooKeeper at
// either value of the switch) join and leave (see migrateFaults).
// SOAK_NONFOLLOWERS=1 (-nonfollowers) adds the instances that do not
// follow the switch, which the library does not keep apart: a
// CoordinatorKafka instance while the switch says zookeeper.
// SOAK_ORIGINAL=1 (-original) adds an instance that registers and claims
// as the original wvanbergen/kafka does, started while the switch says
// kafka: the library's seal of the owner nodes must keep it from
// claiming any partition.
// SOAK_SWITCH_CUT_FROM_BROKERS=1 (-switch-cut-from-brokers) flips the
// switch under the cuts of an instance from every broker too
// (cutFromBrokers: off by default until a run with it is recorded).
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// The values of -coordinator (SOAK_COORDINATOR).
const (
	coordinatorZookeeper = "zookeeper"
	coordinatorKafka     = "kafka"
	// coordinatorMigrate: CoordinatorZooKeeper, with the group's
	// coordinator switch flipped by the nemesis.
	coordinatorMigrate = "migrate"
	// coordinatorOriginal is the setting of the original-like instance
	// (original.go), not a value of -coordinator.
	coordinatorOriginal = "original"
)

const (
	groupName      = "soak"
	topicPattern   = `^soak\.`
	sessionTimeout = 6 * time.Second
	// maxProcessingTime is the instances' Config.MaxProcessingTime: how
	// long a partition they stop waits for the acks of what it handed out.
	maxProcessingTime = 2 * time.Second
)

func main() {
	if settings := os.Getenv(childEnv); settings != "" {
		os.Exit(childMain(settings))
	}
	duration := flag.Duration("duration", envDuration("SOAK_DURATION", 10*time.Minute), "how long faults are injected (SOAK_DURATION)")
	seed := flag.Int64("seed", envInt("SOAK_SEED", time.Now().UnixNano()), "seed of the fault schedule (SOAK_SEED)")
	out := flag.String("out", ".soak", "where the report goes")
	instances := flag.Int("instances", 5, "consumer instances (processes)")
	rate := flag.Int("rate", 200, "messages produced per second")
	coordinator := flag.String("coordinator", envString("SOAK_COORDINATOR", coordinatorZookeeper), "who coordinates the group: zookeeper, kafka, consumer (kafka with the consumer group protocol, KIP-848), or migrate (zookeeper, switched to Kafka and back) (SOAK_COORDINATOR)")
	groupsTool := flag.String("groups-tool", envString("SOAK_GROUPS_TOOL", ""), "the kafkaconsumer-groups binary that switches the group, with -coordinator migrate (SOAK_GROUPS_TOOL)")
	nonFollowers := flag.Bool("nonfollowers", envInt("SOAK_NONFOLLOWERS", 0) != 0, "with -coordinator migrate, add instances that do not follow the group's switch (SOAK_NONFOLLOWERS=1)")
	original := flag.Bool("original", envInt("SOAK_ORIGINAL", 0) != 0, "with -coordinator migrate, add an instance that registers as the original does after the switch to Kafka (SOAK_ORIGINAL=1)")
	switchCutFromBrokers := flag.Bool("switch-cut-from-brokers", envInt("SOAK_SWITCH_CUT_FROM_BROKERS", 0) != 0, "with -coordinator migrate, flip the switch under the cuts of an instance from every broker too (SOAK_SWITCH_CUT_FROM_BROKERS=1)")
	processRun := flag.Bool("process", envInt("SOAK_PROCESS", 0) != 0, "the instances run process.Run with DurableAcks (SOAK_PROCESS=1)")
	protocolMove := flag.Bool("protocol-move", envInt("SOAK_PROTOCOL_MOVE", 0) != 0, "with -coordinator consumer, move the instances between the classic and the consumer protocol by rolling restarts (SOAK_PROTOCOL_MOVE=1)")
	flag.Parse()
	switch *coordinator {
	case coordinatorZookeeper, coordinatorKafka, coordinatorConsumer:
	case coordinatorMigrate:
		if *groupsTool == "" {
			fmt.Fprintln(os.Stderr, "soak: -coordinator migrate needs -groups-tool (SOAK_GROUPS_TOOL), the kafkaconsumer-groups binary (make soak builds it)")
			os.Exit(2)
		}
	default:
		fmt.Fprintf(os.Stderr, "soak: -coordinator (SOAK_COORDINATOR) must be %s, %s, %s or %s, got %q\n", coordinatorZookeeper, coordinatorKafka, coordinatorConsumer, coordinatorMigrate, *coordinator)
		os.Exit(2)
	}
	dir, err := filepath.Abs(*out)
	if err == nil {
		err = os.MkdirAll(dir, 0o755)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(2)
	}
	fmt.Printf("soak: seed %d (SOAK_SEED=%d replays it), %s of faults, %d instances coordinated by %s, %d msg/s; report in %s\n",
		*seed, *seed, *duration, *instances, *coordinator, *rate, dir)
	if *groupsTool != "" {
		if *groupsTool, err = filepath.Abs(*groupsTool); err != nil {
			fmt.Fprintln(os.Stderr, "soak:", err)
			os.Exit(2)
		}
	}
	ok, err := run(settings{duration: *duration, seed: *seed, dir: dir, instances: *instances, rate: *rate, coordinator: *coordinator,
		groupsTool: *groupsTool, nonFollowers: *nonFollowers && *coordinator == coordinatorMigrate, original: *original && *coordinator == coordinatorMigrate,
		switchCutFromBrokers: *switchCutFromBrokers && *coordinator == coordinatorMigrate, process: *processRun,
		protocolMove: *protocolMove && *coordinator == coordinatorConsumer})
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}

// envDuration reads a duration from the environment ("10m", or seconds).
func envDuration(name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	if d, err := time.ParseDuration(v); err == nil {
		return d
	}
	if s, err := strconv.Atoi(v); err == nil {
		return time.Duration(s) * time.Second
	}
	fmt.Fprintf(os.Stderr, "soak: %s=%q is not a duration\n", name, v)
	os.Exit(2)
	return 0
}

// envString reads a string from the environment, def when unset or empty.
func envString(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func envInt(name string, def int64) int64 {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		fmt.Fprintf(os.Stderr, "soak: %s=%q is not a number\n", name, v)
		os.Exit(2)
	}
	return n
}
