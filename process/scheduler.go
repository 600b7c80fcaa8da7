package process

// The scheduler: messages wait in lanes, one per key (ByKey), per
// partition (ByPartition) or per message (Unordered); a lane whose first
// message may run is in the ready queue, from which Concurrency workers
// take them. A lane's first message holds the lane while it runs, while
// it waits for a retry, and while it is dead lettered, so a lane's
// messages run one after the other, in the order they came (their
// partition's offset order). All of the state is guarded by one mutex;
// handlers and produces run outside it.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer"
)

// source is what the scheduler needs of a consumer: consumerSource, or a
// unit test's fake.
type source interface {
	Ack(msg *sarama.ConsumerMessage)
	GiveBack(msg *sarama.ConsumerMessage)
	Revoked(msg *sarama.ConsumerMessage) <-chan struct{}
	Retried(msg *sarama.ConsumerMessage)
	DeadLettered(msg *sarama.ConsumerMessage)
	DeadLetterFailed(msg *sarama.ConsumerMessage, err error)
	InFlight(delta int)
}

// laneKey names a lane: a key of a partition (ByKey), a partition (key
// empty, ByPartition), or one message (id, Unordered and messages without
// a key).
type laneKey struct {
	tp  kafkaconsumer.TopicPartition
	key string
	id  uint64
}

// lane is a queue of messages handled one after the other.
type lane struct {
	key   laneKey
	items []*item // in arrival order; items[0] is the one that runs next
	// busy is set while items[0] runs, waits for a retry, or is in a
	// worker's hands: the lane is not in the ready queue for it.
	busy bool
	// queued is set while the lane is in the ready queue (it may have
	// been emptied meanwhile: take skips it then).
	queued bool
}

// item is a message in a lane, and where its handling stands. Its fields
// are guarded by scheduler.mu, but for attempts, which the worker that
// runs it writes (the lane is busy meanwhile).
type item struct {
	msg *sarama.ConsumerMessage
	run *partitionRun
	// attempts counts the handler's calls; err is its last error.
	attempts int
	err      error
	// delivery is a share group's record's delivery count (see
	// addShare); 0 elsewhere.
	delivery int
	// deadLetter is set once the handler's attempts are over: the next
	// run produces the dead letter; produced counts the failed produces.
	deadLetter bool
	produces   int
	// running is set while a worker has the item; timer is set while it
	// waits for its next attempt.
	running bool
	timer   *time.Timer
	// gone is set when the item left its lane before its timer fired
	// (revoked, or Run ended): the timer's function does nothing then.
	gone bool
}

// partitionRun is one run of a partition on this instance, from its first
// message that Run received to its revocation.
type partitionRun struct {
	tp      kafkaconsumer.TopicPartition
	revoked <-chan struct{} // the consumer's (Processing.Revoked)
	// ctx is the context of the run's handlers: cancelled by revoke, and
	// with the scheduler's.
	ctx    context.Context
	cancel context.CancelFunc
	// over is set when the run is revoked: nothing of it is acked any
	// more. Guarded by scheduler.mu.
	over bool
}

// scheduler runs the handler on the messages given to add.
type scheduler struct {
	src     source
	handler Handler
	opts    Options
	dl      *deadLetterer // nil without a dead-letter topic
	sh      shareActions  // a share group's consumer (share.go), else nil
	// shareLimit is the share group's delivery count limit (useShare).
	shareLimit int

	ctx    context.Context    // Run's, the parent of every run's context
	cancel context.CancelFunc // cancels ctx: called by stop

	mu sync.Mutex // guards the fields below, and the lanes and items
	// work is signalled when a lane enters ready, and broadcast when the
	// scheduler stops.
	work  *sync.Cond
	ready []*lane // lanes whose first item may run, oldest first
	lanes map[laneKey]*lane
	runs  map[kafkaconsumer.TopicPartition]*partitionRun // the latest run of each partition
	// running counts the workers that run an item.
	running int
	// stopping is set by stop: no item starts any more (nor once ctx is
	// done, see take).
	stopping bool
	nextID   uint64 // the last id of a lane of one message
	err      error  // the first fatal error (ErrGaveUp)
	// failed is closed by fail, once, at the first fatal error.
	failed chan struct{}

	// reported is the number of running handlers last reported to
	// InFlight; used by the reporter goroutine, then by stop.
	reported int

	// done is closed by stop once every worker returned: it ends the
	// watchers and the reporter.
	done     chan struct{}
	workers  sync.WaitGroup // the Concurrency workers
	watchers sync.WaitGroup // one per partition run, until it is revoked or done
	reporter sync.WaitGroup // the InFlight reporter
	// timers counts the retry timers set and not yet fired or stopped.
	timers sync.WaitGroup
}

