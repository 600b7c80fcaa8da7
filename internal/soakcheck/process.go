package soakcheck

import (
	"sort"
	"time"
)

// Handled is the kind of event of a handler call of process.Run: Instance
// began handling the message (each attempt is one).
const Handled = "handled"

// ProcessReport is what Options.Process judged.
type ProcessReport struct {
	Handled    int // handler calls
	NotHandled int // messages handed out and never handled
	KeyOrder   int // first handlings out of their key's offset order
	AckedAgain int // acked messages handled again, within Options.AckedBound
	PastBound  int // acked messages handled again beyond it
}

// message is a produced message as the process checks see it.
type message struct {
	p     partition
	off   int64
	key   string
	value string
}

// handling is the first handler call of a message.
type handling struct {
	at   int64
	inst string
}

// checkProcess judges the runs of process.Run with DurableAcks:
//
//   - not handled: every message handed out was handled at least once;
//   - key order: the first handlings of the messages of one key of a
//     partition follow their offsets (process's "Order across a
//     rebalance");
//   - acked then handled again: see checkRehandled.
func (c *checker) checkProcess(events []Event) {
	byValue := make(map[string]message)
	first := make(map[string]handling)
	delivered := make(map[string]bool)
	for _, e := range events {
		p := partition{e.Topic, e.Partition}
		switch e.Kind {
		case Produced:
			byValue[e.Value] = message{p, e.Offset, e.Key, e.Value}
		case Delivered:
			delivered[e.Value] = true
		case Handled:
			c.report.Process.Handled++
			if _, ok := first[e.Value]; !ok {
				first[e.Value] = handling{e.Time, e.Instance}
			}
		}
	}
	c.checkHandled(byValue, delivered, first)
	c.checkKeyOrder(byValue, first)
	c.checkRehandled(events, byValue)
}

// checkHandled reports the messages handed out and never handled.
func (c *checker) checkHandled(byValue map[string]message, delivered map[string]bool, first map[string]handling) {
	for _, m := range sortedMessages(byValue) {
		if _, ok := first[m.value]; delivered[m.value] && !ok {
			c.report.Process.NotHandled++
			c.violate("not handled", "%s@%d (%q) was handed out and never handled", m.p, m.off, m.value)
		}
	}
}

// checkKeyOrder reports the first handlings that come before the first
// handling of an earlier message of their key and partition.
func (c *checker) checkKeyOrder(byValue map[string]message, first map[string]handling) {
	type keyOf struct {
		p   partition
		key string
	}
	last := make(map[keyOf]message) // the key's message handled first most recently, in offset order
	for _, m := range sortedMessages(byValue) {
		h, ok := first[m.value]
		if !ok || m.key == "" {
			continue
		}
		k := keyOf{m.p, m.key}
		if prev, ok := last[k]; ok && first[prev.value].at > h.at {
			ph := first[prev.value]
			c.report.Process.KeyOrder++
			c.violate("key order", "%s key %q: @%d (%q) first handled by %s at %s, before @%d (%q), first handled by %s at %s",
				m.p, m.key, m.off, m.value, h.inst, stamp(h.at), prev.off, prev.value, ph.inst, stamp(ph.at))
			continue // judge the next against the later of the two
		}
		last[k] = m
	}
}

