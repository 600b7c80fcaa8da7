package main

// The migrate verb and groups of Kafka's consumer group protocol
// (KIP-848), on Kafka 4: --to zookeeper refuses while consumer-protocol
// members share the group, and --to kafka --protocol consumer|classic
// reports and waits for the rolling restart that moves a group between
// the protocols. Skipped on brokers without the protocol.

import (
	"bytes"
	"fmt"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/go-zookeeper/zk"
	"github.com/kafkaconsumer/kafkaconsumer"
)

// protocolMigrateConfig is the configuration of the library's instances
// in these tests: brokers found in Kafka (a KRaft cluster's ZooKeeper
// lists none), sarama's Version 3.8 so that a follower asks ListGroups
// v5 for a consumer-protocol group's state, and short timeouts.
func protocolMigrateConfig(brokers []string) *kafkaconsumer.Config {
	config := kafkaconsumer.NewConfig()
	config.Version = sarama.V3_8_0_0
	config.Discovery = kafkaconsumer.DiscoverFromKafka
	config.Brokers = brokers
	config.MaxProcessingTime = time.Second
	config.Zookeeper.Timeout = 3 * time.Second
	config.Consumer.Offsets.AutoCommit.Interval = 100 * time.Millisecond
	config.Consumer.Group.Session.Timeout = 6 * time.Second
	config.Consumer.Group.Heartbeat.Interval = 500 * time.Millisecond
	return config
}

// joinDraining joins an instance of the library (CoordinatorKafka when
// zookeeper is "") and acks everything it hands out until it is closed,
// at the latest at the end of the test. The returned func closes it
// and waits for its drain; calling it again is harmless.
func joinDraining(t *testing.T, group, topic, zookeeper string, config *kafkaconsumer.Config) func() {
	t.Helper()
	c, err := kafkaconsumer.Join(group, kafkaconsumer.TopicSubscription(topic), zookeeper, config)
	if err != nil {
		t.Fatalf("join: %s", err)
	}
	done := make(chan struct{}) // closed when the drain ends: Close closes Messages
	go func() {
		defer close(done)
		for msg := range c.Messages() {
			c.Ack(msg)
		}
	}()
	stop := func() {
		_ = c.Close()
		<-done
	}
	t.Cleanup(stop)
	return stop
}

// migrateArgs runs the migrate verb with args and returns its exit
// status and output.
func migrateArgs(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := run(append([]string{"migrate"}, args...), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// readSwitchNode returns the value of the group's coordinator switch.
func readSwitchNode(t *testing.T, zookeeper, group string) string {
	t.Helper()
	nodes, chroot, err := parseZookeeper(zookeeper)
	if err != nil {
		t.Fatal(err)
	}
	conn, _, err := zk.Connect(nodes, 10*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	data, _, err := conn.Get(path.Join(chroot+"/consumers", group, "coordinator"))
	if err != nil {
		t.Fatalf("read the switch: %s", err)
	}
	return string(data)
}

// TestMigrateConsumerProtocolRefusesZookeeperIntegration: a group moved
// to Kafka (one instance that follows the switch) is joined by a member
// of the consumer protocol (franz-go), which runs without ZooKeeper and
// cannot see the switch. Kafka 4's DescribeGroups describes the group as
// Dead with no members; migrate --to zookeeper must not take that for
// an empty group: it refuses, names the consumer-protocol member and
// leaves the switch at kafka.
func TestMigrateConsumerProtocolRefusesZookeeperIntegration(t *testing.T) {
	zookeeper, brokers := consumerProtocolPeers(t)
	if zookeeper == "" {
		t.Skip("needs ZOOKEEPER_PEERS: the group starts in ZooKeeper")
	}
	topic := createTopic(t, brokers, 4)
	group := "cli-848-back." + topic
	bootstrap := strings.Join(brokers, ",")
	joinDraining(t, group, topic, zookeeper, protocolMigrateConfig(brokers))
	waitFor(t, 30*time.Second, "the instance to register in ZooKeeper", func() error {
		desc, err := describeGroup(zookeeper, zookeeperAccess{}, group, 10*time.Second, kafkaAccess{bootstrap: brokers})
		if err == nil && len(desc.Instances) != 1 {
			err = fmt.Errorf("%d instances", len(desc.Instances))
		}
		return err
	})
	code, stdout, stderr := migrateArgs("--zookeeper", zookeeper, "--bootstrap-server", bootstrap, "--group", group, "--to", "kafka", "--wait", "60s", "--timeout", "20s")
	if code != exitOK || !strings.Contains(stdout, "Stable with 1 members") {
		t.Fatalf("migrate --to kafka: exit status %d: %s%s", code, stdout, stderr)
	}

	startConsumerProtocolMember(t, brokers, group, topic, "cli-848-intruder", 0)
	waitFor(t, 60*time.Second, "the group to hold a classic and a consumer-protocol member", func() error {
		desc, err := describeGroup(zookeeper, zookeeperAccess{}, group, 10*time.Second, kafkaAccess{bootstrap: brokers})
		if err != nil {
			return err
		}
		count := map[string]int{}
		for _, m := range desc.Instances {
			count[m.MemberProtocol]++
		}
		if desc.GroupProtocol != GroupProtocolConsumer || count[GroupProtocolClassic] != 1 || count[GroupProtocolConsumer] != 1 {
			return fmt.Errorf("group protocol %q, members by protocol %v", desc.GroupProtocol, count)
		}
		return nil
	})

	code, stdout, stderr = migrateArgs("--zookeeper", zookeeper, "--bootstrap-server", bootstrap, "--group", group, "--to", "zookeeper", "--wait", "20s", "--timeout", "20s")
	t.Logf("migrate --to zookeeper: exit status %d: %s%s", code, stdout, stderr)
	if code != exitError {
		t.Errorf("migrate --to zookeeper beside a consumer-protocol member: exit status %d, want %d", code, exitError)
	}
	for _, want := range []string{"refused", "cli-848-intruder", "consumer protocol"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("migrate --to zookeeper said %q, want it to contain %q", stderr, want)
		}
	}
	if value := readSwitchNode(t, zookeeper, group); value != switchKafka {
		t.Errorf("the switch says %q after migrate --to zookeeper, want it left at kafka", value)
	}
}
