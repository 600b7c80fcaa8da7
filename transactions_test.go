package kafkaconsumer

import (
	"fmt"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer/internal/fetch/fetchtest"
)

// newTransactionalProducer returns a transactional producer of its own
// ID to the shared cluster, whose messages name their partition; the
// caller closes it.
func newTransactionalProducer(t *testing.T) sarama.SyncProducer {
	t.Helper()
	producer, err := sarama.NewSyncProducer(kafkaPeers, fetchtest.TransactionalConfig(testKafkaVersion(), uniqueName("txn-producer")))
	if err != nil {
		t.Fatal(err)
	}
	return producer
}

// produceTransactions is fetchtest.ProduceTransactions on the shared
// cluster.
func produceTransactions(t *testing.T, topic string, partitions int32) (committed, aborted []string) {
	t.Helper()
	return fetchtest.ProduceTransactions(t, kafkaPeers, testKafkaVersion(), uniqueName("txn-producer"), topic, partitions)
}

// TestTransactions: a transactional producer's topic, read committed and
// read uncommitted, in single messages and in batches. Read committed
// hands out every committed record and no aborted one; in every case,
// once everything handed out is acked, the committed offset reaches the
// end of each partition, past the aborted records and the markers that
// follow the last message handed out, so that lag reaches 0. The
// committed offsets stayed short of the end (the last acked + 1), for
// good.
func TestTransactions(t *testing.T) {
	parallelClusterTest(t)
	if !testKafkaVersion().IsAtLeast(sarama.V0_11_0_0) {
		t.Skip("transactions need Kafka 0.11")
	}
	const partitions = 4
	client := newTestClient(t)
	admin := newTestAdmin(t, client)
	topic := uniqueName(topicPrefix(t))
	if err := admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: 1}, false); err != nil {
		t.Fatal(err)
	}
	committed, aborted := produceTransactions(t, topic, partitions)
	// The coordinator writes the last ABORT markers after AbortTxn
	// returned: each partition ends at 16 once they are there (4
	// transactions of 3 records and a marker each).
	ends := make(map[int32]int64)
	waitFor(t, 10*time.Second, "the transaction markers", func() bool {
		for p := range int32(partitions) {
			end, err := client.GetOffset(topic, p, sarama.OffsetNewest)
			if err != nil || end != 16 {
				return false
			}
			ends[p] = end
		}
		return true
	})

	for _, isolation := range []sarama.IsolationLevel{sarama.ReadCommitted, sarama.ReadUncommitted} {
		for _, batch := range []int{0, 10} {
			name := fmt.Sprintf("read uncommitted, BatchSize %d", batch)
			if isolation == sarama.ReadCommitted {
				name = fmt.Sprintf("read committed, BatchSize %d", batch)
			}
			config := testConfig()
			config.BatchSize = batch
			config.Consumer.IsolationLevel = isolation
			group := uniqueName("txn")
			c := joinWithCleanup(t, group, TopicSubscription(topic), config)
			received, done := receiveAll(c)
			want := committed
			if isolation == sarama.ReadUncommitted {
				want = append(append([]string(nil), committed...), aborted...)
			}
			if !poll(20*time.Second, func() bool { return received.has(want) }) {
				t.Errorf("%s: received %d of the %d records", name, received.received(want), len(want))
			}
			if isolation == sarama.ReadCommitted {
				if n := received.received(aborted); n > 0 {
					t.Errorf("%s: received %d aborted records", name, n)
				}
			}
			lagZero := poll(10*time.Second, func() bool {
				stats := c.Stats()
				for _, s := range stats {
					if s.Lag != 0 {
						return false
					}
				}
				return len(stats) == partitions
			})
			if !lagZero {
				t.Errorf("%s: lag did not reach 0: %+v", name, c.Stats())
			}
			if err := c.Close(); err != nil {
				t.Errorf("%s: Close() = %v", name, err)
			}
			<-done
			got := waitCommitted(t, client, group, topic, ends)
			for p, end := range ends {
				if got[p] != end {
					t.Errorf("%s: partition %d committed at %d, want its end %d", name, p, got[p], end)
				}
			}
		}
	}
}

// TestTransactionOpenAtStartReadCommittedNewest: a group that starts at
// OffsetNewest while a transaction is open on its partitions, reading
// committed, starts at the last stable offset, before the open
// transaction, as Kafka's clients do; so once that transaction commits,
// its records are handed out, in both modes.
func TestTransactionOpenAtStartReadCommittedNewest(t *testing.T) {
	parallelClusterTest(t)
	if !testKafkaVersion().IsAtLeast(sarama.V0_11_0_0) {
		t.Skip("transactions need Kafka 0.11")
	}
	const partitions = 2
	client := newTestClient(t)
	admin := newTestAdmin(t, client)
	for _, batch := range []int{0, 10} {
		topic := uniqueName(topicPrefix(t))
		if err := admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: 1}, false); err != nil {
			t.Fatal(err)
		}
		producer := newTransactionalProducer(t)
		t.Cleanup(func() { _ = producer.Close() })
		if err := producer.BeginTxn(); err != nil {
			t.Fatal(err)
		}
		var open []string
		var msgs []*sarama.ProducerMessage
		for p := range int32(partitions) {
			for i := range 3 {
				value := fmt.Sprintf("open-%d-p%d-%d", batch, p, i)
				open = append(open, value)
				msgs = append(msgs, &sarama.ProducerMessage{Topic: topic, Partition: p, Value: sarama.StringEncoder(value)})
			}
		}
		if err := producer.SendMessages(msgs); err != nil {
			t.Fatal(err)
		}

		consumerConfig := testConfig()
		consumerConfig.BatchSize = batch
		consumerConfig.Consumer.IsolationLevel = sarama.ReadCommitted
		consumerConfig.Offsets.Initial = sarama.OffsetNewest
		group := uniqueName("txn-open")
		c := joinWithCleanup(t, group, TopicSubscription(topic), consumerConfig)
		received, done := receiveAll(c)
		// The group has started every partition once it committed its
		// starts: only then may the transaction commit.
		waitFor(t, 20*time.Second, "the group's committed starts", func() bool {
			for _, offset := range committedOffsets(t, client, group, topic) {
				if offset < 0 {
					return false
				}
			}
			return true
		})
		if err := producer.CommitTxn(); err != nil {
			t.Fatal(err)
		}
		if !poll(20*time.Second, func() bool { return received.has(open) }) {
			t.Errorf("BatchSize %d: received %d of the %d records of the transaction open at the start",
				batch, received.received(open), len(open))
		}
		if err := c.Close(); err != nil {
			t.Errorf("BatchSize %d: Close() = %v", batch, err)
		}
		<-done
	}
}
