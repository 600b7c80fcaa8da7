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
// stop the revoked partitions and join again, at once when the user data
// is another assignor's (conversionNever), and when ctx is done; Join
// then fails with the refusal.
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
		switch k.convertible(ctx) {
		case conversionNow:
			return true
		case conversionNever:
			return false
		}
	}
	return false
}

// conversion is what convertible tells of the classic group.
type conversion int

const (
	conversionLater conversion = iota // it rebalances, or revokes partitions
	conversionNow                     // the brokers may convert it now
	conversionNever                   // another assignor's user data: Join fails
)

// convertible tells, by DescribeGroups, whether the brokers may convert
// the classic group now: later while it rebalances, or while a member's
// assignment carries this library's user data (assignmentUserData);
// never when the user data is another assignor's (the group's protocol is
// not kafkaProtocol), which it keeps; now otherwise, and when the
// coordinator did not answer (the heartbeat tells then).
func (k *kafkaCoordinator) convertible(ctx context.Context) conversion {
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{k.cm.group}
	r, err := k.consumer.t.coordinatorRequest(ctx, req)
	if err != nil {
		return conversionNow
	}
	resp, ok := r.(*kmsg.DescribeGroupsResponse)
	if !ok || len(resp.Groups) != 1 || resp.Groups[0].ErrorCode != 0 {
		return conversionNow
	}
	g := resp.Groups[0]
	switch g.State {
	case "PreparingRebalance", "CompletingRebalance":
		return conversionLater
	case "Stable":
		for _, m := range g.Members {
			var a kmsg.ConsumerMemberAssignment
			if a.ReadFrom(m.MemberAssignment) != nil || len(a.UserData) == 0 {
				continue
			}
			if g.Protocol != kafkaProtocol {
				return conversionNever
			}
			return conversionLater
		}
	}
	return conversionNow
}
