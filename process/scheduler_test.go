package process

// Unit tests of the scheduler on an in-memory source: order per key, the
// concurrency bound, retries, dead letters, revocation and stop. The
// tests on the real cluster are in cluster_test.go.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer"
)

// fakeSource records what the scheduler does with messages; revoke closes
// a partition's revoked channel, as the consumer does.
type fakeSource struct {
	mu        sync.Mutex
	acked     map[*sarama.ConsumerMessage]int
	givenBack map[*sarama.ConsumerMessage]int
	revoked   map[kafkaconsumer.TopicPartition]chan struct{}
	retried   int
	dead      int
	failed    []error // of DeadLetterFailed
	inFlight  int
}

func newFakeSource() *fakeSource {
	return &fakeSource{
		acked:     make(map[*sarama.ConsumerMessage]int),
		givenBack: make(map[*sarama.ConsumerMessage]int),
		revoked:   make(map[kafkaconsumer.TopicPartition]chan struct{}),
	}
}

func (f *fakeSource) Ack(msg *sarama.ConsumerMessage) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.acked[msg]++
}

func (f *fakeSource) GiveBack(msg *sarama.ConsumerMessage) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.givenBack[msg]++
}

func (f *fakeSource) Revoked(msg *sarama.ConsumerMessage) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	tp := kafkaconsumer.TopicPartition{Topic: msg.Topic, Partition: msg.Partition}
	c := f.revoked[tp]
	if c == nil {
		c = make(chan struct{})
		f.revoked[tp] = c
	}
	return c
}

func (f *fakeSource) Retried(*sarama.ConsumerMessage) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.retried++
}

func (f *fakeSource) DeadLettered(*sarama.ConsumerMessage) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dead++
}

func (f *fakeSource) DeadLetterFailed(_ *sarama.ConsumerMessage, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failed = append(f.failed, err)
}

func (f *fakeSource) InFlight(delta int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inFlight += delta
}

// revoke revokes a partition: its channel is closed, and its next
// messages get a new one.
func (f *fakeSource) revoke(tp kafkaconsumer.TopicPartition) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c := f.revoked[tp]; c != nil {
		close(c)
		delete(f.revoked, tp)
	}
}

// outcome returns how often msg was acked and given back.
func (f *fakeSource) outcome(msg *sarama.ConsumerMessage) (acked, givenBack int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.acked[msg], f.givenBack[msg]
}

// settled counts the messages acked or given back.
func (f *fakeSource) settled() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.acked) + len(f.givenBack)
}

// messages makes n messages of topic t spread over partitions, with keys
// drawn from keys (nil keys when keys is 0), in offset order per
// partition.
func messages(n, partitions, keys int) []*sarama.ConsumerMessage {
	offsets := make([]int64, partitions)
	msgs := make([]*sarama.ConsumerMessage, n)
	for i := range msgs {
		p := i % partitions
		msg := &sarama.ConsumerMessage{Topic: "t", Partition: int32(p), Offset: offsets[p], Value: []byte(strconv.Itoa(i))}
		offsets[p]++
		if keys > 0 {
			msg.Key = []byte("k" + strconv.Itoa(rand.IntN(keys)))
		}
		msgs[i] = msg
	}
	return msgs
}

// waitFor polls cond until it holds, failing the test after timeout.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond) // polling interval, not synchronisation
	}
}

// stopWithin stops s, failing the test when it takes longer than timeout
// (a handler or goroutine that never returns), and returns its error.
func stopWithin(t *testing.T, s *scheduler, timeout time.Duration) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- s.stop() }()
	select {
	case err := <-done:
		return err
	case <-time.After(timeout):
		t.Fatalf("stop did not return within %s: a worker, watcher or timer did not end", timeout)
		return nil
	}
}

