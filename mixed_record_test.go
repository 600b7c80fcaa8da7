package kafkaconsumer

// The record of a mixed group's test (mixed_test.go): what each instance
// processed, in which step, and the events that explain a duplicate.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/IBM/sarama"
)

// recorder records the messages that the instances of a mixed group
// processed, each with the step of the test it was processed in, and the
// instances' starts and ends of partitions, so that a failure can name
// who processed each copy of a duplicate, and from which start.
type recorder struct {
	mu   sync.Mutex
	step string                  // the step running now (setStep)
	by   map[string][]processing // "topic/partition/offset" -> each processing of it, in order
	// redelivered holds "who topic/partition" for each instance whose
	// stop of a partition left what it processed after the last commit
	// to the next owner (redelivers).
	redelivered map[string]bool
	// handOffs counts, per topic, the partitions that an original on
	// sarama >= 1.10 stopped after processing messages of them (handOff).
	handOffs map[string]int
	events   []string // the instances' starts and ends of partitions (note)
}

// processing is one processing of a message: by which instance, in which
// step of the test.
type processing struct{ who, step string }

func (p processing) String() string { return p.who + " in " + strconv.Quote(p.step) }

func newRecorder() *recorder {
	return &recorder{by: make(map[string][]processing), redelivered: make(map[string]bool), handOffs: make(map[string]int)}
}

// handOff records that an original on sarama >= 1.10 stopped a partition
// of topic after processing messages of it: its last mark is the offset
// of the last message it processed, which the partition's next owner
// processes again (one duplicate), whether the distribution moved the
// partition between two steps of the test or within one.
func (r *recorder) handOff(topic string) {
	r.mu.Lock()
	r.handOffs[topic]++
	r.mu.Unlock()
}

// handedOff returns how many partitions of topic originals handed off
// (handOff) so far.
func (r *recorder) handedOff(topic string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.handOffs[topic]
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

// redelivers records that a stop of the partition by who left what it
// processed after the last commit that Kafka applied to the next owner,
// as documented (a port's final commit not confirmed in time:
// ErrCommitTimeout; its acks not in within MaxProcessingTime; its claim
// lost with the ZooKeeper session): check excuses those repeats.
func (r *recorder) redelivers(who, topic string, partition int32) {
	r.mu.Lock()
	r.redelivered[who+" "+topic+"/"+strconv.Itoa(int(partition))] = true
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
// those repeats are excused: a message processed again after the
// instance that processed it before left its partition's messages to the
// next owner (redelivers).
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
			if r.redelivered[copies[i-1].who+" "+partition] {
				excused++
			}
		}
	}
	return missing, duplicates, excused
}

// recordRange returns a function that records the messages of topic "t"
// from offset from to offset to, both included, as processed by who.
func recordRange(r *recorder) func(who string, partition int32, from, to int64) {
	return func(who string, partition int32, from, to int64) {
		for offset := from; offset <= to; offset++ {
			r.record(who, &sarama.ConsumerMessage{Topic: "t", Partition: partition, Offset: offset})
		}
	}
}

