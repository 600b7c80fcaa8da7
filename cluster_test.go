package kafkaconsumer

// The integration suite runs against a real ZooKeeper and Kafka: the cluster
// named by ZOOKEEPER_PEERS and KAFKA_PEERS when they are set (make
// cluster-up writes them to .cluster/env), else one that TestMain starts
// with internal/testcluster. It is skipped under -short.
//
// With KAFKA_MODE=kraft (make cluster-up MODE=kraft writes it) or
// KAFKA_DISCOVERY=kafka, the same tests run with Config.Discovery
// DiscoverFromKafka (testConfig), against a KRaft cluster that TestMain
// starts when none is given; the tests that only make sense with
// DiscoverFromZookeeper skip (skipKafkaDiscovery).

import (
	"errors"
	"flag"
	"fmt"
	"log"
	"math/rand"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/go-zookeeper/zk"
	"github.com/kafkaconsumer/kafkaconsumer/internal/fetch/fetchtest"
	"github.com/kafkaconsumer/kafkaconsumer/internal/testcluster"
	"github.com/wvanbergen/kazoo-go"
	"go.uber.org/goleak"
)

var (
	zookeeperPeers string   // the test cluster's ZooKeeper connection string
	kafkaPeers     []string // its brokers
	// testDiscovery is the Config.Discovery of testConfig: DiscoverFromKafka
	// with KAFKA_MODE=kraft or KAFKA_DISCOVERY=kafka.
	testDiscovery = discoveryFromEnv()
)

// testDiscoveryInterval is testConfig's DiscoveryInterval: short, so that
// the tests that wait for new topics wait about as long in both modes.
const testDiscoveryInterval = time.Second

func discoveryFromEnv() Discovery {
	if os.Getenv("KAFKA_MODE") == "kraft" || os.Getenv("KAFKA_DISCOVERY") == "kafka" {
		return DiscoverFromKafka
	}
	return DiscoverFromZookeeper
}

// skipKafkaDiscovery skips a test that only makes sense with
// DiscoverFromZookeeper when the suite runs with DiscoverFromKafka.
func skipKafkaDiscovery(t *testing.T, why string) {
	t.Helper()
	if testDiscovery == DiscoverFromKafka {
		t.Skip("ZooKeeper discovery only: " + why)
	}
}

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain())
	}
	flag.Parse()
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	if testing.Short() {
		return m.Run()
	}
	zookeeperPeers = os.Getenv("ZOOKEEPER_PEERS")
	if kp := os.Getenv("KAFKA_PEERS"); kp != "" {
		kafkaPeers = strings.Split(kp, ",")
	}
	kafkaVersion, zookeeperVersion := testcluster.VersionsFromEnv()
	if _, err := sarama.ParseKafkaVersion(kafkaVersion); err != nil {
		fmt.Fprintf(os.Stderr, "%s=%q: %s\n", testcluster.KafkaVersionEnv, kafkaVersion, err)
		return 1
	}
	if zookeeperPeers == "" || len(kafkaPeers) == 0 {
		mode := testcluster.ModeZooKeeper
		if os.Getenv("KAFKA_MODE") == "kraft" {
			mode = testcluster.ModeKRaft
		}
		cluster, err := testcluster.Start(testcluster.Options{ZooKeepers: 1, Brokers: 1, Mode: mode,
			KafkaVersion: kafkaVersion, ZooKeeperVersion: zookeeperVersion,
			Logf: func(format string, args ...any) {
				if strings.Contains(format, "using Java") { // another Java than the default: say which
					fmt.Fprintf(os.Stderr, format+"\n", args...)
				}
			}})
		if err != nil {
			fmt.Fprintln(os.Stderr, "start test cluster:", err)
			return 1
		}
		defer cluster.Close()
		zookeeperPeers, kafkaPeers = cluster.ZookeeperPeers(), cluster.KafkaPeers()
		fmt.Fprintf(os.Stderr, "test cluster: Kafka %s, ZooKeeper %s, Java %s\n", cluster.KafkaVersion(), cluster.ZooKeeperVersion(), cluster.JavaVersion())
	}
	// The parallel tests (parallelClusterTest) leave the check for leaked
	// goroutines to this one, after every test.
	ignore := append([]goleak.Option{goleak.IgnoreCurrent()}, leakOptions...)
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(ignore...); err != nil {
			fmt.Fprintf(os.Stderr, "goroutines left after the tests: %v\n", err)
			return 1
		}
	}
	return code
}

