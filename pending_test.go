package kafkaconsumer

import (
	"math/rand"
	"reflect"
	"testing"
	"testing/quick"

	"github.com/kafkaconsumer/kafkaconsumer/internal/commitmark"
)

func TestPendingAcksInOrder(t *testing.T) {
	t.Parallel()
	p := newPendingAcks(10)
	if got := p.commitOffset(); got != -1 {
		t.Fatalf("commit offset before any ack = %d, want -1", got)
	}
	for o := int64(5); o < 8; o++ {
		if !p.push(o) {
			t.Fatalf("push(%d) refused", o)
		}
	}
	for o := int64(5); o < 8; o++ {
		known, advanced := p.ack(o)
		if !known || !advanced {
			t.Fatalf("ack(%d) = %v, %v; want true, true", o, known, advanced)
		}
		if got := p.commitOffset(); got != o+1 {
			t.Fatalf("after ack(%d) commit offset = %d, want %d", o, got, o+1)
		}
	}
	if p.pending() != 0 || p.size() != 0 {
		t.Fatalf("pending %d, size %d after all acks", p.pending(), p.size())
	}
}

func TestPendingAcksOutOfOrderCommitsPrefixOnly(t *testing.T) {
	t.Parallel()
	p := newPendingAcks(10)
	for o := int64(0); o < 5; o++ {
		p.push(o)
	}
	if known, advanced := p.ack(3); !known || advanced {
		t.Fatalf("ack(3) = %v, %v; want known, not advanced", known, advanced)
	}
	if got := p.commitOffset(); got != -1 {
		t.Fatalf("commit offset with 0 unacked = %d, want -1", got)
	}
	p.ack(0)
	if got := p.commitOffset(); got != 1 {
		t.Fatalf("commit offset = %d, want 1 (message 1 is not acked)", got)
	}
	p.ack(2)
	p.ack(1)
	if got := p.commitOffset(); got != 4 {
		t.Fatalf("commit offset = %d, want 4", got)
	}
}

func TestPendingAcksDoubleAndStaleAcks(t *testing.T) {
	t.Parallel()
	p := newPendingAcks(10)
	p.push(10)
	p.push(11)
	if known, _ := p.ack(11); !known {
		t.Fatal("first ack(11) unknown")
	}
	if known, _ := p.ack(11); known {
		t.Fatal("second ack(11) counted")
	}
	if known, _ := p.ack(3); known {
		t.Fatal("stale ack(3) counted")
	}
	if known, _ := p.ack(99); known {
		t.Fatal("ack of an offset never handed out counted")
	}
	p.ack(10)
	if known, _ := p.ack(10); known {
		t.Fatal("ack(10) after it was committed counted")
	}
	if got := p.commitOffset(); got != 12 {
		t.Fatalf("commit offset = %d, want 12", got)
	}
}

func TestPendingAcksGapsInOffsets(t *testing.T) {
	t.Parallel()
	p := newPendingAcks(10)
	for _, o := range []int64{3, 7, 8, 20} { // compacted topic
		p.push(o)
	}
	p.ack(3)
	if got := p.commitOffset(); got != 7 {
		t.Fatalf("commit offset = %d, want 7", got)
	}
	p.ack(20)
	p.ack(8)
	p.ack(7)
	if got := p.commitOffset(); got != 21 {
		t.Fatalf("commit offset = %d, want 21", got)
	}
}

func TestPendingAcksLimit(t *testing.T) {
	t.Parallel()
	p := newPendingAcks(3)
	for o := int64(0); o < 3; o++ {
		if !p.push(o) {
			t.Fatalf("push(%d) refused below the limit", o)
		}
	}
	if !p.full() || p.push(3) {
		t.Fatal("push beyond the limit accepted")
	}
	p.ack(1) // acked after an unacked one: still counts
	if p.push(3) {
		t.Fatal("push accepted while the prefix is not acked")
	}
	p.ack(0)
	if !p.push(3) {
		t.Fatal("push refused after the prefix was acked")
	}
}

func TestPendingAcksUnpush(t *testing.T) {
	t.Parallel()
	p := newPendingAcks(3)
	p.push(0)
	p.ack(0)
	p.push(1)
	p.unpushFrom(1)
	if p.pending() != 0 || p.commitOffset() != 1 {
		t.Fatalf("after unpush: pending %d, commit %d; want 0, 1", p.pending(), p.commitOffset())
	}
}

