package kafkaconsumer

// Kafka's topics in ZooKeeper, as the subscriptions watch them: the topic
// list (the children of /brokers/topics) and each topic's partitions (the
// JSON of /brokers/topics/<topic>). The consumer reads them on its own
// session (sessionTopics), so that these reads and watches are gated,
// bounded and closed with the registration and the claims; a
// subscription's WatchPartitions called with a *kazoo.Kazoo reads them
// through it (kazooTopics).

import (
	"encoding/json"
	"fmt"
	"path"
	"sort"
	"strconv"

	"github.com/wvanbergen/kazoo-go"
)

// topicWatcher reads Kafka's topics in ZooKeeper and sets a one-shot
// watch on what it read. Its errors are go-zookeeper's (zk.ErrNoNode for
// a missing node).
type topicWatcher interface {
	// watchTopics returns the topic list and a watch on it.
	watchTopics() (kazoo.TopicList, watchChan, error)
	// watchTopic returns the partitions of the topic, sorted by ID, and a
	// watch on the topic's node. When the node was read but its content
	// is not a topic's, the error comes with the watch, which fires when
	// the node changes; when it was not read, without a watch.
	watchTopic(name string) (kazoo.PartitionList, watchChan, error)
}

// sessionTopics is the topicWatcher of a consumer: it reads on the
// instance's session (zkConn). Like the watch on the group's instances,
// its requests are made by the manager goroutine, not through zkCall: a
// request fails at once while the session is disconnected (sessionConn),
// and a connection that stops answering is ended by go-zookeeper after
// two thirds of the session timeout, which fails the request.
type sessionTopics struct {
	conn   zkSession
	chroot string // Config.Zookeeper.Chroot: "" or "/path"
}

// topicsNode returns the path of the topic list, or of the named topic's
// node.
func (s sessionTopics) topicsNode(name ...string) string {
	return path.Join(append([]string{s.chroot, "/brokers/topics"}, name...)...)
}

func (s sessionTopics) watchTopics() (kazoo.TopicList, watchChan, error) {
	names, _, changed, err := s.conn.ChildrenW(s.topicsNode())
	if err != nil {
		return nil, watchChan{}, err
	}
	topics := make(kazoo.TopicList, len(names))
	for i, name := range names {
		topics[i] = kazooValues.Topic(name)
	}
	return topics, sessionWatch(changed), nil
}

func (s sessionTopics) watchTopic(name string) (kazoo.PartitionList, watchChan, error) {
	data, _, changed, err := s.conn.GetW(s.topicsNode(name))
	if err != nil {
		return nil, watchChan{}, err
	}
	partitions, err := parseTopicPartitions(kazooValues.Topic(name), data)
	return partitions, sessionWatch(changed), err
}

// topicNode is the part of a topic's node that the consumer reads, as
// Kafka writes it (version 1 to 3): {"partitions":{"0":[1,2],"1":[2,3]},...},
// the replicas of each partition, the preferred one first.
type topicNode struct {
	Partitions map[string][]int32 `json:"partitions"`
}

// parseTopicPartitions returns the partitions in the data of topic's
// node, sorted by ID. Kafka numbers them 0 to n-1; other numbers are taken
// as they are (kazoo-go's parser panics on them).
func parseTopicPartitions(topic *kazoo.Topic, data []byte) (kazoo.PartitionList, error) {
	var node topicNode
	if err := json.Unmarshal(data, &node); err != nil {
		return nil, fmt.Errorf("topic %s: node is not a topic's: %w", topic.Name, err)
	}
	partitions := make(kazoo.PartitionList, 0, len(node.Partitions))
	for key, replicas := range node.Partitions {
		id, err := strconv.ParseInt(key, 10, 32)
		if err != nil || id < 0 {
			return nil, fmt.Errorf("topic %s: node is not a topic's: partition %q is not a partition number", topic.Name, key)
		}
		partitions = append(partitions, topic.Partition(int32(id), replicas))
	}
	sort.Slice(partitions, func(i, j int) bool { return partitions[i].ID < partitions[j].ID })
	return partitions, nil
}

// kazooTopics is the topicWatcher of a subscription's WatchPartitions
// called with a *kazoo.Kazoo: it reads through kazoo-go, with kazoo-go's
// own parsing of a topic's node.
type kazooTopics struct{ kz *kazoo.Kazoo }

func (k kazooTopics) watchTopics() (kazoo.TopicList, watchChan, error) {
	topics, changed, err := k.kz.WatchTopics()
	if err != nil {
		return nil, watchChan{}, convertError(err)
	}
	return topics, kazooWatch(changed), nil
}

func (k kazooTopics) watchTopic(name string) (kazoo.PartitionList, watchChan, error) {
	partitions, changed, err := k.kz.Topic(name).WatchPartitions()
	if changed == nil { // not read
		return nil, watchChan{}, convertError(err)
	}
	if err != nil {
		return nil, kazooWatch(changed), fmt.Errorf("topic %s: node is not a topic's: %w", name, err)
	}
	return partitions, kazooWatch(changed), nil // kazoo-go's list is indexed by ID
}
