package kafkaconsumer

// The Kafka dialer: every connection of a consumer's sarama clients is
// dialed here, so that Close can cut them all at once.

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
// opening ends. cut closes every connection under the requests, which
// then fail at once, and fails every later dial.
type kafkaDialer struct {
	dial func(network, addr string) (net.Conn, error)

	mu    sync.Mutex
	conns map[*kafkaConn]struct{}
	cut   bool
}

// useKafkaDialer makes sc dial its connections through a new kafkaDialer,
// which dials as sarama would have: through the user's Net.Proxy.Dialer
// when one is enabled, else with Net.DialTimeout, Net.KeepAlive and
// Net.LocalAddr.
func useKafkaDialer(sc *sarama.Config) *kafkaDialer {
	d := &kafkaDialer{conns: make(map[*kafkaConn]struct{})}
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

// Dial dials addr, unless the connections were cut.
func (d *kafkaDialer) Dial(network, addr string) (net.Conn, error) {
	d.mu.Lock()
	cut := d.cut
	d.mu.Unlock()
	if cut {
		return nil, errDialerClosed
	}
	conn, err := d.dial(network, addr)
	if err != nil {
		return nil, err
	}
	c := &kafkaConn{Conn: conn, d: d}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cut { // cut while dialing
		_ = conn.Close()
		return nil, errDialerClosed
	}
	d.conns[c] = struct{}{}
	return c, nil
}

// cutAll closes every open connection and fails every later dial.
func (d *kafkaDialer) cutAll() {
	if d == nil { // a consumer manager of the unit tests
		return
	}
	d.mu.Lock()
	d.cut = true
	conns := d.conns
	d.conns = nil
	d.mu.Unlock()
	for c := range conns {
		_ = c.Conn.Close()
	}
}

// kafkaConn is a connection of a kafkaDialer; closing it forgets it.
type kafkaConn struct {
	net.Conn
	d *kafkaDialer
}

// Close closes the connection.
func (c *kafkaConn) Close() error {
	c.d.mu.Lock()
	delete(c.d.conns, c)
	c.d.mu.Unlock()
	return c.Conn.Close()
}