// checkRehandled judges the handlings of a message after its first ack,
// against the bound of Config.DurableAcks: a commit carries every ack
// made before it, beyond the committed offset too, and a partition that
// starts hands none of them out again; so an acked message is handled
// again only when no commit of its partition followed the ack before the
// acking instance's hold of the partition ended ("what was acked since
// the last commit"). The instance commits every auto-commit interval and
// in its final commit, and one that cannot commit loses the partition
// within its session timeout; so the hold's end, the last event of the
// acking instance on the partition before the new handling (its
// revocation, or its last delivery, ack or handling before it was killed,
// frozen or fenced), comes at most Options.AckedBound after the ack, in
// the instance's running time: the time it was frozen (the nemesis's
// Frozen to Resumed) does not count, since a stopped process neither
// commits nor learns that its session ended. A handling again later is a
// violation.
func (c *checker) checkRehandled(events []Event, byValue map[string]message) {
	type instPart struct {
		inst string
		p    partition
	}
	life := make(map[instPart][]int64) // the times of an instance's events on a partition
	acked := make(map[string]Event)    // the first ack of each value
	frozen := frozenSpans(events)
	for _, e := range events {
		switch e.Kind {
		case Delivered, Acked, Handled, Revoked:
			k := instPart{e.Instance, partition{e.Topic, e.Partition}}
			life[k] = append(life[k], e.Time)
		}
		if _, ok := acked[e.Value]; e.Kind == Acked && !ok {
			acked[e.Value] = e
		}
	}
	seen := make(map[string]bool)
	for _, e := range events {
		a, ok := acked[e.Value]
		if e.Kind != Handled || !ok || e.Time <= a.Time || seen[e.Value] {
			continue
		}
		seen[e.Value] = true // the first handling after the ack judges the message
		m := byValue[e.Value]
		end := c.holdEnd(m.p, a, e.Time, life[instPart{a.Instance, m.p}])
		stopped := overlap(frozen[a.Instance], a.Time, end)
		if end-a.Time-stopped <= int64(c.opts.AckedBound) {
			c.report.Process.AckedAgain++
			continue
		}
		c.report.Process.PastBound++
		c.violate("handled after ack", "%s@%d (%q) acked by %s at %s, handled again by %s at %s; %s held the partition until %s, %s after the ack, %s of it frozen (bound %s)",
			m.p, m.off, m.value, a.Instance, stamp(a.Time), e.Instance, stamp(e.Time), a.Instance, stamp(end),
			time.Duration(end-a.Time).Round(time.Millisecond), time.Duration(stopped).Round(time.Millisecond), c.opts.AckedBound)
	}
}

// frozenSpans returns, by instance, the spans from each Frozen event to
// its Resumed (open to the end when none follows).
func frozenSpans(events []Event) map[string][]span {
	spans := make(map[string][]span)
	for _, e := range events {
		switch e.Kind {
		case Frozen:
			spans[e.Value] = append(spans[e.Value], span{from: e.Time})
		case Resumed:
			if s := spans[e.Value]; len(s) > 0 && s[len(s)-1].to == 0 {
				s[len(s)-1].to = e.Time
			}
		}
	}
	return spans
}

// overlap returns how much of [from, to] the spans cover.
func overlap(spans []span, from, to int64) int64 {
	var d int64
	for _, s := range spans {
		end := s.to
		if end == 0 {
			end = to
		}
		if lo, hi := max(s.from, from), min(end, to); hi > lo {
			d += hi - lo
		}
	}
	return d
}

// holdEnd returns the end of the hold of p by the instance of the ack a,
// as seen before the time before: the last of the instance's event times
// on p (sorted) up to the hold's revocation and before.
func (c *checker) holdEnd(p partition, a Event, before int64, times []int64) int64 {
	limit := before
	for _, h := range c.holds[p] {
		if h.instance == a.Instance && h.from <= a.Time && (h.to == 0 || h.to >= a.Time) {
			if h.to != 0 {
				limit = min(limit, h.to)
			}
			break
		}
	}
	i := sort.Search(len(times), func(i int) bool { return times[i] > limit })
	if i == 0 {
		return a.Time
	}
	return max(times[i-1], a.Time)
}

// ackedBefore tells whether every produced offset of p between prev and
// cur was acked before t: with DurableAcks a hold that starts hands none
// of them out.
func (c *checker) ackedBefore(p partition, prev, cur, t int64) bool {
	produced := c.produced[p]
	k := sort.Search(len(produced), func(j int) bool { return produced[j] > prev })
	for ; k < len(produced) && produced[k] < cur; k++ {
		if at, ok := c.ackedAt[p][produced[k]]; !ok || at >= t {
			return false
		}
	}
	return true
}

// sortedMessages returns the messages by partition and offset.
func sortedMessages(byValue map[string]message) []message {
	ms := make([]message, 0, len(byValue))
	for _, m := range byValue {
		ms = append(ms, m)
	}
	sort.Slice(ms, func(i, j int) bool {
		a, b := ms[i], ms[j]
		if a.p != b.p {
			return a.p.topic < b.p.topic || a.p.topic == b.p.topic && a.p.part < b.p.part
		}
		return a.off < b.off
	})
	return ms
}
