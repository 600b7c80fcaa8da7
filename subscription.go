package kafkaconsumer

// Subscriptions: what a group consumes. The public API first (the
// Subscription interface and the constructors of this package's
// subscriptions), then their implementations: a static list of topics,
// white and black lists, the registration JSON they store, and how the
// consumer watches their partitions through its watch cache
// (watch_cache.go), on its own ZooKeeper session (topics.go).

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/wvanbergen/kazoo-go"
)

// Subscription describes what a consumer group consumes. Every instance of a
// group should use the same subscription; the behaviour is undefined if they
// do not. The implementations of this package are safe for concurrent use.
type Subscription interface {
	// WatchPartitions returns the partitions to consume now, and a channel
	// that receives one event (and is then closed) at the first change to
	// them. When an error is returned, the caller tries again later.
	//
	// The consumer does not call it for the subscriptions of this package:
	// it reads and watches their topics on its own ZooKeeper session, the
	// one that holds its registration and claims, and keeps the watches
	// that have not fired yet to reuse them (it keeps them itself, so one
	// subscription value may serve several consumers). Their
	// WatchPartitions, called directly, reads through the given kazoo and
	// sets new watches every time.
	//
	// A custom Subscription's WatchPartitions is called with a kazoo-go
	// connection that the consumer opens for it alone, a second ZooKeeper
	// session, again each time the channel fires. kazoo-go's watches are
	// one-shot, and its ZooKeeper client keeps every watch it sets until
	// that watch fires: an implementation that sets a watch on each of
	// many nodes at every call leaves one more watcher per node that did
	// not change, each time. That session is closed with the consumer, but
	// kazoo-go's client, which cannot be given a dialer, is not cut as the
	// consumer's own session is: when ZooKeeper does not answer at Close,
	// it may still connect afterwards to send its close.
	WatchPartitions(kazoo *kazoo.Kazoo) (kazoo.PartitionList, <-chan zk.Event, error)

	// JSON returns the subscription as it is stored with the instance's
	// registration in ZooKeeper, in the layout of Kafka's old high-level
	// consumer. Join adds a "client" field to it, which tells the group's
	// other instances that this one is not of the original library (see
	// "Upgrading from wvanbergen/kafka" in the README).
	JSON() ([]byte, error)
}

// SubscriptionPattern is the kind of a subscription, as stored in the
// "pattern" field of its JSON.
type SubscriptionPattern string

// The subscription patterns of Kafka's old high-level consumer.
const (
	SubscriptionPatternStatic    SubscriptionPattern = "static"
	SubscriptionPatternWhiteList SubscriptionPattern = "white_list"
	SubscriptionPatternBlackList SubscriptionPattern = "black_list"
)

// TopicSubscription returns a static subscription to all partitions of the
// given topics. A topic that does not exist is skipped (with a log line) and
// picked up when it is created.
func TopicSubscription(topics ...string) Subscription {
	m := make(map[string]int, len(topics))
	for _, topic := range topics {
		m[topic] = 1
	}
	return StaticSubscription(m)
}

// StaticSubscription returns a static subscription to the topics that are
// the keys of the map. The values are the stream counts of Kafka's old
// consumer: they are stored in the registration, and have no other effect.
// The map is copied.
func StaticSubscription(topics map[string]int) Subscription {
	m := make(map[string]int, len(topics))
	for topic, streams := range topics {
		m[topic] = streams
	}
	return &staticSubscription{topics: m}
}

// WhitelistSubscription returns a subscription to every topic whose name
// matches the pattern, except Kafka's internal topics. Topics created later
// are picked up.
func WhitelistSubscription(pattern *regexp.Regexp) Subscription {
	return &regexpSubscription{pattern: SubscriptionPatternWhiteList, regexp: pattern, include: true}
}

// BlacklistSubscription returns a subscription to every topic whose name does
// not match the pattern, except Kafka's internal topics. Topics created later
// are picked up.
func BlacklistSubscription(pattern *regexp.Regexp) Subscription {
	return &regexpSubscription{pattern: SubscriptionPatternBlackList, regexp: pattern, include: false}
}

