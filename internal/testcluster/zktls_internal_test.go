package testcluster

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestValidZooKeeperSecurity(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want, err string }{
		{"", ZooKeeperSecurityPlaintext, ""},
		{"plaintext", ZooKeeperSecurityPlaintext, ""},
		{"TLS", ZooKeeperSecurityTLS, ""},
		{"tls", ZooKeeperSecurityTLS, ""},
		{"ssl", "", `unknown ZooKeeperSecurity "ssl" (want "plaintext" or "tls")`},
		{"sasl_ssl", "", `unknown ZooKeeperSecurity "sasl_ssl"`},
	} {
		got, err := validZooKeeperSecurity(tc.in)
		if tc.err == "" && (err != nil || got != tc.want) {
			t.Errorf("validZooKeeperSecurity(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
		if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("validZooKeeperSecurity(%q) = %q, %v; want an error with %q", tc.in, got, err, tc.err)
		}
	}
}

// TestZooKeeperTLSOptions: Start refuses ZooKeeperSecurityTLS where it
// cannot run, before it fetches jars or starts anything.
func TestZooKeeperTLSOptions(t *testing.T) {
	t.Parallel()
	zkTLS := ZooKeeperSecurityTLS
	for _, tc := range []struct {
		name string
		opts Options
		err  string
	}{
		{"unknown", Options{ZooKeeperSecurity: "ssl"}, `unknown ZooKeeperSecurity "ssl"`},
		{"old Kafka", Options{ZooKeeperSecurity: zkTLS, KafkaVersion: "2.4.1"}, `needs Kafka 2.5 or later (the brokers' zookeeper.ssl.* settings, KIP-515), not 2.4.1`},
		{"Kafka 1.1", Options{ZooKeeperSecurity: zkTLS, KafkaVersion: "1.1.1"}, "needs Kafka 2.5 or later"},
		{"old ZooKeeper", Options{ZooKeeperSecurity: zkTLS, ZooKeeperVersion: "3.5.4"}, "needs ZooKeeper 3.5.5 or later (PEM key and trust stores), not 3.5.4"},
		{"ZooKeeper 3.4", Options{ZooKeeperSecurity: zkTLS, ZooKeeperVersion: "3.4.14"}, "needs ZooKeeper 3.5.5 or later"},
		{"SASL", Options{ZooKeeperSecurity: zkTLS, ZooKeeperSASL: true}, "does not go with ZooKeeperSASL"},
		{"SASL required", Options{ZooKeeperSecurity: zkTLS, ZooKeeperSASLRequired: true}, "does not go with ZooKeeperSASL"},
	} {
		c, err := Start(tc.opts)
		if err == nil {
			c.Close()
			t.Errorf("%s: Start(%+v) started a cluster", tc.name, tc.opts)
			continue
		}
		if !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: Start = %v; want an error with %q", tc.name, err, tc.err)
		}
	}
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"Kafka 2.5", Options{KafkaVersion: "2.5.1"}},
		{"ZooKeeper 3.5.5", Options{ZooKeeperVersion: "3.5.5"}},
		{"KRaft", Options{Mode: ModeKRaft, KafkaVersion: "4.1.1"}},
		{"secured", Options{Security: SecuritySASLSSL}},
	} {
		tc.opts.ZooKeeperSecurity = zkTLS
		if tc.opts.KafkaVersion == "" {
			tc.opts.KafkaVersion = DefaultKafkaVersion
		}
		if tc.opts.Mode == ModeKRaft {
			tc.opts.ZooKeeperVersion = ZooKeeperVersionFor(tc.opts.KafkaVersion, "")
		}
		if err := checkZooKeeperTLS(tc.opts); err != nil {
			t.Errorf("%s: checkZooKeeperTLS(%+v) = %v", tc.name, tc.opts, err)
		}
	}
}

func TestVersionNumber(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		v    string
		want int
	}{
		{"3.5.5", 3005005}, {"3.5.10", 3005010}, {"2.5.0", 2005000}, {"3.9", 0}, {"x.1.2", 0}, {"1.2.3.4", 0},
	} {
		if got := versionNumber(tc.v); got != tc.want {
			t.Errorf("versionNumber(%q) = %d, want %d", tc.v, got, tc.want)
		}
	}
	if versionNumber("3.5.10") < versionNumber(minZooKeeperTLSZooKeeper) || versionNumber("3.5.4") >= versionNumber(minZooKeeperTLSZooKeeper) {
		t.Error("3.5.10 and 3.5.4 compare wrongly with 3.5.5")
	}
}

