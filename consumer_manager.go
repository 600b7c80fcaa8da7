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
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/go-zookeeper/zk"
	samuelzk "github.com/samuel/go-zookeeper/zk"
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
	// partition consumes them again. Close returns the error that stopped the
	// consumer, if any; a second call returns the same.
	Close() error

	// Messages returns the channel of messages to process; Ack each of them
	// when it is processed. The channel is closed at the end of Close.
	Messages() <-chan *sarama.ConsumerMessage

	// Errors returns the channel of errors that the consumer met and worked
	// around (when Config.Consumer.Return.Errors is true, the default):
	// partition consumer and offset commit errors as *sarama.ConsumerError.
	// Reading it is optional: when it is full, errors are logged and
	// dropped, never waited for. It is closed at the end of Close.
	Errors() <-chan error

	// Ack marks a message from Messages as processed. Acks may come in any
	// order and from any goroutine: per partition, the offset committed is
	// that of the first handed-out message not acked yet (or one past the
	// last one handed out), following sarama's convention that a committed
	// offset is the next message to read: acking message N, with every
	// earlier one acked, commits N+1. The acked prefix is handed to
	// sarama's offset manager within 100 ms (or AutoCommit.Interval, when
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
	// Claimed is true once the instance owns the partition in ZooKeeper;
	// until then it waits for the previous owner.
	Claimed bool
	// LastHandedOut is the offset of the last message handed out on
	// Messages, or -1.
	LastHandedOut int64
	// LastAcked is the highest offset acked, or -1.
	LastAcked int64
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
//
//   - group is the name of the group; all instances of a group use the same
//     one. It must not be empty nor contain '/'.
//   - subscription says what the group consumes; every instance should use
//     the same. An instance may consume any share of it, none included.
//   - zookeeper is the ZooKeeper connection string of the Kafka cluster,
//     e.g. "zk1:2181,zk2:2181,zk3:2181/chroot".
//   - config is the configuration; nil means NewConfig().
//
// Join waits at most config.Zookeeper.Timeout for a ZooKeeper session (and
// up to a second more to close a failed attempt). On any error it returns
// it (wrapping one of the Err* values of this package, or the error of
// sarama or ZooKeeper) and leaves nothing running or registered.
func Join(group string, subscription Subscription, zookeeper string, config *Config) (Consumer, error) {
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

	// Work on copies: Join does not change the caller's configuration.
	kzConfig := *config.Zookeeper
	kzConfig.Chroot = chroot
	if kzConfig.Logger == nil {
		kzConfig.Logger = zookeeperLogger{}
	}
	cfg := *config
	cfg.Config = config.saramaConfig()
	cfg.Zookeeper = &kzConfig

	if err := probeZookeeper(nodes, &kzConfig); err != nil {
		return nil, err
	}

	id, err := newInstanceID()
	if err != nil {
		return nil, err
	}

	cm := &consumerManager{
		config:       &cfg,
		group:        group,
		subscription: subscription,
		messages:     make(chan *sarama.ConsumerMessage, cfg.ChannelBufferSize),
		errors:       make(chan error, cfg.ChannelBufferSize),
	}
	cm.pms.Store(&partitionManagers{})

	if err := cm.connect(nodes, id, subscriptionJSON); err != nil {
		cm.closeConnections()
		return nil, err
	}

	cm.markStop, cm.markDone = make(chan struct{}), make(chan struct{})
	go cm.markLoop()
	go cm.run()
	return cm, nil
}

// maxMarkDelay bounds how long the end of a partition's acked prefix waits
// before it is marked in the offset manager, whence the next auto-commit
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

