package kafkaconsumer

// Static membership (Config.InstanceID, Config.RestartGrace): an instance
// with a stable ID, whose partitions the group keeps for it while it
// restarts.
//
// An instance with an InstanceID registers under it, and keeps a
// persistent record of itself beside the registrations:
// /consumers/<group>/static/<id>, holding its RestartGrace, its state
// ("registered" or "departed"), its share (for the groups tool) and its
// negotiated session timeout (for the next instance of the ID, which waits
// for the registration it leaves if it dies: awaitPreviousInstance). It
// writes "departed" when it leaves (Close, Shutdown), in one multi with the
// deletion of its registration; when its session ends without a leave
// (expiry, kill -9), the first other instance to see its registration
// gone writes it (conditional on the record's version, so that a return
// in the meantime wins). So the record's mtime is the departure on
// ZooKeeper's clock, the same for every instance.
//
// Each instance then distributes over the registered instances plus the
// departed static members whose grace is not over: nothing moves among
// the others, the departed member's partitions are claimed by nobody, and
// it gets them back when it registers again (the distribution depends only
// on the sorted IDs). The grace ends at the record's mtime + its
// RestartGrace; an instance reads ZooKeeper's clock by writing the static
// node (its mtime), and turns what is left into a timer of its own
// (departedMembers), so that instances whose clocks differ, and an
// instance that joins during the grace, end it at the same moment. Once
// it is over, the record is deleted (conditional on its version) and the
// group rebalances as without the member.
//
// The original library knows nothing of this: while an instance of it is
// registered there is no grace (all instances must compute the same
// distribution), and the records are left alone.

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/wvanbergen/kazoo-go"
)

// maxInstanceIDLength is the longest Config.InstanceID: Kafka's limit on a
// group.instance.id.
const maxInstanceIDLength = 249

// validateInstanceID checks a Config.InstanceID: empty (a random ID), or a
// name that can be a ZooKeeper node and that the tools show as it is.
func validateInstanceID(id string) error {
	if id == "" {
		return nil
	}
	if len(id) > maxInstanceIDLength {
		return fmt.Errorf("%w: InstanceID is %d characters long, more than %d", ErrInvalidConfig, len(id), maxInstanceIDLength)
	}
	if id == "." || id == ".." {
		return fmt.Errorf("%w: InstanceID %q cannot be a ZooKeeper node name", ErrInvalidConfig, id)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '-', c == ':':
		default:
			return fmt.Errorf("%w: InstanceID %q has %q at byte %d: use letters, digits, '.', '_', '-' and ':'", ErrInvalidConfig, id, c, i)
		}
	}
	return nil
}

// The states of a static record.
const (
	staticRegistered = "registered"
	staticDeparted   = "departed"
)

// staticRecord is the data of /consumers/<group>/static/<id>.
type staticRecord struct {
	Version int `json:"version"`
	// RestartGrace is the member's Config.RestartGrace, in ms.
	RestartGrace int64 `json:"restart_grace_ms"`
	// State is staticRegistered, or staticDeparted once it left (or its
	// session ended).
	State string `json:"state"`
	// Partitions are the member's share as it last recorded it, by topic.
	Partitions map[string][]int32 `json:"partitions,omitempty"`
	// SessionTimeout is the member's negotiated ZooKeeper session
	// timeout, in ms, when it wrote the record: how long a registration
	// it leaves when it dies may last (see awaitPreviousInstance). 0 in
	// the records of versions before it.
	SessionTimeout int64 `json:"session_timeout_ms,omitempty"`
}

// parseStaticRecord parses a static record; ok is false for data that is
// not one.
func parseStaticRecord(data []byte) (staticRecord, bool) {
	var r staticRecord
	if err := json.Unmarshal(data, &r); err != nil || r.Version != 1 {
		return staticRecord{}, false
	}
	return r, r.State == staticRegistered || r.State == staticDeparted
}

// staticNode returns the path of the static record of id (no id: their
// parent, whose mtime is ZooKeeper's clock; see serverClock).
func (cm *consumerManager) staticNode(id ...string) string {
	return cm.groupNode(append([]string{"static"}, id...)...)
}

