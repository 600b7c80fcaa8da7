package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The scale changes (-workloads scale with -scale-steps, e.g. 50,100,50):
// for each group contender, members as goroutines of one child process
// (each with its own clients and session, every setting at its default)
// join one group on a topic of P partitions that a steady producer feeds
// at -scale-rate messages per second; the first step's members join at
// once, then, once the group was stable for scaleQuiet, each following
// step starts the members it adds at once, or closes the members it
// removes at once. Each member acks (or marks)
// every message as it receives it. For each change the child measures
// the seconds until the group is stable again (every partition owned by
// exactly one member, each member owning some, and every message
// produced more than scaleLate ago received), the partitions whose owner
// changed, the members that lost their membership without being closed,
// and the most partitions seen owned by two members at once. At the end
// every message produced once the first step was stable must have been
// received (lost otherwise). Each partition count has a new topic, which
// the members read from the oldest offset.

// scaleLate is how long after its produce a message must have been
// received for the group to count as stable.
const scaleLate = time.Second

// scaleQuiet is how long the group stays stable before each change: more
// than a heartbeat interval (3 s by default), so that no member is about
// to heartbeat because of the last rebalance (franz-go's cooperative
// members heartbeat 500 ms after each), as in a group stable for long.
const scaleQuiet = 5 * time.Second

// scaleChange is what one change of a scale-change cell measured.
type scaleChange struct {
	From    int     `json:"from"`
	To      int     `json:"to"`
	Seconds float64 `json:"seconds"`
	// Moved counts the partitions whose owner differs between the stable
	// group before the change and after it.
	Moved int `json:"moved"`
	// Lost counts the members that lost their membership without being
	// closed (removed, fenced) during the change.
	Lost     int     `json:"members_lost"`
	Load1    float64 `json:"load1"`
	TimedOut bool    `json:"timed_out,omitempty"`
	// Starts counts the partitions that members started during the
	// change (kafkaconsumer: OnRebalance's Assigned; franz-go:
	// OnPartitionsAssigned), intermediate hand-outs included: Moved is
	// their least. Distributions and WakeUps count the ZooKeeper mode's
	// distributions and wake-ups by the instances' watch, over every
	// member.
	Starts        int `json:"starts"`
	Distributions int `json:"distributions,omitempty"`
	WakeUps       int `json:"wake_ups,omitempty"`
}

// changeCounts are the counts of a scale-change child's members, all of
// them, since it started: see scaleChange.
var changeCounts struct{ starts, distributions, wakeUps atomic.Int64 }

// scaleChangeResult is what a scale-change child reports.
type scaleChangeResult struct {
	Contender  string        `json:"contender"`
	Partitions int           `json:"partitions"`
	Rate       int           `json:"rate"`
	Start      float64       `json:"start_seconds"` // until the first step was stable
	Changes    []scaleChange `json:"changes"`
	// RSSPerMemberMB: the process's resident memory at the largest step,
	// less that before the first member, divided by its members.
	RSSPerMemberMB float64 `json:"rss_per_member_mib"`
	PeakRSSMB      float64 `json:"peak_rss_mib"`
	// DoubleOwned is the most partitions seen owned by two members at
	// once; LostMessages the messages produced once the first step was
	// stable and never received.
	DoubleOwned  int    `json:"double_owned"`
	LostMessages int    `json:"lost_messages"`
	Produced     int    `json:"produced"`
	Error        string `json:"error,omitempty"`
}

