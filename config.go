package kafkaconsumer

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/IBM/sarama"
	"github.com/go-zookeeper/zk"
	"github.com/wvanbergen/kazoo-go"
)

// Defaults of NewConfig.
const (
	// DefaultZookeeperTimeout is the ZooKeeper session timeout of NewConfig.
	//
	// kazoo-go's own default is 1 second: one garbage collection pause or
	// network blip longer than that expires the session, which deletes the
	// instance's registration and partition claims and costs the whole group
	// a rebalance. 6 seconds (the old Kafka consumer's
	// zookeeper.session.timeout.ms) rides out such pauses. The price is
	// fail-over time: when an instance dies without closing (kill -9, a lost
	// machine), its partitions are consumed again only after this timeout.
	// The ZooKeeper servers clamp it to [2, 20] times their tickTime.
	DefaultZookeeperTimeout = 6 * time.Second

	// DefaultMaxProcessingTime is the MaxProcessingTime of NewConfig.
	DefaultMaxProcessingTime = 60 * time.Second

	// DefaultMaxPendingAcks is the MaxPendingAcks of NewConfig.
	DefaultMaxPendingAcks = 16384
	// DefaultMaxBufferedBytes is the MaxBufferedBytes of NewConfig.
	DefaultMaxBufferedBytes = 16 << 20

	// DefaultDiscoveryInterval is the DiscoveryInterval of NewConfig.
	DefaultDiscoveryInterval = 5 * time.Second
)

// defaultOffsetsInitial is the Offsets.Initial of NewConfig, which it
// gives sarama's Consumer.Offsets.Initial too (see Config.Config).
const defaultOffsetsInitial = sarama.OffsetOldest

