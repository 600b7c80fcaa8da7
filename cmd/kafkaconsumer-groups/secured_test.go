package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/go-zookeeper/zk"

	"github.com/kafkaconsumer/kafkaconsumer"
	"github.com/kafkaconsumer/kafkaconsumer/internal/testcluster"
)

// TestDescribeSecuredIntegration starts a SASL_SSL-only cluster, lets a
// group consume and commit there, and describes it with the TLS and SASL
// flags, through ZooKeeper discovery and with --bootstrap-server; without
// them, or with a wrong password, the command fails and says why. The
// description asks the tool's franz-go client first (is the group of
// Kafka's consumer group protocol?), so this checks that it too speaks
// TLS and SASL as the flags say.
func TestDescribeSecuredIntegration(t *testing.T) {
	c := startCluster(t, testcluster.Options{Security: testcluster.SecuritySASLSSL})
	checkLeaks(t)
	const topic, messages = "cli-secured", 10
	if err := c.CreateTopic(topic, 2, 1); err != nil {
		t.Fatal(err)
	}
	pcfg := sarama.NewConfig()
	if err := c.SecureConfig(pcfg); err != nil {
		t.Fatal(err)
	}
	produceWith(t, pcfg, c.KafkaPeers(), topic, messages)

	// A group consumes and commits everything, then leaves.
	group := "cli-secured-group"
	config := kafkaconsumer.NewConfig()
	if err := c.SecureConfig(config.Config); err != nil {
		t.Fatal(err)
	}
	consumer, err := kafkaconsumer.Join(group, kafkaconsumer.TopicSubscription(topic), c.ZookeeperPeers(), config)
	if err != nil {
		t.Fatalf("join: %s", err)
	}
	defer func() { _ = consumer.Close() }()
	consumeAll(t, consumer, messages)
	if err := consumer.Close(); err != nil {
		t.Fatalf("close: %s", err)
	}

	t.Setenv("KAFKA_SASL_PASSWORD", c.SASLPassword())
	base := []string{"--zookeeper", c.ZookeeperPeers(), "--group", group, "--json", "--timeout", "10s"}
	secured := []string{"--tls-ca", c.CAFile(), "--sasl-mechanism", "SCRAM-SHA-512", "--sasl-user", testcluster.SASLUser}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"discovery", secured},
		{"bootstrap", append([]string{"--bootstrap-server", strings.Join(c.KafkaPeers(), ",")}, secured...)},
		{"listener", append([]string{"--listener", "SASL_SSL"}, secured...)},
		{"insecure", []string{"--tls-insecure-skip-verify", "--sasl-mechanism", "SCRAM-SHA-512", "--sasl-user", testcluster.SASLUser}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(append(append([]string(nil), base...), tc.args...), &stdout, &stderr); code != exitOK {
				t.Fatalf("exit status %d: %s", code, stderr.String())
			}
			var desc GroupDescription
			if err := json.Unmarshal(stdout.Bytes(), &desc); err != nil {
				t.Fatalf("decode %s: %s", stdout.String(), err)
			}
			if got, want := strings.Join(desc.Brokers, ","), strings.Join(c.KafkaPeers(), ","); got != want {
				t.Errorf("brokers %s, want %s", got, want)
			}
			if desc.State != StateEmpty || desc.TotalCommitted != messages || desc.TotalLag != 0 {
				t.Errorf("state %s, committed %d, lag %d; want Empty, %d, 0", desc.State, desc.TotalCommitted, desc.TotalLag, messages)
			}
		})
	}

	for _, tc := range []struct {
		name     string
		args     []string
		password string
		want     string
	}{
		{"no TLS nor SASL", nil, c.SASLPassword(), "SASL_SSL (SASL_SSL)"},
		{"wrong password", secured, "wrong", "SASL Authentication failed"},
		{"untrusted CA", []string{"--tls", "--sasl-mechanism", "SCRAM-SHA-512", "--sasl-user", testcluster.SASLUser}, c.SASLPassword(), "certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("KAFKA_SASL_PASSWORD", tc.password)
			var stdout, stderr bytes.Buffer
			began := time.Now()
			code := run(append(append([]string(nil), base...), tc.args...), &stdout, &stderr)
			if code != exitError {
				t.Errorf("exit status %d, want %d; stderr: %s", code, exitError, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("stderr lacks %q: %s", tc.want, stderr.String())
			}
			if took := time.Since(began); took > 12*time.Second {
				t.Errorf("took %s, past --timeout 10s", took)
			}
		})
	}
}

// TestDescribeOnTLSZooKeeper: on a cluster whose ZooKeeper takes TLS
// clients with certificates only, a group locked with an x509 ACL is
// described with --zookeeper-tls-ca, --zookeeper-tls-cert and
// --zookeeper-tls-key; with the other identity's certificate the command
// fails, saying that ZooKeeper refused.
func TestDescribeOnTLSZooKeeper(t *testing.T) {
	c := startCluster(t, testcluster.Options{ZooKeeperSecurity: testcluster.ZooKeeperSecurityTLS})
	checkLeaks(t)
	files := c.ZooKeeperTLSFiles()
	groupTLS, err := testcluster.LoadZooKeeperTLSConfig(files.CA, files.Cert, files.Key)
	if err != nil {
		t.Fatal(err)
	}
	topic := createTopic(t, c.KafkaPeers(), 2)
	group := "cli-tls." + topic
	produce(t, c.KafkaPeers(), topic, 10)

	config := kafkaconsumer.NewConfig()
	config.ZookeeperTLS = groupTLS
	config.ZookeeperACL = []zk.ACL{{Perms: zk.PermAll, Scheme: "x509", ID: testcluster.ZooKeeperTLSIdentity}}
	config.Consumer.Offsets.AutoCommit.Interval = 100 * time.Millisecond
	consumer, err := kafkaconsumer.Join(group, kafkaconsumer.TopicSubscription(topic), c.ZookeeperPeers(), config)
	if err != nil {
		t.Fatalf("join: %s", err)
	}
	defer func() { _ = consumer.Close() }()
	consumeAll(t, consumer, 10)

	describe := func(cert, key string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := run([]string{"--zookeeper", c.ZookeeperPeers(), "--group", group, "--json", "--timeout", "20s",
			"--zookeeper-tls-ca", files.CA, "--zookeeper-tls-cert", cert, "--zookeeper-tls-key", key}, &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	code, stdout, stderr := describe(files.Cert, files.Key)
	if code != exitOK {
		t.Fatalf("with the group's certificate: exit status %d: %s", code, stderr)
	}
	var desc GroupDescription
	if err := json.Unmarshal([]byte(stdout), &desc); err != nil {
		t.Fatalf("decode %s: %v", stdout, err)
	}
	if len(desc.Instances) != 1 {
		t.Errorf("with the group's certificate: %d instances, want 1: %s", len(desc.Instances), stdout)
	}
	if code, _, stderr := describe(files.Cert2, files.Key2); code != exitError || !strings.Contains(stderr, "not authenticated") {
		t.Errorf("with the other certificate: exit status %d, stderr %q; want %d and ZooKeeper's \"not authenticated\"", code, stderr, exitError)
	}
}
