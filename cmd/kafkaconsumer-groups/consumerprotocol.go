package main

// A group of Kafka's consumer group protocol (KIP-848, Kafka 4.0 and
// later: franz-go's ServerSideBalancer, Java's group.protocol=consumer),
// which the broker assigns: its members, their member epochs,
// subscriptions (topic names or a regular expression), current and
// target assignments from ConsumerGroupDescribe (API key 69); the group
// epoch, assignment epoch, assignor and state; and per partition the
// same offsets and lag as for a classic group (kafkaSession.offsets).
//
// sarama cannot send ConsumerGroupDescribe, nor ListGroups v5 (whose
// answer names each group's type), so these go through a franz-go client
// (kgo, with the requests of kmsg) that reaches the same brokers with the
// same TLS and SASL (kafkaAccess.franzOptions).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The protocols of a Kafka-coordinated group. See
// GroupDescription.GroupProtocol.
const (
	// GroupProtocolClassic: the members join with JoinGroup and
	// SyncGroup, and one of them assigns (the library's assignor).
	GroupProtocolClassic = "classic"
	// GroupProtocolConsumer: Kafka's consumer group protocol (KIP-848),
	// the members heartbeat with ConsumerGroupHeartbeat and the broker
	// assigns.
	GroupProtocolConsumer = "consumer"
)

// The member types of ConsumerGroupDescribe v1 (KIP-1099). See
// Instance.MemberProtocol.
const (
	memberTypeClassic  = 0
	memberTypeConsumer = 1
)

// consumerGroupDescribeKey is the API key of ConsumerGroupDescribe.
var consumerGroupDescribeKey = kmsg.NewPtrConsumerGroupDescribeRequest().Key()

// franzClient returns the session's franz-go client, opening it on the
// first call. It starts no connection: each request dials as needed,
// within the session's deadline.
func (k *kafkaSession) franzClient() (*kgo.Client, error) {
	if k.franz != nil {
		return k.franz, nil
	}
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(k.brokers...),
		kgo.ClientID("kafkaconsumer-groups"),
		kgo.DialTimeout(max(time.Until(k.deadline), time.Millisecond)),
		kgo.RequestRetries(1),
	}, k.access.franzOptions()...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, k.err("connect", err)
	}
	k.franz = cl
	return cl, nil
}

// request issues req with the franz-go client, giving up at the
// session's deadline.
func (k *kafkaSession) request(req kmsg.Request) (kmsg.Response, error) {
	cl, err := k.franzClient()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithDeadline(context.Background(), k.deadline)
	defer cancel()
	return cl.Request(ctx, req)
}

// supportsConsumerGroupDescribe tells whether the brokers answer
// ConsumerGroupDescribe (Kafka 4.0 and later; 3.7 to 3.9 with the early
// access of the protocol enabled), asking one of them (ApiVersions).
func (k *kafkaSession) supportsConsumerGroupDescribe() (bool, error) {
	resp, err := k.request(kmsg.NewPtrApiVersionsRequest())
	if err != nil {
		return false, k.err("api versions", err)
	}
	versions := resp.(*kmsg.ApiVersionsResponse)
	if err := kerr.ErrorForCode(versions.ErrorCode); err != nil {
		return false, k.err("api versions", err)
	}
	for _, key := range versions.ApiKeys {
		if key.ApiKey == consumerGroupDescribeKey {
			return true, nil
		}
	}
	return false, nil
}

// consumerGroups describes the named groups with ConsumerGroupDescribe
// and returns those of Kafka's consumer group protocol, by name; the
// others (classic groups, unknown ones: GROUP_ID_NOT_FOUND) are left
// out. It returns an empty map, and no error, when the brokers do not
// support the request, or support it without the protocol enabled
// (UNSUPPORTED_VERSION: Kafka 3.7 to 3.9 list it in ApiVersions but
// answer so unless group.coordinator.rebalance.protocols has
// "consumer"): they keep classic groups only.
func (k *kafkaSession) consumerGroups(names []string) (map[string]*kmsg.ConsumerGroupDescribeResponseGroup, error) {
	found := make(map[string]*kmsg.ConsumerGroupDescribeResponseGroup)
	if len(names) == 0 {
		return found, nil
	}
	if ok, err := k.supportsConsumerGroupDescribe(); err != nil || !ok {
		return found, err
	}
	req := kmsg.NewPtrConsumerGroupDescribeRequest()
	req.Groups = names
	what := "describe consumer group " + strings.Join(names, ",")
	resp, err := k.request(req)
	var kafkaErr *kerr.Error
	if err != nil && !errors.As(err, &kafkaErr) {
		return nil, k.err(what, err)
	}
	// The merged answer holds every group; err is the first group's
	// error, looked at per group below.
	described, _ := resp.(*kmsg.ConsumerGroupDescribeResponse)
	if described == nil {
		return nil, k.err(what, err)
	}
	for i := range described.Groups {
		g := &described.Groups[i]
		switch err := kerr.ErrorForCode(g.ErrorCode); {
		case err == nil:
			found[g.Group] = g
		case errors.Is(err, kerr.GroupIDNotFound), errors.Is(err, kerr.UnsupportedVersion):
		default:
			if g.ErrorMessage != nil && *g.ErrorMessage != "" {
				err = fmt.Errorf("%w: %s", err, *g.ErrorMessage)
			}
			return nil, k.err("describe consumer group "+g.Group, err)
		}
	}
	return found, nil
}

