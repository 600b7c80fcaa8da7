// Package process runs a handler on the messages of a kafkaconsumer
// Consumer, many at once, keeping the order that matters: messages of one
// key (or of one partition) are handled one after the other, in offset
// order, while different keys run at once. It acks each message once its
// handler succeeded, retries failures with a backoff, and produces the
// messages whose last attempt failed to a dead-letter topic.
//
//	err := process.Run(ctx, consumer, handle, process.Options{
//		Concurrency: 64,
//		Ordering:    process.ByKey,
//		Retry:       process.Retry{Attempts: 3},
//	})
//
// Run is built on the consumer's public API (Messages or Batches, Ack and
// Consumer.Processing), so its guarantees are the consumer's: a message is
// acked only once it was handled or dead lettered, and the commit is the
// end of the acked prefix, so a crash delivers again what was not acked,
// and what was acked after it (at-least-once).
//
// # Revocation
//
// When a partition is revoked (a rebalance, Close, Shutdown, a lost
// ZooKeeper session; see kafkaconsumer.Processing.Revoked), Run cancels
// the context of that partition's running handlers, starts none of its
// messages any more, and acks none of them from then on: each message it
// held is given back (Processing.GiveBack) at once, or, when its handler
// runs, once the handler returned. The partition then stops without
// waiting out MaxProcessingTime, its commit being the end of what was
// acked before; its next owner handles the rest again. A handler that
// ignores its context holds the partition's stop up to MaxProcessingTime.
//
// # Order across a rebalance
//
// A key's messages are handled in offset order on one instance. When a
// partition moves, its next owner starts at the committed offset, so it
// may handle again messages of a key that the previous owner handled
// (acked after the first unacked one), but it handles them after the
// previous owner's handlers of that partition returned: the first
// handling of each message keeps the key's order.
//
// # Batches
//
// A consumer set to batches (Config.BatchSize), a share group's too,
// works the same: Run reads its Batches and handles each message of a
// batch as one message, acking (on a share group: accepting, releasing
// or rejecting) each one on its own. Handlers still take one message; to write many at
// once, read Batches yourself.
//
// # Share groups
//
// On a share group's consumer (kafkaconsumer.GroupProtocolShare), the
// broker keeps each record's state and hands records out in no order:
// Run takes Ordering Unordered only, and refuses the others
// (ErrInvalidOptions). A handler's success ACCEPTs the record (Ack). A
// failure with attempts left RELEASEs it at once: the broker delivers it
// again, to any member, with its delivery count one higher, so that the
// attempts are counted by the broker (kafkaconsumer.Share.DeliveryCount)
// across members, up to the smaller of Retry.Attempts and the group's
// share.delivery.count.limit (read at Run's start, within 10 s,
// kafkaconsumer.Share.DeliveryCountLimit, else
// DefaultShareDeliveryCountLimit, said on Errors() with
// ErrShareLimitUnknown); Retry's backoff is not waited. The last failure produces the dead
// letter, then ACCEPTs the record, or, without a dead-letter topic,
// REJECTs it (the broker archives it) instead of failing Run with
// ErrGaveUp. A failed dead letter is reported as elsewhere
// (ErrDeadLetter) and the record RELEASEd; its next delivery goes to the
// dead letter without the handler. At the delivery count limit, where a
// RELEASE would have the broker archive it, Run renews its lock and
// produces again after Retry's backoff instead. Nothing is revoked: a
// record is this member's until its acquisition lock
// (share.record.lock.duration.ms) expires. A handler that runs longer
// than that sees its Ack refused (kafkaconsumer.ErrShareAckRefused on
// Errors()) while the broker delivers the record again; a long handler
// renews the lock itself (kafkaconsumer.ShareOf(c).Renew). What Run
// holds when it returns is RELEASEd. The metrics mean the same as
// elsewhere: Retried counts the RELEASEs of failures.
//
// # Memory
//
// Run holds every message it received until it is acked or given back:
// messages of a busy key wait in that key's queue. The consumer's
// MaxPendingAcks bounds them per partition: a partition whose oldest
// pending message waits (a slow key, a retry) hands out at most that many
// messages, then pauses until it is acked (ErrMaxPendingAcks on Errors).
package process

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer"
)

