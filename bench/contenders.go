package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The contenders, by the names used in flags, tables and JSON.
const (
	rawSarama     = "sarama-raw"
	saramaGroup   = "sarama-group"
	franzGo       = "franz-go"
	kafkaConsumer = "kafkaconsumer"
	// kafkaConsumerBatch is kafkaconsumer set to batches (Config.BatchSize
	// batchSize), acking each batch with AckBatch; throughput workloads
	// only.
	kafkaConsumerBatch = "kafkaconsumer-batch"
	// kafkaConsumerKafka is kafkaconsumer with Config.Coordinator
	// CoordinatorKafka: Kafka's group coordinator, no ZooKeeper, the
	// groups' session timeout and heartbeat of the Kafka-coordinated
	// contenders.
	kafkaConsumerKafka = "kafkaconsumer-kafka"
	// kafkaConsumerShuffled is kafkaconsumer acking in a shuffled order
	// within windows of shuffleWindow messages; kafkaConsumerDurable is
	// the same with Config.DurableAcks. Throughput workloads only, run
	// when named in -contenders: the cost of durable acks is their ratio.
	kafkaConsumerShuffled = "kafkaconsumer-shuffled"
	kafkaConsumerDurable  = "kafkaconsumer-durable"
	// kafkaConsumerKafka848 is kafkaconsumer-kafka on the consumer group
	// protocol (Config.GroupProtocol GroupProtocolConsumer, KIP-848), and
	// franzGo848 franz-go on it (kgo.ServerSideBalancer, its opt-in):
	// the broker assigns (uniform) and imposes its session timeout and
	// heartbeat interval. They need brokers of Kafka 4.0 or later.
	kafkaConsumerKafka848 = "kafkaconsumer-kafka848"
	franzGo848            = "franz-go-848"
)

// shuffleWindow is the most messages that kafkaconsumer-shuffled and
// kafkaconsumer-durable hold before they ack them in a shuffled order.
const shuffleWindow = 256

// batchSize is the Config.BatchSize of kafkaconsumer-batch.
const batchSize = 1000

// rawFanIn is a diagnostic contender, run only when named in -contenders:
// sarama-raw whose partition goroutines forward every message into one
// shared channel (capacity ChannelBufferSize) that one goroutine reads,
// the shape of kafkaconsumer's Messages channel, without groups or acks.
const rawFanIn = "sarama-fanin"

// allContenders are the contenders run by default (each workload runs
// those of them it has).
var allContenders = []string{wire, rawSarama, saramaGroup, franzGo, kafkaConsumer, kafkaConsumerKafka, kafkaConsumerBatch,
	process16, process64, process256}

// consumerProtocolContenders are those on the consumer group protocol,
// run by default when the brokers serve it.
var consumerProtocolContenders = []string{franzGo848, kafkaConsumerKafka848}

// tableOrder is the order of the table rows.
var tableOrder = []string{rawSarama, rawFanIn, saramaGroup, franzGo, kafkaConsumer, kafkaConsumerKafka, franzGo848, kafkaConsumerKafka848, franzGoShare, kafkaConsumerShare}

// throughputOrder is the order of the throughput tables' rows: the wire
// ceiling and the batch contender run there only.
var throughputOrder = append(append([]string{wire}, tableOrder...), kafkaConsumerBatch, kafkaConsumerShuffled, kafkaConsumerDurable)

// groupContenders are those that coordinate a group (workload 3).
var groupContenders = []string{saramaGroup, franzGo, kafkaConsumer, kafkaConsumerKafka, franzGo848, kafkaConsumerKafka848}

// handler receives every consumed message, after it was acked or marked. It
// is called from the contender's consuming goroutines, possibly many at once.
type handler func(topic string, partition int32, offset int64, value []byte)

// instance is one running consumer of a contender.
type instance interface {
	// Close stops consuming gracefully: commit what was acked or marked,
	// leave the group, close the connections.
	Close() error
}

