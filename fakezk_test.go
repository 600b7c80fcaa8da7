package kafkaconsumer

// An in-memory fake of the instance's ZooKeeper session (zkSession), for
// unit tests of the claims, the registration and the fence without a
// cluster: a tree of nodes with data, version and ephemeral owner; the
// errors a ZooKeeper server returns; one-shot watches; multis applied all
// or nothing; and faults (a call that fails, one whose answer is lost,
// calls that hang until released).

import (
	"errors"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/go-zookeeper/zk"
	"github.com/wvanbergen/kazoo-go"
)

// The sessions that own ephemeral nodes: the fake's own (the calls of the
// consumer manager), and another instance's (nodes the tests put).
const (
	fakeSession  int64 = 1
	otherSession int64 = 2
)

// errFakeRuntimeInconsistency is what go-zookeeper reports for the ops of a
// failed multi after the one that failed (ZooKeeper's code -2, which it
// does not name).
var errFakeRuntimeInconsistency = errors.New("unknown error: -2")

type fakeZK struct {
	mu    sync.Mutex
	nodes fakeTree
	// watches maps a watched path to its watches' channels, by kind.
	dataWatches, childWatches map[string][]chan zk.Event
	calls                     []fakeCall
	faults                    []*fakeFault // the first that matches a call applies, once
	// blocked, when set, holds every call until block's release closes it;
	// waiting counts the calls held.
	blocked  chan struct{}
	blockErr error
	waiting  int
	// advanced is how far the fake's clock (ZooKeeper's, for the nodes'
	// mtime) is ahead of the local one, in ms; see advance.
	advanced int64
}

type fakeNode struct {
	data    []byte
	version int32 // of the data: 0 when created, even when created again
	owner   int64 // the session of an ephemeral node; 0: persistent
	mtime   int64 // when it was created or its data set last, on the fake's clock (ms)
}

// fakeTree maps the paths of the nodes to them; "/" is always there.
type fakeTree map[string]*fakeNode

type fakeCall struct{ op, path string }

// fakeFault changes the next call of op ("" for any).
type fakeFault struct {
	op     string
	before func() // run before the call, without the fake's lock
	err    error  // the call fails with it, without effect
	lost   bool   // the call is applied, and fails with zk.ErrConnectionClosed
}

// fakeEvent is a watch to fire once a change is applied.
type fakeEvent struct {
	child bool // a ChildrenW watch, else a GetW watch
	path  string
	typ   zk.EventType
}

func newFakeZK() *fakeZK {
	return &fakeZK{
		nodes:        fakeTree{"/": {}},
		dataWatches:  make(map[string][]chan zk.Event),
		childWatches: make(map[string][]chan zk.Event),
	}
}

var _ zkSession = (*fakeZK)(nil)

// failNext makes the next call of op fail with err, without effect.
func (f *fakeZK) failNext(op string, err error) {
	f.addFault(&fakeFault{op: op, err: err})
}

// loseNextAnswer applies the next call of op, then fails it with
// zk.ErrConnectionClosed: the connection broke before the answer came.
func (f *fakeZK) loseNextAnswer(op string) {
	f.addFault(&fakeFault{op: op, lost: true})
}

// beforeNext runs do before the next call of op (do may change the tree
// with put and remove).
func (f *fakeZK) beforeNext(op string, do func()) {
	f.addFault(&fakeFault{op: op, before: do})
}

func (f *fakeZK) addFault(ft *fakeFault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults = append(f.faults, ft)
}

// block holds every call from now on until release is called: then the
// held calls fail with err, without effect, or go on when err is nil.
func (f *fakeZK) block() (release func(err error)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan struct{})
	f.blocked = ch
	var once sync.Once
	return func(err error) {
		once.Do(func() {
			f.mu.Lock()
			f.blocked, f.blockErr = nil, err
			f.mu.Unlock()
			close(ch)
		})
	}
}

