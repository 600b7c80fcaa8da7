package kafkaconsumer

// The lifecycle of an instance: Join's work after validation (connect:
// ZooKeeper, brokers, the Kafka clients, the offset store, the
// registration), JoinContext's wait for the first claims, and the shutdown
// that the manager goroutine runs when it ends (stop the partitions, the
// last commits, close the clients, deregister).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/go-zookeeper/zk"
	"github.com/kafkaconsumer/kafkaconsumer/internal/fetch"
)

// joinGroup is Join (waitClaims false) and JoinContext (true); hooks are
// the tests' fault injection points, nil in normal use. Its steps: check
// the arguments (joinArgs), build the consumer manager on copies of the
// configuration (newConsumerManager), connect it (connect), start its
// goroutines and, for JoinContext, wait for the first claims.
func joinGroup(ctx context.Context, group string, subscription Subscription, zookeeper string, config *Config, waitClaims bool, hooks *testHooks) (Consumer, error) {
	args, err := checkJoin(group, subscription, zookeeper, config)
	if err != nil {
		return nil, err
	}
	if args.config.GroupProtocol == GroupProtocolShare {
		return joinShare(ctx, args, hooks) // share_join.go
	}
	cm, err := newConsumerManager(ctx, args, hooks)
	if err != nil {
		return nil, err
	}
	if err := cm.connect(ctx, args); err != nil {
		cm.closeConnections()
		return nil, err
	}
	cm.startLoops()
	go cm.run()
	if !waitClaims {
		return cm, nil
	}
	if err := cm.waitStarted(ctx); err != nil {
		cm.markShutdownCtxDone()
		if closeErr := cm.Close(); closeErr != nil {
			return nil, errors.Join(err, closeErr)
		}
		return nil, err
	}
	return cm, nil
}

// joinArgs are Join's arguments once checked: the ZooKeeper connection
// string parsed (none with CoordinatorKafka), the configuration
// validated (NewConfig's when nil), the subscription's JSON and the
// instance's ID.
type joinArgs struct {
	group            string
	subscription     Subscription
	subscriptionJSON []byte
	nodes            []string
	chroot           string
	config           *Config
	id               string
}

// kafkaCoordinated reports whether Kafka's group coordinator keeps the
// group (CoordinatorKafka): then there is no ZooKeeper.
func (a *joinArgs) kafkaCoordinated() bool { return a.config.Coordinator == CoordinatorKafka }

// checkJoin checks Join's arguments: each error names what is wrong, and
// nothing is started.
func checkJoin(group string, subscription Subscription, zookeeper string, config *Config) (*joinArgs, error) {
	if group == "" || strings.Contains(group, "/") || group == "." || group == ".." {
		return nil, fmt.Errorf("%w: %q (it must be non-empty, without '/')", ErrInvalidGroup, group)
	}
	args := &joinArgs{group: group, subscription: subscription}
	if err := checkSubscription(subscription, config); err != nil {
		return nil, err
	}
	var err error
	if config != nil && config.Coordinator == CoordinatorKafka {
		if zookeeper != "" {
			return nil, fmt.Errorf("%w: Coordinator is CoordinatorKafka, which uses no ZooKeeper, but Join was given the ZooKeeper connection string %q; pass \"\"", ErrInvalidConfig, zookeeper)
		}
	} else if args.nodes, args.chroot, err = parseZookeeper(zookeeper); err != nil {
		return nil, err
	}
	if config == nil {
		config = NewConfig()
	}
	if err := config.Validate(); err != nil {
		return nil, err
	}
	if err := config.validateChroot(args.chroot); err != nil {
		return nil, err
	}
	args.config = config
	if args.subscriptionJSON, err = subscription.JSON(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidSubscription, err)
	}
	if args.id = config.InstanceID; args.id == "" {
		if args.id, err = newInstanceID(); err != nil {
			return nil, err
		}
	}
	return args, nil
}

