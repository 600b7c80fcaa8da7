// Package kafkaconsumer lets many processes on many machines consume Kafka
// topics as one group. Membership and partition ownership are coordinated
// through ZooKeeper, in the layout of Kafka's old high-level consumer;
// messages are read, and offsets committed, through Kafka itself with
// IBM/sarama.
//
// Join a group, read Messages, and Ack every message once it is processed.
// Acks may come in any order: per partition, what is committed is the end
// of the acked prefix, so a crash never skips an unprocessed message
// (at-least-once delivery).
package kafkaconsumer

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/go-zookeeper/zk"
	"github.com/wvanbergen/kazoo-go"
	"gopkg.in/tomb.v1"
)

// Consumer is a running instance of a consumer group. Its methods are safe
// for concurrent use.
type Consumer interface {
	// Interrupt starts the shutdown of the consumer and returns at once.
	// When you are done with a consumer, call Close or Interrupt, or it
	// keeps running. Calling it more than once, or after Close, does nothing.
	Interrupt()

	// Close shuts the consumer down and waits until it is done: every
	// partition stops consuming, waits up to MaxProcessingTime for the acks
	// of the messages it handed out, commits what was acked and releases
	// its claim; then the Kafka and ZooKeeper connections are closed, the
	// instance is deregistered, and the Messages and Errors channels are
	// closed. Messages still buffered in the Messages channel are taken back
	// unprocessed: they are not committed, and the next owner of their
	// partition consumes them again.
	//
	// Close is bounded. The partitions stop, all at once, within
	// MaxProcessingTime + 5 s: acks until MaxProcessingTime, then the final
	// commit and the release of the claim. The Kafka connections close
	// within 5 s more: after that Close closes sarama's clients under its
	// last commit rounds, which cuts their retries short, though a dial or request
	// already in flight to a hung broker still takes up to Net.DialTimeout
	// or Net.ReadTimeout. ZooKeeper requests fail, rather than wait, while
	// no server answers (about a second per server). So with the defaults,
	// Close returns within MaxProcessingTime + 10 s + 30 s at worst, and
	// within MaxProcessingTime + 10 s when the brokers refuse connections
	// or are reachable.
	//
	// Close returns nil when all of that completed. Otherwise it returns
	// what did not (several errors joined; test them with errors.Is):
	// ErrCommitTimeout when a final commit was not confirmed (the next owner
	// consumes again what was acked after the last confirmed commit),
	// ErrReleaseFailed when a claim could not be released (it goes when the
	// ZooKeeper session expires), or the error of deregistering. A second
	// call returns the same.
	Close() error

	// Shutdown shuts the consumer down as Close does, but waits for the
	// acks of handed-out messages (at most MaxProcessingTime, as Close)
	// only until ctx is done, as http.Server.Shutdown waits for
	// connections: it returns nil, or what Close would have returned, when
	// every partition stopped before ctx was done.
	// When ctx is done first, the partitions stop waiting for acks at
	// once: each commits what was acked, releases its claim, and the
	// consumer is closed as by Close; the messages not acked are consumed
	// again by the next owner of their partition. Then Shutdown returns
	// ctx.Err(), joined with whatever else did not complete (test it with
	// errors.Is(err, context.DeadlineExceeded)).
	//
	// The final commits, the releases and the closing of the connections
	// still run after ctx is done: with Kafka and ZooKeeper reachable they
	// take milliseconds; at worst 5 s for the commits, 5 s for the offset
	// manager to close, plus the network timeouts described on Close. So
	// give ctx a deadline a few seconds short of the one you must meet (see
	// the README on Kubernetes' grace period).
	//
	// Shutdown may be called after Interrupt, and while Close or another
	// Shutdown runs: each waits for the same shutdown, and an expired ctx
	// cuts the waits for acks short for all of them. After the consumer is
	// closed it returns at once what Close returns.
	Shutdown(ctx context.Context) error

	// Messages returns the channel of messages to process; Ack each of them
	// when it is processed. The channel is closed at the end of Close.
	Messages() <-chan *sarama.ConsumerMessage

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

	// Stats returns the state of each partition this instance runs, sorted
	// by topic and partition. It does not block on the network. After
	// Close it returns nothing.
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
}

// Join joins a consumer group and returns its running Consumer instance.
// It is JoinContext with context.Background() (see there), except that it
// returns once the instance is registered, without waiting for the claims
// of its first share: its partitions are claimed in the background (see
// PartitionStats.Claimed), as the original package did: without a
// deadline, that wait would have no bound of its own, since it lasts as
// long as a previous owner holds a claim.
func Join(group string, subscription Subscription, zookeeper string, config *Config) (Consumer, error) {
	return joinGroup(context.Background(), group, subscription, zookeeper, config, false)
}

