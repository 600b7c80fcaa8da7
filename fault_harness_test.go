package kafkaconsumer

// The fault suite's harness: consumer child processes (childMain), a
// fault run that produces, watches the owners and checks the outcome, and
// the fault clusters of 3 brokers and ZooKeeper nodes.

import (
	"bufio"
	"context"
	"fmt"
	"log"
	"math/rand"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/go-zookeeper/zk"
	"github.com/kafkaconsumer/kafkaconsumer/internal/testcluster"
)

// childEnv, when set, makes the test binary run childMain instead of tests.
const childEnv = "KAFKACONSUMER_TEST_CHILD"

// childMain is a consumer process for the fault tests. It joins the group
// named by the environment, and appends to its output file, one write per
// line so that kill -9 loses nothing written:
//
//	J <instance id>           joined
//	A <topic> <partition> <t> assigned (OnRebalance)
//	R <topic> <partition> <t> revoked (OnRebalance)
//	M <value> <partition> <offset> <handed out> <t>
//	                          received, before it is processed and acked
//	E <error>                 from Errors()
//	C                         closed cleanly (after SIGTERM)
//
// With KAFKACONSUMER_CHILD_LOGS set, a test prints each child's whole
// log at its end, passed or failed.
//
// The times t are Unix nanoseconds of the line's event; <handed out> is
// when the library handed the message out (Config.Observer's HandingOut,
// just before its send on Messages), 0 when unknown. With
// KC_COORDINATOR=kafka the group is Kafka-coordinated (CoordinatorKafka,
// Config.Brokers from KC_BROKERS, KC_SESSION the group's session
// timeout); KC_KAFKA_PROXIES ("broker=proxy,...") routes its Kafka
// connections through proxies (Net.Proxy.Dialer); KC_READ_TIMEOUT sets
// Net.ReadTimeout. With KC_TIMES set it also writes, with the time in
// Unix nanoseconds,
//
//	D <ns> <partition> <offset> <value>   received
//	X <ns> <partition>                    revoked
//
// KC_INSTANCE_ID and KC_RESTART_GRACE set Config.InstanceID and
// Config.RestartGrace. With KC_WORKERS > 0 it processes messages in that many workers with random
// delays up to KC_DELAY, so acks come out of order. With KC_BATCH > 0 it
// reads batches of up to that many messages (linger 10 ms), and acks each
// batch with AckBatch (without workers). With KC_SHUTDOWN set, SIGTERM
// calls Shutdown with a context of that duration instead of Interrupt.
// KC_SLOW adds, to one message in 100 of the workers, that much more delay.
// KC_DURABLE sets Config.DurableAcks; KC_ACKS writes, after each ack,
//
//	K <partition> <offset>                acked
//
// KC_GROUP_PROTOCOL=share (with KC_COORDINATOR=kafka) makes it a member
// of a share group (GroupProtocolShare; its J line names the member ID);
// KC_HOLD makes it ack nothing, holding every record it received until
// it is killed or its locks expire.
// childKafkaSession is a child's session timeout with Kafka's group
// coordinator unless KC_COORDINATOR=kafka and KC_SESSION say otherwise.
const childKafkaSession = 6 * time.Second