// Handler processes one message. It returns nil when the message is
// processed (Run acks it), or an error to have it tried again (see
// Retry). It must return soon after ctx is done: ctx is cancelled when the
// message's partition is revoked or Run ends, and the message is then
// handed to the partition's next owner. It is called from many goroutines
// at once (Options.Concurrency), but never for two messages of one key at
// once (Options.Ordering). A panic is not recovered.
type Handler func(ctx context.Context, msg *sarama.ConsumerMessage) error

// Ordering says which messages Run handles one after the other.
type Ordering int

const (
	// ByPartition handles the messages of a partition one after the other,
	// in offset order; partitions run at once. The default.
	ByPartition Ordering = iota
	// ByKey handles the messages of one key of a partition one after the
	// other, in offset order; different keys run at once. Messages
	// without a key (a null key) are not ordered among themselves, as
	// with Unordered; an empty key is a key.
	ByKey
	// Unordered handles messages in any order, up to Concurrency at once.
	Unordered
)

// String returns the constant's name.
func (o Ordering) String() string {
	switch o {
	case ByPartition:
		return "ByPartition"
	case ByKey:
		return "ByKey"
	case Unordered:
		return "Unordered"
	}
	return fmt.Sprintf("Ordering(%d)", int(o))
}

// Options configures Run.
type Options struct {
	// Concurrency is the most handlers running at once; at least 1.
	Concurrency int
	// Ordering says which messages are handled one after the other.
	// Default ByPartition.
	Ordering Ordering
	// Retry says how often, and after what wait, a failed message is
	// tried again. Default: not at all.
	Retry Retry
	// DeadLetter, when its Topic is set, is where messages go whose last
	// attempt failed. Without it, such a message makes Run return
	// ErrGaveUp; on a share group, it is REJECTed.
	DeadLetter DeadLetter
}

// Retry says how a message whose handler failed is tried again. While a
// message waits for its next attempt, the other messages of its key (or
// partition, with ByPartition) wait behind it; other keys go on, and the
// waiting message takes no part of Concurrency.
type Retry struct {
	// Attempts is the most times the handler is called with one message,
	// the first included. Default 0, which means 1: no retry.
	Attempts int
	// Backoff is the wait before the second attempt; each later wait
	// doubles, up to MaxBackoff. Each wait is drawn at random between
	// half and the whole of it (jitter), so that the messages that failed
	// together are not tried again together. Default 100 ms.
	Backoff time.Duration
	// MaxBackoff caps the wait. Default 10 s, or Backoff when that is
	// longer.
	MaxBackoff time.Duration
}

// Default waits of Retry.
const (
	DefaultBackoff    = 100 * time.Millisecond
	DefaultMaxBackoff = 10 * time.Second
)

// DeadLetter is the topic that receives the messages whose last attempt
// failed, and how to produce to it: with Producer, or with a producer Run
// makes from Brokers and Config (and closes when it returns).
//
// A dead letter has the message's key and value, its headers, and these
// headers after them: HeaderTopic, HeaderPartition, HeaderOffset (the
// message's topic, partition and offset, in decimal), HeaderError (the
// handler's last error) and HeaderAttempts (how many times it was
// handled). The message is acked only once the produce succeeded. A
// produce that fails is reported on the consumer's Errors() once per
// message (ErrDeadLetter), and tried again after Retry's backoff, as
// long as the partition is this instance's; meanwhile the message holds
// its key, as a retry does. Its partition's next owner handles it again when the
// partition moves first, so a message may be dead lettered more than
// once.
type DeadLetter struct {
	// Topic is the dead-letter topic. Empty: no dead letters.
	Topic string
	// Producer, when set, produces the dead letters; it is the caller's
	// to close, after Run returned. Run does not cut a produce short: a
	// revoked partition and Run's return wait for it, within the
	// producer's own timeouts (Producer.Timeout, Net.*Timeout and
	// Producer.Retry).
	Producer sarama.SyncProducer
	// Brokers, when Producer is nil, are the addresses of the cluster
	// that Run produces dead letters to, with a SyncProducer of Config
	// (nil: sarama.NewConfig() with Producer.RequiredAcks WaitForAll).
	// Run sets Producer.Return.Successes and Errors on a copy of Config.
	// Run makes the producer when the first dead letter is due, and makes
	// it again after a failure, as it produces again.
	Brokers []string
	Config  *sarama.Config
}

