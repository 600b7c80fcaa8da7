package kafkaconsumer

// The offset store: the offset to commit of every partition this
// instance runs, fetched and committed with the library's own OffsetFetch
// and OffsetCommit requests. The goroutines that feed and run it are in
// offsets_commit.go; the batched start-up reads in offsets_batch.go.

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer/internal/commitmark"
)

// offsetStore holds the offset to commit of every partition this instance
// runs, and commits them to the group's coordinator in rounds: one
// OffsetCommit request for all the partitions whose offset moved. It takes
// the place of sarama's offset manager, which fetches the committed offset
// of each partition with a request of its own (a thousand round trips to
// start a thousand partitions, answered one at a time on its connection)
// and needs a goroutine per partition to drain its errors. Here the
// partitions that one distribution starts fetch their committed offsets
// together (see newCommittedOffsets), and failed commits are reported by the
// committer goroutine, which runs the rounds.
//
// The requests are those of sarama's offset manager for the configured
// Version. In a ZooKeeper-coordinated group they are those of a client
// that is not a member of a Kafka-coordinated group: no member ID,
// generation -1. In a Kafka-coordinated group (member set) they carry the
// member's generation, member ID and instance ID, so that Kafka refuses
// the commits of a member it removed from the group (ILLEGAL_GENERATION,
// UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID).
type offsetStore struct {
	client sarama.Client // the offset client (see connect)
	conf   *sarama.Config
	group  string
	// report passes on a commit of tp that failed for a reason other than
	// a coordinator that moved or is loading; called by commitRound, with
	// no lock held.
	report func(tp TopicPartition, err error)

	// coordinatorCache is the group's coordinator, which every request
	// of the group goes to (offsets_coordinator.go).
	coordinatorCache
	// failRound, when set (a test hook), runs first in each commit round;
	// its error fails the round.
	failRound func() error
	// fetching, when set (a test hook), runs before each OffsetFetch
	// request, with the partitions it asks for.
	fetching func(tps []TopicPartition)
	// lastProcessed is Config.CommitLastProcessed: commits are made in the
	// last-processed convention (internal/commitmark). Set before use.
	lastProcessed bool
	// member, when set (CoordinatorKafka), returns the membership that
	// commits carry: the generation, the member ID and the instance ID
	// (nil for none). Set before use.
	member func() (generation int32, memberID string, instanceID *string)
	// send, when set (GroupProtocolConsumer), sends a commit of tps in
	// place of the broker: as OffsetCommit v9 with the member's epoch,
	// through the group transport. Set before use.
	send func(req *sarama.OffsetCommitRequest, tps []TopicPartition) (*sarama.OffsetCommitResponse, error)
	// kafkaNow, when set (an instance that follows the group's coordinator
	// switch, coordinator_migrate.go), tells whether Kafka coordinates
	// the group now: member applies only then, and commits go without
	// membership while ZooKeeper coordinates it. Set before use.
	kafkaNow func() bool
	// durable is Config.DurableAcks: fetch reads the acked sets of
	// commits (see acked). Set before use.
	durable bool
	// ackedLimit is the most bytes of metadata that a commit with an
	// acked set may carry: maxMetadataBytes, halved at each refusal
	// (refused), 0 for no acked sets any more.
	ackedLimit atomic.Int64
	// refusedOnce is set at the first refusal of an acked set, which is
	// the one reported.
	refusedOnce atomic.Bool

	mu    sync.Mutex
	parts map[TopicPartition]*storedOffset
	// rewrite holds the partitions whose committed offset, as last
	// fetched, is to be committed again in this instance's convention
	// (see commitmark.Decode): set makes them dirty.
	rewrite map[TopicPartition]bool
	// acked holds the acked sets (Config.DurableAcks) of the partitions
	// whose committed offset fetch read last, until takeAcked.
	acked map[TopicPartition]ackedSet
}

// maxMetadataBytes is Kafka's default offset.metadata.max.bytes: the most
// metadata a broker takes with a committed offset.
const maxMetadataBytes = 4096

