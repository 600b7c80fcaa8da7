package process

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer"
)

// TestRunGiveBackDurableAcks: Run by key on a consumer with
// Config.DurableAcks, one message's handler waiting until Run stops. Run
// gives it back, and the messages of its key queued behind it; every
// other message was acked, out of offset order. After Close, the next
// consumer of the group hands out exactly the given-back messages: none
// of them was committed as acked, and none of the acked ones comes again.
func TestRunGiveBackDurableAcks(t *testing.T) {
	zookeeper, brokers := clusterPeers(t)
	topic, group := uniqueName("process.durable"), uniqueName("process-durable")
	createTopic(t, brokers, topic, 2)
	const n, keys, stuck = 200, 20, 50 // value i has key k(i mod 20)
	produceKeyed(t, brokers, topic, 0, n, keys, 1)
	var want []string // the stuck value and those of its key after it
	for i := stuck; i < n; i += keys {
		want = append(want, "v"+strconv.Itoa(i))
	}
	slices.Sort(want)

	config := consumerConfig()
	config.DurableAcks = true
	c1, err := kafkaconsumer.Join(group, kafkaconsumer.TopicSubscription(topic), zookeeper, config)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	handled := &handledLog{handled: make(map[string]int)}
	stop := runInBackground(t, c1, func(ctx context.Context, msg *sarama.ConsumerMessage) error {
		if string(msg.Value) == "v"+strconv.Itoa(stuck) {
			<-ctx.Done() // held until Run stops
			return ctx.Err()
		}
		handled.add(string(msg.Value))
		return nil
	}, Options{Concurrency: 16, Ordering: ByKey})
	waitFor(t, time.Minute, "every value but the stuck key's to be handled", func() bool { return handled.len() == n-len(want) })
	if err := stop(); err != nil {
		t.Fatalf("Run: %s", err)
	}
	if err := c1.Close(); err != nil {
		t.Fatalf("close: %s", err)
	}

	c2, err := kafkaconsumer.Join(group, kafkaconsumer.TopicSubscription(topic), zookeeper, config)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	again := &handledLog{handled: make(map[string]int)}
	stop = runInBackground(t, c2, func(_ context.Context, msg *sarama.ConsumerMessage) error {
		again.add(string(msg.Value))
		return nil
	}, Options{Concurrency: 16, Ordering: ByKey})
	waitFor(t, time.Minute, "the given-back values to be handled again", func() bool { return again.len() >= len(want) })
	// Anything acked before that came again would come with them, from the
	// committed offsets on: wait for both partitions' commits to reach
	// their ends, so that nothing is still to come.
	client, err := sarama.NewClient(brokers, saramaConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the commits to reach the ends of the partitions", func() bool {
		resp, err := admin.ListConsumerGroupOffsets(group, map[string][]int32{topic: {0, 1}})
		if err != nil {
			return false
		}
		for p := int32(0); p < 2; p++ {
			end, err := client.GetOffset(topic, p, sarama.OffsetNewest)
			b := resp.GetBlock(topic, p)
			if err != nil || b == nil || b.Offset != end {
				return false
			}
		}
		return true
	})
	if err := stop(); err != nil {
		t.Fatalf("Run: %s", err)
	}
	if err := c2.Close(); err != nil {
		t.Fatalf("close: %s", err)
	}
	again.mu.Lock()
	var got []string
	for v := range again.handled {
		got = append(got, v)
	}
	again.mu.Unlock()
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("after the restart, handled %v; want the given-back ones %v", got, want)
	}
	t.Logf("%d values: %d handled and acked, %d given back and handled again after the restart, 0 acked ones again",
		n, n-len(want), len(got))
}
