package main

// The tool's JSON contract: the fields of `--list --json` and
// `--group NAME --json` that scripts may rely on (scripts/demo.sh reads
// them; docs/observing.md lists them under "Fields scripts may rely on").
// The output may gain fields; these keep their names, their JSON types
// and, where listed, their values. A rename, a removal or a change of type
// is a change of the contract: make it in the docs, the CHANGELOG and the
// tables below together.
//
// --list --json: an array with one object per group:
//
//	group        string
//	coordinator  string, "zookeeper" or "kafka"
//	instances    integer: registered instances, or members of Kafka's group
//	error        string, present only when the group's nodes are unreadable
//	group_protocol  string, "classic", "consumer" or "share", present when coordinator is "kafka"
//
// --group NAME --json: one object:
//
//	group, coordinator              string (coordinator as in the list)
//	state                           string: "Empty", "Stable", "Rebalancing" or "AwaitingReturn"
//	zookeeper                       string ("" when none was given)
//	brokers                         array of strings
//	kafka_state                     string, present when coordinator is "kafka"
//	coordinator_broker              string, present then too unless its address could not be read
//	group_protocol                  string, "classic", "consumer" or "share", present when coordinator is "kafka"
//	group_epoch, assignment_epoch   integer, present when group_protocol is "consumer" or "share"
//	assignor                        string, present then too
//	instances                       array of objects:
//	    id, library                 string ("unknown" library: a consumer-protocol or share-group member)
//	    owned                       array of {topic string, partition integer}
//	    member_epoch                integer, present when group_protocol is "consumer" or "share"
//	    target_assignment           array of {topic string, partition integer}, present when group_protocol is "consumer"
//	partitions                      array of objects:
//	    topic                       string
//	    partition                   integer
//	    owner                       string, absent when nobody owns the partition
//	    owner_registered            boolean
//	    committed, log_end, lag     integer, or null when unknown (committed: always null in a share group)
//	    owners                      array of strings, present when group_protocol is "share" and a member owns the partition
//	    share_start_offset          integer, present when group_protocol is "share" and the broker keeps the partition's state
//	    in_flight_at_most           integer, present then too when log_end is known
//	total_committed, total_log_end, total_lag  integer
//
// migrate --to kafka --protocol consumer|classic --json: one object:
//
//	group, coordinator ("kafka")          string
//	switched                              boolean
//	target_protocol, group_protocol       string, "classic" or "consumer"
//	kafka_state                           string
//	members                               array of objects:
//	    id, client_id, client_host        string
//	    member_protocol                   string, "classic", "consumer" or "unknown"
//	classic_members, consumer_members     integer
//	min_members                           integer
//	done                                  boolean
//
// The values are decoded into map[string]any, not into the tool's own
// structs, so that a renamed json tag or a changed Go type fails here.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kafkaconsumer/kafkaconsumer"
)

// jsonType is a JSON type as the contract names it.
type jsonType string

const (
	jsonString        jsonType = "string"
	jsonInteger       jsonType = "integer"
	jsonIntegerOrNull jsonType = "integer or null"
	jsonBoolean       jsonType = "boolean"
	jsonArray         jsonType = "array"
)

// contract maps the names of an object's contracted fields to their types.
type contract map[string]jsonType

