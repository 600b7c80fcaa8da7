package kafkaconsumer

// The fetch loop's fetch ahead, against a fake of the broker's side of
// the share session (shareFake): the next ShareFetch goes while the
// records of the last answer are still handed out, one at a time.

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kafkaconsumer/kafkaconsumer/internal/fetch/fetchtest"
)

// shareFake answers a fetcher's ShareFetch requests with the records
// they ask for (MaxRecords) of partition 0 of topic {1}, total at most,
// and takes its
// ShareAcknowledge; it records, at each ShareFetch, how many records
// were sent and not yet read (unread: read by the test's reader) and
// how many requests were in flight at once.
type shareFake struct {
	total int
	lock  time.Duration // the acquisition lock it answers
	done  chan struct{} // closed by the test: requests for more records answer at once, empty

	mu          sync.Mutex
	sent, read  int
	inFlight    int
	maxInFlight int
	unread      []int   // at each ShareFetch after the first
	asked       []int32 // MaxRecords of the same requests
	epochs      []int32
}

func (k *shareFake) request(ctx context.Context, req kmsg.Request) (kmsg.Response, error) {
	k.mu.Lock()
	k.inFlight++
	k.maxInFlight = max(k.maxInFlight, k.inFlight)
	k.mu.Unlock()
	defer func() {
		k.mu.Lock()
		k.inFlight--
		k.mu.Unlock()
	}()
	switch r := req.(type) {
	case *kmsg.ShareAcknowledgeRequest:
		k.mu.Lock()
		k.epochs = append(k.epochs, r.ShareSessionEpoch)
		k.mu.Unlock()
		return kmsg.NewPtrShareAcknowledgeResponse(), nil
	case *kmsg.ShareFetchRequest:
		return k.fetch(ctx, r), nil
	}
	return nil, fmt.Errorf("unexpected request %T", req)
}

func (k *shareFake) fetch(ctx context.Context, req *kmsg.ShareFetchRequest) *kmsg.ShareFetchResponse {
	k.mu.Lock()
	k.epochs = append(k.epochs, req.ShareSessionEpoch)
	if k.sent > 0 {
		k.unread = append(k.unread, k.sent-k.read)
		k.asked = append(k.asked, req.MaxRecords)
	}
	from, n := k.sent, min(int(req.MaxRecords), k.total-k.sent)
	k.sent += n
	k.mu.Unlock()
	resp := kmsg.NewPtrShareFetchResponse()
	resp.AcquisitionLockTimeoutMillis = int32(k.lock.Milliseconds())
	if n == 0 { // a long poll
		select {
		case <-k.done:
		case <-ctx.Done():
		}
		return resp
	}
	b := fetchtest.Batch{BaseOffset: int64(from)}
	for i := range n {
		b.Records = append(b.Records, fetchtest.Record{OffsetDelta: int32(i), Value: []byte{byte(i)}})
	}
	rp := kmsg.NewShareFetchResponseTopicPartition()
	rp.Records = b.AppendTo(nil)
	rp.AcquiredRecords = []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord{{FirstOffset: int64(from), LastOffset: int64(from + n - 1), DeliveryCount: 1}}
	resp.Topics = []kmsg.ShareFetchResponseTopic{{TopicID: [16]byte{1}, Partitions: []kmsg.ShareFetchResponseTopicPartition{rp}}}
	return resp
}

// newFakeShareFetcher returns a fetch loop of a unit share consumer
// (unbuffered Messages, as Join makes it) on k, wanting partition 0 of
// topic {1}, not started.
func newFakeShareFetcher(k *shareFake) *shareFetcher {
	sc := newUnitShareConsumer()
	sc.messages = make(chan *sarama.ConsumerMessage)
	sc.t = &groupTransport{timeout: 5 * time.Second}
	sc.stopCtx = context.Background()
	sc.config.MaxProcessingTime = 5 * time.Second
	f := newShareFetcher(sc, 0)
	f.request = k.request
	f.want[tidp{[16]byte{1}, 0}] = struct{}{}
	return f
}

