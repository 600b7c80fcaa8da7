package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/IBM/sarama"
	"github.com/go-zookeeper/zk"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/wvanbergen/kazoo-go"

	"github.com/kafkaconsumer/kafkaconsumer/internal/commitmark"
	"github.com/kafkaconsumer/kafkaconsumer/internal/zkbrokers"
)

// Errors of describeGroup and listGroups, wrapped with details; test for
// them with errors.Is.
var (
	// ErrUnknownGroup is returned by describeGroup when ZooKeeper has no
	// node /consumers/<group>: no instance of the group ever registered.
	ErrUnknownGroup = errors.New("unknown consumer group")

	// ErrTimeout is returned when ZooKeeper or Kafka did not answer within
	// the time allowed (the --timeout flag).
	ErrTimeout = errors.New("timed out")
)

// The libraries of an instance. See Instance.Library.
const (
	LibraryKafkaconsumer = "kafkaconsumer"
	LibraryOriginal      = "original"
	// LibraryOther is a member of a Kafka-coordinated group that is not
	// of this library: another client's consumer under the group's name.
	LibraryOther = "other"
	// LibraryUnknown is a member of a group of Kafka's consumer group
	// protocol, whose client Kafka does not describe (its members have
	// no user data).
	LibraryUnknown = "unknown"
)

// Who coordinates a group. See GroupDescription.Coordinator.
const (
	// CoordinatorZooKeeper: the instances register and claim partitions
	// in ZooKeeper (the library's CoordinatorZooKeeper).
	CoordinatorZooKeeper = switchZookeeper
	// CoordinatorKafka: Kafka's group coordinator keeps the group (the
	// library's CoordinatorKafka, or a group migrated to it).
	CoordinatorKafka = switchKafka
)

// kafkaAssignor is the name of the library's assignor, the one protocol
// of its Kafka-coordinated groups (the library's kafkaProtocol).
const kafkaAssignor = "kafkaconsumer"

// registrationClient is the "client" field of this library's registrations.
const registrationClient = "github.com/kafkaconsumer/kafkaconsumer"

// Group states, as seen in ZooKeeper. See GroupDescription.State.
const (
	StateEmpty       = "Empty"
	StateStable      = "Stable"
	StateRebalancing = "Rebalancing"
	// StateAwaitingReturn: a static member departed and its grace is
	// not over; its partitions are claimed by nobody until it returns.
	StateAwaitingReturn = "AwaitingReturn"
)

// GroupDescription is what the tool reports about one consumer group: its
// registered instances, who owns which partition, and the committed
// offsets, log-end offsets and lag of every partition the group consumes
// or has committed offsets for.
type GroupDescription struct {
	Group string `json:"group"`
	// Coordinator is CoordinatorZooKeeper or CoordinatorKafka: who
	// coordinates the group, and so where its instances and owners were
	// read.
	Coordinator string `json:"coordinator"`
	// CoordinatorBroker is the address of the broker that is the group's
	// coordinator, when Coordinator is CoordinatorKafka.
	CoordinatorBroker string `json:"coordinator_broker,omitempty"`
	// KafkaState is the state of the group as Kafka's group coordinator
	// says it (Empty, PreparingRebalance, CompletingRebalance, Stable,
	// Dead), when Coordinator is CoordinatorKafka.
	KafkaState string `json:"kafka_state,omitempty"`
	// GroupProtocol is GroupProtocolClassic, GroupProtocolConsumer or
	// GroupProtocolShare: the protocol of the group in Kafka, when
	// Coordinator is CoordinatorKafka. A consumer-protocol group's
	// KafkaState is one of Empty, Assigning, Reconciling, Stable (or
	// Dead, NotReady); a share group's Empty, Stable (or Dead, Unknown).
	GroupProtocol string `json:"group_protocol,omitempty"`
	// GroupEpoch, AssignmentEpoch and Assignor are set for a group of
	// Kafka's consumer group protocol and for a share group: the epoch of
	// the group (bumped by every change of its members or their
	// subscriptions), the epoch of the target assignment the broker's
	// assignor computed last (equal to GroupEpoch once it is computed),
	// and the name of that assignor (uniform, range; simple for a share
	// group).
	GroupEpoch      *int32 `json:"group_epoch,omitempty"`
	AssignmentEpoch *int32 `json:"assignment_epoch,omitempty"`
	Assignor        string `json:"assignor,omitempty"`
	// Zookeeper is the ZooKeeper connection string; "" when none was
	// given (a Kafka-coordinated group described with --bootstrap-server
	// alone).
	Zookeeper string `json:"zookeeper"`
	// Brokers are the addresses (host:port) of the Kafka brokers
	// registered in ZooKeeper, on the listener the tool used, sorted; the
	// tool talked to them for offsets.
	Brokers []string `json:"brokers"`
	// State is StateEmpty when no instance is registered; StateStable when
	// every partition of the subscribed topics is claimed by a registered
	// instance; StateRebalancing otherwise (partitions are unclaimed, or
	// claimed by an instance that is no longer registered). For a
	// Kafka-coordinated group: StateEmpty when it has no member,
	// StateRebalancing while Kafka rebalances it or a partition of the
	// subscribed topics is in no member's assignment (the step between
	// two generations of a cooperative rebalance), StateStable otherwise.
	State string `json:"state"`
	// Instances are the registered instances, sorted by ID; for a
	// Kafka-coordinated group, the members of Kafka's group.
	Instances []Instance `json:"instances"`
	// Departed are the static members (Config.InstanceID) that are not
	// registered and whose RestartGrace is not over, sorted by ID: the
	// group keeps their partitions for them.
	Departed []DepartedMember `json:"departed,omitempty"`
	// Intruders are the instances registered in ZooKeeper while the
	// group's coordinator switch says kafka (one of the original
	// library, of an older version, a deployment rolled back), sorted by
	// ID: the library's seal of the owner nodes refuses their claims, but
	// they should be stopped.
	Intruders []Instance `json:"intruders,omitempty"`
	// Partitions are sorted by topic and partition.
	Partitions []Partition `json:"partitions"`
	// TotalCommitted, TotalLogEnd and TotalLag are the sums over Partitions
	// of the known Committed, LogEnd and Lag values.
	TotalCommitted int64 `json:"total_committed"`
	TotalLogEnd    int64 `json:"total_log_end"`
	TotalLag       int64 `json:"total_lag"`
}

