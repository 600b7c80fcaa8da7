package kafkaconsumer

// The share consumer (GroupProtocolShare, KIP-932): its public accessor
// (Share, ShareOf) and its implementation of Consumer. The member's
// heartbeat and assignment are in share_member.go, the fetch loop of each
// leader broker in share_fetch.go, the records held and their
// acknowledgements in share_acks.go, Join's part in share_join.go.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"gopkg.in/tomb.v1"
)

// Share is the accessor of a share group's acknowledgements beyond Ack:
// Release, Reject, Renew and the delivery count of a record. ShareOf returns it
// for a consumer of GroupProtocolShare; the Consumer interface stays as it
// is, so that its other implementations still compile. Its methods are
// safe for concurrent use, and do nothing (DeliveryCount: 0) for a
// message this consumer does not hold, after Close too.
type Share struct {
	sc *shareConsumer
}

// ShareOf returns the Share of c and true when c is a consumer of a share
// group (Config.GroupProtocol GroupProtocolShare), else a zero Share and
// false. It does not block.
func ShareOf(c Consumer) (Share, bool) {
	sc, ok := c.(*shareConsumer)
	if !ok {
		return Share{}, false
	}
	return Share{sc: sc}, true
}

// Release gives msg back to the broker, which delivers it again, to any
// member of the group, with a delivery count one higher (KIP-932's
// RELEASE). It returns at once: the release goes with the next request to
// msg's leader. A release that cannot count (see ErrShareAckRefused) is
// reported on Errors().
func (s Share) Release(msg *sarama.ConsumerMessage) {
	if s.sc != nil {
		s.sc.acknowledge(msg, ackRelease)
	}
}

// Reject tells the broker that msg cannot be processed: it is archived
// and never delivered again (KIP-932's REJECT). It returns at once, as
// Release.
func (s Share) Reject(msg *sarama.ConsumerMessage) {
	if s.sc != nil {
		s.sc.acknowledge(msg, ackReject)
	}
}

// Renew asks the broker to start msg's acquisition lock again
// (KIP-1222's RENEW, Kafka 4.2 and later, the group's
// share.renew.acknowledge.enable, true by default): msg stays held,
// to be acknowledged later, and is handed out to no one else meanwhile.
// It returns at once: the renew goes in a ShareAcknowledge of its own,
// and the consumer counts the new lock from that request's send. A renew
// that cannot count is reported on Errors() (ErrShareAckRefused); renew
// well before the lock's end.
func (s Share) Renew(msg *sarama.ConsumerMessage) {
	if s.sc != nil {
		s.sc.acknowledge(msg, ackRenew)
	}
}

// DeliveryCount returns how many times the broker delivered msg,
// counting this delivery (1 the first time), or 0 when this consumer does
// not hold msg (acknowledged already, its lock expired, never handed out
// by it).
func (s Share) DeliveryCount(msg *sarama.ConsumerMessage) int {
	if s.sc == nil || msg == nil {
		return 0
	}
	return s.sc.deliveryCount(msg)
}

// DeliveryCountLimit returns the group's share.delivery.count.limit: the
// deliveries after which the broker archives a record instead of
// delivering it again (a DescribeConfigs of the group, answered with the
// broker's group.share.delivery.count.limit, 5 by default, when the group
// does not set it). It blocks until a broker answered, ctx is done, or
// Net's timeouts passed; it needs DESCRIBE_CONFIGS on the group.
func (s Share) DeliveryCountLimit(ctx context.Context) (int, error) {
	if s.sc == nil {
		return 0, errors.New("kafkaconsumer: DeliveryCountLimit of a zero Share")
	}
	return s.sc.deliveryCountLimit(ctx)
}