func childMain() int {
	out, err := os.OpenFile(os.Getenv("KC_OUT"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var outMu sync.Mutex
	writeLine := func(format string, args ...interface{}) {
		line := fmt.Sprintf(format+"\n", args...)
		outMu.Lock()
		defer outMu.Unlock()
		_, _ = out.WriteString(line)
	}

	config := NewConfig()
	config.Version = testKafkaVersion()
	config.MaxProcessingTime = envDuration("KC_MAX_PROCESSING", 2*time.Second)
	config.Zookeeper.Timeout = envDuration("KC_SESSION", 2*time.Second)
	config.Consumer.Offsets.AutoCommit.Interval = 200 * time.Millisecond
	config.InstanceID = os.Getenv("KC_INSTANCE_ID")
	config.RestartGrace = envDuration("KC_RESTART_GRACE", 0)
	// The session with Kafka's group coordinator, should the group move
	// there (a switch) or start there (KC_COORDINATOR): a killed child
	// that had joined holds its partitions until it expires.
	config.Consumer.Group.Session.Timeout = childKafkaSession
	config.Consumer.Group.Heartbeat.Interval = 500 * time.Millisecond
	if n, _ := strconv.Atoi(os.Getenv("KC_BATCH")); n > 0 {
		config.BatchSize = n
		config.BatchLinger = 10 * time.Millisecond
	}
	config.DurableAcks = os.Getenv("KC_DURABLE") != ""
	ackLines := os.Getenv("KC_ACKS") != ""
	times := os.Getenv("KC_TIMES") != ""
	zookeeper := os.Getenv("KC_ZK")
	if os.Getenv("KC_COORDINATOR") == "kafka" {
		config.Coordinator = CoordinatorKafka
		switch os.Getenv("KC_GROUP_PROTOCOL") {
		case "consumer":
			config.GroupProtocol = GroupProtocolConsumer
		case "share":
			config.GroupProtocol = GroupProtocolShare
		}
		config.Brokers = strings.Split(os.Getenv("KC_BROKERS"), ",")
		config.DiscoveryInterval = time.Second
		config.Consumer.Group.Session.Timeout = envDuration("KC_SESSION", childKafkaSession)
		zookeeper = ""
	}
	if d := envDuration("KC_READ_TIMEOUT", 0); d > 0 {
		config.Net.ReadTimeout = d
	}
	if routes := os.Getenv("KC_KAFKA_PROXIES"); routes != "" {
		config.Net.Proxy.Enable = true
		config.Net.Proxy.Dialer = routeDialer(routes)
	}
	handedOut := new(handOutTimes)
	config.Observer = handedOut
	config.OnRebalance = func(r Rebalance) {
		now := time.Now().UnixNano()
		for _, tp := range r.Revoked {
			writeLine("R %s %d %d", tp.Topic, tp.Partition, now)
			if times {
				writeLine("X %d %d", now, tp.Partition)
			}
		}
		for _, tp := range r.Assigned {
			writeLine("A %s %d %d", tp.Topic, tp.Partition, now)
		}
	}
	// The child's log goes to its stderr file, which a failed test prints
	// the end of.
	Logger = log.New(os.Stderr, "", log.LstdFlags|log.Lmicroseconds)

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)

	consumer, err := Join(os.Getenv("KC_GROUP"), TopicSubscription(strings.Split(os.Getenv("KC_TOPICS"), ",")...), zookeeper, config)
	if err != nil {
		fmt.Fprintln(os.Stderr, "join:", err)
		return 2
	}
	writeLine("J %s", childMemberID(consumer))

	shutdown := envDuration("KC_SHUTDOWN", 0)
	go func() {
		<-signals
		if shutdown == 0 {
			consumer.Interrupt()
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), shutdown)
		defer cancel()
		if err := consumer.Shutdown(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "shutdown:", err)
		}
	}()
	go func() {
		for err := range consumer.Errors() {
			writeLine("E %s", strings.ReplaceAll(err.Error(), "\n", " "))
		}
	}()

	workers, _ := strconv.Atoi(os.Getenv("KC_WORKERS"))
	hold := os.Getenv("KC_HOLD") != ""
	if hold {
		workers = 0
	}
	delay := envDuration("KC_DELAY", 0)
	slow := envDuration("KC_SLOW", 0)
	var wg sync.WaitGroup
	work := make(chan *sarama.ConsumerMessage)
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func(seed int64) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(seed))
			for msg := range work {
				if delay > 0 {
					time.Sleep(time.Duration(rng.Int63n(int64(delay)))) // simulated processing
				}
				if slow > 0 && rng.Intn(100) == 0 {
					time.Sleep(slow) // a slow one: later messages are acked first
				}
				consumer.Ack(msg)
				if ackLines {
					writeLine("K %d %d", msg.Partition, msg.Offset)
				}
			}
		}(int64(i))
	}
	handle := func(msg *sarama.ConsumerMessage) {
		writeLine("M %s %d %d %d %d", msg.Value, msg.Partition, msg.Offset, handedOut.take(msg), time.Now().UnixNano())
		if times {
			writeLine("D %d %d %d %s", time.Now().UnixNano(), msg.Partition, msg.Offset, msg.Value)
		}
		if workers > 0 {
			work <- msg
		}
	}
	if config.BatchSize > 0 {
		for b := range consumer.Batches() {
			for _, msg := range b.Messages {
				handle(msg)
			}
			if workers == 0 && !hold {
				consumer.AckBatch(b)
			}
		}
	} else {
		for msg := range consumer.Messages() {
			handle(msg)
			if workers == 0 && !hold {
				consumer.Ack(msg)
			}
		}
	}
	close(work)
	wg.Wait()
	if err := consumer.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "close:", err)
		return 1
	}
	writeLine("C")
	return 0
}

