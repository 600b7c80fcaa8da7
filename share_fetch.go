package kafkaconsumer

// The fetch loop of a share consumer, one per leader broker of the
// assigned partitions (shareFetcher, started by the manager,
// share_member.go, and killed and waited for by its shutdown). It alone drives its share session with the broker:
// ShareFetch with epoch 0 opens it with every wanted partition, each
// later request carries the next epoch (after the largest, 1), the
// partitions that joined, the ones forgotten, and the pending
// acknowledgements (piggy-backed); a session error makes the next request
// open a new session, the records of the old one dropped (the broker
// released them). It fetches ahead while it hands out (share_ahead.go):
// one ShareFetch in flight at most, sent once fewer than a fetch's worth
// of records wait to be handed out and the oldest of them has more than
// half its lock left, its answer taken between two hand-outs. With no
// fetch in flight and records waiting to be handed out, acknowledgements
// go in a ShareAcknowledge of their own, shareAckLinger after the first
// of them, and renews at once. At the shutdown it stops handing out,
// takes the answer of the fetch in flight, releases what it did not hand
// out, waits for the acknowledgements of what it did (awaitAcks), and
// closes the session with them (epoch -1).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"gopkg.in/tomb.v1"

	"github.com/kafkaconsumer/kafkaconsumer/internal/fetch"
)

// shareFinalTimeout bounds each request of the shutdown (the session's
// close, the leave).
const shareFinalTimeout = 5 * time.Second

// shareFetcher is the fetch loop of one leader broker.
type shareFetcher struct {
	sc     *shareConsumer
	broker int32
	t      tomb.Tomb       // its goroutine (run); killed and waited for by the manager
	dying  <-chan struct{} // t.Dying(), taken once: tomb.v1 locks on each call
	wake   chan struct{}   // cap 1: acks pending, or the wanted partitions changed

	// Guarded by sc.mu:
	want   map[tidp]struct{}                    // the partitions to fetch, set by the manager
	acks   map[tidp][]ackRange                  // the acknowledgements to send
	renews map[*sarama.ConsumerMessage][16]byte // the records to renew (their topic IDs), sent in a ShareAcknowledge
	// renewsPending is whether renews is not empty, stored under sc.mu
	// and read without it by the loop.
	renewsPending atomic.Bool
	// acksSince is when the first of the pending acks came.
	acksSince time.Time

	// Owned by the goroutine:
	epoch     int32             // the share session's next epoch; 0: none open
	inSession map[tidp]struct{} // the partitions of the open session
	queue     []*heldRecord     // acquired, to hand out, in order
	expired   map[tidp]struct{} // partitions whose lock expiry was reported for the last response
	backoff   time.Duration     // after a failed request; 0 after a success
	lock      time.Duration     // the acquisition lock of the last ShareFetch answer
	stopped   chan struct{}     // closed when it stopped handing out, at the shutdown
	fetching  bool              // a ShareFetch is in flight: its answer comes on answers
	ask       int32             // the records the next ShareFetch asks for (nextAsk)
	queuedAt  int               // the records queued when the fetch in flight was sent
	starved   bool              // the queue ran empty while the fetch in flight was out
	answers   chan *shareAnswer // cap 1: the answer of the fetch in flight, sent by its goroutine (sendFetch)
	// request sends a request to the broker; nil: through the group
	// transport's client (a fake in unit tests).
	request func(context.Context, kmsg.Request) (kmsg.Response, error)
	// lockTimer and ackTimer are offer's, one of each for the fetcher's
	// life, not two allocated per record: lockTimer set to lockAt, the
	// lock of what offer hands out, ackTimer to ackAt, when the pending
	// acks are due; each left running between offers and set again only
	// when that time changes (zero: not set).
	lockTimer, ackTimer *time.Timer
	lockAt, ackAt       time.Time
}

// newShareFetcher returns the fetch loop of broker, not started.
func newShareFetcher(sc *shareConsumer, broker int32) *shareFetcher {
	f := &shareFetcher{sc: sc, broker: broker, wake: make(chan struct{}, 1),
		want: make(map[tidp]struct{}), acks: make(map[tidp][]ackRange), renews: make(map[*sarama.ConsumerMessage][16]byte),
		inSession: make(map[tidp]struct{}), expired: make(map[tidp]struct{}), stopped: make(chan struct{}),
		answers: make(chan *shareAnswer, 1), lockTimer: stoppedTimer(), ackTimer: stoppedTimer()}
	f.ask = f.maxRecords()
	f.dying = f.t.Dying()
	return f
}

