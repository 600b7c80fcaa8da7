package main

// The migrate verb and groups of Kafka's consumer group protocol
// (KIP-848), on Kafka 4: --to zookeeper refuses while consumer-protocol
// members share the group, and --to kafka --protocol consumer|classic
// reports and waits for the rolling restart that moves a group between
// the protocols. Skipped on brokers without the protocol.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"
	"sync"
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

// TestMigrateConsumerProtocolRefusesKafkaIntegration: a group whose
// instance is registered in ZooKeeper shares its name with a group of
// Kafka's consumer protocol that has a member (franz-go): another
// consumer uses the name. Kafka 4's DescribeGroups describes that group
// as Dead with no members; migrate --to kafka must still refuse, as it
// does for a classic group with members, and leave the switch unset.
func TestMigrateConsumerProtocolRefusesKafkaIntegration(t *testing.T) {
	zookeeper, brokers := consumerProtocolPeers(t)
	if zookeeper == "" {
		t.Skip("needs ZOOKEEPER_PEERS: the group starts in ZooKeeper")
	}
	topic := createTopic(t, brokers, 2)
	group := "cli-848-name." + topic
	joinDraining(t, group, topic, zookeeper, protocolMigrateConfig(brokers))
	startConsumerProtocolMember(t, brokers, group, topic, "cli-848-namesake", 0)
	k, err := openBootstrap(kafkaAccess{bootstrap: brokers}, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer k.close()
	waitFor(t, 60*time.Second, "the registration in ZooKeeper and the consumer-protocol member in Kafka", func() error {
		desc, err := describeGroup(zookeeper, zookeeperAccess{}, group, 10*time.Second, kafkaAccess{bootstrap: brokers})
		if err != nil {
			return err
		}
		k.renew(20 * time.Second)
		st, err := k.protocolStatus(group)
		if err == nil && (len(desc.Instances) != 1 || desc.Coordinator != CoordinatorZooKeeper || st.ConsumerMembers != 1) {
			err = fmt.Errorf("%d instances in ZooKeeper (coordinator %s); %s", len(desc.Instances), desc.Coordinator, st.summary())
		}
		return err
	})
	code, stdout, stderr := migrateArgs("--zookeeper", zookeeper, "--bootstrap-server", strings.Join(brokers, ","), "--group", group, "--to", "kafka", "--wait", "10s", "--timeout", "20s")
	t.Logf("migrate --to kafka: exit status %d: %s%s", code, stdout, stderr)
	if code != exitError || !strings.Contains(stderr, "refused") || !strings.Contains(stderr, "cli-848-namesake") {
		t.Errorf("migrate --to kafka beside a consumer-protocol group of the name: exit status %d, want %d, refused, naming cli-848-namesake", code, exitError)
	}
	if value, _ := readSwitchValue(t, zookeeper, group); value == switchKafka {
		t.Errorf("the switch says kafka after the refusal")
	}
}

// readSwitchValue returns the value of the group's coordinator switch,
// and false when it has none.
func readSwitchValue(t *testing.T, zookeeper, group string) (string, bool) {
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
	if errors.Is(err, zk.ErrNoNode) {
		return "", false
	}
	if err != nil {
		t.Fatalf("read the switch: %s", err)
	}
	return string(data), true
}

// switchedToKafka starts a group in ZooKeeper, on a new topic of 4
// partitions, with one instance of the library that follows the switch,
// and moves it to Kafka (migrate --to kafka). The group's name is prefix
// and the topic's. It skips without a consumer-protocol cluster and
// ZooKeeper.
func switchedToKafka(t *testing.T, prefix string) (zookeeper string, brokers []string, topic, group string) {
	t.Helper()
	zookeeper, brokers = consumerProtocolPeers(t)
	if zookeeper == "" {
		t.Skip("needs ZOOKEEPER_PEERS: the group starts in ZooKeeper")
	}
	topic = createTopic(t, brokers, 4)
	group = prefix + "." + topic
	joinDraining(t, group, topic, zookeeper, protocolMigrateConfig(brokers))
	waitFor(t, 30*time.Second, "the instance to register in ZooKeeper", func() error {
		desc, err := describeGroup(zookeeper, zookeeperAccess{}, group, 10*time.Second, kafkaAccess{bootstrap: brokers})
		if err == nil && len(desc.Instances) != 1 {
			err = fmt.Errorf("%d instances", len(desc.Instances))
		}
		return err
	})
	code, stdout, stderr := migrateArgs("--zookeeper", zookeeper, "--bootstrap-server", strings.Join(brokers, ","), "--group", group, "--to", "kafka", "--wait", "60s", "--timeout", "20s")
	if code != exitOK || !strings.Contains(stdout, "Stable with 1 members") {
		t.Fatalf("migrate --to kafka: exit status %d: %s%s", code, stdout, stderr)
	}
	return zookeeper, brokers, topic, group
}

// TestMigrateConsumerProtocolRefusesZookeeperIntegration: a group moved
// to Kafka (one instance that follows the switch) is joined by a member
// of the consumer protocol (franz-go), which runs without ZooKeeper and
// cannot see the switch. Kafka 4's DescribeGroups describes the group as
// Dead with no members; migrate --to zookeeper must not take that for
// an empty group: it refuses, names the consumer-protocol member and
// leaves the switch at kafka.
func TestMigrateConsumerProtocolRefusesZookeeperIntegration(t *testing.T) {
	zookeeper, brokers, topic, group := switchedToKafka(t, "cli-848-back")
	bootstrap := strings.Join(brokers, ",")

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

	// migrate --to kafka again finds the group coordinated by Kafka, and
	// Stable with its two members, though DescribeGroups says Dead.
	code, stdout, stderr := migrateArgs("--zookeeper", zookeeper, "--bootstrap-server", bootstrap, "--group", group, "--to", "kafka", "--wait", "20s", "--timeout", "20s")
	if code != exitOK || !strings.Contains(stdout, "Stable with 2 members") {
		t.Errorf("migrate --to kafka on the switched consumer-protocol group: exit status %d: %s%s; want 0, Stable with 2 members", code, stdout, stderr)
	}

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
	if value, _ := readSwitchValue(t, zookeeper, group); value != switchKafka {
		t.Errorf("the switch says %q after migrate --to zookeeper, want it left at kafka", value)
	}
}

// migrateRun is a migrate verb run in the background.
type migrateRun struct {
	done           chan struct{} // closed when the run returned
	code           int           // set before done is closed
	stdout, stderr lockedBuffer  // written by the run until done
}

// lockedBuffer is a bytes.Buffer that a run writes while the test reads.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer // guarded by mu
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// awaitSaid waits until the run has written want to stderr: the test
// restarts the instances once the tool says it waits for that, as a
// user would.
func (r *migrateRun) awaitSaid(t *testing.T, want string) {
	t.Helper()
	waitFor(t, 90*time.Second, fmt.Sprintf("migrate to say %q", want), func() error {
		select {
		case <-r.done:
			t.Fatalf("migrate returned with exit status %d before it said %q: %s", r.code, want, r.stderr.String())
		default:
		}
		if !strings.Contains(r.stderr.String(), want) {
			return fmt.Errorf("it said %q", r.stderr.String())
		}
		return nil
	})
}

// startMigrate runs the migrate verb with args in the background; the
// test waits for it at its end at the latest.
func startMigrate(t *testing.T, args ...string) *migrateRun {
	r := &migrateRun{done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.code = run(append([]string{"migrate"}, args...), &r.stdout, &r.stderr)
	}()
	t.Cleanup(func() { <-r.done })
	return r
}

// wait waits up to timeout for the run to return, and returns its exit
// status.
func (r *migrateRun) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-r.done:
		return r.code
	case <-time.After(timeout):
		t.Fatalf("migrate did not return within %s", timeout)
		return 0
	}
}