// Instance is one registered instance of a group.
type Instance struct {
	// ID is the instance's ID, the name of its node under
	// /consumers/<group>/ids; for a Kafka-coordinated group, the member
	// ID that Kafka's group coordinator gave it.
	ID string `json:"id"`
	// InstanceID is a static member's group instance ID
	// (Config.InstanceID) in a Kafka-coordinated group.
	InstanceID string `json:"instance_id,omitempty"`
	// ClientID and ClientHost are the member's client ID and host, as
	// Kafka's group coordinator saw them (Kafka-coordinated groups).
	ClientID   string `json:"client_id,omitempty"`
	ClientHost string `json:"client_host,omitempty"`
	// Topics are the topics a member of a Kafka-coordinated group
	// subscribes to, from its member metadata (consumer protocol: as it
	// last heartbeat them), sorted.
	Topics []string `json:"topics,omitempty"`
	// TopicRegex is the regular expression a member of a consumer-protocol
	// group subscribes with (KIP-848: the broker resolves it), if any.
	TopicRegex string `json:"topic_regex,omitempty"`
	// Rack is the rack a member of a consumer-protocol group said it is
	// in, if any.
	Rack string `json:"rack,omitempty"`
	// MemberEpoch is the member epoch of a member of a consumer-protocol
	// group, or of a share group: the group epoch whose assignment it has
	// reconciled with.
	MemberEpoch *int32 `json:"member_epoch,omitempty"`
	// MemberProtocol is how a member of a consumer-protocol group joined:
	// GroupProtocolConsumer (heartbeats), or GroupProtocolClassic (a
	// classic client in a group the broker converted, during a move);
	// empty when the broker does not say (before ConsumerGroupDescribe
	// v1, Kafka 4.0).
	MemberProtocol string `json:"member_protocol,omitempty"`
	// Pattern is the kind of subscription: static, white_list or black_list.
	Pattern string `json:"pattern,omitempty"`
	// Subscription maps topics (static) or regular expressions (white and
	// black lists) to a stream count.
	Subscription map[string]int `json:"subscription,omitempty"`
	// Library is LibraryKafkaconsumer for an instance of this library (its
	// registration, or its member metadata's user data, has the "client"
	// field that marks it), else LibraryOriginal: one of the original
	// wvanbergen/kafka library, as in a group that is being upgraded (or
	// of another client that writes the same layout), or, in a
	// Kafka-coordinated group, LibraryOther (LibraryUnknown in a group of
	// Kafka's consumer group protocol); empty when the registration is
	// unreadable.
	Library string `json:"library"`
	// Migration is the version of the coordinator switch the instance
	// follows ("migration" in its registration or user data; 0: it does
	// not follow it, see kafkaconsumer-groups migrate).
	Migration int `json:"migration,omitempty"`
	// Registered is when the instance registered, from its timestamp.
	Registered *time.Time `json:"registered,omitempty"`
	// Static is true for an instance registered under a stable
	// Config.InstanceID (it has a static record), whose ID is the same
	// after a restart.
	Static bool `json:"static,omitempty"`
	// Owned are the partitions the instance has claimed (a member of a
	// Kafka-coordinated group: those of its assignment; consumer
	// protocol: its current assignment, as reconciled), sorted.
	Owned []TopicPartition `json:"owned"`
	// TargetAssignment is, for a member of a consumer-protocol group, the
	// partitions the broker's assignor gave it, sorted: Owned once the
	// member has reconciled (revoked what it must give up, then taken
	// what is freed); nil for others.
	TargetAssignment *[]TopicPartition `json:"target_assignment,omitempty"`
	// Error says why the registration could not be read, if it could not.
	Error string `json:"error,omitempty"`
}

// DepartedMember is a static member that left the group (or whose
// session ended) and whose RestartGrace is not over.
type DepartedMember struct {
	// ID is its Config.InstanceID.
	ID string `json:"id"`
	// Until is when its grace ends: its departure as ZooKeeper recorded
	// it, plus its RestartGrace; nil while the departure of a session
	// that ended is not recorded yet (the others record it as they see
	// it).
	Until *time.Time `json:"until,omitempty"`
	// Partitions are its share as it last recorded it, which the group
	// keeps for it, sorted.
	Partitions []TopicPartition `json:"partitions"`
}

// TopicPartition names a partition of a topic.
type TopicPartition struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
}

