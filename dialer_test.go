package kafkaconsumer

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer/internal/testcluster"
)

// TestKafkaDialerCutsConnections: cutAll ends a read in flight on a
// connection of the dialer at once, and fails later dials; a connection
// that sarama closes is forgotten.
func TestKafkaDialerCutsConnections(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 8)
	done := make(chan struct{})
	go func() { // accepts and never answers, as a hung broker
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	defer func() {
		_ = ln.Close()
		<-done
		close(accepted)
		for c := range accepted {
			_ = c.Close()
		}
	}()

	sc := sarama.NewConfig()
	d := useKafkaDialer(sc)
	if !sc.Net.Proxy.Enable || sc.Net.Proxy.Dialer != d {
		t.Fatal("the sarama configuration does not dial through the dialer")
	}
	closed, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if err := closed.Close(); err != nil {
		t.Fatal(err)
	}
	conn, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if n := openConns(d.connSet); n != 1 {
		t.Fatalf("%d connections open; want 1", n)
	}

	read := make(chan error, 1)
	go func() {
		_, err := conn.Read(make([]byte, 1))
		read <- err
	}()
	d.cutAll()
	select {
	case err := <-read:
		if err == nil {
			t.Fatal("read on a cut connection succeeded")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("cutAll did not end the read in flight")
	}
	if _, err := d.Dial("tcp", ln.Addr().String()); !errors.Is(err, errDialerClosed) {
		t.Fatalf("dial after cutAll = %v; want %v", err, errDialerClosed)
	}
}

// TestKafkaDialerKeepsTheUsersProxy: a proxy dialer of the user's stays the
// one that dials.
func TestKafkaDialerKeepsTheUsersProxy(t *testing.T) {
	sc := sarama.NewConfig()
	proxy := &countingDialer{}
	sc.Net.Proxy.Enable = true
	sc.Net.Proxy.Dialer = proxy
	d := useKafkaDialer(sc)
	if _, err := d.Dial("tcp", "127.0.0.1:1"); err == nil {
		t.Fatal("the proxy's error was lost")
	}
	if proxy.dials != 1 {
		t.Fatalf("the user's proxy dialed %d times; want 1", proxy.dials)
	}
}

// countingDialer is a proxy dialer without DialContext.
type countingDialer struct{ dials int }

func (c *countingDialer) Dial(network, addr string) (net.Conn, error) {
	c.dials++
	return nil, errors.New("proxy refused")
}

// openConns returns how many connections of s are open.
func openConns(s *connSet) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// blackHole returns the address of a black-holed proxy: a connect to it
// neither completes nor is refused.
func blackHole(t *testing.T) string {
	t.Helper()
	p, err := testcluster.NewProxy("127.0.0.1:1") // never connected to
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	if err := p.BlackHole(); err != nil {
		t.Fatal(err)
	}
	return p.Addr()
}

// dialAsync runs d.Dial to addr on a goroutine of its own; the channel
// receives its error.
func dialAsync(d *kafkaDialer, addr string) <-chan error {
	done := make(chan error, 1)
	go func() {
		c, err := d.Dial("tcp", addr)
		if c != nil {
			_ = c.Close()
		}
		done <- err
	}()
	return done
}

// pendingThenEnded checks that the dial reporting on done is still
// pending a while after it started (it hangs in a black hole), and that
// it fails with want within a second of end.
func pendingThenEnded(t *testing.T, done <-chan error, end func(), want error) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("a dial into a black hole returned: %v", err)
	case <-time.After(300 * time.Millisecond): // how long the test looks
	}
	ended := time.Now()
	end()
	select {
	case err := <-done:
		if !errors.Is(err, want) {
			t.Fatalf("the dial ended with %v; want %v", err, want)
		}
		if took := time.Since(ended); took > time.Second {
			t.Fatalf("the dial ended %s after it was stopped", took)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the dial in flight did not end when stopped")
	}
}

// TestKafkaDialerCutEndsDialInFlight: with sarama's default dialing
// (Net.DialTimeout 30 s), a dial into a black hole ends at once when the
// connections are cut, and later dials fail at once.
func TestKafkaDialerCutEndsDialInFlight(t *testing.T) {
	t.Parallel()
	addr := blackHole(t)
	d := useKafkaDialer(sarama.NewConfig())
	pendingThenEnded(t, dialAsync(d, addr), d.cutAll, errDialerClosed)
	if _, err := d.Dial("tcp", addr); !errors.Is(err, errDialerClosed) {
		t.Fatalf("dial after cutAll = %v; want %v", err, errDialerClosed)
	}
}

