package kafkaconsumer

// Claims: a partition's owner node in ZooKeeper, taken by its partition
// manager before it consumes (alone, or in batches of ZooKeeper multis for
// the partitions one distribution starts) and released when it stops; the
// orphan claims that a failed release, a claim of unknown outcome or a lost
// session leave behind, which the manager goroutine sweeps.

import (
	"errors"
	"fmt"
	"log/slog"
	"path"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/wvanbergen/kazoo-go"
)

// loseClaims records that the claims of every partition manager went with
// a lost ZooKeeper session (Stats no longer shows them claimed). In case
// the session did survive (the registration was deleted by hand), the
// owner nodes are swept as orphans once the managers stopped.
func (cm *consumerManager) loseClaims() {
	for tp, pm := range *cm.pms.Load() {
		if pm.lose() {
			cm.addOrphan(tp)
		}
	}
}

// addOrphan records a partition whose owner node may hold this instance's
// ID while no partition manager runs it. Safe from any goroutine.
func (cm *consumerManager) addOrphan(tp TopicPartition) {
	cm.orphanMu.Lock()
	defer cm.orphanMu.Unlock()
	if cm.orphans == nil {
		cm.orphans = make(map[TopicPartition]bool)
	}
	cm.orphans[tp] = true
}

// releaseOrphans deletes the owner nodes of the orphans that hold this
// instance's ID, and returns the orphans it could not check or delete (to
// try again). After the first failure it tries no more this time: each
// attempt takes about a second per server while ZooKeeper is unreachable,
// and the manager goroutine must not stay away from its watches that
// long. An orphan that a partition manager runs again is left to it: its
// claim takes over a node with this instance's ID. It runs on the manager
// goroutine, which alone changes the partition managers.
func (cm *consumerManager) releaseOrphans() (left []TopicPartition) {
	cm.orphanMu.Lock()
	orphans := make([]TopicPartition, 0, len(cm.orphans))
	for tp := range cm.orphans {
		orphans = append(orphans, tp)
	}
	cm.orphanMu.Unlock()
	running := *cm.pms.Load()
	for i, tp := range orphans {
		if running[tp] == nil {
			err := errFenced
			if !cm.fenced() {
				err = cm.zkCall(cm.zkTimeout(), func() error { return cm.releasePartition(tp) })
			}
			switch {
			case err == nil:
				cm.logf(slog.LevelInfo, "Released the claim of %s/%d, left behind.", tp.Topic, tp.Partition)
			case errors.Is(err, kazoo.ErrPartitionNotClaimed):
				// gone, or another instance's
			default:
				cm.logf(slog.LevelWarn, "Failed to release the claim of %s/%d, left behind: %s. Trying again.", tp.Topic, tp.Partition, convertError(err))
				return append(left, orphans[i:]...)
			}
		}
		cm.orphanMu.Lock()
		delete(cm.orphans, tp)
		cm.orphanMu.Unlock()
	}
	return left
}

// releasePartition deletes the partition's owner node if it holds this
// instance's ID; kazoo.ErrPartitionNotClaimed when it is gone or another
// instance's.
func (cm *consumerManager) releasePartition(tp TopicPartition) error {
	if h := cm.hooks; h != nil && h.releasePartition != nil {
		if err := h.releasePartition(tp.Topic, tp.Partition); err != nil {
			return err
		}
	}
	return cm.releaseNode(tp)
}

// lose records that the claim went with a lost ZooKeeper session, for
// good (see partitionManager.lost), and takes the partition out of the
// offset store at once: another instance may own it and have committed
// further, and the acks of what was handed out before the fence would
// otherwise be committed behind its commits once the fence is lifted for
// the next session. It reports whether the partition manager believed it
// held the claim.
func (pm *partitionManager) lose() bool {
	pm.mu.Lock()
	held := pm.claimed
	pm.claimed, pm.lost = false, true
	managed := pm.managed
	pm.managed = false // marks stop, under the lock they take
	wake := pm.waiting
	pm.mu.Unlock()
	if managed {
		pm.parent.offsets.drop(pm.tp)
	}
	if wake {
		pm.notify() // a stop waiting for acks need not wait any more
	}
	return held
}

