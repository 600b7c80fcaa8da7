package main

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/kafkaconsumer/kafkaconsumer/internal/testcluster"
)

// TestMigrateCoordinatorBrokerDownIntegration moves a group to Kafka's
// group coordinator while the broker that coordinates the group is
// down: the tool must wait for the coordinator to move (or come back)
// within its timeout, not fail on the first refused connection.
func TestMigrateCoordinatorBrokerDownIntegration(t *testing.T) {
	c := startCluster(t, testcluster.Options{Brokers: 2})
	zookeeper, brokers := c.ZookeeperPeers(), c.KafkaPeers()
	topic := createTopic(t, brokers, 2)
	group := fmt.Sprintf("cli-migrate-down.%d", time.Now().UnixNano())
	consumer := joinForMigration(t, zookeeper, group, topic)
	done := make(chan struct{})
	go func() { // ends when consumer's Close closes Messages; waited for at cleanup
		defer close(done)
		for msg := range consumer.Messages() {
			consumer.Ack(msg)
		}
	}()
	t.Cleanup(func() { _ = consumer.Close(); <-done })
	produce(t, brokers, topic, 10)

	// The group's coordinator exists once the instance committed.
	client, err := sarama.NewClient(brokers, sarama.NewConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	var coordinator int32
	waitFor(t, 60*time.Second, "the instance's first commit", func() error {
		if err := client.RefreshCoordinator(group); err != nil {
			return err
		}
		b, err := client.Coordinator(group)
		if err != nil {
			return err
		}
		coordinator = b.ID()
		offsets, err := newTestAdmin(t, brokers).ListConsumerGroupOffsets(group, map[string][]int32{topic: {0, 1}})
		if err != nil {
			return err
		}
		for p := range int32(2) {
			if b := offsets.GetBlock(topic, p); b == nil || b.Offset < 0 {
				return fmt.Errorf("partition %d not committed", p)
			}
		}
		return nil
	})
	if err := c.KillBroker(int(coordinator)); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed broker %d, the group's coordinator", coordinator)

	var stdout, stderr bytes.Buffer
	code := run([]string{"migrate", "--zookeeper", zookeeper, "--group", group, "--to", switchKafka, "--wait", "60s", "--timeout", "40s"}, &stdout, &stderr)
	if code != exitOK {
		t.Fatalf("migrate --to kafka with the coordinator's broker down: exit status %d: %s", code, stderr.String())
	}
	t.Logf("migrate --to kafka: %s", stdout.String())
}
