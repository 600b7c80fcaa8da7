package main

// The processing workload: a handler that waits for an I/O call (work,
// 1 ms by default) on every message of a keyed topic, run by
// kafkaconsumer's process.Run by key at several concurrencies, and by
// sarama's group and franz-go processing each partition on a goroutine of
// its own, one message after the other, as their documentation shows.

import (
	"context"
	"fmt"
	"log"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer"
	"github.com/kafkaconsumer/kafkaconsumer/process"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The processing contenders beside sarama-group and franz-go: process.Run
// by key (process.ByKey) at Concurrency 16, 64 and 256, on kafkaconsumer
// coordinated by ZooKeeper.
const (
	process16  = "process-16"
	process64  = "process-64"
	process256 = "process-256"
)

// processingOrder is the order of the processing table's rows;
// processingPeers are the peers whose best msgs/s the ratios divide by.
var (
	processingOrder = []string{saramaGroup, franzGo, process16, process64, process256, franzGoShare, kafkaConsumerShare}
	processingPeers = []string{saramaGroup, franzGo}
)

// processConcurrency is the process.Run Concurrency of each contender.
var processConcurrency = map[string]int{process16: 16, process64: 64, process256: 256}

// runProcessing is the processing workload: every contender handles every
// message of a topic of o.processingKeys keys once, waiting o.work per
// message in its handler.
func runProcessing(cl *cluster, o *options) (*drainTable, error) {
	parts := int32(o.partitions)
	topic := fmt.Sprintf("bench.processing.p%d.k%d.s%d.n%d", parts, o.processingKeys, o.size, o.processingMessages)
	if err := cl.fillKeyed(topic, parts, o.processingMessages, o.size, o.processingKeys); err != nil {
		return nil, err
	}
	oldest, newest, err := cl.offsets(topic, parts)
	if err != nil {
		return nil, err
	}
	var n int64
	counts := make([]int64, parts)
	for p := range parts {
		counts[p] = newest[p] - oldest[p]
		n += counts[p]
	}
	table := &drainTable{
		Workload:   "processing",
		Topic:      topic,
		Partitions: int(parts),
		Messages:   n,
		Size:       o.size,
		Instances:  1,
		Keys:       o.processingKeys,
		WorkMillis: float64(o.work) / float64(time.Millisecond),
	}
	byContender := map[string][]childResult{}
	cs := contendersFor(o, processingOrder)
	for run := range o.runs {
		for _, c := range rotate(cs, run) {
			spec := baseSpec(cl, o, "drain")
			spec.Contender = c
			spec.Instances = 1
			spec.Group = groupName("processing", c, run)
			spec.Topics = []string{topic}
			spec.Partitions = []int32{parts}
			spec.Targets = [][]int64{counts}
			spec.CountTargets = true
			spec.Messages = n
			spec.Work = o.work
			spec.Concurrency = processConcurrency[c]
			if slices.Contains(shareContenders, c) {
				spec.Instances = shareMembers
			}
			r, err := runDrain(spec)
			if err != nil {
				return nil, err
			}
			log.Printf("processing run %d %-14s %6.2fs %9.0f msgs/s after the first message  cpu %5.2fs  rss %4.0f MB  %5.2f allocs/msg  first %.2fs  dup %d",
				run+1, c, r.Seconds, float64(n)/(r.Seconds-r.FirstSeconds), r.CPUSeconds, float64(r.PeakRSS)/1e6,
				float64(r.Mallocs)/float64(n), r.FirstSeconds, r.Received-n)
			byContender[c] = append(byContender[c], r)
		}
	}
	for _, c := range cs {
		row := drainRowOf(c, byContender[c], n, o.size)
		// Processing rate: from the first message on, so that the time a
		// group takes to form is not counted against it.
		row.MsgsPerSec = medianOf(byContender[c], func(r childResult) float64 { return float64(n) / (r.Seconds - r.FirstSeconds) })
		row.MBPerSec = row.MsgsPerSec * float64(o.size) / 1e6
		table.Rows = append(table.Rows, row)
	}
	table.setRatios()
	return table, nil
}

// fillKeyed is fill with a key on every message, one of keys drawn at
// random (seeded: the same keys every time), the partition being the
// key's (sarama's hash partitioner).
func (c *cluster) fillKeyed(topic string, partitions int32, n int64, size, keys int) error {
	return c.produceMissing(topic, partitions, n, fmt.Sprintf("of %d bytes with %d keys", size, keys), nil, func(input chan<- *sarama.ProducerMessage, have, missing int64) {
		rng := rand.New(rand.NewPCG(43, uint64(have)))
		value := make([]byte, size)
		for i := range value {
			value[i] = byte(rng.IntN(256))
		}
		for range missing {
			key := "key-" + strconv.Itoa(rng.IntN(keys))
			input <- &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(key), Value: sarama.ByteEncoder(value)}
		}
	})
}

