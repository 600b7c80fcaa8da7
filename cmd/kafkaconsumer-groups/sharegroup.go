package main

// A share group (KIP-932, Kafka 4.2 and later: the library's
// GroupProtocolShare, franz-go's ShareGroup): its members, their member
// epochs, subscriptions and assignments from ShareGroupDescribe (API key
// 76), the group's state, epochs and assignor; and per partition the
// share-partition start offset from DescribeShareGroupOffsets (API key
// 90), the log-end offset, and how many records are in flight at most.
// A share group commits no offsets: the broker keeps each record's state
// (available, acquired by a member, acknowledged, archived), and the
// start offset is the first record not yet acknowledged or archived.
// Several members share a partition, so a partition has owners.
//
// The broker reports no count of the records in flight (acquired and
// not yet acknowledged): the tool shows LogEnd - ShareStartOffset, an
// upper bound, as in_flight_at_most; past the start offset are also
// records not delivered yet and records acknowledged out of order. From
// DescribeShareGroupOffsets v1 (KIP-1226) the broker reports the
// share-partition lag, the records not yet acknowledged: shown as the
// partition's lag.

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// GroupProtocolShare is the GroupDescription.GroupProtocol and
// GroupSummary.GroupProtocol of a share group (KIP-932): the members
// heartbeat with ShareGroupHeartbeat, the broker assigns, several
// members share each partition and acknowledge record by record.
const GroupProtocolShare = "share"

// shareGroupDescribeKey is the API key of ShareGroupDescribe.
var shareGroupDescribeKey = kmsg.NewPtrShareGroupDescribeRequest().Key()

// shareGroups describes the named groups with ShareGroupDescribe and
// returns the share groups among them, by name; the others (unknown, or
// of another type: GROUP_ID_NOT_FOUND) are left out. It returns an empty
// map, and no error, when the brokers do not serve share groups.
func (k *kafkaSession) shareGroups(names []string) (map[string]*kmsg.ShareGroupDescribeResponseGroup, error) {
	found := make(map[string]*kmsg.ShareGroupDescribeResponseGroup)
	if len(names) == 0 {
		return found, nil
	}
	if ok, err := k.supportsAPI(shareGroupDescribeKey); err != nil || !ok {
		return found, err
	}
	err := k.retrying("describe share group", func() error {
		var err error
		found, err = k.describeShareGroups(names)
		return err
	})
	return found, err
}

// describeShareGroups sends ShareGroupDescribe once, for shareGroups. A
// group missing from the answer, or answered with another error than
// GROUP_ID_NOT_FOUND, fails it all, naming the group.
func (k *kafkaSession) describeShareGroups(names []string) (map[string]*kmsg.ShareGroupDescribeResponseGroup, error) {
	req := kmsg.NewPtrShareGroupDescribeRequest()
	req.GroupIDs = names
	return describeGroups(k, names, req, func(resp kmsg.Response) ([]kmsg.ShareGroupDescribeResponseGroup, bool) {
		described, ok := resp.(*kmsg.ShareGroupDescribeResponse)
		if !ok {
			return nil, false
		}
		return described.Groups, true
	}, func(g *kmsg.ShareGroupDescribeResponseGroup) (string, int16, *string) {
		return g.GroupID, g.ErrorCode, g.ErrorMessage
	}, func(err error) bool { return errors.Is(err, kerr.GroupIDNotFound) })
}

// shareGroup is shareGroups for one group: nil when it is not a share
// group.
func (k *kafkaSession) shareGroup(group string) (*kmsg.ShareGroupDescribeResponseGroup, error) {
	found, err := k.shareGroups([]string{group})
	if err != nil {
		return nil, err
	}
	return found[group], nil
}

