package kafkaconsumer

// A share group's acknowledgements beyond Ack, on a real KRaft cluster of
// Kafka 4.2 or later: RELEASE, REJECT, RENEW, and the acks that cannot
// count.

import (
	"errors"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer/internal/testcluster"
)

// receiveShare receives from c until a message comes, failing after
// timeout.
func receiveShare(t *testing.T, c Consumer, timeout time.Duration) *sarama.ConsumerMessage {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case msg := <-c.Messages():
			return msg
		case err := <-c.Errors():
			t.Logf("Errors(): %s", err)
		case <-timer.C:
			t.Fatalf("no message within %s", timeout)
		}
	}
}

// joinShareT joins group on topic as a share group's member, closed at
// the end of the test.
func joinShareT(t *testing.T, group, topic string) (Consumer, Share) {
	t.Helper()
	c := joinKafka(t, group, TopicSubscription(topic), shareTestConfig())
	share, ok := ShareOf(c)
	if !ok {
		t.Fatal("ShareOf(the consumer of a share group) = false")
	}
	return c, share
}

// TestIntegrationShareGroupReleaseRedelivers: a released record comes
// again, to either member of two, with a delivery count one higher; a
// rejected one never comes again.
func TestIntegrationShareGroupReleaseRedelivers(t *testing.T) {
	shareGroupTest(t)
	topic := newTopic(t, 1)
	group := uniqueName("share-release")
	produce(t, newTestClient(t), topic, "release", 2)
	a, shareA := joinShareT(t, group, topic)
	first := receiveShare(t, a, 30*time.Second)
	if n := shareA.DeliveryCount(first); n != 1 {
		t.Errorf("DeliveryCount of a first delivery = %d, want 1", n)
	}
	second := receiveShare(t, a, 30*time.Second)
	b, shareB := joinShareT(t, group, topic)
	shareA.Release(first)
	shareA.Reject(second)
	if n := shareA.DeliveryCount(first); n != 0 {
		t.Errorf("DeliveryCount after Release = %d, want 0 (not held)", n)
	}
	var again *sarama.ConsumerMessage
	var by Consumer
	select {
	case again = <-a.Messages():
		by = a
	case again = <-b.Messages():
		by = b
	case <-time.After(30 * time.Second):
		t.Fatal("the released record did not come again within 30 s")
	}
	if string(again.Value) != string(first.Value) || again.Offset != first.Offset {
		t.Fatalf("after a Release a member received %s at %d, want the released %s at %d", again.Value, again.Offset, first.Value, first.Offset)
	}
	share := shareA
	if by == b {
		share = shareB
	}
	if n := share.DeliveryCount(again); n != 2 {
		t.Errorf("DeliveryCount of a released record delivered again = %d, want 2", n)
	}
	by.Ack(again)
	// The rejected record never comes again, to either member.
	timer := time.NewTimer(3 * time.Second)
	defer timer.Stop()
	for {
		select {
		case msg := <-a.Messages():
			t.Errorf("member a received %s at %d after the Release and Reject", msg.Value, msg.Offset)
		case msg := <-b.Messages():
			t.Errorf("member b received %s at %d after the Release and Reject; the rejected one is %s", msg.Value, msg.Offset, second.Value)
		case err := <-a.Errors():
			t.Errorf("a: Errors(): %s", err)
		case err := <-b.Errors():
			t.Errorf("b: Errors(): %s", err)
		case <-timer.C:
			return
		}
	}
}

