package kafkaconsumer

import (
	"sync"
	"testing"
	"time"
)

// TestFetchBrokerClosedUnderneath closes the brokers that the fetch loops
// hold, as sarama's client does to a broker whose metadata request failed
// (it deregisters and closes the *Broker that every user of the client
// shares): the loops' next fetches fail with ErrNotConnected. The
// partitions fetch again from the leader the client opens again, nothing
// is lost, and nothing is reported on Errors: the connection was closed
// by the client, not lost to a broker's failure. In both modes.
func TestFetchBrokerClosedUnderneath(t *testing.T) {
	for _, mode := range []struct {
		name  string
		batch int
	}{{"messages", 0}, {"batches", 50}} {
		t.Run(mode.name, func(t *testing.T) {
			parallelClusterTest(t)
			topic := newTopic(t, 4)
			config := testConfig()
			config.BatchSize = mode.batch
			c := join(t, uniqueName("closed-under"), TopicSubscription(topic), config)
			var (
				mu   sync.Mutex
				errs []error
			)
			errsDone := make(chan struct{})
			go func() {
				defer close(errsDone)
				for err := range c.Errors() {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}()
			received, done := receiveAll(c)
			client := newTestClient(t)
			first := produce(t, client, topic, "before", 200)
			waitFor(t, 30*time.Second, "the messages produced before", func() bool { return received.has(first) })

			cm := c.(*consumerManager)
			closed := 0
			for _, f := range cm.fetchers {
				for p := int32(0); p < 4; p++ {
					if b, err := f.client.Leader(topic, p); err == nil && b.Close() == nil {
						closed++
					}
				}
			}
			if closed == 0 {
				t.Fatal("closed no broker of the fetchers' clients")
			}
			second := produce(t, client, topic, "after", 200)
			waitFor(t, 30*time.Second, "the messages produced after the close", func() bool { return received.has(second) })
			if err := c.Close(); err != nil {
				t.Errorf("Close() = %s", err)
			}
			<-done
			<-errsDone
			mu.Lock()
			defer mu.Unlock()
			for _, err := range errs {
				t.Errorf("reported on Errors: %s", err)
			}
		})
	}
}
