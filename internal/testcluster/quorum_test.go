package testcluster_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/goleak"

	"github.com/kafkaconsumer/kafkaconsumer/internal/testcluster"
)

// TestZooKeeperQuorumCut cuts a follower of a 3-node ensemble from the
// quorum with the harness's timing and with a production-like one: a
// client connected to that follower alone still reads at once, its syncs
// hang, and once syncLimit × tickTime has passed the follower stops
// serving; the other two go on taking writes, and the follower, restored,
// rejoins and serves them. Then it cuts the leader: the other two elect
// another. KAFKA_VERSION and ZOOKEEPER_VERSION pick the releases.
func TestZooKeeperQuorumCut(t *testing.T) {
	skipShort(t)
	for _, tc := range []struct {
		name      string
		tick      time.Duration // 0: the harness's, 500 ms
		syncLimit int           // 0: the harness's, 10
	}{
		{"harness timing", 0, 0},
		{"production timing", 2 * time.Second, 5},
	} {
		t.Run(tc.name, func(t *testing.T) { testZooKeeperQuorumCut(t, tc.tick, tc.syncLimit) })
	}
}

func testZooKeeperQuorumCut(t *testing.T, tick time.Duration, syncLimit int) {
	kafka, zookeeper := testcluster.VersionsFromEnv()
	c, err := testcluster.Start(testcluster.Options{QuickBrokers: true, Logf: t.Logf, ZooKeepers: 3, KafkaVersion: kafka, ZooKeeperVersion: zookeeper,
		ZooKeeperTickTime: tick, ZooKeeperSyncLimit: syncLimit, ZooKeeperQuorumProxies: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		closeCluster(t, c)
		// Close ends the quorum proxies too.
		goleak.VerifyNone(t, goleak.IgnoreTopFunction("github.com/rcrowley/go-metrics.(*meterArbiter).tick"))
	}()
	if tick == 0 {
		tick, syncLimit = 500*time.Millisecond, 10
	}
	limit := time.Duration(syncLimit) * tick
	checkNoDirectQuorumConns(t, c)

	x := -1
	for i := range 3 {
		if mode, err := c.ZooKeeperMode(i); err != nil {
			t.Fatal(err)
		} else if mode == "follower" && x < 0 {
			x = i
		}
	}
	if x < 0 {
		t.Fatal("no follower in the ensemble")
	}
	servers := strings.Split(c.ZookeeperPeers(), ",")
	rest := slices.Delete(slices.Clone(servers), x, x+1)
	t.Logf("cutting ZooKeeper node %d (%s), a follower; syncLimit × tickTime = %s", x, servers[x], limit)

	var events eventLog
	// 30 s: the session outlives the cut, which ends it past syncLimit.
	onX, _, err := zk.Connect(servers[x:x+1], 30*time.Second, zk.WithLogger(nopLogger{}), zk.WithEventCallback(events.add))
	if err != nil {
		t.Fatal(err)
	}
	defer onX.Close()
	// The Sync gets a session of its own: ZooKeeper answers a session's
	// requests in order, so reads would wait behind it.
	syncOnX, _, err := zk.Connect(servers[x:x+1], 30*time.Second, zk.WithLogger(nopLogger{}))
	if err != nil {
		t.Fatal(err)
	}
	defer syncOnX.Close()
	onRest, _, err := zk.Connect(rest, 30*time.Second, zk.WithLogger(nopLogger{}))
	if err != nil {
		t.Fatal(err)
	}
	defer onRest.Close()
	const root = "/quorum-cut"
	if _, err := onRest.Create(root, []byte("before"), 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the follower to see "+root, func() error {
		_, err := onX.Sync(root)
		if err == nil {
			_, _, err = onX.Get(root)
		}
		if err == nil {
			_, _, err = syncOnX.Get(root)
		}
		return err
	})
	written := []string{}
	write := func(name string) {
		t.Helper()
		if _, err := onRest.Create(root+"/"+name, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatalf("writing %s on the rest of the ensemble: %v", name, err)
		}
		written = append(written, name)
	}

	if err := c.CutZooKeeperFromQuorum(x); err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	// Right after the cut, the follower still answers reads.
	if data, _, err := onX.Get(root); err != nil || string(data) != "before" {
		t.Fatalf("reading on the cut follower right after the cut: %q, %v", data, err)
	}
	// The rest of the ensemble takes writes, which the cut follower,
	// still serving, does not see.
	write("during-1")
	if ok, _, err := onX.Exists(root + "/during-1"); err != nil || ok {
		t.Fatalf("the cut follower: Exists(during-1) = %v, %v; want false, as it hears nothing from its leader", ok, err)
	}
	if since := time.Since(cut); since > limit/2 {
		t.Logf("warning: the checks right after the cut took %s (syncLimit × tickTime %s)", since, limit)
	}

	// A Sync on the cut follower waits for its leader. (ZooKeeper 3.5
	// then answers no request of any session until it has its answer:
	// its CommitProcessor serves nothing while a request waits for the
	// leader. From 3.6 on, only the requests of the same session wait.)
	serialised := strings.HasPrefix(c.ZooKeeperVersion(), "3.5.")
	type result struct {
		err error
		at  time.Time
	}
	// Ends when Sync returns: when the follower drops its clients, or
	// when syncOnX closes.
	synced := make(chan result, 1)
	go func() {
		_, err := syncOnX.Sync("/")
		synced <- result{err, time.Now()}
	}()
	// Watches the follower's srvr answer, until it says it does not
	// serve or stop closes.
	notServing, stop := make(chan time.Time, 1), make(chan struct{})
	var srvr sync.WaitGroup
	srvr.Add(1)
	go func() {
		defer srvr.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			if _, err := c.ZooKeeperMode(x); errors.Is(err, testcluster.ErrZooKeeperNotServing) {
				notServing <- time.Now()
				return
			}
			select {
			case <-tick.C:
			case <-stop:
				return
			}
		}
	}()
	defer srvr.Wait()
	defer close(stop)

	syncWait := time.NewTimer(time.Until(cut.Add(2 * time.Second)))
	defer syncWait.Stop()
	select {
	case r := <-synced:
		t.Fatalf("Sync on the cut follower returned %v after %s; want it to wait", r.err, r.at.Sub(cut))
	case <-syncWait.C:
	}

	// About syncLimit × tickTime after the cut (and before a generous
	// deadline), the follower stops serving: it drops its clients, whose
	// pending Sync fails and whose reads fail from then on (with 3.5, the
	// read waiting behind the Sync), and srvr says it does not serve.
	var lastRead, readFailed time.Time
	var readErr error
	deadline := time.NewTimer(time.Until(cut.Add(limit + 30*time.Second)))
	defer deadline.Stop()
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for {
		if _, _, err := onX.Get(root); err == nil {
			lastRead = time.Now()
		} else {
			readFailed, readErr = time.Now(), err
			break
		}
		select {
		case <-poll.C:
		case <-deadline.C:
			t.Fatalf("the cut follower still answers reads %s after the cut (syncLimit × tickTime %s)", time.Since(cut), limit)
		}
	}
	var synced1 result
	select {
	case synced1 = <-synced:
	case <-deadline.C:
		t.Fatalf("Sync on the cut follower still waits %s after the cut", time.Since(cut))
	}
	var stopped time.Time
	select {
	case stopped = <-notServing:
	case <-deadline.C:
		t.Fatalf("srvr: the cut follower still serves %s after the cut", time.Since(cut))
	}
	lastReadAt := "none after the Sync was sent"
	if !lastRead.IsZero() {
		lastReadAt = lastRead.Sub(cut).String() + " after the cut"
	}
	t.Logf("cut follower (ZooKeeper %s): last read answered %s, client disconnected after %s, next read failed after %s (%v); "+
		"pending Sync failed after %s (%v); srvr not serving after %s",
		c.ZooKeeperVersion(), lastReadAt, events.firstAfter(cut, zk.StateDisconnected), readFailed.Sub(cut), readErr,
		synced1.at.Sub(cut), synced1.err, stopped.Sub(cut))
	if synced1.err == nil {
		t.Error("Sync on the cut follower succeeded")
	}
	// The follower heard its leader last at most a tick before the cut.
	early := limit - tick
	if !serialised && lastRead.Sub(cut) < early {
		t.Errorf("the cut follower stopped answering reads (last: %s), before syncLimit × tickTime (%s) less a tick", lastReadAt, limit)
	}
	if stopped.Sub(cut) < early {
		t.Errorf("the cut follower stopped serving %s after the cut, before syncLimit × tickTime (%s) less a tick", stopped.Sub(cut), limit)
	}
	write("during-2") // the rest still has a quorum

	if err := c.RestoreZooKeeperQuorum(x); err != nil {
		t.Fatal(err)
	}
	restored := time.Now()
	waitFor(t, 60*time.Second, "the restored node to follow", func() error {
		mode, err := c.ZooKeeperMode(x)
		if err == nil && mode != "follower" {
			err = fmt.Errorf("mode %s", mode)
		}
		return err
	})
	rejoined := time.Since(restored)
	// It serves again, and has what was written while it was cut.
	waitFor(t, 60*time.Second, "the restored node to serve the writes made during the cut", func() error {
		if _, err := onX.Sync(root); err != nil {
			return err
		}
		children, _, err := onX.Children(root)
		if err != nil {
			return err
		}
		slices.Sort(children)
		if !slices.Equal(children, written) {
			return fmt.Errorf("children %q, want %q", children, written)
		}
		return nil
	})
	t.Logf("restored node: follows %s after the restore, serves its client %s after", rejoined, time.Since(restored))
	write("after")
	if err := c.Healthy(30 * time.Second); err != nil {
		t.Fatal(err)
	}

	// The leader, cut, steps down, and the other two elect one of them.
	leader, err := c.ZooKeeperLeader()
	if err != nil {
		t.Fatal(err)
	}
	onOthers, _, err := zk.Connect(slices.Delete(slices.Clone(servers), leader, leader+1), 30*time.Second, zk.WithLogger(nopLogger{}))
	if err != nil {
		t.Fatal(err)
	}
	defer onOthers.Close()
	if err := c.CutZooKeeperFromQuorum(leader); err != nil {
		t.Fatal(err)
	}
	cut = time.Now()
	waitFor(t, limit+30*time.Second, "another leader", func() error {
		l, err := c.ZooKeeperLeader()
		if err == nil && l == leader {
			err = fmt.Errorf("node %d still leads", l)
		}
		return err
	})
	elected := time.Since(cut)
	waitFor(t, 30*time.Second, "a write without the cut leader", func() error {
		_, err := onOthers.Create(root+"/leader-cut", nil, 0, zk.WorldACL(zk.PermAll))
		if errors.Is(err, zk.ErrNodeExists) { // an earlier try that failed late
			err = nil
		}
		return err
	})
	if err := c.RestoreZooKeeperQuorum(leader); err != nil {
		t.Fatal(err)
	}
	restored = time.Now()
	waitFor(t, 60*time.Second, "the restored leader to follow", func() error {
		mode, err := c.ZooKeeperMode(leader)
		if err == nil && mode != "follower" {
			err = fmt.Errorf("mode %s", mode)
		}
		return err
	})
	t.Logf("cut leader (node %d): another leads %s after the cut; restored, it follows %s after", leader, elected, time.Since(restored))
	if err := c.Healthy(30 * time.Second); err != nil {
		t.Fatal(err)
	}

	// A node stays cut across a restart; StartZooKeeper does not wait for
	// it to serve then. The proxies keep their ports.
	if err := c.StopZooKeeper(x); err != nil {
		t.Fatal(err)
	}
	if err := c.CutZooKeeperFromQuorum(x); err != nil {
		t.Fatal(err)
	}
	if err := c.StartZooKeeper(x); err != nil {
		t.Fatal(err)
	}
	if mode, err := c.ZooKeeperMode(x); !errors.Is(err, testcluster.ErrZooKeeperNotServing) {
		t.Fatalf("a cut node, restarted: ZooKeeperMode = %q, %v; want ErrZooKeeperNotServing", mode, err)
	}
	if err := c.RestoreZooKeeperQuorum(x); err != nil {
		t.Fatal(err)
	}
	if err := c.Healthy(60 * time.Second); err != nil {
		t.Fatal(err)
	}
	checkNoDirectQuorumConns(t, c)
}