// run is the fetcher's goroutine: fetch (ahead) and hand out until
// killed, then the shutdown's steps (finish).
func (f *shareFetcher) run() {
	defer f.t.Done()
	for !f.killed() {
		switch {
		case !f.fetching && f.renewing():
			f.acknowledge(false)
			continue
		case f.fetchAhead():
			f.startFetch()
		}
		switch {
		case len(f.queue) > 0 && f.sc.batches != nil:
			f.handOutBatch()
		case len(f.queue) > 0:
			f.handOut()
		default:
			f.wait()
		}
	}
	f.finish()
}

// killed reports whether f is killed.
func (f *shareFetcher) killed() bool {
	select {
	case <-f.dying:
		return true
	default:
		return false
	}
}

// wants reports whether there is a partition to fetch, or one to forget.
func (f *shareFetcher) wants() bool {
	f.sc.mu.Lock()
	defer f.sc.mu.Unlock()
	if len(f.want) > 0 {
		return true
	}
	return f.epoch > 0 && len(f.inSession) > 0
}

// renewing reports whether renews are pending: they go before the next
// fetch, in a ShareAcknowledge (a ShareFetch carries no renew).
func (f *shareFetcher) renewing() bool {
	return f.epoch > 0 && f.renewsPending.Load()
}

// shareAckLinger is how long an acknowledgement waits, while the fetch
// loop hands out with no fetch in flight, for others to go in the same
// ShareAcknowledge; acks that come while a fetch is in flight go with the
// next ShareFetch.
const shareAckLinger = 50 * time.Millisecond

// handOut hands out the first record of the queue, dropping those whose
// lock expired, and sends the acks pending for shareAckLinger meanwhile.
func (f *shareFetcher) handOut() {
	r := f.queue[0]
	if !time.Now().Before(r.deadline) {
		f.dropExpired()
		return
	}
	f.markHandedOut(r, true) // before the send: the receiver may ack at once
	if offer(f, f.sc.messages, r.msg, r.deadline) {
		f.handedOut(r)
		return
	}
	f.markHandedOut(r, false)
}

// offer sends v on out (Messages or Batches) and reports true, or
// returns false: at lock (the lock of what v holds; the records whose
// lock expired are dropped), when the answer of the fetch in flight came
// (taken), when acks came or fell due with no fetch in flight (sent when
// due), or when f is killed.
func offer[T any](f *shareFetcher, out chan<- T, v T, lock time.Time) bool {
	select {
	case out <- v: // the reader keeps up: no timer
		return true
	default:
	}
	if !lock.Equal(f.lockAt) {
		f.lockTimer.Reset(time.Until(lock))
		f.lockAt = lock
	}
	var wake <-chan struct{}
	var ackDue <-chan time.Time
	if !f.fetching { // else the acks go with the next fetch
		wake = f.wake
		if due := f.ackDue(); !due.IsZero() {
			if !due.Equal(f.ackAt) {
				f.ackTimer.Reset(time.Until(due))
				f.ackAt = due
			}
			ackDue = f.ackTimer.C
		}
	}
	select {
	case out <- v:
		return true
	case a := <-f.answers:
		f.take(a)
	case <-wake: // acks came: their linger starts
	case <-ackDue:
		f.ackAt = time.Time{}
		f.acknowledge(false)
	case <-f.lockTimer.C:
		f.lockAt = time.Time{}
		f.dropExpired()
	case <-f.dying:
	}
	return false
}

// stoppedTimer returns a timer that is not running, for Reset: since Go
// 1.23 a timer stopped or reset delivers no value of an earlier setting.
func stoppedTimer() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}

// handedOut takes r, sent on Messages, off the queue.
func (f *shareFetcher) handedOut(r *heldRecord) {
	f.queue = f.queue[1:]
	f.count(r, 1)
}

// ackDue returns when the pending acks (or renews) are due: shareAckLinger
// after the first of them, or at once for renews; zero when none.
func (f *shareFetcher) ackDue() time.Time {
	f.sc.mu.Lock()
	defer f.sc.mu.Unlock()
	switch {
	case len(f.renews) > 0:
		return time.Now()
	case len(f.acks) == 0:
		return time.Time{}
	}
	return f.acksSince.Add(shareAckLinger)
}

// markHandedOut marks r handed out, or not.
func (f *shareFetcher) markHandedOut(r *heldRecord, out bool) {
	r.handedOut.Store(out)
}

