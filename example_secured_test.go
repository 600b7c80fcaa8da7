package kafkaconsumer_test

import (
	"crypto/sha512"
	"crypto/tls"
	"crypto/x509"
	"log"
	"os"

	"github.com/IBM/sarama"
	"github.com/xdg-go/scram"

	"github.com/kafkaconsumer/kafkaconsumer"
)

// This example joins a group on a cluster whose brokers take clients on a
// SASL_SSL listener with SCRAM-SHA-512: TLS trusting the cluster's CA, and
// the SCRAM client sarama needs (scramClient below). Join finds each
// broker's first SASL_SSL listener through ZooKeeper. It needs a running
// cluster, so it has no output to check.
func Example_secured() {
	caPEM, err := os.ReadFile("/etc/kafka/ca.pem")
	if err != nil {
		log.Fatalln(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		log.Fatalln("no certificate in /etc/kafka/ca.pem")
	}

	config := kafkaconsumer.NewConfig()
	config.Net.TLS.Enable = true
	config.Net.TLS.Config = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	config.Net.SASL.Enable = true
	config.Net.SASL.Mechanism = sarama.SASLTypeSCRAMSHA512
	config.Net.SASL.User = "consumer"
	config.Net.SASL.Password = os.Getenv("KAFKA_SASL_PASSWORD")
	config.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &scramClient{hash: sha512.New} }
	// config.Listener = "EXTERNAL"              // a listener by name, or
	// config.Brokers = []string{"kafka1:9094"} // no discovery at all

	consumer, err := kafkaconsumer.Join("my-group", kafkaconsumer.TopicSubscription("my-topic"), "zk1:2181/kafka", config)
	if err != nil {
		log.Fatalln(err) // e.g. ErrNoBrokers naming the listeners the brokers have
	}
	for msg := range consumer.Messages() {
		log.Printf("%s/%d@%d: %s", msg.Topic, msg.Partition, msg.Offset, msg.Value)
		consumer.Ack(msg)
	}
}

// scramClient is sarama's SCRAMClient over github.com/xdg-go/scram, as in
// sarama's own examples; sarama makes one per connection.
type scramClient struct {
	hash scram.HashGeneratorFcn
	conv *scram.ClientConversation
}

func (c *scramClient) Begin(user, password, authzID string) error {
	client, err := c.hash.NewClient(user, password, authzID)
	if err != nil {
		return err
	}
	c.conv = client.NewConversation()
	return nil
}

func (c *scramClient) Step(challenge string) (string, error) { return c.conv.Step(challenge) }

func (c *scramClient) Done() bool { return c.conv.Done() }
