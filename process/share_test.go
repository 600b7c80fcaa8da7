package process

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer"
)

// TestRunRefusesShareGroup: Run on a share group's consumer
// (GroupProtocolShare), which it does not run yet, returns at once an
// error wrapping ErrInvalidOptions that says so.
func TestRunRefusesShareGroup(t *testing.T) {
	_, brokers := clusterPeers(t)
	if os.Getenv("KAFKA_MODE") != "kraft" || !kafkaVersion().IsAtLeast(sarama.V4_2_0_0) {
		t.Skipf("share groups need a KRaft cluster of Kafka 4.2 or later, not %s in %q mode", kafkaVersion(), os.Getenv("KAFKA_MODE"))
	}
	topic := uniqueName("share-run")
	createTopic(t, brokers, topic, 1)
	config := kafkaconsumer.NewConfig()
	config.Version = kafkaVersion()
	config.Coordinator = kafkaconsumer.CoordinatorKafka
	config.GroupProtocol = kafkaconsumer.GroupProtocolShare
	config.Brokers = brokers
	c, err := kafkaconsumer.Join(uniqueName("share-run"), kafkaconsumer.TopicSubscription(topic), "", config)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = Run(ctx, c, func(context.Context, *sarama.ConsumerMessage) error { return nil }, Options{Concurrency: 1})
	if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), "GroupProtocolShare") {
		t.Errorf("Run on a share group's consumer = %v, want ErrInvalidOptions naming GroupProtocolShare", err)
	}
}
