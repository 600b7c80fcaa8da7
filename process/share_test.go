package process

// Run on a share group (GroupProtocolShare) on the test cluster: a KRaft
// cluster of Kafka 4.2 or later (make test-kraft KAFKA_VERSION=4.4.0).

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer"
	"github.com/kafkaconsumer/kafkaconsumer/internal/testcluster"
)

// shareGroupTest skips, saying why, unless the cluster runs KRaft with
// Kafka 4.2 or later; it returns the brokers.
func shareGroupTest(t *testing.T) []string {
	t.Helper()
	_, brokers := clusterPeers(t)
	if os.Getenv("KAFKA_MODE") != "kraft" || !kafkaVersion().IsAtLeast(sarama.V4_2_0_0) {
		t.Skipf("share groups need a KRaft cluster of Kafka 4.2 or later, not %s in %q mode", kafkaVersion(), os.Getenv("KAFKA_MODE"))
	}
	return brokers
}

// joinShare joins group, a share group, on topic, reporting to metrics
// when not nil; the test's cleanup closes the consumer.
func joinShare(t *testing.T, brokers []string, group, topic string, metrics kafkaconsumer.Metrics) kafkaconsumer.Consumer {
	t.Helper()
	return joinShareWith(t, brokers, group, topic, func(config *kafkaconsumer.Config) { config.Metrics = metrics })
}

// joinShareWith is joinShare with the config changed by change.
func joinShareWith(t *testing.T, brokers []string, group, topic string, change func(*kafkaconsumer.Config)) kafkaconsumer.Consumer {
	t.Helper()
	config := kafkaconsumer.NewConfig()
	config.Version = kafkaVersion()
	config.Coordinator = kafkaconsumer.CoordinatorKafka
	config.GroupProtocol = kafkaconsumer.GroupProtocolShare
	config.Consumer.Return.Errors = true
	config.Brokers = brokers
	change(config)
	c, err := kafkaconsumer.Join(group, kafkaconsumer.TopicSubscription(topic), "", config)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestRunShareRefusesOrdering: Run on a share group's consumer with
// ByPartition or ByKey returns at once an error wrapping
// ErrInvalidOptions that names the ordering and GroupProtocolShare.
func TestRunShareRefusesOrdering(t *testing.T) {
	brokers := shareGroupTest(t)
	topic := uniqueName("share-run")
	createTopic(t, brokers, topic, 1)
	c := joinShare(t, brokers, uniqueName("share-run"), topic, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	share, _ := kafkaconsumer.ShareOf(c)
	if n, err := share.DeliveryCountLimit(ctx); n != DefaultShareDeliveryCountLimit || err != nil {
		t.Errorf("DeliveryCountLimit of a group that does not set it = %d, %v; want the broker's default, %d", n, err, DefaultShareDeliveryCountLimit)
	}
	for _, o := range []Ordering{ByPartition, ByKey} {
		err := Run(ctx, c, func(context.Context, *sarama.ConsumerMessage) error { return nil }, Options{Concurrency: 1, Ordering: o})
		if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), "GroupProtocolShare") || !strings.Contains(err.Error(), o.String()) {
			t.Errorf("Run on a share group's consumer with %s = %v, want ErrInvalidOptions naming %s and GroupProtocolShare", o, err, o)
		}
	}
}

// shareDeliveries records, per value, the delivery counts its handler
// saw, and the values handled successfully.
type shareDeliveries struct {
	mu        sync.Mutex
	counts    map[string][]int
	succeeded map[string]int
}

func (d *shareDeliveries) add(value string, delivery int, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.counts[value] = append(d.counts[value], delivery)
	if ok {
		d.succeeded[value]++
	}
}

func (d *shareDeliveries) successes() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.succeeded)
}

// shareHandler returns a handler that records each delivery in seen and
// fails ("cannot parse" the value) when fails says so of the record's
// number i ("v<i>") at its delivery count.
func shareHandler(share kafkaconsumer.Share, seen *shareDeliveries, fails func(i, delivery int) bool) Handler {
	return func(ctx context.Context, msg *sarama.ConsumerMessage) error {
		i, _ := strconv.Atoi(strings.TrimPrefix(string(msg.Value), "v"))
		delivery := share.DeliveryCount(msg)
		fail := fails(i, delivery)
		seen.add(string(msg.Value), delivery, !fail)
		if fail {
			return errors.New("cannot parse " + string(msg.Value))
		}
		return nil
	}
}

