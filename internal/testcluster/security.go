package testcluster

// Secured clusters (Options.Security): a CA and a server certificate made
// at start, SASL/SCRAM-SHA-512 credentials written to ZooKeeper before the
// brokers start, and the brokers' listener settings.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha512"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/IBM/sarama"
	"github.com/go-zookeeper/zk"

	"github.com/kafkaconsumer/kafkaconsumer/internal/scramclient"
)

// Security modes of Options.Security.
const (
	// SecurityPlaintext (the default, also "") is one PLAINTEXT listener.
	SecurityPlaintext = "plaintext"
	// SecuritySASLSSL is one SASL_SSL listener with SCRAM-SHA-512, which
	// the brokers use between them too: nothing speaks plaintext.
	SecuritySASLSSL = "sasl_ssl"
	// SecurityMixed is two listeners: PLAINTEXT (between brokers, and
	// KafkaPeers) and EXTERNAL, a SASL_SSL one with SCRAM-SHA-512
	// (SecureKafkaPeers). In ModeKRaft, EXTERNAL takes every mechanism of
	// KRaftSASLMechanisms (SASLConfig sets a client up for each).
	SecurityMixed = "mixed"
)

// KRaftSASLMechanisms are the SASL mechanisms of the EXTERNAL listener of
// a SecurityMixed cluster in ModeKRaft: SCRAM-SHA-512 and SCRAM-SHA-256
// (the credentials of SASLUser), PLAIN (SASLUser, SASLPassword) and
// OAUTHBEARER with Kafka's unsecured JWS tokens (any token with subject
// and expiry; UnsecuredToken makes one).
var KRaftSASLMechanisms = []string{sarama.SASLTypeSCRAMSHA512, sarama.SASLTypeSCRAMSHA256, sarama.SASLTypePlaintext, sarama.SASLTypeOAuth}

// SASLMechanism is the SASL mechanism of a secured cluster.
const SASLMechanism = sarama.SASLTypeSCRAMSHA512

// SASLUser is the SCRAM user of a secured cluster, which the brokers use
// between them too; Cluster.SASLPassword is its password.
const SASLUser = "admin"

// externalListener is the name of the SASL_SSL listener in mixed mode.
const externalListener = "EXTERNAL"

// scramIterations is the SCRAM iteration count of the credential (Kafka's
// minimum, 4096).
const scramIterations = 4096

// validSecurity checks Options.Security and returns it normalised.
func validSecurity(s string) (string, error) {
	switch strings.ToLower(s) {
	case "", SecurityPlaintext:
		return SecurityPlaintext, nil
	case SecuritySASLSSL:
		return SecuritySASLSSL, nil
	case SecurityMixed:
		return SecurityMixed, nil
	}
	return "", fmt.Errorf("testcluster: unknown Security %q (want %q, %q or %q)", s, SecurityPlaintext, SecuritySASLSSL, SecurityMixed)
}

// tlsFiles are the PEM files of a cluster's certificates, in Dir/tls: the
// secured modes' (ca, cert, key) and ZooKeeperSecurityTLS's (all of them).
// The private keys are PKCS#8, not encrypted.
type tlsFiles struct {
	ca   string // the CA certificate
	cert string // the server certificate, for 127.0.0.1, ::1 and localhost: the brokers' and ZooKeeper's
	key  string // its private key

	// zkServer is the server's key and certificate in one file: the
	// ZooKeeper nodes' PEM key store.
	zkServer string
	// zkBroker is the key and certificate of ZooKeeperBrokerIdentity in
	// one file: the brokers' PEM key store for ZooKeeper, and the
	// harness's ZooKeeper client certificate.
	zkBroker string
	// The ZooKeeper client certificates of ZooKeeperTLSIdentity and
	// ZooKeeperTLSIdentity2, and their keys.
	zkClientCert, zkClientKey   string
	zkClient2Cert, zkClient2Key string
	// A certificate of ZooKeeperTLSIdentity that expired an hour ago, and
	// its key.
	zkExpiredCert, zkExpiredKey string
}