// childMemberID returns the instance ID of a child's consumer, or its
// member ID in a share group.
func childMemberID(c Consumer) string {
	if sc, ok := c.(*shareConsumer); ok {
		return sc.memberID
	}
	return c.(*consumerManager).instance.ID
}

// handOutTimes is the Config.Observer of a child: it notes when each
// message was handed out, until the child receives it (take).
type handOutTimes struct{ at sync.Map } // *sarama.ConsumerMessage to Unix ns

func (h *handOutTimes) HandingOut(msg *sarama.ConsumerMessage) {
	h.at.Store(msg, time.Now().UnixNano())
}

func (h *handOutTimes) HandingOutBatch(b *Batch) {
	now := time.Now().UnixNano()
	for _, msg := range b.Messages {
		h.at.Store(msg, now)
	}
}

func (h *handOutTimes) Acked(*sarama.ConsumerMessage) {}

func (h *handOutTimes) TakenBack(msg *sarama.ConsumerMessage) { h.at.Delete(msg) }

// take returns when msg was handed out (0: unknown), and forgets it.
func (h *handOutTimes) take(msg *sarama.ConsumerMessage) int64 {
	if at, ok := h.at.LoadAndDelete(msg); ok {
		return at.(int64)
	}
	return 0
}

// routeDialer is a Net.Proxy.Dialer that dials each address of routes
// ("broker=proxy,...") at its proxy, and the others directly.
type routeDialer string

func (r routeDialer) Dial(network, addr string) (net.Conn, error) {
	for _, route := range strings.Split(string(r), ",") {
		if from, to, ok := strings.Cut(route, "="); ok && from == addr {
			addr = to
			break
		}
	}
	return net.DialTimeout(network, addr, 10*time.Second)
}

func envDuration(name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(name)); err == nil {
		return d
	}
	return def
}

// child is a consumer process started by a fault test.
type child struct {
	name   string
	out    string // its output file
	cmd    *exec.Cmd
	exited chan struct{} // closed when the process has exited and been reaped
	mu     sync.Mutex
	dead   bool // guarded by mu: killed or terminated by the test
	// closeTook is how long terminate waited for the child to exit.
	closeTook time.Duration
}

// childOptions are the settings of a child process.
type childOptions struct {
	zookeeper     string
	group         string
	topics        []string
	session       time.Duration
	maxProcessing time.Duration
	workers       int
	delay         time.Duration
	batch         int           // KC_BATCH: batches of up to this many messages
	shutdown      time.Duration // KC_SHUTDOWN: SIGTERM calls Shutdown with this deadline
	instanceID    string        // KC_INSTANCE_ID: Config.InstanceID
	restartGrace  time.Duration // KC_RESTART_GRACE: Config.RestartGrace
	times         bool          // KC_TIMES: timed D and X lines
	slow          time.Duration // KC_SLOW: one message in 100 takes that much longer
	durable       bool          // KC_DURABLE: Config.DurableAcks
	ackLines      bool          // KC_ACKS: a K line after each ack of a worker
	// kafka makes the group Kafka-coordinated (KC_COORDINATOR=kafka),
	// with brokers as Config.Brokers and session as the group's session
	// timeout.
	kafka   bool
	brokers []string
	// consumerProtocol makes a Kafka-coordinated group use
	// GroupProtocolConsumer (KC_GROUP_PROTOCOL=consumer).
	consumerProtocol bool
	// shareGroup makes a Kafka-coordinated group a share group
	// (KC_GROUP_PROTOCOL=share); hold makes the child ack nothing
	// (KC_HOLD).
	shareGroup, hold bool
	readTimeout      time.Duration // KC_READ_TIMEOUT: Net.ReadTimeout (0: sarama's)
	// kafkaProxies, per broker address, the proxy the child dials
	// instead (KC_KAFKA_PROXIES).
	kafkaProxies map[string]string
}

