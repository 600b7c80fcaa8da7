package testcluster

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/IBM/sarama"
)

// Options configures Start. The zero value starts one ZooKeeper node and one
// broker in a fresh temporary directory.
type Options struct {
	// ZooKeepers is the number of ZooKeeper nodes: 1 (the default) or 3 for
	// a real ensemble (any count from 1 to 9 works).
	ZooKeepers int
	// Brokers is the number of Kafka brokers: 1 (the default) or 3 (any
	// count from 1 to 9 works). Internal topics get a replication factor of
	// min(3, Brokers), new topics Brokers.
	Brokers int
	// Dir holds the nodes' configuration, data and logs. Empty: a new
	// temporary directory, removed by Close. A given directory is created
	// if needed and kept by Close; Start replaces the node directories it
	// uses inside it (zookeeper-N, kafka-N) and state.json.
	Dir string
	// Logf, if set, receives progress lines (nodes starting, ready, stopping).
	// testing.T.Logf fits.
	Logf func(format string, args ...any)
	// Detached starts the JVMs in their own sessions, without the
	// parent-death signal, so that they outlive the process that started
	// them, and keeps the cluster's state in Dir/state.json for Load. The
	// caller owns the cluster until someone calls Close.
	Detached bool
	// Context, if set, bounds Start: when it ends, Start stops what it
	// started and returns. It has no effect once Start has returned.
	Context context.Context
	// StartTimeout bounds each wait for nodes to serve (default 2 minutes).
	StartTimeout time.Duration
	// BrokerConfig adds to or overrides the brokers' server.properties
	// (for example "auto.create.topics.enable": "true").
	BrokerConfig map[string]string
	// Features sets feature levels when ModeKRaft formats the storage
	// (kafka-storage format --feature name=level), over the release's
	// defaults: for example {"share.version": 0} for a Kafka 4.2 or
	// later without share groups. Ignored in ModeZooKeeper.
	Features map[string]int
	// BrokerRacks, when set, gives broker n the broker.rack BrokerRacks[n]
	// (one entry per broker).
	BrokerRacks []string
	// QuickBrokers runs the brokers' JVMs with the first tier of the JIT
	// only (-XX:TieredStopAtLevel=1, as ZooKeeper's always): they start
	// with much less CPU and serve less at full speed. For the short-lived
	// clusters of tests, not for benchmarks.
	QuickBrokers bool
	// Security is the brokers' listener setup: SecurityPlaintext ("" too,
	// the default), SecuritySASLSSL or SecurityMixed. The secured modes
	// make a CA and a broker certificate (CAFile) and a SCRAM-SHA-512 user
	// (SASLUser, SASLPassword) at start; SecureConfig sets up a sarama
	// client for them.
	Security string
	// ZooKeeperSASL starts ZooKeeper with SASL (DIGEST-MD5) enabled but
	// not enforced: clients that do not log in still connect. The brokers
	// log in as ZooKeeperSASLUser (password ZooKeeperSASLPassword) and
	// create their nodes with ACLs (zookeeper.set.acl=true). Tried with
	// SecurityPlaintext only; with the secured modes the harness writes
	// /config/users before the brokers start, without ACLs.
	ZooKeeperSASL bool
	// ZooKeeperSASLRequired is ZooKeeperSASL with SASL enforced
	// (enforce.auth.enabled=true, enforce.auth.schemes=sasl): ZooKeeper
	// closes the session of a client that has not logged in. Only with
	// SecurityPlaintext. The harness's own ZooKeeper client does not log
	// in either, so StartBroker cannot start a killed broker again (it
	// waits for its old registration to expire).
	ZooKeeperSASLRequired bool
	// ZooKeeperSecurity is how clients reach ZooKeeper:
	// ZooKeeperSecurityPlaintext ("" too, the default) or
	// ZooKeeperSecurityTLS, a TLS client port only (ZooKeeper's
	// secureClientPort; ZookeeperPeers are its addresses) that requires a
	// client certificate of the cluster's CA (ssl.clientAuth=need) and
	// names each session by its certificate's subject (x509 identities,
	// e.g. ZooKeeperTLSIdentity). The CA (the secured modes' own), a
	// server certificate and the client certificates are made at start
	// (ZooKeeperTLSFiles); ZooKeeperDialer and ZooKeeperTLSConfig connect
	// go-zookeeper. The brokers connect over TLS too (zookeeper.ssl.*) and
	// create their nodes without ACLs. ZooKeeperSecurityTLS needs Kafka
	// 2.5 or later in ModeZooKeeper, a ZooKeeperVersion of 3.5.5 or later
	// when one is given, and no ZooKeeper SASL; the ZooKeeper quorum's
	// own connections stay plaintext.
	ZooKeeperSecurity string
	// KafkaVersion is the Apache Kafka release to run (its jars are
	// fetched with Maven and cached per version; see EnsureKafkaJars).
	// Empty: DefaultKafkaVersion. VersionsFromEnv reads $KAFKA_VERSION.
	KafkaVersion string
	// ZooKeeperVersion, when set, runs the ZooKeeper nodes from that
	// ZooKeeper release's own jars (org.apache.zookeeper:zookeeper, with
	// its own logging back end; see EnsureZooKeeperJars). Empty: the
	// ZooKeeper server that the Kafka release brings.
	// With Kafka 4 or later (ModeKRaft only) the default is
	// DefaultKRaftZooKeeperVersion.
	ZooKeeperVersion string
	// Mode is ModeZooKeeper ("" too, the default) or ModeKRaft: KRaft
	// brokers, each also a controller, from the same Kafka jars, next to
	// a stand-alone ZooKeeper that only the consumer groups use. ModeKRaft
	// needs Kafka 3.9 or later and Security SecurityPlaintext or
	// SecurityMixed (whose EXTERNAL listener then takes PLAIN,
	// SCRAM-SHA-256 and OAUTHBEARER too: see SecurityMixed) without
	// ZooKeeper SASL; Kafka 4 or later runs only in it.
	Mode string
	// ZooKeeperTickTime is ZooKeeper's tickTime, the unit of its timeouts,
	// a whole number of milliseconds. Default (0): 500 ms; production
	// ensembles usually run 2 s. The other settings follow from it:
	//   - initLimit, the ticks a follower has to connect to and sync with
	//     a new leader: max(2 × syncLimit, ⌈10 s / tickTime⌉), so never
	//     less than 10 s (20 ticks with the defaults, 10 with 2 s ticks and
	//     syncLimit 5, as in production);
	//   - minSessionTimeout: 2 × tickTime, ZooKeeper's own rule (1 s with
	//     the default): a client that asks for less gets that, so with 2 s
	//     ticks no session is shorter than 4 s, and the brokers' 6 s
	//     sessions (zookeeper.session.timeout.ms) grow once tickTime
	//     passes 3 s;
	//   - maxSessionTimeout: max(60 s, 20 × tickTime).
	// ZooKeeper checks sessions once a tick, so a session expires up to a
	// tick after its timeout.
	ZooKeeperTickTime time.Duration
	// ZooKeeperSyncLimit is ZooKeeper's syncLimit, in ticks. Default (0):
	// 10; production ensembles usually run 5. A follower that has heard
	// nothing from its leader for syncLimit × tickTime (5 s with the
	// defaults, 10 s with 2 s ticks and syncLimit 5) drops out of the
	// quorum: it closes its clients' connections and serves nothing until
	// it has joined a quorum again; the leader drops such a follower, and
	// a leader without a quorum of followers for that long steps down.
	// It matters to an ensemble only (ZooKeepers > 1).
	ZooKeeperSyncLimit int
	// ZooKeeperQuorumProxies routes all quorum and leader-election traffic
	// of the ensemble (the server.N=host:quorumPort:electionPort entries)
	// through Proxies that the Cluster owns, one per ordered pair of nodes
	// and port: each node listens on its own ports and reaches every other
	// node through proxies, so that CutZooKeeperFromQuorum can cut one
	// node off from the others while its client port stays open. The
	// proxies keep their ports across StopZooKeeper and StartZooKeeper
	// and end with Close. Needs ZooKeepers > 1, and not Detached (the
	// proxies live in the process that calls Start).
	ZooKeeperQuorumProxies bool
}

