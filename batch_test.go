package kafkaconsumer

// Batches and Pause/Resume with sarama's parts faked: batch sizes, the
// linger, the cut at MaxPendingAcks, AckBatch, a paused partition, and
// the channel of the other kind.

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// batchManager is fakeManager with the Batches channel, its partition
// manager published, consuming pc until the test ends.
func batchManager(t *testing.T, config *Config, pc *fakePartitionConsumer) (*consumerManager, *partitionManager) {
	t.Helper()
	cm, pm := fakeManager(config, nil)
	cm.batches = make(chan *Batch, batchBuffer)
	cm.closedMessages = make(chan *sarama.ConsumerMessage)
	close(cm.closedMessages)
	cm.closedBatches = make(chan *Batch)
	close(cm.closedBatches)
	cm.pms.Store(&partitionManagers{pm.tp: pm})
	manageOffsets(pm, -1)
	ended := make(chan consumeEnd, 1)
	go func() { ended <- pm.consume(pc) }()
	t.Cleanup(func() {
		pm.t.Kill(nil)
		receiveWithin(t, ended, "end of consume after the kill")
	})
	return cm, pm
}

// feed sends the messages of offsets [from, to) of t/0 to pc.
func feed(pc *fakePartitionConsumer, from, to int64) {
	for o := from; o < to; o++ {
		pc.messages <- &sarama.ConsumerMessage{Topic: "t", Partition: 0, Offset: o}
	}
}

// offsetsOf returns the offsets of a batch's messages.
func offsetsOf(b *Batch) []int64 {
	var offsets []int64
	for _, msg := range b.Messages {
		offsets = append(offsets, msg.Offset)
	}
	return offsets
}

// checkBatch checks that b holds t/0's offsets [from, to).
func checkBatch(t *testing.T, b *Batch, from, to int64) {
	t.Helper()
	got := offsetsOf(b)
	ok := b.Topic == "t" && b.Partition == 0 && int64(len(got)) == to-from
	for i, o := range got {
		ok = ok && o == from+int64(i)
	}
	if !ok {
		t.Fatalf("batch %s/%d %v; want t/0 offsets [%d, %d)", b.Topic, b.Partition, got, from, to)
	}
}

func batchConfig(size int, linger time.Duration) *Config {
	config := NewConfig()
	config.BatchSize = size
	config.BatchLinger = linger
	return config
}

// TestBatchesUpToBatchSize: what the partition has ready goes out in
// batches of at most BatchSize, in offset order.
func TestBatchesUpToBatchSize(t *testing.T) {
	verifyNoLeaks(t)
	pc := newFakePartitionConsumer(16)
	feed(pc, 0, 10)
	cm, _ := batchManager(t, batchConfig(4, 0), pc)
	var next int64
	for next < 10 {
		b := receiveWithin(t, (<-chan *Batch)(cm.batches), "batch")
		if len(b.Messages) > 4 {
			t.Fatalf("batch of %d messages; BatchSize is 4", len(b.Messages))
		}
		checkBatch(t, b, next, next+int64(len(b.Messages)))
		next += int64(len(b.Messages))
	}
	if s := cm.Stats(); s[0].HandedOut != 10 {
		t.Errorf("Stats: %d handed out; want 10", s[0].HandedOut)
	}
}

// TestBatchLingerFillsTheBatch: with a linger longer than the test, a
// batch goes out only when full, however its messages trickle in.
func TestBatchLingerFillsTheBatch(t *testing.T) {
	verifyNoLeaks(t)
	pc := newFakePartitionConsumer(16)
	cm, _ := batchManager(t, batchConfig(4, time.Hour), pc)
	for o := int64(0); o < 4; o++ {
		feed(pc, o, o+1)
		if o < 3 && len(cm.batches) > 0 {
			t.Fatalf("a batch went out with %d of 4 messages, before the linger", o+1)
		}
	}
	checkBatch(t, receiveWithin(t, (<-chan *Batch)(cm.batches), "full batch"), 0, 4)
}