// The headers that Run adds to a dead letter (see DeadLetter).
const (
	HeaderTopic     = "dead-letter-topic"
	HeaderPartition = "dead-letter-partition"
	HeaderOffset    = "dead-letter-offset"
	HeaderError     = "dead-letter-error"
	HeaderAttempts  = "dead-letter-attempts"
)

var (
	// ErrInvalidOptions is wrapped by the error Run returns at once for a
	// nil consumer or handler, or Options it cannot run with; the error
	// says which field is wrong.
	ErrInvalidOptions = errors.New("process: invalid options")
	// ErrGaveUp is wrapped by the error Run returns when a message's last
	// attempt failed and Options.DeadLetter has no Topic. The error names
	// the message and wraps the handler's last error too. The message is
	// not acked: the partition's next owner (after a restart, this
	// instance) handles it again.
	ErrGaveUp = errors.New("process: gave up on a message")
	// ErrDeadLetter is wrapped by the error that Run sends on the
	// consumer's Errors(), in a *sarama.ConsumerError with the message's
	// topic and partition, when the produce of a message's dead letter
	// fails: once per message, however often it is tried again. The
	// error names the offset and the dead-letter topic, and wraps the
	// producer's error. Metrics.DeadLetterFailed counts them.
	ErrDeadLetter = errors.New("process: dead letter not produced")
	// ErrShareLimitUnknown is wrapped by the error that Run sends on the
	// consumer's Errors(), once per Run, when it cannot read a share
	// group's share.delivery.count.limit
	// (kafkaconsumer.Share.DeliveryCountLimit: no DESCRIBE_CONFIGS on the
	// group, or no answer within 10 s): Run then bounds each record's
	// attempts by DefaultShareDeliveryCountLimit, which may be more than
	// the group's limit (the broker archives a record at its limit,
	// before Run dead letters it). The error names the group and the
	// limit used, and wraps the cause.
	ErrShareLimitUnknown = errors.New("process: share group's delivery count limit not read")
)

// validate checks o.
func (o *Options) validate() error {
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidOptions, fmt.Sprintf(format, args...))
	}
	switch {
	case o.Concurrency < 1:
		return invalid("Concurrency must be at least 1, got %d", o.Concurrency)
	case o.Ordering < ByPartition || o.Ordering > Unordered:
		return invalid("Ordering must be ByPartition, ByKey or Unordered, got %s", o.Ordering)
	case o.Retry.Attempts < 0:
		return invalid("Retry.Attempts must not be negative, got %d", o.Retry.Attempts)
	case o.Retry.Backoff < 0:
		return invalid("Retry.Backoff must not be negative, got %s", o.Retry.Backoff)
	case o.Retry.MaxBackoff < 0:
		return invalid("Retry.MaxBackoff must not be negative, got %s", o.Retry.MaxBackoff)
	case o.Retry.MaxBackoff > 0 && o.Retry.MaxBackoff < o.Retry.Backoff:
		return invalid("Retry.MaxBackoff (%s) must not be shorter than Retry.Backoff (%s)", o.Retry.MaxBackoff, o.Retry.Backoff)
	}
	d := &o.DeadLetter
	switch {
	case d.Topic == "" && (d.Producer != nil || len(d.Brokers) > 0 || d.Config != nil):
		return invalid("DeadLetter has a producer but no Topic")
	case d.Topic == "":
	case d.Producer != nil && (len(d.Brokers) > 0 || d.Config != nil):
		return invalid("DeadLetter: set Producer, or Brokers and Config, not both")
	case d.Producer == nil && len(d.Brokers) == 0:
		return invalid("DeadLetter: Topic %q needs a Producer or Brokers", d.Topic)
	}
	return nil
}

// attempts returns the most handler calls per message.
func (r Retry) attempts() int { return max(r.Attempts, 1) }

