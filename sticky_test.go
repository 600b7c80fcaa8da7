package kafkaconsumer

// The sticky assignor (sticky.go) and assignCooperative's withholding,
// without a cluster: balance, stickiness (the count of moves is the
// minimum, against a search of every balanced assignment in small
// cases), subscriptions, conflicting claims, and a leave that needs no
// second generation.

import (
	"fmt"
	"math/rand"
	"slices"
	"sort"
	"syscall"
	"testing"
	"time"
)

// ownedRange returns partitions from..to-1 of topic.
func ownedRange(topic string, from, to int32) []TopicPartition {
	var tps []TopicPartition
	for p := from; p < to; p++ {
		tps = append(tps, TopicPartition{Topic: topic, Partition: p})
	}
	return tps
}

// validOwners returns the owner of each partition as stickyTarget counts
// it: the one member that reports it, subscribes to its topic, and the
// partition exists.
func validOwners(members []kafkaMember, counts map[string]int32) map[TopicPartition]string {
	claims := make(map[TopicPartition][]string)
	for _, m := range members {
		for _, tp := range m.owned {
			if !slices.Contains(claims[tp], m.id) {
				claims[tp] = append(claims[tp], m.id)
			}
		}
	}
	owners := make(map[TopicPartition]string)
	for tp, ids := range claims {
		if len(ids) != 1 || tp.Partition < 0 || tp.Partition >= counts[tp.Topic] {
			continue
		}
		for _, m := range members {
			if m.id == ids[0] && slices.Contains(m.topics, tp.Topic) {
				owners[tp] = m.id
			}
		}
	}
	return owners
}

// checkTarget reports what is wrong with target: a partition of a topic
// given to a member that does not subscribe to it, given twice, or not
// given; a topic whose subscribers differ by more than one of its
// partitions; members of one subscription whose totals differ by more
// than one. It returns the count of moves: partitions owned (validOwners)
// that the target gives to another member.
func checkTarget(t *testing.T, name string, members []kafkaMember, counts map[string]int32, target map[string][]TopicPartition) (moves int) {
	t.Helper()
	byID := make(map[string]kafkaMember)
	for _, m := range members {
		byID[m.id] = m
		if _, ok := target[m.id]; !ok {
			t.Errorf("%s: no entry for member %s", name, m.id)
		}
	}
	given := make(map[TopicPartition]string)
	perTopic := make(map[string]map[string]int) // topic => member => count
	for id, tps := range target {
		for _, tp := range tps {
			if !slices.Contains(byID[id].topics, tp.Topic) {
				t.Errorf("%s: %s/%d given to %s, which does not subscribe to %s", name, tp.Topic, tp.Partition, id, tp.Topic)
			}
			if other, ok := given[tp]; ok {
				t.Errorf("%s: %s/%d given to %s and %s", name, tp.Topic, tp.Partition, other, id)
			}
			given[tp] = id
			if perTopic[tp.Topic] == nil {
				perTopic[tp.Topic] = make(map[string]int)
			}
			perTopic[tp.Topic][id]++
		}
	}
	groups := make(map[string][]string) // subscription => members
	for _, m := range members {
		var topics []string
		for topic, n := range counts {
			if n > 0 && slices.Contains(m.topics, topic) {
				topics = append(topics, topic)
			}
		}
		sort.Strings(topics)
		key := fmt.Sprint(topics)
		groups[key] = append(groups[key], m.id)
	}
	for topic, n := range counts {
		lo, hi, subscribed := int(n), 0, false
		for _, m := range members {
			if slices.Contains(m.topics, topic) {
				subscribed = true
				lo, hi = min(lo, perTopic[topic][m.id]), max(hi, perTopic[topic][m.id])
			}
		}
		if subscribed && hi-lo > 1 {
			t.Errorf("%s: topic %s unbalanced: %v", name, topic, perTopic[topic])
		}
		for p := int32(0); p < n && subscribed; p++ {
			if _, ok := given[TopicPartition{Topic: topic, Partition: p}]; !ok {
				t.Errorf("%s: %s/%d given to nobody", name, topic, p)
			}
		}
	}
	for key, ids := range groups {
		lo, hi := -1, 0
		for _, id := range ids {
			n := len(target[id])
			if lo < 0 || n < lo {
				lo = n
			}
			hi = max(hi, n)
		}
		if hi-lo > 1 {
			t.Errorf("%s: members of subscription %s unbalanced in all: %v", name, key, ids)
		}
	}
	for tp, owner := range validOwners(members, counts) {
		if given[tp] != owner {
			moves++
		}
	}
	return moves
}

