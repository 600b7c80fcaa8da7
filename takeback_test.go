package kafkaconsumer

// A revoked partition's take-back of what it left unread in the shared
// channel, against the real cluster: with a slow user, the instance that
// lets a partition go delivers none of its messages after the release,
// while the next owner consumes them from the committed offset.

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// TestIntegrationRevokedPartitionTakesBackUnread: instance A's user acks
// its first messages, then reads nothing for longer than
// MaxProcessingTime while B joins and one of A's two partitions moves to
// B. A's stop of that partition waits MaxProcessingTime for the acks of
// what it handed out, then must take back what sits unread in A's channel
// before it releases the claim: when A's user reads again, after the
// release, it must receive nothing of the partition, which B consumes
// from A's commit (the acked messages are not consumed again, none of the
// others is lost). The partition A keeps comes out complete, in order.
// In both modes: single messages (the channel holds every message
// produced) and batches (up to 4 batches wait in it).
func TestIntegrationRevokedPartitionTakesBackUnread(t *testing.T) {
	parallelClusterTest(t)
	for _, tc := range []struct {
		name      string
		batchSize int
	}{
		{"messages", 0},
		{"batches", 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parallelClusterTest(t)
			testRevokedPartitionTakesBackUnread(t, tc.batchSize)
		})
	}
}

func testRevokedPartitionTakesBackUnread(t *testing.T, batchSize int) {
	const acked, unread = 2, 50 // per partition
	topic := newTopic(t, 2)
	debugLogs(t)
	client := newTestClient(t)
	group := uniqueName("it.revoke")
	start := startGroupAt(t, client, group, topic)[topic]

	var mu sync.Mutex
	released := make(map[int32]bool) // the partitions A released
	hooks := &testHooks{releasePartition: func(_ string, p int32) error {
		mu.Lock()
		defer mu.Unlock()
		released[p] = true
		return nil
	}}
	config := testConfig()
	config.MaxProcessingTime = time.Second
	config.BatchSize = batchSize
	if batchSize > 0 {
		config.BatchLinger = 100 * time.Millisecond // full batches
	}
	a := joinWithHooksCleanup(t, group, TopicSubscription(topic), config, hooks)
	waitAllClaimed(t, a, 2, 30*time.Second, "A")

	// A's user: receive returns the next message, or the next batch's
	// messages, acked; none when wait passes first.
	messages, batches := a.Messages(), a.Batches()
	if batchSize > 0 {
		messages = nil // closed
	} else {
		batches = nil
	}
	receive := func(wait time.Duration) []*sarama.ConsumerMessage {
		timer := time.NewTimer(wait)
		defer timer.Stop()
		select {
		case msg := <-messages:
			a.Ack(msg)
			return []*sarama.ConsumerMessage{msg}
		case b := <-batches:
			a.AckBatch(b)
			return b.Messages
		case <-timer.C:
			return nil
		}
	}
	produce(t, client, topic, group+".acked", 2*acked)
	for n := 0; n < 2*acked; {
		got := receive(30 * time.Second)
		if len(got) == 0 {
			t.Fatalf("A received %d of the first %d messages within 30 s", n, 2*acked)
		}
		n += len(got)
	}

	// The user stops reading; the channel fills. In the messages mode it
	// holds every message (ChannelBufferSize 256); in the batches mode,
	// two full batches of each partition, while the rest waits in the
	// partition managers.
	if batchSize == 0 {
		produceTo(t, topic, 0, group+".unread", unread)
		produceTo(t, topic, 1, group+".unread", unread)
		waitFor(t, 30*time.Second, "A's channel to hold every message", func() bool { return len(messages) == 2*unread })
	} else {
		for p := range int32(2) {
			produceTo(t, topic, p, group+".unread", 2*batchSize)
			waitFor(t, 30*time.Second, fmt.Sprintf("two batches of partition %d in A's channel", p), func() bool { return len(batches) == 2*int(p+1) })
		}
		for p := range int32(2) {
			produceTo(t, topic, p, group+".unread", unread-2*batchSize)
		}
	}

	b := joinWithCleanup(t, group, TopicSubscription(topic), testConfig())
	bLog := &deliveryLog{done: make(chan struct{})}
	bLog.record(b)
	var moved int32
	waitFor(t, 30*time.Second, "A to release a partition", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for p := range released {
			moved = p
			return true
		}
		return false
	})
	kept := 1 - moved
	waitFor(t, 30*time.Second, "B to consume the moved partition's unread messages", func() bool {
		n := 0
		deliveries, _ := bLog.snapshot()
		for _, d := range deliveries {
			if d.partition == moved {
				n++
			}
		}
		return n >= unread
	})

	// A's user reads again, after the release, until it has the kept
	// partition's unread messages.
	var late []*sarama.ConsumerMessage // of the moved partition
	next := start[kept] + acked
	for next < start[kept]+acked+unread {
		got := receive(30 * time.Second)
		if len(got) == 0 {
			t.Fatalf("A's kept partition %d: offset %d not received within 30 s", kept, next)
		}
		for _, msg := range got {
			switch {
			case msg.Partition == moved:
				late = append(late, msg)
			case msg.Offset != next:
				t.Fatalf("A's kept partition %d: offset %d received where %d was due", kept, msg.Offset, next)
			default:
				next++
			}
		}
	}
	for len(messages)+len(batches) > 0 { // what is left
		for _, msg := range receive(time.Second) {
			if msg.Partition == moved {
				late = append(late, msg)
			}
		}
	}

	deliveries, _ := bLog.snapshot()
	byB := make(map[int64]int)
	for _, d := range deliveries {
		if d.partition == moved {
			byB[d.offset]++
		}
	}
	both := 0
	for _, msg := range late {
		if byB[msg.Offset] > 0 {
			both++
		}
	}
	if len(late) > 0 {
		t.Errorf("A delivered %d messages of partition %d after it released the claim (offsets %d to %d); %d of them B delivered too",
			len(late), moved, late[0].Offset, late[len(late)-1].Offset, both)
	}
	// B starts at A's commit: after the acked messages, none lost.
	for o := start[moved]; o < start[moved]+acked+unread; o++ {
		want := 1
		if o < start[moved]+acked {
			want = 0
		}
		if byB[o] != want {
			t.Errorf("B delivered offset %d of partition %d %d times; want %d", o, moved, byB[o], want)
		}
	}
}

// produceTo writes n messages with the values prefix-0 ... prefix-(n-1) to
// partition p of topic.
func produceTo(t testing.TB, topic string, p int32, prefix string, n int) {
	t.Helper()
	config := sarama.NewConfig()
	config.Version = testKafkaVersion()
	config.Producer.Return.Successes = true
	config.Producer.RequiredAcks = sarama.WaitForAll
	config.Producer.Partitioner = sarama.NewManualPartitioner
	producer, err := sarama.NewSyncProducer(kafkaPeers, config)
	if err != nil {
		t.Fatalf("producer: %s", err)
	}
	defer producer.Close()
	msgs := make([]*sarama.ProducerMessage, n)
	for i := range msgs {
		msgs[i] = &sarama.ProducerMessage{Topic: topic, Partition: p, Value: sarama.StringEncoder(fmt.Sprintf("%s-%d-%d", prefix, p, i))}
	}
	if err := producer.SendMessages(msgs); err != nil {
		t.Fatalf("produce %d messages to %s/%d: %s", n, topic, p, err)
	}
}
