package testcluster

// ZooKeeper over TLS (Options.ZooKeeperSecurity ZooKeeperSecurityTLS): the
// ZooKeeper nodes listen on a TLS client port only (secureClientPort, no
// clientPort, Netty), require a client certificate signed by the
// cluster's CA (ssl.clientAuth=need) and give each session the identity
// x509:<subject DN> (X509AuthenticationProvider). The brokers, the harness
// and the tests connect with certificates of their own.

import (
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
)

// The ZooKeeper security modes of Options.ZooKeeperSecurity.
const (
	// ZooKeeperSecurityPlaintext (the default, also "") is ZooKeeper's
	// plain client port.
	ZooKeeperSecurityPlaintext = "plaintext"
	// ZooKeeperSecurityTLS is a TLS client port only (ZooKeeper's
	// secureClientPort: ZookeeperPeers are its addresses), which requires
	// a client certificate signed by the cluster's CA and gives the
	// session the certificate's subject as its x509 identity.
	ZooKeeperSecurityTLS = "tls"
)

// The x509 identities of the client certificates of a ZooKeeperSecurityTLS
// cluster: their subjects, as ZooKeeper's X509AuthenticationProvider names
// them (RFC 2253). An ACL entry zk.ACL{Scheme: "x509", ID: id} grants its
// permissions to the sessions that presented the certificate of id.
const (
	// ZooKeeperTLSIdentity is the identity of ZooKeeperTLSFiles.Cert, the
	// certificate of ZooKeeperTLSConfig and ZooKeeperDialer.
	ZooKeeperTLSIdentity = "CN=" + zooKeeperClientCN
	// ZooKeeperTLSIdentity2 is the identity of ZooKeeperTLSFiles.Cert2, a
	// second client of its own.
	ZooKeeperTLSIdentity2 = "CN=" + zooKeeperClient2CN
	// ZooKeeperBrokerIdentity is the identity of the brokers, and of the
	// cluster's own ZooKeeper sessions (the waits, the SCRAM credentials
	// of the secured modes). The brokers create their nodes without ACLs
	// (zookeeper.set.acl=false): anyone who connects may read and write
	// them.
	ZooKeeperBrokerIdentity = "CN=" + zooKeeperBrokerCN
)

const (
	zooKeeperClientCN  = "kafkaconsumer-group-a"
	zooKeeperClient2CN = "kafkaconsumer-group-b"
	zooKeeperBrokerCN  = "kafkaconsumer-broker"
)

// The oldest releases that ZooKeeperSecurityTLS runs: Kafka's brokers
// reach ZooKeeper over TLS from Kafka 2.5 on (KIP-515: zookeeper.ssl.*),
// and ZooKeeper reads PEM key and trust stores from 3.5.5 on.
const (
	minZooKeeperTLSKafka     = "2.5.0"
	minZooKeeperTLSZooKeeper = "3.5.5"
)

// minTLSHandshakeTimeout is the least time ZooKeeperTLSDialer gives a TLS
// handshake: a JVM's first handshakes are slow.
const minTLSHandshakeTimeout = 5 * time.Second

// validZooKeeperSecurity checks Options.ZooKeeperSecurity and returns it
// normalised.
func validZooKeeperSecurity(s string) (string, error) {
	switch strings.ToLower(s) {
	case "", ZooKeeperSecurityPlaintext:
		return ZooKeeperSecurityPlaintext, nil
	case ZooKeeperSecurityTLS:
		return ZooKeeperSecurityTLS, nil
	}
	return "", fmt.Errorf("testcluster: unknown ZooKeeperSecurity %q (want %q or %q)", s, ZooKeeperSecurityPlaintext, ZooKeeperSecurityTLS)
}

