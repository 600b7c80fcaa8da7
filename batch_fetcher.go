package kafkaconsumer

// The fetch engine: the partitions fetch their records themselves, and
// each partition manager receives the messages of a fetch response as one
// slab, in both modes (single messages are handed out one by one from it),
// instead of one message at a time from sarama's partition consumer, whose
// goroutine sends every message on a channel of its own. As sarama's
// consumer does, one loop per broker fetches all its partitions in one
// request (fetchHub, brokerLoop): Kafka answers the requests of a
// connection one at a time, and a request of a partition with nothing new
// would hold the others up to Consumer.MaxWaitTime. It serves record
// batches (Kafka 0.11's message format v2), read uncommitted or committed;
// a partition that meets an older message set goes back to sarama's
// partition consumer, which decodes it.

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
)

// errLeaderMoved drops a batch fetcher from the loop of a broker that
// answered for a partition it no longer leads (a follower serves fetches
// from Fetch v11 on): the fetcher subscribes to the leader at once.
var errLeaderMoved = errors.New("kafkaconsumer: the partition's leader moved")

// errPreferredReplica drops a batch fetcher from its loop when the leader
// named another replica to fetch from (KIP-392: a rack-aware replica
// selector and Config.RackID): the fetcher subscribes to that replica's
// loop at once.
var errPreferredReplica = errors.New("kafkaconsumer: the leader named a preferred read replica")

// errLegacyRecords ends a batch fetcher that met a message set older than
// record batches.
var errLegacyRecords = errors.New("kafkaconsumer: legacy message set: consuming with sarama's partition consumer")

// batchFetchVersion returns the Fetch request version that batch fetchers
// send (the highest that conf.Version allows, as sarama's consumer picks
// it), and whether batch fetchers serve conf at all: record batches need
// version 4 (Kafka 0.11).
func batchFetchVersion(conf *sarama.Config) (int16, bool) {
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

// fetchHub runs the broker loops of one sarama client: a loop per broker
// that leads a partition of a batch fetcher. Owned by the consumer
// manager: closeKafka stops it after the batch fetchers ended.
type fetchHub struct {
	client  sarama.Client
	conf    *sarama.Config
	version int16
	log     *slog.Logger
	budget  *fetchBudget // shared by the hubs of a consumer

	mu    sync.Mutex
	loops map[int32]*brokerLoop // by broker ID; a loop removes itself when it has no partition left
	stop  chan struct{}         // closed by close
	wg    sync.WaitGroup        // the loops
}

func newFetchHub(client sarama.Client, conf *sarama.Config, version int16, budget *fetchBudget, log *slog.Logger) *fetchHub {
	h := &fetchHub{client: client, conf: conf, version: version, budget: budget, log: log, loops: make(map[int32]*brokerLoop), stop: make(chan struct{})}
	budget.hubs = append(budget.hubs, h)
	return h
}

// fetchBudget is Config.MaxBufferedBytes, shared by the fetch hubs of a
// consumer: the bytes of messages their fetchers hold in slabs that the
// partitions did not hand out yet, and the bytes that the requests in
// flight reserved (reserve). Its hubs are set before any loop runs.
//
// The bound it keeps: a request reserves only what is free, in one step,
// so that no two loops count the same free bytes; only a loop that holds
// nothing may reserve 1 byte of a spent budget. So the reservations and
// slabs together stay within limit plus 1 byte per broker loop, as long
// as each response stays within what its request reserved; what a
// response brings beyond comes on top (Kafka answers with a first record
// batch however large, and a slab counts the messages' own memory, which
// the request's MaxBytes does not).
type fetchBudget struct {
	limit int64 // 0: no bound
	hubs  []*fetchHub
	// buffered is the slabs' bytes and the reservations, changed only by
	// atomic adds, and by reserve's compare-and-swap.
	buffered atomic.Int64
	// starved counts the loops that wait for the budget to free: a
	// release wakes every loop while it is not zero.
	starved atomic.Int32
}

// release gives back the bytes of a slab that loop l fetched (nil: its
// loop is not counted any more), and wakes the loops that wait for them.
func (b *fetchBudget) release(l *brokerLoop, size int64) {
	if size == 0 {
		return
	}
	b.buffered.Add(-size)
	if l != nil {
		l.held.Add(-size)
	}
	if b.starved.Load() == 0 {
		return
	}
	for _, h := range b.hubs {
		h.mu.Lock()
		for _, l := range h.loops {
			l.notify()
		}
		h.mu.Unlock()
	}
}

// reserve returns the MaxBytes of the next request of loop l, and
// reserves it for the request, in one step (a compare-and-swap): the free
// budget, within Consumer.Fetch.MaxBytes (limit). It reports false,
// reserving nothing, when none is free while l holds slabs not taken yet.
// A loop that holds nothing may always fetch (MaxBytes at least 1: Kafka
// answers with at least the first record batch, however large), so that
// every partition makes progress. The reservation holds until the loop
// handled the response: the slabs it delivers take it over (count), and
// settle gives back the rest. Without a limit it reserves nothing. Called
// by l's goroutine only; safe beside the other loops'.
func (b *fetchBudget) reserve(l *brokerLoop, limit int32) (int32, bool) {
	if b.limit <= 0 {
		return limit, true
	}
	for {
		buffered := b.buffered.Load()
		free := b.limit - buffered
		if free <= 0 && l.held.Load() > 0 {
			return 0, false
		}
		n := max(min(free, int64(limit)), 1)
		if b.buffered.CompareAndSwap(buffered, buffered+n) {
			l.reserved = n
			return int32(n), true
		}
	}
}

// count counts a slab of size bytes that loop l delivered: what the
// reservation of l's request covers of it is counted already, the rest
// is added. Called by l's goroutine only.
func (b *fetchBudget) count(l *brokerLoop, size int64) {
	covered := min(size, l.reserved)
	l.reserved -= covered
	b.buffered.Add(size - covered)
	l.held.Add(size)
}

// settle gives back what is left of the reservation of l's request, once
// its response is handled (or the request failed). Called by l's
// goroutine only.
func (b *fetchBudget) settle(l *brokerLoop) {
	left := l.reserved
	l.reserved = 0
	b.release(nil, left)
}

// close stops the loops and waits for them (a fetch in flight completes
// first, or fails when closeKafka cuts the connections).
func (h *fetchHub) close() {
	h.mu.Lock()
	select {
	case <-h.stop:
	default:
		close(h.stop)
	}
	h.mu.Unlock()
	h.wg.Wait()
}

// subscribe adds f to the loop of broker, starting the loop if none runs.
// It reports false when the hub is closed.
func (h *fetchHub) subscribe(f *batchFetcher, broker *sarama.Broker) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-h.stop:
		return false
	default:
	}
	l := h.loops[broker.ID()]
	if l == nil {
		l = &brokerLoop{hub: h, broker: broker, wake: make(chan struct{}, 1)}
		h.loops[broker.ID()] = l
		h.wg.Add(1)
		go l.run() // owned by the hub: close stops it and waits
	}
	l.added = append(l.added, f)
	f.loop.Store(l)
	l.notify()
	return true
}

