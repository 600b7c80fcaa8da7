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
	"path"
	"slices"
	"strings"
	"time"
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

// migrateProtocol is migrate --to kafka --protocol m.protocol. The move
// between the protocols is a rolling restart with Config.GroupProtocol
// changed (docs/consumer-protocol.md): the brokers convert the group
// while members of both protocols share it, and nothing needs a signal.
// So it writes nothing for the protocol itself. It makes sure the group
// is Kafka-coordinated: a group whose instances are registered in
// ZooKeeper is switched to Kafka first, exactly as migrate --to kafka
// does (migrateToKafka: its checks, and its wait for the instances to
// move); a group whose switch says kafka is checked for intruders; a
// group with neither (or with zookeeper "": --bootstrap-server alone)
// is one that Kafka's group coordinator keeps. Then it reports how many
// members use each protocol, says how to restart them, and waits
// (awaitProtocol) up to m.wait, which the two waits share, until the
// move is done. It returns the last status it saw, also with an error
// once it has one.
func migrateProtocol(zookeeper string, zkAccess zookeeperAccess, access kafkaAccess, timeout time.Duration, m migration) (*ProtocolStatus, error) {
	if m.group == "" || strings.Contains(m.group, "/") || m.group == "." || m.group == ".." {
		return nil, fmt.Errorf("invalid group name %q", m.group)
	}
	m.timeout = timeout
	m.settle = m.wait
	if m.wait <= 0 {
		m.settle = timeout
	}
	began := time.Now()
	if zookeeper == "" {
		k, err := openBootstrap(access, timeout)
		if err != nil {
			return nil, err
		}
		defer k.close()
		fmt.Fprintf(m.out, "No ZooKeeper given: Kafka's group coordinator keeps group %s, or nobody does.\n", m.group)
		return k.awaitProtocol(m, began, false, 0)
	}
	var st *ProtocolStatus
	err := withZookeeper(zookeeper, zkAccess, timeout+m.settle, func(s *zkSession) error {
		admin, k, err := s.openMigrate(access, timeout)
		if err != nil {
			return err
		}
		defer admin.Close()
		defer k.close()
		ids, err := s.children(path.Join("/consumers", m.group, "ids"))
		if err != nil {
			return err
		}
		slices.Sort(ids)
		value, _, err := s.readSwitch(m.group)
		if err != nil {
			return err
		}
		switch {
		case value == switchKafka && len(ids) > 0:
			return intrudersRefusal(m.group, ids)
		case value == switchKafka:
			fmt.Fprintf(m.out, "Group %s is coordinated by Kafka (its coordinator switch says kafka).\n", m.group)
		case len(ids) > 0:
			fmt.Fprintf(m.out, "Group %s is coordinated by ZooKeeper: switching it to Kafka's group coordinator first, as migrate --to kafka does.\n", m.group)
			if err := s.migrateToKafka(admin, k, m); err != nil {
				return err
			}
		default:
			fmt.Fprintf(m.out, "Group %s has no instance registered in ZooKeeper: Kafka's group coordinator keeps it, or nobody does.\n", m.group)
		}
		st, err = k.awaitProtocol(m, began, value != switchKafka && len(ids) > 0, len(ids))
		return err
	})
	return st, err
}

// protocolPollInterval is how often awaitProtocol asks Kafka again.
const protocolPollInterval = 200 * time.Millisecond

// awaitProtocol reports the protocols of Kafka's group, says how to move
// the members that are not of m.protocol yet, and with m.wait waits
// until began+m.wait for the group to be done (ProtocolStatus.Done),
// reporting each change. atStart is how many instances the group had in
// ZooKeeper before it was switched (0: none). Past the deadline it
// returns the last status and an error wrapping ErrTimeout.
func (k *kafkaSession) awaitProtocol(m migration, began time.Time, switched bool, atStart int) (*ProtocolStatus, error) {
	k.renew(m.timeout)
	st, err := k.protocolStatus(m.group)
	if err != nil {
		return nil, err
	}
	minMembers := max(1, atStart, len(st.Members))
	judge := func(st *ProtocolStatus) {
		st.Switched, st.TargetProtocol, st.MinMembers = switched, m.protocol, minMembers
		st.judge()
	}
	judge(st)
	last := st.summary()
	fmt.Fprintln(m.out, last+".")
	if st.Done {
		fmt.Fprintf(m.out, "Every member uses the %s protocol: nothing to do.\n", m.protocol)
		return st, nil
	}
	fmt.Fprintln(m.out, restartAdvice(m.protocol))
	if m.wait <= 0 {
		return st, nil
	}
	deadline := began.Add(m.wait)
	fmt.Fprintf(m.out, "Waiting until %s for every member to use the %s protocol, with at least %d members, and the group to be Stable.\n",
		deadline.Format(time.TimeOnly), m.protocol, minMembers)
	for {
		if time.Now().After(deadline) {
			return st, fmt.Errorf("%w: the group did not move to the %s protocol within --wait %s: %s", ErrTimeout, m.protocol, m.wait, st.missing())
		}
		time.Sleep(protocolPollInterval) // polling interval
		k.renew(m.timeout)
		next, err := k.protocolStatus(m.group)
		if err != nil {
			return st, err
		}
		st = next
		judge(st)
		if s := st.summary(); s != last {
			fmt.Fprintf(m.out, "After %s: %s.\n", time.Since(began).Round(time.Millisecond), s)
			last = s
		}
		if st.Done {
			fmt.Fprintf(m.out, "Done after %s: every one of the %d members of Kafka's group %s uses the %s protocol, and it is Stable.\n",
				time.Since(began).Round(time.Millisecond), len(st.Members), m.group, m.protocol)
			return st, nil
		}
	}
}

// missing says why st is not done, for the error at the end of the wait.
func (st *ProtocolStatus) missing() string {
	var why []string
	if others := st.others(st.TargetProtocol); len(others) > 0 {
		why = append(why, fmt.Sprintf("%d members do not use it yet: %s (restart them as above)", len(others), strings.Join(others, ", ")))
	}
	if len(st.Members) < st.MinMembers {
		why = append(why, fmt.Sprintf("the group has %d members, fewer than the %d it had when migrate started (an instance not restarted yet?)", len(st.Members), st.MinMembers))
	}
	if st.KafkaState != kafkaStateStable {
		why = append(why, fmt.Sprintf("Kafka's group is %s, not Stable", st.KafkaState))
	}
	return strings.Join(why, "; ")
}

// restartAdvice says how to move the instances to protocol.
func restartAdvice(protocol string) string {
	if protocol == GroupProtocolConsumer {
		return "To move it, restart the instances one at a time with Config.Coordinator = CoordinatorKafka and Config.GroupProtocol = GroupProtocolConsumer (Kafka 4 and later): the brokers convert the group while both protocols share it, one owner per partition throughout (docs/consumer-protocol.md, \"Moving a group between the protocols\")."
	}
	return "To move it, restart the instances one at a time with Config.GroupProtocol = GroupProtocolClassic (CoordinatorKafka), or as instances that follow the coordinator switch (CoordinatorZooKeeper), which run the classic protocol and keep the way back to ZooKeeper open: the brokers convert the group while both protocols share it (docs/consumer-protocol.md, \"Moving a group between the protocols\")."
}
