package kafkaconsumer

// The sticky assignor of a Kafka-coordinated group: the leader's target,
// from which assignCooperative (coordinator_kafka_assign.go) withholds
// what must first be revoked. The ZooKeeper mode keeps its own
// distribution (distribution.go): instances of the original library
// compute the same one beside it, and none of them can join Kafka's group.
//
// Balance. A topic goes only to the members that subscribe to it, and
// among them no member runs more than one partition of it above another
// (the ZooKeeper mode's balance, per topic). Members that subscribe to
// the same topics also differ by at most one partition in all: the
// members that run one partition above the others are spread over the
// topics.
//
// Stickiness. Within that balance, a member keeps as many of the
// partitions it owns as it can: a partition moves between two members
// only when the balance needs it. A partition that no member of the
// generation owns (its owner left, or it is new) moves nowhere: it is
// given at once, so a leave takes one generation.

import (
	"sort"
	"strings"
)

// stickyTarget returns, for every member ID, the partitions it should run
// (sorted by topic, then partition; an empty entry for a member that
// gets none). counts are the partition counts of the topics; a topic
// that a member subscribes to but counts lacks has no partitions. A
// partition counts as owned by a member only when that member alone
// reports it, subscribes to its topic, and the partition exists; other
// reports are ignored here (assignCooperative withholds such partitions).
// Neither input is changed; the result depends only on the inputs, not on
// their order.
func stickyTarget(members []kafkaMember, counts map[string]int32) map[string][]TopicPartition {
	b := newStickyBalancer(members, counts)
	b.chooseExtras()
	return b.fill()
}

// stickyBalancer holds the state of one stickyTarget.
type stickyBalancer struct {
	members []kafkaMember // sorted by key, then ID
	counts  map[string]int32
	topics  []string         // sorted: the topics with partitions that a member subscribes to
	subs    map[string][]int // topic => its subscribers (indexes into members, in order)
	group   []string         // member => its subscribed topics, joined: equal for the same subscription
	// owned is, per member and topic, the partitions it owns (see
	// stickyTarget), sorted.
	owned []map[string][]int32
	// extra is, per member, the topics of which it runs base+1
	// partitions (base = partitions / subscribers); extras counts them.
	extra  []map[string]bool
	extras []int
	// budget is what is left of the balance checks that improve may
	// spend (stickyBudget).
	budget int
}

// stickyBudget bounds the balance checks of one stickyTarget's
// improvements, so that the leader answers well within the rebalance
// timeout whatever the group; once it is spent, the target stays
// balanced, only less sticky than it could be.
const stickyBudget = 1 << 20

func newStickyBalancer(members []kafkaMember, counts map[string]int32) *stickyBalancer {
	b := &stickyBalancer{
		members: append([]kafkaMember(nil), members...),
		counts:  counts,
		subs:    make(map[string][]int),
		budget:  stickyBudget,
	}
	sort.SliceStable(b.members, func(i, j int) bool {
		x, y := b.members[i], b.members[j]
		if x.key != y.key {
			return x.key < y.key
		}
		return x.id < y.id
	})
	n := len(b.members)
	b.group, b.owned = make([]string, n), make([]map[string][]int32, n)
	b.extra, b.extras = make([]map[string]bool, n), make([]int, n)
	subscribed := make([]map[string]bool, n)
	for i, m := range b.members {
		subscribed[i], b.owned[i], b.extra[i] = make(map[string]bool), make(map[string][]int32), make(map[string]bool)
		var topics []string
		for _, t := range m.topics {
			if counts[t] > 0 && !subscribed[i][t] {
				subscribed[i][t] = true
				topics = append(topics, t)
				b.subs[t] = append(b.subs[t], i)
			}
		}
		sort.Strings(topics)
		b.group[i] = strings.Join(topics, "\x00")
	}
	for t := range b.subs {
		b.topics = append(b.topics, t)
	}
	sort.Strings(b.topics)

	claimers := make(map[TopicPartition]map[int]bool)
	for i, m := range b.members {
		for _, tp := range m.owned {
			if claimers[tp] == nil {
				claimers[tp] = make(map[int]bool)
			}
			claimers[tp][i] = true
		}
	}
	for tp, who := range claimers {
		if len(who) != 1 || tp.Partition < 0 || tp.Partition >= counts[tp.Topic] {
			continue
		}
		for i := range who {
			if subscribed[i][tp.Topic] {
				b.owned[i][tp.Topic] = append(b.owned[i][tp.Topic], tp.Partition)
			}
		}
	}
	for _, byTopic := range b.owned {
		for _, ps := range byTopic {
			sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
		}
	}
	return b
}

// base returns the share of topic t that every subscriber runs at least,
// and how many of them run one more.
func (b *stickyBalancer) base(t string) (base, extra int) {
	n, s := int(b.counts[t]), len(b.subs[t])
	return n / s, n % s
}

// gain is 1 when member i keeps one partition more if it runs base+1
// partitions of t rather than base: it owns more than base.
func (b *stickyBalancer) gain(i int, t string) int {
	if base, _ := b.base(t); len(b.owned[i][t]) > base {
		return 1
	}
	return 0
}

