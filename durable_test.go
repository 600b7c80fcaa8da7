package kafkaconsumer

// Config.DurableAcks against the real cluster: a restarted partition skips
// what was acked beyond its committed offset (both hand-out modes, both
// coordinators); a broker that refuses the metadata; a consumer killed
// with -9 while acks come in random order.

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer/internal/commitmark"
	"github.com/kafkaconsumer/kafkaconsumer/internal/testcluster"
)

// durableReader reads a consumer's Messages or Batches on a goroutine of
// its own, acking every message that keep does not hold back, and records
// what it received.
type durableReader struct {
	mu       sync.Mutex
	received map[partOffset]int
	held     []*sarama.ConsumerMessage // received and not acked
	done     chan struct{}             // closed when the consumer's channel is closed
}

func readDurable(c Consumer, batches bool, hold func(*sarama.ConsumerMessage) bool) *durableReader {
	r := &durableReader{received: make(map[partOffset]int), done: make(chan struct{})}
	handle := func(msg *sarama.ConsumerMessage) bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.received[partOffset{msg.Partition, msg.Offset}]++
		if hold(msg) {
			r.held = append(r.held, msg)
			return false
		}
		return true
	}
	go func() { // owned by the test: it ends when the consumer closes
		defer close(r.done)
		if batches {
			for b := range c.Batches() {
				for _, msg := range b.Messages {
					if handle(msg) {
						c.Ack(msg) // in any order: the held ones stay out
					}
				}
			}
			return
		}
		for msg := range c.Messages() {
			if handle(msg) {
				c.Ack(msg)
			}
		}
	}()
	return r
}

func (r *durableReader) count() (messages, held int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.received), len(r.held)
}

// committedMetadata returns the group's committed offsets and their
// metadata, by partition.
func committedMetadata(t testing.TB, client sarama.Client, group, topic string) (map[int32]int64, map[int32]string) {
	t.Helper()
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		t.Fatal(err)
	}
	partitions, err := client.Partitions(topic)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := admin.ListConsumerGroupOffsets(group, map[string][]int32{topic: partitions})
	if err != nil {
		t.Fatalf("fetch offsets of group %s: %s", group, err)
	}
	offsets, metadata := make(map[int32]int64), make(map[int32]string)
	for _, p := range partitions {
		if b := resp.GetBlock(topic, p); b != nil && errors.Is(b.Err, sarama.ErrNoError) {
			offsets[p], metadata[p] = b.Offset, b.Metadata
		}
	}
	return offsets, metadata
}

