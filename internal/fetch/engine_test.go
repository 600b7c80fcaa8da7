package fetch

import (
	"errors"
	"log/slog"
	"reflect"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer/internal/fetch/fetchtest"
	"github.com/twmb/franz-go/pkg/kgo"
)

// recordBatch returns a record batch of n records from offset first, a
// second apart from 100 s on, of values 0, 1, ...
func recordBatch(first int64, n int) fetchtest.Batch {
	b := fetchtest.Batch{BaseOffset: first, FirstTimestamp: 100_000, MaxTimestamp: 100_000 + int64(n-1)*1000}
	for i := range n {
		b.Records = append(b.Records, fetchtest.Record{OffsetDelta: int32(i), TimestampDelta: int64(i) * 1000, Value: []byte{byte(i)}})
	}
	return b
}

// partitionOf returns t/3's part of a response: its records those of
// entries (record batches or legacy messages), hwm its high-water mark and
// last stable offset.
func partitionOf(hwm int64, entries ...interface{ AppendTo([]byte) []byte }) *Partition {
	var records []byte
	for _, e := range entries {
		records = e.AppendTo(records)
	}
	return &Partition{Topic: "t", Partition: 3, HighWatermark: hwm, LastStableOffset: hwm, LogStartOffset: -1, PreferredReadReplica: -1, Records: records}
}

// responseOf returns a response of parts.
func responseOf(parts ...*Partition) *Response {
	resp := &Response{}
	for _, p := range parts {
		resp.Partitions = append(resp.Partitions, *p)
	}
	return resp
}

func testFetcher(offset int64) *Fetcher {
	conf := sarama.NewConfig()
	hub := &Hub{conf: conf, budget: &Budget{}}
	return &Fetcher{hub: hub, tp: TopicPartition{"t", 3}, offset: offset, fetchSize: conf.Consumer.Fetch.Default, preferred: -1}
}

func offsets(msgs []*sarama.ConsumerMessage) []int64 {
	var out []int64
	for _, m := range msgs {
		out = append(out, m.Offset)
	}
	return out
}

// TestVersion: fetchers serve Kafka 0.11 and later, in both isolation
// levels.
func TestVersion(t *testing.T) {
	conf := sarama.NewConfig()
	conf.Version = sarama.V0_10_2_0
	if _, ok := Version(conf); ok {
		t.Error("partition fetcher for Kafka 0.10")
	}
	conf.Version = sarama.V2_8_0_0
	if v, ok := Version(conf); !ok || v != 12 {
		t.Errorf("Kafka 2.8: version %d, %v; want 12", v, ok)
	}
	conf.Consumer.IsolationLevel = sarama.ReadCommitted
	if _, ok := Version(conf); !ok {
		t.Error("no partition fetcher for read committed")
	}
}

// TestBrokerLoopDropAll: a failed request unsubscribes every fetcher of
// the loop once, each with one error. Dropping them while ranging over
// the loop's own list, which drop shortens, skipped some and dropped
// others twice: the second error then failed the fetcher's next
// subscription, which put it in the loop twice.
func TestBrokerLoopDropAll(t *testing.T) {
	t.Parallel()
	l := &brokerLoop{}
	var fetchers []*Fetcher
	for i := range 4 {
		f := testFetcher(int64(i))
		f.failed = make(chan error, 1)
		f.loop.Store(l)
		fetchers = append(fetchers, f)
	}
	l.subs = slices.Clone(fetchers)
	failure := errors.New("request failed")
	l.dropAll(failure)
	if len(l.subs) != 0 {
		t.Errorf("%d fetchers still subscribed after the request failed", len(l.subs))
	}
	for i, f := range fetchers {
		select {
		case err := <-f.failed:
			if err != failure {
				t.Errorf("fetcher %d failed with %v, want the request's error", i, err)
			}
		default:
			t.Errorf("fetcher %d was not told of the failure", i)
		}
		if f.loop.Load() != nil {
			t.Errorf("fetcher %d still points at the loop", i)
		}
	}
}

