package kafkaconsumer

// The dialers: every connection of a consumer's sarama clients, and of its
// go-zookeeper session, is dialed here and kept in a connSet, so that
// Close can cut them all at once, and the dials in flight with them. The
// ZooKeeper dialer's connections also record the session timeout that
// ZooKeeper negotiated.

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/IBM/sarama"
	"github.com/go-zookeeper/zk"
	"golang.org/x/net/proxy"

	"github.com/kafkaconsumer/kafkaconsumer/internal/zktls"
)

// errDialerClosed is the error of a Kafka dial after Close cut the
// consumer's connections, or once a Shutdown's context is done.
var errDialerClosed = errors.New("kafkaconsumer: the consumer is closing")

// kafkaDialer dials the Kafka connections of one consumer and keeps those
// still open. sarama cannot interrupt a request: a broker that hangs
// (connections accepted, nothing answered) holds a coordinator lookup for
// up to three Net.ReadTimeouts (the ApiVersions request on connecting, its
// retry at version 0, then FindCoordinator), and closing the client does
// not end it, because a broker being opened cannot be closed until its
// opening ends. Nor can it interrupt a dial: one to an address that never
// completes a connection (a black hole) holds its broker for up to
// Net.DialTimeout. cutAll closes every connection under the requests,
// which then fail at once, ends the dials in flight and fails every later
// one (cut does so with an error of its own); stopDialing ends the dials
// only.
type kafkaDialer struct {
	// dial dials with a context that the connSet cancels: net.Dialer's,
	// or the user's proxy dialer's DialContext; a proxy dialer without
	// DialContext ignores it.
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// redirect, when set, gives the address to dial in place of a
	// broker's: a test hook (testHooks.kafkaAddress).
	redirect func(addr string) string
	*connSet
}

// useKafkaDialer makes sc dial its connections through a new kafkaDialer,
// which dials as sarama would have: through the user's Net.Proxy.Dialer
// when one is enabled (its DialContext when it is a proxy.ContextDialer),
// else with Net.DialTimeout, Net.KeepAlive and Net.LocalAddr.
//
// It also makes sarama's pauses between metadata and coordinator retries
// (Metadata.Retry.Backoff, or BackoffFunc) nothing once the dials are
// stopped: every retry then fails at once, and the pauses would only hold
// up a failing Join or a Close.
func useKafkaDialer(sc *sarama.Config) *kafkaDialer {
	d := newKafkaDialer(sc)
	sc.Net.Proxy.Enable = true
	sc.Net.Proxy.Dialer = d

	backoffFunc, backoff := sc.Metadata.Retry.BackoffFunc, sc.Metadata.Retry.Backoff
	sc.Metadata.Retry.BackoffFunc = func(retries, maxRetries int) time.Duration {
		switch {
		case d.ctx.Err() != nil:
			return 0
		case backoffFunc != nil:
			return backoffFunc(retries, maxRetries)
		}
		return backoff
	}
	return d
}

// newKafkaDialer returns a kafkaDialer that dials as sarama would for sc
// (see useKafkaDialer), without changing sc.
func newKafkaDialer(sc *sarama.Config) *kafkaDialer {
	d := &kafkaDialer{connSet: newConnSet()}
	if pd := sc.Net.Proxy.Dialer; sc.Net.Proxy.Enable && pd != nil {
		if cd, ok := pd.(proxy.ContextDialer); ok {
			d.dial = cd.DialContext
		} else {
			d.dial = func(_ context.Context, network, addr string) (net.Conn, error) { return pd.Dial(network, addr) }
		}
	} else {
		nd := &net.Dialer{Timeout: sc.Net.DialTimeout, KeepAlive: sc.Net.KeepAlive, LocalAddr: sc.Net.LocalAddr}
		d.dial = nd.DialContext
	}
	return d
}

// cutAll closes every open connection, ends the dials in flight and fails
// every later one.
func (d *kafkaDialer) cutAll() {
	if d != nil { // nil: a consumer manager of the unit tests
		d.connSet.cutAll()
	}
}

