package fetch

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer/internal/fetch/fetchtest"
)

// TestPartitionFetcherRecords: the messages of a response from the fetch
// offset on, in order, with their partition and timestamps; a control
// batch and a batch that compaction emptied are skipped but moved past.
func TestPartitionFetcherRecords(t *testing.T) {
	f := testFetcher(12)
	control := recordBatch(15, 1)
	control.Control = true
	compacted := fetchtest.Batch{BaseOffset: 16, LastOffsetDelta: 3}
	rec, _, err := f.records(partitionOf(22, recordBatch(10, 5), control, compacted, recordBatch(20, 2)), false)
	if err != nil {
		t.Fatal(err)
	}
	msgs := rec.Messages
	if got, want := offsets(msgs), []int64{12, 13, 14, 20, 21}; !slices.Equal(got, want) {
		t.Fatalf("offsets %v; want %v", got, want)
	}
	if f.offset != 22 {
		t.Errorf("next offset %d; want 22", f.offset)
	}
	if m := msgs[0]; m.Topic != "t" || m.Partition != 3 || !m.Timestamp.Equal(time.Unix(102, 0)) || m.Value[0] != 2 {
		t.Errorf("first message %+v; want t/3 offset 12 at 102 s, value 2", m)
	}

	f = testFetcher(0)
	if rec, moved, err := f.records(partitionOf(3, fetchtest.Batch{LastOffsetDelta: 2}), false); err != nil || len(rec.Messages) != 0 || !moved || f.offset != 3 {
		t.Errorf("a batch emptied by compaction: %d messages, moved %v, next %d, %v; want none, moved, 3", len(rec.Messages), moved, f.offset, err)
	}
}

// TestPartitionFetcherPartial: a response with only part of a batch asks for
// a larger fetch, up to Fetch.Max; there a message is skipped with
// ErrMessageTooLarge, as sarama's consumer does.
func TestPartitionFetcherPartial(t *testing.T) {
	f := testFetcher(5)
	partial := partitionOf(6, recordBatch(5, 1))
	partial.Records = partial.Records[:len(partial.Records)-3] // cut short
	if rec, _, err := f.records(partial, false); err != nil || len(rec.Messages) != 0 || f.fetchSize != 2*f.hub.conf.Consumer.Fetch.Default || f.offset != 5 {
		t.Fatalf("partial: %d messages, fetch size %d, next %d, %v; want none, %d, 5", len(rec.Messages), f.fetchSize, f.offset, err, 2*f.hub.conf.Consumer.Fetch.Default)
	}
	f.hub.conf.Consumer.Fetch.Max = f.fetchSize
	if _, _, err := f.records(partial, false); !errors.Is(err, sarama.ErrMessageTooLarge) || f.offset != 6 {
		t.Fatalf("partial at Fetch.Max: next %d, %v; want 6, ErrMessageTooLarge", f.offset, err)
	}
	if _, _, err := f.records(partitionOf(7, recordBatch(6, 1)), false); err != nil || f.fetchSize != f.hub.conf.Consumer.Fetch.Default {
		t.Errorf("after a whole batch: fetch size %d, %v; want %d", f.fetchSize, err, f.hub.conf.Consumer.Fetch.Default)
	}
}

// TestPartitionFetcherLegacy: the fetcher reads legacy message sets
// (magic 0 and 1) itself. They ended the fetcher, and the partition went
// back to sarama's consumer.
func TestPartitionFetcherLegacy(t *testing.T) {
	f := testFetcher(1)
	p := partitionOf(3, fetchtest.Message{Offset: 0, Magic: 0, Value: []byte("a")}, fetchtest.Message{Offset: 1, Magic: 1, Value: []byte("b")},
		fetchtest.Message{Offset: 2, Magic: 1, Value: []byte("c")})
	rec, moved, err := f.records(p, false)
	if got := offsets(rec.Messages); err != nil || !moved || !slices.Equal(got, []int64{1, 2}) || f.offset != 3 {
		t.Fatalf("legacy message sets: offsets %v, moved %v, next %d, %v; want [1 2], moved, 3", got, moved, f.offset, err)
	}
}

// TestPartitionFetcherCorrupt: a corrupt batch is an error wrapping
// ErrCorrupt, the messages before it delivered and the offset at
// it: nothing is skipped.
func TestPartitionFetcherCorrupt(t *testing.T) {
	f := testFetcher(0)
	p := partitionOf(4, recordBatch(0, 2), recordBatch(2, 2))
	p.Records[len(p.Records)-1] ^= 0xff // the second batch's last byte: its CRC fails
	rec, moved, err := f.records(p, false)
	if got := offsets(rec.Messages); !errors.Is(err, ErrCorrupt) || !moved || !slices.Equal(got, []int64{0, 1}) || f.offset != 2 {
		t.Fatalf("offsets %v, moved %v, next %d, %v; want [0 1], moved, 2, ErrCorrupt", got, moved, f.offset, err)
	}
}

// transactionPartition is the part of a response a broker returns,
// reading committed, for a partition that one transactional producer (ID
// 7) wrote as Kafka 3.9 writes it: transactions of offsets 0-2 (committed,
// marker at 3), 4-6 (aborted, marker 7), 8-10 (committed, marker 11) and
// 12-14 (aborted, marker 15), each in two batches.
func transactionPartition() *Partition {
	var entries []interface{ AppendTo([]byte) []byte }
	for txn, abort := range []bool{false, true, false, true} {
		first := int64(4 * txn)
		for _, b := range []fetchtest.Batch{recordBatch(first, 1), recordBatch(first+1, 2)} {
			b.Transactional, b.ProducerID = true, 7
			entries = append(entries, b)
		}
		entries = append(entries, fetchtest.ControlBatch(first+3, 7, abort))
	}
	p := partitionOf(16, entries...)
	p.Aborted = []Aborted{{ProducerID: 7, FirstOffset: 12}, {ProducerID: 7, FirstOffset: 4}}
	return p
}

// TestPartitionFetcherReadCommitted: reading committed, the batches of aborted
// transactions are skipped up to their producer's ABORT marker (the
// block's aborted transactions come in any order), the records of a
// committed transaction after an aborted one are kept, and the fetch
// moves past the trailing marker. Reading uncommitted keeps them all.
// Batch mode fell back to sarama's consumer to read committed.
func TestPartitionFetcherReadCommitted(t *testing.T) {
	t.Parallel()
	f := testFetcher(0)
	rec, moved, err := f.records(transactionPartition(), true)
	if err != nil || !moved {
		t.Fatalf("records: moved %v, %v", moved, err)
	}
	msgs, size := rec.Messages, rec.Bytes+int64(len(rec.Messages))*MessageOverhead
	if got, want := offsets(msgs), []int64{0, 1, 2, 8, 9, 10}; !slices.Equal(got, want) {
		t.Errorf("read committed: offsets %v, want %v", got, want)
	}
	if want := 6 + 6*MessageOverhead; size != want {
		t.Errorf("size %d, want %d (one byte of value and a message each)", size, want)
	}
	if f.offset != 16 {
		t.Errorf("next offset %d, want 16, past the last marker", f.offset)
	}

	f = testFetcher(0)
	rec, _, err = f.records(transactionPartition(), false)
	if got, want := offsets(rec.Messages), []int64{0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14}; err != nil || !slices.Equal(got, want) {
		t.Errorf("read uncommitted: offsets %v, %v; want %v", got, err, want)
	}
}
