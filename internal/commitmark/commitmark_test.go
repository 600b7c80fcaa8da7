package commitmark

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"math/rand"
	"reflect"
	"strings"
	"testing"
)

// TestConventions: a commit in either convention reads back as the
// offset it was made for, whatever the reader's convention; an unmarked
// commit is read in the reader's. A marked commit in the other convention
// asks to be made again, and so does an unmarked one read in the
// last-processed convention.
func TestConventions(t *testing.T) {
	t.Parallel()
	for _, writer := range []bool{false, true} {
		for _, reader := range []bool{false, true} {
			for _, next := range []int64{0, 1, 42} {
				offset, metadata := Encode(next, writer)
				got, rewrite := Decode(offset, metadata, reader)
				if got != next {
					t.Errorf("next %d committed by lastProcessed=%v as (%d, %q), read by lastProcessed=%v as %d", next, writer, offset, metadata, reader, got)
				}
				if want := writer != reader; rewrite != want {
					t.Errorf("next %d committed by lastProcessed=%v, read by lastProcessed=%v: rewrite %v, want %v", next, writer, reader, rewrite, want)
				}
			}
		}
	}
	if offset, metadata := Encode(7, true); offset != 6 || metadata != LastMark {
		t.Errorf("Encode(7, true) = %d, %q; want 6, %q (the originals' convention)", offset, metadata, LastMark)
	}
	// The originals read -1 as no committed offset: they start at their
	// Offsets.Initial, not at 1.
	if offset, _ := Encode(0, true); offset != -1 {
		t.Errorf("Encode(0, true) = %d; want -1", offset)
	}
	for _, tc := range []struct {
		offset        int64
		metadata      string
		lastProcessed bool
		want          int64
		rewrite       bool
	}{
		{41, "", false, 41, false},    // an unmarked commit: as sarama >= 1.10 reads it
		{41, "", true, 42, true},      // as an original on sarama <= 1.9 reads it; marked again
		{41, "other", true, 42, true}, // someone else's metadata is no mark
		{41, "other", false, 41, false},
		{-1, "", true, -1, false},      // none
		{-1, LastMark, false, 0, true}, // next offset 0, in the last-processed convention
	} {
		if got, rewrite := Decode(tc.offset, tc.metadata, tc.lastProcessed); got != tc.want || rewrite != tc.rewrite {
			t.Errorf("Decode(%d, %q, %v) = %d, %v; want %d, %v", tc.offset, tc.metadata, tc.lastProcessed, got, rewrite, tc.want, tc.rewrite)
		}
	}
}

// TestAckedRoundTrip: acked sets read back as written, after either mark,
// deflated or not; ranges at or below next are left out, adjacent ones
// merged; the mark reads as without the set.
func TestAckedRoundTrip(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewSource(1))
	random := func(next int64, n int) []Range {
		var rs []Range
		pos := next + 1
		for i := 0; i < n; i++ {
			from := pos + rng.Int63n(5)
			to := from + 1 + rng.Int63n(5)
			rs = append(rs, Range{from, to})
			pos = to + 1
		}
		return rs
	}
	for _, tc := range []struct {
		name  string
		next  int64
		acked []Range
		want  []Range
	}{
		{"one", 10, []Range{{12, 13}}, nil},
		{"from 0", 0, []Range{{1, 3}, {5, 9}}, nil},
		{"at next left out", 10, []Range{{8, 11}, {12, 14}}, []Range{{12, 14}}},
		{"adjacent merged", 10, []Range{{12, 14}, {14, 15}, {17, 18}}, []Range{{12, 15}, {17, 18}}},
		{"large offsets", 1 << 50, []Range{{1<<50 + 3, 1<<50 + 1000}}, nil},
		{"many", 1000, random(1000, 300), nil},
		{"repetitive", 5, func() []Range {
			var rs []Range
			for i := int64(0); i < 500; i++ {
				rs = append(rs, Range{7 + 3*i, 8 + 3*i})
			}
			return rs
		}(), nil},
	} {
		want := tc.want
		if want == nil {
			want = tc.acked
		}
		for _, lastProcessed := range []bool{false, true} {
			offset, mark := Encode(tc.next, lastProcessed)
			metadata, truncated := WithAcked(mark, tc.next, tc.acked, 4096)
			if truncated {
				t.Errorf("%s: full within 4096 bytes (%d)", tc.name, len(metadata))
			}
			if len(metadata) > 4096 {
				t.Errorf("%s: %d bytes", tc.name, len(metadata))
			}
			if got := mustAcked(t, metadata, tc.next); !reflect.DeepEqual(got, want) {
				t.Errorf("%s: Acked(%q) = %v, want %v", tc.name, metadata, got, want)
			}
			if next, rewrite := Decode(offset, metadata, lastProcessed); next != tc.next || rewrite {
				t.Errorf("%s: Decode of %q = %d, %v; want %d, false", tc.name, metadata, next, rewrite, tc.next)
			}
			if next, _ := Decode(offset, metadata, !lastProcessed); next != tc.next {
				t.Errorf("%s: Decode of %q by the other convention = %d, want %d", tc.name, metadata, next, tc.next)
			}
		}
	}
	// The repetitive set is deflated.
	var rs []Range
	for i := int64(0); i < 500; i++ {
		rs = append(rs, Range{7 + 3*i, 8 + 3*i})
	}
	if metadata, _ := WithAcked(NextMark, 5, rs, 4096); !strings.HasPrefix(metadata, NextMark+ackedSep+compressedTag) {
		t.Errorf("a repetitive set is not deflated: %q", metadata)
	}
}

