package kafkaconsumer

// The join of a GroupProtocolConsumer member (coordinator_kafka848.go):
// connectConsumer's first heartbeat, whose errors fail Join.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// connectConsumer does connectKafka's work for GroupProtocolConsumer
// after the sarama clients: the group transport, a check that the brokers
// know the protocol, and the first heartbeat (the join), whose errors
// fail Join.
func (k *kafkaCoordinator) connectConsumer(ctx context.Context, brokers []string) error {
	cm := k.cm
	t, err := newGroupTransport(cm.config.Config, cm.dialer, brokers, cm.group)
	if err != nil {
		return err
	}
	c := newConsumerMembership(t, cm.config.GroupRemoteAssignor, k.heartbeatInterval)
	k.consumer = c
	versions, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, t.cl)
	if err != nil {
		return fmt.Errorf("connect to kafka at %s: %w", strings.Join(brokers, ","), err)
	}
	known := false
	for _, key := range versions.ApiKeys {
		known = known || key.ApiKey == consumerHeartbeatKey
	}
	if !known {
		return errProtocolUnsupported(cm.group, " (they do not list ConsumerGroupHeartbeat)")
	}
	sel, _ := cm.subscription.(topicSelector)
	view, err := readMetadata(cm.metadataClient(), sel)
	if err != nil {
		return fmt.Errorf("read the subscription's topics: %w", err)
	}
	c.topics = partitionTopics(view.partitions)
	return k.joinConsumer(ctx)
}

// joinConsumer sends the first heartbeat (epoch 0) until it is answered.
// An answer that the coordinator moved or is not ready
// (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
// COORDINATOR_LOAD_IN_PROGRESS, from the heartbeat or from the lookup
// of the coordinator) is retried with a capped backoff for at most
// Consumer.Group.Session.Timeout, and a failed request three times; ctx
// ends the wait. A refusal to convert a classic group that still revokes
// partitions waits for the conversion (awaitConversion). Any other error
// fails Join (joinError).
func (k *kafkaCoordinator) joinConsumer(ctx context.Context) error {
	cm, c := k.cm, k.consumer
	k.setMember(groupMember{id: newMemberID(), generation: 0})
	began := time.Now()
	var refusedSince time.Time // awaitConversion's
	for attempt := 0; ; attempt++ {
		sent := time.Now()
		resp, err := k.heartbeatConsumer(ctx, k.current())
		if err == nil {
			err = kerr.ErrorForCode(resp.ErrorCode)
		}
		left := k.sessionTimeout - time.Since(began)
		wait := min(100*time.Millisecond<<attempt, 2*time.Second, max(left, 0))
		moved := coordinatorMovedCode(codeOf(resp)) || resp == nil && coordinatorMovedErr(err)
		switch {
		case err == nil:
			k.takeJoin(resp, sent)
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case moved && left <= 0:
			return fmt.Errorf("join group %s: no coordinator ready for the group within %s (Consumer.Group.Session.Timeout): %w", cm.group, k.sessionTimeout, err)
		case moved || resp == nil && attempt < 3:
			c.t.forgetCoordinator()
			if !sleepCtx(ctx, wait) {
				return ctx.Err()
			}
			continue
		case k.awaitConversion(ctx, resp, &refusedSince):
			continue
		}
		return k.joinError(resp, err)
	}
}

// takeJoin records the answer resp to the first heartbeat, sent at sent.
func (k *kafkaCoordinator) takeJoin(resp *kmsg.ConsumerGroupHeartbeatResponse, sent time.Time) {
	c := k.consumer
	k.takeHeartbeat(resp, 0, sent)
	c.mu.Lock()
	if c.pending == nil {
		c.pending = map[[16]byte][]int32{} // the first round runs, empty
		poke(c.assignments)
	}
	c.mu.Unlock()
	k.tellJoined(sent)
}

// coordinatorMovedErr reports whether err (a failed lookup of the
// coordinator) says that the coordinator moved or is not ready.
func coordinatorMovedErr(err error) bool {
	return errors.Is(err, kerr.NotCoordinator) || errors.Is(err, kerr.CoordinatorNotAvailable) || errors.Is(err, kerr.CoordinatorLoadInProgress)
}

// codeOf returns the error code of resp, 0 for none.
func codeOf(resp *kmsg.ConsumerGroupHeartbeatResponse) int16 {
	if resp == nil {
		return 0
	}
	return resp.ErrorCode
}

// sleepCtx sleeps for d, or until ctx is done (false).
func sleepCtx(ctx context.Context, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// joinError returns the error of Join for the first heartbeat's answer
// resp (nil when the request failed: err).
func (k *kafkaCoordinator) joinError(resp *kmsg.ConsumerGroupHeartbeatResponse, err error) error {
	cm, c := k.cm, k.consumer
	msg := ""
	if resp != nil && resp.ErrorMessage != nil {
		msg = " (" + *resp.ErrorMessage + ")"
	}
	switch code := codeOf(resp); code {
	case kerr.UnsupportedVersion.Code:
		return errProtocolUnsupported(cm.group, " (ConsumerGroupHeartbeat answered UNSUPPORTED_VERSION)"+msg)
	case int16(errUnsupportedAssignor):
		return fmt.Errorf("%w: join group %s: the brokers do not know the assignor %q of GroupRemoteAssignor%s (group.consumer.assignors)", ErrInvalidConfig, cm.group, c.assignor, msg)
	case kerr.GroupIDNotFound.Code:
		return fmt.Errorf("join group %s: %w%s: it is not a consumer-protocol group but a classic group with members that the brokers do not convert "+
			"(their protocol type is not consumer, or group.consumer.migration.policy forbids the upgrade); join it with GroupProtocolClassic", cm.group, err, msg)
	case int16(errUnreleasedInstanceID), kerr.FencedInstanceID.Code:
		return fmt.Errorf("%w: %s: join group %s: %w%s", ErrInstanceIDInUse, cm.config.InstanceID, cm.group, err, msg)
	}
	return fmt.Errorf("join group %s: %w%s", cm.group, err, msg)
}

// errProtocolUnsupported returns the error of Join for brokers without
// the consumer group protocol: it wraps ErrInvalidConfig, and says what
// the protocol needs and what to use instead; detail says how the brokers
// told.
func errProtocolUnsupported(group, detail string) error {
	return fmt.Errorf("%w: join group %s: GroupProtocol is GroupProtocolConsumer but the brokers do not support the consumer group protocol%s; "+
		"it needs Kafka 4.0 or later in KRaft mode, with group.coordinator.rebalance.protocols including consumer; use GroupProtocolClassic",
		ErrInvalidConfig, group, detail)
}