// held returns how many calls are held by block.
func (f *fakeZK) held() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.waiting
}

// begin records a call and applies the faults before it; it returns the
// fault to apply after it, and the error to fail it with at once.
func (f *fakeZK) begin(op, p string) (*fakeFault, error) {
	f.mu.Lock()
	f.calls = append(f.calls, fakeCall{op, p})
	var ft *fakeFault
	for i, candidate := range f.faults {
		if candidate.op == "" || candidate.op == op {
			ft = candidate
			f.faults = append(f.faults[:i], f.faults[i+1:]...)
			break
		}
	}
	blocked := f.blocked
	if blocked != nil {
		f.waiting++
	}
	f.mu.Unlock()
	if blocked != nil {
		<-blocked
		f.mu.Lock()
		f.waiting--
		err := f.blockErr
		f.mu.Unlock()
		if err != nil {
			return nil, err
		}
	}
	if ft == nil {
		return nil, nil
	}
	if ft.before != nil {
		ft.before()
	}
	return ft, ft.err
}

// lostAnswer reports whether the call's answer is lost (see loseNextAnswer).
func (ft *fakeFault) lostAnswer() bool { return ft != nil && ft.lost }

// count returns how many calls of op were made ("" for all).
func (f *fakeZK) count(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		if op == "" || c.op == op {
			n++
		}
	}
	return n
}

// watched returns how many GetW watches wait on p.
func (f *fakeZK) watched(p string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.dataWatches[p])
}

// watchedChildren returns how many ChildrenW watches wait on p.
func (f *fakeZK) watchedChildren(p string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.childWatches[p])
}

// get returns the node at p, and whether there is one.
func (f *fakeZK) get(p string) (fakeNode, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, ok := f.nodes[p]
	if !ok {
		return fakeNode{}, false
	}
	return *n, true
}

// owner returns the data of the node at p; "" when there is none.
func (f *fakeZK) owner(p string) string {
	n, _ := f.get(p)
	return string(n.data)
}

// put creates the node at p, and its missing parents (persistent), as
// another client would; owner is the session of an ephemeral node, or 0.
// The watches fire as for a Create.
func (f *fakeZK) put(p string, data []byte, owner int64) {
	f.mu.Lock()
	var events []fakeEvent
	for _, dir := range ancestors(p) {
		if _, ok := f.nodes[dir]; !ok {
			_ = f.nodes.create(dir, nil, 0, f.now(), &events)
		}
	}
	if err := f.nodes.create(p, data, owner, f.now(), &events); err != nil {
		f.mu.Unlock()
		panic("fakeZK.put " + p + ": " + err.Error())
	}
	f.fireLocked(events)
	f.mu.Unlock()
}

// remove deletes the node at p, whatever its version, as another client
// (or the expiry of its session) would. The watches fire as for a Delete.
func (f *fakeZK) remove(p string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var events []fakeEvent
	if err := f.nodes.delete(p, -1, &events); err != nil {
		panic("fakeZK.remove " + p + ": " + err.Error())
	}
	f.fireLocked(events)
}

// set replaces the data of the node at p, as another client would (Kafka's
// controller, adding partitions to a topic). The watches fire as for a
// SetData.
func (f *fakeZK) set(p string, data []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, ok := f.nodes[p]
	if !ok {
		panic("fakeZK.set " + p + ": no node")
	}
	n.data = append([]byte(nil), data...)
	n.version++
	n.mtime = f.now()
	f.fireLocked([]fakeEvent{{path: p, typ: zk.EventNodeDataChanged}})
}

// expire ends every watch of the session as go-zookeeper does when it
// finds its session expired: each gets an EventNotWatching with
// zk.ErrSessionExpired, and its channel is closed. The nodes are left as
// they are.
func (f *fakeZK) expire() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, watches := range []map[string][]chan zk.Event{f.dataWatches, f.childWatches} {
		for p, chans := range watches {
			for _, ch := range chans {
				ch <- zk.Event{Type: zk.EventNotWatching, State: zk.StateDisconnected, Path: p, Err: zk.ErrSessionExpired}
				close(ch)
			}
			delete(watches, p)
		}
	}
}

