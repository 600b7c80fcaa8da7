package fetch

// A partition's fetcher in the fetch engine (hub.go): where it
// fetches from (the leader, or the preferred read replica), what it does
// with errors, and how its slabs reach the partition manager, which uses
// it as a sarama.PartitionConsumer.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
)

// fail tells f's goroutine that its loop dropped it for err.
func (f *Fetcher) fail(err error) {
	f.loop.Store(nil)
	select {
	case f.failed <- err:
	default: // f is failing already
	}
}

// Fetcher is one partition of a Hub. Its goroutine (run)
// subscribes it to the loop of the partition's leader, and again after an
// error; the loop sends the messages of each response on slabs. It
// implements sarama.PartitionConsumer, so that the partition manager runs
// it as it runs sarama's: AsyncClose stops it, its Errors channel is
// closed when run ends, HighWaterMarkOffset, Pause and Resume. Its
// Messages channel is nil: its owner reads Slabs, and calls Taken
// after each.
type Fetcher struct {
	hub *Hub
	tp  TopicPartition

	// slabs carries each response's messages, in offset order; the
	// loop sends only when it is empty (capacity 1). Closed by run when
	// it ends, under mu, after which deliver sends nothing.
	slabs  chan Slab
	mu     sync.Mutex
	ended  bool
	errs   chan *sarama.ConsumerError // closed when run ends
	failed chan error                 // the loop's drop; capacity 1
	hwm    atomic.Int64
	// paused is set by Pause, until Resume; waiting while the partition
	// waits at MaxPendingAcks (SetWaiting). Either sidelines the
	// partition: it is in no request after the one in flight, and its
	// slabs are outside the budget.
	paused, waiting atomic.Bool
	loop            atomic.Pointer[brokerLoop] // the loop it is subscribed to, or nil
	dying           chan struct{}              // closed by AsyncClose
	once            sync.Once
	done            chan struct{} // closed when run ends
	// outOfRange is set by run, before it ends, when the leader answered
	// that the offset is out of range (the partition manager starts again
	// at Offsets.Initial). Read after done.
	outOfRange bool
	// outOfRangeOnce is set by run when a fetch got OFFSET_OUT_OF_RANGE
	// and it was not confirmed yet (confirmOutOfRange).
	outOfRangeOnce bool
	// buffered is the bytes of the slabs delivered and not handed out
	// entirely yet: the one in the channel, the one the partition is
	// handing out, and those whose messages wait in its hand-out's batch
	// (PartitionStats.BufferedBytes); inHand is the account of the one
	// it is handing out (Spend).
	buffered atomic.Int64
	inHand   atomic.Pointer[Account]
	// spentUp gets a token, without blocking the sender, when the loop
	// waits for the budget: a hand-out in batches gathering its batch
	// (whose messages count in the budget) hands it out without waiting
	// BatchLinger any longer, since no more may be fetched for it.
	spentUp chan struct{}

	// offset is the next offset to fetch, and fetchSize the size asked
	// for; the loop's while subscribed, run's otherwise.
	offset    int64
	fetchSize int32
	// end is where the partition's log ended at its last response: the
	// high-water mark, or the last stable offset read committed (-1:
	// none yet). The loop's: a request of partitions all at their ends
	// is a long poll (interruptPoll).
	end int64
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

// Slab is what one response brought a partition: its messages, in offset
// order, and Next, the offset to fetch next. Offsets below Next without a
// message in Msgs hold nothing to hand out (control batches, aborted
// transactions, batches compaction emptied). Acct counts the bytes of
// Msgs in the hub's budget until the partition has handed them out
// (Account).
type Slab struct {
	Msgs []*sarama.ConsumerMessage
	Next int64
	Acct *Account
}

// Account is the count of a slab's bytes in the budget, from its
// delivery until the partition handed it out entirely (or dropped it, or
// was paused): Release gives them back once.
type Account struct {
	size     int64
	from     *brokerLoop // the loop that fetched it, whose held counts size
	released atomic.Bool
}

// fetcherErrors is the capacity of a partition fetcher's errors channel.
// The partition manager forwards them to Errors() as they come; a fetcher
// reports at most one per response or per retry backoff, and drops (and
// logs) those that find it full. Not ChannelBufferSize: a consumer of a
// thousand partitions would allocate as many channels of that size at
// every start.
const fetcherErrors = 8

// Start starts a fetcher of topic's partition at offset on h. It sends
// no request itself: an offset outside the partition's log ends the
// fetcher at its first response, with OutOfRange true (sarama's
// ConsumePartition asks for the oldest and newest offsets first, two
// requests per partition). Its owner stops it with AsyncClose or Close.
func (h *Hub) Start(topic string, partition int32, offset int64) *Fetcher {
	tp := TopicPartition{topic, partition}
	f := &Fetcher{
		hub:            h,
		tp:             tp,
		slabs:          make(chan Slab, 1),
		spentUp:        make(chan struct{}, 1),
		errs:           make(chan *sarama.ConsumerError, fetcherErrors),
		failed:         make(chan error, 1),
		dying:          make(chan struct{}),
		done:           make(chan struct{}),
		offset:         offset,
		fetchSize:      h.conf.Consumer.Fetch.Default,
		end:            -1,
		preferred:      -1,
		unknownReplica: -1,
		epoch:          -1,
	}
	f.hwm.Store(-1)
	go f.run() // owned by the fetcher's owner, which closes it (AsyncClose) and drains errs
	return f
}

// run subscribes the fetcher to its leader's loop, and again after each
// error the loop reports, after Consumer.Retry.Backoff and a refresh of
// the partition's metadata, until AsyncClose or an offset out of range
// (the partition manager starts again at Offsets.Initial).
func (f *Fetcher) run() {
	defer close(f.done)
	defer close(f.errs)
	defer func() {
		f.mu.Lock()
		f.ended = true
		close(f.slabs)
		if s, ok := <-f.slabs; ok { // not taken: give its bytes back
			f.Release(s.Acct)
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
			if !f.waitBackoff(f.backoff()) {
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
		if !f.waitBackoff(f.backoff()) {
			return
		}
	}
}

// waitBackoff waits for d, or until the fetcher is closed: then it
// reports false. Written for run's goroutine.
func (f *Fetcher) waitBackoff(d time.Duration) bool {
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
func (f *Fetcher) confirmOutOfRange() bool {
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
func (f *Fetcher) source() (*sarama.Broker, error) {
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
func (f *Fetcher) preferReplica(id int32) {
	lease := f.hub.conf.Metadata.RefreshFrequency
	if lease <= 0 {
		lease = 10 * time.Minute
	}
	f.preferred, f.preferredUntil = id, time.Now().Add(lease)
}

// backoff counts a failure in a row and returns how long to wait before
// subscribing again: Consumer.Retry.BackoffFunc of the failures since the
// last response when it is set, else Consumer.Retry.Backoff.
func (f *Fetcher) backoff() time.Duration {
	retries := f.retries.Add(1)
	if fn := f.hub.conf.Consumer.Retry.BackoffFunc; fn != nil {
		return fn(int(retries))
	}
	return f.hub.conf.Consumer.Retry.Backoff
}

// intercept passes each of msgs to the Consumer.Interceptors, in order, as
// sarama's partition consumer does. An interceptor that panics is logged,
// and the message goes on unchanged by it.
func (f *Fetcher) intercept(msgs []*sarama.ConsumerMessage) {
	for _, interceptor := range f.hub.conf.Consumer.Interceptors {
		for _, msg := range msgs {
			f.applyInterceptor(interceptor, msg)
		}
	}
}

// applyInterceptor runs interceptor on msg, recovering a panic of it.
func (f *Fetcher) applyInterceptor(interceptor sarama.ConsumerInterceptor, msg *sarama.ConsumerMessage) {
	defer func() {
		if r := recover(); r != nil && f.hub.log != nil {
			f.hub.log.Error("A consumer interceptor panicked; the message goes on.", "interceptor", fmt.Sprintf("%T", interceptor), "panic", fmt.Sprint(r),
				"topic", msg.Topic, "partition", msg.Partition, "offset", msg.Offset)
		}
	}()
	interceptor.OnConsume(msg)
}

// isDying reports whether AsyncClose was called.
func (f *Fetcher) isDying() bool {
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
func (f *Fetcher) deliver(s Slab) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ended {
		return
	}
	a := s.Acct
	if f.sidelined() {
		a.released.Store(true) // never counted
	} else {
		f.buffered.Add(a.size)
		f.hub.budget.count(a.from, a.size)
	}
	select {
	case f.slabs <- s:
	default:
		f.Release(a) // not reached: the loop delivers only when slabs is empty
	}
}

// Taken tells the loop that the partition manager took slab s, and
// released the one it handed out before: the partition is ready for the
// next request. s counts in the budget until the partition handed it
// out entirely (Release).
func (f *Fetcher) Taken(s Slab) {
	if prev := f.inHand.Swap(s.Acct); prev != nil {
		f.Release(prev)
	}
	if l := f.loop.Load(); l != nil {
		l.notify()
	}
}

// Release gives the bytes of a slab back to the budget of the hub and of
// the loop that fetched it: once the partition handed it out entirely,
// when the partition stops handing out or the fetcher ended without
// handing it out, or when the partition is sidelined (a paused
// partition's slabs, or those of one waiting at MaxPendingAcks, wait
// outside the budget, so that the others do not wait for them). Counted
// once; nil is no slab.
func (f *Fetcher) Release(a *Account) {
	if a == nil || !a.released.CompareAndSwap(false, true) {
		return
	}
	f.buffered.Add(-a.size)
	if a.size != 0 {
		f.hub.budget.release(a.from, a.size)
	}
}

// HandedOut tells that the partition handed out everything it took, or
// stopped handing out: the slab in hand leaves the budget.
func (f *Fetcher) HandedOut() {
	f.Release(f.inHand.Swap(nil))
}

// Spend takes the account of the slab in hand from the fetcher, for a
// hand-out that moved all its messages into its batch: the hand-out
// releases it (Release) once they went out. nil: no slab in hand.
func (f *Fetcher) Spend() *Account {
	return f.inHand.Swap(nil)
}

// report sends err on errs, without blocking the loop: it is dropped when
// errs is full. It reports false when closed.
func (f *Fetcher) report(err error) bool {
	if f.isDying() {
		return false
	}
	select {
	case f.errs <- &sarama.ConsumerError{Topic: f.tp.Topic, Partition: f.tp.Partition, Err: err}:
	default:
		if l := f.hub.log; l != nil && l.Enabled(context.Background(), slog.LevelWarn) {
			l.Warn(fmt.Sprintf("Error of %s/%d dropped (its channel is full): %s.", f.tp.Topic, f.tp.Partition, err))
		}
	}
	return true
}

// AsyncClose implements sarama.PartitionConsumer: it stops run.
func (f *Fetcher) AsyncClose() { f.once.Do(func() { close(f.dying) }) }

// Close implements sarama.PartitionConsumer: it stops run and waits for
// it, draining its errors.
func (f *Fetcher) Close() error {
	f.AsyncClose()
	for range f.errs {
	}
	<-f.done
	return nil
}

// Messages implements sarama.PartitionConsumer: nil, see Slabs.
func (f *Fetcher) Messages() <-chan *sarama.ConsumerMessage { return nil }

// Errors implements sarama.PartitionConsumer.
func (f *Fetcher) Errors() <-chan *sarama.ConsumerError { return f.errs }

// HighWaterMarkOffset implements sarama.PartitionConsumer.
func (f *Fetcher) HighWaterMarkOffset() int64 { return f.hwm.Load() }

// Pause implements sarama.PartitionConsumer: the partition is in no
// request after the one in flight, and its slabs leave the budget
// (leaveBudget).
func (f *Fetcher) Pause() {
	f.paused.Store(true)
	f.leaveBudget()
}

// SetWaiting tells that the partition waits at MaxPendingAcks (on), or
// hands out again (off). A waiting partition is sidelined, as a paused
// one: the wait is its user's, and the other partitions of its broker
// loop must not wait for it. Called by the partition's consume loop.
func (f *Fetcher) SetWaiting(on bool) {
	if f.waiting.Swap(on) == on {
		return
	}
	if !on {
		f.ready() // it takes the partition back
		return
	}
	f.leaveBudget()
	if l := f.loop.Load(); l != nil {
		l.notify() // it leaves the partition out of its requests
	}
}

// ready tells the loop that the partition may go in a request again
// (resumed, waits no more): the loop's long poll in
// flight, which does not hold the partition, is cut short
// (interruptPoll), so that the partition does not wait up to
// Consumer.MaxWaitTime for it. Nothing is cut while the partition is
// still sidelined.
func (f *Fetcher) ready() {
	l := f.loop.Load()
	if l == nil {
		return
	}
	if !f.sidelined() {
		l.interruptPoll()
	}
	l.notify()
}

// sidelined reports whether the partition is paused or waits at
// MaxPendingAcks: it is in no request, and its slabs are outside the
// budget until it took them and handed them out.
func (f *Fetcher) sidelined() bool {
	return f.paused.Load() || f.waiting.Load()
}

// leaveBudget releases the slab that the partition holds and the one
// waiting for it in slabs, once the partition is sidelined: they wait
// outside the budget, so that the other partitions do not wait for them.
// A slab delivered later is not counted (deliver).
func (f *Fetcher) leaveBudget() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Release(f.inHand.Load())
	select {
	case s, ok := <-f.slabs:
		if ok {
			f.Release(s.Acct)
			f.slabs <- s // back: capacity 1, and only the loop sends, under mu
		}
	default:
	}
}

// Resume implements sarama.PartitionConsumer: a paused partition goes in
// the loop's next request, without waiting for a long poll in flight.
func (f *Fetcher) Resume() {
	if !f.paused.Swap(false) {
		return
	}
	f.ready()
}

// IsPaused implements sarama.PartitionConsumer.
func (f *Fetcher) IsPaused() bool { return f.paused.Load() }

// Slabs returns the channel of the fetcher's slabs, one per response that
// brought the partition something, in offset order; the loop sends the
// next only when it is empty. Closed when the fetcher ends (AsyncClose,
// an offset out of range).
func (f *Fetcher) Slabs() <-chan Slab { return f.slabs }

// SpentUp returns the channel that gets a token, without blocking the
// sender, when the fetcher's loop waits for the budget: a hand-out
// gathering a batch, whose messages count in the budget, hands it out
// without waiting any longer, since no more may be fetched for it.
func (f *Fetcher) SpentUp() <-chan struct{} { return f.spentUp }

// OutOfRange waits until the fetcher ended, and reports whether it ended
// because the leader confirmed that its offset is out of range (its owner
// starts again at Offsets.Initial).
func (f *Fetcher) OutOfRange() bool {
	<-f.done
	return f.outOfRange
}

// BufferedBytes returns the bytes of the slabs delivered and not handed
// out entirely yet (PartitionStats.BufferedBytes). Safe from any
// goroutine.
func (f *Fetcher) BufferedBytes() int64 { return f.buffered.Load() }

// Broker returns the ID of the broker whose loop the fetcher is
// subscribed to, or -1 between two subscriptions. Safe from any
// goroutine.
func (f *Fetcher) Broker() int32 {
	if l := f.loop.Load(); l != nil {
		return l.broker.ID()
	}
	return -1
}

// NewStub returns a fetcher of no hub, for the tests of its owners: it
// runs no goroutine and fetches nothing, its Slabs holds slabs (not
// closed), and Close returns at once.
func NewStub(slabs ...Slab) *Fetcher {
	f := &Fetcher{slabs: make(chan Slab, max(len(slabs), 1)), errs: make(chan *sarama.ConsumerError),
		dying: make(chan struct{}), done: make(chan struct{}), preferred: -1}
	for _, s := range slabs {
		f.slabs <- s
	}
	close(f.errs)
	close(f.done)
	return f
}
