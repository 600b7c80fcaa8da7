package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer"
)

func TestFormatPartitions(t *testing.T) {
	t.Parallel()
	tp := func(topic string, ps ...int32) []kafkaconsumer.TopicPartition {
		var result []kafkaconsumer.TopicPartition
		for _, p := range ps {
			result = append(result, kafkaconsumer.TopicPartition{Topic: topic, Partition: p})
		}
		return result
	}
	for _, tc := range []struct {
		in   []kafkaconsumer.TopicPartition
		want string
	}{
		{nil, "none"},
		{tp("a", 0), "a[0]"},
		{tp("a", 0, 1, 2, 3), "a[0-3]"},
		{tp("a", 0, 1, 3, 5, 6, 9), "a[0-1,3,5-6,9]"},
		{append(tp("a", 1, 2), tp("b", 0, 7)...), "a[1-2] b[0,7]"},
	} {
		if got := formatPartitions(tc.in); got != tc.want {
			t.Errorf("formatPartitions(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestProgressLine(t *testing.T) {
	t.Parallel()
	start := time.Now()
	p := &progress{start: start, last: start, seen: map[string]struct{}{}}
	p.consumed = 300
	stats := []kafkaconsumer.PartitionStats{
		{TopicPartition: kafkaconsumer.TopicPartition{Topic: "t", Partition: 0}, Claimed: true, Lag: 5},
		{TopicPartition: kafkaconsumer.TopicPartition{Topic: "t", Partition: 1}, Claimed: false, Lag: -1},
	}
	got := p.line(start.Add(2*time.Second), stats)
	want := "partitions=2 (t[0-1], 1 waiting for their previous owner) consumed=300 rate=150/s lag=5"
	if got != want {
		t.Errorf("got %q\nwant %q", got, want)
	}
}

func TestUsageErrors(t *testing.T) {
	t.Setenv("ZOOKEEPER_PEERS", "")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-topic", "t"}, "-zookeeper is required"},
		{[]string{"-zookeeper", "zk:2181"}, "-topic is required"},
		{[]string{"-zookeeper", "zk:2181", "-topic", "t", "-initial", "middle"}, "-initial must be oldest or newest"},
		{[]string{"-zookeeper", "zk:2181", "-topic", "t", "-stats", "0s"}, "-stats must be positive"},
		{[]string{"-zookeeper", "zk:2181", "-topic", "t", "-log", "loud"}, "-log"},
		{[]string{"-zookeeper", "zk:2181", "-topic", "t", "extra"}, `unexpected argument "extra"`},
	} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), tc.args, &stdout, &stderr)
		if !errors.As(err, new(usageError)) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want a usage error containing %q", tc.args, err, tc.want)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for one writer and one reader.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestGroupdemoIntegration runs the command against the cluster of
// ZOOKEEPER_PEERS/KAFKA_PEERS (skipped without them or under -short): it
// consumes what was produced, prints progress and rebalance lines, and on
// cancellation (what SIGTERM does) leaves the group and prints its summary.
func TestGroupdemoIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a cluster; skipped under -short")
	}
	zookeeper, kafka := os.Getenv("ZOOKEEPER_PEERS"), os.Getenv("KAFKA_PEERS")
	if zookeeper == "" || kafka == "" {
		t.Skip("needs a cluster: set ZOOKEEPER_PEERS and KAFKA_PEERS")
	}
	brokers := strings.Split(kafka, ",")
	const messages = 30
	topic := fmt.Sprintf("groupdemo-test.%d.%06d", time.Now().UnixNano()%1e9, rand.Intn(1e6))

	admin, err := sarama.NewClusterAdmin(brokers, sarama.NewConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 3, ReplicationFactor: 1}, false); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = admin.DeleteTopic(topic) }()
	config := sarama.NewConfig()
	config.Producer.Return.Successes = true
	config.Producer.Partitioner = sarama.NewRoundRobinPartitioner
	client, err := sarama.NewClient(brokers, config)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_ = client.RefreshMetadata(topic)
		if writable, _ := client.WritablePartitions(topic); len(writable) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("topic %s has no leaders after 30s", topic)
		}
		time.Sleep(100 * time.Millisecond) // polling interval
	}
	producer, err := sarama.NewSyncProducerFromClient(client)
	if err != nil {
		t.Fatal(err)
	}
	var msgs []*sarama.ProducerMessage
	for i := 0; i < messages; i++ {
		msgs = append(msgs, &sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder(fmt.Sprintf("v-%d", i%20))}) // 10 repeated values
	}
	if err := producer.SendMessages(msgs); err != nil {
		t.Fatalf("produce: %s", err)
	}
	producer.Close()

	deadline = time.Now().Add(60 * time.Second)
	record := filepath.Join(t.TempDir(), "values")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-zookeeper", zookeeper, "-group", topic, "-topic", topic, "-name", "t1", "-stats", "100ms", "-record", record, "-metrics", "127.0.0.1:0", "-log", "debug"}, &stdout, &stderr)
	}()

	consumedAll := regexp.MustCompile(`\[t1\] partitions=3 \(` + regexp.QuoteMeta(topic) + `\[0-2\]\) consumed=30 `)
	for !consumedAll.MatchString(stdout.String()) {
		select {
		case err := <-done:
			t.Fatalf("run ended early: %v\n%s%s", err, stdout.String(), stderr.String())
		case <-time.After(100 * time.Millisecond): // polling interval
		}
		if time.Now().After(deadline) {
			t.Fatalf("no progress line with all %d messages:\n%s%s", messages, stdout.String(), stderr.String())
		}
	}
	// The metrics say the same: 30 messages acked, over 3 partitions.
	url := regexp.MustCompile(`metrics on (http://\S+/metrics)`).FindStringSubmatch(stdout.String())
	if url == nil {
		t.Fatalf("no line with the metrics' address:\n%s", stdout.String())
	}
	acked, series := scrapeSum(t, url[1], "kafkaconsumer_messages_acked_total")
	if acked != messages || series != 3 {
		t.Errorf("kafkaconsumer_messages_acked_total: %v in %d series; want %d in 3", acked, series, messages)
	}
	if !strings.Contains(stderr.String(), "level=DEBUG msg=\"Claimed partition.\" name=t1 group="+topic) {
		t.Errorf("no debug line of a claim on stderr:\n%s", stderr.String())
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %s", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("run did not end within 30s of the cancellation:\n%s", stdout.String())
	}

	out := stdout.String()
	for _, want := range []string{
		"[t1] joined group " + topic,
		"[t1] rebalance: assigned " + topic + "[0-2], revoked none",
		"[t1] stopping: leaving the group (Shutdown, waiting at most 20s for acks)",
		"[t1] rebalance: assigned none, revoked " + topic + "[0-2]",
		"SUMMARY instance=t1 group=" + topic + " consumed=30 distinct=20 duplicates=10 elapsed=",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	values, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(values), "\n"); n != messages {
		t.Errorf("recorded %d values, want %d", n, messages)
	}
}

// scrapeSum gets the metrics page at url and adds the samples of name.
func scrapeSum(t *testing.T, url, name string) (sum float64, series int) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("scrape: %s", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("scrape: %s", err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, name+"{") {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("scrape: %q: %s", line, err)
		}
		sum += v
		series++
	}
	return sum, series
}
