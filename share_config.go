package kafkaconsumer

// The configuration of a share group (GroupProtocolShare): what Validate
// refuses, and what Offsets.Initial means for the group.

import (
	"fmt"

	"github.com/IBM/sarama"
)

// validateShare checks what GroupProtocolShare needs: CoordinatorKafka,
// and none of the settings that a share group has no use for.
func (c *Config) validateShare() error {
	why := ""
	switch {
	case c.Coordinator != CoordinatorKafka:
		return fmt.Errorf("%w: GroupProtocol is GroupProtocolShare but Coordinator is %s: share groups are Kafka's group coordinator's; set Coordinator to CoordinatorKafka",
			ErrInvalidConfig, c.Coordinator)
	case c.InstanceID != "":
		why = fmt.Sprintf("InstanceID is %q: share groups have no static membership", c.InstanceID)
	case c.DurableAcks:
		why = "DurableAcks is set: a share group commits no offsets, the broker keeps each record's state"
	case c.CommitLastProcessed:
		why = "CommitLastProcessed is set: a share group commits no offsets"
	case c.GroupRemoteAssignor != "":
		why = fmt.Sprintf("GroupRemoteAssignor is %q: the broker's share group assignor (group.share.assignors) assigns the partitions", c.GroupRemoteAssignor)
	default:
		return nil
	}
	return fmt.Errorf("%w: GroupProtocol is GroupProtocolShare but %s; leave it unset", ErrInvalidConfig, why)
}

// shareAutoOffsetReset returns the share group's share.auto.offset.reset
// for Offsets.Initial (which Validate allows to be OffsetOldest or
// OffsetNewest only).
func shareAutoOffsetReset(initial int64) string {
	if initial == sarama.OffsetNewest {
		return "latest"
	}
	return "earliest"
}
