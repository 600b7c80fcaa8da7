package kafkaconsumer

import (
	"sync"
	"testing"

	"github.com/IBM/sarama"
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
