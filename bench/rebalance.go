package main

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
)

// events are the rebalance events, in the order a run causes them.
var events = []string{"join", "leave", "kill"}

// rebalanceTable is the result of workload 3.
type rebalanceTable struct {
	Instances  int            `json:"instances"`
	Partitions int            `json:"partitions"`
	Rate       int            `json:"produce_rate"`
	Late       string         `json:"late_threshold"`
	Rows       []rebalanceRow `json:"rows"`
	// Rolling is the rolling restart of kafkaconsumer's instances, without
	// and with static membership (issue 34).
	Rolling []rollingRow `json:"rolling,omitempty"`
}

// rollingRow is a rolling restart: each of the 4 instances in turn closes
// (Close) and starts again, the next once the group is stable; the
// figures are medians over the runs.
type rollingRow struct {
	Contender string `json:"contender"`
	// InstanceID tells whether the instances had a Config.InstanceID;
	// RestartGrace is their Config.RestartGrace.
	InstanceID   bool    `json:"instance_id"`
	RestartGrace string  `json:"restart_grace"`
	Moves        float64 `json:"moves"` // times a partition changed instance, over the rollout
	Duplicates   float64 `json:"duplicates"`
	Lost         float64 `json:"lost"`
	// LagPeak is the longest a message produced during the rollout waited
	// for its first receipt, in seconds.
	LagPeak float64         `json:"lag_peak_seconds"`
	Seconds float64         `json:"rollout_seconds"`
	Runs    []rollingResult `json:"runs"`
}

type rollingResult struct {
	Moves      int     `json:"moves"`
	Duplicates int     `json:"duplicates"`
	Lost       int     `json:"lost"`
	LagPeak    float64 `json:"lag_peak_seconds"`
	Seconds    float64 `json:"rollout_seconds"`
	TimedOut   bool    `json:"timed_out,omitempty"`
}

type rebalanceRow struct {
	Contender      string `json:"contender"`
	SessionTimeout string `json:"session_timeout"`
	// Events holds the medians over the runs, by event.
	Events map[string]eventFigures  `json:"events"`
	Runs   []map[string]eventResult `json:"runs"`
}

type eventFigures struct {
	Recovery   float64 `json:"recovery_seconds"`
	Duplicates float64 `json:"duplicates"`
	Lost       float64 `json:"lost"`
}

// eventResult is what one event of one run did.
type eventResult struct {
	// Recovery is the larger of NewOwner and LastDelayed: the time from the
	// event until every partition is consumed again.
	Recovery float64 `json:"recovery_seconds"`
	// NewOwner: seconds until, for every partition, its owner at the end of
	// the phase received a message produced after the event.
	NewOwner float64 `json:"new_owner_seconds"`
	// LastDelayed: seconds until the last message delayed by more than the
	// late threshold was first received (0 if none was).
	LastDelayed float64 `json:"last_delayed_seconds"`
	// Moved is the count of partitions whose owner changed.
	Moved int `json:"moved"`
	// Duplicates counts receipts of a message received before (by anyone),
	// made between the event and the end of the phase.
	Duplicates int `json:"duplicates"`
	// Lost counts messages produced in the phase (but in its last second)
	// that nobody ever received.
	Lost int `json:"lost"`
	// Phase is how long the phase lasted: until the group was stable again.
	Phase float64 `json:"phase_seconds"`
	// ProduceLag is the longest that a message produced in the phase
	// waited for the broker's ack: a delay of the cluster, not of the
	// consumer, which cannot fetch a message before the broker has it.
	ProduceLag float64 `json:"produce_lag_seconds"`
	// Delayed describes the last delayed message (LastDelayed), if any.
	Delayed  string `json:"last_delayed,omitempty"`
	TimedOut bool   `json:"timed_out,omitempty"`
}