// Partition is the state of one partition for the group. A nil number is
// unknown: no committed offset, or the partition's log end could not be
// read.
type Partition struct {
	TopicPartition
	// Owner is the ID of the instance that claimed the partition in
	// ZooKeeper (a Kafka-coordinated group: the member whose assignment
	// holds it), or "" when nobody has.
	Owner string `json:"owner,omitempty"`
	// OwnerRegistered is false when Owner is set but no longer registered:
	// it is shutting down or its ZooKeeper session is expiring.
	OwnerRegistered bool `json:"owner_registered"`
	// AwaitingReturn is the ID of the departed static member (see
	// GroupDescription.Departed) whose return the partition awaits,
	// claimed by nobody meanwhile; "" otherwise.
	AwaitingReturn string `json:"awaiting_return,omitempty"`
	// TargetOwner is, in a consumer-protocol group, the member whose
	// target assignment holds the partition: the Owner it will have
	// when the members have reconciled; "" otherwise.
	TargetOwner string `json:"target_owner,omitempty"`
	// Committed is the group's committed offset in Kafka: the next message
	// the group will read (one more than Kafka holds for a group whose
	// instances set CommitLastProcessed).
	Committed *int64 `json:"committed"`
	// LogEnd is the partition's log-end offset (high-water mark): the
	// offset of the next message produced.
	LogEnd *int64 `json:"log_end"`
	// Lag is LogEnd - Committed, when both are known.
	Lag *int64 `json:"lag"`
	// Owners are, in a share group, the members whose assignment holds
	// the partition, sorted: a share group's members share partitions.
	// Owner is the first of them.
	Owners []string `json:"owners,omitempty"`
	// ShareStartOffset is, in a share group, the share-partition start
	// offset (DescribeShareGroupOffsets): every record before it is
	// acknowledged or archived. Nil while the broker keeps no state of
	// the partition for the group (no member fetched it yet).
	ShareStartOffset *int64 `json:"share_start_offset,omitempty"`
	// InFlightAtMost is, in a share group, LogEnd - ShareStartOffset: an
	// upper bound of the records in flight (acquired by a member and not
	// yet acknowledged), the broker reporting no count of them; records
	// past the start offset may also be waiting for their first delivery,
	// or acknowledged already. Nil when either offset is unknown. In a
	// share group Committed is always nil, and Lag is the broker's
	// share-partition lag (DescribeShareGroupOffsets v1, KIP-1226: the
	// records not yet acknowledged), nil when it does not report it.
	InFlightAtMost *int64 `json:"in_flight_at_most,omitempty"`
	// Error says what went wrong reading this partition's offsets, if
	// anything.
	Error string `json:"error,omitempty"`
}

// GroupSummary is one line of the group list.
type GroupSummary struct {
	Group string `json:"group"`
	// Coordinator is CoordinatorZooKeeper or CoordinatorKafka.
	Coordinator string `json:"coordinator"`
	// GroupProtocol is the protocol of a Kafka-coordinated group:
	// GroupProtocolClassic, GroupProtocolConsumer or GroupProtocolShare.
	GroupProtocol string `json:"group_protocol,omitempty"`
	// Instances is the number of registered instances, or of members of
	// a Kafka-coordinated group.
	Instances int `json:"instances"`
	// Error says why the group's nodes could not be read (their ACL
	// refused the tool's session), if they could not; Instances is 0
	// then.
	Error string `json:"error,omitempty"`
}

// describeGroup reads the group's state from ZooKeeper (instances,
// subscriptions, partition owners, brokers) and Kafka (committed and
// log-end offsets), which it reaches as access says. zookeeper is a
// connection string such as "zk1:2181,zk2:2181/chroot". It gives up after
// timeout, whether ZooKeeper or Kafka does not answer, with an error
// wrapping ErrTimeout.
//
// A group that Kafka's group coordinator keeps is read from Kafka
// (kafkagroup.go): when its coordinator switch says kafka, when it has no
// instance registered in ZooKeeper and Kafka's group coordinator knows it
// (coordinatesGroup), or when zookeeper is "" (then access.bootstrap
// names the brokers).
func describeGroup(zookeeper string, zkAccess zookeeperAccess, group string, timeout time.Duration, access kafkaAccess) (*GroupDescription, error) {
	if group == "" || strings.Contains(group, "/") || group == "." || group == ".." {
		return nil, fmt.Errorf("invalid group name %q", group)
	}
	if zookeeper == "" {
		if len(access.bootstrap) == 0 {
			return nil, errors.New("no zookeeper and no kafka given: give --zookeeper, or --bootstrap-server for a group that Kafka coordinates")
		}
		return describeFromKafka(group, access, timeout)
	}
	var desc *GroupDescription
	err := withZookeeper(zookeeper, zkAccess, timeout, func(s *zkSession) error {
		var err error
		desc, err = s.describe(group, access)
		return err
	})
	return desc, err
}

