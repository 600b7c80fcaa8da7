package main

// The integration test runs against the real cluster named by
// ZOOKEEPER_PEERS and KAFKA_PEERS (make test sets them); it is skipped
// under -short or when they are not set.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/go-zookeeper/zk"
	"github.com/kafkaconsumer/kafkaconsumer"
	"github.com/kafkaconsumer/kafkaconsumer/internal/testcluster"
)

// clusterPeers returns the test cluster's ZooKeeper connection string and
// brokers, or skips the test.
func clusterPeers(t *testing.T) (string, []string) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a ZooKeeper and Kafka cluster; skipped under -short")
	}
	zookeeper, kafka := os.Getenv("ZOOKEEPER_PEERS"), os.Getenv("KAFKA_PEERS")
	if zookeeper == "" || kafka == "" {
		t.Skip("needs a cluster: set ZOOKEEPER_PEERS and KAFKA_PEERS (make cluster-up writes them to .cluster/env)")
	}
	return zookeeper, strings.Split(kafka, ",")
}

// waitFor polls cond until it returns nil, failing the test with its last
// error after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s: %s", timeout, what, err)
		}
		time.Sleep(50 * time.Millisecond) // polling interval, not synchronisation
	}
}

// createTopic creates a topic with the given number of partitions, waits
// until they all have leaders, and deletes it at the end of the test.
func createTopic(t *testing.T, brokers []string, partitions int32) string {
	t.Helper()
	topic := fmt.Sprintf("cli-test.%d.%06d", time.Now().UnixNano()%1e9, rand.Intn(1e6))
	admin, err := sarama.NewClusterAdmin(brokers, sarama.NewConfig())
	if err != nil {
		t.Fatalf("connect to kafka: %s", err)
	}
	t.Cleanup(func() {
		if err := admin.DeleteTopic(topic); err != nil {
			t.Logf("delete topic %s: %s", topic, err)
		}
		admin.Close()
	})
	if err := admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: 1}, false); err != nil {
		t.Fatalf("create topic %s: %s", topic, err)
	}
	client, err := sarama.NewClient(brokers, sarama.NewConfig())
	if err != nil {
		t.Fatalf("connect to kafka: %s", err)
	}
	defer client.Close()
	waitFor(t, 30*time.Second, "the topic's partitions to have leaders", func() error {
		if err := client.RefreshMetadata(topic); err != nil {
			return err
		}
		ids, err := client.WritablePartitions(topic)
		if err != nil {
			return err
		}
		if len(ids) != int(partitions) {
			return fmt.Errorf("%d of %d partitions writable", len(ids), partitions)
		}
		return nil
	})
	return topic
}

// produce writes n messages to topic, round robin over its partitions.
func produce(t *testing.T, brokers []string, topic string, n int) {
	t.Helper()
	produceWith(t, sarama.NewConfig(), brokers, topic, n)
}

// produceWith is produce with a client configuration of the caller's (a
// secured cluster's).
func produceWith(t *testing.T, config *sarama.Config, brokers []string, topic string, n int) {
	t.Helper()
	config.Producer.Return.Successes = true
	config.Producer.RequiredAcks = sarama.WaitForAll
	config.Producer.Partitioner = sarama.NewRoundRobinPartitioner
	// Idempotent, so that a retried request (a slow broker on a busy
	// machine) writes no record twice: the tests count the log's records.
	config.Producer.Idempotent = true
	config.Net.MaxOpenRequests = 1
	producer, err := sarama.NewSyncProducer(brokers, config)
	if err != nil {
		t.Fatalf("producer: %s", err)
	}
	defer producer.Close()
	msgs := make([]*sarama.ProducerMessage, n)
	for i := range msgs {
		msgs[i] = &sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder(fmt.Sprintf("value-%d", i))}
	}
	if err := producer.SendMessages(msgs); err != nil {
		t.Fatalf("produce: %s", err)
	}
}

// startCluster starts a cluster of the test's own, closed at its end.
func startCluster(t *testing.T, opts testcluster.Options) *testcluster.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("starts ZooKeeper and Kafka JVMs; skipped under -short")
	}
	began := time.Now()
	opts.QuickBrokers = true // short-lived: start with less CPU
	c, err := testcluster.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	t.Logf("cluster (Kafka %s, %s, %s) started in %s", c.KafkaVersion(), c.Mode(), opts.Security, time.Since(began).Round(100*time.Millisecond))
	return c
}

