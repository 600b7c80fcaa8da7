package kafkaconsumer

import (
	"testing"

	"github.com/IBM/sarama"
)

// TestFetchVersion: the fetch engine serves every SASL mechanism but
// GSSAPI (its Kafka versions: fetch.TestVersion).
func TestFetchVersion(t *testing.T) {
	conf := sarama.NewConfig()
	conf.Version = sarama.V2_8_0_0
	conf.Net.SASL.Enable = true
	for _, m := range []sarama.SASLMechanism{sarama.SASLTypePlaintext, sarama.SASLTypeSCRAMSHA512, sarama.SASLTypeOAuth, sarama.SASLTypeGSSAPI} {
		conf.Net.SASL.Mechanism = m
		if _, ok := fetchVersion(conf); ok != (m != sarama.SASLTypeGSSAPI) {
			t.Errorf("SASL/%s: the engine serves it: %v", m, ok)
		}
	}
}
