package testcluster_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/go-zookeeper/zk"

	"github.com/kafkaconsumer/kafkaconsumer/internal/testcluster"
)

// zkRequestTimeout bounds every ZooKeeper request of the TLS tests.
const zkRequestTimeout = 30 * time.Second

// bounded runs request and returns its error, failing the test when it has
// not returned within zkRequestTimeout (its connection's Close ends it).
func bounded(t *testing.T, what string, request func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- request() }()
	timer := time.NewTimer(zkRequestTimeout)
	defer timer.Stop()
	select {
	case err := <-done:
		return err
	case <-timer.C:
		t.Fatalf("%s: no answer within %s", what, zkRequestTimeout)
		return nil
	}
}

// connectZK opens a ZooKeeper session on c's nodes through dial, closed
// when the test ends, and records its session events.
func connectZK(t *testing.T, c *testcluster.Cluster, dial zk.Dialer) (*zk.Conn, *eventLog) {
	t.Helper()
	events := &eventLog{}
	conn, _, err := zk.Connect(strings.Split(c.ZookeeperPeers(), ","), 10*time.Second,
		zk.WithDialer(dial), zk.WithLogger(nopLogger{}), zk.WithEventCallback(events.add))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	return conn, events
}

// dialLog is a dialer that records the errors of the dialer it wraps.
type dialLog struct {
	dial zk.Dialer
	mu   sync.Mutex // guards errs
	errs []error
}

func (d *dialLog) Dial(network, address string, timeout time.Duration) (net.Conn, error) {
	conn, err := d.dial(network, address, timeout)
	if err != nil {
		d.mu.Lock()
		d.errs = append(d.errs, err)
		d.mu.Unlock()
	}
	return conn, err
}

func (d *dialLog) first() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.errs) == 0 {
		return nil
	}
	return d.errs[0]
}

// checkRefused checks that a session through dial gets nowhere: its first
// request fails (go-zookeeper fails the requests it queued once a pass over
// the servers has failed), and it never had a session.
func checkRefused(t *testing.T, c *testcluster.Cluster, what string, dial zk.Dialer) {
	t.Helper()
	conn, events := connectZK(t, c, dial)
	err := bounded(t, what+": Exists(/)", func() error {
		_, _, err := conn.Exists("/")
		return err
	})
	if err == nil {
		t.Errorf("%s read ZooKeeper", what)
	} else {
		t.Logf("%s: %v", what, err)
	}
	if got := events.firstAfter(time.Time{}, zk.StateHasSession); got != "never" {
		t.Errorf("%s had a ZooKeeper session (after %s)", what, got)
	}
}

