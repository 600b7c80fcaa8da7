package kafkaconsumer

// The consumer manager: the state of one running instance, and the
// Consumer methods that are not on the data path (Messages, Errors,
// Interrupt, Close, Shutdown, Stats). Its goroutines and the files they
// live in are drawn in ARCHITECTURE.md.

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/go-zookeeper/zk"
	"github.com/wvanbergen/kazoo-go"
	"gopkg.in/tomb.v1"
)

// partitionManagers maps the partitions this instance runs to their
// managers. A published map is never changed: the manager goroutine
// replaces it whole, so Ack reads it without a lock; its key is a plain
// struct, so a lookup neither formats nor allocates.
type partitionManagers map[TopicPartition]*partitionManager

// testHooks are the fault injection points of the tests (set through
// joinGroup; see export_test.go): each, when set, runs before the call it
// names, and an error it returns fails that call.
type testHooks struct {
	// releasePartition runs before each release of a partition's claim.
	releasePartition func(topic string, partition int32) error
	// commitRound runs before each commit round; its error fails the
	// round's commits.
	commitRound func() error
	// missingTopic runs when a topic of a static subscription is found
	// missing, before the watch on the topic list is set.
	missingTopic func(topic string)
	// watchOwner runs before each watch on the owner node of a partition
	// claimed by another instance; its error fails the watch.
	watchOwner func(topic string, partition int32) error
	// kafkaAddress gives the address that each Kafka connection dials in
	// place of addr, the broker's (a fault test's proxy to it).
	kafkaAddress func(addr string) string
	// readingMetadata runs on the manager goroutine before each of its
	// reads of Kafka's metadata (watchMetadata), not the poller's.
	readingMetadata func()
	// consumerHeartbeat runs before each ConsumerGroupHeartbeat of a
	// GroupProtocolConsumer member.
	consumerHeartbeat func()
	// joiningGroup runs before each JoinGroup of a classic
	// Kafka-coordinated member.
	joiningGroup func()
	// lookingUpTopics runs before each lookup of the names of topic IDs
	// of a GroupProtocolConsumer member's assignment (lookUpTopicNames).
	lookingUpTopics func(ids [][16]byte)
	// fetchingOffsets runs before each OffsetFetch request of the
	// consumer's offset store, with the partitions it asks for.
	fetchingOffsets func(tps []TopicPartition)
}

