package main

import (
	"errors"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer/internal/testcluster"
)

// cluster is the Kafka cluster the bench runs against: the one named by
// ZOOKEEPER_PEERS and KAFKA_PEERS, or one it starts with testcluster.
type cluster struct {
	zookeeper string
	brokers   []string
	started   *testcluster.Cluster // nil when the cluster was given
	client    sarama.Client
	admin     sarama.ClusterAdmin
	// minSession is the broker's group.min.session.timeout.ms.
	minSession time.Duration
	// consumerProtocol tells whether the brokers serve the consumer group
	// protocol (KIP-848: ConsumerGroupHeartbeat); consumerSession and
	// consumerHeartbeat are then their group.consumer.session.timeout.ms
	// and group.consumer.heartbeat.interval.ms, which the broker imposes
	// on every member of such a group.
	consumerProtocol bool
	// shareGroups tells whether the brokers serve share groups (KIP-932).
	shareGroups                        bool
	consumerSession, consumerHeartbeat time.Duration
	// describe says what the cluster is, for the results.
	describe string
}

// clusterKind is what -cluster asks for: the mode of testcluster and the
// Kafka release.
type clusterKind struct {
	mode, version string
}

// parseClusterKind parses -cluster: "zookeeper" (the default release on
// ZooKeeper), "zookeeper-<version>" or "kraft-<version>".
func parseClusterKind(s string) (clusterKind, error) {
	mode, version, _ := strings.Cut(s, "-")
	switch mode {
	case testcluster.ModeZooKeeper, testcluster.ModeKRaft:
	default:
		return clusterKind{}, fmt.Errorf("-cluster %q: want zookeeper, zookeeper-<version> or kraft-<version>", s)
	}
	if version == "" {
		if mode == testcluster.ModeKRaft {
			return clusterKind{}, fmt.Errorf("-cluster %q: name the Kafka release, e.g. kraft-4.4.0", s)
		}
		version = testcluster.DefaultKafkaVersion
	}
	if _, err := sarama.ParseKafkaVersion(version); err != nil {
		return clusterKind{}, fmt.Errorf("-cluster %q: %w", s, err)
	}
	return clusterKind{mode: mode, version: version}, nil
}

