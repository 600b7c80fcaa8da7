package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer"
)

// shareGroupPeers returns the test cluster's brokers (KAFKA_PEERS), or
// skips the test: under -short, without a cluster, or unless it runs
// KRaft with Kafka 4.2 or later (KAFKA_MODE and KAFKA_VERSION, as make
// cluster-up MODE=kraft KAFKA_VERSION=4.4.0 writes them), where share
// groups are generally available.
func shareGroupPeers(t *testing.T) []string {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a Kafka cluster; skipped under -short")
	}
	if os.Getenv("KAFKA_PEERS") == "" {
		t.Skip("needs a cluster: set KAFKA_PEERS (make cluster-up writes it to .cluster/env)")
	}
	version, err := sarama.ParseKafkaVersion(os.Getenv("KAFKA_VERSION"))
	if os.Getenv("KAFKA_MODE") != "kraft" || err != nil || !version.IsAtLeast(sarama.V4_2_0_0) {
		t.Skipf("share groups need a KRaft cluster of Kafka 4.2 or later (make cluster-up MODE=kraft KAFKA_VERSION=4.4.0), not %q in %q mode",
			os.Getenv("KAFKA_VERSION"), os.Getenv("KAFKA_MODE"))
	}
	return strings.Split(os.Getenv("KAFKA_PEERS"), ",")
}

// TestDescribeShareGroupIntegration: two members of a share group
// (kafkaconsumer's GroupProtocolShare) consume a topic of 2 partitions
// and accept every record but the last of each partition, which they
// hold unacknowledged. The command describes the group (--bootstrap-
// server alone) in --json: a Stable share group of both members, with
// their member epochs and assignments, every partition owned, the
// share-partition start offset at the held record, and at most one
// record in flight per partition; in the contract's fields and types.
// --list --json names it as a share group of 2 members, and the table
// names the group's protocol and its columns.
func TestDescribeShareGroupIntegration(t *testing.T) {
	brokers := shareGroupPeers(t)
	checkLeaks(t)
	const partitions, messages = 2, 20 // round robin: offsets 0 to 9 per partition
	topic := createTopic(t, brokers, partitions)
	group := "cli-share." + topic
	produce(t, brokers, topic, messages)
	for range 2 {
		startShareMember(t, brokers, group, topic, messages/partitions-1)
	}

	bootstrap := strings.Join(brokers, ",")
	args := []string{"--zookeeper=", "--bootstrap-server", bootstrap, "--group", group}
	waitFor(t, 90*time.Second, "--json to show both members, the start offsets at the held records", func() error {
		err := checkShareDescribed(args, group, partitions, messages)
		if v := (violation{}); errors.As(err, &v) {
			t.Fatalf("%s --json: %s", strings.Join(args, " "), err)
		}
		return err
	})
	list := []string{"--zookeeper=", "--bootstrap-server", bootstrap, "--list"}
	waitFor(t, 30*time.Second, "--list --json to name the share group", func() error {
		err := checkListedProtocol(list, group, "kafka", GroupProtocolShare, 2)
		if v := (violation{}); errors.As(err, &v) {
			t.Fatalf("%s --json: %s", strings.Join(list, " "), err)
		}
		return err
	})

	var stdout, stderr bytes.Buffer
	if code := run(append(args, "--timeout", "20s"), &stdout, &stderr); code != exitOK {
		t.Fatalf("%s: exit status %d: %s", strings.Join(args, " "), code, stderr.String())
	}
	t.Logf("the table:\n%s", stdout.String())
	for _, want := range []string{"share group", "START-OFFSET", "IN-FLIGHT<="} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("the table lacks %q:\n%s", want, stdout.String())
		}
	}
}

// startShareMember starts a member of the share group on topic that
// accepts every record whose offset is below holdFrom and holds the
// others, unacknowledged, until the end of the test, when it releases
// them and is closed (Close waits for the acknowledgement of what it
// handed out).
func startShareMember(t *testing.T, brokers []string, group, topic string, holdFrom int64) {
	t.Helper()
	config := kafkaconsumer.NewConfig()
	config.Coordinator = kafkaconsumer.CoordinatorKafka
	config.GroupProtocol = kafkaconsumer.GroupProtocolShare
	config.Brokers = brokers
	config.Offsets.Initial = sarama.OffsetOldest
	c, err := kafkaconsumer.Join(group, kafkaconsumer.TopicSubscription(topic), "", config)
	if err != nil {
		t.Fatalf("join the share group: %s", err)
	}
	share, _ := kafkaconsumer.ShareOf(c)
	var (
		mu   sync.Mutex
		held []*sarama.ConsumerMessage // guarded by mu
	)
	done := make(chan struct{}) // closed when the receiving loop returns
	go func() {
		defer close(done)
		for msg := range c.Messages() {
			if msg.Offset < holdFrom {
				c.Ack(msg)
				continue
			}
			mu.Lock()
			held = append(held, msg)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		mu.Lock()
		for _, msg := range held {
			share.Release(msg)
		}
		mu.Unlock()
		if err := c.Close(); err != nil {
			t.Errorf("close: %s", err)
		}
		<-done
	})
}

// checkShareDescribed checks that `--group NAME --json` with args
// describes a Stable share group of two members whose assignments cover
// every partition, each partition's start offset at its last record
// (held unacknowledged) and one record in flight at most; in the
// contract's fields and types (a violation fails at once).
func checkShareDescribed(args []string, group string, partitions int, messages int64) error {
	desc, err := describedStable(args, group, GroupProtocolShare, shareGroupContract)
	if err != nil {
		return err
	}
	instances, err := objects("instances", desc["instances"])
	if err != nil {
		return err
	}
	if len(instances) != 2 {
		return fmt.Errorf("%d members, want 2", len(instances))
	}
	for i, instance := range instances {
		if err := checkContract(fmt.Sprintf("instances[%d]", i), instance, mergeContracts(instanceContract, shareInstanceContract)); err != nil {
			return err
		}
		if instance["library"] != LibraryUnknown {
			return violation{fmt.Errorf("instances[%d] library %v, want %s", i, instance["library"], LibraryUnknown)}
		}
	}
	parts, err := objects("partitions", desc["partitions"])
	if err != nil {
		return err
	}
	if len(parts) != partitions {
		return fmt.Errorf("%d partitions, want %d", len(parts), partitions)
	}
	perPartition := messages / int64(partitions)
	for i, p := range parts {
		if _, ok := p["share_start_offset"]; !ok {
			return fmt.Errorf("partitions[%d] has no share_start_offset: the broker keeps no state of it yet", i)
		}
		if err := checkContract(fmt.Sprintf("partitions[%d]", i), p, mergeContracts(partitionContract, sharePartitionContract)); err != nil {
			return err
		}
		if p["committed"] != nil {
			return violation{fmt.Errorf("partitions[%d] committed %v: a share group commits no offsets, want null", i, p["committed"])}
		}
		owners, _ := p["owners"].([]any)
		if len(owners) == 0 || p["owner"] != owners[0] {
			return fmt.Errorf("partitions[%d] owner %v, owners %v; want the first of one or more owners", i, p["owner"], owners)
		}
		start, _ := p["share_start_offset"].(json.Number).Int64()
		logEnd, _ := p["log_end"].(json.Number).Int64()
		inFlight, _ := p["in_flight_at_most"].(json.Number).Int64()
		if start != perPartition-1 || logEnd != perPartition || inFlight != 1 {
			return fmt.Errorf("partitions[%d] start offset %d, log end %d, in flight at most %d; want %d, %d, 1", i, start, logEnd, inFlight, perPartition-1, perPartition)
		}
	}
	return nil
}
