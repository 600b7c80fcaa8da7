package fetch_test

// Records a real broker wrote: produced by sarama in every codec, at
// today's version and at the versions of magic 1 and 0, fetched raw at
// the Fetch versions that return each magic (the broker converts them
// down), and decoded. Needs KAFKA_PEERS (make cluster-up, then
// . .cluster/env); skipped without it, and under -short.

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer/internal/fetch"
	"github.com/kafkaconsumer/kafkaconsumer/internal/fetch/fetchtest"
)

const brokerMessages = 40

// produce creates topic (one partition) and produces brokerMessages
// messages to it with a sarama producer of version in codec: key k<i>,
// a compressible value, a header from 0.11 on.
func produce(t *testing.T, peers []string, topic string, version sarama.KafkaVersion, codec sarama.CompressionCodec) {
	t.Helper()
	admin := sarama.NewConfig()
	admin.Version = sarama.V2_7_0_0
	ca, err := sarama.NewClusterAdmin(peers, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ca.Close() }()
	if err := ca.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1}, false); err != nil {
		t.Fatalf("create %s: %v", topic, err)
	}
	conf := sarama.NewConfig()
	conf.Version = version
	conf.Producer.Compression = codec
	conf.Producer.Return.Successes = true
	conf.Producer.Flush.Messages = 10 // several batches
	conf.Producer.Flush.Frequency = time.Second
	p, err := sarama.NewSyncProducer(peers, conf)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Close() }()
	msgs := make([]*sarama.ProducerMessage, brokerMessages)
	for i := range msgs {
		msgs[i] = &sarama.ProducerMessage{Topic: topic, Partition: 0, Key: sarama.StringEncoder(fmt.Sprintf("k%d", i)), Value: sarama.ByteEncoder(value(i))}
		if version.IsAtLeast(sarama.V0_11_0_0) {
			msgs[i].Headers = []sarama.RecordHeader{{Key: []byte("h"), Value: fmt.Appendf(nil, "%d", i)}}
		}
	}
	for i := 0; i < len(msgs); i += 10 {
		if err := p.SendMessages(msgs[i : i+10]); err != nil {
			t.Fatalf("produce to %s: %v", topic, err)
		}
	}
}

func value(i int) []byte {
	return bytes.Repeat(fmt.Appendf(nil, "value %d ", i), 20)
}

// fetchAll fetches topic's partition 0 from offset at Fetch version until
// it has every message up to brokerMessages, and returns what it
// decoded.
// Each response's first batch is checked to be of magic and codec.
func fetchAll(t *testing.T, c *fetchtest.Conn, version int16, topic string, from int64, magic int, codec sarama.CompressionCodec) []*sarama.ConsumerMessage {
	t.Helper()
	var msgs []*sarama.ConsumerMessage
	deadline := time.Now().Add(30 * time.Second)
	for offset := from; offset < brokerMessages; {
		if time.Now().After(deadline) {
			t.Fatalf("Fetch v%d of %s: %d messages after 30s, want %d", version, topic, len(msgs), brokerMessages-from)
		}
		body, err := c.Send(fetchtest.FetchRequest(version, topic, 0, offset, 1<<20, false))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := fetch.ReadResponse(version, body)
		if err != nil {
			t.Fatal(err)
		}
		p := &resp.Partitions[0]
		if p.Err != sarama.ErrNoError {
			t.Fatalf("Fetch v%d of %s: %v", version, topic, p.Err)
		}
		if m, c, ok := firstBatch(p.Records); ok && (m != magic || c != codec) {
			t.Fatalf("Fetch v%d of %s: a batch of magic %d in %s, want magic %d in %s", version, topic, m, c, magic, codec)
		}
		r, err := fetch.Decode(p, offset, false)
		if err != nil {
			t.Fatalf("Fetch v%d of %s from %d: %v", version, topic, offset, err)
		}
		msgs = append(msgs, r.Messages...)
		offset = r.Next
	}
	return msgs
}

// dialBroker connects to the broker at addr for the test, and returns the
// lowest and highest Fetch versions it takes (up to 12: topics by name).
func dialBroker(t *testing.T, addr string) (c *fetchtest.Conn, lowest, highest int16) {
	t.Helper()
	c, err := fetchtest.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if lowest, highest, err = c.Versions(1); err != nil {
		t.Fatal(err)
	}
	return c, lowest, min(highest, 12)
}