// Cluster is a running local cluster. Its methods are safe for concurrent
// use. Broker i (0-based, the order of KafkaPeers) has broker.id i;
// ZooKeeper node i (0-based, the order of ZookeeperPeers) has myid i+1.
type Cluster struct {
	dir          string
	removeDir    bool
	detached     bool
	jars         string // the Kafka release's jars
	zkJars       string // the ZooKeeper release's jars; jars when zkVersion is ""
	java         string
	kafkaVersion string
	zkVersion    string // Options.ZooKeeperVersion
	timeout      time.Duration
	logf         func(format string, args ...any)

	security     string         // SecurityPlaintext, SecuritySASLSSL or SecurityMixed
	tls          tlsFiles       // in the secured modes and ZooKeeperSecurityTLS
	saslPassword string         // of SASLUser, in the secured modes
	zkSASL       bool           // Options.ZooKeeperSASL
	quickBrokers bool           // Options.QuickBrokers
	features     map[string]int // Options.Features
	zkPassword   string         // of ZooKeeperSASLUser, with zkSASL
	zkRequired   bool           // Options.ZooKeeperSASLRequired
	zkSecurity   string         // ZooKeeperSecurityPlaintext or ZooKeeperSecurityTLS
	// zkHarnessTLS and zkClientTLS are the client TLS configurations of
	// the harness's ZooKeeper sessions (ZooKeeperBrokerIdentity) and of
	// ZooKeeperTLSConfig (ZooKeeperTLSIdentity); nil unless zkSecurity is
	// ZooKeeperSecurityTLS. Never changed after Start or Load.
	zkHarnessTLS *tls.Config
	zkClientTLS  *tls.Config

	mode      string // ModeZooKeeper or ModeKRaft
	clusterID string // the KRaft cluster ID, in ModeKRaft

	zkTick      time.Duration // Options.ZooKeeperTickTime, with its default (also after Load)
	zkSyncLimit int           // Options.ZooKeeperSyncLimit, with its default; 0 after Load
	// links are the quorum proxies (Options.ZooKeeperQuorumProxies):
	// links[a][b] is how ZooKeeper node a reaches node b, nil for a == b.
	// Nil without quorum proxies. Set by start, closed by Close.
	links [][]*quorumLink
	cutMu sync.Mutex // guards cut and serialises the changes of the links' modes
	cut   []bool     // the ZooKeeper nodes cut from the quorum, by index; with links

	// ctx is cancelled by Close, which ends every wait in progress.
	ctx    context.Context
	cancel context.CancelFunc

	zks     []*node
	brokers []*node

	mu     sync.Mutex // guards closed and pids, serialises state.json writes
	closed bool
	pids   []int
}

type nodeKind int

const (
	zookeeperNode nodeKind = iota
	brokerNode
)

// node is one ZooKeeper server or broker. Its configuration never changes
// after Start; its process does.
type node struct {
	kind         nodeKind
	index        int
	id           int // myid or broker.id
	dir          string
	port         int // client port, or the port of KafkaPeers
	securePort   int // the EXTERNAL (SASL_SSL) port in mixed mode
	quorumPort   int // ZooKeeper ensemble only
	electionPort int // ZooKeeper ensemble only
	// controllerPort is a KRaft broker's CONTROLLER listener port.
	controllerPort int

	life sync.Mutex // serialises starting and stopping this node

	pmu  sync.Mutex
	proc *proc // nil when not running
}

func (n *node) String() string {
	if n.kind == zookeeperNode {
		return fmt.Sprintf("zookeeper %d (myid %d, 127.0.0.1:%d)", n.index, n.id, n.port)
	}
	return fmt.Sprintf("kafka broker %d (127.0.0.1:%d)", n.id, n.port)
}

func (n *node) addr() string { return "127.0.0.1:" + strconv.Itoa(n.port) }

// secureAddr is the broker's SASL_SSL address: the EXTERNAL listener's in
// mixed mode, addr otherwise.
func (n *node) secureAddr() string {
	if n.securePort > 0 {
		return "127.0.0.1:" + strconv.Itoa(n.securePort)
	}
	return n.addr()
}

func (n *node) getProc() *proc {
	n.pmu.Lock()
	defer n.pmu.Unlock()
	return n.proc
}

func (n *node) setProc(p *proc) {
	n.pmu.Lock()
	n.proc = p
	n.pmu.Unlock()
}

// running returns the node's process if it is alive.
func (n *node) running() *proc {
	if p := n.getProc(); p != nil && p.alive() {
		return p
	}
	return nil
}

// markerPrefix starts the system property that tags every node JVM with
// its directory, so that a pid found in a state file (or in /proc) is
// recognised as one of ours and never confused with a recycled pid.
const markerPrefix = "-Dkafkaconsumer.testcluster.node="

func (n *node) marker() string { return markerPrefix + n.dir }

func (n *node) configFile() string {
	if n.kind == zookeeperNode {
		return filepath.Join(n.dir, "zookeeper.properties")
	}
	return filepath.Join(n.dir, "server.properties")
}

func (n *node) logFile() string    { return filepath.Join(n.dir, "server.log") }
func (n *node) stdoutFile() string { return filepath.Join(n.dir, "stdout.log") }

// logTail describes the end of the node's logs for error messages.
func (n *node) logTail() string {
	s := fmt.Sprintf("--- last lines of %s ---\n%s", n.logFile(), tailFile(n.logFile(), 25))
	if out := strings.TrimSpace(tailFile(n.stdoutFile(), 10)); out != "" && !strings.HasPrefix(out, "(no ") {
		s += fmt.Sprintf("\n--- last lines of %s ---\n%s", n.stdoutFile(), out)
	}
	return s
}

// proc is a node's JVM.
type proc struct {
	pid    int
	marker string
	// done is closed when the process has exited and was reaped; nil for a
	// process found in a state file (not our child), which is polled.
	done chan struct{}
}

func (p *proc) alive() bool {
	if p.done != nil {
		select {
		case <-p.done:
			return false
		default:
			return true
		}
	}
	return pidAlive(p.pid) && pidHasArg(p.pid, p.marker)
}