// brokerLoop fetches the partitions that broker leads, for the batch
// fetchers subscribed to it, in one request at a time, and hands each its
// messages. A partition is in a request only while it is not sidelined
// (paused, or waiting at MaxPendingAcks) and its partition manager took
// its last slab; an error of a partition
// (moved leader, offset out of range) or of the request unsubscribes the
// partitions it concerns, which subscribe again after a backoff (see
// batchFetcher.run).
type brokerLoop struct {
	hub    *fetchHub
	broker *sarama.Broker
	wake   chan struct{}   // a token, without blocking the sender, when the loop may have a request to send
	added  []*batchFetcher // guarded by hub.mu: subscribed, not taken by the loop yet
	subs   []*batchFetcher // the loop's
	// held is the bytes of the slabs this loop delivered that their
	// partitions did not take yet (counted in hub.buffered too).
	held atomic.Int64
	// reserved is what is left of the budget that the loop's request in
	// flight reserved (fetchBudget.reserve): the loop goroutine's.
	reserved int64
}

// notify wakes the loop.
func (l *brokerLoop) notify() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

func (l *brokerLoop) run() {
	defer l.hub.wg.Done()
	var (
		ready   []*batchFetcher
		waiting time.Time // since when a partition's last slab is not taken; zero when none
		timer   = time.NewTimer(time.Hour)
	)
	timer.Stop()
	defer timer.Stop()
	for {
		l.hub.mu.Lock()
		l.subs = append(l.subs, l.added...)
		l.added = nil
		if len(l.subs) == 0 {
			delete(l.hub.loops, l.broker.ID())
			l.hub.mu.Unlock()
			return
		}
		l.hub.mu.Unlock()

		live := l.subs[:0]
		ready = ready[:0]
		busy := false
		for _, f := range l.subs {
			if f.isDying() {
				f.loop.Store(nil)
				continue
			}
			live = append(live, f)
			switch {
			case f.sidelined():
			case len(f.slabs) == 0:
				ready = append(ready, f)
			default:
				busy = true
			}
		}
		clear(l.subs[len(live):])
		l.subs = live
		// A request without a partition whose last slab is not taken yet
		// would wait up to Consumer.MaxWaitTime for the others alone,
		// while that one is ready to fetch again: wait for it, up to
		// Consumer.MaxProcessingTime (sarama's consumer waits so for its
		// partitions, then leaves the slow ones out of the request).
		if !busy {
			waiting = time.Time{}
		} else if waiting.IsZero() {
			waiting = time.Now()
		}
		if busy {
			if left := l.hub.conf.Consumer.MaxProcessingTime - time.Since(waiting); left > 0 {
				timer.Reset(left)
				select {
				case <-l.wake:
				case <-timer.C:
				case <-l.hub.stop:
					return
				}
				timer.Stop()
				continue
			}
		}
		if len(ready) == 0 {
			select {
			case <-l.wake:
			case <-l.hub.stop:
				return
			}
			continue
		}
		// The request's bytes are reserved while it is in flight, so that
		// the other loops do not count the same free bytes; the slabs of
		// the response take the reservation over.
		budget, limit := l.hub.budget, l.hub.conf.Consumer.Fetch.MaxBytes
		maxBytes, ok := budget.reserve(l, limit)
		if !ok {
			// The budget is spent: wait for a partition to take a slab.
			budget.starved.Add(1)
			maxBytes, ok = budget.reserve(l, limit) // a release may have come before the count
			if !ok {
				select {
				case <-l.wake:
				case <-l.hub.stop:
					budget.starved.Add(-1)
					return
				}
			}
			budget.starved.Add(-1)
			if !ok {
				continue
			}
		}
		select {
		case <-l.hub.stop:
			budget.settle(l)
			return
		default:
		}
		l.fetch(ready, maxBytes)
		budget.settle(l)
	}
}