// staticData returns this instance's static record in state, with its
// share as last recorded.
func (cm *consumerManager) staticData(state string) []byte {
	data, _ := json.Marshal(staticRecord{
		Version:        1,
		RestartGrace:   cm.config.RestartGrace.Milliseconds(),
		State:          state,
		Partitions:     cm.recordedShare,
		SessionTimeout: cm.sessionTimeout().Milliseconds(),
	})
	return data
}

// recordedSessionTimeout returns the session timeout that the static
// record of this instance's ID says the ID's last instance had: 0 when
// the record names none (no record, one of an older version) or cannot be
// read.
func (cm *consumerManager) recordedSessionTimeout() time.Duration {
	data, _, err := cm.zkConn.Get(cm.staticNode(cm.instance.ID))
	if err != nil {
		return 0
	}
	record, ok := parseStaticRecord(data)
	if !ok || record.SessionTimeout <= 0 {
		return 0
	}
	return time.Duration(record.SessionTimeout) * time.Millisecond
}

// markStatic writes this instance's static record in state, creating it
// when it is missing. Called after the registration: see departedMembers
// for why that order.
func (cm *consumerManager) markStatic(state string) error {
	node, data := cm.staticNode(cm.instance.ID), cm.staticData(state)
	for attempt := 0; ; attempt++ {
		_, err := cm.zkConn.Set(node, data, -1)
		if !errors.Is(err, zk.ErrNoNode) || attempt == 3 {
			return err
		}
		if err := cm.createNode(node, data, 0); !errors.Is(err, zk.ErrNodeExists) {
			return err
		}
	}
}

// recordShare records this instance's share in its static record when it
// changed since it was last recorded (for the groups tool). A failure is
// logged, and the next round tries again. Manager goroutine only.
func (cm *consumerManager) recordShare(assigned map[TopicPartition]assignment) {
	if cm.config.InstanceID == "" {
		return
	}
	share := make(map[string][]int32)
	for tp := range assigned {
		share[tp.Topic] = append(share[tp.Topic], tp.Partition)
	}
	for _, ps := range share {
		sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	}
	if cm.shareRecorded && sameShare(share, cm.recordedShare) {
		return
	}
	previous := cm.recordedShare
	cm.recordedShare = share
	if err := cm.zkCall(cm.zkTimeout(), func() error { return cm.markStatic(staticRegistered) }); err != nil {
		cm.recordedShare, cm.shareRecorded = previous, false
		cm.logf(slog.LevelWarn, "Failed to record this instance's partitions in its static record: %s. Trying again at the next change.", convertError(err))
		return
	}
	cm.shareRecorded = true
}

func sameShare(a, b map[string][]int32) bool {
	if len(a) != len(b) {
		return false
	}
	for topic, ps := range a {
		qs, ok := b[topic]
		if !ok || len(ps) != len(qs) {
			return false
		}
		for i := range ps {
			if ps[i] != qs[i] {
				return false
			}
		}
	}
	return true
}

// deregisterStatic deletes the instance's registration and marks its
// static record departed, in one multi: the others never see the
// registration gone without the departure recorded. When the record is
// gone, it deletes the registration alone; kazoo.ErrInstanceNotRegistered
// when that is gone.
func (cm *consumerManager) deregisterStatic() error {
	_, err := cm.zkConn.Multi(
		&zk.SetDataRequest{Path: cm.staticNode(cm.instance.ID), Data: cm.staticData(staticDeparted), Version: -1},
		&zk.DeleteRequest{Path: cm.groupNode("ids", cm.instance.ID), Version: -1},
	)
	if errors.Is(err, zk.ErrNoNode) {
		return cm.deregisterNode()
	}
	return err
}

// departure is a static member that departed and whose grace is not
// over: the group distributes as if it were registered.
type departure struct {
	id string
	// until is when its grace ends, on this instance's clock.
	until time.Time
	// stamp is the version and mtime of the record until was computed
	// from: the same record gives the same until.
	stamp [2]int64
}

