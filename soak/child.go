package main

// The consumer instance of the soak, a process of its own (this binary
// started again with childEnv set), so that kill -9, SIGSTOP and SIGCONT
// hit a real process. It joins the group, acks what it is handed in a
// random order (it holds up to holdMessages and acks a random one of them),
// and writes each event as one line of JSON with one write, so that a
// kill -9 loses nothing written. It reaches ZooKeeper and each broker
// through the driver's proxies of this instance (instance). On stallSignal
// it stops reading Messages and acking, as a consumer stuck in its
// processing does, until resumeSignal.

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand"
	"net"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer"
	"github.com/kafkaconsumer/kafkaconsumer/internal/soakcheck"
)

// childEnv names the child's settings: instance name, ZooKeeper connection
// string, event file, seed, the routes to the brokers ("broker=proxy,..."),
// and the instance's setting (coordinatorZookeeper, coordinatorKafka,
// coordinatorConsumer: CoordinatorKafka with GroupProtocolConsumer, or
// coordinatorMigrate: CoordinatorZooKeeper, following the group's switch;
// coordinatorOriginal: the original-like instance, original.go),
// separated by spaces.
const childEnv = "KAFKACONSUMER_SOAK_CHILD"

// The signals that stall a child and resume it (the nemesis's stall).
const (
	stallSignal  = syscall.SIGUSR1
	resumeSignal = syscall.SIGUSR2
)

// holdMessages is how many handed-out messages a child holds before it
// acks one of them, chosen at random.
const holdMessages = 16

// eventLog appends events to a file, one write per line.
type eventLog struct {
	mu   sync.Mutex
	f    *os.File
	inst string
}

func (l *eventLog) write(kind string, topic string, partition int32, offset int64, value string) {
	l.writeAt(time.Now().UnixNano(), kind, topic, partition, offset, value)
}

// writeAt writes an event stamped at (Unix nanoseconds).
func (l *eventLog) writeAt(at int64, kind string, topic string, partition int32, offset int64, value string) {
	line, _ := json.Marshal(soakcheck.Event{Kind: kind, Time: at, Instance: l.inst,
		Topic: topic, Partition: partition, Offset: offset, Value: value})
	line = append(line, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = l.f.Write(line)
}

func childMain(settings string) int {
	// First, so that the driver's stall cannot kill a process that has
	// just started (their default action is to exit).
	stall, resume := make(chan os.Signal, 1), make(chan os.Signal, 1)
	signal.Notify(stall, stallSignal)
	signal.Notify(resume, resumeSignal)
	var inst, zookeeper, path, routes, coordinator string
	var seed int64
	if _, err := fmt.Sscan(settings, &inst, &zookeeper, &path, &seed, &routes, &coordinator); err != nil {
		fmt.Fprintf(os.Stderr, "soak child: bad settings %q: %s\n", settings, err)
		return 2
	}
	if coordinator == coordinatorOriginal {
		return originalMain(inst, zookeeper, path, routes)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak child:", err)
		return 2
	}
	defer f.Close()
	log := &eventLog{f: f, inst: inst}

	config := kafkaconsumer.NewConfig()
	dialer, err := newBrokerDialer(routes, config.Net.DialTimeout)
	if err != nil {
		fmt.Fprintf(os.Stderr, "soak child: bad settings %q: %s\n", settings, err)
		return 2
	}
	// The instance's ID, for the driver's check that the group is stable
	// (see soak.stable): the consumer's logger carries it. The log goes
	// to stderr (Info and above).
	config.Logger = slog.New(idHandler{next: slog.NewTextHandler(os.Stderr, nil), found: func(id string) {
		_ = os.WriteFile(idPath(path), []byte(id), 0o644)
	}})
	config.Version = sarama.V2_8_0_0
	config.Net.Proxy.Enable = true
	config.Net.Proxy.Dialer = dialer
	config.Zookeeper.Timeout = sessionTimeout
	config.MaxProcessingTime = maxProcessingTime
	config.Consumer.Offsets.AutoCommit.Interval = 200 * time.Millisecond
	config.DiscoveryInterval = time.Second
	if kafkaSetting(coordinator) || coordinator == coordinatorMigrate {
		// Kafka's group coordinator keeps the group, always or after the
		// group's switch says kafka. The brokers are dialed through this
		// instance's proxies (the dialer), the client ID names the
		// instance for the driver's check (stableKafka), and the group's
		// session is the soak's.
		config.ClientID = childClientID(inst, os.Getpid())
		config.Consumer.Group.Session.Timeout = sessionTimeout
		config.Consumer.Group.Heartbeat.Interval = 500 * time.Millisecond
	}
	if kafkaSetting(coordinator) {
		// No ZooKeeper.
		config.Coordinator = kafkaconsumer.CoordinatorKafka
		config.Brokers = dialer.brokers
		zookeeper = ""
	}
	if coordinator == coordinatorConsumer {
		config.GroupProtocol = kafkaconsumer.GroupProtocolConsumer
	}
	// The partitions held: from the first of OnRebalance's assignment and
	// Stats' claim (a partition may hand out before OnRebalance reports it,
	// which comes after the stops of the same rebalance), to the
	// revocation, which OnRebalance reports once it stopped handing out.
	var heldMu sync.Mutex
	holding := make(map[kafkaconsumer.TopicPartition]bool)
	hold := func(tp kafkaconsumer.TopicPartition) {
		heldMu.Lock()
		defer heldMu.Unlock()
		if !holding[tp] {
			holding[tp] = true
			log.write(soakcheck.Assigned, tp.Topic, tp.Partition, 0, "")
		}
	}
	config.OnRebalance = func(r kafkaconsumer.Rebalance) {
		heldMu.Lock()
		for _, tp := range r.Revoked {
			delete(holding, tp)
			log.write(soakcheck.Revoked, tp.Topic, tp.Partition, 0, "")
		}
		heldMu.Unlock()
		for _, tp := range r.Assigned {
			hold(tp)
		}
	}
	// held records the hold of tp before its first delivery, from Stats.
	var consumer kafkaconsumer.Consumer
	held := func(tp kafkaconsumer.TopicPartition) {
		heldMu.Lock()
		known := holding[tp]
		heldMu.Unlock()
		if known {
			return
		}
		for _, s := range consumer.Stats() {
			if s.TopicPartition == tp && s.Claimed {
				hold(tp)
			}
		}
	}
	processing := os.Getenv(processEnv) != ""
	config.DurableAcks = processing // process.go
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	consumer, err = kafkaconsumer.JoinContext(ctx, groupName, kafkaconsumer.WhitelistSubscription(regexp.MustCompile(topicPattern)), zookeeper, config)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak child: join:", err)
		return 1
	}
	go func() {
		for err := range consumer.Errors() {
			fmt.Fprintln(os.Stderr, "soak child:", err)
		}
	}()
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	shutDown := make(chan struct{}) // closed when Shutdown returned
	go func() {
		defer close(shutDown)
		<-signals
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := consumer.Shutdown(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "soak child: shutdown:", err)
		}
	}()

	if processing {
		return processMain(consumer, log, held, dialer, seed, stall, resume, shutDown)
	}
	rng := rand.New(rand.NewSource(seed))
	var pending []*sarama.ConsumerMessage
	ack := func(i int) {
		msg := pending[i]
		pending[i] = pending[len(pending)-1]
		pending = pending[:len(pending)-1]
		log.write(soakcheck.Acked, msg.Topic, msg.Partition, msg.Offset, string(msg.Value))
		consumer.Ack(msg)
	}
	tick := time.NewTicker(50 * time.Millisecond) // acks what is held when nothing comes
	defer tick.Stop()
	for {
		select {
		case msg, ok := <-consumer.Messages():
			if !ok {
				return 0
			}
			held(kafkaconsumer.TopicPartition{Topic: msg.Topic, Partition: msg.Partition})
			log.write(soakcheck.Delivered, msg.Topic, msg.Partition, msg.Offset, string(msg.Value))
			pending = append(pending, msg)
			if len(pending) >= holdMessages {
				ack(rng.Intn(len(pending)))
			}
		case <-tick.C:
			for len(pending) > 0 {
				ack(rng.Intn(len(pending)))
			}
		case <-stall:
			// Stuck: nothing read, nothing acked, until resumed (or shut
			// down: Messages is closed by then). A resume from before
			// the stall is stale.
			select {
			case <-resume:
			default:
			}
			fmt.Fprintf(os.Stderr, "soak child %s: stalled at %s with %d messages not acked\n", inst, time.Now().Format("15:04:05.000"), len(pending))
			select {
			case <-resume:
			case <-shutDown:
			}
			fmt.Fprintf(os.Stderr, "soak child %s: resumed at %s\n", inst, time.Now().Format("15:04:05.000"))
		}
	}
}

