package soakcheck

import (
	"strings"
	"testing"
)

// log builds the events of a run: a topic "t" with partition 0, messages
// v0…v{n-1} produced at offsets 0…n-1 at times 1…n.
type log struct{ events []Event }

func (l *log) add(kind, inst string, t int64, off int64, val string) *log {
	l.events = append(l.events, Event{Kind: kind, Time: t, Instance: inst, Topic: "t", Partition: 0, Offset: off, Value: val})
	return l
}

func produced(n int) *log {
	l := &log{}
	for i := 0; i < n; i++ {
		l.add(Produced, "", int64(i+1), int64(i), val(i))
	}
	return l
}

func val(i int) string { return "v" + string(rune('a'+i)) }

// consume has inst hold the partition from time from, and deliver and ack
// offsets first…last one time unit apart from time start.
func (l *log) consume(inst string, from, start int64, first, last int) *log {
	l.add(Assigned, inst, from, 0, "")
	t := start
	for i := first; i <= last; i++ {
		l.add(Delivered, inst, t, int64(i), val(i))
		l.add(Acked, inst, t, int64(i), val(i))
		t++
	}
	return l
}

func checkOnly(t *testing.T, l *log, want string, count func(*Report) int) *Report {
	t.Helper()
	r := Check(l.events, 10)
	if want == "" {
		if !r.OK() {
			t.Fatalf("violations in a clean run: %v", r.Violations)
		}
		return r
	}
	if count(r) == 0 || len(r.Violations) == 0 {
		t.Fatalf("no %s found; report %+v", want, r)
	}
	for _, v := range r.Violations {
		if v.Check != want {
			t.Errorf("unexpected violation %s", v)
		}
	}
	return r
}

func TestCleanRun(t *testing.T) {
	l := produced(6).consume("a", 0, 10, 0, 2)
	l.add(Committed, "", 13, 3, "")
	l.add(Revoked, "a", 14, 0, "")
	l.consume("b", 15, 20, 3, 5)
	l.add(Committed, "", 30, 6, "")
	r := checkOnly(t, l, "", nil)
	if r.Produced != 6 || r.Delivered != 6 || r.Duplicates != 0 {
		t.Fatalf("report %+v", r)
	}
}

func TestLost(t *testing.T) {
	l := produced(4).consume("a", 0, 10, 0, 1) // v2 and v3 never handed out
	r := checkOnly(t, l, "lost", func(r *Report) int { return r.Lost })
	if r.Lost != 2 {
		t.Fatalf("Lost = %d, want 2", r.Lost)
	}
}

func TestDoubleOwned(t *testing.T) {
	// a keeps handing out after b took the partition: 12-14 and 13-15.
	l := produced(6).consume("a", 0, 12, 0, 2)
	l.consume("b", 11, 13, 0, 2)
	r := Check(l.events, 10)
	if r.DoubleOwned == 0 {
		t.Fatalf("no double-owned delivery found: %+v", r)
	}
	found := false
	for _, v := range r.Violations {
		if v.Check == "double-owned" && strings.Contains(v.Evidence, "t/0") {
			found = true
		}
	}
	if !found {
		t.Fatalf("violations %v", r.Violations)
	}
}

func TestCommittedMovesBack(t *testing.T) {
	l := produced(4).consume("a", 0, 10, 0, 3)
	l.add(Committed, "", 20, 4, "")
	l.add(Committed, "", 21, 2, "")
	r := checkOnly(t, l, "moved back", func(r *Report) int { return r.MovedBack })
	if r.MovedBack != 1 {
		t.Fatalf("MovedBack = %d", r.MovedBack)
	}
}

func TestCommittedPastUnacked(t *testing.T) {
	l := produced(4)
	l.add(Assigned, "a", 0, 0, "")
	for i := 0; i < 4; i++ {
		l.add(Delivered, "a", int64(10+i), int64(i), val(i))
		if i != 1 {
			l.add(Acked, "a", int64(10+i), int64(i), val(i))
		}
	}
	l.add(Committed, "", 20, 3, "") // past @1, never acked
	checkOnly(t, l, "past unacked", func(r *Report) int { return r.PastUnacked })
}

func TestPollSkip(t *testing.T) {
	l := produced(5)
	l.add(Assigned, "a", 0, 0, "")
	for _, i := range []int{0, 1, 3, 4} { // @2 skipped
		l.add(Delivered, "a", int64(10+i), int64(i), val(i))
		l.add(Acked, "a", int64(10+i), int64(i), val(i))
	}
	l.add(Revoked, "a", 20, 0, "")
	l.consume("b", 21, 22, 2, 2) // the next owner hands @2 out: not lost
	r := checkOnly(t, l, "poll skip", func(r *Report) int { return r.PollSkips })
	if r.PollSkips != 1 || r.Lost != 0 {
		t.Fatalf("PollSkips = %d, Lost = %d", r.PollSkips, r.Lost)
	}
}

func TestGapsOfUnproducedOffsetsAreNoSkips(t *testing.T) {
	// Offsets 0, 1, 5, 6 produced (transaction markers, compaction).
	l := &log{}
	for i, off := range []int64{0, 1, 5, 6} {
		l.add(Produced, "", int64(i+1), off, val(i))
	}
	l.add(Assigned, "a", 0, 0, "")
	for i, off := range []int64{0, 1, 5, 6} {
		l.add(Delivered, "a", int64(10+i), off, val(i))
		l.add(Acked, "a", int64(10+i), off, val(i))
	}
	l.add(Committed, "", 20, 7, "")
	checkOnly(t, l, "", nil)
}

func TestNotHeld(t *testing.T) {
	l := produced(2).consume("a", 0, 10, 0, 0)
	l.add(Revoked, "a", 11, 0, "")
	l.add(Delivered, "a", 12, 1, val(1)) // after the revocation
	l.add(Acked, "a", 12, 1, val(1))
	checkOnly(t, l, "not held", func(r *Report) int { return r.NotHeld })
}

func TestDuplicatesAreCounted(t *testing.T) {
	l := produced(3).consume("a", 0, 10, 0, 2)
	l.add(Fault, "", 13, 0, "kill")
	l.add(Revoked, "a", 13, 0, "")
	l.consume("b", 14, 15, 1, 2) // @1 and @2 again, after the move
	r := checkOnly(t, l, "", nil)
	if r.Duplicates != 2 || r.DuplicatesByCause["kill"] != 2 {
		t.Fatalf("Duplicates = %d, by cause %v; want 2, all after the kill", r.Duplicates, r.DuplicatesByCause)
	}
}

func TestReadEventsSkipsATornLine(t *testing.T) {
	in := `{"ev":"produced","t":1,"topic":"t","part":0,"off":0,"val":"x"}
{"ev":"delivered","t":2,"inst":"a","topic":"t","part":0,"off":0,"val":"x"}
{"ev":"acked","t":3,"inst":"a","top`
	events, bad, err := ReadEvents(strings.NewReader(in))
	if err != nil || len(events) != 2 || bad != 1 {
		t.Fatalf("ReadEvents = %d events, %d bad, %v", len(events), bad, err)
	}
}
