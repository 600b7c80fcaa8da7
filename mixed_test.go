package kafkaconsumer

import (
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer/internal/commitmark"
	"github.com/wvanbergen/kazoo-go"
)

// The tests of mixed groups: instances of the original library (played by
// originalInstance) and of the port in one group, as during an upgrade one
// instance at a time and its rollback.

// mixedSubscription is a subscription in both forms: the port's and the
// original's (originalInstance).
type mixedSubscription struct {
	name      string
	static    []string
	pattern   *regexp.Regexp
	whitelist bool
}

func (s mixedSubscription) port() Subscription {
	switch {
	case s.static != nil:
		return TopicSubscription(s.static...)
	case s.whitelist:
		return WhitelistSubscription(s.pattern)
	default:
		return BlacklistSubscription(s.pattern)
	}
}

// selects tells whether the subscription consumes topic: as the original
// does (internal topics included), or as the port does alone.
func (s mixedSubscription) selects(topic string, original bool) bool {
	if s.static != nil {
		for _, name := range s.static {
			if name == topic {
				return true
			}
		}
		return false
	}
	if internalTopics[topic] && !original {
		return false
	}
	return s.pattern.MatchString(topic) == s.whitelist
}

// mixedSubscriptions returns the three kinds of subscription to topic,
// whose name starts with "__": the white and black lists then select the
// internal topics, and the topic, and no topic of the other tests.
func mixedSubscriptions(topic string) []mixedSubscription {
	return []mixedSubscription{
		{name: "static", static: []string{topic}},
		{name: "whitelist", pattern: regexp.MustCompile(`^__`), whitelist: true},
		{name: "blacklist", pattern: regexp.MustCompile(`^(?:[^_]|_[^_]|_$)`)},
	}
}

// mixedGroup watches a mixed group from the outside.
type mixedGroup struct {
	t         testing.TB
	name      string
	sub       mixedSubscription
	kz        *kazoo.Kazoo
	cg        *kazoo.Consumergroup
	rec       *recorder
	originals map[string]bool // the IDs of the original instances started
	topic     string          // the topic that is produced to

	owners map[TopicPartition]string // at the end of the last step
	// fromOriginal counts the moves of partitions of topic from an original
	// instance to another instance between the ends of two steps, for
	// the log; the bound of duplicates counts the hand-offs
	// (recorder.handOff), those within a step too.
	fromOriginal int
	steps        []string        // each step and its time to settle
	ports        []*portInstance // the running ports
}

func newMixedGroup(t testing.TB, sub mixedSubscription, topic string) *mixedGroup {
	t.Helper()
	kz := testKazoo(t)
	t.Cleanup(func() { _ = kz.Close() })
	name := uniqueName("mixed-" + sub.name)
	return &mixedGroup{t: t, name: name, sub: sub, topic: topic, kz: kz, cg: kz.Consumergroup(name), rec: newRecorder(), originals: make(map[string]bool)}
}

func (g *mixedGroup) startOriginal(releaseWait time.Duration) *originalInstance {
	o := startOriginal(g.t, g.name, g.sub.static, g.sub.pattern, g.sub.whitelist, releaseWait, false, g.rec)
	g.originals[o.id] = true
	return o
}

// startOriginal19 starts an original built on sarama v1.9 or older,
// which does not wait on stop.
func (g *mixedGroup) startOriginal19() *originalInstance {
	o := startOriginal(g.t, g.name, g.sub.static, g.sub.pattern, g.sub.whitelist, 0, true, g.rec)
	g.originals[o.id] = true
	return o
}

// portInstance is an instance of the port that processes and acks every
// message it receives, recording it, and notes the errors it reports
// (takeError).
type portInstance struct {
	name   string // for the record: "port:" and the end of its instance ID
	c      Consumer
	rec    *recorder
	done   chan struct{} // closed when Messages and Errors are closed
	closed sync.Once
}

func (g *mixedGroup) startPort() *portInstance {
	g.t.Helper()
	return g.startPortWith(nil)
}

