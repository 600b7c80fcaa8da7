package kafkaconsumer

// The reconciliation of a GroupProtocolConsumer member's assignments
// (coordinator_kafka848.go): the manager loop, manageConsumer, and the
// lookup of the assigned topics' names.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// manageConsumer is the manager loop of a GroupProtocolConsumer member:
//  1. read the subscription's topics from Kafka's metadata (a poller
//     watches them for changes), and tell the guard when they changed;
//  2. reconcile the last assignment answered: the revoked partitions stop
//     first (final commit), the new ones start, and the guard heartbeats
//     at once with the partitions owned;
//  3. after a loss of the membership, stop every partition (lost: no
//     final commit) before the guard joins again;
//  4. sleep until one of these is due, or the manager is interrupted.
func (k *kafkaCoordinator) manageConsumer() {
	cm, c := k.cm, k.consumer
	cm.startConsumerGuard(k)
	read := true
	var changed <-chan zk.Event
	for {
		if k.fencedOut.Load() {
			k.stayOut()
			return
		}
		if k.lost.Load() {
			cm.reportStops(cm.managePartitionManagers(nil))
			k.lost.Store(false)
			poke(c.reconciled) // the guard joins again
		}
		if read {
			partitions, watch, ok := cm.watchSubscription()
			if !ok {
				return
			}
			changed = watch
			topics := partitionTopics(partitions)
			c.mu.Lock()
			if !slices.Equal(topics, c.topics) {
				c.topics = topics
				poke(c.reconciled)
			}
			c.mu.Unlock()
			read = false
		}
		c.mu.Lock()
		pending := c.pending
		c.pending = nil
		c.mu.Unlock()
		if pending != nil {
			assigned, ok := k.resolveAssignment(pending)
			if !ok {
				return
			}
			cm.reportStops(cm.managePartitionManagers(assigned))
			c.mu.Lock()
			if c.pending == nil || !k.revokes(c.pending) {
				c.revoking = time.Time{}
			}
			c.mu.Unlock()
			poke(c.reconciled)
			continue
		}
		select {
		case <-cm.t.Dying():
			cm.logf(slog.LevelInfo, "Interrupted, shutting down...")
			return
		case <-changed:
			cm.logf(slog.LevelInfo, "Woke up because the subscription's partitions changed in Kafka's metadata.")
			read = true
		case <-k.rejoin:
		case <-c.assignments:
		}
	}
}

// resolveAssignment returns the partitions of the assignment a by topic
// name, looking up the names of topic IDs not known yet, retrying until
// the manager is interrupted (ok is false then).
func (k *kafkaCoordinator) resolveAssignment(a map[[16]byte][]int32) (map[TopicPartition]assignment, bool) {
	cm, c := k.cm, k.consumer
	for attempt := 0; ; attempt++ {
		var unknown [][16]byte
		c.mu.Lock()
		for id := range a {
			if _, ok := c.names[id]; !ok {
				unknown = append(unknown, id)
			}
		}
		c.mu.Unlock()
		if len(unknown) == 0 {
			break
		}
		err := cm.kafkaCall(func() error { return k.lookUpTopicNames(unknown) })
		if errors.Is(err, errAbandoned) {
			return nil, false
		}
		if err == nil {
			continue
		}
		cm.logf(slog.LevelWarn, "Failed to look up the names of the topics assigned: %s. Trying again.", err)
		if !sleepOrDie(&cm.t, attempt) {
			return nil, false
		}
	}
	assigned := make(map[TopicPartition]assignment)
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, partitions := range a {
		name := c.names[id]
		t := kazooValues.Topic(name)
		for _, p := range partitions {
			assigned[TopicPartition{Topic: name, Partition: p}] = assignment{partition: t.Partition(p, nil)}
		}
	}
	return assigned, true
}

// lookUpTopicNames asks Kafka's metadata for the names of the topic IDs
// ids, and records them.
func (k *kafkaCoordinator) lookUpTopicNames(ids [][16]byte) error {
	c := k.consumer
	req := kmsg.NewPtrMetadataRequest()
	for _, id := range ids {
		req.Topics = append(req.Topics, kmsg.MetadataRequestTopic{TopicID: id})
	}
	kresp, err := c.t.request(context.Background(), req)
	if err != nil {
		return err
	}
	resp := kresp.(*kmsg.MetadataResponse)
	found := 0
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range resp.Topics {
		if t.Topic == nil || t.ErrorCode != 0 {
			continue
		}
		c.names[t.TopicID], c.ids[*t.Topic] = *t.Topic, t.TopicID
		found++
	}
	if found < len(ids) {
		return fmt.Errorf("%d of %d topic IDs not found in the metadata", len(ids)-found, len(ids))
	}
	return nil
}