// count counts n records of r's partition handed out, up to r, for Stats.
func (f *shareFetcher) count(r *heldRecord, n int) {
	r.c.handedOut.Add(uint64(n))
	for last := r.c.lastHandedOut.Load(); last < r.msg.Offset && !r.c.lastHandedOut.CompareAndSwap(last, r.msg.Offset); {
		last = r.c.lastHandedOut.Load()
	}
}

// dropExpired drops the queue's records whose lock expired, reporting
// each partition once per response.
func (f *shareFetcher) dropExpired() {
	sc, now := f.sc, time.Now()
	kept := f.queue[:0]
	var dropped []*heldRecord
	sc.mu.Lock()
	for _, r := range f.queue {
		if now.Before(r.deadline) {
			kept = append(kept, r)
			continue
		}
		delete(sc.held, r.msg)
		dropped = append(dropped, r)
	}
	sc.mu.Unlock()
	f.queue = kept
	for _, r := range dropped {
		p := tidp{r.topicID, r.msg.Partition}
		if _, told := f.expired[p]; told {
			continue
		}
		f.expired[p] = struct{}{}
		sc.sendError(fmt.Errorf("%w: %s/%d from offset %d: not handed out within the acquisition lock; the broker delivers them again", ErrShareLockExpired, r.msg.Topic, r.msg.Partition, r.msg.Offset))
	}
}

// take takes the answer a of the fetch that was in flight: its acquired
// records are queued to hand out.
func (f *shareFetcher) take(a *shareAnswer) {
	f.fetching = false
	req, acks, sent := a.req, a.acks, a.sent
	if a.err != nil {
		f.failed(acks, fmt.Errorf("share fetch from broker %d: %w", f.broker, a.err))
		return
	}
	resp := a.resp.(*kmsg.ShareFetchResponse)
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		f.failed(acks, fmt.Errorf("share fetch from broker %d: %w%s", f.broker, err, errorMessage(resp.ErrorMessage)))
		return
	}
	f.backoff = 0
	f.advance(req)
	clear(f.expired)
	queued := len(f.queue)
	lock := time.Duration(resp.AcquisitionLockTimeoutMillis) * time.Millisecond
	f.lock = lock
	for i := range resp.Topics {
		t := &resp.Topics[i]
		for j := range t.Partitions {
			f.takePartition(tidp{t.TopicID, t.Partitions[j].Partition}, &t.Partitions[j], acks, sent.Add(lock))
		}
	}
	if len(f.queue) > queued { // an answer with records sizes the next
		f.ask = nextAsk(f.ask, f.maxRecords(), f.starved, f.queuedAt, queued)
	}
}

// send sends req to f's broker and returns its answer.
func (f *shareFetcher) send(ctx context.Context, req kmsg.Request) (kmsg.Response, error) {
	if f.request != nil {
		return f.request(ctx, req)
	}
	return f.sc.t.cl.Broker(int(f.broker)).Request(ctx, req)
}