// shareConsumer is a member of a share group: the Consumer of
// GroupProtocolShare.
type shareConsumer struct {
	config   *Config // a copy of Join's, with its own sarama configuration
	group    string
	sel      topicSelector
	log      *slog.Logger
	t        *groupTransport
	dialer   *kafkaDialer
	memberID string // the member's ID, chosen by this client (KIP-932)

	t0        tomb.Tomb          // the manager goroutine (run); killed by interrupt
	stopCtx   context.Context    // done once interrupt ran: ends the manager's requests
	stop      context.CancelFunc // cancels stopCtx
	cutWait   chan struct{}      // closed once (cutOnce) when a Shutdown's ctx is done: the wait for acks ends
	cutOnce   sync.Once
	refresh   chan struct{}                // cap 1: a fetcher asks the manager for metadata (a leader moved)
	closeErr  error                        // what the shutdown did not complete; written before t0.Done
	messages  chan *sarama.ConsumerMessage // unbuffered; closed by closeChannels, at the end of the shutdown, once every fetch loop ended
	batches   chan *Batch                  // with BatchSize (else nil): unbuffered; closed by closeChannels, as messages
	closedOut chan *Batch                  // what Batches returns without BatchSize: closed by setChannels
	closedIn  chan *sarama.ConsumerMessage // what Messages returns with BatchSize: closed by setChannels
	batchOnce sync.Once                    // the log line of Messages or Batches called on the wrong one

	errors     chan error // closed by closeChannels, at the end of the shutdown
	errorsSink errorSink  // orders sendError with that close

	mu       sync.Mutex                              // guards what follows, and every fetcher's acks
	held     map[*sarama.ConsumerMessage]*heldRecord // the records acquired and not acknowledged yet, by their message
	names    map[[16]byte]string                     // topic names by ID, from the metadata
	ids      map[string][16]byte                     // topic IDs by name
	leaders  map[TopicPartition]int32                // partition leaders, from the metadata
	assigned map[TopicPartition]struct{}             // the member's assignment, names resolved
	fetchers map[int32]*shareFetcher                 // the fetch loops by leader broker
	stats    map[TopicPartition]*shareCounts         // per assigned partition, for Stats
	pending  map[[16]byte][]int32                    // the broker's last assignment, by topic ID
	epoch    int32                                   // the member epoch
	beat     time.Duration                           // the heartbeat interval the coordinator last named; 0 before its first answer
}

// shareCounts are a partition's counts for Stats: handedOut and
// lastHandedOut counted by the fetch loops without sc.mu, the others
// under it.
type shareCounts struct {
	handedOut     atomic.Uint64
	lastHandedOut atomic.Int64
	acked         uint64
	lastAcked     int64
}

// Interrupt implements Consumer.
func (sc *shareConsumer) Interrupt() {
	sc.t0.Kill(nil)
	sc.stop()
}

// Close implements Consumer: the fetch loops stop handing out, the
// records acquired and not handed out (and those unread in the Messages
// channel) are released, the acknowledgements of what was handed out are
// awaited up to MaxProcessingTime and sent, what is still not
// acknowledged is released, the share sessions close, the member leaves
// the group (epoch -1) and the connections close. A fetch in flight ends
// first (at Consumer.MaxWaitTime, or 5 s later from a broker that
// hangs: it is not cut, which would end the share session), and each
// request of the shutdown takes at most 5 s (shareFinalTimeout), so Close
// returns within MaxProcessingTime + Consumer.MaxWaitTime + 15 s. It
// returns the error of the leave, if any; a second call returns the same.
func (sc *shareConsumer) Close() error {
	sc.Interrupt()
	_ = sc.t0.Wait()
	return sc.closeErr
}

// Shutdown implements Consumer: Close, whose wait for acknowledgements
// ends when ctx is done; it then returns ctx.Err() joined with Close's
// error, within ctx's deadline + Consumer.MaxWaitTime + 15 s whatever
// hangs, milliseconds after it with brokers that answer.
func (sc *shareConsumer) Shutdown(ctx context.Context) error {
	sc.Interrupt()
	select {
	case <-sc.t0.Dead():
		return sc.closeErr
	case <-ctx.Done():
		sc.cutOnce.Do(func() { close(sc.cutWait) })
	}
	_ = sc.t0.Wait()
	return errors.Join(ctx.Err(), sc.closeErr)
}

// Messages implements Consumer: the records acquired by this member, each
// handed out once while its acquisition lock holds. Ack (ACCEPT),
// Share.Release or Share.Reject each; a record not acknowledged within
// the group's share.record.lock.duration.ms goes back to the broker. The
// channel is unbuffered, whatever ChannelBufferSize: a record is handed
// out when the reader takes it, never after its lock expired, which a
// record waiting in a buffer could be. The channel is closed at the end
// of Close. With Config.BatchSize, the records come on Batches instead:
// Messages returns a closed channel, and logs an error once.
func (sc *shareConsumer) Messages() <-chan *sarama.ConsumerMessage {
	if sc.batches != nil {
		sc.batchOnce.Do(func() {
			sc.logf(slog.LevelError, "Messages() called on a share group's consumer set to batches (Config.BatchSize %d): it returns a closed channel; read Batches().", sc.config.BatchSize)
		})
		return sc.closedIn
	}
	return sc.messages
}

