package kafkaconsumer

// The subscription's topics and watches on the instance's session, on the
// fake session (fakezk_test.go): what the manager goroutine reads
// (watchSubscription), what wakes it, and the watches it keeps.

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/go-zookeeper/zk"
	"github.com/wvanbergen/kazoo-go"
)

// topicData is the data of a topic's node with n partitions, as Kafka 3.9
// writes it; partition i's replicas are broker i%3+1, then the next.
func topicData(n int) []byte {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf(`"%d":[%d,%d]`, i, i%3+1, (i+1)%3+1)
	}
	return []byte(`{"partitions":{` + strings.Join(parts, ",") + `},"topic_id":"x7wTmZ0oQWq4DQbkb1Ykdw","adding_replicas":{},"removing_replicas":{},"version":3}`)
}

// putTopic creates topic's node with n partitions below chroot.
func putTopic(fake *fakeZK, chroot, topic string, n int) {
	fake.put(chroot+"/brokers/topics/"+topic, topicData(n), 0)
}

// describe returns the partitions as "topic/id:preferred replica".
func describe(partitions kazoo.PartitionList) string {
	names := make([]string, len(partitions))
	for i, p := range partitions {
		names[i] = fmt.Sprintf("%s/%d:%d", p.Topic().Name, p.ID, p.PreferredReplica())
	}
	return strings.Join(names, " ")
}

// watchOnce is watchSubscription of a consumer manager that must not need
// a retry.
func watchOnce(t *testing.T, cm *consumerManager) (kazoo.PartitionList, <-chan zk.Event) {
	t.Helper()
	topics := sessionTopics{conn: cm.zkConn, chroot: cm.config.Zookeeper.Chroot}
	partitions, changed, err := watchPartitions(cm.subscription, topics, cm.kz, &cm.watches, cm.originals)
	if err != nil {
		t.Fatalf("watch the subscription: %s", err)
	}
	return partitions, changed
}

// TestSessionTopicsPartitionCountChange: a static subscription reads its
// topic's partitions on the session; a partition added to the topic wakes
// the manager, which reads them again.
func TestSessionTopicsPartitionCountChange(t *testing.T) {
	t.Parallel()
	cm, fake := fakeSessionManager(t)
	defer cm.watches.stop()
	putTopic(fake, "", "t", 2)
	partitions, changed := watchOnce(t, cm)
	if got, want := describe(partitions), "t/0:1 t/1:2"; got != want {
		t.Fatalf("partitions %s, want %s", got, want)
	}

	fake.set("/brokers/topics/t", topicData(3))
	ev := receiveWithin(t, changed, "the topic's watch")
	if ev.Type != zk.EventNodeDataChanged || ev.Path != "/brokers/topics/t" {
		t.Fatalf("the watch fired %+v", ev)
	}
	partitions, _ = watchOnce(t, cm)
	if got, want := describe(partitions), "t/0:1 t/1:2 t/2:3"; got != want {
		t.Fatalf("partitions after the change %s, want %s", got, want)
	}
	wantCalls(t, fake, "GetW", 2, "one read of the topic per change")
	if n := fake.watched("/brokers/topics/t"); n != 1 {
		t.Fatalf("%d watches on the topic's node, want 1", n)
	}
}

// TestSessionTopicsMissingTopicCreated: a topic of a static subscription
// that does not exist is skipped, and its creation wakes the manager
// through the watch on the topic list.
func TestSessionTopicsMissingTopicCreated(t *testing.T) {
	t.Parallel()
	cm, fake := fakeSessionManager(t)
	defer cm.watches.stop()
	fake.put("/brokers/topics", nil, 0)
	partitions, changed := watchOnce(t, cm)
	if len(partitions) != 0 {
		t.Fatalf("partitions %s of a missing topic", describe(partitions))
	}
	putTopic(fake, "", "t", 1)
	ev := receiveWithin(t, changed, "the topic list's watch")
	if ev.Type != zk.EventNodeChildrenChanged || ev.Path != "/brokers/topics" {
		t.Fatalf("the watch fired %+v", ev)
	}
	partitions, _ = watchOnce(t, cm)
	if got, want := describe(partitions), "t/0:1"; got != want {
		t.Fatalf("partitions after the creation %s, want %s", got, want)
	}
}

