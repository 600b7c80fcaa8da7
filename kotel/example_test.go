package kotel_test

import (
	"context"
	"fmt"
	"log"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer"
	"github.com/kafkaconsumer/kafkaconsumer/kotel"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// A consumer whose messages are traced: each message's receive span is a
// child of the producer's span whose context its headers carry, and the
// processing has a span of its own. It needs a cluster, so it is only
// compiled.
func Example() {
	// The global provider and the W3C propagator; set up the provider's
	// exporter as usual.
	otel.SetTextMapPropagator(propagation.TraceContext{})
	tracer := kotel.NewTracer(kotel.ConsumerGroup("orders-group"))

	config := kafkaconsumer.NewConfig()
	config.Observer = tracer
	consumer, err := kafkaconsumer.Join("orders-group", kafkaconsumer.TopicSubscription("orders"), "zk1:2181", config)
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = consumer.Close() }()
	for msg := range consumer.Messages() {
		ctx, span := tracer.StartProcess(context.Background(), msg)
		process(ctx, msg)
		span.End()
		consumer.Ack(msg) // ends the receive span
	}
}

func process(context.Context, *sarama.ConsumerMessage) {}

// The calls a consumer makes to its Observer, made by hand: the receive
// span starts at the hand-out, as a child of the producer's span, and ends
// at the ack.
func ExampleTracer() {
	recorder := tracetest.NewSpanRecorder()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
	tracer := kotel.NewTracer(kotel.TracerProvider(provider), kotel.Propagator(propagation.TraceContext{}))

	// A producer's span, whose context travels in the record's headers.
	ctx, send := provider.Tracer("producer").Start(context.Background(), "send orders", trace.WithSpanKind(trace.SpanKindProducer))
	msg := &sarama.ConsumerMessage{Topic: "orders", Partition: 2, Offset: 17, Value: []byte("an order")}
	propagation.TraceContext{}.Inject(ctx, kotel.ConsumerMessageCarrier{Message: msg})
	send.End()

	tracer.HandingOut(msg) // the consumer, before it sends msg on Messages
	tracer.Acked(msg)      // Consumer.Ack(msg)

	for _, span := range recorder.Ended() {
		if span.SpanKind() != trace.SpanKindConsumer {
			continue
		}
		fmt.Println(span.Name(), "- child of the producer's span:", span.Parent().SpanID() == send.SpanContext().SpanID())
		for _, kv := range span.Attributes() {
			fmt.Printf("  %s=%s\n", kv.Key, kv.Value.String())
		}
	}
	// Output:
	// receive orders - child of the producer's span: true
	//   messaging.system=kafka
	//   messaging.operation.type=receive
	//   messaging.operation.name=receive
	//   messaging.destination.name=orders
	//   messaging.destination.partition.id=2
	//   messaging.kafka.offset=17
	//   messaging.message.body.size=8
}