func newScheduler(ctx context.Context, src source, handler Handler, opts Options) *scheduler {
	s := &scheduler{
		src:     src,
		handler: handler,
		opts:    opts,
		lanes:   make(map[laneKey]*lane),
		runs:    make(map[kafkaconsumer.TopicPartition]*partitionRun),
		failed:  make(chan struct{}),
		done:    make(chan struct{}),
	}
	s.ctx, s.cancel = context.WithCancel(ctx)
	s.work = sync.NewCond(&s.mu)
	if opts.DeadLetter.Topic != "" {
		s.dl = newDeadLetterer(opts.DeadLetter)
	}
	return s
}

// start starts the workers and the reporter; stop stops them.
func (s *scheduler) start() {
	for range s.opts.Concurrency {
		s.workers.Add(1)
		go s.worker()
	}
	s.reporter.Add(1)
	go s.report()
}

// add queues msgs, each behind the messages of its lane. A message whose
// partition is revoked already is given back.
func (s *scheduler) add(msgs ...*sarama.ConsumerMessage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, msg := range msgs {
		run := s.runOf(msg)
		if run.over || s.stopping {
			s.src.GiveBack(msg)
			continue
		}
		it := &item{msg: msg, run: run}
		if s.sh != nil && !s.addShare(it) {
			continue
		}
		key := s.keyOf(run.tp, msg)
		l := s.lanes[key]
		if l == nil {
			l = &lane{key: key}
			s.lanes[key] = l
		}
		l.items = append(l.items, it)
		if !l.busy {
			s.push(l)
		}
	}
}

// runOf returns the run of msg's partition, starting a new one when the
// last one was revoked.
func (s *scheduler) runOf(msg *sarama.ConsumerMessage) *partitionRun {
	tp := kafkaconsumer.TopicPartition{Topic: msg.Topic, Partition: msg.Partition}
	if run := s.runs[tp]; run != nil && !run.over && !closed(run.revoked) {
		// A partition's next run begins after the last one was revoked,
		// and the consumer closes revoked first.
		return run
	}
	run := &partitionRun{tp: tp, revoked: s.src.Revoked(msg)}
	run.ctx, run.cancel = context.WithCancel(s.ctx)
	s.runs[tp] = run
	if closed(run.revoked) {
		run.over = true
		run.cancel()
		return run
	}
	s.watchers.Add(1)
	go s.watch(run)
	return run
}

// closed reports whether c is closed; a nil c never is.
func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// watch revokes run when the consumer revokes its partition, until the
// scheduler is done.
func (s *scheduler) watch(run *partitionRun) {
	defer s.watchers.Done()
	select {
	case <-run.revoked:
		s.revoke(run)
	case <-s.done:
	}
}

// keyOf returns the key of the lane of msg.
func (s *scheduler) keyOf(tp kafkaconsumer.TopicPartition, msg *sarama.ConsumerMessage) laneKey {
	switch {
	case s.opts.Ordering == ByPartition:
		return laneKey{tp: tp}
	case s.opts.Ordering == ByKey && msg.Key != nil:
		return laneKey{tp: tp, key: string(msg.Key)}
	}
	s.nextID++
	return laneKey{tp: tp, id: s.nextID}
}

// push puts l in the ready queue, unless it is there already, and wakes a
// worker.
func (s *scheduler) push(l *lane) {
	if l.queued {
		return
	}
	l.queued = true
	s.ready = append(s.ready, l)
	s.work.Signal()
}

