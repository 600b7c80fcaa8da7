package kafkaconsumer

// Pause and Resume: a partition of this instance's share that fetches and
// hands out nothing, keeping its claim, until resumed.

import (
	"fmt"
	"log/slog"
)

// Pause implements Consumer.
func (cm *consumerManager) Pause(topic string, partition int32) error {
	return cm.setPaused(topic, partition, true)
}

// Resume implements Consumer.
func (cm *consumerManager) Resume(topic string, partition int32) error {
	return cm.setPaused(topic, partition, false)
}

// setPaused pauses or resumes the partition manager of a partition.
func (cm *consumerManager) setPaused(topic string, partition int32, paused bool) error {
	pm := (*cm.pms.Load())[TopicPartition{Topic: topic, Partition: partition}]
	if pm == nil || pm.claimOnly {
		return fmt.Errorf("%w: %s/%d", ErrPartitionNotHeld, topic, partition)
	}
	pm.setPaused(paused)
	return nil
}

// setPaused sets userPaused, and pauses or resumes the running partition
// consumer with it (sarama's Pause: it leaves the partition out of its
// fetch requests). A resume wakes the consume loop, which enter held.
func (pm *partitionManager) setPaused(paused bool) {
	pm.pauseMu.Lock()
	defer pm.pauseMu.Unlock()
	pm.mu.Lock()
	changed := pm.userPaused != paused
	pm.userPaused = paused
	pc := pm.pc
	pm.mu.Unlock()
	if !changed {
		return
	}
	if pc != nil {
		if paused {
			pc.Pause()
		} else {
			pc.Resume()
		}
	}
	if paused {
		pm.logf(slog.LevelInfo, "Paused: fetching and handing out nothing until resumed.")
		return
	}
	pm.notify()
	pm.logf(slog.LevelInfo, "Resumed.")
}