// openCluster connects to the cluster of ZOOKEEPER_PEERS and KAFKA_PEERS,
// or starts one of kind when they are unset.
func openCluster(kind clusterKind, o *options) (*cluster, error) {
	c := &cluster{
		zookeeper: os.Getenv("ZOOKEEPER_PEERS"),
		brokers:   splitPeers(os.Getenv("KAFKA_PEERS")),
		describe:  "given (ZOOKEEPER_PEERS, KAFKA_PEERS)",
	}
	if c.zookeeper == "" || len(c.brokers) == 0 {
		log.Printf("ZOOKEEPER_PEERS or KAFKA_PEERS unset: starting a cluster (1 ZooKeeper, %d broker(s), %s, Kafka %s) with testcluster", o.brokers, kind.mode, kind.version)
		// Let the Kafka-coordinated groups use the same session timeout
		// as kafkaconsumer's ZooKeeper session (the broker's default
		// minimum is 6 s).
		brokerConfig := map[string]string{"group.min.session.timeout.ms": "1000"}
		if v, _ := sarama.ParseKafkaVersion(kind.version); v.IsAtLeast(sarama.V4_0_0_0) {
			// The consumer protocol's session timeout and heartbeat
			// interval are the broker's (45 s and 5 s by default, and
			// no less than its minimums): give its groups the classic
			// groups' (groupTimeouts).
			session, heartbeat := max(o.sessionTimeout, time.Second), max(o.sessionTimeout, time.Second)/3
			ms := func(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }
			brokerConfig["group.consumer.min.session.timeout.ms"] = ms(session)
			brokerConfig["group.consumer.session.timeout.ms"] = ms(session)
			brokerConfig["group.consumer.min.heartbeat.interval.ms"] = ms(heartbeat)
			brokerConfig["group.consumer.heartbeat.interval.ms"] = ms(heartbeat)
		}
		tc, err := testcluster.Start(testcluster.Options{
			ZooKeepers:   1,
			Brokers:      o.brokers,
			Mode:         kind.mode,
			KafkaVersion: kind.version,
			BrokerConfig: brokerConfig,
		})
		if err != nil {
			return nil, fmt.Errorf("start test cluster: %w", err)
		}
		c.started = tc
		c.zookeeper = tc.ZookeeperPeers()
		c.brokers = tc.KafkaPeers()
		c.describe = fmt.Sprintf("started by internal/testcluster (1 ZooKeeper, %d broker(s); %s, Kafka %s)", o.brokers, tc.Mode(), tc.KafkaVersion())
	}
	cfg := sarama.NewConfig()
	var err error
	if c.client, err = sarama.NewClient(c.brokers, cfg); err != nil {
		c.close()
		return nil, fmt.Errorf("connect to kafka at %s: %w", strings.Join(c.brokers, ","), err)
	}
	if c.admin, err = sarama.NewClusterAdminFromClient(c.client); err != nil {
		c.close()
		return nil, err
	}
	if n := len(c.client.Brokers()); n != o.brokers {
		c.close()
		return nil, fmt.Errorf("the cluster has %d brokers, -brokers %d", n, o.brokers)
	}
	// The first group coordinator lookup creates the offsets topic: do it
	// now, so that no contender pays for it.
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := c.client.Coordinator("kafkaconsumer-bench-warm-up"); err == nil {
			break
		} else if time.Now().After(deadline) {
			c.close()
			return nil, fmt.Errorf("no group coordinator: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Kafka's defaults.
	c.minSession = 6 * time.Second
	c.consumerSession, c.consumerHeartbeat = 45*time.Second, 5*time.Second
	if bs := c.client.Brokers(); len(bs) > 0 {
		results, err := c.admin.DescribeConfigs([]*sarama.ConfigResource{{
			Type:        sarama.BrokerResource,
			Name:        strconv.Itoa(int(bs[0].ID())),
			ConfigNames: []string{"group.min.session.timeout.ms", "group.consumer.session.timeout.ms", "group.consumer.heartbeat.interval.ms"},
		}}, sarama.DescribeConfigsOptions{})
		if err == nil && len(results) == 1 && results[0].ErrorCode != sarama.ErrNoError {
			err = results[0].ErrorCode
		}
		if err == nil {
			for _, r := range results {
				for _, e := range r.Configs {
					ms, err := strconv.Atoi(e.Value)
					if err != nil {
						continue
					}
					d := time.Duration(ms) * time.Millisecond
					switch e.Name {
					case "group.min.session.timeout.ms":
						c.minSession = d
					case "group.consumer.session.timeout.ms":
						c.consumerSession = d
					case "group.consumer.heartbeat.interval.ms":
						c.consumerHeartbeat = d
					}
				}
			}
		} else {
			log.Printf("describe broker config: %v (assuming Kafka's defaults: group.min.session.timeout.ms=6000, group.consumer.session.timeout.ms=45000)", err)
		}
		if err := bs[0].Open(c.client.Config()); err != nil && !errors.Is(err, sarama.ErrAlreadyConnected) {
			log.Printf("connect to broker %d: %v", bs[0].ID(), err)
		}
		c.consumerProtocol = servesConsumerProtocol(bs[0])
		c.shareGroups = servesShareGroups(bs[0])
	}
	return c, nil
}

// servesConsumerProtocol tells whether the broker serves
// ConsumerGroupHeartbeat (API key 68) from version 1 on, the version the
// consumer protocol's clients ask for (Kafka 4.0).
func servesConsumerProtocol(b *sarama.Broker) bool {
	const consumerGroupHeartbeat = 68
	resp, err := b.ApiVersions(&sarama.ApiVersionsRequest{Version: 3, ClientSoftwareName: "kafkaconsumer-bench", ClientSoftwareVersion: "0"})
	if err != nil {
		log.Printf("ApiVersions: %v (assuming no consumer group protocol)", err)
		return false
	}
	for _, k := range resp.ApiKeys {
		if k.ApiKey == consumerGroupHeartbeat {
			return k.MaxVersion >= 1
		}
	}
	return false
}

func splitPeers(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func (c *cluster) close() {
	if c.admin != nil {
		c.admin.Close() // closes the client too
	} else if c.client != nil {
		c.client.Close()
	}
	if c.started != nil {
		if err := c.started.Close(); err != nil {
			log.Printf("close test cluster: %v", err)
		}
	}
}

// ensureTopic creates the topic if it does not exist, and waits until every
// partition has a leader. A topic that exists with another partition count
// is an error.
func (c *cluster) ensureTopic(name string, partitions int32) error {
	if err := c.client.RefreshMetadata(name); err == nil {
		ps, err := c.client.Partitions(name)
		if err == nil && len(ps) > 0 {
			if int32(len(ps)) != partitions {
				return fmt.Errorf("topic %s exists with %d partitions, want %d", name, len(ps), partitions)
			}
			return nil
		}
	}
	err := c.admin.CreateTopic(name, &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: 1}, false)
	// A topic of many partitions takes longer than the request's timeout:
	// the broker goes on creating it, and the loop below waits for it.
	if err != nil && !errors.Is(err, sarama.ErrTopicAlreadyExists) && !errors.Is(err, sarama.ErrRequestTimedOut) {
		return fmt.Errorf("create topic %s: %w", name, err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := c.client.RefreshMetadata(name)
		if err == nil {
			var ps []int32
			if ps, err = c.client.Partitions(name); err == nil && int32(len(ps)) == partitions {
				for _, p := range ps {
					if _, err = c.client.Leader(name, p); err != nil {
						break
					}
				}
			} else if err == nil {
				err = fmt.Errorf("%d of %d partitions", len(ps), partitions)
			}
		}
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("topic %s has no leaders: %w", name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// offsets returns the oldest and newest offsets of each partition.
func (c *cluster) offsets(topic string, partitions int32) (oldest, newest []int64, err error) {
	oldest, newest = make([]int64, partitions), make([]int64, partitions)
	for p := range partitions {
		if oldest[p], err = c.offset(topic, p, sarama.OffsetOldest); err != nil {
			return nil, nil, err
		}
		if newest[p], err = c.offset(topic, p, sarama.OffsetNewest); err != nil {
			return nil, nil, err
		}
	}
	return oldest, newest, nil
}

// offset returns the partition's offset at (sarama.OffsetOldest or
// OffsetNewest). A KRaft broker answers NOT_LEADER for a topic just
// created for a moment after its metadata named it the leader: that is
// retried, with the metadata refreshed, for up to 30 s.
func (c *cluster) offset(topic string, partition int32, at int64) (int64, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		off, err := c.client.GetOffset(topic, partition, at)
		if !errors.Is(err, sarama.ErrNotLeaderForPartition) && !errors.Is(err, sarama.ErrLeaderNotAvailable) || time.Now().After(deadline) {
			return off, err
		}
		time.Sleep(250 * time.Millisecond)
		if err := c.client.RefreshMetadata(topic); err != nil {
			log.Printf("refresh metadata of %s: %v", topic, err)
		}
	}
}

// count returns the number of messages held by the topic.
func (c *cluster) count(topic string, partitions int32) (int64, error) {
	oldest, newest, err := c.offsets(topic, partitions)
	if err != nil {
		return 0, err
	}
	var n int64
	for p := range oldest {
		n += newest[p] - oldest[p]
	}
	return n, nil
}

// fill creates the topic if needed and produces messages of size bytes,
// round-robin over the partitions, until it holds at least n messages.
func (c *cluster) fill(topic string, partitions int32, n int64, size int) error {
	return c.produceMissing(topic, partitions, n, fmt.Sprintf("of %d bytes", size), func(cfg *sarama.Config) {
		cfg.Producer.Partitioner = sarama.NewRoundRobinPartitioner
		// A KRaft broker may refuse a topic just created (NOT_LEADER) for a
		// moment after its metadata named the leader: retry for a while.
		cfg.Producer.Retry.Max = 20
		cfg.Producer.Retry.Backoff = 250 * time.Millisecond
	}, func(input chan<- *sarama.ProducerMessage, _, missing int64) {
		// A few distinct payloads, so that no two neighbours are the same.
		payloads := make([][]byte, 16)
		for i := range payloads {
			payloads[i] = make([]byte, size)
			for j := range payloads[i] {
				payloads[i][j] = byte(rand.IntN(256))
			}
		}
		for i := range missing {
			input <- &sarama.ProducerMessage{Topic: topic, Value: sarama.ByteEncoder(payloads[i%16])}
		}
	})
}

// produceMissing creates the topic if needed and, when it holds fewer
// than n messages, produces the missing ones: send writes them to input,
// given how many the topic held and how many are missing, through an
// asynchronous producer whose configuration configure adjusts. what
// describes the messages in the log. It fails when any failed to produce.
func (c *cluster) produceMissing(topic string, partitions int32, n int64, what string, configure func(*sarama.Config), send func(input chan<- *sarama.ProducerMessage, have, missing int64)) error {
	if err := c.ensureTopic(topic, partitions); err != nil {
		return err
	}
	have, err := c.count(topic, partitions)
	if err != nil {
		return err
	}
	if have >= n {
		return nil
	}
	missing := n - have
	log.Printf("producing %d messages %s to %s", missing, what, topic)
	start := time.Now()
	cfg := sarama.NewConfig()
	cfg.Producer.Return.Successes = false
	cfg.Producer.Return.Errors = true
	cfg.Producer.Flush.Frequency = 5 * time.Millisecond
	cfg.Producer.Flush.Messages = 1000
	cfg.Producer.RequiredAcks = sarama.WaitForLocal
	if configure != nil {
		configure(cfg)
	}
	producer, err := sarama.NewAsyncProducer(c.brokers, cfg)
	if err != nil {
		return err
	}
	var failed atomic.Int64
	errDone := make(chan struct{})
	go func() {
		defer close(errDone)
		for e := range producer.Errors() {
			if failed.Add(1) == 1 {
				log.Printf("produce: %v", e.Err)
			}
		}
	}()
	send(producer.Input(), have, missing)
	producer.AsyncClose()
	<-errDone
	if f := failed.Load(); f > 0 {
		return fmt.Errorf("%d of %d messages failed to produce", f, missing)
	}
	log.Printf("produced %d messages in %.1fs", missing, time.Since(start).Seconds())
	return nil
}
