package kafkaconsumer

// The Kafka coordinator's assignor: the member metadata of a JoinGroup and
// the leader's assignment, in Kafka's consumer protocol encodings
// (sarama's ConsumerGroupMemberMetadata and ConsumerGroupMemberAssignment),
// which kafka-consumer-groups.sh --describe, sarama and franz-go read.

import (
	"bytes"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/IBM/sarama"
	"github.com/wvanbergen/kazoo-go"
)

// memberMetadata returns this member's subscription for its JoinGroup:
// the topics it consumes (those of its view of the metadata), and the
// partitions it owns (KIP-429; version 1 of the consumer protocol's
// subscription).
func memberMetadata(partitions kazoo.PartitionList, owned map[string][]int32) *sarama.ConsumerGroupMemberMetadata {
	seen := make(map[string]bool)
	var topics []string
	for _, p := range partitions {
		if name := p.Topic().Name; !seen[name] {
			seen[name] = true
			topics = append(topics, name)
		}
	}
	sort.Strings(topics)
	names := make([]string, 0, len(owned))
	for topic := range owned {
		names = append(names, topic)
	}
	sort.Strings(names)
	meta := &sarama.ConsumerGroupMemberMetadata{Version: 1, Topics: topics}
	for _, topic := range names {
		ps := append([]int32(nil), owned[topic]...)
		sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
		meta.OwnedPartitions = append(meta.OwnedPartitions, &sarama.OwnedPartition{Topic: topic, Partitions: ps})
	}
	return meta
}

// joinMetadata returns the member metadata of this member's next
// JoinGroup: its subscription (partitions), the partitions it owns, and
// its user data. It runs the joiningGroup test hook.
func (k *kafkaCoordinator) joinMetadata(partitions kazoo.PartitionList) *sarama.ConsumerGroupMemberMetadata {
	if h := k.cm.hooks; h != nil && h.joiningGroup != nil {
		h.joiningGroup()
	}
	meta := memberMetadata(partitions, k.ownedPartitions())
	meta.UserData = memberUserData(k.followsSwitch, k.rejoins.refusedGeneration())
	return meta
}

// kafkaMember is a member of a generation, as the leader sees it.
type kafkaMember struct {
	id  string // the member ID
	key string // what the distribution sorts by: the InstanceID, else the member ID
	// topics are the topics the member subscribes to: only they may be
	// assigned to it.
	topics []string
	// owned are the partitions the member reports as its own.
	owned []TopicPartition
}

// kafkaMembers reads the members of a JoinGroup response (the leader's).
func kafkaMembers(resp *sarama.JoinGroupResponse) ([]kafkaMember, error) {
	metas, err := resp.GetMembers()
	if err != nil {
		return nil, err
	}
	members := make([]kafkaMember, 0, len(resp.Members))
	for _, m := range resp.Members {
		km := kafkaMember{id: m.MemberId, key: m.MemberId, topics: metas[m.MemberId].Topics}
		if m.GroupInstanceId != nil && *m.GroupInstanceId != "" {
			km.key = *m.GroupInstanceId
		}
		for _, o := range metas[m.MemberId].OwnedPartitions {
			for _, p := range o.Partitions {
				km.owned = append(km.owned, TopicPartition{Topic: o.Topic, Partition: p})
			}
		}
		members = append(members, km)
	}
	return members, nil
}

// assignCooperative returns the assignment of a generation: for each
// member ID, its partitions by topic (every member has an entry, empty or
// not). counts are the partition counts of the topics the members
// subscribe to. The target is stickyTarget's (sticky.go): each topic
// only among its subscribers, balanced, and every member keeps what it
// owns as far as the balance allows. A partition of a member's target
// that another member of the generation reports as owned (also one that
// two members report, which the protocol never leads to) is withheld,
// so that its owner stops it and joins again, and the member gets it in
// the next generation: one owner at a time (see coordinator_kafka.go).
// A partition that no member of the generation reports (its owner left)
// is given at once. awaiting holds the members that a partition was
// withheld from: the next generation, which the owners' JoinGroups
// start, brings it to them.
func assignCooperative(members []kafkaMember, counts map[string]int32) (plan map[string]map[string][]int32, awaiting map[string]bool) {
	claimers := make(map[TopicPartition][]string)
	for _, m := range members {
		for _, tp := range m.owned {
			if ids := claimers[tp]; len(ids) == 0 || ids[len(ids)-1] != m.id {
				claimers[tp] = append(ids, m.id)
			}
		}
	}
	plan = make(map[string]map[string][]int32, len(members))
	awaiting = make(map[string]bool)
	for id, tps := range stickyTarget(members, counts) {
		plan[id] = map[string][]int32{}
		for _, tp := range tps {
			if ids := claimers[tp]; len(ids) > 1 || len(ids) == 1 && ids[0] != id {
				awaiting[id] = true
				continue // revoked from its owner first
			}
			plan[id][tp.Topic] = append(plan[id][tp.Topic], tp.Partition)
		}
	}
	return plan, awaiting
}