// connect does the work of Join after validation: ZooKeeper registration,
// broker discovery, and the sarama client, offset manager and consumer.
// On error, closeConnections undoes what was done.
func (cm *consumerManager) connect(nodes []string, id string, subscriptionJSON []byte) error {
	kz, err := kazoo.NewKazoo(nodes, cm.config.Zookeeper)
	if err != nil {
		return fmt.Errorf("connect to zookeeper: %w", convertError(err))
	}
	cm.kz = kz
	cm.kzGroup = kz.Consumergroup(cm.group)
	cm.instance = cm.kzGroup.Instance(id)
	cm.subscriptionJSON = subscriptionJSON

	if exists, err := cm.kzGroup.Exists(); err != nil {
		return fmt.Errorf("look up consumer group %s: %w", cm.group, convertError(err))
	} else if !exists {
		if err := cm.kzGroup.Create(); err != nil && !errors.Is(err, kazoo.ErrInstanceAlreadyRegistered) {
			if exists, _ := cm.kzGroup.Exists(); !exists { // another instance may have created it
				return fmt.Errorf("create consumer group %s: %w", cm.group, convertError(err))
			}
		}
	}

	if err := cm.registerInstance(); err != nil {
		return fmt.Errorf("register instance %s: %w", id, convertError(err))
	}
	cm.registered = true
	cm.logf("Consumer instance registered (%s).", id)

	brokers, err := kz.BrokerList()
	if err != nil {
		return fmt.Errorf("list kafka brokers in zookeeper: %w", convertError(err))
	}
	if len(brokers) == 0 {
		return ErrNoBrokers
	}
	cm.logf("Discovered Kafka cluster at %s.", strings.Join(brokers, ","))

	if cm.client, err = sarama.NewClient(brokers, cm.config.Config); err != nil {
		return fmt.Errorf("connect to kafka at %s: %w", strings.Join(brokers, ","), err)
	}
	if cm.offsetManager, err = sarama.NewOffsetManagerFromClient(cm.group, cm.client); err != nil {
		return fmt.Errorf("start offset manager: %w", err)
	}
	if cm.consumer, err = sarama.NewConsumerFromClient(cm.client); err != nil {
		return fmt.Errorf("start consumer: %w", err)
	}
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
	config           *Config // a copy of the caller's; read only
	group            string
	subscription     Subscription
	subscriptionJSON []byte

	kz       *kazoo.Kazoo
	kzGroup  *kazoo.Consumergroup
	instance *kazoo.ConsumergroupInstance
	// registered tells whether the instance's registration node is ours to
	// delete. Used by run and, after it, by closeConnections.
	registered bool

	client        sarama.Client
	consumer      sarama.Consumer
	offsetManager sarama.OffsetManager

	t tomb.Tomb // the manager goroutine: run's first line defers t.Done

	// watches holds the subscription's watches that have not fired yet;
	// used by the manager goroutine only (watchSubscription).
	watches watchCache

	// pms holds the partition managers, for Ack; written by run only.
	pms atomic.Pointer[partitionManagers]
	// ackCache holds, per partition number modulo ackCacheSize, the
	// partition manager that Ack looked up last, so that Ack does not hash
	// the topic of every message. A cached manager that was retired is
	// looked up again.
	ackCache [ackCacheSize]atomic.Pointer[partitionManager]

	// leftovers counts the goroutines that partition managers left behind
	// (a final commit still draining); shutdown waits for them after closing
	// the offset manager.
	leftovers sync.WaitGroup

	// The marker goroutine (markLoop), started by Join and stopped by
	// shutdown, marks the partitions' acked prefixes every markInterval.
	markStop, markDone chan struct{}

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
			cm.logf("Acked message %d of %s/%d, but this instance does not own that partition (any more).", msg.Offset, msg.Topic, msg.Partition)
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
		result = append(result, pm.stats())
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
		cm.logf("Error: %s", err)
		return
	}
	select {
	case cm.errors <- err:
	default:
		cm.logf("Errors channel full; dropped error: %s", err)
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
		if partitionsChange == nil {
			if partitions, partitionsChange, ok = cm.watchSubscription(); !ok {
				return
			}
		}
		if instancesChange == nil {
			if instances, instancesChange, ok = cm.watchInstances(); !ok {
				return
			}
		}

		if instances.Find(cm.instance.ID) == nil {
			cm.logf("This instance's registration is gone (ZooKeeper session expired?); stopping all partitions and registering again.")
			cm.sendError(ErrRegistrationLost)
			cm.managePartitionManagers(nil)
			if !cm.register() {
				return
			}
			instancesChange = nil
			continue
		}

		cm.logf("Currently, %d instances are registered, to consume %d partitions in total.", len(instances), len(partitions))
		distribution := distributePartitionsBetweenConsumers(instances, retrievePartitionLeaders(partitions))
		assigned := make(map[topicPartition]*kazoo.Partition)
		for _, p := range distribution[cm.instance.ID] {
			assigned[topicPartition{topic: p.Topic().Name, partition: p.ID}] = p
		}
		cm.managePartitionManagers(assigned)

		select {
		case <-cm.t.Dying():
			cm.logf("Interrupted, shutting down...")
			return
		case ev := <-partitionsChange:
			cm.logf("Woke up because the subscription reported a change in partitions (%s).", describeEvent(ev))
			partitionsChange = nil
		case ev := <-instancesChange:
			cm.logf("Woke up because the list of running instances changed (%s).", describeEvent(ev))
			instancesChange = nil
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
	for attempt := 0; ; attempt++ {
		partitions, changed, err := watchPartitions(cm.subscription, cm.kz, &cm.watches)
		if err == nil {
			return partitions, changed, true
		}
		cm.logf("Failed to watch subscription: %s. Trying again.", err)
		if !sleepOrDie(&cm.t, attempt) {
			return nil, nil, false
		}
	}
}

// watchInstances returns the group's instances and a watch on them,
// retrying errors until the manager is interrupted (ok is false then).
func (cm *consumerManager) watchInstances() (kazoo.ConsumergroupInstanceList, <-chan zk.Event, bool) {
	for attempt := 0; ; attempt++ {
		instances, changed, err := cm.kzGroup.WatchInstances()
		if err == nil {
			return instances, firstEvent([]<-chan samuelzk.Event{changed}), true
		}
		cm.logf("Failed to watch consumer group instances: %s. Trying again.", convertError(err))
		if !sleepOrDie(&cm.t, attempt) {
			return nil, nil, false
		}
	}
}

// registerInstance creates the instance's registration node. kazoo-go
// creates missing parents with "exists, then create", and reports losing
// that race to another instance creating /consumers/<group>/ids as
// ErrInstanceAlreadyRegistered; an ID of this instance's own cannot be
// registered already, so it tries again when the node is indeed absent.
func (cm *consumerManager) registerInstance() error {
	for attempt := 0; ; attempt++ {
		err := cm.instance.RegisterWithSubscription(cm.subscriptionJSON)
		if !errors.Is(err, kazoo.ErrInstanceAlreadyRegistered) || attempt == 10 {
			return err
		}
		if registered, err := cm.instance.Registered(); err != nil {
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
			cm.logf("Consumer instance registered again.")
			return true
		}
		cm.logf("Failed to register: %s. Trying again.", convertError(err))
		if !sleepOrDie(&cm.t, attempt) {
			return false
		}
	}
}

// managePartitionManagers makes the running partition managers those of the
// assigned partitions: it stops the others, waiting until they are done,
// and starts the missing ones. Stopping managers stay visible to Ack until
// they are done, since they wait for acks.
func (cm *consumerManager) managePartitionManagers(assigned map[topicPartition]*kazoo.Partition) {
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
	for tp, p := range assigned {
		if _, ok := current[tp]; !ok {
			pm := newPartitionManager(cm, p)
			next[tp] = pm
			started = append(started, pm)
		}
	}
	cm.logf("This instance is assigned to consume %d partitions, and is currently consuming %d partitions (stopping %d, starting %d).",
		len(assigned), len(current), len(stopping), len(started))

	during := make(partitionManagers, len(next)+len(stopping))
	for tp, pm := range next {
		during[tp] = pm
	}
	for _, pm := range stopping {
		during[pm.tp] = pm
	}
	cm.pms.Store(&during)
	for _, pm := range started {
		go pm.run()
	}
	for _, pm := range stopping {
		if err := pm.t.Wait(); err != nil {
			pm.logf("Stopped with error: %s.", err)
		}
		pm.retired.Store(true)
	}
	cm.pms.Store(&next)

	if cm.config.OnRebalance != nil && len(stopping)+len(started) > 0 {
		cm.config.OnRebalance(Rebalance{Revoked: sortedPartitions(stopping), Assigned: sortedPartitions(started)})
	}
}

func sortedPartitions(pms []*partitionManager) []TopicPartition {
	result := make([]TopicPartition, 0, len(pms))
	for _, pm := range pms {
		result = append(result, TopicPartition{Topic: pm.tp.topic, Partition: pm.tp.partition})
	}
	sort.Slice(result, func(i, j int) bool { return result[i].less(result[j]) })
	return result
}

// shutdown runs when the manager goroutine ends:
//  1. stop every partition manager; meanwhile take back the messages still
//     buffered in the Messages channel, so that partitions do not wait for
//     acks of messages nobody received;
//  2. close the consumer, the offset manager (its last commits), the client;
//  3. deregister the instance and close the ZooKeeper connection;
//  4. close the Messages and Errors channels.
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
	cm.managePartitionManagers(nil) // each marks and commits its last acks
	close(stop)
	<-drained
	close(cm.markStop)
	<-cm.markDone
	for len(cm.messages) > 0 {
		<-cm.messages // no partition manager is left to account for them
	}

	cm.closeConnections()
	close(cm.messages)
	close(cm.errors)
}

