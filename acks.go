package kafkaconsumer

// The Ack path: Consumer.Ack finds the partition manager of a message
// (through a small cache) and records the ack in its pending acks
// (pending.go); withdraw takes back a message that was handed out but never
// received. The marker then moves the acked prefix into the offset store
// (offsets_commit.go).

import (
	"log/slog"

	"github.com/IBM/sarama"
)

// Ack implements Consumer.
func (cm *consumerManager) Ack(msg *sarama.ConsumerMessage) {
	if msg == nil {
		return
	}
	slot := &cm.ackCache[uint32(msg.Partition)%ackCacheSize]
	pm := slot.Load()
	if pm == nil || pm.tp.Partition != msg.Partition || pm.tp.Topic != msg.Topic || pm.retired.Load() {
		pm = (*cm.pms.Load())[TopicPartition{Topic: msg.Topic, Partition: msg.Partition}]
		if pm == nil {
			cm.logf(slog.LevelDebug, "Acked message %d of %s/%d, but this instance does not own that partition (any more).", msg.Offset, msg.Topic, msg.Partition)
			cm.acked(msg)
			return
		}
		slot.Store(pm)
	}
	pm.ack(msg.Offset)
	cm.acked(msg)
}

// acked tells Config.Observer, if set, that msg was acked.
func (cm *consumerManager) acked(msg *sarama.ConsumerMessage) {
	if o := cm.config.Observer; o != nil {
		o.Acked(msg)
	}
}

// ackCacheSize is the number of slots of consumerManager.ackCache.
const ackCacheSize = 64

// withdraw takes back a message that was handed out but never received.
func (cm *consumerManager) withdraw(msg *sarama.ConsumerMessage) {
	if pm := (*cm.pms.Load())[TopicPartition{Topic: msg.Topic, Partition: msg.Partition}]; pm != nil {
		pm.withdraw(msg.Offset)
	}
}

// ack records that the message at offset was processed. It is called from
// Ack, on any goroutine. The end of the acked prefix reaches the offset
// store at the next mark (see markAcked), not here: a mark per ack would
// slow the hand-out path (BENCHMARKS.md, round 3). An offset this
// partition manager does not hold (acked twice, or handed out by an
// earlier owner) is ignored; it reports false.
func (pm *partitionManager) ack(offset int64) bool {
	pm.mu.Lock()
	known, _ := pm.pending.ack(offset)
	if known {
		pm.acked++
		pm.lastAcked = max(pm.lastAcked, offset)
	}
	pm.unlockAndWake(known)
	return known
}

// notify sends a token on wake without blocking.
func (pm *partitionManager) notify() {
	select {
	case pm.wake <- struct{}{}:
	default:
	}
}

// giveBack takes back msg, handed out by this partition manager and given
// back unprocessed (Processing.GiveBack), as withdraw does. It reports
// false, and does nothing, for a message it did not hand out: one of an
// earlier run of the partition, whose offset this run handed out again.
func (pm *partitionManager) giveBack(msg *sarama.ConsumerMessage) bool {
	pm.mu.Lock()
	known := pm.pending.giveBack(msg)
	pm.unlockAndWake(known)
	return known
}

// unlockAndWake unlocks pm.mu, then wakes the consume loop when it waits
// for room (waiting) and resolved says that an entry was resolved.
func (pm *partitionManager) unlockAndWake(resolved bool) {
	wake := resolved && pm.waiting
	pm.mu.Unlock()
	if wake {
		pm.notify()
	}
}

// withdraw takes back a handed-out message that the user never received,
// at Close (see also withdrawAll): it is not committed, and it is not
// waited for.
func (pm *partitionManager) withdraw(offset int64) {
	pm.mu.Lock()
	pm.unlockAndWake(pm.pending.withdraw(offset))
}
