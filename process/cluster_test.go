package process

// Tests of Run on the real cluster named by ZOOKEEPER_PEERS and
// KAFKA_PEERS (make cluster-up, then . .cluster/env; make test exports
// them), skipped without it: a poison message dead lettered, a dead-letter
// topic unreachable for a while, and, with child processes, ByKey order
// through a rebalance and a kill -9.

import (
	"context"
	"errors"
	"fmt"
	"net"
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

// clusterPeers returns the test cluster's ZooKeeper connection string and
// brokers, or skips the test.
func clusterPeers(t testing.TB) (string, []string) {
	t.Helper()
	zookeeper, kafka := os.Getenv("ZOOKEEPER_PEERS"), os.Getenv("KAFKA_PEERS")
	if testing.Short() || zookeeper == "" || kafka == "" {
		t.Skip("needs ZOOKEEPER_PEERS and KAFKA_PEERS (make test, or make cluster-up and . .cluster/env)")
	}
	return zookeeper, strings.Split(kafka, ",")
}

// kafkaVersion is the brokers' version, from KAFKA_VERSION.
func kafkaVersion() sarama.KafkaVersion {
	if v, err := sarama.ParseKafkaVersion(os.Getenv("KAFKA_VERSION")); err == nil {
		return v
	}
	return sarama.V2_8_0_0
}

// saramaConfig is a producer's and admin's configuration for the cluster.
func saramaConfig() *sarama.Config {
	config := sarama.NewConfig()
	config.Version = kafkaVersion()
	config.Producer.Return.Successes = true
	config.Producer.RequiredAcks = sarama.WaitForAll
	config.Admin.Timeout = 30 * time.Second
	return config
}

// uniqueName returns a name for a topic or group that no other test uses.
func uniqueName(prefix string) string {
	return fmt.Sprintf("%s.%d", prefix, time.Now().UnixNano())
}

// createTopic creates a topic of partitions partitions.
func createTopic(t testing.TB, brokers []string, name string, partitions int32) {
	t.Helper()
	admin, err := sarama.NewClusterAdmin(brokers, saramaConfig())
	if err != nil {
		t.Fatalf("admin: %s", err)
	}
	defer admin.Close()
	if err := admin.CreateTopic(name, &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: 1}, false); err != nil {
		t.Fatalf("create topic %s: %s", name, err)
	}
}

// produceKeyed produces n messages to topic with the value "v<i>" and the
// key "k<(i/run) mod keys>" (run consecutive messages per key), so that a
// key's messages are in its partition in the order of i.
func produceKeyed(t testing.TB, brokers []string, topic string, from, n, keys, run int) {
	t.Helper()
	if err := produceKeyedErr(brokers, topic, from, n, keys, run); err != nil {
		t.Fatal(err)
	}
}

// produceKeyedErr is produceKeyed for a goroutine other than the test's.
func produceKeyedErr(brokers []string, topic string, from, n, keys, run int) error {
	producer, err := sarama.NewSyncProducer(brokers, saramaConfig())
	if err != nil {
		return fmt.Errorf("producer: %w", err)
	}
	defer producer.Close()
	const chunk = 1000
	for i := from; i < from+n; i += chunk {
		msgs := make([]*sarama.ProducerMessage, 0, chunk)
		for j := i; j < min(i+chunk, from+n); j++ {
			msgs = append(msgs, &sarama.ProducerMessage{Topic: topic,
				Key: sarama.StringEncoder("k" + strconv.Itoa(j/run%keys)), Value: sarama.StringEncoder("v" + strconv.Itoa(j))})
		}
		if err := producer.SendMessages(msgs); err != nil {
			return fmt.Errorf("produce: %w", err)
		}
	}
	return nil
}

// consumerConfig is the configuration of the tests' consumers.
func consumerConfig() *kafkaconsumer.Config {
	config := kafkaconsumer.NewConfig()
	config.Version = kafkaVersion()
	config.MaxProcessingTime = 5 * time.Second
	config.Zookeeper.Timeout = 2 * time.Second
	config.Consumer.Offsets.AutoCommit.Interval = 200 * time.Millisecond
	return config
}

// ackLog is a Config.Observer that records the messages acked, by value.
type ackLog struct {
	kafkaconsumer.Observer // HandingOut, HandingOutBatch, TakenBack: unused
	mu                     sync.Mutex
	acked                  map[string]int
}

