package kafkaconsumer

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer/internal/fetch"
)

// produceSized writes n messages of about size bytes each to topic, spread
// over its partitions, in record batches of at most 16 messages, and
// returns their values.
func produceSized(t testing.TB, topic string, n, size int) []string {
	t.Helper()
	config := sarama.NewConfig()
	config.Version = testKafkaVersion()
	config.Producer.Return.Successes = true
	config.Producer.Flush.MaxMessages = 16
	producer, err := sarama.NewSyncProducer(kafkaPeers, config)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = producer.Close() }()
	pad := strings.Repeat("x", size)
	values := make([]string, n)
	msgs := make([]*sarama.ProducerMessage, n)
	for i := range msgs {
		values[i] = fmt.Sprintf("%d-%s", i, pad)[:size]
		msgs[i] = &sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder(values[i])}
	}
	if err := producer.SendMessages(msgs); err != nil {
		t.Fatal(err)
	}
	return values
}

// bufferedBound returns what a consumer may hold of messages of size
// bytes under a MaxBufferedBytes of budget: the budget, the messages'
// own memory beside their bytes on the wire (a request's MaxBytes counts
// the records' bytes only), and a producer's record batch (16 messages)
// per broker loop, which Kafka returns whatever the request's MaxBytes.
func bufferedBound(budget, size int64) int64 {
	batchBytes := 16 * (size + fetch.MessageOverhead)
	return budget + budget*fetch.MessageOverhead/size + fetchConnections*batchBytes
}

// TestMaxBufferedBytes: a consumer whose user reads slowly holds at most
// Config.MaxBufferedBytes of fetched messages not handed out yet, beyond
// one record batch per broker loop (Kafka returns a first batch whatever
// the request's MaxBytes) and the messages' own memory in a response
// (the request's MaxBytes counts the records' bytes only), as the
// partitions' BufferedBytes in Stats show; and every message arrives.
func TestMaxBufferedBytes(t *testing.T) {
	parallelClusterTest(t)
	const (
		partitions = 8
		size       = 1024
		n          = 4000
		budget     = 128 << 10
	)
	bound := bufferedBound(budget, size)
	topic := newTopic(t, partitions)
	values := produceSized(t, topic, n, size)
	for _, limit := range []int64{budget} {
		config := testConfig()
		config.MaxBufferedBytes = limit
		c := joinWithCleanup(t, uniqueName("buffered"), TopicSubscription(topic), config)
		missing := make(map[string]bool, n) // the values not received yet
		for _, v := range values {
			missing[v] = true
		}
		peak := int64(0)
		// The deadline only ends a hang; the test's condition is that
		// every message arrives within the budget's bound.
		deadline := time.After(2 * time.Minute)
		var first time.Time // the first message's arrival
	read:
		for i := 0; len(missing) > 0; i++ {
			select {
			case msg := <-c.Messages():
				if first.IsZero() {
					first = time.Now()
				}
				delete(missing, string(msg.Value))
				c.Ack(msg)
			case <-deadline:
				break read
			}
			if i%50 == 0 {
				total := int64(0)
				for _, s := range c.Stats() {
					total += s.BufferedBytes
				}
				peak = max(peak, total)
			}
		}
		if got := n - len(missing); got != n {
			t.Errorf("MaxBufferedBytes %d: received %d of %d messages", limit, got, n)
		}
		t.Logf("MaxBufferedBytes %d: peak of the partitions' BufferedBytes %d; %s from the first message to the last", limit, peak, time.Since(first).Round(time.Millisecond))
		if peak > bound {
			t.Errorf("MaxBufferedBytes %d: the partitions held %d bytes, more than the budget with its overshoot (%d)", limit, peak, bound)
		}
		if peak == 0 {
			t.Errorf("MaxBufferedBytes %d: Stats showed no buffered bytes", limit)
		}
		if err := c.Close(); err != nil {
			t.Errorf("Close() = %v", err)
		}
	}
}

