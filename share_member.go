package kafkaconsumer

// The membership of a share consumer (share.go): the manager goroutine
// (run), which sends the member's ShareGroupHeartbeat every interval the
// broker gives, reads the metadata of the subscription (topic IDs and
// names, partition leaders) every DiscoveryInterval or when a fetcher
// finds a leader moved, turns the assignment into the partitions of a
// fetch loop per leader broker (share_fetch.go), and at the end runs the
// shutdown.

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// newShareMemberID returns a member ID for a share group: the client
// names itself (KIP-932), with 16 random bytes in URL-safe base64, as
// Kafka's Uuid prints them.
func newShareMemberID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// run is the manager goroutine: the heartbeats until the consumer is
// interrupted, then the shutdown.
func (sc *shareConsumer) run() {
	defer sc.t0.Done()
	sc.manage()
	sc.closeErr = sc.shutdown()
}

// manage sends the heartbeats and refreshes the metadata until the
// consumer is interrupted.
func (sc *shareConsumer) manage() {
	heartbeat := time.NewTimer(sc.interval(0))
	defer heartbeat.Stop()
	discovery := time.NewTicker(sc.config.DiscoveryInterval)
	defer discovery.Stop()
	for {
		select {
		case <-sc.t0.Dying():
			return
		case <-heartbeat.C:
			heartbeat.Reset(sc.interval(sc.heartbeat(sc.stopCtx)))
		case <-discovery.C:
			sc.refreshMetadata()
		case <-sc.refresh:
			sc.refreshMetadata()
		}
	}
}

// interval returns the wait before the next heartbeat: d, the interval
// of the answer just taken; after a failure (d 0), the interval the
// coordinator last named, or sarama's Consumer.Group.Heartbeat.Interval
// before its first answer.
func (sc *shareConsumer) interval(d time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	sc.mu.Lock()
	beat := sc.beat
	sc.mu.Unlock()
	if beat > 0 {
		return beat
	}
	return sc.config.Consumer.Group.Heartbeat.Interval
}

// refreshMetadata reads the subscription's metadata and applies the
// assignment again (its leaders may have moved); a failure is reported.
func (sc *shareConsumer) refreshMetadata() {
	if _, err := sc.readMetadata(sc.stopCtx); err != nil {
		if sc.stopCtx.Err() == nil {
			sc.sendError(fmt.Errorf("share group %s: read the metadata: %w", sc.group, err))
		}
		return
	}
	sc.applyAssignment()
}

// heartbeat sends one ShareGroupHeartbeat and takes its answer; it
// returns the broker's interval, 0 after a failure (reported on
// Errors()). A fenced or unknown member joins again with epoch 0 and the
// same member ID, its assignment dropped.
func (sc *shareConsumer) heartbeat(ctx context.Context) time.Duration {
	resp, err := sc.sendHeartbeat(ctx)
	if err != nil {
		if ctx.Err() == nil {
			sc.sendError(fmt.Errorf("share group %s: heartbeat: %w", sc.group, err))
		}
		return 0
	}
	switch err := kerr.ErrorForCode(resp.ErrorCode); {
	case err == nil:
		sc.takeHeartbeat(resp)
		return time.Duration(resp.HeartbeatIntervalMillis) * time.Millisecond
	case coordinatorMovedCode(resp.ErrorCode):
		sc.t.forgetCoordinator()
	case resp.ErrorCode == kerr.FencedMemberEpoch.Code || resp.ErrorCode == kerr.UnknownMemberID.Code:
		sc.logf(slog.LevelWarn, "Share group %s: the member was fenced (%s); joining again.", sc.group, err)
		sc.mu.Lock()
		sc.epoch, sc.pending = 0, nil
		sc.mu.Unlock()
		sc.applyAssignment()
		sc.sendError(fmt.Errorf("share group %s: heartbeat: %w%s; joining again", sc.group, err, errorMessage(resp.ErrorMessage)))
	default:
		sc.sendError(fmt.Errorf("share group %s: heartbeat: %w%s", sc.group, err, errorMessage(resp.ErrorMessage)))
	}
	return 0
}

// sendHeartbeat sends the member's heartbeat: with its subscription when
// it joins (epoch 0), else as is.
func (sc *shareConsumer) sendHeartbeat(ctx context.Context) (*kmsg.ShareGroupHeartbeatResponse, error) {
	req := kmsg.NewPtrShareGroupHeartbeatRequest()
	req.GroupID, req.MemberID = sc.group, sc.memberID
	sc.mu.Lock()
	req.MemberEpoch = sc.epoch
	req.SubscribedTopicNames = sc.subscribedNames()
	sc.mu.Unlock()
	kresp, err := sc.t.coordinatorRequest(ctx, req)
	if err != nil {
		return nil, err
	}
	return kresp.(*kmsg.ShareGroupHeartbeatResponse), nil
}