// Config is the configuration of a consumer instance. Create it with
// NewConfig and change what you need before calling Join; Join does not
// change it, and it must not be changed while a consumer uses it.
type Config struct {
	// Config is sarama's configuration, used for the clients, the consumer
	// and the offset commits. NewConfig starts from sarama.NewConfig() and
	// sets Consumer.Return.Errors, so partition and commit errors reach
	// Errors(), and Consumer.Offsets.Initial to sarama.OffsetOldest, as
	// Offsets.Initial.
	//
	// Consumer.Offsets.Initial is not used: the consumer starts at
	// Offsets.Initial. So that a value set here is not ignored without a
	// word, Validate refuses one that is neither NewConfig's
	// (sarama.OffsetOldest) nor Offsets.Initial, naming both: in practice
	// sarama.OffsetNewest set here with Offsets.Initial left at its
	// default; set Offsets.Initial instead. (NewConfig gives it
	// sarama.OffsetOldest, not sarama's default sarama.OffsetNewest, so
	// that a user's sarama.OffsetNewest can be told from a default.)
	// Consumer.Offsets.AutoCommit.Enable and .Interval are honoured: the
	// consumer runs the commit rounds itself, with sarama's auto-commit
	// off in its own copy.
	//
	// The consumer dials its Kafka connections itself, so that Close can
	// cut them under requests to a broker that hangs, and end the dials
	// in flight to an address that never answers (which would otherwise
	// wait Net.DialTimeout): it dials as sarama would (Net.DialTimeout,
	// Net.KeepAlive, Net.LocalAddr), or through Net.Proxy.Dialer when
	// Net.Proxy.Enable is set, and sets Net.Proxy on its own copy (sarama
	// then logs "using proxy" at each dial). A Net.Proxy.Dialer that
	// implements golang.org/x/net/proxy.ContextDialer dials with
	// DialContext, whose context the consumer cancels when Close cuts its
	// connections, when a Shutdown's context is done, and when
	// JoinContext's ctx is done while it connects; one without
	// DialContext dials with Dial, which nothing interrupts: Close,
	// Shutdown and JoinContext then wait for a dial in flight as long as
	// it takes, past their bounds. The copy's Metadata.Retry.BackoffFunc
	// pauses as Metadata.Retry.Backoff or your BackoffFunc, and not at all
	// once the consumer stopped dialing (each retry then fails at once).
	// Validate refuses Net.Proxy.Enable without a Net.Proxy.Dialer.
	*sarama.Config

	// Zookeeper is the configuration of the ZooKeeper connection. Its Chroot
	// is taken from the connection string given to Join: leave it empty
	// (Join refuses a Chroot that differs from the connection string's,
	// naming both). Timeout is the session timeout (default
	// DefaultZookeeperTimeout; see there for the trade-off) and also
	// bounds how long Join waits for a first session.
	// Logger defaults to one that writes to the consumer's logger
	// (Config.Logger, or the package Logger when that is nil).
	Zookeeper *kazoo.Config

	// ZookeeperTLS, when set, makes every ZooKeeper connection of the
	// consumer a TLS one with this configuration (the servers' TLS port,
	// ZooKeeper's secureClientPort), presenting its client certificate
	// when the server asks for one: ZooKeeper's x509 authentication
	// provider then knows the session as x509:<certificate subject>. The
	// server's name is verified against the name in the connection
	// string, unless ServerName is set. A server whose certificate does
	// not verify, or that refuses this one, gives no session: Join fails
	// within Zookeeper.Timeout with ErrZookeeperUnreachable, naming the
	// server and the TLS error. Default nil: plaintext.
	ZookeeperTLS *tls.Config

	// ZookeeperAuth are credentials the consumer's ZooKeeper session
	// presents (ZooKeeper's addauth) once it has a session, and again on
	// every reconnection, before any other request: for example
	// DigestCredential(user, password). Default nil: none.
	ZookeeperAuth []ZookeeperCredential

	// ZookeeperACL is the ACL of the nodes the consumer creates for its
	// group: the group's node, ids/, owners/ and owners/<topic>, and the
	// registration and claim nodes in them (the parents above the group,
	// /consumers, stay open). For example
	// zk.DigestACL(zk.PermAll, user, password), or
	// []zk.ACL{{Perms: zk.PermAll, Scheme: "x509", ID: "CN=orders"}} with
	// ZookeeperTLS. Nodes that exist keep their ACL: set theirs with
	// ZooKeeper's setAcl (see docs/security.md for the order in which to
	// move a running group onto an ACL). Join fails with an error wrapping
	// ErrZookeeperAccessDenied, naming the node, the ACL and this
	// instance's identities, before it registers, when the group's nodes
	// do not let it create, delete and read what a member does.
	// Default nil: zk.WorldACL(zk.PermAll), open to everyone, as the
	// original library's nodes are.
	ZookeeperACL []zk.ACL

	// Brokers, when not empty, are the Kafka addresses ("host:port") that
	// sarama's client bootstraps from, instead of those of the brokers
	// registered in ZooKeeper: discovery through ZooKeeper is skipped
	// entirely (ZooKeeper still coordinates the group). Give the addresses
	// of the listener that fits the sarama configuration (Net.TLS,
	// Net.SASL). Kafka's bootstrap.servers. Default nil: discover.
	Brokers []string

	// Listener names the listener of the registered brokers to connect to
	// (as in the brokers' listeners setting, e.g. "EXTERNAL"), when the
	// brokers are found through ZooKeeper. Default "": the first listener
	// of each broker whose security protocol fits the sarama
	// configuration: SASL_SSL when Net.TLS.Enable and Net.SASL.Enable are
	// both set, SSL with TLS only, SASL_PLAINTEXT with SASL only,
	// PLAINTEXT with neither. Join fails with an error wrapping
	// ErrNoBrokers, naming the listeners found, when no broker has the
	// listener. It cannot be combined with Brokers.
	Listener string

	// Coordinator says who coordinates the group: CoordinatorZooKeeper
	// (the default: ZooKeeper, as the original library) or
	// CoordinatorKafka (Kafka's group coordinator, with the classic
	// protocol; no ZooKeeper at all). With CoordinatorKafka, Join takes ""
	// for the ZooKeeper connection string (it refuses another), Brokers
	// is required, the partitions come from Kafka's metadata whatever
	// Discovery says, and the group's timeouts are sarama's
	// Consumer.Group settings: Session.Timeout (the fence and a dead
	// member's fail-over; a static member's grace), Heartbeat.Interval
	// (at most a third of it) and Rebalance.Timeout (raised to
	// MaxProcessingTime + 5 s + Session.Timeout at least, so that a
	// member stopping its revoked partitions is not removed). The
	// Zookeeper settings, RestartGrace excepted, are unused then.
	Coordinator Coordinator

	// GroupProtocol is the group protocol of CoordinatorKafka:
	// GroupProtocolClassic (the default: JoinGroup, SyncGroup, Heartbeat)
	// or GroupProtocolConsumer (KIP-848's ConsumerGroupHeartbeat, Kafka
	// 4.0 and later; Kafka's group.protocol), or GroupProtocolShare (a
	// share group, KIP-932, Kafka 4.2 and later). Validate refuses
	// GroupProtocolConsumer and GroupProtocolShare with
	// CoordinatorZooKeeper. See the README, "Kafka-coordinated groups",
	// docs/consumer-protocol.md and docs/share-groups.md.
	//
	// With GroupProtocolShare, Offsets.Initial sets the group's
	// share.auto.offset.reset at Join (OffsetOldest "earliest",
	// OffsetNewest "latest"; an IncrementalAlterConfigs of the group,
	// which needs ALTER_CONFIGS on it: a refusal is reported on Errors()
	// and the group keeps its setting); Validate refuses InstanceID,
	// DurableAcks, CommitLastProcessed and GroupRemoteAssignor. BatchSize
	// works (batches of one partition from one ShareFetch answer), but
	// BatchLinger is not waited (see Consumer.Batches).
	GroupProtocol GroupProtocol

	// GroupRemoteAssignor is the broker-side assignor that computes the
	// assignment of a GroupProtocolConsumer group (Kafka's
	// group.remote.assignor): "uniform" or "range" on Kafka 4, or one
	// the brokers' group.consumer.assignors name. Default "" is
	// "uniform". Join fails with an error naming it when the broker does
	// not know it. Unused with GroupProtocolClassic.
	GroupRemoteAssignor string

	// Discovery says where the brokers, topics and partitions are found:
	// DiscoverFromZookeeper (the default) or DiscoverFromKafka, for a
	// cluster in KRaft mode (Kafka 4 has no other), whose ZooKeeper holds
	// no /brokers. Either way ZooKeeper coordinates the group.
	Discovery Discovery

	// DiscoveryInterval is how often, with DiscoverFromKafka, each instance
	// asks Kafka for the metadata of the subscribed topics, and so bounds
	// how late a topic or partition created (or deleted) is noticed: a new
	// partition is consumed within about one interval, a rebalance that
	// moves partitions between instances completes within two. Kafka's
	// metadata.max.age.ms for this purpose. Unused with
	// DiscoverFromZookeeper, which watches ZooKeeper. Default
	// DefaultDiscoveryInterval (5 s).
	DiscoveryInterval time.Duration

	// InstanceID, when set, is this instance's stable identity in the
	// group (static membership, as Kafka's group.instance.id): it
	// registers as /consumers/<group>/ids/<InstanceID> instead of under a
	// new random ID ("<hostname>:<UUID>") at each Join. The distribution
	// sorts the instances by ID, so an instance that comes back with the
	// same ID, while the others are the same, gets the same partitions.
	// Use a name that is stable across restarts and unique in the group,
	// such as a StatefulSet pod's name: up to 249 characters among
	// letters, digits, '.', '_', '-' and ':' (not "." nor ".."); Validate
	// refuses others. While another live instance is registered under the
	// same ID, Join fails with an error wrapping ErrInstanceIDInUse. A
	// registration left by a previous instance of the ID that died (kill
	// -9) is waited for until its ZooKeeper session expires, so that a
	// restart right after the kill goes through: Join waits up to T +
	// 3/4 × N + 1 s, where N is this instance's negotiated session
	// timeout and T the longer of N and the previous instance's, as the
	// static record of the ID says (when it names none, T is N: the
	// contract then assumes the previous instance ran with the same
	// Zookeeper.Timeout against the same servers). ZooKeeper expires a
	// session up to one of its ticks after its timeout, plus half a tick
	// in an ensemble, and a tick is at most N / 2 as long as the servers'
	// minSessionTimeout is at least its default of 2 ticks: the bound
	// holds whatever the tick under that assumption. Join goes on as soon
	// as the registration is gone; only a live instance's makes it wait
	// the whole bound before it fails (11.5 s with the default 6 s
	// session). Default "": a random ID.
	InstanceID string

	// RestartGrace is how long the other instances of the group wait for
	// this instance to come back, after it departed (Close, Shutdown, or
	// its ZooKeeper session expired), before they take its partitions:
	// meanwhile they distribute the partitions as if it were still there,
	// so nothing moves among them and its partitions are consumed by
	// nobody (their lag grows; PartitionStats.AwaitingReturn shows them).
	// When it comes back in time under the same InstanceID, it gets the
	// same partitions; after the grace the group rebalances as without
	// it. Kafka's session.timeout.ms for static members. The grace
	// counts from the departure as ZooKeeper recorded it, so every
	// instance ends it at the same moment whatever their clocks say. It
	// needs InstanceID. In a group with instances of the original
	// wvanbergen/kafka library registered, there is no grace (see
	// docs/configuration.md). Default 0: the partitions move at once.
	RestartGrace time.Duration

	// MaxProcessingTime is how long a partition that is being stopped (in a
	// rebalance or by Close) waits for the messages it handed out to be
	// acked before it commits what was acked and lets go of the partition.
	// Messages not acked by then are consumed again by the next owner;
	// those still unread in the Messages (or Batches) channel are taken
	// back first, never to be received from this instance.
	// The final commit and the release of the claim may take 5 s more:
	// a stopping partition holds its claim for at most MaxProcessingTime
	// + 5 s, whatever Kafka and ZooKeeper do. Under an orchestrator, keep
	// it below the grace period of a stop (30 s in Kubernetes) minus 10 s,
	// and stop with Consumer.Shutdown with that deadline (see the README,
	// "Bounded start and stop"). Default 60 s.
	MaxProcessingTime time.Duration

	// MaxPendingAcks bounds, per partition, how many messages may be handed
	// out and not yet committable: those not acked, plus those acked after
	// a message that is not acked yet. When a partition reaches it, it
	// pauses: it hands out nothing more until the oldest of them is acked,
	// and says so (ErrMaxPendingAcks on Errors, PartitionStats.Paused).
	// Every message must be acked: acking only the last message of a batch
	// stops the partition here for good. The bookkeeping is a ring of 24
	// bytes per message that grows by doubling: at most 24 times
	// MaxPendingAcks rounded up to a power of two bytes per partition
	// (384 KiB with the default). Default 16384.
	MaxPendingAcks int

	// MaxBufferedBytes bounds the memory of the messages that the instance
	// has fetched and not handed out yet (their keys, values and headers,
	// and the messages themselves), for all its partitions together. Each
	// broker's fetch loop (two per broker) has a share of it, the bound
	// over the running loops, so that no broker's partitions wait while
	// others hold it all. A fetch request reserves at most what is free of
	// it and what the loop's messages not handed out leave of its share,
	// and waits, rather than ask for less, until a quarter of the share is
	// free; it asks Kafka for that many bytes divided by the largest ratio
	// of the messages' memory to their bytes on the wire in the broker's
	// recent responses (Kafka's fetch.max.bytes, within
	// Consumer.Fetch.MaxBytes), and holds the reservation until its
	// response is handled, so that no two requests count the same free
	// bytes. A broker whose fetched messages all went out may always
	// fetch (1 byte of a spent budget), so that every partition makes
	// progress. The messages a partition gathers into its next batch (up
	// to 256, or BatchSize) count until they go out; with BatchSize, a
	// batch goes out before BatchLinger when its broker's fetch waits for
	// the budget. Beyond it come what a
	// response brings past its request's size (Kafka answers with at least
	// one record batch, however large; compressed records count more than
	// their wire bytes); the messages in the Messages or Batches channel
	// (ChannelBufferSize messages, or 4 batches); and the fetched messages of the
	// partitions paused by Pause or waiting at MaxPendingAcks, which leave
	// the budget so that the other partitions do not wait for them. As
	// with sarama's consumer, a message's key and value point into the
	// fetch response it came in, which a message kept after its ack keeps
	// alive. PartitionStats.BufferedBytes shows a partition's share. 0
	// lifts the bound (Consumer.Fetch.MaxBytes per request still holds).
	// Default DefaultMaxBufferedBytes; BENCHMARKS.md has the peak RSS and
	// throughput of a sweep of it. Not used where sarama's partition
	// consumer fetches: a Config.Version before Kafka 0.11, or SASL
	// GSSAPI. A share group's consumer (GroupProtocolShare) asks for half
	// of it in each ShareFetch, unless Consumer.Fetch.Max is set.
	MaxBufferedBytes int64

	// BatchSize, when positive, sets the consumer to batches: it hands out
	// *Batch values on Batches, each up to BatchSize messages of one
	// partition in offset order, instead of single messages on Messages.
	// Acks stay per message (Ack, or AckBatch for all of a batch).
	// A partition hands out a batch as soon as it holds BatchSize messages
	// or BatchLinger has passed since its first message, whichever comes
	// first, or earlier when MaxBufferedBytes lets no more be fetched for
	// it; with BatchLinger 0, a batch is what the partition has fetched
	// and ready, up to BatchSize. It must not exceed MaxPendingAcks.
	// Default 0: single messages on Messages.
	BatchSize int

	// BatchLinger is how long a partition waits, after the first message of
	// a batch, for more messages to fill it (see BatchSize). Kafka's
	// linger.ms, on the consuming side. Default 0: no wait. It needs a
	// positive BatchSize.
	BatchLinger time.Duration

	// CommitLastProcessed commits, for each partition, the offset of the
	// last message processed (N) instead of the next one to read (N+1),
	// and reads a committed offset without this package's mark as such
	// (it starts at that offset + 1): the convention of instances of the
	// original wvanbergen/kafka library built on sarama v1.9 or older.
	// Set it on every instance of a group that has such originals, for as
	// long as it has them: without it, each partition that moves from
	// this package to one of them skips a message. Each commit of this
	// package carries its convention in its metadata, so instances with
	// and without the setting read each other's commits right (it can be
	// turned on and off one instance at a time), and a partition started
	// by an instance is committed again in its convention. Kafka's tools
	// show such a group's offsets one lower; an offset set with them (a
	// reset) is read as the last processed too. See the README,
	// "Upgrading from wvanbergen/kafka". Default false.
	CommitLastProcessed bool

	// DurableAcks makes each commit of a partition carry, in the commit's
	// metadata, the offsets beyond the committed one that were acked
	// already (acks come in any order; the committed offset is the end of
	// the acked prefix). A partition that starts (after a rebalance, a
	// restart, a crash, a migration) reads them, counts them as acked and
	// hands none of them out again, with Messages or Batches and with
	// either Coordinator: after a crash, what is delivered again is what
	// was handed out and not acked, and what was acked since the last
	// commit, not everything beyond the first unacked message.
	//
	// The set must fit Kafka's offset.metadata.max.bytes (4,096 bytes by
	// default). A partition whose set, encoded, reaches 3/4 of that stops
	// handing out until its oldest pending message is acked, the pause of
	// MaxPendingAcks (ErrMaxPendingAcks on Errors, PartitionStats.Paused),
	// and a set that does not fit is cut to its first offsets. A broker
	// that refuses the metadata (OFFSET_METADATA_TOO_LARGE: a lower
	// offset.metadata.max.bytes) gets the commit again without the set,
	// one error on Errors() says so (wrapping
	// sarama.ErrOffsetMetadataTooLarge), and later sets are kept under
	// half the refused size.
	//
	// Clients that do not know the set (the original library, Kafka's own
	// clients, tools) ignore it and deliver again what it holds: the
	// at-least-once of the committed offset. Releases of this package
	// before it read the metadata as no mark (see CommitLastProcessed):
	// those without CommitLastProcessed deliver again, those with it skip
	// the message at the committed offset. Turn it on once every instance
	// of the group runs a release that knows it.
	//
	// Default false: turning it on changes what the group's commits hold
	// (up to 4 KB of metadata per partition and commit, where a commit
	// was tens of bytes, in the offsets topic and in every OffsetCommit
	// request), a partition with a long run of unacked messages pauses
	// earlier than MaxPendingAcks, and older releases in the group (see
	// above) must be gone first. A group that acks in order gains nothing
	// from it.
	DurableAcks bool

	// OnRebalance, when set, is called after each change of the partitions
	// this instance consumes, with the partitions it stopped and those it
	// started (their claims may still be pending while a previous owner
	// finishes). A stopped partition has made its final commit and released
	// its claim, unless Kafka or ZooKeeper did not answer in time: then
	// ErrCommitTimeout or ErrReleaseFailed went to Errors() first, and the
	// release goes on being tried in the background. It is
	// called from the consumer's manager goroutine, one call at a time, and
	// no rebalance proceeds until it returns: keep it short, and do not call
	// Close from it (Interrupt is fine). Default nil.
	OnRebalance func(Rebalance)

	// Logger, when set, receives this consumer's log lines, and those of
	// its ZooKeeper client (unless Zookeeper.Logger is set to something
	// else), with the attributes group and instance (the instance's ID),
	// plus topic and partition on the lines of a partition and
	// component=zookeeper on the ZooKeeper client's. Levels: debug for the
	// life of each partition (claimed, started, stopped), info for
	// registration and rebalances, warn for what the consumer retries or
	// works around, error for what needs a person (a commit not confirmed,
	// a claim not released, a log truncated, errors dropped). Default nil:
	// the lines go to the package Logger, which is silent by default.
	Logger *slog.Logger

	// Metrics, when set, receives the consumer's events: rebalances, claim
	// waits, lost registrations, commit rounds and failed commits, pauses
	// at MaxPendingAcks (see Metrics; the kprom module adapts it to
	// Prometheus). Default nil.
	Metrics Metrics

	// Observer, when set, is told of each message handed out, acked, or
	// taken back unread (see Observer; the kotel module traces messages
	// with it). It is called on the hand-out path, once per message (or
	// batch) and once per ack. Default nil: no call.
	Observer Observer

	// Offsets configures where consumption starts.
	Offsets struct {
		// Initial is the offset to start at when the group has no committed
		// offset for a partition, or when the committed one is no longer
		// available (it fell out of retention, or the log was truncated
		// below it): sarama.OffsetOldest (the default) or
		// sarama.OffsetNewest. Kafka's auto.offset.reset. The offset it
		// resolves to becomes the partition's offset to commit before
		// anything is handed out (with OffsetNewest the partition waits for
		// that commit), so a partition that stops before its first ack
		// never leaves its next owner to start at a later newest offset.
		// Reading committed (Consumer.IsolationLevel), OffsetNewest is
		// the last stable offset, as in Kafka's clients: a transaction
		// open at the start is handed out once it commits.
		// The sarama configuration's Consumer.Offsets.Initial is not used
		// (see Config.Config).
		Initial int64
	}
}

