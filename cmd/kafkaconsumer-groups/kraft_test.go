package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kafkaconsumer/kafkaconsumer"
	"github.com/kafkaconsumer/kafkaconsumer/internal/testcluster"
)

// TestDescribeKRaftIntegration starts a KRaft cluster (Kafka 3.9.1, or
// $KAFKACONSUMER_TEST_KRAFT_VERSION, e.g. 4.4.0), lets a group that finds
// its brokers in Kafka consume there, and describes it with
// --bootstrap-server: the group's ZooKeeper holds no brokers. Without the
// flag the command fails and says to give it.
func TestDescribeKRaftIntegration(t *testing.T) {
	c := startCluster(t, testcluster.Options{Mode: testcluster.ModeKRaft, KafkaVersion: os.Getenv("KAFKACONSUMER_TEST_KRAFT_VERSION")})
	checkLeaks(t)
	const topic, partitions, messages = "cli-kraft", 2, 10
	if err := c.CreateTopic(topic, partitions, 1); err != nil {
		t.Fatal(err)
	}
	produce(t, c.KafkaPeers(), topic, messages)

	// A group consumes and acks everything, and stays.
	group := "cli-kraft-group"
	config := kafkaconsumer.NewConfig()
	config.Discovery = kafkaconsumer.DiscoverFromKafka
	config.Brokers = c.KafkaPeers()
	config.Consumer.Offsets.AutoCommit.Interval = 100 * time.Millisecond
	consumer, err := kafkaconsumer.Join(group, kafkaconsumer.TopicSubscription(topic), c.ZookeeperPeers(), config)
	if err != nil {
		t.Fatalf("join: %s", err)
	}
	defer func() { _ = consumer.Close() }()
	consumeAll(t, consumer, messages)

	base := []string{"--zookeeper", c.ZookeeperPeers(), "--group", group, "--json", "--timeout", "10s"}
	var stdout, stderr bytes.Buffer
	if code := run(base, &stdout, &stderr); code != exitError || !strings.Contains(stderr.String(), "--bootstrap-server") {
		t.Errorf("without --bootstrap-server: exit status %d, stderr %q; want %d and a word about --bootstrap-server", code, stderr.String(), exitError)
	}
	args := append(base, "--bootstrap-server", strings.Join(c.KafkaPeers(), ","))
	waitFor(t, 30*time.Second, "the command to show the group stable, every message committed", func() error {
		stdout.Reset()
		stderr.Reset()
		if code := run(args, &stdout, &stderr); code != exitOK {
			return fmt.Errorf("exit status %d: %s", code, stderr.String())
		}
		var desc GroupDescription
		if err := json.Unmarshal(stdout.Bytes(), &desc); err != nil {
			return fmt.Errorf("decode %s: %s", stdout.String(), err)
		}
		if desc.State != StateStable || len(desc.Instances) != 1 || len(desc.Partitions) != partitions || desc.TotalCommitted != messages || desc.TotalLag != 0 {
			return fmt.Errorf("state %s, %d instances, %d partitions, committed %d, lag %d; want Stable, 1, %d, %d, 0",
				desc.State, len(desc.Instances), len(desc.Partitions), desc.TotalCommitted, desc.TotalLag, partitions, messages)
		}
		if got, want := strings.Join(desc.Brokers, ","), strings.Join(c.KafkaPeers(), ","); got != want {
			return fmt.Errorf("brokers %s, want %s", got, want)
		}
		for _, p := range desc.Partitions {
			if p.Owner != desc.Instances[0].ID || !p.OwnerRegistered {
				return fmt.Errorf("partition %d owned by %q (registered %t)", p.Partition, p.Owner, p.OwnerRegistered)
			}
		}
		return nil
	})
}
