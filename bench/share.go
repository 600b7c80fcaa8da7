package main

// The share-group contenders (KIP-932, Kafka 4.2 and later): run when
// named in -contenders, on brokers that serve share groups
// (-cluster kraft-4.4.0). A share group hands a partition's records to
// several members, in no order, each acknowledged on its own, so their
// drains count messages (childSpec.CountTargets) rather than wait for a
// partition's last offset.

import (
	"context"
	"fmt"
	"log"
	"slices"
	"time"

	"github.com/IBM/sarama"
	"github.com/kafkaconsumer/kafkaconsumer"
	"github.com/kafkaconsumer/kafkaconsumer/process"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

const (
	// kafkaConsumerShare is kafkaconsumer on a share group
	// (Config.GroupProtocol GroupProtocolShare), Ack (ACCEPT) per message;
	// in the processing workload, process.Run (Unordered, Concurrency
	// shareHandlers) on each member.
	kafkaConsumerShare = "kafkaconsumer-share"
	// franzGoShare is franz-go's share consumer (kgo.ShareGroup),
	// Record.Ack(kgo.AckAccept) per record; in the processing workload
	// each member's poll loop runs the handler of every record, one after
	// the other, and acks it.
	franzGoShare = "franz-go-share"
)

// shareContenders are the share-group contenders; they need brokers that
// serve share groups.
var shareContenders = []string{franzGoShare, kafkaConsumerShare}

// shareMembers is the members of the processing workload's share groups,
// in the child process of the drain.
const shareMembers = 4

// shareHandlers is process.Run's Concurrency on each kafkaconsumer-share
// member in the processing workload.
const shareHandlers = 64

// shareAPIKey is ShareGroupHeartbeat's API key: brokers that serve it
// serve share groups.
const shareAPIKey = 76

// shareSpec sets what a share contender's drain needs beyond spec:
// message counts as targets (counts per partition).
func shareSpec(spec *childSpec, counts []int64) {
	if !slices.Contains(shareContenders, spec.Contender) {
		return
	}
	spec.Targets = [][]int64{counts}
	spec.CountTargets = true
}

// startShare starts a share contender's member; work is the handler's
// wait per message (0: none, the throughput workloads).
func startShare(spec *childSpec, h handler) (instance, error) {
	switch spec.Contender {
	case kafkaConsumerShare:
		return startOursShare(spec, h)
	case franzGoShare:
		return startFranzShare(spec, h)
	}
	return nil, fmt.Errorf("contender %q is not a share contender", spec.Contender)
}

// startOursShare starts a kafkaconsumer-share member: Offsets.Initial
// OffsetOldest sets the group's share.auto.offset.reset to earliest.
func startOursShare(spec *childSpec, h handler) (instance, error) {
	cfg := kafkaconsumer.NewConfig()
	cfg.Offsets.Initial = saramaInitial(spec)
	cfg.Coordinator = kafkaconsumer.CoordinatorKafka
	cfg.GroupProtocol = kafkaconsumer.GroupProtocolShare
	cfg.Brokers = spec.Brokers
	if spec.MaxBufferedBytes >= 0 {
		cfg.MaxBufferedBytes = spec.MaxBufferedBytes
	}
	c, err := joinLogging(spec, "", cfg)
	if err != nil {
		return nil, err
	}
	if spec.Work > 0 { // the processing workload
		return runProcess(c, spec.Work, h, process.Options{Concurrency: shareHandlers, Ordering: process.Unordered}), nil
	}
	o := &oursInstance{c: c, done: make(chan struct{})}
	go func() {
		defer close(o.done)
		for msg := range c.Messages() {
			c.Ack(msg)
			h(msg.Topic, msg.Partition, msg.Offset, msg.Value)
		}
	}()
	return o, nil
}

// startFranzShare starts a franz-go-share member, having set the group's
// share.auto.offset.reset (franz-go leaves it to the user).
func startFranzShare(spec *childSpec, h handler) (instance, error) {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(spec.Brokers...),
		kgo.ShareGroup(spec.Group),
		kgo.ConsumeTopics(spec.Topics...),
	)
	if err != nil {
		return nil, err
	}
	reset := "earliest"
	if spec.Newest {
		reset = "latest"
	}
	if err := setShareReset(cl, spec.Group, reset); err != nil {
		cl.Close()
		return nil, err
	}
	return pollFranz(cl, func(r *kgo.Record) {
		if spec.Work > 0 {
			time.Sleep(spec.Work) // the I/O call
		}
		r.Ack(kgo.AckAccept)
		h(r.Topic, r.Partition, r.Offset, r.Value)
	}), nil
}

// setShareReset sets the share group's share.auto.offset.reset, with the
// IncrementalAlterConfigs of a GROUP resource.
func setShareReset(cl *kgo.Client, group, reset string) error {
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeGroupConfig
	res.ResourceName = group
	c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	c.Name, c.Op, c.Value = "share.auto.offset.reset", 0, kmsg.StringPtr(reset) // SET
	res.Configs = append(res.Configs, c)
	req.Resources = append(req.Resources, res)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("set share.auto.offset.reset of %s: %w", group, err)
	}
	for _, r := range resp.Resources {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			return fmt.Errorf("set share.auto.offset.reset of %s: %w", group, err)
		}
	}
	return nil
}

// servesShareGroups tells whether the broker serves ShareGroupHeartbeat
// (Kafka 4.2 and later with share.version 1).
func servesShareGroups(b *sarama.Broker) bool {
	resp, err := b.ApiVersions(&sarama.ApiVersionsRequest{Version: 3, ClientSoftwareName: "kafkaconsumer-bench", ClientSoftwareVersion: "0"})
	if err != nil {
		log.Printf("ApiVersions: %v (assuming no share groups)", err)
		return false
	}
	for _, k := range resp.ApiKeys {
		if k.ApiKey == shareAPIKey {
			return true
		}
	}
	return false
}
