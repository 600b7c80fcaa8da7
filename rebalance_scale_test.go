package kafkaconsumer

// Scale changes of a ZooKeeper-coordinated group against the real cluster:
// half again as many members started at once, then half of them closed at
// once. Each change must move about what its final distribution needs, not
// partitions that an intermediate distribution hands out and the next one
// takes back.

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// scaleGroup is a group of members run by a test, with what their
// OnRebalance and log lines told since the last reset.
type scaleGroup struct {
	t     *testing.T
	group string
	topic string
	total int

	mu      sync.Mutex
	members []*scaleMember // guarded by mu
	// assigned counts the partitions that OnRebalance reported
	// assigned, over every member, since the last reset.
	assigned int // guarded by mu
	// distributions and wakeUps count the members' log lines of a
	// distribution and of a wake-up by the instances' watch.
	distributions, wakeUps int // guarded by mu
}

// scaleMember is one member: its consumer, and its share as its
// OnRebalance calls told it.
type scaleMember struct {
	c     Consumer
	owned map[TopicPartition]bool // guarded by the group's mu
}

// scaleLog counts the lines of a member's log that the test measures.
type scaleLog struct{ g *scaleGroup }

func (scaleLog) Enabled(context.Context, slog.Level) bool { return true }

func (l scaleLog) Handle(_ context.Context, r slog.Record) error {
	l.g.mu.Lock()
	defer l.g.mu.Unlock()
	switch {
	case strings.HasPrefix(r.Message, "Currently, "):
		l.g.distributions++
	case strings.HasPrefix(r.Message, "Woke up because the list of running instances changed"):
		l.g.wakeUps++
	}
	return nil
}

func (l scaleLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l scaleLog) WithGroup(string) slog.Handler      { return l }

// start joins n members at once, and returns them once every Join
// returned.
func (g *scaleGroup) start(n int) {
	g.t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		m := &scaleMember{owned: make(map[TopicPartition]bool)}
		config := testConfig()
		config.Logger = slog.New(scaleLog{g})
		config.OnRebalance = func(r Rebalance) {
			g.mu.Lock()
			defer g.mu.Unlock()
			for _, tp := range r.Revoked {
				delete(m.owned, tp)
			}
			for _, tp := range r.Assigned {
				m.owned[tp] = true
			}
			g.assigned += len(r.Assigned)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.c, errs[i] = Join(g.group, TopicSubscription(g.topic), zookeeperPeers, config)
			if errs[i] == nil {
				g.mu.Lock()
				g.members = append(g.members, m)
				g.mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			g.t.Fatalf("Join %d of %d: %s", i, n, err)
		}
	}
}

// stop closes n of the members at once, and returns how far apart the
// first and the last Close returned.
func (g *scaleGroup) stop(n int) (spread time.Duration) {
	g.t.Helper()
	g.mu.Lock()
	closing := g.members[:n]
	g.members = append([]*scaleMember(nil), g.members[n:]...)
	g.mu.Unlock()
	var wg sync.WaitGroup
	errs := make([]error, n)
	returned := make([]time.Time, n)
	for i, m := range closing {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = m.c.Close()
			returned[i] = time.Now()
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			g.t.Errorf("Close %d of %d: %s", i, n, err)
		}
	}
	if n == 0 {
		return 0
	}
	return slices.MaxFunc(returned, time.Time.Compare).Sub(slices.MinFunc(returned, time.Time.Compare))
}

// settle waits until every partition is owned and claimed by exactly one
// member, each member holding its even share, and returns the owners.
func (g *scaleGroup) settle(timeout time.Duration) map[TopicPartition]*scaleMember {
	g.t.Helper()
	var owners map[TopicPartition]*scaleMember
	waitFor(g.t, timeout, "every partition owned and claimed, an even share each", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		share := g.total / len(g.members)
		owners = make(map[TopicPartition]*scaleMember, g.total)
		for _, m := range g.members {
			if len(m.owned) != share {
				return false
			}
			for tp := range m.owned {
				owners[tp] = m
			}
			for _, s := range m.c.Stats() {
				if !s.Claimed || !m.owned[s.TopicPartition] {
					return false
				}
			}
		}
		return len(owners) == g.total
	})
	return owners
}

// reset starts the counts of a change.
func (g *scaleGroup) reset() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.assigned, g.distributions, g.wakeUps = 0, 0, 0
}

// check fails the test when the change from before to after moved more
// than the partitions whose owner differs, plus slack.
func (g *scaleGroup) check(change string, before, after map[TopicPartition]*scaleMember, took time.Duration, slack int) {
	g.t.Helper()
	needed := 0
	for tp, m := range after {
		if before[tp] != m {
			needed++
		}
	}
	g.mu.Lock()
	moved, distributions, wakeUps := g.assigned, g.distributions, g.wakeUps
	g.mu.Unlock()
	g.t.Logf("%s: %d partitions moved where the final distribution needs %d, %d distributions, %d wake-ups, %s",
		change, moved, needed, distributions, wakeUps, took.Round(time.Millisecond))
	if moved > needed+slack {
		g.t.Errorf("%s moved %d partitions, want at most %d (the final distribution moves %d, slack %d)", change, moved, needed+slack, needed, slack)
	}
}

// TestIntegrationScaleMovesWhatTheDistributionNeeds: 8 members on 64
// partitions; 8 more start at once, then 8 are closed at once. Every
// registration and deregistration wakes every member; a member that
// distributes at each wake-up hands partitions to the members seen so far
// and takes them back at the next, so that a change moves many more
// partitions than its final distribution needs. A change moves at most
// what its final distribution needs plus scaleSlack: the members started
// or closed "at once" register or leave over a spread that, on a loaded
// machine, may outlast the quiet spell a distribution waits for, and an
// intermediate distribution then hands a few partitions to members about
// to leave (or takes a few from members that just came).
func TestIntegrationScaleMovesWhatTheDistributionNeeds(t *testing.T) {
	parallelClusterTest(t)
	const members, partitions = 8, 64
	const scaleSlack = partitions / 4
	g := &scaleGroup{t: t, group: uniqueName("scale"), topic: newTopic(t, partitions), total: partitions}
	t.Cleanup(func() {
		g.mu.Lock()
		n := len(g.members)
		g.mu.Unlock()
		g.stop(n)
	})
	g.start(members)
	before := g.settle(60 * time.Second)

	g.reset()
	began := time.Now()
	g.start(members)
	after := g.settle(60 * time.Second)
	g.check(fmt.Sprintf("scale-out %d -> %d", members, 2*members), before, after, time.Since(began), scaleSlack)

	g.reset()
	began = time.Now()
	spread := g.stop(members)
	t.Logf("the %d Closes returned over %s", members, spread.Round(time.Millisecond))
	last := g.settle(60 * time.Second)
	g.check(fmt.Sprintf("scale-in %d -> %d", 2*members, members), after, last, time.Since(began), scaleSlack)
}
