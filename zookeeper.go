package kafkaconsumer

// The ZooKeeper connection helpers of Join: the connection string, the
// first session, and instance IDs.

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/wvanbergen/kazoo-go"

	"github.com/kafkaconsumer/kafkaconsumer/internal/zktls"
)

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
// into its servers and chroot, and checks them. An IPv6 address is written
// in brackets, "[::1]:2181"; a server without a port gets ZooKeeper's
// default, 2181.
func parseZookeeper(connection string) (nodes []string, chroot string, err error) {
	if strings.TrimSpace(connection) == "" {
		return nil, "", fmt.Errorf("%w: it is empty", ErrInvalidZookeeper)
	}
	nodes, chroot = kazoo.ParseConnectionString(connection)
	for i, node := range nodes {
		server, err := parseZookeeperServer(node)
		if err != nil {
			return nil, "", fmt.Errorf("%w: %q has %w", ErrInvalidZookeeper, connection, err)
		}
		nodes[i] = server
	}
	chroot = strings.TrimRight(chroot, "/")
	if strings.Contains(chroot, "//") {
		return nil, "", fmt.Errorf("%w: %q has an empty chroot path element", ErrInvalidZookeeper, connection)
	}
	return nodes, chroot, nil
}

// defaultZookeeperPort is the port of a ZooKeeper server given without one.
const defaultZookeeperPort = "2181"

// parseZookeeperServer checks one server of a connection string, "host",
// "host:port", "[ipv6]" or "[ipv6]:port", and returns it as "host:port"
// (the ZooKeeper client adds the default port only to names without a
// colon, which would leave "[::1]" without one).
func parseZookeeperServer(node string) (string, error) {
	if node == "" || strings.ContainsAny(node, " \t") {
		return "", fmt.Errorf("an empty or malformed server %q", node)
	}
	host, port := node, defaultZookeeperPort
	switch {
	case strings.HasPrefix(node, "["):
		if !strings.Contains(node, "]:") {
			node += ":" + defaultZookeeperPort
		}
		h, p, err := net.SplitHostPort(node)
		if err != nil || net.ParseIP(h) == nil {
			return "", fmt.Errorf("a malformed IPv6 server %q (want [address]:port)", node)
		}
		host, port = h, p
	case strings.Count(node, ":") > 1:
		return "", fmt.Errorf("server %q: write an IPv6 address in brackets, [address]:port", node)
	case strings.Contains(node, ":"):
		host, port, _ = strings.Cut(node, ":")
	}
	if host == "" {
		return "", fmt.Errorf("an empty or malformed server %q", node)
	}
	if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
		return "", fmt.Errorf("server %q with invalid port", node)
	}
	return net.JoinHostPort(host, port), nil
}

// saslRequired is how go-zookeeper reports ZooKeeper's error code -124,
// SESSIONCLOSEDREQUIRESASLAUTH, which it does not know: the server requires
// SASL authentication (enforce.auth.enabled with enforce.auth.schemes=sasl,
// or sessionRequireClientSASLAuth) and closes the session of a client that
// has not logged in, at its first request.
const saslRequired = "unknown error: -124"

// probeZookeeper opens the instance's ZooKeeper session and waits up to
// the configured timeout for it, so that Join fails fast and leaves
// nothing behind when ZooKeeper cannot be reached (go-zookeeper's client
// would try for ever). With the session it makes one request, so that a
// server that requires SASL authentication, which the library does not
// do, is told apart. It returns the connection: the instance's one
// session (see zkConn), broker discovery's first.
// ctx cancelled ends the wait for a session with ctx's error.
//
// security says how the session connects and authenticates: over TLS,
// and with the credentials it presents once it has a session.
// The session's negotiated timeout is recorded in negotiated (see
// connectResponseConn), its connections are kept in conns, and every
// change of its state sends a token on states without blocking, for the
// guard goroutine (fence.go).
func probeZookeeper(ctx context.Context, nodes []string, config *kazoo.Config, security zkSecurity, negotiated *atomic.Int64, conns *connSet, states chan<- struct{}) (*zk.Conn, error) {
	failures := new(dialFailures)
	var hosts zk.HostProvider = &zk.DNSHostProvider{}
	if security.tls != nil {
		hosts = &zktls.NamedHosts{}
	}
	conn, events, err := zk.Connect(nodes, config.Timeout, zk.WithLogger(config.Logger), zk.WithLogInfo(false),
		zk.WithDialer(zookeeperDialer(negotiated, conns, security.tls, failures)), zk.WithEventCallback(notifyStates(states)),
		zk.WithHostProvider(hosts))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrZookeeperUnreachable, err)
	}
	servers := strings.Join(nodes, ",")
	if err := waitSession(ctx, events, config.Timeout, servers, failures); err != nil {
		closeSession(conn, conns)
		return nil, err
	}
	if err := authenticate(conn, security.auth, config.Timeout, servers); err != nil {
		closeSession(conn, conns)
		return nil, err
	}
	err = withDeadline(conn, config.Timeout, func() error {
		_, _, err := conn.Exists("/")
		return err
	})
	if err != nil && err.Error() == saslRequired {
		closeSession(conn, conns)
		return nil, fmt.Errorf("%w: %s requires SASL authentication (it closed the session with error -124), which this library's ZooKeeper client does not do", ErrZookeeperUnreachable, servers)
	}
	// Any other outcome, a timeout included, is left to the rest of Join.
	return conn, nil
}

// waitSession waits up to timeout for the events of a new connection to
// servers to report a session, or until ctx is done (it returns ctx's
// error then). Its timeout's error says why the last connection failed
// (failures).
func waitSession(ctx context.Context, events <-chan zk.Event, timeout time.Duration, servers string, failures *dialFailures) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for a ZooKeeper session with %s: %w", servers, ctx.Err())
		case ev, ok := <-events:
			if !ok {
				return fmt.Errorf("%w: %s: connection closed before a session", ErrZookeeperUnreachable, servers)
			}
			switch ev.State {
			case zk.StateHasSession:
				return nil
			case zk.StateAuthFailed:
				return fmt.Errorf("%w: %s: authentication failed", ErrZookeeperUnreachable, servers)
			}
		case <-t.C:
			return fmt.Errorf("%w: no session with %s within %s (Zookeeper.Timeout)%s", ErrZookeeperUnreachable, servers, timeout, failures.describe())
		}
	}
}

// zkSecurity is how the consumer's ZooKeeper session connects
// (Config.ZookeeperTLS) and authenticates (Config.ZookeeperAuth).
type zkSecurity struct {
	tls  *tls.Config
	auth []ZookeeperCredential
}

// withDeadline runs f, which makes requests on conn, and closes conn if f
// has not returned within timeout: the client has no request timeout, and
// closing the connection fails whatever waits on it.
func withDeadline(conn *zk.Conn, timeout time.Duration, f func() error) error {
	deadline := time.AfterFunc(timeout, conn.Close)
	defer deadline.Stop()
	return f()
}