// listGroups returns the consumer groups registered in ZooKeeper, sorted
// by name, with their number of registered instances, or of members in
// Kafka for a group whose coordinator switch says kafka; and the groups
// that Kafka's group coordinator keeps for the library (kafkaGroups).
// Kafka is reached as access says: with zookeeper "" it alone is read
// (access.bootstrap). A Kafka that cannot be reached is an error only
// when a group's switch says kafka or --bootstrap-server was given; else
// the list is ZooKeeper's. It gives up after timeout with an error
// wrapping ErrTimeout.
func listGroups(zookeeper string, zkAccess zookeeperAccess, timeout time.Duration, access kafkaAccess) ([]GroupSummary, error) {
	if zookeeper == "" {
		if len(access.bootstrap) == 0 {
			return nil, errors.New("no zookeeper and no kafka given: give --zookeeper, or --bootstrap-server")
		}
		return listFromKafka(access, timeout)
	}
	var groups []GroupSummary
	err := withZookeeper(zookeeper, zkAccess, timeout, func(s *zkSession) error {
		names, err := s.children("/consumers")
		if err != nil {
			return err
		}
		sort.Strings(names)
		groups = make([]GroupSummary, 0, len(names))
		known := make(map[string]bool, len(names))
		var switched []int // indexes in groups
		for _, name := range names {
			known[name] = true
			// A group whose ACL refuses this session is listed as such;
			// the others are still listed.
			ids, err := s.children(path.Join("/consumers", name, "ids"))
			var value string
			if err == nil {
				value, _, err = s.readSwitch(name)
			}
			if errors.Is(err, zk.ErrNoAuth) {
				groups = append(groups, GroupSummary{Group: name, Error: "not readable: zookeeper refused this session (the group's ACL; see --zookeeper-digest-user)"})
				continue
			}
			if err != nil {
				return err
			}
			summary := GroupSummary{Group: name, Coordinator: CoordinatorZooKeeper, Instances: len(ids)}
			if value == switchKafka {
				summary.Coordinator = CoordinatorKafka
				switched = append(switched, len(groups))
			}
			groups = append(groups, summary)
		}
		needed := len(switched) > 0 || len(access.bootstrap) > 0
		k, err := s.openKafka(access)
		if err != nil {
			if needed {
				return err
			}
			return nil // ZooKeeper's groups alone
		}
		defer k.close()
		for _, i := range switched {
			if groups[i].GroupProtocol, groups[i].Instances, err = k.members(groups[i].Group); err != nil {
				return err
			}
		}
		extra, err := k.kafkaGroups(known)
		if err != nil {
			if needed {
				return err
			}
			return nil
		}
		groups = append(groups, extra...)
		sort.Slice(groups, func(i, j int) bool { return groups[i].Group < groups[j].Group })
		return nil
	})
	return groups, err
}

// openKafka connects to the brokers that s.brokers finds.
func (s *zkSession) openKafka(access kafkaAccess) (*kafkaSession, error) {
	brokers, err := s.brokers(access)
	if err != nil {
		return nil, err
	}
	if len(brokers) == 0 {
		return nil, fmt.Errorf("zookeeper %s lists no kafka brokers under %s/brokers/ids (for a KRaft cluster, give --bootstrap-server)", s.zookeeper, s.chroot)
	}
	return openKafka(brokers, access, s.deadline, s.timeoutMsg)
}

// zkSession is a ZooKeeper session with a deadline: at the deadline the
// connection is closed, so that every request waiting on it fails at once.
// (The ZooKeeper client has no request timeout: while no server answers,
// a request waits forever.)
type zkSession struct {
	conn       *zk.Conn
	chroot     string
	zookeeper  string
	deadline   time.Time
	ctx        context.Context // done at the deadline, or when fn returned
	timeoutMsg string
}

// withZookeeper connects to ZooKeeper, waits for a session and runs fn
// with it, all within timeout; then it closes the connection. Errors due
// to the deadline are reported as wrapping ErrTimeout.
func withZookeeper(zookeeper string, access zookeeperAccess, timeout time.Duration, fn func(*zkSession) error) error {
	if timeout <= 0 {
		return fmt.Errorf("timeout must be positive, got %s", timeout)
	}
	nodes, chroot, err := parseZookeeper(zookeeper)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	deadline, _ := ctx.Deadline()

	// The session timeout only matters to ephemeral nodes and watches,
	// which this tool does not use; the server clamps it to its range.
	conn, events, err := access.connect(nodes, timeout)
	if err != nil {
		return fmt.Errorf("connect to zookeeper %s: %w", zookeeper, err)
	}
	// The watchdog closes the connection at the deadline (or when fn is
	// done); it is waited for before returning.
	watchdogDone := make(chan struct{})
	go func() {
		defer close(watchdogDone)
		<-ctx.Done()
		conn.Close()
	}()
	defer func() {
		cancel()
		<-watchdogDone
	}()

	s := &zkSession{
		conn:       conn,
		chroot:     chroot,
		zookeeper:  zookeeper,
		deadline:   deadline,
		ctx:        ctx,
		timeoutMsg: fmt.Sprintf("no answer from zookeeper %s and kafka within %s", zookeeper, timeout),
	}
	if err := s.waitForSession(events); err != nil {
		return err
	}
	if err := access.authenticate(conn); err != nil {
		return s.check("authenticate", err)
	}
	return fn(s)
}

// waitForSession waits until the connection has a session, or the
// deadline.
func (s *zkSession) waitForSession(events <-chan zk.Event) error {
	for {
		select {
		case ev := <-events:
			switch ev.State {
			case zk.StateHasSession:
				return nil
			case zk.StateAuthFailed:
				return fmt.Errorf("zookeeper %s: authentication failed", s.zookeeper)
			}
		case <-s.ctx.Done():
			return fmt.Errorf("%w: no zookeeper session with %s within the timeout (is it running? see --timeout)", ErrTimeout, s.zookeeper)
		}
	}
}

// check turns an error of a request into ErrTimeout when the deadline
// closed the connection.
func (s *zkSession) check(what string, err error) error {
	if err == nil {
		return nil
	}
	if s.ctx.Err() != nil && (errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrClosing)) {
		return fmt.Errorf("%w: %s: %s", ErrTimeout, what, s.timeoutMsg)
	}
	return fmt.Errorf("zookeeper: %s: %w", what, err)
}