// describeShareGroup returns the share group g. desc has the group's
// name, ZooKeeper and brokers set.
func (k *kafkaSession) describeShareGroup(desc *GroupDescription, g *kmsg.ShareGroupDescribeResponseGroup) (*GroupDescription, error) {
	k.setBrokerAssigned(desc, GroupProtocolShare, g.GroupState, g.GroupEpoch, g.AssignmentEpoch, g.Assignor)
	members := slices.Clone(g.Members)
	slices.SortFunc(members, func(a, b kmsg.ShareGroupDescribeResponseGroupMember) int {
		return strings.Compare(a.MemberID, b.MemberID)
	})
	owners := make(map[TopicPartition][]string)
	for _, m := range members {
		instance := shareMember(m)
		for _, tp := range instance.Owned {
			owners[tp] = append(owners[tp], instance.ID) // sorted: the members are
		}
		desc.Instances = append(desc.Instances, instance)
	}
	partitions, subscribed, err := k.sharePartitions(desc.Group, desc.Instances, owners)
	if err != nil {
		return nil, err
	}
	desc.Partitions = partitions
	desc.addTotals()
	desc.State = kafkaGroupState(g.GroupState, desc, subscribed)
	return desc, nil
}

// shareMember is the instance of a member of a share group. Kafka keeps
// no client metadata of such a member, so its library is LibraryUnknown.
func shareMember(m kmsg.ShareGroupDescribeResponseGroupMember) Instance {
	epoch := m.MemberEpoch
	instance := Instance{
		ID:          m.MemberID,
		ClientID:    m.ClientID,
		ClientHost:  strings.TrimPrefix(m.ClientHost, "/"),
		Library:     LibraryUnknown,
		MemberEpoch: &epoch,
		Owned:       []TopicPartition{},
	}
	if m.RackID != nil {
		instance.Rack = *m.RackID
	}
	if len(m.SubscribedTopicNames) > 0 {
		instance.Topics = slices.Sorted(slices.Values(m.SubscribedTopicNames))
	}
	for _, t := range m.Assignment.TopicPartitions {
		for _, p := range t.Partitions {
			instance.Owned = append(instance.Owned, TopicPartition{Topic: t.Topic, Partition: p})
		}
	}
	sortPartitions(instance.Owned)
	return instance
}

// sharePartitions returns the partitions of a share group, sorted: those
// of the topics its members subscribe to, those assigned, and those the
// broker keeps a share-partition state for; each with its owners, start
// offset, log end, records in flight at most and (when the broker says)
// lag. subscribed are the partitions of the subscribed topics.
func (k *kafkaSession) sharePartitions(group string, instances []Instance, owners map[TopicPartition][]string) (partitions []Partition, subscribed map[TopicPartition]bool, err error) {
	states, err := k.shareStates(group)
	if err != nil {
		return nil, nil, err
	}
	kafkaTopics, err := k.client.Topics()
	if err != nil {
		return nil, nil, k.err("list topics", err)
	}
	subscribedTopics := subscribedTopics(instances, kafkaTopics)
	wanted := make(map[TopicPartition]bool)
	subscribed = make(map[TopicPartition]bool)
	for topic := range subscribedTopics {
		ids, err := k.client.Partitions(topic)
		if err != nil && !errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
			return nil, nil, k.err("partitions of "+topic, err)
		}
		for _, id := range ids {
			tp := TopicPartition{Topic: topic, Partition: id}
			wanted[tp], subscribed[tp] = true, true
		}
	}
	for tp := range owners {
		wanted[tp] = true
	}
	for tp := range states {
		wanted[tp] = true
	}
	keys := slices.Collect(maps.Keys(wanted))
	sortPartitions(keys)
	for _, tp := range keys {
		if time.Now().After(k.deadline) {
			return nil, nil, fmt.Errorf("%w: reading the offsets of %s: %s", ErrTimeout, tp.Topic, k.timeoutMsg)
		}
		partitions = append(partitions, k.sharePartition(tp, owners[tp], states[tp]))
	}
	return partitions, subscribed, nil
}