// TestBrokerLoopThrottled: a broker over a client quota answers with its
// throttle time and no partition. That is no error: every fetcher stays
// subscribed, and the loop waits the throttle time out. It read as an
// incomplete response, one ErrIncompleteResponse per partition, each
// followed by a metadata refresh and a backoff.
func TestBrokerLoopThrottled(t *testing.T) {
	t.Parallel()
	l := &brokerLoop{}
	f := testFetcher(0)
	f.failed = make(chan error, 1)
	f.loop.Store(l)
	l.subs = []*Fetcher{f}
	if wait := l.handle(l.subs, &Response{ThrottleTime: 250 * time.Millisecond}); wait != 250*time.Millisecond {
		t.Errorf("handle = %s, want the throttle time, 250ms", wait)
	}
	select {
	case err := <-f.failed:
		t.Errorf("the fetcher was dropped: %v", err)
	default:
	}
	if len(l.subs) != 1 || f.loop.Load() != l {
		t.Error("the fetcher is no longer subscribed")
	}
}

// leaderClient is a sarama.Client whose metadata names leader as the
// leader of every partition; its other methods are not for use.
type leaderClient struct {
	sarama.Client
	leader *sarama.Broker
}

func (c leaderClient) Leader(string, int32) (*sarama.Broker, error) { return c.leader, nil }

func (c leaderClient) LeaderAndEpoch(string, int32) (*sarama.Broker, int32, error) {
	return c.leader, 7, nil
}

// TestBrokerLoopLeaderMoved: after a response, a fetcher whose partition
// the metadata says another broker leads leaves the loop for that broker's
// (errLeaderMoved), even though the former leader answered without an
// error, as a follower does from Fetch v11 on; one whose leader is the
// loop's broker stays. The fetcher stayed on the former leader for good.
func TestBrokerLoopLeaderMoved(t *testing.T) {
	t.Parallel()
	former, current := sarama.NewBroker("127.0.0.1:9001"), sarama.NewBroker("127.0.0.1:9002")
	for _, tc := range []struct {
		name   string
		leader *sarama.Broker
		moved  bool
	}{{"moved", current, true}, {"stayed", former, false}} {
		t.Run(tc.name, func(t *testing.T) {
			f := testFetcher(10)
			f.hub.client = leaderClient{leader: tc.leader}
			f.slabs = make(chan Slab, 1)
			f.failed = make(chan error, 1)
			l := &brokerLoop{hub: f.hub, broker: former, subs: []*Fetcher{f}}
			f.loop.Store(l)
			l.handle(l.subs, responseOf(partitionOf(11, recordBatch(10, 1))))
			if got := offsets((<-f.slabs).Msgs); !slices.Equal(got, []int64{10}) {
				t.Errorf("delivered offsets %v, want [10]", got)
			}
			select {
			case err := <-f.failed:
				if !tc.moved || !errors.Is(err, errLeaderMoved) {
					t.Errorf("dropped with %v", err)
				}
			default:
				if tc.moved {
					t.Error("the fetcher stayed on the former leader")
				}
			}
		})
	}
}

// epochMetadata is a metadata response (version 7, that of Kafka 2.1)
// naming broker as the leader of t/3 in leader epoch epoch.
func epochMetadata(broker *sarama.MockBroker, epoch int32) *sarama.MetadataResponse {
	md := &sarama.MetadataResponse{Version: 7, ControllerID: broker.BrokerID()}
	md.AddBroker(broker.Addr(), broker.BrokerID())
	md.AddTopicPartition("t", 3, broker.BrokerID(), []int32{broker.BrokerID()}, []int32{broker.BrokerID()}, []int32{}, sarama.ErrNoError)
	md.Topics[0].Partitions[0].LeaderEpoch = epoch
	return md
}

