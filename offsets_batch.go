package kafkaconsumer

// Batched start-up reads: the committed offsets and Offsets.Initial of the
// partitions that one distribution starts, with one request per broker.

import (
	"errors"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/IBM/sarama"
	"gopkg.in/tomb.v1"
)

// offsetBatch resolves an offset of each partition that one distribution
// starts, with one request per broker instead of one per partition: a
// request each cost a round trip on the broker's connection, where Kafka
// answers one request at a time, and at start-up a thousand partitions
// need their committed offsets (see newCommittedOffsets) and, in a new
// group, Offsets.Initial (see newInitialOffsets).
//
// The first partition manager that needs an offset (get) makes the
// requests for all of them, on its own goroutine; the others wait for it.
// A partition that the requests did not resolve (an error, a leader that
// moved) is left to the partition manager's own request.
type offsetBatch struct {
	resolve func() map[TopicPartition]int64
	// running counts the goroutine that resolves; its owner (closeKafka,
	// through the consumer manager's kafkaCalls) waits for it.
	running *sync.WaitGroup

	claimed atomic.Bool   // a partition manager is resolving
	done    chan struct{} // closed when offsets is set
	offsets map[TopicPartition]int64
}

func newOffsetBatch(running *sync.WaitGroup, resolve func() map[TopicPartition]int64) *offsetBatch {
	return &offsetBatch{resolve: resolve, running: running, done: make(chan struct{})}
}

// newInitialOffsets resolves Offsets.Initial (sarama.OffsetOldest or
// OffsetNewest) of tps with one ListOffsets request per partition leader.
func newInitialOffsets(running *sync.WaitGroup, client sarama.Client, initial int64, tps []TopicPartition) *offsetBatch {
	return newOffsetBatch(running, func() map[TopicPartition]int64 { return listOffsets(client, initial, tps) })
}

// newCommittedOffsets fetches the committed offsets (-1 for none) of those
// of tps that claims claimed, with one OffsetFetch request. The read must
// follow every commit of the partition's earlier owners: another
// instance's commits precede its release, and so the claim; this
// instance's own, of an earlier partition manager whose final commit
// is still pending (closing), may not, so such a partition is left out. A
// partition claimed alone is left out too: its claim may follow the read.
// With no claims (CoordinatorKafka), the generation's assignment is the
// claim, and every partition of tps is read.
func newCommittedOffsets(running *sync.WaitGroup, store *offsetStore, claims *claimBatch, tps []TopicPartition) *offsetBatch {
	return newOffsetBatch(running, func() map[TopicPartition]int64 {
		var claimed []TopicPartition
		for _, tp := range tps {
			if claims == nil {
				if !store.closing(tp) {
					claimed = append(claimed, tp)
				}
			} else if ok, _ := claims.claimed(tp); ok && !store.closing(tp) {
				claimed = append(claimed, tp)
			}
		}
		if len(claimed) == 0 {
			return nil
		}
		offsets, _ := store.fetch(claimed) // the others fetch alone, and report
		return offsets
	})
}

// get returns the offset of tp, resolving those of every partition first
// if no other caller does (on a goroutine of its own, so that a caller
// that dies need not wait for a hung broker); ok is false when it is not
// known (then ask alone) or when dying closed first.
func (b *offsetBatch) get(tp TopicPartition, dying <-chan struct{}) (offset int64, ok bool) {
	if b.claimed.CompareAndSwap(false, true) {
		b.running.Add(1)
		go func() { // owned by closeKafka, which waits for running
			defer b.running.Done()
			b.offsets = b.resolve()
			close(b.done)
		}()
	}
	select {
	case <-b.done:
	case <-dying:
		return 0, false
	}
	offset, ok = b.offsets[tp]
	return offset, ok
}