// fetch sends one request for the ready fetchers, and hands each its
// messages or its error.
func (l *brokerLoop) fetch(ready []*batchFetcher, maxBytes int32) {
	conf := l.hub.conf
	req := &sarama.FetchRequest{
		MinBytes:    conf.Consumer.Fetch.Min,
		MaxWaitTime: int32(conf.Consumer.MaxWaitTime / time.Millisecond),
		MaxBytes:    maxBytes,
		Version:     l.hub.version,
		Isolation:   conf.Consumer.IsolationLevel,
	}
	if req.Version >= 7 {
		req.SessionID, req.SessionEpoch = 0, -1 // no fetch session
	}
	if req.Version >= 11 {
		req.RackID = conf.RackID
	}
	for _, f := range ready {
		req.AddBlock(f.tp.Topic, f.tp.Partition, f.offset, f.fetchSize, f.epoch)
	}
	resp, err := l.broker.Fetch(req)
	if err != nil {
		// sarama's broker fails every later request on a connection
		// whose read failed: close it; the client opens it again.
		_ = l.broker.Close()
		l.dropAll(err)
		return
	}
	if throttle := l.handle(ready, resp); throttle > 0 {
		// A broker over a quota answered at once, with nothing: wait its
		// throttle out before the next request, as sarama does.
		timer := time.NewTimer(throttle)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-l.hub.stop:
		}
	}
}

// handle hands each of the ready fetchers its messages or its error from
// resp. A response throttled by a quota (ThrottleTime set) that holds no
// partition is no error: it returns the throttle time to wait.
func (l *brokerLoop) handle(ready []*batchFetcher, resp *sarama.FetchResponse) time.Duration {
	if resp.ThrottleTime > 0 && len(resp.Blocks) == 0 {
		return resp.ThrottleTime
	}
	for _, f := range ready {
		block := resp.GetBlock(f.tp.Topic, f.tp.Partition)
		switch {
		case block == nil:
			l.drop(f, sarama.ErrIncompleteResponse)
			continue
		case !errors.Is(block.Err, sarama.ErrNoError):
			l.drop(f, block.Err)
			continue
		}
		f.hwm.Store(block.HighWaterMarkOffset)
		if id := block.PreferredReadReplica; id >= 0 && id != l.broker.ID() {
			f.preferReplica(id)
			l.drop(f, errPreferredReplica)
			continue
		}
		msgs, size, moved, err := f.parse(block)
		switch {
		case errors.Is(err, errLegacyRecords):
			l.drop(f, err)
			continue
		case err != nil:
			f.report(err) // ErrMessageTooLarge: skipped
		case len(msgs) > 0 || moved:
			f.intercept(msgs)
			f.deliver(slab{msgs: msgs, next: f.offset, acct: &slabAccount{size: size, from: l}})
		}
		f.retries.Store(0)
		if l.leaderMoved(f) {
			l.drop(f, errLeaderMoved)
		}
	}
	return 0
}

