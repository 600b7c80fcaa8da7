package kafkaconsumer

import (
	"encoding/json"
	"errors"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	samuelzk "github.com/samuel/go-zookeeper/zk"
	"github.com/wvanbergen/kazoo-go"
)

// originalInstance plays an instance of the original wvanbergen/kafka
// kafkaconsumer in a group, for the tests of mixed groups. It is written
// from the original's documented behaviour (SPEC.md, "The original library
// and its users", and the upgrade issue), not from its code:
//   - it registers /consumers/<group>/ids/<id> with the subscription JSON of
//     Kafka's old high-level consumer and nothing else (no "client" field);
//   - its white and black lists select Kafka's internal topics too;
//   - it distributes with the same rule as the port (sorted by preferred
//     leader and topic/partition, contiguous runs over the sorted IDs);
//   - per partition: claim (waiting for the owner to let go), start at the
//     committed offset (sarama >= 1.10 reads the committed value as the next
//     offset), hand out, and mark the offset of the last processed message
//     (N, where the port marks N+1);
//   - on stop: stop consuming, wait releaseWait (an original on sarama >=
//     1.10 takes its last message for unprocessed and waits its whole
//     MaxProcessingTime), commit, release the claim.
//
// With sarama19 set it plays an original built on sarama v1.9 or older:
// it starts at the committed offset + 1 (that sarama's NextOffset). Such
// an original does not wait on stop (its last message reads as
// processed): start it with releaseWait 0.
//
// Unlike the original, it claims the partitions of internal topics but
// does not consume them: their messages are no concern of the tests, and
// ownership is what the tests check. Its messages are "processed" at
// once: recorded in rec.
type originalInstance struct {
	id          string
	group       string
	static      []string       // the static subscription's topics, or nil
	pattern     *regexp.Regexp // the white or black list's
	whitelist   bool
	releaseWait time.Duration
	sarama19    bool

	kz       *kazoo.Kazoo
	cg       *kazoo.Consumergroup
	instance *kazoo.ConsumergroupInstance
	client   sarama.Client
	consumer sarama.Consumer
	offsets  sarama.OffsetManager
	rec      *recorder

	stop   chan struct{} // closed by close: the loop stops
	done   chan struct{} // closed by the loop when every partition is released
	closed sync.Once
}

// startOriginal registers an original instance in group and starts its
// loop. Exactly one of static and pattern is set.
func startOriginal(t testing.TB, group string, static []string, pattern *regexp.Regexp, whitelist bool, releaseWait time.Duration, sarama19 bool, rec *recorder) *originalInstance {
	t.Helper()
	id, err := newInstanceID()
	if err != nil {
		t.Fatal(err)
	}
	o := &originalInstance{id: id, group: group, static: static, pattern: pattern, whitelist: whitelist,
		releaseWait: releaseWait, sarama19: sarama19, rec: rec, stop: make(chan struct{}), done: make(chan struct{})}
	// The original's default session (kazoo's 1 s) expires on a loaded
	// machine, and an original that lost its session keeps consuming
	// what others then claim: the tests are of the hand-offs between
	// the libraries, so its session is the port's default.
	o.kz = testKazooSession(t, DefaultZookeeperTimeout)
	config := sarama.NewConfig()
	config.Version = testKafkaVersion()
	config.Consumer.Offsets.AutoCommit.Interval = 100 * time.Millisecond
	config.Consumer.Offsets.Initial = sarama.OffsetOldest
	if o.client, err = sarama.NewClient(kafkaPeers, config); err != nil {
		t.Fatal(err)
	}
	if o.consumer, err = sarama.NewConsumerFromClient(o.client); err != nil {
		t.Fatal(err)
	}
	if o.offsets, err = sarama.NewOffsetManagerFromClient(group, o.client); err != nil {
		t.Fatal(err)
	}
	o.cg = o.kz.Consumergroup(group)
	if err := o.cg.Create(); err != nil && !errors.Is(err, kazoo.ErrInstanceAlreadyRegistered) {
		if ok, _ := o.cg.Exists(); !ok {
			t.Fatal(err)
		}
	}
	o.instance = o.cg.Instance(id)
	if err := o.instance.RegisterWithSubscription(o.registration()); err != nil {
		t.Fatal(err)
	}
	go o.run(t)
	t.Cleanup(func() { o.close(t) }) // on failure; a no-op after close
	return o
}