// startPortWith starts a port with config (nil for the tests' default).
// Its log lines of partitions go to the record's events (recordLog).
func (g *mixedGroup) startPortWith(config *Config) *portInstance {
	g.t.Helper()
	if config == nil {
		config = testConfig()
	}
	log := &recordLog{rec: g.rec, who: new(atomic.Pointer[string]), partition: -1}
	config.Logger = slog.New(log)
	p := &portInstance{c: join(g.t, g.name, g.sub.port(), config), rec: g.rec, done: make(chan struct{})}
	p.name = "port:" + p.c.(*consumerManager).instance.ID[len(p.c.(*consumerManager).instance.ID)-4:]
	log.who.Store(&p.name)
	var readers sync.WaitGroup
	readers.Add(2)
	go func() { // owned by close, which waits for done
		defer readers.Done()
		for msg := range p.c.Messages() {
			g.rec.record(p.name, msg)
			p.c.Ack(msg)
		}
	}()
	go func() { // owned by close, which waits for done
		defer readers.Done()
		for err := range p.c.Errors() {
			p.takeError(err)
		}
	}()
	go func() { // owned by close, which waits for done
		readers.Wait()
		close(p.done)
	}()
	g.t.Cleanup(func() { p.close(g.t) }) // on failure; a no-op after close
	g.ports = append(g.ports, p)
	return p
}

func (g *mixedGroup) closePort(p *portInstance) {
	g.t.Helper()
	p.close(g.t)
	g.ports = slices.DeleteFunc(g.ports, func(q *portInstance) bool { return q == p })
}

// close closes the port. Close's errors other than ErrCommitTimeout
// fail the test; a final commit that timed out is noted (takeError).
func (p *portInstance) close(t testing.TB) {
	t.Helper()
	p.closed.Do(func() {
		for _, err := range leafErrors(p.c.Close()) {
			if !p.takeError(err) {
				t.Errorf("Close() = %s", err)
			}
		}
		<-p.done
	})
}

// takeError notes an error the port reported, under its partition if it
// names one, and records a final commit of the partition that timed out
// (ErrCommitTimeout), whose re-delivery the test excuses
// (recorder.redelivers). It reports whether err is such a timeout.
func (p *portInstance) takeError(err error) (commitTimedOut bool) {
	var ce *sarama.ConsumerError
	if !errors.As(err, &ce) {
		p.rec.note(p.name, "p* error: %s", err)
		return false
	}
	p.rec.note(p.name, "p%d error: %s", ce.Partition, err)
	if !errors.Is(err, ErrCommitTimeout) {
		return false
	}
	p.rec.redelivers(p.name, ce.Topic, ce.Partition)
	return true
}

// leafErrors returns the errors that err joins (errors.Join, at any
// depth), or err alone; none for nil.
func leafErrors(err error) []error {
	if err == nil {
		return nil
	}
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var result []error
	for _, e := range joined.Unwrap() {
		result = append(result, leafErrors(e)...)
	}
	return result
}

// expected returns the owner that every partition of the group should
// have: the distribution of the partitions the original sees (internal
// topics included) while an original instance is registered, else of
// those the port sees. The partitions that no instance should own (the
// internal topics', in a group of ports only) map to "".
func (g *mixedGroup) expected() (map[TopicPartition]string, error) {
	instances, err := g.cg.Instances()
	if err != nil {
		return nil, err
	}
	mixed := false
	for _, instance := range instances {
		mixed = mixed || g.originals[instance.ID]
	}
	topics, err := g.kz.Topics()
	if err != nil {
		return nil, err
	}
	result := make(map[TopicPartition]string)
	var view kazoo.PartitionList
	for _, topic := range topics {
		if !g.sub.selects(topic.Name, true) {
			continue
		}
		partitions, err := topic.Partitions()
		if err != nil {
			return nil, err
		}
		for _, p := range partitions {
			result[TopicPartition{topic.Name, p.ID}] = ""
		}
		if g.sub.selects(topic.Name, mixed) {
			view = append(view, partitions...)
		}
	}
	for id, share := range distributePartitionsBetweenConsumers(instances, retrievePartitionLeaders(view)) {
		for _, p := range share {
			result[TopicPartition{p.Topic().Name, p.ID}] = id
		}
	}
	return result, nil
}

// mismatches compares the owner nodes of the group's partitions with
// expected, and describes the differences; it returns the owners too.
func (g *mixedGroup) mismatches() (string, map[TopicPartition]string, error) {
	want, err := g.expected()
	if err != nil {
		return "", nil, err
	}
	var diffs []string
	owners := make(map[TopicPartition]string, len(want))
	for tp, id := range want {
		owner, err := g.cg.PartitionOwner(tp.Topic, tp.Partition)
		if err != nil {
			return "", nil, err
		}
		got := ""
		if owner != nil {
			got = owner.ID
		}
		owners[tp] = got
		if got != id {
			diffs = append(diffs, fmt.Sprintf("%s/%d owned by %q, want %q", tp.Topic, tp.Partition, g.short(got), g.short(id)))
		}
	}
	sort.Strings(diffs)
	return strings.Join(diffs, "; "), owners, nil
}