// runScaleChanges runs the scale changes of every group contender chosen
// on each partition count.
func runScaleChanges(cl *cluster, o *options) ([]scaleChangeResult, error) {
	var out []scaleChangeResult
	for _, p := range o.scalePartitions {
		// A topic of the run's own: the members start at the oldest
		// offset, so that a partition never committed is read whole.
		// (One per cell, the broker would hold thousands of partitions
		// more with each, and answer slower.)
		topic := fmt.Sprintf("bench.scalechange.p%d.%d", p, time.Now().Unix())
		if err := cl.ensureTopic(topic, int32(p)); err != nil {
			return nil, err
		}
		for _, c := range contendersFor(o, groupContenders) {
			if c == saramaGroup {
				continue
			}
			spec := baseSpec(cl, o, "scalechange")
			spec.Contender = c
			spec.Group = groupName("scalechange", c, p)
			spec.Topics, spec.Partitions = []string{topic}, []int32{int32(p)}
			spec.Steps, spec.Rate = o.scaleSteps, o.scaleRate
			spec.Timeout = 3 * time.Minute // per change
			if o.profileDir != "" {
				spec.CPUProfile = fmt.Sprintf("%s/scalechange-%s-p%d.pprof", o.profileDir, c, p)
			}
			var res scaleChangeResult
			err := runChildJSON(spec, &res, func() string { return res.Error })
			if err != nil && res.Contender == "" {
				return nil, fmt.Errorf("%s, %d partitions: %w", c, p, err)
			}
			for _, ch := range res.Changes {
				log.Printf("scalechange %-22s %5d partitions %3d -> %3d: %6.1fs moved %5d started %5d distributions %4d wake-ups %4d members lost %3d load %.1f%s",
					c, p, ch.From, ch.To, ch.Seconds, ch.Moved, ch.Starts, ch.Distributions, ch.WakeUps, ch.Lost, ch.Load1, map[bool]string{true: " TIMED OUT"}[ch.TimedOut])
			}
			log.Printf("scalechange %-22s %5d partitions: start %.1fs, rss %.1f MiB per member (peak %.0f MiB), double-owned %d, lost %d of %d%s",
				c, p, res.Start, res.RSSPerMemberMB, res.PeakRSSMB, res.DoubleOwned, res.LostMessages, res.Produced, map[bool]string{true: " error: " + res.Error}[res.Error != ""])
			out = append(out, res)
		}
	}
	return out, nil
}

// writeScaleChanges writes the table of the scale changes.
func writeScaleChanges(b *strings.Builder, cells []scaleChangeResult) {
	b.WriteString("### Scale changes: members as goroutines of one process (each its own clients and session, settings at their defaults), all added or closed at once\n\n")
	b.WriteString("Seconds from the change until every partition is owned by exactly one member, each member owns some, and every message produced more than 1 s before was received. " +
		"Moved: partitions whose owner changed; started: the partitions members started, intermediate hand-outs included; distributions and wake-ups: the ZooKeeper mode's, over every member. Lost members: those that lost their membership without being closed. Load: the machine's 1-minute load average at the end of the change.\n\n")
	b.WriteString("| contender | partitions | msgs/s | change | s | moved | started | distributions | wake-ups | lost members | load | RSS MiB per member | double-owned | lost msgs |\n")
	b.WriteString("|---|--:|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, c := range cells {
		for _, ch := range c.Changes {
			timedOut := ""
			if ch.TimedOut {
				timedOut = " (timed out)"
			}
			fmt.Fprintf(b, "| %s | %d | %d | %d → %d | %.1f%s | %d | %d | %d | %d | %d | %.1f | %.1f | %d | %d of %d |\n",
				c.Contender, c.Partitions, c.Rate, ch.From, ch.To, ch.Seconds, timedOut, ch.Moved, ch.Starts, ch.Distributions, ch.WakeUps, ch.Lost, ch.Load1,
				c.RSSPerMemberMB, c.DoubleOwned, c.LostMessages, c.Produced)
		}
		if c.Error != "" {
			fmt.Fprintf(b, "| %s | %d | %d | error: %s | | | | | | | | | | |\n", c.Contender, c.Partitions, c.Rate, c.Error)
		}
	}
	b.WriteString("\n")
}

// changeMember is one member of a scale-change child.
type changeMember interface {
	// owned returns the partitions the member owns, and whether it also
	// runs some it does not own yet (waiting for their previous owner).
	owned() (owned []int32, pending bool)
	// lost counts the member's losses of its membership so far.
	lost() int
	close()
}

