package fetch

// The engine's decode before internal/fetch, kept as the tests' oracle
// of what sarama makes of a response (TestDecodeAsToday,
// TestDecodeAsTodayBroker, BenchmarkDecode's baseline): sarama's decode
// of the whole response, then saramaParse builds the messages a second
// time from its records.

import (
	"cmp"
	"encoding/binary"
	"errors"
	"math"
	"reflect"
	"slices"

	"github.com/IBM/sarama"
)

// errSaramaLegacy is saramaParse's error for a legacy message set, which
// the engine handed to sarama's partition consumer (saramaLegacyMessages).
var errSaramaLegacy = errors.New("legacy message set")

// saramaParse returns the messages of a response block from offset on (a batch
// may begin before it) and their bytes (keys, values and headers),
// skipping control batches and, reading committed, the batches of aborted
// transactions (the block's AbortedTransactions, as Kafka's consumer
// filters them); and moves offset past every batch it read, whether
// records remain in it or compaction removed them all. moved tells
// whether it did. One slab holds the messages of the block, and one slice
// the pointers to them. A response that holds only part of a batch (a
// batch larger than the fetch size) makes the next fetch ask for more, as
// sarama's consumer does.
func (f *Fetcher) saramaParse(block *sarama.FetchResponseBlock) (msgs []*sarama.ConsumerMessage, size int64, moved bool, err error) {
	n := 0
	for _, records := range block.RecordsSet {
		if records.MsgSet != nil {
			return nil, 0, false, errSaramaLegacy
		}
		if rb := records.RecordBatch; rb != nil && !rb.Control && !rb.PartialTrailingRecord {
			n += len(rb.Records)
		}
	}
	conf := f.hub.conf
	var aborted *saramaAborted
	if conf.Consumer.IsolationLevel == sarama.ReadCommitted {
		aborted = newSaramaAborted(block.AbortedTransactions)
	}
	// The messages are allocated in chunks of SlabChunk: a message the
	// user keeps keeps its chunk alive, not the whole slab. Their keys,
	// values and headers point into the response, as sarama's consumer's
	// do.
	var chunk []sarama.ConsumerMessage
	msgs = make([]*sarama.ConsumerMessage, 0, n)
	partial := block.Partial
	next := f.offset
	for _, records := range block.RecordsSet {
		rb := records.RecordBatch
		switch {
		case rb == nil:
			continue
		case rb.PartialTrailingRecord:
			partial = true
			continue
		}
		end := rb.FirstOffset + int64(rb.LastOffsetDelta) + 1
		next = max(next, end)
		if aborted.skip(rb, end) || rb.Control { // skip sees control batches too: an ABORT ends its producer's skipping
			continue
		}
		for _, rec := range rb.Records {
			offset := rb.FirstOffset + rec.OffsetDelta
			if offset < f.offset {
				continue
			}
			if len(chunk) == 0 {
				chunk = make([]sarama.ConsumerMessage, min(n-len(msgs), SlabChunk))
			}
			m := &chunk[0] // written in place: no copy of the struct
			chunk = chunk[1:]
			m.Topic, m.Partition, m.Offset = f.tp.Topic, f.tp.Partition, offset
			m.Key, m.Value, m.Headers = rec.Key, rec.Value, rec.Headers
			size += int64(len(rec.Key)+len(rec.Value)) + MessageOverhead
			for _, h := range rec.Headers {
				size += int64(len(h.Key) + len(h.Value))
			}
			if rb.LogAppendTime {
				m.Timestamp = rb.MaxTimestamp
			} else {
				m.Timestamp = rb.FirstTimestamp.Add(rec.TimestampDelta)
			}
			msgs = append(msgs, m)
		}
	}
	if next == f.offset && !partial {
		// Nothing to move past: the response may hold a batch whose
		// records compaction removed (kept for its producer's state),
		// which sarama's decoder leaves out; it keeps the batch's end.
		if end, ok := recordsEnd(block); ok && end > next && end <= block.HighWaterMarkOffset {
			next = end
		}
	}
	moved = next > f.offset
	f.offset = next
	switch {
	case moved:
		f.fetchSize = conf.Consumer.Fetch.Default
	case partial && conf.Consumer.Fetch.Max > 0 && f.fetchSize >= conf.Consumer.Fetch.Max:
		f.offset++ // a message larger than Fetch.Max: skip it, as sarama does
		return nil, 0, false, sarama.ErrMessageTooLarge
	case partial:
		f.fetchSize = int32(min(2*int64(f.fetchSize), math.MaxInt32))
		if conf.Consumer.Fetch.Max > 0 {
			f.fetchSize = min(f.fetchSize, conf.Consumer.Fetch.Max)
		}
	}
	return msgs, size, moved, nil
}

// saramaAborted filters, reading committed, the record batches of
// one response block: a transactional batch of a producer whose aborted
// transaction began at or before it is skipped, until that producer's
// ABORT marker (as Kafka's consumer does). nil reads uncommitted: it skips
// nothing.
type saramaAborted struct {
	pending   []*sarama.AbortedTransaction // by first offset, not reached yet
	producers map[int64]struct{}           // with an aborted transaction open
}

func newSaramaAborted(txns []*sarama.AbortedTransaction) *saramaAborted {
	pending := slices.Clone(txns)
	slices.SortFunc(pending, func(a, b *sarama.AbortedTransaction) int { return cmp.Compare(a.FirstOffset, b.FirstOffset) })
	return &saramaAborted{pending: pending, producers: make(map[int64]struct{})}
}

// skip reports whether the batch rb, which ends before end, is to be
// skipped; a is told of each batch in offset order, control batches too.
func (a *saramaAborted) skip(rb *sarama.RecordBatch, end int64) bool {
	if a == nil {
		return false
	}
	for len(a.pending) > 0 && a.pending[0].FirstOffset < end {
		a.producers[a.pending[0].ProducerID] = struct{}{}
		a.pending = a.pending[1:]
	}
	if rb.Control {
		if saramaAbortMarker(rb) {
			delete(a.producers, rb.ProducerID)
		}
		return true
	}
	_, open := a.producers[rb.ProducerID]
	return rb.IsTransactional && open
}

// saramaAbortMarker reports whether the control batch rb is a transaction's
// ABORT marker: its record's key is a version (int16) and a type (int16),
// 0 for ABORT and 1 for COMMIT.
func saramaAbortMarker(rb *sarama.RecordBatch) bool {
	if len(rb.Records) == 0 || len(rb.Records[0].Key) < 4 {
		return false
	}
	return binary.BigEndian.Uint16(rb.Records[0].Key[2:4]) == 0
}

// recordsEnd returns the offset after the last record batch that sarama
// decoded in block, empty batches included, which it keeps unexported
// (FetchResponseBlock.recordsNextOffset; its partition consumer moves to
// it when a response has no record): false when the field is not there
// or not set. Reading it through reflection only reads.
func recordsEnd(block *sarama.FetchResponseBlock) (int64, bool) {
	field := reflect.ValueOf(block).Elem().FieldByName("recordsNextOffset")
	if !field.IsValid() || field.Kind() != reflect.Pointer || field.IsNil() || field.Elem().Kind() != reflect.Int64 {
		return 0, false
	}
	return field.Elem().Int(), true
}