// Run hands the messages of c to handler, up to opts.Concurrency at once,
// in the order opts.Ordering keeps, and acks each one once its handler
// returned nil, or once it was dead lettered (opts.DeadLetter) after its
// last attempt (opts.Retry). It reads c.Batches when c hands out batches,
// else c.Messages; nothing else may read them meanwhile.
//
// Run returns when ctx is done, when c closes (its channel is closed), or
// when a message's last attempt failed without a dead-letter topic
// (ErrGaveUp). Once ctx is done it starts no handler. It returns only
// after every handler it started returned: it cancels their context
// first (a handler that then fails is not a failed attempt), stops
// retries, and gives back the messages it did not handle
// (kafkaconsumer.Processing.GiveBack), so that a partition's commit
// stays before them and c's Close or Shutdown does not wait for them (on
// a share group: RELEASEs them). Stop c after Run returned (or to make it
// return); Run does not close it. It returns nil when ctx was done or c
// closed, an error wrapping ErrInvalidOptions at once for bad arguments
// (an Ordering other than Unordered on a share group's consumer among
// them), or the error wrapping ErrGaveUp. Call Run once per consumer.
//
// Through c.Processing, Run reports to c's Config.Metrics the retries,
// the dead letters, the failed produces of dead letters and the handlers
// in flight (see kafkaconsumer.Metrics), and sends a failed produce of a
// dead letter on c's Errors() (ErrDeadLetter), and, on a share group, a
// delivery count limit it could not read (ErrShareLimitUnknown).
func Run(ctx context.Context, c kafkaconsumer.Consumer, handler Handler, opts Options) error {
	if c == nil {
		return fmt.Errorf("%w: nil consumer", ErrInvalidOptions)
	}
	if handler == nil {
		return fmt.Errorf("%w: nil handler", ErrInvalidOptions)
	}
	if err := opts.validate(); err != nil {
		return err
	}
	p := c.Processing()
	var s *scheduler
	if share, ok := kafkaconsumer.ShareOf(c); ok {
		if err := opts.validateShare(); err != nil {
			return err
		}
		ss := shareSource{c: c, share: share, p: p}
		s = newScheduler(ctx, ss, handler, opts)
		s.useShare(ss, shareDeliveryLimit(ctx, share, p.Report))
	} else {
		s = newScheduler(ctx, consumerSource{c: c, p: p}, handler, opts)
	}
	s.start()
	if p.Batches() {
		batches := c.Batches()
	readBatches:
		for {
			select {
			case <-ctx.Done():
				break readBatches
			case <-s.failed:
				break readBatches
			case b, ok := <-batches:
				if !ok {
					break readBatches
				}
				s.add(b.Messages...)
			}
		}
	} else {
		messages := c.Messages()
	readMessages:
		for {
			select {
			case <-ctx.Done():
				break readMessages
			case <-s.failed:
				break readMessages
			case msg, ok := <-messages:
				if !ok {
					break readMessages
				}
				s.add(msg)
			}
		}
	}
	return s.stop()
}

// consumerSource is a source on a kafkaconsumer.Consumer.
type consumerSource struct {
	c kafkaconsumer.Consumer
	p kafkaconsumer.Processing
}

func (cs consumerSource) Ack(msg *sarama.ConsumerMessage)      { cs.c.Ack(msg) }
func (cs consumerSource) GiveBack(msg *sarama.ConsumerMessage) { cs.p.GiveBack(msg) }
func (cs consumerSource) Revoked(msg *sarama.ConsumerMessage) <-chan struct{} {
	return cs.p.Revoked(msg)
}
func (cs consumerSource) Retried(msg *sarama.ConsumerMessage)      { cs.p.Retried(msg) }
func (cs consumerSource) DeadLettered(msg *sarama.ConsumerMessage) { cs.p.DeadLettered(msg) }
func (cs consumerSource) DeadLetterFailed(msg *sarama.ConsumerMessage, err error) {
	cs.p.DeadLetterFailed(msg, err)
}
func (cs consumerSource) InFlight(delta int) { cs.p.InFlight(delta) }
