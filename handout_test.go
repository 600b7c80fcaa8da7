package kafkaconsumer

// The hand-out path with sarama's parts faked: BenchmarkHandOut, Stats,
// the pause at MaxPendingAcks, and a partition consumer that cannot start.

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer/internal/fetch"
	"github.com/wvanbergen/kazoo-go"
)

// fakePartitionConsumer stands in for sarama's partition consumer in the
// hand-out benchmarks: a goroutine of the benchmark feeds its Messages
// channel, as sarama's feeder does.
type fakePartitionConsumer struct {
	messages chan *sarama.ConsumerMessage
	errors   chan *sarama.ConsumerError
}

func newFakePartitionConsumer(buffer int) *fakePartitionConsumer {
	return &fakePartitionConsumer{
		messages: make(chan *sarama.ConsumerMessage, buffer),
		errors:   make(chan *sarama.ConsumerError),
	}
}

func (f *fakePartitionConsumer) AsyncClose()                              {}
func (f *fakePartitionConsumer) Close() error                             { return nil }
func (f *fakePartitionConsumer) Messages() <-chan *sarama.ConsumerMessage { return f.messages }
func (f *fakePartitionConsumer) Errors() <-chan *sarama.ConsumerError     { return f.errors }
func (f *fakePartitionConsumer) HighWaterMarkOffset() int64               { return 0 }
func (f *fakePartitionConsumer) Pause()                                   {}
func (f *fakePartitionConsumer) Resume()                                  {}
func (f *fakePartitionConsumer) IsPaused() bool                           { return false }

const (
	benchPartitions = 16
	benchRing       = 4096 // message structs per partition, reused in turn
	benchPending    = 1024 // MaxPendingAcks: a struct is reused only after its ack
)

// feedPartitions starts one goroutine per partition that sends n messages
// of its partition on its channel, as sarama's feeders do, and returns a
// WaitGroup for them. A message struct is reused benchRing messages later;
// by then the message it held was acked (benchPending bounds the pending).
func feedPartitions(topic string, ins []chan *sarama.ConsumerMessage, n int) *sync.WaitGroup {
	var wg sync.WaitGroup
	for p, in := range ins {
		ring := make([]sarama.ConsumerMessage, benchRing)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < n; i++ {
				msg := &ring[i%benchRing]
				*msg = sarama.ConsumerMessage{Topic: topic, Partition: int32(p), Offset: int64(i)}
				in <- msg
			}
		}()
	}
	return &wg
}

// BenchmarkHandOut measures the hand-out path: 16 partitions' messages go
// through their partition managers' consume loops to the Messages channel,
// and one goroutine receives and acks each, as a user's loop does. Compare
// it with BenchmarkHandOutFanInBaseline, the same flow without bookkeeping
// or acks, in the same run.
func BenchmarkHandOut(b *testing.B) {
	config := NewConfig()
	config.MaxPendingAcks = benchPending
	cm := &consumerManager{config: config, log: newLogger(nil, "group", "instance"), offsets: testOffsets(), messages: make(chan *sarama.ConsumerMessage, config.ChannelBufferSize)}
	pms := make(partitionManagers)
	pcs := make([]*fakePartitionConsumer, benchPartitions)
	ins := make([]chan *sarama.ConsumerMessage, benchPartitions)
	var consuming sync.WaitGroup
	for p := range pcs {
		pm := newPartitionManager(cm, (&kazoo.Kazoo{}).Topic("topic").Partition(int32(p), []int32{1}))
		manageOffsets(pm, -1)
		pms[pm.tp] = pm
		pcs[p] = newFakePartitionConsumer(config.ChannelBufferSize)
		ins[p] = pcs[p].messages
		consuming.Add(1)
		go func() {
			defer consuming.Done()
			pm.consume(pcs[p])
		}()
	}
	cm.pms.Store(&pms)

	per := b.N/benchPartitions + 1
	b.ReportAllocs()
	b.ResetTimer()
	feeding := feedPartitions("topic", ins, per)
	for i := 0; i < per*benchPartitions; i++ {
		cm.Ack(<-cm.messages)
	}
	b.StopTimer()
	feeding.Wait()
	for _, pm := range pms {
		pm.t.Kill(nil)
	}
	consuming.Wait()
}

