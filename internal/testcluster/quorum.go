package testcluster

// The ZooKeeper ensemble's timing (Options.ZooKeeperTickTime and
// ZooKeeperSyncLimit) and its quorum proxies (Options.ZooKeeperQuorumProxies):
// every node reaches every other node's quorum and election ports through
// a Proxy of its own, so that one node can be cut off from the others
// while its client port stays open.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// ErrZooKeeperNotServing is wrapped by the error of ZooKeeperMode when the
// node runs but serves no requests: in an ensemble, it is not part of a
// quorum (yet, or any more, as a node cut from the quorum once syncLimit
// has passed).
var ErrZooKeeperNotServing = errors.New("zookeeper node is not serving requests")

// ZooKeeperMode returns the mode of ZooKeeper node i as its answer to the
// srvr four-letter word says: "leader", "follower", "observer" or
// "standalone". It fails with an error wrapping ErrZooKeeperNotServing
// when the node runs but does not serve, and with another error when it is
// stopped or does not answer within 3 s. It is safe for concurrent use and
// fails after Close.
func (c *Cluster) ZooKeeperMode(i int) (string, error) {
	if err := c.checkOpen(); err != nil {
		return "", err
	}
	n, err := c.zookeeper(i)
	if err != nil {
		return "", err
	}
	if n.running() == nil {
		return "", fmt.Errorf("testcluster: %s is not running", n)
	}
	mode, err := c.zkMode(n)
	if err != nil {
		return "", fmt.Errorf("testcluster: %s: %w", n, err)
	}
	return mode, nil
}

// CutZooKeeperFromQuorum cuts ZooKeeper node i off from the other nodes
// of the ensemble, as a network partition would, while its client port
// stays open: the proxies of every quorum and election connection to and
// from node i hold what reaches them (ProxyHold: bytes, closes and new
// connections alike). It needs Options.ZooKeeperQuorumProxies, and
// returns at once. What follows is ZooKeeper's doing:
//
//   - The node goes on answering reads from its state, which grows stale;
//     writes and syncs sent to it wait for its leader.
//   - syncLimit × tickTime after it last heard from its leader (5 s with
//     the default timing), a cut follower drops out of the quorum: it
//     closes its clients' connections, fails the requests still waiting,
//     and stops serving (ZooKeeperMode then fails with
//     ErrZooKeeperNotServing) until it is restored and has joined a
//     quorum again. A cut leader steps down after the same time, and the
//     other nodes elect a new one if they are a majority.
//
// Cutting a cut node does nothing. A node stays cut across StopZooKeeper
// and StartZooKeeper; StartZooKeeper of a cut node waits only until it
// answers, not until it serves. Safe for concurrent use; fails after
// Close.
func (c *Cluster) CutZooKeeperFromQuorum(i int) error {
	return c.setCut(i, true)
}

// RestoreZooKeeperQuorum ends the cut of ZooKeeper node i
// (CutZooKeeperFromQuorum): its proxies to and from every node that is
// not cut pass again, and what they held flows, as TCP retransmits after a
// partition heals. It returns at once; the node rejoins by itself (an
// election, then a sync with the leader), which takes about a second:
// wait for ZooKeeperMode to answer, or for Healthy. Restoring a node that
// is not cut does nothing. Safe for concurrent use; fails after Close.
func (c *Cluster) RestoreZooKeeperQuorum(i int) error {
	return c.setCut(i, false)
}

// DefaultZooKeeperTickTime is ZooKeeper's tickTime when
// Options.ZooKeeperTickTime is 0.
const DefaultZooKeeperTickTime = defaultZooKeeperTickTime

// The defaults of Options.ZooKeeperTickTime and ZooKeeperSyncLimit.
const (
	defaultZooKeeperTickTime  = 500 * time.Millisecond
	defaultZooKeeperSyncLimit = 10
	// minZooKeeperInitTime is the least time initLimit gives a follower
	// to connect to and sync with a new leader: JVMs that start on a busy
	// machine need it.
	minZooKeeperInitTime = 10 * time.Second
	// minZooKeeperMaxSession is the least maxSessionTimeout, above
	// ZooKeeper's default of 20 ticks, for tests of long sessions.
	minZooKeeperMaxSession = time.Minute
)

