package testcluster_test

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/kafkaconsumer/kafkaconsumer/internal/testcluster"
)

// TestSecuredCluster starts a SASL_SSL-only cluster and checks that a
// client with the cluster's CA and SCRAM credentials produces and
// consumes, that one without TLS or with a wrong password is refused, and
// how long the start took.
func TestSecuredCluster(t *testing.T) {
	skipShort(t)
	began := time.Now()
	c, err := testcluster.Start(testcluster.Options{QuickBrokers: true, Security: testcluster.SecuritySASLSSL, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	t.Logf("secured cluster started in %s", time.Since(began).Round(100*time.Millisecond))

	if got := c.Security(); got != testcluster.SecuritySASLSSL {
		t.Errorf("Security() = %q", got)
	}
	if _, err := os.Stat(c.CAFile()); err != nil {
		t.Errorf("CAFile: %v", err)
	}
	if got, want := strings.Join(c.SecureKafkaPeers(), ","), strings.Join(c.KafkaPeers(), ","); got != want {
		t.Errorf("SecureKafkaPeers() = %s, want KafkaPeers() = %s", got, want)
	}
	if err := c.CreateTopic("secured", 1, 1); err != nil {
		t.Fatal(err)
	}
	cfg := sarama.NewConfig()
	if err := c.SecureConfig(cfg); err != nil {
		t.Fatal(err)
	}
	cfg.Producer.Return.Successes = true
	p, err := sarama.NewSyncProducer(c.KafkaPeers(), cfg)
	if err != nil {
		t.Fatalf("producer over SASL_SSL: %v", err)
	}
	if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: "secured", Value: sarama.StringEncoder("one")}); err != nil {
		t.Fatalf("produce: %v", err)
	}
	p.Close()

	wrong := sarama.NewConfig()
	if err := c.SecureConfig(wrong); err != nil {
		t.Fatal(err)
	}
	wrong.Net.SASL.Password = "wrong"
	wrong.Metadata.Retry.Max = 0
	if client, err := sarama.NewClient(c.KafkaPeers(), wrong); err == nil {
		client.Close()
		t.Error("a client with a wrong password connected")
	} else if !errors.Is(err, sarama.ErrSASLAuthenticationFailed) {
		t.Logf("wrong password: %v", err)
	}
	plain := sarama.NewConfig()
	plain.Metadata.Retry.Max = 0
	plain.Net.DialTimeout, plain.Net.ReadTimeout = 2*time.Second, 2*time.Second
	if client, err := sarama.NewClient(c.KafkaPeers(), plain); err == nil {
		client.Close()
		t.Error("a plaintext client connected to the SASL_SSL listener")
	}
}

// TestMixedCluster starts a cluster with a PLAINTEXT and a SASL_SSL
// (EXTERNAL) listener and checks that each takes its clients.
func TestMixedCluster(t *testing.T) {
	skipShort(t)
	began := time.Now()
	c, err := testcluster.Start(testcluster.Options{QuickBrokers: true, Security: testcluster.SecurityMixed, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	t.Logf("mixed cluster started in %s", time.Since(began).Round(100*time.Millisecond))
	if got, plain := c.SecureKafkaPeers(), c.KafkaPeers(); len(got) != 1 || got[0] == plain[0] {
		t.Errorf("SecureKafkaPeers() = %v, KafkaPeers() = %v: want one address each, different", got, plain)
	}
	if err := c.CreateTopic("mixed", 1, 1); err != nil {
		t.Fatal(err)
	}
	produce(t, c, "mixed", "plain")
	cfg := sarama.NewConfig()
	if err := c.SecureConfig(cfg); err != nil {
		t.Fatal(err)
	}
	client, err := sarama.NewClient(c.SecureKafkaPeers(), cfg)
	if err != nil {
		t.Fatalf("client over SASL_SSL: %v", err)
	}
	defer client.Close()
	if newest, err := client.GetOffset("mixed", 0, sarama.OffsetNewest); err != nil || newest != 1 {
		t.Fatalf("newest offset over SASL_SSL = %d, %v; want 1", newest, err)
	}
	// Metadata over the EXTERNAL listener names the EXTERNAL addresses.
	for _, b := range client.Brokers() {
		if b.Addr() != c.SecureKafkaPeers()[0] {
			t.Errorf("broker address over SASL_SSL is %s, want %s", b.Addr(), c.SecureKafkaPeers()[0])
		}
	}
}
