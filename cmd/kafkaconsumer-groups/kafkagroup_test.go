package main

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/IBM/sarama"
)

// encodedMetadata is a member's metadata as Kafka's consumer protocol
// encodes it (JoinGroup's protocol metadata).
func encodedMetadata(t *testing.T, meta *sarama.ConsumerGroupMemberMetadata) []byte {
	t.Helper()
	var req sarama.JoinGroupRequest
	if err := req.AddGroupProtocolMetadata(kafkaAssignor, meta); err != nil {
		t.Fatal(err)
	}
	return req.OrderedGroupProtocols[0].Metadata
}

// encodedAssignment is a member's assignment as Kafka's consumer
// protocol encodes it (SyncGroup's assignment).
func encodedAssignment(t *testing.T, topics map[string][]int32) []byte {
	t.Helper()
	var req sarama.SyncGroupRequest
	if err := req.AddGroupAssignmentMember("m", &sarama.ConsumerGroupMemberAssignment{Topics: topics}); err != nil {
		t.Fatal(err)
	}
	return req.GroupAssignments[0].Assignment
}

// TestMemberInstance decodes members of Kafka's group: the library's
// (user data {"client":...,"migration":1}), a static one, another
// client's, and one whose metadata does not decode.
func TestMemberInstance(t *testing.T) {
	t.Parallel()
	static := "orders-1"
	ours := &sarama.GroupMemberDescription{
		MemberId: "orders-1-abc", GroupInstanceId: &static, ClientId: "svc", ClientHost: "/10.0.0.1",
		MemberMetadata: encodedMetadata(t, &sarama.ConsumerGroupMemberMetadata{Version: 1, Topics: []string{"orders", "audit"},
			UserData: []byte(`{"client":"github.com/kafkaconsumer/kafkaconsumer","migration":1}`)}),
		MemberAssignment: encodedAssignment(t, map[string][]int32{"orders": {2, 0}, "audit": {1}}),
	}
	got := memberInstance("orders-1-abc", ours)
	want := Instance{ID: "orders-1-abc", InstanceID: "orders-1", Static: true, ClientID: "svc", ClientHost: "10.0.0.1",
		Topics: []string{"audit", "orders"}, Library: LibraryKafkaconsumer, Migration: 1,
		Owned: []TopicPartition{{"audit", 1}, {"orders", 0}, {"orders", 2}}}
	if !equalInstances(got, want) {
		t.Errorf("the library's static member:\n got %+v\nwant %+v", got, want)
	}

	other := &sarama.GroupMemberDescription{MemberId: "java-1", ClientId: "consumer-1", ClientHost: "/h",
		MemberMetadata: encodedMetadata(t, &sarama.ConsumerGroupMemberMetadata{Version: 1, Topics: []string{"orders"}})}
	got = memberInstance("java-1", other)
	if got.Library != LibraryOther || got.Migration != 0 || got.Static || len(got.Owned) != 0 || got.Owned == nil || got.Error != "" {
		t.Errorf("another client's member without an assignment: %+v", got)
	}

	broken := &sarama.GroupMemberDescription{MemberId: "x", MemberMetadata: []byte{0, 1, 2}}
	if got = memberInstance("x", broken); !strings.Contains(got.Error, "unreadable member metadata") {
		t.Errorf("a member whose metadata does not decode: %+v, want an error", got)
	}
}

func equalInstances(a, b Instance) bool {
	return a.ID == b.ID && a.InstanceID == b.InstanceID && a.Static == b.Static && a.ClientID == b.ClientID &&
		a.ClientHost == b.ClientHost && slices.Equal(a.Topics, b.Topics) && a.Library == b.Library &&
		a.Migration == b.Migration && slices.Equal(a.Owned, b.Owned) && a.Error == b.Error
}

func TestMemberLibrary(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		data      string
		library   string
		migration int
	}{
		{`{"client":"github.com/kafkaconsumer/kafkaconsumer","migration":1}`, LibraryKafkaconsumer, 1},
		{`{"client":"github.com/kafkaconsumer/kafkaconsumer"}`, LibraryKafkaconsumer, 0},
		{`{"client":"someone else","migration":1}`, LibraryOther, 0},
		{``, LibraryOther, 0},
		{"\x00\x01", LibraryOther, 0},
	} {
		if library, migration := memberLibrary([]byte(tc.data)); library != tc.library || migration != tc.migration {
			t.Errorf("memberLibrary(%q) = %s, %d; want %s, %d", tc.data, library, migration, tc.library, tc.migration)
		}
	}
}

func TestCoordinatesGroup(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		g    sarama.GroupDescription
		want bool
	}{
		{"members", sarama.GroupDescription{State: "Stable", ProtocolType: "consumer", Members: map[string]*sarama.GroupMemberDescription{"m": {}}}, true},
		{"empty, was Kafka's", sarama.GroupDescription{State: "Empty", ProtocolType: "consumer"}, true},
		{"offsets only (a ZooKeeper group's commits)", sarama.GroupDescription{State: "Empty"}, false},
		{"unknown", sarama.GroupDescription{State: "Dead"}, false},
	} {
		if got := coordinatesGroup(&tc.g); got != tc.want {
			t.Errorf("%s: coordinatesGroup = %t, want %t", tc.name, got, tc.want)
		}
	}
}