// withdraw takes back a message that was handed out but never received.
func (cm *consumerManager) withdraw(msg *sarama.ConsumerMessage) {
	if pm := (*cm.pms.Load())[topicPartition{topic: msg.Topic, partition: msg.Partition}]; pm != nil {
		pm.withdraw(msg.Offset)
	}
}

// closeConnections closes what connect opened, in reverse order. Each step
// runs only if its part was opened.
func (cm *consumerManager) closeConnections() {
	if cm.consumer != nil {
		if err := cm.consumer.Close(); err != nil {
			cm.logf("Failed to close consumer: %s.", err)
		}
	}
	if cm.offsetManager != nil {
		if err := cm.offsetManager.Close(); err != nil {
			cm.logf("Failed to close offset manager: %s.", err)
		}
	}
	cm.leftovers.Wait()
	if cm.client != nil {
		if err := cm.client.Close(); err != nil {
			cm.logf("Failed to close Kafka client: %s.", err)
		}
	}
	if cm.registered {
		if err := cm.instance.Deregister(); err != nil && !errors.Is(err, kazoo.ErrInstanceNotRegistered) {
			cm.logf("Failed to deregister consumer instance: %s.", convertError(err))
		}
		cm.registered = false
	}
	if cm.kz != nil {
		if err := cm.kz.Close(); err != nil {
			cm.logf("Failed to close ZooKeeper connection: %s.", err)
		}
	}
}

