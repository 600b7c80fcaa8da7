package kafkaconsumer

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"strings"
)

// StdLogger is the interface of the package Logger: the subset of the
// standard library's *log.Logger that sarama's StdLogger also has, so a
// *log.Logger, sarama.Logger or slog.NewLogLogger(...) all fit.
type StdLogger interface {
	// Print writes a line of the arguments, formatted as by fmt.Print.
	Print(v ...interface{})
	// Printf writes a line of the arguments, formatted as by fmt.Printf.
	Printf(format string, v ...interface{})
	// Println writes a line of the arguments, formatted as by fmt.Println.
	Println(v ...interface{})
}

// Logger receives the log lines of every consumer whose Config.Logger is
// nil, and those of its ZooKeeper client unless Config.Zookeeper.Logger is
// set to something else. It is kept for compatibility with the original
// package; prefer Config.Logger, which is per consumer, levelled and
// structured. It is silent by default. Set it once, before the first Join:
// it is read without synchronisation by the consumers' goroutines.
//
// Each line starts with its level, then "[instance=<last 12 characters of
// the consumer's ID>]", "[partition=<topic>/<partition>]" for lines of a
// partition and "[zookeeper]" for those of the ZooKeeper client; the
// message follows, then the other attributes (group=<group> ...). Every
// level reaches it, debug included.
var Logger StdLogger = silentLogger

// silentLogger is the default package Logger; while Logger is it, the
// consumers format no line for it.
var silentLogger = log.New(io.Discard, "[kafkaconsumer] ", log.LstdFlags)

// The attributes of the lines of a consumer (Config.Logger).
const (
	attrGroup     = "group"
	attrInstance  = "instance"
	attrTopic     = "topic"
	attrPartition = "partition"
	attrComponent = "component" // "zookeeper" on the ZooKeeper client's lines
)

// newLogger returns the logger of a consumer of the given group and
// instance ID: config's with those attributes, or, when config has none,
// one that writes to the package Logger (packageHandler). Every line of the
// consumer, its partitions and its ZooKeeper client goes through it.
func newLogger(l *slog.Logger, group, id string) *slog.Logger {
	if l == nil {
		l = slog.New(packageHandler{target: packageLogger})
	}
	return l.With(attrGroup, group, attrInstance, id)
}

// logf writes a line at level, formatting it only when the logger takes
// that level.
func logf(l *slog.Logger, level slog.Level, format string, args ...interface{}) {
	ctx := context.Background()
	if !l.Enabled(ctx, level) {
		return
	}
	l.Log(ctx, level, fmt.Sprintf(format, args...))
}

// packageLogger returns the package Logger.
func packageLogger() StdLogger { return Logger }

// packageHandler is the slog.Handler of a consumer whose Config.Logger is
// nil: it writes each record as one line to the package Logger (target),
// read at the time of the line so that a Logger set after Join still takes
// effect (the format is on Logger). It is enabled for every level unless
// Logger is the silent default.
type packageHandler struct {
	target func() StdLogger // packageLogger; another in tests
	attrs  []slog.Attr      // from WithAttrs, in order
	group  string           // from WithGroup: the prefix of the attributes' keys
}

// Enabled implements slog.Handler.
func (h packageHandler) Enabled(context.Context, slog.Level) bool {
	return h.target() != silentLogger
}

// Handle implements slog.Handler.
func (h packageHandler) Handle(_ context.Context, r slog.Record) error {
	var (
		instance, topic, partition string
		zookeeper                  bool
		rest                       strings.Builder
	)
	add := func(group string, a slog.Attr) {
		switch v := a.Value.Resolve().String(); {
		case group == "" && a.Key == attrInstance:
			if len(v) > 12 {
				v = v[len(v)-12:]
			}
			instance = v
		case group == "" && a.Key == attrTopic:
			topic = v
		case group == "" && a.Key == attrPartition:
			partition = v
		case group == "" && a.Key == attrComponent && v == "zookeeper":
			zookeeper = true
		default:
			fmt.Fprintf(&rest, " %s%s=%s", group, a.Key, v)
		}
	}
	for _, a := range h.attrs {
		add("", a) // their keys carry their group already
	}
	r.Attrs(func(a slog.Attr) bool {
		add(h.group, a)
		return true
	})

	var line strings.Builder
	line.WriteString(r.Level.String())
	if instance != "" {
		fmt.Fprintf(&line, " [instance=%s]", instance)
	}
	if topic != "" || partition != "" {
		fmt.Fprintf(&line, " [partition=%s/%s]", topic, partition)
	}
	if zookeeper {
		line.WriteString(" [zookeeper]")
	}
	line.WriteString(" ")
	line.WriteString(r.Message)
	line.WriteString(rest.String())
	h.target().Print(line.String())
	return nil
}

// WithAttrs implements slog.Handler.
func (h packageHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	all := make([]slog.Attr, 0, len(h.attrs)+len(attrs))
	all = append(all, h.attrs...)
	for _, a := range attrs {
		a.Key = h.group + a.Key
		all = append(all, a)
	}
	h.attrs = all
	return h
}

// WithGroup implements slog.Handler: the keys of later attributes are
// prefixed with name and a dot.
func (h packageHandler) WithGroup(name string) slog.Handler {
	if name != "" {
		h.group += name + "."
	}
	return h
}

// zookeeperLogger passes the ZooKeeper client's log lines to the package
// Logger, read at the time of each line so that a Logger set after
// NewConfig still takes effect. It is the Zookeeper.Logger of NewConfig;
// Join replaces it with one that writes to the consumer's logger
// (slogZookeeperLogger), so that the lines go where the consumer's go.
type zookeeperLogger struct{}

// Printf implements the ZooKeeper client's Logger interface.
func (zookeeperLogger) Printf(format string, v ...interface{}) {
	Logger.Printf("[zookeeper] "+format, v...)
}

// slogZookeeperLogger passes the ZooKeeper client's log lines to a
// consumer's logger, at level info, with the attribute component=zookeeper.
type slogZookeeperLogger struct{ l *slog.Logger }

// Printf implements the ZooKeeper client's Logger interface.
func (z slogZookeeperLogger) Printf(format string, v ...interface{}) {
	logf(z.l, slog.LevelInfo, format, v...)
}