// TestPartitionFetcherLeaderEpochErrors: a partition's FENCED_LEADER_EPOCH
// (the broker knows a newer epoch than the fetcher sent) or
// UNKNOWN_LEADER_EPOCH (an older one) in a fetch response, through
// sarama's decoder from a mock broker, is no error on Errors: the fetcher
// refreshes the metadata, subscribes again with the epoch it names now,
// and receives the partition's records. With either error left out of
// leadershipError, the fetcher reports it on Errors.
func TestPartitionFetcherLeaderEpochErrors(t *testing.T) {
	t.Parallel()
	for _, kerr := range []sarama.KError{sarama.ErrFencedLeaderEpoch, sarama.ErrUnknownLeaderEpoch} {
		t.Run(kerr.Error(), func(t *testing.T) {
			t.Parallel()
			broker := sarama.NewMockBroker(t, 1)
			t.Cleanup(broker.Close) // after the fetcher's (startMockFetcher)
			failed := &sarama.FetchResponse{Version: 10}
			failed.AddError("t", 3, kerr)
			broker.SetHandlerByMap(map[string]sarama.MockResponse{
				"ApiVersionsRequest": sarama.NewMockApiVersionsResponse(t),
				"MetadataRequest":    sarama.NewMockWrapper(epochMetadata(broker, 5)),
				"FetchRequest":       sarama.NewMockWrapper(failed),
			})
			f := startMockFetcher(t, broker)

			answered := func(res any) bool { // whether the broker gave response res
				return slices.ContainsFunc(broker.History(), func(rr sarama.RequestResponse) bool { return rr.Response == res })
			}
			fetchtest.WaitFor(t, 10*time.Second, "the first fetch", func() bool { return answered(failed) })
			// The leader moved on to epoch 6, which the metadata names
			// now; then the broker serves the fetcher.
			md6 := epochMetadata(broker, 6)
			broker.SetHandlerByMap(map[string]sarama.MockResponse{
				"ApiVersionsRequest": sarama.NewMockApiVersionsResponse(t),
				"MetadataRequest":    sarama.NewMockWrapper(md6),
				"FetchRequest":       sarama.NewMockWrapper(failed),
			})
			fetchtest.WaitFor(t, 10*time.Second, "a refresh of the metadata", func() bool { return answered(md6) })
			served := &sarama.FetchResponse{Version: 10}
			served.AddRecordBatchWithTimestamp("t", 3, nil, sarama.StringEncoder("ten"), 10, -1, false, time.Unix(100, 0))
			served.AddRecordBatchWithTimestamp("t", 3, nil, sarama.StringEncoder("eleven"), 11, -1, false, time.Unix(100, 0))
			served.GetBlock("t", 3).HighWaterMarkOffset = 12
			broker.SetHandlerByMap(map[string]sarama.MockResponse{
				"ApiVersionsRequest": sarama.NewMockApiVersionsResponse(t),
				"MetadataRequest":    sarama.NewMockWrapper(md6),
				"FetchRequest":       sarama.NewMockWrapper(served),
			})
			select {
			case s := <-f.slabs:
				if got := offsets(s.Msgs); !slices.Equal(got, []int64{10, 11}) || string(s.Msgs[1].Value) != "eleven" {
					t.Errorf("delivered offsets %v, want [10 11]", got)
				}
			case err := <-f.errs:
				t.Fatalf("reported %v", err)
			case <-time.After(10 * time.Second):
				t.Fatalf("no records 10 s after the %s", kerr)
			}
			select {
			case err := <-f.errs:
				t.Errorf("reported %v", err)
			default:
			}
			f.AsyncClose()
			<-f.done
			if f.epoch != 6 {
				t.Errorf("the fetcher sends leader epoch %d, want 6, the refreshed metadata's", f.epoch)
			}
		})
	}
}

// countingInterceptor counts the messages it sees and marks them; it
// panics on the message of offset panicAt.
type countingInterceptor struct {
	seen    []int64
	panicAt int64
}

func (c *countingInterceptor) OnConsume(msg *sarama.ConsumerMessage) {
	c.seen = append(c.seen, msg.Offset)
	if msg.Offset == c.panicAt {
		panic("interceptor failed")
	}
	msg.Headers = append(msg.Headers, &sarama.RecordHeader{Key: []byte("seen")})
}