// TestBatchLingerEnds: a batch that does not fill goes out when the linger
// has passed since its first message.
func TestBatchLingerEnds(t *testing.T) {
	verifyNoLeaks(t)
	pc := newFakePartitionConsumer(16)
	cm, _ := batchManager(t, batchConfig(100, 20*time.Millisecond), pc)
	feed(pc, 0, 3)
	checkBatch(t, receiveWithin(t, (<-chan *Batch)(cm.batches), "batch after the linger"), 0, 3)
	feed(pc, 3, 4)
	checkBatch(t, receiveWithin(t, (<-chan *Batch)(cm.batches), "second batch after the linger"), 3, 4)
}

// TestBatchCutAtMaxPendingAcks: a batch is cut to the room MaxPendingAcks
// leaves, the pause is reported as for messages, and AckBatch makes room.
func TestBatchCutAtMaxPendingAcks(t *testing.T) {
	verifyNoLeaks(t)
	config := batchConfig(4, 0)
	config.MaxPendingAcks = 6
	pc := newFakePartitionConsumer(16)
	feed(pc, 0, 10)
	cm, _ := batchManager(t, config, pc)
	batches := (<-chan *Batch)(cm.batches)
	first := receiveWithin(t, batches, "first batch")
	checkBatch(t, first, 0, 4)
	checkBatch(t, receiveWithin(t, batches, "cut batch"), 4, 6)
	if err := receiveWithin(t, (<-chan error)(cm.errors), "the pause"); !errors.Is(err, ErrMaxPendingAcks) {
		t.Fatalf("error = %v; want ErrMaxPendingAcks", err)
	}
	cm.AckBatch(first)
	cm.AckBatch(first) // twice: nothing more
	checkBatch(t, receiveWithin(t, batches, "batch after AckBatch"), 6, 10)
	s := cm.Stats()[0]
	if s.Acked != 4 || s.Committed != 4 || s.Pending != 6 {
		t.Errorf("Stats after AckBatch: acked %d, committed %d, pending %d; want 4, 4, 6", s.Acked, s.Committed, s.Pending)
	}
}

// TestPauseHoldsThePartition: a paused partition hands out nothing, with
// messages ready, and says so in Stats; Resume hands them out from where
// it stopped.
func TestPauseHoldsThePartition(t *testing.T) {
	verifyNoLeaks(t)
	pc := newFakePartitionConsumer(16)
	cm, pm := batchManager(t, batchConfig(4, 0), pc)
	if err := cm.Pause("t", 0); err != nil {
		t.Fatal(err)
	}
	if err := cm.Pause("t", 0); err != nil {
		t.Fatalf("second Pause: %v", err)
	}
	feed(pc, 0, 4)
	waitFor(t, 3*time.Second, "the consume loop to hold what it took", func() bool {
		pm.mu.Lock()
		defer pm.mu.Unlock()
		return pm.waiting
	})
	if s := cm.Stats()[0]; !s.PausedByUser || s.Paused || s.HandedOut != 0 || len(cm.batches) != 0 {
		t.Fatalf("Stats while paused %+v, %d batches in the channel; want PausedByUser, nothing handed out", s, len(cm.batches))
	}
	if err := cm.Resume("t", 0); err != nil {
		t.Fatal(err)
	}
	feed(pc, 4, 6)
	var next int64
	for next < 6 {
		b := receiveWithin(t, (<-chan *Batch)(cm.batches), "batch after Resume")
		checkBatch(t, b, next, next+int64(len(b.Messages)))
		next += int64(len(b.Messages))
	}
	if s := cm.Stats()[0]; s.PausedByUser {
		t.Errorf("Stats after Resume: still PausedByUser")
	}
}

// TestPauseOfAPartitionNotHeld: Pause and Resume of a partition this
// instance does not run fail with an error naming it.
func TestPauseOfAPartitionNotHeld(t *testing.T) {
	verifyNoLeaks(t)
	cm, _ := batchManager(t, NewConfig(), newFakePartitionConsumer(1))
	for name, call := range map[string]func(string, int32) error{"Pause": cm.Pause, "Resume": cm.Resume} {
		err := call("other", 7)
		if !errors.Is(err, ErrPartitionNotHeld) || !strings.Contains(err.Error(), "other/7") {
			t.Errorf("%s of a partition not held = %v; want ErrPartitionNotHeld naming other/7", name, err)
		}
	}
}