// checkSubscription checks that subscription works with config: a
// custom Subscription reads its partitions from ZooKeeper, through a
// kazoo-go connection of its own.
func checkSubscription(subscription Subscription, config *Config) error {
	if subscription == nil {
		return fmt.Errorf("%w: subscription is nil", ErrInvalidSubscription)
	}
	if v, ok := subscription.(interface{ validate() error }); ok {
		if err := v.validate(); err != nil {
			return err
		}
	}
	if _, ok := subscription.(topicSelector); ok || config == nil {
		return nil
	}
	switch {
	case config.Coordinator == CoordinatorKafka:
		return fmt.Errorf("%w: a custom Subscription (%T) reads its partitions from ZooKeeper: it works with Config.Coordinator CoordinatorZooKeeper only; with CoordinatorKafka use TopicSubscription, StaticSubscription, WhitelistSubscription or BlacklistSubscription", ErrInvalidSubscription, subscription)
	case config.Discovery == DiscoverFromKafka:
		return fmt.Errorf("%w: a custom Subscription (%T) reads its partitions from ZooKeeper: it works with Config.Discovery DiscoverFromZookeeper only; with DiscoverFromKafka use TopicSubscription, StaticSubscription, WhitelistSubscription or BlacklistSubscription", ErrInvalidSubscription, subscription)
	case config.ZookeeperTLS != nil || len(config.ZookeeperAuth) > 0:
		return fmt.Errorf("%w: a custom Subscription (%T) reads its partitions through a kazoo-go connection of its own, which cannot use Config.ZookeeperTLS or Config.ZookeeperAuth; use TopicSubscription, StaticSubscription, WhitelistSubscription or BlacklistSubscription", ErrInvalidSubscription, subscription)
	}
	return nil
}

// newConsumerManager builds the consumer manager of args, on copies of
// the configuration (Join does not change the caller's), and, unless
// Kafka coordinates the group, opens its first ZooKeeper connection (a
// probe that reports an unreachable ensemble within ctx).
func newConsumerManager(ctx context.Context, args *joinArgs, hooks *testHooks) (*consumerManager, error) {
	config := args.config
	logger := newLogger(config.Logger, args.group, args.id)
	kzConfig := *config.Zookeeper
	kzConfig.Chroot = args.chroot
	if kzConfig.Logger == nil || kzConfig.Logger == (zookeeperLogger{}) {
		kzConfig.Logger = slogZookeeperLogger{logger.With(attrComponent, "zookeeper")}
	}
	cfg := *config
	cfg.Config = config.saramaConfig()
	dialer := useKafkaDialer(cfg.Config)
	if hooks != nil {
		dialer.redirect = hooks.kafkaAddress
	}
	cfg.Zookeeper = &kzConfig

	negotiated, states, zkConns := new(atomic.Int64), make(chan struct{}, 1), newConnSet()
	var probe *zk.Conn
	if args.kafkaCoordinated() {
		cfg.Discovery = DiscoverFromKafka // the partitions from Kafka's metadata
	} else {
		security := zkSecurity{tls: config.ZookeeperTLS, auth: config.ZookeeperAuth}
		var err error
		if probe, err = probeZookeeper(ctx, args.nodes, &kzConfig, security, negotiated, zkConns, states); err != nil {
			return nil, err
		}
	}

	cm := &consumerManager{
		config:          &cfg,
		dialer:          dialer,
		log:             logger,
		autoCommit:      config.Consumer.Offsets.AutoCommit.Enable,
		group:           args.group,
		subscription:    args.subscription,
		hooks:           hooks,
		zkProbe:         probe,
		zkConns:         zkConns,
		messages:        make(chan *sarama.ConsumerMessage, cfg.ChannelBufferSize),
		batches:         make(chan *Batch, batchBuffer),
		closedMessages:  make(chan *sarama.ConsumerMessage),
		closedBatches:   make(chan *Batch),
		errors:          make(chan error, cfg.ChannelBufferSize),
		shutdownCtxDone: make(chan struct{}),
		firstRound:      make(chan struct{}),
		claims:          make(chan struct{}, 1),

		negotiated:     negotiated,
		zkStateChanged: states,
		handOutStopped: make(chan struct{}, 1),
		fenceBase:      time.Now(),
	}
	if probe != nil {
		cm.zkConn = sessionConn{probe}
	}
	cm.pms.Store(&partitionManagers{})
	close(cm.closedMessages)
	close(cm.closedBatches)
	cm.watches.log = logger
	if hooks != nil {
		cm.watches.missingTopic = hooks.missingTopic
	}
	return cm, nil
}

