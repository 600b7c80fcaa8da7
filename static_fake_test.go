package kafkaconsumer

// Static membership (static.go) on the fake ZooKeeper session
// (fakezk_test.go): who is still counted as a member during a departed
// static member's grace, the departure recorded for a session that ended,
// the grace's end on ZooKeeper's clock, the registration of a static ID.

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/wvanbergen/kazoo-go"
)

const staticPath = "/consumers/g/static/"

func TestValidateInstanceID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		id string
		ok bool
	}{
		{"", true},
		{"orders-0", true},
		{"host:pod_1.a-b", true},
		{strings.Repeat("a", maxInstanceIDLength), true},
		{strings.Repeat("a", maxInstanceIDLength+1), false},
		{".", false},
		{"..", false},
		{"a/b", false},
		{"a b", false},
		{" ", false},
		{"é", false},
		{"a\x00", false},
	} {
		config := NewConfig()
		config.InstanceID = tc.id
		err := config.Validate()
		if tc.ok && err != nil {
			t.Errorf("InstanceID %q: Validate() = %v, want nil", tc.id, err)
		}
		if !tc.ok && !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("InstanceID %q: Validate() = %v, want ErrInvalidConfig", tc.id, err)
		}
	}
}

func TestValidateRestartGrace(t *testing.T) {
	t.Parallel()
	config := NewConfig()
	config.RestartGrace = time.Second
	if err := config.Validate(); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "InstanceID") {
		t.Fatalf("RestartGrace without InstanceID: Validate() = %v, want ErrInvalidConfig naming InstanceID", err)
	}
	config.InstanceID = "a"
	if err := config.Validate(); err != nil {
		t.Fatalf("RestartGrace with InstanceID: Validate() = %v", err)
	}
	config.RestartGrace = -time.Second
	if err := config.Validate(); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("negative RestartGrace: Validate() = %v, want ErrInvalidConfig", err)
	}
}

func TestGraceEnd(t *testing.T) {
	t.Parallel()
	local := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	server := int64(1_000_000_000) // ZooKeeper's clock, unrelated to the local one
	for _, tc := range []struct {
		name             string
		departed, server int64
		want             time.Duration
	}{
		{"just departed", server, server, 30 * time.Second},
		{"departed 10 s ago", server - 10_000, server, 20 * time.Second},
		{"grace over", server - 31_000, server, -time.Second},
		{"departed after now (another server's clock)", server + 5_000, server, 30 * time.Second},
	} {
		if got := graceEnd(tc.departed, 30_000, tc.server, local); !got.Equal(local.Add(tc.want)) {
			t.Errorf("%s: graceEnd = now%+v, want now%+v", tc.name, got.Sub(local), tc.want)
		}
	}
}

// staticManager returns a fake session manager with InstanceID "me" and
// a RestartGrace of 30 s, registered.
func staticManager(t *testing.T) (*consumerManager, *fakeZK) {
	t.Helper()
	cm, fake := fakeSessionManager(t)
	cm.config.InstanceID, cm.config.RestartGrace = "me", 30*time.Second
	if err := cm.registerInstance(); err != nil {
		t.Fatal(err)
	}
	if err := cm.markStatic(staticRegistered); err != nil {
		t.Fatal(err)
	}
	return cm, fake
}

// putRecord puts the static record of id, as its instance would.
func putRecord(t *testing.T, fake *fakeZK, id, state string, grace time.Duration) {
	t.Helper()
	data, err := json.Marshal(staticRecord{Version: 1, RestartGrace: grace.Milliseconds(), State: state, Partitions: map[string][]int32{"t": {2, 3}}})
	if err != nil {
		t.Fatal(err)
	}
	fake.put(staticPath+id, data, 0)
}

func recordState(t *testing.T, fake *fakeZK, id string) string {
	t.Helper()
	node, ok := fake.get(staticPath + id)
	if !ok {
		return "none"
	}
	record, ok := parseStaticRecord(node.data)
	if !ok {
		t.Fatalf("record of %s: %q", id, node.data)
	}
	return record.State
}

func instanceList(ids ...string) kazoo.ConsumergroupInstanceList {
	group := (&kazoo.Kazoo{}).Consumergroup("g")
	var list kazoo.ConsumergroupInstanceList
	for _, id := range ids {
		list = append(list, group.Instance(id))
	}
	return list
}

