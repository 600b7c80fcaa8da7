package main

// How the tool reaches Kafka: the brokers (found through ZooKeeper on a
// listener, or given), TLS and SASL.

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/kafkaconsumer/kafkaconsumer/internal/scramclient"
	"github.com/kafkaconsumer/kafkaconsumer/internal/zkbrokers"
)

// kafkaAccess says how the tool talks to Kafka. The zero value finds the
// brokers' first PLAINTEXT listener through ZooKeeper and speaks
// plaintext.
type kafkaAccess struct {
	// bootstrap, when set, are the addresses to connect to instead of the
	// registered brokers' (--bootstrap-server).
	bootstrap []string
	// listener names the registered brokers' listener to use (--listener);
	// empty: the first whose security protocol fits tls and sasl.
	listener string
	// tls is the TLS configuration, nil for none (--tls and --tls-*).
	tls *tls.Config
	// saslMechanism is sarama's name of the SASL mechanism, empty for no
	// SASL (--sasl-mechanism); saslUser and saslPassword its credentials.
	saslMechanism, saslUser, saslPassword string
}

// protocol returns the security protocol the tool speaks.
func (a kafkaAccess) protocol() string {
	return zkbrokers.Protocol(a.tls != nil, a.saslMechanism != "")
}

// configure sets cfg's TLS and SASL settings.
func (a kafkaAccess) configure(cfg *sarama.Config) {
	if a.tls != nil {
		cfg.Net.TLS.Enable = true
		cfg.Net.TLS.Config = a.tls.Clone()
	}
	switch a.saslMechanism {
	case "":
	case sarama.SASLTypePlaintext:
		cfg.Net.SASL.Enable = true
		cfg.Net.SASL.Handshake = true
		cfg.Net.SASL.Mechanism = sarama.SASLTypePlaintext
		cfg.Net.SASL.User = a.saslUser
		cfg.Net.SASL.Password = a.saslPassword
	default:
		scramclient.Configure(cfg, a.saslMechanism, a.saslUser, a.saslPassword)
	}
}

// franzOptions are the options of a franz-go client that reaches Kafka
// as configure's sarama configuration does: the same TLS configuration
// (a clone; franz-go, like sarama, sets its ServerName to the host dialed
// when empty) and the same SASL mechanism and credentials, with
// franz-go's own PLAIN and SCRAM clients (pkg/sasl), over the same
// SaslHandshake v1 and SaslAuthenticate exchange.
func (a kafkaAccess) franzOptions() []kgo.Opt {
	var opts []kgo.Opt
	if a.tls != nil {
		opts = append(opts, kgo.DialTLSConfig(a.tls.Clone()))
	}
	if m := a.franzSASL(); m != nil {
		opts = append(opts, kgo.SASL(m))
	}
	return opts
}

// franzSASL is the franz-go mechanism of a.saslMechanism, nil for none.
func (a kafkaAccess) franzSASL() sasl.Mechanism {
	switch a.saslMechanism {
	case sarama.SASLTypePlaintext:
		return plain.Auth{User: a.saslUser, Pass: a.saslPassword}.AsMechanism()
	case sarama.SASLTypeSCRAMSHA256:
		return scram.Auth{User: a.saslUser, Pass: a.saslPassword}.AsSha256Mechanism()
	case sarama.SASLTypeSCRAMSHA512:
		return scram.Auth{User: a.saslUser, Pass: a.saslPassword}.AsSha512Mechanism()
	}
	return nil
}

// saslMechanisms are the values --sasl-mechanism takes.
var saslMechanisms = []string{sarama.SASLTypePlaintext, sarama.SASLTypeSCRAMSHA256, sarama.SASLTypeSCRAMSHA512}

// accessFlags are the values of the Kafka access flags, as parsed.
type accessFlags struct {
	bootstrap, listener     string
	tls                     bool
	tlsCA, tlsCert, tlsKey  string
	tlsInsecure             bool
	saslMechanism, saslUser string
	saslPassword            string // from $KAFKA_SASL_PASSWORD
}

// access checks the flags and builds the kafkaAccess they describe. Any
// --tls-* flag turns TLS on. Errors are usage errors.
func (f accessFlags) access() (kafkaAccess, error) {
	var a kafkaAccess
	if f.bootstrap != "" {
		if f.listener != "" {
			return a, errors.New("give either --bootstrap-server or --listener, not both (--listener picks among the brokers registered in ZooKeeper)")
		}
		for _, addr := range strings.Split(f.bootstrap, ",") {
			if err := checkAddr(addr); err != nil {
				return a, fmt.Errorf("--bootstrap-server: %w", err)
			}
			a.bootstrap = append(a.bootstrap, addr)
		}
	}
	a.listener = f.listener
	if (f.tlsCert == "") != (f.tlsKey == "") {
		return a, errors.New("give both --tls-cert and --tls-key, or neither")
	}
	if f.tls || f.tlsCA != "" || f.tlsCert != "" || f.tlsInsecure {
		cfg, err := loadTLS("--tls", f.tlsCA, f.tlsCert, f.tlsKey)
		if err != nil {
			return a, err
		}
		cfg.InsecureSkipVerify = f.tlsInsecure
		a.tls = cfg
	}
	switch {
	case f.saslMechanism == "" && f.saslUser != "":
		return a, errors.New("--sasl-user needs --sasl-mechanism")
	case f.saslMechanism == "":
	case !contains(saslMechanisms, strings.ToUpper(f.saslMechanism)):
		return a, fmt.Errorf("--sasl-mechanism %q: want one of %s", f.saslMechanism, strings.Join(saslMechanisms, ", "))
	case f.saslUser == "":
		return a, errors.New("--sasl-mechanism needs --sasl-user")
	case f.saslPassword == "":
		return a, errors.New("--sasl-mechanism needs the password in $KAFKA_SASL_PASSWORD")
	default:
		a.saslMechanism, a.saslUser, a.saslPassword = strings.ToUpper(f.saslMechanism), f.saslUser, f.saslPassword
	}
	return a, nil
}

// checkAddr checks a "host:port" address.
func checkAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port", addr)
	}
	if n, err := strconv.Atoi(port); host == "" || err != nil || n <= 0 || n > 65535 {
		return fmt.Errorf("%q is not host:port", addr)
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// loadTLS returns a TLS configuration that trusts the CA certificates of
// the PEM file ca (the system's when ""), with the client certificate and
// key of the PEM files cert and key when given. Errors name the flag,
// prefix-ca, prefix-cert or prefix-key.
func loadTLS(prefix, ca, cert, key string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		pemData, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("%s-ca: %w", prefix, err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pemData) {
			return nil, fmt.Errorf("%s-ca: no PEM certificate in %s", prefix, ca)
		}
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("%s-cert/%s-key: %w", prefix, prefix, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}
