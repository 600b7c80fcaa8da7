package kafkaconsumer

// The fetchers: each a client of its own, with the fetch engine's hub on
// it (internal/fetch), through which the partition managers fetch, and a
// sarama consumer that serves only what the engine does not (a Kafka
// older than 0.11, a SASL mechanism the engine's transport has not:
// fetchVersion); and how they are closed.

import (
	"hash/fnv"
	"log/slog"
	"sync"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer/internal/fetch"
	"github.com/twmb/franz-go/pkg/kgo"
)

// fetchVersion returns the highest Fetch request version that the fetch
// engine sends for conf (fetch.Version), and whether the engine serves
// conf at all: Kafka 0.11 or later, and, with SASL, a mechanism that its
// transport has (PLAIN, SCRAM, OAUTHBEARER: consumerProtocolSASL);
// sarama's partition consumers serve the others.
func fetchVersion(conf *sarama.Config) (int16, bool) {
	if conf.Net.SASL.Enable && !consumerProtocolSASL(conf.Net.SASL.Mechanism) {
		return 0, false
	}
	return fetch.Version(conf)
}

// newFetchHub returns the fetch engine's hub of client, whose broker
// loops dial through conf's own dialer (useKafkaDialer), else one of
// conf's, with the group transport's TLS and SASL (transportOpts).
func newFetchHub(client sarama.Client, conf *sarama.Config, version int16, budget *fetch.Budget, log *slog.Logger) *fetch.Hub {
	d, ok := conf.Net.Proxy.Dialer.(*kafkaDialer)
	if !ok || !conf.Net.Proxy.Enable {
		d = newKafkaDialer(conf)
	}
	return fetch.NewHub(fetch.Config{Client: client, Sarama: conf, Version: version, Budget: budget, Log: log,
		Transport: func(addr string) ([]kgo.Opt, error) { return transportOpts(conf, d, addr) }})
}

// closeInBackground closes a partition consumer without waiting: sarama's
// Close waits until the fetch in flight returns, which against a hung
// broker takes up to Net.ReadTimeout, and a stopping partition must not
// wait for that. Its goroutine drains the errors (sarama may block on them)
// until sarama closes them; closeKafka waits for it.
func (cm *consumerManager) closeInBackground(pc sarama.PartitionConsumer) {
	pc.AsyncClose()
	cm.kafkaCalls.Add(1)
	go func() {
		defer cm.kafkaCalls.Done()
		for range pc.Errors() {
		}
	}()
}

// fetchConnections is how many fetchers, each on a client of its own,
// share the partitions of an instance. Kafka answers the requests of one
// connection one at a time: with two connections to each broker, the
// partitions of a large assignment start two at a time (BENCHMARKS.md,
// round 5). With several brokers, the fetch engine's partitions fetch
// through one hub, one loop per broker, whichever fetcher they start on
// (openKafka).
const fetchConnections = 2

// fetcher is a client, its fetch engine's hub and its sarama consumer.
type fetcher struct {
	client   sarama.Client
	consumer sarama.Consumer
	hub      *fetch.Hub // the partition fetchers' (internal/fetch), the same for every fetcher with several brokers (openKafka); nil when they do not serve the configuration (fetchVersion)
}

// fetcherOf returns the fetcher that consumes tp: always the same one for
// a partition, and the partitions of a topic alternate between them.
func (cm *consumerManager) fetcherOf(tp TopicPartition) fetcher {
	h := fnv.New32a()
	_, _ = h.Write([]byte(tp.Topic))
	return cm.fetchers[(h.Sum32()+uint32(tp.Partition))%uint32(len(cm.fetchers))]
}

// closeConsumers closes the sarama consumers, concurrently: each waits for
// its fetch in flight, up to Net.ReadTimeout against a hung broker.
func (cm *consumerManager) closeConsumers() {
	var wg sync.WaitGroup
	for _, f := range cm.fetchers {
		if f.consumer == nil {
			continue // connect failed before it
		}
		wg.Add(1)
		go func() { // owned by closeConsumers, which waits for it
			defer wg.Done()
			if err := f.consumer.Close(); err != nil {
				cm.logf(slog.LevelWarn, "Failed to close consumer: %s.", err)
			}
		}()
	}
	wg.Wait()
}
