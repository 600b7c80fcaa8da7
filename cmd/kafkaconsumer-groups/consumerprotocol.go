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
	"io"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/IBM/sarama"
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
// within the session's deadline, and retries what Kafka says to retry
// (COORDINATOR_NOT_AVAILABLE while a new cluster creates its offsets
// topic, NOT_COORDINATOR while the group moves) until then.
func (k *kafkaSession) franzClient() (*kgo.Client, error) {
	if k.franz != nil {
		return k.franz, nil
	}
	remaining := max(time.Until(k.deadline), time.Millisecond)
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(k.brokers...),
		kgo.ClientID("kafkaconsumer-groups"),
		kgo.DialTimeout(remaining),
		kgo.RetryTimeout(remaining),
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
	return k.supportsAPI(consumerGroupDescribeKey)
}

// supportsAPI tells whether the brokers serve the request of API key
// key, asking one of them (ApiVersions).
func (k *kafkaSession) supportsAPI(key int16) (bool, error) {
	resp, err := k.request(kmsg.NewPtrApiVersionsRequest())
	if err != nil {
		return false, k.err("api versions", err)
	}
	versions := resp.(*kmsg.ApiVersionsResponse)
	if err := kerr.ErrorForCode(versions.ErrorCode); err != nil {
		return false, k.err("api versions", err)
	}
	for _, v := range versions.ApiKeys {
		if v.ApiKey == key {
			return true, nil
		}
	}
	return false, nil
}

// retrying calls try until it succeeds, or fails with an error that
// retriable does not retry, or the session's deadline comes, with a
// capped backoff; franz-go does not retry a failure to find a
// coordinator, nor a coordinator it cannot dial. what names the request
// in the error.
func (k *kafkaSession) retrying(what string, try func() error) error {
	backoff := 100 * time.Millisecond
	for {
		err := try()
		if err == nil {
			return nil
		}
		if !retriable(err) || time.Now().Add(backoff).After(k.deadline) {
			return k.err(what, err)
		}
		timer := time.NewTimer(backoff)
		<-timer.C
		backoff = min(2*backoff, time.Second)
	}
}

// retriable tells whether a request that failed with err may succeed
// when asked again: errors Kafka says to retry (COORDINATOR_NOT_AVAILABLE
// while a new cluster creates its offsets topic, NOT_COORDINATOR while
// the group moves, COORDINATOR_LOAD_IN_PROGRESS), in franz-go's or
// sarama's form, and a broker that cannot be reached or dropped the
// connection: the group's coordinator down, restarting, or moving away
// from a broker that died.
func retriable(err error) bool {
	var opErr *net.OpError
	switch {
	case kerr.IsRetriable(err),
		errors.Is(err, sarama.ErrConsumerCoordinatorNotAvailable),
		errors.Is(err, sarama.ErrNotCoordinatorForConsumer),
		errors.Is(err, sarama.ErrOffsetsLoadInProgress),
		errors.Is(err, sarama.ErrOutOfBrokers),
		errors.Is(err, sarama.ErrNotConnected),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.As(err, &opErr):
		return true
	}
	return false
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
	err := k.retrying("describe consumer group", func() error {
		var err error
		found, err = k.describeConsumerGroups(names)
		return err
	})
	return found, err
}

// describeConsumerGroups sends ConsumerGroupDescribe once, for
// consumerGroups. A group missing from the answer (its coordinator could
// not be found) or answered with another error than those
// consumerGroups leaves out fails it all, naming the group.
func (k *kafkaSession) describeConsumerGroups(names []string) (map[string]*kmsg.ConsumerGroupDescribeResponseGroup, error) {
	req := kmsg.NewPtrConsumerGroupDescribeRequest()
	req.Groups = names
	return describeGroups(k, names, req, func(resp kmsg.Response) ([]kmsg.ConsumerGroupDescribeResponseGroup, bool) {
		described, ok := resp.(*kmsg.ConsumerGroupDescribeResponse)
		if !ok {
			return nil, false
		}
		return described.Groups, true
	}, func(g *kmsg.ConsumerGroupDescribeResponseGroup) (string, int16, *string) {
		return g.Group, g.ErrorCode, g.ErrorMessage
	}, func(err error) bool {
		return errors.Is(err, kerr.GroupIDNotFound) || errors.Is(err, kerr.UnsupportedVersion)
	})
}

// describeGroups sends req, a describe of the named groups
// (ConsumerGroupDescribe, ShareGroupDescribe), once, and returns the
// groups of its answer (groupsOf: false for none) answered without
// error, by name; id names a group with its error code and message. A
// group whose error skip accepts is left out; another error, or a group
// missing from the answer, fails it all, naming the group.
func describeGroups[G any](k *kafkaSession, names []string, req kmsg.Request, groupsOf func(kmsg.Response) ([]G, bool), id func(*G) (string, int16, *string), skip func(error) bool) (map[string]*G, error) {
	resp, reqErr := k.request(req)
	// The merged answer holds the groups of the brokers that answered;
	// reqErr is the first error, of a request or of a group.
	groups, ok := groupsOf(resp)
	var kafkaErr *kerr.Error
	if !ok || reqErr != nil && !errors.As(reqErr, &kafkaErr) {
		if reqErr == nil {
			reqErr = errors.New("no answer")
		}
		return nil, reqErr
	}
	found := make(map[string]*G, len(names))
	answered := make(map[string]bool, len(names))
	for i := range groups {
		g := &groups[i]
		name, code, message := id(g)
		answered[name] = true
		switch err := kerr.ErrorForCode(code); {
		case err == nil:
			found[name] = g
		case skip(err):
		default:
			return nil, fmt.Errorf("%s: %w%s", name, err, kafkaMessage(message))
		}
	}
	for _, name := range names {
		if !answered[name] {
			if reqErr == nil {
				reqErr = errors.New("not in the answer")
			}
			return nil, fmt.Errorf("%s: %w", name, reqErr)
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
	k.setBrokerAssigned(desc, GroupProtocolConsumer, g.State, g.Epoch, g.AssignmentEpoch, g.AssignorName)
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

// setBrokerAssigned sets what desc says of a group that the broker
// assigns (of the consumer group protocol, or a share group): its
// protocol, Kafka's state of it, its epochs and assignor, and its
// coordinator's address; and an empty list of instances for none.
func (k *kafkaSession) setBrokerAssigned(desc *GroupDescription, protocol, state string, groupEpoch, assignmentEpoch int32, assignor string) {
	desc.Coordinator = CoordinatorKafka
	desc.GroupProtocol = protocol
	desc.KafkaState = state
	desc.GroupEpoch, desc.AssignmentEpoch = &groupEpoch, &assignmentEpoch
	desc.Assignor = assignor
	if b, err := k.client.Coordinator(desc.Group); err == nil {
		desc.CoordinatorBroker = b.Addr()
	}
	if desc.Instances == nil {
		desc.Instances = []Instance{}
	}
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
	// share is true for a share group (its type, ListGroups v5 and
	// later).
	share bool
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
			share:            listed.Version >= 5 && g.GroupType == GroupProtocolShare,
		}
	}
	return groups, nil
}
