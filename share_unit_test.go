package kafkaconsumer

// The share consumer's pure logic, without a cluster: ack ranges, the
// ShareFetch requests of a session, the acquired records and their gaps.

import (
	"errors"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestShareAckRanges(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in, want []ackRange
	}{
		{nil, []ackRange{}},
		{[]ackRange{{5, 5, ackAccept}, {3, 3, ackAccept}, {4, 4, ackAccept}}, []ackRange{{3, 5, ackAccept}}},
		{[]ackRange{{1, 1, ackAccept}, {2, 2, ackRelease}, {3, 4, ackRelease}}, []ackRange{{1, 1, ackAccept}, {2, 4, ackRelease}}},
		{[]ackRange{{1, 1, ackAccept}, {3, 3, ackAccept}}, []ackRange{{1, 1, ackAccept}, {3, 3, ackAccept}}},
		{[]ackRange{{7, 9, ackGap}, {10, 10, ackReject}, {6, 6, ackGap}}, []ackRange{{6, 9, ackGap}, {10, 10, ackReject}}},
	}
	for _, c := range cases {
		got := ackRanges(append([]ackRange(nil), c.in...))
		if len(got) == 0 && len(c.want) == 0 {
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("ackRanges(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

// newUnitShareConsumer is a share consumer with no connection, for the
// fetch loop's pure steps.
func newUnitShareConsumer() *shareConsumer {
	config := shareConfig()
	config.Config = config.saramaConfig()
	return &shareConsumer{config: config, group: "g", memberID: "m", log: newLogger(nil, "g", "m"),
		messages: make(chan *sarama.ConsumerMessage, 10), errors: make(chan error, 10),
		held: make(map[*sarama.ConsumerMessage]*heldRecord), names: map[[16]byte]string{{1}: "t"},
		stats: make(map[TopicPartition]*shareCounts), refresh: make(chan struct{}, 1)}
}

// requested returns the partitions a request lists, with their acks, and
// the partitions it forgets.
func requested(req *kmsg.ShareFetchRequest) (listed map[int32][]int64, forgotten []int32) {
	listed = make(map[int32][]int64)
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			var acks []int64
			for _, b := range p.AcknowledgementBatches {
				acks = append(acks, b.FirstOffset, b.LastOffset, int64(b.AcknowledgeTypes[0]))
			}
			listed[p.Partition] = acks
		}
	}
	for _, t := range req.ForgottenTopicsData {
		forgotten = append(forgotten, t.Partitions...)
	}
	return listed, forgotten
}

// TestShareFetchSession: the first request of a session (epoch 0) lists
// every wanted partition and no acks; the next ones list only the
// partitions that joined and those with acks, forget those no longer
// wanted (one listed for its acks only in the same request), and carry
// the next epoch.
func TestShareFetchSession(t *testing.T) {
	t.Parallel()
	sc := newUnitShareConsumer()
	f := newShareFetcher(sc, 0)
	id := [16]byte{1}
	f.want = map[tidp]struct{}{{id, 0}: {}, {id, 1}: {}}
	f.addAck(tidp{id, 0}, ackRange{1, 1, ackAccept}) // no session: not sent
	req, acks := f.fetchRequest()
	listed, forgotten := requested(req)
	if req.ShareSessionEpoch != 0 || len(listed) != 2 || len(forgotten) != 0 || len(acks) != 0 {
		t.Fatalf("the first request: epoch %d, listed %v, forgotten %v, acks %v; want epoch 0, both partitions, no acks", req.ShareSessionEpoch, listed, forgotten, acks)
	}
	f.advance(req)

	f.want = map[tidp]struct{}{{id, 1}: {}, {id, 2}: {}}
	f.addAck(tidp{id, 0}, ackRange{2, 3, ackRelease})
	req, _ = f.fetchRequest()
	listed, forgotten = requested(req)
	want := map[int32][]int64{0: {1, 1, int64(ackAccept), 2, 3, int64(ackRelease)}, 2: nil}
	if req.ShareSessionEpoch != 1 || !reflect.DeepEqual(listed, want) || !reflect.DeepEqual(forgotten, []int32{0}) {
		t.Fatalf("the second request: epoch %d, listed %v, forgotten %v; want epoch 1, listed %v, forgotten [0]", req.ShareSessionEpoch, listed, forgotten, want)
	}
	f.advance(req)
	if _, in := f.inSession[tidp{id, 0}]; in || len(f.inSession) != 2 {
		t.Errorf("the session after the second request: %v, want partitions 1 and 2", f.inSession)
	}
	f.epoch = 1<<31 - 1
	f.advance(&kmsg.ShareFetchRequest{})
	if f.epoch != 1 {
		t.Errorf("the epoch after the largest = %d, want 1", f.epoch)
	}
}

// TestShareQueueAcquired: only the records of the acquired ranges are
// held and queued, with their delivery counts; the offsets of a range
// without a record are acknowledged as gaps.
func TestShareQueueAcquired(t *testing.T) {
	t.Parallel()
	sc := newUnitShareConsumer()
	f := newShareFetcher(sc, 0)
	p := tidp{[16]byte{1}, 0}
	var msgs []*sarama.ConsumerMessage
	for _, o := range []int64{10, 11, 13, 14, 20} { // 12: a marker; 15 to 19: compacted
		msgs = append(msgs, &sarama.ConsumerMessage{Topic: "t", Partition: 0, Offset: o})
	}
	acquired := []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord{
		{FirstOffset: 11, LastOffset: 13, DeliveryCount: 1},
		{FirstOffset: 14, LastOffset: 19, DeliveryCount: 3},
	}
	f.queueAcquired(p, msgs, acquired, time.Now().Add(time.Minute))
	var queued []int64
	for _, r := range f.queue {
		queued = append(queued, r.msg.Offset)
	}
	if !reflect.DeepEqual(queued, []int64{11, 13, 14}) {
		t.Errorf("queued %v, want 11, 13, 14 (10 and 20 not acquired)", queued)
	}
	if r := sc.held[msgs[3]]; r == nil || r.delivery != 3 {
		t.Errorf("the record at 14 held as %+v, want delivery count 3", r)
	}
	if got, want := f.takeAcks()[p], []ackRange{{12, 12, ackGap}, {15, 19, ackGap}}; !reflect.DeepEqual(got, want) {
		t.Errorf("gap acks %v, want %v", got, want)
	}
}

// TestShareLockExpiredNotHandedOut: records whose lock expired while
// queued are dropped, not handed out, singly or in a batch (BatchSize),
// and reported once per partition.
func TestShareLockExpiredNotHandedOut(t *testing.T) {
	t.Parallel()
	t.Run("messages", func(t *testing.T) { testShareLockExpired(t, 0) })
	t.Run("batches", func(t *testing.T) { testShareLockExpired(t, 10) })
}

func testShareLockExpired(t *testing.T, batchSize int) {
	t.Parallel()
	sc := newUnitShareConsumer()
	sc.config.Consumer.Return.Errors = true
	sc.config.BatchSize = batchSize
	sc.batches = make(chan *Batch, 10)
	f := newShareFetcher(sc, 0)
	p := tidp{[16]byte{1}, 0}
	var msgs []*sarama.ConsumerMessage
	for o := int64(0); o < 3; o++ {
		msgs = append(msgs, &sarama.ConsumerMessage{Topic: "t", Partition: 0, Offset: o})
	}
	f.queueAcquired(p, msgs, []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord{{FirstOffset: 0, LastOffset: 2, DeliveryCount: 1}}, time.Now().Add(-time.Millisecond))
	if batchSize > 0 {
		f.handOutBatch()
	} else {
		f.handOut()
	}
	if len(f.queue) != 0 || len(sc.held) != 0 || len(sc.messages) != 0 || len(sc.batches) != 0 {
		t.Fatalf("after the lock expired: queue %d, held %d, handed out %d messages, %d batches; want all 0", len(f.queue), len(sc.held), len(sc.messages), len(sc.batches))
	}
	if len(sc.errors) != 1 {
		t.Fatalf("%d errors reported, want 1 for the partition", len(sc.errors))
	}
	if err := <-sc.errors; !errors.Is(err, ErrShareLockExpired) {
		t.Errorf("Errors() = %v, want ErrShareLockExpired", err)
	}
}

// TestSharePauseRefused: Pause and Resume of a share consumer return an
// error wrapping errors.ErrUnsupported; Batches is a closed channel.
func TestSharePauseRefused(t *testing.T) {
	t.Parallel()
	sc := newUnitShareConsumer()
	sc.closedOut = make(chan *Batch)
	close(sc.closedOut)
	if err := sc.Pause("t", 0); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Pause = %v, want errors.ErrUnsupported", err)
	}
	if err := sc.Resume("t", 0); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Resume = %v, want errors.ErrUnsupported", err)
	}
	if _, open := <-sc.Batches(); open {
		t.Error("Batches of a share consumer is open")
	}
}