// subscribedNames returns the names of the subscribed topics (never
// nil: nil would tell the broker that the subscription did not change).
// sc.mu is held.
func (sc *shareConsumer) subscribedNames() []string {
	names := make([]string, 0, len(sc.ids))
	for name := range sc.ids {
		names = append(names, name)
	}
	return names
}

// takeHeartbeat records a successful heartbeat's answer: the epoch, and
// the assignment when it changed.
func (sc *shareConsumer) takeHeartbeat(resp *kmsg.ShareGroupHeartbeatResponse) {
	sc.mu.Lock()
	sc.epoch = resp.MemberEpoch
	if resp.HeartbeatIntervalMillis > 0 {
		sc.beat = time.Duration(resp.HeartbeatIntervalMillis) * time.Millisecond
	}
	changed := resp.Assignment != nil
	if changed {
		sc.pending = make(map[[16]byte][]int32)
		for _, tp := range resp.Assignment.TopicPartitions {
			sc.pending[tp.TopicID] = tp.Partitions
		}
	}
	unknown := false
	for id := range sc.pending {
		_, known := sc.names[id]
		unknown = unknown || !known
	}
	sc.mu.Unlock()
	if !changed {
		return
	}
	if unknown {
		sc.refreshMetadata() // applies the assignment
		return
	}
	sc.applyAssignment()
}

// readMetadata reads the topics of the subscription: their IDs, names
// and leaders replace what sc knew. It returns the names.
func (sc *shareConsumer) readMetadata(ctx context.Context) ([]string, error) {
	req := kmsg.NewPtrMetadataRequest()
	if topics := sc.sel.metadataTopics(); topics != nil {
		req.Topics = make([]kmsg.MetadataRequestTopic, len(topics))
		for i := range topics {
			req.Topics[i].Topic = &topics[i]
		}
	}
	kresp, err := sc.t.request(ctx, req)
	if err != nil {
		return nil, err
	}
	resp := kresp.(*kmsg.MetadataResponse)
	names, ids := make(map[[16]byte]string), make(map[string][16]byte)
	leaders := make(map[TopicPartition]int32)
	for _, t := range resp.Topics {
		if t.Topic == nil || t.ErrorCode != 0 || !sc.sel.selectsTopic(*t.Topic, t.IsInternal) {
			continue
		}
		names[t.TopicID], ids[*t.Topic] = *t.Topic, t.TopicID
		for _, p := range t.Partitions {
			leaders[TopicPartition{Topic: *t.Topic, Partition: p.Partition}] = p.Leader
		}
	}
	sc.mu.Lock()
	sc.names, sc.ids, sc.leaders = names, ids, leaders
	result := sc.subscribedNames()
	sc.mu.Unlock()
	return result, nil
}

// applyAssignment gives each fetch loop the assigned partitions its
// broker leads, and starts the loops of new leaders. A loop left without
// partitions forgets them and idles until the shutdown (at most one loop
// per broker: two would be two share sessions of the member on one
// broker, the older's close ending the newer's).
func (sc *shareConsumer) applyAssignment() {
	sc.mu.Lock()
	assigned := make(map[TopicPartition]struct{})
	want := make(map[int32]map[tidp]struct{})
	for id, partitions := range sc.pending {
		name, ok := sc.names[id]
		if !ok {
			continue
		}
		for _, p := range partitions {
			tp := TopicPartition{Topic: name, Partition: p}
			assigned[tp] = struct{}{}
			leader, ok := sc.leaders[tp]
			if !ok || leader < 0 {
				continue
			}
			if want[leader] == nil {
				want[leader] = make(map[tidp]struct{})
			}
			want[leader][tidp{id, p}] = struct{}{}
		}
	}
	for tp := range sc.stats {
		if _, ok := assigned[tp]; !ok {
			delete(sc.stats, tp)
		}
	}
	sc.assigned = assigned
	var started []*shareFetcher
	for broker, parts := range want {
		f := sc.fetchers[broker]
		if f == nil {
			f = newShareFetcher(sc, broker)
			sc.fetchers[broker] = f
			started = append(started, f)
		}
		f.want = parts
		poke(f.wake)
	}
	for broker, f := range sc.fetchers {
		if _, ok := want[broker]; !ok {
			f.want = make(map[tidp]struct{}) // it forgets them, and idles
			poke(f.wake)
		}
	}
	sc.mu.Unlock()
	for _, f := range started {
		go f.run()
	}
}