// testKafkaVersion is the brokers' Kafka release as sarama knows it:
// $KAFKA_VERSION (make cluster-up writes it to .cluster/env; TestMain
// starts a cluster of that release), else testcluster.DefaultKafkaVersion.
// The tests set sarama's Config.Version to it, as users should.
//
// With KAFKACONSUMER_TEST_SARAMA_VERSION set it is that version instead,
// or sarama's default for "default": what make test-matrix's
// SARAMA_VERSION sets, to learn whether a broker works with a Version other
// than its own.
func testKafkaVersion() sarama.KafkaVersion {
	kafka, _ := testcluster.VersionsFromEnv()
	switch given := os.Getenv("KAFKACONSUMER_TEST_SARAMA_VERSION"); given {
	case "":
	case "default":
		return sarama.NewConfig().Version
	default:
		kafka = given
	}
	v, err := sarama.ParseKafkaVersion(kafka)
	if err != nil {
		panic(fmt.Sprintf("%s=%q: %s", testcluster.KafkaVersionEnv, kafka, err)) // TestMain checked it
	}
	return v
}

// needCluster skips the test under -short.
func needCluster(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a ZooKeeper and Kafka cluster; skipped under -short")
	}
}

// waitFor polls cond until it holds, failing the test with what after
// timeout.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	fetchtest.WaitFor(t, timeout, what, cond)
}

// poll polls cond until it holds or timeout passes, and reports whether it
// held: waitFor for callers that report a timeout themselves.
func poll(timeout time.Duration, cond func() bool) bool { return fetchtest.Poll(timeout, cond) }

// uniqueName returns a name for a group or topic that no other test uses.
func uniqueName(prefix string) string {
	return fmt.Sprintf("%s.%d.%06d", prefix, time.Now().UnixNano()%1e9, rand.Intn(1e6))
}

func newTestClient(t testing.TB) sarama.Client {
	t.Helper()
	return newTestClientOf(t, kafkaPeers)
}

// newTestClientOf is newTestClient for the cluster of brokers.
func newTestClientOf(t testing.TB, brokers []string) sarama.Client {
	t.Helper()
	config := sarama.NewConfig()
	config.Version = testKafkaVersion()
	config.Producer.Return.Successes = true
	config.Producer.RequiredAcks = sarama.WaitForAll
	config.Producer.Partitioner = sarama.NewRoundRobinPartitioner
	// A topic's creation outlasts sarama's 3 s default on a loaded
	// machine (seen with the soak running beside the tests): the broker
	// then answers REQUEST_TIMED_OUT while it goes on creating it.
	config.Admin.Timeout = 30 * time.Second
	client, err := sarama.NewClient(brokers, config)
	if err != nil {
		t.Fatalf("connect to kafka: %s", err)
	}
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// produce writes n messages with the values prefix-0 ... prefix-(n-1) to
// topic, spread over its partitions, and returns the values.
func produce(t testing.TB, client sarama.Client, topic, prefix string, n int) []string {
	t.Helper()
	producer, err := sarama.NewSyncProducerFromClient(client)
	if err != nil {
		t.Fatalf("producer: %s", err)
	}
	defer producer.Close()
	values := make([]string, n)
	msgs := make([]*sarama.ProducerMessage, n)
	for i := range msgs {
		values[i] = fmt.Sprintf("%s-%d", prefix, i)
		msgs[i] = &sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder(values[i])}
	}
	if err := producer.SendMessages(msgs); err != nil {
		t.Fatalf("produce %d messages to %s: %s", n, topic, err)
	}
	return values
}