// TestRecorderDuplicateRanges checks the diagnosis of a failed mixed
// test: duplicates gathered into runs of a partition processed by the
// same instances in the same steps.
func TestRecorderDuplicateRanges(t *testing.T) {
	t.Parallel()
	r := newRecorder()
	process := recordRange(r)
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

// TestRecorderExcusesRedeliveries checks the accounting of a mixed test: a
// message processed again after the instance that processed it before
// left the partition to the next owner without committing it (here its
// final commit timed out: ErrCommitTimeout) is the documented
// re-delivery, excused; the other repeats count against the hand-offs.
func TestRecorderExcusesRedeliveries(t *testing.T) {
	t.Parallel()
	r := newRecorder()
	process := recordRange(r)
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
	r.redelivers("port:b", "t", 0) // its final commit timed out: the last applied was 12
	r.setStep("three")
	process("original:c", 0, 12, 20) // 12-15 again: excused
	process("original:c", 1, 14, 20) // 14-15 again: p1's commit did not time out
	missing, duplicates, excused := r.check(produced)
	if missing != 0 || duplicates != 8 || excused != 4 {
		t.Errorf("check = %d missing, %d duplicates, %d excused; want 0, 8 (10 twice, 12-15 and 14-15), 4 (12-15)", missing, duplicates, excused)
	}
}

// TestPortTakeError checks how a port of a mixed test reads the errors it
// reports: Close's joined errors one by one, each final commit that timed
// out recorded for its partition, the others not.
func TestPortTakeError(t *testing.T) {
	t.Parallel()
	r := newRecorder()
	p := &portInstance{name: "port:b", rec: r}
	partitionErr := func(partition int32, err error) error {
		return &sarama.ConsumerError{Topic: "t", Partition: partition, Err: err}
	}
	closeErr := errors.Join(
		partitionErr(0, fmt.Errorf("%w: not confirmed", ErrCommitTimeout)),
		errors.Join(partitionErr(1, ErrReleaseFailed), errors.New("no partition")),
	)
	var timedOut []bool
	for _, err := range leafErrors(closeErr) {
		timedOut = append(timedOut, p.takeError(err))
	}
	if want := []bool{true, false, false}; fmt.Sprint(timedOut) != fmt.Sprint(want) {
		t.Errorf("takeError of Close's errors = %v, want %v", timedOut, want)
	}
	if !r.redelivered["port:b t/0"] || r.redelivered["port:b t/1"] {
		t.Errorf("redelivered: %v, want p0's only", r.redelivered)
	}
	if leafErrors(nil) != nil {
		t.Errorf("leafErrors(nil) = %v, want none", leafErrors(nil))
	}
}

// TestRecordLogRedelivers checks that a port's log line of a partition
// that says, at level Warn or above, that the next owner consumes again
// what the port processed records the re-delivery, and that other lines
// (the take-back of what was never received) do not.
func TestRecordLogRedelivers(t *testing.T) {
	t.Parallel()
	r := newRecorder()
	name := "port:b"
	who := new(atomic.Pointer[string])
	who.Store(&name)
	log := slog.New(&recordLog{rec: r, who: who, partition: -1})
	p0 := log.With(attrTopic, "t", attrPartition, int32(0))
	p1 := log.With(attrTopic, "t", attrPartition, int32(1))
	p0.Warn("3 handed-out messages were not acked within MaxProcessingTime (2s); the next owner consumes them again.")
	p1.Info("Took back 2 messages still unread in the channel: never received here, not committed; the next owner consumes them.")
	if !r.redelivered["port:b t/0"] || r.redelivered["port:b t/1"] {
		t.Errorf("redelivered: %v, want p0's only", r.redelivered)
	}
}

// recordLog is a slog.Handler that notes a port's log lines of a
// partition in the record's events (recorder.note), for the diagnosis of
// a failure, and records the partitions whose stop says, at level Warn or
// above, that "the next owner consumes" again what the port processed
// (recorder.redelivers): a final commit not confirmed in time
// (ErrCommitTimeout), acks not in within MaxProcessingTime, a claim lost
// with the ZooKeeper session.
type recordLog struct {
	rec       *recorder
	who       *atomic.Pointer[string] // the port's name, once known
	topic     string
	partition int64 // -1 while no partition attribute came
	attrs     []string
}

func (h *recordLog) Enabled(context.Context, slog.Level) bool { return true }

func (h *recordLog) Handle(_ context.Context, r slog.Record) error {
	topic, partition := h.topic, h.partition
	attrs := slices.Clone(h.attrs)
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case attrPartition:
			partition = a.Value.Int64()
		case attrTopic:
			topic = a.Value.String()
		case "group":
		default:
			attrs = append(attrs, a.String())
		}
		return true
	})
	tag := fmt.Sprintf("p%d", partition)
	if partition < 0 {
		if r.Level < slog.LevelWarn {
			return nil
		}
		tag = "p*" // noted under every partition
	}
	who := "port:?"
	if name := h.who.Load(); name != nil {
		who = *name
	}
	h.rec.note(who, "%s %s %s", tag, r.Message, strings.Join(attrs, " "))
	if partition >= 0 && r.Level >= slog.LevelWarn && strings.Contains(r.Message, "the next owner consumes") {
		h.rec.redelivers(who, topic, int32(partition))
	}
	return nil
}

func (h *recordLog) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.attrs = slices.Clone(h.attrs)
	for _, a := range attrs {
		switch a.Key {
		case attrPartition:
			c.partition = a.Value.Int64()
		case attrTopic:
			c.topic = a.Value.String()
		case "group":
		default:
			c.attrs = append(c.attrs, a.String())
		}
	}
	return &c
}

func (h *recordLog) WithGroup(string) slog.Handler { return h }