// TestPendingAcksUnpushAfterStaleAck: a stale ack (of an earlier owner's
// hand-out of the same offset) may resolve an entry that was entered but
// not sent yet; taking the unsent entries back must not count it twice, or
// waitForAcks returns while a message is still pending.
func TestPendingAcksUnpushAfterStaleAck(t *testing.T) {
	t.Parallel()
	p := newPendingAcks(10)
	p.push(0) // sent
	p.push(1) // entered, not sent
	p.push(2) // entered, not sent
	if known, _ := p.ack(2); !known {
		t.Fatal("ack(2) unknown")
	}
	p.unpushFrom(1)
	if p.pending() != 1 || p.size() != 1 {
		t.Fatalf("after unpushFrom(1): pending %d, size %d; want 1, 1 (offset 0 is still out)", p.pending(), p.size())
	}
	if known, _ := p.ack(0); !known || p.pending() != 0 || p.commitOffset() != 1 {
		t.Fatalf("after ack(0): known %v, pending %d, commit %d; want true, 0, 1", known, p.pending(), p.commitOffset())
	}

	// A stale ack of the head entry drops it from the prefix at once.
	p = newPendingAcks(10)
	p.push(5)
	p.push(6)
	p.ack(5)
	p.unpushFrom(5)
	if p.pending() != 0 || p.size() != 0 || p.commitOffset() != 6 {
		t.Fatalf("after a stale ack of the head: pending %d, size %d, commit %d; want 0, 0, 6", p.pending(), p.size(), p.commitOffset())
	}
}

func TestPendingAcksWithdrawStopsCommits(t *testing.T) {
	t.Parallel()
	p := newPendingAcks(10)
	for o := int64(0); o < 4; o++ {
		p.push(o)
	}
	p.ack(0)
	if !p.withdraw(1) {
		t.Fatal("withdraw(1) unknown")
	}
	p.ack(2)
	p.ack(3)
	if p.pending() != 0 {
		t.Fatalf("pending = %d, want 0", p.pending())
	}
	if got := p.commitOffset(); got != 1 {
		t.Fatalf("commit offset = %d, want 1: the withdrawn message is not processed", got)
	}
}

// TestPendingAcksAnyOrderProperty acks random prefixes of handed-out
// messages in random orders, and checks after every ack that the commit
// offset is exactly one past the longest acked prefix.
func TestPendingAcksAnyOrderProperty(t *testing.T) {
	t.Parallel()
	property := func(seed int64, count uint8) bool {
		rng := rand.New(rand.NewSource(seed))
		n := int(count)%200 + 1
		p := newPendingAcks(1000)
		offsets := make([]int64, n)
		next := int64(rng.Intn(1000))
		for i := range offsets {
			offsets[i] = next
			if !p.push(next) {
				return false
			}
			next += int64(1 + rng.Intn(3))
		}
		acked := make([]bool, n)
		for _, i := range rng.Perm(n) {
			known, _ := p.ack(offsets[i])
			if !known {
				return false
			}
			acked[i] = true
			if rng.Intn(4) == 0 { // a double ack changes nothing
				if known, advanced := p.ack(offsets[i]); known || advanced {
					return false
				}
			}
			prefix := 0
			for prefix < n && acked[prefix] {
				prefix++
			}
			var want int64 = -1
			switch {
			case prefix == n:
				want = offsets[n-1] + 1
			case prefix > 0:
				want = offsets[prefix]
			}
			if got := p.commitOffset(); got != want {
				t.Logf("seed %d: after acking %d of %d, commit %d, want %d", seed, i, n, got, want)
				return false
			}
		}
		return p.pending() == 0 && p.size() == 0
	}
	if err := quick.Check(property, &quick.Config{MaxCount: 500}); err != nil {
		t.Fatal(err)
	}
}

func BenchmarkPendingAcksInOrder(b *testing.B) {
	p := newPendingAcks(DefaultMaxPendingAcks)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		p.push(int64(i))
		p.ack(int64(i))
	}
}

// TestPendingAcksSkipTo: offsets after the last entry that hold nothing to
// hand out (transaction markers, aborted records) move the commit point
// once every entry is acked, not before; a later entry, an unpush and a
// withdrawal each keep it where the entries say.
func TestPendingAcksSkipTo(t *testing.T) {
	p := newPendingAcks(10)
	p.skipTo(4) // only markers so far: commit past them
	if got := p.commitOffset(); got != 4 {
		t.Fatalf("commitOffset after skipTo(4) with nothing handed out = %d, want 4", got)
	}
	p.push(5)
	p.push(6)
	p.skipTo(9) // 7 and 8: the marker and aborted records after 6
	if got := p.commitOffset(); got != -1 {
		t.Fatalf("commitOffset with nothing acked = %d, want -1", got)
	}
	p.ack(5)
	if got := p.commitOffset(); got != 6 {
		t.Fatalf("commitOffset with 6 pending = %d, want 6", got)
	}
	p.ack(6)
	if got := p.commitOffset(); got != 9 {
		t.Fatalf("commitOffset with all acked, skipped to 9 = %d, want 9", got)
	}
	p.push(9)
	p.ack(9)
	if got := p.commitOffset(); got != 10 {
		t.Fatalf("commitOffset after 9 = %d, want 10", got)
	}

	p.push(10)
	p.skipTo(12)
	p.unpushFrom(10) // 10 goes out again: the skip past it no longer holds
	if got := p.commitOffset(); got != 10 {
		t.Fatalf("commitOffset after unpush = %d, want 10", got)
	}

	p.push(10)
	p.withdraw(10)
	p.skipTo(20)
	if got := p.commitOffset(); got != 10 {
		t.Fatalf("commitOffset after a withdrawal = %d, want 10", got)
	}
}

