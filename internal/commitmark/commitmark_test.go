package commitmark

import "testing"

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