func (g *mixedGroup) short(id string) string {
	if id == "" {
		return ""
	}
	kind := "port"
	if g.originals[id] {
		kind = "original"
	}
	return kind + ":" + id[len(id)-4:]
}

// step runs action (an instance joins or leaves), then waits until every
// partition is owned by the instance that the distribution gives it to.
// It notes how long that took from the start of action, and how many
// partitions of topic moved from an original instance.
func (g *mixedGroup) step(name string, action func()) {
	g.t.Helper()
	start := time.Now()
	g.rec.setStep(name)
	action()
	var (
		last   string
		owners map[TopicPartition]string
	)
	if !poll(60*time.Second, func() bool {
		diffs, current, err := g.mismatches()
		if err != nil {
			last = err.Error()
			return false
		}
		last, owners = diffs, current
		return diffs == ""
	}) {
		g.t.Fatalf("%s: the group did not settle in 60s: %s", name, last)
	}
	elapsed := time.Since(start)
	for _, p := range g.ports {
		for _, st := range p.c.Stats() {
			if internalTopics[st.Topic] {
				g.t.Errorf("%s: Stats shows %s/%d, a partition held for the original instances", name, st.Topic, st.Partition)
			}
		}
	}
	for tp, owner := range owners {
		if before := g.owners[tp]; tp.Topic == g.topic && g.originals[before] && owner != "" && owner != before {
			g.fromOriginal++
		}
	}
	g.owners = owners
	g.steps = append(g.steps, fmt.Sprintf("%s %.1fs", name, elapsed.Seconds()))
}

// producer produces to topic until stopped, and keeps the keys of what it
// produced.
type producer struct {
	mu       sync.Mutex
	produced []string
	stop     chan struct{} // closed by finish, once (stopOnce)
	stopOnce sync.Once
	done     chan struct{} // closed by the producing goroutine when it returns
}

func startProducer(t testing.TB, client sarama.Client, topic string) *producer {
	t.Helper()
	sp, err := sarama.NewSyncProducerFromClient(client)
	if err != nil {
		t.Fatal(err)
	}
	p := &producer{stop: make(chan struct{}), done: make(chan struct{})}
	// A test that fails before finish (a step's Fatal) must not leave the
	// goroutine behind: its next report would come after the test ended.
	t.Cleanup(func() { p.finish() })
	go func() {
		defer close(p.done)
		defer sp.Close()
		ticker := time.NewTicker(20 * time.Millisecond) // the production rate, not synchronisation
		defer ticker.Stop()
		for i := 0; ; i++ {
			msgs := make([]*sarama.ProducerMessage, 8)
			for j := range msgs {
				msgs[j] = &sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder(fmt.Sprintf("m-%d-%d", i, j))}
			}
			if err := sp.SendMessages(msgs); err != nil {
				t.Errorf("produce: %s", err)
				return
			}
			p.mu.Lock()
			for _, m := range msgs {
				p.produced = append(p.produced, messageKey(m.Topic, m.Partition, m.Offset))
			}
			p.mu.Unlock()
			select {
			case <-p.stop:
				return
			case <-ticker.C:
			}
		}
	}()
	return p
}

// finish stops the producer and returns the keys of what it produced; it
// may be called again.
func (p *producer) finish() []string {
	p.stopOnce.Do(func() { close(p.stop) })
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.produced
}

// newMixedTopic creates a topic of 8 partitions named from prefix for a
// test of mixed groups, deleted at its end, and returns a client.
func newMixedTopic(t *testing.T, prefix string) (sarama.Client, string) {
	t.Helper()
	parallelClusterTest(t)
	skipKafkaDiscovery(t, "the original library finds topics in the cluster's ZooKeeper")
	client := newTestClient(t)
	admin := newTestAdmin(t, client)
	topic := uniqueName(prefix)
	createTopic(t, admin, topic, 8)
	t.Cleanup(func() { _ = admin.DeleteTopic(topic) })
	return client, topic
}

