package main

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func ptr(v int64) *int64 { return &v }

// sampleDescription is a group of two instances on a 3-partition topic:
// partition 2 has no committed offset, and one partition of a deleted
// topic is still claimed by an instance that is gone.
func sampleDescription() *GroupDescription {
	registered := time.Date(2025, 12, 2, 13, 40, 1, 0, time.UTC)
	return &GroupDescription{
		Group:     "orders",
		Zookeeper: "zk:2181/kafka",
		Brokers:   []string{"b1:9092", "b2:9092"},
		State:     StateRebalancing,
		Instances: []Instance{
			{ID: "host-a:1111", Library: LibraryKafkaconsumer, Pattern: "static", Subscription: map[string]int{"orders": 1, "audit": 1}, Registered: &registered,
				Owned: []TopicPartition{{"orders", 0}, {"orders", 1}}},
			{ID: "host-b:2222", Library: LibraryOriginal, Pattern: "white_list", Subscription: map[string]int{`^orders$`: 1}, Owned: []TopicPartition{}},
			{ID: "host-c:3333", Error: "unreadable registration", Owned: []TopicPartition{}},
		},
		Partitions: []Partition{
			{TopicPartition: TopicPartition{"old", 0}, Owner: "host-gone:9", Committed: ptr(5), Error: "partition not found in kafka"},
			{TopicPartition: TopicPartition{"orders", 0}, Owner: "host-a:1111", OwnerRegistered: true, Committed: ptr(10), LogEnd: ptr(12), Lag: ptr(2)},
			{TopicPartition: TopicPartition{"orders", 1}, Owner: "host-a:1111", OwnerRegistered: true, Committed: ptr(7), LogEnd: ptr(7), Lag: ptr(0)},
			{TopicPartition: TopicPartition{"orders", 2}, LogEnd: ptr(3)},
		},
		TotalCommitted: 22,
		TotalLogEnd:    22,
		TotalLag:       2,
	}
}

func TestRenderTable(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	if err := render(&buf, sampleDescription(), false); err != nil {
		t.Fatal(err)
	}
	got := buf.String()
	// Columns are aligned by tabwriter; compare the lines with runs of
	// spaces collapsed, so that the test does not depend on widths.
	want := []string{
		"Group orders: Rebalancing, 3 instances, 4 partitions, lag 2 (zookeeper zk:2181/kafka, kafka b1:9092,b2:9092)",
		"",
		"INSTANCE LIBRARY SUBSCRIPTION REGISTERED PARTITIONS",
		"host-a:1111 kafkaconsumer static: audit,orders 2025-12-02T13:40:01Z 2",
		"host-b:2222 original white_list: ^orders$ - 0",
		"host-c:3333 - (unreadable registration) - 0",
		"",
		"TOPIC PARTITION OWNER COMMITTED LOG-END LAG",
		"old 0 host-gone:9 (not registered) 5 - -",
		"orders 0 host-a:1111 10 12 2",
		"orders 1 host-a:1111 7 7 0",
		"orders 2 - - 3 -",
		"TOTAL 22 22 2",
		"note: old/0: partition not found in kafka",
	}
	lines := checkLines(t, got, want)
	// The columns line up: the COMMITTED header and values start at the
	// same position.
	col := strings.Index(lines[7], "COMMITTED")
	if !strings.HasPrefix(lines[9][col:], "10") {
		t.Errorf("columns not aligned:\n%s", got)
	}
}

func TestRenderEmpty(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	desc := &GroupDescription{Group: "g", Zookeeper: "zk:2181", Brokers: []string{"b:9092"}, State: StateEmpty}
	if err := render(&buf, desc, false); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Group g: Empty, 0 instances, 0 partitions, lag 0", "No instance is registered.", "No partition"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, buf.String())
		}
	}
}

