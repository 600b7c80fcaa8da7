package kafkaconsumer

// Claims on the fake ZooKeeper session (fakezk_test.go): a partition
// manager's claim and release, the batched claims, and the sweep of orphan
// claims.

import (
	"errors"
	"path"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/wvanbergen/kazoo-go"
)

func TestClaimTakesAFreePartition(t *testing.T) {
	t.Parallel()
	cm, fake := fakeSessionManager(t)
	pm := mustClaim(t, cm, 0)
	node, ok := fake.get(ownerPath("t", 0))
	if !ok || string(node.data) != "me" || node.owner != fakeSession {
		t.Fatalf("owner node %+v (exists %t), want this instance's ephemeral node", node, ok)
	}
	if parent, _ := fake.get("/consumers/g/owners/t"); parent.owner != 0 {
		t.Fatal("the owner node's parent is ephemeral")
	}
	if !pm.stats().Claimed {
		t.Fatal("Stats does not show the partition claimed")
	}
	receiveWithin(t, (<-chan struct{})(cm.claims), "the claim's token for waitStarted")
}

// TestClaimTakesOverItsOwnNode: an owner node with this instance's ID was
// left by an attempt whose answer was lost; the claim takes it over.
func TestClaimTakesOverItsOwnNode(t *testing.T) {
	t.Parallel()
	cm, fake := fakeSessionManager(t)
	fake.put(ownerPath("t", 0), []byte("me"), fakeSession)
	mustClaim(t, cm, 0)
	wantCalls(t, fake, "Delete", 0, "the node is taken over as it is")
}

// TestClaimAfterALostAnswerTakesOverItsNode: the create of the owner node
// went through but its answer was lost; the retry finds this instance's
// ID in the node and holds the claim.
func TestClaimAfterALostAnswerTakesOverItsNode(t *testing.T) {
	t.Parallel()
	cm, fake := fakeSessionManager(t)
	fake.put("/consumers/g/owners/t", nil, 0)
	fake.loseNextAnswer("Create")
	mustClaim(t, cm, 0)
	wantOwner(t, fake, ownerPath("t", 0), "me")
	wantCalls(t, fake, "Create", 2, "the lost one and the retry")
}

// TestClaimWaitsForOwnerToRelease: a partition that another instance owns
// is claimed once that instance deletes its owner node, not before; the
// wait is reported to Metrics.
func TestClaimWaitsForOwnerToRelease(t *testing.T) {
	t.Parallel()
	metrics := &recordingMetrics{}
	_, fake, pm, node, done := claimWaitingForOwner(t, func(*partitionManager) Metrics { return metrics })
	if pm.stats().Claimed || fake.owner(node) != "other" {
		t.Fatal("claimed while another instance owns the partition")
	}
	fake.remove(node)
	if !receiveWithin(t, done, "the claim") {
		t.Fatal("claim() = false")
	}
	if owner := fake.owner(node); owner != "me" {
		t.Fatalf("owner %q after the other instance let go", owner)
	}
	if metrics.count("claim waited t/0") != 1 {
		t.Fatal("the wait for the owner was not reported to Metrics")
	}
}

// TestClaimGivesUpWhenKilledWhileWaiting: a partition manager stopped while
// it waits for another owner ends its claim without leaving an orphan
// (nothing of it was created), and reports its wait to Metrics.
func TestClaimGivesUpWhenKilledWhileWaiting(t *testing.T) {
	t.Parallel()
	metrics := &recordingMetrics{}
	cm, fake, pm, node, done := claimWaitingForOwner(t, func(*partitionManager) Metrics { return metrics })
	pm.t.Kill(nil)
	if receiveWithin(t, done, "the claim") {
		t.Fatal("claim() = true")
	}
	if len(cm.orphans) != 0 || fake.owner(node) != "other" {
		t.Fatalf("orphans %v, owner %q", cm.orphans, fake.owner(node))
	}
	if n := metrics.count("claim waited t/0"); n != 1 {
		t.Fatalf("ClaimWaited called %d times for the wait that ended without the claim; want 1", n)
	}
}

