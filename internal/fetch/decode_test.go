package fetch

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer/internal/fetch/fetchtest"
)

// part returns a partition of topic "t", partition 3, holding records.
func part(records []byte, aborted ...Aborted) *Partition {
	return &Partition{Topic: "t", Partition: 3, HighWatermark: 1000, Records: records, Aborted: aborted}
}

// got is a message as the tests compare it.
type got struct {
	offset     int64
	key, value string
}

func gotOf(msgs []*sarama.ConsumerMessage) []got {
	out := make([]got, 0, len(msgs))
	for _, m := range msgs {
		out = append(out, got{m.Offset, string(m.Key), string(m.Value)})
	}
	return out
}

// numbered returns n records whose keys are k<offset delta> and values
// v<offset delta>, 10 ms apart.
func numbered(n int) []fetchtest.Record {
	recs := make([]fetchtest.Record, n)
	for i := range recs {
		recs[i] = fetchtest.Record{OffsetDelta: int32(i), TimestampDelta: int64(10 * i),
			Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "v%d", i)}
	}
	return recs
}

func want(base int64, offsets ...int64) []got {
	out := make([]got, 0, len(offsets))
	for _, o := range offsets {
		out = append(out, got{o, fmt.Sprintf("k%d", o-base), fmt.Sprintf("v%d", o-base)})
	}
	return out
}

func TestDecodeCodecs(t *testing.T) {
	t.Parallel()
	const first = 1_700_000_000_123
	for _, tc := range []struct {
		name   string
		codec  int8
		xerial bool
	}{
		{"none", fetchtest.None, false},
		{"gzip", fetchtest.Gzip, false},
		{"snappy", fetchtest.Snappy, false},
		{"snappy xerial", fetchtest.Snappy, true},
		{"lz4", fetchtest.LZ4, false},
		{"zstd", fetchtest.Zstd, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			recs := numbered(3)
			recs[1].Headers = []fetchtest.Header{{Key: []byte("h"), Value: []byte("hv")}, {Key: []byte("e"), Value: nil}}
			recs[2].Key, recs[2].Value = nil, []byte{}
			b := fetchtest.Batch{BaseOffset: 40, Codec: tc.codec, Xerial: tc.xerial, FirstTimestamp: first, MaxTimestamp: first + 20, Records: recs}.AppendTo(nil)
			// A large second batch: xerial's framing has blocks of 32 KiB.
			big := bytes.Repeat([]byte("x"), 100<<10)
			b = fetchtest.Batch{BaseOffset: 43, Codec: tc.codec, Xerial: tc.xerial, FirstTimestamp: first, Records: []fetchtest.Record{{Value: big}}}.AppendTo(b)
			r, err := Decode(part(b), 40, false)
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Messages) != 4 || r.Next != 44 || r.Partial || r.Wire != len(b) {
				t.Fatalf("got %d messages, Next %d, Partial %t, Wire %d; want 4, 44, false, %d", len(r.Messages), r.Next, r.Partial, r.Wire, len(b))
			}
			m0, m1, m2 := r.Messages[0], r.Messages[1], r.Messages[2]
			if string(m0.Key) != "k0" || string(m0.Value) != "v0" || m0.Offset != 40 || m0.Topic != "t" || m0.Partition != 3 {
				t.Errorf("message 0 = %+v", m0)
			}
			if want := time.UnixMilli(first + 10); !m1.Timestamp.Equal(want) {
				t.Errorf("message 1's Timestamp = %s, want %s", m1.Timestamp, want)
			}
			if m0.Headers == nil || len(m0.Headers) != 0 {
				t.Errorf("message 0's Headers = %#v, want empty, not nil (as sarama)", m0.Headers)
			}
			if len(m1.Headers) != 2 || string(m1.Headers[0].Key) != "h" || string(m1.Headers[0].Value) != "hv" || m1.Headers[1].Value != nil {
				t.Errorf("message 1's Headers = %+v", m1.Headers)
			}
			if m2.Key != nil || m2.Value == nil || len(m2.Value) != 0 {
				t.Errorf("message 2's key %#v, value %#v: want nil and empty", m2.Key, m2.Value)
			}
			if !bytes.Equal(r.Messages[3].Value, big) {
				t.Errorf("message 3's value differs (%d bytes)", len(r.Messages[3].Value))
			}
			if wantBytes := int64(2+2+2+2+1+2+1+0+0+0) + int64(len(big)); r.Bytes != wantBytes {
				t.Errorf("Bytes = %d, want %d", r.Bytes, wantBytes)
			}
		})
	}
}