// children lists the children of a node under the chroot; a missing node
// has none.
func (s *zkSession) children(node string) ([]string, error) {
	children, _, err := s.conn.Children(s.chroot + node)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	return children, s.check("list "+s.chroot+node, err)
}

// getStat returns the data of a node under the chroot, and its stat; a
// nil stat when it does not exist.
func (s *zkSession) getStat(node string) ([]byte, *zk.Stat, error) {
	data, stat, err := s.conn.Get(s.chroot + node)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, s.check("read "+s.chroot+node, err)
	}
	return data, stat, nil
}

// staticRecordJSON is the JSON layout of a static member's record,
// /consumers/<group>/static/<id> (docs/zookeeper-layout.md).
type staticRecordJSON struct {
	Version      int                `json:"version"`
	RestartGrace int64              `json:"restart_grace_ms"`
	State        string             `json:"state"`
	Partitions   map[string][]int32 `json:"partitions"`
}

// parseStaticRecord returns the departed member of a static record
// written at mtime (ms, ZooKeeper's clock), read at now, of a member that
// is not registered; ok is false when its grace is over (or it has none),
// or the record is unreadable. A record still "registered" is a session
// that ended and whose departure no instance recorded yet.
func parseStaticRecord(id string, data []byte, mtime int64, now time.Time) (DepartedMember, bool) {
	var record staticRecordJSON
	if err := json.Unmarshal(data, &record); err != nil || record.Version != 1 || record.RestartGrace <= 0 {
		return DepartedMember{}, false
	}
	member := DepartedMember{ID: id, Partitions: []TopicPartition{}}
	switch record.State {
	case "departed":
		until := time.UnixMilli(mtime + record.RestartGrace).UTC()
		if !until.After(now) {
			return DepartedMember{}, false
		}
		member.Until = &until
	case "registered":
	default:
		return DepartedMember{}, false
	}
	for topic, partitions := range record.Partitions {
		for _, p := range partitions {
			member.Partitions = append(member.Partitions, TopicPartition{Topic: topic, Partition: p})
		}
	}
	sort.Slice(member.Partitions, func(i, j int) bool {
		a, b := member.Partitions[i], member.Partitions[j]
		return a.Topic < b.Topic || a.Topic == b.Topic && a.Partition < b.Partition
	})
	return member, true
}

// get returns the data of a node under the chroot, and whether it exists.
func (s *zkSession) get(node string) ([]byte, bool, error) {
	data, _, err := s.conn.Get(s.chroot + node)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, false, nil
	}
	return data, err == nil, s.check("read "+s.chroot+node, err)
}

// describe does the work of describeGroup.
func (s *zkSession) describe(group string, access kafkaAccess) (*GroupDescription, error) {
	groupNode := path.Join("/consumers", group)
	_, exists, err := s.get(groupNode)
	if err != nil {
		return nil, err
	}
	// Who coordinates the group: the switch, else Kafka when it knows a
	// group that has nobody registered in ZooKeeper.
	kafkaCoordinated := false
	var registrations []string
	if exists {
		value, _, err := s.readSwitch(group)
		if err != nil {
			return nil, err
		}
		kafkaCoordinated = value == switchKafka
		if registrations, err = s.children(path.Join(groupNode, "ids")); err != nil {
			return nil, err
		}
	}
	if kafkaCoordinated || len(registrations) == 0 {
		if desc, err := s.describeInKafka(group, access, kafkaCoordinated); desc != nil || err != nil {
			if desc != nil && kafkaCoordinated {
				desc.Intruders, err = s.intruders(group, registrations)
			}
			return desc, err
		}
	}
	if !exists {
		return nil, fmt.Errorf("%w %q: zookeeper %s has no node %s%s, nor does Kafka's group coordinator know it (see --list)", ErrUnknownGroup, group, s.zookeeper, s.chroot, groupNode)
	}
	desc := &GroupDescription{Group: group, Coordinator: CoordinatorZooKeeper, Zookeeper: s.zookeeper, Instances: []Instance{}, Partitions: []Partition{}}

	// Instances and their subscriptions.
	ids, err := s.children(path.Join(groupNode, "ids"))
	if err != nil {
		return nil, err
	}
	sort.Strings(ids)
	registered := make(map[string]int, len(ids)) // ID -> index in desc.Instances
	for _, id := range ids {
		data, exists, err := s.get(path.Join(groupNode, "ids", id))
		if err != nil {
			return nil, err
		}
		if !exists { // deregistered meanwhile
			continue
		}
		registered[id] = len(desc.Instances)
		desc.Instances = append(desc.Instances, parseRegistration(id, data))
	}

	// Partition owners.
	owners := make(map[TopicPartition]string)
	ownerTopics, err := s.children(path.Join(groupNode, "owners"))
	if err != nil {
		return nil, err
	}
	for _, topic := range ownerTopics {
		partitions, err := s.children(path.Join(groupNode, "owners", topic))
		if err != nil {
			return nil, err
		}
		for _, p := range partitions {
			id, err := strconv.ParseInt(p, 10, 32)
			if err != nil {
				continue // not a partition node
			}
			data, exists, err := s.get(path.Join(groupNode, "owners", topic, p))
			if err != nil {
				return nil, err
			}
			if exists {
				owners[TopicPartition{Topic: topic, Partition: int32(id)}] = string(data)
			}
		}
	}

	// Static members: registered ones are marked, departed ones whose
	// grace is not over are listed with the partitions they get back.
	awaiting := make(map[TopicPartition]string)
	statics, err := s.children(path.Join(groupNode, "static"))
	if err != nil {
		return nil, err
	}
	sort.Strings(statics)
	for _, id := range statics {
		data, stat, err := s.getStat(path.Join(groupNode, "static", id))
		if err != nil {
			return nil, err
		}
		if stat == nil {
			continue
		}
		if idx, ok := registered[id]; ok {
			desc.Instances[idx].Static = true
			continue
		}
		member, ok := parseStaticRecord(id, data, stat.Mtime, time.Now())
		if !ok {
			continue
		}
		for _, tp := range member.Partitions {
			awaiting[tp] = id
		}
		desc.Departed = append(desc.Departed, member)
	}

	// Brokers, the way the consumers of the group find them.
	if desc.Brokers, err = s.brokers(access); err != nil {
		return nil, err
	}
	if len(desc.Brokers) == 0 {
		return nil, fmt.Errorf("zookeeper %s lists no kafka brokers under %s/brokers/ids (for a KRaft cluster, give --bootstrap-server)", s.zookeeper, s.chroot)
	}

	kafka, err := openKafka(desc.Brokers, access, s.deadline, s.timeoutMsg)
	if err != nil {
		return nil, err
	}
	defer kafka.close()
	offsets, err := kafka.offsets(group, desc.Instances, owners)
	if err != nil {
		return nil, err
	}
	desc.Partitions = offsets.partitions
	for i := range desc.Partitions {
		p := &desc.Partitions[i]
		p.Owner = owners[p.TopicPartition]
		if p.Owner == "" {
			p.AwaitingReturn = awaiting[p.TopicPartition]
		}
		if p.Owner != "" {
			if idx, ok := registered[p.Owner]; ok {
				p.OwnerRegistered = true
				desc.Instances[idx].Owned = append(desc.Instances[idx].Owned, p.TopicPartition)
			}
		}
	}
	desc.addTotals()
	desc.State = groupState(desc, offsets.subscribed)
	return desc, nil
}

