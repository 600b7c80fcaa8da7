package kafkaconsumer

// Faults of a share group's member (GroupProtocolShare) on a real KRaft
// cluster of Kafka 4.2 or later: a member whose connections stall past
// its records' acquisition lock (frozen), or are cut for good (killed).
// Its records go to the other member once their lock expired, 0 lost; it
// hands out nothing whose lock expired, and its acks of them are refused
// on Errors().

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer/internal/testcluster"
)

// shareLockForFaults is the acquisition lock of the fault tests' groups:
// the broker's least (group.share.min.record.lock.duration.ms, 15 s).
const shareLockForFaults = 15 * time.Second

// proxiedShareConfig returns shareTestConfig with every Kafka connection
// going through a proxy of its broker, and the proxies, closed at the end
// of the test.
func proxiedShareConfig(t *testing.T) (*Config, []*testcluster.Proxy) {
	t.Helper()
	client := newTestClient(t)
	var routes []string
	var proxies []*testcluster.Proxy
	for _, b := range client.Brokers() {
		p, err := testcluster.NewProxy(b.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		proxies = append(proxies, p)
		routes = append(routes, b.Addr()+"="+p.Addr())
	}
	if len(proxies) == 1 { // the bootstrap addresses may name the broker otherwise
		for _, peer := range kafkaPeers {
			routes = append(routes, peer+"="+proxies[0].Addr())
		}
	}
	config := shareTestConfig()
	config.Net.Proxy.Enable = true
	config.Net.Proxy.Dialer = routeDialer(strings.Join(routes, ","))
	config.ChannelBufferSize = 1 // records wait in the fetch loop, not in the channel
	return config, proxies
}

// shareFault runs a fault of a share group's member A: A holds 3 records
// handed out, then fault acts on its proxies; A acks the first at once
// (the ack cannot reach the broker). Member B joins and acks what it
// receives, until it received all 20 records: those A held with a
// delivery count of 2 or more, once their lock expired. Then heal acts
// (nil: the fault lasts), and A acks the other two, past their lock: both
// are refused on Errors() (ErrShareAckRefused), and A hands out nothing
// more for 5 s. It returns A, closed at the end of the test, and its
// errors.
func shareFault(t *testing.T, fault, heal func(*testcluster.Proxy)) (Consumer, *errorLog) {
	topic := newTopic(t, 1)
	group := uniqueName("share-fault")
	setShareGroupConfig(t, group, "share.record.lock.duration.ms", "15000")
	const n = 20
	values := produce(t, newTestClient(t), topic, "fault", n)
	config, proxies := proxiedShareConfig(t)
	a := joinKafka(t, group, TopicSubscription(topic), config)
	errsA := logErrors(a)
	var held []*sarama.ConsumerMessage
	deadline := time.After(30 * time.Second)
	for len(held) < 3 {
		select {
		case msg := <-a.Messages():
			held = append(held, msg)
		case <-deadline:
			t.Fatalf("A received %d records in 30 s, want 3", len(held))
		}
	}
	for _, p := range proxies {
		fault(p)
	}
	faultAt := time.Now()
	a.Ack(held[0])

	b, shareB := joinShareT(t, group, topic)
	got := make(map[string]int) // value: B's delivery count
	deadline = time.After(shareLockForFaults + 45*time.Second)
	for len(got) < n {
		select {
		case msg := <-b.Messages():
			got[string(msg.Value)] = shareB.DeliveryCount(msg)
			b.Ack(msg)
		case err := <-b.Errors():
			t.Errorf("B: Errors(): %s", err)
		case <-deadline:
			t.Fatalf("B received %d of %d records in %s", len(got), n, shareLockForFaults+45*time.Second)
		}
	}
	t.Logf("B received all %d records %s after the fault", n, time.Since(faultAt).Round(time.Millisecond))
	for _, v := range values {
		if _, ok := got[v]; !ok {
			t.Errorf("%s lost", v)
		}
	}
	for _, msg := range held {
		if d := got[string(msg.Value)]; d < 2 {
			t.Errorf("%s, held by A, came to B with delivery count %d, want 2 or more", msg.Value, d)
		}
	}

	if heal != nil {
		for _, p := range proxies {
			heal(p)
		}
	}
	a.Ack(held[1])
	a.Ack(held[2])
	waitFor(t, 10*time.Second, "A's two acks past their lock refused on Errors()", func() bool {
		return errsA.count(ErrShareAckRefused) >= 2
	})
	quiet := time.NewTimer(5 * time.Second) // a bound on a negative: nothing comes meanwhile
	defer quiet.Stop()
	select {
	case msg := <-a.Messages():
		t.Errorf("A handed out %s at %d after the fault, delivery count %d: nothing is left to deliver", msg.Value, msg.Offset, shareDelivery(a, msg))
	case <-quiet.C:
	}
	return a, errsA
}

// shareDelivery returns msg's delivery count on c.
func shareDelivery(c Consumer, msg *sarama.ConsumerMessage) int {
	s, _ := ShareOf(c)
	return s.DeliveryCount(msg)
}

// TestIntegrationShareGroupFrozenPastLock: a member whose connections
// stall (testcluster.Proxy's Hold) past its records' 15 s lock: the other
// member receives all of them, 0 lost; resumed, the frozen one hands out
// nothing, its acks past the lock are refused, and so is the ack it made
// during the freeze (its share session ended, or the broker refused it):
// ErrShareAckRefused on Errors().
func TestIntegrationShareGroupFrozenPastLock(t *testing.T) {
	shareGroupTest(t)
	_, errsA := shareFault(t, (*testcluster.Proxy).Hold, (*testcluster.Proxy).Pass)
	waitFor(t, 30*time.Second, "the ack made during the freeze refused too", func() bool {
		return errsA.count(ErrShareAckRefused) >= 3
	})
	t.Logf("A: %s", errsA.summary())
}

// TestIntegrationShareGroupCutForGood: a member whose connections are cut
// for good (testcluster.Proxy's Reset), as a member killed: the other
// member receives its records once their lock expired, 0 lost; the cut
// one hands out nothing whose lock expired, its acks are refused, and its
// Shutdown returns within its bound.
func TestIntegrationShareGroupCutForGood(t *testing.T) {
	shareGroupTest(t)
	a, errsA := shareFault(t, (*testcluster.Proxy).Reset, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	began := time.Now()
	err := a.Shutdown(ctx)
	took := time.Since(began)
	if bound := 2*time.Second + shareTestConfig().Consumer.MaxWaitTime + 15*time.Second; took > bound {
		t.Errorf("Shutdown of the cut member took %s, want at most %s", took, bound)
	}
	t.Logf("A: Shutdown in %s (%v); %d ErrShareAckRefused on Errors()", took.Round(time.Millisecond), err, errsA.count(ErrShareAckRefused))
}

// TestIntegrationShareGroupMemberKilled: of three members, one, a child
// process that acks nothing, is killed with SIGKILL while it holds the
// records it received: the two others, in this process, receive each of
// them once its lock expired or the broker saw the connections close,
// with a delivery count of 2 or more, and ack every record produced,
// before and after the kill: 0 lost, no ack refused.
func TestIntegrationShareGroupMemberKilled(t *testing.T) {
	shareGroupTest(t)
	topic := newTopic(t, 2)
	group := uniqueName("share-killed")
	setShareGroupConfig(t, group, "share.record.lock.duration.ms", "15000")
	client := newTestClient(t)
	const n = 30
	values := produce(t, client, topic, "killed-before", n)
	a := startChild(t, t.TempDir(), "holder", childOptions{group: group, topics: []string{topic},
		kafka: true, brokers: kafkaPeers, session: childKafkaSession, maxProcessing: 2 * time.Second,
		shareGroup: true, hold: true})
	waitFor(t, 30*time.Second, "the child to hold all the records", func() bool {
		return len(a.output().received) == n
	})
	held := a.output().received
	members := startShareMembers(t, group, topic, 2, shareTestConfig, func(_ int, c Consumer, msg *sarama.ConsumerMessage) {
		c.Ack(msg)
	})
	a.kill(t)
	killedAt := time.Now()
	values = append(values, produce(t, client, topic, "killed-after", n)...)

	waitFor(t, shareLockForFaults+45*time.Second, "the survivors to receive every record", func() bool {
		return members.distinct() == len(values)
	})
	waitFor(t, 10*time.Second, "the survivors' acks to be sent", func() bool {
		for _, c := range members.consumers {
			for _, s := range c.Stats() {
				if s.Pending > 0 {
					return false
				}
			}
		}
		return true
	})
	members.stop() // its Close waits for the acks' answers
	receipts, errs := members.snapshot()
	delivery := make(map[string]int) // value: its highest delivery count
	var last time.Time               // when the last of the killed member's records came
	for _, r := range receipts {
		delivery[r.value] = max(delivery[r.value], r.delivery)
		if held[r.value] > 0 && r.at.After(last) {
			last = r.at
		}
	}
	for _, v := range values {
		if _, ok := delivery[v]; !ok {
			t.Errorf("%s lost", v)
		}
	}
	for v := range held {
		if d := delivery[v]; d < 2 {
			t.Errorf("%s, held by the killed member, came with delivery count %d, want 2 or more", v, d)
		}
	}
	for _, err := range errs {
		if errors.Is(err, ErrShareAckRefused) {
			t.Errorf("Errors(): %s", err)
		} else {
			t.Logf("Errors(): %s", err)
		}
	}
	t.Logf("the killed member's %d records came to the others within %s of the kill", len(held), last.Sub(killedAt).Round(time.Millisecond))
}