// zooKeeperTiming returns the tickTime and syncLimit that opts ask for,
// with their defaults.
func zooKeeperTiming(opts Options) (tick time.Duration, syncLimit int, err error) {
	tick, syncLimit = opts.ZooKeeperTickTime, opts.ZooKeeperSyncLimit
	if tick == 0 {
		tick = defaultZooKeeperTickTime
	}
	if syncLimit == 0 {
		syncLimit = defaultZooKeeperSyncLimit
	}
	if tick < time.Millisecond || tick%time.Millisecond != 0 {
		return 0, 0, fmt.Errorf("testcluster: ZooKeeperTickTime %s is not a positive whole number of milliseconds", opts.ZooKeeperTickTime)
	}
	if syncLimit < 0 {
		return 0, 0, fmt.Errorf("testcluster: ZooKeeperSyncLimit %d is negative", opts.ZooKeeperSyncLimit)
	}
	return tick, syncLimit, nil
}

// timingProps returns the ZooKeeper settings of the cluster's timing:
// tickTime, initLimit, syncLimit and the session timeout bounds (see
// Options.ZooKeeperTickTime).
func (c *Cluster) timingProps() map[string]string {
	ms := func(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }
	initLimit := max(2*c.zkSyncLimit, int((minZooKeeperInitTime+c.zkTick-1)/c.zkTick))
	return map[string]string{
		"tickTime":          ms(c.zkTick),
		"initLimit":         strconv.Itoa(initLimit),
		"syncLimit":         strconv.Itoa(c.zkSyncLimit),
		"minSessionTimeout": ms(2 * c.zkTick),
		"maxSessionTimeout": ms(max(minZooKeeperMaxSession, 20*c.zkTick)),
	}
}

// quorumLink is the way from one ZooKeeper node to another's quorum and
// election ports (Options.ZooKeeperQuorumProxies).
type quorumLink struct {
	quorum   *Proxy // to the quorum port (a follower to its leader)
	election *Proxy // to the election port
}

func (l *quorumLink) setMode(mode ProxyMode) {
	for _, p := range []*Proxy{l.quorum, l.election} {
		if p.Mode() == mode {
			continue
		}
		if mode == ProxyHold {
			p.Hold()
		} else {
			p.Pass()
		}
	}
}

// quorumDialRetry is how long a quorum proxy tries to connect to a leader
// whose port refuses (proxyOptions.dialRetry). A follower connects to its new
// leader as soon as the election ends, possibly before the leader listens,
// and retries a refused connection 5 times, 100 ms apart (1 s in
// ZooKeeper 3.5), within initLimit. Through a proxy its connection is
// accepted and then closed, which it does not retry: it starts another
// election, which the leader, waiting for followers, does not join until
// initLimit has passed.
const quorumDialRetry = time.Second

// proxyPort returns the port a proxy listens on.
func proxyPort(p *Proxy) int { return p.ln.Addr().(*net.TCPAddr).Port }

// startQuorumProxies starts a quorumLink for every ordered pair of
// ZooKeeper nodes (c.zks has its ports). The election proxy from node a to
// node b rewrites the greeting of a's connections to advertise, as a's
// election address, the election proxy from b to a: a node that receives
// a connection from a node of lower id drops it and connects back to the
// address the greeting advertises, which would otherwise be a's own port,
// past the proxies.
func (c *Cluster) startQuorumProxies() error {
	n := len(c.zks)
	// Every listener first, so that each greeting knows the address of
	// the way back before any connection arrives.
	quorum, election := make([][]*net.TCPListener, n), make([][]*net.TCPListener, n)
	closeAll := func() {
		for _, lns := range append(quorum, election...) {
			for _, ln := range lns {
				if ln != nil {
					_ = ln.Close()
				}
			}
		}
	}
	for a := range n {
		quorum[a], election[a] = make([]*net.TCPListener, n), make([]*net.TCPListener, n)
		for b := range n {
			if a == b {
				continue
			}
			for _, ln := range []**net.TCPListener{&quorum[a][b], &election[a][b]} {
				l, err := listenLoopback()
				if err != nil {
					closeAll()
					return fmt.Errorf("testcluster: quorum proxy: %w", err)
				}
				*ln = l
			}
		}
	}
	c.links = make([][]*quorumLink, n)
	for a, from := range c.zks {
		c.links[a] = make([]*quorumLink, n)
		for b, to := range c.zks {
			if a == b {
				continue
			}
			c.links[a][b] = &quorumLink{
				quorum: serveProxy(quorum[a][b], "127.0.0.1:"+strconv.Itoa(to.quorumPort),
					proxyOptions{dialRetry: quorumDialRetry}),
				election: serveProxy(election[a][b], "127.0.0.1:"+strconv.Itoa(to.electionPort),
					proxyOptions{greet: electionGreeting(election[b][a].Addr().String())}),
			}
			c.logf("testcluster: %s reaches %s through quorum proxy %s and election proxy %s", from, to,
				quorum[a][b].Addr(), election[a][b].Addr())
		}
	}
	c.cut = make([]bool, n)
	return nil
}

