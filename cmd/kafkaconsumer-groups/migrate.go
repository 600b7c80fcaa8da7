package main

// The migrate verb: moves a live group from ZooKeeper's coordination to
// Kafka's group coordinator (--to kafka), or back (--to zookeeper), by
// writing the group's coordinator switch, /consumers/<group>/coordinator,
// which every instance of the library watches (the library's
// coordinator_migrate.go has the sequence). It refuses while an instance
// that does not follow the switch is part of the group, and names it.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/IBM/sarama"
	"github.com/go-zookeeper/zk"
)

// The values of the coordinator switch, and the registration field of
// the instances that follow it (the library's migrationVersion).
const (
	switchZookeeper  = "zookeeper"
	switchKafka      = "kafka"
	migrationVersion = 1
)

// ErrRefused is what migrate returns when an instance or member of the
// group cannot follow the switch.
var ErrRefused = errors.New("refused")

// ErrUnsettled is what migrate --to zookeeper returns when Kafka's group
// was still rebalancing at the end of --wait (of --timeout with --wait 0):
// Kafka gives its members' metadata only while the group is Stable, so
// the tool cannot tell yet whether they follow the switch. The switch is
// left as it was.
var ErrUnsettled = errors.New("cannot tell yet")

// migration is what migrate was asked for.
type migration struct {
	group string
	to    string // switchKafka or switchZookeeper
	// protocol is --protocol: "", GroupProtocolClassic or
	// GroupProtocolConsumer (with to switchKafka only).
	protocol string
	wait     time.Duration // how long to wait for the instances to move; 0: not at all
	// settle is how long --to zookeeper waits for Kafka's group to
	// settle before it judges the members (settledGroup): wait, which
	// the two waits share, or --timeout with wait 0.
	settle time.Duration
	// timeout is --timeout: the time ZooKeeper and Kafka have to answer
	// each request.
	timeout time.Duration
	out     io.Writer // progress lines
	// beforeSwitch, when set (tests), runs right before migrate --to
	// zookeeper writes the switch, after its checks.
	beforeSwitch func()
}

// migrateGroup writes the group's coordinator switch after its checks,
// and waits for the instances to move (m.wait). ZooKeeper and Kafka must
// answer each request within timeout.
func migrateGroup(zookeeper string, zkAccess zookeeperAccess, access kafkaAccess, timeout time.Duration, m migration) error {
	if m.group == "" || strings.Contains(m.group, "/") || m.group == "." || m.group == ".." {
		return fmt.Errorf("invalid group name %q", m.group)
	}
	m.settle = m.wait
	if m.wait <= 0 {
		m.settle = timeout
	}
	m.timeout = timeout
	return withZookeeper(zookeeper, zkAccess, timeout+m.settle, func(s *zkSession) error {
		admin, k, err := s.openMigrate(access, timeout)
		if err != nil {
			return err
		}
		defer admin.Close()
		defer k.close()
		if m.to == switchKafka {
			return s.migrateToKafka(admin, k, m)
		}
		return s.migrateToZookeeper(admin, k, m)
	})
}

// openMigrate connects to the brokers that s.brokers finds: a sarama
// admin, and a kafkaSession for the requests of Kafka's consumer group
// protocol (consumerprotocol.go), whose deadline each step renews.
func (s *zkSession) openMigrate(access kafkaAccess, timeout time.Duration) (*migrateAdmin, *kafkaSession, error) {
	brokers, err := s.brokers(access)
	if err != nil {
		return nil, nil, err
	}
	if len(brokers) == 0 {
		return nil, nil, fmt.Errorf("no Kafka brokers registered in zookeeper %s: give --bootstrap-server", s.zookeeper)
	}
	admin, err := newAdmin(brokers, access, timeout)
	if err != nil {
		return nil, nil, err
	}
	timeoutMsg := fmt.Sprintf("no answer from kafka %s within %s", strings.Join(brokers, ","), timeout)
	k, err := openKafka(brokers, access, time.Now().Add(timeout), timeoutMsg)
	if err != nil {
		_ = admin.Close()
		return nil, nil, err
	}
	return admin, k, nil
}