// checkProtocolJSON checks the output of migrate --protocol --json: the
// contract's fields and types, a group done on protocol with members
// members all of it, switched as given.
func checkProtocolJSON(t *testing.T, out []byte, group, protocol string, members int, switched bool) {
	t.Helper()
	var st map[string]any
	if err := decodeJSON(out, &st); err != nil {
		t.Fatal(err)
	}
	if err := checkContract("migrate --json", st, migrateProtocolContract); err != nil {
		t.Fatal(err)
	}
	ms, err := objects("members", st["members"])
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range ms {
		where := fmt.Sprintf("members[%d]", i)
		if err := checkContract(where, m, protocolMemberContract); err != nil {
			t.Fatal(err)
		}
		if m["member_protocol"] != protocol {
			t.Errorf("%s uses the %v protocol, want %s", where, m["member_protocol"], protocol)
		}
	}
	count := func(name string) int {
		n, _ := st[name].(json.Number).Int64()
		return int(n)
	}
	on := count(protocol + "_members")
	if st["group"] != group || st["coordinator"] != "kafka" || st["switched"] != switched || st["target_protocol"] != protocol ||
		st["group_protocol"] != protocol || st["kafka_state"] != "Stable" || st["done"] != true ||
		len(ms) != members || on != members || count("classic_members")+count("consumer_members") != members || count("min_members") > members {
		t.Errorf("migrate --json: %s; want group %s done, Stable, switched %t, %d members of the %s protocol", out, group, switched, members, protocol)
	}
}

