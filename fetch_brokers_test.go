package kafkaconsumer

// The fetch engine's loops on the real cluster: with several brokers,
// one per broker for the whole instance, whatever fetcher (client) each
// partition starts on; with one broker, one per fetcher.

import (
	"regexp"
	"testing"
	"time"

	"github.com/kafkaconsumer/kafkaconsumer/internal/fetch"
)

// TestIntegrationOneLoopPerBroker: on a cluster of several brokers, an
// instance's partitions, spread over its fetchers (fetcherOf), are
// fetched by one broker loop per broker that leads any of them, each
// loop's share of MaxBufferedBytes the limit over those brokers: a
// broker's partitions go in one request, not in one per fetcher, each
// with half the share (twice the requests, each half as large). On a
// cluster of one broker, each fetcher has its loop, so that one fetches
// while the other decodes.
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
	hubs := make(map[*fetch.Hub]bool)
	var budget *fetch.Budget
	for _, f := range cm.fetchers {
		if f.hub == nil {
			t.Skip("the fetch engine does not serve this configuration (fetchVersion)")
		}
		if hubs[f.hub] {
			continue
		}
		hubs[f.hub] = true
		budget = f.hub.Budget()
		for _, id := range f.hub.Brokers() {
			loops[id]++
		}
	}
	perBroker := 1
	if len(client.Brokers()) == 1 {
		perBroker = fetchConnections
	}
	for id, n := range loops {
		if n != perBroker {
			t.Errorf("broker %d of %d has %d loops of the instance (over %d hubs); want %d", id, len(client.Brokers()), n, len(hubs), perBroker)
		}
	}
	if len(loops) != len(leaders) {
		t.Errorf("loops to %d brokers; want loops to each of the %d leading the topic's partitions", len(loops), len(leaders))
	}
	if got, want := budget.Share(), config.MaxBufferedBytes/int64(perBroker*len(leaders)); got != want {
		t.Errorf("a loop's share of MaxBufferedBytes %d is %d; want it over the %d loops: %d", config.MaxBufferedBytes, got, perBroker*len(leaders), want)
	}
}