// leaderMoved reports whether the client's metadata names another broker
// than the loop's as the leader of f's partition, as sarama's consumer
// checks after each response: a former leader that still answers would
// otherwise keep the partition for good.
func (l *brokerLoop) leaderMoved(f *batchFetcher) bool {
	if f.preferred >= 0 && f.preferred == l.broker.ID() && time.Now().Before(f.preferredUntil) {
		return false // the leader sent it here
	}
	leader, err := l.hub.client.Leader(f.tp.Topic, f.tp.Partition)
	return err == nil && leader.Addr() != l.broker.Addr()
}

// dropAll unsubscribes every fetcher of the loop for err, the error of a
// request, each once.
func (l *brokerLoop) dropAll(err error) {
	subs := l.subs
	l.subs = nil
	for _, f := range subs {
		f.fail(err)
	}
}

// drop unsubscribes f for err: f's goroutine reports it, and subscribes
// again or ends.
func (l *brokerLoop) drop(f *batchFetcher, err error) {
	for i, g := range l.subs {
		if g == f {
			l.subs = append(l.subs[:i], l.subs[i+1:]...)
			break
		}
	}
	f.fail(err)
}

// fail tells f's goroutine that its loop dropped it for err.
func (f *batchFetcher) fail(err error) {
	f.loop.Store(nil)
	select {
	case f.failed <- err:
	default: // f is failing already
	}
}

// batchFetcher is one partition of a fetchHub. Its goroutine (run)
// subscribes it to the loop of the partition's leader, and again after an
// error; the loop sends the messages of each response on slabs. It
// implements sarama.PartitionConsumer, so that the partition manager runs
// it as it runs sarama's: AsyncClose stops it, its Errors channel is
// closed when run ends, HighWaterMarkOffset, Pause and Resume. Its
// Messages channel is nil: consumeBatches reads slabs, and calls taken
// after each.
type batchFetcher struct {
	hub *fetchHub
	tp  TopicPartition

	// slabs carries each response's messages, in offset order; the
	// loop sends only when it is empty (capacity 1). Closed by run when
	// it ends, under mu, after which deliver sends nothing.
	slabs  chan slab
	mu     sync.Mutex
	ended  bool
	errs   chan *sarama.ConsumerError // closed when run ends
	failed chan error                 // the loop's drop; capacity 1
	hwm    atomic.Int64
	// paused is set by Pause, until Resume; waiting while the partition
	// waits at MaxPendingAcks (setWaiting). Either sidelines the
	// partition: it is in no request after the one in flight, and its
	// slabs are outside the budget.
	paused, waiting atomic.Bool
	loop            atomic.Pointer[brokerLoop] // the loop it is subscribed to, or nil
	dying           chan struct{}              // closed by AsyncClose
	once            sync.Once
	done            chan struct{} // closed when run ends
	// legacy is set by run, before it ends, when the partition holds a
	// legacy message set; outOfRange when the leader answered that the
	// offset is out of range (the partition manager starts again at
	// Offsets.Initial). Read after done.
	legacy, outOfRange bool
	// outOfRangeOnce is set by run when a fetch got OFFSET_OUT_OF_RANGE
	// and it was not confirmed yet (confirmOutOfRange).
	outOfRangeOnce bool
	// buffered is the bytes of the slabs delivered and not handed out
	// entirely yet, the one in the channel and the one the partition is
	// handing out (PartitionStats.BufferedBytes); inHand is the account
	// of the latter.
	buffered atomic.Int64
	inHand   atomic.Pointer[slabAccount]

	// offset is the next offset to fetch, and fetchSize the size asked
	// for; the loop's while subscribed, run's otherwise.
	offset    int64
	fetchSize int32
	// retries counts the failures since the last response that held the
	// partition (run's backoff; the loop resets it).
	retries atomic.Int32
	// preferred is the ID of the read replica the leader named (-1:
	// none: fetch from the leader), until preferredUntil; the loop's
	// while subscribed, run's otherwise, as offset.
	preferred      int32
	preferredUntil time.Time
	// unknownReplica is the ID of the last preferred read replica that
	// the client did not know even after a refresh of the metadata (-1:
	// none): when the leader names it again, run waits the backoff
	// before it asks again. run's.
	unknownReplica int32
	// epoch is the leader epoch the metadata gave with the leader (-1:
	// unknown), sent with each fetch (KIP-320): a broker that is no longer
	// the leader, or not yet, answers FENCED_LEADER_EPOCH or
	// UNKNOWN_LEADER_EPOCH. Written by run only.
	epoch int32
}

