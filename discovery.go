package kafkaconsumer

// Discovery modes: where a consumer finds the brokers, topics and
// partitions (Config.Discovery), and what DiscoverFromKafka asks of the
// configuration.

import (
	"fmt"

	"github.com/IBM/sarama"
)

// Discovery says where a consumer finds the Kafka brokers and the
// partitions of the topics it consumes (Config.Discovery). Whichever it
// is, the group itself (membership and partition claims) is coordinated
// through ZooKeeper, and offsets are committed to Kafka.
type Discovery int

const (
	// DiscoverFromZookeeper finds the brokers through their registrations
	// in ZooKeeper (or takes Config.Brokers), and the topics and their
	// partitions in ZooKeeper (/brokers/topics), watching them: the
	// default, for a ZooKeeper-mode Kafka cluster, whose ZooKeeper the
	// group then shares.
	DiscoverFromZookeeper Discovery = iota

	// DiscoverFromKafka takes the brokers from Config.Brokers (required),
	// and the topics and partitions from Kafka's metadata, asked for every
	// Config.DiscoveryInterval; ZooKeeper is used for the group only, and
	// may be any ensemble. It is the mode for a cluster in KRaft mode
	// (Kafka 4 has no other). It works with the subscriptions of this
	// package (TopicSubscription, StaticSubscription, WhitelistSubscription,
	// BlacklistSubscription); white and black lists leave out the topics
	// that the metadata marks internal. A custom Subscription, whose
	// WatchPartitions reads ZooKeeper, works with DiscoverFromZookeeper
	// only: Join refuses it. Validate refuses a Config.Version older than
	// MinKafkaVersionForKafkaDiscovery, whose requests Kafka 4 refuses.
	//
	// Instances of one group may use different modes while the group moves
	// from one to the other (one instance at a time): both take each
	// partition's first replica as its preferred leader, so they compute
	// the same distribution once they see the same partitions (see the
	// README, "Moving to KRaft").
	DiscoverFromKafka
)

// MinKafkaVersionForKafkaDiscovery is the oldest sarama Config.Version
// that DiscoverFromKafka accepts. Kafka 4.0 removed old request versions
// (KIP-896; Kafka documents 2.1 as the oldest client it serves). Kafka
// 4.1.1 accepts what sarama v1.61.1 sends for this package (Metadata,
// FindCoordinator, OffsetFetch, OffsetCommit as a group without
// generation, ListOffsets, Fetch) from Version 0.11.0 on; with 0.10.2 it
// closes the connection at the first Fetch (v3), and nothing is
// consumed. Prefer 2.1.0 or later.
var MinKafkaVersionForKafkaDiscovery = sarama.V0_11_0_0

// String returns the name of the constant.
func (d Discovery) String() string {
	switch d {
	case DiscoverFromZookeeper:
		return "DiscoverFromZookeeper"
	case DiscoverFromKafka:
		return "DiscoverFromKafka"
	}
	return fmt.Sprintf("Discovery(%d)", int(d))
}

// validateDiscovery checks Discovery and what DiscoverFromKafka needs.
func (c *Config) validateDiscovery() error {
	switch c.Discovery {
	case DiscoverFromZookeeper:
		return nil
	case DiscoverFromKafka:
	default:
		return fmt.Errorf("%w: Discovery must be DiscoverFromZookeeper or DiscoverFromKafka, got %s", ErrInvalidConfig, c.Discovery)
	}
	switch {
	case len(c.Brokers) == 0:
		return fmt.Errorf("%w: Discovery is DiscoverFromKafka but Brokers is empty; give the bootstrap addresses of the Kafka cluster", ErrInvalidConfig)
	case c.Config != nil && !c.Version.IsAtLeast(MinKafkaVersionForKafkaDiscovery):
		return fmt.Errorf("%w: Version %s is too old for DiscoverFromKafka: Kafka 4 refuses the requests sarama sends for it (KIP-896); use %s or later",
			ErrInvalidConfig, c.Version, MinKafkaVersionForKafkaDiscovery)
	}
	return nil
}
