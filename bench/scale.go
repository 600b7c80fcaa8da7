package main

import (
	"bufio"
	"fmt"
	"log"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer"
)

// The scale workload (-workloads scale, not run by default): N instances
// of kafkaconsumer, goroutines of one child process with their own
// ZooKeeper sessions and sarama clients, join one group on an idle topic of
// P partitions one at a time, leave one at a time, then join all at once
// and leave all at once. For each phase it measures the time until the
// group is stable (every partition claimed by exactly one instance, the
// one whose share it is) and the requests ZooKeeper received, from the
// server's "srvr" command: the count includes every client's pings and the
// broker's requests, reported apart as the idle rate.

// scalePhase is what one phase of a scale cell measured.
type scalePhase struct {
	Name string `json:"name"`
	// Events is the count of joins or leaves; Seconds the whole phase;
	// MaxEvent and MedianEvent the time until stable after each event
	// (one at a time) or the whole phase (all at once).
	Events      int     `json:"events"`
	Seconds     float64 `json:"seconds"`
	MedianEvent float64 `json:"median_event_seconds"`
	MaxEvent    float64 `json:"max_event_seconds"`
	// ZKRequests is the count of requests ZooKeeper received in the
	// phase, less the idle rate's share; per event in ZKPerEvent.
	ZKRequests int64   `json:"zk_requests"`
	ZKPerEvent float64 `json:"zk_requests_per_event"`
	TimedOut   bool    `json:"timed_out,omitempty"`
}

// scaleResult is what a scale child reports.
type scaleResult struct {
	Instances  int          `json:"instances"`
	Partitions int          `json:"partitions"`
	Phases     []scalePhase `json:"phases"`
	// RSS per instance: the process's resident memory with every instance
	// joined, less that before the first, divided by the instances.
	RSSPerInstanceMB float64 `json:"rss_per_instance_mib"`
	PeakRSSMB        float64 `json:"peak_rss_mib"`
	// IdleZKPerSecond: requests per second ZooKeeper received while the N
	// instances were joined and idle (pings, mostly).
	IdleZKPerSecond float64 `json:"idle_zk_requests_per_second"`
	Error           string  `json:"error,omitempty"`
}

// scaleTable is the result of the scale workload.
type scaleTable struct {
	Cells []scaleResult `json:"cells"`
	// Changes are the scale changes (-scale-steps), which run instead.
	Changes []scaleChangeResult `json:"changes,omitempty"`
}

func runScale(cl *cluster, o *options) (*scaleTable, error) {
	table := &scaleTable{}
	if len(o.scaleSteps) > 0 {
		var err error
		table.Changes, err = runScaleChanges(cl, o)
		return table, err
	}
	for _, p := range o.scalePartitions {
		topic := fmt.Sprintf("bench.scale.p%d", p)
		if err := cl.ensureTopic(topic, int32(p)); err != nil {
			return nil, err
		}
		for _, n := range o.scaleInstances {
			spec := baseSpec(cl, o, "scale")
			spec.Contender = kafkaConsumer
			spec.Instances = n
			spec.Group = groupName("scale", kafkaConsumer, n*100000+p)
			spec.Topics = []string{topic}
			spec.Partitions = []int32{int32(p)}
			spec.Timeout = 2 * time.Minute // per wait for stability
			res, err := runScaleChild(spec)
			if err != nil {
				return nil, fmt.Errorf("%d instances, %d partitions: %w", n, p, err)
			}
			for _, ph := range res.Phases {
				log.Printf("scale %2d instances %4d partitions %-9s %6.2fs (per event median %.2fs, max %.2fs) zk %6d (%5.0f per event)%s",
					n, p, ph.Name, ph.Seconds, ph.MedianEvent, ph.MaxEvent, ph.ZKRequests, ph.ZKPerEvent, map[bool]string{true: " TIMED OUT"}[ph.TimedOut])
			}
			log.Printf("scale %2d instances %4d partitions rss %.1f MiB per instance (peak %.0f MiB), idle zk %.0f/s",
				n, p, res.RSSPerInstanceMB, res.PeakRSSMB, res.IdleZKPerSecond)
			table.Cells = append(table.Cells, res)
		}
	}
	return table, nil
}