// internalTopics are never selected by a white or black list, as Kafka's
// own consumers do with exclude.internal.topics=true.
var internalTopics = map[string]bool{
	"__consumer_offsets":  true,
	"__transaction_state": true,
}

// registration is the JSON layout of an instance's registration.
type registration struct {
	Pattern      SubscriptionPattern `json:"pattern"`
	Subscription map[string]int      `json:"subscription"`
	Timestamp    string              `json:"timestamp"`
	Version      int                 `json:"version"`
}

func marshalRegistration(pattern SubscriptionPattern, subscription map[string]int, now time.Time) ([]byte, error) {
	return json.Marshal(registration{
		Pattern:      pattern,
		Subscription: subscription,
		Timestamp:    strconv.FormatInt(now.UnixMilli(), 10),
		Version:      1,
	})
}

// staticSubscription is what TopicSubscription and StaticSubscription
// return.
type staticSubscription struct {
	topics map[string]int // read only after construction
}

func (ss *staticSubscription) validate() error {
	if len(ss.topics) == 0 {
		return fmt.Errorf("%w: no topic given", ErrInvalidSubscription)
	}
	for topic := range ss.topics {
		if err := validateTopicName(topic); err != nil {
			return err
		}
	}
	return nil
}

// WatchPartitions implements Subscription. Every call sets new watches.
func (ss *staticSubscription) WatchPartitions(kz *kazoo.Kazoo) (kazoo.PartitionList, <-chan zk.Event, error) {
	return ss.watchPartitionsCached(kazooTopics{kz}, new(watchCache), false)
}

// watchPartitionsCached implements cachingSubscription.
func (ss *staticSubscription) watchPartitionsCached(r topicWatcher, cache *watchCache, _ bool) (kazoo.PartitionList, <-chan zk.Event, error) {
	names := make([]string, 0, len(ss.topics))
	for topic := range ss.topics {
		names = append(names, topic)
	}
	sort.Strings(names)

	for {
		cache.begin()
		cache.prefetch(r, names)
		var (
			result  kazoo.PartitionList
			missing []string
		)
		for _, name := range names {
			partitions, err := cache.watchTopic(r, name)
			if errors.Is(err, zk.ErrNoNode) {
				missing = append(missing, name)
				if cache.missingTopic != nil {
					cache.missingTopic(name)
				}
				continue
			} else if err != nil {
				return nil, nil, fmt.Errorf("watch partitions of topic %s: %w", name, err)
			}
			result = append(result, partitions...)
		}
		if len(missing) == 0 {
			return result, cache.end(), nil
		}
		// A missing topic has no node to watch: watch the topic list, so
		// that its creation wakes the manager. A topic created after its
		// read and before this watch would not: read again then.
		topics, err := cache.watchTopics(r)
		if err != nil {
			return nil, nil, fmt.Errorf("watch topic list: %w", err)
		}
		if !anyListed(topics, missing) {
			for _, name := range missing {
				cache.logf(slog.LevelWarn, "Topic %s of the subscription does not exist; skipping it until it is created.", name)
			}
			return result, cache.end(), nil
		}
	}
}

// anyListed reports whether one of names is in topics.
func anyListed(topics kazoo.TopicList, names []string) bool {
	for _, topic := range topics {
		if slices.Contains(names, topic.Name) {
			return true
		}
	}
	return false
}

// JSON implements Subscription.
func (ss *staticSubscription) JSON() ([]byte, error) {
	return marshalRegistration(SubscriptionPatternStatic, ss.topics, time.Now())
}

// regexpSubscription is what WhitelistSubscription and
// BlacklistSubscription return.
type regexpSubscription struct {
	pattern SubscriptionPattern
	regexp  *regexp.Regexp
	include bool // consume the topics that match (white list) or the others
}

