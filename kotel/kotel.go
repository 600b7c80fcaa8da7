// Package kotel traces the messages of a kafkaconsumer consumer with
// OpenTelemetry. It is a module of its own, so that the library does not
// depend on OpenTelemetry.
//
// A Tracer is a kafkaconsumer.Observer: set it in Config.Observer. For each
// message handed out on Messages it starts a CONSUMER span, "receive
// <topic>", just before the hand-out, and ends it when the message is acked
// (or taken back unread: the span then has a "taken back" event). The
// trace context of the record's headers (W3C traceparent, or what the
// configured propagator reads) is the span's parent; with LinkSpans the span
// starts a new trace instead, linked to that context (the link has the
// attribute messaging.kafka.offset). A consumer set to
// batches (Config.BatchSize) gets one span per batch, a new root linked to
// each record's context, ended when every message of the batch is acked or
// taken back.
//
// The span lasts from the hand-out to the ack: it covers the time the
// message waits in the channel and its processing. For a span of the
// processing alone, StartProcess (StartProcessBatch) starts a "process
// <topic>" span, child of the receive span, that the caller ends.
// Context gives the context that carries a message's span, to start
// spans of one's own under it.
//
// The attributes follow the OpenTelemetry semantic conventions for
// messaging, version 1.40.0 (go.opentelemetry.io/otel/semconv/v1.40.0):
//
//	messaging.system                    kafka
//	messaging.operation.name            receive, or process
//	messaging.operation.type            receive, or process
//	messaging.destination.name          the topic
//	messaging.destination.partition.id  the partition, as a string
//	messaging.consumer.group.name       ConsumerGroup, when given
//	messaging.client.id                 ClientID, when given
//	messaging.kafka.offset              the message's offset (not on batches)
//	messaging.kafka.message.key         the key, when it is valid UTF-8
//	messaging.kafka.message.tombstone   true for a key with a nil value
//	messaging.message.body.size         the length of the value
//	messaging.batch.message_count       the number of messages of a batch
//
// A Tracer holds each span from hand-out to ack: a message that is never
// acked (which a consumer must not do: see kafkaconsumer.Config's
// MaxPendingAcks) keeps its span open, and in the Tracer's memory, for good.
package kotel

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// instrumentationName names the Tracer's trace.Tracer.
const instrumentationName = "github.com/kafkaconsumer/kafkaconsumer/kotel"

// Tracer traces the messages of a consumer: see the package
// documentation. Create it with NewTracer and set it in Config.Observer.
// Its methods are safe for concurrent use. One Tracer may serve several
// consumers; ConsumerGroup and ClientID are then the same on all of their
// spans.
type Tracer struct {
	tracer     trace.Tracer
	propagator propagation.TextMapPropagator
	linkSpans  bool
	// common are the attributes of every span: messaging.system, and the
	// consumer group and client ID when given.
	common []attribute.KeyValue

	// inFlight maps each message handed out and not yet acked or taken
	// back (a *sarama.ConsumerMessage) to its *flight. Entries are added
	// by HandingOut and HandingOutBatch, and removed by Acked and
	// TakenBack.
	inFlight sync.Map
}

// flight is the span of a message, or of a batch, from hand-out to ack.
type flight struct {
	span trace.Span
	// left counts the messages of the span not acked or taken back yet;
	// the one that brings it to 0 ends the span.
	left atomic.Int32
}

// Opt is an option of NewTracer.
type Opt func(*Tracer)

// TracerProvider sets the provider of the Tracer's spans. Default
// otel.GetTracerProvider(), the global one.
func TracerProvider(provider trace.TracerProvider) Opt {
	return func(t *Tracer) {
		t.tracer = provider.Tracer(instrumentationName, trace.WithSchemaURL(semconv.SchemaURL))
	}
}

// Propagator sets how the trace context is read from the record headers.
// Default otel.GetTextMapPropagator(), the global one (which reads nothing
// until one is set: otel.SetTextMapPropagator(propagation.TraceContext{})
// for W3C's traceparent and tracestate).
func Propagator(propagator propagation.TextMapPropagator) Opt {
	return func(t *Tracer) { t.propagator = propagator }
}