// startChild starts a consumer process; the test's cleanup kills it if it
// still runs, and waits for it.
func startChild(t *testing.T, dir, name string, opts childOptions) *child {
	t.Helper()
	c := &child{name: name, out: filepath.Join(dir, name+".out"), exited: make(chan struct{})}
	c.cmd = exec.Command(os.Args[0], "-test.run=^$")
	c.cmd.Env = append(os.Environ(),
		childEnv+"=1",
		"KC_OUT="+c.out,
		"KC_ZK="+opts.zookeeper,
		"KC_GROUP="+opts.group,
		"KC_TOPICS="+strings.Join(opts.topics, ","),
		"KC_SESSION="+opts.session.String(),
		"KC_MAX_PROCESSING="+opts.maxProcessing.String(),
		"KC_WORKERS="+strconv.Itoa(opts.workers),
		"KC_DELAY="+opts.delay.String(),
		"KC_SLOW="+opts.slow.String(),
		"KC_BATCH="+strconv.Itoa(opts.batch),
		"KC_SHUTDOWN="+opts.shutdown.String(),
		"KC_INSTANCE_ID="+opts.instanceID,
		"KC_RESTART_GRACE="+opts.restartGrace.String(),
		"KC_BROKERS="+strings.Join(opts.brokers, ","),
		"KC_READ_TIMEOUT="+opts.readTimeout.String(),
		"KC_KAFKA_PROXIES="+proxyRoutes(opts.kafkaProxies),
	)
	if opts.times {
		c.cmd.Env = append(c.cmd.Env, "KC_TIMES=1")
	}
	if opts.durable {
		c.cmd.Env = append(c.cmd.Env, "KC_DURABLE=1")
	}
	if opts.ackLines {
		c.cmd.Env = append(c.cmd.Env, "KC_ACKS=1")
	}
	if opts.kafka {
		c.cmd.Env = append(c.cmd.Env, "KC_COORDINATOR=kafka")
	}
	if opts.consumerProtocol {
		c.cmd.Env = append(c.cmd.Env, "KC_GROUP_PROTOCOL=consumer")
	}
	if opts.shareGroup {
		c.cmd.Env = append(c.cmd.Env, "KC_GROUP_PROTOCOL=share")
	}
	if opts.hold {
		c.cmd.Env = append(c.cmd.Env, "KC_HOLD=1")
	}
	stderr, err := os.Create(filepath.Join(dir, name+".stderr"))
	if err != nil {
		t.Fatal(err)
	}
	c.cmd.Stderr = stderr
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("start child %s: %s", name, err)
	}
	go func() {
		defer close(c.exited)
		_ = c.cmd.Wait()
		stderr.Close()
	}()
	t.Cleanup(func() {
		_ = c.cmd.Process.Signal(syscall.SIGCONT)
		_ = c.cmd.Process.Kill()
		<-c.exited
		if t.Failed() || os.Getenv("KAFKACONSUMER_CHILD_LOGS") != "" {
			data, _ := os.ReadFile(filepath.Join(dir, name+".stderr"))
			if len(data) > 16000 && os.Getenv("KAFKACONSUMER_CHILD_LOGS") == "" {
				data = data[len(data)-16000:]
			}
			t.Logf("stderr and log of child %s (its end):\n%s", name, data)
		}
	})
	waitFor(t, 30*time.Second, "child "+name+" to join", func() bool {
		select {
		case <-c.exited:
			data, _ := os.ReadFile(filepath.Join(dir, name+".stderr"))
			t.Fatalf("child %s exited: %s", name, data)
		default:
		}
		return c.output().id != ""
	})
	return c
}

// proxyRoutes encodes routes for KC_KAFKA_PROXIES.
func proxyRoutes(routes map[string]string) string {
	var pairs []string
	for from, to := range routes {
		pairs = append(pairs, from+"="+to)
	}
	sort.Strings(pairs)
	return strings.Join(pairs, ",")
}

func (c *child) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := c.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %s to %s: %s", sig, c.name, err)
	}
}

// kill kills the child with SIGKILL and waits until it is gone.
func (c *child) kill(t *testing.T) {
	t.Helper()
	c.stop(t, syscall.SIGKILL)
	<-c.exited
}

// stop marks the child as no longer live and sends it sig.
func (c *child) stop(t *testing.T, sig syscall.Signal) {
	t.Helper()
	c.mu.Lock()
	c.dead = true
	c.mu.Unlock()
	c.signal(t, sig)
}

// terminate sends SIGTERM and waits until the child closed its consumer and
// exited.
func (c *child) terminate(t *testing.T) {
	t.Helper()
	began := time.Now()
	c.stop(t, syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("child %s did not exit within a minute of SIGTERM", c.name)
	}
	c.mu.Lock()
	c.closeTook = time.Since(began)
	c.mu.Unlock()
	if !c.output().closed {
		t.Errorf("child %s exited without closing its consumer", c.name)
	}
}

func (c *child) alive() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.dead
}