// consumerManager implements Consumer. Its goroutine (run) is owned by the
// tomb: Interrupt kills it, Close waits for it. run owns the partition
// managers.
type consumerManager struct {
	config           *Config      // a copy of the caller's; read only
	dialer           *kafkaDialer // dials every Kafka connection of config; closeKafka cuts them
	autoCommit       bool         // the caller's Consumer.Offsets.AutoCommit.Enable
	log              *slog.Logger // Config.Logger or the package Logger's, with group and instance
	group            string
	subscription     Subscription
	subscriptionJSON []byte
	hooks            *testHooks // the tests' fault injection points; nil in normal use
	// coord is the group's coordinator (coordinator.go), set by Join;
	// nil in the unit tests, which get the ZooKeeper one (coordinator).
	coord coordinator

	// kz is kazoo-go's connection for a custom Subscription's
	// WatchPartitions, opened by connect and closed by closeConnections;
	// nil for the subscriptions of this package, which the instance's
	// session (zkConn) watches.
	kz *kazoo.Kazoo
	// zkConn is the instance's own ZooKeeper session, Join's probe, and its
	// only one (but for kz): broker discovery, the registration, the watch
	// on the group's instances and their registrations, the claims and
	// the subscription's topics and watches (topics.go) go through it
	// (session.go). Closed by closeConnections. A sessionConn of zkProbe,
	// or a unit test's fake.
	zkConn zkSession
	// zkProbe is zkConn's go-zookeeper connection: the guard reads its
	// state and session ID, closeConnections closes it. nil in the unit
	// tests.
	zkProbe *zk.Conn
	// zkConns are zkConn's connections, cut by closeConnections.
	zkConns *connSet
	// kzGroup and instance are the group and this instance as kazoo-go
	// values, built on kazooValues: they do not connect.
	kzGroup  *kazoo.Consumergroup
	instance *kazoo.ConsumergroupInstance
	// registered tells whether the instance's registration node is ours to
	// delete. Used by run and, after it, by closeConnections.
	registered bool
	// ownersMissing is set when the join found the group's owners node
	// missing (a new group): the first batch of claims creates the
	// topics' nodes below it before its multis, instead of after they
	// failed for them (claimBatch.run). Taken by that batch.
	ownersMissing atomic.Bool

	client       sarama.Client // the first fetcher's, also for metadata
	offsetClient sarama.Client // the offset store's (see openKafka)
	groupClient  sarama.Client // CoordinatorKafka's group requests (see connectKafka); nil otherwise
	fetchers     []fetcher     // the partition consumers' (see fetcherOf)
	offsets      *offsetStore  // nil until connect made it
	// reads reads the committed offsets of partitions that start alone,
	// together (committedReads); made with offsets.
	reads *committedReads

	t tomb.Tomb // the manager goroutine: run's first line defers t.Done

	// watches holds the subscription's watches that have not fired yet;
	// used by the manager goroutine only (watchSubscription).
	watches watchCache
	// metadataPoll is the goroutine that polls Kafka's metadata with
	// DiscoverFromKafka, or nil; used by the manager goroutine only, which
	// stops it (stopMetadataPoller).
	metadataPoll *metadataPoller
	// marked maps the registered instances whose registration was read
	// to whether it has this package's mark (see originalsRegistered);
	// originals is set while an instance without it is registered. Used
	// by the manager goroutine only.
	marked    map[string]bool
	originals bool
	// departures are the departed static members whose grace is not over,
	// as departedMembers found them last (static.go); recordedShare is
	// this instance's share as written in its static record, when
	// shareRecorded. Used by the manager goroutine only (and, after it,
	// by closeConnections).
	departures    map[string]departure
	recordedShare map[string][]int32
	shareRecorded bool
	// awaiting are the partitions this instance takes if their departed
	// owner does not return within its grace (see awaitingReturn), for
	// Stats; written by run only.
	awaiting atomic.Pointer[[]PartitionStats]

	// pms holds the partition managers, for Ack; written by run only.
	pms atomic.Pointer[partitionManagers]
	// ackCache holds, per partition number modulo ackCacheSize, the
	// partition manager that Ack looked up last, so that Ack does not hash
	// the topic of every message. A cached manager that was retired is
	// looked up again.
	ackCache [ackCacheSize]atomic.Pointer[partitionManager]

	// kafkaCalls counts the goroutines of Kafka calls that no partition
	// manager waits for: those that finish closing the partition
	// consumers of stopped partitions (closeInBackground), and those of
	// the requests of starting partitions (partitionManager.call,
	// consumePartition, offsetBatch.get, committedReads.read). closeKafka
	// waits for them.
	kafkaCalls sync.WaitGroup

	// The marker goroutine (markLoop), started by Join and stopped by
	// shutdown, marks the partitions' acked prefixes every markInterval.
	markStop, markDone chan struct{}

	// The committer goroutine (commitLoop), started by Join and stopped by
	// closeKafka, runs the commit rounds that commit asks for.
	commitRequest chan struct{} // a token per round asked for; buffer 1
	commitStop    chan struct{} // closed by closeKafka to stop it
	commitDone    chan struct{} // closed by commitLoop when it returns
	commitMu      sync.Mutex    // guards nextRound and commitStopped
	// nextRound is closed when the commit round asked for last is over;
	// nil when none is asked for.
	nextRound     chan struct{}
	commitStopped bool

	orphanMu sync.Mutex // guards orphans
	// orphans are partitions whose owner node may still hold this
	// instance's ID though no partition manager runs them: a release that
	// failed, a claim whose outcome was lost, a lost session. The manager
	// goroutine deletes those nodes (releaseOrphans).
	orphans map[TopicPartition]bool

	// shutdownCtxDone is closed (by markShutdownCtxDone, once) when the
	// context of a Shutdown, or of a JoinContext that gives up, is done:
	// stopping partitions stop waiting for acks, and the rest of the
	// shutdown is bounded step by step (bound).
	shutdownCtxDone     chan struct{}
	shutdownCtxDoneOnce sync.Once
	// shutdownCtxDoneAt is when shutdownCtxDone was closed (UnixNano); 0
	// before.
	shutdownCtxDoneAt atomic.Int64
	// firstRound is closed by the manager goroutine when it made its first
	// distribution; claims receives a token, without blocking the sender,
	// when a partition is claimed. JoinContext waits on them.
	firstRound chan struct{}
	claims     chan struct{}

	// fence is the fencing state (fence.go): raised by the guard goroutine
	// when the ZooKeeper session may have expired, lifted when it answers
	// again. fencedAt is when it was raised last; guard goroutine only.
	fence    fence
	fencedAt time.Time
	// fenceBy is the fence's deadline, as the time since fenceBase (a
	// monotonic clock reading, set by Join): the guard moves it with every
	// answered heartbeat, and the hand-out path checks it (see
	// pastFenceDeadline); 0 until the guard runs.
	fenceBy   atomic.Int64
	fenceBase time.Time
	// negotiated is the session timeout that ZooKeeper negotiated, in ms;
	// 0 until known (connectResponseConn records it).
	negotiated *atomic.Int64
	// zkStateChanged receives a token, without blocking the sender, when
	// the state of the session changes (notifyStates); the guard reads it.
	zkStateChanged chan struct{}
	// The guard goroutine (guard), started by connect once registered and
	// stopped by shutdown after the partitions stopped.
	guardStop, guardDone chan struct{}
	// zkCalls counts the goroutines of requests on zkConn that zkCall or
	// the guard made; closeConnections waits for them after it closed
	// zkConn, which ends every request.
	zkCalls sync.WaitGroup
	// handOutStopped receives a token, without blocking the sender, when a
	// partition manager stops handing out (takeBackAll waits on it).
	handOutStopped chan struct{}
	// hold keeps the partition managers from sending on the channel
	// while a stopping partition searches it (takeback.go).
	hold handOutHold
	// takeBackMu is held by whoever receives from the channel to take
	// messages back, other than Close: a stopping partition's search
	// (withdrawUnread), which sends back what is not its own, and the
	// fence's take-back (takeBackUnread), so that neither receives
	// between the other's receives and sends back.
	takeBackMu sync.Mutex

	messages chan *sarama.ConsumerMessage // closed by shutdown, after every partition manager stopped
	batches  chan *Batch                  // with BatchSize; closed as messages is
	// closedMessages and closedBatches are closed channels: what Messages
	// and Batches return when the consumer hands out the other kind;
	// wrongChannelLogOnce logs that once.
	closedMessages      chan *sarama.ConsumerMessage
	closedBatches       chan *Batch
	wrongChannelLogOnce sync.Once
	errors              chan error // closed by shutdown (closeErrors), after every sender of the consumer's own stopped
	// errorsSink orders sendError with closeErrors, for the senders that
	// are not the consumer's (Processing.DeadLetterFailed).
	errorsSink errorSink
}

