package kafkaconsumer

// A stopping partition's take-back of what it left unread in the shared
// channel (Messages, or Batches), on the fake ZooKeeper session
// (fakezk_test.go) and fake partition consumers (handout_test.go): no
// message of a revoked partition is received after its claim is released,
// what it takes back is not committed, and the other partitions' messages
// that the search drained from the channel are put back, none lost,
// repeated or out of order.

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// closingPartitionConsumer is a fakePartitionConsumer whose AsyncClose
// closes its Errors channel, as sarama's does, so that closeInBackground's
// drain ends.
type closingPartitionConsumer struct {
	*fakePartitionConsumer
	once sync.Once
}

func (c *closingPartitionConsumer) AsyncClose() { c.once.Do(func() { close(c.errors) }) }

// partitionConsumers is a sarama consumer whose ConsumePartition returns
// each partition's fake partition consumer.
type partitionConsumers struct {
	sarama.Consumer // the methods the tests do not use panic
	pcs             map[int32]*closingPartitionConsumer
}

func (f partitionConsumers) ConsumePartition(_ string, partition int32, _ int64) (sarama.PartitionConsumer, error) {
	return f.pcs[partition], nil
}

// runFakePartitions starts a partition manager for each of the given
// partitions of topic "t", published for Ack and the take-backs, each run
// as run runs it but without Kafka: it claims on the fake session, consumes
// its fake partition consumer from offset 0 until killed, then stops
// (waits for acks, takes back, commits, releases). The test's cleanup
// kills those still running and waits for them and their partition
// consumers' drains.
func runFakePartitions(t *testing.T, cm *consumerManager, partitions ...int32) (map[int32]*partitionManager, map[int32]*closingPartitionConsumer) {
	t.Helper()
	pms := make(map[int32]*partitionManager)
	pcs := make(map[int32]*closingPartitionConsumer)
	published := make(partitionManagers)
	for _, p := range partitions {
		pms[p] = newPartitionManager(cm, fakePartition("t", p))
		pcs[p] = &closingPartitionConsumer{fakePartitionConsumer: newFakePartitionConsumer(64)}
		published[pms[p].tp] = pms[p]
	}
	cm.fetchers = []fetcher{{consumer: partitionConsumers{pcs: pcs}}}
	cm.pms.Store(&published)
	for _, pm := range pms {
		go func() {
			defer pm.t.Done()
			if pm.claim() {
				manageOffsets(pm, 0)
				pm.consumeUntilKilled()
			}
			pm.t.Kill(pm.stop())
		}()
	}
	t.Cleanup(func() {
		for _, pm := range pms {
			pm.t.Kill(nil)
			_ = pm.t.Wait()
		}
		cm.kafkaCalls.Wait()
	})
	return pms, pcs
}

// feedPartition sends the messages of offsets [from, to) of t/partition
// to pc.
func feedPartition(pc *closingPartitionConsumer, partition int32, from, to int64) {
	for o := from; o < to; o++ {
		pc.messages <- &sarama.ConsumerMessage{Topic: "t", Partition: partition, Offset: o}
	}
}

