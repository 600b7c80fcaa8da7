package kafkaconsumer

// The seal of a migrated group's owner nodes: while Kafka's group
// coordinator keeps the group (the coordinator switch says kafka),
// ZooKeeper refuses every claim, so that an instance that registers in
// ZooKeeper all the same (one of the original library, of an older
// version, a deployment rolled back) consumes nothing.
//
// A claim is the create of /consumers/<group>/owners/<topic>/<partition>
// (and of owners/<topic> when missing), which ZooKeeper allows only with
// the permission to create on the parent. The seal takes that permission
// out of the ACL of owners/ and of every owners/<topic>, and keeps the
// others (read, write, delete, admin): the original's claim (kazoo-go's
// ClaimPartition) fails with NoAuth and is retried for ever, this
// library's too. The seal is persistent: it needs no session, and holds
// through a ZooKeeper outage, a session expiry and a kill of every member.
//
// Order:
//   - to Kafka: once no instance is registered (awaitZookeeperEmpty), a
//     member to be seals owners/ first (no new owners/<topic> after
//     that), then each owners/<topic>, then waits until no owner node is
//     left (one made by an intruder between the read of ids/ and the
//     seal), and only then joins Kafka's group (sealForKafka);
//   - back: an instance opens the owners again only once the switch says
//     zookeeper and Kafka's group is Empty (reopen), and only then
//     registers; a fresh instance that finds the owners sealed takes the
//     same path (connectZookeeper).
//
// The seal relies on ZooKeeper's ACLs: a server run with
// zookeeper.skipACL=yes, or an intruder authenticated as a super user,
// ignores it. Setting it needs the permission to administer the nodes,
// which the default open ACL and Config.ZookeeperACL with PermAll grant.

import (
	"errors"
	"fmt"
	"log/slog"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
)

// sealedACL returns acl without the permission to create.
func sealedACL(acl []zk.ACL) []zk.ACL {
	sealed := make([]zk.ACL, len(acl))
	for i, a := range acl {
		a.Perms &^= zk.PermCreate
		sealed[i] = a
	}
	return sealed
}

// isSealed tells whether acl grants nobody the permission to create.
func isSealed(acl []zk.ACL) bool {
	for _, a := range acl {
		if a.Perms&zk.PermCreate != 0 {
			return false
		}
	}
	return len(acl) > 0
}

// setSealed seals node's ACL (sealed) or gives it back the ACL the
// instance creates nodes with (nodeACL); nothing when it is so already.
func (cm *consumerManager) setSealed(node string, sealed bool) error {
	for attempt := 0; ; attempt++ {
		acl, stat, err := cm.zkConn.GetACL(node)
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		} else if err != nil {
			return err
		}
		if isSealed(acl) == sealed {
			return nil
		}
		want := cm.nodeACL(node)
		if sealed {
			want = sealedACL(acl)
		}
		_, err = cm.zkConn.SetACL(node, want, stat.Aversion)
		if errors.Is(err, zk.ErrBadVersion) && attempt < 10 {
			continue // changed meanwhile: read it again
		}
		return err
	}
}

// ownerTopics returns the children of owners/ but the access probes
// (checkAccess), sorted.
func (cm *consumerManager) ownerTopics() ([]string, error) {
	children, _, err := cm.zkConn.Children(cm.groupNode("owners"))
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	topics := slices.DeleteFunc(children, func(c string) bool { return strings.HasPrefix(c, accessProbe) })
	sort.Strings(topics)
	return topics, err
}

// sealOwners seals owners/ (created when missing), then each
// owners/<topic>, and returns the owner nodes left below them
// ("topic/partition" → the owner's ID).
func (cm *consumerManager) sealOwners() (map[string]string, error) {
	owners := cm.groupNode("owners")
	if err := cm.mkdirs(owners); err != nil {
		return nil, err
	}
	if err := cm.setSealed(owners, true); err != nil {
		return nil, err
	}
	topics, err := cm.ownerTopics()
	if err != nil {
		return nil, err
	}
	left := make(map[string]string)
	for _, topic := range topics {
		dir := path.Join(owners, topic)
		if err := cm.setSealed(dir, true); err != nil {
			return nil, err
		}
		partitions, _, err := cm.zkConn.Children(dir)
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			return nil, err
		}
		for _, p := range partitions {
			data, _, err := cm.zkConn.Get(path.Join(dir, p))
			if errors.Is(err, zk.ErrNoNode) {
				continue
			} else if err != nil {
				return nil, err
			}
			left[topic+"/"+p] = string(data)
		}
	}
	return left, nil
}