func TestMarkStaticRecordsTheInstance(t *testing.T) {
	t.Parallel()
	cm, fake := staticManager(t)
	if got := recordState(t, fake, "me"); got != staticRegistered {
		t.Fatalf("state %s, want registered", got)
	}
	node, _ := fake.get(staticPath + "me")
	if node.owner != 0 {
		t.Fatal("the static record is ephemeral; it must outlive the session")
	}
	cm.recordShare(map[TopicPartition]assignment{{"t", 1}: {}, {"t", 0}: {}})
	node, _ = fake.get(staticPath + "me")
	record, _ := parseStaticRecord(node.data)
	if record.RestartGrace != 30_000 || len(record.Partitions["t"]) != 2 || record.Partitions["t"][0] != 0 {
		t.Fatalf("record %+v, want the grace and the share t: [0 1]", record)
	}
	sets := fake.count("Set")
	cm.recordShare(map[TopicPartition]assignment{{"t", 0}: {}, {"t", 1}: {}})
	wantCalls(t, fake, "Set", sets, "the same share is not written again")
}

// TestStaticRecordSessionTimeout: the static record carries the
// instance's session timeout, which the next instance of the ID reads
// (recordedSessionTimeout); a record without it, of an older version,
// names none.
func TestStaticRecordSessionTimeout(t *testing.T) {
	t.Parallel()
	cm, fake := staticManager(t)
	node, _ := fake.get(staticPath + "me")
	if record, _ := parseStaticRecord(node.data); record.SessionTimeout != 2000 {
		t.Fatalf("record %s: session_timeout_ms %d, want 2000 (Zookeeper.Timeout)", node.data, record.SessionTimeout)
	}
	if got := cm.recordedSessionTimeout(); got != 2*time.Second {
		t.Fatalf("recordedSessionTimeout = %s, want 2s", got)
	}
	fake.set(staticPath+"me", []byte(`{"version":1,"restart_grace_ms":30000,"state":"departed"}`))
	if got := cm.recordedSessionTimeout(); got != 0 {
		t.Fatalf("recordedSessionTimeout of a record without it = %s, want 0", got)
	}
	fake.remove(staticPath + "me")
	if got := cm.recordedSessionTimeout(); got != 0 {
		t.Fatalf("recordedSessionTimeout without a record = %s, want 0", got)
	}
}

// TestPreviousInstanceWait: the wait for a previous instance's
// registration is the longer of the two session timeouts, plus one and a
// half of the longest tick that this instance's timeout allows (half of
// it), plus a second.
func TestPreviousInstanceWait(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		previous, own, want time.Duration
	}{
		{0, 4 * time.Second, 8 * time.Second}, // tick <= 2 s
		{4 * time.Second, 4 * time.Second, 8 * time.Second},
		{2 * time.Second, 6 * time.Second, 11500 * time.Millisecond},
		{20 * time.Second, 6 * time.Second, 25500 * time.Millisecond},
		{0, time.Second, 2750 * time.Millisecond},
	} {
		if got := previousInstanceWait(tc.previous, tc.own); got != tc.want {
			t.Errorf("previousInstanceWait(%s, %s) = %s, want %s", tc.previous, tc.own, got, tc.want)
		}
	}
}

// TestDeregisterStaticRecordsTheDeparture: a leave deletes the
// registration and marks the record departed in one multi.
func TestDeregisterStaticRecordsTheDeparture(t *testing.T) {
	t.Parallel()
	cm, fake := staticManager(t)
	if err := cm.deregisterStatic(); err != nil {
		t.Fatalf("deregisterStatic: %s", err)
	}
	if _, ok := fake.get(registrationPath); ok {
		t.Fatal("the registration is still there")
	}
	if got := recordState(t, fake, "me"); got != staticDeparted {
		t.Fatalf("state %s, want departed", got)
	}
	wantCalls(t, fake, "Multi", 1, "one multi")
	if err := cm.deregisterStatic(); !errors.Is(err, kazoo.ErrInstanceNotRegistered) {
		t.Fatalf("deregisterStatic again = %v, want ErrInstanceNotRegistered", err)
	}
}

// TestRegisterStaticIDOfAnotherSession: the registration of a static ID
// held by another session is another instance's.
func TestRegisterStaticIDOfAnotherSession(t *testing.T) {
	t.Parallel()
	cm, fake := fakeSessionManager(t)
	cm.config.InstanceID = "me"
	fake.put(registrationPath, []byte("{}"), otherSession)
	if err := cm.registerInstance(); !errors.Is(err, ErrInstanceIDInUse) {
		t.Fatalf("registerInstance = %v, want ErrInstanceIDInUse", err)
	}
	if node, _ := fake.get(registrationPath); node.owner != otherSession {
		t.Fatal("the other session's registration was touched")
	}
}