// newTLSFiles returns the files of a cluster whose Dir is dir, in dir/tls.
func newTLSFiles(dir string) tlsFiles { return tlsFilesIn(filepath.Join(dir, "tls")) }

// tlsFilesIn returns the files of tlsFiles in dir.
func tlsFilesIn(dir string) tlsFiles {
	f := func(name string) string { return filepath.Join(dir, name) }
	return tlsFiles{ca: f("ca.pem"), cert: f("server-cert.pem"), key: f("server-key.pem"),
		zkServer: f(ZooKeeperServerKeyStoreFile), zkBroker: f(ZooKeeperBrokerKeyStoreFile),
		zkClientCert: f("zookeeper-client-cert.pem"), zkClientKey: f("zookeeper-client-key.pem"),
		zkClient2Cert: f("zookeeper-client2-cert.pem"), zkClient2Key: f("zookeeper-client2-key.pem"),
		zkExpiredCert: f("zookeeper-client-expired-cert.pem"), zkExpiredKey: f("zookeeper-client-expired-key.pem")}
}

// certValidity is how long the certificates of generateTLS are valid.
const certValidity = 7 * 24 * time.Hour

// certAuthority signs the certificates of generateTLS.
type certAuthority struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// pemCert is a certificate and its private key, PEM-encoded.
type pemCert struct{ cert, key []byte }

// serverHosts are the hosts of every server certificate of generateTLS.
var serverHosts = []string{"localhost", "127.0.0.1", "::1"}

// issue makes a key (ECDSA P-256) and a certificate of it that the CA
// signs, for subject CN=cn: a server certificate (for TLS clients too)
// for hosts (DNS names or IP addresses) when there are any, else a
// client certificate.
func (ca *certAuthority) issue(cn string, hosts []string) (pemCert, error) {
	now := time.Now()
	return ca.issueValid(cn, hosts, now.Add(-time.Hour), now.Add(certValidity))
}

// issueValid is issue, for a certificate valid from notBefore to notAfter.
func (ca *certAuthority) issueValid(cn string, hosts []string, notBefore, notAfter time.Time) (pemCert, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return pemCert{}, err
	}
	template := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			template.IPAddresses = append(template.IPAddresses, ip)
		} else {
			template.DNSNames = append(template.DNSNames, h)
		}
	}
	if len(hosts) > 0 {
		template.ExtKeyUsage = append(template.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, template, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return pemCert{}, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return pemCert{}, err
	}
	return pemCert{
		cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		key:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

// newCertAuthority makes a CA (ECDSA P-256, valid for certValidity).
func newCertAuthority() (*certAuthority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	template := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "kafkaconsumer testcluster CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &certAuthority{cert: cert, key: key}, nil
}

// generateTLS makes a CA and a server certificate it signs (CN=localhost,
// for serverHosts and extraHosts) and writes them as PEM files with
// permissions perm; with zookeeper (ZooKeeperSecurityTLS), also
// ZooKeeper's key store and the client certificates of
// ZooKeeperBrokerIdentity, ZooKeeperTLSIdentity and ZooKeeperTLSIdentity2,
// and one of ZooKeeperTLSIdentity that expired an hour ago. Every other
// certificate is valid for a week.
func generateTLS(files tlsFiles, zookeeper bool, extraHosts []string, perm os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(files.ca), 0o755); err != nil {
		return err
	}
	ca, err := newCertAuthority()
	if err != nil {
		return err
	}
	server, err := ca.issue("localhost", slices.Concat(serverHosts, extraHosts))
	if err != nil {
		return err
	}
	type file struct {
		path     string
		contents []byte
	}
	out := []file{
		{files.ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw})},
		{files.cert, server.cert},
		{files.key, server.key},
	}
	if zookeeper {
		// ZooKeeper (and so Kafka's ZooKeeper client) reads a PEM key
		// store as one file holding the key and its certificate.
		out = append(out, file{files.zkServer, slices.Concat(server.key, server.cert)})
		broker, err := ca.issue(zooKeeperBrokerCN, nil)
		if err != nil {
			return err
		}
		out = append(out, file{files.zkBroker, slices.Concat(broker.key, broker.cert)})
		for _, c := range []struct{ cn, cert, key string }{
			{zooKeeperClientCN, files.zkClientCert, files.zkClientKey},
			{zooKeeperClient2CN, files.zkClient2Cert, files.zkClient2Key},
		} {
			client, err := ca.issue(c.cn, nil)
			if err != nil {
				return err
			}
			out = append(out, file{c.cert, client.cert}, file{c.key, client.key})
		}
		now := time.Now()
		expired, err := ca.issueValid(zooKeeperClientCN, nil, now.Add(-2*time.Hour), now.Add(-time.Hour))
		if err != nil {
			return err
		}
		out = append(out, file{files.zkExpiredCert, expired.cert}, file{files.zkExpiredKey, expired.key})
	}
	for _, f := range out {
		if err := os.WriteFile(f.path, f.contents, perm); err != nil {
			return err
		}
		if err := os.Chmod(f.path, perm); err != nil { // an older file's, or the umask's
			return err
		}
	}
	return nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}

