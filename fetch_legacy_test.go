package kafkaconsumer

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer/internal/fetch"
)

// TestPartitionFetcherLegacyBroker: the engine consumes the legacy
// message sets a real broker wrote (magic 0 and 1: a topic of
// message.format.version 0.9.0 or 0.10.2, which brokers before Kafka 3.0
// honour), plain and gzip-compressed (wrapper messages), itself: every
// message in order, its key and value, without handing the partition to
// sarama's partition consumer.
func TestPartitionFetcherLegacyBroker(t *testing.T) {
	parallelClusterTest(t)
	if testKafkaVersion().IsAtLeast(sarama.V3_0_0_0) {
		t.Skip("Kafka 3 writes record batches whatever the topic's message.format.version")
	}
	client := newTestClient(t)
	admin := newTestAdmin(t, client)
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
			topic := uniqueName(topicPrefix(t))
			entries := map[string]*string{"message.format.version": ptr(tc.format)}
			if err := admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1, ConfigEntries: entries}, false); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 30*time.Second, "the topic's leader", func() bool {
				_, err := client.GetOffset(topic, 0, sarama.OffsetNewest)
				return err == nil
			})
			values := produceLegacy(t, topic, 30, tc.codec)
			if magic := firstMagic(t, client, topic); magic != tc.magic {
				t.Fatalf("the broker wrote magic %d, want %d", magic, tc.magic)
			}

			conf := sarama.NewConfig()
			conf.Version = testKafkaVersion()
			fc, err := sarama.NewClient(kafkaPeers, conf)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = fc.Close() }()
			version, _ := fetchVersion(conf)
			hub := newFetchHub(fc, conf, version, &fetchBudget{}, nil)
			defer hub.close()
			f := startPartitionFetcher(hub, TopicPartition{topic, 0}, 3)
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
					got = append(got, s.msgs...)
					f.taken(s)
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
// topic with codec, in batches of 10, and returns their values.
func produceLegacy(t *testing.T, topic string, n int, codec sarama.CompressionCodec) []string {
	t.Helper()
	config := batchingProducerConfig(codec)
	producer, err := sarama.NewSyncProducer(kafkaPeers, config)
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
	resp, err := fetch.ReadResponse(version, body)
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