// cut is cutAll, with cause as the error of the dials (unless they were
// stopped before).
func (d *kafkaDialer) cut(cause error) {
	if d != nil { // nil: a consumer manager of the unit tests
		d.connSet.cut(cause)
	}
}

// stopDialing ends the dials in flight and fails every later one with
// cause; the open connections stay open.
func (d *kafkaDialer) stopDialing(cause error) {
	if d != nil { // nil: a consumer manager of the unit tests
		d.connSet.stopDialing(cause)
	}
}

// Dial dials addr, unless the dials were stopped. It is what sarama calls
// (sarama.Config.Net.Proxy.Dialer); the dial ends when they are stopped.
func (d *kafkaDialer) Dial(network, addr string) (net.Conn, error) {
	if d.redirect != nil {
		addr = d.redirect(addr)
	}
	return d.open(func(ctx context.Context) (net.Conn, error) { return d.dial(ctx, network, addr) })
}

// dialContext is Dial with a context of the caller's too (the group
// transport's, groupTransport): the dial ends when either ctx is done or
// the dials are stopped.
func (d *kafkaDialer) dialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	if d.redirect != nil {
		addr = d.redirect(addr)
	}
	return d.open(func(setCtx context.Context) (net.Conn, error) {
		both, cancel := context.WithCancel(setCtx)
		defer cancel()
		stop := context.AfterFunc(ctx, cancel)
		defer stop()
		return d.dial(both, network, addr)
	})
}

// zookeeperDialer returns a go-zookeeper dialer whose connections record
// the negotiated session timeout in negotiated, and are kept in conns, so
// that Close can cut them, and the dial in flight (closeSession). Each
// dial, TLS handshake included when tlsConfig is set, waits up to
// go-zookeeper's timeout (a second). Why a connection failed before its
// session's first answer goes to failures, for Join's error.
func zookeeperDialer(negotiated *atomic.Int64, conns *connSet, tlsConfig *tls.Config, failures *dialFailures) zk.Dialer {
	return func(network, address string, timeout time.Duration) (net.Conn, error) {
		return conns.open(func(ctx context.Context) (net.Conn, error) {
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			d := net.Dialer{}
			c, err := d.DialContext(ctx, network, address)
			if err == nil && tlsConfig != nil {
				tc := tls.Client(c, zktls.ForServer(tlsConfig, address))
				if err = tc.HandshakeContext(ctx); err != nil {
					_ = c.Close()
					err = fmt.Errorf("TLS handshake: %w%s", err, handshakeHint(err))
				}
				c = tc
			}
			if err != nil {
				failures.record(address, err)
				return nil, err
			}
			return &connectResponseConn{Conn: c, negotiated: negotiated, failures: failures, server: address, tls: tlsConfig != nil}, nil
		})
	}
}

// handshakeHint says what a failed TLS handshake with a ZooKeeper server
// likely means.
func handshakeHint(err error) string {
	var verify *tls.CertificateVerificationError
	switch {
	case errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET):
		return " (the server closed the connection: is it ZooKeeper's secureClientPort?)"
	case errors.As(err, &verify):
		return " (the server's certificate did not verify with Config.ZookeeperTLS: RootCAs, ServerName)"
	case strings.Contains(err.Error(), "remote error: tls:"):
		return " (the server refused this client: its certificate is missing, expired, or not from a CA the server trusts; see Config.ZookeeperTLS.Certificates)"
	}
	return ""
}

// dialFailures keeps why the last ZooKeeper connection failed before its
// session's first answer: a dial, a TLS handshake, or a server that
// closed the connection (one refusing the client's certificate does so
// after the handshake, in TLS 1.3).
type dialFailures struct {
	mu     sync.Mutex
	server string
	err    error
}

// record keeps err as the last failure, with server.
func (f *dialFailures) record(server string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.server, f.err = server, err
}

// describe returns "; last failure: <server>: <error>", or "" when no
// connection failed.
func (f *dialFailures) describe() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		return ""
	}
	return fmt.Sprintf("; last failure: %s: %v", f.server, f.err)
}

