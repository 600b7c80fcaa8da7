package kafkaconsumer

import (
	"errors"

	"github.com/kafkaconsumer/kafkaconsumer/internal/fetch"
)

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
	// gave it a session within Config.Zookeeper.Timeout, or when the server
	// requires SASL authentication, which is not supported.
	ErrZookeeperUnreachable = errors.New("kafkaconsumer: zookeeper unreachable")

	// ErrZookeeperAccessDenied is returned by Join when ZooKeeper refuses
	// the session's credentials (Config.ZookeeperAuth), or when the ACLs
	// of the group's nodes do not let this instance read ids/ and owners/,
	// register in ids/, and create and delete nodes in owners/ (see
	// Config.ZookeeperACL). The
	// error names the node, its ACL and the instance's identities. Join
	// checks this before it registers: nothing of the instance is left in
	// ZooKeeper.
	ErrZookeeperAccessDenied = errors.New("kafkaconsumer: zookeeper access denied")

	// ErrInstanceIDInUse is returned by Join when another live instance
	// is registered in the group under the same Config.InstanceID (its
	// ZooKeeper session still holds the registration after this
	// instance's Zookeeper.Timeout): the error names the ID. Nothing of
	// this instance is left registered, and it consumes nothing. A
	// running instance whose session expired, and whose ID was taken by
	// another in the meantime, logs it and tries to register again until
	// it is closed. With CoordinatorKafka it is sent on Errors() instead,
	// when the group's coordinator fenced this member because another
	// joined with the same InstanceID (FENCED_INSTANCE_ID, in answer to
	// any request): that is final, as in Kafka's own clients. Its
	// partitions stop at once, without a final commit, and it does not
	// join the group again: it consumes nothing until it is closed.
	ErrInstanceIDInUse = errors.New("kafkaconsumer: instance id in use by another live instance")

	// ErrRegistrationLost is sent on Errors() when the instance finds its
	// ZooKeeper registration gone, usually because its session expired (a
	// pause or partition longer than Zookeeper.Timeout). Its partition
	// claims went with it: the instance stops every partition, registers
	// again and takes its share anew. Messages handed out before may be
	// delivered again to other instances.
	ErrRegistrationLost = errors.New("kafkaconsumer: zookeeper registration lost; registering again")

	// ErrMaxPendingAcks is sent on Errors(), wrapped in a
	// *sarama.ConsumerError, when a partition pauses because
	// Config.MaxPendingAcks handed-out messages are not committable yet:
	// the oldest of them is not acked. It hands out nothing more until
	// that message is acked. Every message must be acked, not only the
	// last of a batch. Sent once per pause; PartitionStats.Paused tells
	// the state.
	ErrMaxPendingAcks = errors.New("kafkaconsumer: partition paused at MaxPendingAcks")

	// ErrAckedSetUnreadable is sent on Errors(), wrapped in a
	// *sarama.ConsumerError, when a partition starts at a commit whose
	// acked set (Config.DurableAcks) cannot be decoded: the commit's
	// offset holds, but the messages after it that the set said were
	// acked are delivered again. Sent once per such commit read, with
	// Metrics.AckedSetUnreadable; the partition's next commit replaces
	// the set.
	ErrAckedSetUnreadable = errors.New("kafkaconsumer: the acked set of a commit cannot be read")

	// ErrLogTruncated is sent on Errors(), wrapped in a
	// *sarama.ConsumerError, when a partition's log no longer holds the
	// position consumed so far: the topic was deleted and created again,
	// or an unclean leader election truncated the log. The partition
	// starts again at Offsets.Initial of the new log, whose messages are
	// all delivered; their offsets repeat ones handed out before.
	ErrLogTruncated = errors.New("kafkaconsumer: partition log truncated below the consumed position")

	// ErrCommitTimeout is sent on Errors() when a partition stops in a
	// rebalance, and returned by Close, when the final offset commit of a
	// stopping partition was not confirmed by Kafka within
	// MaxProcessingTime + 4 s (the last second of the stop's 5 s is the
	// release's). The commit is not tried again, by the partition or by
	// Close: the partition may be another instance's by then. A request
	// that a hung broker received may still be applied when it answers
	// again. Nothing is lost: the next owner starts at the last commit
	// Kafka applied and consumes again what was acked after it.
	ErrCommitTimeout = errors.New("kafkaconsumer: final offset commit not confirmed in time")

	// ErrPartitionNotHeld is returned, wrapped with the partition's name,
	// by Pause and Resume of a partition that this instance does not run:
	// not in its share (another instance's, or not subscribed), or the
	// consumer is closed.
	ErrPartitionNotHeld = errors.New("kafkaconsumer: partition not held by this instance")

	// ErrReleaseFailed is sent on Errors() when a partition stops in a
	// rebalance, and returned by Close, when the claim of a stopping
	// partition could not be released in ZooKeeper in time. The consumer
	// goes on trying in the background while it runs; after Close, the
	// claim goes when the ZooKeeper session expires (Zookeeper.Timeout).
	// Until then the next owner waits.
	ErrReleaseFailed = errors.New("kafkaconsumer: partition claim not released")

	// ErrNoBrokers is returned by Join when ZooKeeper lists no Kafka
	// broker (a KRaft cluster's brokers register in Kafka only: the error
	// then says to set Config.Discovery and Config.Brokers), or none with a
	// listener that fits the configuration (Config.Listener, or the
	// security protocol of Net.TLS and Net.SASL); the error then names the
	// listeners the brokers have.
	ErrNoBrokers = errors.New("kafkaconsumer: no usable kafka broker found in zookeeper")

	// ErrZookeeperIntruder is sent on Errors() by the members of Kafka's
	// group of a migrated group (the group's coordinator switch says
	// kafka) when an instance registers in ZooKeeper
	// (/consumers/<group>/ids/<id>) all the same: one of the original
	// library, of an older version, or of a deployment rolled back. The
	// error names it, once per registration. It consumes nothing that the
	// members consume: while the switch says kafka, ZooKeeper refuses
	// every claim (see docs/migration.md); stop it.
	ErrZookeeperIntruder = errors.New("kafkaconsumer: an instance registered in zookeeper while kafka coordinates the group")
)

