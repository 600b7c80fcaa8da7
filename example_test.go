package kafkaconsumer_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"regexp"
	"sync"
	"syscall"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer"
)

// This example joins the group "my-group" to consume the topic "my-topic",
// processes each message and acks it, and leaves the group on Ctrl-C. It
// needs a running cluster, so it has no output to check.
func ExampleJoin() {
	config := kafkaconsumer.NewConfig()
	config.Offsets.Initial = sarama.OffsetNewest
	config.MaxProcessingTime = 10 * time.Second

	consumer, err := kafkaconsumer.Join("my-group", kafkaconsumer.TopicSubscription("my-topic"), "localhost:2181", config)
	if err != nil {
		log.Fatalln(err)
	}

	interrupted := make(chan os.Signal, 1)
	signal.Notify(interrupted, os.Interrupt)
	go func() {
		<-interrupted
		consumer.Interrupt() // Messages is closed when the shutdown completes
	}()

	go func() {
		for err := range consumer.Errors() {
			log.Println("consumer error:", err)
		}
	}()

	for msg := range consumer.Messages() {
		fmt.Printf("%s/%d/%d: %s\n", msg.Topic, msg.Partition, msg.Offset, msg.Value)
		consumer.Ack(msg)
	}

	if err := consumer.Close(); err != nil {
		log.Fatalln(err)
	}
}

// A white list subscribes to every topic whose name matches, including
// topics created later; Kafka's internal topics are never selected.
func ExampleWhitelistSubscription() {
	subscription := kafkaconsumer.WhitelistSubscription(regexp.MustCompile(`^orders\.`))
	data, _ := subscription.JSON()
	fmt.Println(len(data) > 0)
	// Output: true
}

// Join checks its input before it connects to anything, and its errors can
// be told apart with errors.Is.
func ExampleJoin_errors() {
	_, err := kafkaconsumer.Join("", kafkaconsumer.TopicSubscription("t"), "localhost:2181", nil)
	fmt.Println(errors.Is(err, kafkaconsumer.ErrInvalidGroup))

	config := kafkaconsumer.NewConfig()
	config.Offsets.Initial = 42
	_, err = kafkaconsumer.Join("g", kafkaconsumer.TopicSubscription("t"), "localhost:2181", config)
	fmt.Println(err)
	// Output:
	// true
	// kafkaconsumer: invalid configuration: Offsets.Initial must be sarama.OffsetOldest (-2) or sarama.OffsetNewest (-1), got 42
}

// Stats shows, per partition, where the instance stands: for progress
// lines, health checks or metrics.
func ExampleConsumer_Stats() {
	consumer, err := kafkaconsumer.Join("my-group", kafkaconsumer.TopicSubscription("my-topic"), "localhost:2181", nil)
	if err != nil {
		log.Fatalln(err)
	}
	defer consumer.Close()

	// Process and ack messages as usual: a partition hands out nothing
	// more once MaxPendingAcks of its messages are not acked.
	go func() {
		for msg := range consumer.Messages() {
			// ... process msg ...
			consumer.Ack(msg)
		}
	}()

	ticker := time.NewTicker(10 * time.Second)
	defer ticker.Stop()
	for range ticker.C {
		var lag int64
		for _, s := range consumer.Stats() {
			if s.Lag > 0 {
				lag += s.Lag
			}
			log.Printf("%s/%d: claimed %t, paused %t, handed out %d, committed %d, pending %d, lag %d",
				s.Topic, s.Partition, s.Claimed, s.Paused, s.LastHandedOut, s.Committed, s.Pending, s.Lag)
		}
		log.Printf("total lag %d", lag)
	}
}

// OnRebalance reports the partitions an instance stopped and started, from
// the consumer's manager goroutine: keep it short.
func ExampleConfig_rebalance() {
	config := kafkaconsumer.NewConfig()
	config.OnRebalance = func(r kafkaconsumer.Rebalance) {
		for _, tp := range r.Revoked {
			log.Printf("stopped %s/%d (acked offsets committed, claim released)", tp.Topic, tp.Partition)
		}
		for _, tp := range r.Assigned {
			log.Printf("started %s/%d", tp.Topic, tp.Partition)
		}
	}
	consumer, err := kafkaconsumer.Join("my-group", kafkaconsumer.TopicSubscription("my-topic"), "localhost:2181", config)
	if err != nil {
		log.Fatalln(err)
	}
	defer consumer.Close()
}

// Config.Logger receives a consumer's lines, and its ZooKeeper client's,
// levelled and with the attributes group, instance, topic and partition.
// Without it they go to the package Logger, which is silent by default and
// kept for compatibility; set that before the first Join.
func Example_slog() {
	config := kafkaconsumer.NewConfig()
	config.Logger = slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	consumer, err := kafkaconsumer.Join("my-group", kafkaconsumer.TopicSubscription("my-topic"), "localhost:2181", config)
	if err != nil {
		log.Fatalln(err)
	}
	defer consumer.Close()

	// Or, for every consumer without a Config.Logger:
	kafkaconsumer.Logger = slog.NewLogLogger(slog.NewTextHandler(os.Stderr, nil), slog.LevelInfo)
}