// renew gives the session's requests timeout from now: a migrate that
// waits asks Kafka again and again, each time within --timeout.
func (k *kafkaSession) renew(timeout time.Duration) {
	k.deadline = time.Now().Add(timeout)
}

// migrateAdmin is migrate's sarama admin, on a client of its own.
type migrateAdmin struct {
	client sarama.Client
	admin  sarama.ClusterAdmin // on client; closing it closes client
}

// Close closes the admin and its client.
func (a *migrateAdmin) Close() error { return a.admin.Close() }

// newAdmin connects a cluster admin to brokers.
func newAdmin(brokers []string, access kafkaAccess, timeout time.Duration) (*migrateAdmin, error) {
	config := sarama.NewConfig()
	config.ClientID = "kafkaconsumer-groups"
	config.Version = sarama.V2_4_0_0
	config.Net.DialTimeout = timeout
	config.Net.ReadTimeout = timeout
	config.Net.WriteTimeout = timeout
	config.Metadata.Retry.Max = 1
	config.Admin.Retry.Max = 1
	config.Admin.Timeout = timeout
	access.configure(config)
	client, err := sarama.NewClient(brokers, config)
	if err != nil {
		return nil, fmt.Errorf("kafka %s: connect: %w", strings.Join(brokers, ","), err)
	}
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("kafka %s: connect: %w", strings.Join(brokers, ","), err)
	}
	return &migrateAdmin{client: client, admin: admin}, nil
}

// group describes the group in Kafka, asking again within --timeout
// while the coordinator cannot be reached (describeGroup).
func (a *migrateAdmin) group(k *kafkaSession, m migration) (*sarama.GroupDescription, error) {
	k.renew(m.timeout)
	return k.describeGroup(a.client, a.admin, m.group)
}

// followsSwitch tells whether a ZooKeeper registration or a member's user
// data is one of an instance that follows the coordinator switch, and
// else what it is.
func followsSwitch(data []byte) (bool, string) {
	var reg struct {
		Client    string `json:"client"`
		Migration int    `json:"migration"`
	}
	if err := json.Unmarshal(data, &reg); err != nil {
		return false, "unreadable"
	}
	switch {
	case reg.Client != registrationClient:
		return false, "original wvanbergen/kafka instance"
	case reg.Migration < migrationVersion:
		return false, "kafkaconsumer too old to migrate"
	}
	return true, ""
}

// readSwitch returns the switch's value ("" when missing) and version.
func (s *zkSession) readSwitch(group string) (string, int32, error) {
	data, stat, err := s.getStat(path.Join("/consumers", group, "coordinator"))
	if err != nil || stat == nil {
		return "", -1, err
	}
	if strings.TrimSpace(string(data)) == switchKafka {
		return switchKafka, stat.Version, nil
	}
	return switchZookeeper, stat.Version, nil
}

// writeSwitch writes value to the switch, which had version (-1: missing).
func (s *zkSession) writeSwitch(group, value string, version int32) error {
	node := s.chroot + path.Join("/consumers", group, "coordinator")
	var err error
	if version < 0 {
		_, err = s.conn.Create(node, []byte(value), 0, zk.WorldACL(zk.PermAll))
		if errors.Is(err, zk.ErrNodeExists) {
			return fmt.Errorf("the switch %s was created meanwhile: run migrate again", node)
		}
	} else {
		_, err = s.conn.Set(node, []byte(value), version)
		if errors.Is(err, zk.ErrBadVersion) {
			return fmt.Errorf("the switch %s was written meanwhile: run migrate again", node)
		}
	}
	return s.check("write "+node, err)
}