func TestDecodeBrokerRecords(t *testing.T) {
	peers := fetchtest.KafkaPeers(t)
	c, lowest, highest := dialBroker(t, peers[0])
	produceLowest, _, err := c.Versions(0)
	if err != nil {
		t.Fatal(err)
	}
	run := rand.Uint32()
	codecs := map[string]sarama.CompressionCodec{"none": sarama.CompressionNone, "gzip": sarama.CompressionGZIP,
		"snappy": sarama.CompressionSnappy, "lz4": sarama.CompressionLZ4, "zstd": sarama.CompressionZSTD}
	// Kafka 4 takes no Produce request below v3 (magic 2), though its
	// ApiVersions says v0 (for librdkafka, KAFKA-18659), nor Fetch below
	// v4; Kafka before 2.1 (Fetch v10) has no zstd.
	for _, produced := range []struct {
		magic   int
		version sarama.KafkaVersion
		produce int16 // the Produce version sarama sends at version
	}{{2, sarama.V2_7_0_0, 3}, {1, sarama.V0_10_0_0, 2}, {0, sarama.V0_8_2_0, 0}} {
		if produced.produce < produceLowest || (produced.magic < 2 && lowest >= 4) {
			continue
		}
		for name, codec := range codecs {
			switch {
			case codec == sarama.CompressionZSTD && (produced.magic < 2 || highest < 10),
				codec == sarama.CompressionLZ4 && produced.magic < 1:
				continue // sarama's producer or the broker has no such combination
			}
			topic := fmt.Sprintf("decode-%d-m%d-%s", run, produced.magic, name)
			produce(t, peers, topic, produced.version, codec)
			// Fetch v12 returns the record batches the broker holds; v3
			// and v1 return them converted to magic 1 and 0 (Kafka 3 and
			// earlier), in the same codec.
			for _, fetched := range []struct {
				magic   int
				version int16
			}{{2, highest}, {1, 3}, {0, 1}} {
				if fetched.version < lowest || (codec == sarama.CompressionZSTD && fetched.magic < 2) {
					continue
				}
				t.Run(fmt.Sprintf("produced magic %d %s, fetched v%d", produced.magic, name, fetched.version), func(t *testing.T) {
					for _, from := range []int64{0, 7} {
						msgs := fetchAll(t, c, fetched.version, topic, from, fetched.magic, codec)
						checkBrokerMessages(t, msgs, topic, from, produced.magic >= 2 && fetched.magic >= 2, fetched.magic >= 1 && produced.magic >= 1)
					}
				})
			}
		}
	}
}

// firstBatch returns the magic and codec of the first batch or message
// of records.
func firstBatch(records []byte) (magic int, codec sarama.CompressionCodec, ok bool) {
	if len(records) < 23 {
		return 0, 0, false
	}
	magic = int(records[16])
	if magic == 2 {
		return magic, sarama.CompressionCodec(records[22] & 7), true
	}
	return magic, sarama.CompressionCodec(records[17] & 7), true
}

// TestDecodeBrokerTruncated fetches a partition with a PartitionMaxBytes
// that ends inside its second batch: the broker cuts the batch there, and
// Decode returns the first batch's messages and Partial, no error.
func TestDecodeBrokerTruncated(t *testing.T) {
	peers := fetchtest.KafkaPeers(t)
	topic := fmt.Sprintf("decode-%d-truncated", rand.Uint32())
	produce(t, peers, topic, sarama.V2_7_0_0, sarama.CompressionNone)
	c, _, version := dialBroker(t, peers[0])
	whole := fetchAll(t, c, version, topic, 0, 2, sarama.CompressionNone)
	body, err := c.Send(fetchtest.FetchRequest(version, topic, 0, 0, 1<<20, false))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := fetch.ReadResponse(version, body)
	if err != nil {
		t.Fatal(err)
	}
	records := resp.Partitions[0].Records
	first := 12 + int(int32(records[8])<<24|int32(records[9])<<16|int32(records[10])<<8|int32(records[11]))
	body, err = c.Send(fetchtest.FetchRequest(version, topic, 0, 0, int32(first+40), false))
	if err != nil {
		t.Fatal(err)
	}
	if resp, err = fetch.ReadResponse(version, body); err != nil {
		t.Fatal(err)
	}
	p := &resp.Partitions[0]
	if len(p.Records) != first+40 {
		t.Fatalf("the broker sent %d bytes, want %d (the first batch and 40 bytes of the second)", len(p.Records), first+40)
	}
	r, err := fetch.Decode(p, 0, false)
	if err != nil || !r.Partial || r.Next != 10 || len(r.Messages) != 10 || r.Wire != first+40 {
		t.Fatalf("%d messages, Next %d, Partial %t, Wire %d, err %v; want 10, 10, true, %d, nil", len(r.Messages), r.Next, r.Partial, r.Wire, err, first+40)
	}
	for i, m := range r.Messages {
		if !bytes.Equal(m.Value, whole[i].Value) || m.Offset != whole[i].Offset {
			t.Errorf("message %d differs from the whole fetch's", i)
		}
	}
}

func checkBrokerMessages(t *testing.T, msgs []*sarama.ConsumerMessage, topic string, from int64, headers, timestamps bool) {
	t.Helper()
	if len(msgs) != brokerMessages-int(from) {
		t.Fatalf("from %d: %d messages, want %d", from, len(msgs), brokerMessages-int(from))
	}
	for i, m := range msgs {
		o := from + int64(i)
		if m.Offset != o || m.Topic != topic || m.Partition != 0 || string(m.Key) != fmt.Sprintf("k%d", o) || !bytes.Equal(m.Value, value(int(o))) {
			t.Fatalf("message %d: %s/%d@%d key %q, value %q", i, m.Topic, m.Partition, m.Offset, m.Key, m.Value)
		}
		if headers && (len(m.Headers) != 1 || string(m.Headers[0].Key) != "h" || string(m.Headers[0].Value) != fmt.Sprint(o)) {
			t.Errorf("offset %d: headers %v", o, m.Headers)
		}
		if ts := m.Timestamp; timestamps != (ts.After(time.Now().Add(-time.Hour)) && ts.Before(time.Now().Add(time.Minute))) {
			t.Errorf("offset %d: timestamp %s (want a time of this hour: %t)", o, ts, timestamps)
		}
	}
}