// TestMixedGroupUpgradeAndRollback replaces the two original instances of
// a group by ports, one at a time, and goes back the same way, while
// messages are produced; with a static, a white and a black list. At every
// step each partition must end up owned by the instance the distribution
// gives it to (none unowned, none waited for by a second owner), and in
// the end every message must have been processed.
func TestMixedGroupUpgradeAndRollback(t *testing.T) {
	client, topic := newMixedTopic(t, "__kcmix")
	// __consumer_offsets exists once a group committed: make sure it does.
	commitOffsets(t, client, uniqueName("mixed-init"), topic, map[int32]int64{0: 0})

	const releaseWait = time.Second // the originals' MaxProcessingTime pause
	for _, sub := range mixedSubscriptions(topic) {
		t.Run(sub.name, func(t *testing.T) {
			g := newMixedGroup(t, sub, topic)
			prod := startProducer(t, client, topic)
			var (
				o1, o2, o3, o4 *originalInstance
				p1, p2         *portInstance
			)
			g.step("two originals", func() { o1, o2 = g.startOriginal(releaseWait), g.startOriginal(releaseWait) })
			g.step("+port", func() { p1 = g.startPort() })
			g.step("-original", func() { o1.close(t) })
			g.step("+port", func() { p2 = g.startPort() })
			g.step("-original (all ports)", func() { o2.close(t) })
			g.step("rollback: +original", func() { o3 = g.startOriginal(releaseWait) })
			g.step("-port", func() { g.closePort(p1) })
			g.step("+original", func() { o4 = g.startOriginal(releaseWait) })
			g.step("-port (all originals)", func() { g.closePort(p2) })

			produced := prod.finish()
			var missing, duplicates, excused int
			if !poll(60*time.Second, func() bool {
				missing, duplicates, excused = g.rec.check(produced)
				return missing == 0
			}) {
				t.Errorf("%d of %d messages were never processed", missing, len(produced))
			}
			// Before o3 and o4 close: their last hand-offs have no next
			// owner.
			handOffs := g.rec.handedOff(topic)
			o3.close(t)
			o4.close(t)
			t.Logf("%s: %d messages, %d duplicates (%d excused: after a stop that left them to the next owner), %d partitions moved away from an original between steps, %d hand-offs by an original that processed some; steps (time to settle): %s",
				sub.name, len(produced), duplicates, excused, g.fromOriginal, handOffs, strings.Join(g.steps, ", "))
			// docs/upgrading.md: one duplicate per move away from an
			// original, and what a port's stop left to the next owner
			// as documented (its final commit not confirmed in time:
			// ErrCommitTimeout; acks not in within MaxProcessingTime; a
			// claim lost with the session). The moves are the
			// hand-offs: those within a step count too (in the first
			// one, o1 may process messages of the partitions that go to
			// o2 before o2 registers).
			if duplicates-excused > handOffs {
				t.Errorf("%d duplicates for %d hand-offs by an original (%d more excused: after a stop that left them to the next owner); want at most one each", duplicates-excused, handOffs, excused)
				g.logDuplicates()
			} else if excused > 0 {
				g.logDuplicates()
			}
		})
	}
}

// logDuplicates logs the duplicates of the topic as runs of offsets (who
// processed each copy, in which step), and the events of each partition
// that has some: where each instance started it, what the originals
// marked, when they released it.
func (g *mixedGroup) logDuplicates() {
	g.t.Helper()
	ranges := g.rec.duplicateRanges(g.topic)
	partitions := make(map[int32]bool)
	for _, r := range ranges {
		g.t.Logf("duplicated: %s", r)
		var p int32
		if _, err := fmt.Sscanf(r, "p%d ", &p); err == nil {
			partitions[p] = true
		}
	}
	for p := range partitions {
		for _, e := range g.rec.noted(p) {
			g.t.Logf("p%d: %s", p, e)
		}
	}
}

// waitCommittedLastProcessed waits until every partition of the group's
// topic has a commit marked as made in the last-processed convention
// (commitmark.LastMark), which the originals of sarama v1.9 read right.
func (g *mixedGroup) waitCommittedLastProcessed(client sarama.Client) {
	g.t.Helper()
	admin := newTestAdmin(g.t, client)
	partitions, err := client.Partitions(g.topic)
	if err != nil {
		g.t.Fatal(err)
	}
	var last string
	if !poll(60*time.Second, func() bool {
		resp, err := admin.ListConsumerGroupOffsets(g.name, map[string][]int32{g.topic: partitions})
		if err != nil {
			last = err.Error()
			return false
		}
		for _, p := range partitions {
			b := resp.GetBlock(g.topic, p)
			if b == nil || b.Metadata != commitmark.LastMark {
				last = fmt.Sprintf("%s/%d not committed in the last-processed convention", g.topic, p)
				return false
			}
		}
		return true
	}) {
		g.t.Fatalf("the group's commits did not all turn to the last-processed convention in 60s: %s", last)
	}
}

