package testcluster

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
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
	// Connections stay open: a side that closes its connection meanwhile
	// is held too, and the other side learns of it only once the mode
	// changes. What was held flows when the mode changes back to
	// ProxyPass or ProxyDelay (as TCP retransmits after a partition
	// heals), and held new connections are then connected.
	ProxyHold
	// ProxyReset closes every connection at once (with a reset), and
	// every new connection as soon as it is accepted.
	ProxyReset
	// ProxyDelay forwards every byte, and a side's close, the proxy's
	// delay after it arrived, in order.
	ProxyDelay
	// ProxyBlackHole completes no new connection: a client's connect
	// neither succeeds nor is refused, it hangs (its SYNs are dropped) as
	// toward an address where nothing answers, until its own timeout.
	// Open connections are held as with ProxyHold. When the mode changes
	// back, the waiting clients connect at their next SYN retransmission
	// (the kernel's backoff: 1 s, 3 s, 7 s, 15 s ... after the first SYN),
	// and are served in the new mode. See Proxy.BlackHole.
	ProxyBlackHole
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
	case ProxyBlackHole:
		return "black hole"
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
	ln     *net.TCPListener
	opts   proxyOptions

	wg   sync.WaitGroup // the accept loop and every connection's goroutine
	quit chan struct{}  // closed by Close, once

	// switching serializes the changes of mode (set, BlackHole), which
	// reconfigure the listener outside mu.
	switching sync.Mutex

	mu      sync.Mutex              // guards the fields below
	mode    ProxyMode               // what the pumps do now
	delay   time.Duration           // with ProxyDelay
	changed chan struct{}           // closed and replaced at every change of mode
	conns   map[*proxyConn]struct{} // open connections
	closed  bool                    // Close was called
	// paused is closed by the accept loop once it stopped accepting for
	// the black hole that BlackHole set up; nil otherwise.
	paused chan struct{}
	// fillers are the connections that BlackHole made to fill the
	// listener's accept queue (the client sides), closed when the mode
	// changes again; fillerAddrs are their local addresses, by which the
	// accept loop knows and closes their server sides when it accepts
	// them.
	fillers     []net.Conn
	fillerAddrs map[string]bool

	// The counts of Accepted, Held and Conversations.
	accepted, held, conversations int
}

// proxyOptions are the settings of a Proxy that only this package uses.
type proxyOptions struct {
	// greet, if set, reads the first message of each connection from
	// its client and returns what to send the target in its place (the
	// ZooKeeper election proxies rewrite the sender's address: see
	// electionGreeting).
	greet func(client io.Reader) ([]byte, error)
	// dialRetry is how long serve goes on trying to connect to the
	// target while it fails (0: one try). A client whose connection the
	// target refuses sees it accepted by the proxy, then closed: the
	// ZooKeeper quorum proxies retry in the place of a follower, which
	// retries a refused connection to a leader whose port opens a moment
	// after the election (see quorumDialRetry).
	dialRetry time.Duration
}

// proxyConn is one client connection and its connection to the target.
type proxyConn struct {
	client net.Conn
	done   chan struct{} // closed by shut, once
	once   sync.Once

	mu       sync.Mutex // guards upstream
	upstream net.Conn   // nil until connected

	// answered is set once bytes of the target were written to the
	// client; talked once the client sent bytes after that (see
	// Proxy.Conversations).
	answered, talked atomic.Bool
}

// NewProxy starts a proxy to target (host:port) in mode ProxyPass.
func NewProxy(target string) (*Proxy, error) {
	ln, err := listenLoopback()
	if err != nil {
		return nil, fmt.Errorf("proxy to %s: %w", target, err)
	}
	return serveProxy(ln, target, proxyOptions{}), nil
}

// listenLoopback listens on a free port of 127.0.0.1.
func listenLoopback() (*net.TCPListener, error) {
	return net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
}

// serveProxy starts a proxy to target with opts that accepts its clients
// on ln (it owns ln from then on), in mode ProxyPass.
func serveProxy(ln *net.TCPListener, target string, opts proxyOptions) *Proxy {
	p := &Proxy{
		target:      target,
		ln:          ln,
		opts:        opts,
		quit:        make(chan struct{}),
		changed:     make(chan struct{}),
		conns:       make(map[*proxyConn]struct{}),
		fillerAddrs: make(map[string]bool),
	}
	p.wg.Add(1)
	go p.accept()
	return p
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
	p.closeConns()
}