func runRebalance(cl *cluster, o *options) (*rebalanceTable, error) {
	parts := int32(o.rebalancePartitions)
	topic := fmt.Sprintf("bench.rebalance.p%d", parts)
	if err := cl.ensureTopic(topic, parts); err != nil {
		return nil, err
	}
	table := &rebalanceTable{Instances: 4, Partitions: int(parts), Rate: o.rebalanceRate, Late: o.late.String()}
	sc := scenario{name: "rebalance", initial: 4, events: events, rate: o.rebalanceRate, topic: topic, parts: parts}
	cs := contendersFor(o, groupContenders)
	byContender := map[string][]map[string]eventResult{}
	for run := range o.runs {
		for _, c := range rotate(cs, run) {
			r, err := rebalanceRun(cl, o, c, run, sc)
			if err != nil {
				return nil, fmt.Errorf("%s run %d: %w", c, run+1, err)
			}
			byContender[c] = append(byContender[c], r)
			for _, ev := range events {
				e := r[ev]
				log.Printf("rebalance run %d %-14s %-5s recovery %5.2fs (new owner %.2fs, last delayed %.2fs) moved %2d dup %5d lost %d phase %.1fs%s",
					run+1, c, ev, e.Recovery, e.NewOwner, e.LastDelayed, e.Moved, e.Duplicates, e.Lost, e.Phase, map[bool]string{true: " TIMED OUT"}[e.TimedOut])
			}
		}
	}
	for _, c := range cs {
		row := rebalanceRow{Contender: c, Runs: byContender[c], Events: map[string]eventFigures{}, SessionTimeout: sessionLabel(cl, o, c)}
		for _, ev := range events {
			var rec, dup, lost []float64
			for _, r := range byContender[c] {
				rec = append(rec, r[ev].Recovery)
				dup = append(dup, float64(r[ev].Duplicates))
				lost = append(lost, float64(r[ev].Lost))
			}
			row.Events[ev] = eventFigures{Recovery: median(rec), Duplicates: median(dup), Lost: median(lost)}
		}
		table.Rows = append(table.Rows, row)
	}
	for _, c := range cs {
		if o.rollingGrace <= 0 {
			break
		}
		for _, static := range []bool{false, true} {
			if static && !slices.Contains(staticContenders, c) {
				continue
			}
			row := rollingRow{Contender: c, InstanceID: static, RestartGrace: "-"}
			if c == kafkaConsumer {
				row.RestartGrace = "0s"
				if static {
					row.RestartGrace = o.rollingGrace.String()
				}
			}
			var moves, dup, lost, lag, secs []float64
			for run := range o.runs {
				r, err := rollingRun(cl, o, c, static, run, sc)
				if err != nil {
					return nil, fmt.Errorf("rolling restart of %s (InstanceID %t) run %d: %w", c, static, run+1, err)
				}
				log.Printf("rolling restart run %d %-14s InstanceID %-5t moves %3d dup %5d lost %d lag peak %.2fs rollout %.1fs%s",
					run+1, c, static, r.Moves, r.Duplicates, r.Lost, r.LagPeak, r.Seconds, map[bool]string{true: " TIMED OUT"}[r.TimedOut])
				row.Runs = append(row.Runs, r)
				moves, dup, lost = append(moves, float64(r.Moves)), append(dup, float64(r.Duplicates)), append(lost, float64(r.Lost))
				lag, secs = append(lag, r.LagPeak), append(secs, r.Seconds)
			}
			row.Moves, row.Duplicates, row.Lost = median(moves), median(dup), median(lost)
			row.LagPeak, row.Seconds = median(lag), median(secs)
			table.Rolling = append(table.Rolling, row)
		}
	}
	return table, nil
}

// staticContenders are the group contenders whose rolling restart runs
// with static membership too: kafkaconsumer with Config.InstanceID and
// Config.RestartGrace, the Kafka-coordinated ones with their group
// instance ID (the coordinator keeps the partitions for the session
// timeout).
var staticContenders = []string{kafkaConsumer, kafkaConsumerKafka, kafkaConsumerKafka848, franzGo, franzGo848}

// sessionLabel is the session timeout of contender c, for the tables.
func sessionLabel(cl *cluster, o *options, c string) string {
	switch {
	case c == kafkaConsumer:
		return o.sessionTimeout.String() + " (ZooKeeper)"
	case slices.Contains(consumerProtocolContenders, c):
		return cl.consumerSession.String() + " (broker)"
	}
	session, _ := groupTimeouts(cl, o)
	return session.String()
}

