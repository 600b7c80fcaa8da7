package main

// A group that Kafka's group coordinator keeps (the library's
// CoordinatorKafka, or a group migrated to it): its members, their
// subscriptions and assignments from DescribeGroups, decoded as Kafka's
// consumer protocol (sarama's ConsumerGroupMemberMetadata and
// ConsumerGroupMemberAssignment), its state, and per partition the
// committed offset (OffsetFetch, decoded with internal/commitmark as for
// a ZooKeeper-coordinated group), the log-end offset and the lag.

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/IBM/sarama"
)

// The states of a group in Kafka's group coordinator.
const (
	kafkaStateEmpty  = "Empty"
	kafkaStateDead   = "Dead"
	kafkaStateStable = "Stable"
)

// describeKafkaGroup returns the group as Kafka's group coordinator
// keeps it. desc has the group's name, ZooKeeper and brokers set.
func (k *kafkaSession) describeKafkaGroup(desc *GroupDescription) (*GroupDescription, error) {
	g, err := k.group(desc.Group)
	if err != nil {
		return nil, err
	}
	desc.Coordinator = CoordinatorKafka
	desc.GroupProtocol = GroupProtocolClassic
	desc.KafkaState = g.State
	if b, err := k.client.Coordinator(desc.Group); err == nil {
		desc.CoordinatorBroker = b.Addr()
	}
	if desc.Instances == nil {
		desc.Instances = []Instance{}
	}
	owners := make(map[TopicPartition]string)
	for _, id := range slices.Sorted(maps.Keys(g.Members)) {
		instance := memberInstance(id, g.Members[id])
		for _, tp := range instance.Owned {
			owners[tp] = id
		}
		desc.Instances = append(desc.Instances, instance)
	}
	offsets, err := k.offsets(desc.Group, desc.Instances, owners)
	if err != nil {
		return nil, err
	}
	desc.Partitions = offsets.partitions
	for i := range desc.Partitions {
		p := &desc.Partitions[i]
		p.Owner = owners[p.TopicPartition]
		p.OwnerRegistered = p.Owner != ""
	}
	desc.addTotals()
	desc.State = kafkaGroupState(g.State, desc, offsets.subscribed)
	return desc, nil
}

// group describes the group in Kafka.
func (k *kafkaSession) group(group string) (*sarama.GroupDescription, error) {
	return k.describeGroup(k.client, k.admin, group)
}

// describeGroup describes the group in Kafka with admin, on client,
// asking again until the session's deadline while the answer is one to
// retry (retriable). A coordinator that cannot be reached is looked up
// again before the next try: sarama keeps the one it found, and the
// group moves away from a broker that died.
func (k *kafkaSession) describeGroup(client sarama.Client, admin sarama.ClusterAdmin, group string) (*sarama.GroupDescription, error) {
	var described *sarama.GroupDescription
	err := k.retrying("describe group "+group, func() error {
		groups, err := admin.DescribeConsumerGroups([]string{group})
		if err == nil && len(groups) != 1 {
			return fmt.Errorf("%d groups in the answer", len(groups))
		}
		if err == nil && !errors.Is(groups[0].Err, sarama.ErrNoError) {
			err = groups[0].Err
		}
		if err != nil {
			if retriable(err) {
				_ = client.RefreshCoordinator(group) // its error comes again with the next try's
			}
			return err
		}
		described = groups[0]
		return nil
	})
	return described, err
}

// coordinatesGroup tells whether Kafka's group coordinator keeps the
// group: it has members, or its protocol type is Kafka's consumer
// protocol (an Empty group whose members were coordinated there). A
// group that only has offsets committed under its name (a
// ZooKeeper-coordinated one's) has neither.
func coordinatesGroup(g *sarama.GroupDescription) bool {
	return len(g.Members) > 0 || g.ProtocolType == "consumer"
}