// ancestors returns the parents of p, from the root down, without "/".
func ancestors(p string) []string {
	var dirs []string
	for dir := path.Dir(p); dir != "/"; dir = path.Dir(dir) {
		dirs = append(dirs, dir)
	}
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) < len(dirs[j]) })
	return dirs
}

func validPath(p string) bool {
	return p == "/" || strings.HasPrefix(p, "/") && !strings.HasSuffix(p, "/") && !strings.Contains(p, "//")
}

// children returns the names of p's children, in order.
func (t fakeTree) children(p string) []string {
	var names []string
	for q := range t {
		if q != "/" && path.Dir(q) == p {
			names = append(names, path.Base(q))
		}
	}
	sort.Strings(names)
	return names
}

// create adds a node as ZooKeeper does, with its errors in ZooKeeper's
// order, and records the watches it fires.
func (t fakeTree) create(p string, data []byte, owner, mtime int64, events *[]fakeEvent) error {
	if !validPath(p) || p == "/" {
		return zk.ErrInvalidPath
	}
	parent, ok := t[path.Dir(p)]
	switch {
	case !ok:
		return zk.ErrNoNode
	case t[p] != nil:
		return zk.ErrNodeExists
	case parent.owner != 0:
		return zk.ErrNoChildrenForEphemerals
	}
	t[p] = &fakeNode{data: append([]byte(nil), data...), owner: owner, mtime: mtime}
	*events = append(*events, fakeEvent{child: true, path: path.Dir(p), typ: zk.EventNodeChildrenChanged})
	return nil
}

// delete removes a node as ZooKeeper does (version -1: any), and records
// the watches it fires.
func (t fakeTree) delete(p string, version int32, events *[]fakeEvent) error {
	n, ok := t[p]
	switch {
	case !validPath(p) || p == "/":
		return zk.ErrBadArguments
	case !ok:
		return zk.ErrNoNode
	case version != -1 && version != n.version:
		return zk.ErrBadVersion
	case len(t.children(p)) > 0:
		return zk.ErrNotEmpty
	}
	delete(t, p)
	*events = append(*events,
		fakeEvent{path: p, typ: zk.EventNodeDeleted},
		fakeEvent{child: true, path: p, typ: zk.EventNodeDeleted},
		fakeEvent{child: true, path: path.Dir(p), typ: zk.EventNodeChildrenChanged})
	return nil
}

// clone copies the tree, for a multi to change.
func (t fakeTree) clone() fakeTree {
	c := make(fakeTree, len(t))
	for p, n := range t {
		copied := *n
		c[p] = &copied
	}
	return c
}

// fireLocked fires the watches of events, each once, as go-zookeeper
// delivers them: on a channel of one, closed after the event; f.mu held.
func (f *fakeZK) fireLocked(events []fakeEvent) {
	for _, ev := range events {
		watches := f.dataWatches
		if ev.child {
			watches = f.childWatches
		}
		for _, ch := range watches[ev.path] {
			ch <- zk.Event{Type: ev.typ, State: zk.StateSyncConnected, Path: ev.path}
			close(ch)
		}
		delete(watches, ev.path)
	}
}

func (f *fakeZK) stat(n *fakeNode, p string) *zk.Stat {
	return &zk.Stat{Version: n.version, EphemeralOwner: n.owner, DataLength: int32(len(n.data)), NumChildren: int32(len(f.nodes.children(p))), Mtime: n.mtime}
}