// TestOtherChannelIsClosed: a consumer set to batches returns a closed
// Messages channel, and one of single messages a closed Batches channel,
// so that a loop over the wrong one ends instead of waiting for ever.
func TestOtherChannelIsClosed(t *testing.T) {
	verifyNoLeaks(t)
	cm, _ := batchManager(t, batchConfig(4, 0), newFakePartitionConsumer(1))
	if _, ok := <-cm.Messages(); ok {
		t.Error("Messages of a consumer set to batches is not closed")
	}
	if cm.Batches() != (<-chan *Batch)(cm.batches) {
		t.Error("Batches of a consumer set to batches is not its channel")
	}
	cm, _ = batchManager(t, NewConfig(), newFakePartitionConsumer(1))
	if _, ok := <-cm.Batches(); ok {
		t.Error("Batches of a consumer of single messages is not closed")
	}
}

// TestFaultBatchesLoseNothing: instances that read batches and ack their
// messages out of order (8 workers, random delays) lose nothing across a
// rebalance (an instance joins), a kill -9, and a Shutdown.
func TestFaultBatchesLoseNothing(t *testing.T) {
	needFaults(t)
	t.Parallel()
	r := newFaultRun(t, zookeeperPeers, kafkaPeers, 6, 1)
	r.opts.batch = 50
	r.opts.workers = 8
	r.opts.delay = 20 * time.Millisecond
	r.opts.shutdown = 5 * time.Second
	a, b := r.start(), r.start()
	r.waitOwnedBy(30*time.Second, a, b)
	wait := r.produceSteadily(3000, 6*time.Second)

	c := r.start() // a rebalance while batches are in flight
	r.waitOwnedBy(30*time.Second, a, b, c)
	a.kill(t)
	r.waitOwnedBy(r.opts.session+10*time.Second, b, c)
	b.terminate(t) // Shutdown with acks out of order pending
	r.waitOwnedBy(30*time.Second, c)
	wait()
	r.start()
	duplicates := r.finish()
	t.Logf("batches: 3,000 messages through a join, a kill -9 and a Shutdown: 0 lost, %d duplicates", duplicates)
}

// TestIntegrationBatchesCloseTakesBackUnread: Close takes back the batches
// that sit unread in the Batches channel, whole: the partitions do not
// wait MaxProcessingTime for their acks, nothing of them is committed, and
// the next instance consumes them.
func TestIntegrationBatchesCloseTakesBackUnread(t *testing.T) {
	parallelClusterTest(t)
	client := newTestClient(t)
	admin := newTestAdmin(t, client)
	topic := uniqueName("it-batch-unread")
	createTopic(t, admin, topic, 4)
	group := uniqueName("it.batch.unread")
	values := produce(t, client, topic, "v", 200)

	config := testConfig()
	config.BatchSize = 10
	config.MaxProcessingTime = time.Minute
	first := join(t, group, TopicSubscription(topic), config)
	b := receiveWithin(t, first.Batches(), "a batch")
	first.AckBatch(b)
	waitFor(t, 30*time.Second, "the Batches channel to fill", func() bool { return len(first.Batches()) == batchBuffer })
	began := time.Now()
	if err := first.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if took := time.Since(began); took > 10*time.Second {
		t.Errorf("Close took %s: it waited for the acks of batches nobody received (MaxProcessingTime %s)", took, config.MaxProcessingTime)
	}
	committed := committedOffsets(t, client, group, topic)
	if got := committed[b.Partition]; got != b.Messages[len(b.Messages)-1].Offset+1 {
		t.Errorf("committed %d for the partition of the acked batch; want %d", got, b.Messages[len(b.Messages)-1].Offset+1)
	}

	second := joinWithCleanup(t, group, TopicSubscription(topic), config)
	l := &deliveryLog{done: make(chan struct{})}
	l.recordBatches(second)
	rest := make([]string, 0, len(values))
	for _, v := range values {
		if !slices.ContainsFunc(b.Messages, func(m *sarama.ConsumerMessage) bool { return string(m.Value) == v }) {
			rest = append(rest, v)
		}
	}
	waitFor(t, 30*time.Second, "the rest of the messages", func() bool { return l.hasAll(rest) })
	if n := l.delivered()[string(b.Messages[0].Value)]; n != 0 {
		t.Errorf("the acked batch was consumed again")
	}
}
