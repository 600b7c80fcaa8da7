package kafkaconsumer

// The manager goroutine's steps on the fake ZooKeeper session
// (fakezk_test.go): the registration, the watch on the group's instances,
// the partition managers of an assignment (held partitions: they claim
// and release, and need no Kafka), its sleep, and the deregistration.

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/wvanbergen/kazoo-go"
)

const registrationPath = "/consumers/g/ids/me"

func TestRegisterInstanceCreatesAMarkedRegistration(t *testing.T) {
	t.Parallel()
	cm, fake := fakeSessionManager(t)
	if err := cm.registerInstance(); err != nil {
		t.Fatalf("registerInstance: %s", err)
	}
	node, ok := fake.get(registrationPath)
	if !ok || node.owner != fakeSession || !isMarkedRegistration(node.data) {
		t.Fatalf("registration %q (exists %t, owner %d), want this session's, marked", node.data, ok, node.owner)
	}
	if registered, err := cm.registeredNode(); !registered || err != nil {
		t.Fatalf("registeredNode() = %t, %v", registered, err)
	}
}

// TestRegisterAfterALostAnswerKeepsTheRegistration: a registration whose
// answer was lost went through; the retry finds the node and keeps it.
func TestRegisterAfterALostAnswerKeepsTheRegistration(t *testing.T) {
	t.Parallel()
	cm, fake := fakeSessionManager(t)
	fake.loseNextAnswer("Create")
	if !cm.register(nil) {
		t.Fatal("register() = false")
	}
	if node, ok := fake.get(registrationPath); !ok || node.owner != fakeSession {
		t.Fatal("the registration is not this session's")
	}
	wantCalls(t, fake, "Delete", 0, "the registration is kept as it is")
}

// TestRegisterInstanceCreatesAgainARegistrationGoneMeanwhile: a
// registration node found, then gone before it was checked (an earlier
// session's, expiring), is created again.
func TestRegisterInstanceCreatesAgainARegistrationGoneMeanwhile(t *testing.T) {
	t.Parallel()
	cm, fake := fakeSessionManager(t)
	fake.put(registrationPath, []byte("{}"), otherSession)
	fake.beforeNext("Exists", func() { fake.remove(registrationPath) })
	if err := cm.registerInstance(); err != nil {
		t.Fatalf("registerInstance: %s", err)
	}
	if node, ok := fake.get(registrationPath); !ok || node.owner != fakeSession {
		t.Fatal("the registration is not this session's")
	}
}

func TestRegisterGivesUpWhenInterrupted(t *testing.T) {
	t.Parallel()
	cm, fake := fakeSessionManager(t)
	fake.failNext("Create", zk.ErrNoServer)
	cm.t.Kill(nil)
	if cm.register(nil) {
		t.Fatal("register() = true")
	}
}

func TestDeregisterNode(t *testing.T) {
	t.Parallel()
	cm, fake := fakeSessionManager(t)
	if err := cm.deregisterNode(); !errors.Is(err, kazoo.ErrInstanceNotRegistered) {
		t.Fatalf("deregisterNode without a registration = %v, want ErrInstanceNotRegistered", err)
	}
	if err := cm.registerInstance(); err != nil {
		t.Fatal(err)
	}
	if err := cm.deregisterNode(); err != nil {
		t.Fatalf("deregisterNode: %s", err)
	}
	if _, ok := fake.get(registrationPath); ok {
		t.Fatal("the registration is still there")
	}
}

// TestWatchInstancesFiresWhenAnInstanceJoins: the watch on the instances
// of a new group creates its ids node, lists the instances, and fires
// once when another instance registers.
func TestWatchInstancesFiresWhenAnInstanceJoins(t *testing.T) {
	t.Parallel()
	cm, fake := fakeSessionManager(t)
	instances, changed, _, ok := cm.watchInstances()
	if !ok || len(instances) != 0 {
		t.Fatalf("watchInstances() = %v, ok %t; want none", instances, ok)
	}
	if err := cm.registerInstance(); err != nil {
		t.Fatal(err)
	}
	ev := receiveWithin(t, changed, "the instances' watch")
	if ev.Type != zk.EventNodeChildrenChanged || ev.Path != "/consumers/g/ids" {
		t.Fatalf("the watch fired %+v", ev)
	}
	instances, changed, _, ok = cm.watchInstances()
	if !ok || len(instances) != 1 || instances.Find("me") == nil {
		t.Fatalf("watchInstances() = %v, ok %t; want this instance", instances, ok)
	}
	fake.put("/consumers/g/ids/other", markRegistration([]byte(`{"version":1}`)), otherSession)
	receiveWithin(t, changed, "the instances' watch")
}

