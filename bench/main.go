// Command bench measures kafkaconsumer (coordinated by ZooKeeper, and by
// Kafka's group coordinator: kafkaconsumer-kafka, and on the consumer
// group protocol of KIP-848: kafkaconsumer-kafka848) against its peers:
// raw sarama partition consumers (the ceiling: no group, no marks),
// sarama's ConsumerGroup, and franz-go's group consumer (franz-go-848 on
// the consumer group protocol), on these workloads by default: throughput
// with one instance, throughput with four instances, rebalance latency
// under a steady produce rate (join, graceful leave, kill, rolling
// restart), start-up with 1,000 partitions, and a mass move of 500
// partitions. Two more run only when named in -workloads: the scale
// sweep, and the processing workload (a handler that waits for an I/O
// call on every message: package process by key against the peers'
// goroutine per partition).
//
// It runs against the cluster named by ZOOKEEPER_PEERS and KAFKA_PEERS, or
// starts one with internal/testcluster when they are unset (-cluster: on
// ZooKeeper, or KRaft, e.g. kraft-4.4.0 for the consumer group protocol).
// It prints Markdown tables, and writes the figures as JSON and a chart
// as PNG.
//
//	cd bench && go run . [flags]
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kafkaconsumer/kafkaconsumer/internal/testcluster"
)

// defaultWorkloads run when -workloads is not given; allWorkloads are
// those it may name.
var (
	defaultWorkloads = []string{"throughput", "group", "rebalance", "startup", "massmove"}
	allWorkloads     = append(slices.Clone(defaultWorkloads), "scale", "processing")
)

