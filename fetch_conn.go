package kafkaconsumer

// A broker loop's own connection (fetch_loop.go), and how a long poll on
// it is cut short.

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"golang.org/x/net/proxy"
)

// errPollInterrupted is the dial error of a loop connection whose long poll
// was interrupted before the connection was made.
var errPollInterrupted = errors.New("kafkaconsumer: long poll interrupted")

// loopDialer dials the connection of one sarama.Broker of a broker loop,
// through the consumer's dialer (Net.Proxy.Dialer, see useKafkaDialer),
// and keeps it, so that interrupt can close it under a request in flight:
// sarama's Broker holds its lock for the whole of a request, and its
// Close waits for the response.
type loopDialer struct {
	dial proxy.Dialer
	// polls counts the long polls sent on the connection (startPoll),
	// pollSince is when the last was (unix ns), and cutAt the last poll
	// for which interruptPoll set a timer.
	polls, cutAt atomic.Uint64
	pollSince    atomic.Int64

	mu          sync.Mutex
	conn        net.Conn
	interrupted bool
}

// Dial implements proxy.Dialer for sarama (Net.Proxy.Dialer): it fails
// once the connection was interrupted.
func (d *loopDialer) Dial(network, addr string) (net.Conn, error) {
	conn, err := d.dial.Dial(network, addr)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.interrupted {
		_ = conn.Close()
		return nil, errPollInterrupted
	}
	d.conn = conn
	return conn, nil
}

// interrupt closes the connection, or fails its dial: the request on it
// fails at once.
func (d *loopDialer) interrupt() {
	d.mu.Lock()
	d.interrupted = true
	conn := d.conn
	d.mu.Unlock()
	if conn != nil {
		_ = conn.Close()
	}
}

// connection returns the loop's own connection to its broker, opening it
// when there is none (sarama's Open is asynchronous: a failed dial is the
// error of the first request). A loop does not fetch on the client's
// connection to the broker: Kafka answers the requests of a connection
// one at a time, and the partitions' ListOffsets and the client's
// metadata requests would wait behind the loop's long polls (up to
// Consumer.MaxWaitTime each); nor could a long poll on it be cut short.
// The loop goroutine's.
func (l *brokerLoop) connection() *sarama.Broker {
	if l.conn != nil {
		return l.conn
	}
	conf := *l.hub.conf
	d := &loopDialer{dial: dialerOf(l.hub.conf)}
	conf.Net.Proxy.Enable, conf.Net.Proxy.Dialer = true, d
	// A Broker with the broker's ID, as the client's: sarama keeps the
	// per-broker metrics (throttle-time-in-ms-for-broker-<id>, ...) only
	// for those, and sarama.NewBroker has none (-1).
	var m sarama.MetadataResponse
	m.AddBroker(l.broker.Addr(), l.broker.ID())
	l.conn, l.dialer = m.Brokers[0], d
	_ = l.conn.Open(&conf) // its error is the request's
	return l.conn
}

// closeConnection closes the loop's connection; the next request opens
// another. The loop goroutine's.
func (l *brokerLoop) closeConnection() {
	if l.conn == nil {
		return
	}
	_ = l.conn.Close()
	l.conn, l.dialer = nil, nil
}

// pollCutDelay is how long a long poll waits at least before
// interruptPoll cuts it: a cut costs a new connection (and the broker a
// request), and a poll is answered as soon as a message comes for any of
// its partitions, so a partition that starts among busy ones is fetched
// soon without. Each start cutting at once, a mass move of 500
// partitions under a steady produce cut and redialled about 100 times,
// and took 1.3 to 2.3 s instead of 0.4 (issue 49).
const pollCutDelay = 50 * time.Millisecond

// interruptPoll cuts short the loop's request in flight when it is a long
// poll (every partition in it at the end of its log: the broker waits up
// to Consumer.MaxWaitTime for new messages), so that a partition that
// became ready meanwhile (subscribed, resumed) goes in the next request
// soon, as it would have had the loop not waited: the loop opens another
// connection. A poll younger than pollCutDelay is cut when it reaches
// that age, if it is still waiting then and no later request took the
// partition in; once the hub is stopping, at once. Safe from any
// goroutine.
func (l *brokerLoop) interruptPoll() {
	l.stale.Store(true)
	d := l.poll.Load()
	if d == nil {
		return
	}
	wait := pollCutDelay - time.Since(time.Unix(0, d.pollSince.Load()))
	select {
	case <-l.hub.stop:
		wait = 0
	default:
	}
	if wait <= 0 {
		l.cutPoll(d)
		return
	}
	if poll := d.polls.Load(); d.cutAt.Swap(poll) != poll { // one timer per poll
		time.AfterFunc(wait, func() {
			if d.polls.Load() == poll && l.stale.Load() {
				l.cutPoll(d)
			}
		})
	}
}

// cutPoll cuts the long poll on d, if it is still in flight.
func (l *brokerLoop) cutPoll(d *loopDialer) {
	if l.poll.CompareAndSwap(d, nil) {
		d.interrupt()
	}
}

// startPoll marks the request that the loop sends next as a long poll,
// which interruptPoll may cut. The loop goroutine's.
func (l *brokerLoop) startPoll() {
	d := l.dialer
	d.pollSince.Store(time.Now().UnixNano())
	d.polls.Add(1)
	l.poll.Store(d)
}

// dialerOf returns the dialer that sarama would use for conf.
func dialerOf(conf *sarama.Config) proxy.Dialer {
	if conf.Net.Proxy.Enable && conf.Net.Proxy.Dialer != nil {
		return conf.Net.Proxy.Dialer
	}
	return &net.Dialer{Timeout: conf.Net.DialTimeout, KeepAlive: conf.Net.KeepAlive, LocalAddr: conf.Net.LocalAddr}
}
