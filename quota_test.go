package kafkaconsumer

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// setClientQuota sets the consumer_byte_rate quota of the client id
// clientID to rate bytes per second on the shared cluster, and removes it
// at the end of the test.
func setClientQuota(t *testing.T, admin sarama.ClusterAdmin, clientID string, rate float64) {
	t.Helper()
	entity := []sarama.QuotaEntityComponent{{EntityType: sarama.QuotaEntityClientID, MatchType: sarama.QuotaMatchExact, Name: clientID}}
	if err := admin.AlterClientQuotas(entity, sarama.ClientQuotasOp{Key: "consumer_byte_rate", Value: rate}, false); err != nil {
		t.Fatalf("set the quota of client id %s: %s", clientID, err)
	}
	t.Cleanup(func() {
		if err := admin.AlterClientQuotas(entity, sarama.ClientQuotasOp{Key: "consumer_byte_rate", Remove: true}, false); err != nil {
			t.Errorf("remove the quota of client id %s: %s", clientID, err)
		}
	})
	filter := []sarama.QuotaFilterComponent{{EntityType: sarama.QuotaEntityClientID, MatchType: sarama.QuotaMatchExact, Match: clientID}}
	waitFor(t, 10*time.Second, "the quota to be set", func() bool {
		entries, err := admin.DescribeClientQuotas(filter, true)
		return err == nil && len(entries) == 1 && entries[0].Values["consumer_byte_rate"] == rate
	})
}

// throttles returns how many responses the brokers throttled and the
// longest throttle time in ms, from the per-broker histograms
// "throttle-time-in-ms-for-broker-<id>" of sarama's metrics in config
// (sarama records a response there only when its throttle time is set).
func throttles(config *Config) (count, longest int64) {
	config.MetricRegistry.Each(func(name string, metric any) {
		if h, ok := metric.(interface {
			Count() int64
			Max() int64
		}); ok && strings.HasPrefix(name, "throttle-time-in-ms-for-broker-") {
			count += h.Count()
			longest = max(longest, h.Max())
		}
	})
	return count, longest
}

// TestClientQuota: a consumer whose client id is over a client quota
// (consumer_byte_rate, KIP-13) receives every message, single and in
// batches, and reports nothing on Errors: a broker over the quota answers
// at once with the throttle time and no partition, which is no error, and
// the next request waits the throttle out. The fetch engine read such a
// response as incomplete and put one ErrIncompleteResponse per partition on
// Errors for each throttle, each with a metadata refresh and a backoff.
func TestClientQuota(t *testing.T) {
	parallelClusterTest(t)
	if !testKafkaVersion().IsAtLeast(sarama.V2_6_0_0) {
		t.Skipf("setting a client quota through the admin API (AlterClientQuotas, KIP-546) needs Kafka 2.6, not %s", testKafkaVersion())
	}
	const (
		partitions = 4
		n          = 40000
		// Kafka measures the rate over at least 10 windows of a second
		// (quota.window.num 11): a consumer may take 10 s of its quota at
		// once (a fetch is cut to it), and is throttled after that.
		rate = 64 << 10
	)
	client := newTestClient(t)
	admin := newTestAdmin(t, client)
	topic := newTopic(t, partitions)
	clientIDs := map[int]string{0: uniqueName("quota-single"), 10: uniqueName("quota-batches")}
	for _, id := range clientIDs {
		setClientQuota(t, admin, id, rate)
	}
	values := produce(t, client, topic, "quota", n)
	produced := int64(0)
	for _, end := range newestOffsets(t, client, topic) {
		produced += end
	}

	for _, batch := range []int{0, 10} {
		t.Run(fmt.Sprintf("BatchSize %d", batch), func(t *testing.T) {
			t.Parallel()
			config := testConfig()
			config.BatchSize = batch
			config.ClientID = clientIDs[batch]
			start := time.Now()
			c := joinWithCleanup(t, uniqueName("quota"), TopicSubscription(topic), config)
			errs := logErrors(c)
			received, done := receiveAll(c)
			if !poll(30*time.Second, func() bool { return received.has(values) }) {
				t.Errorf("received %d of %d messages", received.received(values), n)
			}
			elapsed := time.Since(start)
			count, longest := throttles(config)
			if err := c.Close(); err != nil {
				t.Errorf("Close() = %v", err)
			}
			<-done
			<-errs.done
			if len(errs.errs) > 0 {
				t.Errorf("Errors() reported %s", errs.summary())
			}
			t.Logf("%d of %d messages in %s under a quota of %d B/s; %d throttled responses, the longest %d ms",
				received.received(values), produced, elapsed.Round(time.Millisecond), rate, count, longest)
			if count == 0 {
				t.Errorf("no response was throttled: the test showed nothing")
			}
		})
	}
}