// startProcessing starts a contender of the processing workload: its
// handler waits spec.Work, then passes the message to h.
func startProcessing(spec *childSpec, h handler) (instance, error) {
	switch spec.Contender {
	case saramaGroup:
		return startSaramaGroup(spec, h) // ConsumeClaim runs per partition; it waits spec.Work
	case franzGo:
		return startFranzPartitions(spec, h)
	case process16, process64, process256:
		return startProcess(spec, h)
	}
	return nil, fmt.Errorf("contender %q does not run the processing workload", spec.Contender)
}

// --- process-N: process.Run by key on kafkaconsumer.

type processInstance struct {
	c      kafkaconsumer.Consumer
	cancel context.CancelFunc
	done   chan struct{} // closed when Run returned
}

func startProcess(spec *childSpec, h handler) (instance, error) {
	cfg := kafkaconsumer.NewConfig()
	cfg.Offsets.Initial = saramaInitial(spec)
	cfg.Zookeeper.Timeout = spec.ZookeeperTimeout
	if spec.MaxBufferedBytes >= 0 {
		cfg.MaxBufferedBytes = spec.MaxBufferedBytes
	}
	c, err := joinLogging(spec, spec.Zookeeper, cfg)
	if err != nil {
		return nil, err
	}
	return runProcess(c, spec.Work, h, process.Options{Concurrency: spec.Concurrency, Ordering: process.ByKey}), nil
}

// runProcess runs process.Run on c with opts, each handler waiting work
// (the I/O call) and then calling h, until the instance is closed.
func runProcess(c kafkaconsumer.Consumer, work time.Duration, h handler, opts process.Options) *processInstance {
	ctx, cancel := context.WithCancel(context.Background())
	p := &processInstance{c: c, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		err := process.Run(ctx, c, func(_ context.Context, msg *sarama.ConsumerMessage) error {
			time.Sleep(work) // the I/O call
			h(msg.Topic, msg.Partition, msg.Offset, msg.Value)
			return nil
		}, opts)
		if err != nil {
			log.Printf("process.Run: %v", err)
		}
	}()
	return p
}

// Close stops Run (its handlers return, what they did not handle is given
// back), then closes the consumer.
func (p *processInstance) Close() error {
	p.cancel()
	<-p.done
	return p.c.Close()
}

// --- franz-go with a goroutine per partition: the pattern of franz-go's
// examples/goroutine_per_partition_consuming (autocommit_marks). The poll
// loop hands each partition's records to that partition's goroutine, which
// handles them one after the other and marks them; BlockRebalanceOnPoll
// keeps the assignment still between a poll and AllowRebalance.

type franzPartition struct {
	recs chan []*kgo.Record // from the poll loop; never closed
	quit chan struct{}      // closed by kill
	done chan struct{}      // closed when run returns
}

// topicPart is a map key.
type topicPart struct {
	topic     string
	partition int32
}

type franzSplit struct {
	cl   *kgo.Client
	work time.Duration
	h    handler

	mu    sync.Mutex // guards parts
	parts map[topicPart]*franzPartition

	cancel context.CancelFunc
	done   chan struct{} // closed when the poll loop ends
}