// migrateToKafka checks that every registered instance follows the
// switch and that Kafka's group is Empty, writes "kafka", and waits until
// no instance is registered and Kafka's group is Stable.
func (s *zkSession) migrateToKafka(admin *migrateAdmin, k *kafkaSession, m migration) error {
	ids, err := s.children(path.Join("/consumers", m.group, "ids"))
	if err != nil {
		return err
	}
	sort.Strings(ids)
	var refused []string
	for _, id := range ids {
		data, ok, err := s.get(path.Join("/consumers", m.group, "ids", id))
		if err != nil {
			return err
		}
		if !ok {
			continue // deregistered meanwhile
		}
		if follows, what := followsSwitch(data); !follows {
			refused = append(refused, fmt.Sprintf("%s (%s)", id, what))
		}
	}
	value, version, err := s.readSwitch(m.group)
	if err != nil {
		return err
	}
	if len(refused) > 0 && value != switchKafka {
		return fmt.Errorf("%w: group %s has instances registered that do not follow the coordinator switch: %s; stop or upgrade them first", ErrRefused, m.group, strings.Join(refused, ", "))
	}
	if value == switchKafka {
		fmt.Fprintf(m.out, "Group %s is coordinated by Kafka already.\n", m.group)
		if len(ids) > 0 {
			return intrudersRefusal(m.group, ids)
		}
		return s.awaitKafka(k, m, time.Now())
	}
	g, err := admin.group(k, m)
	if err != nil {
		return err
	}
	if g.State != "Empty" && g.State != "Dead" {
		return fmt.Errorf("%w: Kafka's group %s is %s with %d members (protocol type %q): another consumer uses the group's name", ErrRefused, m.group, g.State, len(g.Members), g.ProtocolType)
	}
	// Kafka 4's DescribeGroups describes a group of the consumer
	// protocol as Dead with no members: ask ConsumerGroupDescribe.
	k.renew(m.timeout)
	st, err := k.protocolStatus(m.group)
	if err != nil {
		return err
	}
	if len(st.Members) > 0 {
		return fmt.Errorf("%w: Kafka's group %s is %s with %d members, a group of the consumer protocol (KIP-848): %s: another consumer uses the group's name", ErrRefused, m.group, st.KafkaState, len(st.Members), strings.Join(st.others(""), ", "))
	}
	if len(ids) == 0 {
		return fmt.Errorf("%w: no instance of group %s is registered in ZooKeeper: nothing to migrate (start the instances with Config.Coordinator = CoordinatorKafka)", ErrRefused, m.group)
	}
	if err := s.writeSwitch(m.group, switchKafka, version); err != nil {
		return err
	}
	began := time.Now()
	fmt.Fprintf(m.out, "Switched group %s to Kafka's group coordinator: %d instances stop their partitions, deregister and join Kafka's group.\n", m.group, len(ids))
	return s.awaitKafka(k, m, began)
}

// intrudersRefusal is the refusal of a group whose switch says kafka
// while instances are registered in ZooKeeper (ids, sorted): nothing
// registers then but an intruder, whose claims the library's seal
// refuses.
func intrudersRefusal(group string, ids []string) error {
	return fmt.Errorf("%w: group %s is coordinated by Kafka, but instances registered in ZooKeeper all the same (intruders; ZooKeeper refuses their claims): %s; stop them", ErrRefused, group, strings.Join(ids, ", "))
}