// TestZooKeeperTLSCluster starts a cluster whose ZooKeeper serves TLS
// clients with a certificate only, and checks that a client with the
// cluster's client certificate creates and reads nodes, that a plaintext
// client and a TLS client without a certificate are refused, that the
// broker registered (so it reached ZooKeeper over TLS), that ZooKeeper
// names the two client certificates by their subjects (x509 ACLs), and
// that the harness's own ZooKeeper requests (srvr, the wait for a
// stopped broker's registration to go) and Load work over TLS.
func TestZooKeeperTLSCluster(t *testing.T) {
	skipShort(t)
	began := time.Now()
	dir := t.TempDir()
	c, err := testcluster.Start(testcluster.Options{QuickBrokers: true, Logf: t.Logf, ZooKeeperSecurity: testcluster.ZooKeeperSecurityTLS,
		Dir: dir, Detached: true})
	if err != nil {
		t.Fatal(err)
	}
	defer closeCluster(t, c)
	t.Logf("cluster with a TLS ZooKeeper started in %s", time.Since(began).Round(100*time.Millisecond))

	if got := c.ZooKeeperSecurity(); got != testcluster.ZooKeeperSecurityTLS {
		t.Errorf("ZooKeeperSecurity() = %q", got)
	}
	if got := c.Security(); got != testcluster.SecurityPlaintext {
		t.Errorf("Security() = %q, want the listeners plaintext", got)
	}
	files := c.ZooKeeperTLSFiles()
	for _, f := range []string{files.CA, files.Cert, files.Key, files.Cert2, files.Key2} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("ZooKeeperTLSFiles: %v", err)
		}
	}
	if cfg := c.ZooKeeperTLSConfig(); cfg == nil || len(cfg.Certificates) != 1 {
		t.Fatalf("ZooKeeperTLSConfig() = %v, want a configuration with one client certificate", cfg)
	}
	if mode, err := c.ZooKeeperMode(0); err != nil || mode != "standalone" {
		t.Errorf("ZooKeeperMode(0) = %q, %v; want standalone (srvr over TLS)", mode, err)
	}
	if leader, err := c.ZooKeeperLeader(); err != nil || leader != 0 {
		t.Errorf("ZooKeeperLeader() = %d, %v", leader, err)
	}

	a, _ := connectZK(t, c, c.ZooKeeperDialer())
	if err := bounded(t, "create /zktls", func() error {
		_, err := a.Create("/zktls", []byte("over TLS"), 0, zk.WorldACL(zk.PermAll))
		return err
	}); err != nil {
		t.Fatalf("creating /zktls with the client certificate: %v", err)
	}
	var data []byte
	if err := bounded(t, "get /zktls", func() (err error) {
		data, _, err = a.Get("/zktls")
		return err
	}); err != nil || string(data) != "over TLS" {
		t.Fatalf("reading /zktls: %q, %v", data, err)
	}
	// The broker registered in ZooKeeper, over TLS: it has no other way.
	if err := bounded(t, "get /brokers/ids/0", func() (err error) {
		data, _, err = a.Get("/brokers/ids/0")
		return err
	}); err != nil {
		t.Fatalf("the broker's registration: %v", err)
	}
	if want := c.KafkaPeers()[0]; !strings.Contains(string(data), want) {
		t.Errorf("/brokers/ids/0 = %s; want the broker's address %s", data, want)
	}

	// The identities: a node only ZooKeeperTLSIdentity may touch.
	onlyA := zk.ACL{Perms: zk.PermAll, Scheme: "x509", ID: testcluster.ZooKeeperTLSIdentity}
	if err := bounded(t, "create /zktls/a", func() error {
		_, err := a.Create("/zktls/a", []byte("a"), 0, []zk.ACL{onlyA})
		return err
	}); err != nil {
		t.Fatalf("creating /zktls/a with ACL %v: %v", onlyA, err)
	}
	if err := bounded(t, "set /zktls/a as a", func() error {
		_, err := a.Set("/zktls/a", []byte("a2"), -1)
		return err
	}); err != nil {
		t.Errorf("%s writing its own node: %v", testcluster.ZooKeeperTLSIdentity, err)
	}
	cfg2, err := testcluster.LoadZooKeeperTLSConfig(files.CA, files.Cert2, files.Key2)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := connectZK(t, c, testcluster.ZooKeeperTLSDialer(cfg2))
	if err := bounded(t, "create /zktls/b", func() error {
		_, err := b.Create("/zktls/b", nil, 0, zk.WorldACL(zk.PermAll))
		return err
	}); err != nil {
		t.Fatalf("%s creating an open node: %v", testcluster.ZooKeeperTLSIdentity2, err)
	}
	for _, op := range []struct {
		name    string
		request func() error
	}{
		{"set /zktls/a", func() error { _, err := b.Set("/zktls/a", []byte("b"), -1); return err }},
		{"get /zktls/a", func() error { _, _, err := b.Get("/zktls/a"); return err }},
		{"create /zktls/a/b", func() error {
			_, err := b.Create("/zktls/a/b", nil, 0, zk.WorldACL(zk.PermAll))
			return err
		}},
	} {
		if err := bounded(t, op.name+" as b", op.request); !errors.Is(err, zk.ErrNoAuth) {
			t.Errorf("%s as %s = %v, want %v", op.name, testcluster.ZooKeeperTLSIdentity2, err, zk.ErrNoAuth)
		}
	}

	checkRefused(t, c, "a plaintext client", net.DialTimeout)
	cfgNoCert, err := testcluster.LoadZooKeeperTLSConfig(files.CA, "", "")
	if err != nil {
		t.Fatal(err)
	}
	noCert := &dialLog{dial: testcluster.ZooKeeperTLSDialer(cfgNoCert)}
	checkRefused(t, c, "a TLS client without a certificate", noCert.Dial)
	if err := noCert.first(); err == nil || !strings.Contains(err.Error(), "TLS handshake") {
		t.Errorf("the certificate-less client's dial failed with %v; want a failed TLS handshake", err)
	}
	// A certificate the cluster's CA did not sign is refused too.
	stranger := selfSigned(t)
	foreign := &dialLog{dial: testcluster.ZooKeeperTLSDialer(&tls.Config{
		RootCAs:    c.ZooKeeperTLSConfig().RootCAs,
		MinVersion: tls.VersionTLS12,
		// Sent whatever CAs the server names (Certificates would not be).
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &stranger, nil },
	})}
	checkRefused(t, c, "a TLS client with a self-signed certificate", foreign.Dial)

	// The broker's ZooKeeper session survives a restart of the broker;
	// StartBroker waits, over TLS, until the old registration is gone.
	if err := c.StopBroker(0); err != nil {
		t.Fatal(err)
	}
	if err := c.StartBroker(0); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateTopic("zktls", 1, 1); err != nil {
		t.Fatal(err)
	}
	produce(t, c, "zktls", "one")

	loaded, err := testcluster.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if loaded.ZooKeeperSecurity() != testcluster.ZooKeeperSecurityTLS || loaded.ZooKeeperTLSFiles() != files {
		t.Errorf("Load: ZooKeeperSecurity() = %q, ZooKeeperTLSFiles() = %+v; want %q, %+v",
			loaded.ZooKeeperSecurity(), loaded.ZooKeeperTLSFiles(), testcluster.ZooKeeperSecurityTLS, files)
	}
	if err := loaded.Healthy(30 * time.Second); err != nil {
		t.Errorf("Load: %v", err)
	}
}

