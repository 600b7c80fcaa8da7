// Command groupdemo runs one instance of a kafkaconsumer group and shows
// what it does: every -stats interval a progress line with the partitions
// it owns, the messages consumed and their rate, and its lag (from
// Consumer.Stats); a line at each rebalance (Config.OnRebalance). Run
// several at once, with the same -group, to see them share the partitions.
//
//	groupdemo -zookeeper 127.0.0.1:2181 -group demo -topic demo -name c1
//
// With -metrics ADDR it serves the consumer's Prometheus metrics (module
// kprom) on http://ADDR/metrics, and says where in a line "metrics on
// http://.../metrics"; with -log LEVEL, the library's log lines go to
// stderr through log/slog (Config.Logger).
//
// It stops on SIGINT or SIGTERM: it leaves the group with Shutdown, whose
// deadline is -shutdown (default 20 s, below Kubernetes' grace period of
// 30 s): acked offsets are committed, partitions released, and messages
// not acked by the deadline are left to the next owner. Then it prints one
// parseable summary line:
//
//	SUMMARY instance=c1 group=demo consumed=1234 distinct=1234 duplicates=0 elapsed=31.2s
//
// With -record FILE, it appends the value of every message it consumed to
// FILE, one a line, so that the runs of several instances can be checked
// together for lost and duplicated messages.
//
// It is a module of its own, since it uses kprom, which brings the
// Prometheus client.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer"
	"github.com/kafkaconsumer/kafkaconsumer/kprom"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "groupdemo: %s\n", err)
		if errors.As(err, new(usageError)) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// usageError is an error in the command line.
type usageError struct{ error }

// options are the command-line flags.
type options struct {
	zookeeper string
	group     string
	topics    []string
	name      string
	stats     time.Duration
	work      time.Duration
	initial   int64
	record    string
	logLevel  string     // -log; "" for no library log lines
	level     slog.Level // parsed from logLevel
	metrics   string     // -metrics: address to serve /metrics on; "" for none
	shutdown  time.Duration
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("groupdemo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	hostname, _ := os.Hostname()
	o := &options{}
	var topics, initial string
	fs.StringVar(&o.zookeeper, "zookeeper", os.Getenv("ZOOKEEPER_PEERS"), "ZooKeeper connection string (default $ZOOKEEPER_PEERS)")
	fs.StringVar(&o.group, "group", "groupdemo", "consumer group name")
	fs.StringVar(&topics, "topic", "", "topic(s) to consume, comma-separated (required)")
	fs.StringVar(&o.name, "name", fmt.Sprintf("%s-%d", hostname, os.Getpid()), "name of this instance in its output")
	fs.DurationVar(&o.stats, "stats", 2*time.Second, "interval of the progress lines")
	fs.DurationVar(&o.work, "work", 0, "simulated processing time per message")
	fs.StringVar(&initial, "initial", "oldest", "where to start without a committed offset: oldest or newest")
	fs.StringVar(&o.record, "record", "", "append each consumed value to this file, one a line")
	fs.StringVar(&o.logLevel, "log", "", "send the library's log lines to stderr through log/slog at this level (debug, info, ...)")
	fs.StringVar(&o.metrics, "metrics", "", "serve Prometheus metrics on http://`ADDR`/metrics (e.g. :9100, or 127.0.0.1:0 for a free port)")
	fs.DurationVar(&o.shutdown, "shutdown", 20*time.Second, "deadline of the shutdown on SIGTERM: the longest wait for acks")
	if err := fs.Parse(args); err != nil {
		return nil, usageError{err}
	}
	switch {
	case fs.NArg() > 0:
		return nil, usageError{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	case o.zookeeper == "":
		return nil, usageError{errors.New("-zookeeper is required (or set ZOOKEEPER_PEERS)")}
	case topics == "":
		return nil, usageError{errors.New("-topic is required")}
	case o.stats <= 0:
		return nil, usageError{fmt.Errorf("-stats must be positive, got %s", o.stats)}
	case o.shutdown <= 0:
		return nil, usageError{fmt.Errorf("-shutdown must be positive, got %s", o.shutdown)}
	}
	for _, t := range strings.Split(topics, ",") {
		if t = strings.TrimSpace(t); t != "" {
			o.topics = append(o.topics, t)
		}
	}
	switch initial {
	case "oldest":
		o.initial = sarama.OffsetOldest
	case "newest":
		o.initial = sarama.OffsetNewest
	default:
		return nil, usageError{fmt.Errorf("-initial must be oldest or newest, got %q", initial)}
	}
	if o.logLevel != "" {
		if err := o.level.UnmarshalText([]byte(o.logLevel)); err != nil {
			return nil, usageError{fmt.Errorf("-log: %w", err)}
		}
	}
	return o, nil
}

// run is the command: it joins the group and consumes until ctx is done,
// then leaves the group with Shutdown and prints the summary. Its output
// goes to stdout, the library's log lines (with -log) to stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	out := log.New(stdout, "["+o.name+"] ", 0) // safe for concurrent use: OnRebalance prints too

	config := kafkaconsumer.NewConfig()
	if o.logLevel != "" {
		// The consumer's log lines, with their attributes (group,
		// instance, topic, partition), and the name of this process.
		config.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: o.level})).With("name", o.name)
	}
	var metrics *kprom.Metrics
	if o.metrics != "" {
		metrics = kprom.New()
		config.Metrics = metrics
		stopServing, err := serveMetrics(o.metrics, metrics, out)
		if err != nil {
			return err
		}
		defer stopServing()
	}

	var record *bufio.Writer
	if o.record != "" {
		f, err := os.OpenFile(o.record, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		record = bufio.NewWriter(f)
		defer record.Flush()
	}

	config.Offsets.Initial = o.initial
	config.MaxProcessingTime = 10 * time.Second
	config.OnRebalance = func(r kafkaconsumer.Rebalance) {
		out.Printf("rebalance: assigned %s, revoked %s", formatPartitions(r.Assigned), formatPartitions(r.Revoked))
	}
	// A SIGTERM while joining aborts the join (ctx).
	consumer, err := kafkaconsumer.JoinContext(ctx, o.group, kafkaconsumer.TopicSubscription(o.topics...), o.zookeeper, config)
	if err != nil {
		return err
	}
	if metrics != nil {
		metrics.Observe(o.group, consumer)
	}
	out.Printf("joined group %s to consume %s", o.group, strings.Join(o.topics, ","))

	start := time.Now()
	p := &progress{start: start, last: start, seen: make(map[string]struct{})}
	ticker := time.NewTicker(o.stats)
	defer ticker.Stop()
	messages, errs, done := consumer.Messages(), consumer.Errors(), ctx.Done()
	var shutdownErr error
	for messages != nil {
		select {
		case msg, ok := <-messages:
			if !ok {
				messages = nil // closed at the end of the shutdown
				continue
			}
			if o.work > 0 {
				time.Sleep(o.work) // "processing"
			}
			p.consumed++
			p.seen[string(msg.Value)] = struct{}{}
			if record != nil {
				record.Write(msg.Value)
				record.WriteByte('\n')
			}
			consumer.Ack(msg)
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			out.Printf("error: %s", err)
		case now := <-ticker.C:
			out.Print(p.line(now, consumer.Stats()))
		case <-done:
			out.Printf("stopping: leaving the group (Shutdown, waiting at most %s for acks)", o.shutdown)
			shutdownCtx, cancel := context.WithTimeout(context.Background(), o.shutdown)
			// Messages and Errors are closed when Shutdown returns.
			shutdownErr = consumer.Shutdown(shutdownCtx)
			cancel()
			done = nil
		}
	}
	closeErr := shutdownErr
	if record != nil {
		if err := record.Flush(); err != nil {
			return fmt.Errorf("write %s: %w", o.record, err)
		}
	}
	fmt.Fprintf(stdout, "SUMMARY instance=%s group=%s consumed=%d distinct=%d duplicates=%d elapsed=%.1fs\n",
		o.name, o.group, p.consumed, len(p.seen), p.consumed-int64(len(p.seen)), time.Since(start).Seconds())
	return closeErr
}