// TestClaimRetriesWhenOwnerCannotBeWatched: a watch on another owner's
// node that fails is set again after a delay.
func TestClaimRetriesWhenOwnerCannotBeWatched(t *testing.T) {
	t.Parallel()
	cm, fake := fakeSessionManager(t)
	node := ownerPath("t", 0)
	fake.put(node, []byte("other"), otherSession)
	fake.failNext("GetW", zk.ErrConnectionClosed)
	pm := newPartitionManager(cm, fakePartition("t", 0))
	done := runDone(pm.claim)
	waitFor(t, 3*time.Second, "a watch on the owner node", func() bool { return fake.watched(node) == 1 })
	fake.remove(node)
	if !receiveWithin(t, done, "the claim") {
		t.Fatal("claim() = false")
	}
	wantCalls(t, fake, "GetW", 2, "the failed watch and its retry")
}

// TestClaimOfANodeReleasedMeanwhileIsTakenAtOnce: an owner node that goes
// between the create that found it and the read or the watch of its
// owner is created again at once, without a wait.
func TestClaimOfANodeReleasedMeanwhileIsTakenAtOnce(t *testing.T) {
	t.Parallel()
	for _, op := range []string{"Get", "GetW"} {
		t.Run(op, func(t *testing.T) {
			t.Parallel()
			cm, fake := fakeSessionManager(t)
			node := ownerPath("t", 0)
			fake.put(node, []byte("other"), otherSession)
			fake.beforeNext(op, func() { fake.remove(node) })
			pm := newPartitionManager(cm, fakePartition("t", 0))
			if !pm.claim() {
				t.Fatal("claim() = false")
			}
			if owner := fake.owner(node); owner != "me" {
				t.Fatalf("owner %q", owner)
			}
		})
	}
}

// TestClaimOfUnknownOutcomeIsSweptAsOrphan: a partition manager stopped
// while its claims fail, after one whose outcome is unknown (the node was
// created, the answer lost), leaves the partition to the sweep of orphan
// claims, which deletes the node.
func TestClaimOfUnknownOutcomeIsSweptAsOrphan(t *testing.T) {
	t.Parallel()
	cm, fake := fakeSessionManager(t)
	fake.put("/consumers/g/owners/t", nil, 0)
	fake.loseNextAnswer("Create")
	for range 10 {
		fake.failNext("Create", zk.ErrConnectionClosed)
	}
	pm := newPartitionManager(cm, fakePartition("t", 0))
	done := runDone(pm.claim)
	waitFor(t, 3*time.Second, "the first create", func() bool { return fake.count("Create") > 0 })
	pm.t.Kill(nil)
	if receiveWithin(t, done, "the claim") {
		t.Fatal("claim() = true")
	}
	if !cm.orphans[pm.tp] {
		t.Fatal("the claim of unknown outcome is not an orphan")
	}
	wantOwner(t, fake, ownerPath("t", 0), "me")
	wantSwept(t, cm, fake, 0)
}

func TestReleaseDeletesTheClaim(t *testing.T) {
	t.Parallel()
	cm, fake := fakeSessionManager(t)
	pm := mustClaim(t, cm, 0)
	if err := pm.release(time.Now().Add(time.Second)); err != nil {
		t.Fatalf("release: %s", err)
	}
	if _, ok := fake.get(ownerPath("t", 0)); ok {
		t.Fatal("the owner node is still there")
	}
	if pm.stats().Claimed {
		t.Fatal("Stats shows the partition claimed after the release")
	}
	calls := fake.count("")
	if err := pm.release(time.Now().Add(time.Second)); err != nil || fake.count("") != calls {
		t.Fatalf("a second release = %v, with %d requests", err, fake.count("")-calls)
	}
}

// TestReleaseLeavesANodeThatIsNotOurs: the release of a claim whose node
// is gone, or holds another instance's ID (the session that held it
// expired, and another instance claimed the partition), deletes nothing and
// is no error for the partition manager.
func TestReleaseLeavesANodeThatIsNotOurs(t *testing.T) {
	t.Parallel()
	cm, fake := fakeSessionManager(t)
	fake.put(ownerPath("t", 0), []byte("other"), otherSession)
	for p := range int32(2) {
		tp := TopicPartition{Topic: "t", Partition: p}
		if err := cm.releaseNode(tp); !errors.Is(err, kazoo.ErrPartitionNotClaimed) {
			t.Fatalf("releaseNode(t/%d) = %v, want ErrPartitionNotClaimed", p, err)
		}
		pm := newPartitionManager(cm, fakePartition("t", p))
		pm.claimed = true
		if err := pm.release(time.Now().Add(time.Second)); err != nil {
			t.Fatalf("release of t/%d: %s", p, err)
		}
	}
	wantOwner(t, fake, ownerPath("t", 0), "other")
	wantCalls(t, fake, "Delete", 0, "another instance's node is left alone")
}