func (rs *regexpSubscription) validate() error {
	if rs.regexp == nil {
		return fmt.Errorf("%w: %s subscription has a nil regular expression", ErrInvalidSubscription, rs.pattern)
	}
	return nil
}

// selects tells whether the subscription consumes the topic; internal
// topics only when internal is set (as the original library's lists do).
func (rs *regexpSubscription) selects(topic string, internal bool) bool {
	return (internal || !internalTopics[topic]) && rs.regexp.MatchString(topic) == rs.include
}

// WatchPartitions implements Subscription. Every call sets new watches.
func (rs *regexpSubscription) WatchPartitions(kz *kazoo.Kazoo) (kazoo.PartitionList, <-chan zk.Event, error) {
	return rs.watchPartitionsCached(kazooTopics{kz}, new(watchCache), false)
}

// watchPartitionsCached implements cachingSubscription.
func (rs *regexpSubscription) watchPartitionsCached(r topicWatcher, cache *watchCache, internal bool) (kazoo.PartitionList, <-chan zk.Event, error) {
	cache.begin()
	topics, err := cache.watchTopics(r)
	if err != nil {
		return nil, nil, fmt.Errorf("watch topic list: %w", err)
	}
	sort.Sort(topics) // the cache's copy: sorted once, then already in order
	var selected []string
	for _, topic := range topics {
		if rs.selects(topic.Name, internal) {
			selected = append(selected, topic.Name)
		}
	}
	cache.prefetch(r, selected)

	var result kazoo.PartitionList
	for _, topic := range topics {
		if !rs.selects(topic.Name, internal) {
			continue
		}
		partitions, err := cache.watchTopic(r, topic.Name)
		if errors.Is(err, zk.ErrNoNode) {
			continue // deleted since it was listed: the list watch fires
		} else if err != nil {
			return nil, nil, fmt.Errorf("watch partitions of topic %s: %w", topic.Name, err)
		}
		result = append(result, partitions...)
	}
	return result, cache.end(), nil
}

// JSON implements Subscription.
func (rs *regexpSubscription) JSON() ([]byte, error) {
	if rs.regexp == nil {
		return nil, rs.validate()
	}
	return marshalRegistration(rs.pattern, map[string]int{rs.regexp.String(): 1}, time.Now())
}

var validTopicName = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,249}$`)

func validateTopicName(topic string) error {
	if !validTopicName.MatchString(topic) || topic == "." || topic == ".." {
		return fmt.Errorf("%w: %q is not a valid topic name", ErrInvalidSubscription, topic)
	}
	return nil
}

// cachingSubscription is implemented by the subscriptions of this package.
// watchPartitionsCached is WatchPartitions, but reads through r (the
// instance's session, for a consumer), reuses the watches in cache that
// have not fired yet instead of setting new ones next to them, and leaves
// the watches it sets there for the next call. With internal set, white
// and black lists select Kafka's internal topics too, as the original
// library's do (see mixed.go).
type cachingSubscription interface {
	watchPartitionsCached(r topicWatcher, cache *watchCache, internal bool) (kazoo.PartitionList, <-chan zk.Event, error)
}

// errNoKazoo is what watchPartitions returns for a custom Subscription
// without the kazoo-go connection that connect opens for it: a broken
// invariant, reported rather than a nil dereference in the user's code.
var errNoKazoo = errors.New("kafkaconsumer: no kazoo-go connection for a custom Subscription")

// watchPartitions watches the partitions of s: through cache on r when s
// is one of this package's subscriptions, else with s.WatchPartitions and
// kz, the kazoo-go connection opened for a custom Subscription.
func watchPartitions(s Subscription, r topicWatcher, kz *kazoo.Kazoo, cache *watchCache, internal bool) (kazoo.PartitionList, <-chan zk.Event, error) {
	if cs, ok := s.(cachingSubscription); ok {
		return cs.watchPartitionsCached(r, cache, internal)
	}
	if kz == nil {
		return nil, nil, errNoKazoo
	}
	return s.WatchPartitions(kz)
}