// waitExit waits until the process has exited, ctx ends or timeout passes,
// and reports whether it has exited.
func (p *proc) waitExit(ctx context.Context, timeout time.Duration) bool {
	t := time.NewTimer(timeout)
	defer t.Stop()
	if p.done != nil {
		select {
		case <-p.done:
			return true
		case <-t.C:
		case <-ctx.Done():
		}
		return !p.alive()
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for p.alive() {
		select {
		case <-tick.C:
		case <-t.C:
			return !p.alive()
		case <-ctx.Done():
			return !p.alive()
		}
	}
	return true
}

// errPortInUse marks a start that failed because a port picked as free was
// taken meanwhile; Start then retries with other ports.
var errPortInUse = errors.New("address already in use")

const (
	defaultStartTimeout = 2 * time.Minute
	stopTimeout         = time.Minute
	killTimeout         = 15 * time.Second
	maxNodes            = 9
)

// Start starts a cluster as Options describe and returns once every
// ZooKeeper node serves and every broker is registered and answers
// metadata requests listing all brokers and a controller. It fetches the
// jars first if needed (EnsureJars). On failure nothing it started is left
// running, and the error includes the end of the failing node's log.
func Start(opts Options) (*Cluster, error) {
	if opts.ZooKeepers == 0 {
		opts.ZooKeepers = 1
	}
	if opts.Brokers == 0 {
		opts.Brokers = 1
	}
	if opts.ZooKeepers < 1 || opts.ZooKeepers > maxNodes || opts.Brokers < 1 || opts.Brokers > maxNodes {
		return nil, fmt.Errorf("testcluster: want 1 to %d ZooKeeper nodes and brokers, got %d and %d", maxNodes, opts.ZooKeepers, opts.Brokers)
	}
	if opts.Context == nil {
		opts.Context = context.Background()
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = defaultStartTimeout
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	security, err := validSecurity(opts.Security)
	if err != nil {
		return nil, err
	}
	opts.Security = security
	if opts.ZooKeeperSecurity, err = validZooKeeperSecurity(opts.ZooKeeperSecurity); err != nil {
		return nil, err
	}
	if opts.ZooKeeperSASLRequired && security != SecurityPlaintext {
		return nil, fmt.Errorf("testcluster: ZooKeeperSASLRequired needs Security %q, not %q", SecurityPlaintext, security)
	}
	if opts.KafkaVersion == "" {
		opts.KafkaVersion = DefaultKafkaVersion
	}
	if _, err := sarama.ParseKafkaVersion(opts.KafkaVersion); err != nil {
		return nil, fmt.Errorf("testcluster: Kafka version %q: %w", opts.KafkaVersion, err)
	}
	if opts.Mode, err = validMode(opts.Mode, opts.KafkaVersion); err != nil {
		return nil, err
	}
	if security != SecurityPlaintext && majorMinor(opts.KafkaVersion) < 207 {
		// The secured listeners take their keys and certificates as PEM
		// in the broker's properties (ssl.keystore.key and
		// ssl.keystore.certificate.chain, KIP-651), which Kafka 2.7 added.
		return nil, fmt.Errorf("testcluster: Security %q needs Kafka 2.7 or later (PEM key stores in the broker's properties), not %s", security, opts.KafkaVersion)
	}
	if _, _, err := zooKeeperTiming(opts); err != nil {
		return nil, err
	}
	if opts.ZooKeeperQuorumProxies && opts.ZooKeepers < 2 {
		return nil, fmt.Errorf("testcluster: ZooKeeperQuorumProxies needs an ensemble, not %d ZooKeeper node", opts.ZooKeepers)
	}
	if opts.ZooKeeperQuorumProxies && opts.Detached {
		return nil, errors.New("testcluster: ZooKeeperQuorumProxies does not go with Detached: the proxies end with the process that calls Start")
	}
	if opts.Mode == ModeKRaft {
		if security == SecuritySASLSSL || opts.ZooKeeperSASL || opts.ZooKeeperSASLRequired {
			return nil, fmt.Errorf("testcluster: Mode %q runs with Security %q or %q and no ZooKeeper SASL only", ModeKRaft, SecurityPlaintext, SecurityMixed)
		}
		opts.ZooKeeperVersion = ZooKeeperVersionFor(opts.KafkaVersion, opts.ZooKeeperVersion)
	}
	if opts.ZooKeeperSecurity == ZooKeeperSecurityTLS {
		if err := checkZooKeeperTLS(opts); err != nil {
			return nil, err
		}
	}
	java, err := pickJava(opts.KafkaVersion, opts.ZooKeeperVersion, opts.Logf)
	if err != nil {
		return nil, err
	}
	jars, err := EnsureKafkaJars(opts.KafkaVersion)
	if err != nil {
		return nil, err
	}
	zkJars := jars
	if opts.ZooKeeperVersion != "" {
		if zkJars, err = EnsureZooKeeperJars(opts.ZooKeeperVersion); err != nil {
			return nil, err
		}
	}
	for attempt := 1; ; attempt++ {
		c, err := start(opts, jars, zkJars, java)
		if err == nil {
			return c, nil
		}
		if attempt == 3 || !errors.Is(err, errPortInUse) || opts.Context.Err() != nil {
			return nil, err
		}
		opts.Logf("testcluster: a port was taken meanwhile, retrying with other ports: %v", firstLine(err.Error()))
	}
}

func start(opts Options, jars, zkJars, java string) (_ *Cluster, err error) {
	began := time.Now()
	c := &Cluster{
		detached:     opts.Detached,
		jars:         jars,
		zkJars:       zkJars,
		kafkaVersion: opts.KafkaVersion,
		zkVersion:    opts.ZooKeeperVersion,
		java:         java,
		timeout:      opts.StartTimeout,
		logf:         opts.Logf,
		security:     opts.Security,
		zkSASL:       opts.ZooKeeperSASL || opts.ZooKeeperSASLRequired,
		quickBrokers: opts.QuickBrokers,
		features:     maps.Clone(opts.Features),
		zkRequired:   opts.ZooKeeperSASLRequired,
		zkSecurity:   opts.ZooKeeperSecurity,
		mode:         opts.Mode,
	}
	if c.zkTick, c.zkSyncLimit, err = zooKeeperTiming(opts); err != nil {
		return nil, err
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	if opts.Dir == "" {
		removeAbandonedDirs()
		if c.dir, err = os.MkdirTemp("", tempDirPrefix); err != nil {
			return nil, fmt.Errorf("testcluster: %w", err)
		}
		c.removeDir = true
		// Tells removeAbandonedDirs whether this directory is in use.
		owner := []byte(strconv.Itoa(os.Getpid()) + "\n")
		if err := os.WriteFile(filepath.Join(c.dir, ownerFile), owner, 0o644); err != nil {
			return nil, fmt.Errorf("testcluster: %w", err)
		}
	} else {
		if c.dir, err = filepath.Abs(opts.Dir); err != nil {
			return nil, fmt.Errorf("testcluster: %w", err)
		}
		if err := os.MkdirAll(c.dir, 0o755); err != nil {
			return nil, fmt.Errorf("testcluster: %w", err)
		}
		old, _ := filepath.Glob(filepath.Join(c.dir, "zookeeper-*"))
		more, _ := filepath.Glob(filepath.Join(c.dir, "kafka-*"))
		for _, p := range append(append(old, more...), c.statePath(), filepath.Join(c.dir, "tls")) {
			if err := os.RemoveAll(p); err != nil {
				return nil, fmt.Errorf("testcluster: %w", err)
			}
		}
	}
	defer func() {
		if err != nil {
			_ = c.Close()
		}
	}()

	// Start returns when opts.Context ends, too.
	ctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	stop := context.AfterFunc(opts.Context, cancel)
	defer stop()

	nports := opts.Brokers + opts.ZooKeepers
	if opts.ZooKeepers > 1 {
		nports += 2 * opts.ZooKeepers
	}
	if c.security == SecurityMixed {
		nports += opts.Brokers // the EXTERNAL listeners
	}
	if c.mode == ModeKRaft {
		nports += opts.Brokers // the CONTROLLER listeners
	}
	if c.mode == ModeKRaft {
		if c.clusterID, err = newClusterID(); err != nil {
			return nil, err
		}
	}
	if c.security != SecurityPlaintext || c.zkSecurity == ZooKeeperSecurityTLS {
		c.tls = newTLSFiles(c.dir)
		if err := generateTLS(c.tls, c.zkSecurity == ZooKeeperSecurityTLS, nil, 0o600); err != nil {
			return nil, fmt.Errorf("testcluster: TLS certificates: %w", err)
		}
	}
	if c.zkSecurity == ZooKeeperSecurityTLS {
		if err := c.loadZooKeeperTLS(); err != nil {
			return nil, err
		}
	}
	if c.security != SecurityPlaintext {
		if c.saslPassword, err = newPassword(); err != nil {
			return nil, fmt.Errorf("testcluster: %w", err)
		}
	}
	if c.zkSASL {
		if c.zkPassword, err = newPassword(); err != nil {
			return nil, fmt.Errorf("testcluster: %w", err)
		}
	}
	ports, err := freePorts(nports)
	if err != nil {
		return nil, err
	}
	next := func() int { p := ports[0]; ports = ports[1:]; return p }
	for i := 0; i < opts.ZooKeepers; i++ {
		n := &node{kind: zookeeperNode, index: i, id: i + 1, port: next(),
			dir: filepath.Join(c.dir, fmt.Sprintf("zookeeper-%d", i))}
		if opts.ZooKeepers > 1 {
			n.quorumPort, n.electionPort = next(), next()
		}
		c.zks = append(c.zks, n)
	}
	if opts.ZooKeeperQuorumProxies {
		if err := c.startQuorumProxies(); err != nil {
			return nil, err
		}
	}
	for i := 0; i < opts.Brokers; i++ {
		n := &node{kind: brokerNode, index: i, id: i, port: next(),
			dir: filepath.Join(c.dir, fmt.Sprintf("kafka-%d", i))}
		if c.security == SecurityMixed {
			n.securePort = next()
		}
		if c.mode == ModeKRaft {
			n.controllerPort = next()
		}
		c.brokers = append(c.brokers, n)
	}
	for _, n := range c.zks {
		if err := c.writeZooKeeperConfig(n); err != nil {
			return nil, err
		}
	}
	if len(opts.BrokerRacks) > 0 && len(opts.BrokerRacks) != len(c.brokers) {
		return nil, fmt.Errorf("testcluster: BrokerRacks has %d entries for %d brokers", len(opts.BrokerRacks), len(c.brokers))
	}
	for i, n := range c.brokers {
		extra := opts.BrokerConfig
		if len(opts.BrokerRacks) > 0 {
			extra = maps.Clone(opts.BrokerConfig)
			if extra == nil {
				extra = make(map[string]string)
			}
			extra["broker.rack"] = opts.BrokerRacks[i]
		}
		if err := c.writeBrokerConfig(n, extra); err != nil {
			return nil, err
		}
	}
	if c.mode == ModeKRaft {
		c.logf("testcluster: formatting the KRaft storage of %d broker(s), cluster ID %s", len(c.brokers), c.clusterID)
		for _, n := range c.brokers {
			if err := c.formatStorage(n); err != nil {
				return nil, err
			}
		}
	}
	if err := c.saveState(); err != nil {
		return nil, err
	}

	c.logf("testcluster: starting %d ZooKeeper node(s) in %s", len(c.zks), c.dir)
	for _, n := range c.zks {
		if err := c.spawn(n); err != nil {
			return nil, err
		}
	}
	if err := c.waitZooKeepers(ctx, c.zks); err != nil {
		return nil, err
	}
	c.logf("testcluster: ZooKeeper serving at %s (%s, %.1fs)", c.ZookeeperPeers(), c.zkSecurity, time.Since(began).Seconds())
	if c.security != SecurityPlaintext && c.mode != ModeKRaft { // KRaft: formatStorage added it
		if err := c.writeSCRAMUser(ctx); err != nil {
			return nil, err
		}
	}

	c.logf("testcluster: starting %d Kafka broker(s) (%s mode)", len(c.brokers), c.mode)
	for _, n := range c.brokers {
		if err := c.spawn(n); err != nil {
			return nil, err
		}
	}
	if err := c.waitBrokers(ctx, c.brokers); err != nil {
		return nil, err
	}
	c.logf("testcluster: Kafka %s serving at %s (%s, ZooKeeper %s, Java %s, %.1fs)", c.kafkaVersion, strings.Join(c.KafkaPeers(), ","),
		c.security, c.ZooKeeperVersion(), c.JavaVersion(), time.Since(began).Seconds())
	return c, nil
}

const (
	tempDirPrefix = "kafkaconsumer-testcluster-"
	ownerFile     = "owner.pid"
)

// removeAbandonedDirs removes the temporary directories of earlier clusters
// whose process died without Close (a test binary killed on timeout or
// interrupted): their owner is gone and no node JVM uses them.
func removeAbandonedDirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), tempDirPrefix+"*"))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue // being created, or not ours
		}
		owner, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pidAlive(owner) || len(findNodeProcs(dir)) > 0 {
			continue
		}
		_ = os.RemoveAll(dir)
	}
}

