package testcluster

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

// echoServer accepts connections on 127.0.0.1 and echoes every line back,
// until the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func newTestProxy(t *testing.T) *Proxy {
	t.Helper()
	p, err := NewProxy(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// roundTrip writes a line on c and reads it back, within timeout.
func roundTrip(c net.Conn, r *bufio.Reader, line string, timeout time.Duration) error {
	_ = c.SetDeadline(time.Now().Add(timeout))
	defer func() { _ = c.SetDeadline(time.Time{}) }()
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return err
	}
	got, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	if got != line+"\n" {
		return errors.New("echo " + got + " for " + line)
	}
	return nil
}

func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, bufio.NewReader(c)
}

func TestProxyPassAndHold(t *testing.T) {
	t.Parallel()
	p := newTestProxy(t)
	c, r := dial(t, p.Addr())
	if err := roundTrip(c, r, "one", 5*time.Second); err != nil {
		t.Fatalf("pass: %v", err)
	}

	p.Hold()
	// Held: nothing comes back, and nothing is closed. The read deadline
	// bounds how long the test looks.
	err := roundTrip(c, r, "two", 300*time.Millisecond)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("hold: round trip = %v, want a timeout", err)
	}
	// A new connection is accepted and held too.
	c2, r2 := dial(t, p.Addr())
	if _, err := c2.Write([]byte("three\n")); err != nil {
		t.Fatal(err)
	}
	_ = c2.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := r2.ReadString('\n'); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("hold: new connection read = %v, want a timeout", err)
	}

	// Healed: what was held flows, in order, on both connections.
	p.Pass()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got, err := r.ReadString('\n'); err != nil || got != "two\n" {
		t.Fatalf("after hold: read %q, %v; want the held line", got, err)
	}
	_ = c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got, err := r2.ReadString('\n'); err != nil || got != "three\n" {
		t.Fatalf("after hold: new connection read %q, %v; want the held line", got, err)
	}
	if n := p.Conns(); n != 2 {
		t.Fatalf("Conns() = %d, want 2", n)
	}
}

func TestProxyReset(t *testing.T) {
	t.Parallel()
	p := newTestProxy(t)
	c, r := dial(t, p.Addr())
	if err := roundTrip(c, r, "one", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Reset()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.ReadString('\n'); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read after reset = %v, want the connection closed", err)
	}
	// New connections are closed at once: the dial itself may see the
	// reset, else the first read does.
	if c2, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second); err == nil {
		defer c2.Close()
		_ = c2.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := bufio.NewReader(c2).ReadString('\n'); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read on a new connection while resetting = %v, want it closed", err)
		}
	}
	p.Pass()
	c3, r3 := dial(t, p.Addr())
	if err := roundTrip(c3, r3, "again", 5*time.Second); err != nil {
		t.Fatalf("after reset: %v", err)
	}
}

func TestProxyDelay(t *testing.T) {
	t.Parallel()
	p := newTestProxy(t)
	c, r := dial(t, p.Addr())
	const d = 200 * time.Millisecond
	p.Delay(d)
	start := time.Now()
	if err := roundTrip(c, r, "slow", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	// Both ways are delayed: at least 2d for the round trip.
	if took := time.Since(start); took < 2*d {
		t.Fatalf("round trip took %s with a delay of %s each way", took, d)
	}
}

func TestProxyCloseEndsConnections(t *testing.T) {
	t.Parallel()
	p := newTestProxy(t)
	c, r := dial(t, p.Addr())
	p.Hold()
	if _, err := c.Write([]byte("held\n")); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.ReadString('\n'); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read after Close = %v, want the connection closed", err)
	}
	if n := p.Conns(); n != 0 {
		t.Fatalf("Conns() after Close = %d", n)
	}
}

// A close is held like bytes: in ProxyHold the other side learns of it
// only once the mode changes.
func TestProxyHoldHoldsClose(t *testing.T) {
	t.Parallel()
	target, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	p, err := NewProxy(target.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, _ := dial(t, p.Addr())
	server, err := target.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	p.Hold()
	_ = c.Close()
	_ = server.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := server.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("held: the target read %v, want a timeout", err)
	}
	p.Pass()
	_ = server.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := server.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("after hold: the target read %v, want EOF", err)
	}
}

