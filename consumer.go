package kafkaconsumer

// The public API of a running instance: the Consumer interface, the types
// it returns, and Join and JoinContext. Their implementation is
// consumerManager (consumer_manager.go); how Join connects and Close
// closes is in lifecycle.go.

import (
	"context"
	"time"

	"github.com/IBM/sarama"
)

// Consumer is a running instance of a consumer group. Its methods are safe
// for concurrent use.
type Consumer interface {
	// Interrupt starts the shutdown of the consumer and returns at once.
	// When you are done with a consumer, call Close or Interrupt, or it
	// keeps running. Calling it more than once, or after Close, does nothing.
	Interrupt()

	// Close shuts the consumer down and waits until it is done: every
	// partition waits up to MaxProcessingTime for the acks of what it
	// handed out, commits what was acked and releases its claim; then the
	// instance is deregistered, its connections are closed, and the
	// Messages, Batches and Errors channels are closed. It returns nil when
	// all of that completed, else what did not (below); a second call
	// returns the same. Messages still unread in the channels are taken
	// back: not committed, they are consumed again by the next owner of
	// their partition.
	//
	// Bounds, whether ZooKeeper is reachable, down, frozen or cut off, and
	// whether a broker answers or hangs (ARCHITECTURE.md, "Bounds", derives
	// them):
	//   - the partitions stop, all at once, within MaxProcessingTime + 5 s;
	//   - Kafka requests and dials still in flight 5 s after that fail at
	//     once: Close cuts the consumer's Kafka connections under them and
	//     ends its dials, so a dial to an address that never answers does
	//     not wait out Net.DialTimeout (see Config: a Net.Proxy.Dialer
	//     without DialContext cannot be cut);
	//   - Close returns within MaxProcessingTime + the ZooKeeper session
	//     timeout + 10 s.
	//
	// What did not complete is returned joined (test it with errors.Is):
	// ErrCommitTimeout when a final commit was not confirmed (the next owner
	// consumes again what was acked after the last confirmed commit),
	// ErrReleaseFailed when a claim could not be released (it goes when the
	// ZooKeeper session expires), or the error of deregistering.
	Close() error

	// Shutdown shuts the consumer down as Close does, but waits for the
	// acks of handed-out messages (at most MaxProcessingTime, as Close)
	// only until ctx is done, as http.Server.Shutdown waits for
	// connections. It returns what Close would have returned when every
	// partition stopped before ctx was done; else the partitions stop
	// waiting for acks at once, the consumer is closed as by Close, and it
	// returns ctx.Err() joined with whatever else did not complete (test
	// it with errors.Is(err, context.DeadlineExceeded)). The messages not
	// acked are consumed again by the next owner of their partition.
	//
	// Bounds (ARCHITECTURE.md, "Bounds", derives them):
	//   - Shutdown returns within ctx's deadline + 5 s, whatever hangs;
	//     without a deadline, within Close's bound;
	//   - once ctx is done, no Kafka connection is dialed any more, and
	//     the dials in flight end at once;
	//   - with Kafka and ZooKeeper reachable, what runs after ctx is done
	//     takes milliseconds.
	//
	// Give ctx a deadline 5 s short of the one you must meet (see the
	// README on Kubernetes' grace period). Shutdown may be called after
	// Interrupt, and while Close or another Shutdown runs: each waits for
	// the same shutdown, and an expired ctx cuts the waits for acks short
	// for all of them. After the consumer is closed it returns at once
	// what Close returns.
	Shutdown(ctx context.Context) error

	// Messages returns the channel of messages to process; Ack each of them
	// when it is processed. The channel is closed at the end of Close.
	//
	// One owner at a time: an instance hands out nothing from the earliest
	// moment at which its ZooKeeper session could have expired on the
	// server, since another instance takes its partitions at that expiry:
	// 0.8 × the negotiated session timeout after the send of the last
	// request that ZooKeeper answered. Then the instance is fenced: every
	// partition stops handing out, the messages still unread in this
	// channel are taken back (handed out again later), and nothing is
	// committed; acks are kept. When the same session answers again the
	// partitions go on where they were, and the acks are committed; when
	// the session expired, the partitions stop without committing (their
	// next owners consume again what was acked since the last commit), and
	// the instance registers again and gets a share back.
	//
	// A partition that stops in a rebalance waits up to MaxProcessingTime
	// for the acks of what it handed out, then takes back its messages
	// still unread in this channel before it releases its claim (Close
	// takes them back at once): they are not committed, and its next owner
	// consumes them; none is received from this instance after the
	// release. The other partitions' messages keep their order, unless a
	// receive happens during that take-back, which lasts microseconds:
	// then a message of another partition may come after a later one of
	// the same partition.
	//
	// A consumer set to batches (Config.BatchSize) hands out on Batches
	// instead: Messages then returns a closed channel, so that a loop over
	// it ends at once rather than waiting for ever, and logs an error once.
	Messages() <-chan *sarama.ConsumerMessage

	// Batches returns the channel of batches to process when
	// Config.BatchSize is set: each *Batch holds up to BatchSize messages
	// of one partition in offset order (see BatchSize and BatchLinger).
	// Ack each message (Ack), or all of a batch at once (AckBatch).
	// Everything Messages' documentation says holds for batches:
	// MaxProcessingTime, MaxPendingAcks (a batch is cut to the room left),
	// the fence, Close and Shutdown; a batch still unread in the channel
	// when a stopping partition, Close or the fence takes messages back is
	// taken back whole. Up to 4 batches wait in the channel. The channel
	// is closed at the end of Close. A consumer that hands out single
	// messages (BatchSize 0) returns a closed channel here, and logs an
	// error once.
	Batches() <-chan *Batch

	// AckBatch acks every message of b, as Ack does each, under one lock
	// of its partition. Acking nil, an empty batch, or a batch twice does
	// nothing; some of its messages may have been acked with Ack before.
	AckBatch(b *Batch)

	// Pause stops a partition of this instance's share: it keeps its
	// claim, but fetches and hands out nothing until Resume. Messages or
	// batches of the partition that sit in the channel already (up to
	// ChannelBufferSize messages, or 4 batches) are still received. Acks
	// of what was handed out still commit, and the partition still stops
	// within MaxProcessingTime in a rebalance or Close.
	// PartitionStats.PausedByUser shows it. A rebalance that keeps the
	// partition on this instance keeps it paused; a partition that moves
	// to another instance is not paused there, and one that comes back
	// (or that this instance runs again after its ZooKeeper session
	// expired) starts unpaused: the pause is this instance's, not the
	// group's. Pausing a partition this instance does not run returns an
	// error wrapping ErrPartitionNotHeld that names it; pausing a paused
	// partition does nothing.
	Pause(topic string, partition int32) error

	// Resume lets a partition paused by Pause fetch and hand out again,
	// from where it stopped. Resuming a partition this instance does not
	// run returns an error wrapping ErrPartitionNotHeld; resuming one that
	// is not paused does nothing.
	Resume(topic string, partition int32) error

	// Errors returns the channel of errors that the consumer met and worked
	// around (when Config.Consumer.Return.Errors is true, the default):
	// partition consumer and offset commit errors as *sarama.ConsumerError;
	// ErrRegistrationLost when the ZooKeeper session was lost; and, each in
	// a *sarama.ConsumerError naming its partition, ErrMaxPendingAcks (a
	// partition paused), ErrLogTruncated (a partition started over),
	// ErrCommitTimeout and ErrReleaseFailed (a partition stopped in a
	// rebalance without completing its final commit or releasing its
	// claim). Test them with errors.Is. Reading it is optional: when it is
	// full, errors are logged and dropped, never waited for. It is closed
	// at the end of Close.
	Errors() <-chan error

	// Ack marks a message from Messages as processed. Acks may come in any
	// order and from any goroutine: per partition, the offset committed is
	// that of the first handed-out message not acked yet (or one past the
	// last one handed out), following sarama's convention that a committed
	// offset is the next message to read: acking message N, with every
	// earlier one acked, commits N+1. The acked prefix is marked for the
	// next commit within 100 ms (or AutoCommit.Interval, when
	// shorter); commits go out every
	// Config.Consumer.Offsets.AutoCommit.Interval, and when a partition
	// stops, with every ack made before it stopped. Ack never blocks on the
	// network and does not allocate. Acking nil, a message twice, or a
	// message of a partition this instance no longer owns (after a
	// rebalance or Close) does nothing but, for the last case, log a line.
	Ack(*sarama.ConsumerMessage)

	// Processing returns what a layer that processes this consumer's
	// messages concurrently needs beyond Messages, Batches and Ack: when a
	// partition is revoked, a way to give messages back unprocessed, and
	// the consumer's Metrics (see Processing; package process uses it).
	Processing() Processing

	// Stats returns the state of each partition this instance runs, and
	// of those it takes if their departed owner does not return in time
	// (see PartitionStats.AwaitingReturn), sorted by topic and partition.
	// It does not block on the network. After Close it returns nothing.
	Stats() []PartitionStats
}

