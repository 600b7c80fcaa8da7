package kafkaconsumer

// Pause and Resume on the real cluster: a paused partition holds while
// another flows, and a pause survives a rebalance that keeps the
// partition.

import (
	"testing"
	"time"
)

// recordBatches is record (gray_test.go) for a consumer set to batches:
// it records every message of every batch and acks the batch.
func (l *deliveryLog) recordBatches(c Consumer) {
	go func() {
		defer close(l.done)
		for b := range c.Batches() {
			now := time.Now()
			l.mu.Lock()
			for _, msg := range b.Messages {
				l.deliveries = append(l.deliveries, delivery{msg.Partition, msg.Offset, string(msg.Value), now})
			}
			l.mu.Unlock()
			c.AckBatch(b)
		}
	}()
}

// delivered returns how many times each value was delivered.
func (l *deliveryLog) delivered() map[string]int {
	deliveries, _ := l.snapshot()
	counts := make(map[string]int, len(deliveries))
	for _, d := range deliveries {
		counts[d.value]++
	}
	return counts
}

// hasAll reports whether every one of values was delivered.
func (l *deliveryLog) hasAll(values []string) bool {
	counts := l.delivered()
	for _, v := range values {
		if counts[v] == 0 {
			return false
		}
	}
	return true
}

// statsOf returns the stats of partition p in c's Stats.
func statsOf(t *testing.T, c Consumer, p int32) PartitionStats {
	t.Helper()
	for _, s := range c.Stats() {
		if s.Partition == p {
			return s
		}
	}
	t.Fatalf("partition %d not in Stats %+v", p, c.Stats())
	return PartitionStats{}
}

// TestIntegrationPauseHoldsAPartition: a paused partition hands out
// nothing for 10 s while the instance's other partition flows, and its
// acks still commit; Resume then hands out everything it held back.
func TestIntegrationPauseHoldsAPartition(t *testing.T) {
	parallelClusterTest(t)
	client := newTestClient(t)
	admin := newTestAdmin(t, client)
	topic := uniqueName("it-pause")
	createTopic(t, admin, topic, 2)
	group := uniqueName("it.pause")
	c := joinWithCleanup(t, group, TopicSubscription(topic), testConfig())
	l := &deliveryLog{done: make(chan struct{})}
	l.record(c)
	waitConsuming(t, c, 2, "the instance")
	before := produce(t, client, topic, "before", 20)
	waitFor(t, 30*time.Second, "the first messages", func() bool { return l.hasAll(before) })

	if err := c.Pause(topic, 0); err != nil {
		t.Fatal(err)
	}
	held := statsOf(t, c, 0)
	if !held.PausedByUser {
		t.Fatalf("Stats of the paused partition: %+v; want PausedByUser", held)
	}
	p := produceSteadily(t, client, topic, 100)
	const hold = 10 * time.Second
	ticker := time.NewTicker(100 * time.Millisecond) // the sampling rate of the check
	defer ticker.Stop()
	for end := time.Now().Add(hold); time.Now().Before(end); <-ticker.C {
		if s := statsOf(t, c, 0); s.HandedOut != held.HandedOut || s.LastHandedOut != held.LastHandedOut {
			t.Fatalf("the paused partition handed out %d messages (last offset %d, %d at Pause)",
				s.HandedOut-held.HandedOut, s.LastHandedOut, held.LastHandedOut)
		}
	}
	produced := p.finish()
	flowed := 0
	deliveries, _ := l.snapshot()
	for _, d := range deliveries {
		if d.partition == 0 && d.offset > held.LastHandedOut {
			t.Fatalf("a message of the paused partition was delivered: offset %d (last handed out %d)", d.offset, held.LastHandedOut)
		}
		if d.partition == 1 && d.value[0] == 'g' {
			flowed++
		}
	}
	if flowed < len(produced)/4 {
		t.Errorf("the other partition delivered %d of about %d messages while the first was paused", flowed, len(produced)/2)
	}
	if committed := committedOffsets(t, client, group, topic)[0]; committed != held.LastHandedOut+1 {
		t.Errorf("the paused partition committed %d; want %d (its acks commit while paused)", committed, held.LastHandedOut+1)
	}
	t.Logf("paused %s: 0 handed out, while the other partition delivered %d of %d produced", hold, flowed, len(produced))

	if err := c.Resume(topic, 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "every message after Resume", func() bool { return l.hasAll(produced) })
	ends := newestOffsets(t, client, topic)
	waitFor(t, 30*time.Second, "the committed offsets to reach the ends", func() bool {
		committed := committedOffsets(t, client, group, topic)
		return committed[0] == ends[0] && committed[1] == ends[1]
	})
}

// TestIntegrationPauseSurvivesRebalance: an instance reading batches
// pauses all its partitions; another joins and takes half of them. The
// partitions the first keeps stay paused (no hand-out, PausedByUser), the
// ones that moved are not paused on the second, which consumes them; after
// Resume the first hands out what it held back.
func TestIntegrationPauseSurvivesRebalance(t *testing.T) {
	parallelClusterTest(t)
	client := newTestClient(t)
	admin := newTestAdmin(t, client)
	topic := uniqueName("it-pause-rebalance")
	createTopic(t, admin, topic, 4)
	group := uniqueName("it.pause.rebalance")
	config := testConfig()
	config.BatchSize = 10
	a := joinWithCleanup(t, group, TopicSubscription(topic), config)
	la := &deliveryLog{done: make(chan struct{})}
	la.recordBatches(a)
	waitConsuming(t, a, 4, "the first instance")
	for p := range int32(4) {
		if err := a.Pause(topic, p); err != nil {
			t.Fatal(err)
		}
	}

	b := joinWithCleanup(t, group, TopicSubscription(topic), config)
	lb := &deliveryLog{done: make(chan struct{})}
	lb.recordBatches(b)
	waitFor(t, 30*time.Second, "two partitions each", func() bool { return len(a.Stats()) == 2 && len(b.Stats()) == 2 })
	waitConsuming(t, b, 2, "the second instance")
	values := produce(t, client, topic, "v", 40) // 10 per partition (round robin)

	var theirs []string
	for _, s := range b.Stats() {
		if s.PausedByUser {
			t.Errorf("partition %d moved to the second instance paused", s.Partition)
		}
	}
	mine := make(map[int32]bool)
	for _, s := range a.Stats() {
		mine[s.Partition] = true
		if !s.PausedByUser {
			t.Errorf("partition %d, kept by the first instance through the rebalance, is not paused any more", s.Partition)
		}
	}
	for i, v := range values {
		if !mine[int32(i%4)] {
			theirs = append(theirs, v)
		}
	}
	waitFor(t, 30*time.Second, "the second instance's share", func() bool { return lb.hasAll(theirs) })
	for _, s := range a.Stats() {
		if s.HandedOut != 0 {
			t.Errorf("the first instance handed out %d messages of its paused partition %d", s.HandedOut, s.Partition)
		}
	}
	for p := range mine {
		if err := a.Resume(topic, p); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 30*time.Second, "every message after Resume", func() bool {
		counts, more := la.delivered(), lb.delivered()
		for _, v := range values {
			if counts[v]+more[v] == 0 {
				return false
			}
		}
		return true
	})
}