// shareMetrics counts the calls of Retried and DeadLettered.
type shareMetrics struct {
	kafkaconsumer.BaseMetrics
	mu            sync.Mutex
	retried, dead int
}

func (m *shareMetrics) Retried(string, kafkaconsumer.TopicPartition) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.retried++
}

func (m *shareMetrics) DeadLettered(string, kafkaconsumer.TopicPartition) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dead++
}

// TestRunShareRetryDeadLetter: three members of a share group each Run
// Unordered with 3 attempts and a dead-letter topic on 300 records of 2
// partitions. The records that fail once are handled again (by any
// member) with the delivery count 2 and succeed; the 10 that always fail
// are handled with the delivery counts 1, 2 and 3, then produced to the
// dead-letter topic with 3 attempts; every other record succeeds: 0 lost.
// Metrics.Retried counts the 30 RELEASEs of failures, DeadLettered the 10
// dead letters.
func TestRunShareRetryDeadLetter(t *testing.T) {
	brokers := shareGroupTest(t)
	topic, dlq, group := uniqueName("share-run.retry"), uniqueName("share-run.retry.dead"), uniqueName("share-run-retry")
	createTopic(t, brokers, topic, 2)
	createTopic(t, brokers, dlq, 1)
	const n = 300
	produceKeyed(t, brokers, topic, 0, n, 30, 1)
	poison := func(i int) bool { return i%30 == 7 } // 10 records
	flaky := func(i int) bool { return i%30 == 11 } // 10 records

	metrics := &shareMetrics{}
	seen := &shareDeliveries{counts: make(map[string][]int), succeeded: make(map[string]int)}
	var stops []func() error
	for range 3 {
		c := joinShare(t, brokers, group, topic, metrics)
		share, _ := kafkaconsumer.ShareOf(c)
		go func() {
			for range c.Errors() { // drained until Close; none expected, none checked
			}
		}()
		stops = append(stops, runInBackground(t, c, shareHandler(share, seen, func(i, delivery int) bool {
			return poison(i) || (flaky(i) && delivery == 1)
		}), Options{Concurrency: 8, Ordering: Unordered,
			Retry:      Retry{Attempts: 3},
			DeadLetter: DeadLetter{Topic: dlq, Brokers: brokers, Config: saramaConfig()}}))
	}
	waitFor(t, 2*time.Minute, "every good record handled and 10 dead letters", func() bool {
		return seen.successes() == n-10 && len(deadLetters(t, brokers, dlq)) >= 10
	})
	for _, stop := range stops {
		if err := stop(); err != nil {
			t.Errorf("Run: %s", err)
		}
	}
	seen.mu.Lock()
	defer seen.mu.Unlock()
	for i := range n {
		v := "v" + strconv.Itoa(i)
		counts := seen.counts[v]
		switch {
		case poison(i):
			if len(counts) != 3 || counts[0] != 1 || counts[1] != 2 || counts[2] != 3 {
				t.Errorf("poison %s handled with delivery counts %v, want [1 2 3]", v, counts)
			}
		case flaky(i):
			if len(counts) != 2 || counts[0] != 1 || counts[1] != 2 || seen.succeeded[v] != 1 {
				t.Errorf("flaky %s handled with delivery counts %v (%d successes), want [1 2], 1 success", v, counts, seen.succeeded[v])
			}
		case seen.succeeded[v] == 0:
			t.Errorf("%s never handled successfully (lost)", v)
		}
	}
	letters := deadLetters(t, brokers, dlq)
	dead := make(map[string]bool)
	for _, l := range letters {
		h := headersOf(l)
		i, _ := strconv.Atoi(strings.TrimPrefix(string(l.Value), "v"))
		if !poison(i) || h[HeaderTopic] != topic || h[HeaderAttempts] != "3" || h[HeaderError] != "cannot parse "+string(l.Value) {
			t.Errorf("dead letter %q with headers %v, want a poison record after 3 attempts", l.Value, h)
		}
		dead[string(l.Value)] = true
	}
	if len(dead) != 10 {
		t.Errorf("%d distinct dead letters (%d in all), want the 10 poison records", len(dead), len(letters))
	}
	metrics.mu.Lock()
	defer metrics.mu.Unlock()
	if metrics.retried != 30 || metrics.dead != 10 {
		t.Errorf("Metrics: %d retried, %d dead lettered; want 30 and 10", metrics.retried, metrics.dead)
	}
	t.Logf("%d records on 3 members: %d handled, %d dead letters, 0 lost", n, len(seen.succeeded), len(letters))
}

