package kafkaconsumer

// Consuming, on the real cluster: one instance on one and two topics, and
// what misuse of the API does.

import (
	"testing"
	"time"

	"github.com/IBM/sarama"
)

func TestIntegrationOneInstanceOneTopic(t *testing.T) {
	needCluster(t)
	verifyNoClusterLeaks(t)
	client := newTestClient(t)
	group := uniqueName("it.one")
	start := startGroupAt(t, client, group, "test.4")

	c := join(t, group, TopicSubscription("test.4"), nil)
	col := collect(c, nil)
	values := produce(t, client, "test.4", group, 100)
	waitFor(t, 30*time.Second, "100 messages", func() bool { return col.has(values) })
	col.close(t)

	checkCommitted(t, client, group, start, map[string]int{"test.4": 100})
	checkDeregistered(t, group, c)
}

func TestIntegrationOneInstanceTwoTopics(t *testing.T) {
	needCluster(t)
	verifyNoClusterLeaks(t)
	client := newTestClient(t)
	group := uniqueName("it.two")
	start := startGroupAt(t, client, group, "test.4", "test.1")

	c := join(t, group, TopicSubscription("test.4", "test.1"), nil)
	col := collect(c, nil)
	values := append(produce(t, client, "test.4", group+".a", 100), produce(t, client, "test.1", group+".b", 200)...)
	waitFor(t, 30*time.Second, "300 messages", func() bool { return col.has(values) })
	col.close(t)

	checkCommitted(t, client, group, start, map[string]int{"test.4": 100, "test.1": 200})
	checkDeregistered(t, group, c)
}

func TestIntegrationMisuse(t *testing.T) {
	needCluster(t)
	verifyNoClusterLeaks(t)
	c := join(t, uniqueName("it.misuse"), TopicSubscription("test.1"), nil)
	c.Ack(nil)
	c.Ack(&sarama.ConsumerMessage{Topic: "nope", Partition: 3, Offset: 1})
	c.Interrupt()
	c.Interrupt()
	if err := c.Close(); err != nil {
		t.Fatalf("Close after Interrupt = %s", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close = %s", err)
	}
	c.Ack(&sarama.ConsumerMessage{Topic: "test.1", Partition: 0, Offset: 1})
	if stats := c.Stats(); len(stats) != 0 {
		t.Errorf("Stats after Close = %v", stats)
	}
	for range c.Errors() {
	}
}