// TestIntegrationShareGroupAckRefused: an Ack of a record acked already,
// and an Ack of a record of another consumer, are reported on Errors()
// wrapping ErrShareAckRefused, once each.
func TestIntegrationShareGroupAckRefused(t *testing.T) {
	shareGroupTest(t)
	topic := newTopic(t, 1)
	produce(t, newTestClient(t), topic, "refused", 1)
	c, _ := joinShareT(t, uniqueName("share-refused"), topic)
	msg := receiveShare(t, c, 30*time.Second)
	c.Ack(msg)
	c.Ack(msg)
	foreign := *msg
	c.Ack(&foreign)
	for i := 0; i < 2; i++ {
		select {
		case err := <-c.Errors():
			if !errors.Is(err, ErrShareAckRefused) {
				t.Errorf("Errors() = %v, want ErrShareAckRefused", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%d refusals reported within 10 s, want 2", i)
		}
	}
	select {
	case err := <-c.Errors():
		t.Errorf("a third error: %s", err)
	case <-time.After(500 * time.Millisecond): // nothing more comes: a bound on a negative, not a synchronisation
	}
}

// setShareGroupConfig sets the group config name of group to value
// (testcluster.SetGroupConfig).
func setShareGroupConfig(t *testing.T, group, name, value string) {
	t.Helper()
	if err := testcluster.SetGroupConfig(kafkaPeers, group, name, value); err != nil {
		t.Fatal(err)
	}
}

// expectNothing fails the test if any of cs hands out a message or
// reports an error before until.
func expectNothing(t *testing.T, until time.Time, cs ...Consumer) {
	t.Helper()
	for _, c := range cs {
		for {
			left := time.Until(until)
			if left <= 0 {
				break
			}
			timer := time.NewTimer(left)
			select {
			case msg := <-c.Messages():
				t.Errorf("received %s at %d (delivery of a record held and renewed?)", msg.Value, msg.Offset)
			case err := <-c.Errors():
				t.Errorf("Errors(): %s", err)
			case <-timer.C:
			}
			timer.Stop()
		}
	}
}

// TestIntegrationShareGroupRenew: a record renewed before its lock (15 s
// for the group here) expired is still held after it would have expired:
// no member receives it again, and its Ack 20 s after the delivery is
// accepted.
func TestIntegrationShareGroupRenew(t *testing.T) {
	shareGroupTest(t)
	topic := newTopic(t, 1)
	group := uniqueName("share-renew")
	setShareGroupConfig(t, group, "share.record.lock.duration.ms", "15000")
	produce(t, newTestClient(t), topic, "renew", 1)
	a, shareA := joinShareT(t, group, topic)
	b, _ := joinShareT(t, group, topic)
	msg := receiveShare(t, a, 30*time.Second)
	delivered := time.Now()
	// Waiting for the lock's time to pass is what is tested, not a
	// synchronisation: nothing must come meanwhile.
	expectNothing(t, delivered.Add(10*time.Second), a, b)
	shareA.Renew(msg)
	expectNothing(t, delivered.Add(20*time.Second), a, b)
	if n := shareA.DeliveryCount(msg); n != 1 {
		t.Errorf("DeliveryCount of the renewed record = %d, want 1 (still held)", n)
	}
	a.Ack(msg)
	expectNothing(t, time.Now().Add(3*time.Second), a, b)
}

// TestIntegrationShareGroupReleasedToTheLimitIsArchived: a record
// released as often as the group's share.delivery.count.limit allows is
// archived: it never comes again, and the next record of its partition
// does.
func TestIntegrationShareGroupReleasedToTheLimitIsArchived(t *testing.T) {
	shareGroupTest(t)
	topic := newTopic(t, 1)
	group := uniqueName("share-limit")
	setShareGroupConfig(t, group, "share.delivery.count.limit", "2")
	client := newTestClient(t)
	produce(t, client, topic, "limit", 1)
	c, share := joinShareT(t, group, topic)
	var archived *sarama.ConsumerMessage
	for delivery := 1; delivery <= 2; delivery++ {
		msg := receiveShare(t, c, 30*time.Second)
		if archived != nil && msg.Offset != archived.Offset {
			t.Fatalf("delivery %d: got offset %d, want the released record at %d again", delivery, msg.Offset, archived.Offset)
		}
		if n := share.DeliveryCount(msg); n != delivery {
			t.Fatalf("delivery %d of %s: DeliveryCount = %d", delivery, msg.Value, n)
		}
		archived = msg
		share.Release(msg)
	}
	produce(t, client, topic, "after", 1)
	next := receiveShare(t, c, 30*time.Second)
	if next.Offset == archived.Offset || string(next.Value) == string(archived.Value) {
		t.Fatalf("a record released at the delivery count limit came again: %s at %d, delivery %d", next.Value, next.Offset, share.DeliveryCount(next))
	}
	if next.Offset != archived.Offset+1 {
		t.Errorf("after the archived record at %d, got offset %d, want the next, %d", archived.Offset, next.Offset, archived.Offset+1)
	}
	c.Ack(next)
}