// minAckedLimit is the least ackedLimit worth an acked set: refused
// below it, acked sets are given up.
const minAckedLimit = 64

// storedOffset is the state of one partition in an offsetStore.
type storedOffset struct {
	next      int64 // the offset to commit: the next one to consume; -1 for none
	committed int64 // the offset the coordinator has, as far as known; -1 for none
	// acked is the acked set (Config.DurableAcks) to commit with next, the
	// part of the metadata after the mark (commitmark.WithAcked);
	// committedAcked the one the coordinator has, as far as known.
	acked, committedAcked string
	// closed is set by close: the partition takes no more marks, and
	// leaves the store in the round that commits next, or at once when
	// there is nothing to commit. Closed then.
	closed chan struct{}
}

// errAlreadyManaged is returned by reserve for a partition whose earlier
// partition manager's final commit is still pending.
var errAlreadyManaged = errors.New("the partition's previous offset is not committed yet")

func newOffsetStore(client sarama.Client, group string, report func(TopicPartition, error)) *offsetStore {
	s := &offsetStore{
		client:  client,
		conf:    client.Config(),
		group:   group,
		report:  report,
		parts:   make(map[TopicPartition]*storedOffset),
		rewrite: make(map[TopicPartition]bool),
		acked:   make(map[TopicPartition]ackedSet),
	}
	s.ackedLimit.Store(maxMetadataBytes)
	return s
}

// fetch returns the committed offsets of tps as next offsets to read (see
// commitmark.Decode), -1 for a partition with none, with one OffsetFetch
// request. A partition whose answer is an error is
// left out, and the first such error returned.
func (s *offsetStore) fetch(tps []TopicPartition) (map[TopicPartition]int64, error) {
	broker, err := s.broker()
	if err != nil {
		return nil, err
	}
	partitions := make(map[string][]int32)
	for _, tp := range tps {
		partitions[tp.Topic] = append(partitions[tp.Topic], tp.Partition)
	}
	if s.fetching != nil {
		s.fetching(tps)
	}
	req := sarama.NewOffsetFetchRequest(s.conf.Version, s.group, partitions)
	// A read_committed consumer must not start below an offset that a
	// transaction committed before its marker was written.
	req.RequireStable = s.conf.Consumer.IsolationLevel == sarama.ReadCommitted && req.Version >= 7
	resp, err := broker.FetchOffset(req)
	if err != nil {
		// sarama's broker fails every later request on a connection whose
		// read failed: close it, as a failed commit does.
		s.forget(broker.ID())
		_ = broker.Close()
		return nil, err
	}
	offsets := make(map[TopicPartition]int64, len(tps))
	var first error
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, tp := range tps {
		block := resp.GetBlock(tp.Topic, tp.Partition)
		switch {
		case block == nil && !errors.Is(resp.Err, sarama.ErrNoError):
			// A top-level error (v2 and later) comes without blocks.
			err = resp.Err
		case block == nil:
			err = sarama.ErrIncompleteResponse
		case errors.Is(block.Err, sarama.ErrNoError):
			next, rewrite := commitmark.Decode(block.Offset, block.Metadata, s.lastProcessed)
			offsets[tp] = next
			if rewrite {
				s.rewrite[tp] = true
			} else {
				delete(s.rewrite, tp)
			}
			s.keepAcked(tp, block.Metadata, next)
			continue
		default:
			err = block.Err
		}
		if coordinatorMoved(err) {
			s.forget(broker.ID())
		}
		if first == nil {
			first = err
		}
	}
	return offsets, first
}

// reserve starts keeping the offset of tp, with nothing to commit until
// set gives it the committed offset. It fails while the final commit of an
// earlier partition manager of tp is pending: the committed offset is read
// after reserve, so that such a commit cannot land after the read.
func (s *offsetStore) reserve(tp TopicPartition) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.parts[tp]; p != nil {
		if p.closed != nil {
			return errAlreadyManaged
		}
		return nil // reserved already (a retry)
	}
	s.parts[tp] = &storedOffset{next: -1, committed: -1}
	return nil
}

