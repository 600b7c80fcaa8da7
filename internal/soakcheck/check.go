// Package soakcheck is the independent checker of the chaos soak: it reads
// only what the soak's processes wrote down (what the producer produced,
// what each consumer instance was handed and acked, the partitions each was
// assigned and revoked, and the committed offsets sampled from Kafka) and
// knows nothing of the library's internals. It checks:
//
//   - lost: every produced value was handed out at least once;
//   - double-owned: no partition was handed out by two instances at once;
//   - moved back: the committed offset of a partition never decreased;
//   - past unacked: no committed offset passed a produced message that no
//     instance had acked when the offset was seen;
//   - poll skips: within one instance's hold of a partition, the offsets
//     handed out follow the produced ones in order, with no gap;
//   - not held: every message handed out belongs to a partition the
//     instance held (between its assignment and its revocation).
//
// CheckWith judges more on request (Options): liveness (liveness.go) and,
// for instances that run process.Run, key order and handlings after an
// ack (process.go).
//
// It counts duplicates too. Each violation comes with its evidence.
package soakcheck

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"time"
)

// Kinds of events.
const (
	Produced  = "produced"  // the producer wrote Value at Topic/Partition/Offset
	Delivered = "delivered" // Instance was handed the message
	Acked     = "acked"     // Instance acked it
	Assigned  = "assigned"  // Instance was assigned the partition (OnRebalance)
	Revoked   = "revoked"   // Instance stopped it (OnRebalance)
	Committed = "committed" // the group's committed offset, sampled from Kafka
	Fault     = "fault"     // the nemesis injected a fault (Value names it)
	Healed    = "healed"    // the nemesis healed it (Value names it)
	Frozen    = "frozen"    // the nemesis stopped the instance Value (SIGSTOP)
	Resumed   = "resumed"   // the nemesis resumed it (SIGCONT)
)

// Event is one line of a soak log (JSON).
type Event struct {
	Kind      string `json:"ev"`
	Time      int64  `json:"t"` // Unix nanoseconds
	Instance  string `json:"inst,omitempty"`
	Topic     string `json:"topic,omitempty"`
	Partition int32  `json:"part"`
	Offset    int64  `json:"off"`
	Value     string `json:"val,omitempty"`
	Key       string `json:"key,omitempty"` // the message's key (Produced)
}

// At returns the event's time.
func (e Event) At() time.Time { return time.Unix(0, e.Time) }

// ReadEvents reads a log of JSON lines. A line that does not parse (the
// last one of a process killed while writing it) is skipped and counted.
func ReadEvents(r io.Reader) (events []Event, bad int, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Kind == "" {
			bad++
			continue
		}
		events = append(events, e)
	}
	return events, bad, sc.Err()
}

// Violation is one broken invariant, with its evidence.
type Violation struct {
	Check    string // lost, double-owned, moved back, past unacked, poll skip, not held; liveness; not handled, key order, handled after ack
	Evidence string
}

func (v Violation) String() string { return v.Check + ": " + v.Evidence }

// Report is what Check found.
type Report struct {
	Produced, Delivered, Acked int
	Lost                       int // produced values never handed out
	Duplicates                 int // deliveries of a value beyond its first
	// DuplicatesByCause counts the duplicates by the last fault injected
	// before each (its Value), or "no fault" when none was.
	DuplicatesByCause map[string]int
	DoubleOwned       int // deliveries while another instance also handed out the partition
	MovedBack         int // committed offsets that decreased
	PastUnacked       int // committed offsets past an unacked message
	PollSkips         int
	NotHeld           int           // deliveries outside the instance's hold of the partition
	Unlive            int           // stalls of a partition past Options.Liveness (liveness.go)
	Process           ProcessReport // with Options.Process (process.go)
	Violations        []Violation
}

// OK reports whether no invariant was broken.
func (r *Report) OK() bool { return len(r.Violations) == 0 }

type partition struct {
	topic string
	part  int32
}

func (p partition) String() string { return fmt.Sprintf("%s/%d", p.topic, p.part) }

// hold is one instance's hold of a partition: from an assignment to the
// revocation (or the end of the log), and the deliveries in it.
type hold struct {
	instance   string
	from, to   int64 // to: 0 while open
	deliveries []Event
}

// Check checks the events of a soak run (in any order) and returns the
// report. maxViolations bounds the evidence kept per check (the counts are
// complete). It is CheckWith with nothing more than MaxViolations.
func Check(events []Event, maxViolations int) *Report {
	return CheckWith(events, Options{MaxViolations: maxViolations})
}

