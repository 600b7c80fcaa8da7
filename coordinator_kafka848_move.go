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

// conversionRetry is how often a member whose first heartbeat the
// brokers refused that way asks whether the classic group may be
// converted now (convertible).
const conversionRetry = 250 * time.Millisecond

// awaitConversion reports whether the first heartbeat's answer resp is
// the brokers' refusal to convert a classic group whose generation
// revokes partitions, and whether the heartbeat should be sent again:
// then the group looked convertible (convertible, asked every
// conversionRetry). A heartbeat sent meanwhile would not only be refused
// again: each conversion the brokers attempt first answers the classic
// members' JoinGroups and SyncGroups in flight REBALANCE_IN_PROGRESS, so
// that the rebalance that ends the revocations would never complete.
// refusedSince is the first such refusal (zero before; set here). It
// gives up (false) after the rebalance timeout, within which the owners
// stop the revoked partitions and join again, and when ctx is done;
// Join then fails with the refusal.
func (k *kafkaCoordinator) awaitConversion(ctx context.Context, resp *kmsg.ConsumerGroupHeartbeatResponse, refusedSince *time.Time) bool {
	if codeOf(resp) != kerr.GroupIDNotFound.Code || resp.ErrorMessage == nil || !strings.Contains(*resp.ErrorMessage, conversionRefusal) {
		return false
	}
	if refusedSince.IsZero() {
		*refusedSince = time.Now()
		k.cm.logf(slog.LevelInfo, "The brokers do not convert the classic group yet (%s): its members stop partitions that a rebalance moves; trying again for up to %s.",
			*resp.ErrorMessage, k.rebalanceTimeout)
	}
	for time.Since(*refusedSince) <= k.rebalanceTimeout {
		if !sleepCtx(ctx, conversionRetry) {
			return false
		}
		if k.convertible(ctx) {
			return true
		}
	}
	return false
}

// convertible reports whether the brokers may convert the classic group
// now, by DescribeGroups: false while it rebalances, or while a member's
// assignment carries user data (assignmentUserData); true otherwise, and
// when the coordinator did not answer (the heartbeat tells then).
func (k *kafkaCoordinator) convertible(ctx context.Context) bool {
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{k.cm.group}
	r, err := k.consumer.t.coordinatorRequest(ctx, req)
	if err != nil {
		return true
	}
	resp, ok := r.(*kmsg.DescribeGroupsResponse)
	if !ok || len(resp.Groups) != 1 || resp.Groups[0].ErrorCode != 0 {
		return true
	}
	g := resp.Groups[0]
	switch g.State {
	case "PreparingRebalance", "CompletingRebalance":
		return false
	case "Stable":
		for _, m := range g.Members {
			var a kmsg.ConsumerMemberAssignment
			if a.ReadFrom(m.MemberAssignment) == nil && len(a.UserData) > 0 {
				return false
			}
		}
	}
	return true
}