// TopicPartition names a partition of a topic.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// Rebalance is what Config.OnRebalance receives: the partitions an instance
// stopped and started consuming, each sorted by topic and partition.
type Rebalance struct {
	Revoked  []TopicPartition
	Assigned []TopicPartition
}

// PartitionStats is the state of one partition that an instance runs.
type PartitionStats struct {
	TopicPartition
	// Claimed is true while the instance owns the partition in ZooKeeper;
	// until then it waits for the previous owner. It turns false when the
	// ZooKeeper session that held the claim is lost.
	Claimed bool
	// Paused is true while the partition hands out nothing because
	// MaxPendingAcks handed-out messages are not committable yet (the
	// oldest of them is not acked); see ErrMaxPendingAcks.
	Paused bool
	// PausedByUser is true between Consumer.Pause and Consumer.Resume of
	// the partition: it fetches and hands out nothing.
	PausedByUser bool
	// LastHandedOut is the offset of the last message handed out on
	// Messages, or -1.
	LastHandedOut int64
	// LastAcked is the highest offset acked, or -1.
	LastAcked int64
	// HandedOut and Acked count the messages handed out on Messages, and
	// acked, since this instance started running the partition (they
	// start from 0 again when it runs the partition again after a
	// rebalance, as Prometheus counters may).
	HandedOut, Acked uint64
	// Pending is the number of handed-out messages not acked yet.
	Pending int
	// Committed is the offset to commit: the next message to read after
	// the acked prefix, or the committed offset the partition started from
	// when nothing was acked yet. It reaches Kafka within
	// Config.Consumer.Offsets.AutoCommit.Interval plus 100 ms. -1 when
	// unknown.
	Committed int64
	// HighWaterMark is the offset the next message produced to the
	// partition will get, as of the last fetch; -1 when not consuming.
	HighWaterMark int64
	// Lag is HighWaterMark - Committed: the messages not processed yet,
	// or -1 when either is unknown.
	Lag int64
	// BufferedBytes is the bytes of messages fetched for the partition
	// and not handed out yet: its share of Config.MaxBufferedBytes. A
	// partition paused, or waiting at MaxPendingAcks, has none: what it
	// fetched waits outside the budget.
	BufferedBytes int64
	// AwaitingReturn, when not empty, is the Config.InstanceID of the
	// departed instance whose return the group waits for
	// (Config.RestartGrace): the partition is that instance's, and nobody
	// consumes it until it comes back, or until its grace ends at
	// AwaitingReturnUntil (on this instance's clock), when the partition
	// falls to this instance. Stats lists such a partition though the
	// instance does not run it, with Claimed false and the offsets and
	// Lag -1; each partition awaiting its owner's return is listed by
	// one instance of the group, the one that takes it if the owner does
	// not return.
	AwaitingReturn      string
	AwaitingReturnUntil time.Time
}