// listOffsets asks each leader for the offset of its partitions at
// initial, in one request per leader, concurrently. The client's metadata
// is refreshed once, for the topics it does not know; a partition of a
// topic it still does not know, or whose leader it cannot name, is left
// out (its partition manager asks alone): sarama's Leader refreshes the
// metadata, with retries, for each partition it does not know, which
// must not happen once per partition of a round.
func listOffsets(client sarama.Client, initial int64, tps []TopicPartition) map[TopicPartition]int64 {
	known := func() map[string]bool {
		topics, _ := client.Topics()
		set := make(map[string]bool, len(topics))
		for _, topic := range topics {
			set[topic] = true
		}
		return set
	}
	cached := known()
	var missing []string
	for _, tp := range tps {
		if !cached[tp.Topic] && !slices.Contains(missing, tp.Topic) {
			missing = append(missing, tp.Topic)
		}
	}
	if len(missing) > 0 {
		_ = client.RefreshMetadata(missing...)
		cached = known()
	}
	requests := make(map[*sarama.Broker]*sarama.OffsetRequest)
	failed := make(map[string]bool) // topics whose leader lookup failed once
	for _, tp := range tps {
		if !cached[tp.Topic] || failed[tp.Topic] {
			continue
		}
		leader, err := client.Leader(tp.Topic, tp.Partition)
		if err != nil {
			failed[tp.Topic] = true
			continue
		}
		req := requests[leader]
		if req == nil {
			req = listOffsetsRequest(client.Config())
			requests[leader] = req
		}
		req.AddBlock(tp.Topic, tp.Partition, initial, 1)
	}
	var (
		mu      sync.Mutex
		wg      sync.WaitGroup
		offsets = make(map[TopicPartition]int64, len(tps))
	)
	for leader, req := range requests {
		wg.Add(1)
		go func() { // owned by resolve, which waits for it
			defer wg.Done()
			resp, err := leader.GetAvailableOffsets(req)
			if err != nil {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for topic, blocks := range resp.Blocks {
				for partition, block := range blocks {
					if offset, ok := blockOffset(block); ok {
						offsets[TopicPartition{Topic: topic, Partition: partition}] = offset
					}
				}
			}
		}()
	}
	wg.Wait()
	return offsets
}

// listOffsetsRequest returns a ListOffsets request of the version that
// conf.Version allows, with the consumer's isolation level: reading
// committed, OffsetNewest is the last stable offset (the first offset of
// the oldest open transaction), where Kafka's clients start, so that a
// transaction open at the start is handed out once it commits; reading
// uncommitted, it is the high-water mark. sarama's Client.GetOffset
// always reads uncommitted.
func listOffsetsRequest(conf *sarama.Config) *sarama.OffsetRequest {
	req := sarama.NewOffsetRequest(conf.Version)
	req.IsolationLevel = conf.Consumer.IsolationLevel
	return req
}

// listOffset returns tp's offset at time (OffsetNewest, OffsetOldest or a
// timestamp) with the consumer's isolation level (listOffsetsRequest).
// Like sarama's Client.GetOffset, it asks the leader, and once more after
// refreshing the topic's metadata if that failed. It blocks for up to two
// requests and a metadata refresh.
func listOffset(client sarama.Client, tp TopicPartition, time int64) (int64, error) {
	offset, err := listOffsetOnce(client, tp, time)
	if err != nil {
		if err := client.RefreshMetadata(tp.Topic); err != nil {
			return -1, err
		}
		return listOffsetOnce(client, tp, time)
	}
	return offset, nil
}

func listOffsetOnce(client sarama.Client, tp TopicPartition, time int64) (int64, error) {
	leader, err := client.Leader(tp.Topic, tp.Partition)
	if err != nil {
		return -1, err
	}
	req := listOffsetsRequest(client.Config())
	req.AddBlock(tp.Topic, tp.Partition, time, 1)
	resp, err := leader.GetAvailableOffsets(req)
	if err != nil {
		_ = leader.Close() // sarama's client opens it again
		return -1, err
	}
	block := resp.GetBlock(tp.Topic, tp.Partition)
	if block == nil {
		_ = leader.Close()
		return -1, sarama.ErrIncompleteResponse
	}
	if offset, ok := blockOffset(block); ok {
		return offset, nil
	}
	if !errors.Is(block.Err, sarama.ErrNoError) {
		return -1, block.Err
	}
	return -1, sarama.ErrOffsetOutOfRange
}

// blockOffset returns the offset of a ListOffsets answer, as sarama's
// Client.GetOffset reads it.
func blockOffset(block *sarama.OffsetResponseBlock) (int64, bool) {
	if block == nil || !errors.Is(block.Err, sarama.ErrNoError) || len(block.Offsets) != 1 {
		return 0, false
	}
	return block.Offsets[0], true
}

// committedReads reads the committed offsets of the partitions that start
// alone, outside an offsetBatch: in a mass move each partition is claimed
// when its former owner releases it, after its distribution's claim
// batch failed, and so reads alone. A read waits while an OffsetFetch
// request is in flight, then goes out with every read that came
// meanwhile in one request: the group's coordinator answers a
// connection's requests one at a time, and a request per partition would
// make the last of a few hundred wait for all the others' round trips. A
// read is sent after read was called, so it follows its partition's claim
// as a request of its own would.
type committedReads struct {
	fetch func(tps []TopicPartition) (map[TopicPartition]int64, error) // offsetStore.fetch
	// running counts the goroutine that sends the requests (send); its
	// owner, closeKafka through the consumer manager's kafkaCalls, waits
	// for it.
	running *sync.WaitGroup

	mu      sync.Mutex // guards the fields below
	next    *readRound // the reads waiting to be sent; nil when none
	sending bool       // set while send runs
}

// readRound is the reads that one OffsetFetch request answers.
type readRound struct {
	tps     []TopicPartition
	done    chan struct{} // closed by send once offsets and err are set
	offsets map[TopicPartition]int64
	err     error
}

func newCommittedReads(running *sync.WaitGroup, fetch func([]TopicPartition) (map[TopicPartition]int64, error)) *committedReads {
	return &committedReads{fetch: fetch, running: running}
}

// read returns the committed offset of tp, -1 for none, read in the next
// request, or the error that left tp out of its answer; tomb.ErrDying
// when dying closes first. Safe from many goroutines.
func (r *committedReads) read(tp TopicPartition, dying <-chan struct{}) (int64, error) {
	r.mu.Lock()
	round := r.next
	if round == nil {
		round = &readRound{done: make(chan struct{})}
		r.next = round
	}
	round.tps = append(round.tps, tp)
	if !r.sending {
		r.sending = true
		r.running.Add(1)
		go r.send() // owned by closeKafka, which waits for running
	}
	r.mu.Unlock()
	select {
	case <-round.done:
	case <-dying:
		return 0, tomb.ErrDying
	}
	if offset, ok := round.offsets[tp]; ok {
		return offset, nil
	}
	if round.err != nil {
		return 0, round.err
	}
	return 0, sarama.ErrIncompleteResponse
}

// send sends the waiting reads, one request at a time, until none waits.
func (r *committedReads) send() {
	defer r.running.Done()
	for {
		r.mu.Lock()
		round := r.next
		r.next = nil
		if round == nil {
			r.sending = false
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
		round.offsets, round.err = r.fetch(round.tps)
		close(round.done)
	}
}
