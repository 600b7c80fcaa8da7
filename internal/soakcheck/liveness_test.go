package soakcheck

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// The liveness window of the soak: its session timeout (6 s) + 15 s.
const window = 21 * time.Second

// run builds the events of a run in seconds from a base time: messages
// produced every 100 ms to each partition given, and the faults.
type run struct {
	base   time.Time
	events []Event
	offs   map[int32]int64
}

func newRun() *run {
	return &run{base: time.Date(2026, 12, 5, 23, 53, 0, 0, time.UTC), offs: make(map[int32]int64)}
}

func (r *run) at(s float64) int64 {
	return r.base.Add(time.Duration(s * float64(time.Second))).UnixNano()
}

func (r *run) add(e Event) { r.events = append(r.events, e) }

// produce produces to part from from to to (seconds), every 100 ms, and
// returns the first offset and the values.
func (r *run) produce(part int32, from, to float64) {
	for s := from; s < to; s += 0.1 {
		off := r.offs[part]
		r.offs[part]++
		r.add(Event{Kind: Produced, Time: r.at(s), Topic: "soak.0", Partition: part, Offset: off, Value: value(part, off)})
	}
}

func value(part int32, off int64) string { return fmt.Sprintf("p%d-%d", part, off) }

// consume has inst hold part from from to to (seconds) and hand out and
// ack, 50 ms after it was produced, every message produced in that span.
func (r *run) consume(inst string, part int32, from, to float64) {
	r.add(Event{Kind: Assigned, Time: r.at(from), Instance: inst, Topic: "soak.0", Partition: part})
	for _, e := range append([]Event(nil), r.events...) {
		if e.Kind != Produced || e.Partition != part {
			continue
		}
		at := e.Time + int64(50*time.Millisecond)
		if at < r.at(from) || at >= r.at(to) {
			continue
		}
		r.add(Event{Kind: Delivered, Time: at, Instance: inst, Topic: "soak.0", Partition: part, Offset: e.Offset, Value: e.Value})
		r.add(Event{Kind: Acked, Time: at, Instance: inst, Topic: "soak.0", Partition: part, Offset: e.Offset, Value: e.Value})
	}
	r.add(Event{Kind: Revoked, Time: r.at(to), Instance: inst, Topic: "soak.0", Partition: part})
}

func (r *run) fault(kind string, from, to float64) {
	r.add(Event{Kind: Fault, Time: r.at(from), Value: kind})
	r.add(Event{Kind: Healed, Time: r.at(to), Value: kind})
}

func (r *run) end(s float64) { r.add(Event{Kind: End, Time: r.at(s)}) }

// liveness returns the liveness violations of the run.
func (r *run) liveness(t *testing.T) []Violation {
	t.Helper()
	report := CheckWith(r.events, Options{MaxViolations: 10, Liveness: window})
	var found []Violation
	for _, v := range report.Violations {
		if v.Check == "liveness" {
			found = append(found, v)
		}
	}
	if len(found) != report.Unlive && report.Unlive <= 10 {
		t.Errorf("Unlive = %d, %d violations", report.Unlive, len(found))
	}
	return found
}

// wantNone fails the test when the run has a liveness violation (in the
// case named).
func (r *run) wantNone(t *testing.T, what string) {
	t.Helper()
	if found := r.liveness(t); len(found) > 0 {
		t.Fatalf("liveness violations %s: %v", what, found)
	}
}

// TestLivenessNotCoordinatorRun: a partition (soak.0/9) last held by an
// instance that was killed, after the coordinator's broker was killed and
// the ZooKeeper quorum and a broker frozen, is never consumed again in
// the run's remaining 3 minutes, while the other partitions are (held by
// instances that did not lose them). The liveness check must name
// soak.0/9 and the window.
func TestLivenessNotCoordinatorRun(t *testing.T) {
	r := newRun()
	r.produce(9, 0, 120) // the producer stops when the faults end
	r.produce(3, 0, 120)
	r.consume("z0", 9, 0, 40) // killed at 40: no revocation logged
	r.events = r.events[:len(r.events)-1]
	r.consume("i0", 3, 0, 200)
	r.fault("extra instance with CoordinatorZooKeeper killed", 40, 40.2)
	r.fault("group coordinator's broker killed, restarted", 49, 58)
	r.fault("ZooKeeper quorum frozen briefly", 62, 64)
	r.fault("broker frozen (SIGSTOP), resumed", 70, 75)
	r.fault("group switched to Kafka or back (migrate)", 84, 90)
	r.fault("Kafka slow for an instance (latency), healed", 100, 110)
	r.end(264) // caught up never: the 2 minutes of waitCaughtUp ran out
	found := r.liveness(t)
	if len(found) != 1 {
		t.Fatalf("liveness violations %v, want one, of soak.0/9", found)
	}
	for _, want := range []string{"soak.0/9", "23:53:39.950", "to the end of the run", "owed from 23:55:11", "window 21s", "Kafka slow for an instance"} {
		if !strings.Contains(found[0].Evidence, want) {
			t.Errorf("the violation %q does not say %q", found[0], want)
		}
	}
}

// TestLivenessIdlePartition: a partition with nothing produced to it is
// consumed by nobody, which is no violation.
func TestLivenessIdlePartition(t *testing.T) {
	r := newRun()
	r.produce(3, 0, 100)
	r.produce(9, 0, 5) // then nothing more
	r.consume("i0", 3, 0, 110)
	r.consume("i1", 9, 0, 110)
	r.fault("instance killed (kill -9), restarted", 10, 10.1)
	r.end(110)
	r.wantNone(t, "of an idle partition")
}

// TestLivenessRunEnd: a fault that ends less than the window before the
// end of the run leaves no time to judge.
func TestLivenessRunEnd(t *testing.T) {
	r := newRun()
	r.produce(9, 0, 60)
	r.consume("i0", 9, 0, 50)
	r.fault("broker killed, restarted", 45, 50)
	r.end(60) // 10 s after the heal
	r.wantNone(t, "at the run's end")
}

// TestLivenessOverlappingFaults: a stall that each next fault starts
// within the window of the last one is judged from the last heal.
func TestLivenessOverlappingFaults(t *testing.T) {
	r := newRun()
	r.produce(9, 0, 100)
	r.consume("i0", 9, 0, 20)
	r.fault("instance killed (kill -9), restarted", 20, 20.1)
	r.fault("broker frozen (SIGSTOP), resumed", 35, 40)
	r.fault("ZooKeeper quorum frozen briefly", 55, 57)
	r.consume("i1", 9, 75, 100) // 18 s after the last heal
	r.end(100)
	r.wantNone(t, "under overlapping faults")
}

// TestLivenessStallWithoutFault: a partition that stops being consumed
// with no fault at all is a violation once the window passed.
func TestLivenessStallWithoutFault(t *testing.T) {
	r := newRun()
	r.produce(9, 0, 100)
	r.fault("topic created (the white list picks it up)", 1, 1)
	r.consume("i0", 9, 0, 40)
	r.consume("i1", 9, 70, 100) // 30 s without, the window 21 s
	r.end(100)
	found := r.liveness(t)
	if len(found) != 1 || !strings.Contains(found[0].Evidence, "soak.0/9") {
		t.Fatalf("liveness violations %v, want one of soak.0/9", found)
	}
}