// consumerGroup is consumerGroups for one group: nil when it is not of
// Kafka's consumer group protocol.
func (k *kafkaSession) consumerGroup(group string) (*kmsg.ConsumerGroupDescribeResponseGroup, error) {
	found, err := k.consumerGroups([]string{group})
	if err != nil {
		return nil, err
	}
	return found[group], nil
}

// describeConsumerGroup returns the group g of Kafka's consumer group
// protocol. desc has the group's name, ZooKeeper and brokers set.
func (k *kafkaSession) describeConsumerGroup(desc *GroupDescription, g *kmsg.ConsumerGroupDescribeResponseGroup) (*GroupDescription, error) {
	desc.Coordinator = CoordinatorKafka
	desc.GroupProtocol = GroupProtocolConsumer
	desc.KafkaState = g.State
	groupEpoch, assignmentEpoch := g.Epoch, g.AssignmentEpoch
	desc.GroupEpoch, desc.AssignmentEpoch = &groupEpoch, &assignmentEpoch
	desc.Assignor = g.AssignorName
	if b, err := k.client.Coordinator(desc.Group); err == nil {
		desc.CoordinatorBroker = b.Addr()
	}
	if desc.Instances == nil {
		desc.Instances = []Instance{}
	}
	members := slices.Clone(g.Members)
	slices.SortFunc(members, func(a, b kmsg.ConsumerGroupDescribeResponseGroupMember) int {
		return strings.Compare(a.MemberID, b.MemberID)
	})
	owners := make(map[TopicPartition]string)
	targets := make(map[TopicPartition]string)
	for _, m := range members {
		instance := consumerMember(m)
		for _, tp := range instance.Owned {
			owners[tp] = instance.ID
		}
		for _, tp := range *instance.TargetAssignment {
			targets[tp] = instance.ID
		}
		desc.Instances = append(desc.Instances, instance)
	}
	// A partition of a target assignment that nobody owns yet is shown
	// too (with its committed offset and lag).
	shown := make(map[TopicPartition]string, len(owners)+len(targets))
	for tp, id := range targets {
		shown[tp] = id
	}
	for tp, id := range owners {
		shown[tp] = id
	}
	offsets, err := k.offsets(desc.Group, desc.Instances, shown)
	if err != nil {
		return nil, err
	}
	desc.Partitions = offsets.partitions
	for i := range desc.Partitions {
		p := &desc.Partitions[i]
		p.Owner = owners[p.TopicPartition]
		p.OwnerRegistered = p.Owner != ""
		p.TargetOwner = targets[p.TopicPartition]
	}
	desc.addTotals()
	desc.State = kafkaGroupState(g.State, desc, offsets.subscribed)
	return desc, nil
}

// consumerMember is the instance of a member of a group of Kafka's
// consumer group protocol. Kafka keeps no client metadata of such a
// member (no user data), so its library is LibraryUnknown.
func consumerMember(m kmsg.ConsumerGroupDescribeResponseGroupMember) Instance {
	epoch := m.MemberEpoch
	target := assignmentPartitions(m.TargetAssignment)
	instance := Instance{
		ID:               m.MemberID,
		ClientID:         m.ClientID,
		ClientHost:       strings.TrimPrefix(m.ClientHost, "/"),
		Library:          LibraryUnknown,
		MemberEpoch:      &epoch,
		Owned:            assignmentPartitions(m.Assignment),
		TargetAssignment: &target,
	}
	if m.InstanceID != nil && *m.InstanceID != "" {
		instance.Static, instance.InstanceID = true, *m.InstanceID
	}
	if m.RackID != nil {
		instance.Rack = *m.RackID
	}
	if len(m.SubscribedTopics) > 0 {
		instance.Topics = slices.Sorted(slices.Values(m.SubscribedTopics))
	}
	if m.SubscribedTopicRegex != nil {
		instance.TopicRegex = *m.SubscribedTopicRegex
	}
	switch m.MemberType {
	case memberTypeClassic:
		instance.MemberProtocol = GroupProtocolClassic
	case memberTypeConsumer:
		instance.MemberProtocol = GroupProtocolConsumer
	}
	return instance
}

// assignmentPartitions returns the partitions of an assignment, sorted;
// empty, not nil, for none.
func assignmentPartitions(a kmsg.Assignment) []TopicPartition {
	partitions := []TopicPartition{}
	for _, t := range a.TopicPartitions {
		for _, p := range t.Partitions {
			partitions = append(partitions, TopicPartition{Topic: t.Topic, Partition: p})
		}
	}
	sortPartitions(partitions)
	return partitions
}

// listedGroup is a group of ListGroups' answer.
type listedGroup struct {
	protocolType string
	// consumerProtocol is true for a group of Kafka's consumer group
	// protocol (its type, ListGroups v5 and later; an older broker keeps
	// classic groups only).
	consumerProtocol bool
}

// listGroups lists the groups that Kafka's group coordinators keep, by
// name, asking every broker (ListGroups, at the highest version both
// sides know: v5 and later name each group's type).
func (k *kafkaSession) listGroups() (map[string]listedGroup, error) {
	resp, err := k.request(kmsg.NewPtrListGroupsRequest())
	if err != nil {
		return nil, k.err("list groups", err)
	}
	listed := resp.(*kmsg.ListGroupsResponse)
	if err := kerr.ErrorForCode(listed.ErrorCode); err != nil {
		return nil, k.err("list groups", err)
	}
	groups := make(map[string]listedGroup, len(listed.Groups))
	for _, g := range listed.Groups {
		groups[g.Group] = listedGroup{
			protocolType:     g.ProtocolType,
			consumerProtocol: listed.Version >= 5 && g.GroupType == GroupProtocolConsumer,
		}
	}
	return groups, nil
}
