package kafkaconsumer

// The fetch engine's loops on the real cluster: one per broker for the
// whole instance, whatever fetcher (client) each partition starts on.

import (
	"regexp"
	"testing"
	"time"
)

// TestIntegrationOneLoopPerBroker: an instance's partitions, spread over
// its fetchers (fetcherOf), are fetched by one broker loop per broker
// that leads any of them, each loop's share of MaxBufferedBytes the
// limit over those brokers: a broker's partitions go in one request, not
// in one per fetcher, each with half the share (twice the requests, each
// half as large).
func TestIntegrationOneLoopPerBroker(t *testing.T) {
	parallelClusterTest(t)
	client := newTestClient(t)
	admin := newTestAdmin(t, client)
	topic := uniqueName("it-oneloop")
	const partitions = 6 // both fetchers get some of each broker's (fetcherOf alternates them)
	createTopic(t, admin, topic, partitions)
	values := produce(t, client, topic, "m", 4*partitions)

	leaders := make(map[int32]bool) // broker IDs leading a partition of topic
	for p := range int32(partitions) {
		leader, err := client.Leader(topic, p)
		if err != nil {
			t.Fatalf("leader of %s/%d: %s", topic, p, err)
		}
		leaders[leader.ID()] = true
	}

	config := testConfig()
	c := joinWithCleanup(t, uniqueName("it.oneloop"), WhitelistSubscription(regexp.MustCompile("^"+regexp.QuoteMeta(topic)+"$")), config)
	l := &deliveryLog{done: make(chan struct{})}
	l.record(c)
	waitFor(t, 30*time.Second, "the messages", func() bool { return l.hasAll(values) })

	cm := c.(*consumerManager)
	loops := make(map[int32]int) // broker ID: the instance's loops to it
	hubs := make(map[*fetchHub]bool)
	var budget *fetchBudget
	for _, f := range cm.fetchers {
		if f.hub == nil {
			t.Skip("the fetch engine does not serve this configuration (fetchVersion)")
		}
		if hubs[f.hub] {
			continue
		}
		hubs[f.hub] = true
		budget = f.hub.budget
		f.hub.mu.Lock()
		for id := range f.hub.loops {
			loops[id]++
		}
		f.hub.mu.Unlock()
	}
	for id, n := range loops {
		if n != 1 {
			t.Errorf("broker %d has %d loops of the instance (over %d hubs); want 1, holding all its partitions", id, n, len(hubs))
		}
	}
	if len(loops) != len(leaders) {
		t.Errorf("loops to %d brokers; want one to each of the %d leading the topic's partitions", len(loops), len(leaders))
	}
	if got, want := budget.share(), config.MaxBufferedBytes/int64(len(leaders)); got != want {
		t.Errorf("a loop's share of MaxBufferedBytes %d is %d; want it over the %d brokers: %d", config.MaxBufferedBytes, got, len(leaders), want)
	}
}
