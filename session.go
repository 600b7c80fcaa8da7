package kafkaconsumer

// The ZooKeeper nodes of the instance's own session: its registration,
// the group's instances, and the owner nodes of its claims (claims.go uses
// them).

import (
	"errors"
	"fmt"
	"path"
	"strconv"

	"github.com/go-zookeeper/zk"
	"github.com/wvanbergen/kazoo-go"
)

// The instance's ZooKeeper session: its registration, the watch on the
// group's instances and the claims of its partitions all go through one
// connection of the consumer manager, zkConn (Join's probe), so that the
// claims go with the registration when that session ends, and so that what
// this instance wrote it reads back on the same session.
//
// The nodes are those of kazoo-go and of the original library, with the
// same content: /consumers/<group>/ids/<id> holds the subscription,
// /consumers/<group>/owners/<topic>/<partition> the owner's ID; both
// ephemeral. kazoo-go's ClaimPartition checks each of the four parents with
// Exists twice before it creates the node: nine requests a partition, each
// a round trip. claim makes one, and creates the parents only when
// ZooKeeper says they are missing (BENCHMARKS.md, round 4).

// groupNode returns the path of the group's node below /consumers, with the
// chroot, joined with elems.
func (cm *consumerManager) groupNode(elems ...string) string {
	return path.Join(append([]string{cm.config.Zookeeper.Chroot, "/consumers", cm.group}, elems...)...)
}

// ownerNode returns the path of tp's owner node.
func (cm *consumerManager) ownerNode(tp TopicPartition) string {
	return cm.groupNode("owners", tp.Topic, strconv.Itoa(int(tp.Partition)))
}

// createNode creates node, and its missing parents (persistent, empty) when
// ZooKeeper reports them missing, each with its nodeACL.
func (cm *consumerManager) createNode(node string, data []byte, flags int32) error {
	for attempt := 0; ; attempt++ {
		_, err := cm.zkConn.Create(node, data, flags, cm.nodeACL(node))
		if !errors.Is(err, zk.ErrNoNode) || attempt == 3 {
			return err
		}
		if err := cm.mkdirs(path.Dir(node)); err != nil {
			return err
		}
	}
}

// mkdirs creates the persistent node dir and its missing parents; one
// request when only dir is missing.
func (cm *consumerManager) mkdirs(dir string) error {
	if dir == "/" || dir == "." {
		return nil
	}
	err := cm.createNode(dir, nil, 0)
	if errors.Is(err, zk.ErrNodeExists) {
		return nil
	}
	return err
}

// claimNode creates tp's owner node with this instance's ID. A node that
// holds this instance's ID already (left by an earlier session, or by an
// attempt whose answer was lost) is taken over; another instance's node
// gives kazoo.ErrPartitionClaimedByOther.
func (cm *consumerManager) claimNode(tp TopicPartition) error {
	node := cm.ownerNode(tp)
	id := []byte(cm.instance.ID)
	for attempt := 0; ; attempt++ {
		err := cm.createNode(node, id, zk.FlagEphemeral)
		if !errors.Is(err, zk.ErrNodeExists) {
			return err
		}
		data, stat, err := cm.zkConn.Get(node)
		switch {
		case err == nil && string(data) == cm.instance.ID && cm.config.InstanceID != "" && stat.EphemeralOwner != cm.zkConn.SessionID():
			// A previous instance of this InstanceID, whose session has
			// not expired yet: the node goes with it.
			return kazoo.ErrPartitionClaimedByOther
		case err == nil && string(data) == cm.instance.ID:
			return nil
		case err == nil:
			return kazoo.ErrPartitionClaimedByOther
		case errors.Is(err, zk.ErrNoNode) && attempt < 3:
			continue // released in the meantime
		default:
			return err
		}
	}
}

// watchOwner returns the ID in tp's owner node and a watch on the node;
// "" and no watch when the partition has no owner.
func (cm *consumerManager) watchOwner(tp TopicPartition) (string, <-chan zk.Event, error) {
	if h := cm.hooks; h != nil && h.watchOwner != nil {
		if err := h.watchOwner(tp.Topic, tp.Partition); err != nil {
			return "", nil, err
		}
	}
	data, _, watch, err := cm.zkConn.GetW(cm.ownerNode(tp))
	if errors.Is(err, zk.ErrNoNode) {
		return "", nil, nil
	}
	if err != nil {
		return "", nil, err
	}
	return string(data), watch, nil
}