// TestRevokedPartitionTakesBackUnread: a partition revoked while a slow
// user reads nothing (longer than MaxProcessingTime) takes back what it
// left in the channel before it releases its claim, in both modes: once
// released, none of its messages is received any more. The partitions
// that stay were handing out into the full channel meanwhile: their
// messages come out complete, once each, in order.
func TestRevokedPartitionTakesBackUnread(t *testing.T) {
	for _, tc := range []struct {
		name      string
		batchSize int
	}{
		{"messages", 0},
		{"batches", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			verifyNoLeaks(t)
			cm, fake := fakeSessionManager(t)
			cm.config.BatchSize = tc.batchSize
			cm.messages = make(chan *sarama.ConsumerMessage, 16)
			capacity := cap(cm.messages)
			if tc.batchSize > 0 {
				capacity = cap(cm.batches)
			}
			pms, pcs := runFakePartitions(t, cm, 0, 1, 2, 3)
			revoked := pms[0]
			waitFor(t, 3*time.Second, "t/0 to t/3 claimed", cm.allClaimed)

			// t/0's nine messages go into the channel first (three
			// batches of three); then those of t/1 to t/3 fill it and
			// wait for room.
			const kept = 30 // messages of each partition that stays
			feedPartition(pcs[0], 0, 0, 9)
			waitFor(t, 3*time.Second, "t/0's messages handed out", func() bool { return revoked.stats().HandedOut == 9 })
			for p := int32(1); p <= 3; p++ {
				feedPartition(pcs[p], p, 0, kept)
			}
			waitFor(t, 3*time.Second, "the channel full", func() bool {
				return len(cm.messages)+len(cm.batches) == capacity
			})

			revoked.t.Kill(nil)
			if err := receiveWithin(t, runDone(revoked.t.Wait), "t/0's stop"); err != nil {
				t.Fatalf("t/0 stopped with %v", err)
			}
			if _, ok := fake.get(ownerPath("t", 0)); ok {
				t.Fatal("t/0's claim is still there after its stop")
			}
			if s := revoked.stats(); s.Pending != 0 {
				t.Errorf("t/0 still waits for %d acks after its stop", s.Pending)
			}

			// The slow user reads now, after the release.
			late, received := 0, 0
			next := make(map[int32]int64) // of each partition that stays
			deadline := time.After(3 * time.Second)
			got := func(p int32, offsets ...int64) {
				for _, o := range offsets {
					switch {
					case p == 0:
						late++
					case o != next[p]:
						t.Fatalf("t/%d offset %d received where %d was due", p, o, next[p])
					default:
						next[p]++
						received++
					}
				}
			}
			for received < 3*kept {
				select {
				case msg := <-cm.messages:
					got(msg.Partition, msg.Offset)
				case b := <-cm.batches:
					got(b.Partition, offsetsOf(b)...)
				case <-deadline:
					t.Fatalf("received %d of the %d messages of t/1 to t/3 within 3 s (next offsets %v)", received, 3*kept, next)
				}
			}
			if n := len(cm.messages) + len(cm.batches); n != 0 {
				t.Errorf("%d more in the channel after the messages of t/1 to t/3", n)
			}
			if late > 0 {
				t.Errorf("%d messages of t/0 received after t/0 released its claim; want 0", late)
			}
		})
	}
}

// TestWithdrawUnreadKeepsTheOthersInOrder: a partition's take-back removes
// its own messages from the shared channel, in both modes, and puts the
// other partitions' back in the order they were in. What it took back is
// resolved (not waited for) but never committed: the commit stops before
// the first of them, whatever is acked after.
func TestWithdrawUnreadKeepsTheOthersInOrder(t *testing.T) {
	for _, batches := range []bool{false, true} {
		t.Run(fmt.Sprintf("batches=%t", batches), func(t *testing.T) {
			t.Parallel()
			cm, _ := fakeSessionManager(t)
			if batches {
				cm.config.BatchSize = 2
			}
			pms := make(partitionManagers)
			for p := int32(0); p < 3; p++ {
				pm := newPartitionManager(cm, fakePartition("t", p))
				manageOffsets(pm, -1)
				pms[pm.tp] = pm
			}
			cm.pms.Store(&pms)
			stopping := pms[TopicPartition{"t", 0}]
			// t/0 handed out 0 to 5: the user received 0, 1 and 2 and
			// acked 0 and 2; 3, 4 and 5 sit in the channel among t/1's
			// and t/2's.
			var order []TopicPartition // of what sits in the channel
			put := func(p int32, offsets ...int64) {
				pm := pms[TopicPartition{"t", p}]
				msgs := make([]*sarama.ConsumerMessage, len(offsets))
				pm.mu.Lock()
				for i, o := range offsets {
					pm.pending.push(o)
					pm.lastHandedOut = o
					msgs[i] = &sarama.ConsumerMessage{Topic: "t", Partition: p, Offset: o}
				}
				pm.mu.Unlock()
				if batches {
					cm.batches <- &Batch{Topic: "t", Partition: p, Messages: msgs, pm: pm}
					order = append(order, TopicPartition{"t", p})
					return
				}
				for _, msg := range msgs {
					cm.messages <- msg
					order = append(order, TopicPartition{"t", p})
				}
			}
			stopping.mu.Lock()
			for o := int64(0); o < 3; o++ {
				stopping.pending.push(o)
			}
			stopping.lastHandedOut = 2
			stopping.mu.Unlock()
			cm.Ack(message(0))
			cm.Ack(message(2))
			put(1, 0, 1)
			put(0, 3)
			put(2, 0)
			put(0, 4, 5)
			if !batches { // the Batches channel holds 4
				put(1, 2, 3)
				put(2, 1, 2)
			}

			if n := stopping.withdrawUnread(time.Now().Add(time.Second)); n != 3 {
				t.Fatalf("withdrawUnread took back %d messages; want t/0's 3", n)
			}
			var left []string
			for len(cm.messages)+len(cm.batches) > 0 {
				select {
				case msg := <-cm.messages:
					left = append(left, fmt.Sprintf("%d/%d", msg.Partition, msg.Offset))
				case b := <-cm.batches:
					left = append(left, fmt.Sprintf("%d/%v", b.Partition, offsetsOf(b)))
				}
			}
			want := []string{"1/0", "1/1", "2/0", "1/2", "1/3", "2/1", "2/2"}
			if batches {
				want = []string{"1/[0 1]", "2/[0]"}
			}
			if fmt.Sprint(left) != fmt.Sprint(want) {
				t.Fatalf("left in the channel %v; want %v", left, want)
			}
			s := stopping.stats()
			if s.Pending != 1 || s.Committed != 1 {
				t.Fatalf("t/0 after the take-back: %d pending, committable %d; want 1 (offset 1, received), 1", s.Pending, s.Committed)
			}
			cm.Ack(message(1))
			if c := stopping.stats().Committed; c != 3 {
				t.Fatalf("t/0 committable %d once 1 is acked; want 3: what was taken back is not processed", c)
			}
		})
	}
}