// describeInKafka describes the group from Kafka's group coordinator
// when switched (its coordinator switch says kafka) or when Kafka's group
// coordinator keeps it (coordinatesGroup); else it returns nil and no
// error. Kafka is asked only when it can be found: a group that is not
// switched and whose brokers ZooKeeper does not list is left to the
// ZooKeeper description.
func (s *zkSession) describeInKafka(group string, access kafkaAccess, switched bool) (*GroupDescription, error) {
	k, err := s.openKafka(access)
	if err != nil {
		if switched {
			return nil, err
		}
		return nil, nil
	}
	defer k.close()
	desc := &GroupDescription{Group: group, Zookeeper: s.zookeeper, Brokers: k.brokers}
	// sarama reached these brokers: a failure here is not one of the
	// ZooKeeper description's, but this client's.
	if desc, err := k.describeBrokerAssigned(desc); err != nil || desc != nil {
		return desc, err
	}
	if !switched {
		g, err := k.group(group)
		if err != nil || !coordinatesGroup(g) {
			return nil, nil // the ZooKeeper description reports Kafka's errors
		}
	}
	return k.describeKafkaGroup(desc)
}

// groupState tells whether the group is empty, stable or rebalancing, from
// what ZooKeeper shows: it is rebalancing while a subscribed partition is
// not claimed by a registered instance, a partition is claimed by an
// instance that is gone, or (when every instance has the same
// subscription) the claims are not yet spread as evenly as the library
// spreads them (each instance gets P/C partitions, or one more).
//
// It is awaiting the return of a static member while a partition is
// claimed by nobody for a departed static member within its grace.
func groupState(desc *GroupDescription, subscribed map[TopicPartition]bool) string {
	if len(desc.Instances) == 0 {
		return StateEmpty
	}
	for _, p := range desc.Partitions {
		if p.AwaitingReturn != "" {
			return StateAwaitingReturn
		}
	}
	for _, p := range desc.Partitions {
		if (subscribed[p.TopicPartition] || p.Owner != "") && !p.OwnerRegistered {
			return StateRebalancing
		}
	}
	same := true
	for _, instance := range desc.Instances[1:] {
		if instance.Pattern != desc.Instances[0].Pattern || !maps.Equal(instance.Subscription, desc.Instances[0].Subscription) {
			same = false
		}
	}
	if same {
		count, total := len(desc.Instances), len(subscribed)
		for _, instance := range desc.Instances {
			if n := len(instance.Owned); n < total/count || n > (total+count-1)/count {
				return StateRebalancing
			}
		}
	}
	return StateStable
}

// registrationJSON is the JSON layout of an instance's registration. The
// timestamp is a string of Unix milliseconds in this library's (and
// Kafka's) registrations, a number in kazoo-go's: json.Number takes both.
type registrationJSON struct {
	Pattern      string         `json:"pattern"`
	Subscription map[string]int `json:"subscription"`
	Timestamp    json.Number    `json:"timestamp"`
	Client       string         `json:"client"`
	Migration    int            `json:"migration"`
}

func parseRegistration(id string, data []byte) Instance {
	instance := Instance{ID: id, Owned: []TopicPartition{}}
	var reg registrationJSON
	if err := json.Unmarshal(data, &reg); err != nil {
		instance.Error = fmt.Sprintf("unreadable registration %q: %s", data, err)
		return instance
	}
	instance.Pattern, instance.Subscription = reg.Pattern, reg.Subscription
	instance.Library = LibraryOriginal
	if reg.Client == registrationClient {
		instance.Library, instance.Migration = LibraryKafkaconsumer, reg.Migration
	}
	if ms, err := reg.Timestamp.Int64(); err == nil && ms > 0 {
		t := time.UnixMilli(ms).UTC()
		instance.Registered = &t
	}
	return instance
}