// slab is what one response brought a partition: its messages, in offset
// order, and next, the offset to fetch next. Offsets below next without a
// message in msgs hold nothing to hand out (control batches, aborted
// transactions, batches compaction emptied). size is the bytes of msgs
// counted against the hub's budget until the partition takes the slab.
type slab struct {
	msgs []*sarama.ConsumerMessage
	next int64
	acct *slabAccount
}

// slabAccount is the count of a slab's bytes in the budget, from its
// delivery until the partition handed it out entirely (or dropped it, or
// was paused): release gives them back once.
type slabAccount struct {
	size     int64
	from     *brokerLoop // the loop that fetched it, whose held counts size
	released atomic.Bool
}

// startBatchFetcher starts a batch fetcher of tp at offset on hub. It
// sends no request itself: an offset outside the partition's log ends the
// fetcher at its first response, with outOfRange set (sarama's
// ConsumePartition asks for the oldest and newest offsets first, two
// requests per partition).
func startBatchFetcher(hub *fetchHub, tp TopicPartition, offset int64) *batchFetcher {
	f := &batchFetcher{
		hub:            hub,
		tp:             tp,
		slabs:          make(chan slab, 1),
		errs:           make(chan *sarama.ConsumerError, hub.conf.ChannelBufferSize),
		failed:         make(chan error, 1),
		dying:          make(chan struct{}),
		done:           make(chan struct{}),
		offset:         offset,
		fetchSize:      hub.conf.Consumer.Fetch.Default,
		preferred:      -1,
		unknownReplica: -1,
		epoch:          -1,
	}
	f.hwm.Store(-1)
	go f.run() // owned by the partition manager, which closes it (AsyncClose) and drains errs
	return f
}

// run subscribes the fetcher to its leader's loop, and again after each
// error the loop reports, after Consumer.Retry.Backoff and a refresh of
// the partition's metadata, until AsyncClose, an offset out of range (the
// partition manager starts again at Offsets.Initial), or a legacy message
// set.
func (f *batchFetcher) run() {
	defer close(f.done)
	defer close(f.errs)
	defer func() {
		f.mu.Lock()
		f.ended = true
		close(f.slabs)
		if s, ok := <-f.slabs; ok { // not taken: give its bytes back
			f.release(s.acct)
		}
		f.mu.Unlock()
	}()
	for {
		broker, err := f.source()
		if err == nil {
			if !f.hub.subscribe(f, broker) {
				return
			}
			select {
			case err = <-f.failed:
			case <-f.dying:
				if l := f.loop.Load(); l != nil {
					l.notify() // it drops dying fetchers
				}
				return
			}
		}
		if errors.Is(err, errPreferredReplica) && f.preferred == f.unknownReplica {
			// The leader names again a replica that the refreshed
			// metadata did not know: ask again after the backoff, when
			// source refreshes the metadata again, not in a loop of
			// fetches that hand out nothing.
			if !f.pause(f.backoff()) {
				return
			}
			continue
		}
		if errors.Is(err, errLeaderMoved) || errors.Is(err, errPreferredReplica) {
			continue // the metadata names the leader already, or the leader the replica
		}
		// The client closed the broker under the loop (sarama closes a
		// broker whose metadata request failed, for every user of the
		// client): fetch again at once, from the leader that source opens
		// again; a second in a row waits the backoff. Neither is
		// reported: a broker that cannot be reached fails the dial, with
		// an error of its own.
		notConnected := errors.Is(err, sarama.ErrNotConnected)
		if notConnected && f.retries.Add(1) == 1 {
			continue
		}
		fromReplica := f.preferred >= 0
		f.preferred = -1 // any other error: back to the leader
		switch {
		case errors.Is(err, errLegacyRecords):
			f.legacy = true
			return
		case errors.Is(err, sarama.ErrOffsetOutOfRange) && fromReplica:
			// A follower may lag behind an offset the leader served: ask
			// the leader, which answers out of range itself if it is.
		case errors.Is(err, sarama.ErrOffsetOutOfRange) && f.confirmOutOfRange():
			f.outOfRange = true
			return
		case errors.Is(err, sarama.ErrOffsetOutOfRange):
			// Not confirmed (yet): fetch again, after a refresh of the
			// metadata and the backoff, without a report.
		case notConnected:
			// Closed under the loop again: after the backoff, unreported.
		case leadershipError(err):
			// The partition moved, or the metadata is behind: fetch from
			// the leader the refreshed metadata names, as sarama does,
			// without a report.
		case !f.report(err):
			return
		}
		if f.isDying() {
			return
		}
		_ = f.hub.client.RefreshMetadata(f.tp.Topic)
		if !f.pause(f.backoff()) {
			return
		}
	}
}