// TestShareFetchRecords: a ShareFetch asks for shareFetchRecords records
// at least (ChannelBufferSize when larger), in batches of as many. The
// fetch loop fetches again only once it handed out every record of the
// last answer, so the records a request asks for set how often it stops
// to wait for the broker.
func TestShareFetchRecords(t *testing.T) {
	t.Parallel()
	for _, buffer := range []int{256, 4096} {
		sc := newUnitShareConsumer()
		sc.config.ChannelBufferSize = buffer
		f := newShareFetcher(sc, 0)
		f.want = map[tidp]struct{}{{[16]byte{1}, 0}: {}}
		req, _ := f.fetchRequest()
		want := int32(max(buffer, shareFetchRecords))
		if req.MaxRecords != want || req.BatchSize != want {
			t.Errorf("ChannelBufferSize %d: MaxRecords %d, BatchSize %d; want %d", buffer, req.MaxRecords, req.BatchSize, want)
		}
	}
}

// TestShareHeartbeatAtTheBrokersInterval: once the coordinator answered
// a heartbeat, the member heartbeats at the interval it named, also
// before the next answer (after Join's first heartbeat) and after a
// failure, not at sarama's Consumer.Group.Heartbeat.Interval: a new
// member's assignment comes in the answer of a later heartbeat.
func TestShareHeartbeatAtTheBrokersInterval(t *testing.T) {
	t.Parallel()
	sc := newUnitShareConsumer()
	sc.config.Consumer.Group.Heartbeat.Interval = 3 * time.Second
	if got := sc.interval(0); got != 3*time.Second {
		t.Errorf("before any answer: next heartbeat in %s, want sarama's 3s", got)
	}
	resp := kmsg.NewPtrShareGroupHeartbeatResponse()
	resp.MemberEpoch = 1
	resp.HeartbeatIntervalMillis = 1000
	sc.takeHeartbeat(resp)
	if got := sc.interval(0); got != time.Second {
		t.Errorf("after an answer naming 1s: next heartbeat in %s, want 1s", got)
	}
}