// NewConfig returns a Config with the defaults described on its fields.
func NewConfig() *Config {
	c := &Config{
		Config:            sarama.NewConfig(),
		Zookeeper:         kazoo.NewConfig(),
		MaxProcessingTime: DefaultMaxProcessingTime,
		MaxPendingAcks:    DefaultMaxPendingAcks,
		MaxBufferedBytes:  DefaultMaxBufferedBytes,
		DiscoveryInterval: DefaultDiscoveryInterval,
	}
	c.Config.Consumer.Return.Errors = true
	c.Zookeeper.Timeout = DefaultZookeeperTimeout
	c.Zookeeper.Logger = zookeeperLogger{}
	c.Offsets.Initial = defaultOffsetsInitial
	c.Config.Consumer.Offsets.Initial = defaultOffsetsInitial
	return c
}

// Validate checks the configuration and returns an error wrapping
// ErrInvalidConfig that names the first setting out of range, or the
// first sarama setting that the consumer would not use as set, with the
// setting it uses instead.
func (c *Config) Validate() error {
	switch {
	case c == nil:
		return fmt.Errorf("%w: config is nil", ErrInvalidConfig)
	case c.Config == nil:
		return fmt.Errorf("%w: the sarama Config is nil", ErrInvalidConfig)
	case c.Zookeeper == nil:
		return fmt.Errorf("%w: Zookeeper config is nil", ErrInvalidConfig)
	case c.Zookeeper.Timeout <= 0:
		return fmt.Errorf("%w: Zookeeper.Timeout must be positive, got %s", ErrInvalidConfig, c.Zookeeper.Timeout)
	case c.MaxProcessingTime <= 0:
		return fmt.Errorf("%w: MaxProcessingTime must be positive, got %s", ErrInvalidConfig, c.MaxProcessingTime)
	case c.MaxPendingAcks <= 0:
		return fmt.Errorf("%w: MaxPendingAcks must be positive, got %d", ErrInvalidConfig, c.MaxPendingAcks)
	case c.MaxBufferedBytes < 0:
		return fmt.Errorf("%w: MaxBufferedBytes must not be negative, got %d (0 lifts the bound)", ErrInvalidConfig, c.MaxBufferedBytes)
	case c.BatchSize < 0:
		return fmt.Errorf("%w: BatchSize must not be negative, got %d", ErrInvalidConfig, c.BatchSize)
	case c.BatchSize > c.MaxPendingAcks:
		return fmt.Errorf("%w: BatchSize (%d) must not exceed MaxPendingAcks (%d): a partition hands out at most MaxPendingAcks messages not acked",
			ErrInvalidConfig, c.BatchSize, c.MaxPendingAcks)
	case c.BatchLinger < 0:
		return fmt.Errorf("%w: BatchLinger must not be negative, got %s", ErrInvalidConfig, c.BatchLinger)
	case c.BatchLinger > 0 && c.BatchSize == 0:
		return fmt.Errorf("%w: BatchLinger is %s but BatchSize is 0 (batches are off); set BatchSize to hand out batches",
			ErrInvalidConfig, c.BatchLinger)
	case c.Offsets.Initial != sarama.OffsetOldest && c.Offsets.Initial != sarama.OffsetNewest:
		return fmt.Errorf("%w: Offsets.Initial must be sarama.OffsetOldest (%d) or sarama.OffsetNewest (%d), got %d",
			ErrInvalidConfig, sarama.OffsetOldest, sarama.OffsetNewest, c.Offsets.Initial)
	case c.Consumer.Offsets.Initial != defaultOffsetsInitial && c.Consumer.Offsets.Initial != c.Offsets.Initial:
		return fmt.Errorf("%w: Config.Consumer.Offsets.Initial (sarama) is %s but Offsets.Initial is %s: the consumer uses Offsets.Initial; set Offsets.Initial",
			ErrInvalidConfig, offsetName(c.Consumer.Offsets.Initial), offsetName(c.Offsets.Initial))
	case c.Net.Proxy.Enable && c.Net.Proxy.Dialer == nil:
		return fmt.Errorf("%w: Config.Net.Proxy.Enable (sarama) is set but Net.Proxy.Dialer is nil: the consumer would dial the brokers directly; set Net.Proxy.Dialer, or clear Net.Proxy.Enable",
			ErrInvalidConfig)
	case c.Listener != "" && !validListenerName(c.Listener):
		return fmt.Errorf("%w: Listener %q is not a listener name (letters, digits, '_' and '-')", ErrInvalidConfig, c.Listener)
	case c.Listener != "" && len(c.Brokers) > 0:
		return fmt.Errorf("%w: Listener %q and Brokers are both set; Listener only selects among brokers found through ZooKeeper", ErrInvalidConfig, c.Listener)
	case c.RestartGrace < 0:
		return fmt.Errorf("%w: RestartGrace must not be negative, got %s", ErrInvalidConfig, c.RestartGrace)
	case c.RestartGrace > 0 && c.InstanceID == "":
		return fmt.Errorf("%w: RestartGrace is %s but InstanceID is empty: only an instance with a stable InstanceID can come back as itself; set InstanceID",
			ErrInvalidConfig, c.RestartGrace)
	case c.DiscoveryInterval <= 0:
		return fmt.Errorf("%w: DiscoveryInterval must be positive, got %s", ErrInvalidConfig, c.DiscoveryInterval)
	}
	if err := validateInstanceID(c.InstanceID); err != nil {
		return err
	}
	if err := c.validateCoordinator(); err != nil {
		return err
	}
	if err := c.validateDiscovery(); err != nil {
		return err
	}
	if err := c.validateZookeeperSecurity(); err != nil {
		return err
	}
	for _, addr := range c.Brokers {
		if err := validateBrokerAddr(addr); err != nil {
			return fmt.Errorf("%w: Brokers: %w", ErrInvalidConfig, err)
		}
	}
	if err := c.Config.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return nil
}

