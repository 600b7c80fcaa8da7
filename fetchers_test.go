package kafkaconsumer

import (
	"testing"

	"github.com/IBM/sarama"
)

// TestFetchVersion: the fetch engine serves Kafka 0.11 and later, and
// every SASL mechanism but GSSAPI.
func TestFetchVersion(t *testing.T) {
	conf := sarama.NewConfig()
	conf.Version = sarama.V0_10_2_0
	if _, ok := fetchVersion(conf); ok {
		t.Error("partition fetcher for Kafka 0.10")
	}
	conf.Version = sarama.V2_8_0_0
	if v, ok := fetchVersion(conf); !ok || v != 12 {
		t.Errorf("Kafka 2.8: version %d, %v; want 12", v, ok)
	}
	conf.Net.SASL.Enable, conf.Net.SASL.Mechanism = true, sarama.SASLTypeSCRAMSHA512
	if _, ok := fetchVersion(conf); !ok {
		t.Error("no partition fetcher with SASL/SCRAM")
	}
	conf.Net.SASL.Mechanism = sarama.SASLTypeGSSAPI
	if _, ok := fetchVersion(conf); ok {
		t.Error("partition fetcher with SASL/GSSAPI, which its transport has not")
	}
}
