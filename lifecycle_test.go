package kafkaconsumer

// Unit tests of a partition manager's life with sarama's parts faked: what
// it does while its partition consumer cannot start, when its bookkeeping is
// full, and when it stops.

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/go-zookeeper/zk"
	"github.com/wvanbergen/kazoo-go"
)

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
	killed := make(chan bool, 1)
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

// TestOrphanSweepStopsAtFirstFailure: while ZooKeeper is unreachable each
// release attempt takes about a second per server, so a sweep of the claims
// left behind tries one and keeps the rest for the next sweep, rather than
// keeping the manager goroutine from its watches for one attempt each.
func TestOrphanSweepStopsAtFirstFailure(t *testing.T) {
	config := NewConfig()
	attempts := 0
	config.hooks = &testHooks{releasePartition: func(string, int32) error {
		attempts++
		return zk.ErrNoServer
	}}
	cm, _ := fakeManager(config, nil)
	for p := int32(0); p < 3; p++ {
		cm.addOrphan(topicPartition{topic: "t", partition: p})
	}
	if left := cm.releaseOrphans(); len(left) != 3 {
		t.Fatalf("%d orphans left after a failed sweep; want 3", len(left))
	}
	if attempts != 1 {
		t.Fatalf("the sweep made %d release attempts with ZooKeeper unreachable; want 1", attempts)
	}
}