// TestClaimOfAPreviousSessionWithTheStaticID: an owner node that holds
// this instance's static ID but belongs to another session (a previous
// instance of the ID, not expired yet) is not taken over.
func TestClaimOfAPreviousSessionWithTheStaticID(t *testing.T) {
	t.Parallel()
	cm, fake := staticManager(t)
	fake.put(ownerPath("t", 0), []byte("me"), otherSession)
	if err := cm.claimNode(TopicPartition{"t", 0}); !errors.Is(err, kazoo.ErrPartitionClaimedByOther) {
		t.Fatalf("claimNode = %v, want ErrPartitionClaimedByOther", err)
	}
	fake.remove(ownerPath("t", 0))
	if err := cm.claimNode(TopicPartition{"t", 0}); err != nil {
		t.Fatalf("claimNode once it is gone = %v", err)
	}
}

// TestDepartedMemberCountedDuringGrace: a static member that left is
// counted as a member until its grace ends, then its record goes.
func TestDepartedMemberCountedDuringGrace(t *testing.T) {
	t.Parallel()
	cm, fake := staticManager(t)
	putRecord(t, fake, "other", staticDeparted, 30*time.Second)
	registered := instanceList("me")
	before := time.Now()
	departed, _, err := cm.departedMembers(registered)
	if err != nil || len(departed) != 1 || departed[0].id != "other" {
		t.Fatalf("departedMembers = %+v, %v; want other", departed, err)
	}
	if left := time.Until(departed[0].until); left < 29*time.Second || departed[0].until.After(before.Add(30*time.Second+time.Second)) {
		t.Fatalf("grace ends in %s, want about 30 s", left)
	}
	if members := cm.withDeparted(registered, departed); len(members) != 2 || members.Find("other") == nil {
		t.Fatalf("members %v, want me and other", members)
	}
	sets := fake.count("Set")
	if again, _, err := cm.departedMembers(registered); err != nil || len(again) != 1 || !again[0].until.Equal(departed[0].until) {
		t.Fatalf("departedMembers again = %+v, %v; want the same end", again, err)
	}
	wantCalls(t, fake, "Set", sets, "the end of a known departure is not computed again")

	// 31 s later on ZooKeeper's clock: a new record (another member) is
	// read with the clock, which ends other's grace too.
	fake.advance(31 * time.Second)
	cm.departures = nil // as for an instance that joins now
	if departed, _, err = cm.departedMembers(registered); err != nil || len(departed) != 0 {
		t.Fatalf("after the grace departedMembers = %+v, %v; want none", departed, err)
	}
	if got := recordState(t, fake, "other"); got != "none" {
		t.Fatalf("record of other after its grace: %s, want deleted", got)
	}
}

// TestDepartureRecordedWhenTheSessionEnded: a static member whose
// registration went without a leave (its record says registered) is
// recorded departed by the instance that sees it, and waited for.
func TestDepartureRecordedWhenTheSessionEnded(t *testing.T) {
	t.Parallel()
	cm, fake := staticManager(t)
	putRecord(t, fake, "other", staticRegistered, 10*time.Second)
	departed, _, err := cm.departedMembers(instanceList("me"))
	if err != nil || len(departed) != 1 || departed[0].id != "other" {
		t.Fatalf("departedMembers = %+v, %v; want other", departed, err)
	}
	if got := recordState(t, fake, "other"); got != staticDeparted {
		t.Fatalf("record of other: %s, want departed", got)
	}
	if left := time.Until(departed[0].until); left < 9*time.Second || left > 10*time.Second {
		t.Fatalf("grace ends in %s, want about 10 s (its own RestartGrace)", left)
	}
}

// TestReturnedMemberIsNotMarkedDeparted: a member found missing from the
// instances, whose registration is back by the time its record is read,
// is not marked departed, nor counted.
func TestReturnedMemberIsNotMarkedDeparted(t *testing.T) {
	t.Parallel()
	cm, fake := staticManager(t)
	putRecord(t, fake, "other", staticRegistered, 10*time.Second)
	fake.put("/consumers/g/ids/other", []byte("{}"), otherSession)
	departed, stale, err := cm.departedMembers(instanceList("me")) // the list read before it came back
	if err != nil || len(departed) != 0 || !stale {
		t.Fatalf("departedMembers = %+v, stale %t, %v; want none, stale: the instances must be read again", departed, stale, err)
	}
	if got := recordState(t, fake, "other"); got != staticRegistered {
		t.Fatalf("record of other: %s, want registered", got)
	}
}