// BenchmarkHandOutFanInBaseline is the floor of BenchmarkHandOut: the same
// feeders, one forwarding goroutine per partition into one shared channel,
// one receiver, and no bookkeeping or acks.
func BenchmarkHandOutFanInBaseline(b *testing.B) {
	buffer := NewConfig().ChannelBufferSize
	out := make(chan *sarama.ConsumerMessage, buffer)
	ins := make([]chan *sarama.ConsumerMessage, benchPartitions)
	var forwarding sync.WaitGroup
	for p := range ins {
		ins[p] = make(chan *sarama.ConsumerMessage, buffer)
		forwarding.Add(1)
		go func() {
			defer forwarding.Done()
			for msg := range ins[p] {
				out <- msg
			}
		}()
	}
	per := b.N/benchPartitions + 1
	b.ReportAllocs()
	b.ResetTimer()
	feeding := feedPartitions("topic", ins, per)
	for i := 0; i < per*benchPartitions; i++ {
		<-out
	}
	b.StopTimer()
	feeding.Wait()
	for _, in := range ins {
		close(in)
	}
	forwarding.Wait()
}

// fakeConsumer stands in for sarama's consumer: ConsumePartition returns
// the partition consumer pc, or fails with err when it is set.
type fakeConsumer struct {
	sarama.Consumer // the methods the tests do not use panic
	mu              sync.Mutex
	err             error
	pc              sarama.PartitionConsumer
	calls           int // of ConsumePartition
}

func (f *fakeConsumer) ConsumePartition(string, int32, int64) (sarama.PartitionConsumer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.err != nil {
		return nil, f.err
	}
	return f.pc, nil
}

// fakeManager returns a consumer manager without ZooKeeper or Kafka
// connections whose consumer is the given fake and whose offset store has
// no Kafka client, and a partition manager of topic "t", partition 0, not
// started.
func fakeManager(config *Config, consumer sarama.Consumer) (*consumerManager, *partitionManager) {
	if config == nil {
		config = NewConfig()
	}
	cm := &consumerManager{
		config:   config,
		log:      newLogger(config.Logger, "group", "instance"),
		fetchers: []fetcher{{consumer: consumer}},
		offsets:  testOffsets(),
		messages: make(chan *sarama.ConsumerMessage, config.ChannelBufferSize),
		errors:   make(chan error, config.ChannelBufferSize),
	}
	cm.pms.Store(&partitionManagers{})
	pm := newPartitionManager(cm, (&kazoo.Kazoo{}).Topic("t").Partition(0, []int32{1}))
	return cm, pm
}

// receiveWithin receives from ch or fails the test after 3 s.
func receiveWithin[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(3 * time.Second):
		t.Fatalf("no %s within 3 s", what)
		var zero T
		return zero
	}
}

// TestPauseAtMaxPendingAcksIsReported: a partition that reaches
// MaxPendingAcks hands out nothing until its oldest message is acked. A
// user who acks only the last message of each batch stops there for good;
// it must say so, once per pause: ErrMaxPendingAcks on Errors(), a log
// line, and Stats().Paused.
func TestPauseAtMaxPendingAcksIsReported(t *testing.T) {
	verifyNoLeaks(t)
	config := NewConfig()
	config.MaxPendingAcks = 4
	metrics := &recordingMetrics{}
	config.Metrics = metrics
	cm, pm := fakeManager(config, nil)
	cm.pms.Store(&partitionManagers{pm.tp: pm})
	pc := newFakePartitionConsumer(16)
	for o := int64(0); o < 10; o++ {
		pc.messages <- &sarama.ConsumerMessage{Topic: "t", Partition: 0, Offset: o}
	}
	killed := make(chan consumeEnd, 1)
	go func() { killed <- pm.consume(pc) }()
	defer func() {
		pm.t.Kill(nil)
		receiveWithin(t, killed, "end of consume after the kill")
	}()

	var got []*sarama.ConsumerMessage
	for i := 0; i < 4; i++ {
		got = append(got, receiveWithin(t, cm.messages, "message"))
	}
	err := receiveWithin(t, (<-chan error)(cm.errors), "error after the pause")
	var ce *sarama.ConsumerError
	if !errors.Is(err, ErrMaxPendingAcks) || !errors.As(err, &ce) || ce.Topic != "t" {
		t.Fatalf("error = %v; want a *sarama.ConsumerError of t/0 wrapping ErrMaxPendingAcks", err)
	}
	if s := cm.Stats(); len(s) != 1 || !s[0].Paused || s[0].Pending != 4 {
		t.Fatalf("Stats = %+v; want t/0 paused with 4 pending", s)
	}

	cm.Ack(got[3]) // not the oldest: still no room
	cm.Ack(got[1])
	cm.Ack(got[0]) // 0 and 1 leave: room for two more
	got = append(got, receiveWithin(t, cm.messages, "message after the ack"), receiveWithin(t, cm.messages, "message after the ack"))
	if got[4].Offset != 4 || got[5].Offset != 5 {
		t.Fatalf("after the ack, handed out %d and %d; want 4 and 5", got[4].Offset, got[5].Offset)
	}
	err = receiveWithin(t, (<-chan error)(cm.errors), "error after the second pause")
	if !errors.Is(err, ErrMaxPendingAcks) {
		t.Fatalf("error = %v; want ErrMaxPendingAcks", err)
	}
	if n := len(cm.errors); n != 0 {
		t.Fatalf("%d more errors; want one per pause", n)
	}
	if s := cm.Stats(); s[0].HandedOut != 6 || s[0].Acked != 3 {
		t.Errorf("Stats: %d handed out, %d acked; want 6 and 3", s[0].HandedOut, s[0].Acked)
	}
	if n := metrics.count("paused t/0"); n != 2 {
		t.Errorf("Metrics.Paused called %d times for t/0; want 2 (one per pause)", n)
	}
}