// openOwners gives owners/ and each owners/<topic> back the permission to
// create.
func (cm *consumerManager) openOwners() error {
	topics, err := cm.ownerTopics()
	if err != nil {
		return err
	}
	for _, topic := range topics {
		if err := cm.setSealed(cm.groupNode("owners", topic), false); err != nil {
			return err
		}
	}
	return cm.setSealed(cm.groupNode("owners"), false)
}

// ownersSealed tells whether owners/ is sealed. When owners/ is missing, it
// records so in ownersMissing, for the first batch of claims.
func (cm *consumerManager) ownersSealed() (bool, error) {
	acl, _, err := cm.zkConn.GetACL(cm.groupNode("owners"))
	if errors.Is(err, zk.ErrNoNode) {
		cm.ownersMissing.Store(true)
		return false, nil
	}
	return err == nil && isSealed(acl), err
}

// sealPollInterval is how often a member to be looks again for owner
// nodes left after it sealed the owners.
const sealPollInterval = 200 * time.Millisecond

// sealForKafka seals the owners for the switch to Kafka, and waits until
// no owner node is left (it releases this instance's own orphans). It
// returns false when the switch went back to zookeeper meanwhile (sealed
// false) or the manager was interrupted (ok false).
func (m *migratingCoordinator) sealForKafka() (sealed, ok bool) {
	cm := m.cm
	logged := ""
	for attempt := 0; ; {
		if !m.sw.read() {
			return false, false
		}
		if !m.sw.kafka() {
			return false, true
		}
		var left map[string]string
		err := cm.zkCall(cm.zkTimeout(), func() (err error) { left, err = cm.sealOwners(); return err })
		if err != nil {
			cm.logf(slog.LevelWarn, "Failed to seal the group's owner nodes (%s) for the switch to Kafka: %s. Trying again.", cm.groupNode("owners"), convertError(err))
			if !sleepOrDie(&cm.t, attempt) {
				return false, false
			}
			attempt++
			continue
		}
		attempt = 0
		if len(left) == 0 {
			return true, true
		}
		if list := fmt.Sprint(left); list != logged {
			logged = list
			cm.logf(slog.LevelWarn, "Partitions still claimed in ZooKeeper after the seal, waiting for their release before joining Kafka's group: %s.", list)
		}
		cm.releaseOrphans()
		poll := time.NewTimer(sealPollInterval)
		select {
		case <-cm.t.Dying():
			poll.Stop()
			return false, false
		case <-poll.C:
		}
	}
}

// reopen registers the instance in ZooKeeper after a switch back: when
// the owners are sealed, once Kafka's group is Empty, and after opening
// them. Each attempt reads the seal again (another instance may have
// opened the owners) and the switch. onKafka is true when the switch says
// kafka again (not registered), ok false when the manager was
// interrupted.
func (m *migratingCoordinator) reopen() (onKafka, ok bool) {
	cm := m.cm
	for attempt := 0; ; attempt++ {
		var sealed bool
		err := cm.zkCall(cm.zkTimeout(), func() (err error) { sealed, err = cm.ownersSealed(); return err })
		switch {
		case err != nil:
			cm.logf(slog.LevelWarn, "Failed to read the group's owner nodes (%s): %s. Trying again.", cm.groupNode("owners"), convertError(err))
		case !sealed:
			return m.registerAgain()
		default:
			opened, onKafka, ok := m.openOwnersOnceEmpty()
			if !ok || onKafka {
				return onKafka, ok
			}
			if opened {
				return m.registerAgain()
			}
		}
		if !m.pause(attempt) {
			return false, false
		}
	}
}

// openOwnersOnceEmpty opens the sealed owners once Kafka's group is
// Empty, which it asks through the group client (connected at most once
// here: with the brokers unreachable, reopen tries again). opened is
// false after a failure, which it logs; onKafka is true when the switch
// says kafka, ok false when the manager was interrupted.
func (m *migratingCoordinator) openOwnersOnceEmpty() (opened, onKafka, ok bool) {
	cm := m.cm
	if !m.sw.read() {
		return false, false, false
	}
	if m.sw.kafka() {
		return false, true, true
	}
	if _, err := m.connectKafka(); errors.Is(err, errAbandoned) {
		return false, false, false
	} else if err != nil {
		cm.logf(slog.LevelWarn, "Failed to connect to Kafka's group coordinator, to find its group Empty before opening the owner nodes: %s. Trying again.", err)
		return false, false, true
	}
	empty, ok := m.awaitKafkaEmpty()
	if !ok || !empty {
		return false, !empty, ok
	}
	if err := cm.zkCall(cm.zkTimeout(), cm.openOwners); err != nil {
		cm.logf(slog.LevelWarn, "Failed to open the group's owner nodes (%s): %s. Trying again.", cm.groupNode("owners"), convertError(err))
		return false, false, true
	}
	cm.logf(slog.LevelInfo, "Opened the group's owner nodes (%s) again: ZooKeeper's claims are the lock.", cm.groupNode("owners"))
	return true, false, true
}