// sessionOf is the session timeout that applies to contender c.
func sessionOf(cl *cluster, o *options, c string) time.Duration {
	switch {
	case c == kafkaConsumer:
		return o.sessionTimeout
	case slices.Contains(consumerProtocolContenders, c):
		return cl.consumerSession
	}
	session, _ := groupTimeouts(cl, o)
	return session
}

// rollingRun is a rolling restart of sc.initial instances of contender
// under the steady produce rate: each in turn is closed and started again
// (with the same InstanceID when static, and for kafkaconsumer
// Config.RestartGrace o.rollingGrace), the next once the group is stable
// again. It measures the whole rollout.
func rollingRun(cl *cluster, o *options, contender string, static bool, run int, sc scenario) (rollingResult, error) {
	rec := newRecorder(sc.parts)
	prod, err := startSteadyProducer(cl, sc.topic, sc.parts, sc.rate, o.size, rec)
	if err != nil {
		return rollingResult{}, err
	}
	defer prod.stop()
	spec := baseSpec(cl, o, "stream")
	spec.Contender = contender
	spec.Instances = 1
	spec.Group = groupName("rolling-"+fmt.Sprint(static), contender, run)
	spec.Topics = []string{sc.topic}
	spec.Partitions = []int32{sc.parts}
	spec.Newest = true
	specOf := func(i int) childSpec {
		s := spec
		if static {
			s.InstanceID = fmt.Sprintf("rolling-%d", i)
			if contender == kafkaConsumer {
				s.RestartGrace = o.rollingGrace
			}
		}
		return s
	}
	g := &streamGroup{o: o, spec: spec, rec: rec}
	defer g.killAll()
	if err := g.startInitial(sc.initial, specOf); err != nil {
		return rollingResult{}, err
	}

	var res rollingResult
	began := time.Now().UnixNano()
	for i := range sc.initial {
		old := g.children[i]
		old.expectGone.Store(true)
		old.close()
		select {
		case <-old.exited:
		case <-time.After(60 * time.Second):
			return res, g.failure(fmt.Sprintf("instance %d did not exit after close", i))
		}
		ch, err := g.start(i, specOf(i))
		if err != nil {
			return res, err
		}
		if err := g.waitStarted(ch); err != nil {
			return res, err
		}
		if _, ok := g.waitStable(time.Now().UnixNano(), 2*time.Second, max(o.rollingGrace, sessionOf(cl, o, contender))+60*time.Second); !ok {
			res.TimedOut = true
		}
		g.children[i], g.children[len(g.children)-1] = ch, old // slot i is the new one
	}
	end := time.Now().UnixNano()
	e := rec.evaluate(began, end, int64(o.late))
	res.Duplicates, res.Lost = e.Duplicates, e.Lost
	moves, lag := rec.rollout(began, end)
	res.Moves, res.LagPeak = moves, float64(lag)/1e9
	res.Seconds = float64(end-began) / 1e9
	g.closeAll()
	return res, nil
}

// scenario is what a run of the rebalance or mass-move workload does:
// start initial instances of the contender, one process each, under a
// steady produce rate of rate messages per second on topic, then cause the
// events in order.
type scenario struct {
	name    string // the workload, for the group's name
	initial int
	events  []string // of events
	rate    int
	topic   string
	parts   int32
}