// newPassword returns a random password for the SCRAM user.
func newPassword() (string, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// scramCredential returns the SCRAM-SHA-512 credential of password as
// Kafka stores it in ZooKeeper (ScramCredentialUtils): salt, stored key
// and server key in base64 (RFC 5802), and the iteration count.
func scramCredential(password string) (string, error) {
	salt := make([]byte, 32)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	salted, err := pbkdf2.Key(sha512.New, password, salt, scramIterations, sha512.Size)
	if err != nil {
		return "", err
	}
	mac := func(key []byte, msg string) []byte {
		h := hmac.New(sha512.New, key)
		h.Write([]byte(msg))
		return h.Sum(nil)
	}
	clientKey := mac(salted, "Client Key")
	storedKey := sha512.Sum512(clientKey)
	serverKey := mac(salted, "Server Key")
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Sprintf("salt=%s,stored_key=%s,server_key=%s,iterations=%d",
		b64(salt), b64(storedKey[:]), b64(serverKey), scramIterations), nil
}

// writeSCRAMUser writes the SCRAM-SHA-512 credential of SASLUser to
// ZooKeeper (/config/users/<user>, what kafka-configs --alter
// --add-config 'SCRAM-SHA-512=[password=…]' --entity-type users writes),
// before the brokers start: they read it at start-up, so no change
// notification is needed.
func (c *Cluster) writeSCRAMUser(ctx context.Context) error {
	cred, err := scramCredential(c.saslPassword)
	if err != nil {
		return fmt.Errorf("testcluster: SCRAM credential: %w", err)
	}
	data, err := json.Marshal(map[string]any{"version": 1, "config": map[string]string{SASLMechanism: cred}})
	if err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	conn, err := c.connectZooKeeper()
	if err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	done := make(chan error, 1)
	go func() {
		for _, p := range []string{"/config", "/config/users"} {
			if _, err := conn.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
				done <- err
				return
			}
		}
		_, err := conn.Create("/config/users/"+SASLUser, data, 0, zk.WorldACL(zk.PermAll))
		done <- err
	}()
	t := time.NewTimer(c.timeout)
	defer t.Stop()
	select {
	case err = <-done:
	case <-t.C:
		err = fmt.Errorf("no answer from ZooKeeper after %s", c.timeout)
	case <-ctx.Done():
		err = context.Cause(ctx)
	}
	conn.Close() // ends the goroutine's request
	if err != nil {
		return fmt.Errorf("testcluster: writing the SCRAM credential of %s to ZooKeeper: %w", SASLUser, err)
	}
	return nil
}

// jaasConfig is the JAAS line of the brokers' SCRAM login.
func (c *Cluster) jaasConfig() string {
	return fmt.Sprintf(`org.apache.kafka.common.security.scram.ScramLoginModule required username="%s" password="%s";`, SASLUser, c.saslPassword)
}

