package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer"
)

// The bench runs every contender in a child process of its own (the bench
// binary again, with childArg as its first argument and the spec in the
// environment), so that CPU time, peak RSS and allocations are the
// contender's alone, and so that an instance can be killed with SIGKILL.
const (
	childArg = "__bench-child"
	childEnv = "KAFKACONSUMER_BENCH_SPEC"
)

// childSpec tells a child process what to run.
type childSpec struct {
	// Mode is "drain" (consume until every partition reached its target
	// offset, then report a childResult) or "stream" (consume until told
	// to close on stdin, reporting every message on stdout).
	Mode      string
	Contender string
	Instances int // drain: instances in this process
	Group     string
	Topics    []string
	// Partitions is the partition count of each topic.
	Partitions []int32
	// Targets, per topic and partition (drain): the partition is done once
	// a message at this offset or later was consumed, or, with
	// CountTargets, once this many messages were.
	Targets      [][]int64
	CountTargets bool
	// Messages is the count of messages to consume (drain), for the result.
	Messages  int64
	Brokers   []string
	Zookeeper string
	// Newest starts a new group at the newest offset, else at the oldest.
	Newest bool
	// ZookeeperTimeout is kafkaconsumer's ZooKeeper session timeout;
	// GroupSession and GroupHeartbeat those of the Kafka-coordinated groups.
	ZookeeperTimeout time.Duration
	// MaxBufferedBytes is kafkaconsumer's Config.MaxBufferedBytes; -1
	// keeps its default.
	MaxBufferedBytes int64
	GroupSession     time.Duration
	GroupHeartbeat   time.Duration
	// InstanceID and RestartGrace are kafkaconsumer's Config.InstanceID
	// and Config.RestartGrace (the rolling restarts).
	InstanceID   string
	RestartGrace time.Duration
	// Timeout bounds a drain.
	Timeout time.Duration
	// Work, when set (the processing workload), is what the handler waits
	// on every message, an I/O call; Concurrency is process.Run's.
	Work        time.Duration
	Concurrency int
	// CPUProfile, if set, is where a drain writes a CPU profile of its
	// measured part.
	CPUProfile string
	// WaitProfiles, with CPUProfile, has a drain write block and mutex
	// profiles beside it (<CPUProfile without .pprof>.block.pprof and
	// .mutex.pprof); they slow the contender down.
	WaitProfiles bool
	// Steps and Rate are the scale changes' member counts and produce
	// rate (scalechange.go).
	Steps []int `json:",omitempty"`
	Rate  int   `json:",omitempty"`
}

// childResult is what a drain reports, as the last line of its stdout.
type childResult struct {
	Seconds       float64 // from before the first instance started until every partition reached its target
	FirstSeconds  float64 // until the first message
	Received      int64   // messages received (more than Messages if some came twice)
	CPUSeconds    float64 // user+system CPU time in that interval
	PeakRSS       int64   // bytes, VmHWM of the process at the end of the interval
	RSS           int64   // bytes, VmRSS of the process at the end of the interval
	Mallocs       uint64  // heap allocations in that interval
	AllocBytes    uint64  // bytes allocated in that interval
	GCs           uint32  // garbage collections in that interval
	CloseSeconds  float64 // time Close took, after the interval
	Error         string  `json:",omitempty"`
	TimedOutParts int     `json:",omitempty"` // partitions short of their target at a timeout
	// Loops is the fetch engine's trace of its broker loops until the end
	// of the interval (a bench built with -tags fetchtrace only).
	Loops []loopTrace `json:",omitempty"`
}

func childMain() {
	log.SetFlags(log.Lmicroseconds)
	log.SetPrefix("child: ")
	var spec childSpec
	if err := json.Unmarshal([]byte(os.Getenv(childEnv)), &spec); err != nil {
		log.Fatalf("bad spec: %v", err)
	}
	if os.Getenv("KAFKACONSUMER_BENCH_DEBUG") != "" {
		kafkaconsumer.Logger = log.New(os.Stderr, "kafkaconsumer: ", log.Lmicroseconds)
		sarama.Logger = log.New(os.Stderr, "sarama: ", log.Lmicroseconds)
	}
	switch spec.Mode {
	case "drain":
		res := drain(&spec)
		out, _ := json.Marshal(res)
		fmt.Printf("R %s\n", out)
	case "stream":
		stream(&spec)
	case "scale":
		res := scale(&spec)
		out, _ := json.Marshal(res)
		fmt.Printf("R %s\n", out)
	case "scalechange":
		res := scaleChanges(&spec)
		out, _ := json.Marshal(res)
		fmt.Printf("R %s\n", out)
	default:
		log.Fatalf("bad mode %q", spec.Mode)
	}
}

