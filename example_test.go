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
