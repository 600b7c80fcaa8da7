package kafkaconsumer

// The batch fetcher: with Config.BatchSize, a partition fetches its records
// itself, and its partition manager receives each fetch response's
// messages as one slice, instead of one message at a time from sarama's
// partition consumer, whose goroutine sends every message on a channel of
// its own. It serves record batches (Kafka 0.11's message format v2) read
// uncommitted; a partition that meets the older message sets goes back to
// sarama's partition consumer, and so does a consumer that reads
// committed (sarama filters the aborted transactions).

import (
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
)

// errLegacyRecords ends a batch fetcher that met a message set older than
// record batches.
var errLegacyRecords = errors.New("kafkaconsumer: legacy message set: consuming with sarama's partition consumer")

// batchFetchVersion returns the Fetch request version that a batch fetcher
// sends (the highest that conf.Version allows, as sarama's consumer picks
// it), and whether batch fetchers serve conf at all: record batches need
// version 4 (Kafka 0.11), and only read uncommitted is served.
func batchFetchVersion(conf *sarama.Config) (int16, bool) {
	if conf.Consumer.IsolationLevel != sarama.ReadUncommitted {
		return 0, false
	}
	switch v := conf.Version; {
	case v.IsAtLeast(sarama.V2_7_0_0):
		return 12, true
	case v.IsAtLeast(sarama.V2_3_0_0):
		return 11, true
	case v.IsAtLeast(sarama.V2_1_0_0):
		return 10, true
	case v.IsAtLeast(sarama.V2_0_0_0):
		return 8, true
	case v.IsAtLeast(sarama.V1_1_0_0):
		return 7, true
	case v.IsAtLeast(sarama.V1_0_0_0):
		return 6, true
	case v.IsAtLeast(sarama.V0_11_0_0):
		return 5, true
	}
	return 0, false
}

// batchFetcher fetches one partition from its leader, in a goroutine of its
// own (run), and sends the messages of each response on slabs. It
// implements sarama.PartitionConsumer, so that the partition manager runs
// it as it runs sarama's: AsyncClose stops it, its Errors channel is
// closed when run ends, HighWaterMarkOffset, Pause and Resume. Its
// Messages channel is nil: consumeBatches reads slabs.
type batchFetcher struct {
	client  sarama.Client
	conf    *sarama.Config
	tp      topicPartition
	version int16

	slabs chan []*sarama.ConsumerMessage // each response's messages, in offset order; closed when run ends
	errs  chan *sarama.ConsumerError     // closed when run ends
	hwm   atomic.Int64
	// paused is set by Pause: run sends no request until Resume, which
	// sends a token on wake.
	paused atomic.Bool
	wake   chan struct{}
	dying  chan struct{} // closed by AsyncClose
	once   sync.Once
	done   chan struct{} // closed when run ends
	// legacy is set by run, before it ends, when it met a legacy message
	// set; read after done.
	legacy bool

	offset    int64 // the next offset to fetch; run's
	fetchSize int32 // run's
}

// startBatchFetcher starts a batch fetcher of tp at offset, which must be
// within the partition's log (else sarama.ErrOffsetOutOfRange), as sarama's
// ConsumePartition checks it.
func startBatchFetcher(client sarama.Client, conf *sarama.Config, tp topicPartition, offset int64, version int16) (*batchFetcher, error) {
	oldest, err := client.GetOffset(tp.topic, tp.partition, sarama.OffsetOldest)
	if err != nil {
		return nil, err
	}
	newest, err := client.GetOffset(tp.topic, tp.partition, sarama.OffsetNewest)
	if err != nil {
		return nil, err
	}
	if offset < oldest || offset > newest {
		return nil, sarama.ErrOffsetOutOfRange
	}
	f := &batchFetcher{
		client:    client,
		conf:      conf,
		tp:        tp,
		version:   version,
		slabs:     make(chan []*sarama.ConsumerMessage, 1),
		errs:      make(chan *sarama.ConsumerError, conf.ChannelBufferSize),
		wake:      make(chan struct{}, 1),
		dying:     make(chan struct{}),
		done:      make(chan struct{}),
		offset:    offset,
		fetchSize: conf.Consumer.Fetch.Default,
	}
	f.hwm.Store(newest)
	go f.run() // owned by the partition manager, which closes it (AsyncClose) and drains errs
	return f, nil
}

// run fetches until AsyncClose, an offset out of range (the partition
// manager starts again at Offsets.Initial), or a legacy message set.
// Other errors go to errs, and the fetch is tried again after
// Consumer.Retry.Backoff, with the partition's metadata refreshed.
func (f *batchFetcher) run() {
	defer close(f.done)
	defer close(f.errs)
	defer close(f.slabs)
	for {
		if f.paused.Load() {
			select {
			case <-f.wake:
				continue
			case <-f.dying:
				return
			}
		}
		msgs, err := f.fetch()
		switch {
		case errors.Is(err, errLegacyRecords):
			f.legacy = true
			return
		case err != nil:
			if !f.report(err) || errors.Is(err, sarama.ErrOffsetOutOfRange) {
				return
			}
			_ = f.client.RefreshMetadata(f.tp.topic)
			select {
			case <-time.After(f.conf.Consumer.Retry.Backoff):
			case <-f.dying:
				return
			}
			continue
		case len(msgs) == 0:
			select {
			case <-f.dying:
				return
			default:
			}
			continue
		}
		select {
		case f.slabs <- msgs:
		case <-f.dying:
			return
		}
	}
}