// TestPartitionFetcherInterceptors: in batch mode each message passes
// Consumer.Interceptors before it is handed out, as with sarama's
// partition consumer; an interceptor's panic is recovered and logged. Batch
// mode skipped them.
func TestPartitionFetcherInterceptors(t *testing.T) {
	t.Parallel()
	first, second := &countingInterceptor{panicAt: 11}, &countingInterceptor{panicAt: -1}
	f := testFetcher(10)
	f.hub.conf.Consumer.Interceptors = []sarama.ConsumerInterceptor{first, second}
	f.hub.log = slog.New(slog.DiscardHandler)
	f.slabs = make(chan Slab, 1)
	f.failed = make(chan error, 1)
	l := &brokerLoop{hub: f.hub, broker: sarama.NewBroker("127.0.0.1:9001"), subs: []*Fetcher{f}}
	f.hub.client = leaderClient{leader: l.broker}
	f.retries.Store(5)
	l.handle(l.subs, responseOf(partitionOf(13, recordBatch(10, 3))))
	msgs := (<-f.slabs).Msgs
	if n := f.retries.Load(); n != 0 {
		t.Errorf("after a response the backoff counts %d failures, want 0", n)
	}
	if !slices.Equal(first.seen, []int64{10, 11, 12}) || !slices.Equal(second.seen, []int64{10, 11, 12}) {
		t.Errorf("the interceptors saw %v and %v, want [10 11 12] each", first.seen, second.seen)
	}
	for _, msg := range msgs {
		want := 2
		if msg.Offset == 11 {
			want = 1 // the first interceptor panicked before marking it
		}
		if len(msg.Headers) != want {
			t.Errorf("message %d has %d marks, want %d", msg.Offset, len(msg.Headers), want)
		}
	}
}

// TestPartitionFetcherBackoff: between subscriptions a partition fetcher waits
// Consumer.Retry.BackoffFunc of the failures in a row when it is set (a
// response resets the count), else Consumer.Retry.Backoff. Batch mode
// always waited Retry.Backoff.
func TestPartitionFetcherBackoff(t *testing.T) {
	t.Parallel()
	f := testFetcher(0)
	if got := f.backoff(); got != f.hub.conf.Consumer.Retry.Backoff {
		t.Errorf("backoff() = %s, want Retry.Backoff %s", got, f.hub.conf.Consumer.Retry.Backoff)
	}
	f.retries.Store(0)
	f.hub.conf.Consumer.Retry.BackoffFunc = func(retries int) time.Duration { return time.Duration(retries) * time.Second }
	for want := 1; want <= 3; want++ {
		if got := f.backoff(); got != time.Duration(want)*time.Second {
			t.Errorf("backoff() after %d failures = %s, want %ds", want, got, want)
		}
	}
}

// TestRecordsEndField: recordsEnd reads sarama's unexported
// FetchResponseBlock.recordsNextOffset, an *int64; a sarama that renames
// or retypes it fails here (TestCompactionEmptiedBatch shows what it is
// for on a real cluster).
func TestRecordsEndField(t *testing.T) {
	t.Parallel()
	field, ok := reflect.TypeOf(sarama.FetchResponseBlock{}).FieldByName("recordsNextOffset")
	if !ok || field.Type != reflect.TypeOf((*int64)(nil)) {
		t.Fatalf("sarama.FetchResponseBlock.recordsNextOffset is %v (found %t); want *int64", field.Type, ok)
	}
	if _, ok := recordsEnd(&sarama.FetchResponseBlock{}); ok {
		t.Error("recordsEnd of a block without batches reports an end")
	}
}

// replicaClient is a leaderClient that also knows the broker of a
// preferred read replica by its ID, and counts its metadata refreshes.
type replicaClient struct {
	leaderClient
	replicas  map[int32]*sarama.Broker
	refreshes *int
}

func (c replicaClient) RefreshMetadata(...string) error {
	*c.refreshes++
	return nil
}

func (c replicaClient) Broker(id int32) (*sarama.Broker, error) {
	if b, ok := c.replicas[id]; ok {
		return b, nil
	}
	return nil, sarama.ErrBrokerNotFound
}

