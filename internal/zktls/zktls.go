// Package zktls holds what the library and its tools share to reach
// ZooKeeper over TLS with go-zookeeper: a host provider that keeps the
// servers' names, so that their certificates are verified against the
// names given, and the TLS configuration of one connection.
package zktls

import (
	"crypto/tls"
	"errors"
	"net"
	"sync"
)

// NamedHosts is a go-zookeeper HostProvider (zk.WithHostProvider) that
// hands out the servers by the names of the connection string, where
// go-zookeeper's own provider resolves them to addresses first. It tries
// them in turn, and reports a retry from the start once every server was
// tried since the last connection, as go-zookeeper's does. The zero value
// is ready for Init.
type NamedHosts struct {
	mu      sync.Mutex
	servers []string
	curr    int // the index of the server last handed out
	last    int // the index of the server last connected to; -1: none yet
}

// Init keeps servers; it fails when there are none.
func (h *NamedHosts) Init(servers []string) error {
	if len(servers) == 0 {
		return errors.New("zktls: no ZooKeeper servers")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.servers = append([]string(nil), servers...)
	h.curr, h.last = -1, -1
	return nil
}

// Len returns the number of servers.
func (h *NamedHosts) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.servers)
}

// Next returns the next server, and whether every server was tried since
// the last connection.
func (h *NamedHosts) Next() (server string, retryStart bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.curr = (h.curr + 1) % len(h.servers)
	retryStart = h.curr == h.last
	if h.last == -1 {
		h.last = 0
	}
	return h.servers[h.curr], retryStart
}

// Connected records that the server last handed out connected.
func (h *NamedHosts) Connected() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.last = h.curr
}

// ForServer returns a copy of config for a connection to address
// (host:port), whose ServerName is the host unless config sets one.
func ForServer(config *tls.Config, address string) *tls.Config {
	c := config.Clone()
	if c.ServerName == "" {
		if host, _, err := net.SplitHostPort(address); err == nil {
			c.ServerName = host
		}
	}
	return c
}