// graceEnd returns when the grace of graceMs of a member that departed
// at departedMs (ZooKeeper's clock, ms since the epoch) ends on the local
// clock, given ZooKeeper's clock serverNowMs read at localNow. A
// departure later than serverNowMs (ZooKeeper's leader changed, and the
// servers' clocks differ) counts as departed now.
func graceEnd(departedMs, graceMs, serverNowMs int64, localNow time.Time) time.Time {
	elapsed := max(serverNowMs-departedMs, 0)
	return localNow.Add(time.Duration(graceMs-elapsed) * time.Millisecond)
}

// serverClock returns ZooKeeper's clock (ms since the epoch), read as the
// mtime of a write of the static records' parent, and the local time of
// the answer.
func (cm *consumerManager) serverClock() (int64, time.Time, error) {
	stat, err := cm.zkConn.Set(cm.staticNode(), nil, -1)
	if err != nil {
		return 0, time.Time{}, err
	}
	return stat.Mtime, time.Now(), nil
}

// departedMembers returns the static members that are not among the
// registered instances and whose grace is not over, sorted by ID; stale
// when a member missing from instances is registered by now (it came
// back since they were read): the caller reads them again before it
// distributes, else it would distribute without that member. It
// records the departure of a member whose session ended without a leave
// (its record still says registered), and deletes the records whose grace
// is over. Manager goroutine only (cm.departures caches the ends
// computed).
//
// A member that registers again creates its registration, then writes its
// record (markStatic); the departure here is written only if the record
// is at the version read before the registration was found missing. So
// either the member's write comes after (and wins), or it came before
// and this one fails: a returning member is never left marked departed.
func (cm *consumerManager) departedMembers(instances kazoo.ConsumergroupInstanceList) (departed []departure, stale bool, err error) {
	ids, _, err := cm.zkConn.Children(cm.staticNode())
	if errors.Is(err, zk.ErrNoNode) {
		cm.departures = nil
		return nil, false, nil
	} else if err != nil {
		return nil, false, err
	}
	registered := make(map[string]bool, len(instances))
	for _, instance := range instances {
		registered[instance.ID] = true
	}
	var (
		next      = make(map[string]departure)
		serverNow int64
		localNow  time.Time
	)
	for _, id := range ids {
		if registered[id] {
			continue
		}
		node := cm.staticNode(id)
		data, stat, err := cm.zkConn.Get(node)
		if errors.Is(err, zk.ErrNoNode) {
			continue
		} else if err != nil {
			return nil, false, err
		}
		record, ok := parseStaticRecord(data)
		if !ok || record.RestartGrace <= 0 {
			cm.removeStatic(node, stat.Version)
			continue
		}
		if record.State != staticDeparted {
			if back, _, err := cm.zkConn.Exists(cm.groupNode("ids", id)); err != nil {
				return nil, false, err
			} else if back {
				stale = true // it registered since
				continue
			}
			record.State = staticDeparted
			marked, _ := json.Marshal(record)
			written, err := cm.zkConn.Set(node, marked, stat.Version)
			switch {
			case err == nil:
				cm.logf(slog.LevelInfo, "Static member %s departed without leaving (its ZooKeeper session ended); its partitions wait %s for its return.", id, time.Duration(record.RestartGrace)*time.Millisecond)
				stat = written
			case errors.Is(err, zk.ErrBadVersion) || errors.Is(err, zk.ErrNoNode):
				// Another instance recorded the departure, or the member
				// came back (its registration's watch fires): read it again.
				if data, stat, err = cm.zkConn.Get(node); errors.Is(err, zk.ErrNoNode) {
					continue
				} else if err != nil {
					return nil, false, err
				}
				if record, ok = parseStaticRecord(data); !ok {
					continue
				} else if record.State != staticDeparted {
					stale = true // it registered again
					continue
				}
			default:
				return nil, false, err
			}
		}
		stamp := [2]int64{int64(stat.Version), stat.Mtime}
		until := cm.departures[id].until
		if d, ok := cm.departures[id]; !ok || d.stamp != stamp {
			if localNow.IsZero() {
				if serverNow, localNow, err = cm.serverClock(); err != nil {
					return nil, false, err
				}
			}
			until = graceEnd(stat.Mtime, record.RestartGrace, serverNow, localNow)
		}
		if !time.Now().Before(until) {
			cm.logf(slog.LevelInfo, "The grace of static member %s is over; its partitions go to the others.", id)
			cm.removeStatic(node, stat.Version)
			continue
		}
		d := departure{id: id, until: until, stamp: stamp}
		next[id] = d
		departed = append(departed, d)
	}
	cm.departures = next
	sort.Slice(departed, func(i, j int) bool { return departed[i].id < departed[j].id })
	return departed, stale, nil
}

