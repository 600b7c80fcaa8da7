package kafkaconsumer

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
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

// recorder records the messages that the instances of a mixed group
// processed, each with the step of the test it was processed in, and the
// instances' starts and ends of partitions, so that a failure can name
// who processed each copy of a duplicate, and from which start.
type recorder struct {
	mu   sync.Mutex
	step string                  // the step running now (setStep)
	by   map[string][]processing // "topic/partition/offset" -> each processing of it, in order
	// timedOut holds "who topic/partition" for each instance that
	// reported the final commit of a partition as timed out
	// (commitTimedOut).
	timedOut map[string]bool
	events   []string // the instances' starts and ends of partitions (note)
}

// processing is one processing of a message: by which instance, in which
// step of the test.
type processing struct{ who, step string }

func (p processing) String() string { return p.who + " in " + strconv.Quote(p.step) }

func newRecorder() *recorder {
	return &recorder{by: make(map[string][]processing), timedOut: make(map[string]bool)}
}

func messageKey(topic string, partition int32, offset int64) string {
	return fmt.Sprintf("%s/%d/%d", topic, partition, offset)
}

// setStep names the step that the messages recorded from now on are
// processed in.
func (r *recorder) setStep(step string) {
	r.mu.Lock()
	r.step = step
	r.mu.Unlock()
}

func (r *recorder) record(who string, msg *sarama.ConsumerMessage) {
	key := messageKey(msg.Topic, msg.Partition, msg.Offset)
	r.mu.Lock()
	r.by[key] = append(r.by[key], processing{who, r.step})
	r.mu.Unlock()
}

// commitTimedOut records that who reported the final commit of the
// partition as not confirmed in time (ErrCommitTimeout): the next owner
// may process again what who processed after the last commit that Kafka
// applied (see check).
func (r *recorder) commitTimedOut(who, topic string, partition int32) {
	r.mu.Lock()
	r.timedOut[who+" "+topic+"/"+strconv.Itoa(int(partition))] = true
	r.mu.Unlock()
}

// note records an event of an instance (a partition's start or end), with
// the step it happened in.
func (r *recorder) note(who, format string, args ...any) {
	r.mu.Lock()
	r.events = append(r.events, fmt.Sprintf("%s in %q: %s", who, r.step, fmt.Sprintf(format, args...)))
	r.mu.Unlock()
}

// noted returns the events of partition (as note wrote them, "p<N> "
// after the instance and step), and those of no partition ("p* ").
func (r *recorder) noted(partition int32) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var result []string
	tag := fmt.Sprintf(": p%d ", partition)
	for _, e := range r.events {
		if strings.Contains(e, tag) || strings.Contains(e, ": p* ") {
			result = append(result, e)
		}
	}
	return result
}

// duplicateRanges describes the messages of topic processed more than
// once as runs of consecutive offsets of a partition processed by the
// same instances in the same steps: "p3 120-171 (52): original:ab12 in
// "+port", port:cd34 in "-original"".
func (r *recorder) duplicateRanges(topic string) []string {
	r.mu.Lock()
	type dup struct {
		partition int32
		offset    int64
		by        string
	}
	var dups []dup
	for key, copies := range r.by {
		if len(copies) < 2 {
			continue
		}
		var partition int32
		var offset int64
		rest, ok := strings.CutPrefix(key, topic+"/")
		if !ok {
			continue
		}
		if _, err := fmt.Sscanf(rest, "%d/%d", &partition, &offset); err != nil {
			continue
		}
		by := make([]string, len(copies))
		for i, c := range copies {
			by[i] = c.String()
		}
		dups = append(dups, dup{partition, offset, strings.Join(by, ", ")})
	}
	r.mu.Unlock()
	sort.Slice(dups, func(i, j int) bool {
		if dups[i].partition != dups[j].partition {
			return dups[i].partition < dups[j].partition
		}
		return dups[i].offset < dups[j].offset
	})
	var result []string
	for i := 0; i < len(dups); {
		j := i + 1
		for j < len(dups) && dups[j].partition == dups[i].partition && dups[j].offset == dups[j-1].offset+1 && dups[j].by == dups[i].by {
			j++
		}
		result = append(result, fmt.Sprintf("p%d %d-%d (%d): %s", dups[i].partition, dups[i].offset, dups[j-1].offset, j-i, dups[i].by))
		i = j
	}
	return result
}