// Errors of share groups (GroupProtocolShare), sent to Errors() wrapped
// with the topic, partition and offsets concerned; test for them with
// errors.Is.
var (
	// ErrShareAckRefused is sent to Errors() when an acknowledgement of a
	// share group's record (Ack, Share.Release, Share.Reject) cannot
	// count: the record's acquisition lock expired, or the share session
	// that acquired it ended (the broker delivers the record again, to
	// any member), or the message was not handed out by this consumer's
	// current delivery of it, or the broker refused it (the error then
	// also wraps the broker's, e.g. kerr.InvalidRecordState). Reported
	// once per acknowledgement, or once per partition for those the
	// broker refused in one answer.
	ErrShareAckRefused = errors.New("kafkaconsumer: share acknowledgement refused")

	// ErrShareLockExpired is sent to Errors() when records a share
	// consumer acquired were not handed out before their acquisition
	// lock expired: they are dropped, not handed out, and the broker
	// delivers them again. Once per partition and fetch.
	ErrShareLockExpired = errors.New("kafkaconsumer: share record lock expired before hand-out")
)

// ErrCorruptRecords is wrapped by the error sent on Errors() for a
// partition's records that are not what their format says (a CRC that
// does not match, a batch whose records overrun it, a compressed payload
// that does not decompress). The error names the partition and the
// offset of the batch; the messages before it are handed out, and the
// partition fetches the batch again after Consumer.Retry.Backoff,
// reporting it each time it is still corrupt: nothing is skipped.
var ErrCorruptRecords = fetch.ErrCorrupt