// readCert returns the one certificate of a PEM file.
func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var certs []*x509.Certificate
	for block, rest := pem.Decode(b); block != nil; block, rest = pem.Decode(rest) {
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		certs = append(certs, c)
	}
	if len(certs) != 1 {
		t.Fatalf("%s holds %d certificates, want 1", path, len(certs))
	}
	return certs[0]
}

// TestZooKeeperTLSCertificates checks the files of WriteZooKeeperTLSFiles:
// ZooKeeper's key store is a key and a certificate for the given hosts, the
// client certificates have the subjects of the identities, the CA signed
// all of them, and everyone may read them.
func TestZooKeeperTLSCertificates(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "certs")
	files, err := WriteZooKeeperTLSFiles(dir, "zookeeper-tls")
	if err != nil {
		t.Fatal(err)
	}
	pool, err := loadCAPool(files.CA)
	if err != nil {
		t.Fatal(err)
	}
	server := readCert(t, filepath.Join(dir, ZooKeeperServerKeyStoreFile))
	for _, host := range []string{"localhost", "127.0.0.1", "zookeeper-tls"} {
		if _, err := server.Verify(x509.VerifyOptions{DNSName: host, Roots: pool}); err != nil {
			t.Errorf("ZooKeeper's certificate for %s: %v", host, err)
		}
	}
	for _, store := range []string{ZooKeeperServerKeyStoreFile, ZooKeeperBrokerKeyStoreFile} {
		path := filepath.Join(dir, store)
		if _, err := tls.LoadX509KeyPair(path, path); err != nil {
			t.Errorf("key store %s: %v", store, err)
		}
	}
	for _, c := range []struct{ cert, identity string }{
		{files.Cert, ZooKeeperTLSIdentity},
		{files.Cert2, ZooKeeperTLSIdentity2},
		{filepath.Join(dir, ZooKeeperBrokerKeyStoreFile), ZooKeeperBrokerIdentity},
	} {
		cert := readCert(t, c.cert)
		if got := cert.Subject.String(); got != c.identity {
			t.Errorf("%s: subject %s, want %s", c.cert, got, c.identity)
		}
		opts := x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
		if _, err := cert.Verify(opts); err != nil {
			t.Errorf("%s: %v", c.cert, err)
		}
	}
	for _, f := range []string{files.CA, files.Cert, files.Key, files.Cert2, files.Key2} {
		if st, err := os.Stat(f); err != nil || st.Mode().Perm() != 0o644 {
			t.Errorf("%s: %v, %v; want mode 0644", f, st.Mode(), err)
		}
	}
}