// releaseNode deletes tp's owner node if it holds this instance's ID;
// kazoo.ErrPartitionNotClaimed when it is gone or another instance's.
func (cm *consumerManager) releaseNode(tp TopicPartition) error {
	node := cm.ownerNode(tp)
	data, stat, err := cm.zkConn.Get(node)
	if errors.Is(err, zk.ErrNoNode) {
		return kazoo.ErrPartitionNotClaimed
	} else if err != nil {
		return err
	}
	if string(data) != cm.instance.ID {
		return kazoo.ErrPartitionNotClaimed
	}
	if err := cm.zkConn.Delete(node, stat.Version); errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrBadVersion) {
		return kazoo.ErrPartitionNotClaimed
	} else if err != nil {
		return err
	}
	return nil
}

// registerNode creates the instance's registration node;
// kazoo.ErrInstanceAlreadyRegistered when it exists. An instance that
// follows the group's coordinator switch registers only while the switch
// says zookeeper (registerUnderSwitch), else errCoordinatorSwitched.
func (cm *consumerManager) registerNode() error {
	var err error
	if _, ok := cm.coord.(*migratingCoordinator); ok {
		err = cm.registerUnderSwitch()
	} else {
		err = cm.createNode(cm.groupNode("ids", cm.instance.ID), cm.subscriptionJSON, zk.FlagEphemeral)
	}
	if errors.Is(err, zk.ErrNodeExists) {
		return kazoo.ErrInstanceAlreadyRegistered
	}
	return err
}

// registeredNode reports whether the instance's registration node exists.
// With a Config.InstanceID, the node must also be this session's: another
// session's is another instance's (ErrInstanceIDInUse), or a previous
// instance's of the ID, whose session has not expired yet.
func (cm *consumerManager) registeredNode() (bool, error) {
	exists, stat, err := cm.zkConn.Exists(cm.groupNode("ids", cm.instance.ID))
	if err == nil && exists && cm.config.InstanceID != "" && stat.EphemeralOwner != cm.zkConn.SessionID() {
		return false, fmt.Errorf("%w: %s is registered by another ZooKeeper session (0x%x)", ErrInstanceIDInUse, cm.instance.ID, stat.EphemeralOwner)
	}
	return exists, err
}

// deregisterNode deletes the instance's registration node;
// kazoo.ErrInstanceNotRegistered when it is gone.
func (cm *consumerManager) deregisterNode() error {
	err := cm.zkConn.Delete(cm.groupNode("ids", cm.instance.ID), -1)
	if errors.Is(err, zk.ErrNoNode) {
		return kazoo.ErrInstanceNotRegistered
	}
	return err
}

// watchInstanceNodes returns the group's registered instances and a watch
// on them, creating the group's ids node when it is missing.
func (cm *consumerManager) watchInstanceNodes() (kazoo.ConsumergroupInstanceList, <-chan zk.Event, error) {
	ids := cm.groupNode("ids")
	children, _, watch, err := cm.zkConn.ChildrenW(ids)
	if errors.Is(err, zk.ErrNoNode) {
		if err := cm.mkdirs(ids); err != nil {
			return nil, nil, err
		}
		children, _, watch, err = cm.zkConn.ChildrenW(ids)
	}
	if err != nil {
		return nil, nil, err
	}
	instances := make(kazoo.ConsumergroupInstanceList, 0, len(children))
	for _, id := range children {
		instances = append(instances, cm.kzGroup.Instance(id))
	}
	return instances, watch, nil
}

// closeSession closes conn, a go-zookeeper session whose connections are
// kept in conns, and leaves nothing of it behind. A session that is not
// connected sends nothing more: its connection attempts are cut first,
// else go-zookeeper would connect again as soon as ZooKeeper answers (a
// frozen server resumed), after Close returned, to send its close; and
// with watches to re-set, that is go-zookeeper's data race again (see
// sessionConn). A connected session sends its close, then its connection
// is cut.
func closeSession(conn *zk.Conn, conns *connSet) {
	if conn.State() != zk.StateHasSession {
		conns.cutAll()
	}
	conn.Close()
	conns.cutAll()
}