// connect connects cm to Kafka (and ZooKeeper, and registers it) through
// its coordinator. ctx, while connect runs, also cuts the Kafka
// connections and ends the dials in flight: nothing else interrupts
// sarama's first connections, nor its requests to a broker that hangs.
// On an error the caller closes what was opened (closeConnections).
func (cm *consumerManager) connect(ctx context.Context, args *joinArgs) error {
	kafkaCut := make(chan struct{}) // closed by the AfterFunc's goroutine, waited for when it ran
	stopCut := context.AfterFunc(ctx, func() {
		defer close(kafkaCut)
		cm.dialer.cut(fmt.Errorf("kafkaconsumer: join: %w", ctx.Err()))
	})
	var err error
	if args.kafkaCoordinated() {
		k := newKafkaCoordinator(cm)
		cm.coord = k
		cm.kzGroup = kazooValues.Consumergroup(args.group)
		cm.instance = cm.kzGroup.Instance(args.id)
		err = k.connectKafka(ctx)
	} else {
		m := newMigratingCoordinator(cm)
		cm.coord = m
		if err = cm.connectZookeeper(ctx, args.nodes, cm.zkProbe, args.id, markRegistration(args.subscriptionJSON)); err == nil {
			m.attach()
		}
	}
	if !stopCut() { // ctx is done: the Kafka connections are cut for good
		<-kafkaCut
		if err == nil {
			err = ctx.Err()
		}
	}
	return err
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

// openKafka opens what both coordinators share for Kafka: the sarama
// clients, consumers and fetch hubs of the partitions (see fetcherOf), and
// the offset store with its own client. On error, closeConnections closes
// what was opened.
func (cm *consumerManager) openKafka(ctx context.Context, brokers []string) error {
	// The partition consumers are spread over fetchConnections clients
	// (see fetcherOf), the first of which also reads the metadata; their
	// partition fetchers share one budget of Config.MaxBufferedBytes.
	// A broker loop does one thing at a time: it waits for its response,
	// then decodes it, then sends the next request. With several
	// brokers, the fetchers share one hub, on the first client: one loop
	// per broker, whose requests hold all the broker's partitions, each
	// loop's share of the budget the limit over the brokers, and the
	// other brokers' loops fetch while one decodes. With one broker,
	// each client has a hub, and the broker's two loops take turns.
	budget := fetch.NewBudget(cm.config.MaxBufferedBytes)
	var hub *fetch.Hub
	for range fetchConnections {
		client, err := sarama.NewClient(brokers, cm.config.Config)
		if err != nil && ctx.Err() != nil { // ctx cut the connections (joinGroup)
			return fmt.Errorf("connect to kafka at %s: %w", strings.Join(brokers, ","), ctx.Err())
		}
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
		if version, ok := fetchVersion(cm.config.Config); ok {
			if hub == nil || len(client.Brokers()) < 2 {
				hub = newFetchHub(client, cm.config.Config, version, budget, cm.log)
			}
			cm.fetchers[len(cm.fetchers)-1].hub = hub
		}
	}
	cm.client = cm.fetchers[0].client
	var err error
	// The offset store has a client of its own: Kafka answers the
	// requests of one connection one at a time, and its OffsetFetch and
	// OffsetCommit requests would otherwise wait behind the consumer's
	// fetches (up to Consumer.MaxWaitTime each) and ListOffsets requests.
	if cm.offsetClient, err = sarama.NewClient(brokers, cm.config.Config); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("connect to kafka at %s: %w", strings.Join(brokers, ","), ctx.Err())
		}
		return fmt.Errorf("connect to kafka at %s: %w", strings.Join(brokers, ","), err)
	}
	cm.offsets = newOffsetStore(cm.offsetClient, cm.group, cm.commitFailed)
	cm.offsets.lastProcessed = cm.config.CommitLastProcessed
	cm.offsets.durable = cm.config.DurableAcks
	cm.reads = newCommittedReads(&cm.kafkaCalls, cm.offsets.fetch)
	if h := cm.hooks; h != nil {
		cm.offsets.failRound = h.commitRound
		cm.offsets.fetching = h.fetchingOffsets
	}
	return ctx.Err()
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
				cm.tookBack(msg)
				cm.withdraw(msg)
			case b := <-cm.batches:
				cm.tookBackBatch(b)
				cm.withdrawBatch(b)
			case <-stop:
				return
			}
		}
	}()
	var errs []error
	// Stats shows nothing after Close.
	cm.awaiting.Store(nil)
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
		cm.tookBack(<-cm.messages) // no partition manager is left to account for them
	}
	for len(cm.batches) > 0 {
		cm.tookBackBatch(<-cm.batches)
	}
	if left := cm.releaseOrphans(); len(left) > 0 {
		errs = append(errs, fmt.Errorf("%w: %s; they go when the ZooKeeper session expires", ErrReleaseFailed, describePartitions(left)))
	}
	cm.watches.stop()

	errs = append(errs, cm.closeConnections()...)
	cm.stopMetadataPoller() // after the client closed, which ends a request in flight
	close(cm.messages)
	close(cm.batches)
	cm.closeErrors()
	cm.t.Kill(errors.Join(errs...))
}