// TestDepartureLosesToAReturn: the member's own write of its record
// between the read and the departure's conditional write wins.
func TestDepartureLosesToAReturn(t *testing.T) {
	t.Parallel()
	cm, fake := staticManager(t)
	putRecord(t, fake, "other", staticRegistered, 10*time.Second)
	fake.beforeNext("Set", func() {
		fake.set(staticPath+"other", []byte(`{"version":1,"restart_grace_ms":10000,"state":"registered"}`))
	})
	departed, stale, err := cm.departedMembers(instanceList("me"))
	if err != nil || len(departed) != 0 || !stale {
		t.Fatalf("departedMembers = %+v, stale %t, %v; want none, stale", departed, stale, err)
	}
	if got := recordState(t, fake, "other"); got != staticRegistered {
		t.Fatalf("record of other: %s, want registered", got)
	}
}

// TestGraceIndependentOfClocks: ZooKeeper's clock an hour ahead of the
// instance's changes nothing: the grace is measured on ZooKeeper's clock
// alone, and turned into a local timer.
func TestGraceIndependentOfClocks(t *testing.T) {
	t.Parallel()
	cm, fake := staticManager(t)
	fake.advance(time.Hour)
	putRecord(t, fake, "other", staticDeparted, 20*time.Second)
	departed, _, err := cm.departedMembers(instanceList("me"))
	if err != nil || len(departed) != 1 {
		t.Fatalf("departedMembers = %+v, %v; want other", departed, err)
	}
	if left := time.Until(departed[0].until); left < 19*time.Second || left > 20*time.Second {
		t.Fatalf("grace ends in %s, want about 20 s", left)
	}
}

// TestNoGraceWithOriginals: with an instance of the original library
// registered nobody is waited for, and the records are left alone.
func TestNoGraceWithOriginals(t *testing.T) {
	t.Parallel()
	cm, fake := staticManager(t)
	putRecord(t, fake, "other", staticDeparted, 30*time.Second)
	cm.originals = true
	calls := fake.count("")
	if departed, _, ok := cm.watchDeparted(instanceList("me", "original")); !ok || len(departed) != 0 {
		t.Fatalf("watchDeparted = %+v, %t; want none", departed, ok)
	}
	wantCalls(t, fake, "", calls, "no request with originals")
}

// TestNoGraceOfZero: the record of a member without RestartGrace (an
// InstanceID alone) is no reason to wait, and is deleted once it left.
func TestNoGraceOfZero(t *testing.T) {
	t.Parallel()
	cm, fake := staticManager(t)
	putRecord(t, fake, "other", staticDeparted, 0)
	if departed, _, err := cm.departedMembers(instanceList("me")); err != nil || len(departed) != 0 {
		t.Fatalf("departedMembers = %+v, %v; want none", departed, err)
	}
	if got := recordState(t, fake, "other"); got != "none" {
		t.Fatalf("record of other: %s, want deleted", got)
	}
}

// TestAwaitingReturnIsTheShareTakenAfterTheGrace: with "a" departed, the
// distribution over me and a leaves a's partitions to nobody; the ones
// that fall to me once the grace is over are the ones my Stats show
// awaiting a's return.
func TestAwaitingReturnIsTheShareTakenAfterTheGrace(t *testing.T) {
	t.Parallel()
	cm, _ := staticManager(t)
	var partitions kazoo.PartitionList
	for i := int32(0); i < 4; i++ {
		partitions = append(partitions, fakePartition("t", i))
	}
	leaders := retrievePartitionLeaders(partitions)
	departed := []departure{{id: "a", until: time.Now().Add(time.Minute)}}
	registered := instanceList("me", "z")
	members := cm.withDeparted(registered, departed)
	during := distributePartitionsBetweenConsumers(members, leaders)
	if len(during["me"]) != 1 || len(during["a"]) != 2 || len(during["z"]) != 1 {
		t.Fatalf("during the grace %v", during)
	}
	awaiting := cm.awaitingReturn(departed, during, distributePartitionsBetweenConsumers(registered, leaders))
	// Sorted, a, me, z get t/0-1, t/2, t/3 during the grace; me, z get
	// t/0-1, t/2-3 after it: both of a's fall to me.
	if len(awaiting) != 2 || awaiting[0].AwaitingReturn != "a" || awaiting[0].Claimed || awaiting[0].Lag != -1 ||
		awaiting[0].TopicPartition != (TopicPartition{"t", 0}) || awaiting[1].TopicPartition != (TopicPartition{"t", 1}) {
		t.Fatalf("awaiting %+v, want t/0 and t/1, a's", awaiting)
	}
}