// closing reports whether the final commit of a partition manager of tp
// is pending.
func (s *offsetStore) closing(tp TopicPartition) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.parts[tp]
	return p != nil && p.closed != nil
}

// set gives the reserved tp its committed offset (-1 for none), which is
// also the offset to commit until a mark. A committed offset that fetch
// found in the other convention is left dirty: the next round commits it
// again.
func (s *offsetStore) set(tp TopicPartition, committed int64) {
	s.mu.Lock()
	if p := s.parts[tp]; p != nil && p.closed == nil {
		p.next, p.committed = committed, committed
		if s.rewrite[tp] {
			p.committed = -1
		}
	}
	delete(s.rewrite, tp)
	s.mu.Unlock()
}

// mark moves the offset to commit of tp forward to next; a mark that
// does not move it forward is ignored, as is one after close.
func (s *offsetStore) mark(tp TopicPartition, next int64) {
	s.mu.Lock()
	if p := s.parts[tp]; p != nil && p.closed == nil && next > p.next {
		p.next = next
		p.acked = ""
	}
	s.mu.Unlock()
}

// markAcked is mark with the acked set to commit with next (the part of
// the metadata after the mark, see commitmark.WithAcked): a mark at the
// offset to commit changes only the set.
func (s *offsetStore) markAcked(tp TopicPartition, next int64, acked string) {
	s.mu.Lock()
	if p := s.parts[tp]; p != nil && p.closed == nil && next >= p.next {
		p.next, p.acked = next, acked
	}
	s.mu.Unlock()
}

// reset sets the offset to commit of tp to next, forward or back.
func (s *offsetStore) reset(tp TopicPartition, next int64) {
	s.mu.Lock()
	if p := s.parts[tp]; p != nil && p.closed == nil {
		p.next, p.acked = next, ""
	}
	s.mu.Unlock()
}

// isCommitted reports whether the coordinator has offset as tp's committed
// offset, as far as the store knows.
func (s *offsetStore) isCommitted(tp TopicPartition, offset int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.parts[tp]
	return p != nil && p.committed == offset
}

// next returns the offset to commit of tp, -1 for none.
func (s *offsetStore) next(tp TopicPartition) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.parts[tp]; p != nil {
		return p.next
	}
	return -1
}

// close ends the marks of tp and returns a channel that is closed when its
// offset to commit is committed: at once when it is already, else by the
// commit round that commits it. Until then the partition stays in the
// store, and every round tries again.
func (s *offsetStore) close(tp TopicPartition) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	done := make(chan struct{})
	p := s.parts[tp]
	if p == nil || !p.dirty() {
		delete(s.parts, tp)
		close(done)
		return done
	}
	if p.closed == nil {
		p.closed = done
	}
	return p.closed
}

// drop takes tp out of the store without committing it: its claim is
// gone, and a commit by this instance could land after one of the
// partition's next owner. A commit round already in flight may still
// commit it.
func (s *offsetStore) drop(tp TopicPartition) {
	s.mu.Lock()
	delete(s.parts, tp)
	s.mu.Unlock()
}

// dropClosing takes tp out of the store, without a commit, if its entry is
// the closing one whose channel is closed; done when committed.
func (s *offsetStore) dropClosing(tp TopicPartition, closed <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.parts[tp]; p != nil && p.closed != nil && (<-chan struct{})(p.closed) == closed {
		delete(s.parts, tp)
	}
}

// dirty reports whether the offset to commit, or its acked set, differs
// from the committed one.
func (p *storedOffset) dirty() bool {
	return p.next >= 0 && (p.next != p.committed || p.acked != p.committedAcked)
}