// The user data of an assignment: this member awaits a partition
// withheld from it (assignCooperative: it heartbeats more often until
// the next generation starts, kafkaCoordinator.expectRebalance, instead
// of learning of it a heartbeat interval later), it stops a partition it
// reports as owned, or both; or, in a generation where other members do
// either, it does neither but must join the next generation all the
// same (following: it heartbeats more often too, or the generation
// waits for its next heartbeat). Any user data in a member's assignment makes
// Kafka 4's brokers refuse to convert the group to a consumer group
// (GROUP_ID_NOT_FOUND, "an unsupported custom assignor is in use"): the
// converted group is built from the assignments, where a partition that
// its owner still stops, and that no assignment lists, would look free.
// So no generation that revokes a partition converts; the next one,
// which the owners' JoinGroups start once they stopped, can
// (docs/consumer-protocol.md, "Moving a group between the protocols").
var (
	awaitingUserData         = []byte(`{"awaiting":true}`)
	revokingUserData         = []byte(`{"revoking":true}`)
	awaitingRevokingUserData = []byte(`{"awaiting":true,"revoking":true}`)
	followingUserData        = []byte(`{"following":true}`)
)

// assignmentUserData returns the user data of a member's assignment: nil
// when it neither awaits nor revokes, and no other member does
// (following).
func assignmentUserData(awaiting, revoking, following bool) []byte {
	switch {
	case awaiting && revoking:
		return awaitingRevokingUserData
	case awaiting:
		return awaitingUserData
	case revoking:
		return revokingUserData
	case following:
		return followingUserData
	}
	return nil
}

// expectsRebalance reports whether the user data of this member's
// assignment says that the next generation follows at once: it awaits
// a partition, or another member revokes one (following).
func expectsRebalance(userData []byte) bool {
	return awaitingAssignment(userData) || bytes.Equal(userData, followingUserData)
}

// awaitingAssignment reports whether the user data of this member's
// assignment says it awaits a partition (assignmentUserData). Another
// member's encoding that differs only in spacing reads as not awaiting:
// the member heartbeats as usual.
func awaitingAssignment(userData []byte) bool {
	return bytes.Equal(userData, awaitingUserData) || bytes.Equal(userData, awaitingRevokingUserData)
}

// revokingMembers returns the members whose assignment in plan lacks a
// partition they report as owned: they stop it before they join again.
func revokingMembers(members []kafkaMember, plan map[string]map[string][]int32) map[string]bool {
	revoking := make(map[string]bool)
	for _, m := range members {
		for _, tp := range m.owned {
			if !slices.Contains(plan[m.id][tp.Topic], tp.Partition) {
				revoking[m.id] = true
				break
			}
		}
	}
	return revoking
}

// assign is the leader's assignment of the generation that resp opened,
// with the user data of each member's assignment (assignmentUserData).
// The partition counts of the topics in the leader's own view of the
// metadata (partitions) come from there; those of the topics that only
// other members subscribe to are read from Kafka's metadata, through
// call (abandonable): an error fails the join, which is tried again.
// Once the generation is synced, the leader watches them (watchOthers).
func (k *kafkaCoordinator) assign(resp *sarama.JoinGroupResponse, partitions kazoo.PartitionList) (plan map[string]map[string][]int32, userData map[string][]byte, err error) {
	members, err := kafkaMembers(resp)
	if err != nil {
		return nil, nil, err
	}
	counts := make(map[string]int32)
	for _, p := range partitions {
		counts[p.Topic().Name]++
	}
	if others := otherTopics(members, counts); len(others) > 0 {
		var view metadataView
		client := k.cm.metadataClient()
		if err := k.call(func() (err error) { view, err = readMetadata(client, others); return err }); err != nil {
			return nil, nil, fmt.Errorf("the partitions of topics %s, which other members subscribe to: %w", strings.Join(others, ", "), err)
		}
		for _, p := range view.partitions {
			counts[p.Topic().Name]++
		}
		k.rejoins.leadOthers(resp.GenerationId, others, view)
	} else {
		k.rejoins.leadOthers(resp.GenerationId, nil, metadataView{})
	}
	plan, awaiting := assignCooperative(members, counts)
	revoking := revokingMembers(members, plan)
	userData = make(map[string][]byte, len(plan))
	for id := range plan {
		userData[id] = assignmentUserData(awaiting[id], revoking[id], len(revoking) > 0)
	}
	return plan, userData, nil
}

// otherTopics returns the topics that members subscribe to and counts
// lacks, sorted: a topicSelector of exactly them.
func otherTopics(members []kafkaMember, counts map[string]int32) topicList {
	seen := make(map[string]bool)
	var others topicList
	for _, m := range members {
		for _, t := range m.topics {
			if _, ok := counts[t]; !ok && !seen[t] {
				seen[t] = true
				others = append(others, t)
			}
		}
	}
	sort.Strings(others)
	return others
}

// topicList is a topicSelector of the listed topics, sorted.
type topicList []string

// metadataTopics implements topicSelector.
func (l topicList) metadataTopics() []string { return l }

// selectsTopic implements topicSelector: a listed topic.
func (l topicList) selectsTopic(name string, _ bool) bool {
	i := sort.SearchStrings(l, name)
	return i < len(l) && l[i] == name
}

// subscribedOnly returns the partitions of assigned whose topics are in
// subscribed, and the sorted names of the other topics: partitions a
// leader handed out beyond this member's subscription (a leader of an
// older version, which spread its own partitions over every member).
func subscribedOnly(assigned map[string][]int32, subscribed []string) (kept map[string][]int32, foreign []string) {
	kept = make(map[string][]int32, len(assigned))
	for topic, ps := range assigned {
		if !slices.Contains(subscribed, topic) {
			foreign = append(foreign, topic)
			continue
		}
		kept[topic] = ps
	}
	sort.Strings(foreign)
	return kept, foreign
}