func startFranzPartitions(spec *childSpec, h handler) (instance, error) {
	start := kgo.NewOffset().AtStart()
	if spec.Newest {
		start = kgo.NewOffset().AtEnd()
	}
	s := &franzSplit{work: spec.Work, h: h, parts: make(map[topicPart]*franzPartition), done: make(chan struct{})}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(spec.Brokers...),
		kgo.ConsumerGroup(spec.Group),
		kgo.ConsumeTopics(spec.Topics...),
		kgo.ConsumeResetOffset(start),
		kgo.OnPartitionsAssigned(s.assigned),
		kgo.OnPartitionsRevoked(s.revoked),
		kgo.OnPartitionsLost(s.lost),
		kgo.AutoCommitMarks(),
		kgo.AutoCommitInterval(time.Second), // as in the throughput workloads
		kgo.BlockRebalanceOnPoll(),
		kgo.SessionTimeout(spec.GroupSession),
		kgo.HeartbeatInterval(spec.GroupHeartbeat),
	)
	if err != nil {
		return nil, err
	}
	s.cl = cl
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go s.poll(ctx)
	return s, nil
}

// poll hands each polled partition's records to its goroutine, until ctx
// is done.
func (s *franzSplit) poll(ctx context.Context) {
	defer close(s.done)
	defer s.cl.AllowRebalance()
	for {
		fetches := s.cl.PollRecords(ctx, 10000)
		if fetches.IsClientClosed() || ctx.Err() != nil {
			return
		}
		fetches.EachError(func(topic string, p int32, err error) {
			log.Printf("franz-go: %s/%d: %v", topic, p, err)
		})
		stop := false
		fetches.EachPartition(func(p kgo.FetchTopicPartition) {
			if stop || len(p.Records) == 0 {
				return
			}
			s.mu.Lock()
			fp := s.parts[topicPart{p.Topic, p.Partition}]
			s.mu.Unlock()
			if fp == nil {
				return
			}
			select {
			case fp.recs <- p.Records:
			case <-ctx.Done():
				stop = true
			}
		})
		s.cl.AllowRebalance()
	}
}

func (s *franzSplit) assigned(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for topic, partitions := range assigned {
		for _, p := range partitions {
			fp := &franzPartition{recs: make(chan []*kgo.Record, 5), quit: make(chan struct{}), done: make(chan struct{})}
			s.parts[topicPart{topic, p}] = fp
			go fp.run(s) // stopped and waited for by kill
		}
	}
}

func (s *franzSplit) revoked(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
	s.kill(revoked)
	if err := cl.CommitMarkedOffsets(ctx); err != nil {
		log.Printf("franz-go: commit on revocation: %v", err)
	}
}

func (s *franzSplit) lost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	s.kill(lost)
}

// kill stops the goroutines of partitions and waits for them.
func (s *franzSplit) kill(partitions map[string][]int32) {
	var stopped []*franzPartition
	s.mu.Lock()
	for topic, ps := range partitions {
		for _, p := range ps {
			if fp := s.parts[topicPart{topic, p}]; fp != nil {
				delete(s.parts, topicPart{topic, p})
				close(fp.quit)
				stopped = append(stopped, fp)
			}
		}
	}
	s.mu.Unlock()
	for _, fp := range stopped {
		<-fp.done
	}
}

// Close stops the poll loop, then closes the client, which revokes the
// partitions (their goroutines stop), commits the marks and leaves.
func (s *franzSplit) Close() error {
	s.cancel()
	<-s.done
	s.cl.Close()
	return nil
}

func (fp *franzPartition) run(s *franzSplit) {
	defer close(fp.done)
	for {
		select {
		case <-fp.quit:
			return
		case recs := <-fp.recs:
			for _, r := range recs {
				select {
				case <-fp.quit:
					return // the rest is not marked: the next owner handles it
				default:
				}
				time.Sleep(s.work) // the I/O call
				s.cl.MarkCommitRecords(r)
				s.h(r.Topic, r.Partition, r.Offset, r.Value)
			}
		}
	}
}