// commitRound commits the offsets that moved since the last round, in one
// request to the coordinator per maxCommitBytes (see commitChunks), and
// reports those that failed. Only the committer goroutine (and closeKafka
// after it) runs rounds.
func (s *offsetStore) commitRound() {
	s.mu.Lock()
	var dirty []TopicPartition
	var sizes []int
	for tp, p := range s.parts {
		if p.dirty() {
			dirty = append(dirty, tp)
			sizes = append(sizes, len(p.acked))
		}
	}
	s.mu.Unlock()
	if len(dirty) == 0 {
		return
	}
	if s.asMember() {
		if g, _, _ := s.member(); g < 0 {
			// Not a member of a generation (before the first, or after a
			// removal): Kafka would take a commit without generation
			// from anyone once the group is empty.
			return
		}
	}
	var err error
	if s.failRound != nil {
		err = s.failRound()
	}
	var broker *sarama.Broker
	if err == nil {
		broker, err = s.broker()
	}
	if err != nil {
		for _, tp := range dirty {
			s.report(tp, err)
		}
		return
	}
	for _, chunk := range s.commitChunks(dirty, sizes) {
		if !s.commitChunk(broker, chunk) {
			return // the broker failed: the next round looks it up again
		}
	}
}

// maxCommitBytes bounds the records that the coordinator writes to the
// offsets topic for one OffsetCommit request: its batch must fit the
// topic's max.message.bytes (offsets.load.buffer.size and the default
// message.max.bytes are about 1 MB); past that the request fails with
// INVALID_COMMIT_OFFSET_SIZE, every round.
const maxCommitBytes = 512 << 10

// commitRecordBytes is the size of the record the coordinator writes for
// a committed offset of tp, apart from the group's and topic's names: the
// key's and value's fields and the record's framing, with room to spare.
const commitRecordBytes = 64

// commitChunks splits tps into the partitions of one request each, so that
// each request's records stay below maxCommitBytes; acked are the sizes
// of their acked sets (nil: none).
func (s *offsetStore) commitChunks(tps []TopicPartition, acked []int) [][]TopicPartition {
	var chunks [][]TopicPartition
	start, size := 0, 0
	for i, tp := range tps {
		n := len(s.group) + len(tp.Topic) + len(commitmark.NextMark) + commitRecordBytes
		if acked != nil {
			n += acked[i]
		}
		if size+n > maxCommitBytes && i > start {
			chunks = append(chunks, tps[start:i])
			start, size = i, 0
		}
		size += n
	}
	return append(chunks, tps[start:])
}

// commitChunk commits the offsets of tps in one request to broker and
// handles the answer. It reports false when the request failed as a
// whole (the broker is closed then). Its steps: take the offsets to
// commit (dirtyOffsets), send them (sendCommit), settle each partition by
// its answer (settle), report the failures, and commit again at once,
// without their acked sets, the partitions whose acked set was refused.
func (s *offsetStore) commitChunk(broker *sarama.Broker, tps []TopicPartition) bool {
	batch := s.dirtyOffsets(tps)
	if len(batch) == 0 {
		return true
	}
	req := s.commitRequest()
	resp, err := s.sendCommit(broker, req, batch)
	if err != nil {
		for _, b := range batch {
			s.report(b.tp, err)
		}
		s.forget(broker.ID())
		_ = broker.Close() // the client opens it again on its next use
		return false
	}
	out := s.settle(batch, resp, req.ConsumerGroupGeneration)
	if out.release {
		s.forget(broker.ID())
	}
	for _, f := range out.failed {
		s.report(f.tp, f.err)
	}
	if len(out.refused) > 0 {
		s.refused(out.refused, out.refusedBytes)
		return s.commitChunk(broker, out.refused)
	}
	return true
}

// sentOffset is the offset to commit of a partition as a commit request
// carries it.
type sentOffset struct {
	tp     TopicPartition
	part   *storedOffset
	offset int64
	acked  string
}

// dirtyOffsets returns the offsets to commit of those of tps that are
// dirty.
func (s *offsetStore) dirtyOffsets(tps []TopicPartition) []sentOffset {
	s.mu.Lock()
	defer s.mu.Unlock()
	batch := make([]sentOffset, 0, len(tps))
	for _, tp := range tps {
		if p := s.parts[tp]; p != nil && p.dirty() {
			batch = append(batch, sentOffset{tp, p, p.next, p.acked})
		}
	}
	return batch
}