// scaleChanges is the child's side of the scale changes.
func scaleChanges(spec *childSpec) (res scaleChangeResult) {
	parts := spec.Partitions[0]
	res.Contender, res.Partitions, res.Rate = spec.Contender, int(parts), spec.Rate
	if spec.CPUProfile != "" {
		if f, err := os.Create(strings.TrimSuffix(spec.CPUProfile, ".pprof") + ".log"); err == nil {
			log.SetOutput(f)
			defer f.Close()
		}
		if f, err := os.Create(spec.CPUProfile); err == nil {
			if pprof.StartCPUProfile(f) == nil {
				defer func() { pprof.StopCPUProfile(); f.Close() }()
			}
		}
	}
	rec := newRecorder(parts)
	prod, err := startSteadyProducer(&cluster{brokers: spec.Brokers}, spec.Topics[0], parts, spec.Rate, 16, rec)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	defer prod.stop()
	var members []changeMember
	defer func() { closeConcurrently(members) }()
	rss0 := currentRSS()
	start := func(n int) error {
		first := int32(len(members))
		added, errs := startConcurrently(n, func(i int) (changeMember, error) { return startChangeMember(spec, first+int32(i), rec) })
		for i, m := range added {
			if errs[i] == nil {
				members = append(members, m)
			}
		}
		return errors.Join(errs...)
	}

	t0 := time.Now()
	if err := start(spec.Steps[0]); err != nil {
		res.Error = err.Error()
		return res
	}
	owners, ok := waitChangeStable(spec, members, rec, &res)
	res.Start = time.Since(t0).Seconds()
	if !ok {
		res.Error = "the first step did not settle"
		return res
	}
	baseline := time.Now().UnixNano()
	for _, to := range spec.Steps[1:] {
		time.Sleep(scaleQuiet) // the workload's pause, see scaleQuiet
		from := len(members)
		lost0 := lostOf(members)
		starts0, distributions0, wakeUps0 := changeCounts.starts.Load(), changeCounts.distributions.Load(), changeCounts.wakeUps.Load()
		t := time.Now()
		if to > from {
			err = start(to - from)
		} else {
			closeConcurrently(members[to:])
			members = members[:to]
		}
		if err != nil {
			res.Error = err.Error()
			return res
		}
		after, ok := waitChangeStable(spec, members, rec, &res)
		ch := scaleChange{From: from, To: to, Seconds: time.Since(t).Seconds(), Lost: lostOf(members) - min(lost0, lostOf(members)), Load1: load1(), TimedOut: !ok,
			Starts:        int(changeCounts.starts.Load() - starts0),
			Distributions: int(changeCounts.distributions.Load() - distributions0),
			WakeUps:       int(changeCounts.wakeUps.Load() - wakeUps0)}
		for p, o := range after {
			if owners[p] != o {
				ch.Moved++
			}
		}
		res.Changes = append(res.Changes, ch)
		owners = after
		if n := len(members); n == slices.Max(spec.Steps) {
			res.RSSPerMemberMB = float64(currentRSS()-rss0) / float64(n) / (1 << 20)
		}
		if !ok {
			break
		}
	}
	res.PeakRSSMB = float64(peakRSS()) / (1 << 20)
	res.Produced, res.LostMessages = lostMessages(rec, baseline, time.Now().Add(spec.Timeout))
	return res
}

// waitChangeStable waits until the group is stable (see the file's
// comment) or spec.Timeout passes, recording double ownership in res,
// and returns each partition's owner (-1: none).
func waitChangeStable(spec *childSpec, members []changeMember, rec *recorder, res *scaleChangeResult) ([]int32, bool) {
	deadline := time.Now().Add(spec.Timeout)
	parts := int(spec.Partitions[0])
	for {
		owners, stable, double := ownership(members, parts)
		res.DoubleOwned = max(res.DoubleOwned, double)
		if stable && rec.caughtUp(time.Now().Add(-scaleLate).UnixNano()) {
			return owners, true
		}
		if time.Now().After(deadline) {
			return owners, false
		}
		time.Sleep(50 * time.Millisecond) // polling interval
	}
}

