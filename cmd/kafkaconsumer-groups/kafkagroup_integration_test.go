package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer"
	"github.com/kafkaconsumer/kafkaconsumer/internal/testcluster"
)

// kafkaCoordinatorPeers is clusterPeers for a test of a CoordinatorKafka
// group, which needs Kafka 2.4 or later: it skips older clusters (make
// test-matrix runs the integration tests on Kafka 1.1).
func kafkaCoordinatorPeers(t *testing.T) (string, []string) {
	t.Helper()
	zookeeper, brokers := clusterPeers(t)
	kafka, _ := testcluster.VersionsFromEnv()
	v, err := sarama.ParseKafkaVersion(kafka)
	if err != nil {
		t.Fatalf("%s=%q: %s", testcluster.KafkaVersionEnv, kafka, err)
	}
	if !v.IsAtLeast(sarama.V2_4_0_0) {
		t.Skipf("CoordinatorKafka supports Kafka 2.4 and later, not %s", kafka)
	}
	return zookeeper, brokers
}

// runJSON runs the command with args and --json, and decodes its output
// into v.
func runJSON(args []string, v any) error {
	var stdout, stderr bytes.Buffer
	if code := run(append(args, "--json", "--timeout", "20s"), &stdout, &stderr); code != exitOK {
		return fmt.Errorf("%s: exit status %d: %s", strings.Join(args, " "), code, stderr.String())
	}
	if err := json.Unmarshal(stdout.Bytes(), v); err != nil {
		return fmt.Errorf("decode %s: %w", stdout.String(), err)
	}
	return nil
}

