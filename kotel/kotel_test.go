package kotel_test

// The Tracer driven as a consumer drives it (HandingOut, HandingOutBatch,
// Acked, TakenBack), with the SDK's in-memory span recorder: spans,
// parents, links and attributes, without a cluster.

import (
	"context"
	"sync"
	"testing"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer"
	"github.com/kafkaconsumer/kafkaconsumer/kotel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// setup returns a provider that records the spans it ends, and a Tracer
// on it with the W3C propagator and the given options.
func setup(opts ...kotel.Opt) (*tracetest.SpanRecorder, *sdktrace.TracerProvider, *kotel.Tracer) {
	recorder := tracetest.NewSpanRecorder()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
	opts = append([]kotel.Opt{kotel.TracerProvider(provider), kotel.Propagator(propagation.TraceContext{})}, opts...)
	return recorder, provider, kotel.NewTracer(opts...)
}

// produced returns a message of t/partition at offset whose headers carry
// the trace context of a new span of provider, "send", and that span's
// context.
func produced(provider trace.TracerProvider, partition int32, offset int64) (*sarama.ConsumerMessage, trace.SpanContext) {
	ctx, span := provider.Tracer("test").Start(context.Background(), "send", trace.WithSpanKind(trace.SpanKindProducer))
	defer span.End()
	msg := &sarama.ConsumerMessage{Topic: "t", Partition: partition, Offset: offset, Key: []byte("k"), Value: []byte("value")}
	propagation.TraceContext{}.Inject(ctx, kotel.ConsumerMessageCarrier{Message: msg})
	return msg, span.SpanContext()
}

// ended returns the ended spans of recorder named name.
func ended(recorder *tracetest.SpanRecorder, name string) []sdktrace.ReadOnlySpan {
	var spans []sdktrace.ReadOnlySpan
	for _, s := range recorder.Ended() {
		if s.Name() == name {
			spans = append(spans, s)
		}
	}
	return spans
}

// checkAttributes fails the test unless span has each of want.
func checkAttributes(t *testing.T, span sdktrace.ReadOnlySpan, want ...attribute.KeyValue) {
	t.Helper()
	got := make(map[attribute.Key]attribute.Value)
	for _, kv := range span.Attributes() {
		got[kv.Key] = kv.Value
	}
	for _, kv := range want {
		if v, ok := got[kv.Key]; !ok || v != kv.Value {
			t.Errorf("%s: %s = %v (set: %t); want %v", span.Name(), kv.Key, v.String(), ok, kv.Value.String())
		}
	}
}

// TestReceiveSpanIsChildOfProducer: a message's receive span starts at
// the hand-out, as a CONSUMER child of the trace context in its headers,
// with the messaging attributes, and ends at its ack, once.
func TestReceiveSpanIsChildOfProducer(t *testing.T) {
	recorder, provider, tracer := setup(kotel.ConsumerGroup("g"), kotel.ClientID("c"))
	msg, producer := produced(provider, 3, 42)

	tracer.HandingOut(msg)
	if n := len(ended(recorder, "receive t")); n != 0 {
		t.Fatalf("%d receive spans ended before the ack", n)
	}
	if sc := trace.SpanContextFromContext(tracer.Context(context.Background(), msg)); sc.TraceID() != producer.TraceID() || sc.SpanID() == producer.SpanID() {
		t.Errorf("Context before the ack: span %s; want the receive span, in trace %s", sc.SpanID(), producer.TraceID())
	}
	tracer.Acked(msg)
	tracer.Acked(msg) // twice: nothing more
	spans := ended(recorder, "receive t")
	if len(spans) != 1 {
		t.Fatalf("%d receive spans ended; want 1", len(spans))
	}
	span := spans[0]
	if span.SpanKind() != trace.SpanKindConsumer {
		t.Errorf("kind %s; want consumer", span.SpanKind())
	}
	if span.Parent().SpanID() != producer.SpanID() || span.SpanContext().TraceID() != producer.TraceID() {
		t.Errorf("parent %s in trace %s; want the producer's span %s in trace %s",
			span.Parent().SpanID(), span.SpanContext().TraceID(), producer.SpanID(), producer.TraceID())
	}
	if len(span.Links()) != 0 {
		t.Errorf("%d links; want none", len(span.Links()))
	}
	checkAttributes(t, span,
		attribute.String("messaging.system", "kafka"),
		attribute.String("messaging.operation.type", "receive"),
		attribute.String("messaging.operation.name", "receive"),
		attribute.String("messaging.destination.name", "t"),
		attribute.String("messaging.destination.partition.id", "3"),
		attribute.Int("messaging.kafka.offset", 42),
		attribute.String("messaging.consumer.group.name", "g"),
		attribute.String("messaging.client.id", "c"),
		attribute.String("messaging.kafka.message.key", "k"),
		attribute.Int("messaging.message.body.size", 5),
	)
}

// TestLinkSpans: with LinkSpans the receive span is a new root, linked to
// the producer's context.
func TestLinkSpans(t *testing.T) {
	recorder, provider, tracer := setup(kotel.LinkSpans())
	msg, producer := produced(provider, 0, 1)
	tracer.HandingOut(msg)
	tracer.Acked(msg)
	spans := ended(recorder, "receive t")
	if len(spans) != 1 {
		t.Fatalf("%d receive spans ended; want 1", len(spans))
	}
	span := spans[0]
	if span.Parent().IsValid() || span.SpanContext().TraceID() == producer.TraceID() {
		t.Errorf("parent %s in trace %s; want a new root", span.Parent().SpanID(), span.SpanContext().TraceID())
	}
	if links := span.Links(); len(links) != 1 || links[0].SpanContext.SpanID() != producer.SpanID() {
		t.Errorf("links %v; want one to the producer's span %s", links, producer.SpanID())
	}
}

// TestMessageWithoutTraceContext: a message whose headers carry no trace
// context gets a receive span of a new trace.
func TestMessageWithoutTraceContext(t *testing.T) {
	recorder, _, tracer := setup()
	msg := &sarama.ConsumerMessage{Topic: "t", Key: []byte("k")} // a tombstone
	tracer.HandingOut(msg)
	tracer.Acked(msg)
	spans := ended(recorder, "receive t")
	if len(spans) != 1 || spans[0].Parent().IsValid() {
		t.Fatalf("%d receive spans ended; want 1, a root", len(spans))
	}
	checkAttributes(t, spans[0], attribute.Bool("messaging.kafka.message.tombstone", true))
}

// TestTakenBackEndsTheSpan: a message taken back unread ends its span,
// with the event "taken back".
func TestTakenBackEndsTheSpan(t *testing.T) {
	recorder, provider, tracer := setup()
	msg, _ := produced(provider, 0, 7)
	tracer.HandingOut(msg)
	tracer.TakenBack(msg)
	tracer.Acked(msg) // too late: nothing more
	spans := ended(recorder, "receive t")
	if len(spans) != 1 {
		t.Fatalf("%d receive spans ended; want 1", len(spans))
	}
	if events := spans[0].Events(); len(events) != 1 || events[0].Name != "taken back" {
		t.Errorf("events %v; want one, taken back", events)
	}
}

// TestBatchSpan: a batch gets one receive span, a new root linked to each
// message's trace context, ended when its last message is acked or taken
// back, however they are.
func TestBatchSpan(t *testing.T) {
	recorder, provider, tracer := setup()
	m0, p0 := produced(provider, 2, 10)
	m1 := &sarama.ConsumerMessage{Topic: "t", Partition: 2, Offset: 11} // no trace context
	m2, p2 := produced(provider, 2, 12)
	b := &kafkaconsumer.Batch{Topic: "t", Partition: 2, Messages: []*sarama.ConsumerMessage{m0, m1, m2}}

	tracer.HandingOutBatch(b)
	batchSpan := trace.SpanContextFromContext(tracer.BatchContext(context.Background(), b))
	if !batchSpan.IsValid() {
		t.Fatal("BatchContext has no span while the batch is out")
	}
	if sc := trace.SpanContextFromContext(tracer.Context(context.Background(), m1)); sc.SpanID() != batchSpan.SpanID() {
		t.Errorf("Context of a message of the batch: span %s; want the batch's %s", sc.SpanID(), batchSpan.SpanID())
	}
	tracer.Acked(m1)
	tracer.TakenBack(m0)
	if n := len(ended(recorder, "receive t")); n != 0 {
		t.Fatalf("the batch span ended with a message still out")
	}
	tracer.Acked(m2)
	spans := ended(recorder, "receive t")
	if len(spans) != 1 {
		t.Fatalf("%d receive spans ended; want 1", len(spans))
	}
	span := spans[0]
	if span.Parent().IsValid() || span.SpanContext().SpanID() != batchSpan.SpanID() {
		t.Errorf("batch span %s, parent %s; want %s, a root", span.SpanContext().SpanID(), span.Parent().SpanID(), batchSpan.SpanID())
	}
	links := span.Links()
	if len(links) != 2 || links[0].SpanContext.SpanID() != p0.SpanID() || links[1].SpanContext.SpanID() != p2.SpanID() {
		t.Errorf("links %v; want the producer spans of offsets 10 and 12", links)
	}
	checkAttributes(t, span,
		attribute.String("messaging.system", "kafka"),
		attribute.String("messaging.operation.type", "receive"),
		attribute.String("messaging.destination.name", "t"),
		attribute.String("messaging.destination.partition.id", "2"),
		attribute.Int("messaging.batch.message_count", 3),
	)
	if ctx := context.Background(); tracer.BatchContext(ctx, b) != ctx {
		t.Error("BatchContext has a span after the batch ended")
	}
}

// TestProcessSpans: StartProcess and StartProcessBatch start children of
// the receive spans, with the operation process, which the caller ends.
func TestProcessSpans(t *testing.T) {
	recorder, provider, tracer := setup()
	msg, producer := produced(provider, 0, 5)
	tracer.HandingOut(msg)
	_, span := tracer.StartProcess(context.Background(), msg)
	span.End()
	tracer.Acked(msg)

	m, _ := produced(provider, 1, 6)
	b := &kafkaconsumer.Batch{Topic: "t", Partition: 1, Messages: []*sarama.ConsumerMessage{m}}
	tracer.HandingOutBatch(b)
	_, span = tracer.StartProcessBatch(context.Background(), b)
	span.End()
	tracer.Acked(m) // AckBatch(b) tells of each message

	receives, processes := ended(recorder, "receive t"), ended(recorder, "process t")
	if len(receives) != 2 || len(processes) != 2 {
		t.Fatalf("%d receive and %d process spans ended; want 2 and 2", len(receives), len(processes))
	}
	for i := range processes {
		if processes[i].Parent().SpanID() != receives[i].SpanContext().SpanID() {
			t.Errorf("process span %d: parent %s; want the receive span %s", i, processes[i].Parent().SpanID(), receives[i].SpanContext().SpanID())
		}
		checkAttributes(t, processes[i], attribute.String("messaging.operation.type", "process"), attribute.String("messaging.operation.name", "process"))
	}
	if receives[0].SpanContext().TraceID() != producer.TraceID() {
		t.Error("the message's receive span is not in the producer's trace")
	}
}

// TestContextAfterTheAck: once a message's span ended, Context gives the
// trace context of its headers.
func TestContextAfterTheAck(t *testing.T) {
	_, provider, tracer := setup()
	msg, producer := produced(provider, 0, 1)
	if sc := trace.SpanContextFromContext(tracer.Context(context.Background(), msg)); sc.SpanID() != producer.SpanID() {
		t.Errorf("Context of a message not handed out: span %s; want the producer's %s", sc.SpanID(), producer.SpanID())
	}
}

// TestConcurrentHandOutsAndAcks: hand-outs on some goroutines, acks on
// others, as a consumer's partitions and its users do: every span ends,
// once (run with -race).
func TestConcurrentHandOutsAndAcks(t *testing.T) {
	recorder, provider, tracer := setup()
	const partitions, per = 4, 200
	acks := make(chan *sarama.ConsumerMessage, 16)
	var handing, acking sync.WaitGroup
	for p := int32(0); p < partitions; p++ {
		handing.Go(func() {
			for o := int64(0); o < per; o++ {
				msg, _ := produced(provider, p, o)
				tracer.HandingOut(msg)
				acks <- msg
			}
		})
	}
	for range 2 {
		acking.Go(func() {
			for msg := range acks {
				tracer.Acked(msg)
			}
		})
	}
	handing.Wait()
	close(acks)
	acking.Wait()
	if n := len(ended(recorder, "receive t")); n != partitions*per {
		t.Errorf("%d receive spans ended; want %d", n, partitions*per)
	}
}

// TestCarriers: the carriers read, replace and add headers.
func TestCarriers(t *testing.T) {
	consumed := kotel.ConsumerMessageCarrier{Message: &sarama.ConsumerMessage{Headers: []*sarama.RecordHeader{{Key: []byte("a"), Value: []byte("1")}}}}
	produced := kotel.ProducerMessageCarrier{Message: &sarama.ProducerMessage{Headers: []sarama.RecordHeader{{Key: []byte("a"), Value: []byte("1")}}}}
	for _, c := range []propagation.TextMapCarrier{consumed, produced} {
		c.Set("a", "2")
		c.Set("b", "3")
		if got := []string{c.Get("a"), c.Get("b"), c.Get("c")}; got[0] != "2" || got[1] != "3" || got[2] != "" {
			t.Errorf("%T: a, b, c = %q; want 2, 3 and none", c, got)
		}
		if keys := c.Keys(); len(keys) != 2 || keys[0] != "a" || keys[1] != "b" {
			t.Errorf("%T: keys %q; want a and b", c, keys)
		}
	}
}

// BenchmarkTracer measures what the Tracer adds per message, the hand-out
// and the ack of a message whose headers carry a trace context: with a
// recording SDK provider (every span sampled, none exported), and with
// OpenTelemetry's no-op provider.
func BenchmarkTracer(b *testing.B) {
	for _, bc := range []struct {
		name     string
		provider trace.TracerProvider
	}{
		{"sampled", sdktrace.NewTracerProvider()},
		{"noop", noop.NewTracerProvider()},
	} {
		b.Run(bc.name, func(b *testing.B) {
			tracer := kotel.NewTracer(kotel.TracerProvider(bc.provider), kotel.Propagator(propagation.TraceContext{}), kotel.ConsumerGroup("g"))
			msg, _ := produced(sdktrace.NewTracerProvider(), 0, 1)
			b.ReportAllocs()
			for b.Loop() {
				tracer.HandingOut(msg)
				tracer.Acked(msg)
			}
		})
	}
}