// pause waits for d, or until the fetcher is closed: then it reports
// false. Written for run's goroutine.
func (f *batchFetcher) pause(d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-f.dying:
		return false
	}
}

// confirmOutOfRange reports whether an OFFSET_OUT_OF_RANGE that a fetch
// got holds: only when it is the second in a row (no response of the
// partition between them), and the leader that the refreshed metadata
// names says that the offset is below its oldest or past its newest
// (ListOffsets). A former leader resumed after a freeze, which takes
// itself for the leader until the controller tells it otherwise, answers
// so for an offset past the end of its own log; trusting it would start
// the partition again at Offsets.Initial, its committed offset with it.
// Written for run's goroutine.
func (f *batchFetcher) confirmOutOfRange() bool {
	if !f.outOfRangeOnce || f.retries.Load() == 0 {
		f.outOfRangeOnce = true // the first, or the first since a response
		return false
	}
	f.outOfRangeOnce = false
	client := f.hub.client
	if err := client.RefreshMetadata(f.tp.Topic); err != nil {
		return false
	}
	oldest, err := client.GetOffset(f.tp.Topic, f.tp.Partition, sarama.OffsetOldest)
	if err != nil {
		return false
	}
	newest, err := client.GetOffset(f.tp.Topic, f.tp.Partition, sarama.OffsetNewest)
	if err != nil {
		return false
	}
	return f.offset < oldest || f.offset > newest
}

// leadershipError reports whether err, a partition's error in a fetch
// response, says that the broker does not lead it (any more, or yet), or
// knows another leader epoch: sarama's consumer fetches again from the
// leader that the refreshed metadata names, and tells the user nothing.
func leadershipError(err error) bool {
	for _, e := range []error{sarama.ErrNotLeaderForPartition, sarama.ErrLeaderNotAvailable, sarama.ErrReplicaNotAvailable,
		sarama.ErrUnknownTopicOrPartition, sarama.ErrFencedLeaderEpoch, sarama.ErrUnknownLeaderEpoch} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// source returns the broker to fetch from: the preferred read replica the
// leader named, while its lease runs and the client knows it, else the
// leader. A replica the client does not know (one started again since
// the last refresh, in a rolling restart) refreshes the topic's metadata
// once, as sarama's consumer does; one that the refreshed metadata does
// not know either is left in unknownReplica, and the leader is asked. It
// keeps the leader's epoch in epoch.
func (f *batchFetcher) source() (*sarama.Broker, error) {
	if f.preferred >= 0 && time.Now().Before(f.preferredUntil) {
		broker, err := f.hub.client.Broker(f.preferred)
		if err != nil && f.hub.client.RefreshMetadata(f.tp.Topic) == nil {
			broker, err = f.hub.client.Broker(f.preferred)
		}
		if err == nil {
			f.unknownReplica = -1
			return broker, nil
		}
		f.unknownReplica = f.preferred
	}
	f.preferred = -1
	leader, epoch, err := f.hub.client.LeaderAndEpoch(f.tp.Topic, f.tp.Partition)
	if err == nil {
		f.epoch = epoch
	}
	return leader, err
}

// preferReplica makes the fetcher fetch from the replica of broker ID id
// until Metadata.RefreshFrequency (10 min when 0) has passed or an error
// comes, as sarama's consumer does: then it asks the leader again, which
// may name another.
func (f *batchFetcher) preferReplica(id int32) {
	lease := f.hub.conf.Metadata.RefreshFrequency
	if lease <= 0 {
		lease = 10 * time.Minute
	}
	f.preferred, f.preferredUntil = id, time.Now().Add(lease)
}

// backoff counts a failure in a row and returns how long to wait before
// subscribing again: Consumer.Retry.BackoffFunc of the failures since the
// last response when it is set, else Consumer.Retry.Backoff.
func (f *batchFetcher) backoff() time.Duration {
	retries := f.retries.Add(1)
	if fn := f.hub.conf.Consumer.Retry.BackoffFunc; fn != nil {
		return fn(int(retries))
	}
	return f.hub.conf.Consumer.Retry.Backoff
}

// intercept passes each of msgs to the Consumer.Interceptors, in order, as
// sarama's partition consumer does. An interceptor that panics is logged,
// and the message goes on unchanged by it.
func (f *batchFetcher) intercept(msgs []*sarama.ConsumerMessage) {
	for _, interceptor := range f.hub.conf.Consumer.Interceptors {
		for _, msg := range msgs {
			f.applyInterceptor(interceptor, msg)
		}
	}
}

// applyInterceptor runs interceptor on msg, recovering a panic of it.
func (f *batchFetcher) applyInterceptor(interceptor sarama.ConsumerInterceptor, msg *sarama.ConsumerMessage) {
	defer func() {
		if r := recover(); r != nil && f.hub.log != nil {
			f.hub.log.Error("A consumer interceptor panicked; the message goes on.", "interceptor", fmt.Sprintf("%T", interceptor), "panic", fmt.Sprint(r),
				"topic", msg.Topic, "partition", msg.Partition, "offset", msg.Offset)
		}
	}()
	interceptor.OnConsume(msg)
}

// isDying reports whether AsyncClose was called.
func (f *batchFetcher) isDying() bool {
	select {
	case <-f.dying:
		return true
	default:
		return false
	}
}

// deliver sends the slab of a response, counting its bytes in the
// budget, unless the partition is sidelined (a request in flight when it
// was, or when its wait began: leaveBudget, under the same lock, missed
// the slab); the loop calls it only when slabs is empty, so it never
// blocks.
func (f *batchFetcher) deliver(s slab) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ended {
		return
	}
	a := s.acct
	if f.sidelined() {
		a.released.Store(true) // never counted
	} else {
		f.buffered.Add(a.size)
		f.hub.budget.count(a.from, a.size)
	}
	select {
	case f.slabs <- s:
	default:
		f.release(a) // not reached: the loop delivers only when slabs is empty
	}
}