func TestDecodeLogAppendTime(t *testing.T) {
	t.Parallel()
	b := fetchtest.Batch{BaseOffset: 0, LogAppendTime: true, FirstTimestamp: 1000, MaxTimestamp: 5000, Records: numbered(2)}.AppendTo(nil)
	r, err := Decode(part(b), 0, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range r.Messages {
		if !m.Timestamp.Equal(time.UnixMilli(5000)) {
			t.Errorf("offset %d: Timestamp %s, want the batch's max timestamp", m.Offset, m.Timestamp)
		}
	}
}

func TestDecodeLegacy(t *testing.T) {
	t.Parallel()
	msg := func(offset int64, magic int8, i int) fetchtest.Message {
		return fetchtest.Message{Offset: offset, Magic: magic, Timestamp: 2000 + int64(i),
			Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "v%d", i)}
	}
	for _, tc := range []struct {
		name      string
		magic     int8
		codec     int8
		xerial    bool
		brokenLZ4 bool
	}{
		{"magic 0", 0, fetchtest.None, false, false},
		{"magic 0 gzip", 0, fetchtest.Gzip, false, false},
		{"magic 0 snappy xerial", 0, fetchtest.Snappy, true, false},
		{"magic 0 lz4 broken header", 0, fetchtest.LZ4, false, true},
		{"magic 1", 1, fetchtest.None, false, false},
		{"magic 1 gzip", 1, fetchtest.Gzip, false, false},
		{"magic 1 snappy", 1, fetchtest.Snappy, false, false},
		{"magic 1 snappy xerial", 1, fetchtest.Snappy, true, false},
		{"magic 1 lz4", 1, fetchtest.LZ4, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var b []byte
			if tc.codec == fetchtest.None {
				for i := range 4 {
					b = msg(10+int64(i), tc.magic, i).AppendTo(b)
				}
			} else {
				// Two wrappers; magic 1's inner offsets are relative.
				for w := range 2 {
					wrapper := fetchtest.Message{Offset: 11 + 2*int64(w), Magic: tc.magic, Codec: tc.codec, Xerial: tc.xerial, BrokenLZ4: tc.brokenLZ4, Timestamp: 9000}
					for i := 2 * w; i < 2*w+2; i++ {
						inner := msg(10+int64(i), tc.magic, i)
						if tc.magic == 1 {
							inner.Offset = int64(i - 2*w)
						}
						wrapper.Inner = append(wrapper.Inner, inner)
					}
					b = wrapper.AppendTo(b)
				}
			}
			r, err := Decode(part(b), 11, false) // from inside the first wrapper
			if err != nil {
				t.Fatal(err)
			}
			if g, w := gotOf(r.Messages), want(10, 11, 12, 13); !slices.Equal(g, w) || r.Next != 14 {
				t.Fatalf("got %v, Next %d; want %v, 14", g, r.Next, w)
			}
			for _, m := range r.Messages {
				var ts, block time.Time
				if tc.magic == 1 {
					ts = time.UnixMilli(2000 + m.Offset - 10)
					block = ts
					if tc.codec != fetchtest.None {
						block = time.UnixMilli(9000)
					}
				}
				if !m.Timestamp.Equal(ts) || !m.BlockTimestamp.Equal(block) || m.Headers != nil {
					t.Errorf("offset %d: Timestamp %s, BlockTimestamp %s, Headers %v; want %s, %s, nil", m.Offset, m.Timestamp, m.BlockTimestamp, m.Headers, ts, block)
				}
			}
		})
	}
}

