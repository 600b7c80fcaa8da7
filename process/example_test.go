package process_test

import (
	"context"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer"
	"github.com/kafkaconsumer/kafkaconsumer/process"
)

// store stands for your database or downstream service.
type store struct{}

func (store) save(ctx context.Context, key, value []byte) error { return nil }

// Run handles up to 64 messages at once, one key at a time in offset
// order, tries a failed message twice more, and sends it to a dead-letter
// topic after its third failure. It needs a running cluster, so it has no
// output to check.
func ExampleRun() {
	config := kafkaconsumer.NewConfig()
	config.MaxProcessingTime = 10 * time.Second
	consumer, err := kafkaconsumer.Join("my-group", kafkaconsumer.TopicSubscription("my-topic"), "localhost:2181", config)
	if err != nil {
		log.Fatalln(err)
	}
	go func() {
		for err := range consumer.Errors() {
			log.Println("consumer error:", err)
		}
	}()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var db store
	err = process.Run(ctx, consumer, func(ctx context.Context, msg *sarama.ConsumerMessage) error {
		return db.save(ctx, msg.Key, msg.Value) // an error: tried again, then dead lettered
	}, process.Options{
		Concurrency: 64,
		Ordering:    process.ByKey,
		Retry:       process.Retry{Attempts: 3, Backoff: 200 * time.Millisecond},
		DeadLetter:  process.DeadLetter{Topic: "my-topic.dead", Brokers: []string{"localhost:9092"}},
	})
	if err != nil {
		log.Println("process:", err)
	}
	if err := consumer.Close(); err != nil {
		log.Fatalln(err)
	}
}