// taken tells the loop that the partition manager took slab s, and
// released the one it handed out before: the partition is ready for the
// next request. s counts in the budget until the partition handed it
// out entirely (release).
func (f *batchFetcher) taken(s slab) {
	if prev := f.inHand.Swap(s.acct); prev != nil {
		f.release(prev)
	}
	if l := f.loop.Load(); l != nil {
		l.notify()
	}
}

// release gives the bytes of a slab back to the budget of the hub and of
// the loop that fetched it: once the partition handed it out entirely,
// when the partition stops handing out or the fetcher ended without
// handing it out, or when the partition is sidelined (a paused
// partition's slabs, or those of one waiting at MaxPendingAcks, wait
// outside the budget, so that the others do not wait for them). Counted
// once; nil is no slab.
func (f *batchFetcher) release(a *slabAccount) {
	if a == nil || !a.released.CompareAndSwap(false, true) {
		return
	}
	f.buffered.Add(-a.size)
	if a.size != 0 {
		f.hub.budget.release(a.from, a.size)
	}
}

// handedOut tells that the partition handed out everything it took, or
// stopped handing out: the slab in hand leaves the budget.
func (f *batchFetcher) handedOut() {
	f.release(f.inHand.Swap(nil))
}

// report sends err on errs, without blocking the loop: it is dropped when
// errs is full. It reports false when closed.
func (f *batchFetcher) report(err error) bool {
	if f.isDying() {
		return false
	}
	select {
	case f.errs <- &sarama.ConsumerError{Topic: f.tp.Topic, Partition: f.tp.Partition, Err: err}:
	default:
		logf(f.hub.log, slog.LevelWarn, "Error of %s/%d dropped (its channel is full): %s.", f.tp.Topic, f.tp.Partition, err)
	}
	return true
}

// parse returns the messages of a response block from offset on (a batch
// may begin before it) and their bytes (keys, values and headers),
// skipping control batches and, reading committed, the batches of aborted
// transactions (the block's AbortedTransactions, as Kafka's consumer
// filters them); and moves offset past every batch it read, whether
// records remain in it or compaction removed them all. moved tells
// whether it did. One slab holds the messages of the block, and one slice
// the pointers to them. A response that holds only part of a batch (a
// batch larger than the fetch size) makes the next fetch ask for more, as
// sarama's consumer does.
func (f *batchFetcher) parse(block *sarama.FetchResponseBlock) (msgs []*sarama.ConsumerMessage, size int64, moved bool, err error) {
	n := 0
	for _, records := range block.RecordsSet {
		if records.MsgSet != nil {
			return nil, 0, false, errLegacyRecords
		}
		if rb := records.RecordBatch; rb != nil && !rb.Control && !rb.PartialTrailingRecord {
			n += len(rb.Records)
		}
	}
	conf := f.hub.conf
	var aborted *abortedTransactions
	if conf.Consumer.IsolationLevel == sarama.ReadCommitted {
		aborted = newAbortedTransactions(block.AbortedTransactions)
	}
	// The messages are allocated in chunks of slabChunk: a message the
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
				chunk = make([]sarama.ConsumerMessage, min(n-len(msgs), slabChunk))
			}
			m := &chunk[0] // written in place: no copy of the struct
			chunk = chunk[1:]
			m.Topic, m.Partition, m.Offset = f.tp.Topic, f.tp.Partition, offset
			m.Key, m.Value, m.Headers = rec.Key, rec.Value, rec.Headers
			size += int64(len(rec.Key)+len(rec.Value)) + messageOverhead
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