// A consumer under Kubernetes, which sends SIGTERM and, after the pod's
// terminationGracePeriodSeconds (30 s by default), SIGKILL. The start is
// bounded too (and aborted by a SIGTERM), and Shutdown's deadline leaves
// 10 s of the grace period for the final commits, the releases of the
// claims and the closing of the connections. Workers process messages in
// parallel; those they have not acked when the deadline passes are
// consumed again by the next owner of their partition.
func ExampleConsumer_Shutdown() {
	const (
		gracePeriod     = 30 * time.Second             // terminationGracePeriodSeconds
		shutdownTimeout = gracePeriod - 10*time.Second // waiting for acks
		startTimeout    = time.Minute                  // fail the start, and let the pod restart
	)
	config := kafkaconsumer.NewConfig()
	config.Logger = slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	// The longest a worker takes for a message, with a margin; at most
	// shutdownTimeout. A rebalance waits this long for acks, too.
	config.MaxProcessingTime = 15 * time.Second

	terminated, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	startCtx, cancelStart := context.WithTimeout(terminated, startTimeout)
	defer cancelStart()
	consumer, err := kafkaconsumer.JoinContext(startCtx, "my-group", kafkaconsumer.TopicSubscription("my-topic"), "zk1:2181,zk2:2181/kafka", config)
	if err != nil {
		log.Fatalln("join:", err)
	}

	var workers sync.WaitGroup
	for range 4 {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for msg := range consumer.Messages() { // closed when Shutdown returns
				fmt.Printf("%s/%d/%d: %s\n", msg.Topic, msg.Partition, msg.Offset, msg.Value)
				consumer.Ack(msg)
			}
		}()
	}
	go func() {
		for err := range consumer.Errors() { // closed when Shutdown returns
			log.Println("consumer error:", err)
		}
	}()

	<-terminated.Done()
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	err = consumer.Shutdown(ctx)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		log.Println("shutdown: messages not acked in time are left to the next owner:", err)
	case err != nil:
		log.Println("shutdown:", err)
	}
	workers.Wait()
}

// rows stands in for a database table that takes many rows in one
// statement (a multi-row INSERT, COPY, a bulk API).
type rows struct{}

func (rows) insertMany(values [][]byte) error { return nil }

// A consumer set to batches bulk-writes each batch, then acks all of it
// with one call. A batch holds up to BatchSize messages of one partition
// in offset order; BatchLinger lets a partition wait a little to fill it.
// It needs a running cluster, so it has no output to check.
func ExampleConsumer_Batches() {
	config := kafkaconsumer.NewConfig()
	config.BatchSize = 500
	config.BatchLinger = 50 * time.Millisecond

	consumer, err := kafkaconsumer.Join("my-group", kafkaconsumer.TopicSubscription("my-topic"), "localhost:2181", config)
	if err != nil {
		log.Fatalln(err)
	}
	interrupted := make(chan os.Signal, 1)
	signal.Notify(interrupted, os.Interrupt)
	go func() {
		<-interrupted
		consumer.Interrupt() // Batches is closed when the shutdown completes
	}()
	go func() {
		for err := range consumer.Errors() {
			log.Println("consumer error:", err)
		}
	}()

	var table rows
	for batch := range consumer.Batches() {
		values := make([][]byte, len(batch.Messages))
		for i, msg := range batch.Messages {
			values[i] = msg.Value
		}
		if err := table.insertMany(values); err != nil {
			// Not acked: the batch is consumed again by the partition's
			// next owner (here: after a restart).
			log.Printf("insert %d rows of %s/%d: %v", len(values), batch.Topic, batch.Partition, err)
			continue
		}
		consumer.AckBatch(batch)
	}
	if err := consumer.Close(); err != nil {
		log.Fatalln(err)
	}
}

// sink stands in for a downstream service that is sometimes busy.
type sink struct{}

var errBusy = errors.New("busy")

func (sink) write(msgs []*sarama.ConsumerMessage) error { return nil }
func (sink) ready() <-chan struct{} {
	ready := make(chan struct{})
	close(ready)
	return ready
}

// Back-pressure with Pause: when the downstream of a partition is busy,
// the partition is paused (it keeps its claim, and fetches and hands out
// nothing) while the other partitions go on; it resumes once the batch it
// held was written. It needs a running cluster, so it has no output to
// check.
func ExampleConsumer_Pause() {
	config := kafkaconsumer.NewConfig()
	config.BatchSize = 100
	consumer, err := kafkaconsumer.Join("my-group", kafkaconsumer.TopicSubscription("my-topic"), "localhost:2181", config)
	if err != nil {
		log.Fatalln(err)
	}

	var out sink
	var retries sync.WaitGroup
	for batch := range consumer.Batches() {
		err := out.write(batch.Messages)
		if !errors.Is(err, errBusy) {
			consumer.AckBatch(batch) // written (or dropped: log other errors here)
			continue
		}
		if err := consumer.Pause(batch.Topic, batch.Partition); err != nil {
			log.Println(err) // the partition left this instance: its next owner consumes the batch again
			continue
		}
		retries.Add(1)
		go func() {
			defer retries.Done()
			for errors.Is(out.write(batch.Messages), errBusy) {
				<-out.ready()
			}
			consumer.AckBatch(batch)
			if err := consumer.Resume(batch.Topic, batch.Partition); err != nil {
				log.Println(err)
			}
		}()
	}
	retries.Wait()
	if err := consumer.Close(); err != nil {
		log.Fatalln(err)
	}
}
