package kafkaconsumer

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/go-zookeeper/zk"
	samuelzk "github.com/samuel/go-zookeeper/zk"
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
	// The consumer calls it again each time the channel fires. kazoo-go's
	// watches are one-shot, and its ZooKeeper client keeps every watch it
	// sets until that watch fires: an implementation that sets a watch on
	// each of many nodes at every call leaves one more watcher per node
	// that did not change, each time. For the subscriptions of this
	// package, the consumer avoids that: it keeps the watches that have not
	// fired yet and reuses them (it keeps them itself, so one subscription
	// value may serve several consumers); their WatchPartitions, called
	// directly, sets new watches every time. A custom Subscription's
	// WatchPartitions is called as it is.
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
	return ss.watchPartitionsCached(kz, new(watchCache), false)
}

// watchPartitionsCached implements cachingSubscription.
func (ss *staticSubscription) watchPartitionsCached(kz *kazoo.Kazoo, cache *watchCache, _ bool) (kazoo.PartitionList, <-chan zk.Event, error) {
	names := make([]string, 0, len(ss.topics))
	for topic := range ss.topics {
		names = append(names, topic)
	}
	sort.Strings(names)

	for {
		cache.begin()
		var (
			result  kazoo.PartitionList
			missing []string
		)
		for _, name := range names {
			partitions, err := cache.watchTopic(kz, name)
			if errors.Is(err, samuelzk.ErrNoNode) {
				missing = append(missing, name)
				if cache.missingTopic != nil {
					cache.missingTopic(name)
				}
				continue
			} else if err != nil {
				return nil, nil, fmt.Errorf("watch partitions of topic %s: %w", name, convertError(err))
			}
			result = append(result, partitions...)
		}
		if len(missing) == 0 {
			return result, cache.end(), nil
		}
		// A missing topic has no node to watch: watch the topic list, so
		// that its creation wakes the manager. A topic created after its
		// read and before this watch would not: read again then.
		topics, err := cache.watchTopics(kz)
		if err != nil {
			return nil, nil, fmt.Errorf("watch topic list: %w", convertError(err))
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
	return rs.watchPartitionsCached(kz, new(watchCache), false)
}

// watchPartitionsCached implements cachingSubscription.
func (rs *regexpSubscription) watchPartitionsCached(kz *kazoo.Kazoo, cache *watchCache, internal bool) (kazoo.PartitionList, <-chan zk.Event, error) {
	cache.begin()
	topics, err := cache.watchTopics(kz)
	if err != nil {
		return nil, nil, fmt.Errorf("watch topic list: %w", convertError(err))
	}
	sort.Sort(topics) // the cache's copy: sorted once, then already in order

	var result kazoo.PartitionList
	for _, topic := range topics {
		if !rs.selects(topic.Name, internal) {
			continue
		}
		partitions, err := cache.watchTopic(kz, topic.Name)
		if errors.Is(err, samuelzk.ErrNoNode) {
			continue // deleted since it was listed: the list watch fires
		} else if err != nil {
			return nil, nil, fmt.Errorf("watch partitions of topic %s: %w", topic.Name, convertError(err))
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
// watchPartitionsCached is WatchPartitions, but reuses the watches in cache
// that have not fired yet instead of setting new ones next to them, and
// leaves the watches it sets there for the next call. With internal set,
// white and black lists select Kafka's internal topics too, as the
// original library's do (see mixed.go).
type cachingSubscription interface {
	watchPartitionsCached(kz *kazoo.Kazoo, cache *watchCache, internal bool) (kazoo.PartitionList, <-chan zk.Event, error)
}

// watchPartitions watches the partitions of s: through cache when s is one
// of this package's subscriptions, else with s.WatchPartitions.
func watchPartitions(s Subscription, kz *kazoo.Kazoo, cache *watchCache, internal bool) (kazoo.PartitionList, <-chan zk.Event, error) {
	if cs, ok := s.(cachingSubscription); ok {
		return cs.watchPartitionsCached(kz, cache, internal)
	}
	return s.WatchPartitions(kz)
}

// watchCache holds the watches that a consumer's subscription set and that
// have not fired yet, each with what was read when it was set.
//
// kazoo-go's watches are one-shot, and the ZooKeeper client keeps each of
// them (a buffered channel in its watcher list) until its node changes or
// the connection closes. The consumer watches its subscription again each
// time one watch fires, e.g. the topic list at every topic created in the
// cluster; setting a new watch on every subscribed topic then would leave
// one more watcher per topic each time. Through the cache, a topic whose
// watch has not fired keeps its watch and the partitions read with it (they
// cannot have changed, or the watch would have fired), so the client holds
// one watcher per watched node.
//
// A round of watching is begin, then watchTopics and watchTopic for what the
// subscription needs, then end, which merges the round's watches into one
// channel with a goroutine (merger). No channel of a watch is ever read by
// two parties: begin stops the last round's merger, and notes the watch
// whose event it took, before the cache looks at any watch itself.
//
// A watchCache belongs to one consumer and is used by its manager goroutine
// only: it is not safe for concurrent use. Its zero value is empty and ready
// to use.
type watchCache struct {
	// log is the consumer's logger; nil for a subscription's
	// WatchPartitions called directly (then the package Logger).
	log *slog.Logger

	topics map[string]*pendingWatch // topic name -> the watch on its node
	// missingTopic, when set (a test hook), is called when a topic of a
	// static subscription is found missing, before the topic list's watch.
	missingTopic func(topic string)
	list         *pendingWatch // the watch on the topic list, or nil

	round uint64          // counts the rounds; a topic watch not used in the last one is dropped
	used  []*pendingWatch // the watches of the round, in the order of merge's cases
	// merge is the goroutine that waits for the first event of the last
	// ended round's watches, or nil. Started by end, stopped by the next
	// begin; it also ends at the first event, and when the ZooKeeper
	// connection closes (which closes every watch's channel).
	merge *merger
}

// pendingWatch is a watch that the cache holds, and what was read when it
// was set.
type pendingWatch struct {
	changed    <-chan samuelzk.Event
	fired      bool                // its event was taken (by a merger or by hasFired)
	partitions kazoo.PartitionList // of a topic's watch
	topics     kazoo.TopicList     // of the topic list's watch
	round      uint64              // the last round that used it
}

// hasFired tells whether the watch fired; it takes the event to find out,
// which is safe only when no merger may be reading the channel.
func (w *pendingWatch) hasFired() bool {
	if !w.fired {
		select {
		case <-w.changed: // the event, or the close that follows it
			w.fired = true
		default:
		}
	}
	return w.fired
}

// logf logs through the consumer's logger, or the package Logger.
func (c *watchCache) logf(level slog.Level, format string, args ...interface{}) {
	if c.log == nil {
		Logger.Printf(format, args...)
		return
	}
	logf(c.log, level, format, args...)
}

// stop stops the merger of the last round, if any, and waits for it: for
// the consumer's shutdown, so that no goroutine of the cache outlives it.
func (c *watchCache) stop() {
	if c.merge != nil {
		c.merge.stop()
		c.merge = nil
	}
}

// begin starts a round: it stops the merger of the last round, and marks the
// watch whose event that merger took as fired.
func (c *watchCache) begin() {
	if c.merge != nil {
		if i := c.merge.stop(); i >= 0 {
			c.used[i].fired = true
		}
		c.merge = nil
	}
	c.used = c.used[:0]
	c.round++
}

// watchTopics returns the topic list and adds its watch to the round: the
// pending one when it has not fired, else a new one.
func (c *watchCache) watchTopics(kz *kazoo.Kazoo) (kazoo.TopicList, error) {
	if c.list == nil || c.list.hasFired() {
		c.list = nil
		topics, changed, err := kz.WatchTopics()
		if err != nil {
			return nil, err
		}
		c.list = &pendingWatch{changed: changed, topics: topics}
	}
	c.list.round = c.round
	c.used = append(c.used, c.list)
	return c.list.topics, nil
}

// watchTopic returns the partitions of the topic and adds the watch on its
// node to the round: the pending one when it has not fired, else a new one.
func (c *watchCache) watchTopic(kz *kazoo.Kazoo, name string) (kazoo.PartitionList, error) {
	w := c.topics[name]
	if w == nil || w.hasFired() {
		delete(c.topics, name)
		partitions, changed, err := kz.Topic(name).WatchPartitions()
		if err != nil {
			return nil, err
		}
		w = &pendingWatch{changed: changed, partitions: partitions}
		if c.topics == nil {
			c.topics = make(map[string]*pendingWatch)
		}
		c.topics[name] = w
	}
	w.round = c.round
	c.used = append(c.used, w)
	return w.partitions, nil
}

// end ends the round: it drops the topic watches that the round did not use
// (their topics were deleted or left the subscription; the client still
// holds them until they fire), and returns a channel that receives the
// first event of the round's watches (see startMerger). The topic list's
// watch is kept even when unused, for a later round that needs it.
func (c *watchCache) end() <-chan zk.Event {
	for name, w := range c.topics {
		if w.round != c.round {
			delete(c.topics, name)
		}
	}
	watches := make([]<-chan samuelzk.Event, len(c.used))
	for i, w := range c.used {
		watches[i] = w.changed
	}
	var out <-chan zk.Event
	c.merge, out = startMerger(watches)
	return out
}

// merger is a goroutine that waits for the first event of a set of watches
// and passes it on, converted, to its output channel (buffered, so that it
// never blocks); it then closes the channel and ends. stop ends it early,
// closing the channel without an event.
type merger struct {
	quit chan struct{} // closed by stop
	done chan struct{} // closed by the goroutine when it ends
	// took is the index of the watch whose event (or close) the goroutine
	// took, or -1; written by the goroutine before it closes done.
	took int
}

// startMerger starts a merger of the watches and returns it with its output
// channel. Without watches, it starts nothing, and the channel never fires.
//
// The merger turns one-shot ZooKeeper watches of kazoo-go (which uses the
// archived samuel/go-zookeeper client) into one channel of go-zookeeper's
// events: the one place where the two clients' types meet. The watches
// that have not fired when it ends are left to the ZooKeeper client, which
// sends their one event into a buffered channel and closes it when they
// fire or when the connection is closed. Its owner stops it (stop), also
// after it ended by itself.
func startMerger(watches []<-chan samuelzk.Event) (*merger, <-chan zk.Event) {
	m := &merger{quit: make(chan struct{}), done: make(chan struct{}), took: -1}
	out := make(chan zk.Event, 1)
	if len(watches) == 0 {
		close(m.done)
		return m, out
	}
	cases := make([]reflect.SelectCase, len(watches)+1)
	for i, w := range watches {
		cases[i] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w)}
	}
	cases[len(watches)] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(m.quit)}
	go func() {
		defer close(m.done)
		defer close(out)
		i, v, ok := reflect.Select(cases)
		if i == len(watches) {
			return // stopped: the output is abandoned
		}
		m.took = i
		if !ok {
			out <- zk.Event{Type: zk.EventNotWatching, State: zk.StateDisconnected, Err: zk.ErrClosing}
			return
		}
		out <- convertEvent(v.Interface().(samuelzk.Event))
	}()
	return m, out
}

// stop ends the merger, if it is still waiting, and waits until it is gone.
// It returns the index of the watch whose event the merger took, or -1. It
// is called once, by the merger's owner.
func (m *merger) stop() int {
	close(m.quit)
	<-m.done
	return m.took
}

// convertEvent converts an event of the archived ZooKeeper client into one of
// go-zookeeper's. Both forks kept the numbering of event types and states.
func convertEvent(ev samuelzk.Event) zk.Event {
	return zk.Event{
		Type:   zk.EventType(ev.Type),
		State:  zk.State(ev.State),
		Path:   ev.Path,
		Err:    convertError(ev.Err),
		Server: ev.Server,
	}
}

// zkErrors maps the archived client's error values to go-zookeeper's, so
// that errors.Is works with the package the API shows.
var zkErrors = map[error]error{
	samuelzk.ErrConnectionClosed: zk.ErrConnectionClosed,
	samuelzk.ErrUnknown:          zk.ErrUnknown,
	samuelzk.ErrAPIError:         zk.ErrAPIError,
	samuelzk.ErrNoNode:           zk.ErrNoNode,
	samuelzk.ErrNoAuth:           zk.ErrNoAuth,
	samuelzk.ErrBadVersion:       zk.ErrBadVersion,
	samuelzk.ErrNodeExists:       zk.ErrNodeExists,
	samuelzk.ErrNotEmpty:         zk.ErrNotEmpty,
	samuelzk.ErrSessionExpired:   zk.ErrSessionExpired,
	samuelzk.ErrInvalidACL:       zk.ErrInvalidACL,
	samuelzk.ErrAuthFailed:       zk.ErrAuthFailed,
	samuelzk.ErrClosing:          zk.ErrClosing,
	samuelzk.ErrNothing:          zk.ErrNothing,
	samuelzk.ErrSessionMoved:     zk.ErrSessionMoved,
}

func convertError(err error) error {
	if mapped, ok := zkErrors[err]; ok {
		return mapped
	}
	return err
}