// checkZooKeeperTLS returns why opts, with ZooKeeperSecurityTLS, cannot
// run, or nil. opts.Mode and opts.ZooKeeperVersion are final (KRaft's
// default ZooKeeper release applied).
func checkZooKeeperTLS(opts Options) error {
	if opts.ZooKeeperSASL || opts.ZooKeeperSASLRequired {
		return fmt.Errorf("testcluster: ZooKeeperSecurity %q does not go with ZooKeeperSASL: the brokers reach ZooKeeper with a certificate, not a SASL login", ZooKeeperSecurityTLS)
	}
	if opts.Mode != ModeKRaft && versionNumber(opts.KafkaVersion) < versionNumber(minZooKeeperTLSKafka) {
		return fmt.Errorf("testcluster: ZooKeeperSecurity %q needs Kafka %s or later (the brokers' zookeeper.ssl.* settings, KIP-515), not %s",
			ZooKeeperSecurityTLS, strings.TrimSuffix(minZooKeeperTLSKafka, ".0"), opts.KafkaVersion)
	}
	if opts.ZooKeeperVersion != "" && versionNumber(opts.ZooKeeperVersion) < versionNumber(minZooKeeperTLSZooKeeper) {
		return fmt.Errorf("testcluster: ZooKeeperSecurity %q needs ZooKeeper %s or later (PEM key and trust stores), not %s",
			ZooKeeperSecurityTLS, minZooKeeperTLSZooKeeper, opts.ZooKeeperVersion)
	}
	return nil
}

// versionNumber returns 1000000*major+1000*minor+patch of a version
// "X.Y.Z" (0 if it does not parse).
func versionNumber(v string) int {
	parts := strings.Split(v, ".")
	if len(parts) != 3 {
		return 0
	}
	n := 0
	for _, p := range parts {
		i, err := strconv.Atoi(p)
		if err != nil || i < 0 || i > 999 {
			return 0
		}
		n = 1000*n + i
	}
	return n
}

// zooKeeperTLSProps adds to props the settings of ZooKeeper node n in
// ZooKeeperSecurityTLS: its port is the secure client port, and there is
// no plain one. Unknown keys of zoo.cfg become zookeeper.* system
// properties (zookeeper.serverCnxnFactory, zookeeper.ssl.keyStore.location,
// …), which is where ZooKeeper reads these.
func (c *Cluster) zooKeeperTLSProps(n *node, props map[string]string) {
	delete(props, "clientPort")
	delete(props, "clientPortAddress")
	for k, v := range map[string]string{
		"secureClientPort":        strconv.Itoa(n.port),
		"secureClientPortAddress": "127.0.0.1",
		// The NIO factory has no TLS.
		"serverCnxnFactory": "org.apache.zookeeper.server.NettyServerCnxnFactory",
		// The provider that checks a client's certificate after the
		// handshake and names its x509 identity; the TLS port closes
		// every connection without it.
		"authProvider.x509":       "org.apache.zookeeper.server.auth.X509AuthenticationProvider",
		"ssl.clientAuth":          "need",
		"ssl.keyStore.location":   c.tls.zkServer,
		"ssl.keyStore.type":       "PEM",
		"ssl.trustStore.location": c.tls.ca,
		"ssl.trustStore.type":     "PEM",
	} {
		props[k] = v
	}
}

// brokerZooKeeperTLSProps adds to props the settings of a ZooKeeper-mode
// broker's ZooKeeper client in ZooKeeperSecurityTLS (KIP-515): TLS over
// Netty, as ZooKeeperBrokerIdentity. The PEM key store has no password:
// its key is not encrypted.
func (c *Cluster) brokerZooKeeperTLSProps(props map[string]string) {
	for k, v := range map[string]string{
		"zookeeper.ssl.client.enable":       "true",
		"zookeeper.clientCnxnSocket":        "org.apache.zookeeper.ClientCnxnSocketNetty",
		"zookeeper.ssl.keystore.location":   c.tls.zkBroker,
		"zookeeper.ssl.keystore.type":       "PEM",
		"zookeeper.ssl.truststore.location": c.tls.ca,
		"zookeeper.ssl.truststore.type":     "PEM",
	} {
		props[k] = v
	}
}

