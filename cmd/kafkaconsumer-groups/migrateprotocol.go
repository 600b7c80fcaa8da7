package main

// What the migrate verb knows of the protocols of Kafka's group: how
// many of its members use the classic protocol (JoinGroup and SyncGroup)
// and how many Kafka's consumer group protocol (KIP-848,
// ConsumerGroupHeartbeat). A group of the consumer protocol is read with
// ConsumerGroupDescribe (consumerprotocol.go), whose member type (v1,
// KIP-1099) tells the classic members the broker converted; any other
// with DescribeGroups, all of whose members are classic. (Kafka 4's
// DescribeGroups describes a consumer-protocol group as Dead with no
// members: asked alone, it would take one for an empty group.)

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// memberProtocolUnknown is the protocol of a member of a consumer-protocol
// group that the brokers do not type (ConsumerGroupDescribe v0).
const memberProtocolUnknown = "unknown"

// ProtocolMember is a member of Kafka's group as migrate --protocol
// reports it (--json: an element of "members").
type ProtocolMember struct {
	ID         string `json:"id"`
	ClientID   string `json:"client_id"`
	ClientHost string `json:"client_host"`
	// InstanceID is a static member's group.instance.id.
	InstanceID string `json:"instance_id,omitempty"`
	// MemberProtocol is GroupProtocolClassic, GroupProtocolConsumer, or
	// "unknown" for a member of a consumer-protocol group whose brokers
	// do not say (before ConsumerGroupDescribe v1).
	MemberProtocol string `json:"member_protocol"`
}

// ProtocolStatus is what migrate --to kafka --protocol reports: the
// --json output, and the state its wait watches.
type ProtocolStatus struct {
	Group string `json:"group"`
	// Coordinator is always CoordinatorKafka: the protocols are those of
	// Kafka's group coordinator.
	Coordinator string `json:"coordinator"`
	// Switched is true when this run wrote the group's coordinator
	// switch (the group was coordinated by ZooKeeper).
	Switched bool `json:"switched"`
	// TargetProtocol is --protocol.
	TargetProtocol string `json:"target_protocol"`
	// GroupProtocol is the group's type in Kafka: GroupProtocolConsumer
	// once a consumer-protocol member joined it (the classic members the
	// broker converted are in it too), else GroupProtocolClassic.
	GroupProtocol string `json:"group_protocol"`
	// KafkaState is Kafka's state of the group: Empty, Stable, and while
	// it rebalances PreparingRebalance or CompletingRebalance (classic),
	// Assigning or Reconciling (consumer); Dead for a group Kafka does
	// not know.
	KafkaState string           `json:"kafka_state"`
	Members    []ProtocolMember `json:"members"`
	// ClassicMembers and ConsumerMembers count Members by protocol.
	ClassicMembers  int `json:"classic_members"`
	ConsumerMembers int `json:"consumer_members"`
	// MinMembers is how many members the wait wants on the target
	// protocol: as many as the group had when migrate started (its
	// instances registered in ZooKeeper when it switched), at least one,
	// so that an instance stopped for its restart is waited for.
	MinMembers int `json:"min_members"`
	// Done is true when the group is Stable with at least MinMembers
	// members, every one of them of TargetProtocol.
	Done bool `json:"done"`
}

// protocolStatus describes the protocols of Kafka's group.
func (k *kafkaSession) protocolStatus(group string) (*ProtocolStatus, error) {
	st := &ProtocolStatus{Group: group, Coordinator: CoordinatorKafka, Members: []ProtocolMember{}}
	cg, err := k.consumerGroup(group)
	if err != nil {
		return nil, err
	}
	if cg != nil {
		st.GroupProtocol, st.KafkaState = GroupProtocolConsumer, cg.State
		for _, m := range cg.Members {
			instance := consumerMember(m)
			protocol := cmp.Or(instance.MemberProtocol, memberProtocolUnknown)
			st.Members = append(st.Members, ProtocolMember{ID: instance.ID, ClientID: instance.ClientID, ClientHost: instance.ClientHost, InstanceID: instance.InstanceID, MemberProtocol: protocol})
		}
	} else {
		g, err := k.group(group)
		if err != nil {
			return nil, err
		}
		st.GroupProtocol, st.KafkaState = GroupProtocolClassic, g.State
		for _, id := range slices.Sorted(maps.Keys(g.Members)) {
			instance := memberInstance(id, g.Members[id])
			st.Members = append(st.Members, ProtocolMember{ID: id, ClientID: instance.ClientID, ClientHost: instance.ClientHost, InstanceID: instance.InstanceID, MemberProtocol: GroupProtocolClassic})
		}
	}
	slices.SortFunc(st.Members, func(a, b ProtocolMember) int { return strings.Compare(a.ID, b.ID) })
	for _, m := range st.Members {
		switch m.MemberProtocol {
		case GroupProtocolClassic:
			st.ClassicMembers++
		case GroupProtocolConsumer:
			st.ConsumerMembers++
		}
	}
	return st, nil
}

// judge sets st.Done for the target protocol and minimum st carries.
func (st *ProtocolStatus) judge() {
	on := st.ClassicMembers
	if st.TargetProtocol == GroupProtocolConsumer {
		on = st.ConsumerMembers
	}
	st.Done = st.KafkaState == kafkaStateStable && len(st.Members) >= st.MinMembers && on == len(st.Members)
}

// others names the members that are not of protocol, for messages.
func (st *ProtocolStatus) others(protocol string) []string {
	var names []string
	for _, m := range st.Members {
		if m.MemberProtocol != protocol {
			names = append(names, fmt.Sprintf("%s of %s at %s (%s protocol)", m.ID, m.ClientID, m.ClientHost, m.MemberProtocol))
		}
	}
	return names
}

// summary says in words how many members use each protocol.
func (st *ProtocolStatus) summary() string {
	s := fmt.Sprintf("Kafka's group %s is %s (a %s-protocol group) with %d members: %d of the classic protocol, %d of the consumer protocol",
		st.Group, st.KafkaState, st.GroupProtocol, len(st.Members), st.ClassicMembers, st.ConsumerMembers)
	if unknown := len(st.Members) - st.ClassicMembers - st.ConsumerMembers; unknown > 0 {
		s += fmt.Sprintf(", %d of a protocol the brokers do not say", unknown)
	}
	return s
}

// consumerProtocolRefusal is the refusal of migrate --to zookeeper for a
// group whose consumer-protocol members cannot see the coordinator
// switch: they run without ZooKeeper. Once none is left the group turns
// classic again, and the members that follow the switch can be told.
func consumerProtocolRefusal(st *ProtocolStatus) error {
	return fmt.Errorf("%w: Kafka's group %s is a group of the consumer protocol (KIP-848): %d of its %d members do not use the classic protocol: %s; they run without ZooKeeper and cannot see the coordinator switch: restart them one at a time as instances that follow it (Config.Coordinator CoordinatorZooKeeper, which runs the classic protocol under Kafka; migrate --to kafka --protocol classic waits until every member uses it), then run migrate --to zookeeper again",
		ErrRefused, st.Group, len(st.Members)-st.ClassicMembers, len(st.Members), strings.Join(st.others(GroupProtocolClassic), ", "))
}
