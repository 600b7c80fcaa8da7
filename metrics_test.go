package kafkaconsumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
)

// recordingMetrics is a Metrics that keeps a line per event.
type recordingMetrics struct {
	BaseMetrics
	mu     sync.Mutex
	events []string        // guarded by mu
	waits  []time.Duration // guarded by mu: the ClaimWaited durations
}

func (m *recordingMetrics) add(format string, args ...interface{}) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.events = append(m.events, fmt.Sprintf(format, args...))
}

func (m *recordingMetrics) Rebalanced(group string, r Rebalance, took time.Duration) {
	m.add("rebalanced assigned=%d revoked=%d", len(r.Assigned), len(r.Revoked))
}

func (m *recordingMetrics) ClaimWaited(group string, tp TopicPartition, waited time.Duration) {
	m.mu.Lock()
	m.waits = append(m.waits, waited)
	m.mu.Unlock()
	m.add("claim waited %s/%d", tp.Topic, tp.Partition)
}

func (m *recordingMetrics) RegistrationLost(group string) { m.add("registration lost") }

func (m *recordingMetrics) Committed(group string, took time.Duration) { m.add("committed") }

func (m *recordingMetrics) CommitFailed(group string, tp TopicPartition, err error) {
	m.add("commit failed %s/%d", tp.Topic, tp.Partition)
}

func (m *recordingMetrics) Paused(group string, tp TopicPartition) {
	m.add("paused %s/%d", tp.Topic, tp.Partition)
}

// count returns how many events start with prefix.
func (m *recordingMetrics) count(prefix string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, e := range m.events {
		if strings.HasPrefix(e, prefix) {
			n++
		}
	}
	return n
}

// TestIntegrationMetrics: Config.Metrics hears of the claim wait, the
// rebalances, the commit rounds and a lost registration of a consumer,
// and its Stats count what it handed out and what was acked.
func TestIntegrationMetrics(t *testing.T) {
	parallelClusterTest(t)
	topic := newTopic(t, 4)
	client := newTestClient(t)
	group := uniqueName("it.metrics")
	startGroupAt(t, client, group, topic)
	conn, chroot := testZookeeper(t, zookeeperPeers)
	base := chroot + "/consumers/" + group
	t.Cleanup(func() {
		if err := deleteRecursive(conn, base); err != nil {
			t.Errorf("delete %s: %s", base, err)
		}
	})
	for _, path := range []string{chroot + "/consumers", base, base + "/owners", base + "/owners/" + topic} {
		if _, err := conn.Create(path, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			t.Fatalf("create %s: %s", path, err)
		}
	}
	owner := base + "/owners/" + topic + "/1"
	if _, err := conn.Create(owner, []byte("another-instance"), 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatalf("create %s: %s", owner, err)
	}

	metrics := &recordingMetrics{}
	logger, rec := newRecordingLogger()
	config := testConfig()
	config.Metrics = metrics
	config.Logger = logger
	type result struct {
		c   Consumer
		err error
	}
	done := make(chan result, 1)
	joinStart := time.Now()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c, err := JoinContext(ctx, group, TopicSubscription(topic), zookeeperPeers, config)
		done <- result{c, err}
	}()
	waitFor(t, 30*time.Second, "the claim of "+topic+"/1 to wait", func() bool {
		_, ok := rec.find(slog.LevelDebug, "still owned by another-instance", nil)
		return ok
	})
	if err := conn.Delete(owner, -1); err != nil {
		t.Fatalf("delete %s: %s", owner, err)
	}
	var j result
	select {
	case j = <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("JoinContext did not return within 30 s of the release of %s/1", topic)
	}
	joined := time.Since(joinStart)
	if j.err != nil {
		t.Fatalf("Join: %s", j.err)
	}
	c := j.c
	if n := metrics.count("claim waited " + topic + "/1"); n != 1 {
		t.Errorf("ClaimWaited called %d times for %s/1; want 1", n, topic)
	} else if w := metrics.waits[0]; w <= 0 || w > joined {
		t.Errorf("ClaimWaited reported %s; want a wait within the %s Join took", w, joined)
	}
	// The manager reports the rebalance after it let JoinContext return.
	waitFor(t, 10*time.Second, "the rebalance reported to Metrics", func() bool {
		return metrics.count("rebalanced assigned=4 revoked=0") > 0
	})
	if n := metrics.count("rebalanced assigned=4 revoked=0"); n != 1 {
		t.Errorf("Rebalanced with 4 assigned reported %d times; want 1", n)
	}

	values := produce(t, client, topic, group, 40)
	col := collect(c, nil)
	waitFor(t, 30*time.Second, "40 messages handed out and acked, and a commit round", func() bool {
		var handedOut, acked uint64
		for _, s := range c.Stats() {
			handedOut += s.HandedOut
			acked += s.Acked
		}
		return col.has(values) && handedOut == 40 && acked == 40 && metrics.count("committed") > 0
	})

	// A registration deleted by hand is a lost registration.
	id := c.(*consumerManager).instance.ID
	if err := conn.Delete(base+"/ids/"+id, -1); err != nil {
		t.Fatalf("delete the registration: %s", err)
	}
	waitFor(t, 30*time.Second, "RegistrationLost", func() bool { return metrics.count("registration lost") == 1 })
	waitAllClaimed(t, c, 4, 30*time.Second, "the consumer registered again")
	col.close(t)
	if n := metrics.count("rebalanced assigned=0 revoked=4"); n < 2 {
		t.Errorf("Rebalanced with 4 revoked reported %d times; want 2 (lost registration, Close)", n)
	}
	if n := metrics.count("commit failed"); n != 0 {
		t.Errorf("%d failed commits reported", n)
	}
}