// TestOrderPerKey runs 5,000 messages of 200 keys on 8 partitions with
// random handler delays at Concurrency 32, and checks, per ordering, that
// no two messages of one lane ran at once, that each lane ran in offset
// order, that the bound held, and that every message was acked once.
func TestOrderPerKey(t *testing.T) {
	for _, ordering := range []Ordering{ByKey, ByPartition, Unordered} {
		t.Run(ordering.String(), func(t *testing.T) {
			t.Parallel()
			const concurrency = 32
			src := newFakeSource()
			var (
				mu       sync.Mutex
				busy     = make(map[string]bool)  // lanes running now
				last     = make(map[string]int64) // last offset run per lane
				running  int
				most     int
				problems []string
			)
			laneOf := func(msg *sarama.ConsumerMessage) string {
				switch ordering {
				case ByKey:
					return fmt.Sprintf("%d/%s", msg.Partition, msg.Key)
				case ByPartition:
					return strconv.Itoa(int(msg.Partition))
				}
				return fmt.Sprintf("%d/%d", msg.Partition, msg.Offset)
			}
			handler := func(ctx context.Context, msg *sarama.ConsumerMessage) error {
				lane := laneOf(msg)
				mu.Lock()
				if busy[lane] {
					problems = append(problems, "two at once in "+lane)
				}
				if prev, ok := last[lane]; ok && prev > msg.Offset {
					problems = append(problems, fmt.Sprintf("%s: offset %d after %d", lane, msg.Offset, prev))
				}
				busy[lane], last[lane] = true, msg.Offset
				running++
				most = max(most, running)
				mu.Unlock()
				time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond) // simulated work
				mu.Lock()
				busy[lane] = false
				running--
				mu.Unlock()
				return nil
			}
			s := newScheduler(context.Background(), src, handler, Options{Concurrency: concurrency, Ordering: ordering})
			s.start()
			msgs := messages(5000, 8, 200)
			for _, msg := range msgs {
				s.add(msg)
			}
			waitFor(t, 30*time.Second, "every message to be acked", func() bool { return src.settled() == len(msgs) })
			if err := stopWithin(t, s, 10*time.Second); err != nil {
				t.Fatal(err)
			}
			for _, msg := range msgs {
				if acked, back := src.outcome(msg); acked != 1 || back != 0 {
					t.Fatalf("message %d/%d: acked %d times, given back %d", msg.Partition, msg.Offset, acked, back)
				}
			}
			if len(problems) > 0 {
				t.Fatalf("%d order violations, the first: %s", len(problems), problems[0])
			}
			if most > concurrency {
				t.Fatalf("%d handlers ran at once, above Concurrency %d", most, concurrency)
			}
			if src.inFlight != 0 {
				t.Fatalf("InFlight deltas sum to %d after stop, want 0", src.inFlight)
			}
		})
	}
}