// TestZooKeeperTLSDialer runs the dialer against a Go TLS server that
// requires a client certificate of the cluster's CA, as ZooKeeper does.
func TestZooKeeperTLSDialer(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	files, err := WriteZooKeeperTLSFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := loadCAPool(files.CA)
	if err != nil {
		t.Fatal(err)
	}
	serverStore := filepath.Join(dir, ZooKeeperServerKeyStoreFile)
	serverCert, err := tls.LoadX509KeyPair(serverStore, serverStore)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{serverCert},
		ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MaxVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	subjects := make(chan string, 4)
	served := make(chan struct{})
	go func() {
		defer close(served)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			tc := conn.(*tls.Conn)
			_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
			if err := tc.Handshake(); err == nil {
				subjects <- tc.ConnectionState().PeerCertificates[0].Subject.String()
			}
			tc.Close()
		}
	}()
	defer func() {
		ln.Close()
		<-served
	}()

	cfg, err := LoadZooKeeperTLSConfig(files.CA, files.Cert, files.Key)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := ZooKeeperTLSDialer(cfg)("tcp", ln.Addr().String(), time.Second)
	if err != nil {
		t.Fatalf("dial with the client certificate: %v", err)
	}
	conn.Close()
	if got := <-subjects; got != ZooKeeperTLSIdentity {
		t.Errorf("the server saw the client %s, want %s", got, ZooKeeperTLSIdentity)
	}
	if cfg.ServerName != "" {
		t.Errorf("the dialer changed its configuration's ServerName to %q", cfg.ServerName)
	}

	noCert, err := LoadZooKeeperTLSConfig(files.CA, "", "")
	if err != nil {
		t.Fatal(err)
	}
	conn, err = ZooKeeperTLSDialer(noCert)("tcp", ln.Addr().String(), time.Second)
	if err == nil {
		// TLS 1.3 would report the refusal at the first read; the
		// server here, like ZooKeeper by default, speaks TLS 1.2.
		conn.Close()
		t.Fatal("a dial without a client certificate succeeded")
	}
	if !strings.Contains(err.Error(), "TLS handshake with "+ln.Addr().String()) {
		t.Errorf("dial without a client certificate: %v; want an error naming the handshake and the address", err)
	}

	// A server whose certificate is not for the name the client expects
	// is refused.
	other := cfg.Clone()
	other.ServerName = "zookeeper.example"
	if conn, err := ZooKeeperTLSDialer(other)("tcp", ln.Addr().String(), time.Second); err == nil {
		conn.Close()
		t.Error("a server certificate for other hosts was accepted")
	}
}