// securityProps returns the broker settings of the cluster's security
// mode for broker n: listeners, TLS (PEM key and certificate inline, the
// CA as trust store, which the brokers need as clients of each other) and
// SCRAM.
func (c *Cluster) securityProps(n *node) (map[string]string, error) {
	switch c.security {
	case SecuritySASLSSL:
		listener := "SASL_SSL://" + n.addr()
		props := map[string]string{
			"listeners":                                             listener,
			"advertised.listeners":                                  listener,
			"security.inter.broker.protocol":                        "SASL_SSL",
			"sasl.mechanism.inter.broker.protocol":                  SASLMechanism,
			"sasl.enabled.mechanisms":                               SASLMechanism,
			"listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": c.jaasConfig(),
		}
		return c.addTLSProps(props)
	case SecurityMixed:
		listeners := "PLAINTEXT://" + n.addr() + "," + externalListener + "://" + n.secureAddr()
		props := map[string]string{
			"listeners":                                             listeners,
			"advertised.listeners":                                  listeners,
			"listener.security.protocol.map":                        "PLAINTEXT:PLAINTEXT," + externalListener + ":SASL_SSL",
			"inter.broker.listener.name":                            "PLAINTEXT",
			"sasl.enabled.mechanisms":                               SASLMechanism,
			"listener.name.external.scram-sha-512.sasl.jaas.config": c.jaasConfig(),
		}
		if c.mode == ModeKRaft { // kraftProps sets the listeners
			props["sasl.enabled.mechanisms"] = strings.Join(KRaftSASLMechanisms, ",")
			props["listener.name.external.scram-sha-256.sasl.jaas.config"] = c.jaasConfig()
			props["listener.name.external.plain.sasl.jaas.config"] = fmt.Sprintf(
				`org.apache.kafka.common.security.plain.PlainLoginModule required username="%s" password="%s" user_%s="%s";`,
				SASLUser, c.saslPassword, SASLUser, c.saslPassword)
			// Kafka's unsecured JWS tokens (alg none): the validator
			// takes any token with a subject and an expiry, as the
			// default callback handler does; named so that a later
			// default does not change it.
			props["listener.name.external.oauthbearer.sasl.jaas.config"] = fmt.Sprintf(
				`org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="%s";`, SASLUser)
			props["listener.name.external.oauthbearer.sasl.server.callback.handler.class"] =
				"org.apache.kafka.common.security.oauthbearer.internals.unsecured.OAuthBearerUnsecuredValidatorCallbackHandler"
		}
		return c.addTLSProps(props)
	}
	listener := "PLAINTEXT://" + n.addr()
	return map[string]string{"listeners": listener, "advertised.listeners": listener}, nil
}

// addTLSProps adds the brokers' TLS settings to props. The key store is
// given inline (ssl.keystore.key, ssl.keystore.certificate.chain): a PEM
// key store file needs an encrypted key (ssl.key.password), which Go's
// standard library does not write.
func (c *Cluster) addTLSProps(props map[string]string) (map[string]string, error) {
	key, err := os.ReadFile(c.tls.key)
	if err != nil {
		return nil, fmt.Errorf("testcluster: %w", err)
	}
	cert, err := os.ReadFile(c.tls.cert)
	if err != nil {
		return nil, fmt.Errorf("testcluster: %w", err)
	}
	props["ssl.keystore.type"] = "PEM"
	props["ssl.keystore.key"] = string(key)
	props["ssl.keystore.certificate.chain"] = string(cert)
	props["ssl.truststore.type"] = "PEM"
	props["ssl.truststore.location"] = c.tls.ca
	return props, nil
}

// clientConfig sets cfg up to talk to the listener that KafkaPeers names:
// TLS trusting the cluster's CA and SCRAM-SHA-512 in sasl_ssl mode;
// nothing otherwise.
func (c *Cluster) clientConfig(cfg *sarama.Config) error {
	if c.security != SecuritySASLSSL {
		return nil
	}
	return c.SecureConfig(cfg)
}

// SecureConfig sets cfg up for the cluster's SASL_SSL listener
// (SecureKafkaPeers): TLS trusting the cluster's CA (CAFile), and SASL
// SCRAM-SHA-512 as SASLUser with SASLPassword. It fails for a plaintext
// cluster.
func (c *Cluster) SecureConfig(cfg *sarama.Config) error {
	if c.security == SecurityPlaintext {
		return errors.New("testcluster: the cluster is plaintext")
	}
	pool, err := loadCAPool(c.tls.ca)
	if err != nil {
		return err
	}
	cfg.Net.TLS.Enable = true
	cfg.Net.TLS.Config = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	scramclient.Configure(cfg, SASLMechanism, SASLUser, c.saslPassword)
	return nil
}