// TestConcurrencyReached checks that Concurrency handlers run at once when
// there is work for them, and no more.
func TestConcurrencyReached(t *testing.T) {
	t.Parallel()
	const concurrency = 8
	src := newFakeSource()
	var running atomic.Int32
	release := make(chan struct{})
	handler := func(ctx context.Context, msg *sarama.ConsumerMessage) error {
		running.Add(1)
		defer running.Add(-1)
		<-release
		return nil
	}
	s := newScheduler(context.Background(), src, handler, Options{Concurrency: concurrency, Ordering: Unordered})
	s.start()
	s.add(messages(20, 2, 0)...)
	waitFor(t, 10*time.Second, "8 handlers to run", func() bool { return running.Load() == concurrency })
	close(release)
	waitFor(t, 10*time.Second, "every message to be acked", func() bool { return src.settled() == 20 })
	if err := stopWithin(t, s, 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestRetryHoldsOnlyItsKey fails the first message of key a twice: the
// next message of a waits for it, while key b goes on; then it succeeds
// on its third attempt.
func TestRetryHoldsOnlyItsKey(t *testing.T) {
	t.Parallel()
	src := newFakeSource()
	a1 := &sarama.ConsumerMessage{Topic: "t", Partition: 0, Offset: 0, Key: []byte("a")}
	a2 := &sarama.ConsumerMessage{Topic: "t", Partition: 0, Offset: 1, Key: []byte("a")}
	b1 := &sarama.ConsumerMessage{Topic: "t", Partition: 0, Offset: 2, Key: []byte("b")}
	var (
		mu    sync.Mutex
		order []int64
		tries int
	)
	handler := func(ctx context.Context, msg *sarama.ConsumerMessage) error {
		mu.Lock()
		defer mu.Unlock()
		if msg == a1 {
			tries++
			if tries < 3 {
				return errors.New("not yet")
			}
		}
		order = append(order, msg.Offset)
		return nil
	}
	s := newScheduler(context.Background(), src, handler, Options{Concurrency: 4, Ordering: ByKey,
		Retry: Retry{Attempts: 3, Backoff: 50 * time.Millisecond}})
	s.start()
	s.add(a1, a2, b1)
	waitFor(t, 10*time.Second, "every message to be acked", func() bool { return src.settled() == 3 })
	if err := stopWithin(t, s, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(order) != "[2 0 1]" {
		t.Fatalf("handled offsets %v, want [2 0 1]: b first, then a's two in order", order)
	}
	if tries != 3 || src.retried != 2 {
		t.Fatalf("a1 tried %d times with %d retries reported, want 3 and 2", tries, src.retried)
	}
}

// TestGaveUp: without a dead-letter topic, a message whose last attempt
// failed stops the scheduler with ErrGaveUp wrapping the handler's error,
// and is given back, not acked.
func TestGaveUp(t *testing.T) {
	t.Parallel()
	src := newFakeSource()
	poison := errors.New("poison")
	msg := &sarama.ConsumerMessage{Topic: "t", Partition: 3, Offset: 7}
	s := newScheduler(context.Background(), src, func(context.Context, *sarama.ConsumerMessage) error { return poison },
		Options{Concurrency: 2, Retry: Retry{Attempts: 2, Backoff: time.Millisecond}})
	s.start()
	s.add(msg)
	select {
	case <-s.failed:
	case <-time.After(10 * time.Second):
		t.Fatal("the scheduler did not fail")
	}
	err := stopWithin(t, s, 10*time.Second)
	if !errors.Is(err, ErrGaveUp) || !errors.Is(err, poison) {
		t.Fatalf("stop returned %v, want ErrGaveUp wrapping the handler's error", err)
	}
	if acked, back := src.outcome(msg); acked != 0 || back != 1 {
		t.Fatalf("acked %d times, given back %d; want 0 and 1", acked, back)
	}
}

// fakeProducer is a SyncProducer that fails while failing is set and
// records what it produced.
type fakeProducer struct {
	sarama.SyncProducer // the methods the scheduler does not call
	mu                  sync.Mutex
	failing             bool
	tries               int
	produced            []*sarama.ProducerMessage
}

func (p *fakeProducer) SendMessage(msg *sarama.ProducerMessage) (int32, int64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tries++
	if p.failing {
		return 0, 0, errors.New("dead-letter topic unreachable")
	}
	p.produced = append(p.produced, msg)
	return 0, int64(len(p.produced) - 1), nil
}

func (p *fakeProducer) setFailing(failing bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failing = failing
}

func (p *fakeProducer) state() (tries int, produced []*sarama.ProducerMessage) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tries, append([]*sarama.ProducerMessage(nil), p.produced...)
}

// TestDeadLetter: a poison message is dead lettered with its headers once
// the producer works again, and acked only then; its key waits meanwhile,
// other keys do not.
func TestDeadLetter(t *testing.T) {
	t.Parallel()
	src := newFakeSource()
	producer := &fakeProducer{failing: true}
	poison := &sarama.ConsumerMessage{Topic: "t", Partition: 1, Offset: 5, Key: []byte("a"), Value: []byte("bad"),
		Headers: []*sarama.RecordHeader{{Key: []byte("trace"), Value: []byte("x")}}}
	next := &sarama.ConsumerMessage{Topic: "t", Partition: 1, Offset: 6, Key: []byte("a")}
	other := &sarama.ConsumerMessage{Topic: "t", Partition: 1, Offset: 7, Key: []byte("b")}
	handler := func(ctx context.Context, msg *sarama.ConsumerMessage) error {
		if msg == poison {
			return errors.New("cannot parse")
		}
		return nil
	}
	s := newScheduler(context.Background(), src, handler, Options{Concurrency: 4, Ordering: ByKey,
		Retry:      Retry{Attempts: 3, Backoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond},
		DeadLetter: DeadLetter{Topic: "dlq", Producer: producer}})
	s.start()
	s.add(poison, next, other)
	waitFor(t, 10*time.Second, "the other key's message to be acked", func() bool { acked, _ := src.outcome(other); return acked == 1 })
	waitFor(t, 10*time.Second, "3 failed produces", func() bool { tries, _ := producer.state(); return tries >= 3 })
	if acked, _ := src.outcome(poison); acked != 0 {
		t.Fatal("the poison message was acked before its dead letter was produced")
	}
	if acked, _ := src.outcome(next); acked != 0 {
		t.Fatal("the next message of the poison's key ran while the poison waited for its dead letter")
	}
	producer.setFailing(false)
	waitFor(t, 10*time.Second, "every message to be acked", func() bool { return src.settled() == 3 })
	if err := stopWithin(t, s, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	_, produced := producer.state()
	if len(produced) != 1 {
		t.Fatalf("%d dead letters, want 1", len(produced))
	}
	headers := make(map[string]string)
	for _, h := range produced[0].Headers {
		headers[string(h.Key)] = string(h.Value)
	}
	want := map[string]string{"trace": "x", HeaderTopic: "t", HeaderPartition: "1", HeaderOffset: "5", HeaderError: "cannot parse", HeaderAttempts: "3"}
	if fmt.Sprint(headers) != fmt.Sprint(want) {
		t.Fatalf("dead letter headers %v, want %v", headers, want)
	}
	if produced[0].Topic != "dlq" || src.dead != 1 || src.retried != 2 {
		t.Fatalf("topic %q, %d dead letters and %d retries reported; want dlq, 1 and 2", produced[0].Topic, src.dead, src.retried)
	}
	// The failed produces were reported once, with the producer's error.
	if len(src.failed) != 1 || !errors.Is(src.failed[0], ErrDeadLetter) || !strings.Contains(src.failed[0].Error(), "offset 5, to topic dlq: dead-letter topic unreachable") {
		t.Fatalf("failed produces reported: %v; want one ErrDeadLetter", src.failed)
	}
}

// TestRevoke revokes a partition while one of its handlers runs, one of
// its messages waits for a retry and others are queued: the handler's
// context is cancelled, nothing of the partition is acked afterwards,
// everything of it is given back, and the other partition goes on.
func TestRevoke(t *testing.T) {
	t.Parallel()
	src := newFakeSource()
	started := make(chan struct{})
	var once sync.Once
	slow := &sarama.ConsumerMessage{Topic: "t", Partition: 0, Offset: 0, Key: []byte("slow")}
	failing := &sarama.ConsumerMessage{Topic: "t", Partition: 0, Offset: 1, Key: []byte("failing")}
	queued := &sarama.ConsumerMessage{Topic: "t", Partition: 0, Offset: 2, Key: []byte("slow")}
	other := &sarama.ConsumerMessage{Topic: "t", Partition: 1, Offset: 0, Key: []byte("slow")}
	handler := func(ctx context.Context, msg *sarama.ConsumerMessage) error {
		switch msg {
		case slow:
			once.Do(func() { close(started) })
			<-ctx.Done()
			return nil // claims success after the revocation: must not be acked
		case failing:
			return errors.New("again")
		}
		return nil
	}
	s := newScheduler(context.Background(), src, handler, Options{Concurrency: 4, Ordering: ByKey,
		Retry: Retry{Attempts: 100, Backoff: time.Hour}})
	s.start()
	s.add(slow, failing, queued)
	<-started
	waitFor(t, 10*time.Second, "the failing message's retry", func() bool {
		src.mu.Lock()
		defer src.mu.Unlock()
		return src.retried == 1
	})
	src.revoke(kafkaconsumer.TopicPartition{Topic: "t", Partition: 0})
	waitFor(t, 10*time.Second, "the partition's messages to be given back", func() bool { return src.settled() == 3 })
	for _, msg := range []*sarama.ConsumerMessage{slow, failing, queued} {
		if acked, back := src.outcome(msg); acked != 0 || back != 1 {
			t.Fatalf("offset %d of the revoked partition: acked %d, given back %d; want 0 and 1", msg.Offset, acked, back)
		}
	}
	s.add(other)
	waitFor(t, 10*time.Second, "the other partition's message to be acked", func() bool { acked, _ := src.outcome(other); return acked == 1 })
	if err := stopWithin(t, s, 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestStopGivesBack stops the scheduler while handlers run and messages
// wait: the handlers' context is cancelled, stop returns once they
// returned, and every message not handled is given back.
func TestStopGivesBack(t *testing.T) {
	t.Parallel()
	src := newFakeSource()
	var started atomic.Int32
	handler := func(ctx context.Context, msg *sarama.ConsumerMessage) error {
		started.Add(1)
		<-ctx.Done()
		return ctx.Err()
	}
	s := newScheduler(context.Background(), src, handler, Options{Concurrency: 4, Ordering: ByPartition})
	s.start()
	msgs := messages(100, 8, 0)
	s.add(msgs...)
	waitFor(t, 10*time.Second, "4 handlers to run", func() bool { return started.Load() == 4 })
	if err := stopWithin(t, s, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, msg := range msgs {
		if acked, back := src.outcome(msg); acked != 0 || back != 1 {
			t.Fatalf("offset %d/%d: acked %d, given back %d; want 0 and 1", msg.Partition, msg.Offset, acked, back)
		}
	}
}

// startUntilContextEnd starts a scheduler of one handler at a time, by
// key, on a new fakeSource, under a context that cancel ends (Run's
// context). Its handler counts its calls in calls, then waits for its
// context to be done and returns the context's error.
func startUntilContextEnd() (s *scheduler, src *fakeSource, calls *atomic.Int32, cancel context.CancelFunc) {
	src = newFakeSource()
	calls = new(atomic.Int32)
	handler := func(ctx context.Context, msg *sarama.ConsumerMessage) error {
		calls.Add(1)
		<-ctx.Done()
		return ctx.Err()
	}
	ctx, cancel := context.WithCancel(context.Background())
	s = newScheduler(ctx, src, handler, Options{Concurrency: 1, Ordering: ByKey})
	s.start()
	return s, src, calls, cancel
}

// TestContextEndGivesBack: Run's context ends while a handler runs; the
// handler sees its context done at once and returns its error before Run
// stops the scheduler. That is not a failed attempt: the message is given
// back, and Run returns nil, not ErrGaveUp.
func TestContextEndGivesBack(t *testing.T) {
	t.Parallel()
	s, src, started, cancel := startUntilContextEnd()
	msgs := messages(1, 1, 1)
	s.add(msgs...)
	waitFor(t, 10*time.Second, "the handler to run", func() bool { return started.Load() == 1 })
	cancel() // Run's context: Run stops the scheduler once it sees it
	waitFor(t, 10*time.Second, "the handler's outcome", func() bool { return src.settled() == 1 })
	if err := stopWithin(t, s, 10*time.Second); err != nil {
		t.Fatalf("stop after the context's end: %v", err)
	}
	if acked, back := src.outcome(msgs[0]); acked != 0 || back != 1 {
		t.Fatalf("acked %d, given back %d; want 0 and 1", acked, back)
	}
}

// TestContextEndStartsNothing: once Run's context ended, no handler
// starts, even before Run stops the scheduler: the message of a key
// queued behind one whose handler returns as the context ends is given
// back unhandled, not handled with a context done (a handler that
// ignores its context would handle it, and it would be acked after Run
// was told to stop).
func TestContextEndStartsNothing(t *testing.T) {
	t.Parallel()
	s, src, calls, cancel := startUntilContextEnd()
	msgs := messages(2, 1, 1) // one key: the second waits behind the first
	s.add(msgs...)
	waitFor(t, 10*time.Second, "the first handler to run", func() bool { return calls.Load() == 1 })
	cancel()
	waitFor(t, 10*time.Second, "the first message's outcome", func() bool { return src.settled() >= 1 })
	if err := stopWithin(t, s, 10*time.Second); err != nil {
		t.Fatalf("stop after the context's end: %v", err)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d handler calls, want 1: a handler started after Run's context ended", n)
	}
	for _, msg := range msgs {
		if acked, back := src.outcome(msg); acked != 0 || back != 1 {
			t.Fatalf("offset %d: acked %d, given back %d; want 0 and 1", msg.Offset, acked, back)
		}
	}
}

// TestBackoff checks the waits' bounds: between half and the whole of the
// doubled Backoff, capped at MaxBackoff.
func TestBackoff(t *testing.T) {
	t.Parallel()
	s := &scheduler{opts: Options{Retry: Retry{Backoff: 100 * time.Millisecond, MaxBackoff: time.Second}}}
	for n, want := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, time.Second, time.Second} {
		for range 100 {
			if d := s.backoff(n); d < want/2 || d > want {
				t.Fatalf("backoff(%d) = %s, want within [%s, %s]", n, d, want/2, want)
			}
		}
	}
	s.opts.Retry = Retry{}
	if d := s.backoff(100); d < DefaultMaxBackoff/2 || d > DefaultMaxBackoff {
		t.Fatalf("default backoff(100) = %s, want within [%s, %s]", d, DefaultMaxBackoff/2, DefaultMaxBackoff)
	}
}

// TestValidate checks Run's errors for bad Options.
func TestValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		opts Options
		want string
	}{
		{Options{}, "Concurrency must be at least 1, got 0"},
		{Options{Concurrency: 1, Ordering: 7}, "Ordering must be ByPartition, ByKey or Unordered, got Ordering(7)"},
		{Options{Concurrency: 1, Retry: Retry{Attempts: -1}}, "Retry.Attempts must not be negative, got -1"},
		{Options{Concurrency: 1, Retry: Retry{Backoff: time.Second, MaxBackoff: time.Millisecond}}, "Retry.MaxBackoff (1ms) must not be shorter than Retry.Backoff (1s)"},
		{Options{Concurrency: 1, DeadLetter: DeadLetter{Brokers: []string{"b:9092"}}}, "DeadLetter has a producer but no Topic"},
		{Options{Concurrency: 1, DeadLetter: DeadLetter{Topic: "dlq"}}, `DeadLetter: Topic "dlq" needs a Producer or Brokers`},
		{Options{Concurrency: 1, DeadLetter: DeadLetter{Topic: "dlq", Producer: &fakeProducer{}, Brokers: []string{"b:9092"}}}, "DeadLetter: set Producer, or Brokers and Config, not both"},
		{Options{Concurrency: 1, DeadLetter: DeadLetter{Topic: "dlq", Brokers: []string{"b:9092"}}}, ""},
	} {
		err := c.opts.validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v: %v, want nil", c.opts, err)
		case c.want != "" && (!errors.Is(err, ErrInvalidOptions) || err.Error() != "process: invalid options: "+c.want):
			t.Errorf("%+v: %v, want %q wrapping ErrInvalidOptions", c.opts, err, c.want)
		}
	}
}