// TestConsumerRestartErrorsNotRepeated: while a partition consumer cannot
// start, the same error goes to Errors() once, not at every retry (one a
// second, for as long as it lasts).
func TestConsumerRestartErrorsNotRepeated(t *testing.T) {
	verifyNoLeaks(t)
	consumer := &fakeConsumer{err: sarama.ErrLeaderNotAvailable}
	cm, pm := fakeManager(nil, consumer)
	manageOffsets(pm, 0)
	restarting := make(chan struct{})
	go func() {
		defer close(restarting)
		pm.startConsumer()
	}()
	waitFor(t, 5*time.Second, "three attempts", func() bool {
		consumer.mu.Lock()
		defer consumer.mu.Unlock()
		return consumer.calls >= 3
	})
	pm.t.Kill(nil)
	<-restarting
	if n := len(cm.errors); n != 1 {
		t.Errorf("%d errors on Errors() after 3 failed attempts with the same error; want 1", n)
	}
}

func TestStatsAndRebalanceNames(t *testing.T) {
	t.Parallel()
	cm, _, _, handOut := testManager(t, nil)
	handOut(0, 1, 2)
	cm.Ack(message(1))
	stats := cm.Stats()
	if len(stats) != 1 {
		t.Fatalf("Stats() has %d partitions, want 1", len(stats))
	}
	s := stats[0]
	if s.Topic != "t" || s.Partition != 0 || s.LastHandedOut != 2 || s.LastAcked != 1 || s.Pending != 2 || s.Lag != -1 {
		t.Fatalf("Stats() = %+v", s)
	}
}

// TestKilledTakesNoMoreOfTheSlab: a partition manager that is killed (or
// fenced) hands out nothing more, though the fetched slab holds more
// messages. The loop took the next messages of the slab without looking
// at the tomb, and went on filling the channel that Close drains: a
// message the drain took back before one the user received stopped the
// commit below it, and the next owner processed it again
// (TestMixedGroupOnSarama19 saw it once).
func TestKilledTakesNoMoreOfTheSlab(t *testing.T) {
	t.Parallel()
	for range 50 {
		cm, pm := fakeManager(nil, nil)
		manageOffsets(pm, -1)
		msgs := make([]*sarama.ConsumerMessage, 10)
		for i := range msgs {
			msgs[i] = &sarama.ConsumerMessage{Topic: "t", Offset: int64(i)}
		}
		f := fetch.NewStub(fetch.Slab{Msgs: msgs, Next: 10})
		pm.t.Kill(nil)
		if end := pm.consume(f); end != consumeKilled {
			t.Fatalf("consume() = %d, want consumeKilled", end)
		}
		if n := len(cm.messages); n != 0 {
			t.Fatalf("a killed partition handed out %d messages", n)
		}
	}
}
