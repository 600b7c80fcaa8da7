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
//  2. reconcile the last assignment answered (reconcileConsumer): the
//     revoked partitions stop first (final commit), the new ones start,
//     and the guard heartbeats at once with the partitions owned;
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
			k.setSubscription(partitionTopics(partitions))
			read = false
		}
		if pending := k.takePending(); pending != nil {
			if !k.reconcileConsumer(pending) {
				return
			}
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

// setSubscription records the subscription's topics, and has the guard
// heartbeat at once when they changed.
func (k *kafkaCoordinator) setSubscription(topics []string) {
	c := k.consumer
	c.mu.Lock()
	defer c.mu.Unlock()
	if !slices.Equal(topics, c.topics) {
		c.topics = topics
		poke(c.reconciled)
	}
}

// takePending returns the assignment to reconcile, nil for none; the
// member is reconciling it then (see consumerMembership.reconciling).
func (k *kafkaCoordinator) takePending() map[[16]byte][]int32 {
	c := k.consumer
	c.mu.Lock()
	defer c.mu.Unlock()
	pending := c.pending
	c.pending = nil
	c.reconciling = pending != nil
	return pending
}

// reconcileConsumer reconciles the assignment a: the partitions of the
// topic IDs that resolve run (managePartitionManagers), the others are
// set aside until they do. A newer assignment or a loss of the
// membership that comes while the names are looked up abandons a: the
// manager loop takes what came. It returns false when the manager is
// interrupted.
func (k *kafkaCoordinator) reconcileConsumer(a map[[16]byte][]int32) bool {
	cm, c := k.cm, k.consumer
	assigned, unresolved, err := k.resolveAssignment(a)
	switch {
	case errors.Is(err, errAbandoned):
		return false
	case errors.Is(err, errSuperseded) || k.lost.Load():
		// Started now, a partition of a could be one that the broker
		// gave away since (see consumerMembership.reconciling).
		c.mu.Lock()
		c.reconciling = false
		c.mu.Unlock()
		return true
	}
	cm.reportStops(cm.managePartitionManagers(assigned))
	c.mu.Lock()
	if c.pending == nil || !k.revokes(c.pending) {
		c.revoking = time.Time{}
	}
	c.reconciling = false
	c.assigned = a
	k.setAside(unresolved, err)
	c.mu.Unlock()
	poke(c.reconciled)
	return true
}

// setAside records the count of partitions of the last assignment
// reconciled whose topic IDs did not resolve (lookup error err), and
// when to look them up again: after a backoff that doubles, from
// consumerRetryAfterFailed to the session timeout. c.mu is held.
func (k *kafkaCoordinator) setAside(unresolved int, err error) {
	cm, c := k.cm, k.consumer
	if unresolved == 0 {
		c.setAside, c.setAsideFor = 0, 0
		return
	}
	c.setAsideFor = min(max(2*c.setAsideFor, consumerRetryAfterFailed), k.sessionTimeout)
	c.setAside, c.retryAt = unresolved, time.Now().Add(c.setAsideFor)
	cm.logf(slog.LevelWarn, "Set aside %d partitions of the assignment whose topic IDs did not resolve (%v; a topic deleted?); looking them up again in %s.",
		unresolved, err, c.setAsideFor)
}

// errSuperseded is what resolveAssignment returns when a newer
// assignment or a loss of the membership came during its lookup.
var errSuperseded = errors.New("superseded")

// resolveAssignment returns the partitions of the assignment a by topic
// name, looking up the names of topic IDs not known yet, and the count
// of partitions whose topic IDs did not resolve, with the lookup's
// error. The error is errAbandoned when the manager was interrupted,
// errSuperseded when a newer assignment or a loss came meanwhile.
func (k *kafkaCoordinator) resolveAssignment(a map[[16]byte][]int32) (assigned map[TopicPartition]assignment, unresolved int, err error) {
	c := k.consumer
	var unknown [][16]byte
	c.mu.Lock()
	for id := range a {
		if _, ok := c.names[id]; !ok {
			unknown = append(unknown, id)
		}
	}
	c.mu.Unlock()
	if len(unknown) > 0 {
		err = k.lookUpUntilSuperseded(unknown)
		if errors.Is(err, errAbandoned) || errors.Is(err, errSuperseded) {
			return nil, 0, err
		}
	}
	assigned = make(map[TopicPartition]assignment)
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, partitions := range a {
		name, ok := c.names[id]
		if !ok {
			unresolved += len(partitions)
			continue
		}
		t := kazooValues.Topic(name)
		for _, p := range partitions {
			assigned[TopicPartition{Topic: name, Partition: p}] = assignment{partition: t.Partition(p, nil)}
		}
	}
	return assigned, unresolved, err
}

// lookUpUntilSuperseded runs lookUpTopicNames(ids) on a goroutine of its
// own (in kafkaCalls, as kafkaCall), and waits for it, or until the
// manager is interrupted (errAbandoned), or a newer assignment or a loss
// of the membership comes (errSuperseded): the loop of manageConsumer
// takes those, its wake-up tokens consumed here notwithstanding.
func (k *kafkaCoordinator) lookUpUntilSuperseded(ids [][16]byte) error {
	cm, c := k.cm, k.consumer
	done := make(chan error, 1)
	cm.kafkaCalls.Add(1)
	go func() { // owned by closeKafka, which waits for kafkaCalls
		defer cm.kafkaCalls.Done()
		done <- k.lookUpTopicNames(ids)
	}()
	for {
		select {
		case err := <-done:
			return err
		case <-cm.t.Dying():
			return errAbandoned
		case <-c.assignments:
		case <-k.rejoin:
		}
		c.mu.Lock()
		newer := c.pending != nil
		c.mu.Unlock()
		if newer || k.lost.Load() {
			return errSuperseded
		}
	}
}

// lookUpTopicNames asks Kafka's metadata for the names of the topic IDs
// ids, and records them.
func (k *kafkaCoordinator) lookUpTopicNames(ids [][16]byte) error {
	c := k.consumer
	if h := k.cm.hooks; h != nil && h.lookingUpTopics != nil {
		h.lookingUpTopics(ids)
	}
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
