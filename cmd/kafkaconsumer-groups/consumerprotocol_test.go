package main

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func assignment(topic string, partitions ...int32) kmsg.Assignment {
	return kmsg.Assignment{TopicPartitions: []kmsg.AssignmentTopicPartition{{Topic: topic, Partitions: partitions}}}
}

// TestConsumerMember: a member of ConsumerGroupDescribe's answer becomes
// an instance with its epoch, subscription, both assignments (sorted,
// empty rather than nil), static ID, rack and how it joined.
func TestConsumerMember(t *testing.T) {
	t.Parallel()
	instanceID, rack, regex := "billing-a", "eu-1a", ""
	got := consumerMember(kmsg.ConsumerGroupDescribeResponseGroupMember{
		MemberID: "m1", InstanceID: &instanceID, RackID: &rack, MemberEpoch: 7,
		ClientID: "svc", ClientHost: "/10.0.0.1",
		SubscribedTopics: []string{"orders", "audit"}, SubscribedTopicRegex: &regex,
		Assignment:       assignment("orders", 3, 1),
		TargetAssignment: assignment("orders", 1),
		MemberType:       memberTypeConsumer,
	})
	epoch, target := int32(7), []TopicPartition{{"orders", 1}}
	want := Instance{
		ID: "m1", InstanceID: "billing-a", Static: true, Rack: "eu-1a", ClientID: "svc", ClientHost: "10.0.0.1",
		Library: LibraryUnknown, MemberEpoch: &epoch, MemberProtocol: GroupProtocolConsumer,
		Topics: []string{"audit", "orders"}, Owned: []TopicPartition{{"orders", 1}, {"orders", 3}}, TargetAssignment: &target,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}

	regex = `orders\..*`
	got = consumerMember(kmsg.ConsumerGroupDescribeResponseGroupMember{MemberID: "m2", SubscribedTopicRegex: &regex, MemberType: memberTypeClassic})
	if got.TopicRegex != regex || got.Topics != nil || got.MemberProtocol != GroupProtocolClassic || got.Static ||
		got.Owned == nil || len(got.Owned) != 0 || got.TargetAssignment == nil || len(*got.TargetAssignment) != 0 {
		t.Errorf("a classic member with a regex and no assignment: %+v", got)
	}
	if got := consumerMember(kmsg.ConsumerGroupDescribeResponseGroupMember{MemberType: -1}); got.MemberProtocol != "" {
		t.Errorf("member type -1 (v0: not said): member protocol %q, want none", got.MemberProtocol)
	}
}

// sampleConsumerDescription is a consumer-protocol group reconciling: m2
// joined, m1 has yet to give it orders/1.
func sampleConsumerDescription() *GroupDescription {
	groupEpoch, assignmentEpoch, e1, e2 := int32(5), int32(5), int32(4), int32(5)
	t1, t2 := []TopicPartition{{"orders", 0}}, []TopicPartition{{"orders", 1}}
	return &GroupDescription{
		Group: "orders", Coordinator: CoordinatorKafka, CoordinatorBroker: "b1:9092", KafkaState: "Reconciling",
		GroupProtocol: GroupProtocolConsumer, GroupEpoch: &groupEpoch, AssignmentEpoch: &assignmentEpoch, Assignor: "uniform",
		Brokers: []string{"b1:9092"}, State: StateRebalancing,
		Instances: []Instance{
			{ID: "m1", ClientID: "svc", ClientHost: "10.0.0.1", Library: LibraryUnknown, MemberEpoch: &e1, MemberProtocol: GroupProtocolConsumer,
				Topics: []string{"orders"}, Owned: []TopicPartition{{"orders", 0}, {"orders", 1}}, TargetAssignment: &t1},
			{ID: "m2", InstanceID: "b", Static: true, ClientID: "svc", ClientHost: "10.0.0.2", Library: LibraryUnknown, MemberEpoch: &e2, MemberProtocol: GroupProtocolClassic,
				TopicRegex: `ord.*`, Owned: []TopicPartition{}, TargetAssignment: &t2},
		},
		Partitions: []Partition{
			{TopicPartition: TopicPartition{"orders", 0}, Owner: "m1", OwnerRegistered: true, TargetOwner: "m1", Committed: ptr(4), LogEnd: ptr(5), Lag: ptr(1)},
			{TopicPartition: TopicPartition{"orders", 1}, Owner: "m1", OwnerRegistered: true, TargetOwner: "m2", Committed: ptr(5), LogEnd: ptr(5), Lag: ptr(0)},
		},
		TotalCommitted: 9, TotalLogEnd: 10, TotalLag: 1,
	}
}

