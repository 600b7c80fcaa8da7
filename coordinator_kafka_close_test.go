package kafkaconsumer

import (
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