// TestPartitionFetcherPreferredReplica: a leader that names a preferred read
// replica (KIP-392) sends the fetcher there, for the lease of
// Metadata.RefreshFrequency; after it, or when the client does not know
// the replica, the fetcher goes back to the leader. The fetcher ignored
// the name and fetched from the leader for good, which answers such a
// fetcher with no record.
func TestPartitionFetcherPreferredReplica(t *testing.T) {
	t.Parallel()
	leader, replica := sarama.NewBroker("127.0.0.1:9001"), sarama.NewBroker("127.0.0.1:9002")
	f := testFetcher(10)
	refreshes := 0
	f.hub.client = replicaClient{leaderClient{leader: leader}, map[int32]*sarama.Broker{2: replica}, &refreshes}
	f.failed = make(chan error, 1)
	l := &brokerLoop{hub: f.hub, broker: leader, subs: []*Fetcher{f}}
	f.loop.Store(l)
	p := partitionOf(20)
	p.PreferredReadReplica = 2
	l.handle(l.subs, responseOf(p))
	select {
	case err := <-f.failed:
		if !errors.Is(err, errPreferredReplica) {
			t.Fatalf("dropped with %v, want errPreferredReplica", err)
		}
	default:
		t.Fatal("the fetcher stayed on the leader")
	}
	if b, err := f.source(); err != nil || b != replica {
		t.Errorf("source() = %v, %v; want the preferred replica", b, err)
	}
	f.preferredUntil = time.Now().Add(-time.Second) // the lease ran out
	if b, err := f.source(); err != nil || b != leader {
		t.Errorf("after the lease, source() = %v, %v; want the leader", b, err)
	}
	f.preferReplica(7) // a replica the client does not know, even after a refresh
	if b, err := f.source(); err != nil || b != leader || f.preferred != -1 || f.unknownReplica != 7 || refreshes != 1 {
		t.Errorf("with an unknown replica, source() = %v, %v (preferred %d, unknown %d, %d refreshes); want the leader, no preference, unknown 7, 1 refresh",
			b, err, f.preferred, f.unknownReplica, refreshes)
	}
}

// TestFetchBudget: a loop reserves, in the budget's unit, what is free
// of the budget up to what its slabs leave of its share (the limit over
// the running loops), and asks for that divided by its ratio of counted
// to wire bytes, within Fetch.MaxBytes, until its response is handled:
// the slabs delivered take the reservation over, and the rest goes back.
// While it holds slabs it waits until a quarter of its share is free
// (or all of Fetch.MaxBytes), and it fetches anyway (1 byte) while it
// holds none; a release frees the budget again. Without a limit it
// always asks Fetch.MaxBytes and reserves nothing.
func TestFetchBudget(t *testing.T) {
	t.Parallel()
	b := &Budget{limit: 1000}
	b.join()
	b.join() // two loops: a share of 500 each
	first, second, idle := &brokerLoop{}, &brokerLoop{}, &brokerLoop{}
	var (
		got int32
		ok  bool
	)
	check := func(what string, want int32, wantOK bool, buffered int64) {
		t.Helper()
		if got != want || ok != wantOK || b.buffered.Load() != buffered {
			t.Errorf("%s: %d, %v, buffered %d; want %d, %v, buffered %d", what, got, ok, b.buffered.Load(), want, wantOK, buffered)
		}
	}
	got, ok = b.reserve(first, 600)
	check("a loop's share of an empty budget", 250, true, 500)
	got, ok = b.reserve(second, 600)
	check("the other loop's share beside a request in flight", 250, true, 1000)
	b.count(first, 400) // within its reservation
	b.settle(first)
	check("a response of 400 of the 500 reserved", 250, true, 900)
	b.count(second, 700) // a first record batch larger than MaxBytes
	b.settle(second)
	check("a response of 700 of the 500 reserved", 250, true, 1100)
	got, ok = b.reserve(first, 600)
	check("a loop holding slabs, nothing free", 0, false, 1100)
	got, ok = b.reserve(idle, 600)
	check("a loop holding nothing, nothing free", 1, true, 1101)
	b.settle(idle)
	b.release(second, 700)
	got, ok = b.reserve(first, 600)
	check("less than a quarter of its share left by its slabs", 0, false, 400)
	b.release(first, 100)
	got, ok = b.reserve(first, 600)
	check("what its slabs leave of its share", 100, true, 500)
	b.settle(first)
	got, ok = b.reserve(second, 60)
	check("within Fetch.MaxBytes, less than a quarter of its share", 60, true, 420)
	b.settle(second)
	second.measure(2600, 1000)
	got, ok = b.reserve(second, 600)
	check("a ratio of 2.6 learnt from a response", 192, true, 800)
	b.settle(second)
	second.measure(1100, 1000)
	got, ok = b.reserve(second, 600)
	check("the largest ratio of the recent responses", 192, true, 800)
	b.settle(second)
	b.join() // a third loop: a share of 333
	got, ok = b.reserve(second, 600)
	check("a third of the budget", 128, true, 633)
	b.settle(second)
	b.leave()
	if first.held.Load() != 300 || second.held.Load() != 0 {
		t.Errorf("held %d and %d; want 300 and 0", first.held.Load(), second.held.Load())
	}
	unbounded := &Budget{}
	got, ok = unbounded.reserve(first, 600)
	if got != 600 || !ok || unbounded.buffered.Load() != 0 {
		t.Errorf("no limit: %d, %v, buffered %d; want 600, true, 0", got, ok, unbounded.buffered.Load())
	}
}