func TestDecodeControlAndAborted(t *testing.T) {
	t.Parallel()
	const aborter, committer = 7, 8
	txn := func(base, producer int64) fetchtest.Batch {
		return fetchtest.Batch{BaseOffset: base, Transactional: true, ProducerID: producer, Records: numbered(2)}
	}
	var b []byte
	b = txn(0, aborter).AppendTo(b)   // 0, 1: aborted
	b = txn(2, committer).AppendTo(b) // 2, 3: committed
	b = fetchtest.ControlBatch(4, aborter, true).AppendTo(b)
	b = fetchtest.ControlBatch(5, committer, false).AppendTo(b)
	b = txn(6, aborter).AppendTo(b) // 6, 7: a later transaction, committed
	b = fetchtest.ControlBatch(8, aborter, false).AppendTo(b)
	p := part(b, Aborted{ProducerID: aborter, FirstOffset: 0})

	committed, err := Decode(p, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	if g, w := gotOf(committed.Messages), append(want(2, 2, 3), want(6, 6, 7)...); !slices.Equal(g, w) || committed.Next != 9 {
		t.Errorf("read_committed: got %v, Next %d; want %v, 9", g, committed.Next, w)
	}
	uncommitted, err := Decode(p, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(uncommitted.Messages); got != 6 || uncommitted.Next != 9 {
		t.Errorf("read_uncommitted: %d messages, Next %d; want 6 (no control records), 9", got, uncommitted.Next)
	}
}

func TestDecodeCompactedEmptyBatch(t *testing.T) {
	t.Parallel()
	b := fetchtest.Batch{BaseOffset: 20, LastOffsetDelta: 4}.AppendTo(nil) // compaction left no record of 20..24
	r, err := Decode(part(b), 20, false)
	if err != nil || len(r.Messages) != 0 || r.Next != 25 || r.Partial {
		t.Errorf("got %d messages, Next %d, Partial %t, err %v; want none, 25, false, nil", len(r.Messages), r.Next, r.Partial, err)
	}
}

func TestDecodeFromMidBatch(t *testing.T) {
	t.Parallel()
	b := fetchtest.Batch{BaseOffset: 100, Codec: fetchtest.Gzip, Records: numbered(5)}.AppendTo(nil)
	b = fetchtest.Batch{BaseOffset: 105, Records: numbered(2)}.AppendTo(b)
	r, err := Decode(part(b), 103, false)
	if err != nil {
		t.Fatal(err)
	}
	if g, w := gotOf(r.Messages), append(want(100, 103, 104), want(105, 105, 106)...); !slices.Equal(g, w) || r.Next != 107 {
		t.Errorf("got %v, Next %d; want %v, 107", g, r.Next, w)
	}
	// A batch wholly before the offset is not decoded, only passed.
	r, err = Decode(part(b), 105, false)
	if err != nil || !slices.Equal(gotOf(r.Messages), want(105, 105, 106)) {
		t.Errorf("from 105: got %v, %v", gotOf(r.Messages), err)
	}
}

func TestDecodeCorruptCRC(t *testing.T) {
	t.Parallel()
	b := fetchtest.Batch{BaseOffset: 50, Records: numbered(2)}.AppendTo(nil)
	b = fetchtest.Batch{BaseOffset: 52, Records: numbered(2)}.AppendTo(b)
	b[len(b)-1] ^= 0x01 // the second batch's last value
	r, err := Decode(part(b), 50, false)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "t/3") || !strings.Contains(err.Error(), "offset 52") {
		t.Fatalf("err = %v, want ErrCorrupt naming t/3 and offset 52", err)
	}
	if !slices.Equal(gotOf(r.Messages), want(50, 50, 51)) || r.Next != 52 {
		t.Errorf("before the corrupt batch: got %v, Next %d; want %v, 52", gotOf(r.Messages), r.Next, want(50, 50, 51))
	}
	// A whole entry too short to hold a magic byte is no cut batch.
	short := []byte{0, 0, 0, 0, 0, 0, 0, 60, 0, 0, 0, 2, 0, 0}
	if r, err := Decode(part(short), 0, false); !errors.Is(err, ErrCorrupt) || r.Partial {
		t.Errorf("an entry of length 2: Partial %t, err %v; want ErrCorrupt", r.Partial, err)
	}
	legacy := fetchtest.Message{Offset: 9, Magic: 1, Value: []byte("v")}.AppendTo(nil)
	legacy[len(legacy)-1] ^= 0x01
	if _, err := Decode(part(legacy), 0, false); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "offset 9") {
		t.Errorf("legacy: err = %v, want ErrCorrupt naming offset 9", err)
	}
}