// TestHandOutHoldParksTheSenders: while a hand-out hold is on, no
// partition manager sends on the channel, in both modes. A consume loop
// that waits for room in the full channel when the hold begins parks, and
// the hold sees it; one that starts a hand-out while held parks before it
// sends, with room in the channel. Released, both go on in order.
func TestHandOutHoldParksTheSenders(t *testing.T) {
	for _, batchSize := range []int{0, 1} {
		t.Run(fmt.Sprintf("BatchSize=%d", batchSize), func(t *testing.T) {
			verifyNoLeaks(t)
			config := NewConfig()
			config.ChannelBufferSize = 1
			config.BatchSize = batchSize
			cm, a := fakeManager(config, nil)
			cm.batches = make(chan *Batch, 1)
			b := newPartitionManager(cm, fakePartition("t", 1))
			cm.pms.Store(&partitionManagers{a.tp: a, b.tp: b})
			pcs := make(map[*partitionManager]*closingPartitionConsumer)
			for _, pm := range []*partitionManager{a, b} {
				manageOffsets(pm, -1)
				pc := &closingPartitionConsumer{fakePartitionConsumer: newFakePartitionConsumer(16)}
				pcs[pm] = pc
				ended := runDone(func() consumeEnd { return pm.consume(pc) })
				t.Cleanup(func() {
					pm.t.Kill(nil)
					receiveWithin(t, ended, "end of consume after the kill")
				})
			}
			receive := func() string {
				t.Helper()
				if batchSize > 0 {
					b := receiveWithin(t, (<-chan *Batch)(cm.batches), "a batch")
					return fmt.Sprintf("%d/%v", b.Partition, offsetsOf(b))
				}
				msg := receiveWithin(t, (<-chan *sarama.ConsumerMessage)(cm.messages), "a message")
				return fmt.Sprintf("%d/[%d]", msg.Partition, msg.Offset)
			}
			unread := func() int { return len(cm.messages) + len(cm.batches) }

			// t/0's offset 0 fills the channel; offset 1 waits for room.
			feedPartition(pcs[a], 0, 0, 2)
			waitFor(t, 3*time.Second, "t/0 waiting for room", func() bool { return a.stats().HandedOut == 2 && unread() == 1 })
			if !cm.hold.hold(cm, time.Now().Add(3*time.Second)) {
				t.Fatal("the hold did not see t/0's consume loop park")
			}
			if got := receive(); got != "0/[0]" {
				t.Fatalf("received %s; want 0/[0]", got)
			}
			select { // a token of t/0's park, if the hold did not take it
			case <-cm.hold.left:
			default:
			}
			feedPartition(pcs[b], 1, 0, 1)
			receiveWithin(t, (<-chan struct{})(cm.hold.left), "t/1's consume loop parking")
			if n := unread(); n != 0 {
				t.Fatalf("%d sent on the channel during the hold", n)
			}

			cm.hold.release()
			got := map[string]bool{receive(): true, receive(): true}
			if !got["0/[1]"] || !got["1/[0]"] {
				t.Fatalf("received %v after the release; want 0/[1] and 1/[0]", got)
			}
		})
	}
}