// TestMaxPendingAcksLeavesTheBudget: a partition that waits at
// MaxPendingAcks (its user never acks it) leaves the fetch budget, as a
// paused one does, and so does the slab its broker loop fetched for it
// meanwhile. Partitions 0 and 1 wait so, on the two connections of the
// consumer (fetcherOf: p and p+2 share one), under a budget smaller than
// one of their responses; partitions 2 and 3, whose messages are acked,
// keep receiving, in both modes.
func TestMaxPendingAcksLeavesTheBudget(t *testing.T) {
	for _, batchSize := range []int{0, 2} {
		t.Run(fmt.Sprintf("BatchSize=%d", batchSize), func(t *testing.T) {
			parallelClusterTest(t)
			const (
				recordBatches, each = 8, 20 // record batches of a stuck partition, messages in each
				n                   = 60    // messages of a healthy partition
			)
			stuck, healthy := []int32{0, 1}, []int32{2, 3}
			topic := newTopic(t, 4)
			for _, p := range stuck {
				for i := 0; i < recordBatches; i++ { // a record batch each
					produceTo(t, topic, p, fmt.Sprintf("stuck%d", i), each)
				}
			}
			config := testConfig()
			config.MaxBufferedBytes = 1500 // less than a record batch of a stuck partition
			config.MaxPendingAcks = 4
			config.BatchSize = batchSize
			c := joinWithCleanup(t, uniqueName("budget"), TopicSubscription(topic), config)

			var (
				mu  sync.Mutex
				got = make(map[int32]int) // messages received, by partition
			)
			received := func(p int32) int {
				mu.Lock()
				defer mu.Unlock()
				return got[p]
			}
			take := func(p int32, msgs []*sarama.ConsumerMessage) bool {
				mu.Lock()
				defer mu.Unlock()
				got[p] += len(msgs)
				return !slices.Contains(stuck, p)
			}
			var ( // the channel of the mode; nil: the other's
				messages <-chan *sarama.ConsumerMessage
				batches  <-chan *Batch
			)
			if batchSize > 0 {
				batches = c.Batches()
			} else {
				messages = c.Messages()
			}
			done := make(chan struct{})
			ended := make(chan struct{})
			go func() { // owned by the test: done stops it, ended tells it stopped
				defer close(ended)
				for {
					select {
					case msg := <-messages:
						if take(msg.Partition, []*sarama.ConsumerMessage{msg}) {
							c.Ack(msg)
						}
					case b := <-batches:
						if take(b.Partition, b.Messages) {
							c.AckBatch(b)
						}
					case <-c.Errors():
					case <-done:
						return
					}
				}
			}()
			defer func() { close(done); <-ended }()

			waitFor(t, 30*time.Second, "the stuck partitions to wait at MaxPendingAcks", func() bool {
				waiting := 0
				for _, s := range c.Stats() {
					if slices.Contains(stuck, s.Partition) && s.Paused {
						waiting++
					}
				}
				return waiting == len(stuck)
			})
			for _, p := range healthy {
				produceTo(t, topic, p, "healthy", n)
			}
			if !poll(20*time.Second, func() bool { return received(healthy[0]) == n && received(healthy[1]) == n }) {
				var buffered int64
				for _, s := range c.Stats() {
					buffered += s.BufferedBytes
				}
				t.Fatalf("the healthy partitions received %d and %d of %d messages in 20 s while the stuck ones wait at MaxPendingAcks (BufferedBytes %d)",
					received(healthy[0]), received(healthy[1]), n, buffered)
			}
			for _, p := range stuck {
				if got := received(p); got != config.MaxPendingAcks {
					t.Errorf("stuck partition %d handed out %d messages; want MaxPendingAcks %d", p, got, config.MaxPendingAcks)
				}
			}
		})
	}
}

// aheadMeter counts the bytes of the messages a consumer fetched (as
// Consumer.Interceptors, which the fetch engine calls for each message it
// fetches) and of those it handed out in batches (as Config.Observer,
// told of each batch before its send on Batches), and the peak of their
// difference: what the consumer held fetched and not handed out.
type aheadMeter struct {
	mu                       sync.Mutex
	fetched, handedOut, peak int64 // guarded by mu
}

func messageBytes(msg *sarama.ConsumerMessage) int64 {
	return int64(len(msg.Key)+len(msg.Value)) + fetch.MessageOverhead
}

// OnConsume implements sarama.ConsumerInterceptor.
func (m *aheadMeter) OnConsume(msg *sarama.ConsumerMessage) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.fetched += messageBytes(msg)
	m.peak = max(m.peak, m.fetched-m.handedOut)
}

// HandingOutBatch implements Observer.
func (m *aheadMeter) HandingOutBatch(b *Batch) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, msg := range b.Messages {
		m.handedOut += messageBytes(msg)
	}
}

func (m *aheadMeter) HandingOut(*sarama.ConsumerMessage) {}
func (m *aheadMeter) Acked(*sarama.ConsumerMessage)      {}
func (m *aheadMeter) TakenBack(*sarama.ConsumerMessage)  {}

// TestMaxBufferedBytesCountsTheBatch: in batches, the messages a
// partition gathers into its next batch (up to BatchSize, for up to
// BatchLinger) count in Config.MaxBufferedBytes until the batch goes
// out: a consumer holds no more fetched messages not handed out than the
// budget with its overshoot (as in TestMaxBufferedBytes); and a batch
// whose broker loop waits for the budget goes out without waiting
// BatchLinger, so that the consumer does not crawl.
func TestMaxBufferedBytesCountsTheBatch(t *testing.T) {
	parallelClusterTest(t)
	const (
		partitions = 4
		size       = 1024
		n          = 4000
		budget     = 32 << 10
	)
	bound := bufferedBound(budget, size)
	topic := newTopic(t, partitions)
	values := produceSized(t, topic, n, size)
	meter := new(aheadMeter)
	config := testConfig()
	config.MaxBufferedBytes = budget
	config.BatchSize = 1000
	config.BatchLinger = time.Second
	config.Consumer.Interceptors = []sarama.ConsumerInterceptor{meter}
	config.Observer = meter
	c := joinWithCleanup(t, uniqueName("buffered"), TopicSubscription(topic), config)
	received := new(valueCounts)
	// Batches that waited out BatchLinger under the spent budget, each
	// of what a loop's share holds (about 13 messages), would take
	// minutes: the wait is well below that, and well above the few
	// seconds the consumer takes.
	const within = time.Minute
	deadline := time.After(within)
read:
	for !received.has(values) {
		select {
		case b := <-c.Batches():
			for _, msg := range b.Messages {
				received.add(string(msg.Value))
			}
			c.AckBatch(b)
		case <-deadline:
			break read
		}
	}
	if got := received.received(values); got != n {
		t.Errorf("received %d of %d messages within %s", got, n, within)
	}
	meter.mu.Lock()
	peak := meter.peak
	meter.mu.Unlock()
	t.Logf("MaxBufferedBytes %d: at most %d bytes fetched and not handed out", budget, peak)
	if peak > bound {
		t.Errorf("the consumer held %d bytes fetched and not handed out, more than the budget with its overshoot (%d)", peak, bound)
	}
}