// validateChroot checks Zookeeper.Chroot against chroot, that of Join's
// connection string, which the consumer uses: it returns an error wrapping
// ErrInvalidConfig, naming both, when Zookeeper.Chroot is set to another.
func (c *Config) validateChroot(chroot string) error {
	set := strings.TrimRight(c.Zookeeper.Chroot, "/")
	if set == "" || set == chroot {
		return nil
	}
	return fmt.Errorf("%w: Zookeeper.Chroot (kazoo) is %q but the chroot of the connection string is %q: the consumer uses the connection string's; end the connection string with %q, and leave Zookeeper.Chroot empty",
		ErrInvalidConfig, c.Zookeeper.Chroot, chroot, set)
}

// offsetName returns an Offsets.Initial value with its name.
func offsetName(offset int64) string {
	switch offset {
	case sarama.OffsetOldest:
		return "sarama.OffsetOldest (-2)"
	case sarama.OffsetNewest:
		return "sarama.OffsetNewest (-1)"
	}
	return strconv.FormatInt(offset, 10)
}

// saramaConfig returns a copy of the sarama configuration with the settings
// that this package derives from its own.
func (c *Config) saramaConfig() *sarama.Config {
	sc := *c.Config
	sc.Consumer.Offsets.Initial = c.Offsets.Initial
	// The committer runs the commit rounds (consumerManager.commitLoop),
	// so that each is seen, timed and reported to Metrics.
	sc.Consumer.Offsets.AutoCommit.Enable = false
	return &sc
}

