package soakcheck

import (
	"testing"
	"time"
)

// processRun builds the events of process.Run instances on partition
// soak.0/0, times in seconds: messages @0…@n-1 produced at 0, 0.1, …, with
// the keys given in turn.
type processRun struct{ *run }

func newProcessRun(keys ...string) *processRun {
	r := &processRun{newRun()}
	for i, k := range keys {
		r.add(Event{Kind: Produced, Time: r.at(float64(i) / 10), Topic: "soak.0", Offset: int64(i), Value: value(0, int64(i)), Key: k})
	}
	return r
}

func (r *processRun) ev(kind, inst string, s float64, off int64) {
	r.add(Event{Kind: kind, Time: r.at(s), Instance: inst, Topic: "soak.0", Offset: off, Value: value(0, off)})
}

// handle has inst hand out, handle and ack @off at s.
func (r *processRun) handle(inst string, s float64, off int64) {
	r.ev(Delivered, inst, s, off)
	r.ev(Handled, inst, s+0.01, off)
	r.ev(Acked, inst, s+0.02, off)
}

func (r *processRun) check(t *testing.T) *Report {
	t.Helper()
	return CheckWith(r.events, Options{MaxViolations: 10, Process: true, AckedBound: 7 * time.Second})
}

func onlyViolations(t *testing.T, report *Report, check string) {
	t.Helper()
	for _, v := range report.Violations {
		if v.Check != check {
			t.Errorf("unexpected violation %s", v)
		}
	}
	if check != "" && len(report.Violations) == 0 {
		t.Errorf("no %s violation: %+v", check, report)
	}
}

func TestProcessCleanRunWithAMove(t *testing.T) {
	r := newProcessRun("a", "b", "a", "b")
	r.ev(Assigned, "i0", 1, 0)
	r.handle("i0", 1, 0)
	r.handle("i0", 1.1, 1)
	r.ev(Delivered, "i0", 1.2, 2) // @2 handed out, not handled: revoked
	r.ev(Revoked, "i0", 2, 0)
	r.ev(Assigned, "i1", 3, 0)
	r.handle("i1", 3, 2)
	r.handle("i1", 3.1, 3)
	report := r.check(t)
	onlyViolations(t, report, "")
	if report.Process.Handled != 4 || report.Process.AckedAgain != 0 {
		t.Fatalf("report %+v", report.Process)
	}
}

func TestProcessKeyOrder(t *testing.T) {
	r := newProcessRun("a", "b", "a")
	r.ev(Assigned, "i0", 1, 0)
	r.ev(Delivered, "i0", 1, 0)
	r.ev(Delivered, "i0", 1.01, 1)
	r.ev(Delivered, "i0", 1.02, 2)
	r.ev(Handled, "i0", 1.1, 2) // @2 of key a before @0
	r.ev(Handled, "i0", 1.2, 0)
	r.ev(Handled, "i0", 1.3, 1)
	for off := range int64(3) {
		r.ev(Acked, "i0", 1.4, off)
	}
	report := r.check(t)
	onlyViolations(t, report, "key order")
	if report.Process.KeyOrder != 1 {
		t.Fatalf("KeyOrder = %d, want 1", report.Process.KeyOrder)
	}
}

func TestProcessNotHandled(t *testing.T) {
	r := newProcessRun("a", "b")
	r.ev(Assigned, "i0", 1, 0)
	r.handle("i0", 1, 0)
	r.ev(Delivered, "i0", 1.1, 1)
	r.ev(Acked, "i0", 1.2, 1) // acked, never handled
	report := r.check(t)
	onlyViolations(t, report, "not handled")
}

// TestProcessAckedHandledAgain: i0 acks @1 beyond the unacked @0 and
// holds the partition 10 s more, past the bound, before it is revoked:
// its commits carried @1, which i1 must not handle again.
func TestProcessAckedHandledAgain(t *testing.T) {
	r := newProcessRun("a", "b", "c")
	r.ev(Assigned, "i0", 1, 0)
	r.ev(Delivered, "i0", 1, 0)
	r.ev(Handled, "i0", 1, 0)
	r.handle("i0", 1.1, 1)
	r.ev(Delivered, "i0", 11, 2)
	r.ev(Revoked, "i0", 12, 0)
	r.ev(Assigned, "i1", 13, 0)
	r.handle("i1", 13, 0)
	r.handle("i1", 13.1, 1) // again
	r.handle("i1", 13.2, 2)
	report := r.check(t)
	onlyViolations(t, report, "handled after ack")
	if report.Process.PastBound != 1 {
		t.Fatalf("PastBound = %d, want 1", report.Process.PastBound)
	}
}

// TestProcessAckedHandledAgainAfterAKill: i0 acks @1 and is killed 0.5 s
// later, before a commit could carry it: i1 handling it again is within
// the bound; and i1's hold, which starts after @1 was acked by i0 and
// hands out @2 after @0, skips no message.
func TestProcessAckedHandledAgainAfterAKill(t *testing.T) {
	r := newProcessRun("a", "b", "c", "d")
	r.ev(Assigned, "i0", 1, 0)
	r.ev(Delivered, "i0", 1, 0)
	r.ev(Handled, "i0", 1, 0)
	r.handle("i0", 1.1, 1)
	r.handle("i0", 1.5, 2)
	r.ev(Fault, "", 1.6, 0)
	r.ev(Assigned, "i1", 9, 0)
	r.handle("i1", 9, 0)
	r.handle("i1", 9.1, 1) // again, within the bound
	r.handle("i1", 9.2, 3) // @2 acked in the set the commit carried: skipped
	report := r.check(t)
	onlyViolations(t, report, "")
	if report.Process.AckedAgain != 1 {
		t.Fatalf("AckedAgain = %d, want 1", report.Process.AckedAgain)
	}
}

// TestProcessAckedHandledAgainAfterAFreeze: i0 acks @1 and is frozen
// (SIGSTOP) 0.1 s later, before a commit could carry it, for 8 s; once
// resumed it learns it lost the partition, takes it again and handles @1
// again. Its hold ended 8.2 s after the ack by the clock, but it ran for
// 0.2 s of them: within the bound. Without the freeze events it would
// be past it.
func TestProcessAckedHandledAgainAfterAFreeze(t *testing.T) {
	r := newProcessRun("a", "b", "c")
	r.ev(Assigned, "i0", 1, 0)
	r.ev(Delivered, "i0", 1, 0)
	r.ev(Handled, "i0", 1, 0)
	r.handle("i0", 1.1, 1)
	r.add(Event{Kind: Frozen, Time: r.at(1.22), Value: "i0"})
	r.add(Event{Kind: Resumed, Time: r.at(9.22), Value: "i0"})
	r.ev(Revoked, "i0", 9.3, 0)
	r.ev(Assigned, "i0", 9.5, 0)
	r.handle("i0", 9.5, 0)
	r.handle("i0", 9.6, 1) // again, within the bound of running time
	r.handle("i0", 9.7, 2)
	report := r.check(t)
	onlyViolations(t, report, "")
	if report.Process.AckedAgain != 1 {
		t.Fatalf("AckedAgain = %d, want 1", report.Process.AckedAgain)
	}
}