// Messages implements Consumer.
func (cm *consumerManager) Messages() <-chan *sarama.ConsumerMessage {
	if cm.config.BatchSize > 0 {
		cm.wrongChannelLogOnce.Do(func() {
			cm.logf(slog.LevelError, "Messages() called on a consumer set to batches (Config.BatchSize %d): it returns a closed channel; read Batches().", cm.config.BatchSize)
		})
		return cm.closedMessages
	}
	return cm.messages
}

// Errors implements Consumer.
func (cm *consumerManager) Errors() <-chan error { return cm.errors }

// Interrupt implements Consumer.
func (cm *consumerManager) Interrupt() { cm.t.Kill(nil) }

// Close implements Consumer.
func (cm *consumerManager) Close() error {
	cm.Interrupt()
	return cm.t.Wait()
}

// Shutdown implements Consumer.
func (cm *consumerManager) Shutdown(ctx context.Context) error {
	cm.Interrupt()
	select {
	case <-cm.t.Dead():
		return cm.t.Err()
	case <-ctx.Done():
	}
	cm.markShutdownCtxDone()
	if err := cm.t.Wait(); err != nil {
		return errors.Join(ctx.Err(), err)
	}
	return ctx.Err()
}

// markShutdownCtxDone records that the context of a Shutdown (or of a
// failed JoinContext) is done: stopping partitions stop waiting for acks,
// no coordinator is looked up and no Kafka connection dialed any more (the
// dials in flight end), and the remaining steps end within their bounds
// (see bound). Safe from any goroutine, more than once.
func (cm *consumerManager) markShutdownCtxDone() {
	cm.shutdownCtxDoneOnce.Do(func() {
		cm.shutdownCtxDoneAt.Store(time.Now().UnixNano())
		if cm.offsets != nil {
			cm.offsets.noLookup.Store(true)
		}
		cm.dialer.stopDialing(errDialerClosed)
		close(cm.shutdownCtxDone)
	})
}