// TestFetchBudgetWakesForAUsefulRequest: a release wakes a loop waiting
// for the budget only once a request worth sending is free for it (a
// quarter of its share), or when it holds nothing; not for every scrap.
func TestFetchBudgetWakesForAUsefulRequest(t *testing.T) {
	t.Parallel()
	b := &Budget{limit: 1000}
	b.join()
	b.join() // a share of 500 each
	waiter := &brokerLoop{wake: make(chan struct{}, 1)}
	woken := func() bool {
		select {
		case <-waiter.wake:
			return true
		default:
			return false
		}
	}
	b.count(waiter, 450)
	b.count(waiter, 50)
	if _, ok := b.reserve(waiter, 600); ok {
		t.Fatal("a loop holding its whole share reserved more")
	}
	b.wait(waiter, 600, true)
	b.release(waiter, 50)
	if woken() {
		t.Error("woken for 50 bytes of a share of 500")
	}
	b.release(waiter, 450)
	if !woken() {
		t.Error("not woken when it held nothing any more")
	}
	b.count(waiter, 500)
	b.release(waiter, 100)
	if woken() {
		t.Error("woken for 100 bytes of a share of 500")
	}
	b.release(waiter, 400)
	b.wait(waiter, 600, false)
	if b.waiting.Load() != 0 || b.buffered.Load() != 0 {
		t.Errorf("%d waiting, %d buffered; want none", b.waiting.Load(), b.buffered.Load())
	}
}

// TestFetchBudgetConcurrent: many loops that reserve, deliver, settle and
// release at once never count the same free bytes twice. Each response
// stays within its reservation, so the budget's bound holds exactly: the
// reservations and slabs together never pass the limit by more than 1
// byte per loop (a loop that holds nothing may reserve 1 byte of a spent
// budget).
func TestFetchBudgetConcurrent(t *testing.T) {
	t.Parallel()
	const (
		loops    = 16
		limit    = 10000
		fetchMax = 4000 // Consumer.Fetch.MaxBytes
		rounds   = 20000
	)
	b := &Budget{limit: limit}
	for range loops {
		b.join()
	}
	var peak atomic.Int64
	observe := func() {
		v := b.buffered.Load()
		for {
			p := peak.Load()
			if v <= p || peak.CompareAndSwap(p, v) {
				return
			}
		}
	}
	var wg sync.WaitGroup
	for i := range loops {
		l := &brokerLoop{}
		wg.Add(1)
		go func() { // owned by the test, which waits for it
			defer wg.Done()
			var slabs []int64 // delivered, not taken yet
			// take stands in for a partition that takes the oldest slab
			// and hands it out.
			take := func() {
				b.release(l, slabs[0])
				slabs = slabs[1:]
			}
			for r := range rounds {
				maxBytes, ok := b.reserve(l, fetchMax)
				observe()
				if !ok {
					take() // stands in for the wait: it holds slabs
					continue
				}
				runtime.Gosched() // the request in flight
				if size := int64(maxBytes) * int64((i+r)%4) / 4; size > 0 {
					b.count(l, size)
					slabs = append(slabs, size)
					observe()
				}
				b.settle(l)
				if len(slabs) > 2 {
					take()
				}
			}
			for len(slabs) > 0 {
				take()
			}
		}()
	}
	wg.Wait()
	t.Logf("%d loops, limit %d: peak of reservations and slabs %d", loops, limit, peak.Load())
	if p := peak.Load(); p > limit+loops {
		t.Errorf("reservations and slabs reached %d bytes; the bound is the limit %d + 1 byte per loop = %d", p, limit, limit+loops)
	}
	if left := b.buffered.Load(); left != 0 {
		t.Errorf("%d bytes left counted once every slab was released", left)
	}
}