// TestPendingAckedRanges: the acked set beyond the commit point, with
// skipped entries as acked ones and the offsets between entries (no
// message) joined to the acked entry before them; hold refuses pushes
// until the commit point moves; a withdrawn head keeps the entries after
// it for the set.
func TestPendingAckedRanges(t *testing.T) {
	t.Parallel()
	p := newPendingAcks(100)
	for _, o := range []int64{10, 11, 12, 14, 15, 17} {
		p.push(o)
	}
	p.ack(11)
	p.ack(12) // 13 holds no message: joined to 12
	p.ack(17)
	if !p.pushSkipped(18) || !p.pushSkipped(19) {
		t.Fatal("pushSkipped refused")
	}
	want := []commitmark.Range{{From: 11, To: 14}, {From: 17, To: 20}}
	if got := p.ackedRanges(nil); !reflect.DeepEqual(got, want) {
		t.Fatalf("ackedRanges = %v, want %v", got, want)
	}
	if c := p.commitOffset(); c != -1 {
		t.Fatalf("commitOffset = %d before the first ack of the head", c)
	}
	p.hold()
	if p.push(20) || !p.full() {
		t.Fatal("push accepted while held")
	}
	if _, advanced := p.ack(10); !advanced {
		t.Fatal("the ack of the head did not advance")
	}
	if p.full() || !p.push(20) {
		t.Fatal("still held after the commit point moved")
	}
	if c := p.commitOffset(); c != 14 {
		t.Fatalf("commitOffset = %d, want 14", c)
	}
	if n := p.unpushFrom(18); n != 1 { // 18, 19 skipped; 20 handed out
		t.Fatalf("unpushFrom counted %d handed out, want 1", n)
	}
	if got := p.lastEntered(); got != 17 {
		t.Fatalf("lastEntered = %d, want 17", got)
	}

	// A skipped head moves the commit point at once.
	q := newPendingAcks(10)
	q.pushSkipped(5)
	if c := q.commitOffset(); c != 6 {
		t.Fatalf("commitOffset after a skipped head = %d, want 6", c)
	}
	q.hold()
	if q.full() {
		t.Fatal("hold with nothing pending: nothing could release it")
	}

	// A withdrawn head: the commit point stops, the later acks stay.
	w := newPendingAcks(10)
	for o := int64(0); o < 4; o++ {
		w.push(o)
	}
	w.ack(2)
	w.withdraw(1)
	w.ack(0)
	w.ack(3)
	if c := w.commitOffset(); c != 1 {
		t.Fatalf("commitOffset = %d, want 1", c)
	}
	if got, want := w.ackedRanges(nil), []commitmark.Range{{From: 2, To: 4}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("ackedRanges after a withdrawn head = %v, want %v", got, want)
	}
}

// TestPendingAcksWithdrawnAfterGap: a withdrawn head that follows offsets
// holding no message (a transaction marker, or offsets skipTo named)
// keeps the commit point at the withdrawn offset, where it was before the
// withdrawal, and the acks after it stay in the acked set: the commit
// point does not step back to the end of the acked prefix before the gap
// (the offset store ignores a mark that steps back, so the acked set of
// the commit would not change any more).
func TestPendingAcksWithdrawnAfterGap(t *testing.T) {
	t.Parallel()
	p := newPendingAcks(10)
	p.push(9)
	p.ack(9)
	p.push(11) // 10: a marker
	p.push(12)
	if c := p.commitOffset(); c != 11 {
		t.Fatalf("commitOffset with 11 pending = %d, want 11", c)
	}
	p.withdraw(11)
	p.ack(12)
	if c := p.commitOffset(); c != 11 {
		t.Fatalf("commitOffset after the withdrawal of 11 = %d, want 11", c)
	}
	if got, want := p.ackedRanges(nil), []commitmark.Range{{From: 12, To: 13}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("ackedRanges = %v, want %v", got, want)
	}

	q := newPendingAcks(10)
	q.push(0)
	q.ack(0)
	q.skipTo(3) // 1 and 2 hold nothing to hand out
	q.push(3)
	if c := q.commitOffset(); c != 3 {
		t.Fatalf("commitOffset with 3 pending = %d, want 3", c)
	}
	q.withdraw(3)
	if c := q.commitOffset(); c != 3 {
		t.Fatalf("commitOffset after the withdrawal of 3 = %d, want 3", c)
	}

	// Nothing acked before the withdrawn head: the commit point is its
	// offset, the first handed out.
	r := newPendingAcks(10)
	r.push(7)
	r.push(8)
	r.ack(8)
	r.withdraw(7)
	if c := r.commitOffset(); c != 7 {
		t.Fatalf("commitOffset after the withdrawal of the first entry = %d, want 7", c)
	}
}