// offsets returns the newest offset (high-water mark) of each partition.
func newestOffsets(t testing.TB, client sarama.Client, topic string) map[int32]int64 {
	t.Helper()
	if err := client.RefreshMetadata(topic); err != nil {
		t.Fatalf("refresh metadata of %s: %s", topic, err)
	}
	partitions, err := client.Partitions(topic)
	if err != nil {
		t.Fatalf("partitions of %s: %s", topic, err)
	}
	result := make(map[int32]int64, len(partitions))
	for _, p := range partitions {
		if result[p], err = client.GetOffset(topic, p, sarama.OffsetNewest); err != nil {
			t.Fatalf("newest offset of %s/%d: %s", topic, p, err)
		}
	}
	return result
}

// commitOffsets commits offsets for the group, as its starting point, and
// checks that they were committed. sarama's MarkOffset moves the offset to
// commit forward only, and ResetOffset back only: for a group that has
// committed nothing (its offset is -1), ResetOffset alone commits nothing.
func commitOffsets(t testing.TB, client sarama.Client, group, topic string, offsets map[int32]int64) {
	t.Helper()
	om, err := sarama.NewOffsetManagerFromClient(group, client)
	if err != nil {
		t.Fatalf("offset manager: %s", err)
	}
	for p, o := range offsets {
		pom, err := om.ManagePartition(topic, p)
		if err != nil {
			t.Fatalf("manage %s/%d: %s", topic, p, err)
		}
		pom.MarkOffset(o, "")
		pom.ResetOffset(o, "")
		pom.AsyncClose()
	}
	om.Commit()
	if err := om.Close(); err != nil {
		t.Fatalf("close offset manager: %s", err)
	}
	committed := committedOffsets(t, client, group, topic)
	for p, o := range offsets {
		if committed[p] != o {
			t.Fatalf("committed %d for %s/%d of group %s; the group's offset is %d", o, topic, p, group, committed[p])
		}
	}
}

// committedOffsets asks the group's coordinator (an OffsetFetch) for the
// group's committed offsets of topic's partitions; -1 where none.
func committedOffsets(t testing.TB, client sarama.Client, group, topic string) map[int32]int64 {
	t.Helper()
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		t.Fatalf("admin: %s", err)
	}
	partitions, err := client.Partitions(topic)
	if err != nil {
		t.Fatalf("partitions of %s: %s", topic, err)
	}
	resp, err := admin.ListConsumerGroupOffsets(group, map[string][]int32{topic: partitions})
	if err != nil {
		t.Fatalf("fetch offsets of group %s: %s", group, err)
	}
	result := make(map[int32]int64, len(partitions))
	for _, p := range partitions {
		block := resp.GetBlock(topic, p)
		if block == nil || block.Err != sarama.ErrNoError {
			t.Fatalf("fetch offset of group %s for %s/%d: %v", group, topic, p, block)
		}
		result[p] = block.Offset
	}
	return result
}

// startGroupAt commits the current end of each topic as the group's
// starting point, so that the test sees only what it produces, and returns
// those offsets per topic.
func startGroupAt(t testing.TB, client sarama.Client, group string, topics ...string) map[string]map[int32]int64 {
	t.Helper()
	result := make(map[string]map[int32]int64)
	for _, topic := range topics {
		result[topic] = newestOffsets(t, client, topic)
		commitOffsets(t, client, group, topic, result[topic])
	}
	return result
}

