package fetch

// Legacy message sets (magic 0 and 1): a message per offset, or a
// compressed wrapper message whose value is a message set of its own.

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"time"
)

// legacyMessage is a message of magic 0 or 1.
type legacyMessage struct {
	offset     int64
	magic      int8
	attrs      int8
	timestamp  time.Time // zero for magic 0
	key, value []byte
}

// readLegacy reads the whole message entry b (offset, length, message),
// its CRC (IEEE) checked.
func readLegacy(b []byte) (m legacyMessage, err error) {
	m.offset = int64(binary.BigEndian.Uint64(b))
	msg := b[entryHeader:]
	if len(msg) < 6 {
		return m, fmt.Errorf("message shorter than its header")
	}
	if crc32.ChecksumIEEE(msg[4:]) != binary.BigEndian.Uint32(msg) {
		return m, fmt.Errorf("CRC-32 mismatch")
	}
	m.magic, m.attrs = int8(msg[4]), int8(msg[5])
	msg = msg[6:]
	if m.magic == 1 {
		if len(msg) < 8 {
			return m, fmt.Errorf("message shorter than its header")
		}
		m.timestamp = millisTime(int64(binary.BigEndian.Uint64(msg)))
		msg = msg[8:]
	}
	var ok bool
	if m.key, msg, ok = readBytes(msg); !ok {
		return m, fmt.Errorf("key overruns its message")
	}
	if m.value, msg, ok = readBytes(msg); !ok || len(msg) != 0 {
		return m, fmt.Errorf("value does not end its message")
	}
	return m, nil
}

// readBytes reads bytes after their int32 length: nil for -1.
func readBytes(b []byte) ([]byte, []byte, bool) {
	if len(b) < 4 {
		return nil, nil, false
	}
	l := int64(int32(binary.BigEndian.Uint32(b)))
	b = b[4:]
	switch {
	case l < -1 || l > int64(len(b)):
		return nil, nil, false
	case l == -1:
		return nil, b, true
	}
	return b[:l:l], b[l:], true
}

// legacy decodes one whole legacy message entry b: a message, or a
// wrapper of compressed messages. Their times are as sarama's consumer
// sets them: Timestamp the message's (the wrapper's with LogAppendTime),
// BlockTimestamp the wrapper's (the message's own when not compressed).
func (d *decoder) legacy(b []byte) error {
	w, err := readLegacy(b)
	if err != nil {
		return d.corrupt(int64(binary.BigEndian.Uint64(b)), err.Error())
	}
	d.out.Next = max(d.out.Next, w.offset+1)
	codec := w.attrs & codecMask
	if codec == 0 {
		if w.offset >= d.from {
			d.legacyMessage(w.offset, w.key, w.value, w.timestamp, w.timestamp)
		}
		return nil
	}
	inner, err := decompress(codec, w.value, byte(w.magic))
	if err != nil {
		return d.corrupt(w.offset, err.Error())
	}
	// Magic 1's inner offsets are relative: the wrapper holds the last
	// one's absolute offset (KIP-31).
	var base int64
	if w.magic >= 1 {
		last, ok := lastLegacyOffset(inner)
		if !ok {
			return d.corrupt(w.offset, "compressed message set cut short")
		}
		base = w.offset - last
	}
	for len(inner) > 0 {
		if len(inner) < entryHeader {
			return d.corrupt(w.offset, "compressed message set cut short")
		}
		size := int(int32(binary.BigEndian.Uint32(inner[8:12])))
		if size < 0 || len(inner)-entryHeader < size {
			return d.corrupt(w.offset, "compressed message set cut short")
		}
		m, err := readLegacy(inner[:entryHeader+size])
		inner = inner[entryHeader+size:]
		switch {
		case err != nil:
			return d.corrupt(w.offset, "compressed message: "+err.Error())
		case m.attrs&codecMask != 0:
			return d.corrupt(w.offset, "compressed message inside a compressed message")
		}
		offset := m.offset
		if m.magic >= 1 {
			offset += base
		}
		if offset < d.from {
			continue
		}
		ts := m.timestamp
		if m.magic >= 1 && (m.attrs|w.attrs)&logAppendTimeFlag != 0 {
			ts = w.timestamp
		}
		d.legacyMessage(offset, m.key, m.value, ts, w.timestamp)
	}
	return nil
}

// legacyMessage adds a message of a legacy message set.
func (d *decoder) legacyMessage(offset int64, key, value []byte, ts, block time.Time) {
	m := d.message()
	m.Topic, m.Partition, m.Offset = d.p.Topic, d.p.Partition, offset
	m.Key, m.Value, m.Timestamp, m.BlockTimestamp = key, value, ts, block
	d.out.Bytes += int64(len(key) + len(value))
}

// lastLegacyOffset returns the offset of the last whole message of the
// message set b.
func lastLegacyOffset(b []byte) (int64, bool) {
	last, ok := int64(0), false
	for len(b) >= entryHeader {
		size := int(int32(binary.BigEndian.Uint32(b[8:12])))
		if size < 0 || len(b)-entryHeader < size {
			break
		}
		last, ok = int64(binary.BigEndian.Uint64(b)), true
		b = b[entryHeader+size:]
	}
	return last, ok
}