// brokers returns, sorted, the addresses of access.bootstrap, or else of
// each broker registered in ZooKeeper on the listener access names or the
// first whose security protocol is the one access speaks. The
// registrations are parsed and the listener chosen as the library does
// (internal/zkbrokers).
func (s *zkSession) brokers(access kafkaAccess) ([]string, error) {
	if len(access.bootstrap) > 0 {
		addrs := append([]string(nil), access.bootstrap...)
		sort.Strings(addrs)
		return addrs, nil
	}
	regs, err := zkbrokers.Read(s.children, s.get)
	if err != nil || len(regs) == 0 {
		return nil, err
	}
	sel, err := zkbrokers.Select(regs, access.listener, access.protocol())
	if err != nil {
		return nil, fmt.Errorf("zookeeper %s: %w", s.zookeeper, err)
	}
	sort.Strings(sel.Addrs)
	return sel.Addrs, nil
}

// kafkaResult is what kafkaOffsets found.
type kafkaResult struct {
	partitions []Partition
	// subscribed are the partitions of the topics the instances subscribe
	// to, which the group is expected to own.
	subscribed map[TopicPartition]bool
}

// kafkaSession is the tool's client of Kafka for one description, with
// its deadline.
type kafkaSession struct {
	client sarama.Client
	admin  sarama.ClusterAdmin // on client; closing it closes client
	// franz is the client for the requests sarama cannot send (those of
	// Kafka's consumer group protocol, consumerprotocol.go): opened by
	// franzClient on first use, closed by close.
	franz      *kgo.Client
	access     kafkaAccess
	brokers    []string
	deadline   time.Time
	timeoutMsg string
}

// openKafka connects to brokers as access says, and gives up at the
// deadline; timeoutMsg says what did not answer in time.
func openKafka(brokers []string, access kafkaAccess, deadline time.Time, timeoutMsg string) (*kafkaSession, error) {
	k := &kafkaSession{brokers: brokers, access: access, deadline: deadline, timeoutMsg: timeoutMsg}
	remaining := time.Until(deadline)
	if remaining <= 0 {
		return nil, fmt.Errorf("%w: %s", ErrTimeout, timeoutMsg)
	}
	config := sarama.NewConfig()
	config.ClientID = "kafkaconsumer-groups"
	config.Net.DialTimeout = remaining
	config.Net.ReadTimeout = remaining
	config.Net.WriteTimeout = remaining
	config.Metadata.Retry.Max = 1
	config.Metadata.Retry.Backoff = 100 * time.Millisecond
	config.Metadata.Full = true
	config.Admin.Retry.Max = 1
	config.Admin.Timeout = remaining
	access.configure(config)
	client, err := sarama.NewClient(brokers, config)
	if err != nil {
		return nil, k.err("connect", err)
	}
	if k.admin, err = sarama.NewClusterAdminFromClient(client); err != nil {
		_ = client.Close()
		return nil, k.err("connect", err)
	}
	k.client = client
	return k, nil
}

// close closes the admin and the clients.
func (k *kafkaSession) close() {
	if k.franz != nil {
		k.franz.Close()
	}
	_ = k.admin.Close()
}

// err wraps an error of a request: in ErrTimeout past the deadline.
func (k *kafkaSession) err(what string, err error) error {
	if time.Now().After(k.deadline) {
		return fmt.Errorf("%w: %s: %s (last error: %w)", ErrTimeout, what, k.timeoutMsg, err)
	}
	return fmt.Errorf("kafka %s: %s: %w", strings.Join(k.brokers, ","), what, err)
}

