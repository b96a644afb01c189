package peers

import (
	"sync/atomic"

	"github.com/asynctool-go/asynctool/benchmarks/internal/shapes"
)

// shape is one of the root suite's graph shapes (benchmarks/internal/shapes,
// which both modules import, so that the figures compare), with what the
// peer comparison adds: a count of the calls of each node's work and the
// grouping by levels.
type shape struct {
	*shapes.Shape
	// calls, when not nil (in TestImplementationsAgree only), counts the
	// times each node's work ran.
	calls []atomic.Int32
}

func fanShape(n int) *shape { return &shape{Shape: shapes.Fan(n)} }
func diamondShape() *shape  { return &shape{Shape: shapes.Diamond()} }
func rpcShape(n int) *shape { return &shape{Shape: shapes.RPC(n)} }

// levels returns the nodes grouped by depth (the longest path from a
// root), for implementations that run a graph stage by stage. Every
// dependency of a node is in an earlier level.
func (s *shape) levels() [][]int32 {
	depth := make([]int, s.N())
	var out [][]int32
	for i := range s.N() {
		for _, d := range s.Deps[i] {
			depth[i] = max(depth[i], depth[d]+1)
		}
		if depth[i] == len(out) {
			out = append(out, nil)
		}
		out[depth[i]] = append(out[depth[i]], int32(i))
	}
	return out
}

// work is every node's work in every implementation: Shape.Work (the sum
// of the dependencies' values plus one, after a 1 ms sleep in the RPC
// shape), counted in calls when calls is set. Implementations call work,
// never Shape.Work, so that the count sees every call.
func (s *shape) work(vals []int64, i int32) int64 {
	if s.calls != nil {
		s.calls[i].Add(1)
	}
	return s.Work(vals, i)
}