// Batches implements Consumer: with Config.BatchSize, the records
// acquired by this member in batches, each of up to BatchSize records of
// one partition in offset order, from one ShareFetch answer (BatchLinger
// is not waited: a batch is what one answer holds of a partition). A batch is handed out when the reader takes it, only while
// the locks of all its records hold: the channel is unbuffered, whatever
// ChannelBufferSize, and a record whose lock expired first is left out
// (ErrShareLockExpired on Errors(), as for Messages). AckBatch ACCEPTs a
// whole batch; Release, Reject and Renew (Share) take single records:
// to release a batch, release each of b.Messages. The channel is closed
// at the end of Close. Without BatchSize, it returns a closed channel,
// and logs an error once.
func (sc *shareConsumer) Batches() <-chan *Batch {
	if sc.batches != nil {
		return sc.batches
	}
	sc.batchOnce.Do(func() {
		sc.logf(slog.LevelError, "Batches() called on a share group's consumer that hands out single messages (Config.BatchSize is 0): it returns a closed channel; read Messages(), or set BatchSize.")
	})
	return sc.closedOut
}

// AckBatch implements Consumer: it accepts every record of b (KIP-932's
// ACCEPT), as Ack does each; it returns at once.
func (sc *shareConsumer) AckBatch(b *Batch) {
	if b == nil {
		return
	}
	for _, msg := range b.Messages {
		sc.Ack(msg)
	}
}

// errSharePause is what Pause and Resume return on a share consumer.
var errSharePause = fmt.Errorf("pausing a partition of a share group (GroupProtocolShare) is not supported: the broker hands its records to the other members; stop reading Messages instead: %w", errors.ErrUnsupported)

// Pause implements Consumer: a share group's partitions are not this
// member's alone, and it returns an error wrapping errors.ErrUnsupported.
func (sc *shareConsumer) Pause(topic string, partition int32) error { return errSharePause }

// Resume implements Consumer: see Pause.
func (sc *shareConsumer) Resume(topic string, partition int32) error { return errSharePause }

// Errors implements Consumer.
func (sc *shareConsumer) Errors() <-chan error { return sc.errors }

// Ack implements Consumer: it accepts msg (KIP-932's ACCEPT), sent with
// the next request to msg's leader. It returns at once; an
// acknowledgement that cannot count is reported on Errors() (see
// ErrShareAckRefused).
func (sc *shareConsumer) Ack(msg *sarama.ConsumerMessage) { sc.acknowledge(msg, ackAccept) }

// Processing implements Consumer: a share group has no revocation and
// nothing to give back, so only the metrics and DeadLetterFailed of the
// Processing it returns do something (see Processing).
func (sc *shareConsumer) Processing() Processing { return Processing{sc: sc} }

// Stats implements Consumer: a PartitionStats per assigned partition,
// Claimed true, with what was handed out and acknowledged (Ack, Release,
// Reject) since it was assigned, and Pending the records handed out and
// not acknowledged. Committed is -1: a share group commits no offsets.
func (sc *shareConsumer) Stats() []PartitionStats {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	pending := make(map[TopicPartition]int)
	for msg, r := range sc.held {
		if r.handedOut.Load() {
			pending[TopicPartition{Topic: msg.Topic, Partition: msg.Partition}]++
		}
	}
	result := make([]PartitionStats, 0, len(sc.assigned))
	for tp := range sc.assigned {
		c := sc.counts(tp)
		result = append(result, PartitionStats{TopicPartition: tp, Claimed: true, LastHandedOut: c.lastHandedOut.Load(), LastAcked: c.lastAcked,
			HandedOut: c.handedOut.Load(), Acked: c.acked, Pending: pending[tp], Committed: -1})
	}
	sort.Slice(result, func(i, j int) bool { return result[i].TopicPartition.less(result[j].TopicPartition) })
	return result
}

// counts returns the counts of tp, made when missing. sc.mu is held.
func (sc *shareConsumer) counts(tp TopicPartition) *shareCounts {
	c := sc.stats[tp]
	if c == nil {
		c = &shareCounts{lastAcked: -1}
		c.lastHandedOut.Store(-1)
		sc.stats[tp] = c
	}
	return c
}

// sendError passes err to Errors(), or logs it when the user asked for
// no errors, is not reading them fast enough, or after Close. It never
// blocks.
func (sc *shareConsumer) sendError(err error) {
	sc.errorsSink.send(sc.errors, sc.config.Consumer.Return.Errors, sc.log, err)
}

// closeChannels closes Messages (and Batches) and Errors, once, at the end of the
// shutdown: sendError logs what comes later.
func (sc *shareConsumer) closeChannels() {
	close(sc.messages)
	if sc.batches != nil {
		close(sc.batches)
	}
	sc.errorsSink.close(sc.errors)
}

func (sc *shareConsumer) logf(level slog.Level, format string, args ...any) {
	logf(sc.log, level, format, args...)
}