// sendCommit adds batch to req and sends it: through send when set
// (GroupProtocolConsumer), else to broker.
func (s *offsetStore) sendCommit(broker *sarama.Broker, req *sarama.OffsetCommitRequest, batch []sentOffset) (*sarama.OffsetCommitResponse, error) {
	timestamp := int64(0)
	if req.Version == 1 {
		timestamp = sarama.ReceiveTime // version 1's: when the broker receives it
	}
	for _, b := range batch {
		// Leader epoch -1: unknown (sarama does not track it).
		offset, metadata := commitmark.Encode(b.offset, s.lastProcessed)
		req.AddBlockWithLeaderEpoch(b.tp.Topic, b.tp.Partition, offset, -1, timestamp, metadata+b.acked)
	}
	if s.send == nil {
		return broker.CommitOffset(req)
	}
	tps := make([]TopicPartition, len(batch))
	for i, b := range batch {
		tps[i] = b.tp
	}
	return s.send(req, tps)
}

// commitOutcome is what the answer to a commit request settled (settle).
type commitOutcome struct {
	failed []commitFailure // to report
	// refused are the partitions whose acked set was refused, to commit
	// again without; refusedBytes the largest metadata refused.
	refused      []TopicPartition
	refusedBytes int
	// release: the coordinator is to be forgotten (it moved, or the next
	// round asks it afresh).
	release bool
}

// commitFailure is a partition's commit that failed with err.
type commitFailure struct {
	tp  TopicPartition
	err error
}

// settle records the answer resp to the commit of batch, sent with the
// member's generation: a committed offset becomes the committed one, and
// a closing partition committed leaves the store (its closed channel is
// closed); the rest is the outcome's.
func (s *offsetStore) settle(batch []sentOffset, resp *sarama.OffsetCommitResponse, generation int32) commitOutcome {
	var out commitOutcome
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range batch {
		kerr, ok := resp.Errors[b.tp.Topic][b.tp.Partition]
		switch {
		case !ok:
			out.failed = append(out.failed, commitFailure{b.tp, sarama.ErrIncompleteResponse})
		case errors.Is(kerr, sarama.ErrNoError):
			b.part.committed, b.part.committedAcked = b.offset, b.acked
			if b.part.closed != nil && !b.part.dirty() && s.parts[b.tp] == b.part {
				delete(s.parts, b.tp)
				close(b.part.closed)
			}
		case errors.Is(kerr, sarama.ErrNotLeaderForPartition), errors.Is(kerr, sarama.ErrLeaderNotAvailable),
			coordinatorMoved(kerr):
			out.release = true // not an error: the next round asks the new coordinator
		case errors.Is(kerr, sarama.ErrRebalanceInProgress):
			// The group is completing a rebalance: the next round
			// commits.
		case s.asMember() && (errors.Is(kerr, sarama.ErrIllegalGeneration) || errors.Is(kerr, sarama.ErrUnknownMemberId) || errors.Is(kerr, sarama.ErrFencedInstancedId) ||
			errors.Is(kerr, errFencedMemberEpoch) || errors.Is(kerr, errStaleMemberEpoch)):
			// Refused as a member's commit. After a generation change
			// that this round did not see yet, the next round commits
			// with the new one; else this member was removed, and the
			// refusal is reported (the guard learns it from its
			// heartbeats too).
			if g, _, _ := s.member(); g == generation && g >= 0 {
				out.failed = append(out.failed, commitFailure{b.tp, kerr})
			}
		case errors.Is(kerr, sarama.ErrUnknownTopicOrPartition) && b.part.closed != nil && s.parts[b.tp] == b.part:
			// The topic is gone: the final commit of its stopped
			// partition never succeeds, and must not land on a topic of
			// the same name created later. It leaves the store; the
			// partition's stop goes on as if it was committed.
			out.failed = append(out.failed, commitFailure{b.tp, kerr})
			delete(s.parts, b.tp)
			close(b.part.closed)
		case errors.Is(kerr, sarama.ErrOffsetMetadataTooLarge) && b.acked != "":
			out.refused = append(out.refused, b.tp)
			out.refusedBytes = max(out.refusedBytes, len(commitmark.NextMark)+len(b.acked))
		default:
			out.failed = append(out.failed, commitFailure{b.tp, kerr})
			// Unless the offset itself is refused, the next round asks
			// the coordinator afresh, as sarama does.
			out.release = out.release || !errors.Is(kerr, sarama.ErrOffsetMetadataTooLarge) && !errors.Is(kerr, sarama.ErrInvalidCommitOffsetSize)
		}
	}
	return out
}

