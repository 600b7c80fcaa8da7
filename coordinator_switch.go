package kafkaconsumer

// The group's coordinator switch, /consumers/<group>/coordinator: its
// values, how an instance reads and watches it, confirms it after a
// generation synced, and registers only while it says zookeeper. The
// migration that follows it is in coordinator_migrate.go.

import (
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/IBM/sarama"
	"github.com/go-zookeeper/zk"
)

// The values of the coordinator switch node.
const (
	switchZookeeper = "zookeeper"
	switchKafka     = "kafka"
)

// errCoordinatorSwitched is what a registration returns that was not made
// because the coordinator switch says kafka.
var errCoordinatorSwitched = errors.New("the group's coordinator switch says kafka")

// switchNode is the group's coordinator switch.
func (cm *consumerManager) switchNode() string { return cm.groupNode("coordinator") }

// coordinatorSwitch is the coordinator switch as the manager goroutine
// last read it, with a watch on it. Used by the manager goroutine only.
type coordinatorSwitch struct {
	cm      *consumerManager
	value   string          // switchZookeeper or switchKafka
	changed <-chan zk.Event // the watch; nil: read again
	// confirmed is the member ID of Kafka's group for which the switch
	// was last read afresh (confirmSwitch); "" when none.
	confirmed string
}

// kafka tells whether the switch says kafka.
func (s *coordinatorSwitch) kafka() bool { return s.value == switchKafka }

// watch returns the switch's watch; nil for a nil switch.
func (s *coordinatorSwitch) watch() <-chan zk.Event {
	if s == nil {
		return nil
	}
	return s.changed
}

// read reads the switch again, with a watch, when it was never read or
// its watch fired; it retries errors until the manager is interrupted
// (false then).
func (s *coordinatorSwitch) read() bool {
	cm := s.cm
	if s.changed != nil {
		select {
		case <-s.changed:
			s.changed = nil
		default:
			return true
		}
	}
	for attempt := 0; ; attempt++ {
		var (
			value string
			watch <-chan zk.Event
		)
		err := cm.zkCall(cm.zkTimeout(), func() (err error) {
			value, _, watch, err = cm.readSwitch(true)
			return err
		})
		if err == nil {
			if value != s.value && s.value != "" {
				cm.logf(slog.LevelInfo, "The group's coordinator switch (%s) says %s.", cm.switchNode(), value)
			}
			s.value, s.changed = value, watch
			return true
		}
		cm.logf(slog.LevelWarn, "Failed to read the group's coordinator switch %s: %s. Trying again.", cm.switchNode(), convertError(err))
		if !sleepOrDie(&cm.t, attempt) {
			return false
		}
	}
}

// confirmWithin reads the switch afresh: after a sync, so that the read
// is not older than any write that completed before it began. It keeps
// the watch. It retries until wait has passed (answered false) or the
// manager is interrupted (ok false).
func (s *coordinatorSwitch) confirmWithin(wait time.Duration) (answered, ok bool) {
	cm := s.cm
	deadline := time.Now().Add(wait)
	for attempt := 0; ; attempt++ {
		var value string
		err := cm.zkCall(min(cm.zkTimeout(), time.Until(deadline)), func() error {
			if _, err := cm.zkConn.Sync(cm.switchNode()); err != nil {
				return err
			}
			v, _, _, err := cm.readSwitch(false)
			value = v
			return err
		})
		if err == nil {
			s.value = value
			return true, true
		}
		cm.logf(slog.LevelWarn, "Failed to read the group's coordinator switch %s: %s.", cm.switchNode(), convertError(err))
		if time.Until(deadline) <= 0 {
			return false, true
		}
		if !sleepOrDie(&cm.t, attempt) {
			return false, false
		}
	}
}

// switchConfirmWait is how long a new member of Kafka's group waits for
// ZooKeeper to confirm the switch before it runs its first generation's
// partitions (confirmSwitch): the ZooKeeper session timeout.
func (cm *consumerManager) switchConfirmWait() time.Duration { return cm.sessionTimeout() }

