package fetchtest

// The tests' cluster: its brokers (KAFKA_PEERS, from make cluster-up,
// then . .cluster/env), topics of a test's own on it, and what the tests
// produce to them.

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer/internal/testcluster"
)

// KafkaPeers returns the test cluster's brokers, from KAFKA_PEERS. It
// skips t under -short, or when KAFKA_PEERS is not set.
func KafkaPeers(t testing.TB) []string {
	t.Helper()
	peers := os.Getenv("KAFKA_PEERS")
	if testing.Short() || peers == "" {
		t.Skip("needs KAFKA_PEERS (make cluster-up, then . .cluster/env)")
	}
	return strings.Split(peers, ",")
}

// KafkaVersion returns the brokers' Kafka release as sarama knows it:
// $KAFKA_VERSION (make cluster-up writes it to .cluster/env), else
// testcluster.DefaultKafkaVersion. It fails t when sarama does not know
// it.
func KafkaVersion(t testing.TB) sarama.KafkaVersion {
	t.Helper()
	kafka, _ := testcluster.VersionsFromEnv()
	v, err := sarama.ParseKafkaVersion(kafka)
	if err != nil {
		t.Fatalf("%s=%q: %s", testcluster.KafkaVersionEnv, kafka, err)
	}
	return v
}

// Client returns a client of peers at KafkaVersion, closed when t ends.
func Client(t testing.TB, peers []string) sarama.Client {
	t.Helper()
	conf := sarama.NewConfig()
	conf.Version = KafkaVersion(t)
	conf.Admin.Timeout = 30 * time.Second // a loaded machine outlasts sarama's 3 s
	client, err := sarama.NewClient(peers, conf)
	if err != nil {
		t.Fatalf("connect to kafka: %s", err)
	}
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// Topic creates a topic of the test's own of partitions partitions
// (entries its configuration, nil for none), and returns its name once
// the leader of every partition answers for it (a ListOffsets succeeds).
func Topic(t testing.TB, client sarama.Client, partitions int32, entries map[string]*string) string {
	t.Helper()
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		t.Fatalf("admin: %s", err)
	}
	topic := fmt.Sprintf("%s.%d.%06d", strings.Map(topicRune, t.Name()), time.Now().UnixNano()%1e9, rand.IntN(1e6))
	detail := &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: 1, ConfigEntries: entries}
	if err := admin.CreateTopic(topic, detail, false); err != nil {
		t.Fatalf("create topic %s: %s", topic, err)
	}
	var last error
	WaitFor(t, 30*time.Second, "the leaders of "+topic, func() bool {
		if last = client.RefreshMetadata(topic); last != nil {
			return false
		}
		for p := range partitions {
			if _, last = client.GetOffset(topic, p, sarama.OffsetNewest); last != nil {
				return false
			}
		}
		return true
	})
	return topic
}

// topicRune maps a rune of a test's name to one that Kafka allows in a
// topic's name.
func topicRune(r rune) rune {
	switch {
	case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-':
		return r
	}
	return '-'
}

// WaitFor polls cond until it holds, failing t with what after timeout.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Poll(timeout, cond) {
		t.Fatalf("timed out after %s waiting for %s", timeout, what)
	}
}

// Poll polls cond until it holds or timeout passes, and reports whether
// it held.
func Poll(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond) // polling interval, not synchronisation
	}
	return true
}

// BatchingProducerConfig returns the configuration of a producer of
// Kafka version that writes with codec in batches of 10 messages, to the
// partitions the messages name, one request at a time, every replica
// acknowledging.
func BatchingProducerConfig(version sarama.KafkaVersion, codec sarama.CompressionCodec) *sarama.Config {
	config := sarama.NewConfig()
	config.Version = version
	config.Producer.Compression = codec
	config.Producer.Return.Successes = true
	config.Producer.Partitioner = sarama.NewManualPartitioner
	config.Producer.Flush.Messages = 10
	config.Producer.Flush.MaxMessages = 10
	config.Producer.Flush.Frequency = 50 * time.Millisecond
	config.Producer.RequiredAcks = sarama.WaitForAll
	config.Net.MaxOpenRequests = 1
	return config
}

// ProduceCompressed writes perPartition messages to each of topic's
// partitions with an idempotent producer of version and codec, in record
// batches of up to 10, and returns the values of each partition in the
// order written.
func ProduceCompressed(t testing.TB, peers []string, version sarama.KafkaVersion, topic string, partitions int32, perPartition int, codec sarama.CompressionCodec) map[int32][]string {
	t.Helper()
	config := BatchingProducerConfig(version, codec)
	// Idempotent: a batch that the producer sends again (its answer was
	// lost) is written once, so the log holds exactly what was sent.
	config.Producer.Idempotent = true
	producer, err := sarama.NewSyncProducer(peers, config)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = producer.Close() }()
	values := make(map[int32][]string)
	var msgs []*sarama.ProducerMessage
	for p := range partitions {
		for i := range perPartition {
			// Compressible, and different in each message.
			value := fmt.Sprintf("%s-%d-%d-%s", codec, p, i, strings.Repeat("abcd", 25))
			values[p] = append(values[p], value)
			msgs = append(msgs, &sarama.ProducerMessage{Topic: topic, Partition: p, Key: sarama.StringEncoder(fmt.Sprint(i)), Value: sarama.StringEncoder(value)})
		}
	}
	if err := producer.SendMessages(msgs); err != nil {
		t.Fatalf("produce with %s: %s", codec, err)
	}
	return values
}

// TransactionalConfig returns the configuration of a transactional
// producer of version, transactional ID id, whose messages name their
// partition.
func TransactionalConfig(version sarama.KafkaVersion, id string) *sarama.Config {
	config := sarama.NewConfig()
	config.Version = version
	config.Producer.Idempotent = true
	config.Producer.Transaction.ID = id
	config.Producer.RequiredAcks = sarama.WaitForAll
	config.Producer.Return.Successes = true
	config.Producer.Partitioner = sarama.NewManualPartitioner
	config.Net.MaxOpenRequests = 1
	return config
}

// ProduceTransactions writes to each of topic's partitions with a
// transactional producer of version (transactional ID id): a committed
// transaction, an aborted one, a committed one and, last, an aborted
// one, of three records per partition each. The log of each partition
// then ends in aborted records and their ABORT marker. It returns the
// committed values and the aborted ones.
func ProduceTransactions(t testing.TB, peers []string, version sarama.KafkaVersion, id, topic string, partitions int32) (committed, aborted []string) {
	t.Helper()
	producer, err := sarama.NewSyncProducer(peers, TransactionalConfig(version, id))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = producer.Close() }()
	for txn, commit := range []bool{true, false, true, false} {
		if err := producer.BeginTxn(); err != nil {
			t.Fatal(err)
		}
		var msgs []*sarama.ProducerMessage
		for p := range partitions {
			for i := range 3 {
				value := fmt.Sprintf("txn%d-p%d-%d", txn, p, i)
				msgs = append(msgs, &sarama.ProducerMessage{Topic: topic, Partition: p, Value: sarama.StringEncoder(value)})
				if commit {
					committed = append(committed, value)
				} else {
					aborted = append(aborted, value)
				}
			}
		}
		if err := producer.SendMessages(msgs); err != nil {
			t.Fatal(err)
		}
		end := producer.AbortTxn
		if commit {
			end = producer.CommitTxn
		}
		if err := end(); err != nil {
			t.Fatal(err)
		}
	}
	return committed, aborted
}
