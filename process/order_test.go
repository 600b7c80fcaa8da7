package process

// TestByKeyThroughRebalanceAndKill: ByKey at Concurrency 256 in child
// processes (childMain), through a rebalance and a kill -9.

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
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
	"github.com/kafkaconsumer/kafkaconsumer"
)

// childEnv, when set, makes the test binary run childMain.
const childEnv = "PROCESS_TEST_CHILD"

// childMain joins the group PT_GROUP to consume PT_TOPIC and runs Run by
// key at Concurrency 256 with handlers that wait up to 2 ms, until
// SIGTERM. It appends to PT_OUT, one write per line so that kill -9 loses
// nothing written, "D <value> <partition> <offset> <unix ns>" when a
// handler begins, "J" once joined and "C" once closed cleanly.
func childMain() int {
	out, err := os.OpenFile(os.Getenv("PT_OUT"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var mu sync.Mutex
	write := func(line string) {
		mu.Lock()
		defer mu.Unlock()
		_, _ = out.WriteString(line)
	}
	consumer, err := kafkaconsumer.Join(os.Getenv("PT_GROUP"), kafkaconsumer.TopicSubscription(os.Getenv("PT_TOPIC")), os.Getenv("PT_ZK"), consumerConfig())
	if err != nil {
		fmt.Fprintln(os.Stderr, "join:", err)
		return 2
	}
	write("J\n")
	go func() {
		for err := range consumer.Errors() {
			fmt.Fprintln(os.Stderr, "consumer error:", err)
		}
	}()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	err = Run(ctx, consumer, func(ctx context.Context, msg *sarama.ConsumerMessage) error {
		write(fmt.Sprintf("D %s %d %d %d\n", msg.Value, msg.Partition, msg.Offset, time.Now().UnixNano()))
		timer := time.NewTimer(time.Duration(rand.IntN(2000)) * time.Microsecond) // an I/O call
		defer timer.Stop()
		select {
		case <-timer.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}, Options{Concurrency: 256, Ordering: ByKey})
	if err != nil {
		fmt.Fprintln(os.Stderr, "run:", err)
	}
	if err := consumer.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "close:", err)
		return 1
	}
	write("C\n")
	return 0
}

// child is a process of childMain.
type child struct {
	out    string
	cmd    *exec.Cmd
	exited chan struct{} // closed once it exited and was reaped
}

func startChild(t *testing.T, dir, name, zookeeper, group, topic string) *child {
	t.Helper()
	c := &child{out: filepath.Join(dir, name+".out"), exited: make(chan struct{})}
	c.cmd = exec.Command(os.Args[0], "-test.run=^$")
	c.cmd.Env = append(os.Environ(), childEnv+"=1", "PT_OUT="+c.out, "PT_ZK="+zookeeper, "PT_GROUP="+group, "PT_TOPIC="+topic)
	stderr, err := os.Create(filepath.Join(dir, name+".stderr"))
	if err != nil {
		t.Fatal(err)
	}
	c.cmd.Stderr = stderr
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(c.exited)
		_ = c.cmd.Wait()
		stderr.Close()
	}()
	t.Cleanup(func() {
		_ = c.cmd.Process.Kill()
		<-c.exited
		if t.Failed() {
			data, _ := os.ReadFile(filepath.Join(dir, name+".stderr"))
			t.Logf("stderr of %s (its end): %s", name, data[max(0, len(data)-4000):])
		}
	})
	waitFor(t, 30*time.Second, name+" to join", func() bool {
		data, _ := os.ReadFile(c.out)
		return strings.HasPrefix(string(data), "J\n")
	})
	return c
}

// delivery is a D line.
type delivery struct {
	value     string
	partition int32
	offset    int64
	at        int64
}

// deliveries reads the D lines of the children's files.
func deliveries(t *testing.T, children ...*child) []delivery {
	t.Helper()
	var ds []delivery
	for _, c := range children {
		f, err := os.Open(c.out)
		if err != nil {
			t.Fatal(err)
		}
		scanner := bufio.NewScanner(f)
		for scanner.Scan() {
			fields := strings.Fields(scanner.Text())
			if len(fields) != 5 || fields[0] != "D" {
				continue
			}
			p, _ := strconv.Atoi(fields[2])
			o, _ := strconv.ParseInt(fields[3], 10, 64)
			at, _ := strconv.ParseInt(fields[4], 10, 64)
			ds = append(ds, delivery{fields[1], int32(p), o, at})
		}
		f.Close()
	}
	return ds
}

