package kotel

import (
	"github.com/IBM/sarama"
	"go.opentelemetry.io/otel/propagation"
)

// ConsumerMessageCarrier is a propagation.TextMapCarrier on the headers of
// a consumed message: the Tracer extracts the trace context of each
// message through it. Get returns the value of the first header of the
// key; Set replaces it, or adds a header.
type ConsumerMessageCarrier struct {
	Message *sarama.ConsumerMessage
}

// ProducerMessageCarrier is a propagation.TextMapCarrier on the headers of
// a message to produce, to inject the trace context of the producer into
// it: propagator.Inject(ctx, kotel.ProducerMessageCarrier{msg}). Get and
// Set behave as ConsumerMessageCarrier's.
type ProducerMessageCarrier struct {
	Message *sarama.ProducerMessage
}

var (
	_ propagation.TextMapCarrier = ConsumerMessageCarrier{}
	_ propagation.TextMapCarrier = ProducerMessageCarrier{}
)

// Get implements propagation.TextMapCarrier.
func (c ConsumerMessageCarrier) Get(key string) string {
	for _, h := range c.Message.Headers {
		if h != nil && string(h.Key) == key {
			return string(h.Value)
		}
	}
	return ""
}

// Set implements propagation.TextMapCarrier.
func (c ConsumerMessageCarrier) Set(key, value string) {
	for _, h := range c.Message.Headers {
		if h != nil && string(h.Key) == key {
			h.Value = []byte(value)
			return
		}
	}
	c.Message.Headers = append(c.Message.Headers, &sarama.RecordHeader{Key: []byte(key), Value: []byte(value)})
}

// Keys implements propagation.TextMapCarrier.
func (c ConsumerMessageCarrier) Keys() []string {
	keys := make([]string, 0, len(c.Message.Headers))
	for _, h := range c.Message.Headers {
		if h != nil {
			keys = append(keys, string(h.Key))
		}
	}
	return keys
}

// Get implements propagation.TextMapCarrier.
func (c ProducerMessageCarrier) Get(key string) string {
	for _, h := range c.Message.Headers {
		if string(h.Key) == key {
			return string(h.Value)
		}
	}
	return ""
}

// Set implements propagation.TextMapCarrier.
func (c ProducerMessageCarrier) Set(key, value string) {
	for i, h := range c.Message.Headers {
		if string(h.Key) == key {
			c.Message.Headers[i].Value = []byte(value)
			return
		}
	}
	c.Message.Headers = append(c.Message.Headers, sarama.RecordHeader{Key: []byte(key), Value: []byte(value)})
}

// Keys implements propagation.TextMapCarrier.
func (c ProducerMessageCarrier) Keys() []string {
	keys := make([]string, len(c.Message.Headers))
	for i, h := range c.Message.Headers {
		keys[i] = string(h.Key)
	}
	return keys
}