type options struct {
	runs       int
	workloads  []string
	contenders []string

	messages   int64
	size       int
	partitions int

	rebalancePartitions int
	rebalanceRate       int
	sessionTimeout      time.Duration
	late                time.Duration
	rollingGrace        time.Duration

	startupTopics     int
	startupPartitions int

	massMovePartitions int
	massMoveRate       int

	scaleInstances, scalePartitions []int
	scaleSteps                      []int // the scale changes (scalechange.go) when set
	scaleRate                       int

	processingMessages int64
	processingKeys     int
	work               time.Duration
	// cluster is -cluster: what cluster to start when none is given;
	// brokers is -brokers, its brokers.
	cluster clusterKind
	brokers int

	jsonOut, pngOut, mdOut string
	profileDir             string
	waitProfiles           bool
	maxBufferedBytes       int64
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == childArg {
		childMain()
		return
	}
	log.SetFlags(log.Ltime)
	var (
		o                     options
		workloads, contenders string
		clusterFlag           string
		messages              int64
	)
	flag.IntVar(&o.runs, "runs", 3, "runs of each measurement; figures are medians")
	flag.StringVar(&workloads, "workloads", strings.Join(defaultWorkloads, ","), "workloads to run (comma-separated); the scale sweep (scale) and the processing workload (processing) run only when named")
	flag.StringVar(&contenders, "contenders", "", "contenders to run (comma-separated; default "+strings.Join(allContenders, ",")+", and "+strings.Join(consumerProtocolContenders, ",")+" when the brokers serve the consumer group protocol); sarama-fanin, a diagnostic, runs only when named")
	flag.StringVar(&clusterFlag, "cluster", "zookeeper", "the cluster to start when ZOOKEEPER_PEERS or KAFKA_PEERS is unset: zookeeper (Kafka "+testcluster.DefaultKafkaVersion+" on ZooKeeper), zookeeper-<version>, or kraft-<version> (KRaft brokers of that release, e.g. kraft-4.4.0, and a ZooKeeper for kafkaconsumer's own groups); from Kafka 4.0 the brokers' consumer-protocol session timeout is -session-timeout and their heartbeat interval a third of it")
	flag.IntVar(&o.brokers, "brokers", 1, "brokers of the cluster to start (a given cluster must have as many); topics have replication 1, so their partitions' leaders are spread over them, e.g. -brokers 3 -partitions 48: 16 led by each broker")
	flag.Int64Var(&messages, "messages", 2_000_000, "throughput workloads: messages in the topic")
	flag.IntVar(&o.size, "size", 100, "throughput workloads: message value size in bytes")
	flag.IntVar(&o.partitions, "partitions", 16, "throughput workloads: partitions of the topic")
	flag.IntVar(&o.rebalancePartitions, "rebalance-partitions", 64, "rebalance workload: partitions of the topic")
	flag.IntVar(&o.rebalanceRate, "rebalance-rate", 1280, "rebalance workload: messages produced per second, spread evenly over the partitions")
	flag.DurationVar(&o.sessionTimeout, "session-timeout", 3*time.Second, "rebalance workload: session timeout of every contender (kafkaconsumer: Zookeeper.Timeout; groups: Consumer.Group.Session.Timeout, at least the broker's group.min.session.timeout.ms)")
	flag.DurationVar(&o.rollingGrace, "rolling-grace", 10*time.Second, "rebalance workload: the Config.RestartGrace of the rolling restart with InstanceIDs (kafkaconsumer; 0: no rolling restarts)")
	flag.DurationVar(&o.late, "late", 250*time.Millisecond, "rebalance and mass-move workloads: a message first received later than this after the broker acked it to the producer counts as delayed by the rebalance")
	flag.IntVar(&o.startupTopics, "startup-topics", 50, "start-up workload: topics")
	flag.IntVar(&o.startupPartitions, "startup-partitions", 20, "start-up workload: partitions per topic")
	flag.IntVar(&o.massMovePartitions, "massmove-partitions", 1000, "mass-move workload: partitions of the topic")
	flag.IntVar(&o.massMoveRate, "massmove-rate", 5000, "mass-move workload: messages produced per second, spread evenly over the partitions")
	flag.Int64Var(&o.processingMessages, "processing-messages", 500_000, "processing workload: messages in the topic")
	flag.IntVar(&o.processingKeys, "processing-keys", 10_000, "processing workload: distinct keys of the messages")
	flag.DurationVar(&o.work, "work", time.Millisecond, "processing workload: what the handler waits on every message (an I/O call)")
	scaleInstances := flag.String("scale-instances", "8,16,32", "scale workload: instance counts (comma-separated)")
	scalePartitions := flag.String("scale-partitions", "500,1000,2000", "scale workload: partition counts (comma-separated); every pair of an instance count and a partition count is one cell")
	scaleSteps := flag.String("scale-steps", "", "scale workload: when set (e.g. 50,100,50), the scale changes of every group contender instead: members at each step, joined or closed at once, on each -scale-partitions")
	flag.IntVar(&o.scaleRate, "scale-rate", 200, "scale changes: messages produced per second")
	flag.StringVar(&o.jsonOut, "json", "results.json", "where to write the figures as JSON (empty: nowhere)")
	flag.StringVar(&o.pngOut, "png", "results.png", "where to write the chart (empty: nowhere)")
	flag.StringVar(&o.mdOut, "md", "results.md", "where to write the Markdown tables too (empty: nowhere)")
	flag.StringVar(&o.profileDir, "cpuprofile-dir", "", "if set, every throughput child writes a CPU profile there")
	flag.BoolVar(&o.waitProfiles, "waitprofiles", false, "with -cpuprofile-dir, every throughput child also writes block and mutex profiles there (which slow it down)")
	flag.Int64Var(&o.maxBufferedBytes, "max-buffered-bytes", -1, "kafkaconsumer's Config.MaxBufferedBytes (-1: its default)")
	flag.Parse()
	o.messages = messages
	var err error
	if o.scaleInstances, err = splitInts(*scaleInstances); err != nil {
		log.Fatalf("-scale-instances: %v", err)
	}
	if o.scalePartitions, err = splitInts(*scalePartitions); err != nil {
		log.Fatalf("-scale-partitions: %v", err)
	}
	if o.scaleSteps, err = splitInts(*scaleSteps); *scaleSteps != "" && (err != nil || len(o.scaleSteps) < 2) {
		log.Fatalf("-scale-steps: want two or more member counts, e.g. 50,100,50 (%v)", err)
	}
	o.workloads = splitPeers(workloads)
	o.contenders = splitPeers(contenders)
	if o.cluster, err = parseClusterKind(clusterFlag); err != nil {
		log.Fatal(err)
	}
	for _, w := range o.workloads {
		if !slices.Contains(allWorkloads, w) {
			log.Fatalf("unknown workload %q", w)
		}
	}
	for _, c := range o.contenders {
		if known := append(slices.Clone(throughputOrder), processingOrder...); !slices.Contains(known, c) {
			log.Fatalf("unknown contender %q (know %s)", c, strings.Join(known, ", "))
		}
	}
	if o.work <= 0 {
		log.Fatal("-work must be positive")
	}
	if o.runs < 1 {
		log.Fatal("-runs must be at least 1")
	}
	if o.brokers < 1 {
		log.Fatal("-brokers must be at least 1")
	}

	cl, err := openCluster(o.cluster, &o)
	if err != nil {
		log.Fatal(err)
	}
	if len(o.contenders) == 0 {
		o.contenders = slices.Clone(allContenders)
		if cl.consumerProtocol {
			o.contenders = append(o.contenders, consumerProtocolContenders...)
		}
	}
	for _, c := range o.contenders {
		if slices.Contains(consumerProtocolContenders, c) && !cl.consumerProtocol {
			cl.close()
			log.Fatalf("contender %s needs brokers that serve the consumer group protocol (Kafka 4.0 or later, KRaft): e.g. -cluster kraft-4.4.0", c)
		}
		if slices.Contains(shareContenders, c) && !cl.shareGroups {
			cl.close()
			log.Fatalf("contender %s needs brokers that serve share groups (Kafka 4.2 or later, KRaft): e.g. -cluster kraft-4.4.0", c)
		}
	}
	res, err := runAll(cl, &o)
	cl.close()
	if err != nil {
		log.Fatal(err)
	}

	md := markdown(res)
	fmt.Print(md)
	if o.mdOut != "" {
		if err := os.WriteFile(o.mdOut, []byte(md), 0o644); err != nil {
			log.Fatal(err)
		}
	}
	if o.jsonOut != "" {
		data, _ := json.MarshalIndent(res, "", "  ")
		if err := os.WriteFile(o.jsonOut, append(data, '\n'), 0o644); err != nil {
			log.Fatal(err)
		}
	}
	if o.pngOut != "" {
		if err := chart(res, o.pngOut); err != nil {
			log.Fatal(err)
		}
	}
}

