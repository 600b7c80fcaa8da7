package kafkaconsumer

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
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
	WatchPartitions(kazoo *kazoo.Kazoo) (kazoo.PartitionList, <-chan zk.Event, error)

	// JSON returns the subscription as it is stored with the instance's
	// registration in ZooKeeper, in the layout of Kafka's old high-level
	// consumer.
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

// WatchPartitions implements Subscription.
func (ss *staticSubscription) WatchPartitions(kz *kazoo.Kazoo) (kazoo.PartitionList, <-chan zk.Event, error) {
	names := make([]string, 0, len(ss.topics))
	for topic := range ss.topics {
		names = append(names, topic)
	}
	sort.Strings(names)

	var (
		result  kazoo.PartitionList
		watches []<-chan samuelzk.Event
		missing bool
	)
	for _, name := range names {
		partitions, changed, err := kz.Topic(name).WatchPartitions()
		if errors.Is(err, samuelzk.ErrNoNode) {
			Logger.Printf("Topic %s of the subscription does not exist; skipping it until it is created.", name)
			missing = true
			continue
		} else if err != nil {
			return nil, nil, fmt.Errorf("watch partitions of topic %s: %w", name, convertError(err))
		}
		result = append(result, partitions...)
		watches = append(watches, changed)
	}
	if missing {
		// A missing topic has no node to watch: watch the topic list, so
		// that its creation wakes the manager.
		_, changed, err := kz.WatchTopics()
		if err != nil {
			return nil, nil, fmt.Errorf("watch topic list: %w", convertError(err))
		}
		watches = append(watches, changed)
	}
	return result, firstEvent(watches), nil
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

// selects tells whether the subscription consumes the topic.
func (rs *regexpSubscription) selects(topic string) bool {
	return !internalTopics[topic] && rs.regexp.MatchString(topic) == rs.include
}

// WatchPartitions implements Subscription.
func (rs *regexpSubscription) WatchPartitions(kz *kazoo.Kazoo) (kazoo.PartitionList, <-chan zk.Event, error) {
	topics, topicsChanged, err := kz.WatchTopics()
	if err != nil {
		return nil, nil, fmt.Errorf("watch topic list: %w", convertError(err))
	}
	sort.Sort(topics)

	var result kazoo.PartitionList
	watches := []<-chan samuelzk.Event{topicsChanged}
	for _, topic := range topics {
		if !rs.selects(topic.Name) {
			continue
		}
		partitions, changed, err := topic.WatchPartitions()
		if errors.Is(err, samuelzk.ErrNoNode) {
			continue // deleted since it was listed: the list watch fires
		} else if err != nil {
			return nil, nil, fmt.Errorf("watch partitions of topic %s: %w", topic.Name, convertError(err))
		}
		result = append(result, partitions...)
		watches = append(watches, changed)
	}
	return result, firstEvent(watches), nil
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

// firstEvent merges one-shot ZooKeeper watches of kazoo-go (which uses the
// archived samuel/go-zookeeper client) into one channel of go-zookeeper's
// events: it receives the first event of any of them, and is then closed.
// This is the one place where the two clients' types meet.
//
// Its goroutine ends with the first event. The watches that have not fired
// then are left to the ZooKeeper client, which sends their one event into a
// buffered channel and closes it when they fire or when the connection is
// closed, so nothing is left running after Close.
func firstEvent(watches []<-chan samuelzk.Event) <-chan zk.Event {
	out := make(chan zk.Event, 1)
	if len(watches) == 0 {
		return out // nothing to watch: it never fires
	}
	cases := make([]reflect.SelectCase, len(watches))
	for i, w := range watches {
		cases[i] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w)}
	}
	go func() {
		defer close(out)
		_, v, ok := reflect.Select(cases)
		if !ok {
			out <- zk.Event{Type: zk.EventNotWatching, State: zk.StateDisconnected, Err: zk.ErrClosing}
			return
		}
		out <- convertEvent(v.Interface().(samuelzk.Event))
	}()
	return out
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
