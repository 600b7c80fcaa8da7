package kafkaconsumer

// A minimum-cost flow for the sticky assignor (sticky.go): the primal-dual
// method, with Dijkstra's shortest paths on reduced costs and, for each
// length of path, Dinic's blocking flows over the edges of reduced cost
// zero. The graph is small and integer: capacities of int32, costs of
// int64.

import (
	"container/heap"
	"math"
)

// flowGraph is a directed graph with capacities and costs, kept as
// residual edges: edge e^1 is the reverse of edge e.
type flowGraph struct {
	head []int32 // node => its first edge, -1 when none
	next []int32 // edge => the node's next edge, -1 when none
	to   []int32 // edge => the node it leads to
	cap  []int32 // edge => what it can still carry
	cost []int64 // edge => the cost of a unit over it
	// work counts the edges looked at, the bound of minCostFlow's running
	// time that the tests check.
	work int
}

func newFlowGraph(nodes, edges int) *flowGraph {
	g := &flowGraph{head: make([]int32, nodes)}
	for v := range g.head {
		g.head[v] = -1
	}
	g.next = make([]int32, 0, 2*edges)
	g.to = make([]int32, 0, 2*edges)
	g.cap = make([]int32, 0, 2*edges)
	g.cost = make([]int64, 0, 2*edges)
	return g
}

// addEdge adds an edge from u to v and returns its index; what flows
// over it is cap's original value less g.cap of that index.
func (g *flowGraph) addEdge(u, v int, capacity int32, cost int64) int {
	e := len(g.to)
	g.to = append(g.to, int32(v), int32(u))
	g.cap = append(g.cap, capacity, 0)
	g.cost = append(g.cost, cost, -cost)
	g.next = append(g.next, g.head[u], g.head[v])
	g.head[u], g.head[v] = int32(e), int32(e+1)
	return e
}

// minCostFlow sends up to limit units from s to t, each over a path of
// least cost in the residual graph (so the flow is of least cost for its
// value), and returns the units sent. pot must make every reduced cost
// (cost + pot[u] - pot[v]) of an edge with capacity non-negative; the
// graph must have no cycle of negative cost.
func (g *flowGraph) minCostFlow(s, t int, limit int, pot []int64) int {
	dist := make([]int64, len(g.head))
	level := make([]int32, len(g.head))
	iter := make([]int32, len(g.head))
	sent := 0
	for sent < limit {
		if !g.shortest(s, t, pot, dist) {
			break
		}
		for sent < limit && g.levels(s, t, pot, level) {
			copy(iter, g.head)
			for sent < limit {
				f := g.push(s, t, int32(limit-sent), pot, level, iter)
				if f == 0 {
					break
				}
				sent += int(f)
			}
		}
	}
	return sent
}

// mustLeft reports whether an edge of cost must still has capacity.
func (g *flowGraph) mustLeft(must int64) bool {
	for e := 0; e < len(g.to); e += 2 {
		if g.cost[e] == must && g.cap[e] > 0 {
			return true
		}
	}
	return false
}

// reduced returns the reduced cost of edge e from u.
func (g *flowGraph) reduced(e int32, u int, pot []int64) int64 {
	return g.cost[e] + pot[u] - pot[g.to[e]]
}

// shortest computes the least reduced cost from s to every node, and
// adds it to pot (the farthest reached to the nodes not reached), so
// that the edges of the shortest paths have a reduced cost of zero. It
// reports whether t is reached.
func (g *flowGraph) shortest(s, t int, pot, dist []int64) bool {
	for v := range dist {
		dist[v] = math.MaxInt64
	}
	dist[s] = 0
	q := &distHeap{{node: int32(s)}}
	for q.Len() > 0 {
		it := heap.Pop(q).(distItem)
		u := int(it.node)
		if it.dist > dist[u] {
			continue
		}
		for e := g.head[u]; e >= 0; e = g.next[e] {
			g.work++
			if g.cap[e] == 0 {
				continue
			}
			v := g.to[e]
			if d := it.dist + g.reduced(e, u, pot); d < dist[v] {
				dist[v] = d
				heap.Push(q, distItem{dist: d, node: v})
			}
		}
	}
	if dist[t] == math.MaxInt64 {
		return false
	}
	var farthest int64
	for _, d := range dist {
		if d != math.MaxInt64 {
			farthest = max(farthest, d)
		}
	}
	for v, d := range dist {
		if d == math.MaxInt64 {
			d = farthest
		}
		pot[v] += d
	}
	return true
}

// levels numbers the nodes by their count of edges from s over edges of
// capacity and zero reduced cost (Dinic's level graph), and reports
// whether t is reached.
func (g *flowGraph) levels(s, t int, pot []int64, level []int32) bool {
	for v := range level {
		level[v] = -1
	}
	level[s] = 0
	queue := []int32{int32(s)}
	for len(queue) > 0 {
		u := int(queue[0])
		queue = queue[1:]
		for e := g.head[u]; e >= 0; e = g.next[e] {
			g.work++
			if v := g.to[e]; g.cap[e] > 0 && level[v] < 0 && g.reduced(e, u, pot) == 0 {
				level[v] = level[u] + 1
				queue = append(queue, v)
			}
		}
	}
	return level[t] >= 0
}

// push sends up to most units from u to t along the level graph and
// returns how many it sent; iter holds, per node, the next edge to try.
func (g *flowGraph) push(u, t int, most int32, pot []int64, level, iter []int32) int32 {
	if u == t {
		return most
	}
	for ; iter[u] >= 0; iter[u] = g.next[iter[u]] {
		e := iter[u]
		g.work++
		v := int(g.to[e])
		if g.cap[e] == 0 || level[v] != level[u]+1 || g.reduced(e, u, pot) != 0 {
			continue
		}
		if f := g.push(v, t, min(most, g.cap[e]), pot, level, iter); f > 0 {
			g.cap[e] -= f
			g.cap[e^1] += f
			return f
		}
	}
	return 0
}

// distItem is a node of shortest's queue, at its distance when queued.
type distItem struct {
	dist int64
	node int32
}

// distHeap is shortest's priority queue: the nearest first.
type distHeap []distItem

func (h distHeap) Len() int           { return len(h) }
func (h distHeap) Less(i, j int) bool { return h[i].dist < h[j].dist }
func (h distHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *distHeap) Push(x any)        { *h = append(*h, x.(distItem)) }
func (h *distHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}