// childOutput is what a child's output file says.
type childOutput struct {
	id       string
	received map[string]int
	owned    map[string]bool // "topic/partition" per A and R lines
	errors   []string
	closed   bool
	// deliveries are the M lines, in order; assigned the times of the A
	// lines, by partition.
	deliveries []childDelivery
	// acked holds the K lines' partitions and offsets.
	acked    map[partOffset]bool
	assigned map[int32][]int64
}

// partOffset is a message of the fault run's topic.
type partOffset struct {
	partition int32
	offset    int64
}

// childDelivery is a message a child received.
type childDelivery struct {
	partition           int32
	offset              int64
	value               string
	handedOut, received int64 // Unix ns; handedOut 0 when unknown
}

func (c *child) output() childOutput {
	o := childOutput{received: make(map[string]int), owned: make(map[string]bool), assigned: make(map[int32][]int64), acked: make(map[partOffset]bool)}
	f, err := os.Open(c.out)
	if err != nil {
		return o
	}
	defer f.Close()
	scanner := bufio.NewScanner(f)
	scanner.Buffer(make([]byte, 1<<20), 1<<20)
	for scanner.Scan() {
		kind, rest, _ := strings.Cut(scanner.Text(), " ")
		switch kind {
		case "J":
			o.id = rest
		case "M":
			f := strings.Fields(rest)
			if len(f) == 0 {
				continue
			}
			o.received[f[0]]++
			if len(f) == 5 {
				d := childDelivery{value: f[0]}
				p, _ := strconv.ParseInt(f[1], 10, 32)
				d.partition = int32(p)
				d.offset, _ = strconv.ParseInt(f[2], 10, 64)
				d.handedOut, _ = strconv.ParseInt(f[3], 10, 64)
				d.received, _ = strconv.ParseInt(f[4], 10, 64)
				o.deliveries = append(o.deliveries, d)
			}
		case "A", "R":
			f := strings.Fields(rest)
			if len(f) < 2 {
				continue
			}
			tp := f[0] + "/" + f[1]
			if kind == "R" {
				delete(o.owned, tp)
				continue
			}
			o.owned[tp] = true
			if len(f) == 3 {
				p, _ := strconv.ParseInt(f[1], 10, 32)
				at, _ := strconv.ParseInt(f[2], 10, 64)
				o.assigned[int32(p)] = append(o.assigned[int32(p)], at)
			}
		case "K":
			var p int32
			var offset int64
			if _, err := fmt.Sscan(rest, &p, &offset); err == nil {
				o.acked[partOffset{p, offset}] = true
			}
		case "E":
			o.errors = append(o.errors, rest)
		case "C":
			o.closed = true
		}
	}
	return o
}

// faultRun is the state of one fault test: its cluster, group, topic,
// produced values and children.
type faultRun struct {
	t         *testing.T
	dir       string
	zookeeper string
	brokers   []string
	client    sarama.Client
	group     string
	topic     string
	opts      childOptions

	mu       sync.Mutex
	values   []string // guarded by mu: produced so far
	children []*child // guarded by mu
	next     int      // guarded by mu: the next child's number
}

func newFaultRun(t *testing.T, zookeeper string, brokers []string, partitions int32, replication int16) *faultRun {
	t.Helper()
	return newFaultRunWith(t, zookeeper, brokers, partitions, func(sarama.Client, string) *sarama.TopicDetail {
		return &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: replication}
	})
}

// newFaultRunWith is newFaultRun with the topic of partitions partitions
// created as detail says, given the client and the group's name.
func newFaultRunWith(t *testing.T, zookeeper string, brokers []string, partitions int32, detail func(client sarama.Client, group string) *sarama.TopicDetail) *faultRun {
	t.Helper()
	r := &faultRun{t: t, dir: t.TempDir(), zookeeper: zookeeper, brokers: brokers}
	config := sarama.NewConfig()
	config.Version = testKafkaVersion()
	config.Producer.Return.Successes = true
	config.Producer.RequiredAcks = sarama.WaitForAll
	config.Producer.Retry.Max = 100
	config.Producer.Retry.Backoff = 200 * time.Millisecond
	config.Producer.Partitioner = sarama.NewRoundRobinPartitioner
	config.Metadata.Retry.Max = 100
	config.Admin.Timeout = 30 * time.Second // as in newTestClientOf
	client, err := sarama.NewClient(brokers, config)
	if err != nil {
		t.Fatalf("connect to kafka: %s", err)
	}
	t.Cleanup(func() { _ = client.Close() })
	r.client = client
	r.group = uniqueName("fault." + topicPrefix(t))
	r.topic = uniqueName("fault-" + topicPrefix(t))

	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.CreateTopic(r.topic, detail(client, r.group), false); err != nil {
		t.Fatalf("create topic %s: %s", r.topic, err)
	}
	waitFor(t, 30*time.Second, "topic "+r.topic+" to have leaders", func() bool {
		if err := client.RefreshMetadata(r.topic); err != nil {
			return false
		}
		for p := int32(0); p < partitions; p++ {
			if _, err := client.Leader(r.topic, p); err != nil {
				return false
			}
		}
		return true
	})
	r.opts = childOptions{
		zookeeper:     zookeeper,
		group:         r.group,
		topics:        []string{r.topic},
		session:       2 * time.Second,
		maxProcessing: 2 * time.Second,
	}
	return r
}

