package kafkaconsumer

import (
	"fmt"
	"reflect"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/go-zookeeper/zk"
)

// zkWatchers is a snapshot of the watches that a consumer's ZooKeeper
// session (its go-zookeeper Conn) holds: one buffered channel per watch
// set and not fired yet, by path and watch type. Besides the
// subscription's, the session watches the group's instances and the
// owner nodes of the partitions it waits for.
type zkWatchers struct {
	keys     int            // watched (path, watch type) pairs
	channels int            // watcher channels over all keys
	perKey   map[string]int // "path (type)" -> its channels
}

// maxPerKey returns the key with the most channels, and their number.
func (w zkWatchers) maxPerKey() (string, int) {
	var worst string
	most := 0
	for key, n := range w.perKey {
		if n > most || (n == most && key < worst) {
			worst, most = key, n
		}
	}
	return worst, most
}

func (w zkWatchers) String() string {
	keys := make([]string, 0, len(w.perKey))
	for key := range w.perKey {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "%d channels on %d watched paths:", w.channels, w.keys)
	for _, key := range keys {
		fmt.Fprintf(&b, "\n\t%3d %s", w.perKey[key], key)
	}
	return b.String()
}

// unexportedField returns the named field of the struct that v points to,
// readable and writable although it is unexported.
func unexportedField(t testing.TB, v reflect.Value, name string) reflect.Value {
	t.Helper()
	f := v.Elem().FieldByName(name)
	if !f.IsValid() {
		t.Fatalf("%s has no field %q (did the dependency change?)", v.Type(), name)
	}
	return reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
}

// watchersOf counts the watcher channels of the consumer's ZooKeeper
// session. It reads the unexported Conn.watchers map under the Conn's own
// watchersLock, as the client does, so that it does not race with the
// client's goroutines.
func watchersOf(t testing.TB, c Consumer) zkWatchers {
	t.Helper()
	conn := c.(*consumerManager).zkProbe // set by Join, read only afterwards
	lockField := unexportedField(t, reflect.ValueOf(conn), "watchersLock")
	lock, ok := lockField.Addr().Interface().(*sync.Mutex)
	if !ok {
		t.Fatalf("zk.Conn.watchersLock is a %s, not a sync.Mutex", lockField.Type())
	}
	watchers := unexportedField(t, reflect.ValueOf(conn), "watchers")
	if watchers.Kind() != reflect.Map || watchers.Type().Elem().Kind() != reflect.Slice {
		t.Fatalf("zk.Conn.watchers is a %s, not a map of slices", watchers.Type())
	}

	lock.Lock()
	defer lock.Unlock()
	w := zkWatchers{perKey: make(map[string]int)}
	for it := watchers.MapRange(); it.Next(); {
		key := it.Key() // watchPathType{path string; wType watchType}
		name := fmt.Sprintf("%s (type %d)", key.FieldByName("path").String(), key.FieldByName("wType").Int())
		n := it.Value().Len()
		w.keys++
		w.channels += n
		w.perKey[name] += n
	}
	return w
}

// heapInUse returns the bytes of live heap objects after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// checkWatchers logs the watches of the consumer's ZooKeeper client, and
// fails the test if a watched path has more than two watchers (one is
// expected) or the client holds more than two per path in all.
func checkWatchers(t testing.TB, c Consumer, phase string) zkWatchers {
	t.Helper()
	w := watchersOf(t, c)
	t.Logf("%s: %s", phase, w)
	if key, n := w.maxPerKey(); n > 2 {
		t.Errorf("%s: %d watcher channels on %s; want at most 2 per path", phase, n, key)
	}
	if w.channels > 2*w.keys {
		t.Errorf("%s: %d watcher channels on %d watched paths; want at most %d", phase, w.channels, w.keys, 2*w.keys)
	}
	return w
}

// TestIntegrationPatternWatchesBounded checks that a pattern subscription
// does not pile up watches in the ZooKeeper client: every topic created in
// the cluster fires the topic-list watch and makes the consumer watch its
// subscription again; the per-topic watches that did not fire must be
// reused, not set again next to the old ones, so that the client holds about
// one watcher per watched path however many topics are created.
func TestIntegrationPatternWatchesBounded(t *testing.T) {
	parallelClusterTest(t)
	client := newTestClient(t)
	admin := newTestAdmin(t, client)
	prefix := uniqueName("it-pw")
	c := join(t, prefix, WhitelistSubscription(regexp.MustCompile("^"+regexp.QuoteMeta(prefix)+`\.m\.`)), nil)
	col := collect(c, nil)
	defer col.close(t)

	matching := 0
	createMatching := func() {
		t.Helper()
		createTopic(t, admin, fmt.Sprintf("%s.m.%d", prefix, matching), 1)
		matching++
		// The consumer watched its subscription again after the creation
		// once it runs the new topic's partition.
		waitFor(t, 30*time.Second, fmt.Sprintf("%d matching topics to be consumed", matching), func() bool { return len(c.Stats()) == matching })
	}
	check := func(phase string) zkWatchers {
		t.Helper()
		return checkWatchers(t, c, fmt.Sprintf("%s, %d matching topics", phase, matching))
	}

	for i := 0; i < 3; i++ {
		createMatching()
	}
	heapBefore := heapInUse()
	before := check("after 3 matching topics")

	// 15 topics that do not match: each fires the topic-list watch. The
	// consumer has handled them all once it runs the matching topic
	// created after them.
	const others = 15
	for i := 0; i < others; i++ {
		createTopic(t, admin, fmt.Sprintf("%s.x.%d", prefix, i), 1)
	}
	createMatching()
	check(fmt.Sprintf("after %d topics that do not match and 1 that does", others))

	// 15 more matching topics, one at a time.
	for i := 0; i < 15; i++ {
		createMatching()
	}
	after := check(fmt.Sprintf("after %d topic creations", matching-3+others))
	heapAfter := heapInUse()
	const chanBytes = 96 + int(unsafe.Sizeof(zk.Event{})) // runtime.hchan plus its one-event buffer, on 64-bit
	t.Logf("watcher channels %d -> %d (about %d -> %d bytes of channels); live heap %d -> %d bytes (whole process, indicative only)",
		before.channels, after.channels, before.channels*chanBytes, after.channels*chanBytes, heapBefore, heapAfter)

	// A partition added to a matching topic fires the watch on that
	// topic's node (the one a merger took): it is read and watched again.
	topic := prefix + ".m.0"
	if err := admin.CreatePartitions(topic, 2, nil, false); err != nil {
		t.Fatalf("add a partition to %s: %s", topic, err)
	}
	waitFor(t, 30*time.Second, "the added partition to be consumed", func() bool { return len(c.Stats()) == matching+1 })
	check("after adding a partition to " + topic)
}

