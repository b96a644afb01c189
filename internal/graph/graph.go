// Package graph holds the graph algorithms the scheduler needs at compile
// time: a topological order and, when there is none, a cycle to report.
package graph

// Index is a node index: int, or int32 where the caller keeps per-node
// arrays small.
type Index interface{ ~int | ~int32 }

// TopoOrder returns the nodes 0..n-1 of the graph whose node i has the
// successors adj[first[i]:first[i+1]] (len(first) is n+1) in a
// topological order: depth first, the node made ready last coming next
// (the sources in increasing order). That is the order in which a run's
// goroutine meets the nodes, since it runs the last node it made ready
// itself, so a run that numbers its nodes this way walks its per-node
// arrays forwards, which the CPU's prefetcher follows (docs/perf.md has
// the measurement). The order is stable: it depends only on first and
// adj.
// If the graph has a cycle, order is nil and cycle is one cycle as a path
// of node indexes that starts and ends with the same node.
// It works in buf when buf has room for 3n indexes (order is then part of
// buf, valid until buf is used again), and in a new array otherwise, so
// that a caller that sorts many graphs can keep one buffer.
// It runs in O(n + e) time.
func TopoOrder[I Index](first, adj []I, buf []I) (order, cycle []I) {
	n := len(first) - 1
	if buf == nil || cap(buf) < 3*n { // never nil: a nil order means a cycle
		buf = make([]I, 3*n)
	}
	buf = buf[:3*n]
	indeg := buf[:n:n]
	clear(indeg)
	for _, j := range adj[:first[n]] {
		indeg[j]++
	}
	order = buf[n : n : 2*n]
	stack := buf[2*n : 2*n : 3*n]
	for i := I(n - 1); i >= 0; i-- {
		if indeg[i] == 0 {
			stack = append(stack, i)
		}
	}
	for len(stack) > 0 {
		v := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		order = append(order, v)
		for _, j := range adj[first[v]:first[v+1]] {
			indeg[j]--
			if indeg[j] == 0 {
				stack = append(stack, j)
			}
		}
	}
	if len(order) == n {
		return order, nil
	}
	return nil, findCycle(first, adj, indeg)
}

// findCycle walks from a node left with a positive in-degree after Kahn's
// algorithm; such a node lies on or below a cycle. It follows edges to
// nodes still positive (every such node has a positive predecessor, so a
// walk backwards would also work) with an iterative DFS and returns the
// first back edge's cycle.
func findCycle[I Index](first, adj []I, indeg []I) []I {
	n := len(first) - 1
	const (
		white = iota
		grey
		black
	)
	color := make([]int8, n)
	type frame struct {
		node I
		next int
	}
	for start := I(0); start < I(n); start++ {
		if indeg[start] == 0 || color[start] != white {
			continue
		}
		stack := []frame{{start, 0}}
		color[start] = grey
		for len(stack) > 0 {
			top := &stack[len(stack)-1]
			out := adj[first[top.node]:first[top.node+1]]
			if top.next == len(out) {
				color[top.node] = black
				stack = stack[:len(stack)-1]
				continue
			}
			j := out[top.next]
			top.next++
			switch color[j] {
			case grey:
				// Back edge: the cycle is the stack from j to the top, then j.
				var path []I
				for k := len(stack) - 1; k >= 0; k-- {
					path = append(path, stack[k].node)
					if stack[k].node == j {
						break
					}
				}
				for l, r := 0, len(path)-1; l < r; l, r = l+1, r-1 {
					path[l], path[r] = path[r], path[l]
				}
				return append(path, j)
			case white:
				color[j] = grey
				stack = append(stack, frame{j, 0})
			}
		}
	}
	return nil // unreachable when called with Kahn's leftovers
}