// checkCommitted waits until the group's committed offsets of each topic
// moved by exactly the number of messages produced to it since start.
func checkCommitted(t testing.TB, client sarama.Client, group string, start map[string]map[int32]int64, produced map[string]int) {
	t.Helper()
	for topic, before := range start {
		var moved int64
		var committed map[int32]int64
		defer func() {
			if t.Failed() {
				t.Logf("%s: committed %v, before %v, ends %v", topic, committed, before, newestOffsets(t, client, topic))
			}
		}()
		waitFor(t, 15*time.Second, fmt.Sprintf("committed offsets of %s to move by %d", topic, produced[topic]), func() bool {
			committed = committedOffsets(t, client, group, topic)
			moved = 0
			for p, o := range committed {
				moved += o - before[p]
			}
			return moved == int64(produced[topic])
		})
		end := newestOffsets(t, client, topic)
		for p, o := range committed {
			if o != end[p] {
				t.Errorf("%s/%d: committed %d, partition end %d", topic, p, o, end[p])
			}
		}
	}
}

// collector reads a consumer's Messages until it is closed, records each
// value, and acks the messages for which ack returns true (all when nil).
type collector struct {
	consumer Consumer
	ack      func(*sarama.ConsumerMessage) bool
	done     chan struct{} // closed when Messages is closed and drained

	valueCounts // times each value was received

	mu    sync.Mutex
	acked map[string]bool // guarded by mu: values acked
}

// valueCounts counts how often each message value was received. Safe for
// concurrent use; its zero value is ready to use.
type valueCounts struct {
	mu     sync.Mutex
	counts map[string]int // guarded by mu
}

// add counts one receipt of value.
func (vc *valueCounts) add(value string) {
	vc.mu.Lock()
	defer vc.mu.Unlock()
	if vc.counts == nil {
		vc.counts = make(map[string]int)
	}
	vc.counts[value]++
}

// has reports whether every value was received at least once.
func (vc *valueCounts) has(values []string) bool {
	return vc.received(values) == len(values)
}

// received returns how many of the values were received at least once.
func (vc *valueCounts) received(values []string) int {
	vc.mu.Lock()
	defer vc.mu.Unlock()
	n := 0
	for _, v := range values {
		if vc.counts[v] > 0 {
			n++
		}
	}
	return n
}

// count returns how often value was received.
func (vc *valueCounts) count(value string) int {
	vc.mu.Lock()
	defer vc.mu.Unlock()
	return vc.counts[value]
}

func collect(c Consumer, ack func(*sarama.ConsumerMessage) bool) *collector {
	col := &collector{consumer: c, ack: ack, done: make(chan struct{}), acked: make(map[string]bool)}
	go func() {
		defer close(col.done)
		for msg := range c.Messages() {
			col.add(string(msg.Value))
			if col.ack == nil || col.ack(msg) {
				c.Ack(msg)
				col.mu.Lock()
				col.acked[string(msg.Value)] = true
				col.mu.Unlock()
			}
		}
	}()
	return col
}

// wasAcked reports whether value was acked.
func (col *collector) wasAcked(value string) bool {
	col.mu.Lock()
	defer col.mu.Unlock()
	return col.acked[value]
}

// close closes the consumer and waits until its Messages channel is closed.
func (col *collector) close(t testing.TB) {
	t.Helper()
	if err := col.consumer.Close(); err != nil {
		t.Errorf("Close() = %s", err)
	}
	select {
	case <-col.done:
	case <-time.After(30 * time.Second):
		t.Fatal("Messages was not closed after Close")
	}
}

// union reports whether the collectors together received every value at
// least once, and counts the values received more than once.
func union(values []string, cols ...*collector) (all bool, duplicates int) {
	all = true
	for _, v := range values {
		n := 0
		for _, col := range cols {
			n += col.count(v)
		}
		if n == 0 {
			all = false
		}
		if n > 1 {
			duplicates += n - 1
		}
	}
	return all, duplicates
}

// testConfig is the configuration of the integration tests: short waits,
// sarama's Version set to the brokers' (testKafkaVersion), and the
// Discovery of the run (testDiscovery).
func testConfig() *Config {
	config := NewConfig()
	config.Version = testKafkaVersion()
	if testDiscovery == DiscoverFromKafka {
		config.Discovery = DiscoverFromKafka
		config.Brokers = kafkaPeers
		config.DiscoveryInterval = testDiscoveryInterval
	}
	config.MaxProcessingTime = 2 * time.Second
	config.Consumer.Offsets.AutoCommit.Interval = 100 * time.Millisecond
	return config
}

