package fetch

// A broker loop's own connection (loop.go), and how a long poll on
// it is cut short.

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kversion"
)

// connection returns the broker of the loop's own transport to its
// broker: a kgo client used as a transport only, seeded with the broker's
// address and nothing else, every connection dialed through the
// consumer's dialer (Config.Transport: Net.Proxy, TLS, SASL, and the
// consumer's Close cuts them), Fetch capped at the hub's version. kgo sends Fetch requests on a
// connection of their own, and cancelling a request's context closes that
// connection under it (interruptPoll); the next request dials another. A
// loop does not fetch on the sarama client's connection to the broker:
// Kafka answers the requests of a connection one at a time, and the
// partitions' ListOffsets and the client's metadata requests would wait
// behind the loop's long polls (up to Consumer.MaxWaitTime each). The
// loop goroutine's.
func (l *brokerLoop) connection() (*kgo.Broker, error) {
	if l.transport == nil {
		conf := l.hub.conf
		opts, err := l.hub.transport(l.broker.Addr())
		if err != nil {
			return nil, err
		}
		opts = append(opts,
			kgo.MaxVersions(fetchVersions(conf, l.hub.version)),
			kgo.RequestRetries(0),
			// A fetch waits for its response up to its MaxWaitTime
			// plus this, as sarama's Net.ReadTimeout bounds a request.
			kgo.RequestTimeoutOverhead(conf.Net.ReadTimeout),
		)
		opts = append(opts, l.traceOpts()...)
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			return nil, fmt.Errorf("the fetch transport of broker %d: %w", l.broker.ID(), err)
		}
		l.transport = cl
	}
	return l.transport.SeedBrokers()[0], nil
}

// fetchVersions returns the request versions of a loop's transport: at
// most those of conf.Version's Kafka release, as sarama sends them (kgo's
// stable ones for a release it does not know), and Fetch at most version
// (Version: v13 on names topics by ID, which FromKmsg does not
// map).
func fetchVersions(conf *sarama.Config, version int16) *kversion.Versions {
	vs := kversion.FromString(conf.Version.String())
	if vs == nil {
		vs = kversion.Stable()
	}
	vs.SetMaxKeyVersion(1, version) // Fetch
	return vs
}

// closeConnection closes the loop's transport and its connections; the
// next request opens another. The loop goroutine's.
func (l *brokerLoop) closeConnection() {
	if l.transport == nil {
		return
	}
	l.transport.Close()
	l.transport = nil
}

// pollCutDelay is how long a long poll waits at least before
// interruptPoll cuts it: a cut costs a new connection (and the broker a
// request), and a poll is answered as soon as a message comes for any of
// its partitions, so a partition that starts among busy ones is fetched
// soon without a cut.
const pollCutDelay = 50 * time.Millisecond

// longPoll is the loop's long poll in flight: the cancel of its request,
// when it was sent, and the timer of a cut that interruptPoll put off.
type longPoll struct {
	cancel context.CancelFunc
	since  time.Time
	cut    atomic.Pointer[time.Timer] // set once
}

// interruptPoll cuts short the loop's request in flight when it is a long
// poll (every partition in it at the end of its log: the broker waits up
// to Consumer.MaxWaitTime for new messages), so that a partition that
// became ready meanwhile (subscribed, resumed) goes in the next request
// soon, as it would have had the loop not waited: cancelling the
// request's context closes its connection, and the next request opens
// another. A poll younger than pollCutDelay is cut when it reaches that
// age, if it is still in flight then (a poll that returned by itself
// meanwhile, and the next request, which holds the partition, are not
// cut); once the hub is stopping, at once. Safe from any goroutine.
func (l *brokerLoop) interruptPoll() {
	l.stale.Store(true)
	p := l.poll.Load()
	if p == nil {
		return
	}
	wait := pollCutDelay - time.Since(p.since)
	select {
	case <-l.hub.stop:
		wait = 0
	default:
	}
	if wait <= 0 {
		l.cutPoll(p)
		return
	}
	if p.cut.Load() != nil {
		return // a cut is set already
	}
	t := time.AfterFunc(wait, func() { l.cutPoll(p) })
	if !p.cut.CompareAndSwap(nil, t) {
		t.Stop()
	}
}

// cutPoll cuts the long poll p, if it is still the loop's poll in
// flight.
func (l *brokerLoop) cutPoll(p *longPoll) {
	if l.poll.CompareAndSwap(p, nil) {
		p.cancel()
	}
}

// startPoll marks the request that the loop sends next, whose context
// cancel ends, as a long poll, which interruptPoll may cut. The loop
// goroutine's.
func (l *brokerLoop) startPoll(cancel context.CancelFunc) {
	l.poll.Store(&longPoll{cancel: cancel, since: time.Now()})
}

// endPoll ends the loop's long poll once its request returned, and stops
// the timer of a cut that interruptPoll put off (one that fires anyway
// finds the poll gone and does nothing). It reports false when the poll
// was cut. The loop goroutine's.
func (l *brokerLoop) endPoll() bool {
	p := l.poll.Swap(nil)
	if p == nil {
		return false
	}
	if t := p.cut.Load(); t != nil {
		t.Stop()
	}
	return true
}