func (a *ackLog) HandingOut(*sarama.ConsumerMessage)   {}
func (a *ackLog) HandingOutBatch(*kafkaconsumer.Batch) {}
func (a *ackLog) TakenBack(*sarama.ConsumerMessage)    {}
func (a *ackLog) Acked(msg *sarama.ConsumerMessage) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.acked[string(msg.Value)]++
}

func (a *ackLog) snapshot() map[string]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	m := make(map[string]int, len(a.acked))
	for k, v := range a.acked {
		m[k] = v
	}
	return m
}

// handledLog records the values whose handler returned nil.
type handledLog struct {
	mu      sync.Mutex
	handled map[string]int
}

func (h *handledLog) add(value string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.handled[value]++
}

func (h *handledLog) count(value string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.handled[value]
}

func (h *handledLog) len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.handled)
}

// deadLetters reads the dead-letter topic (one partition) from its start
// and returns its messages.
func deadLetters(t testing.TB, brokers []string, topic string) []*sarama.ConsumerMessage {
	t.Helper()
	consumer, err := sarama.NewConsumer(brokers, saramaConfig())
	if err != nil {
		t.Fatalf("consumer: %s", err)
	}
	defer consumer.Close()
	client, err := sarama.NewClient(brokers, saramaConfig())
	if err != nil {
		t.Fatalf("client: %s", err)
	}
	defer client.Close()
	end, err := client.GetOffset(topic, 0, sarama.OffsetNewest)
	if err != nil {
		t.Fatalf("offset of %s: %s", topic, err)
	}
	if end == 0 {
		return nil
	}
	pc, err := consumer.ConsumePartition(topic, 0, sarama.OffsetOldest)
	if err != nil {
		t.Fatalf("consume %s: %s", topic, err)
	}
	defer pc.Close()
	var msgs []*sarama.ConsumerMessage
	timeout := time.After(30 * time.Second)
	for int64(len(msgs)) < end {
		select {
		case msg := <-pc.Messages():
			msgs = append(msgs, msg)
		case <-timeout:
			t.Fatalf("read %d of %d dead letters in 30 s", len(msgs), end)
		}
	}
	return msgs
}

// joinLogged joins group on topic with consumerConfig, its Observer
// recording the acks, changed by configure, and returns the consumer, its ackLog and an empty
// handledLog; the caller closes the consumer.
func joinLogged(t *testing.T, zookeeper, group, topic string, configure ...func(*kafkaconsumer.Config)) (kafkaconsumer.Consumer, *ackLog, *handledLog) {
	t.Helper()
	acks := &ackLog{acked: make(map[string]int)}
	config := consumerConfig()
	config.Observer = acks
	for _, f := range configure {
		f(config)
	}
	consumer, err := kafkaconsumer.Join(group, kafkaconsumer.TopicSubscription(topic), zookeeper, config)
	if err != nil {
		t.Fatal(err)
	}
	return consumer, acks, &handledLog{handled: make(map[string]int)}
}

// headersOf returns the headers of msg by key.
func headersOf(msg *sarama.ConsumerMessage) map[string]string {
	h := make(map[string]string)
	for _, rh := range msg.Headers {
		h[string(rh.Key)] = string(rh.Value)
	}
	return h
}

// runInBackground runs Run until the returned stop is called; stop
// returns Run's error, failing the test when Run does not return within a
// minute.
func runInBackground(t *testing.T, c kafkaconsumer.Consumer, handler Handler, opts Options) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, c, handler, opts) }()
	return func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(time.Minute):
			t.Fatal("Run did not return within a minute of its context's end")
			return nil
		}
	}
}

