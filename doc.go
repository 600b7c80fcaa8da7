// Package kafkaconsumer lets many processes on many machines consume Kafka
// topics as one group. Membership and partition ownership are coordinated
// through ZooKeeper, in the layout of Kafka's old high-level consumer;
// messages are read, and offsets committed, through Kafka itself with
// IBM/sarama.
//
// Join a group, read Messages, and Ack every message once it is processed.
// Acks may come in any order: per partition, what is committed is the end
// of the acked prefix, so a crash never skips an unprocessed message
// (at-least-once delivery).
//
// A minimal consumer:
//
//	consumer, err := kafkaconsumer.Join("my-group", kafkaconsumer.TopicSubscription("my-topic"), "zk1:2181,zk2:2181/kafka", nil)
//	if err != nil {
//		log.Fatalln(err)
//	}
//	go func() {
//		for err := range consumer.Errors() {
//			log.Println(err)
//		}
//	}()
//	go func() {
//		<-interrupted // e.g. from signal.Notify
//		consumer.Interrupt()
//	}()
//	for msg := range consumer.Messages() { // closed when the shutdown completes
//		process(msg)
//		consumer.Ack(msg)
//	}
//	if err := consumer.Close(); err != nil {
//		log.Println(err)
//	}
//
// Where to read on:
//
//   - Join and JoinContext: what joining does and how long it may take;
//     the Consumer interface: Ack, Stats, and the bounds of Close and
//     Shutdown.
//   - Config: MaxProcessingTime, MaxPendingAcks, Config.Logger,
//     Config.Metrics, Config.Observer (traces: the kotel module) and the
//     sarama settings that apply; BatchSize, for
//     Batches of messages of one partition (the fast path, with AckBatch
//     to ack a batch in one call).
//   - Consumer.Pause and Consumer.Resume: hold back a partition whose
//     downstream is slow, keeping its claim.
//   - Subscription: a topic, a static list, white and black lists.
//   - The README: supported Kafka versions, secured clusters, guarantees
//     and failure modes, upgrading from wvanbergen/kafka.
//   - ARCHITECTURE.md in the repository, for contributors: the goroutines
//     and who owns each, the data and control paths with the file of each
//     step, the invariants that hold them together, and how the bounds of
//     JoinContext, Close and Shutdown follow from the code.
package kafkaconsumer