// consumeAll receives n messages from consumer within 60 s and acks them.
func consumeAll(t *testing.T, consumer kafkaconsumer.Consumer, n int) {
	t.Helper()
	timeout := time.NewTimer(60 * time.Second)
	defer timeout.Stop()
	for received := 0; received < n; received++ {
		select {
		case msg := <-consumer.Messages():
			consumer.Ack(msg)
		case <-timeout.C:
			t.Fatalf("received %d of %d messages within 60s", received, n)
		}
	}
}

// describeJSON runs the command with --json and decodes its output.
func describeJSON(zookeeper, group string) (*GroupDescription, error) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"--zookeeper", zookeeper, "--group", group, "--json", "--timeout", "20s"}, &stdout, &stderr); code != exitOK {
		return nil, fmt.Errorf("exit status %d: %s", code, stderr.String())
	}
	var desc GroupDescription
	if err := json.Unmarshal(stdout.Bytes(), &desc); err != nil {
		return nil, fmt.Errorf("decode %s: %w", stdout.String(), err)
	}
	return &desc, nil
}

// TestDescribeGroupIntegration joins a group with the library, consumes
// messages and acks all but the last of each partition, and checks that
// the command shows the instance, its partitions, the committed offsets and
// a lag of one per partition; then, after the last acks and Close, no
// instance, no owners and no lag. The same with CommitLastProcessed (the
// group's commits are one lower in Kafka, marked so).
func TestDescribeGroupIntegration(t *testing.T) {
	for _, lastProcessed := range []bool{false, true} {
		t.Run(fmt.Sprintf("CommitLastProcessed=%t", lastProcessed), func(t *testing.T) {
			testDescribeGroup(t, lastProcessed)
		})
	}
}