// runScaleChild runs a scale child and returns its result.
func runScaleChild(spec childSpec) (scaleResult, error) {
	var res scaleResult
	err := runChildJSON(spec, &res, func() string { return res.Error })
	return res, err
}

// zkRequests returns the count of packets the ZooKeeper server at addr
// (host:port, a chroot ignored) received since it started, from "srvr".
func zkRequests(zookeeper string) (int64, error) {
	var total int64
	for _, addr := range strings.Split(strings.SplitN(zookeeper, "/", 2)[0], ",") {
		conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return 0, err
		}
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := conn.Write([]byte("srvr")); err != nil {
			conn.Close()
			return 0, err
		}
		sc := bufio.NewScanner(conn)
		found := false
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "Received: "); ok {
				n, err := strconv.ParseInt(strings.TrimSpace(rest), 10, 64)
				if err != nil {
					conn.Close()
					return 0, err
				}
				total += n
				found = true
			}
		}
		conn.Close()
		if !found {
			return 0, fmt.Errorf("ZooKeeper at %s: no Received line in srvr (is srvr in 4lw.commands.whitelist?)", addr)
		}
	}
	return total, nil
}

// currentRSS returns VmRSS of this process in bytes.
func currentRSS() int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// scaleMember is one instance of a scale child.
type scaleMember struct {
	c    kafkaconsumer.Consumer
	done chan struct{} // closed when Messages is closed and drained
}

func joinMember(spec *childSpec) (*scaleMember, error) {
	cfg := kafkaconsumer.NewConfig()
	cfg.Offsets.Initial = sarama.OffsetNewest
	cfg.Zookeeper.Timeout = spec.ZookeeperTimeout
	c, err := joinLogging(spec, spec.Zookeeper, cfg)
	if err != nil {
		return nil, err
	}
	m := &scaleMember{c: c, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		for msg := range c.Messages() {
			c.Ack(msg)
		}
	}()
	return m, nil
}

func (m *scaleMember) close() {
	if err := m.c.Close(); err != nil {
		log.Printf("close: %v", err)
	}
	<-m.done
}

// stableGroup tells whether every partition of the topic is claimed by
// exactly one of members, and shows in no other member's partitions, and
// every member runs partitions: each member runs its share and nothing
// else. (A member that has not distributed yet runs none; a partition whose
// owner changes shows twice, claimed by the old owner and waiting in the
// new one.)
func stableGroup(members []*scaleMember, partitions int) bool {
	seen := make(map[kafkaconsumer.TopicPartition]bool, partitions)
	for _, m := range members {
		stats := m.c.Stats()
		if len(stats) == 0 && partitions >= len(members) {
			return false
		}
		for _, s := range stats {
			if seen[s.TopicPartition] || !s.Claimed {
				return false
			}
			seen[s.TopicPartition] = true
		}
	}
	return len(seen) == partitions
}