func TestDecodeTruncatedLastBatch(t *testing.T) {
	t.Parallel()
	b := fetchtest.Batch{BaseOffset: 0, Records: numbered(3)}.AppendTo(nil)
	whole := len(b)
	b = fetchtest.Batch{BaseOffset: 3, Codec: fetchtest.Zstd, Records: numbered(3)}.AppendTo(b)
	// A broker fills a response up to MaxBytes: the last batch is cut
	// anywhere, in its header or its records.
	for _, cut := range []int{whole + 5, whole + 12, whole + 40, len(b) - 1} {
		r, err := Decode(part(b[:cut]), 0, false)
		if err != nil || !r.Partial || r.Next != 3 || !slices.Equal(gotOf(r.Messages), want(0, 0, 1, 2)) {
			t.Errorf("cut at %d: got %v, Next %d, Partial %t, err %v; want 3 messages, 3, true, nil", cut, gotOf(r.Messages), r.Next, r.Partial, err)
		}
	}
	// Legacy message sets are cut the same way.
	legacy := fetchtest.Message{Offset: 0, Magic: 1, Value: []byte("v0")}.AppendTo(nil)
	legacy = fetchtest.Message{Offset: 1, Magic: 1, Codec: fetchtest.Gzip, Inner: []fetchtest.Message{{Magic: 1, Value: []byte("v1")}}}.AppendTo(legacy)
	r, err := Decode(part(legacy[:len(legacy)-3]), 0, false)
	if err != nil || !r.Partial || r.Next != 1 || len(r.Messages) != 1 {
		t.Errorf("legacy cut: %d messages, Next %d, Partial %t, err %v; want 1, 1, true, nil", len(r.Messages), r.Next, r.Partial, err)
	}
	// Only part of one batch (larger than the fetch size): nothing, no error.
	r, err = Decode(part(b[:whole-1]), 0, false)
	if err != nil || !r.Partial || r.Next != 0 || len(r.Messages) != 0 {
		t.Errorf("part of one batch: %d messages, Next %d, Partial %t, err %v", len(r.Messages), r.Next, r.Partial, err)
	}
}