func testDescribeGroup(t *testing.T, lastProcessed bool) {
	zookeeper, brokers := clusterPeers(t)
	checkLeaks(t)
	const partitions, messages = 4, 40
	topic := createTopic(t, brokers, partitions)
	group := "cli-test." + topic
	produce(t, brokers, topic, messages)

	config := kafkaconsumer.NewConfig()
	config.CommitLastProcessed = lastProcessed
	config.Consumer.Offsets.AutoCommit.Interval = 100 * time.Millisecond
	config.MaxProcessingTime = 10 * time.Second
	consumer, err := kafkaconsumer.Join(group, kafkaconsumer.TopicSubscription(topic), zookeeper, config)
	if err != nil {
		t.Fatalf("join: %s", err)
	}
	closed := false
	defer func() {
		if !closed {
			_ = consumer.Close()
		}
	}()

	// Consume every message; hold back the last one of each partition.
	last := make(map[int32]*sarama.ConsumerMessage)
	timeout := time.NewTimer(60 * time.Second)
	defer timeout.Stop()
	for received := 0; received < messages; received++ {
		select {
		case msg := <-consumer.Messages():
			if prev := last[msg.Partition]; prev != nil {
				consumer.Ack(prev)
			}
			last[msg.Partition] = msg
		case err := <-consumer.Errors():
			t.Fatalf("consumer error: %s", err)
		case <-timeout.C:
			t.Fatalf("received %d of %d messages within 60s", received, messages)
		}
	}
	if len(last) != partitions {
		t.Fatalf("messages from %d partitions, want %d", len(last), partitions)
	}

	var desc *GroupDescription
	waitFor(t, 30*time.Second, "the command to show one instance owning every partition, with a lag of 1 each", func() error {
		if desc, err = describeJSON(zookeeper, group); err != nil {
			return err
		}
		if desc.Group != group || desc.State != StateStable || len(desc.Instances) != 1 || len(desc.Partitions) != partitions {
			return fmt.Errorf("group %s, state %s, %d instances, %d partitions", desc.Group, desc.State, len(desc.Instances), len(desc.Partitions))
		}
		instance := desc.Instances[0]
		if instance.Pattern != "static" || instance.Subscription[topic] != 1 || instance.Registered == nil || len(instance.Owned) != partitions || instance.Library != LibraryKafkaconsumer {
			return fmt.Errorf("instance %+v", instance)
		}
		for _, p := range desc.Partitions {
			switch {
			case p.Topic != topic || p.Owner != instance.ID || !p.OwnerRegistered:
				return fmt.Errorf("partition %s/%d owned by %q (registered %t), want %s", p.Topic, p.Partition, p.Owner, p.OwnerRegistered, instance.ID)
			case p.LogEnd == nil || *p.LogEnd != last[p.Partition].Offset+1:
				return fmt.Errorf("partition %d: log end %s, want %d", p.Partition, formatOffset(p.LogEnd), last[p.Partition].Offset+1)
			case p.Committed == nil || *p.Committed != last[p.Partition].Offset:
				return fmt.Errorf("partition %d: committed %s, want %d", p.Partition, formatOffset(p.Committed), last[p.Partition].Offset)
			case p.Lag == nil || *p.Lag != 1:
				return fmt.Errorf("partition %d: lag %s, want 1", p.Partition, formatOffset(p.Lag))
			}
		}
		if desc.TotalLag != partitions || desc.TotalLogEnd != messages || desc.TotalCommitted != messages-partitions {
			return fmt.Errorf("totals: lag %d, log end %d, committed %d", desc.TotalLag, desc.TotalLogEnd, desc.TotalCommitted)
		}
		return nil
	})
	if len(desc.Brokers) == 0 {
		t.Errorf("no brokers in %+v", desc)
	}

	// The table shows the same.
	var stdout, stderr bytes.Buffer
	if code := run([]string{"--zookeeper", zookeeper, "--group", group}, &stdout, &stderr); code != exitOK {
		t.Fatalf("exit status %d: %s", code, stderr.String())
	}
	table := stdout.String()
	for _, want := range []string{"Group " + group + ": Stable, 1 instance, 4 partitions, lag 4", desc.Instances[0].ID + "  kafkaconsumer", "static: " + topic} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}

	// The group is listed, with its instance.
	stdout.Reset()
	if code := run([]string{"--zookeeper", zookeeper, "--list", "--json"}, &stdout, &stderr); code != exitOK {
		t.Fatalf("--list: exit status %d: %s", code, stderr.String())
	}
	var groups []GroupSummary
	if err := json.Unmarshal(stdout.Bytes(), &groups); err != nil {
		t.Fatalf("--list --json: %s\n%s", err, stdout.String())
	}
	found := false
	for _, g := range groups {
		found = found || g == GroupSummary{Group: group, Coordinator: CoordinatorZooKeeper, Instances: 1}
	}
	if !found {
		t.Errorf("--list does not show %s with 1 instance: %s", group, stdout.String())
	}

	// Ack the rest and leave: everything committed, nobody registered.
	for _, msg := range last {
		consumer.Ack(msg)
	}
	closed = true
	if err := consumer.Close(); err != nil {
		t.Fatalf("close: %s", err)
	}
	waitFor(t, 30*time.Second, "the command to show an empty group with no lag", func() error {
		if desc, err = describeJSON(zookeeper, group); err != nil {
			return err
		}
		if desc.State != StateEmpty || len(desc.Instances) != 0 || desc.TotalLag != 0 || desc.TotalCommitted != messages {
			return fmt.Errorf("state %s, %d instances, lag %d, committed %d", desc.State, len(desc.Instances), desc.TotalLag, desc.TotalCommitted)
		}
		for _, p := range desc.Partitions {
			if p.Owner != "" {
				return fmt.Errorf("partition %d still owned by %s", p.Partition, p.Owner)
			}
		}
		return nil
	})
}

func TestDescribeUnknownGroupIntegration(t *testing.T) {
	zookeeper, _ := clusterPeers(t)
	checkLeaks(t)
	group := fmt.Sprintf("cli-test.no-such-group.%d", time.Now().UnixNano())
	_, err := describeGroup(zookeeper, zookeeperAccess{}, group, 20*time.Second, kafkaAccess{})
	if !errors.Is(err, ErrUnknownGroup) {
		t.Fatalf("got %v, want an error wrapping ErrUnknownGroup", err)
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"--zookeeper", zookeeper, "--group", group}, &stdout, &stderr); code != exitError {
		t.Errorf("exit status %d, want %d", code, exitError)
	}
	if want := fmt.Sprintf("unknown consumer group %q", group); !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr lacks %q: %s", want, stderr.String())
	}
}