// report sends err on errs; it reports false when closed first.
func (f *batchFetcher) report(err error) bool {
	select {
	case f.errs <- &sarama.ConsumerError{Topic: f.tp.topic, Partition: f.tp.partition, Err: err}:
		return true
	case <-f.dying:
		return false
	}
}

// fetch sends one Fetch request to the partition's leader and returns the
// messages of its response from offset on, and moves offset past them.
func (f *batchFetcher) fetch() ([]*sarama.ConsumerMessage, error) {
	broker, err := f.client.Leader(f.tp.topic, f.tp.partition)
	if err != nil {
		return nil, err
	}
	req := &sarama.FetchRequest{
		MinBytes:    f.conf.Consumer.Fetch.Min,
		MaxWaitTime: int32(f.conf.Consumer.MaxWaitTime / time.Millisecond),
		Version:     f.version,
		Isolation:   sarama.ReadUncommitted,
	}
	req.MaxBytes = f.conf.Consumer.Fetch.MaxBytes
	if f.version >= 7 {
		req.SessionID, req.SessionEpoch = 0, -1 // no fetch session
	}
	if f.version >= 11 {
		req.RackID = f.conf.RackID
	}
	req.AddBlock(f.tp.topic, f.tp.partition, f.offset, f.fetchSize, -1)
	resp, err := broker.Fetch(req)
	if err != nil {
		// sarama's broker fails every later request on a connection
		// whose read failed: close it; the client opens it again.
		_ = broker.Close()
		return nil, err
	}
	block := resp.GetBlock(f.tp.topic, f.tp.partition)
	if block == nil {
		return nil, sarama.ErrIncompleteResponse
	}
	if !errors.Is(block.Err, sarama.ErrNoError) {
		return nil, block.Err
	}
	f.hwm.Store(block.HighWaterMarkOffset)
	return f.parse(block)
}

// parse returns the messages of a response block from offset on (a batch
// may begin before it), skipping control batches, and moves offset past
// every batch it read, whether records remain in it or compaction removed
// them all. One slab holds the messages of the block, and one slice the
// pointers to them. A response that holds only part of a batch (a batch
// larger than the fetch size) makes the next fetch ask for more, as
// sarama's consumer does.
func (f *batchFetcher) parse(block *sarama.FetchResponseBlock) ([]*sarama.ConsumerMessage, error) {
	n := 0
	for _, records := range block.RecordsSet {
		if records.MsgSet != nil {
			return nil, errLegacyRecords
		}
		if rb := records.RecordBatch; rb != nil && !rb.Control && !rb.PartialTrailingRecord {
			n += len(rb.Records)
		}
	}
	slab := make([]sarama.ConsumerMessage, 0, n)
	msgs := make([]*sarama.ConsumerMessage, 0, n)
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
		case !rb.Control:
			for _, rec := range rb.Records {
				offset := rb.FirstOffset + rec.OffsetDelta
				if offset < f.offset {
					continue
				}
				timestamp := rb.FirstTimestamp.Add(rec.TimestampDelta)
				if rb.LogAppendTime {
					timestamp = rb.MaxTimestamp
				}
				slab = append(slab, sarama.ConsumerMessage{
					Topic:     f.tp.topic,
					Partition: f.tp.partition,
					Key:       rec.Key,
					Value:     rec.Value,
					Offset:    offset,
					Timestamp: timestamp,
					Headers:   rec.Headers,
				})
				msgs = append(msgs, &slab[len(slab)-1])
			}
		}
		next = max(next, rb.FirstOffset+int64(rb.LastOffsetDelta)+1)
	}
	moved := next > f.offset
	f.offset = next
	switch {
	case moved:
		f.fetchSize = f.conf.Consumer.Fetch.Default
	case partial && f.conf.Consumer.Fetch.Max > 0 && f.fetchSize >= f.conf.Consumer.Fetch.Max:
		f.offset++ // a message larger than Fetch.Max: skip it, as sarama does
		return nil, sarama.ErrMessageTooLarge
	case partial:
		f.fetchSize = int32(min(2*int64(f.fetchSize), math.MaxInt32))
		if f.conf.Consumer.Fetch.Max > 0 {
			f.fetchSize = min(f.fetchSize, f.conf.Consumer.Fetch.Max)
		}
	}
	return msgs, nil
}

// AsyncClose implements sarama.PartitionConsumer: it stops run.
func (f *batchFetcher) AsyncClose() { f.once.Do(func() { close(f.dying) }) }

// Close implements sarama.PartitionConsumer: it stops run and waits for
// it (a fetch in flight completes first), draining its errors.
func (f *batchFetcher) Close() error {
	f.AsyncClose()
	for range f.errs {
	}
	<-f.done
	return nil
}

// Messages implements sarama.PartitionConsumer: nil, see slabs.
func (f *batchFetcher) Messages() <-chan *sarama.ConsumerMessage { return nil }

// Errors implements sarama.PartitionConsumer.
func (f *batchFetcher) Errors() <-chan *sarama.ConsumerError { return f.errs }

// HighWaterMarkOffset implements sarama.PartitionConsumer.
func (f *batchFetcher) HighWaterMarkOffset() int64 { return f.hwm.Load() }

// Pause implements sarama.PartitionConsumer: no request after the one in
// flight.
func (f *batchFetcher) Pause() { f.paused.Store(true) }

// Resume implements sarama.PartitionConsumer.
func (f *batchFetcher) Resume() {
	f.paused.Store(false)
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// IsPaused implements sarama.PartitionConsumer.
func (f *batchFetcher) IsPaused() bool { return f.paused.Load() }