// memberInstance is the instance of a member of Kafka's group: its
// subscription and library from its member metadata, its partitions from
// its assignment.
func memberInstance(id string, m *sarama.GroupMemberDescription) Instance {
	instance := Instance{ID: id, ClientID: m.ClientId, ClientHost: strings.TrimPrefix(m.ClientHost, "/"), Owned: []TopicPartition{}}
	if m.GroupInstanceId != nil && *m.GroupInstanceId != "" {
		instance.Static, instance.InstanceID = true, *m.GroupInstanceId
	}
	var problems []string
	if meta, err := m.GetMemberMetadata(); err != nil {
		problems = append(problems, fmt.Sprintf("unreadable member metadata: %s", err))
	} else if meta != nil {
		instance.Topics = slices.Sorted(slices.Values(meta.Topics))
		instance.Library, instance.Migration = memberLibrary(meta.UserData)
	}
	if assignment, err := m.GetMemberAssignment(); err != nil {
		problems = append(problems, fmt.Sprintf("unreadable assignment: %s", err))
	} else if assignment != nil {
		for topic, partitions := range assignment.Topics {
			for _, p := range partitions {
				instance.Owned = append(instance.Owned, TopicPartition{Topic: topic, Partition: p})
			}
		}
		sortPartitions(instance.Owned)
	}
	instance.Error = strings.Join(problems, "; ")
	return instance
}

// memberLibrary reads a member's user data, which the library's members
// set to {"client":...,"migration":1}: its library, and the version of
// the coordinator switch it follows.
func memberLibrary(userData []byte) (library string, migration int) {
	var data struct {
		Client    string `json:"client"`
		Migration int    `json:"migration"`
	}
	if json.Unmarshal(userData, &data) != nil || data.Client != registrationClient {
		return LibraryOther, 0
	}
	return LibraryKafkaconsumer, data.Migration
}

// kafkaGroupState is the State of a Kafka-coordinated group in Kafka's
// state kafkaState: Empty without members, Rebalancing while Kafka
// rebalances or a subscribed partition is in no member's assignment,
// else Stable.
func kafkaGroupState(kafkaState string, desc *GroupDescription, subscribed map[TopicPartition]bool) string {
	switch {
	case len(desc.Instances) == 0 || kafkaState == kafkaStateEmpty || kafkaState == kafkaStateDead:
		return StateEmpty
	case kafkaState != kafkaStateStable:
		return StateRebalancing
	}
	for _, p := range desc.Partitions {
		if subscribed[p.TopicPartition] && p.Owner == "" {
			return StateRebalancing
		}
	}
	return StateStable
}

// addTotals sums the known offsets and lags of desc's partitions.
func (desc *GroupDescription) addTotals() {
	for _, p := range desc.Partitions {
		if p.Committed != nil {
			desc.TotalCommitted += *p.Committed
		}
		if p.LogEnd != nil {
			desc.TotalLogEnd += *p.LogEnd
		}
		if p.Lag != nil {
			desc.TotalLag += *p.Lag
		}
	}
}

// kafkaGroups lists the groups that Kafka's group coordinator keeps for
// the library, except those named in known: the classic groups of
// Kafka's consumer protocol type whose protocol is the library's
// assignor, or one of whose members is of the library; and every group
// of Kafka's consumer group protocol (KIP-848) and every share group
// (KIP-932), whose members' clients Kafka does not describe. An Empty
// group is not listed: nothing tells
// it from another client's.
func (k *kafkaSession) kafkaGroups(known map[string]bool) ([]GroupSummary, error) {
	all, err := k.listGroups()
	if err != nil {
		return nil, err
	}
	var names, consumerNames, shareNames []string
	for name, g := range all {
		switch {
		case known[name]:
		case g.consumerProtocol:
			consumerNames = append(consumerNames, name)
		case g.share:
			shareNames = append(shareNames, name)
		case g.protocolType == "consumer":
			names = append(names, name)
		}
	}
	var result []GroupSummary
	consumerGroups, err := k.consumerGroups(consumerNames)
	if err != nil {
		return nil, err
	}
	for name, g := range consumerGroups {
		if len(g.Members) > 0 {
			result = append(result, GroupSummary{Group: name, Coordinator: CoordinatorKafka, GroupProtocol: GroupProtocolConsumer, Instances: len(g.Members)})
		}
	}
	shareGroups, err := k.shareGroups(shareNames)
	if err != nil {
		return nil, err
	}
	for name, g := range shareGroups {
		if len(g.Members) > 0 {
			result = append(result, GroupSummary{Group: name, Coordinator: CoordinatorKafka, GroupProtocol: GroupProtocolShare, Instances: len(g.Members)})
		}
	}
	if len(names) == 0 {
		return result, nil
	}
	sort.Strings(names)
	groups, err := k.admin.DescribeConsumerGroups(names)
	if err != nil {
		return nil, k.err("describe groups", err)
	}
	for _, g := range groups {
		if !errors.Is(g.Err, sarama.ErrNoError) || len(g.Members) == 0 {
			continue
		}
		ours := g.Protocol == kafkaAssignor
		for _, m := range g.Members {
			if meta, err := m.GetMemberMetadata(); err == nil && meta != nil {
				if library, _ := memberLibrary(meta.UserData); library == LibraryKafkaconsumer {
					ours = true
				}
			}
		}
		if ours {
			result = append(result, GroupSummary{Group: g.GroupId, Coordinator: CoordinatorKafka, GroupProtocol: GroupProtocolClassic, Instances: len(g.Members)})
		}
	}
	return result, nil
}