// TestWatchInstancesTellsWhenOriginalsComeAndGo: an instance of the
// original library (a registration without this package's mark) changes
// the kinds of instances when it registers and when it goes; its
// registration is read once.
func TestWatchInstancesTellsWhenOriginalsComeAndGo(t *testing.T) {
	t.Parallel()
	cm, fake := fakeSessionManager(t)
	if err := cm.registerInstance(); err != nil {
		t.Fatal(err)
	}
	step := func(what string, wantOriginals, wantChanged bool) {
		t.Helper()
		_, _, changed, ok := cm.watchInstances()
		if !ok || changed != wantChanged || cm.originals != wantOriginals {
			t.Fatalf("%s: kinds changed %t, originals %t; want %t, %t", what, changed, cm.originals, wantChanged, wantOriginals)
		}
	}
	step("only this instance", false, false)
	fake.put("/consumers/g/ids/original", []byte(`{"version":1,"subscription":{"t":1},"pattern":"static"}`), otherSession)
	step("an original registered", true, true)
	reads := fake.count("Get")
	step("no change", true, false)
	if fake.count("Get") != reads {
		t.Fatal("the original's registration was read again")
	}
	fake.remove("/consumers/g/ids/original")
	step("the original gone", false, true)
	if _, ok := cm.marked["original"]; ok {
		t.Fatal("the original that went is still remembered")
	}
}

// TestWatchInstancesRetriesUntilInterrupted: a watch that fails is set
// again after a delay, until the manager is interrupted.
func TestWatchInstancesRetriesUntilInterrupted(t *testing.T) {
	t.Parallel()
	cm, fake := fakeSessionManager(t)
	fake.failNext("ChildrenW", zk.ErrConnectionClosed)
	if _, _, _, ok := cm.watchInstances(); !ok {
		t.Fatal("watchInstances() gave up")
	}
	fake.failNext("ChildrenW", zk.ErrConnectionClosed)
	cm.t.Kill(nil)
	if _, _, _, ok := cm.watchInstances(); ok {
		t.Fatal("watchInstances() = ok after the interrupt")
	}
}

// joinOnRead registers another instance during each of the next n reads
// of a new registration (Get), after the read of the instances set their
// watch: so each read sees a change that fires the watch, as instances
// that join one after the other do. With pace, each join first waits
// for its tick.
func joinOnRead(fake *fakeZK, n int, pace <-chan time.Time) {
	joined := 0
	var join func()
	join = func() {
		if pace != nil {
			<-pace
		}
		joined++
		fake.put(fmt.Sprintf("/consumers/g/ids/joiner-%d", joined), markRegistration([]byte(`{"version":1}`)), otherSession)
		if joined < n {
			fake.beforeNext("Get", join)
		}
	}
	fake.beforeNext("Get", join)
}

// putMembers registers n instances of another session in the fake's
// group "g", named member-0 to member-(n-1).
func putMembers(fake *fakeZK, n int) {
	for i := range n {
		fake.put(fmt.Sprintf("/consumers/g/ids/member-%d", i), markRegistration([]byte(`{"version":1}`)), otherSession)
	}
}

// TestSettledInstancesAfterTheLastJoin: instances that join one after the
// other make the manager read them again, and distribute once, over all
// of them, a quiet spell after the last.
func TestSettledInstancesAfterTheLastJoin(t *testing.T) {
	t.Parallel()
	cm, fake := fakeSessionManager(t)
	putMembers(fake, membershipSettleFrom)
	joinOnRead(fake, 5, nil)
	began := time.Now()
	instances, _, _, settled, ok := cm.watchSettledInstances(nil)
	took := time.Since(began)
	if want := membershipSettleFrom + 5; !ok || !settled || len(instances) != want {
		t.Fatalf("watchSettledInstances() = %d instances, settled %t, ok %t; want the %d, settled", len(instances), settled, ok, want)
	}
	if n := fake.count("ChildrenW"); n < 2 {
		t.Fatalf("%d reads of the instances, want them read again after the joins", n)
	}
	if took < membershipQuiet {
		t.Fatalf("settled after %s, before the quiet spell of %s", took, membershipQuiet)
	}
}

