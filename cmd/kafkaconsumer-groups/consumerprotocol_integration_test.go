package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// consumerProtocolPeers returns the test cluster's brokers (KAFKA_PEERS)
// and its ZooKeeper (ZOOKEEPER_PEERS, "" when unset), or skips the test:
// under -short, without a cluster, or when its brokers do not answer
// ConsumerGroupDescribe (API key 69) with the protocol enabled (Kafka
// 3.9 lists the request in ApiVersions, but answers UNSUPPORTED_VERSION):
// Kafka's consumer group protocol needs Kafka 4.0 or later, such as make
// test-kraft KAFKA_VERSION=4.4.0.
func consumerProtocolPeers(t *testing.T) (string, []string) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a Kafka cluster; skipped under -short")
	}
	if os.Getenv("KAFKA_PEERS") == "" {
		t.Skip("needs a cluster: set KAFKA_PEERS (make cluster-up writes it to .cluster/env)")
	}
	brokers := strings.Split(os.Getenv("KAFKA_PEERS"), ",")
	k, err := openBootstrap(kafkaAccess{bootstrap: brokers}, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	supported, err := consumerProtocolEnabled(k)
	k.close()
	if err != nil {
		t.Fatal(err)
	}
	if !supported {
		t.Skipf("the brokers %s (Kafka %s) keep no consumer-protocol groups (ConsumerGroupDescribe, API key 69, unsupported or disabled): Kafka's consumer group protocol needs Kafka 4.0 or later (make test-kraft KAFKA_VERSION=4.4.0)",
			strings.Join(brokers, ","), os.Getenv("KAFKA_VERSION"))
	}
	return os.Getenv("ZOOKEEPER_PEERS"), brokers
}

// consumerProtocolEnabled tells whether k's brokers keep groups of
// Kafka's consumer group protocol: they list ConsumerGroupDescribe, and
// answer it for a group nobody uses with GROUP_ID_NOT_FOUND.
func consumerProtocolEnabled(k *kafkaSession) (bool, error) {
	if ok, err := k.supportsConsumerGroupDescribe(); err != nil || !ok {
		return false, err
	}
	// A new cluster's coordinator is not available until its offsets
	// topic is created: retried within the session's deadline.
	req := kmsg.NewPtrConsumerGroupDescribeRequest()
	req.Groups = []string{fmt.Sprintf("cli-848-probe.%d", time.Now().UnixNano())}
	for {
		resp, err := k.request(req)
		described, _ := resp.(*kmsg.ConsumerGroupDescribeResponse)
		code := err
		if described != nil && len(described.Groups) == 1 {
			code = kerr.ErrorForCode(described.Groups[0].ErrorCode)
		}
		switch {
		case errors.Is(code, kerr.GroupIDNotFound):
			return true, nil
		case errors.Is(code, kerr.UnsupportedVersion):
			return false, nil
		case !kerr.IsRetriable(code) || time.Now().After(k.deadline):
			return false, fmt.Errorf("describe a group nobody uses: %v", code)
		}
		time.Sleep(100 * time.Millisecond) // polling interval, not synchronisation
	}
}

// startConsumerProtocolMember starts a franz-go consumer of the group in
// Kafka's consumer group protocol (its ServerSideBalancer opt-in) on
// topic. It marks for commit every record whose offset is below
// commitBelow, and commits the marks every 100 ms and when partitions
// are revoked. Its poll loop is stopped and waited for at the end of the
// test.
func startConsumerProtocolMember(t *testing.T, brokers []string, group, topic, clientID string, commitBelow int64) {
	t.Helper()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(brokers...),
		kgo.ClientID(clientID),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.ServerSideBalancer(),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.AutoCommitMarks(),
		kgo.AutoCommitInterval(100*time.Millisecond),
	)
	if err != nil {
		t.Fatalf("kgo client: %s", err)
	}
	done := make(chan struct{}) // closed when the poll loop returns
	go func() {
		defer close(done)
		for {
			fetches := cl.PollFetches(context.Background())
			if fetches.IsClientClosed() {
				return
			}
			fetches.EachRecord(func(r *kgo.Record) {
				if r.Offset < commitBelow {
					cl.MarkCommitRecords(r)
				}
			})
		}
	}()
	t.Cleanup(func() {
		cl.Close() // leaves the group, commits the marks, ends PollFetches
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Errorf("the poll loop of %s did not return within 30s of Close", clientID)
		}
	})
}

