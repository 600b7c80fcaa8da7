package kafkaconsumer

// Join's part for a share group (GroupProtocolShare): the group
// transport, a check that the brokers run share groups, the subscription's
// metadata, the group's share.auto.offset.reset, and the first heartbeat,
// whose errors fail Join.

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// shareIdleTimeout is the share consumer's kgo.ConnIdleTimeout: longer
// than the broker's longest acquisition lock by default
// (group.share.max.record.lock.duration.ms, 60 s).
const shareIdleTimeout = 2 * time.Minute

// joinShare is joinGroup for GroupProtocolShare: it connects a share
// consumer and starts its manager goroutine, or returns the error of the
// connection with nothing left running.
func joinShare(ctx context.Context, args *joinArgs, hooks *testHooks) (Consumer, error) {
	cfg := *args.config
	cfg.Config = args.config.saramaConfig()
	dialer := useKafkaDialer(cfg.Config)
	if hooks != nil {
		dialer.redirect = hooks.kafkaAddress
	}
	// kgo closes a connection idle for ConnIdleTimeout (20 s by default)
	// at its next use, and the broker ends the share session of a closed
	// connection: a fetch loop handing out to a slow reader sends nothing
	// for as long as the record lock (30 s by default) at most.
	t, err := newGroupTransport(cfg.Config, dialer, cfg.Brokers, args.group, kgo.ConnIdleTimeout(shareIdleTimeout))
	if err != nil {
		return nil, err
	}
	sel, _ := args.subscription.(topicSelector) // checkSubscription refused the others
	stopCtx, stop := context.WithCancel(context.Background())
	sc := &shareConsumer{
		config: &cfg, group: args.group, sel: sel, t: t, dialer: dialer,
		log:      newLogger(cfg.Logger, args.group, args.id),
		memberID: newShareMemberID(),
		stopCtx:  stopCtx, stop: stop,
		cutWait:  make(chan struct{}),
		refresh:  make(chan struct{}, 1),
		errors:   make(chan error, cfg.ChannelBufferSize),
		held:     make(map[*sarama.ConsumerMessage]*heldRecord),
		fetchers: make(map[int32]*shareFetcher),
		stats:    make(map[TopicPartition]*shareCounts),
	}
	sc.setChannels()
	if err := sc.connect(ctx); err != nil {
		stop()
		t.close()
		dialer.cutAll()
		return nil, err
	}
	go sc.run()
	return sc, nil
}

// connect checks that the brokers run share groups, reads the
// subscription's metadata, sets the group's share.auto.offset.reset, and
// joins the group (joinShareGroup).
func (sc *shareConsumer) connect(ctx context.Context) error {
	brokers := strings.Join(sc.config.Brokers, ",")
	versions, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, sc.t.cl)
	if err != nil {
		return fmt.Errorf("connect to kafka at %s: %w", brokers, err)
	}
	listed := 0
	for _, key := range versions.ApiKeys {
		switch kmsg.Key(key.ApiKey) {
		case kmsg.ShareGroupHeartbeat, kmsg.ShareFetch, kmsg.ShareAcknowledge:
			listed++
		}
	}
	if listed < 3 {
		return errShareUnsupported(sc.group, brokers, "they do not list ShareGroupHeartbeat, ShareFetch and ShareAcknowledge")
	}
	if _, err := sc.readMetadata(ctx); err != nil {
		return fmt.Errorf("read the subscription's topics: %w", err)
	}
	sc.logf(slog.LevelInfo, "Joining share group %s as member %s; brokers %s.", sc.group, sc.memberID, brokers)
	sc.setAutoOffsetReset(ctx)
	return sc.joinShareGroup(ctx)
}

// joinShareGroup sends the first heartbeat (epoch 0) until it is
// answered: an answer that the coordinator moved or is not ready is
// retried with a capped backoff for at most Consumer.Group.Session.Timeout,
// a failed request three times; any other error fails Join.
func (sc *shareConsumer) joinShareGroup(ctx context.Context) error {
	began := time.Now()
	limit := sc.config.Consumer.Group.Session.Timeout
	for attempt := 0; ; attempt++ {
		resp, err := sc.sendHeartbeat(ctx)
		code := int16(0)
		if err == nil {
			code = resp.ErrorCode
			err = kerr.ErrorForCode(code)
		}
		left := limit - time.Since(began)
		moved := coordinatorMovedCode(code) || resp == nil && coordinatorMovedErr(err)
		switch {
		case err == nil:
			sc.takeHeartbeat(resp)
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case (moved || resp == nil && attempt < 3) && left > 0:
			sc.t.forgetCoordinator()
			if !sleepCtx(ctx, min(100*time.Millisecond<<attempt, 2*time.Second, left)) {
				return ctx.Err()
			}
			continue
		}
		msg := ""
		if resp != nil {
			msg = errorMessage(resp.ErrorMessage)
		}
		return sc.joinError(code, fmt.Errorf("%w%s", err, msg))
	}
}

// joinError returns Join's error for the first heartbeat's error code
// (0 when the request failed) and error err.
func (sc *shareConsumer) joinError(code int16, err error) error {
	brokers := strings.Join(sc.config.Brokers, ",")
	switch code {
	case kerr.UnsupportedVersion.Code, kerr.InvalidRequest.Code:
		return fmt.Errorf("%w: %w", errShareUnsupported(sc.group, brokers, "they refused ShareGroupHeartbeat"), err)
	case kerr.GroupIDNotFound.Code, kerr.InconsistentGroupProtocol.Code:
		return fmt.Errorf("%w: join share group %s: the group exists and is not a share group (a consumer group of that name?); share groups and consumer groups share one name space: %w",
			ErrInvalidConfig, sc.group, err)
	}
	return fmt.Errorf("join share group %s: %w", sc.group, err)
}

// errShareUnsupported is Join's error for brokers without share groups;
// why says how it was found.
func errShareUnsupported(group, brokers, why string) error {
	return fmt.Errorf("%w: GroupProtocol is GroupProtocolShare, but the brokers at %s do not run share groups (%s): share groups need Kafka 4.2 or later in KRaft mode, with the share.version feature enabled (kafka-features.sh); use GroupProtocolConsumer or GroupProtocolClassic for group %s",
		ErrInvalidConfig, brokers, why, group)
}
