package kafkaconsumer

import "github.com/IBM/sarama"

// Observer follows each message through the consumer, from its hand-out to
// its ack, for a tracing system: set it in Config.Observer. The kotel
// module implements it with OpenTelemetry spans.
//
// For each message handed out, the consumer calls HandingOut (or, with
// Config.BatchSize, HandingOutBatch for its batch) before the user can
// receive it, and then exactly one of:
//   - Acked, when the user acks it (Ack, or AckBatch for a batch), or
//   - TakenBack, when the consumer takes it back unread: a batch or message
//     still in the channel when its partition stops, when Close runs, or
//     when the fence goes up (Consumer.Messages); or one whose send was cut
//     short by a stop; or one the user gave back unprocessed
//     (Processing.GiveBack). A message taken back by the fence is handed
//     out again later, with a new HandingOut.
//
// A message that is handed out and never acked (the user dropped it) gets
// neither; the consumer may hold a reference to it until its partition
// stops.
// Acked is also called for what the consumer did not hand out, or handed
// out and saw acked already: a message acked twice, or acked after its
// partition moved to another instance. An Observer ignores the messages
// it does not know.
//
// The calls come from the consumer's goroutines (HandingOut, HandingOutBatch
// and TakenBack) and from those of the user that ack (Acked), concurrently
// and without a lock: an Observer must be safe for concurrent use, return
// quickly, never block, and not call the Consumer. HandingOut runs on the
// hand-out path: whatever it costs, each message pays. With
// Config.Observer nil the consumer makes no call and pays only a nil
// check per message.
type Observer interface {
	// HandingOut is called with each message of a consumer that hands out
	// single messages, on its partition's goroutine, just before it is sent
	// on Messages: the user may receive it as soon as HandingOut returns.
	HandingOut(msg *sarama.ConsumerMessage)

	// HandingOutBatch is HandingOut for a consumer set to batches: it is
	// called with each batch just before it is sent on Batches. The
	// messages of b are then acked (Acked) or taken back (TakenBack) one
	// by one; an Observer must not keep b.Messages past the call, since
	// the user owns the slice once it is received.
	HandingOutBatch(b *Batch)

	// Acked is called on the goroutine of the user's Ack, after the ack is
	// recorded, with the message acked; AckBatch calls it for each message
	// of the batch.
	Acked(msg *sarama.ConsumerMessage)

	// TakenBack is called with a handed-out message that the user never
	// received: the consumer took it back from the channel, or did not
	// send it; or with one the user gave back (Processing.GiveBack). It
	// will not be acked from this hand-out.
	TakenBack(msg *sarama.ConsumerMessage)
}

// tookBack tells the observer, if any, that msg was taken back unread.
func (cm *consumerManager) tookBack(msg *sarama.ConsumerMessage) {
	if o := cm.config.Observer; o != nil {
		o.TakenBack(msg)
	}
}

// tookBackBatch tells the observer, if any, that every message of b was
// taken back unread.
func (cm *consumerManager) tookBackBatch(b *Batch) {
	if o := cm.config.Observer; o != nil {
		for _, msg := range b.Messages {
			o.TakenBack(msg)
		}
	}
}