func TestRenderJSON(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	desc := sampleDescription()
	if err := render(&buf, desc, true); err != nil {
		t.Fatal(err)
	}

	// Unknown numbers are null, not -1 or 0.
	var raw struct {
		Partitions []map[string]any `json:"partitions"`
	}
	if err := json.Unmarshal(buf.Bytes(), &raw); err != nil {
		t.Fatalf("invalid JSON: %s\n%s", err, buf.String())
	}
	p2 := raw.Partitions[3]
	if p2["committed"] != nil || p2["lag"] != nil || p2["log_end"] != float64(3) {
		t.Errorf("orders/2 = %v, want committed and lag null, log_end 3", p2)
	}
	if _, ok := p2["owner"]; ok {
		t.Errorf("orders/2 has an owner field, want none: %v", p2)
	}

	// The JSON reads back into the same description.
	var back GroupDescription
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	var again bytes.Buffer
	if err := render(&again, &back, true); err != nil {
		t.Fatal(err)
	}
	if again.String() != buf.String() {
		t.Errorf("JSON does not round-trip:\n%s\nvs\n%s", buf.String(), again.String())
	}
	for _, key := range []string{`"group": "orders"`, `"state": "Rebalancing"`, `"total_lag": 2`, `"registered": "2025-12-02T13:40:01Z"`, `"owned": []`} {
		if !strings.Contains(buf.String(), key) {
			t.Errorf("JSON lacks %s:\n%s", key, buf.String())
		}
	}
}

func TestRenderGroups(t *testing.T) {
	t.Parallel()
	groups := []GroupSummary{{Group: "a", Coordinator: CoordinatorZooKeeper, Instances: 2}, {Group: "bb", Coordinator: CoordinatorKafka, GroupProtocol: GroupProtocolConsumer, Instances: 0}}
	var buf bytes.Buffer
	if err := renderGroups(&buf, groups, false); err != nil {
		t.Fatal(err)
	}
	if want := "GROUP  COORDINATOR  PROTOCOL  INSTANCES\na      zookeeper    -         2\nbb     kafka        consumer  0\n"; buf.String() != want {
		t.Errorf("got\n%s\nwant\n%s", buf.String(), want)
	}
	buf.Reset()
	refused := []GroupSummary{{Group: "acl", Error: "not readable"}}
	if err := renderGroups(&buf, refused, false); err != nil {
		t.Fatal(err)
	}
	if want := "GROUP  COORDINATOR  PROTOCOL  INSTANCES\nacl    -            -         -\nnote: acl: not readable\n"; buf.String() != want {
		t.Errorf("a group not readable: got\n%s\nwant\n%s", buf.String(), want)
	}
	buf.Reset()
	if err := renderGroups(&buf, groups, true); err != nil {
		t.Fatal(err)
	}
	var back []GroupSummary
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil || len(back) != 2 || back[0] != groups[0] {
		t.Errorf("JSON %s read back as %v, %v", buf.String(), back, err)
	}
	buf.Reset()
	if err := renderGroups(&buf, nil, true); err != nil || strings.TrimSpace(buf.String()) != "[]" {
		t.Errorf("no groups in JSON: %q, %v; want []", buf.String(), err)
	}
}

func TestParseRegistration(t *testing.T) {
	t.Parallel()
	ms := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC).UnixMilli()
	for _, tc := range []struct {
		name, data string
		wantErr    bool
		library    string
	}{
		{"library", `{"client":"github.com/kafkaconsumer/kafkaconsumer","pattern":"static","subscription":{"t":1},"timestamp":"` + strconv.FormatInt(ms, 10) + `","version":1}`, false, LibraryKafkaconsumer},
		{"original (string timestamp)", `{"pattern":"static","subscription":{"t":1},"timestamp":"` + strconv.FormatInt(ms, 10) + `","version":1}`, false, LibraryOriginal},
		{"kazoo-go (number timestamp)", `{"pattern":"static","subscription":{"t":1},"timestamp":` + strconv.FormatInt(ms, 10) + `,"version":1}`, false, LibraryOriginal},
		{"garbage", `not json`, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			instance := parseRegistration("id", []byte(tc.data))
			if tc.wantErr {
				if instance.Error == "" {
					t.Errorf("no error for %s", tc.data)
				}
				return
			}
			if instance.Error != "" || instance.Pattern != "static" || instance.Subscription["t"] != 1 || instance.Library != tc.library {
				t.Errorf("got %+v", instance)
			}
			if instance.Registered == nil || instance.Registered.UnixMilli() != ms {
				t.Errorf("registered %v, want %d ms", instance.Registered, ms)
			}
		})
	}
}

