package kafkaconsumer

// The test cluster's share groups (KIP-932): a KRaft cluster of Kafka 4.2
// or later answers a raw ShareGroupHeartbeat with a member epoch.

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kafkaconsumer/kafkaconsumer/internal/testcluster"
)

// shareGroupTest is kafkaCoordinatorTest for GroupProtocolShare: it
// skips, saying why, unless the cluster runs KRaft with Kafka 4.2 or
// later, the first whose share groups are generally available (make
// test-kraft KAFKA_VERSION=4.4.0).
func shareGroupTest(t *testing.T) {
	t.Helper()
	kafkaCoordinatorTest(t)
	skipUnlessShareGroups(t)
}

// skipUnlessShareGroups skips the test, saying why, unless the cluster
// runs KRaft with Kafka 4.2 or later.
func skipUnlessShareGroups(t *testing.T) {
	t.Helper()
	if os.Getenv("KAFKA_MODE") != "kraft" || !testKafkaVersion().IsAtLeast(sarama.V4_2_0_0) {
		t.Skipf("GroupProtocolShare needs a KRaft cluster of Kafka 4.2 or later (make test-kraft KAFKA_VERSION=4.4.0), not %s in %q mode", testKafkaVersion(), os.Getenv("KAFKA_MODE"))
	}
}

// TestIntegrationShareGroupHeartbeatRaw: the test cluster runs share
// groups: a ShareGroupHeartbeat of a new member, sent to the group's
// coordinator, is answered without error, with the member's epoch and the
// heartbeat interval, and the next ones with both partitions of the topic
// assigned; the member then leaves with epoch -1.
func TestIntegrationShareGroupHeartbeatRaw(t *testing.T) {
	shareGroupTest(t)
	topic := newTopic(t, 2)
	group := uniqueName("share-raw")
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafkaPeers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	req := kmsg.NewPtrShareGroupHeartbeatRequest()
	req.GroupID = group
	req.MemberID = newShareMemberID()
	req.MemberEpoch = 0
	req.SubscribedTopicNames = []string{topic}
	var resp *kmsg.ShareGroupHeartbeatResponse
	waitFor(t, 20*time.Second, "a ShareGroupHeartbeat answered without a retriable error", func() bool {
		resp, err = req.RequestWith(ctx, cl)
		if err != nil {
			t.Logf("ShareGroupHeartbeat: %s", err)
			return errors.Is(err, kerr.UnsupportedVersion)
		}
		return !coordinatorMovedCode(resp.ErrorCode)
	})
	if err != nil {
		t.Fatalf("ShareGroupHeartbeat: %s", err)
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		msg := ""
		if resp.ErrorMessage != nil {
			msg = *resp.ErrorMessage
		}
		t.Fatalf("ShareGroupHeartbeat of a new member = %s (%s), want no error", err, msg)
	}
	if resp.MemberEpoch < 1 || resp.HeartbeatIntervalMillis <= 0 {
		t.Errorf("ShareGroupHeartbeat = epoch %d, interval %d ms; want an epoch of 1 or more and an interval", resp.MemberEpoch, resp.HeartbeatIntervalMillis)
	}
	// The assignment comes once the share coordinator initialized the
	// partitions' state (in __share_group_state, which the brokers must
	// be able to create).
	req.SubscribedTopicNames = nil
	assigned := 0
	if !poll(20*time.Second, func() bool {
		req.MemberEpoch = resp.MemberEpoch
		if resp, err = req.RequestWith(ctx, cl); err != nil || resp.ErrorCode != 0 {
			t.Fatalf("ShareGroupHeartbeat = %+v, %v", resp, err)
		}
		if resp.Assignment != nil {
			assigned = 0
			for _, tp := range resp.Assignment.TopicPartitions {
				assigned += len(tp.Partitions)
			}
		}
		time.Sleep(time.Duration(resp.HeartbeatIntervalMillis) * time.Millisecond) // the heartbeat's pace, not synchronisation
		return assigned == 2
	}) {
		t.Errorf("the member's assignment holds %d partitions after 20 s, want both of %s", assigned, topic)
	}
	req.MemberEpoch = -1
	leave, err := req.RequestWith(ctx, cl)
	if err != nil || leave.ErrorCode != 0 {
		t.Errorf("the leave heartbeat = %+v, %v", leave, err)
	}
}

// TestIntegrationShareGroupUnsupportedBroker: Join with GroupProtocolShare
// against brokers without share groups (ZooKeeper-mode Kafka, before 4)
// fails at once with ErrInvalidConfig, saying what share groups need.
func TestIntegrationShareGroupUnsupportedBroker(t *testing.T) {
	kafkaCoordinatorTest(t)
	if os.Getenv("KAFKA_MODE") == "kraft" {
		t.Skip("ZooKeeper-mode brokers only: KRaft brokers may run share groups")
	}
	topic := newTopic(t, 1)
	began := time.Now()
	c, err := Join(uniqueName("share-unsupported"), TopicSubscription(topic), "", shareTestConfig())
	checkShareUnsupported(t, c, err, time.Since(began))
}

// TestIntegrationShareGroupFeatureOff: Join with GroupProtocolShare
// against KRaft brokers of Kafka 4.2 or later whose share.version feature
// is off fails at once with ErrInvalidConfig, saying what share groups
// need.
func TestIntegrationShareGroupFeatureOff(t *testing.T) {
	skipUnlessShareGroups(t)
	if testing.Short() {
		t.Skip("starts a cluster of its own; skipped under -short")
	}
	kafkaVersion, _ := testcluster.VersionsFromEnv()
	began := time.Now()
	cluster, err := testcluster.Start(testcluster.Options{Mode: testcluster.ModeKRaft, KafkaVersion: kafkaVersion, QuickBrokers: true,
		Features: map[string]int{"share.version": 0}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Close() })
	t.Logf("KRaft cluster of Kafka %s without share.version started in %s", cluster.KafkaVersion(), time.Since(began).Round(100*time.Millisecond))
	if err := cluster.CreateTopic("share-off", 1, 1); err != nil {
		t.Fatal(err)
	}
	config := shareTestConfig()
	config.Brokers = cluster.KafkaPeers()
	began = time.Now()
	c, err := Join(uniqueName("share-off"), TopicSubscription("share-off"), "", config)
	checkShareUnsupported(t, c, err, time.Since(began))
}

// checkShareUnsupported checks Join's answer (c, err, after took) for
// brokers without share groups: ErrInvalidConfig at once, saying what
// share groups need.
func checkShareUnsupported(t *testing.T, c Consumer, err error, took time.Duration) {
	t.Helper()
	if err == nil {
		_ = c.Close()
		t.Fatalf("Join with GroupProtocolShare against brokers without share groups (Kafka %s) succeeded", testKafkaVersion())
	}
	t.Logf("Join failed in %s: %s", took.Round(time.Millisecond), err)
	if !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("Join = %v, want an error wrapping ErrInvalidConfig", err)
	}
	for _, text := range []string{"do not run share groups", "Kafka 4.2 or later in KRaft mode", "share.version", "use GroupProtocolConsumer or GroupProtocolClassic"} {
		if !strings.Contains(err.Error(), text) {
			t.Errorf("Join = %q, want it to say %q", err, text)
		}
	}
	if took > 10*time.Second {
		t.Errorf("Join took %s to fail, want at most 10 s", took)
	}
}