// removeStatic deletes a static record whose grace is over, unless it
// changed since it was read (at version). Every instance tries; a failure
// leaves it to the next round.
func (cm *consumerManager) removeStatic(node string, version int32) {
	if err := cm.zkConn.Delete(node, version); err != nil && !errors.Is(err, zk.ErrNoNode) && !errors.Is(err, zk.ErrBadVersion) {
		cm.logf(slog.LevelDebug, "Failed to delete the static record %s: %s.", node, convertError(err))
	}
}

// watchDeparted returns departedMembers, retrying errors until the
// manager is interrupted (ok is false then). With an instance of the
// original library registered there is no grace: none.
func (cm *consumerManager) watchDeparted(instances kazoo.ConsumergroupInstanceList) (departed []departure, stale, ok bool) {
	if cm.originals {
		cm.departures = nil
		return nil, false, true
	}
	for attempt := 0; ; attempt++ {
		departed, stale, err := cm.departedMembers(instances)
		if err == nil {
			return departed, stale, true
		}
		cm.logf(slog.LevelWarn, "Failed to read the group's static members: %s. Trying again.", convertError(err))
		if !sleepOrDie(&cm.t, attempt) {
			return nil, false, false
		}
	}
}

// graceOver returns when the first of the graces of departed ends; the
// zero time when there is none.
func graceOver(departed []departure) time.Time {
	var first time.Time
	for _, d := range departed {
		if first.IsZero() || d.until.Before(first) {
			first = d.until
		}
	}
	return first
}

// withDeparted returns the instances plus the departed members, the list
// the distribution is made over during their grace.
func (cm *consumerManager) withDeparted(instances kazoo.ConsumergroupInstanceList, departed []departure) kazoo.ConsumergroupInstanceList {
	if len(departed) == 0 {
		return instances
	}
	members := append(kazoo.ConsumergroupInstanceList(nil), instances...)
	for _, d := range departed {
		members = append(members, cm.kzGroup.Instance(d.id))
	}
	return members
}

// awaitingReturn returns the partitions that distribution (over the
// members, departed ones included) gives to a departed member, and that
// the distribution without them (afterGrace) gives to this instance: the
// partitions this instance takes if their owner does not return, which
// its Stats show (PartitionStats.AwaitingReturn).
func (cm *consumerManager) awaitingReturn(departed []departure, distribution, afterGrace map[string][]*kazoo.Partition) []PartitionStats {
	if len(departed) == 0 {
		return nil
	}
	mine := make(map[TopicPartition]bool)
	for _, p := range afterGrace[cm.instance.ID] {
		mine[TopicPartition{Topic: p.Topic().Name, Partition: p.ID}] = true
	}
	var result []PartitionStats
	for _, d := range departed {
		for _, p := range distribution[d.id] {
			tp := TopicPartition{Topic: p.Topic().Name, Partition: p.ID}
			if !mine[tp] || cm.claimOnlyTopic(tp.Topic, cm.originals) {
				continue
			}
			result = append(result, PartitionStats{
				TopicPartition:      tp,
				LastHandedOut:       -1,
				LastAcked:           -1,
				Committed:           -1,
				HighWaterMark:       -1,
				Lag:                 -1,
				AwaitingReturn:      d.id,
				AwaitingReturnUntil: d.until,
			})
		}
	}
	sort.Slice(result, func(i, j int) bool { return result[i].TopicPartition.less(result[j].TopicPartition) })
	return result
}