// rebalanceRun runs the scenario: its instances, then its events: "join"
// (one more instance joins), "leave" (the first instance leaves with
// Close), "kill" (the second is killed with SIGKILL). After each event it
// waits until the group is stable again: every partition is owned by a live
// instance, and every message is received promptly.
func rebalanceRun(cl *cluster, o *options, contender string, run int, sc scenario) (map[string]eventResult, error) {
	topic, parts := sc.topic, sc.parts
	rec := newRecorder(parts)
	prod, err := startSteadyProducer(cl, topic, parts, sc.rate, o.size, rec)
	if err != nil {
		return nil, err
	}
	defer prod.stop()

	spec := baseSpec(cl, o, "stream")
	spec.Contender = contender
	spec.Instances = 1
	spec.Group = groupName(sc.name, contender, run)
	spec.Topics = []string{topic}
	spec.Partitions = []int32{parts}
	spec.Newest = true
	g := &streamGroup{o: o, spec: spec, rec: rec}
	defer g.killAll()
	session := sessionOf(cl, o, contender)
	if err := g.startInitial(sc.initial, func(int) childSpec { return spec }); err != nil {
		return nil, err
	}

	result := map[string]eventResult{}
	phase := func(ev string, te int64, minWait, maxWait time.Duration) {
		end, ok := g.waitStable(te, minWait, maxWait)
		r := rec.evaluate(te, end, int64(o.late))
		r.TimedOut = !ok
		result[ev] = r
	}

	for _, ev := range sc.events {
		switch ev {
		case "join": // one more instance joins; the event is its call to Join
			joiner, err := g.start(len(g.children), g.spec)
			if err != nil {
				return nil, err
			}
			var te int64
			select {
			case te = <-joiner.joined:
			case <-time.After(30 * time.Second):
				return nil, g.failure("the joining instance did not start")
			}
			phase("join", te, 2*time.Second, 30*time.Second)
		case "leave": // the first instance leaves with Close
			leaver := g.children[0]
			leaver.expectGone.Store(true)
			te := time.Now().UnixNano()
			leaver.close()
			phase("leave", te, 2*time.Second, 30*time.Second)
		case "kill": // the second instance is killed
			victim := g.children[1]
			victim.expectGone.Store(true)
			te := time.Now().UnixNano()
			victim.kill()
			phase("kill", te, 2*time.Second, session+30*time.Second)
		}
	}
	g.closeAll()
	return result, nil
}

// streamGroup is the instances of a run of the rebalance or mass-move
// workloads, one stream child each, whose receipts rec records.
type streamGroup struct {
	o        *options
	spec     childSpec
	rec      *recorder
	children []*streamChild
}

// start starts a child of spec whose receipts count as instance idx's.
func (g *streamGroup) start(idx int, spec childSpec) (*streamChild, error) {
	ch, err := startStreamChild(spec, idx, g.rec)
	if err != nil {
		return nil, err
	}
	g.children = append(g.children, ch)
	return ch, nil
}

// startInitial starts n instances, instance i of specOf(i), waits until
// they started, and until the group is stable.
func (g *streamGroup) startInitial(n int, specOf func(i int) childSpec) error {
	for i := range n {
		if _, err := g.start(i, specOf(i)); err != nil {
			return err
		}
	}
	for _, ch := range g.children {
		if err := g.waitStarted(ch); err != nil {
			return err
		}
	}
	if _, ok := g.waitStable(time.Now().UnixNano(), 3*time.Second, 90*time.Second); !ok {
		return g.failure(fmt.Sprintf("the group did not become stable with %d instances", n))
	}
	return nil
}

// waitStarted waits until ch started its instance.
func (g *streamGroup) waitStarted(ch *streamChild) error {
	select {
	case <-ch.started:
		return nil
	case <-ch.exited:
		return g.failure(fmt.Sprintf("instance %d exited at start", ch.idx))
	case <-time.After(60 * time.Second):
		return g.failure(fmt.Sprintf("instance %d did not start", ch.idx))
	}
}

// live returns the instance numbers of the children still running.
func (g *streamGroup) live() []int32 {
	var ids []int32
	for _, ch := range g.children {
		if !ch.gone.Load() {
			ids = append(ids, int32(ch.idx))
		}
	}
	return ids
}

