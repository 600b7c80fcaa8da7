package kafkaconsumer

// JoinGroup errors that no retry mends, on a real cluster: a session
// timeout outside the brokers' bounds, a group at group.max.size.

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer/internal/testcluster"
)

// TestIntegrationKafkaCoordinatorInvalidSessionTimeout: a session timeout
// below the brokers' group.min.session.timeout.ms (6 s) fails Join with
// an error wrapping INVALID_SESSION_TIMEOUT and ErrInvalidConfig that
// names the setting; a static member, whose first JoinGroup Join does not
// send, gets it on Errors(). Join succeeded, and the member retried every
// second for ever, consuming nothing, with the error only logged.
func TestIntegrationKafkaCoordinatorInvalidSessionTimeout(t *testing.T) {
	kafkaCoordinatorTest(t)
	topic := newTopic(t, 1)
	config := kafkaTestConfig()
	config.Consumer.Group.Session.Timeout = 3 * time.Second
	c, err := Join(uniqueName("kafkacoord-session"), TopicSubscription(topic), "", config)
	if err == nil {
		_ = c.Close()
		t.Fatal("Join succeeded with a session timeout of 3 s, below the brokers' group.min.session.timeout.ms")
	}
	if !errors.Is(err, sarama.ErrInvalidSessionTimeout) || !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "Session.Timeout") {
		t.Fatalf("Join = %q, want an error wrapping INVALID_SESSION_TIMEOUT and ErrInvalidConfig that names Session.Timeout", err)
	}

	config = kafkaTestConfig()
	config.Consumer.Group.Session.Timeout = 3 * time.Second
	config.Consumer.Return.Errors = true
	config.InstanceID = uniqueName("static")
	c = joinKafka(t, uniqueName("kafkacoord-session"), TopicSubscription(topic), config)
	select {
	case err := <-c.Errors():
		if !errors.Is(err, sarama.ErrInvalidSessionTimeout) {
			t.Fatalf("Errors() = %q, want INVALID_SESSION_TIMEOUT", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no error on Errors() within 20 s")
	}
}

// TestKafkaCoordinatorGroupMaxSize: on brokers with
// group.max.size 1, a second member's JoinGroup is refused with
// GROUP_MAX_SIZE_REACHED: Join succeeds (the first member may leave), the
// error reaches Errors() naming group.max.size, and the second member
// takes the partitions once the first closes.
func TestKafkaCoordinatorGroupMaxSize(t *testing.T) {
	needFaults(t)
	t.Parallel()
	cluster := startFaultCluster(t, testcluster.Options{ZooKeepers: 1, Brokers: 1,
		BrokerConfig: map[string]string{"group.max.size": "1"}})
	topic := uniqueName("maxsize")
	if err := cluster.CreateTopic(topic, 2, 1); err != nil {
		t.Fatal(err)
	}
	group := uniqueName("kafkacoord-maxsize")
	config := func() *Config {
		config := kafkaTestConfig()
		config.Brokers = cluster.KafkaPeers()
		config.Version = sarama.V2_4_0_0
		config.Consumer.Return.Errors = true
		return config
	}
	first, err := JoinContext(t.Context(), group, TopicSubscription(topic), "", config())
	if err != nil {
		t.Fatal(err)
	}
	second := joinKafka(t, group, TopicSubscription(topic), config())
	select {
	case err := <-second.Errors():
		if !errors.Is(err, sarama.ErrGroupMaxSizeReached) || !strings.Contains(err.Error(), "group.max.size") {
			t.Fatalf("Errors() = %q, want GROUP_MAX_SIZE_REACHED naming group.max.size", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no error on the second member's Errors() within 30 s")
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the second member to run both partitions", func() bool {
		stats := second.Stats()
		return len(stats) == 2 && stats[0].Claimed && stats[1].Claimed
	})
}