// checkNoDirectQuorumConns checks that no ZooKeeper node is connected to
// another's quorum or election port but through the quorum proxies.
func checkNoDirectQuorumConns(t *testing.T, c *testcluster.Cluster) {
	t.Helper()
	direct, err := testcluster.DirectQuorumConns(c)
	if errors.Is(err, testcluster.ErrNoProcNet) {
		t.Log(err)
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(direct) > 0 {
		t.Errorf("quorum connections past the proxies: %s", strings.Join(direct, "; "))
	}
}

// waitFor polls cond every 100 ms until it returns nil, and fails the test
// with its last error after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: still %v after %s", what, err, timeout)
		}
		<-tick.C
	}
}

type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}

// eventLog records a ZooKeeper connection's session events with their
// times; its add is the connection's event callback.
type eventLog struct {
	mu     sync.Mutex // guards events
	events []timedEvent
}

type timedEvent struct {
	at    time.Time
	state zk.State
}

func (l *eventLog) add(ev zk.Event) {
	if ev.Type != zk.EventSession {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, timedEvent{time.Now(), ev.State})
}

// firstAfter returns how long after start the connection first entered
// state, or "never".
func (l *eventLog) firstAfter(start time.Time, state zk.State) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ev := range l.events {
		if ev.state == state && ev.at.After(start) {
			return ev.at.Sub(start).String()
		}
	}
	return "never"
}
