package kafkaconsumer

// The fetch ahead of a share consumer's fetch loop (share_fetch.go): the
// next ShareFetch goes while the records of the last answers are handed
// out, so that the loop does not wait a broker round trip per answer. One
// is in flight at most (a share session's requests carry sequential
// epochs: no ShareAcknowledge goes meanwhile either), sent by a goroutine
// of its own whose answer the loop takes between two hand-outs (offer)
// or while it has nothing to hand out (wait). The loop holds no more
// locks than it can hand out in time: it fetches ahead only while
// fewer records than it asks for wait to be handed out and the oldest of
// them has more than half its lock left. A fetch asks for more records
// while the reader empties the queue before the answer comes, fewer when
// it does not (nextAsk), and for half of MaxBufferedBytes (maxBytes).

import (
	"context"
	"math"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// shareAnswer is a ShareFetch in flight and, once sendFetch passed it
// to the loop, its answer.
type shareAnswer struct {
	req  *kmsg.ShareFetchRequest
	acks map[tidp][]ackRange // the acks req carries
	sent time.Time           // when req went: its records' locks count from then
	resp kmsg.Response       // the answer, or
	err  error               // why there is none
}

// fetchAhead reports whether to send the next ShareFetch now: none is in
// flight, there is a partition to fetch or forget (wants), and fewer
// records than it asks for (ask) wait to be handed out, the oldest of
// them with more than half its acquisition lock left.
func (f *shareFetcher) fetchAhead() bool {
	if f.fetching {
		return false
	}
	if n := len(f.queue); n > 0 {
		if n >= int(f.ask) || time.Until(f.queue[0].deadline) <= f.lock/2 {
			return false
		}
	}
	return f.wants()
}

// startFetch sends the next ShareFetch, with the pending acks, from a
// goroutine of its own (sendFetch); the loop takes its answer from
// f.answers (take).
func (f *shareFetcher) startFetch() {
	req, acks := f.fetchRequest()
	a := &shareAnswer{req: req, acks: acks, sent: time.Now()}
	f.fetching, f.queuedAt, f.starved = true, len(f.queue), false
	go f.sendFetch(a)
}

// sendFetch is the goroutine of the fetch in flight: it sends a's
// request, and passes a, answered, to f.answers, which has room for it
// (one fetch in flight); the loop waits for it before it ends (finish).
// The request is not cut by the shutdown: the broker ends a share
// session when its connection closes (kgo sends ShareFetch and
// ShareAcknowledge on one), and the shutdown still sends the session's
// acks. A broker answers at MaxWaitMillis at the latest;
// shareFinalTimeout more bounds the wait for a broker that hangs.
func (f *shareFetcher) sendFetch(a *shareAnswer) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(a.req.MaxWaitMillis)*time.Millisecond+shareFinalTimeout)
	a.resp, a.err = f.send(ctx, a.req)
	cancel()
	f.answers <- a
}

// wait waits, with nothing to hand out, for the answer of the fetch in
// flight; with none in flight, it sends the acks that came meanwhile and
// waits for more, or for partitions to fetch (both wake f). It returns
// when f is killed too.
func (f *shareFetcher) wait() {
	var wake <-chan struct{}
	if f.fetching {
		f.starved = true
	} else {
		f.acknowledge(false)
		wake = f.wake
	}
	select {
	case a := <-f.answers:
		f.take(a)
	case <-wake:
		f.acknowledge(false)
	case <-f.dying:
	}
}

// shareAskGrowth bounds the records a ShareFetch asks for: that many
// times maxRecords at most.
const shareAskGrowth = 8

// nextAsk returns the records the next ShareFetch asks for, having asked
// for ask: twice as many, up to shareAskGrowth times base, when the
// reader emptied the queue while the fetch was out (starved: it waited
// for the broker), half as many, down to base, when more than half of
// the queued at the send (queuedAt) were still queued at the answer
// (queuedNow: the reader is slower than the broker's round trip).
func nextAsk(ask, base int32, starved bool, queuedAt, queuedNow int) int32 {
	switch {
	case starved:
		return min(2*ask, shareAskGrowth*base)
	case queuedNow > queuedAt/2:
		return max(ask/2, base)
	}
	return ask
}

// shareFetchRecords is the fewest records a ShareFetch asks for
// (MaxRecords, and BatchSize, the broker's unit of acquisition):
// ChannelBufferSize when larger, and up to shareAskGrowth times as many
// while the reader empties the queue before the next answer comes
// (nextAsk). The loop fetches ahead once fewer records than it asks for
// wait to be handed out (fetchAhead), so it holds about two fetches'
// worth at most; the records stay locked for the acquisition lock (30 s
// by default) while they wait to be handed out.
const shareFetchRecords = 1000

// maxRecords returns the records a ShareFetch asks for at first, and at
// least (see shareFetchRecords).
func (f *shareFetcher) maxRecords() int32 {
	return int32(max(f.sc.config.ChannelBufferSize, f.sc.config.BatchSize, shareFetchRecords))
}

// maxBytes returns the bytes a ShareFetch asks for: Consumer.Fetch.Max
// when set, else half of MaxBufferedBytes (two answers may wait to be
// handed out), else no bound; Consumer.Fetch.Default, a partition's, at
// least.
func (f *shareFetcher) maxBytes() int32 {
	conf := f.sc.config
	n := int64(conf.Consumer.Fetch.Max)
	if n <= 0 {
		n = conf.MaxBufferedBytes / 2
	}
	if n <= 0 {
		return math.MaxInt32
	}
	return int32(min(max(n, int64(conf.Consumer.Fetch.Default)), math.MaxInt32))
}