// shutdown stops the consumer, in order: the fetch loops stop handing
// out (each releases what it did not hand out); the messages unread in
// the Messages channel are taken back and released; the loops wait for
// the acks of the rest, within MaxProcessingTime or a Shutdown's ctx,
// and close their sessions; the member leaves the group (epoch -1); the
// connections close; then the channels.
func (sc *shareConsumer) shutdown() error {
	sc.mu.Lock()
	fetchers := make([]*shareFetcher, 0, len(sc.fetchers))
	for _, f := range sc.fetchers {
		fetchers = append(fetchers, f)
		f.t.Kill(nil)
	}
	sc.mu.Unlock()
	for _, f := range fetchers {
		<-f.stopped
	}
	sc.takeBackUnread()
	for _, f := range fetchers {
		_ = f.t.Wait()
	}
	err := sc.leave()
	sc.t.close()
	sc.dialer.cutAll()
	sc.closeChannels()
	return err
}

// takeBackUnread releases the messages unread in the Messages channel,
// which no fetch loop sends to any more.
func (sc *shareConsumer) takeBackUnread() {
	for {
		select {
		case msg := <-sc.messages:
			sc.mu.Lock()
			if r := sc.held[msg]; r != nil {
				delete(sc.held, msg)
				r.f.addAck(tidp{r.topicID, msg.Partition}, ackRange{first: msg.Offset, last: msg.Offset, typ: ackRelease})
				poke(r.f.wake)
			}
			sc.mu.Unlock()
		default:
			return
		}
	}
}

// leave sends the heartbeat of a member that leaves the group (epoch
// -1), within shareFinalTimeout.
func (sc *shareConsumer) leave() error {
	sc.mu.Lock()
	joined := sc.epoch > 0
	sc.epoch = -1
	sc.mu.Unlock()
	if !joined {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), shareFinalTimeout)
	defer cancel()
	resp, err := sc.sendHeartbeat(ctx)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err != nil {
		return fmt.Errorf("share group %s: leave: %w", sc.group, err)
	}
	return nil
}

// setAutoOffsetReset sets the group's share.auto.offset.reset to what
// Offsets.Initial says (IncrementalAlterConfigs of the group); a refusal
// is reported, and the group keeps its setting.
func (sc *shareConsumer) setAutoOffsetReset(ctx context.Context) {
	value := shareAutoOffsetReset(sc.config.Offsets.Initial)
	kresp, err := sc.t.request(ctx, setGroupConfig(sc.group, "share.auto.offset.reset", value))
	if err == nil {
		resp := kresp.(*kmsg.IncrementalAlterConfigsResponse)
		for _, r := range resp.Resources {
			if e := kerr.ErrorForCode(r.ErrorCode); e != nil {
				err = fmt.Errorf("%w%s", e, errorMessage(r.ErrorMessage))
			}
		}
	}
	if err != nil {
		sc.sendError(fmt.Errorf("share group %s: set its share.auto.offset.reset to %s (Offsets.Initial %d): %w; the group keeps its setting",
			sc.group, value, sc.config.Offsets.Initial, err))
	}
}

// setGroupConfig returns the request that sets the config name of group
// to value (IncrementalAlterConfigs of the group resource).
func setGroupConfig(group, name, value string) *kmsg.IncrementalAlterConfigsRequest {
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
	cfg := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	cfg.Name, cfg.Op, cfg.Value = name, kmsg.IncrementalAlterConfigOpSet, &value
	res.Configs = append(res.Configs, cfg)
	req.Resources = append(req.Resources, res)
	return req
}

// deliveryCountLimit returns the group's share.delivery.count.limit, from
// a DescribeConfigs of the group resource (which gives the broker's
// group.share.delivery.count.limit when the group does not set it).
func (sc *shareConsumer) deliveryCountLimit(ctx context.Context) (int, error) {
	const name = "share.delivery.count.limit"
	req := kmsg.NewPtrDescribeConfigsRequest()
	res := kmsg.NewDescribeConfigsRequestResource()
	res.ResourceType, res.ResourceName, res.ConfigNames = kmsg.ConfigResourceTypeGroupConfig, sc.group, []string{name}
	req.Resources = append(req.Resources, res)
	kresp, err := sc.t.request(ctx, req)
	if err != nil {
		return 0, fmt.Errorf("share group %s: describe its %s: %w", sc.group, name, err)
	}
	for _, r := range kresp.(*kmsg.DescribeConfigsResponse).Resources {
		if e := kerr.ErrorForCode(r.ErrorCode); e != nil {
			return 0, fmt.Errorf("share group %s: describe its %s: %w%s", sc.group, name, e, errorMessage(r.ErrorMessage))
		}
		for _, c := range r.Configs {
			if c.Name != name || c.Value == nil {
				continue
			}
			if n, err := strconv.Atoi(*c.Value); err == nil && n > 0 {
				return n, nil
			}
			return 0, fmt.Errorf("share group %s: its %s is %q, not a positive number", sc.group, name, *c.Value)
		}
	}
	return 0, fmt.Errorf("share group %s: the broker did not describe its %s", sc.group, name)
}
