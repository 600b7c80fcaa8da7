package kafkaconsumer

// The subscription's partitions with DiscoverFromKafka: read from Kafka's
// metadata, polled every Config.DiscoveryInterval, where
// DiscoverFromZookeeper watches ZooKeeper.
//
// How the instances agree: each instance polls on its own and distributes
// over what it saw; there is no leader and no shared list in ZooKeeper.
// Two instances disagree only between their polls after a change, at most
// one DiscoveryInterval (plus the time Kafka's brokers take to learn of
// it, milliseconds in KRaft). Meanwhile nothing is consumed twice, since a
// partition is consumed only under its claim in ZooKeeper, and nothing
// stalls for longer: a new partition is claimed by the instance it falls
// to once that instance has polled (at most one interval); a partition
// that moves is taken over once its previous owner has polled too and let
// go (at most one more interval). The same holds between an instance in
// DiscoverFromZookeeper mode (which learns at once, through its watches)
// and one in DiscoverFromKafka mode, so the two can share a group while
// it moves from one to the other. Publishing the list in ZooKeeper, by one
// instance, would not remove the wait of the previous owner, and would
// need an election that instances of the other mode (and of the original
// library) do not take part in.

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/IBM/sarama"
	"github.com/go-zookeeper/zk"
	"github.com/wvanbergen/kazoo-go"
)

// topicSelector is implemented by the subscriptions of this package: what
// DiscoverFromKafka needs of a subscription in place of WatchPartitions.
type topicSelector interface {
	// metadataTopics returns the topics to ask Kafka's metadata for: nil
	// for all of them.
	metadataTopics() []string
	// selectsTopic tells whether the subscription consumes the topic;
	// internal is the metadata's IsInternal flag.
	selectsTopic(name string, internal bool) bool
}

// metadataTopics implements topicSelector: the listed topics.
func (ss *staticSubscription) metadataTopics() []string {
	names := make([]string, 0, len(ss.topics))
	for topic := range ss.topics {
		names = append(names, topic)
	}
	sort.Strings(names)
	return names
}

// selectsTopic implements topicSelector: a listed topic, internal or not.
func (ss *staticSubscription) selectsTopic(name string, _ bool) bool {
	_, ok := ss.topics[name]
	return ok
}

// metadataTopics implements topicSelector: every topic.
func (rs *regexpSubscription) metadataTopics() []string { return nil }

// selectsTopic implements topicSelector: the topics the pattern selects,
// but none that the metadata marks internal.
func (rs *regexpSubscription) selectsTopic(name string, internal bool) bool {
	return !internal && rs.selects(name, false)
}

// internalToo is a topicSelector that takes internal topics for others,
// as the original library's lists do: for a group with instances of the
// original (see mixed.go).
type internalToo struct{ topicSelector }

func (s internalToo) selectsTopic(name string, _ bool) bool {
	if rs, ok := s.topicSelector.(*regexpSubscription); ok {
		return rs.selects(name, true)
	}
	return s.topicSelector.selectsTopic(name, false)
}

// metadataView is what one metadata poll found: the subscription's
// partitions and the listed topics that do not exist.
type metadataView struct {
	partitions kazoo.PartitionList // sorted by topic, then partition
	missing    []string            // sorted
}

// sameAs tells whether v and o hold the same partitions with the same
// preferred replicas: all that the distribution looks at.
func (v metadataView) sameAs(o metadataView) bool {
	if len(v.partitions) != len(o.partitions) || !slices.Equal(v.missing, o.missing) {
		return false
	}
	for i, p := range v.partitions {
		q := o.partitions[i]
		if p.Topic().Name != q.Topic().Name || p.ID != q.ID || p.PreferredReplica() != q.PreferredReplica() {
			return false
		}
	}
	return true
}

// readMetadata asks a broker of the client for the metadata of the
// subscription's topics and returns the partitions it selects. The
// partitions carry their replicas, first the preferred one, as in
// ZooKeeper. A topic whose metadata has an error other than not existing
// (a topic being created has no leader yet) counts when its partitions are
// listed, and fails the poll otherwise, rather than being taken for gone.
func readMetadata(client sarama.Client, sel topicSelector) (metadataView, error) {
	broker := client.LeastLoadedBroker()
	if broker == nil {
		return metadataView{}, sarama.ErrClosedClient
	}
	topics := sel.metadataTopics()
	resp, err := broker.GetMetadata(sarama.NewMetadataRequest(client.Config().Version, topics))
	if err != nil {
		_ = broker.Close() // the client opens it again, as after its own failed requests
		return metadataView{}, fmt.Errorf("kafka metadata from %s: %w", broker.Addr(), err)
	}
	var view metadataView
	seen := make(map[string]bool, len(resp.Topics))
	for _, t := range resp.Topics {
		switch {
		case errors.Is(t.Err, sarama.ErrUnknownTopicOrPartition), errors.Is(t.Err, sarama.ErrTopicAuthorizationFailed):
			continue // missing, unless listed elsewhere
		case t.Err != sarama.ErrNoError && len(t.Partitions) == 0:
			return metadataView{}, fmt.Errorf("kafka metadata of topic %s: %w", t.Name, t.Err)
		case !sel.selectsTopic(t.Name, t.IsInternal):
			continue
		}
		seen[t.Name] = true
		topic := kazooValues.Topic(t.Name)
		for _, p := range t.Partitions {
			view.partitions = append(view.partitions, topic.Partition(p.ID, append([]int32(nil), p.Replicas...)))
		}
	}
	for _, name := range topics {
		if !seen[name] {
			view.missing = append(view.missing, name)
		}
	}
	sort.Slice(view.partitions, func(i, j int) bool {
		a, b := view.partitions[i], view.partitions[j]
		return a.Topic().Name < b.Topic().Name || (a.Topic().Name == b.Topic().Name && a.ID < b.ID)
	})
	return view, nil
}