// fetchRequest builds the next ShareFetch and returns it with the acks it
// carries.
func (f *shareFetcher) fetchRequest() (*kmsg.ShareFetchRequest, map[tidp][]ackRange) {
	sc := f.sc
	conf := sc.config.Config
	req := kmsg.NewPtrShareFetchRequest()
	req.GroupID, req.MemberID = &sc.group, &sc.memberID
	req.ShareSessionEpoch = f.epoch
	req.MaxWaitMillis = int32(conf.Consumer.MaxWaitTime.Milliseconds())
	req.MinBytes = conf.Consumer.Fetch.Min
	req.MaxBytes = f.maxBytes()
	req.MaxRecords = f.ask
	req.BatchSize = req.MaxRecords
	sc.mu.Lock()
	want := make(map[tidp]struct{}, len(f.want))
	for p := range f.want {
		want[p] = struct{}{}
	}
	var acks map[tidp][]ackRange
	if f.epoch > 0 { // acks go in a session only
		acks = f.takeAcks()
	}
	sc.mu.Unlock()
	if len(acks) > 0 && req.MaxWaitMillis > 500 {
		req.MaxWaitMillis = 500 // the answer to the acks waits as long as the fetch
	}
	topics := make(map[[16]byte]int)
	add := func(p tidp) *kmsg.ShareFetchRequestTopicPartition {
		i, ok := topics[p.id]
		if !ok {
			i = len(req.Topics)
			topics[p.id] = i
			req.Topics = append(req.Topics, kmsg.ShareFetchRequestTopic{TopicID: p.id})
		}
		t := &req.Topics[i]
		for k := range t.Partitions {
			if t.Partitions[k].Partition == p.partition {
				return &t.Partitions[k]
			}
		}
		t.Partitions = append(t.Partitions, kmsg.ShareFetchRequestTopicPartition{Partition: p.partition, PartitionMaxBytes: conf.Consumer.Fetch.Default})
		return &t.Partitions[len(t.Partitions)-1]
	}
	for p := range want {
		if _, in := f.inSession[p]; !in || f.epoch == 0 {
			add(p)
		}
	}
	forget := make(map[tidp]struct{})
	for p := range f.inSession {
		if _, ok := want[p]; !ok && f.epoch > 0 {
			forget[p] = struct{}{}
		}
	}
	for p, ranges := range acks {
		rp := add(p)
		for _, a := range ranges {
			rp.AcknowledgementBatches = append(rp.AcknowledgementBatches, kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch{
				FirstOffset: a.first, LastOffset: a.last, AcknowledgeTypes: []int8{a.typ}})
		}
		if _, ok := want[p]; !ok { // listed for its acks only: forgotten in the same request
			forget[p] = struct{}{}
		}
	}
	forgotten := make(map[[16]byte]int)
	for p := range forget {
		i, ok := forgotten[p.id]
		if !ok {
			i = len(req.ForgottenTopicsData)
			forgotten[p.id] = i
			req.ForgottenTopicsData = append(req.ForgottenTopicsData, kmsg.ShareFetchRequestForgottenTopicsData{TopicID: p.id})
		}
		req.ForgottenTopicsData[i].Partitions = append(req.ForgottenTopicsData[i].Partitions, p.partition)
	}
	return req, acks
}

// advance records the session after a successful request req: its next
// epoch, the partitions added and forgotten.
func (f *shareFetcher) advance(req *kmsg.ShareFetchRequest) {
	if f.epoch == math.MaxInt32 {
		f.epoch = 1
	} else {
		f.epoch++
	}
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			f.inSession[tidp{t.TopicID, p.Partition}] = struct{}{}
		}
	}
	for _, t := range req.ForgottenTopicsData {
		for _, p := range t.Partitions {
			delete(f.inSession, tidp{t.TopicID, p})
		}
	}
}

// failed takes a failed request: its acks are lost, and a session error
// or a failed request ends the session (the next request opens one), its
// records dropped; the next request waits a capped backoff.
func (f *shareFetcher) failed(acks map[tidp][]ackRange, err error) {
	sc := f.sc
	if sc.stopCtx.Err() != nil {
		// The shutdown cut it: its acks go again with the session's
		// close (the broker refuses those it took already).
		sc.mu.Lock()
		for p, ranges := range acks {
			f.acks[p] = append(f.acks[p], ranges...)
		}
		sc.mu.Unlock()
		return
	}
	for p, ranges := range acks {
		sc.reportRefused(p, ranges, err)
	}
	sc.logf(slog.LevelWarn, "%s; opening a new share session.", err)
	if !errors.Is(err, kerr.ShareSessionNotFound) && !errors.Is(err, kerr.InvalidShareSessionEpoch) {
		// A session the broker evicted (idle, its connection closed) is
		// opened again quietly; the acks it lost were reported.
		sc.sendError(err)
	}
	f.resetSession(err)
	if errors.Is(err, kerr.NotLeaderForPartition) || errors.Is(err, kerr.UnknownTopicOrPartition) {
		poke(sc.refresh)
	}
	f.backoff = min(max(2*f.backoff, 100*time.Millisecond), 2*time.Second)
	timer := time.NewTimer(f.backoff)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-f.dying:
	}
}

// resetSession ends the share session as the broker does on a session
// error: the next request opens a new one; the records it acquired are
// dropped.
func (f *shareFetcher) resetSession(cause error) {
	f.epoch = 0
	clear(f.inSession)
	f.queue = nil
	f.sc.dropHeld(f, cause)
}