// TestDescribeConsumerProtocolIntegration: two franz-go members of a
// group of Kafka's consumer group protocol (KIP-848) consume a topic of 4
// partitions and commit all but the last message of each. The command
// describes the group (--bootstrap-server alone, and with --zookeeper,
// where the group has no node) in --json: both members with their member
// epochs (those of the group once reconciled), assignments that cover
// every partition once and equal their target assignments, the group
// epoch, assignment epoch and assignor, and a lag of one per partition,
// in the contract's fields and types; --list --json names it as a
// consumer-protocol group of 2 members. Skipped on brokers without the
// protocol (before Kafka 4.0).
func TestDescribeConsumerProtocolIntegration(t *testing.T) {
	zookeeper, brokers := consumerProtocolPeers(t)
	checkLeaks(t)
	const partitions, messages = 4, 40 // round robin: offsets 0 to 9 per partition
	topic := createTopic(t, brokers, partitions)
	group := "cli-848." + topic
	produce(t, brokers, topic, messages)
	for _, id := range []string{"cli-848-a", "cli-848-b"} {
		startConsumerProtocolMember(t, brokers, group, topic, id, messages/partitions-1)
	}

	bootstrap := strings.Join(brokers, ",")
	describe := [][]string{{"--zookeeper=", "--bootstrap-server", bootstrap, "--group", group}}
	list := [][]string{{"--zookeeper=", "--bootstrap-server", bootstrap, "--list"}}
	if zookeeper != "" {
		describe = append(describe, []string{"--zookeeper", zookeeper, "--bootstrap-server", bootstrap, "--group", group})
		list = append(list, []string{"--zookeeper", zookeeper, "--bootstrap-server", bootstrap, "--list"})
	}
	for _, args := range describe {
		waitFor(t, 90*time.Second, strings.Join(args, " ")+" --json to show both members reconciled, a lag of 1 per partition", func() error {
			err := checkConsumerProtocolDescribed(args, group, partitions, messages)
			if v := (violation{}); errors.As(err, &v) {
				t.Fatalf("%s --json: %s", strings.Join(args, " "), err)
			}
			return err
		})
	}
	for _, args := range list {
		if err := checkListedProtocol(args, group, "kafka", GroupProtocolConsumer, 2); err != nil {
			t.Errorf("%s --json: %s", strings.Join(args, " "), err)
		}
	}
}

