package kafkaconsumer

// The question a follower of the coordinator switch asks before it
// registers in ZooKeeper again (coordinator_migrate.go, awaitKafkaEmpty)
// when DescribeGroups describes Kafka's group as Dead with no members, as
// Kafka 4 does for a group of the consumer protocol: ListGroups v5 tells
// the group's type and state.

import (
	"errors"
	"sync"

	"github.com/IBM/sarama"
)

// groupLister asks ListGroups v5 whatever Config.Version is: sarama sends
// a request only when Config.Version is at least the one the request's
// version needs (3.8.0 for v5), so with a lower Version it asks on a
// connection of its own, opened with the same configuration but Version
// 3.8.0. sarama's ApiVersions negotiation then keeps the request to the
// versions the broker knows: a broker before 3.8 answers ListGroups v4
// or older, without group types, and the group is taken for what
// DescribeGroups says (such a broker keeps no consumer-protocol group).
// Its connection is dialed as the client's, through the consumer's
// dialer, which Close cuts. Safe for use by many goroutines.
type groupLister struct {
	mu     sync.Mutex     // guards broker
	broker *sarama.Broker // the connection of its own; nil until needed, and after a failure
}

// consumerGroupState returns the state of group when coordinator, the
// group's coordinator (a broker of client), lists it as a group of the
// consumer protocol; ok is false otherwise, or when the broker did not
// answer.
func (l *groupLister) consumerGroupState(client sarama.Client, coordinator *sarama.Broker, group string) (state string, ok bool) {
	broker, err := l.brokerFor(client, coordinator)
	if err != nil {
		return "", false
	}
	resp, err := broker.ListGroups(&sarama.ListGroupsRequest{Version: 5, TypesFilter: []string{"consumer"}})
	if err != nil {
		l.failed(broker)
		return "", false
	}
	data, listed := resp.GroupsData[group]
	if !listed || !errors.Is(resp.Err, sarama.ErrNoError) || data.GroupType != "consumer" {
		return "", false
	}
	return data.GroupState, true
}

// brokerFor returns the connection to ask coordinator on: coordinator
// itself when the client's Version sends ListGroups v5, else the
// lister's own to the same address.
func (l *groupLister) brokerFor(client sarama.Client, coordinator *sarama.Broker) (*sarama.Broker, error) {
	conf := client.Config()
	if conf.Version.IsAtLeast(sarama.V3_8_0_0) {
		return coordinator, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.broker != nil && l.broker.Addr() == coordinator.Addr() {
		return l.broker, nil
	}
	if l.broker != nil {
		_ = l.broker.Close()
	}
	c := *conf
	c.Version = sarama.V3_8_0_0
	c.ApiVersionsRequest = true
	l.broker = sarama.NewBroker(coordinator.Addr())
	if err := l.broker.Open(&c); err != nil {
		l.broker = nil
		return nil, err
	}
	return l.broker, nil
}

// failed closes broker after a request on it failed: the next question
// opens a connection anew (a coordinator's connection, the client opens
// it again).
func (l *groupLister) failed(broker *sarama.Broker) {
	_ = broker.Close()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.broker == broker {
		l.broker = nil
	}
}

// close closes the lister's own connection, if any.
func (l *groupLister) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.broker != nil {
		_ = l.broker.Close()
		l.broker = nil
	}
}
