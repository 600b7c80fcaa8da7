package main

// The consumer-protocol variant (SOAK_COORDINATOR=consumer): the instances
// run with CoordinatorKafka and GroupProtocolConsumer (KIP-848) on a KRaft
// cluster of Kafka 4 (3 brokers, each also a controller), so the broker
// assigns and reconciles each member on its heartbeats. The faults that
// need ZooKeeper are left out. SOAK_PROTOCOL_MOVE=1 adds the rolling move
// between the classic and the consumer protocol as a fault of its own:
// the group's instances are closed and started again one at a time with
// the other GroupProtocol (docs/consumer-protocol.md, "Moving a group
// between the protocols"), sometimes only part of them, so that the next
// faults hit a group whose members use both protocols.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer/internal/testcluster"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// coordinatorConsumer is the value of -coordinator (SOAK_COORDINATOR) and
// the instance setting of CoordinatorKafka with GroupProtocolConsumer; an
// instance moved to the classic protocol runs with coordinatorKafka.
const coordinatorConsumer = "consumer"

// consumerKafkaVersion is the Kafka release of the variant's cluster when
// KAFKA_VERSION does not name one.
const consumerKafkaVersion = "4.4.0"

// kindProtocolMove is the kind of the rolling move (SOAK_PROTOCOL_MOVE).
const kindProtocolMove = "rolling move between the classic and the consumer protocol (SOAK_PROTOCOL_MOVE)"

// consumerProtocol tells whether the run is the consumer-protocol variant.
func (s settings) consumerProtocol() bool { return s.coordinator == coordinatorConsumer }

// kafkaSetting tells whether an instance of the setting is coordinated by
// Kafka's group coordinator alone (CoordinatorKafka, either protocol), with
// no ZooKeeper connection.
func kafkaSetting(coordinator string) bool {
	return coordinator == coordinatorKafka || coordinator == coordinatorConsumer
}

// consumerCluster sets the variant's cluster up in opts: KRaft brokers of
// Kafka 4 (KAFKA_VERSION, default consumerKafkaVersion) and the one
// stand-alone ZooKeeper node that ModeKRaft runs beside them, which no
// instance uses. The brokers' consumer-protocol session is the soak's
// (6 s, as the classic members'), their heartbeat interval 500 ms.
func consumerCluster(opts *testcluster.Options) error {
	if os.Getenv(testcluster.KafkaVersionEnv) == "" {
		opts.KafkaVersion = consumerKafkaVersion
	}
	if v, err := sarama.ParseKafkaVersion(opts.KafkaVersion); err != nil || !v.IsAtLeast(sarama.V4_0_0_0) {
		return fmt.Errorf("SOAK_COORDINATOR=%s needs Kafka 4.0 or later (KAFKA_VERSION, default %s), not %q", coordinatorConsumer, consumerKafkaVersion, opts.KafkaVersion)
	}
	opts.Mode = testcluster.ModeKRaft
	opts.ZooKeepers = 1
	opts.ZooKeeperVersion = ""
	opts.ZooKeeperQuorumProxies = false
	ms := fmt.Sprint(sessionTimeout.Milliseconds())
	opts.BrokerConfig = map[string]string{
		"group.consumer.session.timeout.ms":        ms,
		"group.consumer.min.session.timeout.ms":    ms,
		"group.consumer.heartbeat.interval.ms":     "500",
		"group.consumer.min.heartbeat.interval.ms": "500",
	}
	return nil
}

// openConsumerProtocol opens the driver's franz-go client, which describes
// the group with ConsumerGroupDescribe (sarama cannot), and returns its
// close once Kafka names the group's coordinator (coordinatorReady).
func (so *soak) openConsumerProtocol() (func(), error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(so.cluster.KafkaPeers()...), kgo.ClientID("soak-driver"))
	if err != nil {
		return nil, err
	}
	so.franz = cl
	if err := so.coordinatorReady(2 * time.Minute); err != nil {
		cl.Close()
		return nil, err
	}
	return cl.Close, nil
}