// ownership returns each partition's owner, whether every partition has
// exactly one and every member owns some (when there are enough
// partitions) with none pending, and the partitions owned twice.
func ownership(members []changeMember, parts int) (owners []int32, stable bool, double int) {
	owners = make([]int32, parts)
	for i := range owners {
		owners[i] = -1
	}
	stable = true
	for i, m := range members {
		owned, pending := m.owned()
		if pending || (len(owned) == 0 && parts >= len(members)) {
			stable = false
		}
		for _, p := range owned {
			if owners[p] >= 0 {
				double++
				stable = false
			}
			owners[p] = int32(i)
		}
	}
	return owners, stable && !slices.Contains(owners, -1), double
}

// caughtUp tells whether every message produced before `before` (unix ns)
// was received.
func (r *recorder) caughtUp(before int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for p := range r.parts {
		order := r.parts[p].order
		for i := len(order) - 1; i >= 0; i-- {
			if m := order[i]; m.produced < before {
				if len(m.receipts) == 0 {
					return false
				}
				break
			}
		}
	}
	return true
}

// lostMessages waits until every message produced after since (unix ns)
// and before now was received, or until deadline, and returns their count
// and those not received.
func lostMessages(rec *recorder, since int64, deadline time.Time) (produced, lost int) {
	until := time.Now().Add(-scaleLate).UnixNano()
	for !rec.caughtUp(until) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond) // polling interval
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for p := range rec.parts {
		for _, m := range rec.parts[p].order {
			if m.produced >= since && m.produced < until {
				produced++
				if len(m.receipts) == 0 {
					lost++
				}
			}
		}
	}
	return produced, lost
}

func lostOf(members []changeMember) int {
	n := 0
	for _, m := range members {
		n += min(m.lost(), 1)
	}
	return n
}

// load1 returns the machine's load average over the last minute.
func load1() float64 {
	data, _ := os.ReadFile("/proc/loadavg")
	var l float64
	fmt.Sscan(string(data), &l)
	return l
}

// startChangeMember starts member id of the spec's contender, recording
// every message it receives in rec.
func startChangeMember(spec *childSpec, id int32, rec *recorder) (changeMember, error) {
	if spec.Contender == franzGo || spec.Contender == franzGo848 {
		return startFranzMember(spec, id, rec)
	}
	return startOursMember(spec, id, rec)
}

// --- kafkaconsumer

type oursMember struct {
	c      kafkaconsumer.Consumer
	losses atomic.Int64
	done   sync.WaitGroup // the reading goroutines
}

func startOursMember(spec *childSpec, id int32, rec *recorder) (*oursMember, error) {
	cfg := kafkaconsumer.NewConfig()
	cfg.Offsets.Initial = sarama.OffsetOldest
	zookeeper := spec.Zookeeper
	if spec.Contender != kafkaConsumer {
		cfg.Coordinator, cfg.Brokers, zookeeper = kafkaconsumer.CoordinatorKafka, spec.Brokers, ""
	}
	if spec.Contender == kafkaConsumerKafka848 {
		cfg.GroupProtocol = kafkaconsumer.GroupProtocolConsumer
	}
	m := &oursMember{}
	cfg.OnRebalance = func(r kafkaconsumer.Rebalance) { changeCounts.starts.Add(int64(len(r.Assigned))) }
	cfg.Logger = slog.New(&lossCounter{id: id, losses: &m.losses})
	c, err := kafkaconsumer.Join(spec.Group, kafkaconsumer.TopicSubscription(spec.Topics...), zookeeper, cfg)
	if err != nil {
		return nil, err
	}
	m.c = c
	m.done.Add(2)
	go func() {
		defer m.done.Done()
		for err := range c.Errors() {
			if errors.Is(err, kafkaconsumer.ErrRegistrationLost) {
				m.losses.Add(1)
			}
			log.Printf("member %d: %v", id, err)
		}
	}()
	go func() {
		defer m.done.Done()
		for msg := range c.Messages() {
			c.Ack(msg)
			rec.received(id, msg.Partition, msg.Offset, 0, time.Now().UnixNano())
		}
	}()
	return m, nil
}