// mustAcked is Acked, failing the test on an error.
func mustAcked(t *testing.T, metadata string, next int64) []Range {
	t.Helper()
	rs, err := Acked(metadata, next)
	if err != nil {
		t.Errorf("Acked(%.60q, %d): %s", metadata, next, err)
	}
	return rs
}

// TestAckedLimits: a set that does not fit is truncated to its first
// ranges, never past the limit; nothing to say leaves the mark as it is;
// a span beyond MaxAckedSpan is cut.
func TestAckedLimits(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewSource(2))
	var rs []Range
	pos := int64(101)
	for i := 0; i < 5000; i++ {
		from := pos + 1 + rng.Int63n(300)
		to := from + 1 + rng.Int63n(300)
		rs = append(rs, Range{from, to})
		pos = to
	}
	for _, limit := range []int{0, 10, len(NextMark) + 8, 100, 1000, 4096} {
		metadata, truncated := WithAcked(NextMark, 100, rs, limit)
		if !truncated {
			t.Errorf("limit %d: 5000 random ranges not truncated", limit)
		}
		if len(metadata) > max(limit, len(NextMark)) {
			t.Errorf("limit %d: %d bytes", limit, len(metadata))
		}
		got := mustAcked(t, metadata, 100)
		if len(got) > len(rs) || len(got) > 0 && !reflect.DeepEqual(got, rs[:len(got)]) {
			t.Errorf("limit %d: not a prefix of the set: %v", limit, got)
		}
		if limit >= 100 && len(got) == 0 {
			t.Errorf("limit %d: nothing kept", limit)
		}
	}
	if metadata, truncated := WithAcked(LastMark, 10, nil, 4096); metadata != LastMark || truncated {
		t.Errorf("an empty set: %q, %v", metadata, truncated)
	}
	if metadata, _ := WithAcked(NextMark, 10, []Range{{5, 10}}, 4096); metadata != NextMark {
		t.Errorf("a set below next: %q", metadata)
	}
	far := []Range{{12, 13}, {10 + MaxAckedSpan, 11 + MaxAckedSpan}}
	metadata, _ := WithAcked(NextMark, 10, far, 4096)
	if got := mustAcked(t, metadata, 10); !reflect.DeepEqual(got, far[:1]) {
		t.Errorf("beyond MaxAckedSpan: %v", got)
	}
}

