package fetch

// Record batches (magic 2): the header, the CRC-32C, the transactions
// and control batches, then the records.

import (
	"cmp"
	"encoding/binary"
	"hash/crc32"
	"slices"
	"time"

	"github.com/IBM/sarama"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// batch decodes one whole record batch b.
func (d *decoder) batch(b []byte) error {
	base := int64(binary.BigEndian.Uint64(b))
	if len(b) < batchHeader {
		return d.corrupt(base, "record batch shorter than its header")
	}
	if crc32.Checksum(b[batchAttrsAt:], castagnoli) != binary.BigEndian.Uint32(b[batchCRCAt:]) {
		return d.corrupt(base, "CRC-32C mismatch")
	}
	attrs := binary.BigEndian.Uint16(b[batchAttrsAt:])
	end := base + int64(int32(binary.BigEndian.Uint32(b[batchLastDeltaAt:]))) + 1
	d.out.Next = max(d.out.Next, end) // an empty batch (compaction) moves past it too
	control := attrs&controlFlag != 0
	producer := int64(binary.BigEndian.Uint64(b[batchProducerAt:]))
	if d.aborted.skip(producer, attrs&transactionalFlag != 0, control, end, b[batchHeader:]) || control || end <= d.from {
		return nil
	}
	count := int(int32(binary.BigEndian.Uint32(b[batchCountAt:])))
	records := b[batchHeader:]
	if codec := int8(attrs & codecMask); codec != 0 {
		var err error
		if records, err = decompress(codec, records, 2); err != nil {
			return d.corrupt(base, err.Error())
		}
	}
	first := millisTime(int64(binary.BigEndian.Uint64(b[batchFirstTimeAt:])))
	var appended time.Time // the batch's time for every record: LogAppendTime
	logAppend := attrs&logAppendTimeFlag != 0
	if logAppend {
		appended = millisTime(int64(binary.BigEndian.Uint64(b[batchMaxTimeAt:])))
	}
	for range count {
		var r record
		var ok bool
		if r, records, ok = readRecord(records); !ok {
			return d.corrupt(base, "record overruns its batch")
		}
		offset := base + r.offsetDelta
		if offset < d.from {
			continue
		}
		m := d.message()
		m.Topic, m.Partition, m.Offset = d.p.Topic, d.p.Partition, offset
		m.Key, m.Value = r.key, r.value
		if logAppend {
			m.Timestamp = appended
		} else {
			m.Timestamp = first.Add(time.Duration(r.timestampDelta) * time.Millisecond)
		}
		d.out.Bytes += int64(len(r.key) + len(r.value))
		switch r.headers {
		case -1:
			m.Headers = nil
			continue
		case 0:
			m.Headers = noHeaders
			continue
		}
		m.Headers = d.recordHeaders(r.headers)
		if !d.readHeaders(m.Headers, r.headerBytes) {
			return d.corrupt(base, "record header overruns its record")
		}
	}
	return nil
}

// record is a record of a batch as readRecord reads it: its headers not
// yet, only their count and bytes.
type record struct {
	timestampDelta int64
	offsetDelta    int64
	key, value     []byte
	headers        int
	headerBytes    []byte
}

// readRecord reads the record at the start of b, and returns the rest of
// b; false when b does not hold it whole.
func readRecord(b []byte) (r record, rest []byte, ok bool) {
	length, n := binary.Varint(b)
	if n <= 0 || length < 0 || int64(len(b)-n) < length {
		return r, nil, false
	}
	rest = b[n+int(length):]
	b = b[n : n+int(length)]
	if len(b) < 1 {
		return r, nil, false
	}
	b = b[1:] // attributes: none used
	if r.timestampDelta, b, ok = readVarint(b); !ok {
		return r, nil, false
	}
	if r.offsetDelta, b, ok = readVarint(b); !ok {
		return r, nil, false
	}
	if r.key, b, ok = readVarintBytes(b); !ok {
		return r, nil, false
	}
	if r.value, b, ok = readVarintBytes(b); !ok {
		return r, nil, false
	}
	var headers int64
	if headers, b, ok = readVarint(b); !ok || headers < -1 || headers > int64(len(b)) {
		return r, nil, false
	}
	r.headers, r.headerBytes = int(headers), b // -1: null, as sarama reads it
	return r, rest, true
}

// readHeaders reads len(hs) headers from b into hs.
func (d *decoder) readHeaders(hs []*sarama.RecordHeader, b []byte) bool {
	var ok bool
	for _, h := range hs {
		if h.Key, b, ok = readVarintBytes(b); !ok {
			return false
		}
		if h.Value, b, ok = readVarintBytes(b); !ok {
			return false
		}
		d.out.Bytes += int64(len(h.Key) + len(h.Value))
	}
	return len(b) == 0
}

// readVarint reads a zig-zag varint.
func readVarint(b []byte) (int64, []byte, bool) {
	if len(b) > 0 && b[0] < 0x80 { // one byte: most deltas and lengths
		v := int64(b[0])
		return v>>1 ^ -(v & 1), b[1:], true
	}
	v, n := binary.Varint(b)
	if n <= 0 {
		return 0, nil, false
	}
	return v, b[n:], true
}

// readVarintBytes reads bytes after their varint length: nil for -1.
func readVarintBytes(b []byte) ([]byte, []byte, bool) {
	l, b, ok := readVarint(b)
	switch {
	case !ok || l < -1 || l > int64(len(b)):
		return nil, nil, false
	case l == -1:
		return nil, b, true
	}
	return b[:l:l], b[l:], true
}

// abortedTransactions filters, reading committed, the record batches of
// one partition: a transactional batch of a producer whose aborted
// transaction began at or before it is skipped, until that producer's
// ABORT marker (as Kafka's consumer does). nil reads uncommitted: it skips
// nothing.
type abortedTransactions struct {
	pending   []Aborted          // by first offset, not reached yet
	producers map[int64]struct{} // with an aborted transaction open
}

func newAbortedTransactions(txns []Aborted) *abortedTransactions {
	pending := slices.Clone(txns)
	slices.SortFunc(pending, func(a, b Aborted) int { return cmp.Compare(a.FirstOffset, b.FirstOffset) })
	return &abortedTransactions{pending: pending}
}

// skip reports whether the batch of producer that ends before end is to be
// skipped; a is told of each batch in offset order, control batches too
// (records: the control batch's records, whose first is its marker).
func (a *abortedTransactions) skip(producer int64, transactional, control bool, end int64, records []byte) bool {
	if a == nil {
		return false
	}
	for len(a.pending) > 0 && a.pending[0].FirstOffset < end {
		if a.producers == nil {
			a.producers = make(map[int64]struct{})
		}
		a.producers[a.pending[0].ProducerID] = struct{}{}
		a.pending = a.pending[1:]
	}
	if control {
		if isAbortMarker(records) {
			delete(a.producers, producer)
		}
		return true
	}
	_, open := a.producers[producer]
	return transactional && open
}

// isAbortMarker reports whether the records of a control batch begin with
// a transaction's ABORT marker: a key of a version (int16) and a type
// (int16), 0 for ABORT and 1 for COMMIT. Control batches are never
// compressed.
func isAbortMarker(records []byte) bool {
	r, _, ok := readRecord(records)
	return ok && len(r.key) >= 4 && binary.BigEndian.Uint16(r.key[2:4]) == 0
}