// TestDescribeKafkaCoordinatedIntegration: two CoordinatorKafka
// instances (one static) share a topic's partitions, then consume its
// messages and ack all but the last of each partition. The command describes the group from Kafka,
// with --bootstrap-server alone and with --zookeeper (where the group has
// no node): both members, their assignments covering every partition
// once, the committed offsets and a lag of one per partition; --list
// names it as Kafka's. After the last acks and Close: Empty, no lag.
func TestDescribeKafkaCoordinatedIntegration(t *testing.T) {
	zookeeper, brokers := kafkaCoordinatorPeers(t)
	checkLeaks(t)
	const partitions, messages = 4, 40
	topic := createTopic(t, brokers, partitions)
	group := "cli-kafka." + topic

	join := func(instanceID string) kafkaconsumer.Consumer {
		t.Helper()
		config := kafkaconsumer.NewConfig()
		config.Coordinator = kafkaconsumer.CoordinatorKafka
		config.Brokers = brokers
		config.InstanceID = instanceID
		config.ClientID = "cli-test"
		config.Consumer.Group.Session.Timeout = 6 * time.Second
		config.Consumer.Group.Heartbeat.Interval = 500 * time.Millisecond
		config.Consumer.Offsets.AutoCommit.Interval = 100 * time.Millisecond
		config.MaxProcessingTime = 2 * time.Second
		consumer, err := kafkaconsumer.Join(group, kafkaconsumer.TopicSubscription(topic), "", config)
		if err != nil {
			t.Fatalf("join: %s", err)
		}
		t.Cleanup(func() { _ = consumer.Close() })
		return consumer
	}
	consumers := []kafkaconsumer.Consumer{join("cli-a"), join("")}
	// --zookeeper= overrides $ZOOKEEPER_PEERS: Kafka alone.
	bootstrap := []string{"--zookeeper=", "--bootstrap-server", strings.Join(brokers, ","), "--group", group}

	// The messages are produced once both members share the partitions,
	// so that none moves after it was handed out (the held-back ones
	// would be handed out again by the next owner).
	waitFor(t, 30*time.Second, "both members to share the topic's partitions", func() error {
		var desc GroupDescription
		if err := runJSON(bootstrap, &desc); err != nil {
			return err
		}
		owned := 0
		for _, instance := range desc.Instances {
			owned += len(instance.Owned)
		}
		if desc.State != StateStable || len(desc.Instances) != 2 || owned != partitions {
			return fmt.Errorf("state %s, %d members, %d partitions assigned", desc.State, len(desc.Instances), owned)
		}
		return nil
	})
	produce(t, brokers, topic, messages)

	// Consume every message; hold back the last one of each partition.
	type delivery struct {
		msg *sarama.ConsumerMessage
		by  kafkaconsumer.Consumer
	}
	deliveries := make(chan delivery)
	stop := make(chan struct{})
	done := make(chan struct{}, len(consumers))
	for _, c := range consumers {
		go func(c kafkaconsumer.Consumer) {
			defer func() { done <- struct{}{} }()
			for {
				select {
				case msg, ok := <-c.Messages():
					if !ok {
						return
					}
					select {
					case deliveries <- delivery{msg, c}:
					case <-stop:
						return
					}
				case <-stop:
					return
				}
			}
		}(c)
	}
	last := make(map[int32]delivery)
	timeout := time.NewTimer(60 * time.Second)
	defer timeout.Stop()
	for received := 0; received < messages; received++ {
		select {
		case d := <-deliveries:
			if prev, ok := last[d.msg.Partition]; ok {
				prev.by.Ack(prev.msg)
			}
			last[d.msg.Partition] = d
		case <-timeout.C:
			t.Fatalf("received %d of %d messages within 60s", received, messages)
		}
	}
	close(stop)
	for range consumers {
		<-done
	}

	check := func(desc *GroupDescription) error {
		if desc.Group != group || desc.Coordinator != CoordinatorKafka || desc.State != StateStable || desc.KafkaState != "Stable" || desc.CoordinatorBroker == "" {
			return fmt.Errorf("group %s, coordinator %s at %q, state %s (Kafka's %s)", desc.Group, desc.Coordinator, desc.CoordinatorBroker, desc.State, desc.KafkaState)
		}
		if len(desc.Instances) != 2 || len(desc.Partitions) != partitions {
			return fmt.Errorf("%d instances, %d partitions; want 2, %d", len(desc.Instances), len(desc.Partitions), partitions)
		}
		owners := make(map[TopicPartition]string)
		statics := 0
		for _, instance := range desc.Instances {
			if instance.Library != LibraryKafkaconsumer || instance.ClientID != "cli-test" || instance.ClientHost == "" || !slices.Equal(instance.Topics, []string{topic}) || instance.Error != "" {
				return fmt.Errorf("member %+v", instance)
			}
			if instance.Static {
				statics++
				if instance.InstanceID != "cli-a" {
					return fmt.Errorf("static member %+v: want instance ID cli-a", instance)
				}
			}
			for _, tp := range instance.Owned {
				owners[tp] = instance.ID
			}
		}
		if statics != 1 {
			return fmt.Errorf("%d static members, want 1", statics)
		}
		for _, p := range desc.Partitions {
			want := last[p.Partition].msg.Offset
			switch {
			case p.Topic != topic || p.Owner == "" || p.Owner != owners[p.TopicPartition] || !p.OwnerRegistered:
				return fmt.Errorf("partition %d owned by %q, in the assignment of %q", p.Partition, p.Owner, owners[p.TopicPartition])
			case p.LogEnd == nil || *p.LogEnd != want+1:
				return fmt.Errorf("partition %d: log end %s, want %d", p.Partition, formatOffset(p.LogEnd), want+1)
			case p.Committed == nil || *p.Committed != want:
				return fmt.Errorf("partition %d: committed %s, want %d", p.Partition, formatOffset(p.Committed), want)
			case p.Lag == nil || *p.Lag != 1:
				return fmt.Errorf("partition %d: lag %s, want 1", p.Partition, formatOffset(p.Lag))
			}
		}
		if desc.TotalLag != partitions || desc.TotalLogEnd != messages || desc.TotalCommitted != messages-partitions {
			return fmt.Errorf("totals: lag %d, log end %d, committed %d", desc.TotalLag, desc.TotalLogEnd, desc.TotalCommitted)
		}
		return nil
	}
	var desc GroupDescription
	waitFor(t, 30*time.Second, "the command (--bootstrap-server alone) to show both members, every partition assigned, a lag of 1 each", func() error {
		desc = GroupDescription{}
		if err := runJSON(bootstrap, &desc); err != nil {
			return err
		}
		if desc.Zookeeper != "" {
			return fmt.Errorf("zookeeper %q, none was given", desc.Zookeeper)
		}
		return check(&desc)
	})
	// ZooKeeper has no node of the group: Kafka's group coordinator
	// knows it, and the same is shown.
	var viaZookeeper GroupDescription
	if err := runJSON([]string{"--zookeeper", zookeeper, "--group", group}, &viaZookeeper); err != nil {
		t.Fatal(err)
	}
	if err := check(&viaZookeeper); err != nil {
		t.Errorf("with --zookeeper: %s", err)
	}

	// The table shows the same, the coordinator named.
	var stdout, stderr bytes.Buffer
	if code := run(bootstrap, &stdout, &stderr); code != exitOK {
		t.Fatalf("exit status %d: %s", code, stderr.String())
	}
	// Columns are aligned to the member IDs' width: compare with runs of
	// spaces collapsed.
	var collapsed []string
	for _, line := range strings.Split(stdout.String(), "\n") {
		collapsed = append(collapsed, strings.Join(strings.Fields(line), " "))
	}
	table := strings.Join(collapsed, "\n")
	for _, want := range []string{"Group " + group + ": Stable, 2 instances, 4 partitions, lag 4 (coordinator kafka at " + desc.CoordinatorBroker,
		"INSTANCE LIBRARY SUBSCRIPTION CLIENT PARTITIONS", "(static cli-a) kafkaconsumer " + topic + " cli-test@",
		"TOPIC PARTITION OWNER COMMITTED LOG-END LAG", "TOTAL 36 40 4"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, stdout.String())
		}
	}

	// Listed, as Kafka's, from Kafka alone and with ZooKeeper.
	for _, args := range [][]string{{"--zookeeper=", "--bootstrap-server", strings.Join(brokers, ","), "--list"}, {"--zookeeper", zookeeper, "--list"}} {
		var groups []GroupSummary
		if err := runJSON(args, &groups); err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(groups, GroupSummary{Group: group, Coordinator: CoordinatorKafka, GroupProtocol: GroupProtocolClassic, Instances: 2}) {
			t.Errorf("%s does not show %s, kafka, classic, 2 members: %+v", strings.Join(args, " "), group, groups)
		}
	}

	// Ack the rest and leave: everything committed, no member.
	for _, d := range last {
		d.by.Ack(d.msg)
	}
	for _, c := range consumers {
		if err := c.Close(); err != nil {
			t.Fatalf("close: %s", err)
		}
	}
	waitFor(t, 30*time.Second, "the command to show an empty group with no lag", func() error {
		for _, args := range [][]string{bootstrap, {"--zookeeper", zookeeper, "--group", group}} {
			desc = GroupDescription{}
			if err := runJSON(args, &desc); err != nil {
				return err
			}
			if desc.Coordinator != CoordinatorKafka || desc.State != StateEmpty || len(desc.Instances) != 0 || desc.TotalLag != 0 || desc.TotalCommitted != messages {
				var ps []string
				for _, p := range desc.Partitions {
					ps = append(ps, fmt.Sprintf("%d:%s/%s", p.Partition, formatOffset(p.Committed), formatOffset(p.LogEnd)))
				}
				return fmt.Errorf("%s: coordinator %s, state %s, %d instances, lag %d, committed %d (%s)", args[0], desc.Coordinator, desc.State, len(desc.Instances), desc.TotalLag, desc.TotalCommitted, strings.Join(ps, " "))
			}
		}
		return nil
	})
}

// TestDescribeUnknownGroupKafkaIntegration: with --bootstrap-server
// alone, a group that Kafka does not know is unknown.
func TestDescribeUnknownGroupKafkaIntegration(t *testing.T) {
	_, brokers := kafkaCoordinatorPeers(t)
	checkLeaks(t)
	group := fmt.Sprintf("cli-test.no-such-group.%d", time.Now().UnixNano())
	var stdout, stderr bytes.Buffer
	if code := run([]string{"--zookeeper=", "--bootstrap-server", strings.Join(brokers, ","), "--group", group}, &stdout, &stderr); code != exitError {
		t.Errorf("exit status %d, want %d: %s", code, exitError, stderr.String())
	}
	if want := fmt.Sprintf("unknown consumer group %q: Kafka's group coordinator does not know it", group); !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr lacks %q: %s", want, stderr.String())
	}
}