// SASLConfig sets cfg up for the cluster's SASL_SSL listener with the
// SASL mechanism named mechanism, one of KRaftSASLMechanisms: TLS as
// SecureConfig, and SASLUser's credentials (for OAUTHBEARER, a provider
// of UnsecuredToken). Only SASLMechanism works but in ModeKRaft with
// SecurityMixed.
func (c *Cluster) SASLConfig(cfg *sarama.Config, mechanism string) error {
	if err := c.SecureConfig(cfg); err != nil {
		return err
	}
	switch mechanism {
	case sarama.SASLTypeSCRAMSHA512, sarama.SASLTypeSCRAMSHA256:
		scramclient.Configure(cfg, mechanism, SASLUser, c.saslPassword)
	case sarama.SASLTypePlaintext:
		cfg.Net.SASL.Mechanism = sarama.SASLTypePlaintext
		cfg.Net.SASL.User, cfg.Net.SASL.Password = SASLUser, c.saslPassword
		cfg.Net.SASL.SCRAMClientGeneratorFunc = nil
	case sarama.SASLTypeOAuth:
		cfg.Net.SASL.Mechanism = sarama.SASLTypeOAuth
		cfg.Net.SASL.User, cfg.Net.SASL.Password = "", ""
		cfg.Net.SASL.SCRAMClientGeneratorFunc = nil
		cfg.Net.SASL.TokenProvider = unsecuredTokens{}
	default:
		return fmt.Errorf("testcluster: SASL mechanism %q is not one of %v", mechanism, KRaftSASLMechanisms)
	}
	return nil
}

// UnsecuredToken returns an unsecured JWS token (alg none) for SASLUser,
// valid for an hour, as Kafka's OAuthBearerUnsecuredValidatorCallbackHandler
// takes it.
func UnsecuredToken() string {
	b64 := base64.RawURLEncoding.EncodeToString
	now := time.Now().Unix()
	header := b64([]byte(`{"alg":"none"}`))
	payload := b64(fmt.Appendf(nil, `{"sub":%q,"iat":%d,"exp":%d}`, SASLUser, now, now+3600))
	return header + "." + payload + "."
}

// unsecuredTokens is a sarama.AccessTokenProvider of UnsecuredToken.
type unsecuredTokens struct{}

// Token implements sarama.AccessTokenProvider.
func (unsecuredTokens) Token() (*sarama.AccessToken, error) {
	return &sarama.AccessToken{Token: UnsecuredToken()}, nil
}

// loadCAPool returns a pool of the certificates in the PEM file path.
func loadCAPool(path string) (*x509.CertPool, error) {
	caPEM, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("testcluster: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("testcluster: no certificate in %s", path)
	}
	return pool, nil
}

// Security returns the cluster's security mode: SecurityPlaintext,
// SecuritySASLSSL or SecurityMixed.
func (c *Cluster) Security() string { return c.security }

// CAFile returns the path of the PEM file of the CA that signed the
// brokers' certificate; "" for a plaintext cluster.
func (c *Cluster) CAFile() string {
	if c.security == SecurityPlaintext {
		return ""
	}
	return c.tls.ca
}

// SASLPassword returns the password of SASLUser; "" for a plaintext
// cluster.
func (c *Cluster) SASLPassword() string { return c.saslPassword }

// SecureKafkaPeers returns the brokers' SASL_SSL addresses, broker i at
// index i: in sasl_ssl mode the same as KafkaPeers, in mixed mode those of
// the EXTERNAL listener; nil for a plaintext cluster.
func (c *Cluster) SecureKafkaPeers() []string {
	if c.security == SecurityPlaintext {
		return nil
	}
	addrs := make([]string, len(c.brokers))
	for i, n := range c.brokers {
		addrs[i] = n.secureAddr()
	}
	return addrs
}