// TestDurableAcksRestart: a consumer acks all but every seventh message
// and closes; its commits carry the acked set; the next consumer of the
// group hands out the unacked ones only, in single messages and in
// batches, with ZooKeeper and with Kafka coordinating the group.
func TestDurableAcksRestart(t *testing.T) {
	parallelClusterTest(t)
	for _, tc := range []struct {
		name    string
		batches bool
		kafka   bool
	}{
		{"messages/zookeeper", false, false},
		{"batches/zookeeper", true, false},
		{"messages/kafka", false, true},
		{"batches/kafka", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.kafka {
				kafkaCoordinatorTest(t)
			} else {
				parallelClusterTest(t)
			}
			client := newTestClient(t)
			topic, group := uniqueName("durable"), uniqueName("durable")
			createTopic(t, newTestAdmin(t, client), topic, 2)
			const total = 400
			produce(t, client, topic, "v", total)
			config := testConfig()
			if tc.kafka {
				config = kafkaTestConfig()
			}
			config.DurableAcks = true
			config.MaxProcessingTime = 500 * time.Millisecond // the held ones are never acked
			if tc.batches {
				config.BatchSize = 16
			}
			start := func() Consumer {
				if tc.kafka {
					return joinKafka(t, group, TopicSubscription(topic), config)
				}
				c := join(t, group, TopicSubscription(topic), config)
				t.Cleanup(func() { _ = c.Close() })
				return c
			}
			hole := func(msg *sarama.ConsumerMessage) bool { return msg.Offset%7 == 3 }

			c1 := start()
			first := readDurable(c1, tc.batches, hole)
			waitFor(t, 60*time.Second, "every message to be received", func() bool {
				n, _ := first.count()
				return n == total
			})
			_, holes := first.count()
			// The acked set reaches the coordinator before Close, too.
			waitFor(t, 30*time.Second, "commits that carry the acked sets", func() bool {
				offsets, metadata := committedMetadata(t, client, group, topic)
				for p := int32(0); p < 2; p++ {
					if acked, _ := commitmark.Acked(metadata[p], 3); offsets[p] != 3 || acked == nil {
						return false
					}
				}
				return true
			})
			if err := c1.Close(); err != nil {
				t.Fatalf("close: %s", err)
			}
			<-first.done

			c2 := start()
			second := readDurable(c2, tc.batches, func(*sarama.ConsumerMessage) bool { return false })
			ends := newestOffsets(t, client, topic)
			waitFor(t, 60*time.Second, "the unacked messages to be received again and the commits to reach the ends", func() bool {
				if n, _ := second.count(); n < holes {
					return false
				}
				committed := committedOffsets(t, client, group, topic)
				return committed[0] == ends[0] && committed[1] == ends[1]
			})
			if err := c2.Close(); err != nil {
				t.Fatalf("close: %s", err)
			}
			<-second.done
			again := 0
			for m := range second.received {
				if m.offset%7 != 3 {
					again++
					if again <= 5 {
						t.Errorf("offset %d of partition %d was acked before the restart, and handed out again", m.offset, m.partition)
					}
				}
			}
			if again > 0 {
				t.Errorf("%d acked messages handed out again after the restart", again)
			}
			for _, msg := range first.held {
				if second.received[partOffset{msg.Partition, msg.Offset}] != 1 {
					t.Errorf("unacked offset %d of partition %d received %d times after the restart; want 1",
						msg.Offset, msg.Partition, second.received[partOffset{msg.Partition, msg.Offset}])
				}
			}
			t.Logf("first consumer: %d received, %d not acked; second: %d received, %d of them acked before",
				total, holes, len(second.received), again)
		})
	}
}