// TestShareFetchBytes: a ShareFetch asks for Consumer.Fetch.Max bytes
// when set, else half of MaxBufferedBytes (two answers may wait to be
// handed out: the loop fetches ahead), else no bound; Fetch.Default at
// least. Sarama's 1 MiB default held an answer to a few thousand records
// of 100 bytes, well below what the fetch asks for.
func TestShareFetchBytes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		fetchMax int32
		buffered int64
		want     int32
	}{
		{0, DefaultMaxBufferedBytes, DefaultMaxBufferedBytes / 2},
		{2 << 20, DefaultMaxBufferedBytes, 2 << 20},
		{0, 0, math.MaxInt32},
		{0, 1 << 20, 1 << 20}, // Fetch.Default, 1 MiB
	}
	for _, c := range cases {
		sc := newUnitShareConsumer()
		sc.config.MaxBufferedBytes = c.buffered
		sc.config.Config.Consumer.Fetch.Max = c.fetchMax
		f := newShareFetcher(sc, 0)
		f.want = map[tidp]struct{}{{[16]byte{1}, 0}: {}}
		req, _ := f.fetchRequest()
		if req.MaxBytes != c.want {
			t.Errorf("Fetch.Max %d, MaxBufferedBytes %d: MaxBytes %d, want %d", c.fetchMax, c.buffered, req.MaxBytes, c.want)
		}
	}
}

// TestShareQueueAcquiredAllocs: queueing an answer's records allocates
// per chunk of records, not per record.
func TestShareQueueAcquiredAllocs(t *testing.T) {
	sc := newUnitShareConsumer()
	f := newShareFetcher(sc, 0)
	p := tidp{[16]byte{1}, 0}
	msgs := make([]*sarama.ConsumerMessage, 1000)
	for i := range msgs {
		msgs[i] = &sarama.ConsumerMessage{Topic: "t", Partition: 0, Offset: int64(i)}
	}
	acquired := []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord{{FirstOffset: 0, LastOffset: 999, DeliveryCount: 1}}
	deadline := time.Now().Add(time.Minute)
	allocs := testing.AllocsPerRun(10, func() {
		clear(sc.held)
		f.queue = f.queue[:0]
		f.queueAcquired(p, msgs, acquired, deadline)
	})
	if allocs > 20 {
		t.Errorf("queueing 1,000 acquired records: %.0f allocations, want at most 20", allocs)
	}
}
