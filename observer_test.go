package kafkaconsumer

// Config.Observer with sarama's parts faked (handout_test.go, batch_test.go,
// takeback_fake_test.go): each message handed out is seen before the user
// can receive it, and then ends acked or taken back, once.

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// recordingObserver records the Observer calls it gets, and fails the test
// on a call out of the contract's order.
type recordingObserver struct {
	t  *testing.T
	mu sync.Mutex // guards the fields below
	// out holds the messages handed out and not acked or taken back yet.
	out                     map[*sarama.ConsumerMessage]bool
	handedOut, batches      int
	acked, takenBack, stray int // stray: acks of messages not out
}

func newRecordingObserver(t *testing.T) *recordingObserver {
	return &recordingObserver{t: t, out: make(map[*sarama.ConsumerMessage]bool)}
}

func (o *recordingObserver) HandingOut(msg *sarama.ConsumerMessage) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.handOutLocked(msg)
}

func (o *recordingObserver) handOutLocked(msg *sarama.ConsumerMessage) {
	if o.out[msg] {
		o.t.Errorf("offset %d handed out twice without an ack or take-back between", msg.Offset)
	}
	o.out[msg] = true
	o.handedOut++
}

func (o *recordingObserver) HandingOutBatch(b *Batch) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.batches++
	for _, msg := range b.Messages {
		o.handOutLocked(msg)
	}
}

func (o *recordingObserver) Acked(msg *sarama.ConsumerMessage) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.out[msg] {
		o.stray++
		return
	}
	delete(o.out, msg)
	o.acked++
}

func (o *recordingObserver) TakenBack(msg *sarama.ConsumerMessage) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.out[msg] {
		o.t.Errorf("offset %d taken back, but not handed out", msg.Offset)
		return
	}
	delete(o.out, msg)
	o.takenBack++
}

// isOut reports whether msg was handed out and is not acked or taken back.
func (o *recordingObserver) isOut(msg *sarama.ConsumerMessage) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.out[msg]
}

// counts returns the numbers of messages handed out, acked, taken back,
// and still out.
func (o *recordingObserver) counts() (handedOut, acked, takenBack, out int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.handedOut, o.acked, o.takenBack, len(o.out)
}

