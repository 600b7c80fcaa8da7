package kafkaconsumer

// The rolling move of a live classic group to the consumer protocol
// (docs/consumer-protocol.md, "Moving a group between the protocols"):
// what the first heartbeat of a consumer-protocol member does when the
// brokers refuse, for now, to convert the classic group.

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// conversionRefusal is what Kafka 4's brokers say (GROUP_ID_NOT_FOUND)
// when a classic member's assignment carries user data: this library's
// classic leader sets it on the assignments of a generation that revokes
// partitions (assignmentUserData), until the owners stopped them and
// joined again.
const conversionRefusal = "unsupported custom assignor"

// conversionRetry is the pause between two first heartbeats while the
// brokers refuse to convert the classic group.
const conversionRetry = 250 * time.Millisecond

// awaitConversion reports whether the first heartbeat's answer resp is
// the brokers' refusal to convert a classic group whose generation
// revokes partitions, and whether the heartbeat should be sent again: it
// then waited conversionRetry. refusedSince is the first such refusal
// (zero before; set here). It gives up (false) after the rebalance
// timeout, within which the owners stop the revoked partitions and join
// again, and when ctx is done; Join then fails with the refusal.
func (k *kafkaCoordinator) awaitConversion(ctx context.Context, resp *kmsg.ConsumerGroupHeartbeatResponse, refusedSince *time.Time) bool {
	if codeOf(resp) != kerr.GroupIDNotFound.Code || resp.ErrorMessage == nil || !strings.Contains(*resp.ErrorMessage, conversionRefusal) {
		return false
	}
	if refusedSince.IsZero() {
		*refusedSince = time.Now()
		k.cm.logf(slog.LevelInfo, "The brokers do not convert the classic group yet (%s): its members stop partitions that a rebalance moves; trying again for up to %s.",
			*resp.ErrorMessage, k.rebalanceTimeout)
	}
	if time.Since(*refusedSince) > k.rebalanceTimeout {
		return false
	}
	return sleepCtx(ctx, conversionRetry)
}