// registration is the original's registration JSON: the layout of Kafka's
// old high-level consumer, without the port's marker.
func (o *originalInstance) registration() []byte {
	reg := map[string]any{"timestamp": strconv.FormatInt(time.Now().UnixMilli(), 10), "version": 1}
	switch {
	case o.static != nil:
		topics := make(map[string]int)
		for _, topic := range o.static {
			topics[topic] = 1
		}
		reg["pattern"], reg["subscription"] = "static", topics
	case o.whitelist:
		reg["pattern"], reg["subscription"] = "white_list", map[string]int{o.pattern.String(): 1}
	default:
		reg["pattern"], reg["subscription"] = "black_list", map[string]int{o.pattern.String(): 1}
	}
	data, _ := json.Marshal(reg)
	return data
}

// close stops the instance as the original's Close does: every partition
// stops and is released, then the registration goes.
func (o *originalInstance) close(t testing.TB) {
	t.Helper()
	o.closed.Do(func() { o.shutdown(t) })
}

func (o *originalInstance) shutdown(t testing.TB) {
	close(o.stop)
	select {
	case <-o.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("original instance %s did not stop", o.id)
	}
	if err := o.instance.Deregister(); err != nil {
		t.Errorf("deregister %s: %s", o.id, err)
	}
	_ = o.offsets.Close()
	_ = o.consumer.Close()
	_ = o.client.Close()
	_ = o.kz.Close()
}

// partitions returns the partitions of the subscription as the original
// sees them, and the watches that fire when they change.
func (o *originalInstance) partitions() (kazoo.PartitionList, []<-chan samuelzk.Event, error) {
	var (
		result  kazoo.PartitionList
		watches []<-chan samuelzk.Event
		names   []string
	)
	if o.static != nil {
		names = o.static
	} else {
		topics, changed, err := o.kz.WatchTopics()
		if err != nil {
			return nil, nil, err
		}
		watches = append(watches, changed)
		for _, topic := range topics {
			if o.pattern.MatchString(topic.Name) == o.whitelist { // internal topics too
				names = append(names, topic.Name)
			}
		}
	}
	for _, name := range names {
		partitions, changed, err := o.kz.Topic(name).WatchPartitions()
		if err != nil {
			return nil, nil, err
		}
		result = append(result, partitions...)
		watches = append(watches, changed)
	}
	return result, watches, nil
}

// run is the original's manager loop: watch, distribute, run the share,
// sleep until a watch fires.
func (o *originalInstance) run(t testing.TB) {
	defer close(o.done)
	running := make(map[TopicPartition]*originalPartition)
	defer func() {
		for _, op := range running {
			close(op.stop)
		}
		for _, op := range running {
			<-op.done
		}
	}()
	for {
		instances, instancesChanged, err := o.cg.WatchInstances()
		if err != nil {
			t.Logf("original %s: watch instances: %s", o.id, err)
			return
		}
		partitions, watches, err := o.partitions()
		if err != nil {
			t.Logf("original %s: watch partitions: %s", o.id, err)
			return
		}
		share := distributePartitionsBetweenConsumers(instances, retrievePartitionLeaders(partitions))[o.id]
		assigned := make(map[TopicPartition]bool)
		for _, p := range share {
			assigned[TopicPartition{p.Topic().Name, p.ID}] = true
		}
		var stopping []*originalPartition
		for tp, op := range running {
			if !assigned[tp] {
				close(op.stop)
				stopping = append(stopping, op)
				delete(running, tp)
			}
		}
		for _, op := range stopping {
			<-op.done
		}
		for tp := range assigned {
			if running[tp] == nil {
				op := &originalPartition{o: o, tp: tp, stop: make(chan struct{}), done: make(chan struct{})}
				running[tp] = op
				go op.run(t)
			}
		}
		merge, changed := startMerger(kazooWatches(append(watches, instancesChanged)...))
		select {
		case <-o.stop:
			merge.stop()
			return
		case <-changed:
			merge.stop()
		}
	}
}