// missed returns the first max of produced that were never processed.
func (r *recorder) missed(produced []string, max int) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var result []string
	for _, key := range produced {
		if len(r.by[key]) == 0 && len(result) < max {
			result = append(result, key)
		}
	}
	return result
}

// check returns how many of the produced messages were not processed, how
// many times messages were processed more than once, and how many of
// those repeats are excused: the documented re-delivery after a final
// commit that was not confirmed in time (ErrCommitTimeout), a message
// processed again after the instance that processed it before reported
// that of its partition (commitTimedOut).
func (r *recorder) check(produced []string) (missing, duplicates, excused int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, key := range produced {
		copies := r.by[key]
		if len(copies) == 0 {
			missing++
			continue
		}
		duplicates += len(copies) - 1
		partition := key[:strings.LastIndexByte(key, '/')]
		for i := 1; i < len(copies); i++ {
			if r.timedOut[copies[i-1].who+" "+partition] {
				excused++
			}
		}
	}
	return missing, duplicates, excused
}

// TestRecorderDuplicateRanges checks the diagnosis of a failed mixed
// test: duplicates gathered into runs of a partition processed by the
// same instances in the same steps.
func TestRecorderDuplicateRanges(t *testing.T) {
	t.Parallel()
	r := newRecorder()
	process := func(who string, partition int32, from, to int64) {
		for offset := from; offset <= to; offset++ {
			r.record(who, &sarama.ConsumerMessage{Topic: "t", Partition: partition, Offset: offset})
		}
	}
	r.setStep("one")
	process("original:a", 1, 10, 20)
	process("original:a", 2, 5, 5)
	r.setStep("two")
	process("port:b", 1, 12, 14)
	process("port:b", 1, 16, 20)
	process("port:b", 2, 5, 6)
	got := strings.Join(r.duplicateRanges("t"), "; ")
	want := `p1 12-14 (3): original:a in "one", port:b in "two"; p1 16-20 (5): original:a in "one", port:b in "two"; p2 5-5 (1): original:a in "one", port:b in "two"`
	if got != want {
		t.Errorf("duplicateRanges = %s\nwant %s", got, want)
	}
	r.note("original:a", "p1 starts at %d", 10)
	r.note("port:b", "p* a warning")
	r.note("port:b", "p2 starts at %d", 5)
	if got, want := strings.Join(r.noted(1), "; "), `original:a in "two": p1 starts at 10; port:b in "two": p* a warning`; got != want {
		t.Errorf("noted(1) = %s, want %s", got, want)
	}
}

// TestRecorderExcusesCommitTimeouts checks the accounting of a mixed
// test: a message processed again after the instance that processed it
// before reported the partition's final commit as timed out
// (ErrCommitTimeout) is the documented re-delivery, excused; the other
// repeats count against the moves away from an original.
func TestRecorderExcusesCommitTimeouts(t *testing.T) {
	t.Parallel()
	r := newRecorder()
	process := func(who string, partition int32, from, to int64) {
		for offset := from; offset <= to; offset++ {
			r.record(who, &sarama.ConsumerMessage{Topic: "t", Partition: partition, Offset: offset})
		}
	}
	var produced []string
	for partition := int32(0); partition < 2; partition++ {
		for offset := int64(0); offset <= 20; offset++ {
			produced = append(produced, messageKey("t", partition, offset))
		}
	}
	r.setStep("one")
	process("original:a", 0, 0, 10)
	process("original:a", 1, 0, 10)
	r.setStep("two")
	process("port:b", 0, 10, 15) // 10: the move away from the original
	process("port:b", 1, 10, 15)
	r.commitTimedOut("port:b", "t", 0) // its last commit applied was 12
	r.setStep("three")
	process("original:c", 0, 12, 20) // 12-15 again: excused
	process("original:c", 1, 14, 20) // 14-15 again: p1's commit did not time out
	missing, duplicates, excused := r.check(produced)
	if missing != 0 || duplicates != 8 || excused != 4 {
		t.Errorf("check = %d missing, %d duplicates, %d excused; want 0, 8 (10 twice, 12-15 and 14-15), 4 (12-15)", missing, duplicates, excused)
	}
}