// TestSessionTopicsPatternPicksUpNewTopics: a white list reads the topic
// list on the session and the partitions of the topics it selects; a new
// matching topic wakes the manager and is read, one that does not match
// is not, and the watches of the topics that did not change are reused:
// the session holds one watch per watched node.
func TestSessionTopicsPatternPicksUpNewTopics(t *testing.T) {
	t.Parallel()
	cm, fake := fakeSessionManager(t)
	defer cm.watches.stop()
	cm.subscription = WhitelistSubscription(regexp.MustCompile(`^a`))
	putTopic(fake, "", "a1", 1)
	putTopic(fake, "", "b1", 1)
	putTopic(fake, "", "__consumer_offsets", 1)
	partitions, changed := watchOnce(t, cm)
	if got, want := describe(partitions), "a1/0:1"; got != want {
		t.Fatalf("partitions %s, want %s", got, want)
	}

	for i, topic := range []string{"a2", "b2", "a3", "b3"} {
		putTopic(fake, "", topic, 2)
		receiveWithin(t, changed, "the topic list's watch after "+topic)
		partitions, changed = watchOnce(t, cm)
		t.Logf("after %s: %s", topic, describe(partitions))
		if i == 3 {
			if got, want := describe(partitions), "a1/0:1 a2/0:1 a2/1:2 a3/0:1 a3/1:2"; got != want {
				t.Fatalf("partitions %s, want %s", got, want)
			}
		}
	}
	wantCalls(t, fake, "ChildrenW", 5, "one read of the topic list per change")
	wantCalls(t, fake, "GetW", 3, "one read of each matching topic")
	for _, topic := range []string{"a1", "a2", "a3"} {
		if n := fake.watched("/brokers/topics/" + topic); n != 1 {
			t.Errorf("%d watches on %s, want 1", n, topic)
		}
	}
	if n := fake.watchedChildren("/brokers/topics"); n != 1 {
		t.Errorf("%d watches on the topic list, want 1", n)
	}

	// A deleted topic leaves the distribution: its deletion fires both
	// the list's watch and its own.
	fake.remove("/brokers/topics/a1")
	receiveWithin(t, changed, "the watches after a deletion")
	partitions, _ = watchOnce(t, cm)
	if got, want := describe(partitions), "a2/0:1 a2/1:2 a3/0:1 a3/1:2"; got != want {
		t.Fatalf("partitions after the deletion %s, want %s", got, want)
	}
}

// TestSessionTopicsChroot: the topics are read below the chroot of the
// connection string.
func TestSessionTopicsChroot(t *testing.T) {
	t.Parallel()
	cm, fake := fakeSessionManager(t)
	defer cm.watches.stop()
	cm.config.Zookeeper.Chroot = "/kafka"
	putTopic(fake, "", "t", 1) // outside the chroot: not this cluster's
	putTopic(fake, "/kafka", "t", 2)
	partitions, _ := watchOnce(t, cm)
	if got, want := describe(partitions), "t/0:1 t/1:2"; got != want {
		t.Fatalf("partitions %s, want those below the chroot, %s", got, want)
	}
}

// TestSessionTopicsSessionExpiry: the subscription's watches are the
// session's, and go with it: an expiry wakes the manager with
// zk.ErrSessionExpired, and it reads and watches again.
func TestSessionTopicsSessionExpiry(t *testing.T) {
	t.Parallel()
	cm, fake := fakeSessionManager(t)
	defer cm.watches.stop()
	cm.subscription = BlacklistSubscription(regexp.MustCompile(`^b`))
	putTopic(fake, "", "a", 1)
	_, changed := watchOnce(t, cm)
	fake.expire()
	ev := receiveWithin(t, changed, "the watches at the expiry")
	if ev.Type != zk.EventNotWatching || !errors.Is(ev.Err, zk.ErrSessionExpired) {
		t.Fatalf("the watch fired %+v, want EventNotWatching with zk.ErrSessionExpired", ev)
	}
	partitions, _ := watchOnce(t, cm)
	if got, want := describe(partitions), "a/0:1"; got != want {
		t.Fatalf("partitions after the expiry %s, want %s", got, want)
	}
	if n := fake.watched("/brokers/topics/a"); n != 1 {
		t.Fatalf("%d watches on the topic after the expiry, want 1", n)
	}
}