// waitStable waits until the group is stable again after te, at least
// minWait and at most maxWait; it returns when, and false when it was not
// (or a child exited unexpectedly).
func (g *streamGroup) waitStable(te int64, minWait, maxWait time.Duration) (int64, bool) {
	for {
		now := time.Now()
		since := time.Duration(now.UnixNano() - te)
		if since >= minWait && g.rec.stable(now.UnixNano(), int64(1500*time.Millisecond), int64(g.o.late), g.live()) {
			return now.UnixNano(), true
		}
		if since > maxWait {
			return now.UnixNano(), false
		}
		for _, ch := range g.children {
			if ch.gone.Load() && !ch.expectGone.Load() {
				return now.UnixNano(), false
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// failure returns an error of what, with the end of each child's stderr.
func (g *streamGroup) failure(what string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s", what)
	for _, ch := range g.children {
		fmt.Fprintf(&b, "\n--- instance %d stderr:\n%s", ch.idx, tail(ch.stderr.String(), 1500))
	}
	return fmt.Errorf("%s", b.String())
}

// closeAll stops the children gracefully, all at once, and waits for
// them to exit (killing those that do not within 90 s).
func (g *streamGroup) closeAll() {
	for _, ch := range g.children {
		ch.expectGone.Store(true)
		ch.close()
	}
	for _, ch := range g.children {
		select {
		case <-ch.exited:
		case <-time.After(90 * time.Second):
			log.Printf("instance %d did not exit after close; killing it", ch.idx)
			ch.kill()
		}
	}
}

// killAll kills the children still running.
func (g *streamGroup) killAll() {
	for _, ch := range g.children {
		ch.kill()
	}
}

// --- child processes

type lockedBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if len(b.buf) > 1<<16 {
		b.buf = b.buf[len(b.buf)-1<<15:]
	}
	return len(p), nil
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// streamChild is an instance running in a child process in stream mode.
type streamChild struct {
	idx        int
	cmd        *exec.Cmd
	stdin      io.WriteCloser
	stderr     lockedBuffer
	joined     chan int64    // receives the time the child called Join
	started    chan struct{} // closed when the instance started
	exited     chan struct{} // closed when the process exited
	gone       atomic.Bool   // set when the process exited
	expectGone atomic.Bool   // set when the bench closes or kills it
}

func startStreamChild(spec childSpec, idx int, rec *recorder) (*streamChild, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	data, _ := json.Marshal(spec)
	ch := &streamChild{
		idx:     idx,
		cmd:     exec.Command(exe, childArg),
		joined:  make(chan int64, 1),
		started: make(chan struct{}),
		exited:  make(chan struct{}),
	}
	ch.cmd.Env = append(os.Environ(), childEnv+"="+string(data))
	ch.cmd.Stderr = &ch.stderr
	if ch.stdin, err = ch.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := ch.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := ch.cmd.Start(); err != nil {
		return nil, err
	}
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		sc := bufio.NewScanner(stdout)
		startedClosed := false
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 0 {
				continue
			}
			switch f[0] {
			case "M":
				if len(f) != 5 {
					continue
				}
				p, _ := strconv.ParseInt(f[1], 10, 32)
				off, _ := strconv.ParseInt(f[2], 10, 64)
				produced, _ := strconv.ParseInt(f[3], 10, 64)
				at, _ := strconv.ParseInt(f[4], 10, 64)
				rec.received(int32(idx), int32(p), off, produced, at)
			case "J":
				if len(f) == 2 {
					ns, _ := strconv.ParseInt(f[1], 10, 64)
					ch.joined <- ns
				}
			case "S":
				if !startedClosed {
					close(ch.started)
					startedClosed = true
				}
			}
		}
		io.Copy(io.Discard, stdout)
	}()
	go func() {
		<-readDone
		ch.cmd.Wait()
		ch.gone.Store(true)
		close(ch.exited)
	}()
	return ch, nil
}

// close asks the child to close its instance and exit.
func (ch *streamChild) close() {
	ch.stdin.Write([]byte("close\n"))
	ch.stdin.Close()
}

// kill kills the child with SIGKILL, if it still runs.
func (ch *streamChild) kill() {
	if !ch.gone.Load() {
		ch.cmd.Process.Kill()
	}
}

// --- the steady producer

type steadyProducer struct {
	ap      sarama.AsyncProducer
	stopped chan struct{}  // closed by stop, ends the loop
	loop    sync.WaitGroup // the producing loop
	wg      sync.WaitGroup // the readers of successes and errors
	failed  atomic.Int64
}

// startSteadyProducer produces rate messages per second, in rounds of one
// message to each partition, each value starting with its produce time
// (unix ns, big endian).
func startSteadyProducer(cl *cluster, topic string, parts int32, rate, size int, rec *recorder) (*steadyProducer, error) {
	cfg := sarama.NewConfig()
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	cfg.Producer.Return.Successes = true
	cfg.Producer.Return.Errors = true
	cfg.Producer.RequiredAcks = sarama.WaitForLocal
	ap, err := sarama.NewAsyncProducer(cl.brokers, cfg)
	if err != nil {
		return nil, err
	}
	sp := &steadyProducer{ap: ap, stopped: make(chan struct{})}
	sp.wg.Add(2)
	go func() {
		defer sp.wg.Done()
		for msg := range ap.Successes() {
			rec.produced(msg.Partition, msg.Offset, msg.Metadata.(int64), time.Now().UnixNano())
		}
	}()
	go func() {
		defer sp.wg.Done()
		for e := range ap.Errors() {
			if sp.failed.Add(1) == 1 {
				log.Printf("steady producer: %v", e.Err)
			}
		}
	}()
	period := time.Duration(float64(parts) / float64(rate) * float64(time.Second))
	sp.loop.Add(1)
	go func() {
		defer sp.loop.Done()
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			select {
			case <-sp.stopped:
				return
			case <-tick.C:
			}
			now := time.Now().UnixNano()
			for p := range parts {
				v := make([]byte, size)
				binary.BigEndian.PutUint64(v, uint64(now))
				ap.Input() <- &sarama.ProducerMessage{Topic: topic, Partition: p, Value: sarama.ByteEncoder(v), Metadata: now}
			}
		}
	}()
	return sp, nil
}

func (sp *steadyProducer) stop() {
	close(sp.stopped)
	sp.loop.Wait() // a round in progress must not send after AsyncClose
	sp.ap.AsyncClose()
	sp.wg.Wait()
}

// --- what was produced and received

type receipt struct {
	inst int32
	at   int64 // unix ns
}

type msgRecord struct {
	produced int64 // unix ns
	acked    int64 // unix ns, when the producer learnt its offset; 0: not yet
	offset   int64
	receipts []receipt
}

// available returns when the message was there for the consumers to
// fetch, as near as the producer knows: when the broker acked it, or
// when it was produced while no ack came yet. A message is late by the
// time from then to its first receipt: a broker slow to take the
// produce (a fresh broker, a loaded machine) delays every contender
// alike, and is not the consumer's delay.
func (m *msgRecord) available() int64 {
	return max(m.produced, m.acked)
}

// first returns the earliest receipt's time, or 0.
func (m *msgRecord) first() int64 {
	var first int64
	for _, r := range m.receipts {
		if first == 0 || r.at < first {
			first = r.at
		}
	}
	return first
}

type partRecords struct {
	byOffset map[int64]*msgRecord
	order    []*msgRecord // as the producer learnt their offsets
}

// recorder holds, per partition, every message produced by the steady
// producer and every receipt of it by an instance.
type recorder struct {
	mu    sync.Mutex
	parts []partRecords
}

func newRecorder(parts int32) *recorder {
	r := &recorder{parts: make([]partRecords, parts)}
	for i := range r.parts {
		r.parts[i].byOffset = make(map[int64]*msgRecord)
	}
	return r
}

func (r *recorder) get(p int32, offset int64) *msgRecord {
	pr := &r.parts[p]
	m := pr.byOffset[offset]
	if m == nil {
		m = &msgRecord{offset: offset}
		pr.byOffset[offset] = m
	}
	return m
}

func (r *recorder) produced(p int32, offset, at, acked int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.get(p, offset)
	m.produced, m.acked = at, acked
	r.parts[p].order = append(r.parts[p].order, m)
}

func (r *recorder) received(inst, p int32, offset, produced, at int64) {
	if p < 0 || int(p) >= len(r.parts) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.get(p, offset)
	if m.produced == 0 {
		m.produced = produced
	}
	m.receipts = append(m.receipts, receipt{inst: inst, at: at})
}

// stable tells whether, at now, every partition is consumed normally: each
// had a message produced in [now-window, now-late], each such message was
// first received within late of being produced, and the last receiver of
// each partition is a live instance, every live instance being one.
func (r *recorder) stable(now, window, late int64, live []int32) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	lo, hi := now-window, now-late
	owners := map[int32]bool{}
	for p := range r.parts {
		order := r.parts[p].order
		found := false
		var owner receipt
		for i := len(order) - 1; i >= 0; i-- {
			m := order[i]
			for _, rc := range m.receipts {
				if rc.at > owner.at {
					owner = rc
				}
			}
			if m.produced > hi {
				continue
			}
			if m.produced < lo {
				break
			}
			found = true
			if f := m.first(); f == 0 || f-m.available() > late {
				return false
			}
		}
		if !found || !slices.Contains(live, owner.inst) {
			return false
		}
		owners[owner.inst] = true
	}
	return len(owners) == len(live)
}

