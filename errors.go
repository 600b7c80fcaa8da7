package kafkaconsumer

import "errors"

// Errors returned by Join and (*Config).Validate. Each is wrapped with the
// details of the problem; test for them with errors.Is.
var (
	// ErrInvalidGroup is returned by Join when the group name is empty or
	// cannot be a ZooKeeper node name.
	ErrInvalidGroup = errors.New("kafkaconsumer: invalid group name")

	// ErrInvalidSubscription is returned by Join when the subscription is nil
	// or describes nothing to consume.
	ErrInvalidSubscription = errors.New("kafkaconsumer: invalid subscription")

	// ErrInvalidZookeeper is returned by Join when the ZooKeeper connection
	// string is empty or malformed.
	ErrInvalidZookeeper = errors.New("kafkaconsumer: invalid zookeeper connection string")

	// ErrInvalidConfig is returned by Join and (*Config).Validate when a
	// setting is out of range; sarama's own validation errors are wrapped too.
	ErrInvalidConfig = errors.New("kafkaconsumer: invalid configuration")

	// ErrZookeeperUnreachable is returned by Join when no ZooKeeper server
	// gave it a session within Config.Zookeeper.Timeout.
	ErrZookeeperUnreachable = errors.New("kafkaconsumer: zookeeper unreachable")

	// ErrRegistrationLost is sent on Errors() when the instance finds its
	// ZooKeeper registration gone, usually because its session expired (a
	// pause or partition longer than Zookeeper.Timeout). Its partition
	// claims went with it: the instance stops every partition, registers
	// again and takes its share anew. Messages handed out before may be
	// delivered again to other instances.
	ErrRegistrationLost = errors.New("kafkaconsumer: zookeeper registration lost; registering again")

	// ErrNoBrokers is returned by Join when ZooKeeper lists no Kafka broker.
	ErrNoBrokers = errors.New("kafkaconsumer: no kafka brokers registered in zookeeper")
)