// offsets reads the group's committed offsets and the log-end offsets
// from Kafka, for the partitions of every topic that an instance
// subscribes to, that has an owner, or for which the group committed an
// offset.
func (k *kafkaSession) offsets(group string, instances []Instance, owners map[TopicPartition]string) (*kafkaResult, error) {
	client, admin, kafkaErr := k.client, k.admin, k.err
	fetched, err := admin.ListConsumerGroupOffsets(group, nil)
	if err != nil {
		return nil, kafkaErr("fetch committed offsets of group "+group, err)
	}
	if fetched.Err != sarama.ErrNoError {
		return nil, kafkaErr("fetch committed offsets of group "+group, fetched.Err)
	}
	committed := make(map[TopicPartition]*sarama.OffsetFetchResponseBlock)
	for topic, blocks := range fetched.Blocks {
		for partition, block := range blocks {
			committed[TopicPartition{Topic: topic, Partition: partition}] = block
		}
	}

	kafkaTopics, err := client.Topics()
	if err != nil {
		return nil, kafkaErr("list topics", err)
	}
	topics := make(map[string]bool)
	subscribedTopics := subscribedTopics(instances, kafkaTopics)
	for topic := range subscribedTopics {
		topics[topic] = true
	}
	for tp := range owners {
		topics[tp.Topic] = true
	}
	for tp := range committed {
		topics[tp.Topic] = true
	}

	result := &kafkaResult{subscribed: make(map[TopicPartition]bool)}
	seen := make(map[TopicPartition]bool)
	add := func(tp TopicPartition) *Partition {
		seen[tp] = true
		result.partitions = append(result.partitions, Partition{TopicPartition: tp})
		return &result.partitions[len(result.partitions)-1]
	}
	for _, topic := range slices.Sorted(maps.Keys(topics)) {
		if time.Now().After(k.deadline) {
			return nil, fmt.Errorf("%w: reading the offsets of %s: %s", ErrTimeout, topic, k.timeoutMsg)
		}
		ids, err := client.Partitions(topic)
		if errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
			ids = nil // deleted, or not created yet: show what the group has
		} else if err != nil {
			return nil, kafkaErr("partitions of "+topic, err)
		}
		for _, id := range ids {
			tp := TopicPartition{Topic: topic, Partition: id}
			if subscribedTopics[topic] {
				result.subscribed[tp] = true
			}
			p := add(tp)
			logEnd, err := client.GetOffset(topic, id, sarama.OffsetNewest)
			if err != nil {
				if time.Now().After(k.deadline) {
					return nil, kafkaErr(fmt.Sprintf("log-end offset of %s/%d", topic, id), err)
				}
				p.Error = fmt.Sprintf("log-end offset: %s", err)
				continue
			}
			p.LogEnd = &logEnd
		}
	}
	// Partitions known to the group only (the topic is gone or shrank).
	for tp := range owners {
		if !seen[tp] {
			add(tp).Error = "partition not found in kafka"
		}
	}
	for tp := range committed {
		if !seen[tp] {
			add(tp).Error = "partition not found in kafka"
		}
	}

	for i := range result.partitions {
		p := &result.partitions[i]
		block := committed[p.TopicPartition]
		switch {
		case block == nil:
		case block.Err != sarama.ErrNoError:
			p.Error = strings.TrimPrefix(p.Error+"; committed offset: "+block.Err.Error(), "; ")
		default:
			// A group with CommitLastProcessed commits the last processed
			// offset, marked so: the next one to read is one more.
			if next, _ := commitmark.Decode(block.Offset, block.Metadata, false); next >= 0 {
				p.Committed = &next
			}
		}
		if p.Committed != nil && p.LogEnd != nil {
			lag := max(*p.LogEnd-*p.Committed, 0)
			p.Lag = &lag
		}
	}
	sort.Slice(result.partitions, func(i, j int) bool {
		a, b := result.partitions[i].TopicPartition, result.partitions[j].TopicPartition
		return a.Topic < b.Topic || (a.Topic == b.Topic && a.Partition < b.Partition)
	})
	return result, nil
}

// internalTopics are not selected by a white or black list (Kafka's
// exclude.internal.topics=true, as the library does), unless an instance
// of the original library is registered: its lists select them, and the
// library's instances then distribute over its partition list.
var internalTopics = map[string]bool{"__consumer_offsets": true, "__transaction_state": true}

// subscribedTopics returns the topics that the instances' subscriptions
// select among the topics that exist in Kafka, and the static ones that do
// not exist (yet).
func subscribedTopics(instances []Instance, kafkaTopics []string) map[string]bool {
	internal := false
	for _, instance := range instances {
		internal = internal || instance.Library == LibraryOriginal
	}
	result := make(map[string]bool)
	for _, instance := range instances {
		for _, topic := range instance.Topics {
			result[topic] = true
		}
		// A consumer-protocol member's regular expression, which the
		// broker resolves (RE2/J, whose syntax Go's regexp shares) over
		// the topics that are not internal, matching whole names.
		if instance.TopicRegex != "" {
			if re, err := regexp.Compile("^(?:" + instance.TopicRegex + ")$"); err == nil {
				for _, topic := range kafkaTopics {
					if !internalTopics[topic] && re.MatchString(topic) {
						result[topic] = true
					}
				}
			}
		}
		for key := range instance.Subscription {
			switch instance.Pattern {
			case "static":
				result[key] = true
			case "white_list", "black_list":
				re, err := regexp.Compile(key)
				if err != nil {
					continue
				}
				for _, topic := range kafkaTopics {
					if (internal || !internalTopics[topic]) && re.MatchString(topic) == (instance.Pattern == "white_list") {
						result[topic] = true
					}
				}
			}
		}
	}
	return result
}

// parseZookeeper splits a connection string "host:port,host:port/chroot"
// into its servers and chroot, and checks them.
func parseZookeeper(connection string) (nodes []string, chroot string, err error) {
	if strings.TrimSpace(connection) == "" {
		return nil, "", errors.New("no zookeeper given (--zookeeper host:port[,host:port][/chroot], or set ZOOKEEPER_PEERS)")
	}
	nodes, chroot = kazoo.ParseConnectionString(connection)
	for _, node := range nodes {
		host, port, hasPort := strings.Cut(node, ":")
		if host == "" || strings.ContainsAny(node, " \t") {
			return nil, "", fmt.Errorf("invalid zookeeper connection string %q: malformed server %q", connection, node)
		}
		if hasPort {
			if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
				return nil, "", fmt.Errorf("invalid zookeeper connection string %q: server %q has an invalid port", connection, node)
			}
		}
	}
	chroot = strings.TrimRight(chroot, "/")
	if strings.Contains(chroot, "//") {
		return nil, "", fmt.Errorf("invalid zookeeper connection string %q: empty chroot path element", connection)
	}
	return nodes, chroot, nil
}

// intruders returns the instances among ids registered under
// /consumers/<group>/ids of a group whose switch says kafka, sorted by ID.
func (s *zkSession) intruders(group string, ids []string) ([]Instance, error) {
	sort.Strings(ids)
	var found []Instance
	for _, id := range ids {
		data, ok, err := s.get(path.Join("/consumers", group, "ids", id))
		if err != nil {
			return nil, err
		}
		if ok {
			found = append(found, parseRegistration(id, data))
		}
	}
	return found, nil
}