var (
	listContract = contract{"group": jsonString, "coordinator": jsonString, "instances": jsonInteger}

	groupContract = contract{
		"group": jsonString, "coordinator": jsonString, "state": jsonString,
		"zookeeper": jsonString, "brokers": jsonArray,
		"instances": jsonArray, "partitions": jsonArray,
		"total_committed": jsonInteger, "total_log_end": jsonInteger, "total_lag": jsonInteger,
	}
	// kafkaGroupContract is added to groupContract for a group whose
	// coordinator is "kafka".
	kafkaGroupContract = contract{"coordinator_broker": jsonString, "kafka_state": jsonString, "group_protocol": jsonString}
	// consumerGroupContract is added to those for a group whose
	// group_protocol is "consumer" (KIP-848).
	consumerGroupContract = contract{"group_epoch": jsonInteger, "assignment_epoch": jsonInteger, "assignor": jsonString}

	// shareGroupContract is added to those for a group whose
	// group_protocol is "share" (KIP-932).
	shareGroupContract = contract{"group_epoch": jsonInteger, "assignment_epoch": jsonInteger, "assignor": jsonString}

	instanceContract = contract{"id": jsonString, "library": jsonString, "owned": jsonArray}
	// shareInstanceContract is added to instanceContract for a member of
	// a group whose group_protocol is "share".
	shareInstanceContract = contract{"member_epoch": jsonInteger}
	// sharePartitionContract is added to partitionContract for an owned
	// partition of a share group whose state and log end are known.
	sharePartitionContract = contract{"owners": jsonArray, "share_start_offset": jsonInteger, "in_flight_at_most": jsonInteger}
	// consumerInstanceContract is added to instanceContract for a member
	// of a group whose group_protocol is "consumer".
	consumerInstanceContract = contract{"member_epoch": jsonInteger, "target_assignment": jsonArray}
	// kafkaListContract is added to listContract for a group whose
	// coordinator is "kafka".
	kafkaListContract      = contract{"group_protocol": jsonString}
	topicPartitionContract = contract{"topic": jsonString, "partition": jsonInteger}
	// migrateProtocolContract is the object of migrate --protocol --json,
	// protocolMemberContract an element of its "members".
	migrateProtocolContract = contract{
		"group": jsonString, "coordinator": jsonString, "switched": jsonBoolean,
		"target_protocol": jsonString, "group_protocol": jsonString, "kafka_state": jsonString,
		"members": jsonArray, "classic_members": jsonInteger, "consumer_members": jsonInteger,
		"min_members": jsonInteger, "done": jsonBoolean,
	}
	protocolMemberContract = contract{"id": jsonString, "client_id": jsonString, "client_host": jsonString, "member_protocol": jsonString}
	// partitionContract is for an owned partition: "owner" is absent
	// when nobody owns it.
	partitionContract = contract{
		"topic": jsonString, "partition": jsonInteger,
		"owner": jsonString, "owner_registered": jsonBoolean,
		"committed": jsonIntegerOrNull, "log_end": jsonIntegerOrNull, "lag": jsonIntegerOrNull,
	}
)

// mergeContracts returns the union of contracts.
func mergeContracts(contracts ...contract) contract {
	merged := contract{}
	for _, c := range contracts {
		for k, v := range c {
			merged[k] = v
		}
	}
	return merged
}

// decodeJSON decodes the tool's output, numbers as json.Number so that an
// integer can be told from a fraction.
func decodeJSON(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decode %s: %w", data, err)
	}
	return nil
}

// runRaw runs the command with args and --json and returns its output.
func runRaw(args []string) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	if code := run(append(args, "--json", "--timeout", "20s"), &stdout, &stderr); code != exitOK {
		return nil, fmt.Errorf("%s: exit status %d: %s", strings.Join(args, " "), code, stderr.String())
	}
	return stdout.Bytes(), nil
}

// violation is an error that breaks the contract, as opposed to a state
// not reached yet: the tests fail on it at once.
type violation struct{ error }

// checkContract returns a violation naming every field of c that obj lacks
// or that has another type; where says which object it is.
func checkContract(where string, obj map[string]any, c contract) error {
	var problems []string
	for name, want := range c {
		v, ok := obj[name]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s lacks %q (%s)", where, name, want))
			continue
		}
		if got := typeOf(v); got != want && !(want == jsonIntegerOrNull && (got == jsonInteger || v == nil)) {
			problems = append(problems, fmt.Sprintf("%s: %q is %v (%s), want %s", where, name, v, got, want))
		}
	}
	if len(problems) > 0 {
		slices.Sort(problems)
		return violation{errors.New(strings.Join(problems, "; "))}
	}
	return nil
}

// typeOf is the contract's name for the type of a decoded value.
func typeOf(v any) jsonType {
	switch v := v.(type) {
	case string:
		return jsonString
	case bool:
		return jsonBoolean
	case []any:
		return jsonArray
	case json.Number:
		if _, err := v.Int64(); err == nil {
			return jsonInteger
		}
		return "fractional number"
	case nil:
		return "null"
	case map[string]any:
		return "object"
	}
	return jsonType(fmt.Sprintf("%T", v))
}

// objects returns the elements of the array v, each of which must be an
// object (else a violation).
func objects(where string, v any) ([]map[string]any, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, violation{fmt.Errorf("%s is %v, not an array", where, v)}
	}
	objs := make([]map[string]any, len(list))
	for i, e := range list {
		if objs[i], ok = e.(map[string]any); !ok {
			return nil, violation{fmt.Errorf("%s[%d] is %v, not an object", where, i, e)}
		}
	}
	return objs, nil
}

