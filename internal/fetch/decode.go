package fetch

// A partition's records decoded into messages: record batches (magic 2)
// and legacy message sets (magic 0 and 1), one pass over each, messages
// written in place in chunks of a slab.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
	"unsafe"

	"github.com/IBM/sarama"
)

// ErrCorrupt is wrapped by the error of Decode for records that are not
// what their format says: a CRC that does not match, a batch whose
// records overrun it, a compressed payload that does not decompress.
var ErrCorrupt = errors.New("fetch: corrupt records")

// Records is what Decode made of a partition's records.
type Records struct {
	// Messages are the messages at or after the offset asked for, in
	// offset order, without control records and, reading committed, the
	// records of aborted transactions.
	Messages []*sarama.ConsumerMessage
	// Next is the offset after the last batch (or legacy message) read
	// whole, whether it held messages, a control record, aborted records
	// or none that compaction left; the offset asked for when none moved
	// it.
	Next int64
	// Partial tells that the records end with a batch cut short: a broker
	// fills a response up to its MaxBytes, and a batch larger than the
	// fetch size comes only in part. When Next did not move, the next
	// fetch needs a larger size.
	Partial bool
	// Bytes is the size of the messages' keys, values and header keys and
	// values.
	Bytes int64
	// Wire is the size of the partition's records on the wire.
	Wire int
}

// SlabChunk is how many messages of a slab are allocated together: as
// many as fit in 32 KiB, the Go runtime's largest small object, so that a
// chunk is allocated from a size class, and a message the user keeps
// keeps its chunk alive, not the whole response's messages.
const SlabChunk = (32 << 10) / int(unsafe.Sizeof(sarama.ConsumerMessage{}))

// Decode decodes p's records from offset from on. Reading committed, it
// leaves out the records of p.Aborted's transactions (as Kafka's consumer
// does: a producer's transactional batches from its aborted transaction's
// first offset on, until its ABORT marker). Keys, values and headers alias
// p.Records, or the batch's decompressed bytes. A batch cut short at the
// end of the records is no error (Records.Partial); a corrupt one is, an
// error that wraps ErrCorrupt and names the topic, partition and offset,
// with what was decoded before it. Safe for concurrent use on different
// partitions.
func Decode(p *Partition, from int64, readCommitted bool) (Records, error) {
	d := decoder{p: p, from: from}
	d.out.Next, d.out.Wire = from, len(p.Records)
	if readCommitted {
		d.aborted = newAbortedTransactions(p.Aborted)
	}
	d.left = countRecords(p.Records)
	if d.left > 0 {
		d.out.Messages = make([]*sarama.ConsumerMessage, 0, d.left)
	}
	err := d.records(p.Records)
	return d.out, err
}

// decoder holds the state of one Decode.
type decoder struct {
	p       *Partition
	from    int64
	aborted *abortedTransactions // nil reading uncommitted
	out     Records
	chunk   []sarama.ConsumerMessage // what is left of the chunk being filled
	left    int                      // messages expected that no chunk holds yet (an estimate)
	headers []sarama.RecordHeader    // what is left of the headers' chunk
	hptrs   []*sarama.RecordHeader   // what is left of the header pointers' chunk
}

// The layout of a record batch's header (magic 2), and of a legacy
// message's (magic 0 and 1): both start with an offset and a length, and
// have their magic byte at the same place.
const (
	entryHeader       = 12 // offset, length
	magicAt           = 16
	batchHeader       = 61
	batchCRCAt        = 17
	batchAttrsAt      = 21
	batchLastDeltaAt  = 23
	batchFirstTimeAt  = 27
	batchMaxTimeAt    = 35
	batchProducerAt   = 43
	batchCountAt      = 57
	codecMask         = 0x07
	logAppendTimeFlag = 0x08
	transactionalFlag = 0x10
	controlFlag       = 0x20
)

// records decodes the batches and message sets of b, in order, up to the
// first one cut short.
func (d *decoder) records(b []byte) error {
	for len(b) > 0 {
		if len(b) < entryHeader {
			d.out.Partial = true
			return nil
		}
		size := int(int32(binary.BigEndian.Uint32(b[8:12])))
		if size < 0 {
			return d.corrupt(int64(binary.BigEndian.Uint64(b)), "negative length")
		}
		if len(b)-entryHeader < size {
			d.out.Partial = true
			return nil
		}
		if size < magicAt+1-entryHeader {
			return d.corrupt(int64(binary.BigEndian.Uint64(b)), "length shorter than a header")
		}
		entry := b[:entryHeader+size]
		b = b[entryHeader+size:]
		var err error
		switch magic := entry[magicAt]; magic {
		case 2:
			err = d.batch(entry)
		case 0, 1:
			err = d.legacy(entry)
		default:
			err = d.corrupt(int64(binary.BigEndian.Uint64(entry)), fmt.Sprintf("unknown magic %d", magic))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// countRecords returns the number of records of the whole record batches
// of b that are no control batches, and one for each legacy message: the
// size of the slab to expect.
func countRecords(b []byte) int {
	n := 0
	for len(b) >= batchHeader {
		size := int(int32(binary.BigEndian.Uint32(b[8:12])))
		if size < 0 || len(b)-entryHeader < size {
			break
		}
		switch {
		case b[magicAt] != 2:
			n++
		case binary.BigEndian.Uint16(b[batchAttrsAt:])&controlFlag == 0 && size >= batchHeader-entryHeader:
			n += max(int(int32(binary.BigEndian.Uint32(b[batchCountAt:]))), 0)
		}
		b = b[entryHeader+size:]
	}
	return n
}

// message returns a message of the slab to fill, written in place.
func (d *decoder) message() *sarama.ConsumerMessage {
	if len(d.chunk) == 0 {
		d.chunk = make([]sarama.ConsumerMessage, min(max(d.left, 16), SlabChunk))
		d.left -= len(d.chunk)
	}
	m := &d.chunk[0]
	d.chunk = d.chunk[1:]
	d.out.Messages = append(d.out.Messages, m)
	return m
}

// recordHeaders returns n headers of a chunk, and the slice of pointers to
// them that a message holds (capped: an append to it does not write over
// the next message's).
func (d *decoder) recordHeaders(n int) []*sarama.RecordHeader {
	if len(d.headers) < n {
		d.headers = make([]sarama.RecordHeader, max(n, 64))
	}
	if len(d.hptrs) < n {
		d.hptrs = make([]*sarama.RecordHeader, max(n, 64))
	}
	ptrs := d.hptrs[:n:n]
	for i := range ptrs {
		ptrs[i] = &d.headers[i]
	}
	d.headers, d.hptrs = d.headers[n:], d.hptrs[n:]
	return ptrs
}

// noHeaders is the Headers of a record without headers: empty, not nil,
// as sarama's decoder leaves it.
var noHeaders = []*sarama.RecordHeader{}

// corrupt returns the error of a corrupt batch at offset.
func (d *decoder) corrupt(offset int64, what string) error {
	return fmt.Errorf("fetch: %s/%d: batch at offset %d: %s: %w", d.p.Topic, d.p.Partition, offset, what, ErrCorrupt)
}

// millisTime returns the time of a timestamp in milliseconds, as sarama
// decodes it: the zero time for a negative one (none).
func millisTime(ms int64) time.Time {
	if ms < 0 {
		return time.Time{}
	}
	return time.Unix(ms/1000, (ms%1000)*int64(time.Millisecond))
}