// intruderWatch is a goroutine that watches the group's registrations
// (ids/) while Kafka's group coordinator keeps the group: every instance
// registered while the switch says kafka is an intruder, which it names
// on Errors() (ErrZookeeperIntruder) and in the log, once per
// registration. Its owner, the migrating coordinator, starts it when
// Kafka takes the group over and stops it (stop) before it hands the
// group back, and at close.
type intruderWatch struct {
	quit chan struct{} // closed by stop
	done chan struct{} // closed by the goroutine when it ends
}

// startIntruderWatch starts an intruderWatch.
func (cm *consumerManager) startIntruderWatch() *intruderWatch {
	w := &intruderWatch{quit: make(chan struct{}), done: make(chan struct{})}
	go cm.watchIntruders(w)
	return w
}

// stop ends the watch and waits until it is gone; a ZooKeeper request in
// flight is left to end with the session (it counts in zkCalls).
func (w *intruderWatch) stop() {
	if w != nil {
		close(w.quit)
		<-w.done
	}
}

// watchIntruders is the goroutine of an intruderWatch.
func (cm *consumerManager) watchIntruders(w *intruderWatch) {
	defer close(w.done)
	reported := make(map[string]bool)
	for attempt := 0; ; {
		type result struct {
			intruders map[string]string
			watch     <-chan zk.Event
			err       error
		}
		answer := make(chan result, 1)
		cm.zkCalls.Add(1)
		go func() { // owned by the session's close, which waits for zkCalls
			defer cm.zkCalls.Done()
			intruders, watch, err := cm.readIntruders()
			answer <- result{intruders, watch, err}
		}()
		var r result
		select {
		case <-w.quit:
			return
		case r = <-answer:
		}
		if r.err != nil {
			cm.logf(slog.LevelWarn, "Failed to watch the group's registrations in ZooKeeper: %s. Trying again.", convertError(r.err))
			retry := time.NewTimer(retryDelay(attempt))
			attempt++
			select {
			case <-w.quit:
				retry.Stop()
				return
			case <-retry.C:
			}
			continue
		}
		attempt = 0
		for id, registration := range r.intruders {
			if reported[id] {
				continue
			}
			reported[id] = true
			err := fmt.Errorf("%w: instance %s (registration %s) registered in ZooKeeper while the group's coordinator switch says kafka; ZooKeeper refuses its claims (the owner nodes are sealed), stop it", ErrZookeeperIntruder, id, registration)
			cm.logf(slog.LevelError, "%s.", err)
			cm.sendError(err)
		}
		for id := range reported {
			if _, ok := r.intruders[id]; !ok {
				delete(reported, id) // gone: named again if it comes back
			}
		}
		select {
		case <-w.quit:
			return
		case <-r.watch:
		}
	}
}

// readIntruders returns the registrations under ids/ (ID → registration)
// when the switch says kafka (none otherwise), and a watch on ids/.
func (cm *consumerManager) readIntruders() (map[string]string, <-chan zk.Event, error) {
	if err := cm.mkdirs(cm.groupNode("ids")); err != nil {
		return nil, nil, err
	}
	ids, _, watch, err := cm.zkConn.ChildrenW(cm.groupNode("ids"))
	if err != nil || len(ids) == 0 {
		return nil, watch, err
	}
	value, _, _, err := cm.readSwitch(false)
	if err != nil || value != switchKafka {
		return nil, watch, err
	}
	intruders := make(map[string]string, len(ids))
	for _, id := range ids {
		data, _, err := cm.zkConn.Get(cm.groupNode("ids", id))
		if errors.Is(err, zk.ErrNoNode) {
			continue
		} else if err != nil {
			return nil, nil, err
		}
		intruders[id] = string(data)
	}
	return intruders, watch, nil
}