// TestObserverSeesEachMessage: every message is seen handed out before the
// user receives it, then acked once; a second ack is a stray call.
func TestObserverSeesEachMessage(t *testing.T) {
	verifyNoLeaks(t)
	obs := newRecordingObserver(t)
	config := NewConfig()
	config.Observer = obs
	pc := newFakePartitionConsumer(16)
	cm, _ := batchManager(t, config, pc) // BatchSize 0: on Messages
	feed(pc, 0, 10)
	for i := 0; i < 10; i++ {
		msg := receiveWithin(t, (<-chan *sarama.ConsumerMessage)(cm.messages), "message")
		if !obs.isOut(msg) {
			t.Fatalf("offset %d received before HandingOut", msg.Offset)
		}
		cm.Ack(msg)
		if i == 9 {
			cm.Ack(msg) // twice: Acked again, for a message not out
		}
	}
	if handedOut, acked, takenBack, out := obs.counts(); handedOut != 10 || acked != 10 || takenBack != 0 || out != 0 {
		t.Errorf("observer: %d handed out, %d acked, %d taken back, %d out; want 10, 10, 0, 0", handedOut, acked, takenBack, out)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if obs.stray != 1 {
		t.Errorf("observer: %d acks of messages not out; want 1 (the second ack)", obs.stray)
	}
}

// TestObserverSeesEachBatch: every batch is seen before the user receives
// it; AckBatch and Ack tell of each of its messages.
func TestObserverSeesEachBatch(t *testing.T) {
	verifyNoLeaks(t)
	obs := newRecordingObserver(t)
	config := batchConfig(4, 0)
	config.Observer = obs
	pc := newFakePartitionConsumer(16)
	feed(pc, 0, 10)
	cm, _ := batchManager(t, config, pc)
	var next int64
	for n := 0; next < 10; n++ {
		b := receiveWithin(t, (<-chan *Batch)(cm.batches), "batch")
		for _, msg := range b.Messages {
			if !obs.isOut(msg) {
				t.Fatalf("offset %d received before HandingOutBatch", msg.Offset)
			}
		}
		next += int64(len(b.Messages))
		if n%2 == 0 {
			cm.AckBatch(b)
			continue
		}
		for _, msg := range b.Messages {
			cm.Ack(msg)
		}
	}
	if handedOut, acked, takenBack, out := obs.counts(); handedOut != 10 || acked != 10 || takenBack != 0 || out != 0 {
		t.Errorf("observer: %d handed out, %d acked, %d taken back, %d out; want 10, 10, 0, 0", handedOut, acked, takenBack, out)
	}
}

// TestObserverSeesTakeBack: what a revoked partition takes back from the
// channel unread is told as taken back, in both modes, so that an observer
// ends what it started for it.
func TestObserverSeesTakeBack(t *testing.T) {
	for _, batchSize := range []int{0, 3} {
		t.Run(fmt.Sprintf("batchSize=%d", batchSize), func(t *testing.T) {
			verifyNoLeaks(t)
			obs := newRecordingObserver(t)
			cm, _ := fakeSessionManager(t)
			cm.config.BatchSize = batchSize
			if batchSize > 0 {
				// Full batches only: the three of them fit in the
				// channel, whatever the pace of the feed.
				cm.config.BatchLinger = time.Hour
			}
			cm.config.Observer = obs
			pms, pcs := runFakePartitions(t, cm, 0)
			waitFor(t, 3*time.Second, "t/0 claimed", cm.allClaimed)
			feedPartition(pcs[0], 0, 0, 9)
			waitFor(t, 3*time.Second, "t/0's messages handed out", func() bool { return pms[0].stats().HandedOut == 9 })

			pms[0].t.Kill(nil)
			if err := receiveWithin(t, runDone(pms[0].t.Wait), "t/0's stop"); err != nil {
				t.Fatalf("t/0 stopped with %v", err)
			}
			if handedOut, acked, takenBack, out := obs.counts(); handedOut != 9 || acked != 0 || takenBack != 9 || out != 0 {
				t.Errorf("observer: %d handed out, %d acked, %d taken back, %d out; want 9, 0, 9, 0", handedOut, acked, takenBack, out)
			}
		})
	}
}

// TestObserverSeesFenceTakeBack: what the fence takes back from the
// channel (takeBackUnread), messages and batches, is told as taken back.
func TestObserverSeesFenceTakeBack(t *testing.T) {
	t.Parallel()
	obs := newRecordingObserver(t)
	cm, _ := fakeSessionManager(t)
	cm.config.Observer = obs
	pm := newPartitionManager(cm, fakePartition("t", 0))
	manageOffsets(pm, -1)
	cm.pms.Store(&partitionManagers{pm.tp: pm})
	for o := int64(0); o < 3; o++ {
		msg := &sarama.ConsumerMessage{Topic: "t", Partition: 0, Offset: o}
		obs.HandingOut(msg) // as handOut.send does
		cm.messages <- msg
	}
	b := &Batch{Topic: "t", Partition: 0, pm: pm, Messages: []*sarama.ConsumerMessage{{Topic: "t", Offset: 3}, {Topic: "t", Offset: 4}}}
	obs.HandingOutBatch(b) // as sendBatch does
	cm.batches <- b

	cm.takeBackUnread()
	if handedOut, acked, takenBack, out := obs.counts(); handedOut != 5 || acked != 0 || takenBack != 5 || out != 0 {
		t.Errorf("observer: %d handed out, %d acked, %d taken back, %d out; want 5, 0, 5, 0", handedOut, acked, takenBack, out)
	}
}
