package process

// Unit tests of Run's share group path (share.go) on an in-memory source:
// what each outcome of a handler does to a record, by its delivery count.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// fakeShareSource is a fakeSource of a share group's consumer: GiveBack is
// its RELEASE; it records the rejects and renews, and answers the
// delivery count it was given.
type fakeShareSource struct {
	*fakeSource
	delivery int // the delivery count of every message
	mu       sync.Mutex
	rejected int
	renewed  int
}

func (f *fakeShareSource) Reject(*sarama.ConsumerMessage) { f.note(&f.rejected) }
func (f *fakeShareSource) Renew(*sarama.ConsumerMessage)  { f.note(&f.renewed) }

// note counts one more in n, a field of f.
func (f *fakeShareSource) note(n *int) {
	f.mu.Lock()
	*n++
	f.mu.Unlock()
}

func (f *fakeShareSource) DeliveryCount(*sarama.ConsumerMessage) int { return f.delivery }

func (f *fakeShareSource) counts() (rejected, renewed int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rejected, f.renewed
}

// TestShareOutcomes: on a share group, a record's handler that succeeds
// ACCEPTs it; one that fails with attempts left (by the broker's delivery
// count, within DefaultShareDeliveryCountLimit) RELEASEs it; the last failure
// dead letters then ACCEPTs it, or REJECTs it without a dead-letter
// topic; a record delivered past its last attempt goes there without a
// handler call; a failed dead letter RELEASEs it, but at the delivery
// count limit renews it and produces again.
func TestShareOutcomes(t *testing.T) {
	t.Parallel()
	type want struct{ calls, acked, released, rejected, retried, dead, produced int }
	for _, tc := range []struct {
		name      string
		attempts  int
		delivery  int
		ok        bool // the handler succeeds
		dl        bool
		dlFailing bool
		want      want
	}{
		{name: "success accepts", attempts: 3, delivery: 2, ok: true, want: want{calls: 1, acked: 1}},
		{name: "failure with attempts left releases", attempts: 3, delivery: 2, want: want{calls: 1, released: 1, retried: 1}},
		{name: "last failure rejects without a dead-letter topic", attempts: 3, delivery: 3, want: want{calls: 1, rejected: 1}},
		{name: "last failure dead letters and accepts", attempts: 3, delivery: 3, dl: true, want: want{calls: 1, acked: 1, dead: 1, produced: 1}},
		{name: "the delivery count limit bounds the attempts", attempts: 10, delivery: DefaultShareDeliveryCountLimit, dl: true, want: want{calls: 1, acked: 1, dead: 1, produced: 1}},
		{name: "past its last attempt: dead lettered unhandled", attempts: 2, delivery: 3, dl: true, want: want{acked: 1, dead: 1, produced: 1}},
		{name: "past its last attempt: rejected unhandled", attempts: 2, delivery: 3, want: want{rejected: 1}},
		{name: "failed dead letter releases", attempts: 2, delivery: 2, dl: true, dlFailing: true, want: want{calls: 1, released: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			src := &fakeShareSource{fakeSource: newFakeSource(), delivery: tc.delivery}
			producer := &fakeProducer{failing: tc.dlFailing}
			opts := Options{Concurrency: 2, Ordering: Unordered, Retry: Retry{Attempts: tc.attempts, Backoff: time.Millisecond}}
			if tc.dl {
				opts.DeadLetter = DeadLetter{Topic: "dlq", Producer: producer}
			}
			var calls atomic.Int32
			s := newScheduler(context.Background(), src, func(context.Context, *sarama.ConsumerMessage) error {
				calls.Add(1)
				if tc.ok {
					return nil
				}
				return errors.New("cannot parse")
			}, opts)
			s.useShare(src, DefaultShareDeliveryCountLimit)
			s.start()
			msg := &sarama.ConsumerMessage{Topic: "t", Partition: 0, Offset: 9}
			s.add(msg)
			waitFor(t, 10*time.Second, "the record settled", func() bool {
				rejected, _ := src.counts()
				return src.settled()+rejected == 1
			})
			if err := stopWithin(t, s, 10*time.Second); err != nil {
				t.Fatal(err)
			}
			acked, released := src.outcome(msg)
			rejected, _ := src.counts()
			_, produced := producer.state()
			got := want{calls: int(calls.Load()), acked: acked, released: released, rejected: rejected, retried: src.retried, dead: src.dead, produced: len(produced)}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
			if tc.dlFailing && (len(src.failed) != 1 || !errors.Is(src.failed[0], ErrDeadLetter)) {
				t.Errorf("failed dead letters reported: %v, want one ErrDeadLetter", src.failed)
			}
		})
	}
}