// TestMixedGroupOnSarama19 replaces the two originals of a group, built
// on sarama v1.9 or older (they commit the last processed offset and start
// one after it), by ports with CommitLastProcessed; turns the setting off
// one instance at a time; turns it on again while nothing is produced (the
// partitions' last commits are then the ports' without the setting, and
// must be made again in the originals' convention before an original takes
// them); and goes back to originals while messages are produced again.
// Every message must be processed exactly once: each convention is read
// right, whoever committed.
func TestMixedGroupOnSarama19(t *testing.T) {
	client, topic := newMixedTopic(t, "kcmix19")

	g := newMixedGroup(t, mixedSubscription{name: "static19", static: []string{topic}}, topic)
	last := testConfig()
	last.CommitLastProcessed = true
	var (
		o1, o2, o3, o4 *originalInstance
		l1, l2, l3, l4 *portInstance // with CommitLastProcessed
		n1, n2         *portInstance // without
	)
	prod := startProducer(t, client, topic)
	g.step("two originals (sarama 1.9)", func() { o1, o2 = g.startOriginal19(), g.startOriginal19() })
	g.step("+port (last processed)", func() { l1 = g.startPortWith(last) })
	g.step("-original", func() { o1.close(t) })
	g.step("+port (last processed)", func() { l2 = g.startPortWith(last) })
	g.step("-original (all ports)", func() { o2.close(t) })
	g.step("setting off: +port (next)", func() { n1 = g.startPort() })
	g.step("-port (last processed)", func() { g.closePort(l1) })
	g.step("+port (next)", func() { n2 = g.startPort() })
	g.step("-port (last processed)", func() { g.closePort(l2) })
	produced := prod.finish()
	if !poll(60*time.Second, func() bool {
		missing, _, _ := g.rec.check(produced)
		return missing == 0
	}) {
		t.Fatalf("messages never processed: %s", strings.Join(g.rec.missed(produced, 10), ", "))
	}
	g.step("idle, setting on: +port (last processed)", func() { l3 = g.startPortWith(last) })
	g.step("-port (next)", func() { g.closePort(n1) })
	g.step("+port (last processed)", func() { l4 = g.startPortWith(last) })
	g.step("-port (next)", func() { g.closePort(n2) })
	// docs/upgrading.md: before an original starts, every partition is
	// committed again in the originals' convention by an instance with
	// the setting. The steps settle on the claims; a partition that moved
	// to l4 is claimed before l4 read and committed it again.
	g.waitCommittedLastProcessed(client)
	prod = startProducer(t, client, topic)
	g.step("rollback: +original (sarama 1.9)", func() { o3 = g.startOriginal19() })
	g.step("-port", func() { g.closePort(l3) })
	g.step("+original (sarama 1.9)", func() { o4 = g.startOriginal19() })
	g.step("-port (all originals)", func() { g.closePort(l4) })
	produced = append(produced, prod.finish()...)

	var missing, duplicates, excused int
	if !poll(60*time.Second, func() bool {
		missing, duplicates, excused = g.rec.check(produced)
		return missing == 0
	}) {
		t.Errorf("%d of %d messages were never processed: %s", missing, len(produced), strings.Join(g.rec.missed(produced, 10), ", "))
	}
	o3.close(t)
	o4.close(t)
	t.Logf("%d messages, %d duplicates (%d excused: after a stop that left them to the next owner), %d partitions moved away from an original; steps (time to settle): %s",
		len(produced), duplicates, excused, g.fromOriginal, strings.Join(g.steps, ", "))
	if duplicates > excused {
		t.Errorf("%d duplicates (%d more excused: after a stop that left them to the next owner); want none (each side reads the other's commits in their convention)", duplicates-excused, excused)
		g.logDuplicates()
	} else if excused > 0 {
		g.logDuplicates()
	}
}

func TestMarkRegistration(t *testing.T) {
	t.Parallel()
	json, err := TopicSubscription("a").JSON()
	if err != nil {
		t.Fatal(err)
	}
	if isMarkedRegistration(json) {
		t.Errorf("JSON() %s is marked; the mark belongs to the registration only", json)
	}
	marked := markRegistration(json)
	if !isMarkedRegistration(marked) {
		t.Errorf("markRegistration(%s) = %s, not marked", json, marked)
	}
	if again := markRegistration(marked); string(again) != string(marked) {
		t.Errorf("marking twice changed %s to %s", marked, again)
	}
	for _, other := range []string{
		`{"pattern":"static","subscription":{"a":1},"timestamp":"1","version":1}`, // the original's
		`{"pattern":"static","subscription":{"a":1},"timestamp":1,"version":1}`,   // kazoo-go's Register
		`{"client":"something else"}`,
		`not json`,
	} {
		if isMarkedRegistration([]byte(other)) {
			t.Errorf("%s is taken for a registration of this package", other)
		}
	}
	if got := markRegistration([]byte(`"a string"`)); string(got) != `"a string"` {
		t.Errorf("markRegistration of a JSON string = %s, want it unchanged", got)
	}
}
