package kafkaconsumer

// Batches of a share consumer (GroupProtocolShare with Config.BatchSize):
// its channels, and the hand-out of a fetch loop in batches
// (handOutBatch), beside the per-record one of share_fetch.go (handOut).
// A batch is the run of records of one partition at the head of the
// loop's queue, up to BatchSize: what one ShareFetch acquired of that
// partition (the queue holds up to two answers: the loop fetches ahead). It is handed out only while the locks of all its records
// hold, as a single record is: the Batches channel is unbuffered.

import (
	"time"

	"github.com/IBM/sarama"
)

// setChannels makes the channels of the hand-out: with BatchSize,
// Batches (unbuffered, see Batches) and a closed channel for Messages;
// else Messages (unbuffered) and a closed channel for Batches. Messages'
// channel is made either way: the shutdown drains and closes it.
func (sc *shareConsumer) setChannels() {
	sc.messages = make(chan *sarama.ConsumerMessage)
	if sc.config.BatchSize > 0 {
		sc.batches = make(chan *Batch)
		sc.closedIn = make(chan *sarama.ConsumerMessage)
		close(sc.closedIn)
		return
	}
	sc.closedOut = make(chan *Batch)
	close(sc.closedOut)
}

// shareBatchLen returns how many records at the head of queue make the
// next batch: those of the first record's partition and answer (the
// records of one answer share their lock's deadline), up to size.
func shareBatchLen(queue []*heldRecord, size int) int {
	if len(queue) == 0 {
		return 0
	}
	first := queue[0]
	n := 1
	for n < len(queue) && n < size {
		r := queue[n]
		if r.msg.Partition != first.msg.Partition || r.msg.Topic != first.msg.Topic || !r.deadline.Equal(first.deadline) {
			break
		}
		n++
	}
	return n
}

// handOutBatch hands out the next batch of the queue (shareBatchLen) on
// Batches, waiting no longer than the earliest lock of its records;
// records whose lock expired are dropped (dropExpired) and the batch
// made again by the next call.
func (f *shareFetcher) handOutBatch() {
	recs := f.queue[:shareBatchLen(f.queue, f.sc.config.BatchSize)]
	deadline := recs[0].deadline
	for _, r := range recs[1:] {
		if r.deadline.Before(deadline) {
			deadline = r.deadline
		}
	}
	if !time.Now().Before(deadline) {
		f.dropExpired()
		return
	}
	msgs := make([]*sarama.ConsumerMessage, len(recs))
	for i, r := range recs {
		msgs[i] = r.msg
	}
	b := &Batch{Topic: msgs[0].Topic, Partition: msgs[0].Partition, Messages: msgs}
	f.markBatch(recs, true) // before the send: the receiver may ack at once
	if !offer(f, f.sc.batches, b, deadline) {
		f.markBatch(recs, false)
		return
	}
	f.queue = f.queue[len(recs):]
	f.count(recs[len(recs)-1], len(recs))
}

// markBatch marks the records of recs handed out, or not.
func (f *shareFetcher) markBatch(recs []*heldRecord, out bool) {
	for _, r := range recs {
		r.handedOut.Store(out)
	}
}
