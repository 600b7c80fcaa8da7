// Package fetchtest builds the records of Fetch responses for the tests
// of package fetch and of the engine: record batches (magic 2) and
// legacy messages (magic 0 and 1) in every codec, and response bodies
// that hold them.
package fetchtest

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The codecs of a batch's attributes.
const (
	None   int8 = 0
	Gzip   int8 = 1
	Snappy int8 = 2
	LZ4    int8 = 3
	Zstd   int8 = 4
)

// Header is a record's header.
type Header struct{ Key, Value []byte }

// Record is a record of a Batch. A nil Headers writes none.
type Record struct {
	TimestampDelta int64
	OffsetDelta    int32
	Key, Value     []byte
	Headers        []Header
}

// Batch is a record batch (magic 2).
type Batch struct {
	BaseOffset      int64
	Codec           int8
	Xerial          bool // snappy in xerial's framing, as Kafka's Java producer writes it
	LogAppendTime   bool
	Transactional   bool
	Control         bool
	FirstTimestamp  int64
	MaxTimestamp    int64
	ProducerID      int64
	LastOffsetDelta int32 // of the last record when 0 and there are records
	Records         []Record
	// Raw, when not nil, are the batch's records as written, with Count
	// their number: Records and Codec's compression are left out (Codec
	// is still the batch's attribute).
	Raw   []byte
	Count int32
}

// AppendTo appends the batch, its CRC-32C computed, to dst.
func (b Batch) AppendTo(dst []byte) []byte {
	recs, count := b.Raw, b.Count
	if b.Raw == nil {
		for _, r := range b.Records {
			recs = appendRecord(recs, r)
		}
		if b.Codec != None {
			recs = Compress(b.Codec, b.Xerial, recs)
		}
		count = int32(len(b.Records))
	}
	last := b.LastOffsetDelta
	if last == 0 && len(b.Records) > 0 {
		last = b.Records[len(b.Records)-1].OffsetDelta
	}
	attrs := uint16(b.Codec)
	for _, f := range []struct {
		set  bool
		flag uint16
	}{{b.LogAppendTime, 0x08}, {b.Transactional, 0x10}, {b.Control, 0x20}} {
		if f.set {
			attrs |= f.flag
		}
	}
	start := len(dst)
	dst = binary.BigEndian.AppendUint64(dst, uint64(b.BaseOffset))
	dst = binary.BigEndian.AppendUint32(dst, uint32(61-12+len(recs)))
	dst = binary.BigEndian.AppendUint32(dst, 0) // partition leader epoch
	dst = append(dst, 2)
	dst = binary.BigEndian.AppendUint32(dst, 0) // the CRC, below
	dst = binary.BigEndian.AppendUint16(dst, attrs)
	dst = binary.BigEndian.AppendUint32(dst, uint32(last))
	dst = binary.BigEndian.AppendUint64(dst, uint64(b.FirstTimestamp))
	dst = binary.BigEndian.AppendUint64(dst, uint64(b.MaxTimestamp))
	dst = binary.BigEndian.AppendUint64(dst, uint64(b.ProducerID))
	dst = binary.BigEndian.AppendUint16(dst, 0) // producer epoch
	dst = binary.BigEndian.AppendUint32(dst, 0) // base sequence
	dst = binary.BigEndian.AppendUint32(dst, uint32(count))
	dst = append(dst, recs...)
	crc := crc32.Checksum(dst[start+21:], crc32.MakeTable(crc32.Castagnoli))
	binary.BigEndian.PutUint32(dst[start+17:], crc)
	return dst
}

// ControlBatch returns the control batch of a transaction's marker:
// ABORT, or COMMIT.
func ControlBatch(offset, producerID int64, abort bool) Batch {
	key := []byte{0, 0, 0, 1}
	if abort {
		key[3] = 0
	}
	return Batch{BaseOffset: offset, Control: true, Transactional: true, ProducerID: producerID,
		Records: []Record{{Key: key, Value: []byte{0, 0, 0, 0, 0, 0}}}}
}

func appendRecord(dst []byte, r Record) []byte {
	var body []byte
	body = append(body, 0) // attributes
	body = binary.AppendVarint(body, r.TimestampDelta)
	body = binary.AppendVarint(body, int64(r.OffsetDelta))
	body = appendVarintBytes(body, r.Key)
	body = appendVarintBytes(body, r.Value)
	body = binary.AppendVarint(body, int64(len(r.Headers)))
	for _, h := range r.Headers {
		body = appendVarintBytes(body, h.Key)
		body = appendVarintBytes(body, h.Value)
	}
	dst = binary.AppendVarint(dst, int64(len(body)))
	return append(dst, body...)
}

func appendVarintBytes(dst, b []byte) []byte {
	if b == nil {
		return binary.AppendVarint(dst, -1)
	}
	return append(binary.AppendVarint(dst, int64(len(b))), b...)
}