// startInstance starts instance share of spec.Instances of the contender.
// Only sarama-raw uses share: it has no group, so its instances split the
// partitions statically.
func startInstance(spec *childSpec, share int, h handler) (instance, error) {
	if slices.Contains(shareContenders, spec.Contender) {
		return startShare(spec, h)
	}
	if spec.Work > 0 {
		return startProcessing(spec, h)
	}
	switch spec.Contender {
	case rawSarama:
		return startRaw(spec, share, h)
	case rawFanIn:
		return startFanIn(spec, share, h)
	case saramaGroup:
		return startSaramaGroup(spec, h)
	case franzGo:
		return startFranz(spec, h, false)
	case franzGo848:
		return startFranz(spec, h, true)
	case kafkaConsumer:
		return startOurs(spec, h)
	case kafkaConsumerBatch:
		return startOursBatches(spec, h)
	case kafkaConsumerKafka:
		return startOursWith(spec, h, 0, true)
	case kafkaConsumerKafka848:
		return startOursKafka848(spec, h)
	case kafkaConsumerShuffled:
		return startOursShuffled(spec, h, false)
	case kafkaConsumerDurable:
		return startOursShuffled(spec, h, true)
	}
	return nil, fmt.Errorf("unknown contender %q", spec.Contender)
}

func saramaInitial(spec *childSpec) int64 {
	if spec.Newest {
		return sarama.OffsetNewest
	}
	return sarama.OffsetOldest
}

// --- sarama-raw: one PartitionConsumer per partition, no group, no marks.

type rawInstance struct {
	client   sarama.Client
	consumer sarama.Consumer
	pcs      []sarama.PartitionConsumer
	wg       sync.WaitGroup
}

func startRaw(spec *childSpec, share int, h handler) (instance, error) {
	return startRawWith(spec, share, func(msg *sarama.ConsumerMessage) {
		h(msg.Topic, msg.Partition, msg.Offset, msg.Value)
	})
}

// startRawWith starts sarama-raw's instance, passing each message to
// deliver from the partition's goroutine.
func startRawWith(spec *childSpec, share int, deliver func(*sarama.ConsumerMessage)) (*rawInstance, error) {
	cfg := sarama.NewConfig()
	cfg.Consumer.Offsets.Initial = saramaInitial(spec)
	client, err := sarama.NewClient(spec.Brokers, cfg)
	if err != nil {
		return nil, err
	}
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		client.Close()
		return nil, err
	}
	r := &rawInstance{client: client, consumer: consumer}
	type tp struct {
		topic string
		p     int32
	}
	var mine []tp
	i := 0
	for ti, topic := range spec.Topics {
		for p := int32(0); p < spec.Partitions[ti]; p++ {
			if i%spec.Instances == share {
				mine = append(mine, tp{topic, p})
			}
			i++
		}
	}
	// Start the partition consumers concurrently, as a group consumer's
	// partitions start: each one looks its starting offset up.
	var (
		mu    sync.Mutex
		first error
		start sync.WaitGroup
	)
	sem := make(chan struct{}, 64)
	for _, x := range mine {
		start.Add(1)
		sem <- struct{}{}
		go func() {
			defer start.Done()
			defer func() { <-sem }()
			pc, err := consumer.ConsumePartition(x.topic, x.p, cfg.Consumer.Offsets.Initial)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if first == nil {
					first = fmt.Errorf("consume %s/%d: %w", x.topic, x.p, err)
				}
				return
			}
			r.pcs = append(r.pcs, pc)
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				for msg := range pc.Messages() {
					deliver(msg)
				}
			}()
		}()
	}
	start.Wait()
	if first != nil {
		r.Close()
		return nil, first
	}
	return r, nil
}