// closeQuorumProxies closes the proxies of startQuorumProxies.
func (c *Cluster) closeQuorumProxies() {
	for _, row := range c.links {
		for _, l := range row {
			if l != nil {
				_ = l.quorum.Close()
				_ = l.election.Close()
			}
		}
	}
}

// serverAddress returns the server.N entry, host:quorumPort:electionPort,
// by which ZooKeeper node n knows node z: through their quorumLink with
// quorum proxies, else z's own ports.
func (c *Cluster) serverAddress(n, z *node) string {
	q, e := z.quorumPort, z.electionPort
	if c.links != nil && n != z {
		l := c.links[n.index][z.index]
		q, e = proxyPort(l.quorum), proxyPort(l.election)
	}
	return fmt.Sprintf("127.0.0.1:%d:%d", q, e)
}

// setCut cuts ZooKeeper node i from the quorum or restores it, and sets
// the mode of every link: held when either end is cut.
func (c *Cluster) setCut(i int, cut bool) error {
	if err := c.checkOpen(); err != nil {
		return err
	}
	if _, err := c.zookeeper(i); err != nil {
		return err
	}
	if c.links == nil {
		return errors.New("testcluster: the ZooKeeper ensemble runs without quorum proxies (Options.ZooKeeperQuorumProxies)")
	}
	c.cutMu.Lock()
	defer c.cutMu.Unlock()
	if c.cut[i] == cut {
		return nil
	}
	c.cut[i] = cut
	for a, row := range c.links {
		for b, l := range row {
			if l == nil {
				continue
			}
			if c.cut[a] || c.cut[b] {
				l.setMode(ProxyHold)
			} else {
				l.setMode(ProxyPass)
			}
		}
	}
	verb := "restored"
	if cut {
		verb = "cut"
	}
	c.logf("testcluster: %s %s from the quorum", verb, c.zks[i])
	return nil
}

// isCut reports whether ZooKeeper node n is cut from the quorum.
func (c *Cluster) isCut(n *node) bool {
	if c.links == nil {
		return false
	}
	c.cutMu.Lock()
	defer c.cutMu.Unlock()
	return c.cut[n.index]
}

// The versions of the first message of a ZooKeeper election connection
// (QuorumCnxManager.PROTOCOL_VERSION_V1 and _V2, ZooKeeper 3.5 and
// later): the version, the sender's id, the length of its election
// address and the address ("host:port"; in V2 "host:port|host:port|…").
// ZooKeeper 3.4 sends its id alone, where the version would be.
const (
	electionProtocolV1 = -65536
	electionProtocolV2 = -65535
	// maxElectionAddress bounds the address, as ZooKeeper does (its
	// maxBuffer, 512 KiB).
	maxElectionAddress = 512 << 10
)

// electionGreeting returns the proxyOptions.greet of an election proxy: it reads
// the first message of a connection and puts advertised in the place of
// the sender's election address. A message of ZooKeeper 3.4 (no address)
// or of a version it does not know goes on unchanged.
func electionGreeting(advertised string) func(io.Reader) ([]byte, error) {
	return func(r io.Reader) ([]byte, error) {
		var version [8]byte
		if _, err := io.ReadFull(r, version[:]); err != nil {
			return nil, err
		}
		switch int64(binary.BigEndian.Uint64(version[:])) {
		case electionProtocolV1, electionProtocolV2:
		default:
			return version[:], nil
		}
		var head [12]byte // the sender's id and the address's length
		if _, err := io.ReadFull(r, head[:]); err != nil {
			return nil, err
		}
		size := int32(binary.BigEndian.Uint32(head[8:]))
		if size <= 0 || size > maxElectionAddress {
			return nil, fmt.Errorf("election greeting with an address of %d bytes", size)
		}
		if _, err := io.CopyN(io.Discard, r, int64(size)); err != nil {
			return nil, err
		}
		// One write, which the receiver reads at once: it reads the
		// address with a single read.
		msg := make([]byte, 0, len(version)+len(head)+len(advertised))
		msg = append(msg, version[:]...)
		msg = append(msg, head[:8]...)
		msg = binary.BigEndian.AppendUint32(msg, uint32(len(advertised)))
		return append(msg, advertised...), nil
	}
}