// TestReleaseOfANodeGoneMeanwhileIsNotClaimed: a node deleted between the
// read of its owner and the delete (the session expired) is not claimed.
func TestReleaseOfANodeGoneMeanwhileIsNotClaimed(t *testing.T) {
	t.Parallel()
	cm, fake := fakeSessionManager(t)
	node := ownerPath("t", 0)
	fake.put(node, []byte("me"), fakeSession)
	fake.beforeNext("Delete", func() { fake.remove(node) })
	if err := cm.releaseNode(TopicPartition{Topic: "t", Partition: 0}); !errors.Is(err, kazoo.ErrPartitionNotClaimed) {
		t.Fatalf("releaseNode = %v, want ErrPartitionNotClaimed", err)
	}
}

// TestReleaseRetriesFailures: a release that fails (a connection blip) is
// tried again until it goes through.
func TestReleaseRetriesFailures(t *testing.T) {
	t.Parallel()
	cm, fake := fakeSessionManager(t)
	pm := mustClaim(t, cm, 0)
	fake.failNext("Get", zk.ErrConnectionClosed)
	fake.failNext("Delete", zk.ErrConnectionClosed)
	if err := pm.release(time.Now().Add(3 * time.Second)); err != nil {
		t.Fatalf("release: %s", err)
	}
	if _, ok := fake.get(ownerPath("t", 0)); ok {
		t.Fatal("the owner node is still there")
	}
	wantCalls(t, fake, "Delete", 2, "the failed one and the retry")
}

// TestReleaseGivesUpAtItsDeadline: with ZooKeeper not answering, a release
// ends at its deadline with ErrReleaseFailed and leaves the claim to the
// sweep of orphan claims, which deletes it once ZooKeeper answers.
func TestReleaseGivesUpAtItsDeadline(t *testing.T) {
	t.Parallel()
	cm, fake := fakeSessionManager(t)
	pm := mustClaim(t, cm, 0)
	release := fake.block()
	began := time.Now()
	err := pm.release(began.Add(300 * time.Millisecond))
	if !errors.Is(err, ErrReleaseFailed) {
		t.Fatalf("release = %v, want ErrReleaseFailed", err)
	}
	if took := time.Since(began); took > 2*time.Second {
		t.Fatalf("release took %s with a deadline of 300 ms", took)
	}
	if !cm.orphans[pm.tp] {
		t.Fatal("the claim was not left to the sweep")
	}
	release(zk.ErrConnectionClosed) // the held request fails: the session's connection closed
	cm.zkCalls.Wait()
	wantSwept(t, cm, fake, 0)
}

// TestReleaseWhileFencedLeavesTheClaimToTheSweep: a fenced instance sends
// no release (it would wait for a session that may be gone): the claim
// goes to the sweep of orphans, which deletes it once the fence is lifted.
func TestReleaseWhileFencedLeavesTheClaimToTheSweep(t *testing.T) {
	t.Parallel()
	cm, fake := fakeSessionManager(t)
	pm := mustClaim(t, cm, 0)
	cm.fence.raise()
	calls := fake.count("")
	if err := pm.release(time.Now().Add(time.Minute)); !errors.Is(err, ErrReleaseFailed) || !errors.Is(err, errFenced) {
		t.Fatalf("release = %v, want ErrReleaseFailed and errFenced", err)
	}
	if fake.count("") != calls {
		t.Fatal("a fenced release sent a request")
	}
	if left := cm.releaseOrphans(); len(left) != 1 || fake.count("") != calls {
		t.Fatalf("a fenced sweep left %v, and sent %d requests", left, fake.count("")-calls)
	}
	cm.fence.lift()
	wantSwept(t, cm, fake, 0)
}