// TestKafkaDialerStopKeepsConnections: stopDialing ends a dial in flight
// with its cause and fails later dials, and leaves the open connections
// open.
func TestKafkaDialerStopKeepsConnections(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	d := useKafkaDialer(sarama.NewConfig())
	open, err := d.Dial("tcp", ln.Addr().String()) // completes in the kernel's accept queue
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()

	cause := errors.New("stopped by the test")
	pendingThenEnded(t, dialAsync(d, blackHole(t)), func() { d.stopDialing(cause) }, cause)
	if _, err := d.Dial("tcp", ln.Addr().String()); !errors.Is(err, cause) {
		t.Fatalf("dial after stopDialing = %v; want %v", err, cause)
	}
	if n := openConns(d.connSet); n != 1 {
		t.Fatalf("%d connections open after stopDialing; want 1", n)
	}
	d.cutAll()
	if n := openConns(d.connSet); n != 0 {
		t.Fatalf("%d connections open after cutAll; want 0", n)
	}
}

// contextDialer is a proxy dialer with DialContext (a
// proxy.ContextDialer), which dials directly.
type contextDialer struct{ dials, contextDials int }

func (c *contextDialer) Dial(network, addr string) (net.Conn, error) {
	c.dials++
	return nil, errors.New("Dial called on a proxy.ContextDialer")
}

func (c *contextDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	c.contextDials++
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

// TestKafkaDialerUsesTheProxysDialContext: a user's proxy dialer that
// implements proxy.ContextDialer dials with DialContext, whose context
// the cut cancels.
func TestKafkaDialerUsesTheProxysDialContext(t *testing.T) {
	t.Parallel()
	sc := sarama.NewConfig()
	proxy := &contextDialer{}
	sc.Net.Proxy.Enable = true
	sc.Net.Proxy.Dialer = proxy
	d := useKafkaDialer(sc)
	pendingThenEnded(t, dialAsync(d, blackHole(t)), d.cutAll, errDialerClosed)
	if proxy.contextDials != 1 || proxy.dials != 0 {
		t.Fatalf("the proxy's DialContext dialed %d times, its Dial %d; want 1 and 0", proxy.contextDials, proxy.dials)
	}
}

// TestKafkaDialerBackoff: sarama's pause between metadata retries is the
// user's (Metadata.Retry.Backoff, or BackoffFunc) until the dials are
// stopped, and nothing after.
func TestKafkaDialerBackoff(t *testing.T) {
	t.Parallel()
	sc := sarama.NewConfig()
	sc.Metadata.Retry.Backoff = 300 * time.Millisecond
	d := useKafkaDialer(sc)
	if got := sc.Metadata.Retry.BackoffFunc(1, 3); got != 300*time.Millisecond {
		t.Fatalf("backoff %s; want Metadata.Retry.Backoff", got)
	}
	d.stopDialing(errDialerClosed)
	if got := sc.Metadata.Retry.BackoffFunc(1, 3); got != 0 {
		t.Fatalf("backoff %s after stopDialing; want 0", got)
	}

	sc = sarama.NewConfig()
	sc.Metadata.Retry.BackoffFunc = func(retries, maxRetries int) time.Duration { return time.Duration(retries) * time.Second }
	d = useKafkaDialer(sc)
	if got := sc.Metadata.Retry.BackoffFunc(2, 3); got != 2*time.Second {
		t.Fatalf("backoff %s; want the user's BackoffFunc's", got)
	}
	d.cutAll()
	if got := sc.Metadata.Retry.BackoffFunc(2, 3); got != 0 {
		t.Fatalf("backoff %s after cutAll; want 0", got)
	}
}

// TestZookeeperDialerCutEndsDialInFlight: a ZooKeeper dial into a black
// hole ends at once when the session's connections are cut
// (closeSession), rather than after go-zookeeper's dial timeout.
func TestZookeeperDialerCutEndsDialInFlight(t *testing.T) {
	t.Parallel()
	conns := newConnSet()
	dial := zookeeperDialer(new(atomic.Int64), conns, nil, new(dialFailures))
	addr := blackHole(t)
	done := make(chan error, 1)
	go func() {
		c, err := dial("tcp", addr, time.Minute)
		if c != nil {
			_ = c.Close()
		}
		done <- err
	}()
	pendingThenEnded(t, done, conns.cutAll, errDialerClosed)
}