// --- drain

// partState is one partition's progress; padded so that partitions consumed
// by different goroutines do not share a cache line.
type partState struct {
	target   int64
	received atomic.Int64
	done     atomic.Bool
	_        [40]byte
}

// tracker finds out when every partition reached its target.
type tracker struct {
	base      map[string]int // topic -> index of its partition 0 in parts
	parts     []partState
	counting  bool // targets are message counts (childSpec.CountTargets)
	remaining atomic.Int64
	first     atomic.Int64 // unix ns of the first message, or 0
	doneAt    atomic.Int64 // unix ns when the last partition reached its target
	done      chan struct{}
}

func newTracker(spec *childSpec) *tracker {
	t := &tracker{base: make(map[string]int), counting: spec.CountTargets, done: make(chan struct{})}
	n := 0
	for i, topic := range spec.Topics {
		t.base[topic] = n
		n += int(spec.Partitions[i])
	}
	t.parts = make([]partState, n)
	for i, topic := range spec.Topics {
		for p := range spec.Partitions[i] {
			t.parts[t.base[topic]+int(p)].target = spec.Targets[i][p]
		}
	}
	t.remaining.Store(int64(n))
	return t
}

func (t *tracker) handle(topic string, partition int32, offset int64, _ []byte) {
	t.count(topic, partition, offset, 1)
}

// count counts n messages of a partition, the last at offset last (the
// wire contender counts a response's at once).
func (t *tracker) count(topic string, partition int32, last, n int64) {
	ps := &t.parts[t.base[topic]+int(partition)]
	received := ps.received.Add(n)
	if t.first.Load() == 0 {
		t.first.CompareAndSwap(0, time.Now().UnixNano())
	}
	reached := last >= ps.target
	if t.counting {
		reached = received >= ps.target
	}
	if reached && !ps.done.Load() && ps.done.CompareAndSwap(false, true) {
		if t.remaining.Add(-1) == 0 {
			t.doneAt.Store(time.Now().UnixNano())
			close(t.done)
		}
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// peakRSS returns VmHWM of this process in bytes.
func peakRSS() int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
				return kb * 1024
			}
		}
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		return ru.Maxrss * 1024
	}
	return 0
}