// TestReleaseOrphansDeletesOnlyItsOwnUnrunClaims: the sweep deletes the
// owner nodes with this instance's ID of the partitions no partition
// manager runs; it leaves another instance's node, and a partition run
// again to its partition manager; it forgets them all.
func TestReleaseOrphansDeletesOnlyItsOwnUnrunClaims(t *testing.T) {
	t.Parallel()
	cm, fake := fakeSessionManager(t)
	fake.put(ownerPath("t", 0), []byte("me"), fakeSession)     // left behind
	fake.put(ownerPath("t", 1), []byte("other"), otherSession) // taken over since
	fake.put(ownerPath("t", 3), []byte("me"), fakeSession)     // run again
	running := newPartitionManager(cm, fakePartition("t", 3))
	cm.pms.Store(&partitionManagers{running.tp: running})
	for p := range int32(4) {
		cm.addOrphan(TopicPartition{Topic: "t", Partition: p}) // t/2 is gone
	}
	wantSwept(t, cm, fake, 0)
	if fake.owner(ownerPath("t", 1)) != "other" || fake.owner(ownerPath("t", 3)) != "me" {
		t.Fatal("the sweep deleted a node that was not an orphan")
	}
	if len(cm.orphans) != 0 {
		t.Fatalf("orphans remembered: %v", cm.orphans)
	}
}

// TestOrphanSweepKeepsWhatItCouldNotCheck: a sweep whose request fails
// keeps that orphan and those after it for the next sweep.
func TestOrphanSweepKeepsWhatItCouldNotCheck(t *testing.T) {
	t.Parallel()
	cm, fake := fakeSessionManager(t)
	fake.put(ownerPath("t", 0), []byte("me"), fakeSession)
	cm.addOrphan(TopicPartition{Topic: "t", Partition: 0})
	fake.failNext("Get", zk.ErrNoServer)
	if left := cm.releaseOrphans(); len(left) != 1 {
		t.Fatalf("orphans left %v, want t/0", left)
	}
	wantSwept(t, cm, fake, 0)
}

// TestLoseClaimsMakesOrphansOfTheHeldClaims: when the registration is gone,
// the partitions whose claims were held are recorded as orphans (their
// nodes are swept if the session did survive), and none shows as claimed.
func TestLoseClaimsMakesOrphansOfTheHeldClaims(t *testing.T) {
	t.Parallel()
	cm, _ := fakeSessionManager(t)
	held := newPartitionManager(cm, fakePartition("t", 0))
	held.claimed = true
	waiting := newPartitionManager(cm, fakePartition("t", 1))
	cm.pms.Store(&partitionManagers{held.tp: held, waiting.tp: waiting})
	cm.loseClaims()
	if len(cm.orphans) != 1 || !cm.orphans[held.tp] {
		t.Fatalf("orphans %v, want t/0", cm.orphans)
	}
	for _, pm := range []*partitionManager{held, waiting} {
		if pm.stats().Claimed || !pm.isLost() {
			t.Fatalf("%v: claimed %t, lost %t", pm.tp, pm.stats().Claimed, pm.isLost())
		}
	}
}

// mustClaim returns a partition manager of t/partition that holds its
// claim.
func mustClaim(t *testing.T, cm *consumerManager, partition int32) *partitionManager {
	t.Helper()
	pm := newPartitionManager(cm, fakePartition("t", partition))
	if !pm.claim() {
		t.Fatalf("claim() of t/%d = false", partition)
	}
	return pm
}

// wantSwept runs a sweep of the orphan claims, which must leave none, and
// t/partition's owner node gone.
func wantSwept(t *testing.T, cm *consumerManager, fake *fakeZK, partition int32) {
	t.Helper()
	if left := cm.releaseOrphans(); len(left) != 0 {
		t.Fatalf("orphans left by the sweep: %v", left)
	}
	if _, ok := fake.get(ownerPath("t", partition)); ok {
		t.Fatalf("t/%d's owner node is still there after the sweep", partition)
	}
}

// batchOf returns the partitions 0 to n-1 of topic.
func batchOf(topic string, n int) []TopicPartition {
	tps := make([]TopicPartition, n)
	for i := range tps {
		tps[i] = TopicPartition{Topic: topic, Partition: int32(i)}
	}
	return tps
}