// take waits for a lane whose first item may run, marks both busy and
// running, and returns them; nil once the scheduler stops, or once Run's
// context ended: no handler starts with its context done, and stop gives
// back what waits. s.mu is held.
func (s *scheduler) take() (*lane, *item) {
	for {
		if s.ctx.Err() != nil {
			return nil, nil
		}
		for len(s.ready) > 0 {
			l := s.ready[0]
			s.ready[0] = nil
			s.ready = s.ready[1:]
			l.queued = false
			if l.busy || len(l.items) == 0 {
				continue // emptied by a revocation, or taken by then
			}
			it := l.items[0]
			l.busy, it.running = true, true
			s.running++
			return l, it
		}
		if s.stopping {
			return nil, nil
		}
		s.work.Wait()
	}
}

// worker runs items until the scheduler stops.
func (s *scheduler) worker() {
	defer s.workers.Done()
	s.mu.Lock()
	l, it := s.take()
	s.mu.Unlock()
	for l != nil {
		err := s.handle(it)
		l, it = s.finish(l, it, err)
	}
}

// handle calls the handler with it, or produces its dead letter.
func (s *scheduler) handle(it *item) error {
	if it.deadLetter {
		return s.dl.produce(it.msg, it.err, it.attempts)
	}
	it.attempts++
	return s.handler(it.run.ctx, it.msg)
}

// finish records the outcome err of the item it of lane l that a worker
// ran, and returns the next lane and item for that worker to run (nil
// once the scheduler stops).
//
// A failed produce of a dead letter is reported first, the first time
// for its item. Then, in order: a revoked run's or a stopping scheduler's
// item that failed is
// given back, and so is one that failed once Run's context ended (its
// handler saw its context done before Run stopped the scheduler: not a
// failed attempt); one that succeeded is acked unless its run was
// revoked. A
// failed item with attempts left waits for its retry; one without goes to
// its dead letter, or, without a dead-letter topic, fails Run. A failed
// produce waits and produces again.
func (s *scheduler) finish(l *lane, it *item, err error) (*lane, *item) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running--
	it.running = false
	l.busy = false
	run := it.run
	if err != nil && it.deadLetter {
		it.produces++
		if it.produces == 1 {
			s.src.DeadLetterFailed(it.msg, fmt.Errorf("%w: offset %d, to topic %s: %w", ErrDeadLetter, it.msg.Offset, s.dl.topic, err))
		}
	}
	if s.sh != nil {
		s.finishShare(l, it, err)
		return s.take()
	}
	switch {
	case err == nil:
		if it.deadLetter && !run.over {
			s.src.DeadLettered(it.msg)
		}
		s.complete(l, !run.over)
	case run.over || s.stopping || s.ctx.Err() != nil:
		s.complete(l, false)
	case it.deadLetter:
		s.wait(l, it, s.backoff(it.produces-1))
	case it.attempts < s.opts.Retry.attempts():
		it.err = err
		s.src.Retried(it.msg)
		s.wait(l, it, s.backoff(it.attempts-1))
	case s.dl != nil:
		it.err = err
		it.deadLetter = true
		s.push(l)
	default:
		s.fail(fmt.Errorf("%w: %s/%d at offset %d, after %d attempts: %w",
			ErrGaveUp, it.msg.Topic, it.msg.Partition, it.msg.Offset, it.attempts, err))
		s.complete(l, false)
	}
	return s.take()
}

// complete takes the first item out of l, acking its message or giving
// it back, and puts l back in the ready queue if it holds more, or drops
// it.
func (s *scheduler) complete(l *lane, ack bool) {
	it := l.items[0]
	if ack {
		s.src.Ack(it.msg)
	} else {
		s.src.GiveBack(it.msg)
	}
	s.dropFirst(l)
}

// dropFirst takes the first item out of l, settled already, and settles
// l.
func (s *scheduler) dropFirst(l *lane) {
	l.items[0] = nil
	l.items = l.items[1:]
	s.settle(l)
}

// settle drops l when it holds nothing and nothing of it is busy, or puts
// it in the ready queue when its first item may run.
func (s *scheduler) settle(l *lane) {
	switch {
	case l.busy:
	case len(l.items) == 0:
		if s.lanes[l.key] == l {
			delete(s.lanes, l.key)
		}
	case !s.stopping:
		s.push(l)
	}
}