// Join joins a consumer group and returns its running Consumer instance.
// It is JoinContext with context.Background() (see there), except that it
// returns once the instance is registered, without waiting for the claims
// of its first share: its partitions are claimed in the background (see
// PartitionStats.Claimed), as the original package did: without a
// deadline, that wait would have no bound of its own, since it lasts as
// long as a previous owner holds a claim.
func Join(group string, subscription Subscription, zookeeper string, config *Config) (Consumer, error) {
	return joinGroup(context.Background(), group, subscription, zookeeper, config, false, nil)
}

// JoinContext joins a consumer group and returns its running Consumer
// instance once it consumes its share of the subscription: it is
// registered, and it has claimed every partition that the first
// distribution gave it. On any error, or when ctx is done first, it
// returns the error (wrapping one of the Err* values of this package, an
// error of sarama or ZooKeeper, or ctx.Err()) and leaves nothing running
// or registered. Cancelling ctx after JoinContext returned does nothing:
// stop the consumer with Shutdown, Close or Interrupt.
//
//   - group is the name of the group; all instances of a group use the same
//     one. It must not be empty nor contain '/'.
//   - subscription says what the group consumes; every instance should use
//     the same. An instance may consume any share of it, none included.
//   - zookeeper is the ZooKeeper connection string of the Kafka cluster,
//     e.g. "zk1:2181,zk2:2181,zk3:2181/chroot".
//   - config is the configuration; nil means NewConfig().
//
// The brokers are found as Config.Discovery, Config.Listener and
// Config.Brokers say: an error wrapping ErrNoBrokers, naming the
// listeners found, when none fits; ErrInvalidSubscription for a custom
// Subscription with DiscoverFromKafka. JoinContext connects to Kafka
// before it registers the instance.
//
// Bounds (ARCHITECTURE.md, "Bounds", derives them):
//   - the first ZooKeeper session: config.Zookeeper.Timeout, and up to a
//     second more to close a failed attempt;
//   - connecting: the clients' own timeouts (about a second per
//     ZooKeeper server; Metadata.Retry.Max + 1 tries of every Kafka
//     broker, each dial up to Net.DialTimeout); a ZooKeeper request up to
//     the session timeout;
//   - the claims: a partition still owned by another instance waits for
//     it: up to its MaxProcessingTime + 5 s when it stops in a rebalance,
//     its ZooKeeper session timeout when it died;
//   - ctx, checked between those steps; while JoinContext connects to
//     Kafka, ctx also cuts its Kafka connections and ends its dials, so
//     that neither a dial to an address that never answers nor a broker
//     that answers nothing holds it up (see Config: a Net.Proxy.Dialer
//     without DialContext cannot be cut). When ctx is done first,
//     JoinContext stops what it started as Close does and returns
//     ctx.Err(), joined with the errors of that stop.
func JoinContext(ctx context.Context, group string, subscription Subscription, zookeeper string, config *Config) (Consumer, error) {
	return joinGroup(ctx, group, subscription, zookeeper, config, true, nil)
}

func (tp TopicPartition) less(other TopicPartition) bool {
	return tp.Topic < other.Topic || (tp.Topic == other.Topic && tp.Partition < other.Partition)
}