// checkListed checks that `--list --json` with args names group with
// the coordinator and instance count given, in the contract's fields and
// types; a Kafka-coordinated group as a classic one.
func checkListed(args []string, group, coordinator string, instances int64) error {
	protocol := ""
	if coordinator == "kafka" {
		protocol = GroupProtocolClassic
	}
	return checkListedProtocol(args, group, coordinator, protocol, instances)
}

// checkListedProtocol is checkListed for a group of the protocol given
// (group_protocol; "" for a ZooKeeper-coordinated group, which has none).
func checkListedProtocol(args []string, group, coordinator, protocol string, instances int64) error {
	out, err := runRaw(args)
	if err != nil {
		return err
	}
	var list any
	if err := decodeJSON(out, &list); err != nil {
		return err
	}
	groups, err := objects("the list", list)
	if err != nil {
		return err
	}
	for i, g := range groups {
		c := listContract
		if g["coordinator"] == "kafka" {
			c = mergeContracts(listContract, kafkaListContract)
		}
		if err := checkContract(fmt.Sprintf("the list's [%d]", i), g, c); err != nil {
			return err
		}
		if g["group"] != group {
			continue
		}
		gotProtocol, _ := g["group_protocol"].(string)
		if n, _ := g["instances"].(json.Number).Int64(); g["coordinator"] != coordinator || gotProtocol != protocol || n != instances {
			return violation{fmt.Errorf("the list shows %s with coordinator %v, protocol %q and %d instances, want %s, %q and %d", group, g["coordinator"], gotProtocol, n, coordinator, protocol, instances)}
		}
		return nil
	}
	return fmt.Errorf("the list does not name %s: %s", group, out)
}

// checkDescribed checks that `--group NAME --json` with args describes a
// Stable group whose one instance owns every one of its partitions, has
// committed every message, and has a lag of 0, in the contract's fields
// and types.
func checkDescribed(args []string, group, coordinator string, partitions int, messages int64) error {
	out, err := runRaw(args)
	if err != nil {
		return err
	}
	var desc map[string]any
	if err := decodeJSON(out, &desc); err != nil {
		return err
	}
	c := groupContract
	if coordinator == "kafka" {
		c = mergeContracts(groupContract, kafkaGroupContract)
	}
	if err := checkContract("the group", desc, c); err != nil {
		return err
	}
	if desc["group"] != group || desc["coordinator"] != coordinator {
		return violation{fmt.Errorf("group %v, coordinator %v; want %s, %s", desc["group"], desc["coordinator"], group, coordinator)}
	}
	if coordinator == "kafka" && desc["group_protocol"] != GroupProtocolClassic {
		return violation{fmt.Errorf("group protocol %v, want classic (the library's assignor)", desc["group_protocol"])}
	}
	if state := desc["state"]; state != "Stable" {
		// Values the contract allows, but not yet the state waited for.
		if !slices.Contains([]any{"Empty", "Rebalancing", "AwaitingReturn"}, state) {
			return violation{fmt.Errorf("state %v is none of the contract's", state)}
		}
		return fmt.Errorf("state %v, want Stable", state)
	}
	for _, b := range desc["brokers"].([]any) {
		if typeOf(b) != jsonString {
			return violation{fmt.Errorf("brokers holds %v (%s), want strings", b, typeOf(b))}
		}
	}

	instances, err := objects("instances", desc["instances"])
	if err != nil {
		return err
	}
	if len(instances) != 1 {
		return fmt.Errorf("%d instances, want 1", len(instances))
	}
	if err := checkContract("instances[0]", instances[0], instanceContract); err != nil {
		return err
	}
	owned, err := objects("instances[0].owned", instances[0]["owned"])
	if err != nil {
		return err
	}
	if len(owned) != partitions {
		return fmt.Errorf("instances[0] owns %d partitions, want %d", len(owned), partitions)
	}
	for i, tp := range owned {
		if err := checkContract(fmt.Sprintf("instances[0].owned[%d]", i), tp, topicPartitionContract); err != nil {
			return err
		}
	}

	ps, err := objects("partitions", desc["partitions"])
	if err != nil {
		return err
	}
	if len(ps) != partitions {
		return fmt.Errorf("%d partitions, want %d", len(ps), partitions)
	}
	for i, p := range ps {
		if err := checkContract(fmt.Sprintf("partitions[%d]", i), p, partitionContract); err != nil {
			return err
		}
		if p["owner"] != instances[0]["id"] || p["owner_registered"] != true {
			return fmt.Errorf("partitions[%d] owned by %v (registered %v), want %v", i, p["owner"], p["owner_registered"], instances[0]["id"])
		}
	}
	committed, _ := desc["total_committed"].(json.Number).Int64()
	logEnd, _ := desc["total_log_end"].(json.Number).Int64()
	lag, _ := desc["total_lag"].(json.Number).Int64()
	if committed != messages || logEnd != messages || lag != 0 {
		return fmt.Errorf("totals: committed %d, log end %d, lag %d; want %d, %d, 0", committed, logEnd, lag, messages, messages)
	}
	return nil
}