func join(t testing.TB, group string, subscription Subscription, config *Config) Consumer {
	t.Helper()
	if config == nil {
		config = testConfig()
	}
	c, err := Join(group, subscription, zookeeperPeers, config)
	if err != nil {
		t.Fatalf("Join(%s) = %s", group, err)
	}
	return c
}

// testZookeeper connects to the ZooKeeper of connection string zookeeper;
// it returns the connection, closed at the end of the test, and the
// chroot of the connection string.
func testZookeeper(t testing.TB, zookeeper string) (*zk.Conn, string) {
	t.Helper()
	return testZookeeperWith(t, zookeeper, net.DialTimeout)
}

// testZookeeperWith is testZookeeper with the go-zookeeper dialer dial
// (testcluster.Cluster.ZooKeeperDialer for a ZooKeeper over TLS).
func testZookeeperWith(t testing.TB, zookeeper string, dial zk.Dialer) (*zk.Conn, string) {
	t.Helper()
	nodes, chroot, err := parseZookeeper(zookeeper)
	if err != nil {
		t.Fatal(err)
	}
	conn, _, err := zk.Connect(nodes, 10*time.Second, zk.WithLogInfo(false), zk.WithLogger(zookeeperLogger{}), zk.WithDialer(dial))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	return conn, chroot
}

// testKazoo returns a kazoo-go connection to the test cluster's
// ZooKeeper (with its chroot); the caller closes it.
func testKazoo(t testing.TB) *kazoo.Kazoo {
	t.Helper()
	return testKazooSession(t, kazoo.NewConfig().Timeout)
}

// testKazooSession is testKazoo with a ZooKeeper session timeout of
// timeout.
func testKazooSession(t testing.TB, timeout time.Duration) *kazoo.Kazoo {
	t.Helper()
	nodes, chroot, err := parseZookeeper(zookeeperPeers)
	if err != nil {
		t.Fatal(err)
	}
	kzConfig := kazoo.NewConfig()
	kzConfig.Chroot = chroot
	kzConfig.Timeout = timeout
	kzConfig.Logger = zookeeperLogger{}
	kz, err := kazoo.NewKazoo(nodes, kzConfig)
	if err != nil {
		t.Fatal(err)
	}
	return kz
}

// checkDeregistered checks that ZooKeeper holds no registration and no
// partition claim of the closed consumers.
func checkDeregistered(t testing.TB, group string, consumers ...Consumer) {
	t.Helper()
	conn, chroot := testZookeeper(t, zookeeperPeers)
	checkDeregisteredOn(t, conn, chroot, group, consumers...)
}

// checkDeregisteredOn is checkDeregistered with the ZooKeeper connection
// conn, to the chroot.
func checkDeregisteredOn(t testing.TB, conn *zk.Conn, chroot, group string, consumers ...Consumer) {
	t.Helper()
	ids := make(map[string]bool)
	for _, c := range consumers {
		ids[c.(*consumerManager).instance.ID] = true
	}
	base := chroot + "/consumers/" + group
	registered, _, err := conn.Children(base + "/ids")
	if err != nil && err != zk.ErrNoNode {
		t.Fatalf("list %s/ids: %s", base, err)
	}
	for _, id := range registered {
		if ids[id] {
			t.Errorf("instance %s is still registered after Close", id)
		}
	}
	topics, _, err := conn.Children(base + "/owners")
	if err != nil && err != zk.ErrNoNode {
		t.Fatalf("list %s/owners: %s", base, err)
	}
	for _, topic := range topics {
		partitions, _, err := conn.Children(base + "/owners/" + topic)
		if err != nil {
			continue
		}
		for _, p := range partitions {
			owner, _, err := conn.Get(base + "/owners/" + topic + "/" + p)
			if err == nil && ids[string(owner)] {
				t.Errorf("partition %s/%s is still claimed by %s after Close", topic, p, owner)
			}
		}
	}
}

