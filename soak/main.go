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
	coordinator := flag.String("coordinator", envString("SOAK_COORDINATOR", coordinatorZookeeper), "who coordinates the group: zookeeper or kafka (SOAK_COORDINATOR)")
	flag.Parse()
	if *coordinator != coordinatorZookeeper && *coordinator != coordinatorKafka {
		fmt.Fprintf(os.Stderr, "soak: -coordinator (SOAK_COORDINATOR) must be %s or %s, got %q\n", coordinatorZookeeper, coordinatorKafka, *coordinator)
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
	ok, err := run(settings{duration: *duration, seed: *seed, dir: dir, instances: *instances, rate: *rate, coordinator: *coordinator})
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
