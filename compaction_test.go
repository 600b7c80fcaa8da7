package kafkaconsumer

import (
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// produceIdempotent sends one batch of the records key=value to topic's
// partition 0 with an idempotent producer of its own, which it then
// closes: its batch is that producer's last.
func produceIdempotent(t *testing.T, topic string, records map[string]string) {
	t.Helper()
	config := sarama.NewConfig()
	config.Version = testKafkaVersion()
	config.Producer.Idempotent = true
	config.Producer.RequiredAcks = sarama.WaitForAll
	config.Producer.Return.Successes = true
	config.Net.MaxOpenRequests = 1
	config.Producer.Partitioner = sarama.NewManualPartitioner
	producer, err := sarama.NewSyncProducer(kafkaPeers, config)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = producer.Close() }()
	var msgs []*sarama.ProducerMessage
	for k, v := range records {
		msgs = append(msgs, &sarama.ProducerMessage{Topic: topic, Partition: 0, Key: sarama.StringEncoder(k), Value: sarama.StringEncoder(v)})
	}
	if err := producer.SendMessages(msgs); err != nil {
		t.Fatal(err)
	}
}

// TestCompactionEmptiedBatch: the log cleaner keeps an idempotent
// producer's last batch even when it removes every record of it, and a
// fetch of a segment that holds only that batch returns it alone, without
// records. A consumer must move past it; in batch mode it stalled there
// for good, fetching offset 0 again and again.
func TestCompactionEmptiedBatch(t *testing.T) {
	parallelClusterTest(t)
	if !testKafkaVersion().IsAtLeast(sarama.V0_11_0_0) {
		t.Skip("idempotent producers need Kafka 0.11")
	}
	client := newTestClient(t)
	admin := newTestAdmin(t, client)
	topic := uniqueName(topicPrefix(t))
	entries := map[string]*string{
		"cleanup.policy":            ptr("compact"),
		"segment.bytes":             ptr("100"), // a segment per batch
		"min.cleanable.dirty.ratio": ptr("0.01"),
		"min.compaction.lag.ms":     ptr("0"),
		"delete.retention.ms":       ptr("0"),
	}
	if err := admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1, ConfigEntries: entries}, false); err != nil {
		t.Fatal(err)
	}
	// Offsets 0-1, the first producer's last batch; 2-3 replace both of
	// its records; 4 leaves 2-3 out of the active segment, so that the
	// cleaner may clean them.
	produceIdempotent(t, topic, map[string]string{"a": "a1", "b": "b1"})
	produceIdempotent(t, topic, map[string]string{"a": "a2", "b": "b2"})
	produceIdempotent(t, topic, map[string]string{"c": "c1"})
	waitFor(t, time.Minute, "the cleaner to remove offsets 0 and 1", func() bool {
		return firstOffset(t, client, topic) >= 2
	})

	for _, batch := range []int{0, 10} {
		config := testConfig()
		config.BatchSize = batch
		c := joinWithCleanup(t, uniqueName("compaction"), TopicSubscription(topic), config)
		received, done := receiveAll(c)
		want := []string{"a2", "b2", "c1"}
		if !poll(20*time.Second, func() bool { return received.has(want) }) {
			t.Errorf("BatchSize %d: received %d of the 3 records the cleaner left", batch, received.received(want))
		}
		if err := c.Close(); err != nil {
			t.Errorf("Close() = %v", err)
		}
		<-done
	}
}

func ptr(s string) *string { return &s }

// firstOffset returns the offset of the first message that a consumer on
// client reads of topic's partition 0 from its oldest offset, or -1 if
// none comes within 2 s.
func firstOffset(t *testing.T, client sarama.Client, topic string) int64 {
	t.Helper()
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = consumer.Close() }()
	pc, err := consumer.ConsumePartition(topic, 0, sarama.OffsetOldest)
	if err != nil {
		return -1
	}
	defer func() { _ = pc.Close() }()
	select {
	case msg := <-pc.Messages():
		return msg.Offset
	case <-time.After(2 * time.Second):
		return -1
	}
}
