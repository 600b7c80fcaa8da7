package kafkaconsumer

import (
	"encoding/json"
	"errors"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/go-zookeeper/zk"
	samuelzk "github.com/samuel/go-zookeeper/zk"
)

func TestSubscriptionJSON(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name         string
		subscription Subscription
		pattern      string
		subscribed   map[string]int
	}{
		{"topics", TopicSubscription("a", "b"), "static", map[string]int{"a": 1, "b": 1}},
		{"static", StaticSubscription(map[string]int{"a": 2}), "static", map[string]int{"a": 2}},
		{"whitelist", WhitelistSubscription(regexp.MustCompile(`^test\..*`)), "white_list", map[string]int{`^test\..*`: 1}},
		{"blacklist", BlacklistSubscription(regexp.MustCompile(`^x`)), "black_list", map[string]int{"^x": 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := time.Now().UnixMilli()
			data, err := tc.subscription.JSON()
			if err != nil {
				t.Fatal(err)
			}
			var raw map[string]json.RawMessage
			if err := json.Unmarshal(data, &raw); err != nil {
				t.Fatal(err)
			}
			if len(raw) != 4 {
				t.Errorf("JSON %s has %d fields, want pattern, subscription, timestamp, version", data, len(raw))
			}
			var reg struct {
				Pattern      string         `json:"pattern"`
				Subscription map[string]int `json:"subscription"`
				Timestamp    string         `json:"timestamp"`
				Version      int            `json:"version"`
			}
			if err := json.Unmarshal(data, &reg); err != nil {
				t.Fatalf("JSON %s: %s", data, err)
			}
			if reg.Pattern != tc.pattern || reg.Version != 1 {
				t.Errorf("pattern %q version %d, want %q 1", reg.Pattern, reg.Version, tc.pattern)
			}
			if len(reg.Subscription) != len(tc.subscribed) {
				t.Errorf("subscription %v, want %v", reg.Subscription, tc.subscribed)
			}
			for k, v := range tc.subscribed {
				if reg.Subscription[k] != v {
					t.Errorf("subscription %v, want %v", reg.Subscription, tc.subscribed)
				}
			}
			ms, err := strconv.ParseInt(reg.Timestamp, 10, 64)
			if err != nil || ms < before || ms > time.Now().UnixMilli() {
				t.Errorf("timestamp %q is not the current unix time in ms as a string", reg.Timestamp)
			}
		})
	}
}

func TestStaticSubscriptionCopiesItsMap(t *testing.T) {
	t.Parallel()
	m := map[string]int{"a": 1}
	s := StaticSubscription(m)
	m["b"] = 1
	if got := len(s.(*staticSubscription).topics); got != 1 {
		t.Fatalf("subscription has %d topics after the caller changed its map, want 1", got)
	}
}

func TestRegexpSubscriptionSelects(t *testing.T) {
	t.Parallel()
	white := WhitelistSubscription(regexp.MustCompile(`^test\.`)).(*regexpSubscription)
	black := BlacklistSubscription(regexp.MustCompile(`^test\.`)).(*regexpSubscription)
	cases := []struct {
		topic        string
		white, black bool
	}{
		{"test.1", true, false},
		{"test.64", true, false},
		{"other", false, true},
		{"__consumer_offsets", false, false},
		{"__transaction_state", false, false},
	}
	for _, tc := range cases {
		if got := white.selects(tc.topic, false); got != tc.white {
			t.Errorf("whitelist selects %s = %v, want %v", tc.topic, got, tc.white)
		}
		if got := black.selects(tc.topic, false); got != tc.black {
			t.Errorf("blacklist selects %s = %v, want %v", tc.topic, got, tc.black)
		}
	}
	everything := WhitelistSubscription(regexp.MustCompile(`.*`)).(*regexpSubscription)
	if everything.selects("__consumer_offsets", false) {
		t.Error("a whitelist of everything selects an internal topic")
	}
	// As the original library sees them, for a group with its instances.
	if !everything.selects("__consumer_offsets", true) || !black.selects("__transaction_state", true) {
		t.Error("with internal topics, a whitelist of everything or a blacklist of test.* does not select an internal topic")
	}
	if white.selects("__consumer_offsets", true) {
		t.Error("with internal topics, a whitelist of test.* selects __consumer_offsets")
	}
}

func TestSubscriptionValidation(t *testing.T) {
	t.Parallel()
	bad := map[string]Subscription{
		"no topics":       TopicSubscription(),
		"empty topic":     TopicSubscription(""),
		"bad topic":       TopicSubscription("a/b"),
		"nil whitelist":   WhitelistSubscription(nil),
		"nil blacklist":   BlacklistSubscription(nil),
		"dot topic":       TopicSubscription(".."),
		"static no topic": StaticSubscription(nil),
	}
	for name, s := range bad {
		err := s.(interface{ validate() error }).validate()
		if !errors.Is(err, ErrInvalidSubscription) {
			t.Errorf("%s: validate() = %v, want ErrInvalidSubscription", name, err)
		}
	}
	if _, err := WhitelistSubscription(nil).JSON(); err == nil {
		t.Error("JSON of a nil whitelist did not fail")
	}
}