// TestPoisonMessage: one message of 400 always fails. It is tried 3
// times, then produced to the dead-letter topic with its headers, and
// acked; its partition goes on, and every other value is handled: 0 lost.
func TestPoisonMessage(t *testing.T) {
	zookeeper, brokers := clusterPeers(t)
	topic, dlq, group := uniqueName("process.poison"), uniqueName("process.poison.dead"), uniqueName("process-poison")
	createTopic(t, brokers, topic, 4)
	createTopic(t, brokers, dlq, 1)
	const n, poison = 400, "v123"
	produceKeyed(t, brokers, topic, 0, n, 40, 1)

	consumer, acks, handled := joinLogged(t, zookeeper, group, topic)
	defer consumer.Close()
	var mu sync.Mutex
	tries := 0
	stop := runInBackground(t, consumer, func(ctx context.Context, msg *sarama.ConsumerMessage) error {
		if string(msg.Value) == poison {
			mu.Lock()
			tries++
			mu.Unlock()
			return errors.New("cannot parse " + poison)
		}
		handled.add(string(msg.Value))
		return nil
	}, Options{Concurrency: 16, Ordering: ByKey,
		Retry:      Retry{Attempts: 3, Backoff: 10 * time.Millisecond},
		DeadLetter: DeadLetter{Topic: dlq, Brokers: brokers, Config: saramaConfig()}})

	waitFor(t, time.Minute, "every value to be acked", func() bool { return len(acks.snapshot()) == n })
	if err := stop(); err != nil {
		t.Fatalf("Run: %s", err)
	}
	if err := consumer.Close(); err != nil {
		t.Fatalf("close: %s", err)
	}
	for i := range n {
		v := "v" + strconv.Itoa(i)
		if v != poison && handled.count(v) == 0 {
			t.Errorf("value %s acked but never handled", v)
		}
	}
	letters := deadLetters(t, brokers, dlq)
	if len(letters) != 1 {
		t.Fatalf("%d dead letters, want 1", len(letters))
	}
	h := headersOf(letters[0])
	if string(letters[0].Value) != poison || h[HeaderTopic] != topic || h[HeaderAttempts] != "3" ||
		h[HeaderError] != "cannot parse "+poison || h[HeaderPartition] == "" || h[HeaderOffset] == "" {
		t.Fatalf("dead letter %q with headers %v", letters[0].Value, h)
	}
	mu.Lock()
	defer mu.Unlock()
	if tries != 3 {
		t.Fatalf("the poison message was handled %d times, want 3", tries)
	}
	t.Logf("%d values: %d handled, 1 dead lettered at %s/%s/%s after 3 attempts, 0 lost",
		n, handled.len(), h[HeaderTopic], h[HeaderPartition], h[HeaderOffset])
}

// routeDialer dials each address of routes at its proxy, the others
// directly: the dead-letter producer's Net.Proxy.Dialer.
type routeDialer map[string]string

func (r routeDialer) Dial(network, addr string) (net.Conn, error) {
	if to, ok := r[addr]; ok {
		addr = to
	}
	return net.DialTimeout(network, addr, 10*time.Second)
}