// start starts a consumer child.
func (r *faultRun) start() *child {
	r.mu.Lock()
	name := fmt.Sprintf("child%d", r.next)
	r.next++
	r.mu.Unlock()
	c := startChild(r.t, r.dir, name, r.opts)
	r.mu.Lock()
	r.children = append(r.children, c)
	r.mu.Unlock()
	return c
}

func (r *faultRun) live() []*child {
	r.mu.Lock()
	defer r.mu.Unlock()
	var result []*child
	for _, c := range r.children {
		if c.alive() {
			result = append(result, c)
		}
	}
	return result
}

// produce writes n messages with new distinct values.
func (r *faultRun) produce(n int) {
	r.t.Helper()
	r.mu.Lock()
	prefix := fmt.Sprintf("%s-%d", r.group, len(r.values))
	r.mu.Unlock()
	values := produce(r.t, r.client, r.topic, prefix, n)
	r.mu.Lock()
	r.values = append(r.values, values...)
	r.mu.Unlock()
}

// produceSteadily produces n messages in batches spread over d, in a
// goroutine that the returned function waits for.
func (r *faultRun) produceSteadily(n int, d time.Duration) (wait func()) {
	done := make(chan struct{})
	batches := 50
	go func() {
		defer close(done)
		ticker := time.NewTicker(d / time.Duration(batches))
		defer ticker.Stop()
		for i := 0; i < batches; i++ {
			r.produce(n / batches)
			<-ticker.C
		}
	}()
	return func() { <-done }
}

// received counts, over every child, how often each value was received.
func (r *faultRun) received() map[string]int {
	r.mu.Lock()
	children := append([]*child(nil), r.children...)
	r.mu.Unlock()
	counts := make(map[string]int)
	for _, c := range children {
		for v, n := range c.output().received {
			counts[v] += n
		}
	}
	return counts
}

// waitAllReceived waits until every produced value was received.
func (r *faultRun) waitAllReceived(timeout time.Duration) {
	r.t.Helper()
	waitFor(r.t, timeout, "every produced message to be received", func() bool {
		counts := r.received()
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, v := range r.values {
			if counts[v] == 0 {
				return false
			}
		}
		return true
	})
}

// owners returns the owner instance ID of each partition of the topic
// according to ZooKeeper, and the registered instance IDs.
func (r *faultRun) owners() (owners map[int32]string, registered map[string]bool, err error) {
	nodes, chroot, err := parseZookeeper(r.zookeeper)
	if err != nil {
		return nil, nil, err
	}
	conn, _, err := zk.Connect(nodes, 10*time.Second, zk.WithLogInfo(false), zk.WithLogger(zookeeperLogger{}))
	if err != nil {
		return nil, nil, err
	}
	defer conn.Close()
	base := chroot + "/consumers/" + r.group
	ids, _, err := conn.Children(base + "/ids")
	if err != nil && err != zk.ErrNoNode {
		return nil, nil, err
	}
	registered = make(map[string]bool)
	for _, id := range ids {
		registered[id] = true
	}
	partitions, _, err := conn.Children(base + "/owners/" + r.topic)
	if err != nil && err != zk.ErrNoNode {
		return nil, nil, err
	}
	owners = make(map[int32]string)
	for _, p := range partitions {
		data, _, err := conn.Get(base + "/owners/" + r.topic + "/" + p)
		if err != nil {
			continue
		}
		n, _ := strconv.Atoi(p)
		owners[int32(n)] = string(data)
	}
	return owners, registered, nil
}