// JoinContext joins a consumer group and returns its running Consumer
// instance once it consumes its share of the subscription: it is
// registered, and it has claimed every partition that the first
// distribution gave it.
//
//   - group is the name of the group; all instances of a group use the same
//     one. It must not be empty nor contain '/'.
//   - subscription says what the group consumes; every instance should use
//     the same. An instance may consume any share of it, none included.
//   - zookeeper is the ZooKeeper connection string of the Kafka cluster,
//     e.g. "zk1:2181,zk2:2181,zk3:2181/chroot".
//   - config is the configuration; nil means NewConfig().
//
// JoinContext finds the Kafka brokers through their registrations in ZooKeeper,
// on each broker's first listener whose security protocol fits the sarama
// configuration's TLS and SASL settings, or the listener Config.Listener
// names; Config.Brokers replaces that discovery. When no broker fits it
// fails with an error wrapping ErrNoBrokers that names the listeners found.
// With Config.Discovery DiscoverFromKafka (for a KRaft cluster, whose
// ZooKeeper has no /brokers), the brokers are Config.Brokers and the
// partitions come from Kafka's metadata; a custom Subscription is refused
// then (ErrInvalidSubscription).
//
// It waits at most config.Zookeeper.Timeout for a first ZooKeeper
// session (and up to a second more to close a failed attempt). What
// follows is bounded by the clients: a ZooKeeper request fails with
// zk.ErrNoServer once every server refused or timed out (about a second
// each), and sarama gives up on Kafka after trying every broker
// Metadata.Retry.Max + 1 times, each dial taking up to Net.DialTimeout.
// It connects to Kafka before it registers the instance, so that the
// group never hands a share to an instance that cannot consume it. On any
// error it returns it (wrapping one of the Err* values of this package, or
// the error of sarama or ZooKeeper) and leaves nothing running or
// registered.
//
// The claims may take time: a partition still owned by another instance
// is claimed when that instance lets go of it, after up to its
// MaxProcessingTime + 5 s when it is stopping in a rebalance, or when the
// ZooKeeper session of an owner that died expires (Zookeeper.Timeout).
//
// ctx bounds all of it. When ctx is done before the consumer is running,
// JoinContext stops what it started (as Close does: it releases the
// claims it made and deregisters the instance) and returns ctx.Err(),
// joined with the errors of that stop if any; it leaves nothing running
// or registered. A step that cannot be interrupted, such as sarama's
// connection to the brokers, completes first, within its own timeouts;
// ctx is checked between the steps. Cancelling ctx after JoinContext
// returned does nothing: stop the consumer with Shutdown, Close or
// Interrupt.
func JoinContext(ctx context.Context, group string, subscription Subscription, zookeeper string, config *Config) (Consumer, error) {
	return joinGroup(ctx, group, subscription, zookeeper, config, true)
}

// joinGroup is Join (waitClaims false) and JoinContext (true).
func joinGroup(ctx context.Context, group string, subscription Subscription, zookeeper string, config *Config, waitClaims bool) (Consumer, error) {
	if group == "" || strings.Contains(group, "/") || group == "." || group == ".." {
		return nil, fmt.Errorf("%w: %q (it must be non-empty, without '/')", ErrInvalidGroup, group)
	}
	if subscription == nil {
		return nil, fmt.Errorf("%w: subscription is nil", ErrInvalidSubscription)
	}
	if v, ok := subscription.(interface{ validate() error }); ok {
		if err := v.validate(); err != nil {
			return nil, err
		}
	}
	if _, ok := subscription.(topicSelector); !ok && config != nil && config.Discovery == DiscoverFromKafka {
		return nil, fmt.Errorf("%w: a custom Subscription (%T) reads its partitions from ZooKeeper: it works with Config.Discovery DiscoverFromZookeeper only; with DiscoverFromKafka use TopicSubscription, StaticSubscription, WhitelistSubscription or BlacklistSubscription", ErrInvalidSubscription, subscription)
	}
	nodes, chroot, err := parseZookeeper(zookeeper)
	if err != nil {
		return nil, err
	}
	if config == nil {
		config = NewConfig()
	}
	if err := config.Validate(); err != nil {
		return nil, err
	}
	subscriptionJSON, err := subscription.JSON()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidSubscription, err)
	}

	id, err := newInstanceID()
	if err != nil {
		return nil, err
	}
	logger := newLogger(config.Logger, group, id)

	// Work on copies: Join does not change the caller's configuration.
	kzConfig := *config.Zookeeper
	kzConfig.Chroot = chroot
	if kzConfig.Logger == nil || kzConfig.Logger == (zookeeperLogger{}) {
		kzConfig.Logger = slogZookeeperLogger{logger.With(attrComponent, "zookeeper")}
	}
	cfg := *config
	cfg.Config = config.saramaConfig()
	cfg.Zookeeper = &kzConfig

	probe, err := probeZookeeper(ctx, nodes, &kzConfig)
	if err != nil {
		return nil, err
	}

	cm := &consumerManager{
		config:       &cfg,
		log:          logger,
		autoCommit:   config.Consumer.Offsets.AutoCommit.Enable,
		group:        group,
		subscription: subscription,
		zkConn:       probe,
		messages:     make(chan *sarama.ConsumerMessage, cfg.ChannelBufferSize),
		errors:       make(chan error, cfg.ChannelBufferSize),
		hurry:        make(chan struct{}),
		firstRound:   make(chan struct{}),
		claims:       make(chan struct{}, 1),
	}
	cm.pms.Store(&partitionManagers{})
	cm.watches.log = logger

	if err := cm.connect(ctx, nodes, probe, id, markRegistration(subscriptionJSON)); err != nil {
		cm.closeConnections()
		return nil, err
	}

	cm.startLoops()
	go cm.run()
	if !waitClaims {
		return cm, nil
	}
	if err := cm.waitStarted(ctx); err != nil {
		cm.hurryUp()
		if closeErr := cm.Close(); closeErr != nil {
			return nil, errors.Join(err, closeErr)
		}
		return nil, err
	}
	return cm, nil
}