// TestSettledInstancesAloneAtOnce: an instance that reads a group
// smaller than membershipSettleFrom, here itself alone, distributes at
// once, without the quiet spell: a lone consumer starts, or keeps what
// is left of a scale-in, without waiting. An instance that joins right after that read fires the watch,
// which the next round settles.
func TestSettledInstancesAloneAtOnce(t *testing.T) {
	t.Parallel()
	cm, fake := fakeSessionManager(t)
	fake.put("/consumers/g/ids/me", markRegistration([]byte(`{"version":1}`)), fakeSession)
	joined := runDone(func() bool { // once the instances were read, another joins
		if !poll(10*time.Second, func() bool { return fake.count("ChildrenW") > 0 }) {
			return false
		}
		fake.put("/consumers/g/ids/joiner-1", markRegistration([]byte(`{"version":1}`)), otherSession)
		return true
	})
	instances, changed, _, settled, ok := cm.watchSettledInstances(nil)
	if !<-joined {
		t.Fatal("the instances were not read within 10s")
	}
	if !ok || !settled || len(instances) != 1 || instances[0].ID != "me" {
		t.Fatalf("watchSettledInstances() = %d instances, settled %t, ok %t; want this instance alone, settled", len(instances), settled, ok)
	}
	wantCalls(t, fake, "ChildrenW", 1, "one read of the instances")
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not fire for the instance that joined during the read")
	}
}

// TestSettledInstancesBoundedWhileJoinsGoOn: instances that keep joining
// do not hold the distribution up for more than membershipSettleMax.
func TestSettledInstancesBoundedWhileJoinsGoOn(t *testing.T) {
	t.Parallel()
	cm, fake := fakeSessionManager(t)
	putMembers(fake, membershipSettleFrom)
	pace := time.NewTicker(membershipQuiet / 10) // a join every tenth of the quiet spell
	defer pace.Stop()
	joinOnRead(fake, 10000, pace.C)
	began := time.Now()
	done := runDone(func() bool {
		_, _, _, settled, ok := cm.watchSettledInstances(nil)
		return settled && ok
	})
	select {
	case ok := <-done:
		if !ok {
			t.Fatal("watchSettledInstances() gave up")
		}
	case <-time.After(membershipSettleMax + 10*time.Second):
		t.Fatalf("watchSettledInstances() still waiting %s after it began, while instances kept joining", time.Since(began))
	}
	if took := time.Since(began); took < membershipSettleMax {
		t.Fatalf("distributed after %s while instances kept joining, before membershipSettleMax (%s)", took, membershipSettleMax)
	}
	cm.t.Kill(nil)
	if _, _, _, _, ok := cm.watchSettledInstances(nil); ok {
		t.Fatal("watchSettledInstances() = ok after the interrupt")
	}
}

// heldAssignment returns an assignment of the given partitions of topic,
// held: their partition managers claim them and consume nothing.
func heldAssignment(topic string, partitions ...int32) map[TopicPartition]assignment {
	assigned := make(map[TopicPartition]assignment)
	for _, p := range partitions {
		assigned[TopicPartition{Topic: topic, Partition: p}] = assignment{partition: fakePartition(topic, p), claimOnly: true}
	}
	return assigned
}

// TestManagePartitionManagersFollowsTheAssignment: the partition managers
// of a new assignment are started (their claims batched), those of
// partitions no longer assigned are stopped and release their claims
// before it returns, and those still assigned are kept; nil stops all.
func TestManagePartitionManagersFollowsTheAssignment(t *testing.T) {
	t.Parallel()
	cm, fake := fakeSessionManager(t)
	if stopped := cm.managePartitionManagers(heldAssignment("t", 0, 1)); len(stopped) != 0 {
		t.Fatalf("stopped %d", len(stopped))
	}
	select {
	case <-cm.firstRound:
	default:
		t.Fatal("the first distribution did not close firstRound")
	}
	waitFor(t, 3*time.Second, "t/0 and t/1 claimed", cm.allClaimed)
	if fake.owner(ownerPath("t", 0)) != "me" || fake.owner(ownerPath("t", 1)) != "me" {
		t.Fatal("the claims are not in ZooKeeper")
	}
	wantCalls(t, fake, "Multi", 2, "the parents were missing: one multi more")
	kept := (*cm.pms.Load())[TopicPartition{Topic: "t", Partition: 1}]

	stopped := cm.managePartitionManagers(heldAssignment("t", 1, 2))
	if len(stopped) != 1 || stopped[0].tp.Partition != 0 {
		t.Fatalf("stopped %d partition managers, want t/0's", len(stopped))
	}
	if _, ok := fake.get(ownerPath("t", 0)); ok {
		t.Fatal("the stopped partition's claim is still there")
	}
	pms := *cm.pms.Load()
	if len(pms) != 2 || pms[kept.tp] != kept || !stopped[0].retired.Load() {
		t.Fatal("the running partition managers are not those of the assignment")
	}
	waitFor(t, 3*time.Second, "t/2 claimed", cm.allClaimed)

	if stopped := cm.managePartitionManagers(nil); len(stopped) != 2 {
		t.Fatalf("stopped %d, want 2", len(stopped))
	}
	for p := range int32(3) {
		if _, ok := fake.get(ownerPath("t", p)); ok {
			t.Fatalf("t/%d still claimed after all stopped", p)
		}
	}
	if len(*cm.pms.Load()) != 0 {
		t.Fatal("partition managers left")
	}
}