// takePartition takes partition p's part of a ShareFetch answer: the
// result of its acks, its error, and its acquired records, held until
// deadline and queued to hand out.
func (f *shareFetcher) takePartition(p tidp, rp *kmsg.ShareFetchResponseTopicPartition, acks map[tidp][]ackRange, deadline time.Time) {
	sc := f.sc
	if err := kerr.ErrorForCode(rp.AcknowledgeErrorCode); err != nil {
		sc.reportRefused(p, acks[p], fmt.Errorf("%w%s", err, errorMessage(rp.AcknowledgeErrorMessage)))
	}
	sc.mu.Lock()
	name, known := sc.names[p.id]
	sc.mu.Unlock()
	if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
		sc.sendError(&sarama.ConsumerError{Topic: name, Partition: p.partition, Err: fmt.Errorf("share fetch from broker %d: %w%s", f.broker, err, errorMessage(rp.ErrorMessage))})
		poke(sc.refresh)
		return
	}
	if len(rp.AcquiredRecords) == 0 || !known {
		return
	}
	from := rp.AcquiredRecords[0].FirstOffset
	rec, err := fetch.Decode(&fetch.Partition{Topic: name, Partition: p.partition, Records: rp.Records}, from, false)
	if err != nil {
		sc.sendError(&sarama.ConsumerError{Topic: name, Partition: p.partition, Err: err})
	}
	f.queueAcquired(p, rec.Messages, rp.AcquiredRecords, deadline)
}

// queueAcquired holds and queues the messages of p in the acquired
// ranges, their records allocated in chunks of fetch.SlabChunk, as the
// decoder allocates the messages (a record kept keeps its chunk alive,
// not the answer's); the offsets of a range without a message are
// acknowledged as gaps at once (the broker holds them acquired until
// then).
func (f *shareFetcher) queueAcquired(p tidp, msgs []*sarama.ConsumerMessage, acquired []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord, deadline time.Time) {
	sc := f.sc
	sc.mu.Lock()
	defer sc.mu.Unlock()
	var c *shareCounts
	if len(msgs) > 0 {
		c = sc.counts(TopicPartition{Topic: msgs[0].Topic, Partition: p.partition})
	}
	var chunk []heldRecord // what is left of the chunk being filled
	i := 0
	for _, a := range acquired {
		next := a.FirstOffset // the first offset of the range not accounted for
		for ; i < len(msgs) && msgs[i].Offset <= a.LastOffset; i++ {
			m := msgs[i]
			if m.Offset < a.FirstOffset {
				continue // before the range: not acquired by this member
			}
			if m.Offset > next {
				f.addAck(p, ackRange{first: next, last: m.Offset - 1, typ: ackGap})
			}
			next = m.Offset + 1
			if len(chunk) == 0 {
				chunk = make([]heldRecord, min(len(msgs)-i, fetch.SlabChunk))
			}
			r := &chunk[0]
			chunk = chunk[1:]
			r.msg, r.f, r.c, r.topicID, r.delivery, r.deadline = m, f, c, p.id, a.DeliveryCount, deadline
			sc.held[m] = r
			f.queue = append(f.queue, r)
		}
		if next <= a.LastOffset {
			f.addAck(p, ackRange{first: next, last: a.LastOffset, typ: ackGap})
		}
	}
	if len(f.acks) > 0 {
		poke(f.wake)
	}
}

// acknowledge sends the pending acks in a ShareAcknowledge of the open
// session, with epoch -1 when closing (which closes the session: the
// broker releases what it acquired and was not acknowledged).
func (f *shareFetcher) acknowledge(closing bool) {
	sc := f.sc
	if f.epoch == 0 || f.fetching {
		return // no session: acks wait for one (none are pending: resetSession dropped them); or they go with the next fetch
	}
	sc.mu.Lock()
	acks := f.takeAcks()
	var renews []renewal
	if !closing {
		if acks == nil {
			acks = make(map[tidp][]ackRange)
		}
		renews = f.takeRenews(acks)
	}
	sc.mu.Unlock()
	if len(acks) == 0 && !closing {
		return
	}
	req := kmsg.NewPtrShareAcknowledgeRequest()
	req.GroupID, req.MemberID = &sc.group, &sc.memberID
	req.ShareSessionEpoch = f.epoch
	req.IsRenewAck = len(renews) > 0
	if closing {
		req.ShareSessionEpoch = -1
	}
	topics := make(map[[16]byte]int)
	for p, ranges := range acks {
		i, ok := topics[p.id]
		if !ok {
			i = len(req.Topics)
			topics[p.id] = i
			req.Topics = append(req.Topics, kmsg.ShareAcknowledgeRequestTopic{TopicID: p.id})
		}
		rp := kmsg.ShareAcknowledgeRequestTopicPartition{Partition: p.partition}
		for _, a := range ranges {
			rp.AcknowledgementBatches = append(rp.AcknowledgementBatches, kmsg.ShareAcknowledgeRequestTopicPartitionAcknowledgementBatch{
				FirstOffset: a.first, LastOffset: a.last, AcknowledgeTypes: []int8{a.typ}})
		}
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, rp)
	}
	ctx, cancel := f.requestContext(closing)
	sent := time.Now()
	kresp, err := f.send(ctx, req)
	cancel()
	if err == nil {
		resp := kresp.(*kmsg.ShareAcknowledgeResponse)
		if err = kerr.ErrorForCode(resp.ErrorCode); err == nil {
			refused := f.takeAcknowledged(resp, acks, closing)
			f.renewed(renewedOf(renews, refused), sent.Add(max(time.Duration(resp.AcquisitionLockTimeoutMillis)*time.Millisecond, f.lock)))
			return
		}
		err = fmt.Errorf("%w%s", err, errorMessage(resp.ErrorMessage))
	}
	err = fmt.Errorf("share acknowledge to broker %d: %w", f.broker, err)
	if closing {
		for p, ranges := range acks {
			sc.reportRefused(p, ranges, err)
		}
		return
	}
	f.failed(acks, err)
}

