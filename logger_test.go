package kafkaconsumer

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// recordingHandler is an slog.Handler that keeps every record with its
// attributes (those of With included), for the tests.
type recordingHandler struct {
	attrs []slog.Attr
	rec   *recorded
}

type recorded struct {
	mu      sync.Mutex
	records []loggedRecord // guarded by mu
}

type loggedRecord struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

func newRecordingLogger() (*slog.Logger, *recorded) {
	rec := &recorded{}
	return slog.New(recordingHandler{rec: rec}), rec
}

func (recordingHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h recordingHandler) Handle(_ context.Context, r slog.Record) error {
	lr := loggedRecord{level: r.Level, msg: r.Message, attrs: make(map[string]string)}
	for _, a := range h.attrs {
		lr.attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		lr.attrs[a.Key] = a.Value.String()
		return true
	})
	h.rec.mu.Lock()
	h.rec.records = append(h.rec.records, lr)
	h.rec.mu.Unlock()
	return nil
}

func (h recordingHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	h.attrs = append(h.attrs[:len(h.attrs):len(h.attrs)], attrs...)
	return h
}

func (h recordingHandler) WithGroup(string) slog.Handler { return h }

// find returns the first record whose message contains msg and whose
// attributes include attrs.
func (r *recorded) find(level slog.Level, msg string, attrs map[string]string) (loggedRecord, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
next:
	for _, lr := range r.records {
		if lr.level != level || !strings.Contains(lr.msg, msg) {
			continue
		}
		for k, v := range attrs {
			if lr.attrs[k] != v {
				continue next
			}
		}
		return lr, true
	}
	return loggedRecord{}, false
}

// findLast returns the last record of level whose message contains msg.
func (r *recorded) findLast(level slog.Level, msg string) (loggedRecord, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.records) - 1; i >= 0; i-- {
		if lr := r.records[i]; lr.level == level && strings.Contains(lr.msg, msg) {
			return lr, true
		}
	}
	return loggedRecord{}, false
}

// lineLogger is a package Logger that keeps its lines.
type lineLogger struct {
	mu    sync.Mutex
	lines []string // guarded by mu
}

func (l *lineLogger) Print(v ...interface{}) { l.add(fmt.Sprint(v...)) }
func (l *lineLogger) Printf(format string, v ...interface{}) {
	l.add(fmt.Sprintf(format, v...))
}
func (l *lineLogger) Println(v ...interface{}) { l.add(fmt.Sprintln(v...)) }
func (l *lineLogger) add(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, line)
}

// packageLoggerOf returns the logger of a consumer without Config.Logger,
// whose package Logger is target. (The tests do not set the package
// Logger itself: the goroutines of closed ZooKeeper connections of other
// tests may still read it.)
func packageLoggerOf(target StdLogger, group, id string) *slog.Logger {
	return slog.New(packageHandler{target: func() StdLogger { return target }}).With(attrGroup, group, attrInstance, id)
}

// TestPackageHandlerLines: with Config.Logger nil, a consumer's lines reach
// the package Logger with the level and the prefixes of the original
// (instance, partition, zookeeper), the other attributes after the message.
func TestPackageHandlerLines(t *testing.T) {
	lines := &lineLogger{}
	l := packageLoggerOf(lines, "g1", "0123456789-abcdefabcdef")
	l.With(attrTopic, "orders", attrPartition, int32(3)).Warn("Failed to claim partition.", "attempt", 2)
	slogZookeeperLogger{l.With(attrComponent, "zookeeper")}.Printf("connected to %s", "zk1:2181")
	l.WithGroup("req").Info("grouped", "id", 7)
	want := []string{
		"WARN [instance=abcdefabcdef] [partition=orders/3] Failed to claim partition. group=g1 attempt=2",
		"INFO [instance=abcdefabcdef] [zookeeper] connected to zk1:2181 group=g1",
		"INFO [instance=abcdefabcdef] grouped group=g1 req.id=7",
	}
	if fmt.Sprint(lines.lines) != fmt.Sprint(want) {
		t.Errorf("lines:\n%s\nwant:\n%s", strings.Join(lines.lines, "\n"), strings.Join(want, "\n"))
	}
}

// TestPackageHandlerSilent: while the package Logger is the silent
// default, no line is formatted.
func TestPackageHandlerSilent(t *testing.T) {
	if l := packageLoggerOf(silentLogger, "g", "id"); l.Enabled(context.Background(), slog.LevelError) {
		t.Error("the package handler is enabled while the package Logger is silent")
	}
	if l := packageLoggerOf(log.New(&strings.Builder{}, "", 0), "g", "id"); !l.Enabled(context.Background(), slog.LevelDebug) {
		t.Error("the package handler is disabled with a package Logger set")
	}
}

// TestIntegrationConfigLogger: a consumer with Config.Logger logs there,
// levelled and with its attributes, and not to the package Logger; the
// ZooKeeper client's lines go there too.
func TestIntegrationConfigLogger(t *testing.T) {
	parallelClusterTest(t)
	topic := newTopic(t, 4)
	logger, rec := newRecordingLogger()
	config := testConfig()
	config.Logger = logger
	group := uniqueName("log")
	c := join(t, group, TopicSubscription(topic), config)
	col := collect(c, nil)
	// Consuming, not only claimed: a partition killed while it starts
	// stops at once, before its "Consuming from offset" line.
	waitConsuming(t, c, 4, "the consumer")
	id := c.(*consumerManager).instance.ID
	c.(*consumerManager).config.Zookeeper.Logger.Printf("a line of the %s client", "ZooKeeper")
	col.close(t)

	base := map[string]string{attrGroup: group, attrInstance: id}
	if _, ok := rec.find(slog.LevelInfo, "Consumer instance registered", base); !ok {
		t.Error("no info line of the registration with group and instance")
	}
	if _, ok := rec.find(slog.LevelInfo, "assigned to consume 4 partitions", base); !ok {
		t.Error("no info line of the rebalance")
	}
	for p := 0; p < 4; p++ {
		attrs := map[string]string{attrGroup: group, attrInstance: id, attrTopic: topic, attrPartition: fmt.Sprint(p)}
		for _, msg := range []string{"Claimed partition", "Stopped partition"} {
			if _, ok := rec.find(slog.LevelDebug, msg, attrs); !ok {
				t.Errorf("no debug line %q of %s/%d with its attributes", msg, topic, p)
			}
		}
		// A new group: the partition starts at Offsets.Initial, and
		// the line names the offset that resolved to.
		if lr, ok := rec.find(slog.LevelDebug, "Consuming from offset", attrs); !ok || strings.Contains(lr.msg, "offset -") {
			t.Errorf("debug line of %s/%d's start: %q (found %v); want the offset it starts at", topic, p, lr.msg, ok)
		}
	}
	if _, ok := rec.find(slog.LevelInfo, "a line of the ZooKeeper client", map[string]string{attrInstance: id, attrComponent: "zookeeper"}); !ok {
		t.Error("the ZooKeeper client's line did not reach Config.Logger")
	}
	cm := c.(*consumerManager)
	if _, ok := cm.log.Handler().(packageHandler); ok {
		t.Error("with Config.Logger set, the consumer logs to the package Logger")
	}
	if _, ok := cm.config.Zookeeper.Logger.(slogZookeeperLogger); !ok {
		t.Errorf("the ZooKeeper client logs to a %T, not to the consumer's logger", cm.config.Zookeeper.Logger)
	}
}