// TestJSONContractIntegration: a ZooKeeper-coordinated group and a
// Kafka-coordinated one, each of one instance that has consumed and acked
// every message of a topic; `--list --json` and `--group NAME --json`
// show them in every contracted field, of its type (see the top of this
// file). The Kafka-coordinated group is described with --zookeeper and
// with --bootstrap-server alone.
func TestJSONContractIntegration(t *testing.T) {
	for _, coordinator := range []string{"zookeeper", "kafka"} {
		t.Run(coordinator, func(t *testing.T) {
			testJSONContract(t, coordinator)
		})
	}
}

func testJSONContract(t *testing.T, coordinator string) {
	peers := clusterPeers
	if coordinator == "kafka" {
		peers = kafkaCoordinatorPeers
	}
	zookeeper, brokers := peers(t)
	checkLeaks(t)
	const partitions, messages = 2, 20
	topic := createTopic(t, brokers, partitions)
	group := "cli-contract." + topic
	produce(t, brokers, topic, messages)

	config := kafkaconsumer.NewConfig()
	config.Consumer.Offsets.AutoCommit.Interval = 100 * time.Millisecond
	config.MaxProcessingTime = 2 * time.Second
	joinZookeeper := zookeeper
	describe := [][]string{{"--zookeeper", zookeeper, "--group", group}}
	list := [][]string{{"--zookeeper", zookeeper, "--list"}}
	if coordinator == "kafka" {
		config.Coordinator = kafkaconsumer.CoordinatorKafka
		config.Brokers = brokers
		config.Consumer.Group.Session.Timeout = 6 * time.Second
		config.Consumer.Group.Heartbeat.Interval = 500 * time.Millisecond
		joinZookeeper = ""
		// --zookeeper= overrides $ZOOKEEPER_PEERS: Kafka alone.
		bootstrap := []string{"--zookeeper=", "--bootstrap-server", strings.Join(brokers, ",")}
		describe = append(describe, append(slices.Clone(bootstrap), "--group", group))
		list = append(list, append(slices.Clone(bootstrap), "--list"))
	}
	consumer, err := kafkaconsumer.Join(group, kafkaconsumer.TopicSubscription(topic), joinZookeeper, config)
	if err != nil {
		t.Fatalf("join: %s", err)
	}
	t.Cleanup(func() { _ = consumer.Close() })
	consumeAll(t, consumer, messages)

	for _, args := range describe {
		waitFor(t, 30*time.Second, strings.Join(args, " ")+" --json to show the group Stable, every message committed", func() error {
			err := checkDescribed(args, group, coordinator, partitions, messages)
			if v := (violation{}); errors.As(err, &v) {
				t.Fatalf("%s --json breaks the contract: %s", strings.Join(args, " "), err)
			}
			return err
		})
	}
	for _, args := range list {
		if err := checkListed(args, group, coordinator, 1); err != nil {
			t.Errorf("%s --json: %s", strings.Join(args, " "), err)
		}
	}
}

// TestCheckContract: the contract check tells a renamed field, a number
// turned string, a fraction and a null where none is allowed.
func TestCheckContract(t *testing.T) {
	t.Parallel()
	c := contract{"group": jsonString, "instances": jsonInteger, "lag": jsonIntegerOrNull}
	for _, tc := range []struct {
		json string
		ok   bool
	}{
		{`{"group": "g", "instances": 1, "lag": 0, "more": true}`, true},
		{`{"group": "g", "instances": 1, "lag": null}`, true},
		{`{"name": "g", "instances": 1, "lag": 0}`, false},
		{`{"group": "g", "instances": "1", "lag": 0}`, false},
		{`{"group": "g", "instances": 1.5, "lag": 0}`, false},
		{`{"group": "g", "instances": null, "lag": 0}`, false},
		{`{"group": "g", "instances": 1, "lag": "0"}`, false},
	} {
		var obj map[string]any
		if err := decodeJSON([]byte(tc.json), &obj); err != nil {
			t.Fatal(err)
		}
		if err := checkContract("obj", obj, c); (err == nil) != tc.ok {
			t.Errorf("%s: error %v, want ok %t", tc.json, err, tc.ok)
		}
	}
}