// verifyNoClusterLeaks is verifyNoLeaks for tests that close consumers.
func verifyNoClusterLeaks(t *testing.T) {
	t.Helper()
	opts := append([]goleak.Option{goleak.IgnoreCurrent()}, leakOptions...)
	t.Cleanup(func() { goleak.VerifyNone(t, opts...) })
}

func newTestAdmin(t testing.TB, client sarama.Client) sarama.ClusterAdmin {
	t.Helper()
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		t.Fatalf("admin: %s", err)
	}
	return admin
}

func createTopic(t testing.TB, admin sarama.ClusterAdmin, name string, partitions int32) {
	t.Helper()
	if err := admin.CreateTopic(name, &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: 1}, false); err != nil {
		t.Fatalf("create topic %s: %s", name, err)
	}
	// The controller answers before the brokers' metadata shows the new
	// partitions' leaders (KRaft propagates it a moment later): a
	// producer asking meanwhile may run out of retries.
	waitFor(t, 30*time.Second, fmt.Sprintf("the %d partitions of topic %s to have leaders", partitions, name), func() bool {
		return hasLeaders(admin, name, partitions)
	})
}

// hasLeaders reports whether the metadata shows a leader for each of
// the partitions of topic.
func hasLeaders(admin sarama.ClusterAdmin, topic string, partitions int32) bool {
	md, err := admin.DescribeTopics([]string{topic})
	if err != nil || len(md) != 1 || !errors.Is(md[0].Err, sarama.ErrNoError) || len(md[0].Partitions) != int(partitions) {
		return false
	}
	for _, p := range md[0].Partitions {
		if p.Leader < 0 || !errors.Is(p.Err, sarama.ErrNoError) {
			return false
		}
	}
	return true
}

// debugLogs routes the package's and sarama's logs to stderr when
// KAFKACONSUMER_TEST_LOG is set, for investigation; otherwise it leaves
// the loggers untouched. Once set, they stay set for the rest of the test
// binary: restoring them would race with the goroutines that sarama leaves
// behind to close broker connections asynchronously.
func debugLogs(t *testing.T) {
	t.Helper()
	if os.Getenv("KAFKACONSUMER_TEST_LOG") == "" {
		return
	}
	debugLogsOnce.Do(func() {
		Logger = log.New(os.Stderr, "[kafkaconsumer] ", log.LstdFlags|log.Lmicroseconds)
		sarama.Logger = log.New(os.Stderr, "[sarama] ", log.LstdFlags|log.Lmicroseconds)
	})
}

var debugLogsOnce sync.Once

// joinWithCleanup joins like join, and closes the consumer at the end of the test
// if the test did not (Close is idempotent), so that a failing test leaves
// nothing running.
func joinWithCleanup(t *testing.T, group string, subscription Subscription, config *Config) Consumer {
	t.Helper()
	c := join(t, group, subscription, config)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// waitConsuming waits until the consumer runs n partitions and every one of
// them is consuming (its partition consumer reported a high-water mark).
func waitConsuming(t *testing.T, c Consumer, n int, who string) {
	t.Helper()
	waitFor(t, 30*time.Second, fmt.Sprintf("%s to consume %d partitions", who, n), func() bool {
		stats := c.Stats()
		if len(stats) != n {
			return false
		}
		for _, s := range stats {
			if s.HighWaterMark < 0 {
				return false
			}
		}
		return true
	})
}

// receiveAll receives and acks every message of c, single or in batches
// (Config.BatchSize), until c closes them, counting their values; done is
// closed when it ends.
func receiveAll(c Consumer) (received *valueCounts, done <-chan struct{}) {
	received = new(valueCounts)
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		if c.(*consumerManager).config.BatchSize == 0 {
			for msg := range c.Messages() {
				received.add(string(msg.Value))
				c.Ack(msg)
			}
			return
		}
		for b := range c.Batches() {
			for _, msg := range b.Messages {
				received.add(string(msg.Value))
			}
			c.AckBatch(b)
		}
	}()
	return received, ended
}