func (f *fakeZK) Create(p string, data []byte, flags int32, acl []zk.ACL) (string, error) {
	ft, err := f.begin("Create", p)
	if err != nil {
		return "", err
	}
	if flags&^zk.FlagEphemeral != 0 {
		return "", zk.ErrBadArguments // sequential nodes and TTLs are not faked
	}
	owner := int64(0)
	if flags&zk.FlagEphemeral != 0 {
		owner = fakeSession
	}
	f.mu.Lock()
	var events []fakeEvent
	err = f.nodes.create(p, data, owner, f.now(), &events)
	f.fireLocked(events)
	f.mu.Unlock()
	if ft.lostAnswer() {
		return "", zk.ErrConnectionClosed
	}
	if err != nil {
		return "", err
	}
	return p, nil
}

func (f *fakeZK) Get(p string) ([]byte, *zk.Stat, error) {
	data, _, stat, _, err := f.read("Get", p, nil)
	return data, stat, err
}

func (f *fakeZK) GetW(p string) ([]byte, *zk.Stat, <-chan zk.Event, error) {
	data, _, stat, watch, err := f.read("GetW", p, f.dataWatches)
	return data, stat, watch, err
}

func (f *fakeZK) ChildrenW(p string) ([]string, *zk.Stat, <-chan zk.Event, error) {
	_, children, stat, watch, err := f.read("ChildrenW", p, f.childWatches)
	return children, stat, watch, err
}

// read is a call of op that reads the node at p, and sets a watch of
// watches on it unless watches is nil (none is set on a missing node).
func (f *fakeZK) read(op, p string, watches map[string][]chan zk.Event) (data []byte, children []string, stat *zk.Stat, watch <-chan zk.Event, err error) {
	ft, err := f.begin(op, p)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	n, ok := f.nodes[p]
	if !ok {
		return nil, nil, nil, nil, zk.ErrNoNode
	}
	if watches != nil {
		ch := make(chan zk.Event, 1)
		watches[p] = append(watches[p], ch)
		watch = ch
	}
	if ft.lostAnswer() {
		return nil, nil, nil, nil, zk.ErrConnectionClosed
	}
	return append([]byte(nil), n.data...), f.nodes.children(p), f.stat(n, p), watch, nil
}

func (f *fakeZK) Children(p string) ([]string, *zk.Stat, error) {
	_, children, stat, _, err := f.read("Children", p, nil)
	return children, stat, err
}

// Set sets the data of the node at p, as ZooKeeper does (version -1:
// any), stamping it with the fake's clock.
func (f *fakeZK) Set(p string, data []byte, version int32) (*zk.Stat, error) {
	ft, err := f.begin("Set", p)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	n, ok := f.nodes[p]
	switch {
	case !ok:
		err = zk.ErrNoNode
	case version != -1 && version != n.version:
		err = zk.ErrBadVersion
	default:
		n.data, n.mtime = append([]byte(nil), data...), f.now()
		n.version++
		f.fireLocked([]fakeEvent{{path: p, typ: zk.EventNodeDataChanged}})
	}
	var stat *zk.Stat
	if err == nil {
		stat = f.stat(n, p)
	}
	f.mu.Unlock()
	if ft.lostAnswer() {
		return nil, zk.ErrConnectionClosed
	}
	return stat, err
}

// SessionID is the fake's own session, the owner of the ephemeral nodes
// it creates.
func (f *fakeZK) SessionID() int64 { return fakeSession }

// now is the fake's clock, ZooKeeper's: the local one, advanced by
// advance; in ms since the epoch. f.mu held or not: advanced is read
// atomically.
func (f *fakeZK) now() int64 { return time.Now().UnixMilli() + atomic.LoadInt64(&f.advanced) }

// advance moves the fake's clock d ahead of the local one: the nodes
// written from now on are stamped later, as by a ZooKeeper whose clock
// differs from the instance's.
func (f *fakeZK) advance(d time.Duration) { atomic.AddInt64(&f.advanced, d.Milliseconds()) }

