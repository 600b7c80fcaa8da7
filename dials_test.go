package kafkaconsumer

// Dials into a black hole: an address where a connect neither completes
// nor is refused (testcluster.ProxyBlackHole), which holds a dial until
// Net.DialTimeout (30 s by default). Close and Shutdown keep their bounds,
// and JoinContext returns when its ctx is done, while dials hang there.

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/go-zookeeper/zk"
	"github.com/kafkaconsumer/kafkaconsumer/internal/testcluster"
)

// kafkaProxies routes the Kafka connections of a consumer through proxies,
// one per broker address, made as the consumer first dials the address
// (testHooks.kafkaAddress), and black-holes them on demand. Its proxies
// are closed at the end of the test.
type kafkaProxies struct {
	t     *testing.T
	mu    sync.Mutex                    // guards the fields below
	byAdr map[string]*testcluster.Proxy // by broker address
	// fault is the mode of the proxies (new ones too) once set:
	// (*testcluster.Proxy).BlackHole, or holdProxy; nil: they pass.
	fault func(*testcluster.Proxy) error
	// faulted counts the dials made once fault was set.
	faulted atomic.Int64
}

// holdProxy sets p to ProxyHold.
func holdProxy(p *testcluster.Proxy) error {
	p.Hold()
	return nil
}

// newKafkaProxies returns the proxies of a test, in the mode fault sets
// (nil: they pass).
func newKafkaProxies(t *testing.T, fault func(*testcluster.Proxy) error) *kafkaProxies {
	kp := &kafkaProxies{t: t, byAdr: make(map[string]*testcluster.Proxy), fault: fault}
	t.Cleanup(func() {
		kp.mu.Lock()
		defer kp.mu.Unlock()
		for _, p := range kp.byAdr {
			_ = p.Close()
		}
	})
	return kp
}

// address is the testHooks.kafkaAddress of the consumer: the address of
// the proxy to addr. Called on sarama's goroutines.
func (kp *kafkaProxies) address(addr string) string {
	kp.mu.Lock()
	defer kp.mu.Unlock()
	p := kp.byAdr[addr]
	if p == nil {
		var err error
		if p, err = testcluster.NewProxy(addr); err != nil {
			kp.t.Errorf("proxy to broker %s: %v", addr, err)
			return addr
		}
		kp.byAdr[addr] = p
		if kp.fault != nil {
			if err := kp.fault(p); err != nil {
				kp.t.Errorf("proxy to broker %s: %v", addr, err)
			}
		}
	}
	if kp.fault != nil {
		kp.faulted.Add(1)
	}
	return p.Addr()
}

// blackHole cuts every connection through the proxies (a reset, so that
// the clients notice at once and dial again) and black-holes them.
func (kp *kafkaProxies) blackHole(t *testing.T) {
	t.Helper()
	kp.faultAll(t, func(p *testcluster.Proxy) error {
		p.Reset()
		return p.BlackHole()
	})
}

// hold makes every connection through the proxies, and every new one,
// hang: bytes and connections are held, nothing is answered.
func (kp *kafkaProxies) hold(t *testing.T) {
	t.Helper()
	kp.faultAll(t, holdProxy)
}

// faultAll applies fault to every proxy, and to the new ones from now on.
func (kp *kafkaProxies) faultAll(t *testing.T, fault func(*testcluster.Proxy) error) {
	t.Helper()
	kp.mu.Lock()
	defer kp.mu.Unlock()
	if len(kp.byAdr) == 0 {
		t.Fatal("no Kafka connection went through the proxies")
	}
	for addr, p := range kp.byAdr {
		if err := fault(p); err != nil {
			t.Fatalf("proxy to broker %s: %v", addr, err)
		}
	}
	kp.fault = fault
}

// returnsWithin runs f (a Close, a Shutdown, a JoinContext) and checks
// that it returned within bound. Unlike stopWithin it waits for f for
// minutes, so that a run of the test before the fix measured how late
// f returned.
func returnsWithin(t *testing.T, what string, bound time.Duration, f func() error) (time.Duration, error) {
	t.Helper()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- f() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(bound + 5*time.Minute):
		t.Fatalf("%s did not return within %s", what, bound+5*time.Minute)
	}
	took := time.Since(start)
	t.Logf("%s took %s (bound %s): %v", what, took.Round(time.Millisecond), bound, err)
	if took > bound {
		t.Errorf("%s took %s; want at most %s", what, took.Round(time.Millisecond), bound)
	}
	return took, err
}