func runAll(cl *cluster, o *options) (*results, error) {
	res := &results{Meta: machine(cl, o)}
	start := time.Now()
	for _, w := range o.workloads {
		var err error
		switch w {
		case "throughput":
			res.Throughput, err = runThroughput(cl, o, 1)
		case "group":
			res.GroupThroughput, err = runThroughput(cl, o, 4)
		case "rebalance":
			res.Rebalance, err = runRebalance(cl, o)
		case "startup":
			res.Startup, err = runStartup(cl, o)
		case "massmove":
			res.MassMove, err = runMassMove(cl, o)
		case "scale":
			res.Scale, err = runScale(cl, o)
		case "processing":
			res.Processing, err = runProcessing(cl, o)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", w, err)
		}
	}
	res.Meta.Seconds = time.Since(start).Seconds()
	return res, nil
}

// contendersFor returns the chosen contenders among those of a workload.
func contendersFor(o *options, of []string) []string {
	var out []string
	for _, c := range of {
		if slices.Contains(o.contenders, c) {
			out = append(out, c)
		}
	}
	return out
}

// groupTimeouts returns the session timeout and heartbeat interval of the
// Kafka-coordinated groups: the asked session timeout, raised to the
// broker's minimum, and a third of it as heartbeat (Kafka's advice).
func groupTimeouts(cl *cluster, o *options) (session, heartbeat time.Duration) {
	session = max(o.sessionTimeout, cl.minSession)
	return session, session / 3
}