// requestContext is the context of a ShareAcknowledge, never cut (see
// fetch): the request's timeout, shareFinalTimeout after the interrupt.
func (f *shareFetcher) requestContext(closing bool) (context.Context, context.CancelFunc) {
	if f.sc.stopCtx.Err() != nil || closing {
		return context.WithTimeout(context.Background(), shareFinalTimeout)
	}
	return context.WithTimeout(context.Background(), f.sc.t.timeout)
}

// renewedOf returns the records of renews whose partition is not in
// refused.
func renewedOf(renews []renewal, refused map[tidp]bool) []*sarama.ConsumerMessage {
	var out []*sarama.ConsumerMessage
	for _, r := range renews {
		if !refused[tidp{r.id, r.msg.Partition}] {
			out = append(out, r.msg)
		}
	}
	return out
}

// takeAcknowledged takes the answer to a ShareAcknowledge: the next
// epoch (the session ends with closing), and each partition's refusals,
// which it returns.
func (f *shareFetcher) takeAcknowledged(resp *kmsg.ShareAcknowledgeResponse, acks map[tidp][]ackRange, closing bool) (refused map[tidp]bool) {
	if closing {
		f.epoch = 0
		clear(f.inSession)
	} else if f.epoch == math.MaxInt32 {
		f.epoch = 1
	} else {
		f.epoch++
	}
	for _, t := range resp.Topics {
		for _, rp := range t.Partitions {
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				p := tidp{t.TopicID, rp.Partition}
				f.sc.reportRefused(p, acks[p], fmt.Errorf("%w%s", err, errorMessage(rp.ErrorMessage)))
				if refused == nil {
					refused = make(map[tidp]bool)
				}
				refused[p] = true
			}
		}
	}
	return refused
}

// finish is the fetcher's shutdown: take the answer of the fetch in
// flight, stop handing out (the queue is released), wait for the acks of what was handed out (shutdownWait),
// release what is still not acknowledged, and close the session with the
// acks.
func (f *shareFetcher) finish() {
	sc := f.sc
	if f.fetching { // its answer comes within the request's timeout (sendFetch)
		f.take(<-f.answers)
	}
	f.queue = nil
	sc.mu.Lock()
	sc.releaseHeld(f, false)
	sc.mu.Unlock()
	close(f.stopped)
	f.awaitAcks()
	sc.mu.Lock()
	sc.releaseHeld(f, true)
	sc.mu.Unlock()
	f.acknowledge(true)
}

// awaitAcks waits until what f handed out is acknowledged, until
// MaxProcessingTime passed, or a Shutdown's ctx is done, sending the
// acks as they come.
func (f *shareFetcher) awaitAcks() {
	sc := f.sc
	timer := time.NewTimer(sc.config.MaxProcessingTime)
	defer timer.Stop()
	for {
		f.acknowledge(false) // what is pending: the next ack wakes f
		if sc.handedOutHeld(f) == 0 {
			return
		}
		select {
		case <-f.wake:
		case <-timer.C:
			return
		case <-sc.cutWait:
			return
		}
	}
}

// errorMessage returns ": msg" for a broker's error message, "" for none.
func errorMessage(msg *string) string {
	if msg == nil || *msg == "" {
		return ""
	}
	return " (" + *msg + ")"
}
