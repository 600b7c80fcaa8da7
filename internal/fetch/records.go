package fetch

// A partition's records in a fetch response (hub.go), decoded once
// into the messages handed out (internal/fetch), and the size of the
// partition's next fetch.

import (
	"math"
	"reflect"

	"github.com/IBM/sarama"
)

// records decodes p's records from the fetcher's offset on (Decode:
// reading committed, without aborted transactions; control batches and
// batches that compaction emptied moved past), moves the offset past
// every batch read whole, and reports whether it moved. A response that
// holds only part of a batch (a batch larger than the fetch size) makes
// the next fetch ask for twice as much, up to Fetch.Max; at Fetch.Max the
// message is skipped with ErrMessageTooLarge, as sarama's consumer does.
// A corrupt batch is an error wrapping ErrCorrupt (ErrCorruptRecords),
// with the messages before it and the offset moved up to it.
func (f *Fetcher) records(p *Partition, readCommitted bool) (Records, bool, error) {
	conf := f.hub.conf
	rec, err := Decode(p, f.offset, readCommitted)
	moved := rec.Next > f.offset
	if moved {
		f.offset = rec.Next
		f.fetchSize = conf.Consumer.Fetch.Default
	}
	switch {
	case err != nil, moved || !rec.Partial:
	case conf.Consumer.Fetch.Max > 0 && f.fetchSize >= conf.Consumer.Fetch.Max:
		f.offset++ // a message larger than Fetch.Max: skip it, as sarama does
		return Records{}, false, sarama.ErrMessageTooLarge
	default:
		f.fetchSize = int32(min(2*int64(f.fetchSize), math.MaxInt32))
		if conf.Consumer.Fetch.Max > 0 {
			f.fetchSize = min(f.fetchSize, conf.Consumer.Fetch.Max)
		}
	}
	return rec, moved, err
}

// MessageOverhead is what a message of a slab takes beside its keys,
// values and headers: its sarama.ConsumerMessage and the pointer to it.
var MessageOverhead = int64(reflect.TypeFor[sarama.ConsumerMessage]().Size()) + 8
