package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/kafkaconsumer/kafkaconsumer"
	"github.com/kafkaconsumer/kafkaconsumer/internal/testcluster"
)

// TestDescribeSecuredIntegration starts a SASL_SSL-only cluster, lets a
// group consume and commit there, and describes it with the TLS and SASL
// flags, through ZooKeeper discovery and with --bootstrap-server; without
// them, or with a wrong password, the command fails and says why.
func TestDescribeSecuredIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("starts ZooKeeper and Kafka JVMs; skipped under -short")
	}
	began := time.Now()
	c, err := testcluster.Start(testcluster.Options{Security: testcluster.SecuritySASLSSL})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	t.Logf("sasl_ssl cluster started in %s", time.Since(began).Round(100*time.Millisecond))
	checkLeaks(t)
	const topic, messages = "cli-secured", 10
	if err := c.CreateTopic(topic, 2, 1); err != nil {
		t.Fatal(err)
	}
	pcfg := sarama.NewConfig()
	if err := c.SecureConfig(pcfg); err != nil {
		t.Fatal(err)
	}
	pcfg.Producer.Return.Successes = true
	producer, err := sarama.NewSyncProducer(c.KafkaPeers(), pcfg)
	if err != nil {
		t.Fatalf("producer: %s", err)
	}
	for i := 0; i < messages; i++ {
		if _, _, err := producer.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder("m")}); err != nil {
			t.Fatalf("produce: %s", err)
		}
	}
	producer.Close()

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
	timeout := time.NewTimer(60 * time.Second)
	defer timeout.Stop()
	for received := 0; received < messages; received++ {
		select {
		case msg := <-consumer.Messages():
			consumer.Ack(msg)
		case <-timeout.C:
			_ = consumer.Close()
			t.Fatalf("received %d of %d messages within 60s", received, messages)
		}
	}
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
