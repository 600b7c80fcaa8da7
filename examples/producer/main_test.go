package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

func TestUsageErrors(t *testing.T) {
	t.Setenv("KAFKA_PEERS", "")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-topic", "t"}, "-brokers is required"},
		{[]string{"-brokers", "b:9092"}, "-topic is required"},
		{[]string{"-brokers", "b:9092", "-topic", "t", "-rate", "0"}, "-rate must be positive"},
		{[]string{"-brokers", "b:9092", "-topic", "t", "-stats", "-1s"}, "-stats must be positive"},
		{[]string{"-brokers", "b:9092", "-topic", "t", "more"}, `unexpected argument "more"`},
	} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), tc.args, &stdout, &stderr)
		if !errors.As(err, new(usageError)) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want a usage error containing %q", tc.args, err, tc.want)
		}
	}
}

// TestProducerIntegration produces -count messages to a new topic of the
// cluster of KAFKA_PEERS (skipped without it or under -short) and checks
// the summary, the recorded values and the topic's offsets.
func TestProducerIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a cluster; skipped under -short")
	}
	kafka := os.Getenv("KAFKA_PEERS")
	if kafka == "" {
		t.Skip("needs a cluster: set KAFKA_PEERS")
	}
	brokers := strings.Split(kafka, ",")
	topic := fmt.Sprintf("producer-test.%d.%06d", time.Now().UnixNano()%1e9, rand.Intn(1e6))
	client, err := sarama.NewClient(brokers, sarama.NewConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	admin, err := sarama.NewClusterAdmin(brokers, sarama.NewConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 2, ReplicationFactor: 1}, false); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = admin.DeleteTopic(topic) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_ = client.RefreshMetadata(topic)
		if writable, _ := client.WritablePartitions(topic); len(writable) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("topic %s has no leaders after 30s", topic)
		}
		time.Sleep(100 * time.Millisecond) // polling interval
	}

	record := filepath.Join(t.TempDir(), "values")
	var stdout, stderr bytes.Buffer
	args := []string{"-brokers", kafka, "-topic", topic, "-rate", "500", "-count", "50", "-prefix", "p", "-record", record}
	if err := run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("run: %s\n%s%s", err, stdout.String(), stderr.String())
	}
	if want := "SUMMARY role=producer topic=" + topic + " produced=50 failed=0 elapsed="; !strings.Contains(stdout.String(), want) {
		t.Errorf("output lacks %q:\n%s", want, stdout.String())
	}
	values, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, v := range strings.Fields(string(values)) {
		seen[v] = true
	}
	if len(seen) != 50 || !seen["p-0"] || !seen["p-49"] {
		t.Errorf("recorded %d distinct values, want p-0 ... p-49:\n%s", len(seen), values)
	}
	for _, p := range []int32{0, 1} {
		offset, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			t.Fatal(err)
		}
		if offset != 25 {
			t.Errorf("partition %d has %d messages, want 25 (round robin)", p, offset)
		}
	}
}
