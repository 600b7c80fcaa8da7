package kafkaconsumer

// A broker's loop of the fetch engine (fetch_hub.go): one request for all
// the partitions it serves, and each partition's part of the response
// handed to its fetcher.

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
)

// brokerLoop fetches the partitions that broker leads, for the partition
// fetchers subscribed to it, in one request at a time, and hands each its
// messages. A partition is in a request only while it is not sidelined
// (paused, or waiting at MaxPendingAcks) and its partition manager took
// its last slab; an error of a partition
// (moved leader, offset out of range) or of the request unsubscribes the
// partitions it concerns, which subscribe again after a backoff (see
// partitionFetcher.run).
type brokerLoop struct {
	hub    *fetchHub
	broker *sarama.Broker
	wake   chan struct{}       // a token, without blocking the sender, when the loop may have a request to send
	added  []*partitionFetcher // guarded by hub.mu: subscribed, not taken by the loop yet
	subs   []*partitionFetcher // the loop's
	// held is the bytes of the slabs this loop delivered that their
	// partitions did not take yet (counted in hub.buffered too).
	held atomic.Int64
	// reserved is what is left of the budget that the loop's request in
	// flight reserved (fetchBudget.reserve): the loop goroutine's.
	reserved int64
	// expand is the ratio of counted to wire bytes of the loop's last
	// response with messages (expansion): the loop goroutine's.
	expand float64
	// conn is the loop's own connection to broker (connection), and
	// dialer the dialer of its net.Conn; the loop goroutine's.
	conn   *sarama.Broker
	dialer *loopDialer
	// poll is dialer while the request in flight is a long poll, until
	// the response or interruptPoll.
	poll atomic.Pointer[loopDialer]
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
	defer l.closeConnection()
	var (
		ready   []*partitionFetcher
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
			// The budget is spent: wait for a partition to take a slab.
			budget.starved.Add(1)
			maxBytes, ok = budget.reserve(l, limit) // a release may have come before the count
			if !ok {
				t0 := traceStart()
				select {
				case <-l.wake:
				case <-l.hub.stop:
					budget.starved.Add(-1)
					return
				}
				l.traceWait(waitBudget, t0)
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
func (l *brokerLoop) fetch(ready []*partitionFetcher, maxBytes int32) {
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
	longPoll := true
	for _, f := range ready {
		req.AddBlock(f.tp.Topic, f.tp.Partition, f.offset, f.fetchSize, f.epoch)
		longPoll = longPoll && f.end >= 0 && f.offset >= f.end
	}
	conn := l.connection()
	if longPoll && req.MaxWaitTime > 0 {
		l.startPoll()
		if l.stale.Load() {
			// A partition became ready after ready was chosen, and
			// interruptPoll may have come before the poll was stored:
			// choose again instead of waiting without it.
			if l.poll.Swap(nil) == nil {
				l.closeConnection() // interruptPoll cut it meanwhile
			}
			return
		}
	}
	l.traceRequest(len(ready), maxBytes)
	t0 := traceStart()
	resp, err := conn.Fetch(req)
	l.traceResponse(longPoll && req.MaxWaitTime > 0, t0)
	if l.poll.Swap(nil) == nil && longPoll && req.MaxWaitTime > 0 {
		// interruptPoll cut the connection: a partition is ready that
		// the request does not hold. The next request holds it, on
		// another connection; a response that came before the cut is
		// good.
		l.closeConnection()
		if err != nil {
			return
		}
	}
	if err != nil {
		// sarama's broker fails every later request on a connection
		// whose read failed: close it; the next request opens another.
		l.closeConnection()
		l.dropAll(err)
		return
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

// handle hands each of the ready fetchers its messages or its error from
// resp. A response throttled by a quota (ThrottleTime set) that holds no
// partition is no error: it returns the throttle time to wait.
func (l *brokerLoop) handle(ready []*partitionFetcher, resp *sarama.FetchResponse) time.Duration {
	if resp.ThrottleTime > 0 && len(resp.Blocks) == 0 {
		return resp.ThrottleTime
	}
	var counted, wire int64
	defer func() { l.measure(counted, wire) }()
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
		f.end = block.HighWaterMarkOffset
		if l.hub.conf.Consumer.IsolationLevel == sarama.ReadCommitted && block.LastStableOffset >= 0 {
			f.end = block.LastStableOffset
		}
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
			counted += size
			wire += size - int64(len(msgs))*(messageOverhead-recordWireOverhead) + int64(len(block.RecordsSet))*batchWireOverhead
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
func (l *brokerLoop) leaderMoved(f *partitionFetcher) bool {
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
func (l *brokerLoop) drop(f *partitionFetcher, err error) {
	for i, g := range l.subs {
		if g == f {
			l.subs = append(l.subs[:i], l.subs[i+1:]...)
			break
		}
	}
	f.fail(err)
}