func TestSubscribedTopics(t *testing.T) {
	t.Parallel()
	kafkaTopics := []string{"orders.eu", "orders.us", "audit", "__consumer_offsets"}
	for _, tc := range []struct {
		name      string
		instances []Instance
		want      []string
	}{
		{"static, also missing topics", []Instance{{Pattern: "static", Subscription: map[string]int{"audit": 1, "later": 1}}}, []string{"audit", "later"}},
		{"white list", []Instance{{Pattern: "white_list", Subscription: map[string]int{`^orders\.`: 1}}}, []string{"orders.eu", "orders.us"}},
		{"black list skips internal topics", []Instance{{Pattern: "black_list", Subscription: map[string]int{`^orders\.`: 1}}}, []string{"audit"}},
		{"with an original instance, internal topics too", []Instance{
			{Library: LibraryKafkaconsumer, Pattern: "black_list", Subscription: map[string]int{`^orders\.`: 1}},
			{Library: LibraryOriginal, Pattern: "black_list", Subscription: map[string]int{`^orders\.`: 1}},
		}, []string{"__consumer_offsets", "audit"}},
		{"bad regexp", []Instance{{Pattern: "white_list", Subscription: map[string]int{`(`: 1}}}, nil},
		{"consumer-protocol regex: whole names, no internal topics", []Instance{{TopicRegex: `orders\..*|__.*`}}, []string{"orders.eu", "orders.us"}},
		{"consumer-protocol regex: not a part of a name", []Instance{{TopicRegex: `orders`}}, nil},
		{"union of instances", []Instance{
			{Pattern: "static", Subscription: map[string]int{"audit": 1}},
			{Pattern: "white_list", Subscription: map[string]int{`\.us$`: 1}},
		}, []string{"audit", "orders.us"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := slices.Sorted(maps.Keys(subscribedTopics(tc.instances, kafkaTopics)))
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestGroupState(t *testing.T) {
	t.Parallel()
	sub := map[string]int{"t": 1}
	tp := func(p int32) TopicPartition { return TopicPartition{"t", p} }
	subscribed := map[TopicPartition]bool{tp(0): true, tp(1): true, tp(2): true}
	owned := func(id string, ps ...int32) Instance {
		instance := Instance{ID: id, Pattern: "static", Subscription: sub, Owned: []TopicPartition{}}
		for _, p := range ps {
			instance.Owned = append(instance.Owned, tp(p))
		}
		return instance
	}
	partitions := func(owners ...string) []Partition {
		var result []Partition
		for i, owner := range owners {
			result = append(result, Partition{TopicPartition: tp(int32(i)), Owner: owner, OwnerRegistered: owner != "" && owner != "gone"})
		}
		return result
	}
	for _, tc := range []struct {
		name string
		desc GroupDescription
		want string
	}{
		{"no instances", GroupDescription{Partitions: partitions("", "", "")}, StateEmpty},
		{"all claimed, balanced", GroupDescription{Instances: []Instance{owned("a", 0, 1), owned("b", 2)}, Partitions: partitions("a", "a", "b")}, StateStable},
		{"unclaimed partition", GroupDescription{Instances: []Instance{owned("a", 0, 1)}, Partitions: partitions("a", "a", "")}, StateRebalancing},
		{"claimed by a gone instance", GroupDescription{Instances: []Instance{owned("a", 0, 1)}, Partitions: partitions("a", "a", "gone")}, StateRebalancing},
		{"not balanced yet", GroupDescription{Instances: []Instance{owned("a", 0, 1, 2), owned("b")}, Partitions: partitions("a", "a", "a")}, StateRebalancing},
		{"a partition awaiting a static member's return", GroupDescription{
			Instances:  []Instance{owned("a", 0, 1)},
			Partitions: []Partition{{TopicPartition: tp(0), Owner: "a", OwnerRegistered: true}, {TopicPartition: tp(1), Owner: "a", OwnerRegistered: true}, {TopicPartition: tp(2), AwaitingReturn: "b"}},
		}, StateAwaitingReturn},
		{"different subscriptions: no balance expected", GroupDescription{
			Instances:  []Instance{owned("a", 0, 1, 2), {ID: "b", Pattern: "static", Subscription: map[string]int{"other": 1}, Owned: []TopicPartition{}}},
			Partitions: partitions("a", "a", "a"),
		}, StateStable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := groupState(&tc.desc, subscribed); got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}

// TestStaticMembers: a static member is marked; a departed one within its
// grace is listed with its partitions, which show whose return they
// await.
func TestStaticMembers(t *testing.T) {
	t.Parallel()
	until := time.Date(2025, 12, 2, 13, 41, 0, 0, time.UTC)
	desc := &GroupDescription{
		Group: "orders", Zookeeper: "zk:2181", Brokers: []string{"b1:9092"}, State: StateAwaitingReturn,
		Instances: []Instance{{ID: "pod-0", Library: LibraryKafkaconsumer, Pattern: "static", Subscription: map[string]int{"orders": 1}, Static: true,
			Owned: []TopicPartition{{"orders", 0}}}},
		Departed: []DepartedMember{{ID: "pod-1", Until: &until, Partitions: []TopicPartition{{"orders", 1}}}},
		Partitions: []Partition{
			{TopicPartition: TopicPartition{"orders", 0}, Owner: "pod-0", OwnerRegistered: true, Committed: ptr(1), LogEnd: ptr(1), Lag: ptr(0)},
			{TopicPartition: TopicPartition{"orders", 1}, AwaitingReturn: "pod-1", Committed: ptr(1), LogEnd: ptr(4), Lag: ptr(3)},
		},
	}
	var buf bytes.Buffer
	if err := render(&buf, desc, false); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(strings.Fields(buf.String()), " ")
	for _, want := range []string{
		"Group orders: AwaitingReturn,",
		"pod-0 (static) kafkaconsumer",
		"Departed static member pod-1, awaited until 2025-12-02T13:41:00Z; its partitions: orders/1.",
		"orders 1 - (awaiting pod-1) 1 4 3",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the table lacks %q:\n%s", want, buf.String())
		}
	}

	now := time.UnixMilli(1_000_000)
	record := []byte(`{"version":1,"restart_grace_ms":30000,"state":"departed","partitions":{"orders":[3,1]}}`)
	member, ok := parseStaticRecord("pod-1", record, now.UnixMilli()-10_000, now)
	if !ok || member.Until == nil || !member.Until.Equal(now.Add(20*time.Second)) || len(member.Partitions) != 2 || member.Partitions[0].Partition != 1 {
		t.Fatalf("parseStaticRecord = %+v, %t; want until now+20s, orders/1 and orders/3", member, ok)
	}
	if _, ok := parseStaticRecord("pod-1", record, now.UnixMilli()-31_000, now); ok {
		t.Error("a record whose grace is over is listed")
	}
	if member, ok := parseStaticRecord("pod-1", []byte(`{"version":1,"restart_grace_ms":30000,"state":"registered"}`), 0, now); !ok || member.Until != nil {
		t.Errorf("a record of a session that ended, not yet marked: %+v, %t; want listed without an end", member, ok)
	}
	if _, ok := parseStaticRecord("pod-1", []byte(`{"version":1,"restart_grace_ms":0,"state":"departed"}`), now.UnixMilli(), now); ok {
		t.Error("a record without grace is listed")
	}
}

// TestRenderIntruders: an instance registered in ZooKeeper while the
// switch says kafka is named in the text and in the JSON.
func TestRenderIntruders(t *testing.T) {
	desc := &GroupDescription{Group: "g", Coordinator: CoordinatorKafka, State: StateStable,
		Instances: []Instance{}, Partitions: []Partition{}, Intruders: []Instance{{ID: "old-1"}}}
	for _, asJSON := range []bool{false, true} {
		var out strings.Builder
		if err := render(&out, desc, asJSON); err != nil {
			t.Fatal(err)
		}
		want := "Intruder old-1"
		if asJSON {
			want = `"intruders":[{"id":"old-1"`
		}
		if !strings.Contains(strings.Join(strings.Fields(out.String()), ""), strings.ReplaceAll(want, " ", "")) {
			t.Errorf("render (json %v) does not name the intruder (%q):\n%s", asJSON, want, out.String())
		}
	}
}

// checkLines fails t unless got has want's lines, each with its runs of
// blanks collapsed to one space, and returns got's lines as they are.
func checkLines(t *testing.T, got string, want []string) []string {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
	if len(lines) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(lines), len(want), got)
	}
	for i, line := range lines {
		if collapsed := strings.Join(strings.Fields(line), " "); collapsed != want[i] {
			t.Errorf("line %d: got %q, want %q", i+1, collapsed, want[i])
		}
	}
	return lines
}