func drain(spec *childSpec) (res childResult) {
	t := newTracker(spec)
	if spec.CPUProfile != "" {
		f, err := os.Create(spec.CPUProfile)
		if err != nil {
			return childResult{Error: err.Error()}
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return childResult{Error: err.Error()}
		}
		if spec.WaitProfiles {
			runtime.SetBlockProfileRate(int(10 * time.Microsecond)) // a sample per 10 µs blocked
			runtime.SetMutexProfileFraction(10)
		}
	}

	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	cpu0 := cpuTime()
	t0 := time.Now()

	instances := make([]instance, spec.Instances)
	errs := make([]error, spec.Instances)
	var wg sync.WaitGroup
	for i := range instances {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if spec.Contender == wire {
				instances[i], errs[i] = startWire(spec, i, t.count)
				return
			}
			instances[i], errs[i] = startInstance(spec, i, t.handle)
		}()
	}
	wg.Wait()
	closeAll := func() {
		for _, in := range instances {
			if in != nil {
				if err := in.Close(); err != nil {
					log.Printf("close: %v", err)
				}
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		if spec.CPUProfile != "" {
			pprof.StopCPUProfile()
		}
		closeAll()
		return childResult{Error: err.Error()}
	}

	timeout := time.NewTimer(spec.Timeout)
	defer timeout.Stop()
	select {
	case <-t.done:
	case <-timeout.C:
		res.Error = fmt.Sprintf("timed out after %s", spec.Timeout)
		for i := range t.parts {
			if !t.parts[i].done.Load() {
				res.TimedOutParts++
			}
		}
	}
	end := time.Now()
	if d := t.doneAt.Load(); d != 0 {
		end = time.Unix(0, d)
	}
	cpu1 := cpuTime()
	runtime.ReadMemStats(&ms1)
	res.Loops = loopTraces()
	if spec.CPUProfile != "" {
		pprof.StopCPUProfile()
		if spec.WaitProfiles {
			writeWaitProfiles(spec.CPUProfile)
		}
	}

	res.Seconds = end.Sub(t0).Seconds()
	if f := t.first.Load(); f != 0 {
		res.FirstSeconds = time.Unix(0, f).Sub(t0).Seconds()
	}
	for i := range t.parts {
		res.Received += t.parts[i].received.Load()
	}
	res.CPUSeconds = (cpu1 - cpu0).Seconds()
	res.PeakRSS = peakRSS()
	res.RSS = currentRSS()
	res.Mallocs = ms1.Mallocs - ms0.Mallocs
	res.AllocBytes = ms1.TotalAlloc - ms0.TotalAlloc
	res.GCs = ms1.NumGC - ms0.NumGC

	c0 := time.Now()
	closeAll()
	res.CloseSeconds = time.Since(c0).Seconds()
	return res
}

// --- stream

// streamRecord is one consumed message, reported to the parent.
type streamRecord struct {
	partition int32
	offset    int64
	produced  int64 // unix ns, from the first 8 bytes of the value
	received  int64 // unix ns
}

// stream runs one instance and reports on stdout, one line each:
//
//	J <unix ns>                         when it calls Join (or its equivalent)
//	S                                   when the instance has started
//	M <partition> <offset> <produced> <received>   every message
//	C <unix ns>                         when it starts to Close
//	D <unix ns>                         when Close returned
//
// It closes when it reads "close" or end of file on stdin.
func stream(spec *childSpec) {
	records := make(chan streamRecord, 1<<16)
	out := bufio.NewWriterSize(os.Stdout, 1<<16)
	var outMu sync.Mutex // guards out
	line := func(format string, args ...any) {
		outMu.Lock()
		fmt.Fprintf(out, format, args...)
		out.Flush()
		outMu.Unlock()
	}
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		flush := time.NewTicker(10 * time.Millisecond)
		defer flush.Stop()
		var buf []byte
		for {
			select {
			case r, ok := <-records:
				if !ok {
					outMu.Lock()
					out.Flush()
					outMu.Unlock()
					return
				}
				buf = append(buf[:0], 'M', ' ')
				buf = strconv.AppendInt(buf, int64(r.partition), 10)
				buf = append(buf, ' ')
				buf = strconv.AppendInt(buf, r.offset, 10)
				buf = append(buf, ' ')
				buf = strconv.AppendInt(buf, r.produced, 10)
				buf = append(buf, ' ')
				buf = strconv.AppendInt(buf, r.received, 10)
				buf = append(buf, '\n')
				outMu.Lock()
				out.Write(buf)
				outMu.Unlock()
			case <-flush.C:
				outMu.Lock()
				out.Flush()
				outMu.Unlock()
			}
		}
	}()

	var closing atomic.Bool
	h := func(_ string, partition int32, offset int64, value []byte) {
		now := time.Now().UnixNano()
		if closing.Load() {
			return
		}
		var produced int64
		if len(value) >= 8 {
			produced = int64(binary.BigEndian.Uint64(value))
		}
		records <- streamRecord{partition: partition, offset: offset, produced: produced, received: now}
	}

	line("J %d\n", time.Now().UnixNano())
	in, err := startInstance(spec, 0, h)
	if err != nil {
		log.Fatalf("start: %v", err)
	}
	line("S\n")

	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "close" {
			break
		}
	}
	line("C %d\n", time.Now().UnixNano())
	if err := in.Close(); err != nil {
		log.Printf("close: %v", err)
	}
	closing.Store(true)
	line("D %d\n", time.Now().UnixNano())
	close(records)
	<-writerDone
}

// writeWaitProfiles writes the block and mutex profiles beside the CPU
// profile cpu (WaitProfiles).
func writeWaitProfiles(cpu string) {
	for _, name := range []string{"block", "mutex"} {
		f, err := os.Create(strings.TrimSuffix(cpu, ".pprof") + "." + name + ".pprof")
		if err != nil {
			log.Printf("%s profile: %v", name, err)
			continue
		}
		if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
			log.Printf("%s profile: %v", name, err)
		}
		f.Close()
	}
}