func describePartitions(tps []TopicPartition) string {
	names := make([]string, len(tps))
	for i, tp := range tps {
		names[i] = fmt.Sprintf("%s/%d", tp.Topic, tp.Partition)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// closeGrace bounds how long Close waits for its last commit rounds
// before it closes the Kafka clients under them, which makes their
// remaining retries fail at once.
const closeGrace = 5 * time.Second

// closeConnections closes what connect opened, in reverse order, and
// returns what did not complete: Kafka (closeKafka), then the
// coordinator's membership and connections (coordinator.close). Each step
// runs only if its part was opened.
func (cm *consumerManager) closeConnections() []error {
	cm.closeKafka()
	return cm.coordinator().close()
}

// closeKafka closes the consumer and the committer, and then the clients.
// Nothing is left to commit: every partition stopped, and a final commit
// either succeeded or was given up with the partition's claim (see
// commitTimeout). With Kafka unreachable, a commit round in flight
// retries the coordinator for long (per broker Net.DialTimeout, times
// Metadata.Retry.Max), a fetch in flight to a hung broker takes up to
// Net.ReadTimeout, a coordinator lookup of a starting partition up to
// three, and a dial to an address that never answers up to
// Net.DialTimeout: after closeGrace the consumer's Kafka connections are
// cut under them, and its dials ended (see kafkaDialer), and the clients
// closed, so that they and their retries fail at once. A partition whose
// final commit did not complete said so itself (ErrCommitTimeout).
func (cm *consumerManager) closeKafka() {
	closed := make(chan struct{})
	go func() { // owned by closeKafka, which waits for it
		defer close(closed)
		cm.closeConsumers()
		cm.kafkaCalls.Wait()
		for _, f := range cm.fetchers {
			if f.hub != nil {
				f.hub.Close() // its partition fetchers ended with their partitions; a second close of a shared hub does nothing
			}
		}
		if cm.commitStop != nil {
			close(cm.commitStop)
			<-cm.commitDone
		}
		cm.coordinator().beforeKafkaClose() // a LeaveGroup, after the last commits
	}()

	deadline := time.Now().Add(closeGrace)
	timeout := time.NewTimer(time.Until(cm.bound(deadline, kafkaAfterCtxDone)))
	defer timeout.Stop()
	ctxDone := cm.shutdownCtxDone
wait:
	select {
	case <-closed:
		// Dials first: a broker being opened (by sarama's background
		// metadata refresh, say) cannot be closed until its dial ends.
		cm.dialer.stopDialing(errDialerClosed)
		cm.closeClients(true)
		cm.dialer.cutAll() // none is left open
	case <-ctxDone: // a Shutdown's context ended: the deadline moves closer
		ctxDone = nil
		timeout.Reset(time.Until(cm.bound(deadline, kafkaAfterCtxDone)))
		goto wait
	case <-timeout.C:
		cm.logf(slog.LevelWarn, "Kafka requests still in flight after %s; closing the Kafka connections under them.", closeGrace)
		cm.dialer.cutAll()     // first: a broker being opened (dialing) cannot be closed
		cm.closeClients(false) // their errors are those of the requests it fails
		<-closed
	}
}

// closeClients closes the sarama clients that connect opened, logging
// their errors when logErrors is set.
func (cm *consumerManager) closeClients(logErrors bool) {
	clients := []sarama.Client{cm.offsetClient, cm.groupClient}
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