// firstEvent starts a merger of the watches, stopped at the end of the
// test, and returns its output.
func firstEvent(t *testing.T, watches []watchChan) <-chan zk.Event {
	m, out := startMerger(watches)
	t.Cleanup(func() { m.stop() })
	return out
}

// kazooWatches returns channels of kazoo-go's watches as watchChans.
func kazooWatches(chans ...<-chan samuelzk.Event) []watchChan {
	watches := make([]watchChan, len(chans))
	for i, ch := range chans {
		watches[i] = kazooWatch(ch)
	}
	return watches
}

// TestFirstEventMergesWatches: the merger passes on the first event of
// its watches, of the instance's session or of kazoo-go, and no other.
func TestFirstEventMergesWatches(t *testing.T) {
	t.Parallel()
	for _, first := range []string{"session", "kazoo"} {
		t.Run(first, func(t *testing.T) {
			t.Parallel()
			// Watches 0 and 2 of the session, 1, 3 and 4 of kazoo-go.
			session := []chan zk.Event{make(chan zk.Event, 1), make(chan zk.Event, 1)}
			kazoo := []chan samuelzk.Event{make(chan samuelzk.Event, 1), make(chan samuelzk.Event, 1), make(chan samuelzk.Event, 1)}
			out := firstEvent(t, []watchChan{sessionWatch(session[0]), kazooWatch(kazoo[0]), sessionWatch(session[1]), kazooWatch(kazoo[1]), kazooWatch(kazoo[2])})

			// One watch fires: its event comes out, converted; then
			// another fires, and nothing more comes out.
			if first == "session" {
				session[1] <- zk.Event{Type: zk.EventNodeChildrenChanged, State: zk.StateHasSession, Path: "/brokers/topics"}
				close(session[1])
			} else {
				kazoo[1] <- samuelzk.Event{Type: samuelzk.EventNodeChildrenChanged, State: samuelzk.StateHasSession, Path: "/brokers/topics"}
				close(kazoo[1])
			}
			ev, ok := <-out
			if !ok {
				t.Fatal("merged channel closed without an event")
			}
			if ev.Type != zk.EventNodeChildrenChanged || ev.State != zk.StateHasSession || ev.Path != "/brokers/topics" {
				t.Fatalf("event %+v, want the children-changed event", ev)
			}
			session[0] <- zk.Event{Type: zk.EventNodeDataChanged}
			close(session[0])
			kazoo[0] <- samuelzk.Event{Type: samuelzk.EventNodeDataChanged}
			close(kazoo[0])
			if _, ok := <-out; ok {
				t.Fatal("merged channel delivered a second event")
			}
		})
	}
}

func TestFirstEventConvertsSessionExpiry(t *testing.T) {
	t.Parallel()
	w := make(chan samuelzk.Event, 1)
	out := firstEvent(t, kazooWatches(w))
	w <- samuelzk.Event{Type: samuelzk.EventNotWatching, State: samuelzk.StateDisconnected, Err: samuelzk.ErrSessionExpired}
	close(w)
	ev := <-out
	if ev.Type != zk.EventNotWatching || !errors.Is(ev.Err, zk.ErrSessionExpired) {
		t.Fatalf("event %+v, want EventNotWatching with zk.ErrSessionExpired", ev)
	}
}

func TestFirstEventClosedInput(t *testing.T) {
	t.Parallel()
	session, kazoo := make(chan zk.Event), make(chan samuelzk.Event)
	for name, w := range map[string]struct {
		watch watchChan
		close func()
	}{
		"session": {sessionWatch(session), func() { close(session) }},
		"kazoo":   {kazooWatch(kazoo), func() { close(kazoo) }},
	} {
		out := firstEvent(t, []watchChan{w.watch})
		w.close()
		ev := <-out
		if ev.Type != zk.EventNotWatching || !errors.Is(ev.Err, zk.ErrClosing) {
			t.Fatalf("%s: event %+v, want EventNotWatching with zk.ErrClosing", name, ev)
		}
	}
}