// Options says what CheckWith judges beyond the invariants of Check.
type Options struct {
	// MaxViolations bounds the evidence kept per check (the counts are
	// complete).
	MaxViolations int
	// Liveness, when positive, is the window of the liveness check
	// (checkLiveness): once it has passed since the last fault ended,
	// no partition with a message waiting goes that long without a
	// message handed out. The soak gives the session timeout + 15 s.
	Liveness time.Duration
	// Process judges a run whose instances run process.Run with
	// Config.DurableAcks (Handled events; checkProcess): per-key order of
	// first handlings, every message handled, no handling after an ack
	// beyond AckedBound; and a hold's gaps of messages acked before it
	// are no poll skips.
	Process bool
	// AckedBound is how long before the end of its instance's hold of
	// the partition a message may be acked and still be handled again
	// (with Process): see checkRehandled.
	AckedBound time.Duration
}

// CheckWith checks the events of a soak run (in any order) as Check does,
// and what opts asks for, and returns the report.
func CheckWith(events []Event, opts Options) *Report {
	sorted := append([]Event(nil), events...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Time < sorted[j].Time })
	c := &checker{
		opts:     opts,
		report:   &Report{},
		max:      opts.MaxViolations,
		kept:     make(map[string]int),
		produced: make(map[partition][]int64),
		valueAt:  make(map[partition]map[int64]string),
		ackedAt:  make(map[partition]map[int64]int64),
		holds:    make(map[partition][]*hold),
	}
	c.index(sorted)
	c.checkLost(sorted)
	c.checkHolds()
	c.checkCommitted(sorted)
	if opts.Liveness > 0 {
		c.checkLiveness(sorted)
	}
	if opts.Process {
		c.checkProcess(sorted)
	}
	return c.report
}

type checker struct {
	opts   Options
	report *Report
	max    int
	kept   map[string]int // violations kept per check

	produced map[partition][]int64          // produced offsets, sorted
	valueAt  map[partition]map[int64]string // produced values
	ackedAt  map[partition]map[int64]int64  // first ack time of each offset
	holds    map[partition][]*hold          // in order of assignment
}

func (c *checker) violate(check, format string, args ...any) {
	if c.kept[check] >= c.max {
		return
	}
	c.kept[check]++
	c.report.Violations = append(c.report.Violations, Violation{check, fmt.Sprintf(format, args...)})
}

// index builds the produced offsets, the acks and the holds.
func (c *checker) index(events []Event) {
	open := make(map[partition]map[string]*hold) // the open hold of each instance
	for _, e := range events {
		p := partition{e.Topic, e.Partition}
		switch e.Kind {
		case Produced:
			c.report.Produced++
			c.produced[p] = append(c.produced[p], e.Offset)
			if c.valueAt[p] == nil {
				c.valueAt[p] = make(map[int64]string)
			}
			c.valueAt[p][e.Offset] = e.Value
		case Acked:
			c.report.Acked++
			if c.ackedAt[p] == nil {
				c.ackedAt[p] = make(map[int64]int64)
			}
			if _, ok := c.ackedAt[p][e.Offset]; !ok {
				c.ackedAt[p][e.Offset] = e.Time
			}
		case Assigned:
			if open[p] == nil {
				open[p] = make(map[string]*hold)
			}
			if h := open[p][e.Instance]; h != nil {
				h.to = e.Time // assigned again without a revocation: a new hold
			}
			h := &hold{instance: e.Instance, from: e.Time}
			open[p][e.Instance] = h
			c.holds[p] = append(c.holds[p], h)
		case Revoked:
			if h := open[p][e.Instance]; h != nil {
				h.to = e.Time
				delete(open[p], e.Instance)
			}
		case Delivered:
			c.report.Delivered++
			h := open[p][e.Instance]
			if h == nil {
				c.report.NotHeld++
				c.violate("not held", "%s handed out %s@%d (%q) at %s, outside its hold of the partition", e.Instance, p, e.Offset, e.Value, stamp(e.Time))
				continue
			}
			h.deliveries = append(h.deliveries, e)
		}
	}
	for _, offs := range c.produced {
		sort.Slice(offs, func(i, j int) bool { return offs[i] < offs[j] })
	}
}

