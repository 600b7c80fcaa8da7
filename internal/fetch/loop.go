package fetch

// A broker's loop of the fetch engine (hub.go): one request for all
// the partitions it serves, and each partition's part of the response
// handed to its fetcher.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/rcrowley/go-metrics"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// brokerLoop fetches the partitions that broker leads, for the partition
// fetchers subscribed to it, in one request at a time, and hands each its
// messages. A partition is in a request only while it is not sidelined
// (paused, or waiting at MaxPendingAcks) and its partition manager took
// its last slab; an error of a partition
// (moved leader, offset out of range) or of the request unsubscribes the
// partitions it concerns, which subscribe again after a backoff (see
// Fetcher.run).
type brokerLoop struct {
	hub    *Hub
	broker *sarama.Broker
	wake   chan struct{} // a token, without blocking the sender, when the loop may have a request to send
	added  []*Fetcher    // guarded by hub.mu: subscribed, not taken by the loop yet
	subs   []*Fetcher    // the loop's
	// held is the bytes of the slabs this loop delivered that their
	// partitions did not take yet (counted in hub.buffered too).
	held atomic.Int64
	// reserved is what is left of the budget that the loop's request in
	// flight reserved (Budget.reserve): the loop goroutine's.
	reserved int64
	// expand is the ratios of counted to wire bytes of the loop's last
	// responses with messages (expansion): the loop goroutine's.
	expand expansionWindow
	// transport is the loop's own kgo client (connection); the loop
	// goroutine's.
	transport *kgo.Client
	// poll is the request in flight while it is a long poll, until the
	// response or interruptPoll (startPoll, endPoll).
	poll atomic.Pointer[longPoll]
	// cursor turns the order of the partitions in the loop's requests
	// (request), and session is the loop's fetch session: the loop
	// goroutine's.
	cursor  int
	session fetchSession
	// stale is set by interruptPoll: a partition may have become ready
	// since the loop chose its request's partitions, so that request must
	// not go out as a long poll. The loop clears it before it chooses.
	stale atomic.Bool
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
	defer l.hub.budget.leave() // its share goes to the other loops
	defer l.closeConnection()
	var (
		ready   []*Fetcher
		waiting time.Time // since when a partition's last slab is not taken; zero when none
		timer   = time.NewTimer(time.Hour)
	)
	timer.Stop()
	defer timer.Stop()
	for {
		l.stale.Store(false)
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
				t0 := traceStart()
				select {
				case <-l.wake:
				case <-timer.C:
				case <-l.hub.stop:
					return
				}
				l.traceWait(waitBusy, t0)
				timer.Stop()
				continue
			}
		}
		if len(ready) == 0 {
			t0 := traceStart()
			select {
			case <-l.wake:
			case <-l.hub.stop:
				return
			}
			l.traceWait(waitIdle, t0)
			continue
		}
		// The request's bytes are reserved while it is in flight, so that
		// the other loops do not count the same free bytes; the slabs of
		// the response take the reservation over.
		budget, limit := l.hub.budget, l.hub.conf.Consumer.Fetch.MaxBytes
		maxBytes, ok := budget.reserve(l, limit)
		if !ok {
			// Too little is free: wait for the partitions to take slabs.
			budget.wait(l, limit, true)
			maxBytes, ok = budget.reserve(l, limit) // a release may have come before the wait
			if !ok {
				t0 := traceStart()
				select {
				case <-l.wake:
				case <-l.hub.stop:
					budget.wait(l, limit, false)
					return
				}
				l.traceWait(waitBudget, t0)
			}
			budget.wait(l, limit, false)
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
func (l *brokerLoop) fetch(ready []*Fetcher, maxBytes int32) {
	req, longPoll := l.request(ready, maxBytes)
	ctx, cancel := context.WithCancel(l.hub.ctx)
	defer cancel()
	if longPoll {
		l.startPoll(cancel)
		if l.stale.Load() {
			// A partition became ready after ready was chosen, and
			// interruptPoll may have come before the poll was stored:
			// choose again instead of waiting without it.
			l.endPoll()
			return
		}
	}
	if l.hub.requested != nil {
		l.hub.requested(req)
	}
	l.traceRequest(len(ready), maxBytes)
	t0 := traceStart()
	resp, err := l.send(ctx, req)
	l.traceResponse(longPoll, t0)
	if err != nil {
		l.session.lost()
	}
	if longPoll && !l.endPoll() && err != nil {
		// interruptPoll cut the poll short: a partition is ready that
		// the request does not hold. The next request holds it, on
		// another connection; a response that came before the cut is
		// good.
		return
	}
	if err != nil {
		if l.hub.ctx.Err() != nil {
			return // the hub is closing
		}
		l.dropAll(err)
		return
	}
	if l.session.sessionError(resp.Err) {
		return // the next request, a full one, opens another session at once
	}
	if resp.Err == sarama.ErrNoError {
		l.session.answered(resp.SessionID)
	}
	if resp.ThrottleTime > 0 {
		l.recordThrottle(resp.ThrottleTime)
	}
	t0 = traceStart()
	throttle := l.handle(ready, resp)
	l.traceWait(waitHandle, t0)
	if throttle > 0 {
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

// partitionFloor is the least PartitionMaxBytes of a partition in a
// request whose MaxBytes is spread over many partitions (brokerLoop.request).
const partitionFloor = 64 << 10

// request returns the Fetch request of the ready fetchers, MaxBytes
// maxBytes, and whether it is a long poll: every partition in it at the
// end of its log, so that the broker waits up to Consumer.MaxWaitTime.
// In the loop's fetch session (fetchSession: Fetch v7+) it lists only the
// partitions that the session does not hold as they are; each partition
// sends its leader epoch (Fetch v9+, KIP-320) and the loop its rack
// (v11+, KIP-392). A
// broker fills a response in the request's order, each partition up to
// its PartitionMaxBytes, until MaxBytes: so each partition asks for an
// equal share of maxBytes (partitionMaxBytes), and the order turns by one
// at every request (cursor), as franz-go's requests do, so that every
// partition comes first in turn. Called by the loop's goroutine only.
func (l *brokerLoop) request(ready []*Fetcher, maxBytes int32) (*kmsg.FetchRequest, bool) {
	conf := l.hub.conf
	req := kmsg.NewPtrFetchRequest()
	req.MinBytes = conf.Consumer.Fetch.Min
	req.MaxWaitMillis = int32(conf.Consumer.MaxWaitTime / time.Millisecond)
	req.MaxBytes = maxBytes
	req.IsolationLevel = int8(conf.Consumer.IsolationLevel)
	req.Rack = conf.RackID
	session := &l.session
	session.begin(l.hub.version)
	req.SessionID, req.SessionEpoch = session.id, session.epoch
	longPoll := req.MaxWaitMillis > 0
	topics := make(map[string]int) // index in req.Topics
	n := len(ready)
	share := max(maxBytes/int32(max(n, 1)), partitionFloor)
	start := l.cursor % max(n, 1)
	l.cursor++
	inRequest := make(map[TopicPartition]struct{}, n)
	for k := range n {
		f := ready[(start+k)%n]
		inRequest[f.tp] = struct{}{}
		longPoll = longPoll && f.end >= 0 && f.offset >= f.end
		want := sessionPart{offset: f.offset, maxBytes: f.partitionMaxBytes(share), epoch: f.epoch}
		if !session.lists(f.tp, want) {
			continue // the session holds it as it is
		}
		i, ok := topics[f.tp.Topic]
		if !ok {
			i = len(req.Topics)
			topics[f.tp.Topic] = i
			t := kmsg.NewFetchRequestTopic()
			t.Topic = f.tp.Topic
			req.Topics = append(req.Topics, t)
		}
		t := &req.Topics[i]
		p := kmsg.NewFetchRequestTopicPartition()
		p.Partition, p.FetchOffset, p.PartitionMaxBytes, p.CurrentLeaderEpoch = f.tp.Partition, want.offset, want.maxBytes, want.epoch
		t.Partitions = append(t.Partitions, p)
	}
	session.forget(req, inRequest)
	return req, longPoll
}

// partitionMaxBytes returns f's PartitionMaxBytes in a request that
// gives each partition share bytes: share, up to f's fetch size; the
// whole fetch size once it grew past Consumer.Fetch.Default (a batch
// larger than it came cut short: records).
func (f *Fetcher) partitionMaxBytes(share int32) int32 {
	if f.fetchSize > f.hub.conf.Consumer.Fetch.Default {
		return f.fetchSize
	}
	return min(share, f.fetchSize)
}

// send sends req on the loop's transport and returns its response, the
// records undecoded (FromKmsg): kgo reads the response's framing
// (kmsg), the partitions' records stay the raw bytes of its body.
func (l *brokerLoop) send(ctx context.Context, req *kmsg.FetchRequest) (*Response, error) {
	b, err := l.connection()
	if err != nil {
		return nil, err
	}
	kr, err := b.Request(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("fetch from broker %d at %s: %w", l.broker.ID(), l.broker.Addr(), err)
	}
	resp, ok := kr.(*kmsg.FetchResponse)
	switch {
	case !ok:
		return nil, fmt.Errorf("fetch from broker %d at %s: a response of type %T", l.broker.ID(), l.broker.Addr(), kr)
	case resp.Version < 4:
		return nil, fmt.Errorf("fetch from broker %d at %s: it takes Fetch v%d at most, and the fetch engine needs v4 (Kafka 0.11)", l.broker.ID(), l.broker.Addr(), resp.Version)
	}
	return FromKmsg(resp), nil
}

// recordThrottle records a response's throttle time in the histogram
// "throttle-time-in-ms-for-broker-<id>" of Config.MetricRegistry, as
// sarama's Broker does for the requests it sends.
func (l *brokerLoop) recordThrottle(d time.Duration) {
	r := l.hub.conf.MetricRegistry
	if r == nil {
		return
	}
	name := "throttle-time-in-ms-for-broker-" + strconv.Itoa(int(l.broker.ID()))
	h := r.GetOrRegister(name, func() metrics.Histogram {
		return metrics.NewHistogram(metrics.NewExpDecaySample(1028, 0.015)) // sarama's reservoir and alpha
	})
	if h, ok := h.(metrics.Histogram); ok {
		h.Update(d.Milliseconds())
	}
}

// handle hands each of the ready fetchers its messages or its error from
// resp. A response throttled by a quota (ThrottleTime set) that holds no
// partition is no error: it returns the throttle time to wait. A
// response's own error (a fetch session's: the loop opens none) is the
// error of every partition.
func (l *brokerLoop) handle(ready []*Fetcher, resp *Response) time.Duration {
	if resp.ThrottleTime > 0 && len(resp.Partitions) == 0 {
		return resp.ThrottleTime
	}
	if resp.Err != sarama.ErrNoError {
		l.dropAll(resp.Err)
		return 0
	}
	parts := make(map[TopicPartition]*Partition, len(resp.Partitions))
	for i := range resp.Partitions {
		p := &resp.Partitions[i]
		parts[TopicPartition{p.Topic, p.Partition}] = p
	}
	var counted, wire, msgs, filled, cut int64
	defer func() {
		l.measure(counted, wire)
		l.traceHandled(wire, msgs, filled, cut)
	}()
	readCommitted := l.hub.conf.Consumer.IsolationLevel == sarama.ReadCommitted
	for _, f := range ready {
		p := parts[f.tp]
		switch {
		case p == nil && l.session.incremental:
			continue // nothing new: an incremental response leaves it out
		case p == nil:
			l.drop(f, sarama.ErrIncompleteResponse)
			continue
		case p.Err != sarama.ErrNoError:
			l.drop(f, p.Err)
			continue
		}
		f.hwm.Store(p.HighWatermark)
		f.end = p.HighWatermark
		if readCommitted && p.LastStableOffset >= 0 {
			f.end = p.LastStableOffset
		}
		if id := p.PreferredReadReplica; id >= 0 && id != l.broker.ID() {
			f.preferReplica(id)
			l.drop(f, errPreferredReplica)
			continue
		}
		rec, moved, err := f.records(p, readCommitted)
		if rec.Partial {
			cut++
		}
		if len(rec.Messages) > 0 || moved {
			size := rec.Bytes + int64(len(rec.Messages))*MessageOverhead
			counted += size
			wire += int64(rec.Wire)
			msgs += int64(len(rec.Messages))
			filled++
			f.intercept(rec.Messages)
			f.deliver(Slab{Msgs: rec.Messages, Next: f.offset, Acct: &Account{size: size, from: l}})
		}
		if errors.Is(err, ErrCorrupt) {
			// The messages before the corrupt batch are delivered; the
			// fetcher reports the error and fetches the batch again
			// after its backoff (a batch corrupted on the way comes
			// whole), skipping nothing.
			l.drop(f, err)
			continue
		}
		if err != nil {
			f.report(err) // ErrMessageTooLarge: skipped
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
func (l *brokerLoop) leaderMoved(f *Fetcher) bool {
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
func (l *brokerLoop) drop(f *Fetcher, err error) {
	for i, g := range l.subs {
		if g == f {
			l.subs = append(l.subs[:i], l.subs[i+1:]...)
			break
		}
	}
	f.fail(err)
}