// brokerDialer dials each broker through the proxy of its route: the
// driver's proxies of this instance (Config.Net.Proxy.Dialer; the consumer
// dials through it). An address without a route fails, so that a broker
// reached around the proxies shows.
type brokerDialer struct {
	dialer  net.Dialer
	routes  map[string]string // broker address -> proxy address
	brokers []string          // the brokers' addresses, in the order of the routes
}

// newBrokerDialer reads the routes "broker=proxy,..."; its dials time out
// after timeout.
func newBrokerDialer(routes string, timeout time.Duration) (*brokerDialer, error) {
	d := &brokerDialer{dialer: net.Dialer{Timeout: timeout}, routes: make(map[string]string)}
	for _, route := range strings.Split(routes, ",") {
		broker, proxy, ok := strings.Cut(route, "=")
		if !ok {
			return nil, fmt.Errorf("bad route %q", route)
		}
		d.routes[broker] = proxy
		d.brokers = append(d.brokers, broker)
	}
	return d, nil
}

// Dial dials the proxy of addr.
func (d *brokerDialer) Dial(network, addr string) (net.Conn, error) {
	proxy, ok := d.routes[addr]
	if !ok {
		return nil, fmt.Errorf("soak child: no proxy for broker %s", addr)
	}
	return d.dialer.Dial(network, proxy)
}

// childClientID is the sarama client ID of the process pid of the
// instance named inst: with CoordinatorKafka, Kafka's group shows it as
// its member's client ID. The pid tells a restarted instance's member
// from the member of its killed process, which stays in the group until
// its session expires.
func childClientID(inst string, pid int) string { return fmt.Sprintf("soak-%s-%d", inst, pid) }

// idPath is where an instance whose event log is at path writes its ID.
func idPath(path string) string { return strings.TrimSuffix(path, ".log.jsonl") + ".id" }

// idHandler is a slog handler that writes the library's log (next, its
// process's stderr, which the driver keeps as <instance>.stderr) and finds
// the instance attribute that the consumer gives its logger, which is its
// ID.
type idHandler struct {
	next  slog.Handler
	found func(string)
}

func (h idHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.next.Enabled(ctx, l)
}
func (h idHandler) Handle(ctx context.Context, r slog.Record) error { return h.next.Handle(ctx, r) }
func (h idHandler) WithGroup(name string) slog.Handler {
	return idHandler{next: h.next.WithGroup(name), found: h.found}
}
func (h idHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	for _, a := range attrs {
		if a.Key == "instance" {
			h.found(a.Value.String())
		}
	}
	return idHandler{next: h.next.WithAttrs(attrs), found: h.found}
}