// checkLost counts produced values never handed out, and duplicates, by
// cause.
func (c *checker) checkLost(events []Event) {
	times := make(map[string]int)
	c.report.DuplicatesByCause = make(map[string]int)
	cause := "no fault"
	for _, e := range events {
		switch e.Kind {
		case Fault:
			cause = e.Value
		case Delivered:
			times[e.Value]++
			if times[e.Value] > 1 {
				c.report.DuplicatesByCause[cause]++
			}
		}
	}
	for p, values := range c.valueAt {
		for off, v := range values {
			switch n := times[v]; {
			case n == 0:
				c.report.Lost++
				c.violate("lost", "%s@%d (%q) was produced and never handed out", p, off, v)
			case n > 1:
				c.report.Duplicates += n - 1
			}
		}
	}
}

// checkHolds checks, per partition, that no two instances handed it out at
// once, and that each hold's deliveries follow the produced offsets.
func (c *checker) checkHolds() {
	for p, holds := range c.holds {
		// The span of each hold: its first to its last delivery.
		for i, a := range holds {
			if len(a.deliveries) == 0 {
				continue
			}
			for _, b := range holds[i+1:] {
				if b.instance == a.instance || len(b.deliveries) == 0 {
					continue
				}
				aFirst, aLast := a.deliveries[0].Time, a.deliveries[len(a.deliveries)-1].Time
				bFirst, bLast := b.deliveries[0].Time, b.deliveries[len(b.deliveries)-1].Time
				if aLast < bFirst || bLast < aFirst {
					continue
				}
				// Overlapping spans: the deliveries of each inside the
				// other's span were made at once.
				n := 0
				for _, d := range a.deliveries {
					if d.Time >= bFirst && d.Time <= bLast {
						n++
					}
				}
				for _, d := range b.deliveries {
					if d.Time >= aFirst && d.Time <= aLast {
						n++
					}
				}
				c.report.DoubleOwned += n
				c.violate("double-owned", "%s handed out by %s from %s to %s and by %s from %s to %s: %d deliveries at once",
					p, a.instance, stamp(aFirst), stamp(aLast), b.instance, stamp(bFirst), stamp(bLast), n)
			}
			c.checkOrder(p, a)
		}
	}
}

// checkOrder checks that a hold's deliveries follow the produced offsets of
// the partition one by one: each is the next produced offset after the
// one before it. A gap is a poll skip; going back is one too (a hold does
// not hand out a message twice).
func (c *checker) checkOrder(p partition, h *hold) {
	produced := c.produced[p]
	for i := 1; i < len(h.deliveries); i++ {
		prev, cur := h.deliveries[i-1].Offset, h.deliveries[i].Offset
		k := sort.Search(len(produced), func(j int) bool { return produced[j] > prev })
		if k < len(produced) && produced[k] == cur {
			continue
		}
		if c.opts.Process && c.ackedBefore(p, prev, cur, h.deliveries[0].Time) {
			continue // DurableAcks: acked before the hold started (process.go)
		}
		want := int64(-1)
		if k < len(produced) {
			want = produced[k]
		}
		c.report.PollSkips++
		c.violate("poll skip", "%s handed out %s@%d after @%d at %s; the next produced offset is %d", h.instance, p, cur, prev, stamp(h.deliveries[i].Time), want)
	}
}

// checkCommitted checks the sampled committed offsets: never back, never
// past a produced message not acked when the offset was seen. The samples
// come in time order, so the produced offsets found acked by one sample
// are acked for every later one: each partition's are walked once.
func (c *checker) checkCommitted(events []Event) {
	last := make(map[partition]Event)
	verified := make(map[partition]int) // produced[p][:n] acked by an earlier sample
	for _, e := range events {
		if e.Kind != Committed || e.Offset < 0 {
			continue
		}
		p := partition{e.Topic, e.Partition}
		if prev, ok := last[p]; ok && e.Offset < prev.Offset {
			c.report.MovedBack++
			c.violate("moved back", "%s committed %d at %s, then %d at %s", p, prev.Offset, stamp(prev.Time), e.Offset, stamp(e.Time))
		}
		last[p] = e
		produced := c.produced[p]
		k := verified[p]
		for ; k < len(produced) && produced[k] < e.Offset; k++ {
			off := produced[k]
			if at, ok := c.ackedAt[p][off]; !ok || at > e.Time {
				c.report.PastUnacked++
				c.violate("past unacked", "%s committed %d at %s, past @%d (%q), not acked by then", p, e.Offset, stamp(e.Time), off, c.valueAt[p][off])
				break
			}
		}
		verified[p] = k
	}
}

func stamp(ns int64) string { return time.Unix(0, ns).UTC().Format("15:04:05.000") }