// watchMetadata is watchSubscription for DiscoverFromKafka: it returns the
// subscription's partitions from Kafka's metadata (retrying errors until
// the manager is interrupted; ok is false then: a read in flight is
// abandoned, see kafkaCall) and a channel that fires
// at the first poll that sees them change. It stops the poller of its last
// call first.
func (cm *consumerManager) watchMetadata() (kazoo.PartitionList, <-chan zk.Event, bool) {
	cm.stopMetadataPoller()
	sel := cm.subscription.(topicSelector) // Join accepts no other in this mode
	if cm.originals {
		sel = internalToo{sel}
	}
	for attempt := 0; ; attempt++ {
		if h := cm.hooks; h != nil && h.readingMetadata != nil {
			h.readingMetadata()
		}
		var view metadataView
		err := cm.kafkaCall(func() (err error) { view, err = readMetadata(cm.metadataClient(), sel); return err })
		if errors.Is(err, errAbandoned) {
			return nil, nil, false
		}
		if err == nil {
			if len(view.missing) > 0 {
				cm.logf(slog.LevelWarn, "Topics %s of the subscription do not exist; skipping them until they are created.", strings.Join(view.missing, ", "))
			}
			var changed <-chan zk.Event
			cm.metadataPoll, changed = cm.startMetadataPoller(sel, view, metadataView.sameAs)
			return view.partitions, changed, true
		}
		cm.logf(slog.LevelWarn, "Failed to read the subscription's partitions from Kafka: %s. Trying again.", err)
		if !sleepOrDie(&cm.t, attempt) {
			return nil, nil, false
		}
	}
}

// kafkaCall runs f, a Kafka request of the manager goroutine, on a
// goroutine of its own, and waits for it or until the manager is
// interrupted (errAbandoned): against a hung broker a request waits for
// Net.ReadTimeout. The goroutine counts in kafkaCalls: closeKafka waits
// for it, and cuts the connections under it after closeGrace.
func (cm *consumerManager) kafkaCall(f func() error) error {
	done := make(chan error, 1)
	cm.kafkaCalls.Add(1)
	go func() { // owned by closeKafka, which waits for kafkaCalls
		defer cm.kafkaCalls.Done()
		done <- f()
	}()
	select {
	case err := <-done:
		return err
	case <-cm.t.Dying():
		return errAbandoned
	}
}

// metadataPoller is a goroutine that polls Kafka's metadata every
// DiscoveryInterval until what it sees differs from what the manager
// distributed or assigned (last), then sends one event to its output
// channel (buffered: it never blocks) and ends. Its owner, the manager
// goroutine, stops it (stop) before it polls again itself, and at
// shutdown; the leader's poller of the topics that only other members
// subscribe to, when it leads no more (assignRejoins).
type metadataPoller struct {
	quit chan struct{} // closed by stop
	done chan struct{} // closed by the goroutine when it ends
}

// startMetadataPoller starts a metadataPoller of the topics sel selects,
// that compares what it sees with last by same.
func (cm *consumerManager) startMetadataPoller(sel topicSelector, last metadataView, same func(seen, last metadataView) bool) (*metadataPoller, <-chan zk.Event) {
	mp := &metadataPoller{quit: make(chan struct{}), done: make(chan struct{})}
	out := make(chan zk.Event, 1)
	go func() {
		defer close(mp.done)
		defer close(out)
		ticker := time.NewTicker(cm.config.DiscoveryInterval)
		defer ticker.Stop()
		for {
			select {
			case <-mp.quit:
				return
			case <-ticker.C:
			}
			view, err := readMetadata(cm.metadataClient(), sel)
			if err != nil {
				cm.logf(slog.LevelWarn, "Failed to poll Kafka's metadata: %s. Trying again in %s.", err, cm.config.DiscoveryInterval)
				continue
			}
			if !same(view, last) {
				out <- zk.Event{Type: zk.EventNodeChildrenChanged, State: zk.StateHasSession, Path: "kafka metadata"}
				return
			}
		}
	}()
	return mp, out
}

// stop ends the poller and waits until it is gone; called once, by its
// owner. A metadata request in flight ends when the Kafka client closes.
func (mp *metadataPoller) stop() {
	close(mp.quit)
	<-mp.done
}

// stopMetadataPoller stops the poller of the last watchMetadata, if any.
func (cm *consumerManager) stopMetadataPoller() {
	if cm.metadataPoll != nil {
		cm.metadataPoll.stop()
		cm.metadataPoll = nil
	}
}

// metadataClient is the client that reads the subscription's metadata:
// the first fetcher's, or, in a Kafka-coordinated group, the offset
// store's, whose connections carry no fetch: a metadata request queued
// behind a fetch waits up to Consumer.MaxWaitTime, and every rebalance
// of such a group reads the metadata first.
func (cm *consumerManager) metadataClient() sarama.Client {
	if cm.kafkaActive() != nil {
		return cm.offsetClient
	}
	return cm.client
}