// TestShareFetchAhead: while the fetch loop hands out an answer's
// records, it sends the next ShareFetch before its queue is empty, never
// more than one request of the session at once, and never while it
// holds as many records not handed out as it asks for; the session's
// epochs go up by one.
func TestShareFetchAhead(t *testing.T) {
	t.Parallel()
	k := &shareFake{total: 10_000, lock: 30 * time.Second, done: make(chan struct{})}
	f := newFakeShareFetcher(k)
	sc := f.sc
	go f.run()
	seen := make(map[int64]bool)
	deadline := time.After(30 * time.Second)
	for len(seen) < k.total {
		select {
		case msg := <-sc.messages:
			if seen[msg.Offset] {
				t.Fatalf("offset %d handed out twice", msg.Offset)
			}
			seen[msg.Offset] = true
			k.mu.Lock()
			k.read++
			k.mu.Unlock()
			sc.Ack(msg)
		case <-deadline:
			t.Fatalf("read %d of %d records within 30 s", len(seen), k.total)
		}
	}
	close(k.done)
	f.t.Kill(nil)
	waitDone(t, &f.t, 20*time.Second, "the fetch loop")

	k.mu.Lock()
	defer k.mu.Unlock()
	if k.maxInFlight != 1 {
		t.Errorf("%d requests of the session in flight at once, want 1", k.maxInFlight)
	}
	ahead := 0
	for i, u := range k.unread {
		if u > 1 { // 1: the reader took the last record and did not count it yet
			ahead++
		}
		if u > int(k.asked[i]) {
			t.Errorf("a ShareFetch sent with %d records not read, want at most the %d it asks for", u, k.asked[i])
		}
	}
	if ahead == 0 {
		t.Errorf("no ShareFetch sent before the last answer's records were read (records unread at each: %v)", k.unread)
	}
	for i, e := range k.epochs {
		if want := int32(i); i < len(k.epochs)-1 && e != want {
			t.Errorf("request %d of the session with epoch %d, want %d (epochs %v)", i, e, want, k.epochs)
			break
		}
	}
}

// waitDone waits until tb's goroutine ended, failing with what leaked
// after timeout.
func waitDone(t *testing.T, tb interface{ Dead() <-chan struct{} }, timeout time.Duration, what string) {
	t.Helper()
	select {
	case <-tb.Dead():
	case <-time.After(timeout):
		t.Fatalf("%s did not end within %s", what, timeout)
	}
}

// TestShareFetchAheadBound: the fetch loop fetches ahead only with no
// fetch in flight, a partition wanted, fewer than a fetch's worth of
// records queued and the oldest of them with more than half its lock
// left.
func TestShareFetchAheadBound(t *testing.T) {
	t.Parallel()
	k := &shareFake{lock: 30 * time.Second}
	lock := 30 * time.Second
	cases := []struct {
		name     string
		queued   int
		left     time.Duration // of the oldest queued record's lock
		fetching bool
		wanted   bool
		want     bool
	}{
		{"nothing queued", 0, 0, false, true, true},
		{"nothing wanted", 0, 0, false, false, false},
		{"in flight", 0, 0, true, true, false},
		{"a few queued, lock fresh", 10, 25 * time.Second, false, true, true},
		{"a fetch's worth queued", 1000, 25 * time.Second, false, true, false},
		{"oldest past half its lock", 10, 14 * time.Second, false, true, false},
	}
	for _, c := range cases {
		f := newFakeShareFetcher(k)
		f.lock, f.fetching, f.epoch = lock, c.fetching, 1
		if !c.wanted {
			clear(f.want)
		}
		for i := range c.queued {
			f.queue = append(f.queue, &heldRecord{msg: &sarama.ConsumerMessage{Offset: int64(i)}, deadline: time.Now().Add(c.left)})
		}
		if got := f.fetchAhead(); got != c.want {
			t.Errorf("%s: fetchAhead() = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestShareNextAsk: a ShareFetch asks for twice as many records as the
// last, up to shareAskGrowth times the base, when the reader emptied the
// queue before the answer came, and half as many, down to the base, when
// more than half of what was queued at the send still was at the answer.
func TestShareNextAsk(t *testing.T) {
	t.Parallel()
	cases := []struct {
		ask               int32
		starved           bool
		queuedAt, queuedN int
		want              int32
	}{
		{1000, true, 999, 0, 2000},
		{4000, true, 3999, 0, 8000},
		{8000, true, 7999, 0, 8000},
		{8000, false, 7999, 4000, 4000},
		{1000, false, 999, 800, 1000},
		{4000, false, 3999, 1000, 4000},
	}
	for _, c := range cases {
		if got := nextAsk(c.ask, 1000, c.starved, c.queuedAt, c.queuedN); got != c.want {
			t.Errorf("nextAsk(%d, 1000, starved %v, %d queued at the send, %d at the answer) = %d, want %d", c.ask, c.starved, c.queuedAt, c.queuedN, got, c.want)
		}
	}
}

// BenchmarkShareHandOutAck: the fetch loop hands out records of a fake
// broker's answers on Messages and the reader Acks each, as the bench's
// share contender does; the broker's side costs the fake's encoding.
func BenchmarkShareHandOutAck(b *testing.B) {
	k := &shareFake{total: b.N, lock: time.Minute, done: make(chan struct{})}
	f := newFakeShareFetcher(k)
	sc := f.sc
	b.ReportAllocs()
	b.ResetTimer()
	go f.run()
	for range b.N {
		sc.Ack(<-sc.messages)
	}
	b.StopTimer()
	close(k.done)
	f.t.Kill(nil)
	<-f.t.Dead()
}
