package kafkaconsumer

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer/internal/fetch/fetchtest"
)

// produceCompressed is fetchtest.ProduceCompressed on the shared
// cluster.
func produceCompressed(t *testing.T, topic string, partitions int32, perPartition int, codec sarama.CompressionCodec) map[int32][]string {
	t.Helper()
	return fetchtest.ProduceCompressed(t, kafkaPeers, testKafkaVersion(), topic, partitions, perPartition, codec)
}

// partitionBatches fetches the record batches of topic's partition 0
// from its leader, as they are in the log (the first MiB of it).
func partitionBatches(t *testing.T, client sarama.Client, topic string) []*sarama.RecordBatch {
	t.Helper()
	leader, err := client.Leader(topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	conf := sarama.NewConfig()
	conf.Version = testKafkaVersion()
	version, _ := fetchVersion(conf) // Kafka refuses zstd batches to Fetch before v10
	req := &sarama.FetchRequest{MaxWaitTime: 100, MinBytes: 1, MaxBytes: 1 << 20, Version: version}
	if version >= 7 {
		req.SessionID, req.SessionEpoch = 0, -1 // no fetch session
	}
	req.AddBlock(topic, 0, 0, 1<<20, -1)
	resp, err := leader.Fetch(req)
	if err != nil {
		t.Fatal(err)
	}
	block := resp.GetBlock(topic, 0)
	if block == nil || !errors.Is(block.Err, sarama.ErrNoError) {
		t.Fatalf("fetch %s/0: %+v", topic, block)
	}
	var batches []*sarama.RecordBatch
	for _, records := range block.RecordsSet {
		if records.RecordBatch != nil {
			batches = append(batches, records.RecordBatch)
		}
	}
	return batches
}

// partitionLog records the values a consumer hands out, per partition, in
// the order it hands them out.
type partitionLog struct {
	mu     sync.Mutex
	values map[TopicPartition][]string
}

func (pl *partitionLog) add(msg *sarama.ConsumerMessage) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	tp := TopicPartition{msg.Topic, msg.Partition}
	pl.values[tp] = append(pl.values[tp], string(msg.Value))
}

// of returns a copy of what partition tp handed out.
func (pl *partitionLog) of(tp TopicPartition) []string {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	return slices.Clone(pl.values[tp])
}

// receiveInOrder receives and acks every message of c, single or in
// batches (Config.BatchSize), until c closes them, recording them per
// partition; done is closed when it ends.
func receiveInOrder(c Consumer) (log *partitionLog, done <-chan struct{}) {
	log = &partitionLog{values: make(map[TopicPartition][]string)}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		if c.(*consumerManager).config.BatchSize == 0 {
			for msg := range c.Messages() {
				log.add(msg)
				c.Ack(msg)
			}
			return
		}
		for b := range c.Batches() {
			for _, msg := range b.Messages {
				log.add(msg)
			}
			c.AckBatch(b)
		}
	}()
	return log, ended
}

// TestCompressionCodecs: record batches of every compression codec that
// sarama supports (none, gzip, snappy, lz4 and, from Kafka 2.1, zstd),
// several messages each, are decoded by the fetch engine: every message
// arrives once, in order per partition, single and in batches.
func TestCompressionCodecs(t *testing.T) {
	parallelClusterTest(t)
	const (
		partitions   = 2
		perPartition = 200
	)
	codecs := []sarama.CompressionCodec{sarama.CompressionNone, sarama.CompressionGZIP, sarama.CompressionSnappy, sarama.CompressionLZ4}
	if testKafkaVersion().IsAtLeast(sarama.V2_1_0_0) {
		codecs = append(codecs, sarama.CompressionZSTD)
	} else {
		t.Logf("zstd left out: it needs Kafka 2.1, not %s", testKafkaVersion())
	}
	client := newTestClient(t)
	want := make(map[TopicPartition][]string)
	var topics []string
	for _, codec := range codecs {
		topic := newTopic(t, partitions)
		topics = append(topics, topic)
		for p, values := range produceCompressed(t, topic, partitions, perPartition, codec) {
			want[TopicPartition{topic, p}] = values
		}
		// The test shows something only if the log holds batches of the
		// codec with several records.
		batches := partitionBatches(t, client, topic)
		most, records := 0, 0
		for _, rb := range batches {
			if rb.Codec != codec {
				t.Fatalf("%s: a batch of %s has codec %s", codec, topic, rb.Codec)
			}
			most = max(most, len(rb.Records))
			records += len(rb.Records)
		}
		if records != perPartition {
			t.Fatalf("%s: the log of %s/0 holds %d records, %d were produced", codec, topic, records, perPartition)
		}
		if most < 2 {
			t.Fatalf("%s: the %d batches of %s/0 hold %d records at the most, want several", codec, len(batches), topic, most)
		}
		t.Logf("%s: %d messages in %d partitions; partition 0 in %d batches of up to %d records", codec, partitions*perPartition, partitions, len(batches), most)
	}

	for _, batch := range []int{0, 10} {
		config := testConfig()
		config.BatchSize = batch
		c := joinWithCleanup(t, uniqueName("codecs"), TopicSubscription(topics...), config)
		got, done := receiveInOrder(c)
		complete := func() bool {
			for tp, values := range want {
				if len(got.of(tp)) < len(values) {
					return false
				}
			}
			return true
		}
		if !poll(30*time.Second, complete) {
			t.Errorf("BatchSize %d: not every message arrived within 30 s", batch)
		}
		if err := c.Close(); err != nil {
			t.Errorf("BatchSize %d: Close() = %v", batch, err)
		}
		<-done
		for i, topic := range topics {
			for p := range int32(partitions) {
				tp := TopicPartition{topic, p}
				if values := got.of(tp); !slices.Equal(values, want[tp]) {
					t.Errorf("BatchSize %d, %s: partition %d handed out %d messages, want the %d produced in order (first difference at %d)",
						batch, codecs[i], p, len(values), len(want[tp]), firstDifference(values, want[tp]))
				}
			}
		}
	}
}

// firstDifference returns the first index at which a and b differ.
func firstDifference(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