// TestRunShareGroupDeliveryLimit: on a share group whose
// share.delivery.count.limit is 2, Run with 3 attempts handles a record
// that always fails twice (delivery counts 1 and 2), then dead letters
// it: a third RELEASE would have had the broker archive it.
func TestRunShareGroupDeliveryLimit(t *testing.T) {
	brokers := shareGroupTest(t)
	topic, dlq, group := uniqueName("share-run.limit"), uniqueName("share-run.limit.dead"), uniqueName("share-run-limit")
	createTopic(t, brokers, topic, 1)
	createTopic(t, brokers, dlq, 1)
	if err := testcluster.SetGroupConfig(brokers, group, "share.delivery.count.limit", "2"); err != nil {
		t.Fatal(err)
	}
	produceKeyed(t, brokers, topic, 0, 1, 1, 1)
	c := joinShare(t, brokers, group, topic, nil)
	share, _ := kafkaconsumer.ShareOf(c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if n, err := share.DeliveryCountLimit(ctx); n != 2 || err != nil {
		t.Errorf("DeliveryCountLimit = %d, %v; want 2", n, err)
	}
	var mu sync.Mutex
	var counts []int
	stop := runInBackground(t, c, func(ctx context.Context, msg *sarama.ConsumerMessage) error {
		mu.Lock()
		defer mu.Unlock()
		counts = append(counts, share.DeliveryCount(msg))
		return errors.New("cannot parse")
	}, Options{Concurrency: 2, Ordering: Unordered, Retry: Retry{Attempts: 3},
		DeadLetter: DeadLetter{Topic: dlq, Brokers: brokers, Config: saramaConfig()}})
	waitFor(t, 30*time.Second, "the record handled at delivery 2", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(counts) >= 2
	})
	waitFor(t, 30*time.Second, "its dead letter", func() bool { return len(deadLetters(t, brokers, dlq)) == 1 })
	if err := stop(); err != nil {
		t.Errorf("Run: %s", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(counts) != 2 || counts[0] != 1 || counts[1] != 2 {
		t.Errorf("handled with delivery counts %v, want [1 2]", counts)
	}
	if h := headersOf(deadLetters(t, brokers, dlq)[0]); h[HeaderAttempts] != "2" {
		t.Errorf("dead letter headers %v, want 2 attempts", h)
	}
}

// TestRunShareBatches: Run on a share group's consumer set to batches
// (BatchSize 16) reads its Batches: every record of 200 on 2 partitions
// is handled and succeeds, those that fail at their first delivery are
// released and handled again with delivery count 2.
func TestRunShareBatches(t *testing.T) {
	brokers := shareGroupTest(t)
	topic, group := uniqueName("share-run.batches"), uniqueName("share-run-batches")
	createTopic(t, brokers, topic, 2)
	const n = 200
	produceKeyed(t, brokers, topic, 0, n, 20, 1)
	flaky := func(i int) bool { return i%20 == 3 } // 10 records
	c := joinShareWith(t, brokers, group, topic, func(config *kafkaconsumer.Config) { config.BatchSize = 16 })
	share, _ := kafkaconsumer.ShareOf(c)
	go func() {
		for range c.Errors() { // drained until Close; none expected, none checked
		}
	}()
	seen := &shareDeliveries{counts: make(map[string][]int), succeeded: make(map[string]int)}
	stop := runInBackground(t, c, shareHandler(share, seen, func(i, delivery int) bool {
		return flaky(i) && delivery == 1
	}), Options{Concurrency: 8, Ordering: Unordered, Retry: Retry{Attempts: 3}})
	waitFor(t, time.Minute, "every record handled successfully", func() bool { return seen.successes() == n })
	if err := stop(); err != nil {
		t.Errorf("Run: %s", err)
	}
	seen.mu.Lock()
	defer seen.mu.Unlock()
	for i := range n {
		v := "v" + strconv.Itoa(i)
		counts := seen.counts[v]
		if flaky(i) && (len(counts) != 2 || counts[1] != 2) {
			t.Errorf("flaky %s handled with delivery counts %v, want [1 2]", v, counts)
		}
		if seen.succeeded[v] != 1 {
			t.Errorf("%s succeeded %d times, want once", v, seen.succeeded[v])
		}
	}
}
