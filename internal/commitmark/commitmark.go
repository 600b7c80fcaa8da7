// Package commitmark writes and reads kafkaconsumer's committed offsets
// in their two conventions.
//
// kafkaconsumer, Kafka's own clients and originals (wvanbergen/kafka)
// built on sarama v1.10 or later start a partition at its committed
// offset: kafkaconsumer commits the next offset to read (N+1 after
// processing message N; such an original commits N, and so reads N
// again). Originals built on sarama v1.9 or older commit the offset of the
// last message processed (N) and start at the committed offset + 1: a
// partition that moves to one of them from an instance that committed N+1
// skips message N+1.
//
// kafkaconsumer's Config.CommitLastProcessed makes an instance commit in
// the originals' convention. Each of its commits says its convention in
// the commit's metadata, so that instances with and without the setting
// read each other's commits right whatever their own setting; a commit
// without the mark (an original's, a tool's, or one of a release before
// the mark) is read in the reader's own convention.
//
// With Config.DurableAcks a commit also carries, after its mark, the
// offsets beyond the committed one that were acked already (WithAcked,
// Acked): "<mark>;a1.<base64>" or, compressed, "<mark>;z1.<base64>".
// Decode reads the mark of such a commit as it reads a bare one.
// Releases before the acked part read the whole metadata as no mark: see
// the package's WithAcked for what they do then.
package commitmark

import (
	"bytes"
	"compress/flate"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
)

// The metadata of kafkaconsumer's commits: the convention of the offset.
const (
	NextMark = "kafkaconsumer:next"
	LastMark = "kafkaconsumer:last"
)

// Encode returns the offset and metadata to commit for a partition
// whose next offset to read is next. In the last-processed convention a
// next offset of 0 is committed as -1: kafkaconsumer reads it back as 0
// (by its mark), an original as no committed offset, so that it starts at
// its own Offsets.Initial (the originals' convention has no way to say
// "start at 0"; committed as 0 it would skip message 0).
func Encode(next int64, lastProcessed bool) (offset int64, metadata string) {
	if lastProcessed {
		return next - 1, LastMark
	}
	return next, NextMark
}

// Decode returns the next offset to read of a partition whose
// committed offset and metadata are offset and metadata (-1 for none),
// read by an instance in the last-processed convention or not; rewrite
// reports that the commit should be made again in the instance's own
// convention, with its mark: a commit in the other convention (so that an
// original that takes the partition later reads it right), and, in the
// last-processed convention, an unmarked one (so that an instance without
// the setting that takes the partition later reads it right too).
func Decode(offset int64, metadata string, lastProcessed bool) (next int64, rewrite bool) {
	metadata = markOf(metadata)
	switch {
	case metadata == LastMark && offset >= -1:
		return offset + 1, !lastProcessed
	case offset < 0:
		return -1, false
	case metadata == NextMark:
		return offset, lastProcessed
	case lastProcessed:
		return offset + 1, true
	default:
		return offset, false
	}
}

// markOf returns the mark of metadata: the part before an acked part.
func markOf(metadata string) string {
	if mark, rest, ok := strings.Cut(metadata, ackedSep); ok && (mark == NextMark || mark == LastMark) && len(rest) >= len(rawTag) {
		return mark
	}
	return metadata
}

// The acked part of a commit's metadata: ackedSep, a tag that says its
// version and whether it is compressed, then the payload in unpadded
// URL-safe base64. The payload (version 1) is a sequence of unsigned
// varints: the next offset to read that the set is relative to (a commit
// whose offset a tool moved since does not match it, and its set is
// ignored), then pairs of run lengths from that offset on: so many
// offsets not acked, so many acked, each at least 1. Compressed, the
// payload is deflated (RFC 1951).
const (
	ackedSep      = ";"
	rawTag        = "a1."
	compressedTag = "z1."
)

// Limits of Acked: what exceeds them is read as no acked set, malformed.
const (
	// MaxAckedSpan bounds how far beyond the committed offset an acked
	// set reaches.
	MaxAckedSpan = 1 << 32
	// maxPayload bounds a payload, inflated.
	maxPayload = 1 << 16
	// compressAbove is the raw payload size from which WithAcked tries
	// compression: smaller ones gain little.
	compressAbove = 96
)

// Range is the offsets from From up to To, To excluded.
type Range struct{ From, To int64 }