// sharePartition is the Partition of tp in a share group, with its owners
// and its share-partition state (nil when the broker keeps none).
func (k *kafkaSession) sharePartition(tp TopicPartition, owners []string, state *kmsg.DescribeShareGroupOffsetsResponseGroupTopicPartition) Partition {
	p := Partition{TopicPartition: tp, Owners: owners}
	if len(owners) > 0 {
		p.Owner, p.OwnerRegistered = owners[0], true
	}
	var problems []string
	if logEnd, err := k.client.GetOffset(tp.Topic, tp.Partition, sarama.OffsetNewest); err != nil {
		problems = append(problems, fmt.Sprintf("log-end offset: %s", err))
	} else {
		p.LogEnd = &logEnd
	}
	if state != nil && state.ErrorCode != 0 {
		problems = append(problems, fmt.Sprintf("share-partition state: %s%s", kerr.ErrorForCode(state.ErrorCode), kafkaMessage(state.ErrorMessage)))
	}
	setShareState(&p, state)
	p.Error = strings.Join(problems, "; ")
	return p
}

// setShareState sets p's ShareStartOffset, InFlightAtMost (with p.LogEnd)
// and Lag from its share-partition state; state nil, failed, or not
// initialised (start offset -1) sets none. A lag of -1 (not reported,
// before DescribeShareGroupOffsets v1) leaves Lag nil.
func setShareState(p *Partition, state *kmsg.DescribeShareGroupOffsetsResponseGroupTopicPartition) {
	if state == nil || state.ErrorCode != 0 || state.StartOffset < 0 {
		return
	}
	start := state.StartOffset
	p.ShareStartOffset = &start
	if p.LogEnd != nil {
		inFlight := max(*p.LogEnd-start, 0)
		p.InFlightAtMost = &inFlight
	}
	if state.Lag >= 0 {
		lag := state.Lag
		p.Lag = &lag
	}
}

// shareStates returns the share-partition states the broker keeps for
// the group (DescribeShareGroupOffsets of every partition), by
// partition; empty when the brokers do not serve the request.
func (k *kafkaSession) shareStates(group string) (map[TopicPartition]*kmsg.DescribeShareGroupOffsetsResponseGroupTopicPartition, error) {
	states := make(map[TopicPartition]*kmsg.DescribeShareGroupOffsetsResponseGroupTopicPartition)
	req := kmsg.NewPtrDescribeShareGroupOffsetsRequest()
	if ok, err := k.supportsAPI(req.Key()); err != nil || !ok {
		return states, err
	}
	g := kmsg.NewDescribeShareGroupOffsetsRequestGroup()
	g.GroupID = group // no topics: every partition of the group
	req.Groups = append(req.Groups, g)
	var described *kmsg.DescribeShareGroupOffsetsResponseGroup
	err := k.retrying("describe share group offsets of "+group, func() error {
		resp, err := k.request(req)
		if err != nil {
			return err
		}
		groups := resp.(*kmsg.DescribeShareGroupOffsetsResponse).Groups
		if len(groups) != 1 {
			return fmt.Errorf("%d groups in the answer", len(groups))
		}
		if err := kerr.ErrorForCode(groups[0].ErrorCode); err != nil {
			return fmt.Errorf("%w%s", err, kafkaMessage(groups[0].ErrorMessage))
		}
		described = &groups[0]
		return nil
	})
	if err != nil {
		return nil, err
	}
	for i := range described.Topics {
		t := &described.Topics[i]
		for j := range t.Partitions {
			states[TopicPartition{Topic: t.Topic, Partition: t.Partitions[j].Partition}] = &t.Partitions[j]
		}
	}
	return states, nil
}

// kafkaMessage is ": message" for a broker's error message, "" for none.
func kafkaMessage(message *string) string {
	if message == nil || *message == "" {
		return ""
	}
	return ": " + *message
}