// TestKafkaGroupState: Kafka's states, and a Stable group one of whose
// subscribed partitions is in no assignment (between the two
// generations of a cooperative rebalance).
func TestKafkaGroupState(t *testing.T) {
	t.Parallel()
	member := []Instance{{ID: "m"}}
	owned := []Partition{{TopicPartition: TopicPartition{"t", 0}, Owner: "m"}, {TopicPartition: TopicPartition{"t", 1}, Owner: "m"}}
	gap := []Partition{{TopicPartition: TopicPartition{"t", 0}, Owner: "m"}, {TopicPartition: TopicPartition{"t", 1}}}
	subscribed := map[TopicPartition]bool{{"t", 0}: true, {"t", 1}: true}
	for _, tc := range []struct {
		kafka      string
		instances  []Instance
		partitions []Partition
		want       string
	}{
		{"Stable", member, owned, StateStable},
		{"Stable", member, gap, StateRebalancing},
		{"PreparingRebalance", member, owned, StateRebalancing},
		{"CompletingRebalance", member, owned, StateRebalancing},
		{"Empty", nil, owned, StateEmpty},
		{"Dead", nil, nil, StateEmpty},
	} {
		desc := &GroupDescription{Instances: tc.instances, Partitions: tc.partitions}
		if got := kafkaGroupState(tc.kafka, desc, subscribed); got != tc.want {
			t.Errorf("Kafka's %s, %d members, %d partitions: %s, want %s", tc.kafka, len(tc.instances), len(tc.partitions), got, tc.want)
		}
	}
}

// sampleKafkaDescription is a Kafka-coordinated group of two members on
// a 3-partition topic, one of them static, one of another client.
func sampleKafkaDescription() *GroupDescription {
	return &GroupDescription{
		Group:             "orders",
		Coordinator:       CoordinatorKafka,
		CoordinatorBroker: "b2:9092",
		KafkaState:        "Stable",
		Zookeeper:         "zk:2181",
		Brokers:           []string{"b1:9092", "b2:9092"},
		State:             StateStable,
		Instances: []Instance{
			{ID: "orders-1-abc", InstanceID: "orders-1", Static: true, ClientID: "svc", ClientHost: "10.0.0.1", Library: LibraryKafkaconsumer, Migration: 1,
				Topics: []string{"orders"}, Owned: []TopicPartition{{"orders", 0}, {"orders", 1}}},
			{ID: "java-9", ClientID: "consumer-1", ClientHost: "10.0.0.2", Library: LibraryOther, Topics: []string{"orders"}, Owned: []TopicPartition{{"orders", 2}}},
		},
		Partitions: []Partition{
			{TopicPartition: TopicPartition{"orders", 0}, Owner: "orders-1-abc", OwnerRegistered: true, Committed: ptr(10), LogEnd: ptr(12), Lag: ptr(2)},
			{TopicPartition: TopicPartition{"orders", 1}, Owner: "orders-1-abc", OwnerRegistered: true, Committed: ptr(7), LogEnd: ptr(7), Lag: ptr(0)},
			{TopicPartition: TopicPartition{"orders", 2}, Owner: "java-9", OwnerRegistered: true, LogEnd: ptr(3)},
		},
		TotalCommitted: 17,
		TotalLogEnd:    22,
		TotalLag:       2,
	}
}

// TestRenderKafkaTable: the same tables as a ZooKeeper-coordinated
// group's, the coordinator named in the first line, the members' clients
// instead of a registration time.
func TestRenderKafkaTable(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	if err := render(&buf, sampleKafkaDescription(), false); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"Group orders: Stable, 2 instances, 3 partitions, lag 2 (coordinator kafka at b2:9092, state Stable; zookeeper zk:2181, kafka b1:9092,b2:9092)",
		"",
		"INSTANCE LIBRARY SUBSCRIPTION CLIENT PARTITIONS",
		"orders-1-abc (static orders-1) kafkaconsumer orders svc@10.0.0.1 2",
		"java-9 other orders consumer-1@10.0.0.2 1",
		"",
		"TOPIC PARTITION OWNER COMMITTED LOG-END LAG",
		"orders 0 orders-1-abc 10 12 2",
		"orders 1 orders-1-abc 7 7 0",
		"orders 2 java-9 - 3 -",
		"TOTAL 17 22 2",
	}
	checkLines(t, buf.String(), want)
}

// TestRenderKafkaEmpty: a Kafka-coordinated group without members,
// described with --bootstrap-server alone (no ZooKeeper).
func TestRenderKafkaEmpty(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	desc := &GroupDescription{Group: "g", Coordinator: CoordinatorKafka, KafkaState: "Empty", Brokers: []string{"b:9092"}, State: StateEmpty}
	if err := render(&buf, desc, false); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Group g: Empty, 0 instances, 0 partitions, lag 0 (coordinator kafka, state Empty; kafka b:9092)", "No member is in Kafka's group.", "No partition"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, buf.String())
		}
	}
	if strings.Contains(buf.String(), "zookeeper") {
		t.Errorf("output names a zookeeper, none was given:\n%s", buf.String())
	}
}

// TestRenderKafkaJSON: the coordinator's fields and the members' in the
// JSON, which reads back as it was.
func TestRenderKafkaJSON(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	desc := sampleKafkaDescription()
	if err := render(&buf, desc, true); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"coordinator": "kafka"`, `"coordinator_broker": "b2:9092"`, `"kafka_state": "Stable"`,
		`"instance_id": "orders-1"`, `"client_id": "svc"`, `"client_host": "10.0.0.1"`, `"migration": 1`, `"topics": [`} {
		if !strings.Contains(buf.String(), key) {
			t.Errorf("JSON lacks %s:\n%s", key, buf.String())
		}
	}
	var back GroupDescription
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back.Coordinator != CoordinatorKafka || !equalInstances(back.Instances[0], desc.Instances[0]) || back.TotalLag != 2 {
		t.Errorf("read back as %+v", back)
	}
}