func (cm *consumerManager) shortID() string {
	if cm.instance == nil {
		return "(defunct)"
	}
	id := cm.instance.ID
	if len(id) > 12 {
		id = id[len(id)-12:]
	}
	return id
}

func (cm *consumerManager) logf(format string, args ...interface{}) {
	Logger.Printf("[instance=%s] "+format, append([]interface{}{cm.shortID()}, args...)...)
}

// newInstanceID returns "<hostname>:<random UUID>", the form of kazoo-go's
// instance IDs (whose generator panics where this returns an error).
func newInstanceID() (string, error) {
	hostname, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("instance id: %w", err)
	}
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("instance id: %w", err)
	}
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // RFC 4122 variant
	h := hex.EncodeToString(b[:])
	return fmt.Sprintf("%s:%s-%s-%s-%s-%s", hostname, h[0:8], h[8:12], h[12:16], h[16:20], h[20:]), nil
}

// parseZookeeper splits a connection string "host:port,host:port/chroot"
// into its servers and chroot, and checks them.
func parseZookeeper(connection string) (nodes []string, chroot string, err error) {
	if strings.TrimSpace(connection) == "" {
		return nil, "", fmt.Errorf("%w: it is empty", ErrInvalidZookeeper)
	}
	nodes, chroot = kazoo.ParseConnectionString(connection)
	for _, node := range nodes {
		host, port, hasPort := strings.Cut(node, ":")
		if host == "" || strings.ContainsAny(node, " \t") {
			return nil, "", fmt.Errorf("%w: %q has an empty or malformed server %q", ErrInvalidZookeeper, connection, node)
		}
		if hasPort {
			if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
				return nil, "", fmt.Errorf("%w: %q has server %q with invalid port", ErrInvalidZookeeper, connection, node)
			}
		}
	}
	chroot = strings.TrimRight(chroot, "/")
	if strings.Contains(chroot, "//") {
		return nil, "", fmt.Errorf("%w: %q has an empty chroot path element", ErrInvalidZookeeper, connection)
	}
	return nodes, chroot, nil
}

// probeZookeeper waits up to the configured timeout for a session with one of
// the servers, so that Join fails fast and leaves nothing behind when
// ZooKeeper cannot be reached. (kazoo-go's client would wait forever.)
func probeZookeeper(nodes []string, config *kazoo.Config) error {
	conn, events, err := zk.Connect(nodes, config.Timeout, zk.WithLogger(config.Logger), zk.WithLogInfo(false))
	if err != nil {
		return fmt.Errorf("%w: %w", ErrZookeeperUnreachable, err)
	}
	defer conn.Close()
	deadline := time.NewTimer(config.Timeout)
	defer deadline.Stop()
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				return nil
			}
			if ev.State == zk.StateAuthFailed {
				return fmt.Errorf("%w: %s: authentication failed", ErrZookeeperUnreachable, strings.Join(nodes, ","))
			}
		case <-deadline.C:
			return fmt.Errorf("%w: no session with %s within %s (Zookeeper.Timeout)", ErrZookeeperUnreachable, strings.Join(nodes, ","), config.Timeout)
		}
	}
}