// wait holds l for d, then puts it in the ready queue to run it again.
func (s *scheduler) wait(l *lane, it *item, d time.Duration) {
	l.busy = true
	s.timers.Add(1)
	it.timer = time.AfterFunc(d, func() {
		defer s.timers.Done()
		s.mu.Lock()
		defer s.mu.Unlock()
		if it.gone {
			return
		}
		it.timer = nil
		l.busy = false
		s.settle(l)
	})
}

// backoff returns the wait before retry number n (from 0): Retry.Backoff
// doubled n times, capped at Retry.MaxBackoff, and drawn at random
// between half and the whole of it.
func (s *scheduler) backoff(n int) time.Duration {
	base := s.opts.Retry.Backoff
	if base == 0 {
		base = DefaultBackoff
	}
	ceiling := s.opts.Retry.MaxBackoff
	if ceiling == 0 {
		ceiling = max(DefaultMaxBackoff, base)
	}
	d := base
	for ; n > 0 && d < ceiling; n-- {
		d *= 2
	}
	d = min(d, ceiling)
	half := d / 2
	return half + rand.N(d-half+1)
}

// drop takes out of l the items for which leave reports true, but for one
// that a worker runs (it finishes it), and gives their messages back.
// s.mu is held.
func (s *scheduler) drop(l *lane, leave func(*item) bool) {
	kept := l.items[:0]
	for _, it := range l.items {
		if it.running || !leave(it) {
			kept = append(kept, it)
			continue
		}
		if it.timer != nil {
			if it.timer.Stop() {
				s.timers.Done()
			}
			it.timer = nil
			l.busy = false // the lane waited for this item's retry
		}
		it.gone = true
		s.src.GiveBack(it.msg)
	}
	clear(l.items[len(kept):])
	l.items = kept
	s.settle(l)
}

// revoke ends run: its context is cancelled, and its messages that no
// handler runs are given back; those that run are given back once they
// return (finish).
func (s *scheduler) revoke(run *partitionRun) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if run.over {
		return
	}
	run.over = true
	run.cancel()
	if s.runs[run.tp] == run {
		delete(s.runs, run.tp)
	}
	for key, l := range s.lanes {
		if key.tp == run.tp {
			s.drop(l, func(it *item) bool { return it.run == run })
		}
	}
}

// fail records err as Run's, and makes Run stop. s.mu is held.
func (s *scheduler) fail(err error) {
	if s.err == nil {
		s.err = err
		close(s.failed)
	}
}

// report reports the running handlers to InFlight every second, until
// the scheduler is done.
func (s *scheduler) report() {
	defer s.reporter.Done()
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	for {
		select {
		case <-ticker.C:
			s.mu.Lock()
			n := s.running
			s.mu.Unlock()
			s.reportInFlight(n)
		case <-s.done:
			return
		}
	}
}

// reportInFlight reports the change to n handlers running.
func (s *scheduler) reportInFlight(n int) {
	if d := n - s.reported; d != 0 {
		s.src.InFlight(d)
		s.reported = n
	}
}

// stop stops the scheduler and waits for all of its goroutines, in this
// order:
//  1. every handler's context is cancelled, no item starts any more, and
//     the messages no worker runs are given back, their retries stopped;
//  2. the workers finish the items they run (acked if they succeeded,
//     else given back) and return;
//  3. the watchers and the reporter end; the timers stopped in step 1
//     whose function had begun have returned;
//  4. the dead letters' own producer is closed, and InFlight is told
//     that nothing runs.
//
// It returns the first fatal error (ErrGaveUp), or nil.
func (s *scheduler) stop() error {
	s.mu.Lock()
	s.stopping = true
	s.cancel()
	for _, l := range s.lanes {
		s.drop(l, func(*item) bool { return true })
	}
	s.work.Broadcast()
	s.mu.Unlock()

	s.workers.Wait()
	close(s.done)
	s.watchers.Wait()
	s.reporter.Wait()
	s.timers.Wait()
	if s.dl != nil {
		s.dl.close()
	}
	s.reportInFlight(0)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}