func TestEventTypesAgree(t *testing.T) {
	t.Parallel()
	pairs := []struct {
		samuel samuelzk.EventType
		ours   zk.EventType
	}{
		{samuelzk.EventNodeCreated, zk.EventNodeCreated},
		{samuelzk.EventNodeDeleted, zk.EventNodeDeleted},
		{samuelzk.EventNodeDataChanged, zk.EventNodeDataChanged},
		{samuelzk.EventNodeChildrenChanged, zk.EventNodeChildrenChanged},
		{samuelzk.EventSession, zk.EventSession},
		{samuelzk.EventNotWatching, zk.EventNotWatching},
	}
	for _, p := range pairs {
		if zk.EventType(p.samuel) != p.ours {
			t.Errorf("event type %s converts to %s", p.samuel, zk.EventType(p.samuel))
		}
	}
	if zk.State(samuelzk.StateHasSession) != zk.StateHasSession || zk.State(samuelzk.StateExpired) != zk.StateExpired {
		t.Error("session states differ between the clients")
	}
}

func TestIntegrationWhitelistPicksUpNewTopics(t *testing.T) {
	parallelClusterTest(t)
	client := newTestClient(t)
	admin := newTestAdmin(t, client)
	prefix := uniqueName("it-wl")
	c := join(t, prefix, WhitelistSubscription(regexp.MustCompile("^"+regexp.QuoteMeta(prefix)+`\.in`)), nil)
	col := collect(c, nil)

	createTopic(t, admin, prefix+".in", 2)
	createTopic(t, admin, prefix+".out", 2)
	waitFor(t, 30*time.Second, "the new matching topic to be consumed", func() bool { return len(c.Stats()) == 2 })
	in := produce(t, client, prefix+".in", "in", 20)
	out := produce(t, client, prefix+".out", "out", 20)
	waitFor(t, 30*time.Second, "messages of the matching topic", func() bool { return col.has(in) })
	col.close(t)
	if n := col.received(out); n != 0 {
		t.Errorf("received %d messages of a topic that does not match", n)
	}
}

func TestIntegrationBlacklistPicksUpNewTopics(t *testing.T) {
	parallelClusterTest(t)
	client := newTestClient(t)
	admin := newTestAdmin(t, client)
	prefix := uniqueName("it-bl")
	// Everything but this test's excluded topic: the blacklist also takes
	// the topics of other tests, which this test ignores.
	config := testConfig()
	config.Offsets.Initial = sarama.OffsetNewest
	c := join(t, prefix, BlacklistSubscription(regexp.MustCompile("^"+regexp.QuoteMeta(prefix)+`\.excluded$`)), config)
	col := collect(c, nil)

	createTopic(t, admin, prefix+".included", 2)
	createTopic(t, admin, prefix+".excluded", 2)
	waitFor(t, 30*time.Second, "the new topic to be consumed", func() bool {
		n := 0
		for _, s := range c.Stats() {
			if s.Topic == prefix+".included" && s.HighWaterMark >= 0 {
				n++
			}
			if s.Topic == prefix+".excluded" {
				t.Errorf("blacklisted topic %s is consumed", s.Topic)
			}
		}
		return n == 2
	})
	// Values of this test's own: the consumer also receives the messages
	// of the other tests' topics.
	included := produce(t, client, prefix+".included", prefix+".in", 20)
	excluded := produce(t, client, prefix+".excluded", prefix+".out", 20)
	waitFor(t, 30*time.Second, "messages of the new topic", func() bool { return col.has(included) })
	col.close(t)
	if n := col.received(excluded); n != 0 {
		t.Errorf("received %d messages of the blacklisted topic", n)
	}
	for _, s := range c.Stats() {
		if internalTopics[s.Topic] {
			t.Errorf("internal topic %s is consumed", s.Topic)
		}
	}
}

// TestSubscriptionTopicCreatedWhileFoundMissing: a topic of the
// subscription that is created after the manager found it missing and
// before it set the watch on the topic list is consumed, although the
// watch, set after the creation, does not fire for it. ZooKeeper
// discovery only: not a TestIntegration, which make test-kraft runs with
// DiscoverFromKafka too.
func TestSubscriptionTopicCreatedWhileFoundMissing(t *testing.T) {
	parallelClusterTest(t)
	client := newTestClient(t)
	admin := newTestAdmin(t, client)
	topic := uniqueName("it-created-missing")
	created := make(chan error, 1)
	var once sync.Once
	config := testConfig()
	hooks := &testHooks{missingTopic: func(name string) {
		once.Do(func() {
			created <- admin.CreateTopic(name, &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1}, false)
		})
	}}
	c := joinWithHooksCleanup(t, uniqueName("it.created.missing"), TopicSubscription(topic), config, hooks)
	col := collect(c, nil)
	if err := receiveWithin(t, (<-chan error)(created), "creation of the missing topic"); err != nil {
		t.Fatal(err)
	}
	values := produce(t, client, topic, "v", 5)
	waitFor(t, 30*time.Second, "the messages of the topic created meanwhile", func() bool { return col.has(values) })
	col.close(t)
}