// ConsumerGroup sets messaging.consumer.group.name on every span: the
// group given to kafkaconsumer.Join. Default: not set.
func ConsumerGroup(group string) Opt {
	return func(t *Tracer) { t.common = append(t.common, semconv.MessagingConsumerGroupName(group)) }
}

// ClientID sets messaging.client.id on every span, for example the sarama
// configuration's ClientID. Default: not set.
func ClientID(id string) Opt {
	return func(t *Tracer) { t.common = append(t.common, semconv.MessagingClientID(id)) }
}

// LinkSpans starts each message's receive span as the root of a new trace,
// linked to the trace context of its record, instead of as its child: for
// producers whose traces should not grow with every consumer.
func LinkSpans() Opt {
	return func(t *Tracer) { t.linkSpans = true }
}

// NewTracer returns a Tracer with the given options.
func NewTracer(opts ...Opt) *Tracer {
	t := &Tracer{common: []attribute.KeyValue{semconv.MessagingSystemKafka}}
	for _, opt := range opts {
		opt(t)
	}
	if t.tracer == nil {
		TracerProvider(otel.GetTracerProvider())(t)
	}
	if t.propagator == nil {
		t.propagator = otel.GetTextMapPropagator()
	}
	return t
}

var _ kafkaconsumer.Observer = (*Tracer)(nil)

// HandingOut implements kafkaconsumer.Observer: it starts msg's receive
// span, child of the trace context of its headers (or linked to it, with
// LinkSpans).
func (t *Tracer) HandingOut(msg *sarama.ConsumerMessage) {
	parent := t.propagator.Extract(context.Background(), ConsumerMessageCarrier{msg})
	opts := []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(t.messageAttributes(msg, semconv.MessagingOperationTypeReceive, "receive")...),
	}
	if t.linkSpans {
		opts = append(opts, trace.WithNewRoot())
		if sc := trace.SpanContextFromContext(parent); sc.IsValid() {
			opts = append(opts, trace.WithLinks(recordLink(sc, msg)))
		}
	}
	_, span := t.tracer.Start(parent, "receive "+msg.Topic, opts...)
	f := &flight{span: span}
	f.left.Store(1)
	t.inFlight.Store(msg, f)
}

// HandingOutBatch implements kafkaconsumer.Observer: it starts b's receive
// span, a new root linked to the trace context of each of its messages
// that has one (each link with the message's messaging.kafka.offset).
func (t *Tracer) HandingOutBatch(b *kafkaconsumer.Batch) {
	links := make([]trace.Link, 0, len(b.Messages))
	for _, msg := range b.Messages {
		sc := trace.SpanContextFromContext(t.propagator.Extract(context.Background(), ConsumerMessageCarrier{msg}))
		if sc.IsValid() {
			links = append(links, recordLink(sc, msg))
		}
	}
	_, span := t.tracer.Start(context.Background(), "receive "+b.Topic,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithNewRoot(),
		trace.WithLinks(links...),
		trace.WithAttributes(t.batchAttributes(b, semconv.MessagingOperationTypeReceive, "receive")...),
	)
	f := &flight{span: span}
	f.left.Store(int32(len(b.Messages)))
	for _, msg := range b.Messages {
		t.inFlight.Store(msg, f)
	}
}

// recordLink returns the link to sc, the trace context of msg's record,
// with msg's offset (messaging.kafka.offset).
func recordLink(sc trace.SpanContext, msg *sarama.ConsumerMessage) trace.Link {
	return trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{semconv.MessagingKafkaOffset(int(msg.Offset))}}
}

// Acked implements kafkaconsumer.Observer: it ends msg's span, or, in a
// batch, the batch's span once every message of it is acked or taken back.
// A message without a span (acked twice, or not handed out through this
// Tracer) is ignored.
func (t *Tracer) Acked(msg *sarama.ConsumerMessage) {
	if v, ok := t.inFlight.LoadAndDelete(msg); ok {
		v.(*flight).done()
	}
}