// TestPartitionFetcherOutOfRangeConfirmed: an OFFSET_OUT_OF_RANGE from the
// broker a fetcher fetches from ends it (the partition starts again at
// Offsets.Initial) only when it comes twice in a row and the leader's
// oldest and newest offsets (ListOffsets after a refresh of the metadata)
// confirm it; a stale broker's answer alone (a former leader resumed
// after a freeze) leaves the fetcher fetching.
func TestPartitionFetcherOutOfRangeConfirmed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name           string
		oldest, newest int64
		outOfRange     bool
	}{
		{"stale broker: the leader has the offset", 0, 20, false},
		{"the leader confirms", 12, 20, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			broker := sarama.NewMockBroker(t, 1)
			t.Cleanup(broker.Close) // after the fetcher's (startMockFetcher)
			failed := &sarama.FetchResponse{Version: 10}
			failed.AddError("t", 3, sarama.ErrOffsetOutOfRange)
			served := &sarama.FetchResponse{Version: 10}
			served.AddRecordBatchWithTimestamp("t", 3, nil, sarama.StringEncoder("ten"), 10, -1, false, time.Unix(100, 0))
			served.GetBlock("t", 3).HighWaterMarkOffset = 20
			listOffsets := sarama.NewMockOffsetResponse(t).
				SetOffset("t", 3, sarama.OffsetOldest, tc.oldest).SetOffset("t", 3, sarama.OffsetNewest, tc.newest)
			fetches := sarama.NewMockSequence(failed, failed, served)
			broker.SetHandlerByMap(map[string]sarama.MockResponse{
				"ApiVersionsRequest": sarama.NewMockApiVersionsResponse(t),
				"MetadataRequest":    sarama.NewMockWrapper(epochMetadata(broker, 5)),
				"FetchRequest":       fetches,
				"OffsetRequest":      listOffsets,
			})
			f := startMockFetcher(t, broker)
			select {
			case s, ok := <-f.slabs:
				switch {
				case !ok && !tc.outOfRange:
					t.Fatalf("the fetcher ended (out of range %v) though the leader has offset 10", f.outOfRange)
				case ok && tc.outOfRange:
					t.Fatalf("delivered %v though the leader's log starts at 12", offsets(s.Msgs))
				case ok && !slices.Equal(offsets(s.Msgs), []int64{10}):
					t.Errorf("delivered offsets %v, want [10]", offsets(s.Msgs))
				}
			case <-time.After(10 * time.Second):
				t.Fatal("neither records nor the fetcher's end within 10 s")
			}
			if tc.outOfRange {
				<-f.done
				if !f.outOfRange {
					t.Error("the fetcher ended without outOfRange")
				}
			}
		})
	}
}

// startMockFetcher starts a partition fetcher of t/3 at offset 10 on a client
// of broker, a sarama mock that answers what it is told (the sarama
// client sends no ApiVersions request, the fetch transport does; Fetch
// v10, which carries the leader epoch), with a retry
// backoff of 10 ms. The fetcher, its hub and the client stop at the end
// of the test.
func startMockFetcher(t *testing.T, broker *sarama.MockBroker) *Fetcher {
	t.Helper()
	conf := sarama.NewConfig()
	conf.Version = sarama.V2_1_0_0
	conf.ApiVersionsRequest = false
	conf.Consumer.Retry.Backoff = 10 * time.Millisecond
	client, err := sarama.NewClient([]string{broker.Addr()}, conf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	version, _ := Version(conf)
	hub := testHub(client, conf, version, &Budget{}, nil)
	t.Cleanup(hub.Close)
	f := hub.Start("t", 3, 10)
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// testHub returns a hub of client whose loops dial the brokers directly,
// with budget and log.
func testHub(client sarama.Client, conf *sarama.Config, version int16, budget *Budget, log *slog.Logger) *Hub {
	return NewHub(Config{Client: client, Sarama: conf, Version: version, Budget: budget, Log: log,
		Transport: func(addr string) ([]kgo.Opt, error) { return []kgo.Opt{kgo.SeedBrokers(addr)}, nil }})
}
