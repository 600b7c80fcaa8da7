package kafkaconsumer

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// produceSized writes n messages of about size bytes each to topic, spread
// over its partitions, in record batches of at most 16 messages, and
// returns their values.
func produceSized(t testing.TB, topic string, n, size int) []string {
	t.Helper()
	config := sarama.NewConfig()
	config.Version = testKafkaVersion()
	config.Producer.Return.Successes = true
	config.Producer.Flush.MaxMessages = 16
	producer, err := sarama.NewSyncProducer(kafkaPeers, config)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = producer.Close() }()
	pad := strings.Repeat("x", size)
	values := make([]string, n)
	msgs := make([]*sarama.ProducerMessage, n)
	for i := range msgs {
		values[i] = fmt.Sprintf("%d-%s", i, pad)[:size]
		msgs[i] = &sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder(values[i])}
	}
	if err := producer.SendMessages(msgs); err != nil {
		t.Fatal(err)
	}
	return values
}

// TestMaxBufferedBytes: a consumer whose user reads slowly holds at most
// Config.MaxBufferedBytes of fetched messages not handed out yet, beyond
// one record batch per broker loop (Kafka returns a first batch whatever
// the request's MaxBytes) and the messages' own memory in a response
// (the request's MaxBytes counts the records' bytes only), as the
// partitions' BufferedBytes in Stats show; and every message arrives.
func TestMaxBufferedBytes(t *testing.T) {
	parallelClusterTest(t)
	const (
		partitions = 8
		size       = 1024
		n          = 4000
		budget     = 128 << 10
	)
	batchBytes := 16 * (size + messageOverhead) // a producer batch
	bound := budget + budget*messageOverhead/size + fetchConnections*batchBytes
	topic := newTopic(t, partitions)
	values := produceSized(t, topic, n, size)
	for _, limit := range []int64{budget} {
		config := testConfig()
		config.MaxBufferedBytes = limit
		c := joinWithCleanup(t, uniqueName("buffered"), TopicSubscription(topic), config)
		received := new(valueCounts)
		peak := int64(0)
		deadline := time.After(30 * time.Second)
	read:
		for i := 0; !received.has(values); i++ {
			select {
			case msg := <-c.Messages():
				received.add(string(msg.Value))
				c.Ack(msg)
			case <-deadline:
				break read
			}
			if i%50 == 0 {
				total := int64(0)
				for _, s := range c.Stats() {
					total += s.BufferedBytes
				}
				peak = max(peak, total)
			}
		}
		if got := received.received(values); got != n {
			t.Errorf("MaxBufferedBytes %d: received %d of %d messages", limit, got, n)
		}
		t.Logf("MaxBufferedBytes %d: peak of the partitions' BufferedBytes %d", limit, peak)
		if peak > bound {
			t.Errorf("MaxBufferedBytes %d: the partitions held %d bytes, more than the budget with its overshoot (%d)", limit, peak, bound)
		}
		if peak == 0 {
			t.Errorf("MaxBufferedBytes %d: Stats showed no buffered bytes", limit)
		}
		if err := c.Close(); err != nil {
			t.Errorf("Close() = %v", err)
		}
	}
}