// TestClaimBatchCreatesTheParentsAndClaimsAll: the first claim of a new
// group finds the owner nodes' parents missing; the batch creates them,
// and claims every partition with one multi more.
func TestClaimBatchCreatesTheParentsAndClaimsAll(t *testing.T) {
	t.Parallel()
	cm, fake := fakeSessionManager(t)
	tps := append(batchOf("t", 2), batchOf("u", 2)...)
	batch := newClaimBatch(cm, tps)
	for _, tp := range tps {
		if claimed, known := batch.claimed(tp); !claimed || !known {
			t.Fatalf("%v: claimed %t, known %t", tp, claimed, known)
		}
		wantOwner(t, fake, ownerPath(tp.Topic, tp.Partition), "me")
	}
	wantCalls(t, fake, "Multi", 2, "the one that found no parents, and its retry")
	pm := newPartitionManager(cm, fakePartition("u", 1))
	pm.claims = batch
	calls := fake.count("")
	if !pm.claim() || fake.count("") != calls {
		t.Fatal("a partition manager of the batch did not take its claim from it")
	}
}

// TestClaimBatchClaimsNoneWhenOneIsOwned: a multi is all or nothing: when
// one partition is still owned by another instance, no node of the chunk
// is created, and each partition manager claims alone.
func TestClaimBatchClaimsNoneWhenOneIsOwned(t *testing.T) {
	t.Parallel()
	cm, fake := fakeSessionManager(t)
	fake.put(ownerPath("t", 1), []byte("other"), otherSession)
	tps := batchOf("t", 3)
	batch := newClaimBatch(cm, tps)
	for _, tp := range tps {
		if claimed, known := batch.claimed(tp); claimed || !known {
			t.Fatalf("%v: claimed %t, known %t; want known false", tp, claimed, known)
		}
	}
	if _, ok := fake.get(ownerPath("t", 0)); ok {
		t.Fatal("a failed multi created an owner node")
	}
	pm := newPartitionManager(cm, fakePartition("t", 0))
	pm.claims = batch
	if !pm.claim() || fake.owner(ownerPath("t", 0)) != "me" {
		t.Fatal("the free partition was not claimed alone")
	}
}

// TestClaimBatchChunks: a batch makes one multi per claimChunk partitions;
// a chunk with an owned partition fails alone.
func TestClaimBatchChunks(t *testing.T) {
	t.Parallel()
	cm, fake := fakeSessionManager(t)
	owned := int32(claimChunk + 5) // in the second chunk
	fake.put(ownerPath("t", owned), []byte("other"), otherSession)
	tps := batchOf("t", 2*claimChunk+1)
	batch := newClaimBatch(cm, tps)
	for i, tp := range tps {
		claimed, known := batch.claimed(tp)
		second := i >= claimChunk && i < 2*claimChunk
		if claimed == second || !known {
			t.Fatalf("%v: claimed %t, known %t", tp, claimed, known)
		}
	}
	if n := fake.count("Multi"); n != 3 {
		t.Fatalf("%d multis for %d partitions, want 3", n, len(tps))
	}
}

// TestClaimBatchOfUnknownOutcomeLeavesTheClaimsToThePartitions: a multi
// whose answer is lost has an unknown outcome; each partition manager
// claims alone, and takes over the node the multi created.
func TestClaimBatchOfUnknownOutcomeLeavesTheClaimsToThePartitions(t *testing.T) {
	t.Parallel()
	cm, fake := fakeSessionManager(t)
	fake.put("/consumers/g/owners/t", nil, 0)
	fake.loseNextAnswer("Multi")
	tps := batchOf("t", 2)
	batch := newClaimBatch(cm, tps)
	if claimed, known := batch.claimed(tps[0]); claimed || known {
		t.Fatalf("claimed %t, known %t; want unknown", claimed, known)
	}
	for _, tp := range tps {
		pm := newPartitionManager(cm, fakePartition(tp.Topic, tp.Partition))
		pm.claims = batch
		if !pm.claim() {
			t.Fatalf("%v: claim() = false", tp)
		}
		wantOwner(t, fake, ownerPath(tp.Topic, tp.Partition), "me")
	}
}