// waitOwnedBy waits until every partition is owned in ZooKeeper by one of
// the given children, and returns how long that took.
func (r *faultRun) waitOwnedBy(timeout time.Duration, children ...*child) time.Duration {
	r.t.Helper()
	start := time.Now()
	ids := make(map[string]bool)
	for _, c := range children {
		ids[c.output().id] = true
	}
	partitions, err := r.client.Partitions(r.topic)
	if err != nil {
		r.t.Fatal(err)
	}
	waitFor(r.t, timeout, fmt.Sprintf("all partitions to be owned by %d given instances", len(children)), func() bool {
		if r.opts.kafka {
			return r.assignedTo(partitions, children)
		}
		owners, _, err := r.owners()
		if err != nil {
			return false
		}
		for _, p := range partitions {
			if !ids[owners[p]] {
				return false
			}
		}
		return true
	})
	return time.Since(start)
}

// assignedTo reports whether the children's assignments (from their
// OnRebalance lines) are disjoint and cover every partition: the owners of
// a Kafka-coordinated group, which keeps no owner nodes.
func (r *faultRun) assignedTo(partitions []int32, children []*child) bool {
	owner := make(map[string]bool)
	for _, c := range children {
		for tp := range c.output().owned {
			if owner[tp] {
				return false
			}
			owner[tp] = true
		}
	}
	for _, p := range partitions {
		if !owner[fmt.Sprintf("%s/%d", r.topic, p)] {
			return false
		}
	}
	return true
}

// waitSettled waits until the live children's assignments (from their
// OnRebalance lines) are disjoint and cover every partition, and returns
// them as a string.
func (r *faultRun) waitSettled(timeout time.Duration) string {
	r.t.Helper()
	return r.waitAssignment(timeout, false)
}

// waitBalanced is waitSettled that also waits until each live instance
// runs its even share of the partitions (the distribution's P/N or one
// more): the group distributed over all of them, not a moment when the
// first to start runs every partition and the others none yet. Only for
// a group of live instances alone (no departed static member, no frozen
// one).
func (r *faultRun) waitBalanced(timeout time.Duration) string {
	r.t.Helper()
	return r.waitAssignment(timeout, true)
}

// waitAssignment waits until each partition is in exactly one live
// instance's assignment, each live instance's even share when balanced,
// and returns the assignment as waitSettled does.
func (r *faultRun) waitAssignment(timeout time.Duration, balanced bool) string {
	r.t.Helper()
	partitions, err := r.client.Partitions(r.topic)
	if err != nil {
		r.t.Fatal(err)
	}
	what := "each partition in exactly one live instance's assignment"
	if balanced {
		what += ", each instance's even share"
	}
	var assignment string
	waitFor(r.t, timeout, what, func() bool {
		owner := make(map[string]string)
		var lines []string
		live := r.live()
		for _, c := range live {
			var mine []string
			for tp := range c.output().owned {
				if _, ok := owner[tp]; ok {
					return false
				}
				owner[tp] = c.name
				mine = append(mine, tp)
			}
			if least := len(partitions) / max(len(live), 1); balanced && (len(mine) < least || len(mine) > least+1) {
				return false
			}
			sort.Strings(mine)
			lines = append(lines, c.name+": "+strings.Join(mine, " "))
		}
		assignment = strings.Join(lines, "; ")
		return len(owner) == len(partitions)
	})
	return assignment
}

// finish waits until every message was received, checks that no partition
// is owned by two live children, terminates them, checks the committed
// offsets, and reports duplicates.
func (r *faultRun) finish() (duplicates int) {
	r.t.Helper()
	r.waitAllReceived(90 * time.Second)
	live := r.live()
	r.waitOwnedBy(60*time.Second, live...)
	r.waitSettled(30 * time.Second)
	// Messages that a dead instance received without committing are
	// consumed again by the live ones: wait until they committed the ends,
	// then stop them, and check again after their final commits.
	ends := newestOffsets(r.t, r.client, r.topic)
	reachedEnds := func() bool {
		committed := committedOffsets(r.t, r.client, r.group, r.topic)
		for p, end := range ends {
			if committed[p] != end {
				return false
			}
		}
		return true
	}
	waitFor(r.t, 60*time.Second, "committed offsets to reach the partition ends", reachedEnds)
	for _, c := range live {
		c.terminate(r.t)
	}
	waitFor(r.t, 10*time.Second, "committed offsets to stay at the partition ends after Close", reachedEnds)
	counts := r.received()
	r.mu.Lock()
	defer r.mu.Unlock()
	lost := 0
	for _, v := range r.values {
		switch n := counts[v]; {
		case n == 0:
			lost++
		case n > 1:
			duplicates += n - 1
		}
	}
	if lost > 0 {
		r.t.Errorf("%d of %d produced messages were never handed out", lost, len(r.values))
	}
	if r.opts.kafka {
		r.t.Logf("produced %d, duplicates %d", len(r.values), duplicates)
		return duplicates
	}
	owners, registered, err := r.owners()
	if err != nil {
		r.t.Fatal(err)
	}
	if len(owners) != 0 || len(registered) != 0 {
		r.t.Errorf("after every instance closed, ZooKeeper still holds owners %v and instances %v", owners, registered)
	}
	r.t.Logf("produced %d, duplicates %d", len(r.values), duplicates)
	return duplicates
}