// claim takes the partition's owner node in ZooKeeper. When another
// instance owns it, it waits until the owner lets go (it may still be
// finishing its last messages). It retries errors until killed, and reports
// whether it holds the claim. Killed after an attempt whose outcome is
// unknown (the connection failed while the node may have been created), it
// leaves the partition to the consumer manager's sweep of orphan claims.
func (pm *partitionManager) claim() bool {
	uncertain := false
	if pm.claims != nil {
		claimed, known := pm.claims.claimed(pm.tp)
		if claimed {
			pm.setClaimed()
			return true
		}
		uncertain = !known
		pm.committed = nil // the batch's read may precede this claim
	}
	var waitedSince time.Time // when it began to wait for another owner
	reportWait := func() {
		if !waitedSince.IsZero() {
			pm.parent.config.metrics().ClaimWaited(pm.parent.group, pm.tp, time.Since(waitedSince))
			waitedSince = time.Time{}
		}
	}
	defer reportWait() // a wait that ends without the claim
	for attempt := 0; ; attempt++ {
		err := pm.parent.claimNode(pm.tp)
		if err == nil {
			// Reported before the claim shows: JoinContext returns once
			// every partition shows as claimed, after the report.
			reportWait()
			pm.setClaimed()
			return true
		}
		if errors.Is(err, kazoo.ErrPartitionClaimedByOther) {
			owner, released, watchErr := pm.parent.watchOwner(pm.tp)
			switch {
			case watchErr != nil:
				err = fmt.Errorf("partition claimed by another instance, and its owner could not be watched: %w", watchErr)
			case released == nil:
				continue // released in the meantime
			default:
				pm.logf(slog.LevelDebug, "Partition is still owned by %s; waiting for it to be released.", owner)
				if waitedSince.IsZero() {
					waitedSince = time.Now()
				}
				select {
				case <-pm.t.Dying():
					return false
				case <-released:
					attempt = -1
					continue
				}
			}
		} else {
			uncertain = true
		}
		pm.logf(slog.LevelWarn, "Failed to claim partition: %s. Trying again.", convertError(err))
		if !sleepOrDie(&pm.t, attempt) {
			if uncertain {
				pm.parent.addOrphan(pm.tp)
			}
			return false
		}
	}
}

// setClaimed records that this instance holds the partition's claim.
func (pm *partitionManager) setClaimed() {
	pm.mu.Lock()
	pm.claimed = true
	pm.mu.Unlock()
	pm.logf(slog.LevelDebug, "Claimed partition.")
	pm.parent.notifyClaims()
}

// release gives up the claim, if this instance still holds it. It retries
// until the owner node is deleted, gone, or someone else's, or until the
// deadline; then it leaves the claim to the consumer manager's sweep of
// orphan claims and returns ErrReleaseFailed. An owner node left behind
// would make the next owner wait for ever.
func (pm *partitionManager) release(deadline time.Time) error {
	pm.mu.Lock()
	claimed := pm.claimed
	pm.claimed = false
	pm.mu.Unlock()
	if !claimed {
		return nil
	}
	for attempt := 0; ; attempt++ {
		var err error
		if pm.parent.fenced() {
			// A release now would wait for a session that may be gone:
			// leave it to the sweep of orphan claims.
			err = errFenced
			deadline = time.Now()
		} else {
			deadline = pm.parent.bound(deadline, stopsAfterCtxDone)
			err = pm.parent.zkCall(time.Until(deadline), func() error { return pm.parent.releasePartition(pm.tp) })
		}
		if err == nil {
			return nil
		}
		if errors.Is(err, kazoo.ErrPartitionNotClaimed) {
			pm.logf(slog.LevelWarn, "Claim was already gone (ZooKeeper session lost?).")
			return nil
		}
		delay := retryDelay(attempt)
		if time.Now().Add(delay).After(deadline) {
			pm.parent.addOrphan(pm.tp)
			err := pm.errorf("%w: %w; trying again in the background", ErrReleaseFailed, convertError(err))
			pm.logf(slog.LevelError, "%s.", err)
			return err
		}
		pm.logf(slog.LevelWarn, "Failed to release partition: %s. Trying again.", convertError(err))
		sleep := time.NewTimer(delay)
		<-sleep.C
	}
}

// claimChunk is the most owner nodes one ZooKeeper multi creates: a
// thousand creates of about 100 bytes stay well below jute.maxbuffer.
const claimChunk = 250

// claimBatch claims the partitions that one distribution started together,
// with one ZooKeeper multi request per claimChunk partitions instead of a
// request each: at start-up every owner node is missing, and a create per
// partition would cost a round trip each (BENCHMARKS.md, round 4). A multi
// is atomic: when one partition of a chunk is still owned (by an instance
// that is letting go of it), none of the chunk is created, and each
// partition manager claims its partition alone, as without the batch. The
// chunks are independent of each other: each is claimed, or not, on its
// own.
//
// The first partition manager that claims (claimed) runs the multis on its
// own goroutine; the others wait for it, without a deadline (as for a
// claim of their own), so that no node the batch created goes unnoticed.
type claimBatch struct {
	cm  *consumerManager
	tps []TopicPartition

	once sync.Once // runs the multis, in the first caller of claimed
	// result maps the partitions of the batch to their outcome: true for
	// claimed, false when the chunk failed for certain, absent when its
	// outcome is unknown (the connection failed).
	result map[TopicPartition]bool
}

func newClaimBatch(cm *consumerManager, tps []TopicPartition) *claimBatch {
	return &claimBatch{cm: cm, tps: tps}
}