// serveMetrics serves the metrics on http://addr/metrics until the
// returned function is called, and says where on out.
func serveMetrics(addr string, metrics *kprom.Metrics, out *log.Logger) (stop func(), err error) {
	registry := prometheus.NewRegistry()
	registry.MustRegister(metrics)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	listener, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("-metrics: %w", err)
	}
	server := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = server.Serve(listener) // ends with ErrServerClosed at Close
	}()
	out.Printf("metrics on http://%s/metrics", listener.Addr())
	return func() {
		_ = server.Close()
		<-served
	}, nil
}

// progress counts what the instance consumed.
type progress struct {
	start, last  time.Time
	consumed     int64
	lastConsumed int64
	seen         map[string]struct{} // distinct values
}

// line returns a progress line, "partitions=4 (demo[0-3]) consumed=812
// rate=203/s lag=12", and starts the next rate interval.
func (p *progress) line(now time.Time, stats []kafkaconsumer.PartitionStats) string {
	rate := float64(p.consumed-p.lastConsumed) / now.Sub(p.last).Seconds()
	p.last, p.lastConsumed = now, p.consumed
	var (
		owned   []kafkaconsumer.TopicPartition
		waiting int
		lag     int64
	)
	for _, s := range stats {
		owned = append(owned, s.TopicPartition)
		if !s.Claimed {
			waiting++
		}
		if s.Lag > 0 {
			lag += s.Lag
		}
	}
	claim := ""
	if waiting > 0 {
		claim = fmt.Sprintf(", %d waiting for their previous owner", waiting)
	}
	return fmt.Sprintf("partitions=%d (%s%s) consumed=%d rate=%.0f/s lag=%d",
		len(owned), formatPartitions(owned), claim, p.consumed, rate, lag)
}

// formatPartitions writes sorted partitions compactly: "a[0-3,7] b[1]",
// or "none".
func formatPartitions(tps []kafkaconsumer.TopicPartition) string {
	if len(tps) == 0 {
		return "none"
	}
	var b strings.Builder
	for i := 0; i < len(tps); {
		topic := tps[i].Topic
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(topic)
		b.WriteByte('[')
		first := true
		for i < len(tps) && tps[i].Topic == topic {
			lo := tps[i].Partition
			hi := lo
			for i++; i < len(tps) && tps[i].Topic == topic && tps[i].Partition == hi+1; i++ {
				hi++
			}
			if !first {
				b.WriteByte(',')
			}
			first = false
			b.WriteString(strconv.Itoa(int(lo)))
			if hi > lo {
				b.WriteByte('-')
				b.WriteString(strconv.Itoa(int(hi)))
			}
		}
		b.WriteByte(']')
	}
	return b.String()
}
