package testcluster

import (
	"fmt"
	"net"
	"sync"
	"time"
)

// ProxyMode is what a Proxy does with the bytes and connections that pass
// through it.
type ProxyMode int

const (
	// ProxyPass forwards every byte at once, both ways.
	ProxyPass ProxyMode = iota
	// ProxyHold holds every byte, both ways, and every new connection:
	// nothing is closed and nothing gets through, as when a network drops
	// every packet or a server accepts connections and answers nothing.
	// Connections stay open; what was held flows when the mode changes
	// back to ProxyPass or ProxyDelay (as TCP retransmits after a
	// partition heals), and held new connections are then connected.
	ProxyHold
	// ProxyReset closes every connection at once (with a reset), and
	// every new connection as soon as it is accepted.
	ProxyReset
	// ProxyDelay forwards every byte the proxy's delay after it arrived,
	// in order.
	ProxyDelay
)

func (m ProxyMode) String() string {
	switch m {
	case ProxyPass:
		return "pass"
	case ProxyHold:
		return "hold"
	case ProxyReset:
		return "reset"
	case ProxyDelay:
		return "delay"
	}
	return fmt.Sprintf("ProxyMode(%d)", int(m))
}

// Proxy is a TCP proxy on 127.0.0.1 that a fault test puts between one
// client and one server (a ZooKeeper node or a broker): the client
// connects to Addr instead of the server, and the test switches the mode
// to cut, hold, slow down and heal that one client's connections while
// every other client reaches the server directly. Its methods are safe
// for concurrent use. Close stops it and waits for its goroutines.
type Proxy struct {
	target string
	ln     net.Listener

	wg sync.WaitGroup // the accept loop and every connection's goroutine

	mu      sync.Mutex              // guards the fields below
	mode    ProxyMode               // what the pumps do now
	delay   time.Duration           // with ProxyDelay
	changed chan struct{}           // closed and replaced at every change of mode
	conns   map[*proxyConn]struct{} // open connections
	closed  bool                    // Close was called
}

// proxyConn is one client connection and its connection to the target.
type proxyConn struct {
	client net.Conn
	done   chan struct{} // closed by shut, once
	once   sync.Once

	mu       sync.Mutex // guards upstream
	upstream net.Conn   // nil until connected
}

// NewProxy starts a proxy to target (host:port) in mode ProxyPass.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("proxy to %s: %w", target, err)
	}
	p := &Proxy{
		target:  target,
		ln:      ln,
		changed: make(chan struct{}),
		conns:   make(map[*proxyConn]struct{}),
	}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address that clients connect to instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target is the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Mode returns the current mode.
func (p *Proxy) Mode() ProxyMode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode
}

// Pass forwards everything again, releasing what was held.
func (p *Proxy) Pass() { p.set(ProxyPass, 0) }

// Hold holds every byte and every new connection (see ProxyHold).
func (p *Proxy) Hold() { p.set(ProxyHold, 0) }

// Delay forwards every byte d after it arrived (see ProxyDelay).
func (p *Proxy) Delay(d time.Duration) { p.set(ProxyDelay, d) }

// Reset closes every open connection with a reset, and goes on closing
// new ones until the mode changes (see ProxyReset).
func (p *Proxy) Reset() {
	p.set(ProxyReset, 0)
	p.mu.Lock()
	conns := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.shut(true)
	}
}

// Conns returns the number of client connections open through the proxy.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// set changes the mode and wakes the pumps.
func (p *Proxy) set(mode ProxyMode, delay time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode, p.delay = mode, delay
	close(p.changed)
	p.changed = make(chan struct{})
}

// Close stops the proxy: it closes the listener and every connection, and
// waits for its goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	conns := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	err := p.ln.Close()
	for _, c := range conns {
		c.shut(false)
	}
	p.wg.Wait()
	return err
}

// accept is the accept loop, owned by the proxy (Close waits for it).
func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		c := &proxyConn{client: client, done: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = client.Close()
			return
		}
		p.conns[c] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(c)
	}
}

// serve connects c to the target once the mode lets it, and pumps both
// ways until either side closes or the proxy resets or closes c. Owned by
// the proxy.
func (p *Proxy) serve(c *proxyConn) {
	defer p.wg.Done()
	defer func() {
		c.shut(false)
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
	}()
	if !p.await(c, time.Now()) {
		return
	}
	upstream, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		return
	}
	c.mu.Lock()
	c.upstream = upstream
	c.mu.Unlock()
	select {
	case <-c.done: // shut while dialing
		_ = upstream.Close()
		return
	default:
	}
	var pumps sync.WaitGroup
	pumps.Add(2)
	go func() { defer pumps.Done(); p.pump(c, upstream, c.client) }()
	go func() { defer pumps.Done(); p.pump(c, c.client, upstream) }()
	pumps.Wait()
}

// pump copies from src to dst, through await, until either side fails;
// then it shuts the connection, which ends the other pump.
func (p *Proxy) pump(c *proxyConn, dst, src net.Conn) {
	defer c.shut(false)
	buf := make([]byte, 32*1024)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.await(c, time.Now()) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// await waits until the bytes (or the connection) that arrived at
// arrived may go on: at once in ProxyPass, at arrived + delay in
// ProxyDelay, and not while ProxyHold. It reports false when c is shut,
// or the mode is ProxyReset (then it shuts c).
func (p *Proxy) await(c *proxyConn, arrived time.Time) bool {
	for {
		p.mu.Lock()
		mode, delay, changed := p.mode, p.delay, p.changed
		p.mu.Unlock()
		switch mode {
		case ProxyPass:
			return true
		case ProxyReset:
			c.shut(true)
			return false
		case ProxyDelay:
			wait := time.Until(arrived.Add(delay))
			if wait <= 0 {
				return true
			}
			timer := time.NewTimer(wait)
			select {
			case <-timer.C:
				return true
			case <-changed:
				timer.Stop()
			case <-c.done:
				timer.Stop()
				return false
			}
		case ProxyHold:
			select {
			case <-changed:
			case <-c.done:
				return false
			}
		}
	}
}

// shut closes both sides of c, once; with reset, the client's side with
// a TCP reset (SO_LINGER 0) rather than an orderly close.
func (c *proxyConn) shut(reset bool) {
	c.once.Do(func() {
		close(c.done)
		if tcp, ok := c.client.(*net.TCPConn); ok && reset {
			_ = tcp.SetLinger(0)
		}
		_ = c.client.Close()
	})
	// The upstream side may connect after the first shut (serve then
	// closes it itself): close it on every call; twice is harmless.
	c.mu.Lock()
	up := c.upstream
	c.mu.Unlock()
	if up != nil {
		_ = up.Close()
	}
}
