package main

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// sampleShareDescription is a share group of two members that share
// both partitions of a topic; partition 1 has no share-partition state
// yet.
func sampleShareDescription() *GroupDescription {
	epoch := int32(2)
	owned := []TopicPartition{{"jobs", 0}, {"jobs", 1}}
	owners := []string{"m-a", "m-b"}
	return &GroupDescription{
		Group: "work", Coordinator: CoordinatorKafka, CoordinatorBroker: "b1:9092", KafkaState: "Stable",
		GroupProtocol: GroupProtocolShare, GroupEpoch: &epoch, AssignmentEpoch: &epoch, Assignor: "simple",
		Brokers: []string{"b1:9092"}, State: StateStable,
		Instances: []Instance{
			{ID: "m-a", ClientID: "jobs", ClientHost: "10.0.0.1", Library: LibraryUnknown, Topics: []string{"jobs"}, MemberEpoch: &epoch, Owned: owned},
			{ID: "m-b", ClientID: "jobs", ClientHost: "10.0.0.2", Library: LibraryUnknown, Topics: []string{"jobs"}, MemberEpoch: &epoch, Owned: owned},
		},
		Partitions: []Partition{
			{TopicPartition: TopicPartition{"jobs", 0}, Owner: "m-a", Owners: owners, OwnerRegistered: true, LogEnd: ptr(10), ShareStartOffset: ptr(7), InFlightAtMost: ptr(3), Lag: ptr(2)},
			{TopicPartition: TopicPartition{"jobs", 1}, Owner: "m-a", Owners: owners, OwnerRegistered: true, LogEnd: ptr(4)},
		},
		TotalLogEnd: 14, TotalLag: 2,
	}
}

func TestRenderShareGroupTable(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	if err := render(&buf, sampleShareDescription(), false); err != nil {
		t.Fatal(err)
	}
	checkLines(t, buf.String(), []string{
		"Group work: Stable, 2 instances, 2 partitions, lag 2 (coordinator kafka at b1:9092, share group, state Stable, group epoch 2, assignment epoch 2, assignor simple; kafka b1:9092)",
		"",
		"INSTANCE EPOCH SUBSCRIPTION CLIENT PARTITIONS",
		"m-a 2 jobs jobs@10.0.0.1 2",
		"m-b 2 jobs jobs@10.0.0.2 2",
		"",
		"TOPIC PARTITION OWNERS START-OFFSET LOG-END IN-FLIGHT<= LAG",
		"jobs 0 m-a,m-b 7 10 3 2",
		"jobs 1 m-a,m-b - 4 - -",
		"TOTAL 14 3 2",
		"IN-FLIGHT<= is LOG-END - START-OFFSET, an upper bound of the records acquired and not yet acknowledged; LAG is the broker's share-partition lag, - when it does not report it.",
	})
}

// TestRenderShareGroupJSON: the share fields are in the JSON under their
// contracted names; a partition without share state has none of them.
func TestRenderShareGroupJSON(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	if err := render(&buf, sampleShareDescription(), true); err != nil {
		t.Fatal(err)
	}
	var desc map[string]any
	if err := decodeJSON(buf.Bytes(), &desc); err != nil {
		t.Fatal(err)
	}
	if err := checkContract("the group", desc, mergeContracts(groupContract, kafkaGroupContract, shareGroupContract)); err != nil {
		t.Fatal(err)
	}
	parts, err := objects("partitions", desc["partitions"])
	if err != nil {
		t.Fatal(err)
	}
	if err := checkContract("partitions[0]", parts[0], mergeContracts(partitionContract, sharePartitionContract)); err != nil {
		t.Error(err)
	}
	for _, name := range []string{"share_start_offset", "in_flight_at_most"} {
		if _, ok := parts[1][name]; ok {
			t.Errorf("partitions[1] has %q, want it absent without share state", name)
		}
	}
	if parts[1]["committed"] != nil {
		t.Errorf("partitions[1] committed %v, want null", parts[1]["committed"])
	}
}

// TestSharePartition: the start offset, the records in flight at most
// and the lag from a share-partition state; -1 (not initialised, not
// reported) leaves them unknown.
func TestSharePartition(t *testing.T) {
	t.Parallel()
	state := func(start, lag int64) *kmsg.DescribeShareGroupOffsetsResponseGroupTopicPartition {
		s := kmsg.NewDescribeShareGroupOffsetsResponseGroupTopicPartition()
		s.StartOffset, s.Lag = start, lag
		return &s
	}
	for _, tc := range []struct {
		name                 string
		state                *kmsg.DescribeShareGroupOffsetsResponseGroupTopicPartition
		start, inFlight, lag *int64
	}{
		{"no state", nil, nil, nil, nil},
		{"not initialised", state(-1, -1), nil, nil, nil},
		{"no lag reported", state(7, -1), ptr(7), ptr(3), nil},
		{"lag reported", state(7, 2), ptr(7), ptr(3), ptr(2)},
	} {
		p := Partition{LogEnd: ptr(10)}
		setShareState(&p, tc.state)
		got := []*int64{p.ShareStartOffset, p.InFlightAtMost, p.Lag}
		if want := []*int64{tc.start, tc.inFlight, tc.lag}; !reflect.DeepEqual(got, want) {
			gotJSON, _ := json.Marshal(got)
			wantJSON, _ := json.Marshal(want)
			t.Errorf("%s: start, in flight, lag = %s, want %s", tc.name, gotJSON, wantJSON)
		}
	}
}