// awaitKafka waits, up to m.wait, until no instance is registered in
// ZooKeeper and Kafka's group is Stable, of either protocol
// (protocolStatus: once a member of the consumer protocol joined,
// DescribeGroups describes the group as Dead with no members).
func (s *zkSession) awaitKafka(k *kafkaSession, m migration, began time.Time) error {
	if m.wait <= 0 {
		return nil
	}
	deadline := began.Add(m.wait)
	var last string
	for {
		ids, err := s.children(path.Join("/consumers", m.group, "ids"))
		if err != nil {
			return err
		}
		if len(ids) == 0 {
			k.renew(m.timeout)
			st, err := k.protocolStatus(m.group)
			if err != nil {
				return err
			}
			if st.KafkaState == kafkaStateStable && len(st.Members) > 0 {
				fmt.Fprintf(m.out, "Done after %s: Kafka's group %s is Stable with %d members; no instance is registered in ZooKeeper.\n", time.Since(began).Round(time.Millisecond), m.group, len(st.Members))
				return nil
			}
			last = fmt.Sprintf("Kafka's group is %s with %d members", st.KafkaState, len(st.Members))
		} else {
			sort.Strings(ids)
			last = "still registered in ZooKeeper: " + strings.Join(ids, ", ")
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: the instances did not move within --wait %s (%s); the switch stays set: they follow it when they can", ErrTimeout, m.wait, last)
		}
		time.Sleep(100 * time.Millisecond) // polling interval
	}
}

// migrateToZookeeper checks that every member of Kafka's group follows
// the switch (a group of the consumer protocol with members is refused:
// those members run without ZooKeeper), writes "zookeeper", and waits until Kafka's group is Empty
// and as many instances are registered in ZooKeeper as it had members.
// A group that rebalances is judged once it settled (settledGroup,
// within m.settle); the waits for that and for the members to move share
// m.wait. A member of the consumer protocol that joins after the check
// is caught after the write and while it waits: the switch goes back to
// kafka (undoForConsumerProtocol).
func (s *zkSession) migrateToZookeeper(admin *migrateAdmin, k *kafkaSession, m migration) error {
	began := time.Now()
	deadline := began.Add(m.wait)
	value, version, err := s.readSwitch(m.group)
	if err != nil {
		return err
	}
	if value != switchKafka {
		fmt.Fprintf(m.out, "Group %s is coordinated by ZooKeeper already.\n", m.group)
		return nil
	}
	g, err := settledGroup(admin, k, m, began.Add(m.settle))
	if err != nil {
		return err
	}
	// Kafka 4's DescribeGroups describes a group of the consumer
	// protocol as Dead with no members: ask ConsumerGroupDescribe.
	k.renew(m.timeout)
	st, err := k.protocolStatus(m.group)
	if err != nil {
		return err
	}
	if st.GroupProtocol == GroupProtocolConsumer && len(st.Members) > 0 {
		return consumerProtocolRefusal(st)
	}
	var refused []string
	for id, member := range g.Members {
		what := "not a consumer"
		follows := false
		if meta, err := member.GetMemberMetadata(); err == nil && meta != nil {
			follows, what = followsSwitch(meta.UserData)
			if what == "original wvanbergen/kafka instance" || what == "unreadable" {
				what = "another consumer"
			}
		}
		if !follows {
			if what == "kafkaconsumer too old to migrate" {
				what = "kafkaconsumer without ZooKeeper, which cannot see the switch"
			}
			refused = append(refused, fmt.Sprintf("%s of %s at %s (%s)", id, member.ClientId, member.ClientHost, what))
		}
	}
	if len(refused) > 0 {
		sort.Strings(refused)
		return fmt.Errorf("%w: Kafka's group %s has members that do not follow the coordinator switch: %s; stop them first", ErrRefused, m.group, strings.Join(refused, ", "))
	}
	members := len(g.Members)
	if m.beforeSwitch != nil {
		m.beforeSwitch()
	}
	if err := s.writeSwitch(m.group, switchZookeeper, version); err != nil {
		return err
	}
	switched := time.Now()
	if err := s.undoForConsumerProtocol(k, m); err != nil {
		return err
	}
	fmt.Fprintf(m.out, "Switched group %s back to ZooKeeper: %d members stop their partitions, leave Kafka's group and register in ZooKeeper once it is Empty.\n", m.group, members)
	if m.wait <= 0 {
		return nil
	}
	var last string
	for {
		g, err := admin.group(k, m)
		if err != nil {
			return err
		}
		ids, err := s.children(path.Join("/consumers", m.group, "ids"))
		if err != nil {
			return err
		}
		if err := s.undoForConsumerProtocol(k, m); err != nil {
			return err
		}
		if (g.State == "Empty" || g.State == "Dead") && len(ids) >= members {
			fmt.Fprintf(m.out, "Done after %s: Kafka's group %s is %s; %d instances are registered in ZooKeeper.\n", time.Since(switched).Round(time.Millisecond), m.group, g.State, len(ids))
			return nil
		}
		last = fmt.Sprintf("Kafka's group is %s with %d members, %d instances registered in ZooKeeper", g.State, len(g.Members), len(ids))
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: the members did not move within --wait %s (%s); the switch stays set: they follow it when they can", ErrTimeout, m.wait, last)
		}
		time.Sleep(100 * time.Millisecond) // polling interval
	}
}

