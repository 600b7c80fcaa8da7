package kafkaconsumer

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/IBM/sarama"
)

// initialOffsets resolves Offsets.Initial for the partitions that one
// distribution starts, with one ListOffsets request per partition leader
// instead of one per partition: at start-up every partition of a new
// group has no committed offset, and a request each cost a round trip on
// the leader's connection, where Kafka answers one request at a time.
//
// The first partition manager that needs an offset (get) makes the
// requests for all of them, on its own goroutine; the others wait for it.
// A partition that the requests did not resolve (an error, a leader that
// moved) is left to the partition manager's own request.
type initialOffsets struct {
	client  sarama.Client
	initial int64 // Offsets.Initial: sarama.OffsetOldest or OffsetNewest
	tps     []topicPartition

	claimed atomic.Bool   // a partition manager is resolving
	done    chan struct{} // closed when offsets is set
	offsets map[topicPartition]int64
}

func newInitialOffsets(client sarama.Client, initial int64, tps []topicPartition) *initialOffsets {
	return &initialOffsets{client: client, initial: initial, tps: tps, done: make(chan struct{})}
}

// get returns the offset of tp, resolving those of every partition first
// if no other caller does; ok is false when it is not known (then ask the
// partition's leader alone) or when dying closed first.
func (b *initialOffsets) get(tp topicPartition, dying <-chan struct{}) (offset int64, ok bool) {
	if b.claimed.CompareAndSwap(false, true) {
		b.offsets = b.resolve()
		close(b.done)
	}
	select {
	case <-b.done:
	case <-dying:
		return 0, false
	}
	offset, ok = b.offsets[tp]
	return offset, ok
}

// resolve asks each leader for the offsets of its partitions, in one
// request per leader, concurrently.
func (b *initialOffsets) resolve() map[topicPartition]int64 {
	requests := make(map[*sarama.Broker]*sarama.OffsetRequest)
	for _, tp := range b.tps {
		leader, err := b.client.Leader(tp.topic, tp.partition)
		if err != nil {
			continue
		}
		req := requests[leader]
		if req == nil {
			req = sarama.NewOffsetRequest(b.client.Config().Version)
			requests[leader] = req
		}
		req.AddBlock(tp.topic, tp.partition, b.initial, 1)
	}
	var (
		mu      sync.Mutex
		wg      sync.WaitGroup
		offsets = make(map[topicPartition]int64, len(b.tps))
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
						offsets[topicPartition{topic: topic, partition: partition}] = offset
					}
				}
			}
		}()
	}
	wg.Wait()
	return offsets
}

// blockOffset returns the offset of a ListOffsets answer, as sarama's
// Client.GetOffset reads it.
func blockOffset(block *sarama.OffsetResponseBlock) (int64, bool) {
	if block == nil || !errors.Is(block.Err, sarama.ErrNoError) || len(block.Offsets) != 1 {
		return 0, false
	}
	return block.Offsets[0], true
}