// connectResponseConn records the session timeout from the first answer of
// a ZooKeeper server on a new connection, the connect response: its
// frame's length (4 bytes), protocol version (4) and timeout in
// milliseconds (4). go-zookeeper keeps the negotiated timeout to itself.
// A read that fails before that answer goes to failures. Only one
// goroutine reads the connection at a time (go-zookeeper's authenticate,
// then its receive loop, started after it).
type connectResponseConn struct {
	net.Conn
	negotiated *atomic.Int64
	failures   *dialFailures
	server     string
	tls        bool // a TLS connection
	head       [12]byte
	n          int
}

// Read reads from the connection, recording the negotiated timeout once
// the connect response's head was read.
func (c *connectResponseConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.n < len(c.head) && n > 0 {
		c.n += copy(c.head[c.n:], p[:n])
		if c.n == len(c.head) {
			if ms := int32(binary.BigEndian.Uint32(c.head[8:12])); ms > 0 {
				c.negotiated.Store(int64(ms))
			}
		}
	}
	if err != nil && c.n < len(c.head) {
		hint := ""
		if !c.tls && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)) {
			hint = " (a TLS port? see Config.ZookeeperTLS)"
		}
		c.failures.record(c.server, fmt.Errorf("the server closed the connection before answering: %w%s", err, hint))
	}
	return n, err
}

// connSet keeps the open connections of a dialer, and the context of its
// dials, so that Close can cut them all at once; after that it fails
// every dial.
type connSet struct {
	// ctx is the context of the dials, cancelled (with the cause that
	// later dials fail with) by cutAll and stopDialing, which ends the
	// dials in flight.
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu    sync.Mutex                // guards conns, and orders it with ctx's cancel
	conns map[*trackedConn]struct{} // the open connections; nil once cut
}

func newConnSet() *connSet {
	ctx, cancel := context.WithCancelCause(context.Background())
	return &connSet{ctx: ctx, cancel: cancel, conns: make(map[*trackedConn]struct{})}
}

// open dials a connection with dial, given the set's context, unless the
// dials were stopped, and keeps it: it returns it wrapped so that closing
// it forgets it. A dial that the stop ended, or that completed after it,
// fails with the stop's cause (the connection closed).
func (s *connSet) open(dial func(ctx context.Context) (net.Conn, error)) (net.Conn, error) {
	if s.ctx.Err() != nil {
		return nil, context.Cause(s.ctx)
	}
	conn, err := dial(s.ctx)
	if err != nil {
		if s.ctx.Err() != nil {
			return nil, context.Cause(s.ctx)
		}
		return nil, err
	}
	c := &trackedConn{Conn: conn, set: s}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx.Err() != nil {
		_ = conn.Close()
		return nil, context.Cause(s.ctx)
	}
	s.conns[c] = struct{}{}
	return c, nil
}

// stopDialing ends the dials in flight and fails every later one with
// cause, unless they were stopped before; the open connections stay open.
func (s *connSet) stopDialing(cause error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cancel(cause)
}

// cutAll closes every open connection, ends the dials in flight and fails
// every later one (with errDialerClosed, unless they were stopped before).
func (s *connSet) cutAll() {
	if s != nil { // nil: a consumer manager of the unit tests
		s.cut(errDialerClosed)
	}
}

// cut is cutAll, with cause as the error of the dials (unless they were
// stopped before).
func (s *connSet) cut(cause error) {
	s.mu.Lock()
	s.cancel(cause)
	conns := s.conns
	s.conns = nil
	s.mu.Unlock()
	for c := range conns {
		_ = c.Conn.Close()
	}
}

// trackedConn is a connection of a connSet; closing it forgets it.
type trackedConn struct {
	net.Conn
	set *connSet
}

// Close closes the connection.
func (c *trackedConn) Close() error {
	c.set.mu.Lock()
	delete(c.set.conns, c) // nil after cutAll: a no-op
	c.set.mu.Unlock()
	return c.Conn.Close()
}