// baseSpec returns what every child of a workload shares.
func baseSpec(cl *cluster, o *options, mode string) childSpec {
	session, heartbeat := groupTimeouts(cl, o)
	return childSpec{
		Mode:             mode,
		Brokers:          cl.brokers,
		Zookeeper:        cl.zookeeper,
		ZookeeperTimeout: o.sessionTimeout,
		MaxBufferedBytes: o.maxBufferedBytes,
		GroupSession:     session,
		GroupHeartbeat:   heartbeat,
		Timeout:          5 * time.Minute,
	}
}

func groupName(workload, contender string, run int) string {
	return fmt.Sprintf("bench-%s-%s-%d-%d", workload, contender, run, time.Now().UnixNano())
}

// runChild runs a child process for spec and returns its result line
// (after "R ") and its standard error; err when there is no result line.
func runChild(spec childSpec) (result, stderr string, err error) {
	exe, err := os.Executable()
	if err != nil {
		return "", "", err
	}
	data, _ := json.Marshal(spec)
	cmd := exec.Command(exe, childArg)
	cmd.Env = append(os.Environ(), childEnv+"="+string(data))
	var stdout, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &errOut
	err = cmd.Run()
	for _, line := range strings.Split(stdout.String(), "\n") {
		if rest, ok := strings.CutPrefix(line, "R "); ok {
			return rest, errOut.String(), nil
		}
	}
	return "", errOut.String(), fmt.Errorf("%s: child failed (%v) without a result:\n%s", spec.Contender, err, tail(errOut.String(), 3000))
}

// runChildJSON runs a child process for spec and decodes its result line
// into v; errText returns the error the result reports, if any.
func runChildJSON(spec childSpec, v any, errText func() string) error {
	out, stderr, err := runChild(spec)
	if err != nil {
		return err
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		return err
	}
	if e := errText(); e != "" {
		return fmt.Errorf("%s: %s\n%s", spec.Contender, e, tail(stderr, 3000))
	}
	return nil
}

// runDrain runs a drain child and returns its result.
func runDrain(spec childSpec) (childResult, error) {
	var res childResult
	err := runChildJSON(spec, &res, func() string { return res.Error })
	return res, err
}

