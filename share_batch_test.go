package kafkaconsumer

// Batches of a share group's consumer (GroupProtocolShare with
// Config.BatchSize): the batch assembly of a fetch loop, and, on a real
// KRaft cluster of Kafka 4.2 or later, what a member hands out on Batches.

import (
	"reflect"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestShareBatchAssembly: a batch is the records of the queue's first
// partition at its head, in order, up to BatchSize; handed out, each
// record is marked so and leaves the queue, and the next batch starts
// where it ended.
func TestShareBatchAssembly(t *testing.T) {
	t.Parallel()
	sc := newUnitShareConsumer()
	sc.config.BatchSize = 3
	sc.batches = make(chan *Batch, 10)
	sc.ids = map[string][16]byte{"t": {1}}
	f := newShareFetcher(sc, 0)
	deadline := time.Now().Add(time.Minute)
	for _, part := range []int32{0, 1} {
		var msgs []*sarama.ConsumerMessage
		for o := int64(0); o < 4; o++ {
			msgs = append(msgs, &sarama.ConsumerMessage{Topic: "t", Partition: part, Offset: o})
		}
		f.queueAcquired(tidp{[16]byte{1}, part}, msgs, []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord{{FirstOffset: 0, LastOffset: 3, DeliveryCount: 1}}, deadline)
	}
	type got struct {
		partition int32
		offsets   []int64
	}
	var batches []got
	for len(f.queue) > 0 {
		f.handOutBatch()
		b := <-sc.batches
		g := got{partition: b.Partition}
		for _, msg := range b.Messages {
			g.offsets = append(g.offsets, msg.Offset)
			if msg.Partition != b.Partition || msg.Topic != b.Topic {
				t.Errorf("message %s/%d in a batch of %s/%d", msg.Topic, msg.Partition, b.Topic, b.Partition)
			}
			if r := sc.held[msg]; r == nil || !r.handedOut.Load() {
				t.Errorf("%d/%d handed out in a batch but held as %+v", msg.Partition, msg.Offset, r)
			}
		}
		batches = append(batches, g)
	}
	want := []got{{0, []int64{0, 1, 2}}, {0, []int64{3}}, {1, []int64{0, 1, 2}}, {1, []int64{3}}}
	if !reflect.DeepEqual(batches, want) {
		t.Errorf("batches %v, want %v", batches, want)
	}
	if s := sc.counts(TopicPartition{Topic: "t", Partition: 1}); s.handedOut.Load() != 4 || s.lastHandedOut.Load() != 3 {
		t.Errorf("partition 1 counted %d handed out, the last %d; want 4, 3", s.handedOut.Load(), s.lastHandedOut.Load())
	}
}

// TestShareBatchesChannels: with BatchSize, Messages of a share consumer
// is a closed channel and Processing says it hands out batches; without,
// Batches is closed and Processing says messages.
func TestShareBatchesChannels(t *testing.T) {
	t.Parallel()
	config := shareConfig()
	config.BatchSize = 5
	if err := config.Validate(); err != nil {
		t.Fatalf("Validate of a share group with BatchSize = %s, want nil", err)
	}
	sc := newUnitShareConsumer()
	sc.config.BatchSize = 5
	sc.setChannels()
	if _, open := <-sc.Messages(); open {
		t.Error("Messages of a share consumer set to batches is open")
	}
	if sc.Batches() == nil || !sc.Processing().Batches() {
		t.Error("a share consumer set to batches: no Batches channel, or Processing().Batches() false")
	}
	single := newUnitShareConsumer()
	single.setChannels()
	if _, open := <-single.Batches(); open {
		t.Error("Batches of a share consumer of single messages is open")
	}
	if single.Processing().Batches() {
		t.Error("Processing().Batches() of a share consumer of single messages is true")
	}
}