func TestReadResponse(t *testing.T) {
	t.Parallel()
	records := fetchtest.Batch{BaseOffset: 5, Records: numbered(1)}.AppendTo(nil)
	body := fetchtest.Response(12, 250,
		fetchtest.Partition{Topic: "a", Partition: 0, HighWatermark: 6, LastStableOffset: 6, LogStartOffset: 2, PreferredReadReplica: -1, Aborted: [][2]int64{{7, 3}}, Records: records},
		fetchtest.Partition{Topic: "a", Partition: 1, ErrorCode: int16(sarama.ErrNotLeaderForPartition), HighWatermark: -1, LastStableOffset: -1, LogStartOffset: -1, PreferredReadReplica: 2},
		fetchtest.Partition{Topic: "b", Partition: 4, HighWatermark: 0, LastStableOffset: 0, LogStartOffset: 0, PreferredReadReplica: -1},
	)
	resp, err := ReadResponse(12, body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.ThrottleTime != 250*time.Millisecond || resp.Err != sarama.ErrNoError || len(resp.Partitions) != 3 {
		t.Fatalf("throttle %s, err %v, %d partitions; want 250ms, none, 3", resp.ThrottleTime, resp.Err, len(resp.Partitions))
	}
	p0, p1, p2 := resp.Partitions[0], resp.Partitions[1], resp.Partitions[2]
	if p0.Topic != "a" || p0.HighWatermark != 6 || p0.LastStableOffset != 6 || p0.LogStartOffset != 2 || p0.PreferredReadReplica != -1 ||
		!slices.Equal(p0.Aborted, []Aborted{{7, 3}}) || !bytes.Equal(p0.Records, records) || p0.Err != sarama.ErrNoError {
		t.Errorf("partition a/0 = %+v", p0)
	}
	if p1.Err != sarama.ErrNotLeaderForPartition || p1.PreferredReadReplica != 2 {
		t.Errorf("partition a/1: err %v, preferred replica %d; want NOT_LEADER, 2", p1.Err, p1.PreferredReadReplica)
	}
	if p2.Topic != "b" || p2.Partition != 4 || len(p2.Records) != 0 {
		t.Errorf("partition b/4 = %+v", p2)
	}
	if _, err := ReadResponse(12, body[:len(body)/2]); err == nil {
		t.Error("a response cut in half: no error")
	}
}

// FuzzDecode: whatever the records, Decode returns (an error or
// messages), never panics, and Next never goes back.
func FuzzDecode(f *testing.F) {
	f.Add(fetchtest.Batch{BaseOffset: 3, Codec: fetchtest.Gzip, Records: numbered(3)}.AppendTo(nil), int64(0), false)
	f.Add(fetchtest.Batch{BaseOffset: 0, Records: numbered(2)}.AppendTo(fetchtest.ControlBatch(9, 1, true).AppendTo(nil)), int64(1), true)
	f.Add(fetchtest.Message{Offset: 4, Magic: 1, Codec: fetchtest.Snappy, Xerial: true, Inner: []fetchtest.Message{{Magic: 1, Value: []byte("v")}}}.AppendTo(nil), int64(0), false)
	f.Add(fetchtest.Message{Offset: 4, Magic: 0, Value: []byte("v")}.AppendTo(nil), int64(0), false)
	f.Fuzz(func(t *testing.T, records []byte, from int64, committed bool) {
		r, _ := Decode(part(records, Aborted{ProducerID: 1, FirstOffset: 0}), from, committed)
		if r.Next < from {
			t.Errorf("Next %d before from %d", r.Next, from)
		}
		for _, m := range r.Messages {
			if m.Offset < from {
				t.Errorf("message at %d before from %d", m.Offset, from)
			}
		}
	})
}

// FuzzDecodeBatch fuzzes the records of a record batch whose header and
// CRC are right: what a CRC check cannot catch (a producer's bug, a
// broker's) is an error, never a panic.
func FuzzDecodeBatch(f *testing.F) {
	var recs []byte
	for _, r := range numbered(3) {
		recs = append(recs, fetchtest.Batch{Records: []fetchtest.Record{r}}.AppendTo(nil)[61:]...)
	}
	f.Add(recs, int8(0), int32(3), int32(2))
	f.Add(fetchtest.Compress(fetchtest.Snappy, true, recs), int8(2), int32(3), int32(2))
	f.Add(fetchtest.Compress(fetchtest.LZ4, false, recs), int8(3), int32(3), int32(2))
	f.Add(fetchtest.Compress(fetchtest.Zstd, false, recs), int8(4), int32(3), int32(2))
	f.Add(fetchtest.Compress(fetchtest.Gzip, false, recs), int8(1), int32(3), int32(2))
	f.Fuzz(func(t *testing.T, raw []byte, codec int8, count, last int32) {
		b := fetchtest.Batch{BaseOffset: 10, Codec: codec & 7, Raw: raw, Count: count, LastOffsetDelta: last}.AppendTo(nil)
		r, _ := Decode(part(b), 10, false)
		if r.Next < 10 {
			t.Errorf("Next %d before 10", r.Next)
		}
	})
}