// chooseExtras decides, per topic, which subscribers run base+1: first
// greedily, topic by topic, those with the fewest such topics so far
// (which keeps the totals of the members of one subscription within one),
// among them those that own more than base; then it improves the choice,
// while it can, by handing an extra to a member that gains by it, or by
// swapping two members' extras of two topics.
func (b *stickyBalancer) chooseExtras() {
	for _, t := range b.topics {
		_, extra := b.base(t)
		candidates := append([]int(nil), b.subs[t]...)
		sort.SliceStable(candidates, func(x, y int) bool {
			i, j := candidates[x], candidates[y]
			if b.extras[i] != b.extras[j] {
				return b.extras[i] < b.extras[j]
			}
			return b.gain(i, t) > b.gain(j, t)
		})
		for _, i := range candidates[:extra] {
			b.setExtra(i, t, true)
		}
	}
	// Each step keeps one partition more where it was: at most as many
	// steps as partitions.
	for b.improve() {
	}
}

func (b *stickyBalancer) setExtra(i int, t string, on bool) {
	b.extra[i][t] = on
	if on {
		b.extras[i]++
	} else {
		b.extras[i]--
	}
}

// improve makes one change of the extras that keeps the balance and keeps
// one partition more where it was, and reports whether it found one: it
// hands the extra of a topic t from a member i that does not need it to
// a member j that owns more than base of t, and, where that breaks the
// balance of a subscription, one more extra moves to repair it, without
// a loss (repair). It gives up, reporting false, once its budget of
// balance checks is spent: the leader must answer within the rebalance
// timeout, and a less sticky target is still balanced.
func (b *stickyBalancer) improve() bool {
	for _, t := range b.topics {
		for _, j := range b.subs[t] {
			if b.extra[j][t] || b.gain(j, t) == 0 {
				continue // j does not want t's extra
			}
			for _, i := range b.subs[t] {
				if !b.extra[i][t] || b.gain(i, t) == 1 {
					continue // i has none to give, or needs it
				}
				if b.budget <= 0 {
					return false
				}
				b.moveExtra(i, j, t)
				if b.balanced(i) && b.balanced(j) || b.repair(i, j) {
					return true
				}
				b.moveExtra(j, i, t)
			}
		}
	}
	return false
}

// repair restores the balance after an extra moved from i to j, with one
// more move of an extra that loses nothing, from a member at the top of a
// subscription that is out of balance, or to a member at its bottom. It
// reports whether it did; otherwise nothing changed.
func (b *stickyBalancer) repair(i, j int) bool {
	for _, g := range []int{j, i} {
		if b.balanced(g) {
			continue
		}
		lo, hi := b.bounds(g)
		for _, u := range b.topics {
			for _, from := range b.subs[u] {
				if !b.extra[from][u] {
					continue
				}
				top := b.group[from] == b.group[g] && b.extras[from] == hi
				for _, to := range b.subs[u] {
					bottom := b.group[to] == b.group[g] && b.extras[to] == lo
					if b.extra[to][u] || b.gain(to, u) < b.gain(from, u) || !top && !bottom || b.budget <= 0 {
						continue
					}
					b.moveExtra(from, to, u)
					if b.balanced(i) && b.balanced(j) && b.balanced(from) && b.balanced(to) {
						return true
					}
					b.moveExtra(to, from, u)
				}
			}
		}
	}
	return false
}

// moveExtra hands the extra of topic t from member from to member to.
func (b *stickyBalancer) moveExtra(from, to int, t string) {
	b.setExtra(from, t, false)
	b.setExtra(to, t, true)
}

// balanced tells whether the members of i's subscription differ by at
// most one in their counts of extras (and so in their totals). Each call
// spends one of the budget.
func (b *stickyBalancer) balanced(i int) bool {
	b.budget--
	lo, hi := b.bounds(i)
	return hi-lo <= 1
}

// bounds returns the fewest and the most extras of the members of i's
// subscription.
func (b *stickyBalancer) bounds(i int) (lo, hi int) {
	lo, hi = b.extras[i], b.extras[i]
	for k := range b.members {
		if b.group[k] == b.group[i] {
			lo, hi = min(lo, b.extras[k]), max(hi, b.extras[k])
		}
	}
	return lo, hi
}

// fill returns the target of the chosen extras: each member keeps the
// lowest of the partitions it owns, up to its share of the topic, and
// the partitions left go, lowest first, to the members below their
// share, in the members' order.
func (b *stickyBalancer) fill() map[string][]TopicPartition {
	target := make(map[string][]TopicPartition, len(b.members))
	for _, m := range b.members {
		target[m.id] = []TopicPartition{}
	}
	for _, t := range b.topics {
		base, _ := b.base(t)
		share := func(i int) int {
			if b.extra[i][t] {
				return base + 1
			}
			return base
		}
		taken := make([]bool, b.counts[t])
		got := make(map[int]int)
		for _, i := range b.subs[t] {
			keep := b.owned[i][t]
			keep = keep[:min(len(keep), share(i))]
			for _, p := range keep {
				taken[p] = true
				target[b.members[i].id] = append(target[b.members[i].id], TopicPartition{Topic: t, Partition: p})
			}
			got[i] = len(keep)
		}
		next := int32(0)
		for _, i := range b.subs[t] {
			for ; got[i] < share(i); got[i]++ {
				for taken[next] {
					next++
				}
				taken[next] = true
				target[b.members[i].id] = append(target[b.members[i].id], TopicPartition{Topic: t, Partition: next})
			}
		}
	}
	for _, tps := range target {
		sort.Slice(tps, func(i, j int) bool {
			return tps[i].Topic < tps[j].Topic || tps[i].Topic == tps[j].Topic && tps[i].Partition < tps[j].Partition
		})
	}
	return target
}