// waitStarted waits until the manager goroutine made its first
// distribution and every partition of it is claimed, or until ctx is done
// (it returns ctx's error).
func (cm *consumerManager) waitStarted(ctx context.Context) error {
	select {
	case <-cm.firstRound:
	case <-ctx.Done():
		return ctx.Err()
	}
	for !cm.allClaimed() {
		select {
		case <-cm.claims:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// allClaimed reports whether every partition manager holds its claim.
func (cm *consumerManager) allClaimed() bool {
	for _, pm := range *cm.pms.Load() {
		pm.mu.Lock()
		claimed := pm.claimed
		pm.mu.Unlock()
		if !claimed {
			return false
		}
	}
	return true
}

// notifyClaims tells waitStarted, without blocking, that a partition was
// claimed or that the partition managers changed.
func (cm *consumerManager) notifyClaims() {
	select {
	case cm.claims <- struct{}{}:
	default:
	}
}

// startLoops starts the marker and committer goroutines, which shutdown
// stops.
func (cm *consumerManager) startLoops() {
	cm.markStop, cm.markDone = make(chan struct{}), make(chan struct{})
	cm.commitRequest = make(chan struct{}, 1)
	cm.commitStop, cm.commitDone = make(chan struct{}), make(chan struct{})
	go cm.markLoop()
	go cm.commitLoop()
}

// maxMarkDelay bounds how long the end of a partition's acked prefix waits
// before it is marked in the offset store, whence the next commit round
// takes it. Acks do not mark one by one: see partitionManager.ack.
const maxMarkDelay = 100 * time.Millisecond

// markInterval returns how often the marker marks: every maxMarkDelay, or
// every auto-commit interval when that is shorter.
func markInterval(cfg *sarama.Config) time.Duration {
	if i := cfg.Consumer.Offsets.AutoCommit.Interval; i > 0 && i < maxMarkDelay {
		return i
	}
	return maxMarkDelay
}

// markLoop is the marker goroutine: every markInterval it marks the acked
// prefix of every partition, until shutdown closes markStop.
func (cm *consumerManager) markLoop() {
	defer close(cm.markDone)
	ticker := time.NewTicker(markInterval(cm.config.Config))
	defer ticker.Stop()
	for {
		select {
		case <-cm.markStop:
			return
		case <-ticker.C:
			for _, pm := range *cm.pms.Load() {
				pm.markAcked()
			}
		}
	}
}

// connect does the work of Join after validation: broker discovery (see
// discoverBrokers), the sarama clients, offset store and consumer, and
// last the registration, so that the group never hands a share to an
// instance that cannot consume it. On error, closeConnections undoes what
// was done.
func (cm *consumerManager) connect(ctx context.Context, nodes []string, probe *zk.Conn, id string, subscriptionJSON []byte) error {
	kz, err := kazoo.NewKazoo(nodes, cm.config.Zookeeper)
	if err != nil {
		return fmt.Errorf("connect to zookeeper: %w", convertError(err))
	}
	cm.kz = kz
	cm.kzGroup = kz.Consumergroup(cm.group)
	cm.instance = cm.kzGroup.Instance(id)
	cm.subscriptionJSON = subscriptionJSON

	brokers, err := cm.discoverBrokers(probe)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}

	// The partition consumers are spread over fetchConnections clients
	// (see fetcherOf), the first of which also reads the metadata.
	for range fetchConnections {
		client, err := sarama.NewClient(brokers, cm.config.Config)
		if err != nil {
			hint := ""
			if cm.config.Net.TLS.Enable && errors.Is(err, io.EOF) {
				// A broker closes a TLS handshake sent to a plaintext port
				// without a word: say what it likely means.
				hint = " (the TLS handshake failed: is it a listener of security protocol SSL or SASL_SSL? see Config.Listener)"
			}
			return fmt.Errorf("connect to kafka at %s: %w%s", strings.Join(brokers, ","), err, hint)
		}
		cm.fetchers = append(cm.fetchers, fetcher{client: client}) // closeClients closes it
		consumer, err := sarama.NewConsumerFromClient(client)
		if err != nil {
			return fmt.Errorf("start consumer: %w", err)
		}
		cm.fetchers[len(cm.fetchers)-1].consumer = consumer
	}
	cm.client = cm.fetchers[0].client
	// The offset store has a client of its own: Kafka answers the
	// requests of one connection one at a time, and its OffsetFetch and
	// OffsetCommit requests would otherwise wait behind the consumer's
	// fetches (up to Consumer.MaxWaitTime each) and ListOffsets requests.
	if cm.offsetClient, err = sarama.NewClient(brokers, cm.config.Config); err != nil {
		return fmt.Errorf("connect to kafka at %s: %w", strings.Join(brokers, ","), err)
	}
	cm.offsets = newOffsetStore(cm.offsetClient, cm.group, cm.commitFailed)
	if err := ctx.Err(); err != nil {
		return err
	}

	if err := cm.mkdirs(cm.groupNode()); err != nil {
		return fmt.Errorf("create consumer group %s: %w", cm.group, convertError(err))
	}

	if err := ctx.Err(); err != nil {
		return err
	}
	if err := cm.registerInstance(); err != nil {
		return fmt.Errorf("register instance %s: %w", id, convertError(err))
	}
	cm.registered = true
	cm.logf(slog.LevelInfo, "Consumer instance registered (%s).", id)
	return nil
}

// partitionManagers maps the partitions this instance runs to their
// managers. A published map is never changed: the manager goroutine
// replaces it whole, so Ack reads it without a lock.
type partitionManagers map[topicPartition]*partitionManager

// consumerManager implements Consumer. Its goroutine (run) is owned by the
// tomb: Interrupt kills it, Close waits for it. run owns the partition
// managers.
type consumerManager struct {
	config           *Config      // a copy of the caller's; read only
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
	zkConn   *zk.Conn
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
	// consumers of stopped partitions (closeInBackground); closeKafka waits
	// for them.
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
	// firstRound is closed by the manager goroutine when it made its first
	// distribution; claims receives a token, without blocking the sender,
	// when a partition is claimed. JoinContext waits on them.
	firstRound chan struct{}
	claims     chan struct{}

	messages chan *sarama.ConsumerMessage // closed by shutdown, after every partition manager stopped
	errors   chan error                   // closed by shutdown, after every sender stopped
}

// Messages implements Consumer.
func (cm *consumerManager) Messages() <-chan *sarama.ConsumerMessage { return cm.messages }

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
	cm.hurryOnce.Do(func() { close(cm.hurry) })
}

// Ack implements Consumer.
func (cm *consumerManager) Ack(msg *sarama.ConsumerMessage) {
	if msg == nil {
		return
	}
	slot := &cm.ackCache[uint32(msg.Partition)%ackCacheSize]
	pm := slot.Load()
	if pm == nil || pm.tp.partition != msg.Partition || pm.tp.topic != msg.Topic || pm.retired.Load() {
		pm = (*cm.pms.Load())[topicPartition{topic: msg.Topic, partition: msg.Partition}]
		if pm == nil {
			cm.logf(slog.LevelDebug, "Acked message %d of %s/%d, but this instance does not own that partition (any more).", msg.Offset, msg.Topic, msg.Partition)
			return
		}
		slot.Store(pm)
	}
	pm.ack(msg.Offset)
}

// ackCacheSize is the number of slots of consumerManager.ackCache.
const ackCacheSize = 64

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

func (tp TopicPartition) less(other TopicPartition) bool {
	return tp.Topic < other.Topic || (tp.Topic == other.Topic && tp.Partition < other.Partition)
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

// run is the manager goroutine:
//  1. watch the partitions of the subscription, and the group's instances;
//  2. register again if the registration is gone (the ZooKeeper session
//     expired), after stopping every partition, whose claims went with it;
//  3. distribute the partitions over the instances;
//  4. run a partition manager for each partition of this instance's share;
//  5. sleep until a watch fires, then go back to 1 for what changed.
func (cm *consumerManager) run() {
	defer cm.t.Done()
	defer cm.shutdown()

	var (
		partitions       kazoo.PartitionList
		instances        kazoo.ConsumergroupInstanceList
		partitionsChange <-chan zk.Event
		instancesChange  <-chan zk.Event
		ok               bool
	)
	for {
		if instancesChange == nil {
			var kindsChanged bool
			if instances, instancesChange, kindsChanged, ok = cm.watchInstances(); !ok {
				return
			}
			if kindsChanged {
				partitionsChange = nil // the partitions to distribute depend on the kinds
			}
		}
		if partitionsChange == nil {
			if partitions, partitionsChange, ok = cm.watchSubscription(); !ok {
				return
			}
		}

		if instances.Find(cm.instance.ID) == nil {
			cm.logf(slog.LevelWarn, "This instance's registration is gone (ZooKeeper session expired?); stopping all partitions and registering again.")
			cm.sendError(ErrRegistrationLost)
			cm.config.metrics().RegistrationLost(cm.group)
			cm.loseClaims()
			cm.reportStops(cm.managePartitionManagers(nil))
			if !cm.register() {
				return
			}
			instancesChange = nil
			continue
		}

		cm.logf(slog.LevelInfo, "Currently, %d instances are registered, to consume %d partitions in total.", len(instances), len(partitions))
		distribution := distributePartitionsBetweenConsumers(instances, retrievePartitionLeaders(partitions))
		assigned := make(map[topicPartition]assignment)
		for _, p := range distribution[cm.instance.ID] {
			tp := topicPartition{topic: p.Topic().Name, partition: p.ID}
			assigned[tp] = assignment{partition: p, hold: cm.holds(tp.topic, cm.originals)}
		}
		cm.reportStops(cm.managePartitionManagers(assigned))

		if !cm.sleep(&partitionsChange, &instancesChange) {
			return
		}
	}
}

// sleep waits until a watch fires, and clears that watch, or until the
// manager is interrupted (it returns false). Meanwhile it releases the
// orphan claims, retrying those that fail.
func (cm *consumerManager) sleep(partitionsChange, instancesChange *<-chan zk.Event) bool {
	var retry *time.Timer
	defer func() {
		if retry != nil {
			retry.Stop()
		}
	}()
	for attempt := 0; ; attempt++ {
		var retryC <-chan time.Time
		if left := cm.releaseOrphans(); len(left) > 0 {
			if retry == nil {
				retry = time.NewTimer(retryDelay(attempt))
			} else {
				retry.Reset(retryDelay(attempt))
			}
			retryC = retry.C
		}
		select {
		case <-cm.t.Dying():
			cm.logf(slog.LevelInfo, "Interrupted, shutting down...")
			return false
		case ev := <-*partitionsChange:
			cm.logf(slog.LevelInfo, "Woke up because the subscription reported a change in partitions (%s).", describeEvent(ev))
			*partitionsChange = nil
			return true
		case ev := <-*instancesChange:
			cm.logf(slog.LevelInfo, "Woke up because the list of running instances changed (%s).", describeEvent(ev))
			*instancesChange = nil
			return true
		case <-retryC:
		}
	}
}

// loseClaims records that the claims of every partition manager went with
// a lost ZooKeeper session (Stats no longer shows them claimed). In case
// the session did survive (the registration was deleted by hand), the
// owner nodes are swept as orphans once the managers stopped.
func (cm *consumerManager) loseClaims() {
	for tp, pm := range *cm.pms.Load() {
		if pm.loseClaim() {
			cm.addOrphan(tp)
		}
	}
}

// addOrphan records a partition whose owner node may hold this instance's
// ID while no partition manager runs it. Safe from any goroutine.
func (cm *consumerManager) addOrphan(tp topicPartition) {
	cm.orphanMu.Lock()
	defer cm.orphanMu.Unlock()
	if cm.orphans == nil {
		cm.orphans = make(map[topicPartition]bool)
	}
	cm.orphans[tp] = true
}

// releaseOrphans deletes the owner nodes of the orphans that hold this
// instance's ID, and returns the orphans it could not check or delete (to
// try again). After the first failure it tries no more this time: each
// attempt takes about a second per server while ZooKeeper is unreachable,
// and the manager goroutine must not stay away from its watches that
// long. An orphan that a partition manager runs again is left to it: its
// claim takes over a node with this instance's ID. It runs on the manager
// goroutine, which alone changes the partition managers.
func (cm *consumerManager) releaseOrphans() (left []topicPartition) {
	cm.orphanMu.Lock()
	orphans := make([]topicPartition, 0, len(cm.orphans))
	for tp := range cm.orphans {
		orphans = append(orphans, tp)
	}
	cm.orphanMu.Unlock()
	running := *cm.pms.Load()
	for i, tp := range orphans {
		if running[tp] == nil {
			err := cm.releasePartition(tp)
			switch {
			case err == nil:
				cm.logf(slog.LevelInfo, "Released the claim of %s/%d, left behind.", tp.topic, tp.partition)
			case errors.Is(err, kazoo.ErrPartitionNotClaimed):
				// gone, or another instance's
			default:
				cm.logf(slog.LevelWarn, "Failed to release the claim of %s/%d, left behind: %s. Trying again.", tp.topic, tp.partition, convertError(err))
				return append(left, orphans[i:]...)
			}
		}
		cm.orphanMu.Lock()
		delete(cm.orphans, tp)
		cm.orphanMu.Unlock()
	}
	return left
}

// releasePartition deletes the partition's owner node if it holds this
// instance's ID; kazoo.ErrPartitionNotClaimed when it is gone or another
// instance's.
func (cm *consumerManager) releasePartition(tp topicPartition) error {
	if h := cm.config.hooks; h != nil && h.releasePartition != nil {
		if err := h.releasePartition(tp.topic, tp.partition); err != nil {
			return err
		}
	}
	return cm.releaseNode(tp)
}

// reportStops sends to Errors() what did not complete in time when the
// given partition managers stopped.
func (cm *consumerManager) reportStops(stopped []*partitionManager) {
	for _, pm := range stopped {
		if err := pm.t.Err(); err != nil {
			cm.sendError(err)
		}
	}
}

func describeEvent(ev zk.Event) string {
	if ev.Err != nil {
		return fmt.Sprintf("%s: %s", ev.Type, ev.Err)
	}
	return ev.Type.String()
}

// watchSubscription returns the subscription's partitions and a watch on
// them, retrying errors until the manager is interrupted (ok is false then).
func (cm *consumerManager) watchSubscription() (kazoo.PartitionList, <-chan zk.Event, bool) {
	if cm.config.Discovery == DiscoverFromKafka {
		return cm.watchMetadata()
	}
	for attempt := 0; ; attempt++ {
		partitions, changed, err := watchPartitions(cm.subscription, cm.kz, &cm.watches, cm.originals)
		if err == nil {
			return partitions, changed, true
		}
		cm.logf(slog.LevelWarn, "Failed to watch subscription: %s. Trying again.", err)
		if !sleepOrDie(&cm.t, attempt) {
			return nil, nil, false
		}
	}
}

// watchInstances returns the group's instances and a watch on them, and
// sets cm.originals (see originalsRegistered); it reports whether that
// changed. It retries errors until the manager is interrupted (ok is false
// then).
func (cm *consumerManager) watchInstances() (instances kazoo.ConsumergroupInstanceList, changed <-chan zk.Event, kindsChanged, ok bool) {
	for attempt := 0; ; attempt++ {
		instances, watch, err := cm.watchInstanceNodes()
		var originals bool
		if err == nil {
			originals, err = cm.originalsRegistered(instances)
		}
		if err == nil {
			changed = watch
			kindsChanged = originals != cm.originals
			if kindsChanged {
				if originals {
					cm.logf(slog.LevelInfo, "An instance of the original library is registered: distributing over the partitions it sees, Kafka's internal topics included (claimed, never consumed).")
				} else {
					cm.logf(slog.LevelInfo, "No instance of the original library is registered any more: distributing without Kafka's internal topics.")
				}
			}
			cm.originals = originals
			return instances, changed, kindsChanged, true
		}
		cm.logf(slog.LevelWarn, "Failed to watch consumer group instances: %s. Trying again.", convertError(err))
		if !sleepOrDie(&cm.t, attempt) {
			return nil, nil, false, false
		}
	}
}

// registerInstance creates the instance's registration node (see
// session.go). An ID of this instance's own can be registered already only
// by an earlier attempt whose answer was lost: then it checks that the
// node is there, and tries again when it is not.
func (cm *consumerManager) registerInstance() error {
	for attempt := 0; ; attempt++ {
		err := cm.registerNode()
		if !errors.Is(err, kazoo.ErrInstanceAlreadyRegistered) || attempt == 10 {
			return err
		}
		if registered, err := cm.registeredNode(); err != nil {
			return err
		} else if registered {
			return nil // an earlier attempt went through before its answer was lost
		}
	}
}

// register registers the instance again, retrying errors until the manager
// is interrupted.
func (cm *consumerManager) register() bool {
	for attempt := 0; ; attempt++ {
		err := cm.registerInstance()
		if err == nil {
			cm.logf(slog.LevelInfo, "Consumer instance registered again.")
			return true
		}
		cm.logf(slog.LevelWarn, "Failed to register: %s. Trying again.", convertError(err))
		if !sleepOrDie(&cm.t, attempt) {
			return false
		}
	}
}

// assignment is a partition of this instance's share.
type assignment struct {
	partition *kazoo.Partition
	// hold: claim the partition but do not consume it (see
	// partitionManager.hold).
	hold bool
}

// managePartitionManagers makes the running partition managers those of the
// assigned partitions: it stops the others, waiting until they are done,
// and starts the missing ones. Stopping managers stay visible to Ack until
// they are done, since they wait for acks. It returns the stopped ones.
// assigned is nil when the instance stops all its partitions without a
// distribution (a lost registration, the shutdown); the first call with a
// distribution closes firstRound.
func (cm *consumerManager) managePartitionManagers(assigned map[topicPartition]assignment) (stopped []*partitionManager) {
	began := time.Now()
	current := *cm.pms.Load()
	var stopping []*partitionManager
	next := make(partitionManagers, len(assigned))
	for tp, pm := range current {
		if _, ok := assigned[tp]; ok {
			next[tp] = pm
		} else {
			stopping = append(stopping, pm)
			pm.t.Kill(nil)
		}
	}
	var started []*partitionManager
	for tp, a := range assigned {
		if _, ok := current[tp]; !ok {
			pm := newPartitionManager(cm, a.partition)
			pm.hold = a.hold
			next[tp] = pm
			started = append(started, pm)
		}
	}
	cm.logf(slog.LevelInfo, "This instance is assigned to consume %d partitions, and is currently consuming %d partitions (stopping %d, starting %d).",
		len(assigned), len(current), len(stopping), len(started))

	during := make(partitionManagers, len(next)+len(stopping))
	for tp, pm := range next {
		during[tp] = pm
	}
	for _, pm := range stopping {
		during[pm.tp] = pm
	}
	if len(started) > 0 {
		all := make([]topicPartition, 0, len(started))
		consumed := make([]topicPartition, 0, len(started)) // not held
		for _, pm := range started {
			all = append(all, pm.tp)
			if !pm.hold {
				consumed = append(consumed, pm.tp)
			}
		}
		initial := newInitialOffsets(cm.client, cm.config.Offsets.Initial, consumed)
		claims := newClaimBatch(cm, all)
		committed := newCommittedOffsets(cm.offsets, claims, consumed)
		for _, pm := range started {
			pm.initial, pm.claims, pm.committed = initial, claims, committed
		}
	}
	cm.pms.Store(&during)
	for _, pm := range started {
		go pm.run()
	}
	for _, pm := range stopping {
		_ = pm.t.Wait() // what did not complete is logged, and returned
		pm.retired.Store(true)
	}
	cm.pms.Store(&next)
	if assigned != nil && cm.firstRound != nil {
		// Before OnRebalance, which may block: JoinContext must not wait
		// for it. Only the manager goroutine closes it.
		select {
		case <-cm.firstRound:
		default:
			close(cm.firstRound)
		}
	}
	cm.notifyClaims()

	revoked, newly := sortedPartitions(stopping), sortedPartitions(started)
	if len(revoked)+len(newly) > 0 {
		r := Rebalance{Revoked: revoked, Assigned: newly}
		cm.config.metrics().Rebalanced(cm.group, r, time.Since(began))
		if cm.config.OnRebalance != nil {
			cm.config.OnRebalance(r)
		}
	}
	return stopping
}

// sortedPartitions returns the partitions of pms in order, leaving out the
// held ones (which Stats and OnRebalance do not show).
func sortedPartitions(pms []*partitionManager) []TopicPartition {
	result := make([]TopicPartition, 0, len(pms))
	for _, pm := range pms {
		if !pm.hold {
			result = append(result, TopicPartition{Topic: pm.tp.topic, Partition: pm.tp.partition})
		}
	}
	sort.Slice(result, func(i, j int) bool { return result[i].less(result[j]) })
	return result
}

// shutdown runs when the manager goroutine ends:
//  1. stop every partition manager; meanwhile take back the messages still
//     buffered in the Messages channel, so that partitions do not wait for
//     acks of messages nobody received;
//  2. release the claims left behind, and stop the goroutines of the
//     ZooKeeper watches;
//  3. close the consumer, commit what is left, close the clients;
//  4. deregister the instance and close the ZooKeeper connection;
//  5. close the Messages and Errors channels;
//  6. make what did not complete the tomb's reason, which Close returns.
func (cm *consumerManager) shutdown() {
	stop, drained := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(drained)
		for {
			select {
			case msg := <-cm.messages:
				cm.withdraw(msg)
			case <-stop:
				return
			}
		}
	}()
	var errs []error
	for _, pm := range cm.managePartitionManagers(nil) { // each marks and commits its last acks
		if pm.commitErr != nil {
			errs = append(errs, pm.commitErr)
		}
	}
	close(stop)
	<-drained
	close(cm.markStop)
	<-cm.markDone
	for len(cm.messages) > 0 {
		<-cm.messages // no partition manager is left to account for them
	}
	if left := cm.releaseOrphans(); len(left) > 0 {
		errs = append(errs, fmt.Errorf("%w: %s; they go when the ZooKeeper session expires", ErrReleaseFailed, describePartitions(left)))
	}
	cm.watches.stop()

	errs = append(errs, cm.closeConnections()...)
	cm.stopMetadataPoller() // after the client closed, which ends a request in flight
	close(cm.messages)
	close(cm.errors)
	cm.t.Kill(errors.Join(errs...))
}

func describePartitions(tps []topicPartition) string {
	names := make([]string, len(tps))
	for i, tp := range tps {
		names[i] = fmt.Sprintf("%s/%d", tp.topic, tp.partition)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// withdraw takes back a message that was handed out but never received.
func (cm *consumerManager) withdraw(msg *sarama.ConsumerMessage) {
	if pm := (*cm.pms.Load())[topicPartition{topic: msg.Topic, partition: msg.Partition}]; pm != nil {
		pm.withdraw(msg.Offset)
	}
}

// commit asks the committer for a commit round of every partition, and
// returns a channel that is closed when a round that began after the call
// is over, or at once when the committer has stopped. Requests coalesce:
// many partitions stopping at once share rounds. Safe from any goroutine.
func (cm *consumerManager) commit() <-chan struct{} {
	cm.commitMu.Lock()
	defer cm.commitMu.Unlock()
	if cm.commitStopped {
		done := make(chan struct{})
		close(done)
		return done
	}
	if cm.nextRound == nil {
		cm.nextRound = make(chan struct{})
		select {
		case cm.commitRequest <- struct{}{}:
		default: // a round is asked for already; it takes this one along
		}
	}
	return cm.nextRound
}

// commitLoop is the committer goroutine: it runs the offset store's
// commit rounds, one at a time, those that commit asks for and, when the
// user's configuration enables auto-commit, one every
// Consumer.Offsets.AutoCommit.Interval, until closeKafka closes
// commitStop. A round blocks while Kafka is unreachable (the coordinator's
// lookup retries); the callers wait with their own deadlines.
func (cm *consumerManager) commitLoop() {
	defer close(cm.commitDone)
	var tick <-chan time.Time
	if cm.autoCommit {
		ticker := time.NewTicker(cm.config.Consumer.Offsets.AutoCommit.Interval)
		defer ticker.Stop()
		tick = ticker.C
	}
	for {
		select {
		case <-tick:
			cm.commitRound()
			continue
		case <-cm.commitStop:
			cm.commitMu.Lock()
			cm.commitStopped = true
			if cm.nextRound != nil {
				close(cm.nextRound)
				cm.nextRound = nil
			}
			cm.commitMu.Unlock()
			return
		case <-cm.commitRequest:
		}
		cm.commitMu.Lock()
		round := cm.nextRound
		cm.nextRound = nil
		cm.commitMu.Unlock()
		cm.commitRound()
		if round != nil {
			close(round)
		}
	}
}

// commitRound runs one commit round of the offset store, and reports it
// to Metrics.
func (cm *consumerManager) commitRound() {
	began := time.Now()
	cm.offsets.commitRound()
	cm.config.metrics().Committed(cm.group, time.Since(began))
}

// commitFailed passes on a failed commit of tp, to Errors() and Metrics.
func (cm *consumerManager) commitFailed(tp topicPartition, err error) {
	cm.config.metrics().CommitFailed(cm.group, TopicPartition{Topic: tp.topic, Partition: tp.partition}, err)
	cm.sendError(&sarama.ConsumerError{Topic: tp.topic, Partition: tp.partition, Err: err})
}

// closeInBackground closes a partition consumer without waiting: sarama's
// Close waits until the fetch in flight returns, which against a hung
// broker takes up to Net.ReadTimeout, and a stopping partition must not
// wait for that. Its goroutine drains the errors (sarama may block on them)
// until sarama closes them; closeKafka waits for it.
func (cm *consumerManager) closeInBackground(pc sarama.PartitionConsumer) {
	pc.AsyncClose()
	cm.closers.Add(1)
	go func() {
		defer cm.closers.Done()
		for range pc.Errors() {
		}
	}()
}

// closeGrace bounds how long Close waits for its last commit rounds
// before it closes the Kafka clients under them, which makes their
// remaining retries fail at once.
const closeGrace = 5 * time.Second

// closeConnections closes what connect opened, in reverse order, and
// returns what did not complete. Each step runs only if its part was
// opened.
func (cm *consumerManager) closeConnections() []error {
	var errs []error
	if err := cm.closeKafka(); err != nil {
		errs = append(errs, err)
	}
	if cm.registered {
		if err := cm.deregisterNode(); err != nil && !errors.Is(err, kazoo.ErrInstanceNotRegistered) {
			err = fmt.Errorf("deregister instance %s: %w", cm.instance.ID, convertError(err))
			cm.logf(slog.LevelError, "Failed to %s.", err)
			errs = append(errs, err)
		}
		cm.registered = false
	}
	if cm.kz != nil {
		if err := cm.kz.Close(); err != nil {
			cm.logf(slog.LevelWarn, "Failed to close ZooKeeper connection: %s.", err)
		}
	}
	if cm.zkConn != nil {
		cm.zkConn.Close()
	}
	return errs
}

// closeKafka closes the consumer and the committer, commits what the
// partitions' final commits left uncommitted (a round and
// Consumer.Offsets.Retry.Max retries), and closes the clients. With Kafka
// unreachable, a round retries the coordinator for long (per broker
// Net.DialTimeout, times Metadata.Retry.Max): after closeGrace the
// clients are closed under it, so that its retries fail at once. It
// returns ErrCommitTimeout then.
func (cm *consumerManager) closeKafka() error {
	closed := make(chan struct{})
	go func() { // owned by closeKafka, which waits for it
		defer close(closed)
		cm.closeConsumers()
		cm.closers.Wait()
		if cm.commitStop != nil {
			close(cm.commitStop)
			<-cm.commitDone
		}
		if cm.offsets != nil {
			for attempt := 0; attempt <= cm.config.Consumer.Offsets.Retry.Max && cm.offsets.uncommitted() > 0; attempt++ {
				cm.offsets.commitRound()
			}
			if n := cm.offsets.uncommitted(); n > 0 {
				cm.logf(slog.LevelError, "The offsets of %d partitions were not committed; their next owners consume acked messages again.", n)
			}
		}
	}()

	timeout := time.NewTimer(closeGrace)
	defer timeout.Stop()
	select {
	case <-closed:
		cm.closeClients(true)
		return nil
	case <-timeout.C:
		err := fmt.Errorf("%w: the last commit did not complete within %s; closing the Kafka clients under it", ErrCommitTimeout, closeGrace)
		cm.logf(slog.LevelError, "%s.", err)
		cm.closeClients(false) // their errors are those of the requests it fails
		<-closed
		return err
	}
}

// closeClients closes the sarama clients that connect opened, logging
// their errors when logErrors is set.
func (cm *consumerManager) closeClients(logErrors bool) {
	clients := []sarama.Client{cm.offsetClient}
	for _, f := range cm.fetchers {
		clients = append(clients, f.client)
	}
	for _, c := range clients {
		if c == nil {
			continue
		}
		if err := c.Close(); err != nil && logErrors {
			cm.logf(slog.LevelWarn, "Failed to close Kafka client: %s.", err)
		}
	}
}

// fetchConnections is how many sarama consumers, each on a client of its
// own, share the partitions of an instance. Kafka answers the requests of
// one connection one at a time, and sarama's ConsumePartition makes two
// ListOffsets requests for every partition it starts: on one connection
// the partitions of a large assignment start one after the other. Two
// connections to each broker start them in half the time (BENCHMARKS.md,
// round 5), and fetch on two connections.
const fetchConnections = 2

// fetcher is a sarama consumer and its client.
type fetcher struct {
	client   sarama.Client
	consumer sarama.Consumer
}

// fetcherOf returns the fetcher that consumes tp: always the same one for
// a partition, and the partitions of a topic alternate between them.
func (cm *consumerManager) fetcherOf(tp topicPartition) fetcher {
	h := fnv.New32a()
	_, _ = h.Write([]byte(tp.topic))
	return cm.fetchers[(h.Sum32()+uint32(tp.partition))%uint32(len(cm.fetchers))]
}

// closeConsumers closes the sarama consumers, concurrently: each waits for
// its fetch in flight, up to Net.ReadTimeout against a hung broker.
func (cm *consumerManager) closeConsumers() {
	var wg sync.WaitGroup
	for _, f := range cm.fetchers {
		if f.consumer == nil {
			continue // connect failed before it
		}
		wg.Add(1)
		go func() { // owned by closeConsumers, which waits for it
			defer wg.Done()
			if err := f.consumer.Close(); err != nil {
				cm.logf(slog.LevelWarn, "Failed to close consumer: %s.", err)
			}
		}()
	}
	wg.Wait()
}

// logf writes a line of this consumer at level (see Config.Logger).
func (cm *consumerManager) logf(level slog.Level, format string, args ...interface{}) {
	logf(cm.log, level, format, args...)
}