// evaluate measures the event at te, whose phase ended at end.
func (r *recorder) evaluate(te, end, late int64) eventResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	var res eventResult
	newOwner, lastDelayed := te, int64(0)
	for p := range r.parts {
		var before, final receipt // last receipts before te and until end
		before.inst, final.inst = -1, -1
		for _, m := range r.parts[p].byOffset {
			for _, rc := range m.receipts {
				if rc.at < te && rc.at > before.at {
					before = rc
				}
				if rc.at <= end && rc.at > final.at {
					final = rc
				}
			}
		}
		if before.inst != final.inst {
			res.Moved++
		}
		firstByFinal := int64(0)
		for _, m := range r.parts[p].byOffset {
			first := m.first()
			if m.produced >= te {
				if m.acked > 0 && m.produced <= end {
					res.ProduceLag = max(res.ProduceLag, float64(m.acked-m.produced)/1e9)
				}
				for _, rc := range m.receipts {
					if rc.inst == final.inst && rc.at <= end && (firstByFinal == 0 || rc.at < firstByFinal) {
						firstByFinal = rc.at
					}
				}
				if m.produced <= end-int64(time.Second) && first == 0 {
					res.Lost++
				}
			}
			if first >= te && first <= end && first-m.available() > late && first > lastDelayed {
				lastDelayed = first
				res.Delayed = fmt.Sprintf("partition %d offset %d: produced %.2fs, acked %.2fs, first received %.2fs after the event",
					p, m.offset, float64(m.produced-te)/1e9, float64(m.acked-te)/1e9, float64(first-te)/1e9)
			}
			for _, rc := range m.receipts {
				if rc.at >= te && rc.at <= end && rc.at != first {
					res.Duplicates++
				}
			}
		}
		if firstByFinal == 0 {
			firstByFinal = end // never: count the whole phase
		}
		newOwner = max(newOwner, firstByFinal)
	}
	res.NewOwner = float64(newOwner-te) / 1e9
	if lastDelayed > 0 {
		res.LastDelayed = float64(lastDelayed-te) / 1e9
	}
	res.Recovery = max(res.NewOwner, res.LastDelayed)
	res.Phase = float64(end-te) / 1e9
	return res
}

// rollout returns, over the partitions, how often the instance receiving
// a partition's messages changed from te to end (in the order of the
// receipts, from the last receipt before te), and the longest time a
// message produced in [te, end] waited for its first receipt (ns).
func (r *recorder) rollout(te, end int64) (moves int, lagPeak int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for p := range r.parts {
		var receipts []receipt
		before := receipt{inst: -1}
		for _, m := range r.parts[p].byOffset {
			for _, rc := range m.receipts {
				switch {
				case rc.at < te && rc.at > before.at:
					before = rc
				case rc.at >= te && rc.at <= end:
					receipts = append(receipts, rc)
				}
			}
			if m.produced >= te && m.produced <= end {
				if f := m.first(); f != 0 && f-m.available() > lagPeak {
					lagPeak = f - m.available()
				}
			}
		}
		slices.SortFunc(receipts, func(a, b receipt) int { return cmp.Compare(a.at, b.at) })
		owner := before.inst
		for _, rc := range receipts {
			if owner >= 0 && rc.inst != owner {
				moves++
			}
			owner = rc.inst
		}
	}
	return moves, lagPeak
}