// A proxy with dialRetry connects a client to a target that starts
// listening a moment after the client connected.
func TestProxyDialRetry(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := ln.Addr().String()
	ln.Close() // refuses, for now
	pl, err := listenLoopback()
	if err != nil {
		t.Fatal(err)
	}
	p := serveProxy(pl, target, proxyOptions{dialRetry: 5 * time.Second})
	defer p.Close()
	c, r := dial(t, p.Addr())
	if _, err := c.Write([]byte("early\n")); err != nil {
		t.Fatal(err)
	}
	// Not a synchronisation: time for the proxy to have some dials
	// refused (the test passes without, testing less).
	time.Sleep(200 * time.Millisecond)
	ln, err = net.Listen("tcp", target)
	if err != nil {
		t.Skipf("the target's port was taken meanwhile: %v", err)
	}
	defer ln.Close()
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	go func() { _, _ = io.Copy(server, server) }()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got, err := r.ReadString('\n'); err != nil || got != "early\n" {
		t.Fatalf("read %q, %v; want the line sent before the target listened", got, err)
	}
}

// TestProxyBlackHole: in ProxyBlackHole a new connection neither connects
// nor is refused: the client's connect is still pending a while later
// (the kernel drops its SYNs), and an open connection passes nothing.
// After Pass the pending connect completes (at the client's next SYN
// retransmission, within seconds) and is served, and what the open
// connection held flows.
func TestProxyBlackHole(t *testing.T) {
	t.Parallel()
	p := newTestProxy(t)
	open, openR := dial(t, p.Addr())
	if err := roundTrip(open, openR, "before", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := p.BlackHole(); err != nil {
		t.Fatal(err)
	}
	if m := p.Mode(); m != ProxyBlackHole {
		t.Fatalf("Mode() = %s, want %s", m, ProxyBlackHole)
	}
	if err := roundTrip(open, openR, "held", 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("black hole: round trip on an open connection = %v, want a timeout", err)
	}

	type dialed struct {
		conn net.Conn
		err  error
	}
	pending := make(chan dialed, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go func() {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", p.Addr())
		pending <- dialed{c, err}
	}()
	// Still pending after a while: neither accepted nor refused. (The
	// timer bounds how long the test looks, as the read deadlines above.)
	select {
	case d := <-pending:
		if d.conn != nil {
			_ = d.conn.Close()
		}
		t.Fatalf("a dial to a black hole returned (%v); want it pending", d.err)
	case <-time.After(1500 * time.Millisecond): // past the first SYN retransmission
	}

	p.Pass()
	var d dialed
	select {
	case d = <-pending:
	case <-time.After(10 * time.Second):
		t.Fatal("the pending dial did not complete within 10 s of Pass")
	}
	if d.err != nil {
		t.Fatalf("the pending dial failed after Pass: %v", d.err)
	}
	t.Cleanup(func() { _ = d.conn.Close() })
	if err := roundTrip(d.conn, bufio.NewReader(d.conn), "after", 5*time.Second); err != nil {
		t.Fatalf("the connection dialed through the black hole: %v", err)
	}
	_ = open.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got, err := openR.ReadString('\n'); err != nil || got != "held\n" {
		t.Fatalf("after black hole: read %q, %v; want the held line", got, err)
	}
	// The connections that filled the queue are gone: two clients.
	waitConns(t, p, 2)

	// Again, and the proxy closes while black-holed.
	if err := p.BlackHole(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}

// waitConns waits until p has n connections open.
func waitConns(t *testing.T, p *Proxy, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for p.Conns() != n {
		if time.Now().After(deadline) {
			t.Fatalf("Conns() = %d, want %d", p.Conns(), n)
		}
		time.Sleep(10 * time.Millisecond) // polling interval
	}
}

// waitProxy polls cond until it holds, failing the test with what after 5 s.
func waitProxy(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not synchronisation
	}
}

// TestProxyCounts: Accepted counts the connections, Held those waiting to
// be connected, and Conversations those whose client sent again after an
// answer; a client that closed while held is not one, although what it
// sent goes through once the proxy passes again.
func TestProxyCounts(t *testing.T) {
	t.Parallel()
	p := newTestProxy(t)
	c, r := dial(t, p.Addr())
	if err := roundTrip(c, r, "one", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if a, n := p.Accepted(), p.Conversations(); a != 1 || n != 0 {
		t.Fatalf("after one round trip: Accepted() = %d, Conversations() = %d; want 1, 0", a, n)
	}
	if err := roundTrip(c, r, "two", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if n := p.Conversations(); n != 1 {
		t.Fatalf("after a second round trip: Conversations() = %d, want 1", n)
	}

	p.Hold()
	gone, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gone.Write([]byte("sent before closing\n")); err != nil {
		t.Fatal(err)
	}
	waitProxy(t, "the new connection to be held", func() bool { return p.Held() == 1 })
	_ = gone.Close()
	p.Pass()
	waitProxy(t, "the closed connection to go", func() bool { return p.Held() == 0 && p.Conns() == 1 })
	if a, n := p.Accepted(), p.Conversations(); a != 2 || n != 1 {
		t.Fatalf("after a connection closed while held: Accepted() = %d, Conversations() = %d; want 2, 1", a, n)
	}
}