// originalPartition is the original's partition manager.
type originalPartition struct {
	o    *originalInstance
	tp   TopicPartition
	stop chan struct{} // closed by the instance's loop
	done chan struct{} // closed by run once the claim is released
}

func (op *originalPartition) run(t testing.TB) {
	defer close(op.done)
	o := op.o
	for {
		err := o.instance.ClaimPartition(op.tp.Topic, op.tp.Partition)
		if err == nil {
			break
		}
		if errors.Is(err, kazoo.ErrPartitionClaimedByOther) {
			owner, released, err := o.cg.WatchPartitionOwner(op.tp.Topic, op.tp.Partition)
			if err == nil && owner != nil {
				select {
				case <-op.stop:
					return
				case <-released:
				}
			}
			continue
		}
		select {
		case <-op.stop:
			return
		case <-time.After(100 * time.Millisecond): // the original's retry delay (a second), shortened
		}
	}
	defer func() {
		if err := o.release(op.tp); err != nil {
			t.Errorf("original %s: release %s/%d: %s", o.id, op.tp.Topic, op.tp.Partition, err)
		}
		o.rec.note("original:"+o.id[len(o.id)-4:], "p%d released", op.tp.Partition)
	}()
	if internalTopics[op.tp.Topic] {
		<-op.stop // claimed; its messages are no concern of the tests
		return
	}

	pom, err := o.offsets.ManagePartition(op.tp.Topic, op.tp.Partition)
	if err != nil {
		t.Errorf("original %s: offset manager of %s/%d: %s", o.id, op.tp.Topic, op.tp.Partition, err)
		<-op.stop
		return
	}
	defer func() {
		err := pom.Close() // commits the last mark
		o.rec.note("original:"+o.id[len(o.id)-4:], "p%d closed its offset manager (%v)", op.tp.Partition, err)
	}()
	next, metadata := pom.NextOffset()
	committed := next
	switch {
	case next < 0:
		next = sarama.OffsetOldest
	case o.sarama19:
		next++ // the committed offset is the last one processed
	}
	pc, err := o.consumer.ConsumePartition(op.tp.Topic, op.tp.Partition, next)
	if err != nil {
		t.Errorf("original %s: consume %s/%d at %d: %s", o.id, op.tp.Topic, op.tp.Partition, next, err)
		<-op.stop
		return
	}
	who := "original:" + o.id[len(o.id)-4:]
	o.rec.note(who, "p%d starts at %d (committed %d %q)", op.tp.Partition, next, committed, metadata)
	consumed := false
	for {
		select {
		case msg := <-pc.Messages():
			o.rec.record(who, msg)
			pom.MarkOffset(msg.Offset, "") // the original's convention: the last processed
			consumed = true
		case <-op.stop:
			_ = pc.Close()
			if consumed && o.releaseWait > 0 {
				time.Sleep(o.releaseWait) // simulates the original's MaxProcessingTime pause, not synchronisation
			}
			mark, _ := pom.NextOffset()
			o.rec.note(who, "p%d stops, marked %d", op.tp.Partition, mark)
			if consumed && !o.sarama19 {
				o.rec.handOff(op.tp.Topic)
			}
			return
		}
	}
}

// release releases the instance's claim of tp. A request that fails on
// the connection (ZooKeeper slow to answer on a loaded machine, the
// session still alive) is tried again for up to a session timeout: the
// tests are of the hand-offs between the libraries, not of the
// original's handling of a lost connection.
func (o *originalInstance) release(tp TopicPartition) error {
	deadline := time.Now().Add(DefaultZookeeperTimeout)
	for {
		err := o.instance.ReleasePartition(tp.Topic, tp.Partition)
		if err == nil || errors.Is(err, kazoo.ErrPartitionNotClaimed) || time.Now().After(deadline) {
			return err
		}
		<-time.After(100 * time.Millisecond) // a retry delay, not synchronisation
	}
}