// TestZooKeeperTLSSecuredCluster starts a SASL_SSL cluster whose ZooKeeper
// serves TLS clients only: the harness writes the SCRAM credential over
// TLS, and the listeners and ZooKeeper share one CA.
func TestZooKeeperTLSSecuredCluster(t *testing.T) {
	skipShort(t)
	began := time.Now()
	c, err := testcluster.Start(testcluster.Options{QuickBrokers: true, Logf: t.Logf, Security: testcluster.SecuritySASLSSL,
		ZooKeeperSecurity: testcluster.ZooKeeperSecurityTLS})
	if err != nil {
		t.Fatal(err)
	}
	defer closeCluster(t, c)
	t.Logf("SASL_SSL cluster with a TLS ZooKeeper started in %s", time.Since(began).Round(100*time.Millisecond))
	if got, want := c.ZooKeeperTLSFiles().CA, c.CAFile(); got != want {
		t.Errorf("ZooKeeperTLSFiles().CA = %s, want the CAFile %s", got, want)
	}
	cfg := sarama.NewConfig()
	if err := c.SecureConfig(cfg); err != nil {
		t.Fatal(err)
	}
	client, err := sarama.NewClient(c.KafkaPeers(), cfg)
	if err != nil {
		t.Fatalf("client over SASL_SSL (its SCRAM credential written to ZooKeeper over TLS): %v", err)
	}
	client.Close()
}

// selfSigned returns a client certificate (CN=stranger) that signs itself.
func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	template := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "stranger"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