// TestIntegrationStaticSubscriptionWatchesBounded checks that a static
// subscription with a topic that does not exist yet, which watches the topic
// list until it is created, does not pile up watches on the topics it has
// at every topic created meanwhile, and picks the missing one up.
func TestIntegrationStaticSubscriptionWatchesBounded(t *testing.T) {
	parallelClusterTest(t)
	client := newTestClient(t)
	admin := newTestAdmin(t, client)
	prefix := uniqueName("it-sw")
	present, missing := prefix+".present", prefix+".missing"
	createTopic(t, admin, present, 1)
	c := join(t, prefix, TopicSubscription(present, missing), nil)
	col := collect(c, nil)
	defer col.close(t)
	waitFor(t, 30*time.Second, "the existing topic to be consumed", func() bool { return len(c.Stats()) == 1 })

	for i := 0; i < 10; i++ {
		createTopic(t, admin, fmt.Sprintf("%s.other.%d", prefix, i), 1)
	}
	createTopic(t, admin, missing, 1)
	waitFor(t, 30*time.Second, "the topic created later to be consumed", func() bool { return len(c.Stats()) == 2 })
	checkWatchers(t, c, "after 10 other topics and the missing one were created")
}

// TestPatternWatchesMergerStop checks the hand-over of watch channels from a
// merger to the watchCache: stop tells which watch's event the merger took,
// and leaves the events it did not take in their channels.
func TestPatternWatchesMergerStop(t *testing.T) {
	verifyNoLeaks(t) // every merger stopped or ended
	newWatches := func(n int) ([]chan zk.Event, []watchChan) {
		chans := make([]chan zk.Event, n)
		in := make([]watchChan, n)
		for i := range chans {
			chans[i] = make(chan zk.Event, 1) // as the ZooKeeper client makes them
			in[i] = sessionWatch(chans[i])
		}
		return chans, in
	}
	fire := func(ch chan zk.Event) {
		ch <- zk.Event{Type: zk.EventNodeDataChanged}
		close(ch)
	}

	t.Run("stopped before any event", func(t *testing.T) {
		chans, in := newWatches(3)
		m, out := startMerger(in)
		if i := m.stop(); i != -1 {
			t.Fatalf("stop() = %d, want -1", i)
		}
		if _, ok := <-out; ok {
			t.Error("a stopped merger delivered an event")
		}
		fire(chans[1])
		w := &pendingWatch{changed: in[1]}
		if !w.hasFired() {
			t.Error("the event of a watch fired after stop was lost")
		}
		if other := (&pendingWatch{changed: in[0]}); other.hasFired() {
			t.Error("a watch that did not fire reports fired")
		}
	})

	t.Run("stopped after an event", func(t *testing.T) {
		chans, in := newWatches(3)
		m, out := startMerger(in)
		fire(chans[2])
		if ev, ok := <-out; !ok || ev.Type != zk.EventNodeDataChanged {
			t.Fatalf("merged event %+v, %t; want the data-changed event", ev, ok)
		}
		if i := m.stop(); i != 2 {
			t.Fatalf("stop() = %d, want 2, the watch that fired", i)
		}
		for i := 0; i < 2; i++ {
			if w := (&pendingWatch{changed: in[i]}); w.hasFired() {
				t.Errorf("watch %d did not fire, but reports fired", i)
			}
		}
	})

	t.Run("no watches", func(t *testing.T) {
		m, out := startMerger(nil)
		if i := m.stop(); i != -1 {
			t.Fatalf("stop() = %d, want -1", i)
		}
		select {
		case ev := <-out:
			t.Fatalf("a merger of nothing delivered %+v", ev)
		default:
		}
	})
}

// TestPatternWatchesCacheBegin checks that begin stops the last round's
// merger and marks the watch whose event it took as fired, so that the
// next round sets that watch again and reuses the others.
func TestPatternWatchesCacheBegin(t *testing.T) {
	verifyNoLeaks(t) // every merger stopped or ended
	a, b := make(chan zk.Event, 1), make(chan zk.Event, 1)
	wa, wb := &pendingWatch{changed: sessionWatch(a)}, &pendingWatch{changed: sessionWatch(b)}
	var c watchCache
	c.begin()
	c.used = append(c.used, wa, wb)
	out := c.end()

	a <- zk.Event{Type: zk.EventNodeDataChanged}
	close(a)
	<-out // the manager wakes, and watches the subscription again
	c.begin()
	if !wa.fired {
		t.Error("the watch whose event woke the manager is not marked fired")
	}
	if wb.hasFired() {
		t.Error("the watch that did not fire reports fired")
	}
	c.end() // an empty round: its merger never fires
	c.begin()
	if c.merge != nil {
		t.Error("begin left a merger behind")
	}
}