// loadZooKeeperTLS reads the TLS configurations of the harness's ZooKeeper
// sessions (ZooKeeperBrokerIdentity) and of ZooKeeperTLSConfig from the
// cluster's certificate files.
func (c *Cluster) loadZooKeeperTLS() error {
	var err error
	if c.zkHarnessTLS, err = LoadZooKeeperTLSConfig(c.tls.ca, c.tls.zkBroker, c.tls.zkBroker); err != nil {
		return err
	}
	c.zkClientTLS, err = LoadZooKeeperTLSConfig(c.tls.ca, c.tls.zkClientCert, c.tls.zkClientKey)
	return err
}

// zkDialer returns the dialer of the harness's ZooKeeper connections: TLS
// as ZooKeeperBrokerIdentity in ZooKeeperSecurityTLS, plain TCP otherwise.
func (c *Cluster) zkDialer() zk.Dialer {
	if c.zkHarnessTLS == nil {
		return net.DialTimeout
	}
	return ZooKeeperTLSDialer(c.zkHarnessTLS)
}

// connectZooKeeper opens a ZooKeeper session of the harness's on every
// ZooKeeper node (zkDialer); the caller closes it.
func (c *Cluster) connectZooKeeper() (*zk.Conn, error) {
	conn, _, err := zk.Connect(strings.Split(c.ZookeeperPeers(), ","), 10*time.Second,
		zk.WithLogger(nopLogger{}), zk.WithDialer(c.zkDialer()))
	return conn, err
}

// ZooKeeperSecurity returns ZooKeeperSecurityPlaintext or
// ZooKeeperSecurityTLS.
func (c *Cluster) ZooKeeperSecurity() string { return c.zkSecurity }

// ZooKeeperTLSFiles are the PEM files of a ZooKeeperSecurityTLS cluster's
// ZooKeeper clients, in Dir/tls. The private keys are PKCS#8 and not
// encrypted. The files live as long as Dir.
type ZooKeeperTLSFiles struct {
	// CA is the certificate of the CA that signed ZooKeeper's certificate
	// (for 127.0.0.1, ::1 and localhost) and the clients'.
	CA string
	// Cert and Key are the client certificate of ZooKeeperTLSIdentity and
	// its key.
	Cert, Key string
	// Cert2 and Key2 are the client certificate of ZooKeeperTLSIdentity2
	// and its key.
	Cert2, Key2 string
	// ExpiredCert and ExpiredKey are a client certificate of
	// ZooKeeperTLSIdentity that expired an hour before the cluster
	// started, and its key.
	ExpiredCert, ExpiredKey string
}

// ZooKeeperTLSFiles returns the PEM files of the cluster's ZooKeeper
// clients; all empty when ZooKeeper is plaintext.
func (c *Cluster) ZooKeeperTLSFiles() ZooKeeperTLSFiles {
	if c.zkSecurity != ZooKeeperSecurityTLS {
		return ZooKeeperTLSFiles{}
	}
	return c.tls.zooKeeperClients()
}

// zooKeeperClients returns the files of ZooKeeper's clients.
func (f tlsFiles) zooKeeperClients() ZooKeeperTLSFiles {
	return ZooKeeperTLSFiles{CA: f.ca, Cert: f.zkClientCert, Key: f.zkClientKey, Cert2: f.zkClient2Cert, Key2: f.zkClient2Key,
		ExpiredCert: f.zkExpiredCert, ExpiredKey: f.zkExpiredKey}
}

// ZooKeeperTLSConfig returns the TLS configuration of a ZooKeeper client of
// the cluster: it trusts the cluster's CA and presents the certificate of
// ZooKeeperTLSIdentity. It returns nil when ZooKeeper is plaintext, and a
// new copy, which the caller may change, on every call.
func (c *Cluster) ZooKeeperTLSConfig() *tls.Config {
	if c.zkClientTLS == nil {
		return nil
	}
	return c.zkClientTLS.Clone()
}

// ZooKeeperDialer returns a go-zookeeper dialer (for zk.WithDialer) that
// reaches the cluster's ZooKeeper nodes: over TLS as ZooKeeperTLSIdentity
// (ZooKeeperTLSDialer of ZooKeeperTLSConfig) when ZooKeeper is
// ZooKeeperSecurityTLS, over plain TCP (net.DialTimeout) otherwise. It is
// never nil.
func (c *Cluster) ZooKeeperDialer() zk.Dialer {
	if c.zkClientTLS == nil {
		return net.DialTimeout
	}
	return ZooKeeperTLSDialer(c.zkClientTLS)
}