// startFanIn starts sarama-raw with its messages merged into one channel.
func startFanIn(spec *childSpec, share int, h handler) (instance, error) {
	merged := make(chan *sarama.ConsumerMessage, sarama.NewConfig().ChannelBufferSize)
	in, err := startRawWith(spec, share, func(msg *sarama.ConsumerMessage) { merged <- msg })
	if err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for msg := range merged {
			h(msg.Topic, msg.Partition, msg.Offset, msg.Value)
		}
	}()
	return closerFunc(func() error {
		err := in.Close() // no more sends on merged
		close(merged)
		<-done
		return err
	}), nil
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

func (r *rawInstance) Close() error {
	for _, pc := range r.pcs {
		pc.AsyncClose() // its Messages channel closes, which ends its goroutine
	}
	r.wg.Wait()
	return errors.Join(r.consumer.Close(), r.client.Close())
}

// --- sarama-group: sarama's ConsumerGroup, MarkMessage per message.

type saramaGroupInstance struct {
	cg     sarama.ConsumerGroup
	cancel context.CancelFunc
	done   chan struct{} // closed when the Consume loop ends
}

// saramaHandler handles each claim's messages one after the other on the
// claim's goroutine, waiting work (the processing workload) before it
// marks each one.
type saramaHandler struct {
	h    handler
	work time.Duration
}

