package kafkaconsumer

// The commits of a GroupProtocolConsumer member (coordinator_kafka848.go):
// OffsetCommit v9, which carries the member's epoch.

import (
	"context"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// offsetCommitV9 is an OffsetCommit request of version 9 at most: the
// last that names the topics (10 takes their IDs), and the first whose
// member epoch the coordinator of a consumer-protocol group takes.
type offsetCommitV9 struct{ *kmsg.OffsetCommitRequest }

// MaxVersion implements kmsg.Request.
func (offsetCommitV9) MaxVersion() int16 { return 9 }

// commitConsumer sends the sarama OffsetCommit req as OffsetCommit v9,
// with the member's epoch in its generation field, and returns the answer
// as sarama's, for the offset store (commitChunk).
func (k *kafkaCoordinator) commitConsumer(req *sarama.OffsetCommitRequest, tps []TopicPartition) (*sarama.OffsetCommitResponse, error) {
	kreq := kmsg.NewPtrOffsetCommitRequest()
	kreq.Group = req.ConsumerGroup
	kreq.Generation = req.ConsumerGroupGeneration
	kreq.MemberID = req.ConsumerID
	kreq.InstanceID = req.GroupInstanceId
	topics := make(map[string]int)
	for _, tp := range tps {
		offset, metadata, err := req.Offset(tp.Topic, tp.Partition)
		if err != nil {
			continue // not in the request
		}
		i, ok := topics[tp.Topic]
		if !ok {
			i = len(kreq.Topics)
			topics[tp.Topic] = i
			kreq.Topics = append(kreq.Topics, kmsg.OffsetCommitRequestTopic{Topic: tp.Topic})
		}
		p := kmsg.NewOffsetCommitRequestTopicPartition()
		p.Partition, p.Offset, p.LeaderEpoch, p.Metadata = tp.Partition, offset, -1, &metadata
		kreq.Topics[i].Partitions = append(kreq.Topics[i].Partitions, p)
	}
	resp, err := k.consumer.t.coordinatorRequest(context.Background(), offsetCommitV9{kreq})
	if err != nil {
		return nil, err
	}
	out := &sarama.OffsetCommitResponse{Version: 8}
	moved := false
	for _, t := range resp.(*kmsg.OffsetCommitResponse).Topics {
		for _, p := range t.Partitions {
			out.AddError(t.Topic, p.Partition, sarama.KError(p.ErrorCode))
			moved = moved || coordinatorMovedCode(p.ErrorCode)
		}
	}
	if moved {
		k.consumer.t.forgetCoordinator()
	}
	return out, nil
}