// TestAckedInflatedLimit: a set that deflates well within the limit but
// inflates beyond what Acked reads (alternating acks, a large
// MaxPendingAcks) is cut to its first ranges, reported, and reads back
// as that prefix, not as none.
func TestAckedInflatedLimit(t *testing.T) {
	t.Parallel()
	const next = 1000
	var rs []Range
	for i := int64(0); i < maxPayload; i++ { // 2 bytes a range, raw
		rs = append(rs, Range{next + 2 + 2*i, next + 3 + 2*i})
	}
	for _, limit := range []int{4096, 1 << 20} {
		metadata, truncated := WithAcked(NextMark, next, rs, limit)
		if !truncated {
			t.Errorf("limit %d: a set of %d ranges, %d bytes raw, not reported as full", limit, len(rs), 2*len(rs))
		}
		got := mustAcked(t, metadata, next)
		if len(got) == 0 {
			t.Fatalf("limit %d: WithAcked wrote %d bytes that Acked reads as no acked set", limit, len(metadata))
		}
		if !reflect.DeepEqual(got, rs[:len(got)]) {
			t.Errorf("limit %d: not a prefix of the set", limit)
		}
		if len(got) < len(rs)/4 {
			t.Errorf("limit %d: kept %d of %d ranges, want most of what %d bytes inflated hold", limit, len(got), len(rs), maxPayload)
		}
	}
}

// TestAckedGarbage: metadata that is not a well-formed acked part reads as
// no acked set, with ErrMalformed (but for a set of a later version or
// of another offset), never a panic, and the mark before it still reads
// right when there is one.
func TestAckedGarbage(t *testing.T) {
	t.Parallel()
	good, _ := WithAcked(NextMark, 10, []Range{{12, 14}, {20, 21}}, 4096)
	payload := func(vs ...uint64) string {
		var b []byte
		for _, v := range vs {
			b = binary.AppendUvarint(b, v)
		}
		return NextMark + ackedSep + rawTag + base64.RawURLEncoding.EncodeToString(b)
	}
	for _, metadata := range []string{
		"", NextMark, LastMark, "other", NextMark + ";", NextMark + ";a1", NextMark + ";b7.AAAA", "other;a1.CgIC",
		payload(11, 2, 2), // made for another offset
	} {
		if got, err := Acked(metadata, 10); got != nil || err != nil {
			t.Errorf("Acked(%q) = %v, %v; want none, no error", metadata, got, err)
		}
	}
	for _, metadata := range []string{
		NextMark + ";a1.", NextMark + ";a1.!!!", NextMark + ";z1.AAAA", NextMark + ";z1.",
		good[:len(good)-1], good + "A",
		payload(10, 0, 2),               // a zero gap
		payload(10, 2, 0),               // a zero length
		payload(10, 2),                  // a gap without its length
		payload(10, 1<<40, 1),           // beyond MaxAckedSpan
		payload(10, 1, 1<<63),           // overflow
		payload(10, MaxAckedSpan, 1, 1), // beyond, in sum
		NextMark + ackedSep + rawTag + base64.RawURLEncoding.EncodeToString([]byte{0xff, 0xff, 0xff}),
		NextMark + ackedSep + compressedTag + base64.RawURLEncoding.EncodeToString(deflate(make([]byte, maxPayload+10))),
	} {
		if got, err := Acked(metadata, 10); got != nil || !errors.Is(err, ErrMalformed) {
			t.Errorf("Acked(%q) = %v, %v; want none, ErrMalformed", metadata, got, err)
		}
	}
	if got, err := Acked(good, -1); got != nil || err != nil {
		t.Errorf("Acked for no committed offset = %v, %v", got, err)
	}
	// The mark before a part of a later version still reads.
	if next, rewrite := Decode(10, NextMark+";b7.AAAA", false); next != 10 || rewrite {
		t.Errorf("Decode of a later version's part = %d, %v", next, rewrite)
	}
	if next, _ := Decode(10, "kafkaconsumer:nextX", true); next != 11 {
		t.Errorf("a mark followed by anything but the separator is no mark: %d", next)
	}
	// Random bytes never panic.
	rng := rand.New(rand.NewSource(3))
	for i := 0; i < 2000; i++ {
		b := make([]byte, rng.Intn(64))
		rng.Read(b)
		tag := rawTag
		if i%2 == 1 {
			tag = compressedTag
		}
		_, _ = Acked(NextMark+ackedSep+tag+base64.RawURLEncoding.EncodeToString(b), int64(rng.Intn(20)))
	}
}