// TestStickyTarget: table-driven cases of the sticky assignor, each with
// the minimum count of moves its balance needs.
func TestStickyTarget(t *testing.T) {
	t.Parallel()
	ab, a := []string{"a", "b"}, []string{"a"}
	member := func(id string, topics []string, owned ...[]TopicPartition) kafkaMember {
		m := kafkaMember{id: id, key: id, topics: topics}
		for _, o := range owned {
			m.owned = append(m.owned, o...)
		}
		return m
	}
	for _, tc := range []struct {
		name     string
		members  []kafkaMember
		counts   map[string]int32
		moves    int
		awaiting string // assignCooperative's, as fmt prints it
	}{{
		name:     "first member",
		members:  []kafkaMember{member("m1", a)},
		counts:   map[string]int32{"a": 8},
		awaiting: "map[]",
	}, {
		name: "join: a fourth member of 64 partitions takes 16, 5 or 6 from each",
		members: []kafkaMember{
			member("m1", a, ownedRange("a", 0, 22)), member("m2", a, ownedRange("a", 22, 43)),
			member("m3", a, ownedRange("a", 43, 64)), member("m4", a),
		},
		counts:   map[string]int32{"a": 64},
		moves:    16,
		awaiting: "map[m4:true]",
	}, {
		name: "join in the middle of the keys moves no more",
		members: []kafkaMember{
			member("m1", a, ownedRange("a", 0, 32)), member("m3", a, ownedRange("a", 32, 64)), member("m2", a),
		},
		counts:   map[string]int32{"a": 64},
		moves:    21,
		awaiting: "map[m2:true]",
	}, {
		name: "leave: the leaver's partitions go at once, nothing else moves",
		members: []kafkaMember{
			member("m1", a, ownedRange("a", 0, 16)), member("m2", a, ownedRange("a", 16, 32)),
			member("m4", a, ownedRange("a", 48, 64)),
		},
		counts:   map[string]int32{"a": 64},
		awaiting: "map[]",
	}, {
		name: "leave of one of three on uneven shares",
		members: []kafkaMember{
			member("m1", a, ownedRange("a", 0, 4)), member("m3", a, ownedRange("a", 7, 10)),
		},
		counts:   map[string]int32{"a": 10},
		awaiting: "map[]",
	}, {
		name:     "mass move: half of 1,000 partitions to a joining member",
		members:  []kafkaMember{member("m1", a, ownedRange("a", 0, 1000)), member("m2", a)},
		counts:   map[string]int32{"a": 1000},
		moves:    500,
		awaiting: "map[m2:true]",
	}, {
		name: "different subscriptions: b only among its subscribers",
		members: []kafkaMember{
			member("old", a, ownedRange("a", 0, 4)), member("new1", ab), member("new2", ab),
		},
		counts:   map[string]int32{"a": 4, "b": 8},
		moves:    2,
		awaiting: "map[new1:true new2:true]",
	}, {
		name: "a leave among different subscriptions needs no second generation",
		members: []kafkaMember{
			member("old", a, ownedRange("a", 0, 2)),
			member("new1", ab, ownedRange("a", 2, 3), ownedRange("b", 0, 4)),
		},
		counts:   map[string]int32{"a": 4, "b": 8},
		awaiting: "map[]",
	}, {
		name: "many topics of one partition spread over members of one subscription",
		members: []kafkaMember{
			member("m1", []string{"t1", "t2", "t3", "t4", "t5", "t6"},
				ownedRange("t1", 0, 1), ownedRange("t2", 0, 1), ownedRange("t3", 0, 1),
				ownedRange("t4", 0, 1), ownedRange("t5", 0, 1), ownedRange("t6", 0, 1)),
			member("m2", []string{"t1", "t2", "t3", "t4", "t5", "t6"}),
			member("m3", []string{"t1", "t2", "t3", "t4", "t5", "t6"}),
		},
		counts:   map[string]int32{"t1": 1, "t2": 1, "t3": 1, "t4": 1, "t5": 1, "t6": 1},
		moves:    4,
		awaiting: "map[m2:true m3:true]",
	}, {
		name: "owned extras kept by swapping which member runs one more",
		members: []kafkaMember{
			member("x", []string{"a", "b", "c"}, ownedRange("a", 0, 1), ownedRange("b", 0, 1)),
			member("y", []string{"a", "b", "c"}, ownedRange("c", 0, 1)),
			member("z", []string{"a", "b", "c"}),
		},
		counts:   map[string]int32{"a": 1, "b": 1, "c": 1},
		moves:    1,
		awaiting: "map[z:true]",
	}, {
		name: "conflicting claims after a split-brain: both stop it first",
		members: []kafkaMember{
			member("m1", a, ownedRange("a", 0, 3)), member("m2", a, ownedRange("a", 2, 4)),
		},
		counts:   map[string]int32{"a": 4},
		awaiting: "map[m2:true]",
	}, {
		name: "partitions of a deleted topic and beyond a topic's count",
		members: []kafkaMember{
			member("m1", []string{"a", "gone"}, ownedRange("a", 0, 2), ownedRange("gone", 0, 3), ownedRange("a", 7, 9)),
			member("m2", a, ownedRange("a", 2, 4)),
		},
		counts:   map[string]int32{"a": 4},
		awaiting: "map[]",
	}, {
		name: "a partition of a topic its owner no longer subscribes to",
		members: []kafkaMember{
			member("m1", []string{"b"}, ownedRange("a", 0, 2), ownedRange("b", 0, 2)),
			member("m2", a, ownedRange("a", 2, 4)),
		},
		counts:   map[string]int32{"a": 4, "b": 2},
		awaiting: "map[m2:true]",
	}, {
		name:     "no members",
		counts:   map[string]int32{"a": 4},
		awaiting: "map[]",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			target := stickyTarget(tc.members, tc.counts)
			if moves := checkTarget(t, "target", tc.members, tc.counts, target); moves != tc.moves {
				t.Errorf("moves %d, want %d: %v", moves, tc.moves, target)
			}
			// The result does not depend on the members' order.
			reversed := slices.Clone(tc.members)
			slices.Reverse(reversed)
			if again := stickyTarget(reversed, tc.counts); fmt.Sprint(again) != fmt.Sprint(target) {
				t.Errorf("another order of the members: %v, want %v", again, target)
			}

			// assignCooperative gives what nobody else reports at once,
			// and withholds the rest: awaiting names who waits.
			plan, awaiting := assignCooperative(tc.members, tc.counts)
			if got := fmt.Sprint(awaiting); got != tc.awaiting {
				t.Errorf("awaiting %s, want %s (target %v)", got, tc.awaiting, target)
			}
			for id, tps := range target {
				for _, tp := range tps {
					reported := false
					for _, m := range tc.members {
						if m.id != id && slices.Contains(m.owned, tp) {
							reported = true
						}
					}
					if got := slices.Contains(plan[id][tp.Topic], tp.Partition); got == reported {
						t.Errorf("%s/%d for %s: in the plan %t, reported by another member %t", tp.Topic, tp.Partition, id, got, reported)
					}
				}
			}
		})
	}
}