// coordinatorReady waits, at most timeout, until FindCoordinator names
// the group's coordinator: a new cluster answers COORDINATOR_NOT_AVAILABLE
// until it has created its offsets topic, which the consumer protocol's
// Join retries for less than a second (it then fails; restartExited
// counts such failures under the faults). The instances start on a
// cluster ready for groups, as a user's.
func (so *soak) coordinatorReady(timeout time.Duration) error {
	start := time.Now()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.CoordinatorKey = groupName
		req.CoordinatorKeys = []string{groupName}
		resp, err := req.RequestWith(ctx, so.franz)
		cancel()
		if err == nil {
			code := resp.ErrorCode
			if len(resp.Coordinators) > 0 {
				code = resp.Coordinators[0].ErrorCode
			}
			if err = kerr.ErrorForCode(code); err == nil {
				logf("the group's coordinator is ready after %s", time.Since(start).Round(time.Millisecond))
				return nil
			}
		}
		if time.Since(start) > timeout {
			return fmt.Errorf("no coordinator for group %s %s after the cluster started: %w", groupName, timeout, err)
		}
		time.Sleep(200 * time.Millisecond) // polling interval
	}
}

// ensembleOnly are the kinds of fault left out of the consumer-protocol
// variant besides zookeeperOnly: the ZooKeeper ensemble's, which the KRaft
// brokers do not use (their ZooKeeper node keeps nothing of the run's).
var ensembleOnly = map[string]bool{
	"ZooKeeper node killed, restarted": true,
	"ZooKeeper quorum frozen briefly":  true,
}

// consumerFaults returns the kinds of fault of the consumer-protocol
// variant: with s.protocolMove the rolling move, first (the variant's own
// fault leads the report's table), then those of faults that need no
// ZooKeeper, and kafkaFaults.
func consumerFaults(s settings) []fault {
	var kinds []fault
	if s.protocolMove {
		kinds = append(kinds, fault{kindProtocolMove, (*soak).protocolMove})
	}
	for _, f := range faults {
		if !zookeeperOnly[f.kind] && !ensembleOnly[f.kind] {
			kinds = append(kinds, f)
		}
	}
	return append(kinds, kafkaFaults...)
}

// moveCounts counts the rolling moves (SOAK_PROTOCOL_MOVE).
type moveCounts struct {
	toConsumer, toClassic int // instances moved to each protocol
	complete, partial     int // moves that moved every instance, or stopped part-way
}

// otherProtocol is the instance setting of the other group protocol.
func otherProtocol(coordinator string) string {
	if coordinator == coordinatorConsumer {
		return coordinatorKafka
	}
	return coordinatorConsumer
}

// protocolMove is the inject of kindProtocolMove: it moves the group's
// instances that do not run the move's target protocol to it, one at a
// time (closed with Shutdown, started with the other GroupProtocol, the
// group stable again before the next), as docs/consumer-protocol.md tells
// users to. Drawn from the seed, one move in two stops after a random
// number of them, leaving both protocols in the group; the next move goes
// on towards the same target (moveTarget).
func (so *soak) protocolMove() (string, func() error, error) {
	target := so.moveTarget()
	var todo []*instance
	for _, in := range so.insts {
		if !in.extra && in.coordinator != target {
			todo = append(todo, in)
		}
	}
	n := len(todo)
	if n > 1 && so.rng.Intn(2) == 0 {
		n = 1 + so.rng.Intn(n-1)
	}
	name := "classic"
	if target == coordinatorConsumer {
		name = "consumer"
	}
	what := fmt.Sprintf("%d of %d instances to the %s protocol", n, len(todo), name)
	for _, in := range todo[:n] {
		if err := so.leave(in); err != nil {
			return what, nil, err
		}
		in.coordinator = target
		if err := so.start(in); err != nil {
			return what, nil, err
		}
		so.mu.Lock()
		if target == coordinatorConsumer {
			so.moves.toConsumer++
		} else {
			so.moves.toClassic++
		}
		so.mu.Unlock()
		took, ok := so.waitStable(time.Minute)
		if !ok {
			return what, nil, fmt.Errorf("the group was not stable a minute after %s joined with the %s protocol", in.name, name)
		}
		logf("%s moved to the %s protocol; stable %s after its start", in.name, name, took.Round(time.Millisecond))
	}
	so.mu.Lock()
	if n == len(todo) {
		so.moves.complete++
	} else {
		so.moves.partial++
	}
	so.mu.Unlock()
	return what, func() error { return nil }, nil
}