func (saramaHandler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (saramaHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (sh saramaHandler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for {
		select {
		case msg, ok := <-claim.Messages():
			if !ok {
				return nil
			}
			if sh.work > 0 {
				time.Sleep(sh.work) // the I/O call
			}
			sess.MarkMessage(msg, "")
			sh.h(msg.Topic, msg.Partition, msg.Offset, msg.Value)
		case <-sess.Context().Done():
			return nil
		}
	}
}

func startSaramaGroup(spec *childSpec, h handler) (instance, error) {
	cfg := sarama.NewConfig()
	cfg.Consumer.Offsets.Initial = saramaInitial(spec)
	cfg.Consumer.Group.Session.Timeout = spec.GroupSession
	cfg.Consumer.Group.Heartbeat.Interval = spec.GroupHeartbeat
	cfg.Consumer.Return.Errors = true
	cg, err := sarama.NewConsumerGroup(spec.Brokers, spec.Group, cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &saramaGroupInstance{cg: cg, cancel: cancel, done: make(chan struct{})}
	go func() {
		for err := range cg.Errors() {
			log.Printf("sarama-group: %v", err)
		}
	}()
	go func() {
		defer close(s.done)
		for ctx.Err() == nil {
			if err := cg.Consume(ctx, spec.Topics, saramaHandler{h: h, work: spec.Work}); err != nil {
				if errors.Is(err, sarama.ErrClosedConsumerGroup) {
					return
				}
				log.Printf("sarama-group: consume: %v", err)
				time.Sleep(100 * time.Millisecond)
			}
		}
	}()
	return s, nil
}

func (s *saramaGroupInstance) Close() error {
	s.cancel()
	<-s.done
	return s.cg.Close()
}

// --- franz-go: kgo consumer group, MarkCommitRecords per record with
// AutoCommitMarks; franz-go-848 the same on the consumer group protocol.

type franzInstance struct {
	cl     *kgo.Client
	cancel context.CancelFunc
	done   chan struct{} // closed when the poll loop ends
}

// startFranz starts franz-go, on the consumer group protocol when
// consumer (kgo.ServerSideBalancer with its default balancer, cooperative
// sticky, whose server-side assignor is uniform).
func startFranz(spec *childSpec, h handler, consumer bool) (instance, error) {
	start := kgo.NewOffset().AtStart()
	if spec.Newest {
		start = kgo.NewOffset().AtEnd()
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(spec.Brokers...),
		kgo.ConsumerGroup(spec.Group),
		kgo.ConsumeTopics(spec.Topics...),
		kgo.ConsumeResetOffset(start),
		kgo.AutoCommitMarks(),
		kgo.AutoCommitInterval(time.Second), // sarama's and ours; franz-go's default is 5 s
		kgo.SessionTimeout(spec.GroupSession),
		kgo.HeartbeatInterval(spec.GroupHeartbeat),
	}
	if consumer {
		opts = append(opts, kgo.ServerSideBalancer())
	}
	if spec.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(spec.InstanceID))
	}
	opts = append(opts, franzTraceOpts()...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	return pollFranz(cl, func(r *kgo.Record) {
		cl.MarkCommitRecords(r)
		h(r.Topic, r.Partition, r.Offset, r.Value)
	}), nil
}

// pollFranz starts the poll loop of cl, which passes each record to
// each, and returns the instance that stops it.
func pollFranz(cl *kgo.Client, each func(*kgo.Record)) *franzInstance {
	ctx, cancel := context.WithCancel(context.Background())
	f := &franzInstance{cl: cl, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(f.done)
		for {
			fetches := cl.PollFetches(ctx)
			if fetches.IsClientClosed() || ctx.Err() != nil {
				return
			}
			fetches.EachError(func(topic string, p int32, err error) {
				log.Printf("franz-go: %s/%d: %v", topic, p, err)
			})
			fetches.EachRecord(each)
		}
	}()
	return f
}

func (f *franzInstance) Close() error {
	f.cancel()
	<-f.done
	f.cl.Close() // commits the marks and leaves the group
	return nil
}

// --- kafkaconsumer: this library, Ack per message.

type oursInstance struct {
	c    kafkaconsumer.Consumer
	done chan struct{} // closed when Messages is closed and drained
}

func startOurs(spec *childSpec, h handler) (instance, error) { return startOursWith(spec, h, 0, false) }

// startOursBatches starts kafkaconsumer set to batches: each message goes
// to the handler, and each batch is acked with one AckBatch.
func startOursBatches(spec *childSpec, h handler) (instance, error) {
	return startOursWith(spec, h, batchSize, false)
}

// startOursWith starts kafkaconsumer, set to batches of up to batch
// messages when batch > 0, and coordinated by Kafka (CoordinatorKafka)
// when kafka is set.
func startOursWith(spec *childSpec, h handler, batch int, kafka bool) (instance, error) {
	return startOursConfigured(spec, h, batch, kafka, nil)
}

// startOursConfigured is startOursWith, with configure (if not nil)
// changing the configuration last.
func startOursConfigured(spec *childSpec, h handler, batch int, kafka bool, configure func(*kafkaconsumer.Config)) (instance, error) {
	cfg := kafkaconsumer.NewConfig()
	cfg.Offsets.Initial = saramaInitial(spec)
	cfg.Zookeeper.Timeout = spec.ZookeeperTimeout
	cfg.BatchSize = batch
	cfg.InstanceID, cfg.RestartGrace = spec.InstanceID, spec.RestartGrace
	if spec.MaxBufferedBytes >= 0 {
		cfg.MaxBufferedBytes = spec.MaxBufferedBytes
	}
	zookeeper := spec.Zookeeper
	if kafka {
		cfg.Coordinator = kafkaconsumer.CoordinatorKafka
		cfg.Brokers = spec.Brokers
		cfg.Consumer.Group.Session.Timeout = spec.GroupSession
		cfg.Consumer.Group.Heartbeat.Interval = spec.GroupHeartbeat
		if spec.InstanceID != "" {
			// Static membership: the coordinator keeps the partitions
			// for the session timeout (RestartGrace is ZooKeeper's).
			cfg.Version = sarama.V2_4_0_0
			cfg.RestartGrace = 0
		}
		zookeeper = ""
	}
	if configure != nil {
		configure(cfg)
	}
	c, err := joinLogging(spec, zookeeper, cfg)
	if err != nil {
		return nil, err
	}
	o := &oursInstance{c: c, done: make(chan struct{})}
	go func() {
		defer close(o.done)
		if batch == 0 {
			for msg := range c.Messages() {
				c.Ack(msg)
				h(msg.Topic, msg.Partition, msg.Offset, msg.Value)
			}
			return
		}
		for b := range c.Batches() {
			c.AckBatch(b)
			for _, msg := range b.Messages {
				h(msg.Topic, msg.Partition, msg.Offset, msg.Value)
			}
		}
	}()
	return o, nil
}

// startOursKafka848 starts kafkaconsumer-kafka848: kafkaconsumer-kafka on
// the consumer group protocol, with the broker's default assignor
// (uniform). Its Consumer.Group.Session.Timeout, which sets when a member
// cut off fences itself, is the groups' (the brokers' own, as the bench's
// KRaft cluster sets it).
func startOursKafka848(spec *childSpec, h handler) (instance, error) {
	return startOursConfigured(spec, h, 0, true, func(cfg *kafkaconsumer.Config) {
		cfg.GroupProtocol = kafkaconsumer.GroupProtocolConsumer
	})
}

// startOursShuffled starts kafkaconsumer acking in a shuffled order: it
// holds up to shuffleWindow messages (fewer when no more is ready), then
// acks them in a random order and passes them to the handler; durable
// sets Config.DurableAcks.
func startOursShuffled(spec *childSpec, h handler, durable bool) (instance, error) {
	cfg := kafkaconsumer.NewConfig()
	cfg.Offsets.Initial = saramaInitial(spec)
	cfg.Zookeeper.Timeout = spec.ZookeeperTimeout
	cfg.DurableAcks = durable
	if spec.MaxBufferedBytes >= 0 {
		cfg.MaxBufferedBytes = spec.MaxBufferedBytes
	}
	c, err := joinLogging(spec, spec.Zookeeper, cfg)
	if err != nil {
		return nil, err
	}
	o := &oursInstance{c: c, done: make(chan struct{})}
	go func() {
		defer close(o.done)
		rng := rand.New(rand.NewPCG(1, 2))
		window := make([]*sarama.ConsumerMessage, 0, shuffleWindow)
		flush := func() {
			rng.Shuffle(len(window), func(i, j int) { window[i], window[j] = window[j], window[i] })
			for _, msg := range window {
				c.Ack(msg)
				h(msg.Topic, msg.Partition, msg.Offset, msg.Value)
			}
			window = window[:0]
		}
		messages := c.Messages()
		for {
			var msg *sarama.ConsumerMessage
			ok := true
			select {
			case msg, ok = <-messages:
			default:
				flush() // nothing more ready: ack what is held
				msg, ok = <-messages
			}
			if !ok {
				flush()
				return
			}
			if window = append(window, msg); len(window) == shuffleWindow {
				flush()
			}
		}
	}()
	return o, nil
}

// joinLogging joins spec's group on its topics with cfg, through
// zookeeper ("" for CoordinatorKafka), and logs the consumer's errors
// until it is closed; its Close returns once the last error is logged.
func joinLogging(spec *childSpec, zookeeper string, cfg *kafkaconsumer.Config) (kafkaconsumer.Consumer, error) {
	c, err := kafkaconsumer.Join(spec.Group, kafkaconsumer.TopicSubscription(spec.Topics...), zookeeper, cfg)
	if err != nil {
		return nil, err
	}
	l := &loggingConsumer{Consumer: c, logged: make(chan struct{})}
	go func() {
		defer close(l.logged)
		for err := range c.Errors() {
			log.Printf("kafkaconsumer: %v", err)
		}
	}()
	return l, nil
}

// loggingConsumer is a consumer whose errors a goroutine logs (Errors
// must not be read elsewhere); Close waits for that goroutine.
type loggingConsumer struct {
	kafkaconsumer.Consumer
	logged chan struct{} // closed when the logging goroutine returns
}

// Close closes the consumer, which closes Errors, and waits for the
// logging goroutine to return.
func (l *loggingConsumer) Close() error {
	err := l.Consumer.Close()
	<-l.logged
	return err
}

func (o *oursInstance) Close() error {
	err := o.c.Close()
	<-o.done
	return err
}