// claimed returns the outcome for tp: claimed, or known false when the
// partition manager must claim alone (and may: nothing was created).
func (b *claimBatch) claimed(tp TopicPartition) (claimed, known bool) {
	b.once.Do(func() { b.result = b.run() })
	claimed, known = b.result[tp]
	return claimed, known
}

// run creates the owner nodes, the multis of all the chunks at once:
// go-zookeeper sends the requests of concurrent callers on the session's
// connection one after the other, without waiting for the answers
// between them, so the chunks cost about one round trip rather than one
// each. The chunks that found a parent missing (a new group, or a topic new
// to it) are created again once the parents of all of them are. When the
// join found the group's owners node missing (ownersMissing), the first
// batch creates the parents first: its multis would all fail for them.
func (b *claimBatch) run() map[TopicPartition]bool {
	var chunks [][]TopicPartition
	for start := 0; start < len(b.tps); start += claimChunk {
		chunks = append(chunks, b.tps[start:min(start+claimChunk, len(b.tps))])
	}
	all := upTo(len(chunks))
	if b.cm.ownersMissing.Swap(false) {
		_ = b.mkdirs(b.tps) // what failed is created after the multis, or reported
	}
	errs := make([]error, len(chunks))
	create := func(i int) { errs[i] = b.create(chunks[i]) }
	concurrently(all, create)
	var missing []int // the chunks whose parents were missing
	var orphans []TopicPartition
	for i, err := range errs {
		if errors.Is(err, zk.ErrNoNode) {
			missing = append(missing, i)
			orphans = append(orphans, chunks[i]...)
		}
	}
	if len(missing) > 0 && b.mkdirs(orphans) == nil {
		concurrently(missing, create)
	}
	result := make(map[TopicPartition]bool, len(b.tps))
	for i, chunk := range chunks {
		switch err := errs[i]; {
		case err == nil:
			for _, tp := range chunk {
				result[tp] = true
			}
		case errors.Is(err, zk.ErrNodeExists) || errors.Is(err, zk.ErrNoNode):
			for _, tp := range chunk {
				result[tp] = false
			}
		default:
			// Unknown: the partition managers claim alone, and take
			// over a node with this instance's ID.
		}
	}
	return result
}

// upTo returns 0, 1, …, n-1: all the indices, for concurrently.
func upTo(n int) []int {
	is := make([]int, n)
	for i := range is {
		is[i] = i
	}
	return is
}

// concurrently runs f for each of is, each on a goroutine of its own, and
// returns once all of them returned.
func concurrently(is []int, f func(i int)) {
	var wg sync.WaitGroup
	for _, i := range is {
		wg.Add(1)
		go func() { // owned by concurrently, which waits for it
			defer wg.Done()
			f(i)
		}()
	}
	wg.Wait()
}

// create runs one multi of the chunk's owner nodes; it returns the error of
// the op that failed, or of the request.
func (b *claimBatch) create(chunk []TopicPartition) error {
	id := []byte(b.cm.instance.ID)
	ops := make([]interface{}, len(chunk))
	for i, tp := range chunk {
		ops[i] = &zk.CreateRequest{Path: b.cm.ownerNode(tp), Data: id, Acl: b.cm.nodeACL(b.cm.ownerNode(tp)), Flags: zk.FlagEphemeral}
	}
	responses, err := b.cm.zkConn.Multi(ops...)
	for _, r := range responses {
		// The op that failed; the others report a rollback.
		if errors.Is(r.Error, zk.ErrNodeExists) || errors.Is(r.Error, zk.ErrNoNode) {
			return r.Error
		}
	}
	return err
}

// mkdirs creates the owner nodes' parents of the topics of tps, all at
// once, as run sends its multis; when the group's node of the owners is
// missing too (a new group), it creates that first, and then the topics'
// nodes that found it missing, again all at once.
func (b *claimBatch) mkdirs(tps []TopicPartition) error {
	var dirs []string
	seen := make(map[string]bool)
	for _, tp := range tps {
		if !seen[tp.Topic] {
			seen[tp.Topic] = true
			dirs = append(dirs, path.Dir(b.cm.ownerNode(tp)))
		}
	}
	all := upTo(len(dirs))
	errs := make([]error, len(dirs))
	create := func(i int) {
		_, err := b.cm.zkConn.Create(dirs[i], nil, 0, b.cm.nodeACL(dirs[i]))
		if errors.Is(err, zk.ErrNodeExists) {
			err = nil
		}
		errs[i] = err
	}
	concurrently(all, create)
	var orphans []int // the topics' nodes whose parent was missing
	for i, err := range errs {
		if errors.Is(err, zk.ErrNoNode) {
			orphans = append(orphans, i)
		}
	}
	if len(orphans) > 0 {
		if err := b.cm.mkdirs(path.Dir(dirs[orphans[0]])); err != nil {
			return err
		}
		concurrently(orphans, create)
	}
	return errors.Join(errs...)
}
