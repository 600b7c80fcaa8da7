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
	"github.com/wvanbergen/kazoo-go"
	"gopkg.in/tomb.v1"
)

// partitionManagers maps the partitions this instance runs to their
// managers. A published map is never changed: the manager goroutine
// replaces it whole, so Ack reads it without a lock.
type partitionManagers map[topicPartition]*partitionManager

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

	kz *kazoo.Kazoo
	// zkConn is the instance's own ZooKeeper session, Join's probe: broker
	// discovery, the registration, the watch on the group's instances and
	// their registrations, and the claims go through it (session.go);
	// kazoo-go's (kz) watches the subscription. Closed by
	// closeConnections.
	zkConn sessionConn
	// zkConns are zkConn's connections, cut by closeConnections.
	zkConns  *connSet
	kzGroup  *kazoo.Consumergroup
	instance *kazoo.ConsumergroupInstance
	// registered tells whether the instance's registration node is ours to
	// delete. Used by run and, after it, by closeConnections.
	registered bool

	client       sarama.Client // the first fetcher's, also for metadata
	offsetClient sarama.Client // the offset store's (see connect)
	fetchers     []fetcher     // the partition consumers' (see fetcherOf)
	offsets      *offsetStore  // nil until connect made it

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

	// pms holds the partition managers, for Ack; written by run only.
	pms atomic.Pointer[partitionManagers]
	// ackCache holds, per partition number modulo ackCacheSize, the
	// partition manager that Ack looked up last, so that Ack does not hash
	// the topic of every message. A cached manager that was retired is
	// looked up again.
	ackCache [ackCacheSize]atomic.Pointer[partitionManager]

	// closers counts the goroutines that finish closing the partition
	// consumers of stopped partitions (closeInBackground), and those of
	// the Kafka requests of starting partitions (partitionManager.call,
	// consumePartition, offsetBatch.get); closeKafka waits for them.
	closers sync.WaitGroup

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
	orphans map[topicPartition]bool

	// hurry is closed (by hurryUp, once) when a Shutdown's context is
	// done: stopping partitions stop waiting for acks.
	hurry     chan struct{}
	hurryOnce sync.Once
	// hurriedAt is when hurry was closed (UnixNano); 0 before.
	hurriedAt atomic.Int64
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
	// parked receives a token, without blocking the sender, when a
	// partition manager stops handing out (takeBackAll waits on it).
	parked chan struct{}

	messages chan *sarama.ConsumerMessage // closed by shutdown, after every partition manager stopped
	batches  chan *Batch                  // with BatchSize; closed as messages is
	// closedMessages and closedBatches are closed channels: what Messages
	// and Batches return when the consumer hands out the other kind;
	// misuse logs that once.
	closedMessages chan *sarama.ConsumerMessage
	closedBatches  chan *Batch
	misuse         sync.Once
	errors         chan error // closed by shutdown, after every sender stopped
}

// Messages implements Consumer.
func (cm *consumerManager) Messages() <-chan *sarama.ConsumerMessage {
	if cm.config.BatchSize > 0 {
		cm.misuse.Do(func() {
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
	cm.hurryUp()
	if err := cm.t.Wait(); err != nil {
		return errors.Join(ctx.Err(), err)
	}
	return ctx.Err()
}

// hurryUp makes stopping partitions stop waiting for acks. Safe from any
// goroutine, more than once.
func (cm *consumerManager) hurryUp() {
	cm.hurryOnce.Do(func() {
		cm.hurriedAt.Store(time.Now().UnixNano())
		if cm.offsets != nil {
			cm.offsets.noLookup.Store(true)
		}
		close(cm.hurry)
	})
}

// After a Shutdown's context is done, the rest of the shutdown is bounded
// step by step, so that Shutdown returns within the context's deadline +
// 5 s: the partitions' final commits and releases end within hurryStop of
// it (the commits within hurryCommit), the last commit rounds within hurryKafka, the deregistration within
// hurryZookeeper; closing the ZooKeeper connections takes the rest (about
// a second).
const (
	hurryCommit    = 1500 * time.Millisecond
	hurryStop      = 2 * time.Second
	hurryKafka     = 3 * time.Second
	hurryZookeeper = 4 * time.Second
)

// bound returns deadline, or the end of the given step after a Shutdown's
// context was done (see hurryStop) when that is earlier.
func (cm *consumerManager) bound(deadline time.Time, step time.Duration) time.Time {
	if at := cm.hurriedAt.Load(); at != 0 {
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
		if !pm.hold {
			result = append(result, pm.stats())
		}
	}
	sort.Slice(result, func(i, j int) bool { return result[i].TopicPartition.less(result[j].TopicPartition) })
	return result
}

// sendError passes err to the Errors channel, or logs it when the user asked
// for no errors or is not reading them fast enough. It never blocks.
func (cm *consumerManager) sendError(err error) {
	if !cm.config.Consumer.Return.Errors {
		cm.logf(slog.LevelError, "Error: %s", err)
		return
	}
	select {
	case cm.errors <- err:
	default:
		cm.logf(slog.LevelError, "Errors channel full; dropped error: %s", err)
	}
}

// logf writes a line of this consumer at level (see Config.Logger).
func (cm *consumerManager) logf(level slog.Level, format string, args ...interface{}) {
	logf(cm.log, level, format, args...)
}