// WithAcked returns metadata (a mark of Encode) followed by the acked
// part that says that the offsets of acked, beyond next, were acked.
// acked is in increasing order and its ranges do not overlap; what lies
// at or below next is left out, and adjacent ranges are merged. The part
// holds as many of the first ranges as fit in limit bytes, and in 64 KiB
// before compression (what Acked reads); full reports that some were left
// out (or all: then the part is empty, and metadata is returned as it
// is), or that the part is past 3/4 of either bound, so that a caller
// that stops adding to the set then keeps it whole. Deflated when that
// is smaller.
//
// Releases of kafkaconsumer before the acked part read such metadata as
// no mark (Decode's unmarked case): without CommitLastProcessed they
// start at the committed offset and deliver again what was acked beyond
// it (at-least-once, as ever); with CommitLastProcessed they read a
// NextMark commit that carries an acked part as the offset of the last
// message processed, and skip the message at the committed offset.
func WithAcked(metadata string, next int64, acked []Range, limit int) (_ string, full bool) {
	var runs []Range
	for _, r := range acked {
		from := maxOf(r.From, next+1)
		if r.To <= from {
			continue
		}
		if r.To-next > MaxAckedSpan {
			break
		}
		if k := len(runs); k > 0 && from <= runs[k-1].To {
			runs[k-1].To = maxOf(runs[k-1].To, r.To)
			continue
		}
		runs = append(runs, Range{From: from, To: r.To})
	}
	if len(runs) == 0 {
		return metadata, false
	}
	room := limit - len(metadata) - len(ackedSep) - len(rawTag)
	fits := func(n int) bool { return base64.RawURLEncoding.EncodedLen(n) <= room }
	payload, ends := encodeRuns(next, runs)
	near := len(ends) < len(runs) || len(payload) > maxPayload*3/4 // of what Acked inflates
	nearLimit := func(part string) bool { return len(metadata)+len(part) > limit*3/4 }
	if len(payload) >= compressAbove && room > 0 {
		// Deflated, whole or as truncated as the ratio says, in a few
		// tries.
		n := len(ends)
		for try := 0; try < 4 && n > 0; try++ {
			z := deflate(payload[:ends[n-1]])
			if len(z) >= ends[n-1] {
				break // does not compress
			}
			if fits(len(z)) {
				part := ackedSep + compressedTag + base64.RawURLEncoding.EncodeToString(z)
				return metadata + part, near || n < len(ends) || nearLimit(part)
			}
			n = min(n-1, n*base64.RawURLEncoding.DecodedLen(room)/len(z)*15/16)
		}
	}
	n := len(ends)
	for n > 0 && !fits(ends[n-1]) {
		n--
	}
	if n == 0 {
		return metadata, true
	}
	part := ackedSep + rawTag + base64.RawURLEncoding.EncodeToString(payload[:ends[n-1]])
	return metadata + part, near || n < len(ends) || nearLimit(part)
}

// encodeRuns returns the payload (version 1) of runs beyond next, and its
// length after each pair: as many of the first runs as fit in
// maxPayload bytes, so that Acked reads back what WithAcked writes
// however well it deflates.
func encodeRuns(next int64, runs []Range) (payload []byte, ends []int) {
	payload = binary.AppendUvarint(nil, uint64(next))
	ends = make([]int, 0, len(runs))
	pos := next
	for _, r := range runs {
		n := len(payload)
		payload = binary.AppendUvarint(payload, uint64(r.From-pos))
		payload = binary.AppendUvarint(payload, uint64(r.To-r.From))
		if len(payload) > maxPayload {
			return payload[:n], ends
		}
		ends = append(ends, len(payload))
		pos = r.To
	}
	return payload, ends
}

func maxOf(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

// ErrMalformed is wrapped by the error of Acked for an acked part that
// is not well formed.
var ErrMalformed = errors.New("malformed acked set")

// Acked returns the acked offsets that metadata carries (see WithAcked)
// for a commit whose next offset to read (Decode's) is next, in
// increasing order. It returns nil when metadata carries none, when the
// set was made for another offset (a tool moved the commit since), or
// when it is of a later version; nil and an error wrapping ErrMalformed
// when the set is not well formed (it never panics).
func Acked(metadata string, next int64) ([]Range, error) {
	mark, part, ok := strings.Cut(metadata, ackedSep)
	if !ok || (mark != NextMark && mark != LastMark) || next < 0 {
		return nil, nil
	}
	var compressed bool
	switch {
	case strings.HasPrefix(part, rawTag):
	case strings.HasPrefix(part, compressedTag):
		compressed = true
	default:
		return nil, nil // a later version: ignored
	}
	malformed := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
	}
	if len(part) > 2*maxPayload {
		return nil, malformed("%d bytes, more than %d", len(part), 2*maxPayload)
	}
	payload, err := base64.RawURLEncoding.DecodeString(part[len(rawTag):])
	if err != nil {
		return nil, malformed("not base64: %s", err)
	}
	if compressed {
		r := flate.NewReader(bytes.NewReader(payload))
		payload, err = io.ReadAll(io.LimitReader(r, maxPayload+1))
		switch {
		case err != nil:
			return nil, malformed("not deflated: %s", err)
		case len(payload) > maxPayload:
			return nil, malformed("inflates beyond %d bytes", maxPayload)
		}
	}
	base, n := binary.Uvarint(payload)
	switch {
	case n <= 0:
		return nil, malformed("no offset")
	case base != uint64(next):
		return nil, nil // made for another offset
	}
	return decodeRuns(payload[n:], next)
}

// decodeRuns returns the ranges that the pairs of run lengths of payload
// say, from next on.
func decodeRuns(payload []byte, next int64) ([]Range, error) {
	var acked []Range
	pos := uint64(0) // relative to next
	for i := 0; i < len(payload); {
		gap, k := binary.Uvarint(payload[i:])
		if k <= 0 || gap == 0 {
			return nil, fmt.Errorf("%w: a bad gap at byte %d", ErrMalformed, i)
		}
		i += k
		length, k := binary.Uvarint(payload[i:])
		if k <= 0 || length == 0 {
			return nil, fmt.Errorf("%w: a bad length at byte %d", ErrMalformed, i)
		}
		i += k
		if gap > MaxAckedSpan || length > MaxAckedSpan || pos+gap+length > MaxAckedSpan {
			return nil, fmt.Errorf("%w: reaches beyond %d offsets", ErrMalformed, int64(MaxAckedSpan))
		}
		pos += gap
		acked = append(acked, Range{From: next + int64(pos), To: next + int64(pos+length)})
		pos += length
	}
	return acked, nil
}

// deflaters are flate writers for deflate, reused: each holds large
// buffers.
var deflaters sync.Pool

// deflate returns b deflated.
func deflate(b []byte) []byte {
	var buf bytes.Buffer
	w, _ := deflaters.Get().(*flate.Writer)
	if w == nil {
		w, _ = flate.NewWriter(&buf, flate.BestCompression)
	} else {
		w.Reset(&buf)
	}
	_, _ = w.Write(b)
	_ = w.Close()
	deflaters.Put(w)
	return buf.Bytes()
}