// waitReceived waits up to timeout until col received every one of values,
// and returns how many it received. Unlike waitFor it does not fail the
// test: the caller reports what was lost.
func waitReceived(col *collector, values []string, timeout time.Duration) int {
	poll(timeout, func() bool { return col.has(values) })
	return col.received(values)
}

// waitCommitted polls the group's committed offsets of topic for up to 5 s
// until they are want, and returns the last ones read. Close commits before
// it returns; the grace covers the coordinator's view catching up.
func waitCommitted(t testing.TB, client sarama.Client, group, topic string, want map[int32]int64) map[int32]int64 {
	t.Helper()
	var committed map[int32]int64
	poll(5*time.Second, func() bool {
		committed = committedOffsets(t, client, group, topic)
		same := len(committed) == len(want)
		for p, o := range want {
			same = same && committed[p] == o
		}
		return same
	})
	return committed
}

// errorLog records what a consumer reports on Errors until it is closed.
type errorLog struct {
	mu   sync.Mutex
	errs []error
	done chan struct{}
}

func logErrors(c Consumer) *errorLog {
	el := &errorLog{done: make(chan struct{})}
	go func() {
		defer close(el.done)
		for err := range c.Errors() {
			el.mu.Lock()
			el.errs = append(el.errs, err)
			el.mu.Unlock()
		}
	}()
	return el
}

// summary returns the number of errors and the distinct messages among them.
func (el *errorLog) summary() string {
	el.mu.Lock()
	defer el.mu.Unlock()
	distinct := make(map[string]int)
	var order []string
	for _, err := range el.errs {
		e := err.Error()
		if distinct[e] == 0 {
			order = append(order, e)
		}
		distinct[e]++
	}
	parts := make([]string, 0, len(order))
	for _, e := range order {
		parts = append(parts, fmt.Sprintf("%dx %q", distinct[e], e))
	}
	return fmt.Sprintf("%d errors: %s", len(el.errs), strings.Join(parts, "; "))
}

// count returns how many of the errors so far match target (errors.Is).
func (el *errorLog) count(target error) int {
	el.mu.Lock()
	defer el.mu.Unlock()
	n := 0
	for _, err := range el.errs {
		if errors.Is(err, target) {
			n++
		}
	}
	return n
}

// newTopic creates a topic of the test's own on the shared cluster, with
// the given number of partitions, and returns its name once the leader of
// every partition answers for it (a ListOffsets succeeds): a broker that
// the metadata names as leader may not act as one yet, as KRaft brokers
// do right after the topic is created. Tests that own their topics and
// groups run in parallel (parallelClusterTest).
func newTopic(t testing.TB, partitions int32) string {
	t.Helper()
	client := newTestClient(t)
	topic := uniqueName(topicPrefix(t))
	createTopic(t, newTestAdmin(t, client), topic, partitions)
	var last error
	if !poll(30*time.Second, func() bool {
		if last = client.RefreshMetadata(topic); last != nil {
			return false
		}
		ids, err := client.Partitions(topic)
		if last = err; err != nil || len(ids) != int(partitions) {
			return false
		}
		for _, p := range ids {
			if _, last = client.GetOffset(topic, p, sarama.OffsetNewest); last != nil {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("timed out after 30s waiting for the leaders of %s to answer: %v", topic, last)
	}
	return topic
}

// topicPrefix is the test's name as the start of a topic name: Kafka
// allows letters, digits, '.', '_' and '-'.
func topicPrefix(t testing.TB) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-':
			return r
		}
		return '-'
	}, t.Name())
}

// parallelClusterTest skips the test under -short, and runs it in
// parallel with the other tests that own their topics and groups on the
// shared cluster. Such a test does not check for goroutine leaks itself,
// since the other tests' goroutines run beside its own: TestMain checks
// that none is left once every test has run.
func parallelClusterTest(t *testing.T) {
	t.Helper()
	needCluster(t)
	t.Parallel()
}