// TestFaultStopBoundedWhenBlackHoled: Close and Shutdown keep their
// bounds (docs/shutdown.md) while the consumer's dials to the brokers hang
// in a black hole, with Net.DialTimeout at its 30 s default: Close within
// MaxProcessingTime + session timeout + 10 s, Shutdown within its
// context's deadline + 5 s; and so with ZooKeeper black-holed too. Each
// run holds a message unacked, black-holes what it names once the
// consumer consumes, and stops once a dial hangs in the black hole.
func TestFaultStopBoundedWhenBlackHoled(t *testing.T) {
	needFaults(t)
	t.Parallel() // on the shared cluster, through proxies of its own
	debugLogs(t)
	if d := NewConfig().Net.DialTimeout; d != 30*time.Second {
		t.Fatalf("sarama's default Net.DialTimeout is %s; the test expects 30 s", d)
	}
	const deadline = 2 * time.Second // the Shutdowns' context
	for _, tc := range []struct {
		name      string
		zookeeper bool // black-hole ZooKeeper too
		shutdown  bool // Shutdown rather than Close
	}{
		{"Close/brokers", false, false},
		{"Shutdown/brokers", false, true},
		{"Close/brokers+zookeeper", true, false},
		{"Shutdown/brokers+zookeeper", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			config := testConfig()
			config.MaxProcessingTime = time.Second
			if tc.shutdown {
				config.MaxProcessingTime = time.Minute // only the context ends the wait for acks
			}
			run := startBlackHoleRun(t, config, tc.zookeeper)
			c, kp := run.consumer, run.kafka
			if tc.zookeeper {
				if err := run.zookeeper.BlackHole(); err != nil {
					t.Fatal(err)
				}
			}
			kp.blackHole(t)
			waitFor(t, 30*time.Second, "a dial to hang in the black hole", func() bool { return kp.faulted.Load() > 0 })

			var err error
			if tc.shutdown {
				ctx, cancel := context.WithTimeout(context.Background(), deadline)
				defer cancel()
				_, err = returnsWithin(t, "Shutdown", deadline+5*time.Second, func() error { return c.Shutdown(ctx) })
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("Shutdown = %v, want an error wrapping context.DeadlineExceeded", err)
				}
			} else {
				// Acked now, the held message gives the final commit
				// something the commit rounds could not commit before
				// the black hole.
				c.Ack(run.held)
				bound := config.MaxProcessingTime + config.Zookeeper.Timeout + 10*time.Second
				_, err = returnsWithin(t, "Close", bound, c.Close)
				if err == nil {
					t.Error("Close = nil; want the final commits' ErrCommitTimeout (the brokers are black-holed)")
				}
			}
			t.Logf("dials into the black hole: %d", kp.faulted.Load())
			waitClosed(t, run.messages.done, "Messages not closed after the consumer stopped")
			if !tc.zookeeper {
				checkDeregistered(t, run.group, c)
			}
		})
	}
}

// blackHoleRun is a consumer of startBlackHoleRun.
type blackHoleRun struct {
	consumer  Consumer
	group     string
	messages  *collector
	kafka     *kafkaProxies
	zookeeper *testcluster.Proxy // nil when ZooKeeper is dialed directly
	// held is the message the run received and did not ack.
	held *sarama.ConsumerMessage
}

// startBlackHoleRun joins a new group on a new topic of 2 partitions,
// with every Kafka connection through a kafkaProxies, and with
// throughZookeeperProxy its ZooKeeper connections through a proxy too (the
// others dial ZooKeeper directly); it returns once the consumer received
// every message of a batch, holding one of them unacked.
func startBlackHoleRun(t *testing.T, config *Config, throughZookeeperProxy bool) blackHoleRun {
	t.Helper()
	topic := newTopic(t, 2)
	client := newTestClient(t)
	values := produce(t, client, topic, "bh", 20)
	zookeeper := zookeeperPeers
	var zkProxy *testcluster.Proxy
	if throughZookeeperProxy {
		zkProxy, zookeeper = zookeeperProxy(t, zookeeperPeers)
	}
	kp := newKafkaProxies(t, nil)
	group := uniqueName("bh")
	c, err := joinWithHooks(group, TopicSubscription(topic), zookeeper, config, &testHooks{kafkaAddress: kp.address})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	var held atomic.Pointer[sarama.ConsumerMessage]
	col := collect(c, func(msg *sarama.ConsumerMessage) bool {
		if string(msg.Value) != values[5] {
			return true
		}
		held.Store(msg)
		return false
	})
	waitFor(t, 30*time.Second, "the messages", func() bool { return col.has(values) && held.Load() != nil })
	return blackHoleRun{consumer: c, group: group, messages: col, kafka: kp, zookeeper: zkProxy, held: held.Load()}
}

