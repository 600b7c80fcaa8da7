package kafkaconsumer

// The unexported ways in that the tests use: Join with the fault injection
// points of testHooks set on the consumer instance.

import (
	"context"
	"testing"
)

// joinWithHooks is Join, with hooks set on the consumer instance.
func joinWithHooks(group string, subscription Subscription, zookeeper string, config *Config, hooks *testHooks) (Consumer, error) {
	return joinGroup(context.Background(), group, subscription, zookeeper, config, false, hooks)
}

// joinContextWithHooks is JoinContext, with hooks set on the consumer
// instance.
func joinContextWithHooks(ctx context.Context, group string, subscription Subscription, zookeeper string, config *Config, hooks *testHooks) (Consumer, error) {
	return joinGroup(ctx, group, subscription, zookeeper, config, true, hooks)
}

// joinWithHooksCleanup is joinWithCleanup, with hooks set on the consumer
// instance.
func joinWithHooksCleanup(t *testing.T, group string, subscription Subscription, config *Config, hooks *testHooks) Consumer {
	t.Helper()
	c, err := joinWithHooks(group, subscription, zookeeperPeers, config, hooks)
	if err != nil {
		t.Fatalf("Join(%s) = %s", group, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// kafkaMemberOf returns the generation and member ID of a consumer of a
// Kafka-coordinated group.
func kafkaMemberOf(c Consumer) (generation int32, memberID string) {
	m := c.(*consumerManager).coord.(*kafkaCoordinator).current()
	return m.generation, m.id
}
