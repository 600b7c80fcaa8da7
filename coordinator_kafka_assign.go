package kafkaconsumer

// The Kafka coordinator's assignor: the member metadata of a JoinGroup and
// the leader's assignment, in Kafka's consumer protocol encodings
// (sarama's ConsumerGroupMemberMetadata and ConsumerGroupMemberAssignment),
// which kafka-consumer-groups.sh --describe, sarama and franz-go read.

import (
	"bytes"
	"fmt"
	"sort"

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

// memberUserData is the user data of this library's member metadata: the
// "client" field of the ZooKeeper registration (mixed.go), and, for an
// instance that follows the group's coordinator switch (followsSwitch),
// the "migration" field, by which the groups tool's migrate tells the
// members that go back to ZooKeeper when asked from those that do not.
func memberUserData(followsSwitch bool) []byte {
	if followsSwitch {
		return []byte(fmt.Sprintf(`{"client":%q,"migration":%d}`, registrationClient, migrationVersion))
	}
	return []byte(fmt.Sprintf(`{"client":%q}`, registrationClient))
}

// kafkaMember is a member of a generation, as the leader sees it.
type kafkaMember struct {
	id  string // the member ID
	key string // what the distribution sorts by: the InstanceID, else the member ID
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
		km := kafkaMember{id: m.MemberId, key: m.MemberId}
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
// not). The target is the distribution of the ZooKeeper mode
// (distributePartitionsBetweenConsumers) over the members' keys; a
// partition of a member's target that another member of the generation
// owns is withheld from both, so that its owner stops it and joins
// again, and the member gets it in the next generation: one owner at a
// time (see coordinator_kafka.go). A partition that two members report
// (which the protocol never leads to) is withheld from both. awaiting
// holds the members that a partition was withheld from: the next
// generation, which the owners' JoinGroups start, brings it to them.
func assignCooperative(members []kafkaMember, partitions kazoo.PartitionList) (plan map[string]map[string][]int32, awaiting map[string]bool) {
	owner := make(map[TopicPartition]string)
	conflicted := make(map[TopicPartition]bool)
	instances := make(kazoo.ConsumergroupInstanceList, 0, len(members))
	group := kazooValues.Consumergroup("")
	byKey := make(map[string]string, len(members))
	for _, m := range members {
		instances = append(instances, group.Instance(m.key))
		byKey[m.key] = m.id
		for _, tp := range m.owned {
			if o, ok := owner[tp]; ok && o != m.id {
				conflicted[tp] = true
			}
			owner[tp] = m.id
		}
	}
	plan = make(map[string]map[string][]int32, len(members))
	awaiting = make(map[string]bool)
	for _, m := range members {
		plan[m.id] = map[string][]int32{}
	}
	for key, ps := range distributePartitionsBetweenConsumers(instances, retrievePartitionLeaders(partitions)) {
		id := byKey[key]
		for _, p := range ps {
			tp := TopicPartition{Topic: p.Topic().Name, Partition: p.ID}
			if o, ok := owner[tp]; conflicted[tp] || ok && o != id {
				awaiting[id] = true
				continue // revoked from its owner first
			}
			plan[id][tp.Topic] = append(plan[id][tp.Topic], tp.Partition)
		}
	}
	for _, topics := range plan {
		for _, ps := range topics {
			sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
		}
	}
	return plan, awaiting
}

// awaitingUserData is the user data of the assignment of a member that a
// partition was withheld from (assignCooperative): it heartbeats more
// often until the next generation starts (kafkaCoordinator.expectRebalance),
// instead of learning of it a heartbeat interval later.
var awaitingUserData = []byte(`{"awaiting":true}`)

// awaitingAssignment reports whether the user data of this member's
// assignment is awaitingUserData. Another member's encoding that differs
// only in spacing reads as not awaiting: the member heartbeats as usual.
func awaitingAssignment(userData []byte) bool {
	return bytes.Equal(userData, awaitingUserData)
}

// assign is the leader's assignment of the generation that resp opened,
// over the partitions of its own view of the metadata.
func (k *kafkaCoordinator) assign(resp *sarama.JoinGroupResponse, partitions kazoo.PartitionList) (map[string]map[string][]int32, map[string]bool, error) {
	members, err := kafkaMembers(resp)
	if err != nil {
		return nil, nil, err
	}
	plan, awaiting := assignCooperative(members, partitions)
	return plan, awaiting, nil
}