// MinKafkaVersionForStaticMembers is the oldest sarama Config.Version
// with which CoordinatorKafka accepts an InstanceID: JoinGroup carries the
// group instance ID from Kafka 2.3 on (KIP-345).
var MinKafkaVersionForStaticMembers = sarama.V2_3_0_0

// validateCoordinator checks Coordinator and what CoordinatorKafka needs.
func (c *Config) validateCoordinator() error {
	switch c.GroupProtocol {
	case GroupProtocolClassic:
		if c.GroupRemoteAssignor != "" {
			return fmt.Errorf("%w: GroupRemoteAssignor is %q but GroupProtocol is GroupProtocolClassic, whose assignment this library computes; set GroupProtocol to GroupProtocolConsumer, or leave GroupRemoteAssignor empty",
				ErrInvalidConfig, c.GroupRemoteAssignor)
		}
	case GroupProtocolConsumer:
		if c.Coordinator != CoordinatorKafka {
			return fmt.Errorf("%w: GroupProtocol is GroupProtocolConsumer but Coordinator is %s: the consumer group protocol is Kafka's group coordinator's; set Coordinator to CoordinatorKafka",
				ErrInvalidConfig, c.Coordinator)
		}
	case GroupProtocolShare:
		if err := c.validateShare(); err != nil {
			return err
		}
	default:
		return fmt.Errorf("%w: GroupProtocol must be GroupProtocolClassic, GroupProtocolConsumer or GroupProtocolShare, got %s", ErrInvalidConfig, c.GroupProtocol)
	}
	switch c.Coordinator {
	case CoordinatorZooKeeper:
		return nil
	case CoordinatorKafka:
	default:
		return fmt.Errorf("%w: Coordinator must be CoordinatorZooKeeper or CoordinatorKafka, got %s", ErrInvalidConfig, c.Coordinator)
	}
	switch {
	case len(c.Brokers) == 0:
		return fmt.Errorf("%w: Coordinator is CoordinatorKafka but Brokers is empty; give the bootstrap addresses of the Kafka cluster (no ZooKeeper is used to find them)", ErrInvalidConfig)
	case c.RestartGrace > 0:
		return fmt.Errorf("%w: RestartGrace is %s but Coordinator is CoordinatorKafka, whose coordinator keeps a static member's partitions for Consumer.Group.Session.Timeout (sarama); leave RestartGrace 0 and set that instead",
			ErrInvalidConfig, c.RestartGrace)
	case c.Config != nil && !c.Version.IsAtLeast(MinKafkaVersionForKafkaDiscovery):
		return fmt.Errorf("%w: Version %s is too old for CoordinatorKafka, which reads Kafka's metadata as DiscoverFromKafka does; use %s or later",
			ErrInvalidConfig, c.Version, MinKafkaVersionForKafkaDiscovery)
	case c.GroupProtocol != GroupProtocolClassic && c.Net.SASL.Enable && !consumerProtocolSASL(c.Net.SASL.Mechanism):
		return fmt.Errorf("%w: GroupProtocol is %s but Net.SASL.Mechanism (sarama) is %s: its group requests support PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER",
			ErrInvalidConfig, c.GroupProtocol, c.Net.SASL.Mechanism)
	case c.Config != nil && c.InstanceID != "" && !c.Version.IsAtLeast(MinKafkaVersionForStaticMembers):
		return fmt.Errorf("%w: InstanceID is set but Version %s is older than %s, the first whose JoinGroup carries a group instance ID (static membership) with CoordinatorKafka",
			ErrInvalidConfig, c.Version, MinKafkaVersionForStaticMembers)
	}
	return nil
}