// freePorts returns k distinct ports that are free on 127.0.0.1, picked at
// random below the usual ephemeral range (32768-60999) so that they do not
// collide with the source ports of outgoing connections.
func freePorts(k int) ([]int, error) {
	seen := make(map[int]bool)
	var ports []int
	for tries := 0; len(ports) < k; tries++ {
		if tries > 2000 {
			return nil, errors.New("testcluster: found no free ports in 20000-31999 on 127.0.0.1")
		}
		p := 20000 + rand.IntN(12000)
		if seen[p] {
			continue
		}
		seen[p] = true
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		l.Close()
		ports = append(ports, p)
	}
	return ports, nil
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// log4jProperties sends everything at INFO to server.log in the node's
// directory, not to stdout.
func log4jProperties(dir string) string {
	return strings.Join([]string{
		"log4j.rootLogger=INFO, file",
		"log4j.appender.file=org.apache.log4j.FileAppender",
		"log4j.appender.file.File=" + filepath.Join(dir, "server.log"),
		"log4j.appender.file.Append=true",
		"log4j.appender.file.layout=org.apache.log4j.PatternLayout",
		"log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n",
		"log4j.logger.kafka.request.logger=WARN",
		"log4j.logger.kafka.network.RequestChannel$=WARN",
		"log4j.logger.org.apache.kafka.clients.NetworkClient=WARN",
		"",
	}, "\n")
}

// hasLogback reports whether the jars in dir log through logback (the
// ZooKeeper releases from 3.8 on) rather than log4j 1.2 or reload4j.
func hasLogback(dir string) bool {
	m, _ := filepath.Glob(filepath.Join(dir, "logback-classic-*.jar"))
	return len(m) > 0
}

// logbackXML is log4jProperties for logback: INFO and up to server.log in
// the node's directory.
func logbackXML(dir string) string {
	var file strings.Builder
	_ = xml.EscapeText(&file, []byte(filepath.Join(dir, "server.log")))
	return `<configuration>
  <appender name="file" class="ch.qos.logback.core.FileAppender">
    <file>` + file.String() + `</file>
    <append>true</append>
    <encoder>
      <pattern>[%d{yyyy-MM-dd HH:mm:ss.SSS}] %level %msg \(%logger\)%n</pattern>
    </encoder>
  </appender>
  <root level="INFO">
    <appender-ref ref="file"/>
  </root>
</configuration>
`
}

func writeProperties(path string, props map[string]string) error {
	keys := make([]string, 0, len(props))
	for k := range props {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("# written by kafkaconsumer internal/testcluster\n")
	// Values may hold backslashes and newlines (PEM): escaped as
	// java.util.Properties reads them.
	escape := strings.NewReplacer(`\`, `\\`, "\n", `\n`, "\r", `\r`)
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%s\n", k, escape.Replace(props[k]))
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

func (c *Cluster) writeZooKeeperConfig(n *node) error {
	data := filepath.Join(n.dir, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	props := map[string]string{
		"dataDir":           data,
		"clientPort":        strconv.Itoa(n.port),
		"clientPortAddress": "127.0.0.1",
		"maxClientCnxns":    "0",
		// Unknown keys become zookeeper.* system properties.
		"admin.enableServer":     "false",
		"4lw.commands.whitelist": "*",
		"forceSync":              "no",
		"preAllocSize":           "4096",
	}
	for k, v := range c.timingProps() {
		props[k] = v
	}
	if c.zkSASL {
		if err := c.writeZooKeeperSASL(n, props); err != nil {
			return fmt.Errorf("testcluster: %w", err)
		}
	}
	if c.zkSecurity == ZooKeeperSecurityTLS {
		c.zooKeeperTLSProps(n, props)
	}
	if len(c.zks) > 1 {
		// A static configuration: the nodes' server.N entries differ with
		// quorum proxies, and with reconfigEnabled false no node takes
		// another's (the leader's, sent when a follower joins) as its own.
		props["reconfigEnabled"] = "false"
		props["cnxTimeout"] = "2000"
		for _, z := range c.zks {
			props[fmt.Sprintf("server.%d", z.id)] = c.serverAddress(n, z)
		}
		if err := os.WriteFile(filepath.Join(data, "myid"), []byte(strconv.Itoa(n.id)+"\n"), 0o644); err != nil {
			return fmt.Errorf("testcluster: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(n.dir, "log4j.properties"), []byte(log4jProperties(n.dir)), 0o644); err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	if hasLogback(c.zkJars) {
		if err := os.WriteFile(filepath.Join(n.dir, "logback.xml"), []byte(logbackXML(n.dir)), 0o644); err != nil {
			return fmt.Errorf("testcluster: %w", err)
		}
	}
	if err := writeProperties(n.configFile(), props); err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	return nil
}

func (c *Cluster) writeBrokerConfig(n *node, extra map[string]string) error {
	data := filepath.Join(n.dir, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	brokers := strconv.Itoa(len(c.brokers))
	internalRF := strconv.Itoa(min(3, len(c.brokers)))
	props := map[string]string{
		"broker.id":                                strconv.Itoa(n.id),
		"log.dirs":                                 data,
		"zookeeper.connect":                        c.ZookeeperPeers(),
		"zookeeper.session.timeout.ms":             "6000",
		"zookeeper.connection.timeout.ms":          "30000",
		"offsets.topic.replication.factor":         internalRF,
		"offsets.topic.num.partitions":             "10",
		"transaction.state.log.replication.factor": internalRF,
		"transaction.state.log.min.isr":            "1",
		"transaction.state.log.num.partitions":     "10",
		"group.initial.rebalance.delay.ms":         "0",
		"num.partitions":                           "1",
		"default.replication.factor":               brokers,
		"min.insync.replicas":                      "1",
		"auto.create.topics.enable":                "false",
		"delete.topic.enable":                      "true",
		"num.network.threads":                      "2",
		"num.io.threads":                           "4",
		"background.threads":                       "4",
		"num.recovery.threads.per.data.dir":        "1",
		"num.replica.fetchers":                     "1",
		"log.cleaner.threads":                      "1",
		"log.cleaner.dedupe.buffer.size":           "8388608",
		"log.cleaner.backoff.ms":                   "1000", // a compacted topic's test waits a second, not 15
		"replica.lag.time.max.ms":                  "10000",
		"controlled.shutdown.enable":               "true",
		"controlled.shutdown.max.retries":          "3",
		"controlled.shutdown.retry.backoff.ms":     "500",
		"unclean.leader.election.enable":           "false",
	}
	security, err := c.securityProps(n)
	if err != nil {
		return err
	}
	for k, v := range security {
		props[k] = v
	}
	if c.mode == ModeKRaft {
		for _, k := range zookeeperOnlyProps {
			delete(props, k)
		}
		for k, v := range c.kraftProps(n) {
			props[k] = v
		}
	}
	if c.zkSASL {
		if err := c.writeBrokerZooKeeperSASL(n, props); err != nil {
			return fmt.Errorf("testcluster: %w", err)
		}
	}
	if c.zkSecurity == ZooKeeperSecurityTLS && c.mode != ModeKRaft {
		c.brokerZooKeeperTLSProps(props)
	}
	for k, v := range extra {
		props[k] = v
	}
	if err := os.WriteFile(filepath.Join(n.dir, "log4j.properties"), []byte(log4jProperties(n.dir)), 0o644); err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	if err := writeProperties(n.configFile(), props); err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	return nil
}

// javaArgs returns the JVM command line of a node: small heaps, the serial
// collector, no perf-data files, log4j to the node's server.log.
func (c *Cluster) javaArgs(n *node) []string {
	args := []string{
		"-XX:+UseSerialGC",
		"-XX:-UsePerfData",
		"-XX:+ExitOnOutOfMemoryError",
		"-Djava.awt.headless=true",
		"-Djava.net.preferIPv4Stack=true",
		"-Dlog4j.configuration=file:" + filepath.Join(n.dir, "log4j.properties"),
		n.marker(),
	}
	if c.zkSASL {
		args = append(args, "-Djava.security.auth.login.config="+n.jaasFile())
	}
	if n.kind == zookeeperNode {
		if hasLogback(c.zkJars) {
			args = append(args, "-Dlogback.configurationFile="+filepath.Join(n.dir, "logback.xml"))
		}
		args = append(args,
			"-Xms32m", "-Xmx256m",
			"-XX:TieredStopAtLevel=1",
			"-Dzookeeper.admin.enableServer=false",
			"-Dzookeeper.jmx.log4j.disable=true",
			"-cp", filepath.Join(c.zkJars, "*"),
			"org.apache.zookeeper.server.quorum.QuorumPeerMain", n.configFile())
	} else {
		if c.quickBrokers {
			args = append(args, "-XX:TieredStopAtLevel=1")
		}
		args = append(args,
			"-Xms128m", "-Xmx512m",
			"-Dkafka.logs.dir="+n.dir,
			"-cp", filepath.Join(c.jars, "*"),
			"kafka.Kafka", n.configFile())
	}
	return args
}

// spawn starts the node's JVM (the caller holds n.life or owns the node).
func (c *Cluster) spawn(n *node) error {
	out, err := os.OpenFile(n.stdoutFile(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	cmd := exec.Command(c.java, c.javaArgs(n)...)
	cmd.Dir = n.dir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = sysProcAttr(c.detached)
	p := &proc{marker: n.marker(), done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// The kernel sends the parent-death signal when the *thread* that
		// forked the child exits, and Go retires threads (a goroutine that
		// ends while locked to its thread takes the thread with it). So
		// the goroutine that forks keeps its thread, waiting, until the
		// JVM has exited; it lives exactly as long as the JVM.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait()
		close(p.done)
	}()
	err = <-started
	out.Close()
	if err != nil {
		return fmt.Errorf("testcluster: starting %s: %w", n, err)
	}
	p.pid = cmd.Process.Pid
	n.setProc(p)
	c.mu.Lock()
	c.pids = append(c.pids, p.pid)
	c.mu.Unlock()
	err = c.saveState() // before anything else can fail or kill us
	c.logf("testcluster: started %s, pid %d", n, p.pid)
	return err
}

// checkOpen fails once Close has been called.
func (c *Cluster) checkOpen() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("testcluster: cluster is closed")
	}
	return nil
}

// ZookeeperPeers returns the ZooKeeper connection string
// "127.0.0.1:p1,127.0.0.1:p2,..." (all nodes, running or not).
func (c *Cluster) ZookeeperPeers() string {
	addrs := make([]string, len(c.zks))
	for i, n := range c.zks {
		addrs[i] = n.addr()
	}
	return strings.Join(addrs, ",")
}

// KafkaPeers returns the brokers' addresses ("127.0.0.1:port"), broker i
// at index i (all brokers, running or not).
func (c *Cluster) KafkaPeers() []string {
	addrs := make([]string, len(c.brokers))
	for i, n := range c.brokers {
		addrs[i] = n.addr()
	}
	return addrs
}

// KafkaVersion returns the Kafka release the brokers run.
func (c *Cluster) KafkaVersion() string { return c.kafkaVersion }

// ZooKeeperVersion returns the ZooKeeper release the ZooKeeper nodes run:
// Options.ZooKeeperVersion, or the version of the ZooKeeper jar that the
// Kafka release brings.
func (c *Cluster) ZooKeeperVersion() string {
	if c.zkVersion != "" {
		return c.zkVersion
	}
	m, _ := filepath.Glob(filepath.Join(c.zkJars, "zookeeper-[0-9]*.jar"))
	for _, jar := range m {
		v := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(jar), "zookeeper-"), ".jar")
		if versionPattern.MatchString(v) {
			return v
		}
	}
	return ""
}

// Dir returns the directory holding the nodes' configuration, data and
// logs (zookeeper-N/ and kafka-N/, each with server.log).
func (c *Cluster) Dir() string { return c.dir }

func (c *Cluster) broker(i int) (*node, error) {
	if i < 0 || i >= len(c.brokers) {
		return nil, fmt.Errorf("testcluster: no broker %d (the cluster has %d)", i, len(c.brokers))
	}
	return c.brokers[i], nil
}

func (c *Cluster) zookeeper(i int) (*node, error) {
	if i < 0 || i >= len(c.zks) {
		return nil, fmt.Errorf("testcluster: no ZooKeeper node %d (the cluster has %d)", i, len(c.zks))
	}
	return c.zks[i], nil
}

// BrokerPID returns the pid of broker i's JVM, or 0 when it is not running.
func (c *Cluster) BrokerPID(i int) int {
	n, err := c.broker(i)
	if err != nil {
		return 0
	}
	if p := n.running(); p != nil {
		return p.pid
	}
	return 0
}

// ZooKeeperPID returns the pid of ZooKeeper node i's JVM, or 0 when it is
// not running.
func (c *Cluster) ZooKeeperPID(i int) int {
	n, err := c.zookeeper(i)
	if err != nil {
		return 0
	}
	if p := n.running(); p != nil {
		return p.pid
	}
	return 0
}

// StopBroker stops broker i gracefully (SIGTERM: a controlled shutdown that
// moves partition leadership away and deregisters it from ZooKeeper at
// once) and waits until its JVM has exited; after a minute it kills it.
// Stopping a broker that is not running does nothing.
func (c *Cluster) StopBroker(i int) error {
	n, err := c.broker(i)
	if err != nil {
		return err
	}
	return c.stopNode(n, syscall.SIGTERM)
}

// KillBroker kills broker i (SIGKILL) and waits until its JVM has exited.
// Its ZooKeeper registration stays until its session expires (6 s), as
// after a crash.
func (c *Cluster) KillBroker(i int) error {
	n, err := c.broker(i)
	if err != nil {
		return err
	}
	return c.stopNode(n, syscall.SIGKILL)
}

// StartBroker starts broker i again, with the same id, port and data, and
// waits until every running broker's metadata lists it. If it was killed,
// it first waits for its old ZooKeeper registration to expire (Kafka
// refuses to start while it exists). Starting a running broker does
// nothing.
func (c *Cluster) StartBroker(i int) error {
	n, err := c.broker(i)
	if err != nil {
		return err
	}
	return c.startNode(n)
}

// StopZooKeeper stops ZooKeeper node i (SIGTERM) and waits until its JVM
// has exited.
func (c *Cluster) StopZooKeeper(i int) error {
	n, err := c.zookeeper(i)
	if err != nil {
		return err
	}
	return c.stopNode(n, syscall.SIGTERM)
}

// KillZooKeeper kills ZooKeeper node i (SIGKILL) and waits until its JVM
// has exited.
func (c *Cluster) KillZooKeeper(i int) error {
	n, err := c.zookeeper(i)
	if err != nil {
		return err
	}
	return c.stopNode(n, syscall.SIGKILL)
}

// ZooKeeperLeader returns the index of the ZooKeeper node that leads the
// ensemble (as its srvr answer says), or an error if no running node does;
// a single node leads itself.
func (c *Cluster) ZooKeeperLeader() (int, error) {
	if err := c.checkOpen(); err != nil {
		return -1, err
	}
	var modes []string
	for i, n := range c.zks {
		if n.running() == nil {
			modes = append(modes, n.String()+": stopped")
			continue
		}
		mode, err := c.zkMode(n)
		if err != nil {
			modes = append(modes, n.String()+": "+err.Error())
			continue
		}
		if mode == "leader" || mode == "standalone" {
			return i, nil
		}
		modes = append(modes, n.String()+": "+mode)
	}
	return -1, fmt.Errorf("testcluster: no ZooKeeper node leads (%s)", strings.Join(modes, "; "))
}

// StartZooKeeper starts ZooKeeper node i again with the same id, ports and
// data, and waits until it serves (in an ensemble: until it has joined a
// quorum); a node cut from the quorum (CutZooKeeperFromQuorum) cannot, and
// StartZooKeeper waits only until it answers. Starting a running node does
// nothing.
func (c *Cluster) StartZooKeeper(i int) error {
	n, err := c.zookeeper(i)
	if err != nil {
		return err
	}
	return c.startNode(n)
}

func (c *Cluster) stopNode(n *node, sig syscall.Signal) error {
	if err := c.checkOpen(); err != nil {
		return err
	}
	n.life.Lock()
	defer n.life.Unlock()
	p := n.running()
	if p == nil {
		n.setProc(nil)
		return c.saveState()
	}
	verb := "stopping"
	timeout := stopTimeout
	if sig == syscall.SIGKILL {
		verb, timeout = "killing", killTimeout
	}
	c.logf("testcluster: %s %s, pid %d", verb, n, p.pid)
	if err := signalGroup(p.pid, sig); err != nil {
		return fmt.Errorf("testcluster: %s %s: %w", verb, n, err)
	}
	if !p.waitExit(c.ctx, timeout) && sig != syscall.SIGKILL && c.ctx.Err() == nil {
		c.logf("testcluster: %s did not stop within %s; killing it", n, timeout)
		_ = signalGroup(p.pid, syscall.SIGKILL)
		p.waitExit(c.ctx, killTimeout)
	}
	if p.alive() {
		return fmt.Errorf("testcluster: %s (pid %d) is still running", n, p.pid)
	}
	n.setProc(nil)
	return c.saveState()
}

func (c *Cluster) startNode(n *node) error {
	if err := c.checkOpen(); err != nil {
		return err
	}
	n.life.Lock()
	defer n.life.Unlock()
	if err := c.checkOpen(); err != nil { // Close may have passed this node already
		return err
	}
	if n.running() != nil {
		return nil
	}
	began := time.Now()
	if n.kind == brokerNode && c.mode != ModeKRaft {
		path := "/brokers/ids/" + strconv.Itoa(n.id)
		if err := c.waitZNodesGone(c.ctx, []string{path}, c.timeout); err != nil {
			return fmt.Errorf("testcluster: %s: waiting for its old registration %s to expire: %w", n, path, err)
		}
	}
	if err := c.spawn(n); err != nil {
		return err
	}
	var err error
	switch {
	case n.kind == zookeeperNode && c.isCut(n):
		err = c.waitUntil(c.ctx, n.String()+" (cut from the quorum)", []*node{n}, func() error {
			if _, err := c.zkMode(n); err != nil && !errors.Is(err, ErrZooKeeperNotServing) {
				return err
			}
			return nil
		})
	case n.kind == zookeeperNode:
		err = c.waitZooKeepers(c.ctx, []*node{n})
	default:
		err = c.waitBrokers(c.ctx, []*node{n})
	}
	if err != nil {
		return err
	}
	c.logf("testcluster: %s serving again (%.1fs)", n, time.Since(began).Seconds())
	return nil
}

// Pids returns the pid of every JVM this Cluster has started (or found in
// its state file), including those that have exited since. Pass them to
// WaitGone after Close to check that nothing is left.
func (c *Cluster) Pids() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int(nil), c.pids...)
}

// WaitGone waits until none of pids is a live process of a test cluster
// node (a pid recycled by an unrelated process does not count), and
// returns an error listing those still alive after timeout.
func WaitGone(pids []int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var alive []string
		for _, pid := range pids {
			if pidAlive(pid) && pidHasArgPrefix(pid, markerPrefix) {
				alive = append(alive, strconv.Itoa(pid))
			}
		}
		if len(alive) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("testcluster: node JVMs still alive: pids %s", strings.Join(alive, ", "))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Close kills every node (SIGKILL), waits until their JVMs have exited,
// and removes Dir if Start created it. It is safe to call more than once;
// every method but the accessors fails afterwards.
func (c *Cluster) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	c.cancel()

	var (
		wg   sync.WaitGroup
		emu  sync.Mutex
		errs []error
	)
	for _, n := range append(append([]*node(nil), c.brokers...), c.zks...) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n.life.Lock()
			defer n.life.Unlock()
			if p := n.running(); p != nil {
				_ = signalGroup(p.pid, syscall.SIGKILL)
				if !p.waitExit(context.Background(), killTimeout) {
					emu.Lock()
					errs = append(errs, fmt.Errorf("testcluster: %s (pid %d) survived SIGKILL", n, p.pid))
					emu.Unlock()
					return
				}
			}
			n.setProc(nil)
		}()
	}
	wg.Wait()
	// The quorum proxies once the nodes are dead: no node sees its quorum
	// connections end and starts an election before it dies.
	c.closeQuorumProxies()
	if c.detached {
		// JVMs of this cluster that the state file lost track of (an
		// interrupted start): found by their marker under Dir.
		for _, pid := range findNodeProcs(c.dir) {
			_ = signalGroup(pid, syscall.SIGKILL)
		}
		_ = c.saveState()
	}
	if c.removeDir {
		if err := os.RemoveAll(c.dir); err != nil {
			errs = append(errs, fmt.Errorf("testcluster: %w", err))
		}
	}
	return errors.Join(errs...)
}

// The state of a detached cluster, in Dir/state.json.
type stateFile struct {
	Version    int         `json:"version"`
	Dir        string      `json:"dir"`
	Jars       string      `json:"jars"`
	Java       string      `json:"java"`
	ZooKeepers []nodeState `json:"zookeepers"`
	Brokers    []nodeState `json:"brokers"`
	// Security, and for the secured modes the CA file and SCRAM password
	// (a test cluster's, not a secret worth protecting); absent in older
	// state files, which are plaintext.
	Security     string `json:"security,omitempty"`
	TLSDir       string `json:"tls_dir,omitempty"`
	SASLPassword string `json:"sasl_password,omitempty"`
	// ZooKeeperSASL and the ZooKeeper password of ZooKeeperSASLUser
	// (Options.ZooKeeperSASL); absent in older state files.
	ZooKeeperSASL     bool   `json:"zookeeper_sasl,omitempty"`
	ZooKeeperPassword string `json:"zookeeper_password,omitempty"`
	ZooKeeperRequired bool   `json:"zookeeper_sasl_required,omitempty"`
	// ZooKeeperSecurity (Options.ZooKeeperSecurity); absent in older state
	// files, whose ZooKeeper is plaintext. Its certificates are in
	// TLSDir.
	ZooKeeperSecurity string `json:"zookeeper_security,omitempty"`
	// The versions (Options.KafkaVersion, Options.ZooKeeperVersion) and
	// the ZooKeeper release's jars; absent in older state files, which
	// ran DefaultKafkaVersion and its ZooKeeper.
	KafkaVersion     string `json:"kafka_version,omitempty"`
	ZooKeeperVersion string `json:"zookeeper_version,omitempty"`
	ZooKeeperJars    string `json:"zookeeper_jars,omitempty"`
	// Mode (Options.Mode) and the KRaft cluster ID; absent in older state
	// files, which are ZooKeeper mode.
	Mode      string `json:"mode,omitempty"`
	ClusterID string `json:"cluster_id,omitempty"`
	// ZooKeeperTickMs is ZooKeeper's tickTime in ms
	// (Options.ZooKeeperTickTime); absent in older state files, which ran
	// the default.
	ZooKeeperTickMs int64 `json:"zookeeper_tick_ms,omitempty"`
}

type nodeState struct {
	ID           int    `json:"id"`
	Dir          string `json:"dir"`
	Port         int    `json:"port"`
	QuorumPort   int    `json:"quorum_port,omitempty"`
	ElectionPort int    `json:"election_port,omitempty"`
	SecurePort   int    `json:"secure_port,omitempty"`
	// ControllerPort is a KRaft broker's CONTROLLER port.
	ControllerPort int `json:"controller_port,omitempty"`
	PID            int `json:"pid"`
}

// StateFile is the name of the file, in a detached cluster's Dir, that
// Load reads.
const StateFile = "state.json"

func (c *Cluster) statePath() string { return filepath.Join(c.dir, StateFile) }

// saveState writes state.json (detached clusters only), atomically.
func (c *Cluster) saveState() error {
	if !c.detached {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	st := stateFile{Version: 1, Dir: c.dir, Jars: c.jars, Java: c.java, Security: c.security, SASLPassword: c.saslPassword,
		ZooKeeperSASL: c.zkSASL, ZooKeeperPassword: c.zkPassword, ZooKeeperRequired: c.zkRequired, ZooKeeperSecurity: c.zkSecurity,
		KafkaVersion: c.kafkaVersion, ZooKeeperVersion: c.zkVersion, ZooKeeperJars: c.zkJars,
		Mode: c.mode, ClusterID: c.clusterID, ZooKeeperTickMs: c.zkTick.Milliseconds()}
	if c.tls.ca != "" {
		st.TLSDir = filepath.Dir(c.tls.ca)
	}
	for _, list := range []struct {
		nodes []*node
		out   *[]nodeState
	}{{c.zks, &st.ZooKeepers}, {c.brokers, &st.Brokers}} {
		for _, n := range list.nodes {
			ns := nodeState{ID: n.id, Dir: n.dir, Port: n.port, QuorumPort: n.quorumPort, ElectionPort: n.electionPort, SecurePort: n.securePort,
				ControllerPort: n.controllerPort}
			if p := n.getProc(); p != nil {
				ns.PID = p.pid
			}
			*list.out = append(*list.out, ns)
		}
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	tmp := c.statePath() + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	if err := os.Rename(tmp, c.statePath()); err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	return nil
}

// Load returns the detached cluster whose state Start (with
// Options.Detached) keeps in dir/state.json. Nodes whose recorded JVM is no
// longer running are reported as stopped; StartBroker and StartZooKeeper
// start them again, detached. Close kills every node but keeps dir.
func Load(dir string) (*Cluster, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("testcluster: %w", err)
	}
	b, err := os.ReadFile(filepath.Join(abs, StateFile))
	if err != nil {
		return nil, fmt.Errorf("testcluster: no cluster state in %s: %w", abs, err)
	}
	var st stateFile
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("testcluster: reading %s: %w", filepath.Join(abs, StateFile), err)
	}
	if st.Version != 1 || len(st.ZooKeepers) == 0 || len(st.Brokers) == 0 {
		return nil, fmt.Errorf("testcluster: %s is not a cluster state this version understands", filepath.Join(abs, StateFile))
	}
	c := &Cluster{
		dir:      abs,
		detached: true,
		jars:     st.Jars,
		java:     st.Java,
		timeout:  defaultStartTimeout,
		logf:     func(string, ...any) {},
	}
	if c.security, err = validSecurity(st.Security); err != nil {
		return nil, err
	}
	if c.zkSecurity, err = validZooKeeperSecurity(st.ZooKeeperSecurity); err != nil {
		return nil, err
	}
	if c.security != SecurityPlaintext || c.zkSecurity == ZooKeeperSecurityTLS {
		if st.TLSDir == "" {
			return nil, fmt.Errorf("testcluster: %s names no directory of TLS certificates (Security %s, ZooKeeperSecurity %s)",
				filepath.Join(abs, StateFile), c.security, c.zkSecurity)
		}
		c.tls = newTLSFiles(filepath.Dir(st.TLSDir))
	}
	if c.security != SecurityPlaintext {
		c.saslPassword = st.SASLPassword
	}
	if c.zkSecurity == ZooKeeperSecurityTLS {
		if err := c.loadZooKeeperTLS(); err != nil {
			return nil, err
		}
	}
	c.zkSASL, c.zkPassword, c.zkRequired = st.ZooKeeperSASL, st.ZooKeeperPassword, st.ZooKeeperRequired
	c.kafkaVersion, c.zkVersion, c.zkJars = st.KafkaVersion, st.ZooKeeperVersion, st.ZooKeeperJars
	if c.kafkaVersion == "" {
		c.kafkaVersion = DefaultKafkaVersion
	}
	c.mode, c.clusterID = st.Mode, st.ClusterID
	if c.mode == "" {
		c.mode = ModeZooKeeper
	}
	if c.zkJars == "" {
		c.zkJars = c.jars
	}
	c.zkTick = time.Duration(st.ZooKeeperTickMs) * time.Millisecond
	if c.zkTick <= 0 {
		c.zkTick = defaultZooKeeperTickTime
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	for _, list := range []struct {
		kind  nodeKind
		nodes []nodeState
		out   *[]*node
	}{{zookeeperNode, st.ZooKeepers, &c.zks}, {brokerNode, st.Brokers, &c.brokers}} {
		for i, ns := range list.nodes {
			n := &node{kind: list.kind, index: i, id: ns.ID, dir: ns.Dir, port: ns.Port,
				quorumPort: ns.QuorumPort, electionPort: ns.ElectionPort, securePort: ns.SecurePort, controllerPort: ns.ControllerPort}
			if ns.PID > 0 {
				c.pids = append(c.pids, ns.PID)
				if p := (&proc{pid: ns.PID, marker: n.marker()}); p.alive() {
					n.proc = p
				}
			}
			*list.out = append(*list.out, n)
		}
	}
	return c, nil
}

// SetLogf sets the function that receives progress lines (see
// Options.Logf); useful after Load.
func (c *Cluster) SetLogf(logf func(format string, args ...any)) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	c.logf = logf
}

// Healthy checks, within timeout, that every node is running and serving:
// each ZooKeeper node answers srvr with its mode, each broker answers
// metadata requests listing every broker and a controller.
func (c *Cluster) Healthy(timeout time.Duration) error {
	if err := c.checkOpen(); err != nil {
		return err
	}
	for _, n := range append(append([]*node(nil), c.zks...), c.brokers...) {
		if n.running() == nil {
			return fmt.Errorf("testcluster: %s is not running", n)
		}
	}
	ctx, cancel := context.WithTimeout(c.ctx, timeout)
	defer cancel()
	if err := c.waitZooKeepers(ctx, c.zks); err != nil {
		return err
	}
	return c.waitBrokers(ctx, c.brokers)
}

// Status describes each node in one line: role, address, pid or "stopped".
func (c *Cluster) Status() []string {
	var lines []string
	for _, n := range append(append([]*node(nil), c.zks...), c.brokers...) {
		state := "stopped"
		if p := n.running(); p != nil {
			state = "pid " + strconv.Itoa(p.pid)
		}
		lines = append(lines, fmt.Sprintf("%s: %s", n, state))
	}
	return lines
}

// JavaVersion returns the version of the Java the nodes run on (as its
// release file or java -version says), or its path if that cannot be read.
func (c *Cluster) JavaVersion() string {
	if j, ok := inspectJava(c.java); ok {
		return j.version
	}
	return c.java
}

// Mode returns ModeZooKeeper or ModeKRaft.
func (c *Cluster) Mode() string { return c.mode }

// ZooKeeperTickTime returns ZooKeeper's tickTime (Options.ZooKeeperTickTime
// with its default), also of a cluster found with Load.
func (c *Cluster) ZooKeeperTickTime() time.Duration { return c.zkTick }

// GivenZooKeeperVersion returns Options.ZooKeeperVersion: "" when the
// ZooKeeper nodes run from the Kafka release's jars.
func (c *Cluster) GivenZooKeeperVersion() string { return c.zkVersion }