// TestDeadLetterUnreachable: the dead-letter producer reaches the broker
// through a proxy that resets every connection. The poison message is not
// acked while its dead letter cannot be produced (its partition's commit
// stays before it), nothing is acked that was not handled; once the proxy
// passes again, the dead letter lands and the message is acked.
func TestDeadLetterUnreachable(t *testing.T) {
	zookeeper, brokers := clusterPeers(t)
	topic, dlq, group := uniqueName("process.unreachable"), uniqueName("process.unreachable.dead"), uniqueName("process-unreachable")
	createTopic(t, brokers, topic, 4)
	createTopic(t, brokers, dlq, 1)
	const n, poison = 200, "v77"
	produceKeyed(t, brokers, topic, 0, n, 20, 1)

	routes := make(routeDialer)
	var proxies []*testcluster.Proxy
	for _, b := range brokers {
		p, err := testcluster.NewProxy(b)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		p.Reset() // unreachable from the start
		routes[b] = p.Addr()
		proxies = append(proxies, p)
	}
	dlConfig := saramaConfig()
	dlConfig.Net.Proxy.Enable = true
	dlConfig.Net.Proxy.Dialer = routes
	dlConfig.Metadata.Retry.Max = 1
	dlConfig.Producer.Retry.Max = 1

	failures := &failureMetrics{}
	consumer, acks, handled := joinLogged(t, zookeeper, group, topic, func(c *kafkaconsumer.Config) { c.Metrics = failures })
	defer consumer.Close()
	var errs []error // of consumer.Errors(), read by the test's goroutine
	var poisonMu sync.Mutex
	var poisonAt *sarama.ConsumerMessage
	stop := runInBackground(t, consumer, func(ctx context.Context, msg *sarama.ConsumerMessage) error {
		if string(msg.Value) == poison {
			poisonMu.Lock()
			poisonAt = msg
			poisonMu.Unlock()
			return errors.New("poison")
		}
		handled.add(string(msg.Value))
		return nil
	}, Options{Concurrency: 8, Ordering: ByKey,
		Retry:      Retry{Attempts: 2, Backoff: 10 * time.Millisecond, MaxBackoff: 200 * time.Millisecond},
		DeadLetter: DeadLetter{Topic: dlq, Brokers: brokers, Config: dlConfig}})

	// The others are handled, but for those of the poison's key that come
	// after it (keys of 20, poison 77: 77, 97, ..., 197 wait), and the dead
	// letter is tried again and again.
	const behind = (n - 77 + 19) / 20
	waitFor(t, time.Minute, "every value of other keys to be acked, and 5 connections to the cut dead-letter broker", func() bool {
		accepted := 0
		for _, p := range proxies {
			accepted += p.Accepted()
		}
		return len(acks.snapshot()) == n-behind && accepted >= 5
	})
	poisonMu.Lock()
	at := poisonAt
	poisonMu.Unlock()
	// Every other partition commits its end; the poison's stays before it.
	waitFor(t, 10*time.Second, "the other partitions to commit their end", func() bool {
		for _, s := range consumer.Stats() {
			if s.Partition != at.Partition && s.Committed != s.HighWaterMark {
				return false
			}
		}
		return true
	})
	for _, s := range consumer.Stats() {
		if s.Partition == at.Partition && s.Committed > at.Offset {
			t.Fatalf("partition %d commits %d, past the poison message at %d that is not dead lettered yet", s.Partition, s.Committed, at.Offset)
		}
	}
	snapshot := acks.snapshot()
	if snapshot[poison] != 0 {
		t.Fatal("the poison message was acked while its dead letter could not be produced")
	}
	for v := range snapshot {
		if handled.count(v) == 0 {
			t.Fatalf("value %s acked without being handled or dead lettered", v)
		}
	}

	// The failed produce reached Errors() once, with the poison's
	// partition, and the metric, however often it was tried again.
	deadLetterErrors := func() (n int) {
		for _, err := range errs {
			var ce *sarama.ConsumerError
			if errors.As(err, &ce) && ce.Topic == topic && ce.Partition == at.Partition && errors.Is(err, ErrDeadLetter) {
				n++
			}
		}
		return n
	}
	waitFor(t, 10*time.Second, "the failed dead-letter produce on Errors()", func() bool {
		for {
			select {
			case err := <-consumer.Errors():
				errs = append(errs, err)
			default:
				return deadLetterErrors() > 0
			}
		}
	})
	if n := failures.count(); n != 1 {
		t.Errorf("Metrics.DeadLetterFailed called %d times, want 1", n)
	}

	refused := 0
	for _, p := range proxies {
		refused += p.Accepted()
		p.Pass()
	}
	waitFor(t, time.Minute, "the poison message to be acked once the dead-letter broker is back", func() bool { return acks.snapshot()[poison] == 1 })
	if err := stop(); err != nil {
		t.Fatalf("Run: %s", err)
	}
	if err := consumer.Close(); err != nil {
		t.Fatalf("close: %s", err)
	}
	for err := range consumer.Errors() { // closed by Close
		errs = append(errs, err)
	}
	if n := deadLetterErrors(); n != 1 {
		t.Errorf("%d errors of the failed dead-letter produce on Errors(), want 1: %v", n, errs)
	}
	letters := deadLetters(t, brokers, dlq)
	if len(letters) != 1 || string(letters[0].Value) != poison {
		t.Fatalf("%d dead letters, want 1 of %s", len(letters), poison)
	}
	t.Logf("%d connections of the dead-letter producer reset meanwhile, the poison's partition committed at most its offset %d; acked once its dead letter landed",
		refused, at.Offset)
}

// failureMetrics counts the calls of DeadLetterFailed.
type failureMetrics struct {
	kafkaconsumer.BaseMetrics
	mu sync.Mutex
	n  int
}

func (m *failureMetrics) DeadLetterFailed(string, kafkaconsumer.TopicPartition) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.n++
}

func (m *failureMetrics) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n
}