// TestShareDeadLetterAtLimit: a dead letter that fails on the record's
// delivery at DefaultShareDeliveryCountLimit, where a RELEASE would have the
// broker archive the record, renews its lock and produces again; the
// record is ACCEPTed once the produce succeeded.
func TestShareDeadLetterAtLimit(t *testing.T) {
	t.Parallel()
	src := &fakeShareSource{fakeSource: newFakeSource(), delivery: DefaultShareDeliveryCountLimit}
	producer := &fakeProducer{failing: true}
	s := newScheduler(context.Background(), src, func(context.Context, *sarama.ConsumerMessage) error { return errors.New("cannot parse") },
		Options{Concurrency: 1, Ordering: Unordered, Retry: Retry{Attempts: 5, Backoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond},
			DeadLetter: DeadLetter{Topic: "dlq", Producer: producer}})
	s.useShare(src, DefaultShareDeliveryCountLimit)
	s.start()
	msg := &sarama.ConsumerMessage{Topic: "t", Partition: 0, Offset: 9}
	s.add(msg)
	waitFor(t, 10*time.Second, "2 failed produces", func() bool { tries, _ := producer.state(); return tries >= 2 })
	producer.setFailing(false)
	waitFor(t, 10*time.Second, "the record accepted", func() bool { acked, _ := src.outcome(msg); return acked == 1 })
	if err := stopWithin(t, s, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, released := src.outcome(msg); released != 0 {
		t.Errorf("released %d times at the delivery count limit, want 0 (the broker would archive it)", released)
	}
	if _, renewed := src.counts(); renewed < 2 {
		t.Errorf("renewed %d times for 2 failed produces, want at least 2", renewed)
	}
}

// TestValidateShare: on a share group, Run refuses ByPartition and ByKey
// with an error naming the ordering and GroupProtocolShare.
func TestValidateShare(t *testing.T) {
	t.Parallel()
	for _, o := range []Ordering{ByPartition, ByKey} {
		opts := Options{Concurrency: 1, Ordering: o}
		err := opts.validateShare()
		if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), o.String()) || !strings.Contains(err.Error(), "GroupProtocolShare") {
			t.Errorf("validateShare of %s = %v, want ErrInvalidOptions naming %s and GroupProtocolShare", o, err, o)
		}
	}
	opts := Options{Concurrency: 1, Ordering: Unordered}
	if err := opts.validateShare(); err != nil {
		t.Errorf("validateShare of Unordered = %v, want nil", err)
	}
}

// fakeLimit answers DeliveryCountLimit as a share group's consumer would.
type fakeLimit struct {
	n   int
	err error
}

func (f fakeLimit) DeliveryCountLimit(context.Context) (int, error) { return f.n, f.err }

// TestShareDeliveryLimitFallback: when the group's delivery count limit
// cannot be read (DescribeConfigs refused, no answer), Run bounds the
// attempts by DefaultShareDeliveryCountLimit and reports it once, in an
// error wrapping ErrShareLimitUnknown and the cause, that names the group
// (through the cause) and the limit used; a limit read is reported
// nowhere, and neither is a failed read once Run's ctx is done (Run
// returns at once).
func TestShareDeliveryLimitFallback(t *testing.T) {
	t.Parallel()
	refused := errors.New("GROUP_AUTHORIZATION_FAILED")
	cause := fmt.Errorf("share group jobs: describe its share.delivery.count.limit: %w", refused)
	var reported []error
	report := func(err error) { reported = append(reported, err) }

	if n := shareDeliveryLimit(context.Background(), fakeLimit{err: cause}, report); n != DefaultShareDeliveryCountLimit {
		t.Errorf("limit = %d after a failed read, want DefaultShareDeliveryCountLimit (%d)", n, DefaultShareDeliveryCountLimit)
	}
	if len(reported) != 1 {
		t.Fatalf("a failed read reported %d errors, want 1: %v", len(reported), reported)
	}
	err := reported[0]
	if !errors.Is(err, ErrShareLimitUnknown) || !errors.Is(err, refused) {
		t.Errorf("reported %q, want it to wrap ErrShareLimitUnknown and the cause", err)
	}
	for _, text := range []string{"share group jobs", "share.delivery.count.limit", "DefaultShareDeliveryCountLimit", fmt.Sprint(DefaultShareDeliveryCountLimit)} {
		if !strings.Contains(err.Error(), text) {
			t.Errorf("reported %q, want it to say %q", err, text)
		}
	}

	reported = nil
	if n := shareDeliveryLimit(context.Background(), fakeLimit{n: 3}, report); n != 3 || len(reported) != 0 {
		t.Errorf("a limit of 3 read: limit %d, reported %v; want 3 and nothing", n, reported)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if shareDeliveryLimit(ctx, fakeLimit{err: context.Canceled}, report); len(reported) != 0 {
		t.Errorf("a read cut by Run's ctx reported %v, want nothing", reported)
	}
}