// confirmSwitch tells whether the member may run the partitions of the
// generation it just synced as far as the switch is concerned (then
// sw.kafka() says whether the switch says kafka). A member that stayed in
// the group since a generation for which it read the switch afresh (the
// same member ID) reads nothing: while it is a member, Kafka's group is
// not Empty, so no instance opened the owner nodes or registered in
// ZooKeeper (reopen), and a ZooKeeper outage costs it nothing. A new
// member reads the switch afresh (see the file's comment), waiting at
// most switchConfirmWait; when ZooKeeper does not answer in time, it
// leaves the group, so that the others take its partitions at once, and
// joins again once ZooKeeper answers (confirmed false). ok is false when
// the manager was interrupted.
func (k *kafkaCoordinator) confirmSwitch(sw *coordinatorSwitch) (confirmed, ok bool) {
	cm := k.cm
	m := k.current()
	if m.id != "" && m.id == sw.confirmed {
		return true, true
	}
	answered, ok := sw.confirmWithin(cm.switchConfirmWait())
	if !ok {
		return false, false
	}
	if answered {
		sw.confirmed = m.id
		return true, true
	}
	cm.logf(slog.LevelWarn, "ZooKeeper did not confirm the group's coordinator switch within %s: leaving Kafka's group (its partitions go to the others), to join again once ZooKeeper answers.", cm.switchConfirmWait())
	cm.reportStops(cm.managePartitionManagers(nil))
	if m.id != "" && !cm.fenced() {
		if err := k.call(func() error { return k.leave(m, k.instanceID) }); errors.Is(err, errAbandoned) {
			return false, false
		} else if err != nil {
			cm.logf(slog.LevelWarn, "Failed to leave the group: %s; the coordinator removes this member after its session timeout (%s).", err, k.sessionTimeout)
		}
	}
	k.setMember(groupMember{generation: sarama.GroupGenerationUndefined})
	sw.changed = nil // the next read waits for ZooKeeper's answer
	return false, true
}

// readSwitch reads the switch node (with a watch when watch is set),
// creating it with "zookeeper" when it is missing. Any value but "kafka"
// says zookeeper.
func (cm *consumerManager) readSwitch(watch bool) (value string, version int32, changed <-chan zk.Event, err error) {
	node := cm.switchNode()
	get := func() ([]byte, *zk.Stat, <-chan zk.Event, error) {
		if watch {
			return cm.zkConn.GetW(node)
		}
		data, stat, err := cm.zkConn.Get(node)
		return data, stat, nil, err
	}
	data, stat, changed, err := get()
	if errors.Is(err, zk.ErrNoNode) {
		if err := cm.createNode(node, []byte(switchZookeeper), 0); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return "", 0, nil, err
		}
		data, stat, changed, err = get()
	}
	if err != nil {
		return "", 0, nil, err
	}
	value = switchZookeeper
	if strings.TrimSpace(string(data)) == switchKafka {
		value = switchKafka
	}
	return value, stat.Version, changed, nil
}

// registerUnderSwitch creates the instance's registration node in one
// multi with a check that the switch node still has the version read,
// saying zookeeper; errCoordinatorSwitched when it says kafka.
func (cm *consumerManager) registerUnderSwitch() error {
	ids := cm.groupNode("ids")
	for attempt := 0; ; attempt++ {
		value, version, _, err := cm.readSwitch(false)
		if err != nil {
			return err
		}
		if value == switchKafka {
			return errCoordinatorSwitched
		}
		_, err = cm.zkConn.Multi(
			&zk.CheckVersionRequest{Path: cm.switchNode(), Version: version},
			&zk.CreateRequest{Path: ids + "/" + cm.instance.ID, Data: cm.subscriptionJSON, Acl: cm.nodeACL(ids), Flags: zk.FlagEphemeral},
		)
		switch {
		case errors.Is(err, zk.ErrBadVersion) && attempt < 10:
			continue // the switch was written meanwhile: read it again
		case errors.Is(err, zk.ErrNoNode) && attempt < 10:
			if err := cm.mkdirs(ids); err != nil {
				return err
			}
			continue
		}
		return err
	}
}
