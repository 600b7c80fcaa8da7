package fetch

// The fetch engine: the partitions fetch their records themselves, and
// each partition manager receives the messages of a fetch response as one
// slab, in both modes (single messages are handed out one by one from it),
// instead of one message at a time from sarama's partition consumer, whose
// goroutine sends every message on a channel of its own. As sarama's
// consumer does, one loop per broker fetches all its partitions in one
// request (Hub, brokerLoop): Kafka answers the requests of a
// connection one at a time, and a request of a partition with nothing new
// would hold the others up to Consumer.MaxWaitTime. A loop sends its
// requests with franz-go's kmsg on a kgo client used as a transport, and
// decodes each response once, straight into the messages handed out
// (internal/fetch): record batches and the legacy message sets (magic 0
// and 1), every codec, read uncommitted or committed.
//
// The engine's files: hub.go (the hub: the loops of an instance's
// client and the partitions' subscriptions), loop.go (a broker's
// loop: its requests and their responses), conn.go (a loop's own
// transport, and how its long poll is cut short), session.go (a
// loop's incremental fetch session), partition.go (a
// partition's fetcher: where it fetches from, its errors and its slabs),
// budget.go (MaxBufferedBytes) and records.go (a partition's
// records decoded, and the size of its next fetch).

import (
	"context"
	"errors"
	"log/slog"
	"sync"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// errLeaderMoved drops a partition fetcher from the loop of a broker that
// answered for a partition it no longer leads (a follower serves fetches
// from Fetch v11 on): the fetcher subscribes to the leader at once.
var errLeaderMoved = errors.New("kafkaconsumer: the partition's leader moved")

// errPreferredReplica drops a partition fetcher from its loop when the leader
// named another replica to fetch from (KIP-392: a rack-aware replica
// selector and Config.RackID): the fetcher subscribes to that replica's
// loop at once.
var errPreferredReplica = errors.New("kafkaconsumer: the leader named a preferred read replica")

// Version returns the highest Fetch request version that fetchers send
// (the highest that conf.Version allows, as sarama's consumer picks it;
// the broker's own highest when lower), and whether the engine serves
// conf.Version at all: it needs version 4 (Kafka 0.11). Whether the
// transport has conf's SASL mechanism is the caller's to check
// (Config.Transport).
func Version(conf *sarama.Config) (int16, bool) {
	switch v := conf.Version; {
	case v.IsAtLeast(sarama.V2_7_0_0):
		return 12, true
	case v.IsAtLeast(sarama.V2_3_0_0):
		return 11, true
	case v.IsAtLeast(sarama.V2_1_0_0):
		return 10, true
	case v.IsAtLeast(sarama.V2_0_0_0):
		return 8, true
	case v.IsAtLeast(sarama.V1_1_0_0):
		return 7, true
	case v.IsAtLeast(sarama.V1_0_0_0):
		return 6, true
	case v.IsAtLeast(sarama.V0_11_0_0):
		return 5, true
	}
	return 0, false
}

// Hub runs broker loops on a sarama client: a loop per broker that
// leads a partition of a Fetcher (Start). A consumer may give one hub to
// several clients' fetchers, or a hub to each. Its owner stops it with
// Close after its fetchers ended; a second Close does nothing.
type Hub struct {
	client    sarama.Client
	conf      *sarama.Config
	transport func(addr string) ([]kgo.Opt, error) // a loop's kgo client options (Config.Transport)
	version   int16
	log       *slog.Logger
	budget    *Budget // shared by the hubs of a consumer
	// requested, when set, is called with each request before it is
	// sent, on the loop's goroutine: a test hook.
	requested func(*kmsg.FetchRequest)
	// ctx ends every request of the loops; cancel is called by Close.
	ctx    context.Context
	cancel context.CancelFunc

	mu    sync.Mutex
	loops map[int32]*brokerLoop // by broker ID; a loop removes itself when it has no partition left
	stop  chan struct{}         // closed by Close
	wg    sync.WaitGroup        // the loops
}

// NewHub returns a hub of c, which starts a broker loop when a fetcher
// first needs it.
func NewHub(c Config) *Hub {
	ctx, cancel := context.WithCancel(context.Background())
	h := &Hub{client: c.Client, conf: c.Sarama, transport: c.Transport, version: c.Version, budget: c.Budget, log: c.Log, ctx: ctx, cancel: cancel,
		loops: make(map[int32]*brokerLoop), stop: make(chan struct{})}
	return h
}

// Close stops the loops and waits for them: a request in flight is cut
// short (its context ends), and each loop closes its transport. Safe to
// call more than once; the fetchers left subscribe to nothing after it.
func (h *Hub) Close() {
	h.mu.Lock()
	select {
	case <-h.stop:
	default:
		close(h.stop)
	}
	h.cancel()
	h.mu.Unlock()
	h.wg.Wait()
}

// Brokers returns the IDs of the brokers the hub runs a loop to, in no
// order. Safe from any goroutine.
func (h *Hub) Brokers() []int32 {
	h.mu.Lock()
	defer h.mu.Unlock()
	ids := make([]int32, 0, len(h.loops))
	for id := range h.loops {
		ids = append(ids, id)
	}
	return ids
}

// Budget returns the budget the hub's loops share (Config.Budget).
func (h *Hub) Budget() *Budget { return h.budget }

// subscribe adds f to the loop of broker, starting the loop if none runs,
// and cuts short the loop's long poll in flight (interruptPoll), so that
// f goes in the next request at once. It reports false when the hub is
// closed.
func (h *Hub) subscribe(f *Fetcher, broker *sarama.Broker) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-h.stop:
		return false
	default:
	}
	l := h.loops[broker.ID()]
	if l == nil {
		l = &brokerLoop{hub: h, broker: broker, wake: make(chan struct{}, 1)}
		h.loops[broker.ID()] = l
		h.budget.join() // run leaves it
		h.wg.Add(1)
		go l.run() // owned by the hub: close stops it and waits
	}
	l.added = append(l.added, f)
	f.loop.Store(l)
	l.interruptPoll()
	l.notify()
	return true
}
