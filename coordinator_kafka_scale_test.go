package kafkaconsumer

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// joinTimes is an slog.Handler that keeps the time of each "Joined
// generation" line of a member.
type joinTimes struct {
	mu    sync.Mutex
	times []time.Time // guarded by mu
}

func (*joinTimes) Enabled(context.Context, slog.Level) bool { return true }

func (j *joinTimes) Handle(_ context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, "Joined generation") {
		j.mu.Lock()
		j.times = append(j.times, r.Time)
		j.mu.Unlock()
	}
	return nil
}

func (j *joinTimes) WithAttrs([]slog.Attr) slog.Handler { return j }
func (j *joinTimes) WithGroup(string) slog.Handler      { return j }

// first returns the time of the first "Joined generation" line, zero for
// none yet.
func (j *joinTimes) first() time.Time {
	j.mu.Lock()
	defer j.mu.Unlock()
	if len(j.times) == 0 {
		return time.Time{}
	}
	return j.times[0]
}

// TestIntegrationKafkaCoordinatorFollowUpGenerationIsPrompt: a member that
// joins a stable group gets nothing in its first generation (what it is
// due is withheld until the owners stop it), and the generation after,
// which the owners start when they join again, must come at once: every
// member of the group must join it, also those that neither give nor
// take a partition, and they must not wait for their next heartbeat
// (a heartbeat interval, 6 s here) to learn of it. With 100 members the
// wait for the last heartbeat was most of a scale-out's time.
func TestIntegrationKafkaCoordinatorFollowUpGenerationIsPrompt(t *testing.T) {
	kafkaCoordinatorTest(t)
	topic := newTopic(t, 6)
	group := uniqueName("followup")
	const heartbeat = 6 * time.Second
	config := func(logger *slog.Logger) *Config {
		c := kafkaTestConfig()
		c.Consumer.Group.Session.Timeout = 30 * time.Second
		c.Consumer.Group.Heartbeat.Interval = heartbeat
		c.Logger = logger
		return c
	}
	var members []Consumer
	var wg sync.WaitGroup
	var mu sync.Mutex
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := joinKafka(t, group, TopicSubscription(topic), config(nil))
			mu.Lock()
			members = append(members, c)
			mu.Unlock()
		}()
	}
	wg.Wait()
	waitFor(t, 90*time.Second, "three members owning two partitions each", func() bool {
		for _, c := range members {
			if claimedCount(c) != 2 || len(c.Stats()) != 2 {
				return false
			}
		}
		return true
	})

	var joins joinTimes
	d := joinKafka(t, group, TopicSubscription(topic), config(slog.New(&joins)))
	waitFor(t, 60*time.Second, "the fourth member's first generation", func() bool { return !joins.first().IsZero() })
	waitFor(t, 60*time.Second, "the fourth member to own a partition", func() bool { return claimedCount(d) > 0 })
	took := time.Since(joins.first())
	t.Logf("the fourth member owned a partition %s after its first generation", took.Round(time.Millisecond))
	if took > heartbeat/2 {
		t.Errorf("the fourth member owned a partition %s after its first generation: the next generation waited for the members' heartbeats (every %s)", took.Round(time.Millisecond), heartbeat)
	}
}

// TestStaleRebalanceAnswerKeepsTheExpectedRebalance: a heartbeat of the
// previous generation, answered REBALANCE_IN_PROGRESS only after the
// member synced the next generation, which told it to expect a
// rebalance (expectRebalance), tells nothing of the new generation:
// the member goes on heartbeating every awaitingHeartbeat, rather than
// learning of the next rebalance a heartbeat interval later. Under load
// the answers come late, and such a race left members of a 100-member
// group a heartbeat interval (3 s) behind the rest.
func TestStaleRebalanceAnswerKeepsTheExpectedRebalance(t *testing.T) {
	t.Parallel()
	k := &kafkaCoordinator{cm: &consumerManager{config: NewConfig(), log: slog.New(slog.DiscardHandler)}, heartbeatInterval: 3 * time.Second, rejoin: make(chan struct{}, 1)}
	k.setMember(groupMember{id: "m", generation: 4})
	k.expectRebalance()
	g := &kafkaGuard{k: k, next: time.NewTimer(time.Hour), deadline: time.NewTimer(time.Hour)}
	defer g.next.Stop()
	defer g.deadline.Stop()
	g.answered(heartbeatResult{member: groupMember{id: "m", generation: 3}, sent: time.Now(), err: sarama.ErrRebalanceInProgress})
	if got := k.nextHeartbeat(); got != awaitingHeartbeat {
		t.Errorf("next heartbeat in %s after a late answer of generation 3, want %s (generation 4 expects a rebalance)", got, awaitingHeartbeat)
	}
	g.answered(heartbeatResult{member: groupMember{id: "m", generation: 4}, sent: time.Now(), err: sarama.ErrRebalanceInProgress})
	if got := k.nextHeartbeat(); got != k.heartbeatInterval {
		t.Errorf("next heartbeat in %s once generation 4's rebalance came, want %s", got, k.heartbeatInterval)
	}
}