// BlackHole makes new connections hang in connect and holds the open ones
// (see ProxyBlackHole); it returns once a client's connect would hang.
// The proxy stops accepting, shrinks its listener's accept queue to one
// connection (listen(2) again with a backlog of 0) and fills it with a
// connection of its own: the kernel then drops every further SYN, so a
// connect neither completes nor is refused. Connections that completed
// their handshake before (a client may see its dial succeed in the
// instant of the switch) wait unaccepted, held, until the mode changes.
// It fails where the listener's backlog cannot be changed (outside Unix).
func (p *Proxy) BlackHole() error {
	p.switching.Lock()
	defer p.switching.Unlock()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return errProxyClosed
	}
	if p.mode == ProxyBlackHole {
		p.mu.Unlock()
		return nil
	}
	paused := make(chan struct{})
	p.paused = paused
	p.setLocked(ProxyBlackHole, 0)
	// A deadline in the past ends the accept loop's Accept; it sees the
	// mode and stops accepting (pauseAccept).
	err := p.ln.SetDeadline(time.Unix(1, 0))
	p.mu.Unlock()
	if err != nil {
		return fmt.Errorf("proxy black hole: %w", err)
	}
	select {
	case <-paused:
	case <-p.quit:
		return errProxyClosed
	}
	if err := setBacklog(p.ln, 0); err != nil {
		return fmt.Errorf("proxy black hole: %w", err)
	}
	return p.fillAcceptQueue()
}

// errProxyClosed is BlackHole's error after Close.
var errProxyClosed = errors.New("proxy closed")

// passBacklog is the listener's backlog outside ProxyBlackHole (the
// kernel caps it to its somaxconn).
const passBacklog = 4096

// fillAcceptQueue fills the paused listener's accept queue with
// connections of the proxy's own (fillers), until the kernel reports it
// full or a connect hangs (fillerTimeout) where it cannot tell.
func (p *Proxy) fillAcceptQueue() error {
	const maxFillers, fillerTimeout = 16, time.Second
	for range maxFillers {
		if full, known := acceptQueueFull(p.ln); known && full {
			return nil
		}
		c, err := net.DialTimeout("tcp", p.Addr(), fillerTimeout)
		if err != nil {
			var netErr net.Error
			if errors.As(err, &netErr) && netErr.Timeout() {
				return nil // the SYN was dropped: the queue is full
			}
			return fmt.Errorf("proxy black hole: fill the accept queue: %w", err)
		}
		p.mu.Lock()
		p.fillers = append(p.fillers, c)
		p.fillerAddrs[c.LocalAddr().String()] = true
		p.mu.Unlock()
	}
	return fmt.Errorf("proxy black hole: the accept queue is not full after %d connections", maxFillers)
}

// closeConns closes every open connection with a reset.
func (p *Proxy) closeConns() {
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

// Accepted returns the number of client connections the proxy accepted
// since it started: the connections its clients opened.
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// Held returns the number of new connections that wait, held, to be
// connected to the target (ProxyHold); a client that closed such a
// connection meanwhile is not noticed until the mode lets it go on.
func (p *Proxy) Held() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held
}

// Conversations returns the number of connections, since the proxy
// started, on which the client sent bytes after bytes of the target had
// been written to it: a client that took part in an exchange with the
// target, such as a ZooKeeper client that got its session and then sent
// a request. A connection that the client closed before the target
// answered is not one, although the proxy forwards, once the mode lets
// it, what the client had sent before it closed (as the kernel of a
// server that accepted the connection would).
func (p *Proxy) Conversations() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.conversations
}

// set changes the mode and wakes the pumps. Out of ProxyBlackHole, it
// gives the listener its backlog back and closes the fillers before the
// accept loop resumes, which then accepts the waiting clients.
func (p *Proxy) set(mode ProxyMode, delay time.Duration) {
	p.switching.Lock()
	defer p.switching.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mode == ProxyBlackHole && !p.closed {
		// An error leaves the backlog at 0: one connection at a time
		// still gets through once accepted, which is all a test sees.
		_ = setBacklog(p.ln, passBacklog)
		for _, c := range p.fillers {
			_ = c.Close()
		}
		p.fillers = nil
	}
	p.setLocked(mode, delay)
}

