package kafkaconsumer

// kazoo-go beside go-zookeeper. The consumer talks to ZooKeeper through
// one go-zookeeper session (session.go, topics.go); kazoo-go gives it its
// types (kazooValues builds them without a connection), and runs on the
// archived samuel/go-zookeeper client only where the API hands out a
// *kazoo.Kazoo: a subscription's WatchPartitions called directly, and a
// custom Subscription's (see Subscription). The events and errors of the
// archived client are converted here to go-zookeeper's, so that errors.Is
// works with the package the API shows, and a watch of either client
// is received as one (watchChan).

import (
	"reflect"

	"github.com/go-zookeeper/zk"
	samuelzk "github.com/samuel/go-zookeeper/zk"
	"github.com/wvanbergen/kazoo-go"
)

// kazooValues is a kazoo-go handle that never connects: the consumer
// builds its kazoo values on it (Consumergroup, ConsumergroupInstance,
// Topic, Partition). The methods the consumer calls on them (Consumergroup,
// Instance, Topic, Partition, Topic(), PreferredReplica, Find and the
// lists' sorting) only keep or read the values; a method that reads
// ZooKeeper (Topic.Partitions, Partition.Leader, Consumergroup.Instances,
// ...) would dereference the nil connection, and none is called. Safe for
// concurrent use: it is never changed.
var kazooValues = new(kazoo.Kazoo)

// convertEvent converts an event of the archived ZooKeeper client into one of
// go-zookeeper's. Both forks kept the numbering of event types and states.
func convertEvent(ev samuelzk.Event) zk.Event {
	return zk.Event{
		Type:   zk.EventType(ev.Type),
		State:  zk.State(ev.State),
		Path:   ev.Path,
		Err:    convertError(ev.Err),
		Server: ev.Server,
	}
}

// zkErrors maps the archived client's error values to go-zookeeper's, so
// that errors.Is works with the package the API shows.
var zkErrors = map[error]error{
	samuelzk.ErrConnectionClosed: zk.ErrConnectionClosed,
	samuelzk.ErrUnknown:          zk.ErrUnknown,
	samuelzk.ErrAPIError:         zk.ErrAPIError,
	samuelzk.ErrNoNode:           zk.ErrNoNode,
	samuelzk.ErrNoAuth:           zk.ErrNoAuth,
	samuelzk.ErrBadVersion:       zk.ErrBadVersion,
	samuelzk.ErrNodeExists:       zk.ErrNodeExists,
	samuelzk.ErrNotEmpty:         zk.ErrNotEmpty,
	samuelzk.ErrSessionExpired:   zk.ErrSessionExpired,
	samuelzk.ErrInvalidACL:       zk.ErrInvalidACL,
	samuelzk.ErrAuthFailed:       zk.ErrAuthFailed,
	samuelzk.ErrClosing:          zk.ErrClosing,
	samuelzk.ErrNothing:          zk.ErrNothing,
	samuelzk.ErrSessionMoved:     zk.ErrSessionMoved,
}

func convertError(err error) error {
	if mapped, ok := zkErrors[err]; ok {
		return mapped
	}
	return err
}

// watchChan is the channel of a one-shot ZooKeeper watch, which receives
// one event and is then closed (when the watch fires, or when its client
// closes or loses its session): a channel of go-zookeeper's events for a
// watch of the instance's session (sessionWatch), or of the archived
// client's for one set through a *kazoo.Kazoo (kazooWatch). The watch
// cache and its merger receive from either alike, and convert what they
// receive (eventOf). The zero value is no watch.
type watchChan struct{ ch reflect.Value }

// sessionWatch is a watch of the instance's session.
func sessionWatch(ch <-chan zk.Event) watchChan { return watchChan{reflect.ValueOf(ch)} }

// kazooWatch is a watch set through a *kazoo.Kazoo.
func kazooWatch(ch <-chan samuelzk.Event) watchChan { return watchChan{reflect.ValueOf(ch)} }

// set reports whether w is a watch, not the zero value.
func (w watchChan) set() bool { return w.ch.IsValid() }

// fired reports whether the watch fired: it takes the event (or sees the
// close that follows it) without blocking.
func (w watchChan) fired() bool {
	v, _ := w.ch.TryRecv()
	return v.IsValid() // the zero Value only when the receive would block
}

// eventOf converts what was received from a watchChan to go-zookeeper's
// event: ok false is the channel's close without an event.
func eventOf(v reflect.Value, ok bool) zk.Event {
	if !ok {
		return zk.Event{Type: zk.EventNotWatching, State: zk.StateDisconnected, Err: zk.ErrClosing}
	}
	if ev, isSamuel := v.Interface().(samuelzk.Event); isSamuel {
		return convertEvent(ev)
	}
	ev, _ := v.Interface().(zk.Event) // the only other kind of watchChan
	return ev
}