// Message is a legacy message (magic 0 or 1): Inner, compressed in Codec,
// makes it a wrapper, whose Offset is its last inner message's (whose
// offsets are relative, from 0, with magic 1).
type Message struct {
	Offset        int64
	Magic         int8
	Codec         int8
	Xerial        bool
	BrokenLZ4     bool // a wrong frame descriptor checksum, as Kafka wrote it for magic 0
	LogAppendTime bool
	Timestamp     int64
	Key, Value    []byte
	Inner         []Message
}

// AppendTo appends the message entry (offset, size, message) to dst.
func (m Message) AppendTo(dst []byte) []byte {
	value := m.Value
	if len(m.Inner) > 0 {
		var inner []byte
		for _, i := range m.Inner {
			inner = i.AppendTo(inner)
		}
		value = Compress(m.Codec, m.Xerial, inner)
		if m.BrokenLZ4 && m.Codec == LZ4 {
			value[6] ^= 0xff // the descriptor's checksum, with the flags of lz4's writer
		}
	}
	var msg []byte
	msg = append(msg, 0, 0, 0, 0, byte(m.Magic))
	attrs := byte(m.Codec)
	if m.LogAppendTime {
		attrs |= 0x08
	}
	msg = append(msg, attrs)
	if m.Magic == 1 {
		msg = binary.BigEndian.AppendUint64(msg, uint64(m.Timestamp))
	}
	msg = appendBytes(msg, m.Key)
	msg = appendBytes(msg, value)
	binary.BigEndian.PutUint32(msg, crc32.ChecksumIEEE(msg[4:]))
	dst = binary.BigEndian.AppendUint64(dst, uint64(m.Offset))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(msg)))
	return append(dst, msg...)
}

func appendBytes(dst, b []byte) []byte {
	if b == nil {
		return binary.BigEndian.AppendUint32(dst, 0xffffffff)
	}
	return append(binary.BigEndian.AppendUint32(dst, uint32(len(b))), b...)
}

// Compress compresses b in codec; snappy in xerial's framing (blocks of
// 32 KiB) when xerial is set.
func Compress(codec int8, xerial bool, b []byte) []byte {
	var buf bytes.Buffer
	switch codec {
	case Gzip:
		w := gzip.NewWriter(&buf)
		_, _ = w.Write(b)
		_ = w.Close()
	case Snappy:
		if !xerial {
			return snappy.Encode(nil, b)
		}
		out := []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0, 0, 0, 0, 1, 0, 0, 0, 1}
		for len(b) > 0 {
			n := min(len(b), 32<<10)
			block := snappy.Encode(nil, b[:n])
			out = binary.BigEndian.AppendUint32(out, uint32(len(block)))
			out = append(out, block...)
			b = b[n:]
		}
		return out
	case LZ4:
		w := lz4.NewWriter(&buf)
		_, _ = w.Write(b)
		_ = w.Close()
	case Zstd:
		enc, _ := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
		defer enc.Close()
		return enc.EncodeAll(b, nil)
	default:
		return b
	}
	return buf.Bytes()
}

// Partition is a partition of a Response.
type Partition struct {
	Topic                string
	Partition            int32
	ErrorCode            int16
	HighWatermark        int64
	LastStableOffset     int64
	LogStartOffset       int64
	PreferredReadReplica int32
	Aborted              [][2]int64 // producer ID, first offset
	Records              []byte
}

// Response returns the body of a Fetch response of version (up to 12:
// topics by name) that holds parts, in order.
func Response(version int16, throttleMillis int32, parts ...Partition) []byte {
	resp := kmsg.NewPtrFetchResponse()
	resp.Version, resp.ThrottleMillis = version, throttleMillis
	for _, p := range parts {
		if n := len(resp.Topics); n == 0 || resp.Topics[n-1].Topic != p.Topic {
			t := kmsg.NewFetchResponseTopic()
			t.Topic = p.Topic
			resp.Topics = append(resp.Topics, t)
		}
		kp := kmsg.NewFetchResponseTopicPartition()
		kp.Partition, kp.ErrorCode, kp.HighWatermark = p.Partition, p.ErrorCode, p.HighWatermark
		kp.LastStableOffset, kp.LogStartOffset, kp.PreferredReadReplica = p.LastStableOffset, p.LogStartOffset, p.PreferredReadReplica
		for _, a := range p.Aborted {
			at := kmsg.NewFetchResponseTopicPartitionAbortedTransaction()
			at.ProducerID, at.FirstOffset = a[0], a[1]
			kp.AbortedTransactions = append(kp.AbortedTransactions, at)
		}
		kp.RecordBatches = p.Records
		t := &resp.Topics[len(resp.Topics)-1]
		t.Partitions = append(t.Partitions, kp)
	}
	return resp.AppendTo(nil)
}