// refused handles a broker's refusal of the acked sets of tps, the
// largest of size bytes of metadata (OFFSET_METADATA_TOO_LARGE: its
// offset.metadata.max.bytes is lower): ackedLimit goes down to half of
// that (to 0 below minAckedLimit), tps lose their acked sets, so that
// commitChunk commits them again without, and the first refusal is
// reported.
func (s *offsetStore) refused(tps []TopicPartition, size int) {
	limit := min(s.ackedLimit.Load(), int64(size)) / 2
	if limit < minAckedLimit {
		limit = 0
	}
	s.ackedLimit.Store(limit)
	s.mu.Lock()
	for _, tp := range tps {
		if p := s.parts[tp]; p != nil {
			p.acked = ""
		}
	}
	s.mu.Unlock()
	if s.refusedOnce.CompareAndSwap(false, true) {
		then := fmt.Sprintf("acked sets kept under %d bytes from now on", limit)
		if limit == 0 {
			then = "no acked sets from now on"
		}
		s.report(tps[0], fmt.Errorf("%w: the group's coordinator refused the acked set of Config.DurableAcks in %d bytes of commit metadata (its offset.metadata.max.bytes is lower): committed without it, %s (reported once)",
			sarama.ErrOffsetMetadataTooLarge, size, then))
	}
}

// asMember reports whether commits go as a member of Kafka's group (see
// member and kafkaNow).
func (s *offsetStore) asMember() bool {
	return s.member != nil && (s.kafkaNow == nil || s.kafkaNow())
}

// commitRequest returns an empty OffsetCommit request of the version
// sarama's offset manager sends for the configured Version: as a client
// outside Kafka's group membership, or as the member that member gives.
func (s *offsetStore) commitRequest() *sarama.OffsetCommitRequest {
	req := &sarama.OffsetCommitRequest{
		Version:                 1,
		ConsumerGroup:           s.group,
		ConsumerGroupGeneration: sarama.GroupGenerationUndefined,
	}
	if s.asMember() {
		req.ConsumerGroupGeneration, req.ConsumerID, req.GroupInstanceId = s.member()
	}
	v := s.conf.Version
	for _, step := range []struct {
		from    sarama.KafkaVersion
		version int16
	}{{sarama.V0_9_0_0, 2}, {sarama.V0_11_0_0, 3}, {sarama.V2_0_0_0, 4}, {sarama.V2_1_0_0, 6}, {sarama.V2_3_0_0, 7}, {sarama.V2_4_0_0, 8}} {
		if v.IsAtLeast(step.from) {
			req.Version = step.version
		}
	}
	// Versions 2 to 4 carry the retention (-1: the broker's default);
	// later ones leave it to the broker. Set it whatever the version:
	// sarama lowers a request to the broker's highest version, so a
	// version 6 request goes out as version 3 to Kafka 1.1 and as 4 to
	// Kafka 2.0, which read a retention of 0 as "expire at once" and drop
	// the offset at their next cleanup (10 minutes).
	req.RetentionTime = -1
	if r := s.conf.Consumer.Offsets.Retention; r > 0 {
		req.RetentionTime = int64(r / time.Millisecond)
	}
	return req
}

// uncommitted returns how many partitions have an offset to commit that is
// not committed.
func (s *offsetStore) uncommitted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, p := range s.parts {
		if p.dirty() {
			n++
		}
	}
	return n
}
