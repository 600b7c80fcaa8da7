package main

// How the tool reaches ZooKeeper: over TLS (--zookeeper-tls-*), and with
// the credentials of ZooKeeper's digest scheme (--zookeeper-digest-user,
// the password in $ZOOKEEPER_DIGEST_PASSWORD), as the library's
// Config.ZookeeperTLS and Config.ZookeeperAuth do.

import (
	"crypto/tls"
	"errors"
	"io"
	"log"
	"net"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/kafkaconsumer/kafkaconsumer/internal/zktls"
)

// zookeeperAccess is how the tool connects to ZooKeeper and authenticates.
type zookeeperAccess struct {
	// tls is the TLS configuration, nil for plaintext.
	tls *tls.Config
	// digest is "user:password" for ZooKeeper's digest scheme, "" for
	// none.
	digest string
}

// zookeeperFlags are the values of the ZooKeeper access flags, as parsed.
type zookeeperFlags struct {
	tlsCA, tlsCert, tlsKey string
	digestUser             string
	digestPassword         string // from $ZOOKEEPER_DIGEST_PASSWORD
}

// access checks the flags and builds the zookeeperAccess they describe.
// Any --zookeeper-tls-* flag turns TLS on. Errors are usage errors.
func (f zookeeperFlags) access() (zookeeperAccess, error) {
	var a zookeeperAccess
	if (f.tlsCert == "") != (f.tlsKey == "") {
		return a, errors.New("give both --zookeeper-tls-cert and --zookeeper-tls-key, or neither")
	}
	if f.tlsCA != "" || f.tlsCert != "" {
		cfg, err := loadTLS("--zookeeper-tls", f.tlsCA, f.tlsCert, f.tlsKey)
		if err != nil {
			return a, err
		}
		a.tls = cfg
	}
	if f.digestUser != "" {
		if f.digestPassword == "" {
			return a, errors.New("--zookeeper-digest-user needs the password in $ZOOKEEPER_DIGEST_PASSWORD")
		}
		a.digest = f.digestUser + ":" + f.digestPassword
	}
	return a, nil
}

// connect opens a go-zookeeper connection to nodes with a.
func (a zookeeperAccess) connect(nodes []string, timeout time.Duration) (*zk.Conn, <-chan zk.Event, error) {
	logger := zk.WithLogger(log.New(io.Discard, "", 0))
	if a.tls == nil {
		return zk.Connect(nodes, timeout, logger, zk.WithLogInfo(false))
	}
	return zk.Connect(nodes, timeout, logger, zk.WithLogInfo(false), zk.WithHostProvider(&zktls.NamedHosts{}), zk.WithDialer(a.dialTLS))
}

// dialTLS dials address and completes a TLS handshake within timeout.
func (a zookeeperAccess) dialTLS(network, address string, timeout time.Duration) (net.Conn, error) {
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: timeout}, Config: zktls.ForServer(a.tls, address)}
	return d.Dial(network, address)
}

// authenticate presents a's credentials on conn's session.
func (a zookeeperAccess) authenticate(conn *zk.Conn) error {
	if a.digest == "" {
		return nil
	}
	return conn.AddAuth("digest", []byte(a.digest))
}
