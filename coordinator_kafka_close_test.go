package kafkaconsumer

import (
	"errors"
	"github.com/IBM/sarama"
	"log/slog"
	"testing"
	"time"
)

// TestIntegrationKafkaCoordinatorCloseDuringRevocation: Close while the
// member stops a partition that a rebalance revoked, waiting for the acks
// of its messages, returns within its bound (MaxProcessingTime + the
// session timeout + 10 s). The manager waited for the revoked partition's
// stop before the shutdown stopped the others, each waiting up to
// MaxProcessingTime: twice that (as in a large group's rebalance storm,
// where Close took 32.1 s against a bound of 30 s).
func TestIntegrationKafkaCoordinatorCloseDuringRevocation(t *testing.T) {
	kafkaCoordinatorTest(t)
	topic := newTopic(t, 2)
	group := uniqueName("kafkacoord-closerevoke")
	values := produce(t, newTestClient(t), topic, group, 20)
	config := kafkaTestConfig()
	config.MaxProcessingTime = 25 * time.Second
	logger, rec := newRecordingLogger()
	config.Logger = logger
	a := joinKafka(t, group, TopicSubscription(topic), config)
	held := collect(a, func(*sarama.ConsumerMessage) bool { return false }) // acks nothing
	waitFor(t, 30*time.Second, "every message handed out to the first member", func() bool { return held.has(values) })

	b := joinKafka(t, group, TopicSubscription(topic), kafkaTestConfig())
	collect(b, nil)
	waitFor(t, 30*time.Second, "the first member to stop a revoked partition", func() bool {
		_, ok := rec.find(slog.LevelInfo, "(stopping 1,", nil)
		return ok
	})
	began := time.Now()
	_ = a.Close() // its final commits are of nothing acked
	took := time.Since(began)
	bound := config.MaxProcessingTime + config.Consumer.Group.Session.Timeout + 10*time.Second
	t.Logf("Close took %s during the stop of a revoked partition (bound %s)", took.Round(100*time.Millisecond), bound)
	if took > bound {
		t.Fatalf("Close took %s during the stop of a revoked partition, beyond its bound of %s (MaxProcessingTime + the session timeout + 10 s)", took.Round(100*time.Millisecond), bound)
	}
	<-held.done
}

// TestIntegrationKafkaCoordinatorCloseDuringJoin: Close while the
// member's JoinGroup waits for the rebalance (another member, which
// neither heartbeats nor joins again, holds it for its rebalance timeout
// of a minute) leaves the group at once and returns no error. Its
// LeaveGroup went on the group client's connection, held by the JoinGroup
// until Close cut it 5 s later: Close returned the LeaveGroup's error.
func TestIntegrationKafkaCoordinatorCloseDuringJoin(t *testing.T) {
	kafkaCoordinatorTest(t)
	topic := newTopic(t, 2)
	group := uniqueName("kafkacoord-closejoin")
	client := newTestClient(t)
	holdRebalance(t, client, group, topic)
	c, err := Join(group, TopicSubscription(topic), "", kafkaTestConfig())
	if err != nil {
		t.Fatal(err)
	}
	admin := newTestAdmin(t, client)
	waitFor(t, 30*time.Second, "the group to rebalance, waiting for the other member", func() bool {
		groups, err := admin.DescribeConsumerGroups([]string{group})
		return err == nil && len(groups) == 1 && groups[0].State == "PreparingRebalance"
	})
	began := time.Now()
	err = c.Close()
	took := time.Since(began)
	t.Logf("Close took %s during the JoinGroup", took.Round(100*time.Millisecond))
	if err != nil || took > 3*time.Second {
		t.Fatalf("Close = %v after %s during the JoinGroup, want nil within 3 s", err, took.Round(100*time.Millisecond))
	}
}

// holdRebalance joins group as a member of the library's protocol
// subscribing to topic, with a session and rebalance timeout of a minute,
// and never heartbeats nor joins again: the next rebalance waits for it.
// It leaves at the end of the test.
func holdRebalance(t *testing.T, client sarama.Client, group, topic string) {
	t.Helper()
	join := &sarama.JoinGroupRequest{Version: 2, GroupId: group, SessionTimeout: 60000, RebalanceTimeout: 60000, ProtocolType: kafkaProtocolType}
	if err := join.AddGroupProtocolMetadata(kafkaProtocol, &sarama.ConsumerGroupMemberMetadata{Topics: []string{topic}}); err != nil {
		t.Fatal(err)
	}
	joinRawMember(t, client, join, []byte{})
}

// joinRawMember sends join to the coordinator of its group, found
// through client, then the SyncGroup of the generation it joined, with
// assignment for the member (alone in the group), and returns the
// member's ID; the member leaves at the end of the test.
func joinRawMember(t *testing.T, client sarama.Client, join *sarama.JoinGroupRequest, assignment []byte) string {
	t.Helper()
	group := join.GroupId
	if err := client.RefreshCoordinator(group); err != nil {
		t.Fatal(err)
	}
	coordinator, err := client.Coordinator(group)
	if err != nil {
		t.Fatal(err)
	}
	joined, err := coordinator.JoinGroup(join)
	if err == nil && !errors.Is(joined.Err, sarama.ErrNoError) {
		err = joined.Err
	}
	if err != nil {
		t.Fatalf("JoinGroup of protocol type %s: %v", join.ProtocolType, err)
	}
	member := joined.MemberId
	t.Cleanup(func() {
		if _, err := coordinator.LeaveGroup(&sarama.LeaveGroupRequest{Version: 2, GroupId: group, MemberId: member}); err != nil {
			t.Errorf("LeaveGroup of the %s member: %v", join.ProtocolType, err)
		}
	})
	sync := &sarama.SyncGroupRequest{Version: 1, GroupId: group, GenerationId: joined.GenerationId, MemberId: member}
	sync.AddGroupAssignment(member, assignment)
	synced, err := coordinator.SyncGroup(sync)
	if err == nil && !errors.Is(synced.Err, sarama.ErrNoError) {
		err = synced.Err
	}
	if err != nil {
		t.Fatalf("SyncGroup of protocol type %s: %v", join.ProtocolType, err)
	}
	return member
}