func distinct(ds []delivery) int {
	seen := make(map[string]bool, len(ds))
	for _, d := range ds {
		seen[d.value] = true
	}
	return len(seen)
}

// TestByKeyThroughRebalanceAndKill produces 40,000 messages of 10,000
// keys (4 in a row each) to 16 partitions in four rounds while child processes run Run by
// key at Concurrency 256 with random handler delays: a second child joins
// (a rebalance), then the first is killed -9. Among the first deliveries,
// each key's messages must begin in offset order (0 violations), and every
// value must be delivered (0 lost).
func TestByKeyThroughRebalanceAndKill(t *testing.T) {
	zookeeper, brokers := clusterPeers(t)
	topic, group := uniqueName("process.bykey"), uniqueName("process-bykey")
	createTopic(t, brokers, topic, 16)
	// Each key has 4 messages in a row, so that handlers that do not keep a
	// key's order show it.
	const keys, round, run = 10000, 10000, 4
	dir := t.TempDir()

	produceKeyed(t, brokers, topic, 0, round, keys, run)
	a := startChild(t, dir, "a", zookeeper, group, topic)
	waitFor(t, time.Minute, "a to begin", func() bool { return distinct(deliveries(t, a)) > 0 })
	produceKeyed(t, brokers, topic, round, round, keys, run)
	b := startChild(t, dir, "b", zookeeper, group, topic) // a rebalance
	produceKeyed(t, brokers, topic, 2*round, round, keys, run)
	waitFor(t, time.Minute, "b to get partitions and 25,000 values to be delivered", func() bool {
		return len(deliveries(t, b)) > 0 && distinct(deliveries(t, a, b)) >= 25000
	})
	// The last round is produced while the children handle it, and a is
	// killed midway through it.
	produced := make(chan error, 1)
	go func() { produced <- produceKeyedErr(brokers, topic, 3*round, round, keys, run) }()
	waitFor(t, time.Minute, "32,000 values to be delivered", func() bool { return distinct(deliveries(t, a, b)) >= 32000 })
	killedAt := distinct(deliveries(t, a, b))
	_ = a.cmd.Process.Kill() // kill -9 midway
	<-a.exited
	if err := <-produced; err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, "every value to be delivered", func() bool { return distinct(deliveries(t, a, b)) == 4*round })
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.exited:
	case <-time.After(time.Minute):
		t.Fatal("b did not exit within a minute of SIGTERM")
	}
	if data, _ := os.ReadFile(b.out); !strings.HasSuffix(string(data), "C\n") {
		t.Fatal("b exited without closing its consumer")
	}

	ds := deliveries(t, a, b)
	first := make(map[string]delivery, 4*round)
	for _, d := range ds {
		if f, ok := first[d.value]; !ok || d.at < f.at {
			first[d.value] = d
		}
	}
	byKey := make(map[int][]delivery, keys)
	for v, d := range first {
		i, _ := strconv.Atoi(strings.TrimPrefix(v, "v"))
		byKey[i/run%keys] = append(byKey[i/run%keys], d)
	}
	violations := 0
	for k, list := range byKey {
		sort.Slice(list, func(i, j int) bool { return list[i].offset < list[j].offset })
		for i := 1; i < len(list); i++ {
			if list[i].partition != list[0].partition {
				t.Fatalf("key k%d in two partitions", k)
			}
			if list[i].at <= list[i-1].at {
				violations++
				if violations <= 5 {
					t.Errorf("key k%d: offset %d began before offset %d", k, list[i].offset, list[i-1].offset)
				}
			}
		}
	}
	lost := 4*round - len(first)
	t.Logf("%d values of %d keys on 16 partitions: %d deliveries, %d duplicates, %d lost, %d order violations per key among first deliveries; a killed at %d delivered",
		4*round, keys, len(ds), len(ds)-len(first), lost, violations, killedAt)
	if violations > 0 || lost > 0 {
		t.Fatalf("%d order violations, %d lost", violations, lost)
	}
}
