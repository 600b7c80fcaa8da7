package soakcheck

import (
	"math"
	"sort"
	"time"
)

// End marks the end of the run's consumption (the driver stops the
// instances right after it): liveness is judged up to it, or up to the
// last event of a log without one.
const End = "end"

// span is a time interval [from, to), Unix nanoseconds.
type span struct{ from, to int64 }

// excuse is a span during which a partition may go unconsumed: from a
// fault's injection to the window after its heal, and what it names.
type excuse struct {
	span
	fault  string
	healed int64
}

// checkLiveness judges that every partition is consumed again within
// Options.Liveness (the window) after each fault ended. It is judged at
// every calm moment: from the first fault to the run's end, outside
// every span from a fault's injection to the window after its heal
// (faults that follow each other closer than the window make one long
// excuse, judged from the last heal). At a calm moment t, a partition
// breaks it when a message produced to it at t - window or before was not
// handed out by t, and nothing of the partition was handed out in the
// window before t. So a partition with nothing produced to it breaks
// nothing, and neither does a fault that ended less than the window
// before the run's end. Each stall that breaks it is one violation, with
// the partition, the stall, the message waiting, and the last fault.
func (c *checker) checkLiveness(events []Event) {
	window := int64(c.opts.Liveness)
	excuses, start, end := faultExcuses(events, window)
	if start == 0 {
		return // no fault: nothing to judge after
	}
	calm := calmSpans(excuses, start, end)
	if len(calm) == 0 {
		return
	}
	delivered := make(map[partition][]int64)              // delivery times, sorted
	firstDelivered := make(map[partition]map[int64]int64) // offset -> first delivery time
	producedAt := make(map[partition][]Event)             // produced messages, by time
	for _, e := range events {
		p := partition{e.Topic, e.Partition}
		switch e.Kind {
		case Delivered:
			delivered[p] = append(delivered[p], e.Time)
			if firstDelivered[p] == nil {
				firstDelivered[p] = make(map[int64]int64)
			}
			if _, ok := firstDelivered[p][e.Offset]; !ok {
				firstDelivered[p][e.Offset] = e.Time
			}
		case Produced:
			producedAt[p] = append(producedAt[p], e)
		}
	}
	parts := make([]partition, 0, len(producedAt))
	for p := range producedAt {
		parts = append(parts, p)
	}
	sort.Slice(parts, func(i, j int) bool {
		return parts[i].topic < parts[j].topic || parts[i].topic == parts[j].topic && parts[i].part < parts[j].part
	})
	for _, p := range parts {
		c.judgePartition(p, producedAt[p], delivered[p], firstDelivered[p], calm, excuses, window, end)
	}
}

// faultExcuses pairs each fault with its heal (a fault never healed
// lasts to the end) and returns the spans they excuse, the first fault's
// time (0 without one) and the end of the run.
func faultExcuses(events []Event, window int64) (excuses []excuse, start, end int64) {
	open := make(map[string][]int64) // injection times of the faults not healed, by kind
	for _, e := range events {
		end = max(end, e.Time)
		switch e.Kind {
		case Fault:
			if start == 0 {
				start = e.Time
			}
			open[e.Value] = append(open[e.Value], e.Time)
		case Healed:
			if at := open[e.Value]; len(at) > 0 {
				excuses = append(excuses, excuse{span{at[0], e.Time + window}, e.Value, e.Time})
				open[e.Value] = at[1:]
			}
		}
	}
	for _, e := range events {
		if e.Kind == End {
			end = e.Time
		}
	}
	for kind, at := range open {
		for _, t := range at {
			excuses = append(excuses, excuse{span{t, math.MaxInt64}, kind, math.MaxInt64})
		}
	}
	sort.Slice(excuses, func(i, j int) bool { return excuses[i].from < excuses[j].from })
	return excuses, start, end
}

// calmSpans returns [start, end) without the excuses, in order.
func calmSpans(excuses []excuse, start, end int64) []span {
	var calm []span
	t := start
	for _, x := range excuses {
		if x.from > t {
			calm = append(calm, span{t, min(x.from, end)})
		}
		t = max(t, x.to)
		if t >= end {
			break
		}
	}
	if t < end {
		calm = append(calm, span{t, end})
	}
	var kept []span
	for _, s := range calm {
		if s.from < s.to {
			kept = append(kept, s)
		}
	}
	return kept
}

// judgePartition finds the stalls of p that break liveness. A stall is a
// gap between two deliveries (or before the first, or after the last)
// longer than the window; within it, the moments at which liveness is
// owed are from the window after its last delivery, and after the oldest
// message waiting then had waited the window, to the next delivery.
func (c *checker) judgePartition(p partition, produced []Event, delivered []int64, first map[int64]int64, calm []span, excuses []excuse, window, end int64) {
	sort.Slice(delivered, func(i, j int) bool { return delivered[i] < delivered[j] })
	gap := func(since, next int64) {
		// The oldest message not handed out by since.
		var waiting *Event
		for i := range produced {
			if at, ok := first[produced[i].Offset]; !ok || at > since {
				waiting = &produced[i]
				break
			}
		}
		if waiting == nil {
			return
		}
		owed := span{max(since, waiting.Time) + window, min(next, end)}
		if since == math.MinInt64 {
			owed.from = waiting.Time + window
		}
		at, ok := firstCalm(owed, calm)
		if !ok {
			return
		}
		c.report.Unlive++
		last := lastExcuse(excuses, at)
		stall := "nothing handed out"
		if since != math.MinInt64 {
			stall += " since " + stamp(since)
		}
		if next == math.MaxInt64 || next > end {
			stall += " to the end of the run at " + stamp(end)
		} else {
			stall += " to " + stamp(next)
		}
		after := "no fault before"
		if last != nil {
			after = "the last fault before, " + last.fault + ", ended at " + stamp(last.healed)
		}
		c.violate("liveness", "%s: %s, while @%d (%q, produced %s) waited; owed from %s (%s; window %s)",
			p, stall, waiting.Offset, waiting.Value, stamp(waiting.Time), stamp(at), after, time.Duration(window))
	}
	prev := int64(math.MinInt64)
	for _, d := range delivered {
		if prev == math.MinInt64 || d-prev > window {
			gap(prev, d)
		}
		prev = d
	}
	gap(prev, math.MaxInt64)
}

// firstCalm returns the first moment of s that is calm.
func firstCalm(s span, calm []span) (int64, bool) {
	for _, c := range calm {
		from, to := max(s.from, c.from), min(s.to, c.to)
		if from < to {
			return from, true
		}
	}
	return 0, false
}

// lastExcuse returns the excuse of the fault healed last before t.
func lastExcuse(excuses []excuse, t int64) *excuse {
	var last *excuse
	for i := range excuses {
		if x := &excuses[i]; x.healed <= t && (last == nil || x.healed > last.healed) {
			last = x
		}
	}
	return last
}