// TestManagePartitionManagersWithoutADistributionLeavesFirstRoundOpen: a
// stop of all partitions (a lost registration) is not the first
// distribution that JoinContext waits for.
func TestManagePartitionManagersWithoutADistributionLeavesFirstRoundOpen(t *testing.T) {
	t.Parallel()
	cm, _ := fakeSessionManager(t)
	cm.managePartitionManagers(nil)
	select {
	case <-cm.firstRound:
		t.Fatal("firstRound closed without a distribution")
	default:
	}
}

// TestAssignedPartitionOwnedByAnotherIsClaimedOnceReleased: in an
// assignment with a partition still owned by another instance, the others
// are claimed at once, alone, and that one once its owner lets go.
func TestAssignedPartitionOwnedByAnotherIsClaimedOnceReleased(t *testing.T) {
	t.Parallel()
	cm, fake := fakeSessionManager(t)
	fake.put(ownerPath("t", 1), []byte("other"), otherSession)
	cm.managePartitionManagers(heldAssignment("t", 0, 1, 2))
	t.Cleanup(func() { cm.managePartitionManagers(nil) })
	waitFor(t, 3*time.Second, "t/0 and t/2 claimed, and a watch on t/1", func() bool {
		return fake.owner(ownerPath("t", 0)) == "me" && fake.owner(ownerPath("t", 2)) == "me" && fake.watched(ownerPath("t", 1)) == 1
	})
	if cm.allClaimed() {
		t.Fatal("all claimed while another instance owns t/1")
	}
	fake.remove(ownerPath("t", 1))
	waitFor(t, 3*time.Second, "t/1 claimed", cm.allClaimed)
	wantOwner(t, fake, ownerPath("t", 1), "me")
}

// TestSleepSweepsOrphansAndWakesOnAChange: between distributions the
// manager goroutine releases the orphan claims, trying again those that
// fail, and wakes up when the instances change, or gives up when
// interrupted.
func TestSleepSweepsOrphansAndWakesOnAChange(t *testing.T) {
	t.Parallel()
	cm, fake := fakeSessionManager(t)
	_, instances, _, ok := cm.watchInstances()
	if !ok {
		t.Fatal("watchInstances failed")
	}
	fake.put(ownerPath("t", 0), []byte("me"), fakeSession)
	cm.addOrphan(TopicPartition{Topic: "t", Partition: 0})
	fake.failNext("Get", zk.ErrNoServer) // the first sweep fails
	var partitions <-chan zk.Event
	woke := runDone(func() bool { return cm.sleep(&partitions, &instances, nil, time.Time{}) })
	waitFor(t, 3*time.Second, "the orphan's release, tried again", func() bool {
		_, ok := fake.get(ownerPath("t", 0))
		return !ok
	})
	fake.put("/consumers/g/ids/other", nil, otherSession)
	if !receiveWithin(t, woke, "the wake-up") || instances != nil {
		t.Fatal("sleep did not wake up on the instances' change, and clear its watch")
	}
	cm.t.Kill(nil)
	if cm.sleep(&partitions, &instances, nil, time.Time{}) {
		t.Fatal("sleep() = true after the interrupt")
	}
}

// TestCloseDeregisters: Close deletes the registration; a registration
// already gone is no error; a fenced instance sends nothing and leaves the
// registration to the session's expiry, and says so.
func TestCloseDeregisters(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		prepare  func(*consumerManager, *fakeZK)
		wantErr  error
		wantNode bool
	}{
		{"registered", func(*consumerManager, *fakeZK) {}, nil, false},
		{"gone", func(_ *consumerManager, f *fakeZK) { f.remove(registrationPath) }, nil, false},
		{"fenced", func(cm *consumerManager, _ *fakeZK) { cm.fence.raise() }, errFenced, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cm, fake := fakeSessionManager(t)
			if err := cm.registerInstance(); err != nil {
				t.Fatal(err)
			}
			cm.registered = true
			tc.prepare(cm, fake)
			errs := cm.closeConnections()
			if tc.wantErr == nil && len(errs) > 0 || tc.wantErr != nil && (len(errs) != 1 || !errors.Is(errs[0], tc.wantErr)) {
				t.Fatalf("closeConnections() = %v, want %v", errs, tc.wantErr)
			}
			if _, ok := fake.get(registrationPath); ok != tc.wantNode {
				t.Fatalf("registration there: %t, want %t", ok, tc.wantNode)
			}
			if cm.registered {
				t.Fatal("still registered")
			}
		})
	}
}