// undoForConsumerProtocol checks, after migrate --to zookeeper wrote the
// switch and while it waits, that Kafka's group has no member of the
// consumer protocol: one may join between the check before the switch
// and its write, or later, and it cannot see the switch. It then writes
// the switch back to kafka, so that the members that follow it go on
// under Kafka beside that member, and returns the refusal naming it.
func (s *zkSession) undoForConsumerProtocol(k *kafkaSession, m migration) error {
	k.renew(m.timeout)
	st, err := k.protocolStatus(m.group)
	if err != nil {
		return err
	}
	if st.GroupProtocol != GroupProtocolConsumer || len(st.Members) == 0 {
		return nil
	}
	refusal := consumerProtocolRefusal(st)
	value, version, err := s.readSwitch(m.group)
	if err != nil {
		return fmt.Errorf("%w; reading the switch to set it back to kafka: %w", refusal, err)
	}
	if value == switchZookeeper {
		if err := s.writeSwitch(m.group, switchKafka, version); err != nil {
			return fmt.Errorf("%w; setting the switch back to kafka: %w", refusal, err)
		}
	}
	fmt.Fprintf(m.out, "A member of the consumer protocol joined Kafka's group %s after the check: the switch is set back to kafka.\n", m.group)
	return refusal
}

// rebalancing tells whether Kafka's group is between generations
// (PreparingRebalance, CompletingRebalance): then DescribeGroups gives
// none of its members' metadata.
func rebalancing(state string) bool {
	return state != kafkaStateStable && state != kafkaStateEmpty && state != kafkaStateDead
}

// settledGroup describes Kafka's group once it is not rebalancing, asking
// again until deadline: only then are its members' metadata known, by
// which migrate tells those that follow the switch. Past the deadline it
// returns an error wrapping ErrUnsettled.
func settledGroup(admin *migrateAdmin, k *kafkaSession, m migration, deadline time.Time) (*sarama.GroupDescription, error) {
	began := time.Now()
	waited := false
	for {
		g, err := admin.group(k, m)
		if err != nil {
			return nil, err
		}
		if !rebalancing(g.State) {
			if waited {
				fmt.Fprintf(m.out, "Kafka's group %s is %s with %d members after %s.\n", m.group, g.State, len(g.Members), time.Since(began).Round(time.Millisecond))
			}
			return g, nil
		}
		if !time.Now().Before(deadline) {
			return nil, fmt.Errorf("%w: Kafka's group %s is %s with %d members (waited %s); Kafka gives its members' metadata only once it is Stable, so whether they follow the coordinator switch is not known; the switch is unchanged: run migrate again once the group is Stable", ErrUnsettled, m.group, g.State, len(g.Members), time.Since(began).Round(time.Millisecond))
		}
		if !waited {
			waited = true
			fmt.Fprintf(m.out, "Kafka's group %s is %s with %d members: waiting for it to settle before judging its members (up to %s).\n", m.group, g.State, len(g.Members), m.settle)
		}
		time.Sleep(100 * time.Millisecond) // polling interval
	}
}