// splitInts parses a comma-separated list of positive integers.
func splitInts(s string) ([]int, error) {
	var out []int
	for _, f := range splitPeers(s) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// rotate returns the contenders in the order of a run: each run starts with
// the next one, so that no contender always runs first or last.
func rotate(cs []string, run int) []string {
	k := run % len(cs)
	return append(slices.Clone(cs[k:]), cs[:k]...)
}

// runThroughput is workloads 1 (instances 1) and 2 (instances 4): consume
// every message of a topic filled once, with acks or marks per message.
func runThroughput(cl *cluster, o *options, instances int) (*drainTable, error) {
	parts := int32(o.partitions)
	topic := fmt.Sprintf("bench.throughput.p%d.s%d.n%d", parts, o.size, o.messages)
	if err := cl.fill(topic, parts, o.messages, o.size); err != nil {
		return nil, err
	}
	oldest, newest, err := cl.offsets(topic, parts)
	if err != nil {
		return nil, err
	}
	var n int64
	targets := make([]int64, parts)
	counts := make([]int64, parts)
	for p := range parts {
		if newest[p] == oldest[p] {
			return nil, fmt.Errorf("partition %d of %s is empty", p, topic)
		}
		n += newest[p] - oldest[p]
		targets[p] = newest[p] - 1
		counts[p] = newest[p] - oldest[p]
	}
	workload := "throughput"
	if instances > 1 {
		workload = "group"
	}
	table := &drainTable{
		Workload:   workload,
		Topic:      topic,
		Partitions: int(parts),
		Messages:   n,
		Size:       o.size,
		Instances:  instances,
	}
	byContender := map[string][]childResult{}
	cs := contendersFor(o, throughputOrder)
	for run := range o.runs {
		for _, c := range rotate(cs, run) {
			spec := baseSpec(cl, o, "drain")
			spec.Contender = c
			spec.Instances = instances
			spec.Group = groupName(workload, c, run)
			spec.Topics = []string{topic}
			spec.Partitions = []int32{parts}
			spec.Targets = [][]int64{targets}
			spec.Messages = n
			shareSpec(&spec, counts)
			if o.profileDir != "" {
				if err := os.MkdirAll(o.profileDir, 0o755); err != nil {
					return nil, err
				}
				spec.CPUProfile, _ = filepath.Abs(filepath.Join(o.profileDir, fmt.Sprintf("%s-%s-%d.pprof", workload, c, run)))
				spec.WaitProfiles = o.waitProfiles
			}
			r, err := runDrain(spec)
			if err != nil {
				return nil, err
			}
			log.Printf("%s run %d %-14s %6.2fs %9.0f msgs/s  cpu %5.2fs  rss %4.0f MB  %5.2f allocs/msg  first %.2fs  dup %d",
				workload, run+1, c, r.Seconds, float64(n)/r.Seconds, r.CPUSeconds, float64(r.PeakRSS)/1e6,
				float64(r.Mallocs)/float64(n), r.FirstSeconds, r.Received-n)
			for _, t := range r.Loops {
				log.Printf("  loops of %s", t)
			}
			byContender[c] = append(byContender[c], r)
		}
	}
	for _, c := range cs {
		table.Rows = append(table.Rows, drainRowOf(c, byContender[c], n, o.size))
	}
	table.setRatios()
	return table, nil
}

// runStartup is workload 4: one instance subscribed to many partitions,
// each holding messages; the time from Join until each partition delivered
// its first message.
func runStartup(cl *cluster, o *options) (*drainTable, error) {
	parts := int32(o.startupPartitions)
	spec := baseSpec(cl, o, "drain")
	spec.Instances = 1
	var total int
	for i := range o.startupTopics {
		topic := fmt.Sprintf("bench.startup.p%d.t%03d", parts, i)
		if err := cl.fill(topic, parts, int64(parts)*4, o.size); err != nil {
			return nil, err
		}
		oldest, newest, err := cl.offsets(topic, parts)
		if err != nil {
			return nil, err
		}
		for p := range parts {
			if newest[p] == oldest[p] {
				return nil, fmt.Errorf("partition %d of %s is empty", p, topic)
			}
		}
		spec.Topics = append(spec.Topics, topic)
		spec.Partitions = append(spec.Partitions, parts)
		spec.Targets = append(spec.Targets, oldest) // done at the first message
		total += int(parts)
	}
	spec.Messages = int64(total)
	table := &drainTable{Workload: "startup", Partitions: total, Topics: o.startupTopics, Instances: 1}
	byContender := map[string][]childResult{}
	cs := contendersFor(o, tableOrder)
	for run := range o.runs {
		for _, c := range rotate(cs, run) {
			s := spec
			s.Contender = c
			s.Group = groupName("startup", c, run)
			r, err := runDrain(s)
			if err != nil {
				return nil, err
			}
			log.Printf("startup run %d %-14s %6.2fs to the first message of all %d partitions (first %.2fs, cpu %.2fs, rss %.0f MB)",
				run+1, c, r.Seconds, total, r.FirstSeconds, r.CPUSeconds, float64(r.PeakRSS)/1e6)
			byContender[c] = append(byContender[c], r)
		}
	}
	for _, c := range cs {
		table.Rows = append(table.Rows, drainRowOf(c, byContender[c], 0, 0))
	}
	table.setRatios()
	return table, nil
}

func machine(cl *cluster, o *options) meta {
	m := meta{
		Date:        time.Now().UTC().Format(time.RFC3339),
		GoVersion:   runtime.Version(),
		CPUs:        runtime.NumCPU(),
		Cluster:     cl.describe,
		Runs:        o.runs,
		Args:        os.Args[1:],
		ZKTimeout:   o.sessionTimeout.String(),
		RebalanceHz: o.rebalanceRate,
	}
	session, heartbeat := groupTimeouts(cl, o)
	m.GroupSession, m.GroupHeartbeat = session.String(), heartbeat.String()
	if cl.consumerProtocol {
		m.ConsumerSession, m.ConsumerHeartbeat = cl.consumerSession.String(), cl.consumerHeartbeat.String()
	}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				m.Memory = strings.TrimSpace(rest)
			}
		}
	}
	return m
}