// scale is the child's side of the scale workload.
func scale(spec *childSpec) (res scaleResult) {
	n, parts := spec.Instances, int(spec.Partitions[0])
	res.Instances, res.Partitions = n, parts
	var members []*scaleMember
	defer func() {
		closeConcurrently(members)
	}()
	waitStable := func() (time.Duration, bool) {
		start := time.Now()
		for !stableGroup(members, parts) {
			if time.Since(start) > spec.Timeout {
				return time.Since(start), false
			}
			time.Sleep(20 * time.Millisecond) // polling interval
		}
		return time.Since(start), true
	}
	zk := func() int64 {
		v, err := zkRequests(spec.Zookeeper)
		if err != nil && res.Error == "" {
			res.Error = err.Error()
		}
		return v
	}
	var idleRate float64
	phase := func(name string, events int, run func() ([]time.Duration, bool)) {
		z0, t0 := zk(), time.Now()
		per, ok := run()
		d := time.Since(t0)
		z := zk() - z0 - int64(idleRate*d.Seconds())
		ph := scalePhase{Name: name, Events: events, Seconds: d.Seconds(), ZKRequests: z, ZKPerEvent: float64(z) / float64(max(events, 1)), TimedOut: !ok}
		var xs []float64
		for _, p := range per {
			xs = append(xs, p.Seconds())
		}
		if len(xs) > 0 {
			ph.MedianEvent = median(xs)
			ph.MaxEvent = slices.Max(xs)
		}
		res.Phases = append(res.Phases, ph)
	}

	// The idle rate of the cluster alone (the broker's session).
	z0, t0 := zk(), time.Now()
	time.Sleep(2 * time.Second) // a measuring interval
	idleRate = float64(zk()-z0) / time.Since(t0).Seconds()
	rss0 := currentRSS()

	phase("join-one", n, func() ([]time.Duration, bool) {
		var per []time.Duration
		for range n {
			t := time.Now()
			m, err := joinMember(spec)
			if err != nil {
				res.Error = err.Error()
				return per, false
			}
			members = append(members, m)
			if _, ok := waitStable(); !ok {
				return append(per, time.Since(t)), false
			}
			per = append(per, time.Since(t))
		}
		return per, true
	})
	if res.Error != "" {
		return res
	}
	res.RSSPerInstanceMB = float64(currentRSS()-rss0) / float64(n) / (1 << 20)
	// The idle rate with every instance joined.
	z0, t0 = zk(), time.Now()
	time.Sleep(2 * time.Second) // a measuring interval
	res.IdleZKPerSecond = float64(zk()-z0) / time.Since(t0).Seconds()
	idleRate = res.IdleZKPerSecond

	phase("leave-one", n-1, func() ([]time.Duration, bool) {
		var per []time.Duration
		for len(members) > 1 {
			t := time.Now()
			last := members[len(members)-1]
			members = members[:len(members)-1]
			last.close()
			if _, ok := waitStable(); !ok {
				return append(per, time.Since(t)), false
			}
			per = append(per, time.Since(t))
		}
		return per, true
	})
	closeConcurrently(members)
	members = nil
	idleRate = res.IdleZKPerSecond / float64(n) // about the cluster's own

	phase("join-all", n, func() ([]time.Duration, bool) {
		t := time.Now()
		joined, errs := startConcurrently(n, func(int) (*scaleMember, error) { return joinMember(spec) })
		for i, m := range joined {
			if errs[i] != nil {
				res.Error = errs[i].Error()
			} else {
				members = append(members, m)
			}
		}
		if res.Error != "" {
			return nil, false
		}
		_, ok := waitStable()
		return []time.Duration{time.Since(t)}, ok
	})
	res.PeakRSSMB = float64(peakRSS()) / (1 << 20)
	idleRate = res.IdleZKPerSecond
	phase("leave-all", n, func() ([]time.Duration, bool) {
		t := time.Now()
		closeConcurrently(members)
		members = nil
		return []time.Duration{time.Since(t)}, true
	})
	return res
}

// startConcurrently calls start(i) for each i below n all at once, waits
// for them, and returns what each returned.
func startConcurrently[M any](n int, start func(i int) (M, error)) ([]M, []error) {
	started := make([]M, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			started[i], errs[i] = start(i)
		}()
	}
	wg.Wait()
	return started, errs
}

// closeConcurrently closes the members all at once and waits for them.
func closeConcurrently[M interface{ close() }](members []M) {
	var wg sync.WaitGroup
	for _, m := range members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.close()
		}()
	}
	wg.Wait()
}
