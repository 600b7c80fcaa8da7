package fetch

// What the root package gives the engine: a hub's Config, and the key of
// its partitions.

import (
	"log/slog"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Config is what a Hub is built from.
type Config struct {
	// Client is the sarama client whose metadata names each partition's
	// leader and its epoch, and which answers ListOffsets (an offset out
	// of range confirmed).
	Client sarama.Client
	// Sarama is the configuration the engine reads: Consumer.Fetch
	// (Min, Default, Max), Consumer.MaxWaitTime, MaxProcessingTime,
	// IsolationLevel, Retry (Backoff, BackoffFunc) and Interceptors;
	// RackID, Metadata.RefreshFrequency, Net.ReadTimeout, Version, and
	// MetricRegistry, where each response's throttle time is recorded as
	// sarama's Broker records it.
	Sarama *sarama.Config
	// Version is the highest Fetch version to send (Version).
	Version int16
	// Budget bounds what the hub's loops fetch ahead (NewBudget); the
	// hubs of one consumer share one.
	Budget *Budget
	// Transport returns the options of a broker loop's kgo client to the
	// broker at addr: its dialer, TLS and SASL. The engine adds its
	// request versions, retries and timeout.
	Transport func(addr string) ([]kgo.Opt, error)
	// Log gets an interceptor's panic and the errors dropped for a full
	// channel; nil: none.
	Log *slog.Logger
}

// TopicPartition names a partition of a topic: the key of the engine's
// partitions in its requests, responses and fetch sessions.
type TopicPartition struct {
	Topic     string
	Partition int32
}