// TestDurableAcksMetadataTooLarge: a broker whose offset.metadata.max.bytes
// is too small for the acked set refuses the commit
// (OFFSET_METADATA_TOO_LARGE); the consumer commits again without the set,
// says so once on Errors(), and goes on committing.
func TestDurableAcksMetadataTooLarge(t *testing.T) {
	needFaults(t)
	cluster := startFaultCluster(t, testcluster.Options{ZooKeepers: 1, Brokers: 1,
		BrokerConfig: map[string]string{"offset.metadata.max.bytes": "40"}})
	topic, group := uniqueName("durable-large"), uniqueName("durable-large")
	if err := cluster.CreateTopic(topic, 1, 1); err != nil {
		t.Fatal(err)
	}
	client := newTestClientOf(t, cluster.KafkaPeers())
	const total = 60
	produce(t, client, topic, "v", total)

	config := testConfig()
	if config.Discovery == DiscoverFromKafka {
		config.Brokers = cluster.KafkaPeers()
	}
	config.DurableAcks = true
	config.MaxProcessingTime = 500 * time.Millisecond
	c, err := Join(group, TopicSubscription(topic), cluster.ZookeeperPeers(), config)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	var (
		errMu   sync.Mutex
		refused []error
		others  []string
	)
	errsDone := make(chan struct{})
	go func() { // owned by the test: it ends when the consumer closes
		defer close(errsDone)
		for err := range c.Errors() {
			errMu.Lock()
			if errors.Is(err, sarama.ErrOffsetMetadataTooLarge) {
				refused = append(refused, err)
			} else {
				others = append(others, err.Error())
			}
			errMu.Unlock()
		}
	}()
	even := func(msg *sarama.ConsumerMessage) bool { return msg.Offset > 0 && msg.Offset%2 == 0 }
	r := readDurable(c, false, even)
	waitFor(t, 60*time.Second, "every message to be received", func() bool {
		n, _ := r.count()
		return n == total
	})
	waitFor(t, 30*time.Second, "the commit without the acked set", func() bool {
		offsets, metadata := committedMetadata(t, client, group, topic)
		return offsets[0] == 2 && metadata[0] == commitmark.NextMark
	})
	waitFor(t, 30*time.Second, "the refusal on Errors()", func() bool {
		errMu.Lock()
		defer errMu.Unlock()
		return len(refused) > 0
	})
	// More commits: every held message but the last acked, one a round.
	r.mu.Lock()
	held := append([]*sarama.ConsumerMessage(nil), r.held...)
	r.mu.Unlock()
	last := held[len(held)-1]
	for i, msg := range held[:len(held)-1] {
		c.Ack(msg)
		want := held[i+1].Offset
		waitFor(t, 30*time.Second, fmt.Sprintf("the commit of offset %d", want), func() bool {
			offsets, _ := committedMetadata(t, client, group, topic)
			return offsets[0] == want
		})
	}
	c.Ack(last)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	<-errsDone
	<-r.done
	if offsets, _ := committedMetadata(t, client, group, topic); offsets[0] != total {
		t.Errorf("committed %d after Close, want %d", offsets[0], total)
	}
	errMu.Lock()
	defer errMu.Unlock()
	if len(refused) != 1 {
		t.Errorf("%d refusals on Errors(), want 1: %v", len(refused), refused)
	}
	t.Logf("the refusal: %v; other errors: %s", refused, strings.Join(others, "; "))
}

// TestDurableAcksKill: three consumer processes ack in random order (32
// workers with random delays up to 20 ms, and one message in 100 a second
// longer), and one is killed with -9 midway. Its
// messages that the last commit before the kill did not cover are
// counted: handed out and not acked, or acked after that commit. With
// DurableAcks, the duplicates are at most that count; without, they are
// what the acked prefix left (logged, as the comparison).
func TestDurableAcksKill(t *testing.T) {
	needFaults(t)
	for _, durable := range []bool{false, true} {
		t.Run(fmt.Sprintf("durable=%v", durable), func(t *testing.T) {
			r := newFaultRun(t, zookeeperPeers, kafkaPeers, 4, 1)
			r.opts.workers, r.opts.delay, r.opts.slow = 32, 20*time.Millisecond, time.Second
			r.opts.durable, r.opts.ackLines = durable, true
			children := []*child{r.start(), r.start(), r.start()}
			r.waitOwnedBy(60*time.Second, children...)
			wait := r.produceSteadily(6000, 6*time.Second)
			victim := children[1]
			waitFor(t, 60*time.Second, "the victim to receive 600 messages", func() bool {
				return len(victim.output().deliveries) >= 600
			})
			victim.kill(t)
			offsets, metadata := committedMetadata(t, r.client, r.group, r.topic)
			out := victim.output()
			var notAcked, ackedLate int
			seen := make(map[partOffset]bool)
			for _, d := range out.deliveries {
				m := partOffset{d.partition, d.offset}
				if seen[m] {
					continue
				}
				seen[m] = true
				committed, ok := offsets[d.partition]
				if !ok {
					committed = -1
				}
				next, _ := commitmark.Decode(committed, metadata[d.partition], false)
				acked, _ := commitmark.Acked(metadata[d.partition], next)
				if next >= 0 && d.offset < next || inRanges(acked, d.offset) {
					continue // covered by the last commit
				}
				if out.acked[m] {
					ackedLate++
				} else {
					notAcked++
				}
			}
			wait()
			duplicates := r.finish()
			t.Logf("DurableAcks %v: the victim received %d; at the kill %d were handed out and not acked, %d acked after the last commit; duplicates %d",
				durable, len(seen), notAcked, ackedLate, duplicates)
			if durable && duplicates > notAcked+ackedLate {
				t.Errorf("%d duplicates, more than the %d messages not covered by the last commit (%d not acked, %d acked after it)",
					duplicates, notAcked+ackedLate, notAcked, ackedLate)
			}
		})
	}
}