// messageOverhead is what a message of a slab takes beside its keys,
// values and headers: its sarama.ConsumerMessage and the pointer to it.
var messageOverhead = int64(reflect.TypeFor[sarama.ConsumerMessage]().Size()) + 8

// slabChunk is how many messages of a slab are allocated together
// (handOutBatch: a hand-out takes at most that many at once).
const slabChunk = handOutBatch

// abortedTransactions filters, reading committed, the record batches of
// one response block: a transactional batch of a producer whose aborted
// transaction began at or before it is skipped, until that producer's
// ABORT marker (as Kafka's consumer does). nil reads uncommitted: it skips
// nothing.
type abortedTransactions struct {
	pending   []*sarama.AbortedTransaction // by first offset, not reached yet
	producers map[int64]struct{}           // with an aborted transaction open
}

func newAbortedTransactions(txns []*sarama.AbortedTransaction) *abortedTransactions {
	pending := slices.Clone(txns)
	slices.SortFunc(pending, func(a, b *sarama.AbortedTransaction) int { return cmp.Compare(a.FirstOffset, b.FirstOffset) })
	return &abortedTransactions{pending: pending, producers: make(map[int64]struct{})}
}

// skip reports whether the batch rb, which ends before end, is to be
// skipped; a is told of each batch in offset order, control batches too.
func (a *abortedTransactions) skip(rb *sarama.RecordBatch, end int64) bool {
	if a == nil {
		return false
	}
	for len(a.pending) > 0 && a.pending[0].FirstOffset < end {
		a.producers[a.pending[0].ProducerID] = struct{}{}
		a.pending = a.pending[1:]
	}
	if rb.Control {
		if isAbortMarker(rb) {
			delete(a.producers, rb.ProducerID)
		}
		return true
	}
	_, open := a.producers[rb.ProducerID]
	return rb.IsTransactional && open
}

// isAbortMarker reports whether the control batch rb is a transaction's
// ABORT marker: its record's key is a version (int16) and a type (int16),
// 0 for ABORT and 1 for COMMIT.
func isAbortMarker(rb *sarama.RecordBatch) bool {
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

// AsyncClose implements sarama.PartitionConsumer: it stops run.
func (f *batchFetcher) AsyncClose() { f.once.Do(func() { close(f.dying) }) }

// Close implements sarama.PartitionConsumer: it stops run and waits for
// it, draining its errors.
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

// Pause implements sarama.PartitionConsumer: the partition is in no
// request after the one in flight, and its slabs leave the budget
// (leaveBudget).
func (f *batchFetcher) Pause() {
	f.paused.Store(true)
	f.leaveBudget()
}

// setWaiting tells that the partition waits at MaxPendingAcks (on), or
// hands out again (off). A waiting partition is sidelined, as a paused
// one: the wait is its user's, and the other partitions of its broker
// loop must not wait for it. Called by the partition's consume loop.
func (f *batchFetcher) setWaiting(on bool) {
	if f.waiting.Swap(on) == on {
		return
	}
	if on {
		f.leaveBudget()
	}
	if l := f.loop.Load(); l != nil {
		l.notify() // it leaves the partition out of its requests, or takes it back
	}
}

// sidelined reports whether the partition is paused or waits at
// MaxPendingAcks: it is in no request, and its slabs are outside the
// budget until it took them and handed them out.
func (f *batchFetcher) sidelined() bool {
	return f.paused.Load() || f.waiting.Load()
}

// leaveBudget releases the slab that the partition holds and the one
// waiting for it in slabs, once the partition is sidelined: they wait
// outside the budget, so that the other partitions do not wait for them.
// A slab delivered later is not counted (deliver).
func (f *batchFetcher) leaveBudget() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.release(f.inHand.Load())
	select {
	case s, ok := <-f.slabs:
		if ok {
			f.release(s.acct)
			f.slabs <- s // back: capacity 1, and only the loop sends, under mu
		}
	default:
	}
}

// Resume implements sarama.PartitionConsumer.
func (f *batchFetcher) Resume() {
	f.paused.Store(false)
	if l := f.loop.Load(); l != nil {
		l.notify()
	}
}

// IsPaused implements sarama.PartitionConsumer.
func (f *batchFetcher) IsPaused() bool { return f.paused.Load() }