// claimedAtReport is a Metrics that records, at each ClaimWaited, whether
// the partition already showed as claimed.
type claimedAtReport struct {
	BaseMetrics
	pm      *partitionManager
	claimed chan bool
}

func (m *claimedAtReport) ClaimWaited(string, TopicPartition, time.Duration) {
	m.claimed <- m.pm.stats().Claimed
}

// TestClaimWaitIsReportedBeforeTheClaimShows: Metrics hears of a claim's
// wait before the partition shows as claimed, so that JoinContext, which
// returns once every partition is claimed, returns after the report.
// Regression: the report came after, and JoinContext could return first.
func TestClaimWaitIsReportedBeforeTheClaimShows(t *testing.T) {
	t.Parallel()
	var metrics *claimedAtReport
	_, fake, _, node, done := claimWaitingForOwner(t, func(pm *partitionManager) Metrics {
		metrics = &claimedAtReport{pm: pm, claimed: make(chan bool, 1)}
		return metrics
	})
	fake.remove(node)
	if !receiveWithin(t, done, "the claim") {
		t.Fatal("claim() = false")
	}
	select {
	case claimed := <-metrics.claimed:
		if claimed {
			t.Fatal("ClaimWaited was called after the partition showed as claimed")
		}
	default:
		t.Fatal("the wait for the owner was not reported to Metrics")
	}
}

// claimWaitingForOwner starts the claim of t/0, owned by another instance,
// on a fake session, with the Metrics that metrics returns for its
// partition manager, and returns once the claim waits on the owner node.
func claimWaitingForOwner(t *testing.T, metrics func(*partitionManager) Metrics) (cm *consumerManager, fake *fakeZK, pm *partitionManager, node string, done <-chan bool) {
	t.Helper()
	cm, fake = fakeSessionManager(t)
	node = ownerPath("t", 0)
	fake.put(node, []byte("other"), otherSession)
	pm = newPartitionManager(cm, fakePartition("t", 0))
	cm.config.Metrics = metrics(pm)
	done = runDone(pm.claim)
	waitFor(t, 3*time.Second, "a watch on the owner node", func() bool { return fake.watched(node) == 1 })
	return cm, fake, pm, node, done
}

// rendezvousZK is a fake session whose calls that match hold until n of
// them are held together (or until a deadline, for a caller that sends
// them one at a time): it shows how many of those requests the caller had
// in flight at once. Once n met, the calls pass.
type rendezvousZK struct {
	*fakeZK
	match func(op, p string) bool
	n     int

	mu   sync.Mutex
	held int
	most int           // the most calls held together
	met  chan struct{} // closed when n are held
}

func newRendezvousZK(fake *fakeZK, n int, match func(op, p string) bool) *rendezvousZK {
	return &rendezvousZK{fakeZK: fake, match: match, n: n, met: make(chan struct{})}
}

func (r *rendezvousZK) meet(op, p string) {
	if !r.match(op, p) {
		return
	}
	r.mu.Lock()
	r.held++
	r.most = max(r.most, r.held)
	if r.held == r.n {
		close(r.met)
	}
	r.mu.Unlock()
	deadline := time.NewTimer(2 * time.Second)
	defer deadline.Stop()
	select {
	case <-r.met:
	case <-deadline.C:
	}
	r.mu.Lock()
	r.held--
	r.mu.Unlock()
}

// together returns the most calls that were held at once.
func (r *rendezvousZK) together() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.most
}

func (r *rendezvousZK) Multi(ops ...interface{}) ([]zk.MultiResponse, error) {
	r.meet("Multi", "")
	return r.fakeZK.Multi(ops...)
}

func (r *rendezvousZK) Create(p string, data []byte, flags int32, acl []zk.ACL) (string, error) {
	r.meet("Create", p)
	return r.fakeZK.Create(p, data, flags, acl)
}

