package kotel_test

// Traces end to end against the real cluster (make test starts one and
// exports ZOOKEEPER_PEERS and KAFKA_PEERS; make cluster-up and
// . .cluster/env for a run by hand): records produced with the trace
// context of a producer span in their headers, consumed through
// kafkaconsumer.Join with the Tracer as Config.Observer, and acked.

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer"
	"github.com/kafkaconsumer/kafkaconsumer/kotel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"
)

// cluster returns the ZooKeeper connection string and the Kafka brokers of
// the test cluster, or skips.
func cluster(t *testing.T) (string, []string) {
	t.Helper()
	zookeeper, kafka := os.Getenv("ZOOKEEPER_PEERS"), os.Getenv("KAFKA_PEERS")
	if testing.Short() || zookeeper == "" || kafka == "" {
		t.Skip("needs ZOOKEEPER_PEERS and KAFKA_PEERS (make test, or make cluster-up and . .cluster/env)")
	}
	return zookeeper, strings.Split(kafka, ",")
}

// kafkaVersion is KAFKA_VERSION, for sarama's Config.Version; record
// headers need 0.11 or later.
func kafkaVersion(t *testing.T) sarama.KafkaVersion {
	v := sarama.V2_8_0_0
	if s := os.Getenv("KAFKA_VERSION"); s != "" {
		var err error
		if v, err = sarama.ParseKafkaVersion(s); err != nil {
			t.Fatalf("KAFKA_VERSION=%q: %s", s, err)
		}
	}
	return v
}

// TestIntegrationTraceEndToEnd: each record's receive span is the child
// of the span of its production, in the same trace, with the messaging
// attributes; with LinkSpans, and in batch mode, a new root linked to
// those spans.
func TestIntegrationTraceEndToEnd(t *testing.T) {
	for _, tc := range []struct {
		batchSize int
		link      bool
	}{{0, false}, {0, true}, {4, false}} {
		t.Run(fmt.Sprintf("batchSize=%d,LinkSpans=%t", tc.batchSize, tc.link), func(t *testing.T) {
			testTraceEndToEnd(t, tc.batchSize, tc.link)
		})
	}
}

func testTraceEndToEnd(t *testing.T, batchSize int, link bool) {
	zookeeper, brokers := cluster(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(),
		goleak.IgnoreTopFunction("github.com/rcrowley/go-metrics.(*meterArbiter).tick"))
	recorder := tracetest.NewSpanRecorder()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))

	clientConfig := sarama.NewConfig()
	clientConfig.Version = kafkaVersion(t)
	clientConfig.Producer.Return.Successes = true
	client, err := sarama.NewClient(brokers, clientConfig)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = client.Close() }()
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		t.Fatal(err)
	}
	suffix := fmt.Sprintf("%d.%06d", time.Now().UnixNano()%1e9, rand.Intn(1e6))
	topic, group := "kotel."+suffix, "kotel-group."+suffix
	if err := admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1}, false); err != nil {
		t.Fatal(err)
	}

	// Each record carries the context of its own producer span.
	producer, err := sarama.NewSyncProducerFromClient(client)
	if err != nil {
		t.Fatal(err)
	}
	const n = 3
	sent := make(map[int64]trace.SpanContext) // by offset
	for i := 0; i < n; i++ {
		ctx, span := provider.Tracer("test").Start(context.Background(), "send "+topic, trace.WithSpanKind(trace.SpanKindProducer))
		msg := &sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder(strconv.Itoa(i))}
		propagation.TraceContext{}.Inject(ctx, kotel.ProducerMessageCarrier{Message: msg})
		_, offset, err := producer.SendMessage(msg)
		span.End()
		if err != nil {
			_ = producer.Close()
			t.Fatal(err)
		}
		sent[offset] = span.SpanContext()
	}
	if err := producer.Close(); err != nil {
		t.Fatal(err)
	}

	config := kafkaconsumer.NewConfig()
	config.Version = clientConfig.Version
	config.ClientID = "kotel-test"
	config.BatchSize = batchSize
	config.MaxProcessingTime = 2 * time.Second
	opts := []kotel.Opt{kotel.TracerProvider(provider), kotel.Propagator(propagation.TraceContext{}),
		kotel.ConsumerGroup(group), kotel.ClientID(config.ClientID)}
	if link {
		opts = append(opts, kotel.LinkSpans())
	}
	config.Observer = kotel.NewTracer(opts...)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	consumer, err := kafkaconsumer.JoinContext(ctx, group, kafkaconsumer.TopicSubscription(topic), zookeeper, config)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = consumer.Close() }()
	// The channel of the other kind is closed: nil, it is never ready.
	messages, batches := consumer.Messages(), consumer.Batches()
	if batchSize > 0 {
		messages = nil
	} else {
		batches = nil
	}
	for received := 0; received < n; {
		select {
		case msg := <-messages:
			consumer.Ack(msg)
			received++
		case b := <-batches:
			consumer.AckBatch(b)
			received += len(b.Messages)
		case <-ctx.Done():
			t.Fatalf("received %d of %d messages", received, n)
		}
	}

	// The spans end in Ack, on this goroutine: they are all there.
	spans := ended(recorder, "receive "+topic)
	if len(spans) == 0 {
		t.Fatal("no receive span ended")
	}
	linked := 0
	for _, span := range spans {
		if span.SpanKind() != trace.SpanKindConsumer {
			t.Errorf("kind %s; want consumer", span.SpanKind())
		}
		checkAttributes(t, span,
			attribute.String("messaging.system", "kafka"),
			attribute.String("messaging.operation.type", "receive"),
			attribute.String("messaging.destination.name", topic),
			attribute.String("messaging.destination.partition.id", "0"),
			attribute.String("messaging.consumer.group.name", group),
			attribute.String("messaging.client.id", "kotel-test"),
		)
		if batchSize == 0 && !link {
			offset := offsetOf(span.Attributes())
			producerSpan, ok := sent[offset]
			if !ok {
				t.Errorf("receive span of offset %d, which was not produced", offset)
				continue
			}
			if span.Parent().SpanID() != producerSpan.SpanID() || span.SpanContext().TraceID() != producerSpan.TraceID() {
				t.Errorf("offset %d: parent %s in trace %s; want the producer's span %s in trace %s", offset,
					span.Parent().SpanID(), span.SpanContext().TraceID(), producerSpan.SpanID(), producerSpan.TraceID())
			}
			delete(sent, offset)
			continue
		}
		if span.Parent().IsValid() {
			t.Errorf("span with parent %s; want a root", span.Parent().SpanID())
		}
		for _, l := range span.Links() {
			offset := offsetOf(l.Attributes)
			if producerSpan, ok := sent[offset]; !ok || l.SpanContext.SpanID() != producerSpan.SpanID() {
				t.Errorf("link of offset %d to span %s; want one to the producer's span %s", offset, l.SpanContext.SpanID(), producerSpan.SpanID())
			}
			delete(sent, offset)
			linked++
		}
	}
	if len(sent) != 0 {
		t.Errorf("no receive span is a child of (or linked to) the producer spans of offsets %v", sent)
	}
	if (batchSize > 0 || link) && linked != n {
		t.Errorf("%d links from receive spans; want %d", linked, n)
	}
	if err := consumer.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %s", err)
	}
}

// offsetOf returns the value of messaging.kafka.offset among attrs, or -1.
func offsetOf(attrs []attribute.KeyValue) int64 {
	for _, kv := range attrs {
		if kv.Key == "messaging.kafka.offset" {
			return kv.Value.AsInt64()
		}
	}
	return -1
}