// After a Shutdown's context is done, the rest of the shutdown is bounded
// step by step, so that Shutdown returns within the context's deadline +
// 5 s (ARCHITECTURE.md, "Bounds"). Each constant is the end of a step, counted from the moment the
// context was done: the partitions' final commits (commitsAfterCtxDone)
// and releases (stopsAfterCtxDone), the last commit rounds
// (kafkaAfterCtxDone), the deregistration (zookeeperAfterCtxDone); closing
// the ZooKeeper connections takes the rest (about a second).
const (
	commitsAfterCtxDone   = 1500 * time.Millisecond
	stopsAfterCtxDone     = 2 * time.Second
	kafkaAfterCtxDone     = 3 * time.Second
	zookeeperAfterCtxDone = 4 * time.Second
)

// bound returns deadline, or the end of the given step after a Shutdown's
// context was done (see stopsAfterCtxDone) when that is earlier.
func (cm *consumerManager) bound(deadline time.Time, step time.Duration) time.Time {
	if at := cm.shutdownCtxDoneAt.Load(); at != 0 {
		if end := time.Unix(0, at).Add(step); end.Before(deadline) {
			return end
		}
	}
	return deadline
}

// Stats implements Consumer.
func (cm *consumerManager) Stats() []PartitionStats {
	pms := *cm.pms.Load()
	result := make([]PartitionStats, 0, len(pms))
	for _, pm := range pms {
		if !pm.claimOnly {
			result = append(result, pm.stats())
		}
	}
	if awaiting := cm.awaiting.Load(); awaiting != nil {
		result = append(result, *awaiting...)
	}
	sort.Slice(result, func(i, j int) bool { return result[i].TopicPartition.less(result[j].TopicPartition) })
	return result
}

// sendError passes err to the Errors channel, or logs it when the user asked
// for no errors or is not reading them fast enough. It never blocks.
func (cm *consumerManager) sendError(err error) {
	cm.errorsSink.send(cm.errors, cm.config.Consumer.Return.Errors, cm.log, err)
}

// closeErrors closes the Errors channel, once: sendError logs what comes
// later.
func (cm *consumerManager) closeErrors() {
	cm.errorsSink.close(cm.errors)
}

// errorSink orders the sends to a consumer's Errors channel with its
// close. The zero value is ready.
type errorSink struct {
	mu     sync.RWMutex // held to read while sending, to write while closing
	closed bool         // set by close
}

// send passes err to errs, or logs it on log when report is false
// (Consumer.Return.Errors), after close, or when errs is full. It never
// blocks.
func (s *errorSink) send(errs chan<- error, report bool, log *slog.Logger, err error) {
	if !report {
		logf(log, slog.LevelError, "Error: %s", err)
		return
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		logf(log, slog.LevelError, "Error after Close: %s", err)
		return
	}
	select {
	case errs <- err:
	default:
		logf(log, slog.LevelError, "Errors channel full; dropped error: %s", err)
	}
}

// close closes errs, once: send logs what comes later.
func (s *errorSink) close(errs chan error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	close(errs)
}

// logf writes a line of this consumer at level (see Config.Logger).
func (cm *consumerManager) logf(level slog.Level, format string, args ...interface{}) {
	logf(cm.log, level, format, args...)
}