func (f *fakeZK) Delete(p string, version int32) error {
	ft, err := f.begin("Delete", p)
	if err != nil {
		return err
	}
	f.mu.Lock()
	var events []fakeEvent
	err = f.nodes.delete(p, version, &events)
	f.fireLocked(events)
	f.mu.Unlock()
	if ft.lostAnswer() {
		return zk.ErrConnectionClosed
	}
	return err
}

func (f *fakeZK) Exists(p string) (bool, *zk.Stat, error) {
	ft, err := f.begin("Exists", p)
	if err != nil {
		return false, nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if ft.lostAnswer() {
		return false, nil, zk.ErrConnectionClosed
	}
	n, ok := f.nodes[p]
	if !ok {
		return false, &zk.Stat{}, nil
	}
	return true, f.stat(n, p), nil
}

// Sync answers at once, as the fake has no followers; faults apply to it
// as to the other requests.
func (f *fakeZK) Sync(p string) (string, error) {
	ft, err := f.begin("Sync", p)
	if err != nil {
		return "", err
	}
	if ft.lostAnswer() {
		return "", zk.ErrConnectionClosed
	}
	return p, nil
}

// Multi applies creates, deletes and version checks all or nothing. When
// an op fails, go-zookeeper reports the ops before it with no error, the
// op with its error, those after it with a runtime inconsistency, and
// returns the op's error.
func (f *fakeZK) Multi(ops ...interface{}) ([]zk.MultiResponse, error) {
	ft, err := f.begin("Multi", "")
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	tree := f.nodes.clone()
	var events []fakeEvent
	responses := make([]zk.MultiResponse, len(ops))
	failed := -1
	for i, op := range ops {
		var err error
		switch op := op.(type) {
		case *zk.CreateRequest:
			owner := int64(0)
			if op.Flags == zk.FlagEphemeral {
				owner = fakeSession
			} else if op.Flags != 0 {
				err = zk.ErrBadArguments
				break
			}
			if err = tree.create(op.Path, op.Data, owner, f.now(), &events); err == nil {
				responses[i].String = op.Path
			}
		case *zk.DeleteRequest:
			err = tree.delete(op.Path, op.Version, &events)
		case *zk.SetDataRequest:
			if n, ok := tree[op.Path]; !ok {
				err = zk.ErrNoNode
			} else if op.Version != -1 && op.Version != n.version {
				err = zk.ErrBadVersion
			} else {
				n.data, n.mtime = append([]byte(nil), op.Data...), f.now()
				n.version++
				events = append(events, fakeEvent{path: op.Path, typ: zk.EventNodeDataChanged})
			}
		case *zk.CheckVersionRequest:
			if n, ok := tree[op.Path]; !ok {
				err = zk.ErrNoNode
			} else if op.Version != -1 && op.Version != n.version {
				err = zk.ErrBadVersion
			}
		default:
			panic("fakeZK.Multi: op not faked")
		}
		if err != nil {
			failed = i
			responses[i] = zk.MultiResponse{Error: err}
			break
		}
	}
	if failed >= 0 {
		for i := range responses {
			if i < failed {
				responses[i] = zk.MultiResponse{}
			} else if i > failed {
				responses[i] = zk.MultiResponse{Error: errFakeRuntimeInconsistency}
			}
		}
		if ft.lostAnswer() {
			return nil, zk.ErrConnectionClosed
		}
		return responses, responses[failed].Error
	}
	f.nodes = tree
	f.fireLocked(events)
	if ft.lostAnswer() {
		return nil, zk.ErrConnectionClosed
	}
	return responses, nil
}

// fakeSessionManager returns a consumer manager of group "g" and instance
// "me", subscribed to topic "t", whose ZooKeeper session is a new fake and
// which has no Kafka: enough for the claims, the registration, the watch
// on the instances, the fence and the held partitions (which claim and
// consume nothing). Its ZooKeeper timeout, which bounds zkCall, is 2 s.
// The test's cleanup waits for the requests zkCall left running.
func fakeSessionManager(t *testing.T) (*consumerManager, *fakeZK) {
	t.Helper()
	fake := newFakeZK()
	config := NewConfig()
	config.Zookeeper.Timeout = 2 * time.Second
	config.MaxProcessingTime = 100 * time.Millisecond
	subscription := TopicSubscription("t")
	registration, err := subscription.JSON()
	if err != nil {
		t.Fatal(err)
	}
	group := (&kazoo.Kazoo{}).Consumergroup("g")
	cm := &consumerManager{
		config:           config,
		log:              newLogger(nil, "g", "me"),
		group:            "g",
		subscription:     subscription,
		subscriptionJSON: markRegistration(registration),
		zkConn:           fake,
		kzGroup:          group,
		instance:         group.Instance("me"),
		offsets:          testOffsets(),
		messages:         make(chan *sarama.ConsumerMessage, config.ChannelBufferSize),
		batches:          make(chan *Batch, batchBuffer),
		errors:           make(chan error, config.ChannelBufferSize),
		shutdownCtxDone:  make(chan struct{}),
		firstRound:       make(chan struct{}),
		claims:           make(chan struct{}, 1),
		handOutStopped:   make(chan struct{}, 1),
		fenceBase:        time.Now(),
	}
	cm.pms.Store(&partitionManagers{})
	t.Cleanup(cm.zkCalls.Wait)
	return cm, fake
}

// fakePartition returns a partition of topic, for newPartitionManager.
func fakePartition(topic string, id int32) *kazoo.Partition {
	return (&kazoo.Kazoo{}).Topic(topic).Partition(id, []int32{1})
}

// ownerPath returns the path of the owner node of topic/partition in the
// fake session manager's group.
func ownerPath(topic string, partition int32) string {
	return "/consumers/g/owners/" + topic + "/" + strconv.Itoa(int(partition))
}

// wantCalls fails the test unless the fake had n calls of op; why says
// which.
func wantCalls(t *testing.T, fake *fakeZK, op string, n int, why string) {
	t.Helper()
	if got := fake.count(op); got != n {
		t.Fatalf("%d calls of %s, want %d: %s", got, op, n, why)
	}
}

// wantOwner fails the test unless the node at p holds owner.
func wantOwner(t *testing.T, fake *fakeZK, p, owner string) {
	t.Helper()
	if got := fake.owner(p); got != owner {
		t.Fatalf("%s holds %q, want %q", p, got, owner)
	}
}

// runDone runs f on a goroutine and returns a channel that receives its
// result.
func runDone[T any](f func() T) <-chan T {
	done := make(chan T, 1)
	go func() { done <- f() }()
	return done
}

// TestFakeZKAnswersAsZooKeeper: the fake returns the errors a ZooKeeper
// server returns, fires each watch once, and applies a multi all or
// nothing, as the tests on it assume.
func TestFakeZKAnswersAsZooKeeper(t *testing.T) {
	t.Parallel()
	f := newFakeZK()
	acl := zk.WorldACL(zk.PermAll)
	check := func(what string, err, want error) {
		t.Helper()
		if !errors.Is(err, want) {
			t.Fatalf("%s: %v, want %v", what, err, want)
		}
	}
	_, err := f.Create("/a/b", nil, 0, acl)
	check("create below a missing parent", err, zk.ErrNoNode)
	_, err = f.Create("/a", []byte("x"), 0, acl)
	check("create", err, nil)
	_, err = f.Create("/a", nil, 0, acl)
	check("create again", err, zk.ErrNodeExists)
	_, err = f.Create("/e", nil, zk.FlagEphemeral, acl)
	check("create ephemeral", err, nil)
	_, err = f.Create("/e/c", nil, 0, acl)
	check("create below an ephemeral", err, zk.ErrNoChildrenForEphemerals)
	if n, _ := f.get("/e"); n.owner != fakeSession {
		t.Fatalf("ephemeral node's owner %d, want the session's", n.owner)
	}

	data, stat, watch, err := f.GetW("/a")
	check("get", err, nil)
	if string(data) != "x" || stat.Version != 0 {
		t.Fatalf("get = %q version %d", data, stat.Version)
	}
	_, _, children, err := f.ChildrenW("/a")
	check("children", err, nil)
	_, err = f.Create("/a/b", nil, 0, acl)
	check("create child", err, nil)
	if ev := <-children; ev.Type != zk.EventNodeChildrenChanged || ev.Path != "/a" {
		t.Fatalf("children watch fired %+v", ev)
	}
	if _, ok := <-children; ok {
		t.Fatal("children watch fired twice")
	}
	check("delete with children", f.Delete("/a", -1), zk.ErrNotEmpty)
	check("delete at another version", f.Delete("/a/b", 3), zk.ErrBadVersion)
	check("delete", f.Delete("/a/b", 0), nil)
	check("delete of a missing node", f.Delete("/a/b", -1), zk.ErrNoNode)
	check("delete", f.Delete("/a", -1), nil)
	if ev := <-watch; ev.Type != zk.EventNodeDeleted || ev.Path != "/a" {
		t.Fatalf("data watch fired %+v", ev)
	}
	_, _, missing, err := f.GetW("/a")
	check("get of a missing node", err, zk.ErrNoNode)
	if missing != nil {
		t.Fatal("a watch was set on a missing node")
	}
	exists, _, err := f.Exists("/a")
	if exists || err != nil {
		t.Fatalf("exists of a missing node = %t, %v", exists, err)
	}

	f.put("/m/taken", []byte("other"), otherSession)
	responses, err := f.Multi(
		&zk.CreateRequest{Path: "/m/free", Flags: zk.FlagEphemeral},
		&zk.CreateRequest{Path: "/m/taken", Flags: zk.FlagEphemeral},
		&zk.CreateRequest{Path: "/m/after", Flags: zk.FlagEphemeral})
	check("multi with a node taken", err, zk.ErrNodeExists)
	if len(responses) != 3 || responses[0].Error != nil || !errors.Is(responses[1].Error, zk.ErrNodeExists) || responses[2].Error == nil {
		t.Fatalf("multi responses %+v", responses)
	}
	if _, ok := f.get("/m/free"); ok {
		t.Fatal("a failed multi created a node")
	}
	_, err = f.Multi(&zk.CreateRequest{Path: "/m/free", Flags: zk.FlagEphemeral}, &zk.DeleteRequest{Path: "/m/taken", Version: -1})
	check("multi", err, nil)
	if _, ok := f.get("/m/taken"); ok {
		t.Fatal("a multi did not delete")
	}

	f.failNext("Get", zk.ErrNoServer)
	_, _, err = f.Get("/m/free")
	check("failed get", err, zk.ErrNoServer)
	f.loseNextAnswer("Delete")
	check("delete whose answer is lost", f.Delete("/m/free", -1), zk.ErrConnectionClosed)
	if _, ok := f.get("/m/free"); ok {
		t.Fatal("a delete whose answer was lost was not applied")
	}
	release := f.block()
	held := runDone(func() error { _, _, err := f.Get("/m"); return err })
	waitFor(t, 3*time.Second, "a held call", func() bool { return f.held() == 1 })
	release(zk.ErrConnectionClosed)
	check("released call", receiveWithin(t, held, "the released call"), zk.ErrConnectionClosed)
}

// GetACL returns the open ACL of every node: the fake keeps no ACLs.
func (f *fakeZK) GetACL(p string) ([]zk.ACL, *zk.Stat, error) {
	_, _, stat, _, err := f.read("GetACL", p, nil)
	return zk.WorldACL(zk.PermAll), stat, err
}

// SetACL keeps nothing (the fake keeps no ACLs): it checks that the node
// exists.
func (f *fakeZK) SetACL(p string, _ []zk.ACL, _ int32) (*zk.Stat, error) {
	_, _, stat, _, err := f.read("SetACL", p, nil)
	return stat, err
}
