package kafkaconsumer

// Processing, without a cluster: a give-back is of the run that handed
// the message out.

import (
	"testing"

	"github.com/IBM/sarama"
	"github.com/wvanbergen/kazoo-go"
)

// TestGiveBackOfEarlierRun: a message handed out by an earlier run of a
// partition on this instance, given back after the partition came back
// (a handler that outlived MaxProcessingTime), does not withdraw the new
// run's hand-out of the same offset: the new run's acks move its commit.
func TestGiveBackOfEarlierRun(t *testing.T) {
	t.Parallel()
	cm, old, _, _ := testManager(t, nil)
	stale := message(5)
	handOutMessages(t, old, stale)

	// The partition stops without its ack, and starts again on this
	// instance at the commit, 5.
	old.retired.Store(true)
	cm.offsets.close(old.tp)
	pm := newPartitionManager(cm, (&kazoo.Kazoo{}).Topic("t").Partition(0, []int32{1}))
	manageOffsets(pm, 5)
	cm.pms.Store(&partitionManagers{pm.tp: pm})
	pom := markProbe{pm}
	fresh := []*sarama.ConsumerMessage{message(5), message(6)}
	handOutMessages(t, pm, fresh...)

	cm.Processing().GiveBack(stale) // the old run's handler returns late
	cm.Ack(fresh[0])
	cm.Ack(fresh[1])
	if got := pom.last(); got != 7 {
		t.Fatalf("the new run marked %d after acking 5 and 6, want 7: the earlier run's give-back withdrew its message", got)
	}
	if got := pm.pending.pending(); got != 0 {
		t.Fatalf("the new run has %d pending, want 0", got)
	}
}

// handOutMessages records msgs as handed out by pm, as enter does.
func handOutMessages(t *testing.T, pm *partitionManager, msgs ...*sarama.ConsumerMessage) {
	t.Helper()
	pm.mu.Lock()
	defer pm.mu.Unlock()
	for _, msg := range msgs {
		if !pm.pending.pushMessage(msg) {
			t.Fatalf("push(%d) refused", msg.Offset)
		}
		pm.lastHandedOut = msg.Offset
	}
}