// TestClaimBatchSendsItsChunksTogether: the multis of a batch's chunks are
// in flight together (go-zookeeper pipelines them on the session's
// connection), not one round trip after the other; a chunk with an owned
// partition still fails alone, and the others claim.
func TestClaimBatchSendsItsChunksTogether(t *testing.T) {
	t.Parallel()
	cm, fake := fakeSessionManager(t)
	fake.put("/consumers/g/owners/t", nil, 0)
	owned := int32(claimChunk + 5) // in the second chunk
	fake.put(ownerPath("t", owned), []byte("other"), otherSession)
	rv := newRendezvousZK(fake, 3, func(op, _ string) bool { return op == "Multi" })
	cm.zkConn = rv
	tps := batchOf("t", 2*claimChunk+1)
	batch := newClaimBatch(cm, tps)
	for i, tp := range tps {
		claimed, known := batch.claimed(tp)
		second := i >= claimChunk && i < 2*claimChunk
		if claimed == second || !known {
			t.Fatalf("%v: claimed %t, known %t", tp, claimed, known)
		}
	}
	if n := rv.together(); n != 3 {
		t.Fatalf("at most %d of the 3 chunks' multis were in flight together, want 3", n)
	}
	if n := fake.count("Multi"); n != 3 {
		t.Fatalf("%d multis for %d partitions, want 3", n, len(tps))
	}
}

// TestClaimBatchCreatesTheTopicsNodesTogether: in a new group, the nodes of
// the owners of each topic are missing; the batch creates them all at
// once (after the group's nodes, which they need), not one round trip
// after the other, and then claims every partition.
func TestClaimBatchCreatesTheTopicsNodesTogether(t *testing.T) {
	t.Parallel()
	cm, fake := fakeSessionManager(t)
	topics := []string{"t", "u", "v"}
	rv := newRendezvousZK(fake, len(topics), func(op, p string) bool {
		return op == "Create" && path.Dir(p) == "/consumers/g/owners"
	})
	cm.zkConn = rv
	var tps []TopicPartition
	for _, topic := range topics {
		tps = append(tps, batchOf(topic, 2)...)
	}
	batch := newClaimBatch(cm, tps)
	for _, tp := range tps {
		if claimed, known := batch.claimed(tp); !claimed || !known {
			t.Fatalf("%v: claimed %t, known %t", tp, claimed, known)
		}
		wantOwner(t, fake, ownerPath(tp.Topic, tp.Partition), "me")
	}
	if n := rv.together(); n != len(topics) {
		t.Fatalf("at most %d of the %d topics' nodes were created together, want %d", n, len(topics), len(topics))
	}
	wantCalls(t, fake, "Multi", 2, "the one that found no parents, and its retry")
}

func (r *rendezvousZK) GetW(p string) ([]byte, *zk.Stat, <-chan zk.Event, error) {
	r.meet("GetW", p)
	return r.fakeZK.GetW(p)
}

// TestClaimBatchOfANewGroupCreatesTheParentsFirst: when the join found the
// group's owners node missing, the first batch creates the owner nodes'
// parents before its multis, which would all fail for them: one multi per
// chunk, not two. A later batch finds the parents again as it goes.
func TestClaimBatchOfANewGroupCreatesTheParentsFirst(t *testing.T) {
	t.Parallel()
	cm, fake := fakeSessionManager(t)
	if sealed, err := cm.ownersSealed(); sealed || err != nil {
		t.Fatalf("ownersSealed() = %t, %v in a new group", sealed, err)
	}
	if !cm.ownersMissing.Load() {
		t.Fatal("the join's read of the owners node did not record it missing")
	}
	tps := append(batchOf("t", 2), batchOf("u", 2)...)
	batch := newClaimBatch(cm, tps)
	for _, tp := range tps {
		if claimed, known := batch.claimed(tp); !claimed || !known {
			t.Fatalf("%v: claimed %t, known %t", tp, claimed, known)
		}
		wantOwner(t, fake, ownerPath(tp.Topic, tp.Partition), "me")
	}
	wantCalls(t, fake, "Multi", 1, "the parents were created first")
	if cm.ownersMissing.Load() {
		t.Fatal("the hint outlived the first batch")
	}
	next := newClaimBatch(cm, batchOf("v", 2))
	if claimed, known := next.claimed(TopicPartition{Topic: "v", Partition: 0}); !claimed || !known {
		t.Fatalf("v/0 of a later batch: claimed %t, known %t", claimed, known)
	}
	wantCalls(t, fake, "Multi", 3, "a later batch's topic new to the group: the multi, its parent, the retry")
}