// TestSessionTopicsNodeNotATopics: a topic's node that cannot be read as
// a topic's fails the subscription, without a panic (kazoo-go's parser
// panics on a partition number out of 0..n-1), and without a new
// request and watch at every retry: its watch is kept, and the node's
// change is read. Partition numbers with gaps are taken as they are.
func TestSessionTopicsNodeNotATopics(t *testing.T) {
	t.Parallel()
	cm, fake := fakeSessionManager(t)
	defer cm.watches.stop()
	topics := sessionTopics{conn: cm.zkConn}
	fake.put("/brokers/topics/t", []byte(`{"partitions":{"0":[1],"x":[1]}}`), 0)
	for i := 0; i < 3; i++ {
		_, _, err := watchPartitions(cm.subscription, topics, nil, &cm.watches, false)
		if err == nil || !strings.Contains(err.Error(), `partition "x"`) {
			t.Fatalf("attempt %d: %v, want the bad partition number", i, err)
		}
	}
	wantCalls(t, fake, "GetW", 1, "the node is read again when it changes")

	fake.set("/brokers/topics/t", []byte(`{"partitions":{"0":[1],"5":[2]}}`))
	partitions, _, err := watchPartitions(cm.subscription, topics, nil, &cm.watches, false)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := describe(partitions), "t/0:1 t/5:2"; got != want {
		t.Fatalf("partitions %s, want %s", got, want)
	}
}

func TestParseTopicPartitions(t *testing.T) {
	t.Parallel()
	topic := kazooValues.Topic("t")
	for _, tc := range []struct {
		data, want, err string
	}{
		{string(topicData(3)), "t/0:1 t/1:2 t/2:3", ""},
		{`{"version":1,"partitions":{"1":[3,1],"0":[2]}}`, "t/0:2 t/1:3", ""},
		{`{"version":1,"partitions":{}}`, "", ""},
		{`{"version":1,"partitions":{"0":null}}`, "t/0:-1", ""},
		{`{"version":1,"partitions":{"-1":[1]}}`, "", `partition "-1"`},
		{`{"version":1,"partitions":{"0":["a"]}}`, "", "cannot unmarshal"},
		{``, "", "unexpected end"},
	} {
		partitions, err := parseTopicPartitions(topic, []byte(tc.data))
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: %s", tc.data, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: error %v, want one saying %q", tc.data, err, tc.err)
		case tc.err == "" && describe(partitions) != tc.want:
			t.Errorf("%s: partitions %s, want %s", tc.data, describe(partitions), tc.want)
		}
	}
}

// TestWatchPartitionsCustomWithoutKazoo: a custom Subscription without
// the kazoo-go connection that connect opens for it is an error, not a
// nil dereference in its WatchPartitions.
func TestWatchPartitionsCustomWithoutKazoo(t *testing.T) {
	t.Parallel()
	_, _, err := watchPartitions(customSubscription{TopicSubscription("t")}, sessionTopics{conn: newFakeZK()}, nil, new(watchCache), false)
	if !errors.Is(err, errNoKazoo) {
		t.Fatalf("watchPartitions = %v, want errNoKazoo", err)
	}
}

// TestSessionTopicsReadTogether: the topics of a subscription are read
// with their requests in flight together, not one round trip after the
// other; a topic whose watch has not fired is not read again.
func TestSessionTopicsReadTogether(t *testing.T) {
	t.Parallel()
	for _, pattern := range []bool{false, true} {
		cm, fake := fakeSessionManager(t)
		topics := []string{"t", "u", "v"}
		for _, topic := range topics {
			putTopic(fake, "", topic, 2)
		}
		cm.subscription = TopicSubscription(topics...)
		if pattern {
			cm.subscription = WhitelistSubscription(regexp.MustCompile(`^[tuv]$`))
		}
		rv := newRendezvousZK(fake, len(topics), func(op, p string) bool {
			return op == "GetW" && strings.HasPrefix(p, "/brokers/topics/")
		})
		cm.zkConn = rv
		partitions, changed := watchOnce(t, cm)
		if got, want := describe(partitions), "t/0:1 t/1:2 u/0:1 u/1:2 v/0:1 v/1:2"; got != want {
			t.Fatalf("pattern %t: partitions %s, want %s", pattern, got, want)
		}
		if n := rv.together(); n != len(topics) {
			t.Fatalf("pattern %t: at most %d of the %d topics were read together, want %d", pattern, n, len(topics), len(topics))
		}
		fake.set("/brokers/topics/u", topicData(3))
		receiveWithin(t, changed, "the topic's watch")
		calls := fake.count("GetW")
		if partitions, _ = watchOnce(t, cm); len(partitions) != 7 {
			t.Fatalf("pattern %t: %d partitions after u grew to 3, want 7", pattern, len(partitions))
		}
		if n := fake.count("GetW") - calls; n != 1 {
			t.Fatalf("pattern %t: %d topics read again after one changed, want 1", pattern, n)
		}
		cm.watches.stop()
	}
}