// zkSession is what the consumer manager asks of its ZooKeeper session
// (zkConn): sessionConn in production; the unit tests put an in-memory
// fake in its place.
type zkSession interface {
	Create(path string, data []byte, flags int32, acl []zk.ACL) (string, error)
	Get(path string) ([]byte, *zk.Stat, error)
	GetW(path string) ([]byte, *zk.Stat, <-chan zk.Event, error)
	ChildrenW(path string) ([]string, *zk.Stat, <-chan zk.Event, error)
	Children(path string) ([]string, *zk.Stat, error)
	Set(path string, data []byte, version int32) (*zk.Stat, error)
	// SessionID is the ID of the session, the ephemeral owner of the
	// nodes it creates; 0 before it has one.
	SessionID() int64
	Delete(path string, version int32) error
	Exists(path string) (bool, *zk.Stat, error)
	Multi(ops ...interface{}) ([]zk.MultiResponse, error)
	Sync(path string) (string, error)
	GetACL(path string) ([]zk.ACL, *zk.Stat, error)
	SetACL(path string, acl []zk.ACL, version int32) (*zk.Stat, error)
}

var _ zkSession = sessionConn{}

// sessionConn is the instance's ZooKeeper connection with a gate: a request
// is sent only while the session is connected, and fails at once with
// zk.ErrNoServer otherwise (its callers retry, or give up at their
// deadline). go-zookeeper queues a request made while it is disconnected
// and sends it as soon as it reconnects, where the answer's zxid, written
// by its receive loop, races with its re-setting of the watches, which
// reads the last zxid without a lock: a data race that -race reports
// (go-zookeeper/zk PR #35). Only a request made in the microseconds
// between the connection's end and the state's change can still be queued
// so.
type sessionConn struct{ *zk.Conn }

// ready returns zk.ErrNoServer unless the session is connected.
func (c sessionConn) ready() error {
	if c.State() != zk.StateHasSession {
		return zk.ErrNoServer
	}
	return nil
}

func (c sessionConn) Create(path string, data []byte, flags int32, acl []zk.ACL) (string, error) {
	if err := c.ready(); err != nil {
		return "", err
	}
	return c.Conn.Create(path, data, flags, acl)
}

func (c sessionConn) Get(path string) ([]byte, *zk.Stat, error) {
	if err := c.ready(); err != nil {
		return nil, nil, err
	}
	return c.Conn.Get(path)
}

func (c sessionConn) GetW(path string) ([]byte, *zk.Stat, <-chan zk.Event, error) {
	if err := c.ready(); err != nil {
		return nil, nil, nil, err
	}
	return c.Conn.GetW(path)
}

func (c sessionConn) ChildrenW(path string) ([]string, *zk.Stat, <-chan zk.Event, error) {
	if err := c.ready(); err != nil {
		return nil, nil, nil, err
	}
	return c.Conn.ChildrenW(path)
}

func (c sessionConn) Children(path string) ([]string, *zk.Stat, error) {
	if err := c.ready(); err != nil {
		return nil, nil, err
	}
	return c.Conn.Children(path)
}

func (c sessionConn) Set(path string, data []byte, version int32) (*zk.Stat, error) {
	if err := c.ready(); err != nil {
		return nil, err
	}
	return c.Conn.Set(path, data, version)
}

func (c sessionConn) Delete(path string, version int32) error {
	if err := c.ready(); err != nil {
		return err
	}
	return c.Conn.Delete(path, version)
}

func (c sessionConn) Exists(path string) (bool, *zk.Stat, error) {
	if err := c.ready(); err != nil {
		return false, nil, err
	}
	return c.Conn.Exists(path)
}

func (c sessionConn) Multi(ops ...interface{}) ([]zk.MultiResponse, error) {
	if err := c.ready(); err != nil {
		return nil, err
	}
	return c.Conn.Multi(ops...)
}

func (c sessionConn) Sync(path string) (string, error) {
	if err := c.ready(); err != nil {
		return "", err
	}
	return c.Conn.Sync(path)
}

func (c sessionConn) GetACL(path string) ([]zk.ACL, *zk.Stat, error) {
	if err := c.ready(); err != nil {
		return nil, nil, err
	}
	return c.Conn.GetACL(path)
}

func (c sessionConn) SetACL(path string, acl []zk.ACL, version int32) (*zk.Stat, error) {
	if err := c.ready(); err != nil {
		return nil, err
	}
	return c.Conn.SetACL(path, acl, version)
}