// describeFromKafka describes a group with --bootstrap-server alone: no
// ZooKeeper, so Kafka's group coordinator keeps it, or nobody does.
func describeFromKafka(group string, access kafkaAccess, timeout time.Duration) (*GroupDescription, error) {
	k, err := openBootstrap(access, timeout)
	if err != nil {
		return nil, err
	}
	defer k.close()
	desc := &GroupDescription{Group: group, Brokers: k.brokers}
	if desc, err := k.describeBrokerAssigned(desc); err != nil || desc != nil {
		return desc, err
	}
	g, err := k.group(group)
	if err != nil {
		return nil, err
	}
	if g.State == kafkaStateDead {
		return nil, fmt.Errorf("%w %q: Kafka's group coordinator does not know it, and no zookeeper was given (--zookeeper) for a ZooKeeper-coordinated group", ErrUnknownGroup, group)
	}
	return k.describeKafkaGroup(desc)
}

// describeBrokerAssigned returns the group desc names if it is a group
// that the broker assigns: of Kafka's consumer group protocol, or a
// share group; nil if it is neither. desc has the group's name,
// ZooKeeper and brokers set.
func (k *kafkaSession) describeBrokerAssigned(desc *GroupDescription) (*GroupDescription, error) {
	if cg, err := k.consumerGroup(desc.Group); err != nil || cg != nil {
		if err != nil {
			return nil, err
		}
		return k.describeConsumerGroup(desc, cg)
	}
	if sg, err := k.shareGroup(desc.Group); err != nil || sg != nil {
		if err != nil {
			return nil, err
		}
		return k.describeShareGroup(desc, sg)
	}
	return nil, nil
}

// members returns the protocol of a Kafka-coordinated group and its
// number of members.
func (k *kafkaSession) members(group string) (protocol string, members int, err error) {
	cg, err := k.consumerGroup(group)
	if err != nil {
		return "", 0, err
	}
	if cg != nil {
		return GroupProtocolConsumer, len(cg.Members), nil
	}
	g, err := k.group(group)
	if err != nil {
		return "", 0, err
	}
	return GroupProtocolClassic, len(g.Members), nil
}

// listFromKafka lists the Kafka-coordinated groups with --bootstrap-server
// alone.
func listFromKafka(access kafkaAccess, timeout time.Duration) ([]GroupSummary, error) {
	k, err := openBootstrap(access, timeout)
	if err != nil {
		return nil, err
	}
	defer k.close()
	return k.kafkaGroups(nil)
}

// openBootstrap connects to the brokers of --bootstrap-server, giving up
// after timeout.
func openBootstrap(access kafkaAccess, timeout time.Duration) (*kafkaSession, error) {
	brokers := slices.Sorted(slices.Values(access.bootstrap))
	timeoutMsg := fmt.Sprintf("no answer from kafka %s within %s", strings.Join(brokers, ","), timeout)
	return openKafka(brokers, access, time.Now().Add(timeout), timeoutMsg)
}

// sortPartitions sorts partitions by topic and partition.
func sortPartitions(partitions []TopicPartition) {
	sort.Slice(partitions, func(i, j int) bool {
		a, b := partitions[i], partitions[j]
		return a.Topic < b.Topic || a.Topic == b.Topic && a.Partition < b.Partition
	})
}