// TestMigrateConsumerProtocolIntegration: a group of two instances
// coordinated by ZooKeeper is moved to Kafka and to the consumer
// protocol, then back to the classic protocol. migrate --to kafka
// --protocol consumer switches it to Kafka first, says to restart the
// instances with GroupProtocolConsumer and waits while the test does so
// one at a time; it ends done, in the JSON contract's fields. migrate
// --to kafka --protocol classic, with --bootstrap-server alone, waits
// for the rolling restart back to classic CoordinatorKafka instances; a
// last run without --wait finds nothing to do.
func TestMigrateConsumerProtocolIntegration(t *testing.T) {
	zookeeper, brokers := consumerProtocolPeers(t)
	if zookeeper == "" {
		t.Skip("needs ZOOKEEPER_PEERS: the group starts in ZooKeeper")
	}
	topic := createTopic(t, brokers, 4)
	group := "cli-848-move." + topic
	bootstrap := strings.Join(brokers, ",")
	produce(t, brokers, topic, 40)
	stops := []func(){
		joinDraining(t, group, topic, zookeeper, protocolMigrateConfig(brokers)),
		joinDraining(t, group, topic, zookeeper, protocolMigrateConfig(brokers)),
	}
	k, err := openBootstrap(kafkaAccess{bootstrap: brokers}, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer k.close()
	status := func() (*ProtocolStatus, error) {
		k.renew(20 * time.Second)
		return k.protocolStatus(group)
	}
	waitFor(t, 30*time.Second, "both instances to register in ZooKeeper", func() error {
		desc, err := describeGroup(zookeeper, zookeeperAccess{}, group, 10*time.Second, kafkaAccess{bootstrap: brokers})
		if err == nil && len(desc.Instances) != 2 {
			err = fmt.Errorf("%d instances", len(desc.Instances))
		}
		return err
	})

	// To the consumer protocol: the tool switches the group to Kafka and
	// waits while the instances are restarted one at a time.
	toConsumer := startMigrate(t, "--zookeeper", zookeeper, "--bootstrap-server", bootstrap, "--group", group,
		"--to", "kafka", "--protocol", "consumer", "--json", "--wait", "120s", "--timeout", "20s")
	// roll restarts the instances one at a time as CoordinatorKafka
	// instances of config, once r says it waits.
	roll := func(r *migrateRun, to string, config func() *kafkaconsumer.Config) {
		r.awaitSaid(t, "Waiting until")
		for i := range stops {
			stop := joinDraining(t, group, topic, "", config())
			stops[i]()
			stops[i] = stop
			waitFor(t, 60*time.Second, fmt.Sprintf("%d members of the %s protocol", i+1, to), func() error {
				st, err := status()
				if err != nil {
					return err
				}
				if n := map[string]int{GroupProtocolClassic: st.ClassicMembers, GroupProtocolConsumer: st.ConsumerMembers}[to]; n != i+1 || len(st.Members) != 2 {
					return fmt.Errorf("%s", st.summary())
				}
				return nil
			})
		}
	}
	roll(toConsumer, GroupProtocolConsumer, func() *kafkaconsumer.Config {
		config := protocolMigrateConfig(brokers)
		config.Coordinator = kafkaconsumer.CoordinatorKafka
		config.GroupProtocol = kafkaconsumer.GroupProtocolConsumer
		return config
	})
	code := toConsumer.wait(t, 150*time.Second)
	t.Logf("migrate --to kafka --protocol consumer: exit status %d; stderr:\n%s", code, toConsumer.stderr.String())
	if code != exitOK {
		t.Fatalf("migrate --to kafka --protocol consumer: exit status %d, want %d", code, exitOK)
	}
	for _, want := range []string{"switching it to Kafka's group coordinator first", "GroupProtocolConsumer", "Done after"} {
		if !strings.Contains(toConsumer.stderr.String(), want) {
			t.Errorf("migrate --to kafka --protocol consumer did not say %q", want)
		}
	}
	checkProtocolJSON(t, []byte(toConsumer.stdout.String()), group, GroupProtocolConsumer, 2, true)

	// Back to the classic protocol, Kafka alone (--zookeeper= overrides
	// $ZOOKEEPER_PEERS).
	toClassic := startMigrate(t, "--zookeeper=", "--bootstrap-server", bootstrap, "--group", group,
		"--to", "kafka", "--protocol", "classic", "--json", "--wait", "120s", "--timeout", "20s")
	roll(toClassic, GroupProtocolClassic, func() *kafkaconsumer.Config {
		config := protocolMigrateConfig(brokers)
		config.Coordinator = kafkaconsumer.CoordinatorKafka
		return config
	})
	code = toClassic.wait(t, 150*time.Second)
	t.Logf("migrate --to kafka --protocol classic: exit status %d; stderr:\n%s", code, toClassic.stderr.String())
	if code != exitOK {
		t.Fatalf("migrate --to kafka --protocol classic: exit status %d, want %d", code, exitOK)
	}
	checkProtocolJSON(t, []byte(toClassic.stdout.String()), group, GroupProtocolClassic, 2, false)

	// Once there, a run without --wait has nothing to do.
	code, stdout, stderr := migrateArgs("--zookeeper", zookeeper, "--bootstrap-server", bootstrap, "--group", group,
		"--to", "kafka", "--protocol", "classic", "--json", "--wait", "0s", "--timeout", "20s")
	if code != exitOK || !strings.Contains(stderr, "nothing to do") {
		t.Errorf("migrate --protocol classic --wait 0 on a classic group: exit status %d: %s", code, stderr)
	}
	checkProtocolJSON(t, []byte(stdout), group, GroupProtocolClassic, 2, false)
}

// TestMigrateBackUndoesForLateConsumerProtocolMemberIntegration: a
// member of the consumer protocol (franz-go) joins a group moved to
// Kafka between migrate --to zookeeper's check of the members and its
// write of the switch (the test's beforeSwitch hook). It cannot see the
// switch: migrate must notice it after the write, set the switch back
// to kafka, and refuse naming it, rather than leave the followers
// waiting for a group that never empties.
func TestMigrateBackUndoesForLateConsumerProtocolMemberIntegration(t *testing.T) {
	zookeeper, brokers, topic, group := switchedToKafka(t, "cli-848-late")

	var out bytes.Buffer
	err := migrateGroup(zookeeper, zookeeperAccess{}, kafkaAccess{bootstrap: brokers}, 20*time.Second, migration{
		group: group, to: switchZookeeper, wait: 20 * time.Second, out: &out,
		beforeSwitch: func() {
			startConsumerProtocolMember(t, brokers, group, topic, "cli-848-late", 0)
			waitFor(t, 60*time.Second, "the consumer-protocol member to join", func() error {
				desc, err := describeGroup(zookeeper, zookeeperAccess{}, group, 10*time.Second, kafkaAccess{bootstrap: brokers})
				if err == nil && desc.GroupProtocol != GroupProtocolConsumer {
					err = fmt.Errorf("group protocol %q", desc.GroupProtocol)
				}
				return err
			})
		},
	})
	t.Logf("migrate --to zookeeper: %v; %s", err, out.String())
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "cli-848-late") {
		t.Errorf("migrate --to zookeeper with a consumer-protocol member joined before the switch: %v, want a refusal naming cli-848-late", err)
	}
	if value, _ := readSwitchValue(t, zookeeper, group); value != switchKafka {
		t.Errorf("the switch says %q after the refusal, want it set back to kafka", value)
	}
}
