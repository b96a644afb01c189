package peers

import (
	"fmt"
	"strconv"
	"sync/atomic"
	"time"
)

// shape is a DAG as plain adjacency data, shared by every implementation
// so that all of them run exactly the same graph. Nodes are numbered in a
// topological order: every dependency of node i is smaller than i. It is
// the subset of benchmarks/shapes_test.go (in the root module) that this
// module's shapes need, kept identical so that the figures compare.
type shape struct {
	name  string
	deps  [][]int32 // deps[i]: the nodes i waits for, without duplicates
	succ  [][]int32 // succ[i]: the nodes waiting for i
	roots []int32   // nodes without dependencies
	sinks []int32   // nodes without successors
	ids   []string  // ids[i]: the node's id, "n<i>", built once
	sleep bool      // nodes that have both dependencies and successors sleep 1 ms
	// calls, when not nil (in TestImplementationsAgree only), counts the
	// times each node's work ran.
	calls []atomic.Int32
}

// n returns the number of nodes.
func (s *shape) n() int { return len(s.deps) }

// newShape derives succ, roots, sinks and ids from deps and checks the
// numbering.
func newShape(name string, deps [][]int32) *shape {
	s := &shape{name: name, deps: deps, succ: make([][]int32, len(deps)), ids: make([]string, len(deps))}
	for i, ds := range deps {
		if len(ds) == 0 {
			s.roots = append(s.roots, int32(i))
		}
		for _, d := range ds {
			if int(d) >= i {
				panic(fmt.Sprintf("shape %s: node %d depends on %d, not a topological numbering", name, i, d))
			}
			s.succ[d] = append(s.succ[d], int32(i))
		}
		s.ids[i] = "n" + strconv.Itoa(i)
	}
	for i, ss := range s.succ {
		if len(ss) == 0 {
			s.sinks = append(s.sinks, int32(i))
		}
	}
	return s
}

// fanShape: 1 → n → 1, so n+2 nodes: node 0 is the source, n+1 the sink.
func fanShape(n int) *shape {
	deps := make([][]int32, n+2)
	all := make([]int32, n)
	for i := 1; i <= n; i++ {
		deps[i] = []int32{0}
		all[i-1] = int32(i)
	}
	deps[n+1] = all
	return newShape("fan", deps)
}

// diamondShape: a → b, a → c, b → d, c → d, the common small request graph.
func diamondShape() *shape {
	return newShape("diamond", [][]int32{nil, {0}, {0}, {1, 2}})
}

// rpcShape: 1 → n → 1 where each of the n middle nodes sleeps 1 ms,
// standing in for an RPC.
func rpcShape(n int) *shape {
	s := fanShape(n)
	s.name, s.sleep = "rpcfanout", true
	return s
}

// levels returns the nodes grouped by depth (the longest path from a
// root), for implementations that run a graph stage by stage. Every
// dependency of a node is in an earlier level.
func (s *shape) levels() [][]int32 {
	depth := make([]int, s.n())
	var out [][]int32
	for i := range s.n() {
		for _, d := range s.deps[i] {
			depth[i] = max(depth[i], depth[d]+1)
		}
		if depth[i] == len(out) {
			out = append(out, nil)
		}
		out[depth[i]] = append(out[depth[i]], int32(i))
	}
	return out
}

// compute is every node's work in every implementation: the sum of its
// dependencies' values plus one, stored in vals[i] and returned. The
// scheduler under test must make the dependencies' writes visible before
// node i starts; the race detector checks that it does.
func (s *shape) compute(vals []int64, i int32) int64 {
	v := int64(1)
	for _, d := range s.deps[i] {
		v += vals[d]
	}
	vals[i] = v
	return v
}

// work is compute preceded, in the RPC shape, by a 1 ms sleep on the
// nodes that have both dependencies and successors.
func (s *shape) work(vals []int64, i int32) int64 {
	if s.calls != nil {
		s.calls[i].Add(1)
	}
	if s.sleep && len(s.deps[i]) > 0 && len(s.succ[i]) > 0 {
		time.Sleep(time.Millisecond)
	}
	return s.compute(vals, i)
}

// reference computes every node's value serially, in node order.
func (s *shape) reference() []int64 {
	vals := make([]int64, s.n())
	for i := range vals {
		s.compute(vals, int32(i))
	}
	return vals
}