// moveTarget is the instance setting the next rolling move goes to: that
// of the last move while it stopped part-way, otherwise the other
// protocol of the one every instance runs.
func (so *soak) moveTarget() string {
	so.mu.Lock()
	defer so.mu.Unlock()
	if so.movingTo == "" || so.allOn(so.movingTo) {
		first := ""
		for _, in := range so.insts {
			if !in.extra {
				first = in.coordinator
				break
			}
		}
		so.movingTo = otherProtocol(first)
	}
	return so.movingTo
}

// allOn tells whether every instance of the group runs the setting.
func (so *soak) allOn(coordinator string) bool {
	for _, in := range so.insts {
		if !in.extra && in.coordinator != coordinator {
			return false
		}
	}
	return true
}

// stableConsumer is stable for a group of the consumer-protocol variant:
// while Kafka keeps it as a consumer group (a consumer-protocol member is
// in it, or was: ConsumerGroupDescribe finds it), the group is Stable
// (every member reconciled to the target assignment), its members are the
// running processes, one each, whatever their protocol, and every
// partition of the soak topics is assigned to exactly one of them; a
// classic group (every member classic, GROUP_ID_NOT_FOUND) is stable by
// stableKafka.
func (so *soak) stableConsumer() bool {
	g, err := so.describeConsumerGroup()
	if err != nil {
		return false
	}
	if g == nil {
		return so.stableKafka()
	}
	if g.State != "Stable" {
		return false
	}
	var m kafkaMembers
	for _, member := range g.Members {
		m.add(member.ClientID)
		for _, t := range member.Assignment.TopicPartitions {
			m.assign(t.Topic, t.Partitions)
		}
	}
	return so.membersStable(m)
}

// describeConsumerGroup describes the soak's group with
// ConsumerGroupDescribe: nil, and no error, when Kafka keeps it as a
// classic group (or has none).
func (so *soak) describeConsumerGroup() (*kmsg.ConsumerGroupDescribeResponseGroup, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req := kmsg.NewPtrConsumerGroupDescribeRequest()
	req.Groups = []string{groupName}
	resp, err := req.RequestWith(ctx, so.franz)
	if err != nil {
		return nil, err
	}
	if len(resp.Groups) != 1 {
		return nil, fmt.Errorf("describe group %s: %d groups in the answer", groupName, len(resp.Groups))
	}
	g := &resp.Groups[0]
	switch err := kerr.ErrorForCode(g.ErrorCode); {
	case err == nil:
		return g, nil
	case errors.Is(err, kerr.GroupIDNotFound):
		return nil, nil
	default:
		return nil, fmt.Errorf("describe group %s: %w", groupName, err)
	}
}

// consumerReport is the report's paragraph on the variant.
func (so *soak) consumerReport() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nThe group uses Kafka's consumer group protocol (Config.Coordinator CoordinatorKafka, Config.GroupProtocol GroupProtocolConsumer, KIP-848) on a KRaft cluster of Kafka %s, 3 brokers; the instances have no ZooKeeper connection.",
		so.cluster.KafkaVersion())
	if so.s.protocolMove {
		m := so.moves
		fmt.Fprintf(&b, " SOAK_PROTOCOL_MOVE=1: the instances are moved between the classic and the consumer protocol by rolling restarts: %d moves done, %d stopped part-way; %d instances moved to the consumer protocol, %d to the classic one.",
			m.complete, m.partial, m.toConsumer, m.toClassic)
	}
	b.WriteString("\n")
	return b.String()
}
