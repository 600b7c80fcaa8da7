package testcluster

import (
	"bufio"
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
