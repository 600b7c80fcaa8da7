package kafkaconsumer

// Share groups (GroupProtocolShare) against a real KRaft cluster of Kafka
// 4.2 or later (make test-kraft KAFKA_VERSION=4.4.0); they skip on
// others (shareGroupTest).

import (
	"errors"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// shareTestConfig is kafkaTestConfig for a share group: errors returned,
// records from the start of the topic.
func shareTestConfig() *Config {
	config := kafkaTestConfig()
	config.GroupProtocol = GroupProtocolShare
	config.Consumer.Return.Errors = true
	return config
}

// shareReceipt is a record as one member received it.
type shareReceipt struct {
	member   int
	value    string
	at       time.Time
	delivery int
}

// shareMembers runs n members of group on topic, each receiving on a
// goroutine of its own and passing each message to handle; stop closes
// them all (the test's cleanup does too) and waits for the goroutines.
type shareMembers struct {
	t         *testing.T
	consumers []Consumer
	wg        sync.WaitGroup
	mu        sync.Mutex
	receipts  []shareReceipt
	errs      []error
	stopOnce  sync.Once
}

func startShareMembers(t *testing.T, group, topic string, n int, config func() *Config, handle func(m int, c Consumer, msg *sarama.ConsumerMessage)) *shareMembers {
	t.Helper()
	s := &shareMembers{t: t}
	for i := 0; i < n; i++ {
		c, err := Join(group, TopicSubscription(topic), "", config())
		if err != nil {
			s.stop()
			t.Fatalf("Join(%s) of member %d = %s", group, i, err)
		}
		s.consumers = append(s.consumers, c)
		share, ok := ShareOf(c)
		if !ok {
			t.Fatalf("ShareOf(the consumer of a share group) = false")
		}
		s.wg.Add(2)
		go func(m int, c Consumer) {
			defer s.wg.Done()
			for msg := range c.Messages() {
				s.mu.Lock()
				s.receipts = append(s.receipts, shareReceipt{member: m, value: string(msg.Value), at: time.Now(), delivery: share.DeliveryCount(msg)})
				s.mu.Unlock()
				handle(m, c, msg)
			}
		}(i, c)
		go func(c Consumer) {
			defer s.wg.Done()
			for err := range c.Errors() {
				s.mu.Lock()
				s.errs = append(s.errs, err)
				s.mu.Unlock()
			}
		}(c)
	}
	t.Cleanup(s.stop)
	return s
}

// stop closes every member and waits for their goroutines.
func (s *shareMembers) stop() {
	s.stopOnce.Do(func() {
		for _, c := range s.consumers {
			if err := c.Close(); err != nil {
				s.t.Errorf("Close = %s", err)
			}
		}
		s.wg.Wait()
	})
}

// snapshot returns the receipts and errors so far.
func (s *shareMembers) snapshot() ([]shareReceipt, []error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]shareReceipt(nil), s.receipts...), append([]error(nil), s.errs...)
}

// distinct returns how many distinct values were received.
func (s *shareMembers) distinct() int {
	receipts, _ := s.snapshot()
	seen := make(map[string]bool)
	for _, r := range receipts {
		seen[r.value] = true
	}
	return len(seen)
}

// TestIntegrationShareGroupAcksInAnyOrder: three members of a share group
// on a topic of two partitions (the broker gives each member both) ack
// what they receive in a random order:
// every record is received, none twice (each acked well within its
// lock), and no error is reported.
func TestIntegrationShareGroupAcksInAnyOrder(t *testing.T) {
	shareGroupTest(t)
	topic := newTopic(t, 2)
	const n = 600
	values := produce(t, newTestClient(t), topic, "share", n)
	var mu sync.Mutex
	held := make(map[int][]*sarama.ConsumerMessage) // per member, acked in a random order
	members := startShareMembers(t, uniqueName("share-acks"), topic, 3, shareTestConfig, func(m int, c Consumer, msg *sarama.ConsumerMessage) {
		mu.Lock()
		defer mu.Unlock()
		held[m] = append(held[m], msg)
		if len(held[m]) < 5 && rand.Intn(4) != 0 {
			return
		}
		rand.Shuffle(len(held[m]), func(i, j int) { held[m][i], held[m][j] = held[m][j], held[m][i] })
		for _, h := range held[m] {
			c.Ack(h)
		}
		held[m] = held[m][:0]
	})
	waitFor(t, 60*time.Second, "every record received and acked", func() bool {
		mu.Lock() // ack the stragglers of the last batches: Close would release them
		for m, hs := range held {
			for _, h := range hs {
				members.consumers[m].Ack(h)
			}
			held[m] = nil
		}
		mu.Unlock()
		if members.distinct() < n {
			return false
		}
		for _, c := range members.consumers { // and nothing handed out is left to ack
			for _, s := range c.Stats() {
				if s.Pending > 0 {
					return false
				}
			}
		}
		return true
	})
	members.stop()
	receipts, errs := members.snapshot()
	got := make(map[string]int)
	byMember := make(map[int]int)
	for _, r := range receipts {
		got[r.value]++
		byMember[r.member]++
		if got[r.value] > 1 {
			t.Errorf("%s received twice (its lock holds 30 s, and it was acked at once)", r.value)
		}
	}
	for _, v := range values {
		if got[v] == 0 {
			t.Errorf("%s lost", v)
		}
	}
	for _, err := range errs {
		t.Errorf("Errors(): %s", err)
	}
	t.Logf("received by member: %v", byMember)
}

// TestIntegrationShareGroupJoinErrors: Join of a share group refuses
// settings that make no sense for it, with ErrInvalidConfig.
func TestIntegrationShareGroupJoinErrors(t *testing.T) {
	shareGroupTest(t)
	topic := newTopic(t, 1)
	config := shareTestConfig()
	config.InstanceID = "static"
	if _, err := Join(uniqueName("share"), TopicSubscription(topic), "", config); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("Join with InstanceID = %v, want ErrInvalidConfig", err)
	}
}

// TestIntegrationShareGroupMoreMembersThanPartitions: eight members of a
// share group on a topic of two partitions all receive records.
func TestIntegrationShareGroupMoreMembersThanPartitions(t *testing.T) {
	shareGroupTest(t)
	topic := newTopic(t, 2)
	group := uniqueName("share-eight")
	var mu sync.Mutex
	got := make(map[int]int)
	received := func(m int) {
		mu.Lock()
		defer mu.Unlock()
		got[m]++
	}
	everyone := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 8
	}
	members := startShareMembers(t, group, topic, 8, shareTestConfig, func(m int, c Consumer, msg *sarama.ConsumerMessage) {
		received(m)
		time.Sleep(5 * time.Millisecond) // a handler's work, so that records wait for every member
		c.Ack(msg)
	})
	client := newTestClient(t)
	for i := 0; !poll(time.Second, everyone); i++ {
		if i == 60 {
			mu.Lock()
			t.Fatalf("after 60 rounds of 100 records a second, the members received %v; want all 8 to receive", got)
			mu.Unlock()
		}
		produce(t, client, topic, "eight", 100)
	}
	members.stop()
	_, errs := members.snapshot()
	for _, err := range errs {
		t.Errorf("Errors(): %s", err)
	}
	t.Logf("received by member: %v", got)
}