// TestRenderConsumerProtocolTable: the group's epochs and assignor in the
// first line; the members' epochs and target sizes; a partition on its
// way to another member.
func TestRenderConsumerProtocolTable(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	if err := render(&buf, sampleConsumerDescription(), false); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"Group orders: Rebalancing, 2 instances, 2 partitions, lag 1 (coordinator kafka at b1:9092, consumer protocol, state Reconciling, group epoch 5, assignment epoch 5, assignor uniform; kafka b1:9092)",
		"",
		"INSTANCE EPOCH SUBSCRIPTION CLIENT PARTITIONS TARGET",
		"m1 4 orders svc@10.0.0.1 2 1",
		"m2 (static b) (classic) 5 regex: ord.* svc@10.0.0.2 0 1",
		"",
		"TOPIC PARTITION OWNER COMMITTED LOG-END LAG",
		"orders 0 m1 4 5 1",
		"orders 1 m1 (to m2) 5 5 0",
		"TOTAL 9 10 1",
	}
	checkLines(t, buf.String(), want)
}

// TestRenderConsumerProtocolJSON: the new fields of the contract, as
// documented, and a classic group's output without them.
func TestRenderConsumerProtocolJSON(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	if err := render(&buf, sampleConsumerDescription(), true); err != nil {
		t.Fatal(err)
	}
	var desc map[string]any
	if err := decodeJSON(buf.Bytes(), &desc); err != nil {
		t.Fatal(err)
	}
	if err := checkContract("the group", desc, mergeContracts(groupContract, kafkaGroupContract, consumerGroupContract)); err != nil {
		t.Error(err)
	}
	instances, err := objects("instances", desc["instances"])
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range instances {
		if err := checkContract("an instance", m, mergeContracts(instanceContract, consumerInstanceContract)); err != nil {
			t.Error(err)
		}
	}
	for _, key := range []string{`"group_protocol": "consumer"`, `"group_epoch": 5`, `"assignor": "uniform"`, `"member_epoch": 4`,
		`"member_protocol": "classic"`, `"topic_regex": "ord.*"`, `"target_owner": "m2"`, `"library": "unknown"`} {
		if !strings.Contains(buf.String(), key) {
			t.Errorf("JSON lacks %s:\n%s", key, buf.String())
		}
	}

	buf.Reset()
	if err := render(&buf, sampleKafkaDescription(), true); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"group_epoch", "assignment_epoch", "assignor", "member_epoch", "target_assignment", "target_owner", "topic_regex"} {
		if strings.Contains(buf.String(), `"`+key+`"`) {
			t.Errorf("a classic group's JSON has %s:\n%s", key, buf.String())
		}
	}
	var back GroupDescription
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
}

// TestFranzSASL: the franz-go client authenticates with the mechanism
// the sarama one does, and none without --sasl-mechanism.
func TestFranzSASL(t *testing.T) {
	t.Parallel()
	for _, mechanism := range saslMechanisms {
		a := kafkaAccess{saslMechanism: mechanism, saslUser: "u", saslPassword: "p"}
		m := a.franzSASL()
		if m == nil || m.Name() != mechanism {
			t.Errorf("%s: franz-go mechanism %v", mechanism, m)
		}
		cfg := sarama.NewConfig()
		a.configure(cfg)
		if string(cfg.Net.SASL.Mechanism) != mechanism || !cfg.Net.SASL.Enable {
			t.Errorf("%s: sarama mechanism %s (enabled %t)", mechanism, cfg.Net.SASL.Mechanism, cfg.Net.SASL.Enable)
		}
	}
	if m := (kafkaAccess{}).franzSASL(); m != nil {
		t.Errorf("no SASL: franz-go mechanism %s", m.Name())
	}
	if opts := (kafkaAccess{}).franzOptions(); len(opts) != 0 {
		t.Errorf("no TLS nor SASL: %d options", len(opts))
	}
}
