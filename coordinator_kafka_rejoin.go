package kafkaconsumer

// The rejoins of a Kafka-coordinated member (coordinator_kafka.go) on its
// assignment's account, which the group's coordinator would not turn
// into a rebalance by itself. Kafka's group coordinator answers the
// JoinGroup of a member of a stable group with the generation as it is
// (and the SyncGroup with the same assignment), unless the member leads
// the group or its protocol metadata differs from that of its last
// JoinGroup: then it rebalances. Hence:
//
//   - A member assigned partitions of topics it does not subscribe to (by
//     a leader of an older release, which spread its own topics over
//     every member) refuses them: it runs the rest, and joins again after
//     refusalDelay, which doubles with each refusal in a row, with the
//     generation refused in the user data of its member metadata
//     (memberUserData), so that the JoinGroup differs from its last one
//     and the coordinator rebalances. Joining again at once, with the
//     same metadata, came back with the same generation and assignment
//     in a loop.
//   - The leader watches the partition counts of the topics that only
//     other members subscribe to, as its assignment read them, and joins
//     again when they change, as Kafka's ConsumerCoordinator does with
//     its metadata snapshot: a follower that sees them change cannot
//     start a rebalance, since the member metadata lists topics, not
//     partitions. The leader's own topics are watched by the manager
//     loop's poller (watchSubscription), as every member's are.

import (
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
)

// assignRejoins is the state of the rejoins on the assignment's account.
// Used by the manager goroutine only.
type assignRejoins struct {
	// refusals counts the generations in a row whose assignment this
	// member refused (refuseForeign); refused is the last of them.
	refusals int
	refused  int32
	// retry fires when the member is to join again after a refusal; nil
	// when none is due. Stopped by refuseForeign and stop.
	retry *time.Timer

	// othersFor is the generation whose assignment this member computed
	// as the leader (assign), others the topics that only other members
	// subscribe to, and othersView what the assignment read of them;
	// watchOthers takes them once the generation is synced.
	othersFor  int32
	others     topicList
	othersView metadataView
	// poller watches the partition counts of the topics that only other
	// members subscribe to while this member leads, and changed fires
	// when they changed (closed by the poller when it ends); both nil
	// when none runs. Stopped by watchOthers and stop.
	poller  *metadataPoller
	changed <-chan zk.Event
}

// refusalDelay is the wait before joining again after the nth
// assignment in a row refused (from 1): 1 s doubling to at most
// maxRefusalDelay.
func refusalDelay(n int) time.Duration {
	if n < 1 {
		n = 1
	}
	if n > 7 {
		return maxRefusalDelay
	}
	return min(time.Second<<(n-1), maxRefusalDelay)
}

// maxRefusalDelay bounds refusalDelay: a leader that keeps assigning
// foreign topics costs the group one rebalance a minute.
const maxRefusalDelay = time.Minute

// refuseForeign takes note of the assignment of generation, in which
// foreign are the topics that this member does not subscribe to, and
// does not run; none: an assignment taken in full. With foreign, the
// member joins again after refusalDelay (retryDue fires), with the
// generation in its user data (refusedGeneration).
func (k *kafkaCoordinator) refuseForeign(generation int32, foreign []string) {
	r := &k.rejoins
	r.stopRetry()
	if len(foreign) == 0 {
		r.refusals = 0
		return
	}
	r.refusals++
	r.refused = generation
	delay := refusalDelay(r.refusals)
	k.cm.logf(slog.LevelWarn, "The group's leader assigned partitions of topics %s, which this member does not subscribe to (a leader of an older release?); not consuming them, and joining again in %s (refusal %d in a row).",
		strings.Join(foreign, ", "), delay, r.refusals)
	r.retry = time.NewTimer(delay)
}

// refusedGeneration is the generation whose assignment this member
// refused last, while the assignments since have all been refused: the
// "refused" field of the user data of its JoinGroup. 0 otherwise.
func (r *assignRejoins) refusedGeneration() int32 {
	if r.refusals == 0 {
		return 0
	}
	return r.refused
}

// retryDue returns a channel that fires when the member is to join again
// after a refused assignment; nil when none is due.
func (r *assignRejoins) retryDue() <-chan time.Time {
	if r.retry == nil {
		return nil
	}
	return r.retry.C
}

// stopRetry stops the timer of the rejoin after a refusal, if any.
func (r *assignRejoins) stopRetry() {
	if r.retry != nil {
		r.retry.Stop()
		r.retry = nil
	}
}

// leadOthers records what the leader's assignment of generation read of
// the topics that only other members subscribe to (others; view), for
// watchOthers.
func (r *assignRejoins) leadOthers(generation int32, others topicList, view metadataView) {
	r.othersFor, r.others, r.othersView = generation, others, view
}

// watchOthers starts, when this member led the assignment of generation,
// now synced, a poller of the partition counts of the topics that only
// other members subscribe to (changed fires when they differ from what
// the assignment read); else it stops the one of an earlier generation.
func (k *kafkaCoordinator) watchOthers(generation int32) {
	r := &k.rejoins
	r.stopPoller()
	others, view := r.others, r.othersView
	r.others, r.othersView = nil, metadataView{}
	if r.othersFor != generation || len(others) == 0 {
		return
	}
	r.poller, r.changed = k.cm.startMetadataPoller(others, view, metadataView.sameCounts)
}

// stopPoller stops the poller of the other members' topics, if any.
func (r *assignRejoins) stopPoller() {
	if r.poller != nil {
		r.poller.stop()
		r.poller, r.changed = nil, nil
	}
}

// stop stops the timer and the poller; the manager goroutine calls it
// once the member no longer joins (after the clients closed, which ends
// a metadata request in flight).
func (r *assignRejoins) stop() {
	r.stopRetry()
	r.stopPoller()
}

// sameCounts tells whether v and o hold the same topics with the same
// numbers of partitions: all that the leader's assignment looks at of
// the topics that only other members subscribe to.
func (v metadataView) sameCounts(o metadataView) bool {
	return maps.Equal(v.counts(), o.counts())
}

// counts returns the number of partitions of each topic of v.
func (v metadataView) counts() map[string]int32 {
	counts := make(map[string]int32)
	for _, p := range v.partitions {
		counts[p.Topic().Name]++
	}
	return counts
}

// memberUserData is the user data of this library's member metadata: the
// "client" field of the ZooKeeper registration (mixed.go); for an
// instance that follows the group's coordinator switch (followsSwitch),
// the "migration" field, by which the groups tool's migrate tells the
// members that go back to ZooKeeper when asked from those that do not;
// and, after an assignment refused (refuseForeign), the "refused" field,
// the generation of that assignment (0: none).
func memberUserData(followsSwitch bool, refused int32) []byte {
	b := fmt.Appendf(nil, `{"client":%q`, registrationClient)
	if followsSwitch {
		b = fmt.Appendf(b, `,"migration":%d`, migrationVersion)
	}
	if refused != 0 {
		b = fmt.Appendf(b, `,"refused":%d`, refused)
	}
	return append(b, '}')
}
