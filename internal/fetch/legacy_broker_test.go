package fetch

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer/internal/fetch/fetchtest"
)

// TestPartitionFetcherLegacyBroker: the engine consumes the legacy
// message sets a real broker wrote (magic 0 and 1: a topic of
// message.format.version 0.9.0 or 0.10.2, which brokers before Kafka 3.0
// honour), plain and gzip-compressed (wrapper messages), itself: every
// message in order, its key and value, without handing the partition to
// sarama's partition consumer.
func TestPartitionFetcherLegacyBroker(t *testing.T) {
	peers := fetchtest.KafkaPeers(t)
	t.Parallel()
	if fetchtest.KafkaVersion(t).IsAtLeast(sarama.V3_0_0_0) {
		t.Skip("Kafka 3 writes record batches whatever the topic's message.format.version")
	}
	client := fetchtest.Client(t, peers)
	for _, tc := range []struct {
		format string
		magic  byte
		codec  sarama.CompressionCodec
	}{
		{"0.9.0", 0, sarama.CompressionNone},
		{"0.9.0", 0, sarama.CompressionGZIP},
		{"0.10.2", 1, sarama.CompressionNone},
		{"0.10.2", 1, sarama.CompressionSnappy},
	} {
		t.Run(fmt.Sprintf("magic%d-%s", tc.magic, tc.codec), func(t *testing.T) {
			topic := fetchtest.Topic(t, client, 1, map[string]*string{"message.format.version": &tc.format})
			values := produceLegacy(t, peers, topic, 30, tc.codec)
			if magic := firstMagic(t, client, topic); magic != tc.magic {
				t.Fatalf("the broker wrote magic %d, want %d", magic, tc.magic)
			}

			conf := sarama.NewConfig()
			conf.Version = fetchtest.KafkaVersion(t)
			fc, err := sarama.NewClient(peers, conf)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = fc.Close() }()
			version, _ := Version(conf)
			hub := testHub(fc, conf, version, &Budget{}, nil)
			defer hub.Close()
			f := hub.Start(topic, 0, 3)
			defer func() { _ = f.Close() }()
			var got []*sarama.ConsumerMessage
			deadline := time.NewTimer(30 * time.Second)
			defer deadline.Stop()
			for len(got) < len(values)-3 {
				select {
				case s, ok := <-f.slabs:
					if !ok {
						t.Fatalf("the fetcher ended after %d messages: the partition went to sarama's consumer", len(got))
					}
					got = append(got, s.Msgs...)
					f.Taken(s)
				case err := <-f.errs:
					t.Fatalf("reported %v", err)
				case <-deadline.C:
					t.Fatalf("%d messages of %d after 30 s", len(got), len(values)-3)
				}
			}
			for i, m := range got {
				if want := int64(i + 3); m.Offset != want || string(m.Value) != values[want] || string(m.Key) != fmt.Sprint(want) {
					t.Fatalf("message %d: offset %d, key %q, value %q; want %d, %q, %q", i, m.Offset, m.Key, m.Value, want, fmt.Sprint(want), values[want])
				}
			}
		})
	}
}

// produceLegacy writes n messages of keys "0".."n-1" to partition 0 of
// topic on peers with codec, in batches of 10, and returns their values.
func produceLegacy(t *testing.T, peers []string, topic string, n int, codec sarama.CompressionCodec) []string {
	t.Helper()
	config := fetchtest.BatchingProducerConfig(fetchtest.KafkaVersion(t), codec)
	producer, err := sarama.NewSyncProducer(peers, config)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = producer.Close() }()
	values := make([]string, n)
	msgs := make([]*sarama.ProducerMessage, n)
	for i := range msgs {
		values[i] = fmt.Sprintf("legacy-%s-%d", codec, i)
		msgs[i] = &sarama.ProducerMessage{Topic: topic, Partition: 0, Key: sarama.StringEncoder(fmt.Sprint(i)), Value: sarama.StringEncoder(values[i])}
	}
	if err := producer.SendMessages(msgs); err != nil {
		t.Fatalf("produce: %s", err)
	}
	return values
}

// firstMagic returns the magic byte of the first batch or message of
// topic's partition 0, fetched raw from its leader.
func firstMagic(t *testing.T, client sarama.Client, topic string) byte {
	t.Helper()
	version := brokerFetchVersion(t)
	body := rawFetchOf(t, client, version, topic, false)
	resp, err := ReadResponse(version, body)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Partitions) != 1 || len(resp.Partitions[0].Records) < 17 {
		t.Fatalf("no records of %s/0 in the raw fetch", topic)
	}
	rec := resp.Partitions[0].Records
	if size := binary.BigEndian.Uint32(rec[8:12]); size == 0 {
		t.Fatal("an empty first entry")
	}
	return rec[16]
}
