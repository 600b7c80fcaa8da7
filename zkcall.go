package kafkaconsumer

// Bounded ZooKeeper requests: go-zookeeper has no request timeout (a
// request waits for a connection that may never come), so the requests on
// the paths that must end in bounded time go through zkCall, which waits
// for them until a deadline and leaves them to end when the connection is
// closed. The bound is the session timeout that ZooKeeper negotiated (a
// session that answers nothing for that long has expired), shortened once
// a Shutdown's context is done.

import (
	"errors"
	"fmt"
	"time"
)

// errZookeeperTimeout is what zkCall returns when the request did not
// complete in time.
var errZookeeperTimeout = errors.New("zookeeper request timed out")

// sessionTimeout returns the session timeout that ZooKeeper negotiated, or
// the configured one until a session was established.
func (cm *consumerManager) sessionTimeout() time.Duration {
	if cm.negotiated == nil { // a consumer manager of the unit tests
		return cm.config.Zookeeper.Timeout
	}
	if ms := cm.negotiated.Load(); ms > 0 {
		return time.Duration(ms) * time.Millisecond
	}
	return cm.config.Zookeeper.Timeout
}

// zkTimeout is how long a request on the instance's ZooKeeper session may
// wait: the session timeout (a session that answers nothing for that long
// has expired), or until the ZooKeeper step of a shutdown whose context is
// done ends (see zookeeperAfterCtxDone).
func (cm *consumerManager) zkTimeout() time.Duration {
	return time.Until(cm.bound(time.Now().Add(cm.sessionTimeout()), zookeeperAfterCtxDone))
}

// zkCall runs f, which makes requests on the instance's ZooKeeper session,
// and waits for it at most timeout (at most the session timeout): then it
// returns errZookeeperTimeout, and f goes on until its request ends, at
// the latest when closeConnections closes the connection and waits for
// it. A timeout of 0 or less fails at once, without running f.
func (cm *consumerManager) zkCall(timeout time.Duration, f func() error) error {
	if timeout <= 0 {
		return errZookeeperTimeout
	}
	if t := cm.sessionTimeout(); timeout > t {
		timeout = t
	}
	done := make(chan error, 1)
	cm.zkCalls.Add(1)
	go func() { // owned by closeConnections, which waits for it
		defer cm.zkCalls.Done()
		done <- f()
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case err := <-done:
		return err
	case <-timer.C:
		return fmt.Errorf("%w after %s", errZookeeperTimeout, timeout)
	}
}