// TakenBack implements kafkaconsumer.Observer: as Acked, after it adds the
// event "taken back" (with the message's offset) to the span.
func (t *Tracer) TakenBack(msg *sarama.ConsumerMessage) {
	if v, ok := t.inFlight.LoadAndDelete(msg); ok {
		f := v.(*flight)
		f.span.AddEvent("taken back", trace.WithAttributes(semconv.MessagingKafkaOffset(int(msg.Offset))))
		f.done()
	}
}

// done counts a message of f as acked or taken back, and ends f's span
// with the last one.
func (f *flight) done() {
	if f.left.Add(-1) == 0 {
		f.span.End()
	}
}

// Context returns ctx with the span of msg, handed out and not yet acked
// or taken back: its receive span, or its batch's; otherwise ctx with the
// trace context of msg's headers, as the propagator reads it. Spans
// started under it are children of the receive span (or of the producer's).
func (t *Tracer) Context(ctx context.Context, msg *sarama.ConsumerMessage) context.Context {
	if v, ok := t.inFlight.Load(msg); ok {
		return trace.ContextWithSpan(ctx, v.(*flight).span)
	}
	return t.propagator.Extract(ctx, ConsumerMessageCarrier{msg})
}

// BatchContext returns ctx with the receive span of b, while a message of
// it is not acked or taken back; otherwise ctx unchanged.
func (t *Tracer) BatchContext(ctx context.Context, b *kafkaconsumer.Batch) context.Context {
	for _, msg := range b.Messages {
		if v, ok := t.inFlight.Load(msg); ok {
			return trace.ContextWithSpan(ctx, v.(*flight).span)
		}
	}
	return ctx
}

// StartProcess starts the span of msg's processing, "process <topic>", a
// CONSUMER span child of msg's receive span (see Context) with the
// attributes of the receive span and the operation process. The caller
// ends it, before acking msg so that it ends within its parent. ctx is the
// context of the processing: its values are kept, its span replaced.
func (t *Tracer) StartProcess(ctx context.Context, msg *sarama.ConsumerMessage) (context.Context, trace.Span) {
	return t.tracer.Start(t.Context(ctx, msg), "process "+msg.Topic,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(t.messageAttributes(msg, semconv.MessagingOperationTypeProcess, "process")...),
	)
}

// StartProcessBatch is StartProcess for a batch: its span is a child of
// the batch's receive span (see BatchContext).
func (t *Tracer) StartProcessBatch(ctx context.Context, b *kafkaconsumer.Batch) (context.Context, trace.Span) {
	return t.tracer.Start(t.BatchContext(ctx, b), "process "+b.Topic,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(t.batchAttributes(b, semconv.MessagingOperationTypeProcess, "process")...),
	)
}

// messageAttributes returns the attributes of a span of msg, of the given
// operation.
func (t *Tracer) messageAttributes(msg *sarama.ConsumerMessage, opType attribute.KeyValue, opName string) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, len(t.common)+9)
	attrs = append(attrs, t.common...)
	attrs = append(attrs,
		opType,
		semconv.MessagingOperationName(opName),
		semconv.MessagingDestinationName(msg.Topic),
		semconv.MessagingDestinationPartitionID(strconv.FormatInt(int64(msg.Partition), 10)),
		semconv.MessagingKafkaOffset(int(msg.Offset)),
		semconv.MessagingMessageBodySize(len(msg.Value)),
	)
	if msg.Key != nil {
		if utf8.Valid(msg.Key) {
			attrs = append(attrs, semconv.MessagingKafkaMessageKey(string(msg.Key)))
		}
		if msg.Value == nil {
			attrs = append(attrs, semconv.MessagingKafkaMessageTombstone(true))
		}
	}
	return attrs
}

// batchAttributes returns the attributes of a span of b, of the given
// operation.
func (t *Tracer) batchAttributes(b *kafkaconsumer.Batch, opType attribute.KeyValue, opName string) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, len(t.common)+5)
	attrs = append(attrs, t.common...)
	return append(attrs,
		opType,
		semconv.MessagingOperationName(opName),
		semconv.MessagingDestinationName(b.Topic),
		semconv.MessagingDestinationPartitionID(strconv.FormatInt(int64(b.Partition), 10)),
		semconv.MessagingBatchMessageCount(len(b.Messages)),
	)
}