// readProperties reads a properties file of writeProperties (values
// without escapes).
func readProperties(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	props := make(map[string]string)
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok && !strings.HasPrefix(k, "#") {
			props[k] = v
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return props
}

// checkProperties checks that the properties file path sets each key of
// want to its value, and returns its properties.
func checkProperties(t *testing.T, path string, want map[string]string) map[string]string {
	t.Helper()
	props := readProperties(t, path)
	for k, v := range want {
		if props[k] != v {
			t.Errorf("%s: %s=%q, want %q", filepath.Base(path), k, props[k], v)
		}
	}
	return props
}

// zooKeeperTLSCluster returns a Cluster of one ZooKeeper node and one
// broker in ZooKeeperSecurityTLS, its configuration and certificates
// written in dir and nothing started, saved in dir/state.json.
func zooKeeperTLSCluster(t *testing.T, dir string) *Cluster {
	t.Helper()
	c := &Cluster{dir: dir, detached: true, zkJars: dir, jars: dir, kafkaVersion: DefaultKafkaVersion,
		security: SecurityPlaintext, zkSecurity: ZooKeeperSecurityTLS, mode: ModeZooKeeper,
		zkTick: defaultZooKeeperTickTime, zkSyncLimit: defaultZooKeeperSyncLimit, tls: newTLSFiles(dir)}
	c.zks = []*node{{kind: zookeeperNode, id: 1, port: 12181, dir: filepath.Join(dir, "zookeeper-0")}}
	c.brokers = []*node{{kind: brokerNode, id: 0, port: 19092, dir: filepath.Join(dir, "kafka-0")}}
	if err := generateTLS(c.tls, true, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := c.loadZooKeeperTLS(); err != nil {
		t.Fatal(err)
	}
	if err := c.writeZooKeeperConfig(c.zks[0]); err != nil {
		t.Fatal(err)
	}
	if err := c.writeBrokerConfig(c.brokers[0], nil); err != nil {
		t.Fatal(err)
	}
	if err := c.saveState(); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestZooKeeperTLSConfigs checks the settings of ZooKeeper and the broker
// in ZooKeeperSecurityTLS: a secure client port only, with the x509
// provider and PEM stores, and a broker that reaches it over TLS.
func TestZooKeeperTLSConfigs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	c := zooKeeperTLSCluster(t, dir)
	zoo := checkProperties(t, c.zks[0].configFile(), map[string]string{
		"secureClientPort":        "12181",
		"secureClientPortAddress": "127.0.0.1",
		"serverCnxnFactory":       "org.apache.zookeeper.server.NettyServerCnxnFactory",
		"authProvider.x509":       "org.apache.zookeeper.server.auth.X509AuthenticationProvider",
		"ssl.clientAuth":          "need",
		"ssl.keyStore.location":   filepath.Join(dir, "tls", ZooKeeperServerKeyStoreFile),
		"ssl.keyStore.type":       "PEM",
		"ssl.trustStore.location": filepath.Join(dir, "tls", "ca.pem"),
		"ssl.trustStore.type":     "PEM",
	})
	for _, k := range []string{"clientPort", "clientPortAddress"} {
		if v, ok := zoo[k]; ok {
			t.Errorf("zookeeper.properties has %s=%s; want no plain client port", k, v)
		}
	}
	broker := checkProperties(t, c.brokers[0].configFile(), map[string]string{
		"zookeeper.connect":                 "127.0.0.1:12181",
		"zookeeper.ssl.client.enable":       "true",
		"zookeeper.clientCnxnSocket":        "org.apache.zookeeper.ClientCnxnSocketNetty",
		"zookeeper.ssl.keystore.location":   filepath.Join(dir, "tls", ZooKeeperBrokerKeyStoreFile),
		"zookeeper.ssl.keystore.type":       "PEM",
		"zookeeper.ssl.truststore.location": filepath.Join(dir, "tls", "ca.pem"),
		"zookeeper.ssl.truststore.type":     "PEM",
	})
	if v, ok := broker["zookeeper.set.acl"]; ok {
		t.Errorf("server.properties: zookeeper.set.acl=%s; want the default, false", v)
	}
	if len(c.zkHarnessTLS.Certificates) != 1 || c.zkHarnessTLS.Certificates[0].Leaf == nil ||
		c.zkHarnessTLS.Certificates[0].Leaf.Subject.String() != ZooKeeperBrokerIdentity {
		t.Errorf("the harness's ZooKeeper client certificate is not %s's", ZooKeeperBrokerIdentity)
	}
}

// TestZooKeeperTLSState: Load gives back a ZooKeeperSecurityTLS cluster's
// mode and files, and reads its certificates; a plaintext cluster's state
// names no ZooKeeper security.
func TestZooKeeperTLSState(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	c := zooKeeperTLSCluster(t, dir)
	loaded, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer loaded.Close()
	if got := loaded.ZooKeeperSecurity(); got != ZooKeeperSecurityTLS {
		t.Errorf("Load: ZooKeeperSecurity() = %q", got)
	}
	if got, want := loaded.ZooKeeperTLSFiles(), c.ZooKeeperTLSFiles(); got != want || got.Cert == "" {
		t.Errorf("Load: ZooKeeperTLSFiles() = %+v, want %+v", got, want)
	}
	if cfg := loaded.ZooKeeperTLSConfig(); cfg == nil || len(cfg.Certificates) != 1 {
		t.Errorf("Load: ZooKeeperTLSConfig() = %v, want one client certificate", cfg)
	}
	if got := loaded.Security(); got != SecurityPlaintext || loaded.CAFile() != "" {
		t.Errorf("Load: Security() = %q, CAFile() = %q; want the listeners plaintext", got, loaded.CAFile())
	}

	// Without its certificates, the state cannot be loaded.
	if err := os.Remove(c.tls.zkClientKey); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load without a client key = %v; want an error naming the missing file", err)
	}

	plain := &Cluster{dir: t.TempDir(), detached: true, security: SecurityPlaintext, zkSecurity: ZooKeeperSecurityPlaintext}
	plain.zks = []*node{{kind: zookeeperNode, id: 1, port: 12181}}
	plain.brokers = []*node{{kind: brokerNode, id: 0, port: 19092}}
	if err := plain.saveState(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(plain.statePath())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "tls_dir") {
		t.Errorf("a plaintext cluster's state names a TLS directory:\n%s", b)
	}
	loadedPlain, err := Load(plain.dir)
	if err != nil {
		t.Fatal(err)
	}
	defer loadedPlain.Close()
	if loadedPlain.ZooKeeperSecurity() != ZooKeeperSecurityPlaintext || loadedPlain.ZooKeeperTLSConfig() != nil ||
		loadedPlain.ZooKeeperTLSFiles() != (ZooKeeperTLSFiles{}) {
		t.Errorf("a plaintext cluster loaded as ZooKeeper %q, TLS files %+v", loadedPlain.ZooKeeperSecurity(), loadedPlain.ZooKeeperTLSFiles())
	}
}