// TestStickyTargetMinimalMoves: in random small groups (up to 3 members,
// then up to 4, of 2 topics of up to 3 partitions, random subscriptions
// and claims), the target is balanced and moves no more partitions than
// the best of every balanced assignment, found by trying them all.
func TestStickyTargetMinimalMoves(t *testing.T) {
	t.Parallel()
	t.Run("3 members", func(t *testing.T) { t.Parallel(); minimalMoves(t, 41, 3000, 3) })
	t.Run("4 members", func(t *testing.T) { t.Parallel(); minimalMoves(t, 42, 1000, 4) })
}

// minimalMoves checks runs random groups of up to most members, made
// from seed (TestStickyTargetMinimalMoves).
func minimalMoves(t *testing.T, seed int64, runs, most int) {
	r := rand.New(rand.NewSource(seed))
	topics := []string{"a", "b"}
	for run := 0; run < runs; run++ {
		counts := map[string]int32{}
		for _, topic := range topics {
			counts[topic] = int32(r.Intn(4))
		}
		members := make([]kafkaMember, 1+r.Intn(most))
		for i := range members {
			m := &members[i]
			m.id, m.key = fmt.Sprintf("m%d", i), fmt.Sprintf("k%d", r.Intn(10))
			for _, topic := range topics {
				if r.Intn(3) > 0 {
					m.topics = append(m.topics, topic)
				}
			}
		}
		for _, topic := range append(topics, "gone") {
			for p := int32(0); p < 4; p++ {
				if i := r.Intn(len(members) + 2); i < len(members) {
					members[i].owned = append(members[i].owned, TopicPartition{Topic: topic, Partition: p})
				}
				if r.Intn(10) == 0 { // a conflicting claim
					i := r.Intn(len(members))
					members[i].owned = append(members[i].owned, TopicPartition{Topic: topic, Partition: p})
				}
			}
		}
		name := fmt.Sprintf("run %d: members %v, counts %v", run, members, counts)
		target := stickyTarget(members, counts)
		moves := checkTarget(t, name, members, counts, target)
		if best := fewestMoves(members, counts); moves != best {
			t.Fatalf("%s: %d moves, but a balanced assignment with %d exists; target %v", name, moves, best, target)
		}
	}
}