// LoadZooKeeperTLSConfig returns a TLS configuration (TLS 1.2 or later)
// that trusts the certificates of the PEM file caFile and, when certFile
// or keyFile is not empty, presents the client certificate of certFile
// with the key of keyFile (PEM; one file may hold both). It reads the
// files when called: for example those of ZooKeeperTLSFiles, or of
// ZOOKEEPER_TLS_CA, ZOOKEEPER_TLS_CERT and ZOOKEEPER_TLS_KEY that
// `make cluster-up ZOOKEEPER_SECURITY=tls` exports.
func LoadZooKeeperTLSConfig(caFile, certFile, keyFile string) (*tls.Config, error) {
	pool, err := loadCAPool(caFile)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if certFile != "" || keyFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("testcluster: client certificate %s with key %s: %w", certFile, keyFile, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// ZooKeeperTLSDialer returns a go-zookeeper dialer (for zk.WithDialer)
// that connects over TCP within the dial's timeout, then does the TLS
// handshake of cfg within that timeout or 5 s, whichever is longer (a
// JVM's first handshakes are slow). When cfg.ServerName is empty the
// server's certificate is checked against the host of the address
// dialled; a nil cfg trusts the system's roots and presents no
// certificate. cfg is not changed; the dialer is safe for concurrent use.
func ZooKeeperTLSDialer(cfg *tls.Config) zk.Dialer {
	if cfg == nil {
		cfg = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	return func(network, address string, timeout time.Duration) (net.Conn, error) {
		conn, err := net.DialTimeout(network, address, timeout)
		if err != nil {
			return nil, err
		}
		conf := cfg
		if conf.ServerName == "" {
			host, _, err := net.SplitHostPort(address)
			if err != nil {
				conn.Close()
				return nil, err
			}
			conf = cfg.Clone()
			conf.ServerName = host
		}
		tc := tls.Client(conn, conf)
		_ = conn.SetDeadline(time.Now().Add(max(timeout, minTLSHandshakeTimeout)))
		if err := tc.Handshake(); err != nil {
			conn.Close()
			return nil, fmt.Errorf("TLS handshake with %s: %w", address, err)
		}
		_ = conn.SetDeadline(time.Time{})
		return tc, nil
	}
}

// The files of WriteZooKeeperTLSFiles besides those of ZooKeeperTLSFiles:
// the key stores of ZooKeeper and of its brokers (each a PEM file holding
// a key and its certificate).
const (
	ZooKeeperServerKeyStoreFile = "zookeeper-server.pem"
	ZooKeeperBrokerKeyStoreFile = "zookeeper-broker.pem"
)

// WriteZooKeeperTLSFiles writes in dir (created if needed) a new set of
// the certificates that Start makes for ZooKeeperSecurityTLS, for a
// ZooKeeper run elsewhere (docker-compose.yml's zookeeper-tls profile): the
// CA, ZooKeeper's key store ZooKeeperServerKeyStoreFile (for 127.0.0.1,
// ::1, localhost and hosts, DNS names or IP addresses), the brokers' key
// store ZooKeeperBrokerKeyStoreFile (ZooKeeperBrokerIdentity), and the
// client certificates of ZooKeeperTLSIdentity and ZooKeeperTLSIdentity2
// with their keys, whose paths it returns. The files replace those of an
// earlier call and are readable by everyone (a container's user reads
// them): keys of a test setup, not secrets. The certificates are valid
// for a week.
func WriteZooKeeperTLSFiles(dir string, hosts ...string) (ZooKeeperTLSFiles, error) {
	files := tlsFilesIn(dir)
	if err := generateTLS(files, true, hosts, 0o644); err != nil {
		return ZooKeeperTLSFiles{}, fmt.Errorf("testcluster: TLS certificates in %s: %w", dir, err)
	}
	return files.zooKeeperClients(), nil
}