// TestDescribeDigestGroupIntegration: a group whose nodes have a digest
// ACL is described with --zookeeper-digest-user and the password in
// $ZOOKEEPER_DIGEST_PASSWORD; without them the command fails, saying that
// ZooKeeper refused.
func TestDescribeDigestGroupIntegration(t *testing.T) {
	zookeeper, brokers := clusterPeers(t)
	checkLeaks(t)
	topic := createTopic(t, brokers, 2)
	group := "cli-digest." + topic
	produce(t, brokers, topic, 10)

	config := kafkaconsumer.NewConfig()
	config.ZookeeperAuth = []kafkaconsumer.ZookeeperCredential{kafkaconsumer.DigestCredential("cli", "secret")}
	config.ZookeeperACL = zk.DigestACL(zk.PermAll, "cli", "secret")
	config.Consumer.Offsets.AutoCommit.Interval = 100 * time.Millisecond
	consumer, err := kafkaconsumer.Join(group, kafkaconsumer.TopicSubscription(topic), zookeeper, config)
	if err != nil {
		t.Fatalf("join: %s", err)
	}
	defer func() { _ = consumer.Close() }()
	consumeAll(t, consumer, 10)

	var stdout, stderr bytes.Buffer
	if code := run([]string{"--zookeeper", zookeeper, "--group", group, "--timeout", "20s"}, &stdout, &stderr); code != exitError ||
		!strings.Contains(stderr.String(), "not authenticated") {
		t.Errorf("without credentials: exit status %d, stderr %q; want %d and ZooKeeper's \"not authenticated\"", code, stderr.String(), exitError)
	}
	t.Setenv("ZOOKEEPER_DIGEST_PASSWORD", "secret")
	stdout.Reset()
	stderr.Reset()
	if code := run([]string{"--zookeeper", zookeeper, "--group", group, "--zookeeper-digest-user", "cli", "--json", "--timeout", "20s"}, &stdout, &stderr); code != exitOK {
		t.Fatalf("with credentials: exit status %d: %s", code, stderr.String())
	}
	var desc GroupDescription
	if err := json.Unmarshal(stdout.Bytes(), &desc); err != nil {
		t.Fatalf("decode %s: %v", stdout.String(), err)
	}
	if len(desc.Instances) != 1 {
		t.Errorf("with credentials: %d instances, want 1: %s", len(desc.Instances), stdout.String())
	}
}

// TestDescribeStaticMembersIntegration: instances with an InstanceID are
// marked static; one that left, within its RestartGrace, is listed as
// departed, and its partition as awaiting its return.
func TestDescribeStaticMembersIntegration(t *testing.T) {
	zookeeper, brokers := clusterPeers(t)
	checkLeaks(t)
	topic := createTopic(t, brokers, 2)
	group := "cli-test." + topic
	var consumers []kafkaconsumer.Consumer
	for _, id := range []string{"pod-0", "pod-1"} {
		config := kafkaconsumer.NewConfig()
		config.InstanceID, config.RestartGrace = id, time.Minute
		config.MaxProcessingTime = 2 * time.Second
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		c, err := kafkaconsumer.JoinContext(ctx, group, kafkaconsumer.TopicSubscription(topic), zookeeper, config)
		cancel()
		if err != nil {
			t.Fatalf("join %s: %s", id, err)
		}
		defer func() { _ = c.Close() }()
		consumers = append(consumers, c)
	}
	waitFor(t, 30*time.Second, "both static instances to own a partition", func() error {
		desc, err := describeJSON(zookeeper, group)
		if err != nil {
			return err
		}
		if desc.State != StateStable || len(desc.Instances) != 2 || !desc.Instances[0].Static || !desc.Instances[1].Static {
			return fmt.Errorf("state %s, instances %+v", desc.State, desc.Instances)
		}
		return nil
	})
	owned := consumers[1].Stats()
	if len(owned) != 1 {
		t.Fatalf("pod-1 runs %v, want one partition", owned)
	}
	if err := consumers[1].Close(); err != nil {
		t.Fatal(err)
	}
	desc, err := describeJSON(zookeeper, group)
	if err != nil {
		t.Fatal(err)
	}
	if desc.State != StateAwaitingReturn || len(desc.Instances) != 1 || len(desc.Departed) != 1 || desc.Departed[0].ID != "pod-1" ||
		desc.Departed[0].Until == nil || !desc.Departed[0].Until.After(time.Now()) {
		t.Fatalf("state %s, instances %+v, departed %+v; want pod-1 departed, awaited", desc.State, desc.Instances, desc.Departed)
	}
	for _, p := range desc.Partitions {
		if p.Partition == owned[0].Partition && (p.AwaitingReturn != "pod-1" || p.Owner != "") {
			t.Errorf("pod-1's partition %d: owner %q, awaiting %q; want nobody's, awaiting pod-1", p.Partition, p.Owner, p.AwaitingReturn)
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"--zookeeper", zookeeper, "--group", group}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit status %d: %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "Departed static member pod-1") || !strings.Contains(stdout.String(), "(awaiting pod-1)") {
		t.Errorf("the table does not show pod-1 awaited:\n%s", stdout.String())
	}
}
