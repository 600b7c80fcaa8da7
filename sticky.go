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
//
// The choice. Of topic t's partitions, every subscriber runs base =
// partitions / subscribers, and rest = partitions % subscribers of them
// run one more, an "extra". Which ones is the whole choice: a member
// that owns more than base partitions of t keeps one more of them when
// it runs t's extra (it gains by it), so the target is the choice of
// extras with the most gains within the balance of the subscriptions.
// For given levels of the subscriptions (every member of one takes its
// level of extras, or one more), that is a flow of least cost
// (sticky_flow.go): each topic sends its rest extras to as many of its
// subscribers, at a cost of -1 to one that gains by it. A member alone
// in its subscription takes any number. The levels are those of a
// greedy choice, then, within a bound of work, one below or above
// (searchLevels): the target moves the fewest partitions when all
// members subscribe to the same topics or subscriptions share no topic,
// and otherwise the fewest among those levels (which held in every case
// of the exhaustive tests). The work is a few flows, each a few passes
// over the pairs of a member and a topic it subscribes to.

import (
	"encoding/binary"
	"math"
	"slices"
	"sort"
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

// stickyBalancer holds the state of one stickyTarget. Topics are indexes
// into topics; a topic's subscribers are positions in its subs.
type stickyBalancer struct {
	members []kafkaMember // sorted by key, then ID
	topics  []string      // sorted: the topics with partitions that a member subscribes to
	count   []int32       // topic => its partitions
	subs    [][]int       // topic => its subscribers (indexes into members, ascending)
	// owned is, per topic and subscriber, the partitions it owns (see
	// stickyTarget), sorted.
	owned [][][]int32
	// extra is, per topic and subscriber, whether it runs base+1
	// partitions; extras counts them per member.
	extra  [][]bool
	extras []int
	group  []int // member => its subscription: equal for members of the same topics
	groups int   // the count of subscriptions
	// work counts the steps of chooseExtras: subscribers placed and edges
	// of the flow looked at.
	work int
}

func newStickyBalancer(members []kafkaMember, counts map[string]int32) *stickyBalancer {
	b := &stickyBalancer{members: append([]kafkaMember(nil), members...)}
	sort.SliceStable(b.members, func(i, j int) bool {
		x, y := b.members[i], b.members[j]
		if x.key != y.key {
			return x.key < y.key
		}
		return x.id < y.id
	})
	index := make(map[string]int)
	for _, m := range b.members {
		for _, t := range m.topics {
			if _, ok := index[t]; !ok && counts[t] > 0 {
				index[t] = 0
				b.topics = append(b.topics, t)
			}
		}
	}
	sort.Strings(b.topics)
	b.count, b.subs = make([]int32, len(b.topics)), make([][]int, len(b.topics))
	for t, name := range b.topics {
		index[name], b.count[t] = t, counts[name]
	}
	b.subscribe(index)
	b.own(index)
	return b
}

// subscribe fills subs, group and groups from the members' topics.
func (b *stickyBalancer) subscribe(index map[string]int) {
	n := len(b.members)
	b.group, b.extras = make([]int, n), make([]int, n)
	groups := make(map[string]int)
	seen := make([]int, len(b.topics)) // topic => the last member that subscribes to it, plus one
	for i, m := range b.members {
		var mine []int
		for _, name := range m.topics {
			if t, ok := index[name]; ok && seen[t] != i+1 {
				seen[t] = i + 1
				mine = append(mine, t)
			}
		}
		slices.Sort(mine)
		key := make([]byte, 0, 4*len(mine))
		for _, t := range mine {
			b.subs[t] = append(b.subs[t], i)
			key = binary.AppendUvarint(key, uint64(t))
		}
		g, ok := groups[string(key)]
		if !ok {
			g = len(groups)
			groups[string(key)] = g
		}
		b.group[i] = g
	}
	b.groups = len(groups)
	b.owned, b.extra = make([][][]int32, len(b.topics)), make([][]bool, len(b.topics))
	for t, subs := range b.subs {
		b.owned[t], b.extra[t] = make([][]int32, len(subs)), make([]bool, len(subs))
	}
}

// own fills owned from the members' reports.
func (b *stickyBalancer) own(index map[string]int) {
	const free, conflict = -1, -2
	claimer := make([][]int32, len(b.topics)) // topic => partition => the member that reports it
	for t := range claimer {
		claimer[t] = make([]int32, b.count[t])
		for p := range claimer[t] {
			claimer[t][p] = free
		}
	}
	for i, m := range b.members {
		for _, tp := range m.owned {
			t, ok := index[tp.Topic]
			if !ok || tp.Partition < 0 || tp.Partition >= b.count[t] {
				continue
			}
			if c := &claimer[t][tp.Partition]; *c == free {
				*c = int32(i)
			} else if *c != int32(i) {
				*c = conflict
			}
		}
	}
	for t, byPartition := range claimer {
		for p, i := range byPartition {
			if i < 0 {
				continue
			}
			if k, ok := slices.BinarySearch(b.subs[t], int(i)); ok {
				b.owned[t][k] = append(b.owned[t][k], int32(p))
			}
		}
	}
}

// base returns the share of topic t that every subscriber runs at least,
// and how many of them run one more.
func (b *stickyBalancer) base(t int) (base, rest int) {
	n, s := int(b.count[t]), len(b.subs[t])
	return n / s, n % s
}

// gain tells whether t's subscriber at position k keeps one partition
// more if it runs base+1 partitions of t rather than base: it owns more
// than base.
func (b *stickyBalancer) gain(t, k int) bool {
	base, _ := b.base(t)
	return len(b.owned[t][k]) > base
}

// chooseExtras decides, per topic, which subscribers run base+1: first
// greedily, topic by topic, those with the fewest such topics so far
// (which keeps the totals of the members of one subscription within one),
// among them those that gain by it; then, as the flow of least cost
// (flow), the choice with the most gains at the levels of the
// subscriptions that the greedy choice reached; then at other levels
// (searchLevels).
func (b *stickyBalancer) chooseExtras() {
	for t, subs := range b.subs {
		_, rest := b.base(t)
		order := make([]int, len(subs))
		for k := range order {
			order[k] = k
		}
		sort.SliceStable(order, func(x, y int) bool {
			i, j := subs[order[x]], subs[order[y]]
			if b.extras[i] != b.extras[j] {
				return b.extras[i] < b.extras[j]
			}
			return b.gain(t, order[x]) && !b.gain(t, order[y])
		})
		for _, k := range order[:rest] {
			b.extra[t][k] = true
			b.extras[subs[k]]++
		}
		b.work += len(subs)
	}
	most, shared := b.bound()
	if b.gains() == most {
		return
	}
	level, size := b.levels()
	if choice, gains, ok := b.flow(level); ok {
		b.adopt(choice)
		b.searchLevels(level, size, gains, most, shared)
	}
}

// bound returns the most gains of any choice: every topic's extras on
// members that gain by them; and, per subscription, whether it shares a
// topic with another (only then its level can change).
func (b *stickyBalancer) bound() (most int, shared []bool) {
	shared = make([]bool, b.groups)
	for t, subs := range b.subs {
		_, rest := b.base(t)
		gainers, mixed := 0, false
		for k, i := range subs {
			mixed = mixed || b.group[i] != b.group[subs[0]]
			if b.gain(t, k) {
				gainers++
			}
		}
		most += min(rest, gainers)
		for _, i := range subs {
			shared[b.group[i]] = shared[b.group[i]] || mixed
		}
	}
	return most, shared
}

// gains returns the count of extras on members that gain by them.
func (b *stickyBalancer) gains() int {
	n := 0
	for t, subs := range b.subs {
		for k := range subs {
			if b.extra[t][k] && b.gain(t, k) {
				n++
			}
		}
	}
	return n
}

// searchLevels computes at most stickyLevelTries flows, and stops
// trying once it spent stickyLevelWork times the steps chooseExtras took
// before it (at least stickyLevelFloor steps): each flow costs about as
// much as the first.
const (
	stickyLevelTries = 8
	stickyLevelWork  = 3
	stickyLevelFloor = 1 << 16
)

// searchLevels tries, for one subscription of several members that
// shares a topic with another after another, the level below and the
// level above its own, and keeps a choice with more gains than gains,
// until no such try gains, gains reach most, or its bounds are reached
// (stickyLevelTries). A level is the fewest extras of a member of the
// subscription (level, size: levels'; most, shared: bound's).
func (b *stickyBalancer) searchLevels(level, size []int, gains, most int, shared []bool) {
	first := make([]int, b.groups) // subscription => its first member
	for i := len(b.group) - 1; i >= 0; i-- {
		first[b.group[i]] = i
	}
	tries, limit := 0, b.work+max(stickyLevelWork*b.work, stickyLevelFloor)
	for improved := gains < most; improved; {
		improved = false
		for g := 0; g < b.groups; g++ {
			for _, step := range []int{-1, 1} {
				from := level[first[g]]
				if size[g] < 2 || !shared[g] || from+step < 0 || tries == stickyLevelTries || b.work >= limit || gains == most {
					continue
				}
				tries++
				b.setLevel(level, g, from+step)
				if choice, more, ok := b.flow(level); ok && more > gains {
					b.adopt(choice)
					gains, improved = more, true
					break
				}
				b.setLevel(level, g, from)
			}
		}
	}
}

// setLevel sets the level of the members of subscription g to l.
func (b *stickyBalancer) setLevel(level []int, g, l int) {
	for i, h := range b.group {
		if h == g {
			level[i] = l
		}
	}
}

// levels returns, per member, the extras it must take: the fewest of its
// subscription's members, or -1 for a member alone in its subscription,
// which may take any number; and, per subscription, its members.
func (b *stickyBalancer) levels() (level, size []int) {
	size, lo := make([]int, b.groups), make([]int, b.groups)
	for g := range lo {
		lo[g] = math.MaxInt
	}
	for i, g := range b.group {
		size[g]++
		lo[g] = min(lo[g], b.extras[i])
	}
	level = make([]int, len(b.members))
	for i, g := range b.group {
		level[i] = -1
		if size[g] > 1 {
			level[i] = lo[g]
		}
	}
	return level, size
}

// flow returns the choice of extras (as extra) that is the flow of
// least cost in which member i takes level[i] extras, or one more (any
// number for a level of -1), and its count of gains; ok is false if
// there is no such choice.
func (b *stickyBalancer) flow(level []int) (choice [][]bool, gains int, ok bool) {
	n, topics := len(b.members), len(b.topics)
	const source, sink = 0, 1
	topicNode := func(t int) int { return 2 + t }
	memberNode := func(i int) int { return 2 + topics + i }
	pairs := 0
	for _, subs := range b.subs {
		pairs += len(subs)
	}
	g := newFlowGraph(2+topics+n, topics+pairs+2*n)
	// A must-take extra costs more than all gains together: the flow of
	// least cost takes every one it can.
	must := -int64(pairs + 1)
	// pot gives every edge a reduced cost of at least zero: the least
	// cost of a path from the source, the graph having no cycle yet.
	pot := make([]int64, 2+topics+n)
	edges := make([][]int, topics)
	total := 0
	for t, subs := range b.subs {
		_, rest := b.base(t)
		if rest == 0 {
			continue
		}
		total += rest
		g.addEdge(source, topicNode(t), int32(rest), 0)
		edges[t] = make([]int, len(subs))
		for k, i := range subs {
			cost := int64(0)
			if b.gain(t, k) {
				cost = -1
			}
			edges[t][k] = g.addEdge(topicNode(t), memberNode(i), 1, cost)
			pot[memberNode(i)] = min(pot[memberNode(i)], cost)
		}
	}
	for i := range b.members {
		if level[i] > 0 {
			g.addEdge(memberNode(i), sink, int32(level[i]), must)
			pot[sink] = min(pot[sink], pot[memberNode(i)]+must)
		}
		more := int32(1)
		if level[i] < 0 {
			more = int32(total) // any number
		}
		g.addEdge(memberNode(i), sink, more, 0)
		pot[sink] = min(pot[sink], pot[memberNode(i)])
	}
	sent := g.minCostFlow(source, sink, total, pot)
	b.work += g.work
	if sent != total || g.mustLeft(must) {
		return nil, 0, false
	}
	choice = make([][]bool, topics)
	for t, subs := range b.subs {
		choice[t] = make([]bool, len(subs))
		for k := range subs {
			choice[t][k] = edges[t] != nil && g.cap[edges[t][k]] == 0
			if choice[t][k] && b.gain(t, k) {
				gains++
			}
		}
	}
	return choice, gains, true
}

// adopt makes choice the extras.
func (b *stickyBalancer) adopt(choice [][]bool) {
	clear(b.extras)
	for t, subs := range b.subs {
		for k, i := range subs {
			if choice[t][k] {
				b.extras[i]++
			}
		}
	}
	b.extra = choice
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
	for t, subs := range b.subs {
		base, _ := b.base(t)
		share := func(k int) int {
			if b.extra[t][k] {
				return base + 1
			}
			return base
		}
		taken := make([]bool, b.count[t])
		got := make([]int, len(subs))
		for k, i := range subs {
			keep := b.owned[t][k]
			keep = keep[:min(len(keep), share(k))]
			for _, p := range keep {
				taken[p] = true
				target[b.members[i].id] = append(target[b.members[i].id], TopicPartition{Topic: b.topics[t], Partition: p})
			}
			got[k] = len(keep)
		}
		next := int32(0)
		for k, i := range subs {
			for ; got[k] < share(k); got[k]++ {
				for taken[next] {
					next++
				}
				taken[next] = true
				target[b.members[i].id] = append(target[b.members[i].id], TopicPartition{Topic: b.topics[t], Partition: next})
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
