package kafkaconsumer

// The dialers: every connection of a consumer's sarama clients, and of its
// go-zookeeper session, is dialed here, so that Close can cut them all at
// once.

import (
	"errors"
	"net"
	"sync"

	"github.com/IBM/sarama"
)

// errDialerClosed is the error of a Kafka dial after Close cut the
// consumer's connections.
var errDialerClosed = errors.New("kafkaconsumer: the consumer is closing")

// kafkaDialer dials the Kafka connections of one consumer and keeps those
// still open. sarama cannot interrupt a request: a broker that hangs
// (connections accepted, nothing answered) holds a coordinator lookup for
// up to three Net.ReadTimeouts (the ApiVersions request on connecting, its
// retry at version 0, then FindCoordinator), and closing the client does
// not end it, because a broker being opened cannot be closed until its
// opening ends. cutAll closes every connection under the requests, which
// then fail at once, and fails every later dial.
type kafkaDialer struct {
	dial func(network, addr string) (net.Conn, error)
	*connSet
}

// useKafkaDialer makes sc dial its connections through a new kafkaDialer,
// which dials as sarama would have: through the user's Net.Proxy.Dialer
// when one is enabled, else with Net.DialTimeout, Net.KeepAlive and
// Net.LocalAddr.
func useKafkaDialer(sc *sarama.Config) *kafkaDialer {
	d := &kafkaDialer{connSet: newConnSet()}
	if sc.Net.Proxy.Enable && sc.Net.Proxy.Dialer != nil {
		d.dial = sc.Net.Proxy.Dialer.Dial
	} else {
		nd := &net.Dialer{Timeout: sc.Net.DialTimeout, KeepAlive: sc.Net.KeepAlive, LocalAddr: sc.Net.LocalAddr}
		d.dial = nd.Dial
	}
	sc.Net.Proxy.Enable = true
	sc.Net.Proxy.Dialer = d
	return d
}

// cutAll closes every open connection and fails every later dial.
func (d *kafkaDialer) cutAll() {
	if d != nil { // nil: a consumer manager of the unit tests
		d.connSet.cutAll()
	}
}

// Dial dials addr, unless the connections were cut.
func (d *kafkaDialer) Dial(network, addr string) (net.Conn, error) {
	return d.open(func() (net.Conn, error) { return d.dial(network, addr) })
}

// connSet keeps the open connections of a dialer, so that Close can cut
// them all at once; after that it fails every dial.
type connSet struct {
	mu    sync.Mutex
	conns map[*trackedConn]struct{}
	cut   bool
}

func newConnSet() *connSet { return &connSet{conns: make(map[*trackedConn]struct{})} }

// open dials a connection with dial, unless the connections were cut,
// and keeps it: it returns it wrapped so that closing it forgets it. If
// the set was cut while it was dialed, it closes it and fails.
func (s *connSet) open(dial func() (net.Conn, error)) (net.Conn, error) {
	s.mu.Lock()
	cut := s.cut
	s.mu.Unlock()
	if cut {
		return nil, errDialerClosed
	}
	conn, err := dial()
	if err != nil {
		return nil, err
	}
	c := &trackedConn{Conn: conn, set: s}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cut {
		_ = conn.Close()
		return nil, errDialerClosed
	}
	s.conns[c] = struct{}{}
	return c, nil
}

// cutAll closes every open connection and fails every later dial.
func (s *connSet) cutAll() {
	if s == nil { // a consumer manager of the unit tests
		return
	}
	s.mu.Lock()
	s.cut = true
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
	delete(c.set.conns, c)
	c.set.mu.Unlock()
	return c.Conn.Close()
}