// TestStickyTargetRandomBalanced: in random groups of up to 30 members
// on 6 topics of up to 40 partitions, with random subscriptions and
// claims, the target is balanced, and one that keeps every owned
// partition it can moves nothing when nobody joins or leaves.
func TestStickyTargetRandomBalanced(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewSource(43))
	topics := []string{"a", "b", "c", "d", "e", "f"}
	for run := 0; run < 300; run++ {
		counts := map[string]int32{}
		for _, topic := range topics {
			counts[topic] = int32(r.Intn(41))
		}
		subscriptions := make([][]string, 1+r.Intn(4))
		for k := range subscriptions {
			for _, topic := range topics {
				if r.Intn(2) == 0 {
					subscriptions[k] = append(subscriptions[k], topic)
				}
			}
		}
		members := stickyGroup(1+r.Intn(30), func(int) []string { return subscriptions[r.Intn(len(subscriptions))] })
		for _, topic := range topics {
			for p := int32(0); p < counts[topic]+2; p++ {
				if i := r.Intn(len(members) + 3); i < len(members) {
					members[i].owned = append(members[i].owned, TopicPartition{Topic: topic, Partition: p})
				}
			}
		}
		name := fmt.Sprintf("run %d", run)
		target := stickyTarget(members, counts)
		checkTarget(t, name, members, counts, target)
		if moves := checkTarget(t, name+" again", owning(members, target), counts, stickyTarget(owning(members, target), counts)); moves != 0 {
			t.Errorf("%s: the target of its own target moves %d", name, moves)
		}
		if t.Failed() {
			t.Fatalf("%s: members %v, counts %v", name, members, counts)
		}
	}
}