// inRanges reports whether offset is in one of rs.
func inRanges(rs []commitmark.Range, offset int64) bool {
	for _, r := range rs {
		if r.From <= offset && offset < r.To {
			return true
		}
	}
	return false
}

// unreadableMetrics counts the calls of AckedSetUnreadable.
type unreadableMetrics struct {
	BaseMetrics
	mu    sync.Mutex
	calls []TopicPartition
}

func (m *unreadableMetrics) AckedSetUnreadable(_ string, tp TopicPartition) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls = append(m.calls, tp)
}

func (m *unreadableMetrics) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.calls)
}

// TestDurableAcksUnreadableSet: a commit whose acked set cannot be
// decoded is read as its offset alone (the messages after it are handed
// out again), and the consumer says so once, on Errors() with the topic
// and partition, and to Metrics.
func TestDurableAcksUnreadableSet(t *testing.T) {
	parallelClusterTest(t)
	client := newTestClient(t)
	topic, group := uniqueName("durable.unreadable"), uniqueName("durable-unreadable")
	createTopic(t, newTestAdmin(t, client), topic, 1)
	produce(t, client, topic, "v", 20)
	om, err := sarama.NewOffsetManagerFromClient(group, client)
	if err != nil {
		t.Fatalf("offset manager: %s", err)
	}
	pom, err := om.ManagePartition(topic, 0)
	if err != nil {
		t.Fatalf("manage %s/0: %s", topic, err)
	}
	const bad = commitmark.NextMark + ";a1.!!!" // not base64
	pom.MarkOffset(5, bad)
	pom.ResetOffset(5, bad)
	pom.AsyncClose()
	om.Commit()
	if err := om.Close(); err != nil {
		t.Fatalf("close offset manager: %s", err)
	}
	if _, metadata := committedMetadata(t, client, group, topic); metadata[0] != bad {
		t.Fatalf("committed metadata %q, want %q", metadata[0], bad)
	}

	config := testConfig()
	config.DurableAcks = true
	metrics := &unreadableMetrics{}
	config.Metrics = metrics
	c := join(t, group, TopicSubscription(topic), config)
	t.Cleanup(func() { _ = c.Close() })
	errs := logErrors(c)
	reader := readDurable(c, false, func(*sarama.ConsumerMessage) bool { return false })
	waitFor(t, 60*time.Second, "the 15 messages after the commit to be received", func() bool {
		n, _ := reader.count()
		return n == 15
	})
	unreadable := func() (n int) {
		errs.mu.Lock()
		defer errs.mu.Unlock()
		for _, err := range errs.errs {
			var ce *sarama.ConsumerError
			if errors.As(err, &ce) && ce.Topic == topic && ce.Partition == 0 && errors.Is(err, ErrAckedSetUnreadable) {
				n++
			}
		}
		return n
	}
	waitFor(t, 10*time.Second, "an error on Errors() about the unreadable acked set of partition 0 ("+errs.summary()+")", func() bool { return unreadable() > 0 })
	if err := c.Close(); err != nil {
		t.Fatalf("close: %s", err)
	}
	<-reader.done
	<-errs.done
	if n := unreadable(); n != 1 {
		t.Errorf("%d errors about the unreadable acked set, want 1: %s", n, errs.summary())
	}
	if n := metrics.count(); n != 1 {
		t.Errorf("Metrics.AckedSetUnreadable called %d times, want 1", n)
	}
}
