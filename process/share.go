package process

// Run on a share group (GroupProtocolShare, KIP-932): the broker keeps the
// records' state, so a retry is a RELEASE (the broker delivers the record
// again, to any member, with its delivery count one higher), a message
// without a dead-letter topic is REJECTed, and nothing is revoked.

import (
	"context"
	"fmt"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer"
)

// DefaultShareDeliveryCountLimit is the delivery count limit of a share
// group that Run assumes when it cannot read the group's
// (kafkaconsumer.Share.DeliveryCountLimit, within shareLimitTimeout),
// which it reports (ErrShareLimitUnknown): the broker's default
// group.share.delivery.count.limit.
const DefaultShareDeliveryCountLimit = 5

// shareLimitTimeout bounds Run's read of the group's delivery count
// limit.
const shareLimitTimeout = 10 * time.Second

// limitReader reads a share group's delivery count limit:
// kafkaconsumer.Share, or a unit test's fake.
type limitReader interface {
	DeliveryCountLimit(ctx context.Context) (int, error)
}

// shareDeliveryLimit returns the group's delivery count limit, or
// DefaultShareDeliveryCountLimit when it cannot be read, which it
// reports (ErrShareLimitUnknown, wrapping the cause, which names the
// group) unless ctx is done: then Run returns at once.
func shareDeliveryLimit(ctx context.Context, r limitReader, report func(error)) int {
	readCtx, cancel := context.WithTimeout(ctx, shareLimitTimeout)
	defer cancel()
	n, err := r.DeliveryCountLimit(readCtx)
	if err == nil {
		return n
	}
	if ctx.Err() == nil {
		report(fmt.Errorf("%w: %w; Run bounds each record's attempts by DefaultShareDeliveryCountLimit, %d, which may be more than the group's limit",
			ErrShareLimitUnknown, err, DefaultShareDeliveryCountLimit))
	}
	return DefaultShareDeliveryCountLimit
}

// shareSource is the source of a share group's consumer: GiveBack is a
// RELEASE, and no message is ever revoked.
type shareSource struct {
	c     kafkaconsumer.Consumer
	share kafkaconsumer.Share
	p     kafkaconsumer.Processing
}

func (ss shareSource) Ack(msg *sarama.ConsumerMessage)      { ss.c.Ack(msg) }
func (ss shareSource) GiveBack(msg *sarama.ConsumerMessage) { ss.share.Release(msg) }

// Revoked returns nil, a channel never closed: the records' locks bound a
// share group member's hold, not a revocation.
func (ss shareSource) Revoked(*sarama.ConsumerMessage) <-chan struct{} { return nil }
func (ss shareSource) Retried(msg *sarama.ConsumerMessage)             { ss.p.Retried(msg) }
func (ss shareSource) DeadLettered(msg *sarama.ConsumerMessage)        { ss.p.DeadLettered(msg) }
func (ss shareSource) DeadLetterFailed(msg *sarama.ConsumerMessage, err error) {
	ss.p.DeadLetterFailed(msg, err)
}
func (ss shareSource) InFlight(delta int)                 { ss.p.InFlight(delta) }
func (ss shareSource) Reject(msg *sarama.ConsumerMessage) { ss.share.Reject(msg) }
func (ss shareSource) Renew(msg *sarama.ConsumerMessage)  { ss.share.Renew(msg) }
func (ss shareSource) DeliveryCount(msg *sarama.ConsumerMessage) int {
	return ss.share.DeliveryCount(msg)
}

// shareActions is what the scheduler needs of a share group's consumer
// beyond source: shareSource, or a unit test's fake.
type shareActions interface {
	Reject(msg *sarama.ConsumerMessage)
	Renew(msg *sarama.ConsumerMessage)
	DeliveryCount(msg *sarama.ConsumerMessage) int
}

// validateShare checks that o can run on a share group: Unordered only.
func (o *Options) validateShare() error {
	if o.Ordering != Unordered {
		return fmt.Errorf("%w: Ordering is %s, but the consumer is a share group's (GroupProtocolShare), whose broker hands out records in no order: set Ordering to Unordered",
			ErrInvalidOptions, o.Ordering)
	}
	return nil
}

// useShare makes s run a share group's records: sh acts on them, and the
// group's delivery count limit is limit.
func (s *scheduler) useShare(sh shareActions, limit int) {
	s.sh, s.shareLimit = sh, limit
}

// shareAttempts returns the most handler calls per record on a share
// group: Retry's, at most the group's delivery count limit, so that the
// broker does not archive a record before Run dead letters it.
func (s *scheduler) shareAttempts() int {
	return min(s.opts.Retry.attempts(), s.shareLimit)
}

// addShare sets the attempts of it, a share group's record, from its
// delivery count: the deliveries before this one were attempts (of this
// member or another). A record delivered past its last attempt (its dead
// letter failed, or its lock expired during the last attempt) goes to its
// dead letter at once, or is rejected. It reports false when it was
// rejected. s.mu is held.
func (s *scheduler) addShare(it *item) bool {
	it.delivery = s.sh.DeliveryCount(it.msg)
	it.attempts = max(it.delivery-1, 0)
	if it.attempts < s.shareAttempts() {
		return true
	}
	it.err = fmt.Errorf("delivered %d times, past its last attempt", it.delivery)
	if s.dl == nil {
		s.sh.Reject(it.msg)
		return false
	}
	it.deadLetter = true
	return true
}

// finishShare is finish for a share group's record: success ACCEPTs it
// (after its dead letter too); a failure with attempts left RELEASEs it
// (the broker delivers it again); the last failure sends it to its dead
// letter, or REJECTs it without a dead-letter topic; a failed produce of
// its dead letter RELEASEs it, whose next delivery goes to its dead
// letter again, but at the delivery count limit, where a RELEASE would
// have the broker archive it: there it renews the record's lock and
// produces again after Retry's backoff. Once Run stops, the record is
// RELEASEd. s.mu is held.
func (s *scheduler) finishShare(l *lane, it *item, err error) {
	switch {
	case err == nil:
		if it.deadLetter {
			s.src.DeadLettered(it.msg)
		}
		s.complete(l, true)
	case s.stopping || s.ctx.Err() != nil:
		s.complete(l, false)
	case it.deadLetter && it.delivery >= s.shareLimit:
		s.sh.Renew(it.msg)
		s.wait(l, it, s.backoff(it.produces-1))
	case it.deadLetter:
		s.complete(l, false)
	case it.attempts < s.shareAttempts():
		it.err = err
		s.src.Retried(it.msg)
		s.complete(l, false)
	case s.dl != nil:
		it.err = err
		it.deadLetter = true
		s.push(l)
	default:
		s.sh.Reject(it.msg)
		s.dropFirst(l)
	}
}