// fewestMoves tries every assignment of the partitions to their topics'
// subscribers, and returns the fewest moves of those that are balanced
// (checkTarget's rules).
func fewestMoves(members []kafkaMember, counts map[string]int32) int {
	var parts []TopicPartition
	var candidates [][]int
	for _, topic := range []string{"a", "b"} {
		var subs []int
		for i, m := range members {
			if slices.Contains(m.topics, topic) {
				subs = append(subs, i)
			}
		}
		if len(subs) == 0 {
			continue
		}
		for p := int32(0); p < counts[topic]; p++ {
			parts = append(parts, TopicPartition{Topic: topic, Partition: p})
			candidates = append(candidates, subs)
		}
	}
	owners := validOwners(members, counts)
	group := make([]string, len(members))
	for i, m := range members {
		for _, topic := range []string{"a", "b"} {
			if counts[topic] > 0 && slices.Contains(m.topics, topic) {
				group[i] += topic
			}
		}
	}
	best := -1
	choice := make([]int, len(parts))
	var try func(k int)
	try = func(k int) {
		if k < len(parts) {
			for _, i := range candidates[k] {
				choice[k] = i
				try(k + 1)
			}
			return
		}
		perTopic := map[string][]int{"a": make([]int, len(members)), "b": make([]int, len(members))}
		totals := make([]int, len(members))
		moves := 0
		for k, tp := range parts {
			perTopic[tp.Topic][choice[k]]++
			totals[choice[k]]++
			if o, ok := owners[tp]; ok && o != members[choice[k]].id {
				moves++
			}
		}
		for topic, per := range perTopic {
			lo, hi := 1<<30, 0
			for i, m := range members {
				if slices.Contains(m.topics, topic) {
					lo, hi = min(lo, per[i]), max(hi, per[i])
				}
			}
			if hi-lo > 1 && lo != 1<<30 {
				return
			}
		}
		for i := range members {
			for j := range members {
				if group[i] == group[j] && totals[i]-totals[j] > 1 {
					return
				}
			}
		}
		if best < 0 || moves < best {
			best = moves
		}
	}
	try(0)
	return max(best, 0)
}

// stickyTopics returns the counts of n topics of parts partitions each,
// and their names in order.
func stickyTopics(n int, parts int32) (map[string]int32, []string) {
	counts := make(map[string]int32, n)
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("t%03d", i)
		counts[names[i]] = parts
	}
	return counts, names
}

// stickyGroup returns n members, m0 to m(n-1), each subscribing to
// subscription(i).
func stickyGroup(n int, subscription func(i int) []string) []kafkaMember {
	members := make([]kafkaMember, n)
	for i := range members {
		id := fmt.Sprintf("m%03d", i)
		members[i] = kafkaMember{id: id, key: id, topics: subscription(i)}
	}
	return members
}

// owning returns members, each owning what target gives it.
func owning(members []kafkaMember, target map[string][]TopicPartition) []kafkaMember {
	out := slices.Clone(members)
	for i := range out {
		out[i].owned = target[out[i].id]
	}
	return out
}

// stickyScale is a change of a group's size: from members before to
// after (the first min(before, after) members stay, owning the target of
// the group before), all on counts.
type stickyScale struct {
	name          string
	before, after int
	topics        int
	parts         int32
	// subscription gives member i's topics among names; nil: all.
	subscription func(i int, names []string) []string
}

// inputs returns the members of the group after the change, owning what
// the target of the group before gives them, and the counts.
func (sc stickyScale) inputs() ([]kafkaMember, map[string]int32) {
	counts, names := stickyTopics(sc.topics, sc.parts)
	sub := func(i int) []string {
		if sc.subscription == nil {
			return names
		}
		return sc.subscription(i, names)
	}
	members := stickyGroup(max(sc.before, sc.after), sub)
	var owned []kafkaMember
	if sc.before > 0 {
		owned = owning(members[:sc.before], stickyTarget(members[:sc.before], counts))
	}
	after := slices.Clone(members[:sc.after])
	copy(after, owned)
	return after[:sc.after], counts
}