// checkConsumerProtocolDescribed checks that `--group NAME --json` with
// args describes a Stable consumer-protocol group of two reconciled
// members whose assignments cover every one of its partitions once, with
// every message but the last of each partition committed; in the
// contract's fields and types (a violation fails at once).
func checkConsumerProtocolDescribed(args []string, group string, partitions int, messages int64) error {
	desc, err := describedStable(args, group, GroupProtocolConsumer, consumerGroupContract)
	if err != nil {
		return err
	}
	groupEpoch, _ := desc["group_epoch"].(json.Number).Int64()
	assignmentEpoch, _ := desc["assignment_epoch"].(json.Number).Int64()
	if groupEpoch < 2 || assignmentEpoch != groupEpoch {
		return fmt.Errorf("group epoch %d, assignment epoch %d; want equal, at least 2 (two members joined)", groupEpoch, assignmentEpoch)
	}
	if desc["assignor"] != "uniform" {
		return fmt.Errorf("assignor %v, want uniform (the broker's default)", desc["assignor"])
	}

	instances, err := objects("instances", desc["instances"])
	if err != nil {
		return err
	}
	if len(instances) != 2 {
		return fmt.Errorf("%d members, want 2", len(instances))
	}
	ownerOf := make(map[string]any) // "topic/partition" -> member ID
	var clients []string
	for i, m := range instances {
		where := fmt.Sprintf("instances[%d]", i)
		if err := checkContract(where, m, mergeContracts(instanceContract, consumerInstanceContract)); err != nil {
			return err
		}
		if epoch, _ := m["member_epoch"].(json.Number).Int64(); epoch != groupEpoch {
			return fmt.Errorf("%s has member epoch %d, want the group's %d", where, epoch, groupEpoch)
		}
		owned, err := partitionNames(where+".owned", m["owned"])
		if err != nil {
			return err
		}
		target, err := partitionNames(where+".target_assignment", m["target_assignment"])
		if err != nil {
			return err
		}
		if !slices.Equal(owned, target) {
			return fmt.Errorf("%s owns %v, its target is %v", where, owned, target)
		}
		if len(owned) != partitions/2 {
			return fmt.Errorf("%s owns %d partitions, want %d", where, len(owned), partitions/2)
		}
		for _, tp := range owned {
			if other, dup := ownerOf[tp]; dup {
				return violation{fmt.Errorf("%s is in the assignments of %v and %v", tp, other, m["id"])}
			}
			ownerOf[tp] = m["id"]
		}
		clients = append(clients, fmt.Sprint(m["client_id"]))
		if m["library"] != LibraryUnknown || m["member_protocol"] != GroupProtocolConsumer || m["topics"] == nil {
			return violation{fmt.Errorf("%s: library %v, member protocol %v, topics %v; want unknown, consumer, the topic", where, m["library"], m["member_protocol"], m["topics"])}
		}
	}
	if slices.Sort(clients); !slices.Equal(clients, []string{"cli-848-a", "cli-848-b"}) {
		return violation{fmt.Errorf("client IDs %v, want cli-848-a and cli-848-b", clients)}
	}

	ps, err := objects("partitions", desc["partitions"])
	if err != nil {
		return err
	}
	if len(ps) != partitions {
		return fmt.Errorf("%d partitions, want %d", len(ps), partitions)
	}
	perPartition := messages / int64(partitions)
	for i, p := range ps {
		where := fmt.Sprintf("partitions[%d]", i)
		if err := checkContract(where, p, partitionContract); err != nil {
			return err
		}
		tp := fmt.Sprintf("%v/%v", p["topic"], p["partition"])
		if p["owner"] != ownerOf[tp] || p["owner_registered"] != true {
			return fmt.Errorf("%s (%s) owned by %v, want %v", where, tp, p["owner"], ownerOf[tp])
		}
		committed, _ := p["committed"].(json.Number).Int64()
		lag, _ := p["lag"].(json.Number).Int64()
		if p["committed"] == nil || committed != perPartition-1 || lag != 1 {
			return fmt.Errorf("%s (%s): committed %v, lag %v; want %d, 1", where, tp, p["committed"], p["lag"], perPartition-1)
		}
	}
	lag, _ := desc["total_lag"].(json.Number).Int64()
	if lag != int64(partitions) {
		return fmt.Errorf("total lag %d, want %d", lag, partitions)
	}
	return nil
}

// partitionNames returns the "topic/partition" names of an array of
// {topic, partition} objects, in its order.
func partitionNames(where string, v any) ([]string, error) {
	tps, err := objects(where, v)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(tps))
	for i, tp := range tps {
		if err := checkContract(fmt.Sprintf("%s[%d]", where, i), tp, topicPartitionContract); err != nil {
			return nil, err
		}
		names[i] = fmt.Sprintf("%v/%v", tp["topic"], tp["partition"])
	}
	return names, nil
}

// describedStable returns what `--group NAME --json` with args says of
// group, once it is a Stable group of Kafka's, of protocol, with the
// fields of the contract for groups of the protocol (protocolContract;
// a violation fails at once).
func describedStable(args []string, group, protocol string, protocolContract contract) (map[string]any, error) {
	out, err := runRaw(args)
	if err != nil {
		return nil, err
	}
	var desc map[string]any
	if err := decodeJSON(out, &desc); err != nil {
		return nil, err
	}
	if err := checkContract("the group", desc, mergeContracts(groupContract, kafkaGroupContract, protocolContract)); err != nil {
		return nil, err
	}
	if desc["group"] != group || desc["coordinator"] != "kafka" || desc["group_protocol"] != protocol {
		return nil, violation{fmt.Errorf("group %v, coordinator %v, protocol %v; want %s, kafka, %s", desc["group"], desc["coordinator"], desc["group_protocol"], group, protocol)}
	}
	if desc["state"] != "Stable" || desc["kafka_state"] != "Stable" {
		return nil, fmt.Errorf("state %v (Kafka's %v), want Stable", desc["state"], desc["kafka_state"])
	}
	return desc, nil
}