func (m *oursMember) owned() (owned []int32, pending bool) {
	for _, s := range m.c.Stats() {
		if s.Claimed {
			owned = append(owned, s.Partition)
		} else {
			pending = true
		}
	}
	return owned, pending
}

func (m *oursMember) lost() int { return int(m.losses.Load()) }

func (m *oursMember) close() {
	if err := m.c.Close(); err != nil {
		log.Printf("close: %v", err)
	}
	m.done.Wait()
}

// lossCounter is a slog handler that counts a member's log lines saying
// it lost its membership, and writes every line of level Info and above
// to the child's log.
type lossCounter struct {
	id     int32
	losses *atomic.Int64
}

func (h *lossCounter) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h *lossCounter) Handle(_ context.Context, r slog.Record) error {
	for _, prefix := range []string{"Removed from", "Fenced out", "No longer a member"} {
		if strings.HasPrefix(r.Message, prefix) {
			h.losses.Add(1)
		}
	}
	switch {
	case strings.HasPrefix(r.Message, "Currently, "):
		changeCounts.distributions.Add(1)
	case strings.HasPrefix(r.Message, "Woke up because the list of running instances changed"):
		changeCounts.wakeUps.Add(1)
	}
	log.Printf("member %d: %s", h.id, r.Message)
	return nil
}

func (h *lossCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *lossCounter) WithGroup(string) slog.Handler      { return h }

// --- franz-go

type franzMember struct {
	cl     *kgo.Client
	cancel context.CancelFunc
	done   chan struct{} // closed when the poll loop ends
	mu     sync.Mutex
	own    map[int32]bool // guarded by mu
	losses atomic.Int64
}

func startFranzMember(spec *childSpec, id int32, rec *recorder) (*franzMember, error) {
	m := &franzMember{own: map[int32]bool{}, done: make(chan struct{})}
	update := func(set bool) func(context.Context, *kgo.Client, map[string][]int32) {
		return func(_ context.Context, _ *kgo.Client, ps map[string][]int32) {
			m.mu.Lock()
			defer m.mu.Unlock()
			if set {
				changeCounts.starts.Add(int64(len(ps[spec.Topics[0]])))
			}
			for _, p := range ps[spec.Topics[0]] {
				if set {
					m.own[p] = true
				} else {
					delete(m.own, p)
				}
			}
		}
	}
	revoked := update(false)
	opts := []kgo.Opt{
		kgo.SeedBrokers(spec.Brokers...),
		kgo.ConsumerGroup(spec.Group),
		kgo.ConsumeTopics(spec.Topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.AutoCommitMarks(),
		kgo.OnPartitionsAssigned(update(true)),
		kgo.OnPartitionsRevoked(revoked),
		kgo.OnPartitionsLost(func(ctx context.Context, cl *kgo.Client, ps map[string][]int32) {
			m.losses.Add(1)
			log.Printf("member %d: lost %d partitions", id, len(ps[spec.Topics[0]]))
			revoked(ctx, cl, ps)
		}),
	}
	if spec.Contender == franzGo848 {
		opts = append(opts, kgo.ServerSideBalancer())
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	m.cl, m.cancel = cl, cancel
	go func() {
		defer close(m.done)
		for {
			fetches := cl.PollFetches(ctx)
			if fetches.IsClientClosed() || ctx.Err() != nil {
				return
			}
			fetches.EachRecord(func(r *kgo.Record) {
				cl.MarkCommitRecords(r)
				rec.received(id, r.Partition, r.Offset, 0, time.Now().UnixNano())
			})
		}
	}()
	return m, nil
}

func (m *franzMember) owned() ([]int32, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []int32
	for p := range m.own {
		out = append(out, p)
	}
	return out, false
}

func (m *franzMember) lost() int { return int(m.losses.Load()) }

func (m *franzMember) close() {
	m.cancel()
	<-m.done
	m.cl.Close() // commits the marks and leaves the group
}