// stickyMixed: a third of the members subscribe to the first 60 %
// of the topics, a third to the last 60 %, a third to all.
func stickyMixed(i int, names []string) []string {
	switch n := len(names); i % 3 {
	case 0:
		return names[:n*6/10]
	case 1:
		return names[n*4/10:]
	default:
		return names
	}
}

// stickyScales are the shapes of BenchmarkStickyTarget: 200 members on
// 10,000 partitions, scaled out from 100, in from 200, fresh, and mixed
// subscriptions; and the tenth member of a group of nine on 1,000.
var stickyScales = []stickyScale{
	{name: "join-10th-of-1000", before: 9, after: 10, topics: 50, parts: 20},
	{name: "out-100-200-of-10000", before: 100, after: 200, topics: 100, parts: 100},
	{name: "in-200-100-of-10000", before: 200, after: 100, topics: 100, parts: 100},
	{name: "fresh-200-of-10000", after: 200, topics: 100, parts: 100},
	{name: "out-100-200-of-500x20", before: 100, after: 200, topics: 500, parts: 20},
	{name: "mixed-out-100-200-of-10000", before: 100, after: 200, topics: 100, parts: 100, subscription: stickyMixed},
	{name: "mixed-in-200-100-of-10000", before: 200, after: 100, topics: 100, parts: 100, subscription: stickyMixed},
}

// BenchmarkStickyTarget: the leader's target for each of stickyScales;
// the inputs are made outside the timing. cpu-ns/op is the process's CPU
// time per target, which a loaded machine stretches less than ns/op.
func BenchmarkStickyTarget(b *testing.B) {
	for _, sc := range stickyScales {
		b.Run(sc.name, func(b *testing.B) {
			members, counts := sc.inputs()
			b.ReportAllocs()
			start := cpuTime(b)
			for b.Loop() {
				stickyTarget(members, counts)
			}
			b.ReportMetric(float64(cpuTime(b)-start)/float64(b.N), "cpu-ns/op")
		})
	}
}

// cpuTime returns the CPU time the process has used, user and system.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestStickyTargetLargeGroup: large scale-outs (50 → 100 members on 50
// topics, 100 → 150 on 20), and the shapes of BenchmarkStickyTarget, are balanced,
// the first two move the minimum (each old member keeps its share of
// the new group), and chooseExtras takes at most stepsPerPair steps per
// pair of a member and a topic it subscribes to: its running time, which
// BenchmarkStickyTarget measures, has a bound (searchLevels spends at
// most 3 times what came before it, plus a last flow).
func TestStickyTargetLargeGroup(t *testing.T) {
	t.Parallel()
	scales := append([]stickyScale{
		{name: "out-50-100-of-50x20", before: 50, after: 100, topics: 50, parts: 20},
		{name: "out-100-150-of-20x50", before: 100, after: 150, topics: 20, parts: 50},
	}, stickyScales...)
	minimum := map[string]int{"out-50-100-of-50x20": 500, "out-100-150-of-20x50": 300}
	const stepsPerPair = 200
	for _, sc := range scales {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			members, counts := sc.inputs()
			b := newStickyBalancer(members, counts)
			b.chooseExtras()
			pairs := 0
			for _, subs := range b.subs {
				pairs += len(subs)
			}
			if b.work > stepsPerPair*pairs {
				t.Errorf("%d steps, want at most %d: %d per pair of a member and a topic", b.work, stepsPerPair*pairs, stepsPerPair)
			}
			moves := checkTarget(t, sc.name, members, counts, b.fill())
			if want, ok := minimum[sc.name]; ok && moves != want {
				t.Errorf("moves %d, want %d", moves, want)
			}
		})
	}
}
