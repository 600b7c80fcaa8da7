package kafkaconsumer

// Unit tests of a partition manager's life with sarama's parts faked: what
// it does while its partition consumer cannot start, when its bookkeeping is
// full, and when it stops.

import (
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/wvanbergen/kazoo-go"
)

// fakeConsumer stands in for sarama's consumer: ConsumePartition returns
// the partition consumer pc, or fails with err when it is set.
type fakeConsumer struct {
	sarama.Consumer // the methods the tests do not use panic
	mu              sync.Mutex
	err             error
	pc              sarama.PartitionConsumer
}

func (f *fakeConsumer) ConsumePartition(string, int32, int64) (sarama.PartitionConsumer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	return f.pc, nil
}

// fakeOffsets stands in for sarama's offset manager: it manages one fake
// partition offset manager.
type fakeOffsets struct {
	sarama.OffsetManager // the methods the tests do not use panic
	pom                  sarama.PartitionOffsetManager
	commits              chan struct{} // receives a token per Commit, when not nil
}

func (f *fakeOffsets) ManagePartition(string, int32) (sarama.PartitionOffsetManager, error) {
	return f.pom, nil
}

func (f *fakeOffsets) Commit() {
	if f.commits != nil {
		f.commits <- struct{}{}
	}
}

// fakeManager returns a consumer manager without ZooKeeper or Kafka
// connections whose consumer and offset manager are the given fakes, and a
// partition manager of topic "t", partition 0, not started.
func fakeManager(config *Config, consumer sarama.Consumer, offsets sarama.OffsetManager) (*consumerManager, *partitionManager) {
	if config == nil {
		config = NewConfig()
	}
	cm := &consumerManager{
		config:        config,
		consumer:      consumer,
		offsetManager: offsets,
		messages:      make(chan *sarama.ConsumerMessage, config.ChannelBufferSize),
		errors:        make(chan error, config.ChannelBufferSize),
	}
	cm.pms.Store(&partitionManagers{})
	pm := newPartitionManager(cm, (&kazoo.Kazoo{}).Topic("t").Partition(0, []int32{1}))
	return cm, pm
}

// TestOffsetManagerErrorsReadWhileConsumerRestarts: sarama's offset manager
// sends a commit error to every partition offset manager with a blocking
// send, holding its locks (offset_manager.go, handleErrorFor and
// partitionOffsetManager.handleError), on every failed commit round, even
// when nothing is to be committed (a coordinator that cannot be found).
// A partition manager that stops reading them while it retries starting its
// partition consumer blocks every Commit, and so Close, once the channel's
// buffer is full. They must be read for the whole life of the offset
// manager.
func TestOffsetManagerErrorsReadWhileConsumerRestarts(t *testing.T) {
	verifyNoLeaks(t)
	pom := newFakeOffsetManager() // its Errors channel has no buffer
	cm, pm := fakeManager(nil, &fakeConsumer{err: sarama.ErrLeaderNotAvailable}, &fakeOffsets{pom: pom})

	started := pm.startOffsetManager()
	restarting := make(chan struct{})
	go func() {
		defer close(restarting)
		pm.startConsumer(started)
	}()

	sent := &sarama.ConsumerError{Topic: "t", Partition: 0, Err: sarama.ErrNotCoordinatorForConsumer}
	select {
	case pom.errors <- sent:
	case <-time.After(3 * time.Second):
		t.Error("the offset manager's error was not read within 3 s while the partition consumer restarts: sarama's commit loop would block")
	}
	deadline := time.After(3 * time.Second)
	for forwarded := false; !forwarded && !t.Failed(); {
		select {
		case err := <-cm.errors:
			forwarded = err == error(sent)
		case <-deadline:
			t.Error("the offset manager's error did not reach Errors()")
		}
	}

	pm.t.Kill(nil)
	<-restarting
	close(pom.errors) // sarama closes it when it releases the partition
	cm.forwarders.Wait()
}
