package kafkaconsumer

// The move of a Kafka-coordinated group between the classic protocol and
// the consumer protocol (KIP-848), live, by a rolling restart with
// Config.GroupProtocol changed (docs/consumer-protocol.md, "Moving a
// group"): the brokers' group.consumer.migration.policy (bidirectional by
// default) converts the group while members of both protocols share it.

import (
	"testing"
	"time"
)

// TestIntegrationConsumerProtocolRollingMove: a classic group of three
// instances (child processes) under a steady load is moved to the
// consumer protocol by a rolling restart (each classic instance is
// replaced by a consumer-protocol one, one at a time), and back the same
// way. After each step the live instances share every partition. Nothing
// is lost, no partition is handed out by two instances at once, no
// committed offset moves back, every Close is bounded.
func TestIntegrationConsumerProtocolRollingMove(t *testing.T) {
	consumerProtocolTest(t)
	needFaults(t)
	r := newKafkaFaultRun(t, kafkaPeers, 8, 1)
	sampler := sampleCommitted(t, r.client, r.group, r.topic)
	start := func(consumer bool) *child {
		r.opts.consumerProtocol = consumer
		return r.start()
	}
	live := []*child{start(false), start(false), start(false)}
	r.waitShared(30*time.Second, live...)
	wait := r.produceSteadily(3000, 40*time.Second)
	roll := func(to bool) {
		name := "classic"
		if to {
			name = "consumer"
		}
		began := time.Now()
		for i := range live {
			next := start(to)
			live[i].terminate(t)
			live[i] = next
			step := time.Now()
			r.waitShared(60*time.Second, live...)
			t.Logf("to the %s protocol: instance %d of %d replaced; the group shared every partition %s after the old one closed",
				name, i+1, len(live), time.Since(step).Round(time.Millisecond))
		}
		t.Logf("the group moved to the %s protocol in %s", name, time.Since(began).Round(time.Millisecond))
	}
	roll(true)
	roll(false)
	wait()
	r.finishKafka(sampler)
}