func needFaults(t *testing.T) {
	t.Helper()
	needCluster(t)
	if os.Getenv("KAFKACONSUMER_SKIP_FAULTS") != "" {
		t.Skip("KAFKACONSUMER_SKIP_FAULTS is set")
	}
}

// startFaultCluster starts a cluster of the test's own, closed at cleanup,
// of the versions $KAFKA_VERSION and $ZOOKEEPER_VERSION name (as the
// shared one).
func startFaultCluster(t *testing.T, opts testcluster.Options) *testcluster.Cluster {
	t.Helper()
	opts.Logf = t.Logf
	if opts.KafkaVersion == "" {
		opts.KafkaVersion, opts.ZooKeeperVersion = testcluster.VersionsFromEnv()
	}
	opts.QuickBrokers = true // short-lived: start with less CPU
	cluster, err := testcluster.Start(opts)
	if err != nil {
		t.Fatalf("start cluster: %s", err)
	}
	t.Cleanup(func() {
		if err := cluster.Close(); err != nil {
			t.Errorf("close cluster: %s", err)
		}
	})
	return cluster
}

func brokerIndex(t *testing.T, cluster *testcluster.Cluster, addr string) int {
	t.Helper()
	peers := cluster.KafkaPeers()
	for i := range peers {
		if peers[i] == addr {
			return i
		}
	}
	t.Fatalf("broker %s is not in %v", addr, peers)
	return -1
}

// brokerSessionTimeout is the ZooKeeper session timeout of the broker of
// startSmallFaultCluster: longer than any freeze of its tests (at most
// about 20 s), so that the broker stays registered by the same session
// and the next Join finds it (brokerRegistration).
const brokerSessionTimeout = 40 * time.Second

// startSmallFaultCluster starts a fault cluster of one ZooKeeper node and
// one broker with a topic of 2 partitions (its name from prefix), and
// returns them with a producer's client, closed at the end of the test.
// The broker's ZooKeeper session outlives the tests' freezes
// (brokerSessionTimeout).
func startSmallFaultCluster(t *testing.T, prefix string) (*testcluster.Cluster, string, sarama.Client) {
	t.Helper()
	cluster := startFaultCluster(t, testcluster.Options{ZooKeepers: 1, Brokers: 1,
		BrokerConfig: map[string]string{"zookeeper.session.timeout.ms": strconv.Itoa(int(brokerSessionTimeout / time.Millisecond))}})
	topic := uniqueName(prefix)
	if err := cluster.CreateTopic(topic, 2, 1); err != nil {
		t.Fatal(err)
	}
	producerConfig := sarama.NewConfig()
	producerConfig.Producer.Return.Successes = true
	producerConfig.Producer.Partitioner = sarama.NewRoundRobinPartitioner
	client, err := sarama.NewClient(cluster.KafkaPeers(), producerConfig)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	return cluster, topic, client
}

// brokerRegistration returns the ZooKeeper session that registered the
// only broker of a cluster (the ephemeral owner of its /brokers/ids node),
// waiting until ZooKeeper answers and the broker is registered.
func brokerRegistration(t *testing.T, conn *zk.Conn) int64 {
	t.Helper()
	var owner int64
	waitFor(t, time.Minute, "the broker's registration", func() bool {
		ids, _, err := conn.Children("/brokers/ids")
		if err != nil || len(ids) != 1 {
			return false
		}
		_, stat, err := conn.Get("/brokers/ids/" + ids[0])
		if err != nil {
			return false
		}
		owner = stat.EphemeralOwner
		return true
	})
	return owner
}

// sameBrokerRegistration fails the test unless the only broker is still
// registered by the session before (brokerRegistration): a registration
// whose session expires would vanish under the next Join.
func sameBrokerRegistration(t *testing.T, conn *zk.Conn, before int64) {
	t.Helper()
	if now := brokerRegistration(t, conn); now != before {
		t.Fatalf("the broker's registration changed session (%#x to %#x): its session did not outlive the freeze", before, now)
	}
}