// setLocked changes the mode and wakes the pumps and the accept loop;
// p.mu is held.
func (p *Proxy) setLocked(mode ProxyMode, delay time.Duration) {
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
	close(p.quit)
	conns := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	fillers := p.fillers
	p.fillers = nil
	p.mu.Unlock()
	err := p.ln.Close()
	for _, c := range conns {
		c.shut(false)
	}
	for _, c := range fillers {
		_ = c.Close()
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
			if errors.Is(err, os.ErrDeadlineExceeded) && p.pauseAccept() {
				continue
			}
			return // closed
		}
		c := &proxyConn{client: client, done: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = client.Close()
			return
		}
		if addr := client.RemoteAddr().String(); p.fillerAddrs[addr] {
			delete(p.fillerAddrs, addr) // a filler of a black hole
			p.mu.Unlock()
			_ = client.Close()
			continue
		}
		p.conns[c] = struct{}{}
		p.accepted++
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(c)
	}
}

// pauseAccept keeps the accept loop from accepting while the mode is
// ProxyBlackHole (BlackHole's deadline ended its Accept): it tells
// BlackHole that it paused, and waits for another mode, then clears the
// deadline. It reports false when the proxy is closed.
func (p *Proxy) pauseAccept() bool {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return false
		}
		if p.mode != ProxyBlackHole {
			// Under mu: a BlackHole that follows sets its deadline after.
			err := p.ln.SetDeadline(time.Time{})
			p.mu.Unlock()
			return err == nil
		}
		if p.paused != nil {
			close(p.paused)
			p.paused = nil
		}
		changed := p.changed
		p.mu.Unlock()
		select {
		case <-changed:
		case <-p.quit:
			return false
		}
	}
}

// serve connects c to the target once the mode lets it, passes on the
// client's greeting (with opts.greet), and pumps both ways until either side
// closes or the proxy resets or closes c. Owned by the proxy.
func (p *Proxy) serve(c *proxyConn) {
	defer p.wg.Done()
	defer func() {
		c.shut(false)
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
	}()
	p.mu.Lock()
	p.held++
	p.mu.Unlock()
	connect := p.await(c, time.Now())
	p.mu.Lock()
	p.held--
	p.mu.Unlock()
	if !connect {
		return
	}
	upstream, err := p.dial(c)
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
	if p.opts.greet != nil {
		// The read ends when the client closes, or Close shuts c.
		msg, err := p.opts.greet(c.client)
		if err != nil || !p.await(c, time.Now()) {
			return
		}
		if _, err := upstream.Write(msg); err != nil {
			return
		}
	}
	var pumps sync.WaitGroup
	pumps.Add(2)
	go func() { defer pumps.Done(); p.pump(c, upstream, c.client, true) }()
	go func() { defer pumps.Done(); p.pump(c, c.client, upstream, false) }()
	pumps.Wait()
}

// dial connects to the target for c, trying again every 50 ms for
// opts.dialRetry while it fails and the mode lets c through.
func (p *Proxy) dial(c *proxyConn) (net.Conn, error) {
	deadline := time.Now().Add(p.opts.dialRetry)
	for {
		upstream, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err == nil || time.Now().After(deadline) {
			return upstream, err
		}
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-t.C:
		case <-c.done:
			t.Stop()
			return nil, err
		}
		if !p.await(c, time.Now()) {
			return nil, err
		}
	}
}

// pump copies from src to dst, through await, until either side fails;
// then it shuts the connection, which ends the other pump. The end of src
// (a close or an error) goes through await like bytes, so that a held
// connection is not closed. fromClient tells the direction, for the count
// of Conversations.
func (p *Proxy) pump(c *proxyConn, dst, src net.Conn, fromClient bool) {
	defer c.shut(false)
	buf := make([]byte, 32*1024)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if fromClient && c.answered.Load() && c.talked.CompareAndSwap(false, true) {
				p.mu.Lock()
				p.conversations++
				p.mu.Unlock()
			}
			if !p.await(c, time.Now()) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
			if !fromClient {
				c.answered.Store(true)
			}
		}
		if err != nil {
			p.await(c, time.Now())
			return
		}
	}
}

// await waits until the bytes (or the connection) that arrived at
// arrived may go on: at once in ProxyPass, at arrived + delay in
// ProxyDelay, and not while ProxyHold or ProxyBlackHole. It reports
// false when c is shut, or the mode is ProxyReset (then it shuts c).
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
		case ProxyHold, ProxyBlackHole:
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