// TestFaultJoinContextBlackHoled: JoinContext returns promptly with
// ctx's error, leaving nothing registered, when its ctx is cancelled
// while its first dial to Kafka hangs in a black hole (Net.DialTimeout at
// its 30 s default, sarama's first connection), while the brokers accept
// connections and answer nothing (Net.ReadTimeout at its 30 s default),
// and while its first ZooKeeper session waits for a black-holed
// ZooKeeper.
func TestFaultJoinContextBlackHoled(t *testing.T) {
	needFaults(t)
	t.Parallel() // on the shared cluster, through proxies of its own
	debugLogs(t)
	const bound = 2 * time.Second // from the cancel

	for _, tc := range []struct {
		name  string
		fault func(*testcluster.Proxy) error
		what  string
	}{
		{"brokers/black-holed", (*testcluster.Proxy).BlackHole, "its first Kafka dial hangs"},
		{"brokers/held", holdProxy, "the brokers answer nothing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			kp := newKafkaProxies(t, tc.fault)
			dialing := make(chan struct{})
			var once sync.Once
			hooks := &testHooks{kafkaAddress: func(addr string) string {
				a := kp.address(addr)
				once.Do(func() { close(dialing) })
				return a
			}}
			group := uniqueName("bh.join")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			joined := make(chan error, 1)
			go func() {
				c, err := joinContextWithHooks(ctx, group, TopicSubscription(uniqueName("bh-join")), zookeeperPeers, testConfig(), hooks)
				if c != nil {
					_ = c.Close()
				}
				joined <- err
			}()
			select {
			case <-dialing:
			case err := <-joined:
				t.Fatalf("JoinContext returned before it dialed Kafka: %v", err)
			case <-time.After(30 * time.Second):
				t.Fatal("JoinContext did not dial Kafka within 30 s")
			}
			_, err := returnsWithin(t, "JoinContext cancelled while "+tc.what, bound, func() error {
				cancel()
				return <-joined
			})
			if !errors.Is(err, context.Canceled) {
				t.Errorf("JoinContext = %v, want an error wrapping context.Canceled", err)
			}
			checkGroupEmpty(t, group)
		})
	}

	t.Run("zookeeper", func(t *testing.T) {
		t.Parallel()
		proxy, throughProxy := zookeeperProxy(t, zookeeperPeers)
		if err := proxy.BlackHole(); err != nil {
			t.Fatal(err)
		}
		group := uniqueName("bh.join")
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		joined := make(chan error, 1)
		go func() {
			c, err := JoinContext(ctx, group, TopicSubscription(uniqueName("bh-join")), throughProxy, testConfig())
			if c != nil {
				_ = c.Close()
			}
			joined <- err
		}()
		// The first session waits up to Zookeeper.Timeout (6 s): cancel
		// within it, once a dial had the time to start.
		select {
		case err := <-joined:
			t.Fatalf("JoinContext returned with ZooKeeper black-holed: %v", err)
		case <-time.After(1500 * time.Millisecond):
		}
		_, err := returnsWithin(t, "JoinContext cancelled while ZooKeeper is black-holed", bound, func() error {
			cancel()
			return <-joined
		})
		if !errors.Is(err, context.Canceled) {
			t.Errorf("JoinContext = %v, want an error wrapping context.Canceled", err)
		}
		checkGroupEmpty(t, group)
	})
}

// checkGroupEmpty checks that no instance of group is registered.
func checkGroupEmpty(t *testing.T, group string) {
	t.Helper()
	conn, chroot := testZookeeper(t, zookeeperPeers)
	ids, _, err := conn.Children(chroot + "/consumers/" + group + "/ids")
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		t.Fatal(err)
	}
	if len(ids) > 0 {
		t.Errorf("instances %v registered in group %s after JoinContext failed", ids, group)
	}
}
