// Package shapes holds the graph shapes of the benchmarks, as plain
// adjacency data, and the work every node does. The root suite
// (benchmarks) and the peer comparison (benchmarks/peers, a module of its
// own that replaces the root module with this tree) both import it, so
// that the two run exactly the same graphs and their figures compare. It
// imports the standard library only.
package shapes

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"
)

// Shape is a DAG as plain adjacency data, shared by every implementation
// so that all of them run exactly the same graph. Nodes are numbered in a
// topological order: every dependency of node i is smaller than i.
type Shape struct {
	Name  string
	Deps  [][]int32 // Deps[i]: the nodes i waits for, without duplicates
	Succ  [][]int32 // Succ[i]: the nodes waiting for i
	Roots []int32   // nodes without dependencies
	Sinks []int32   // nodes without successors
	IDs   []string  // IDs[i]: the node's id, "n<i>", built once
	Sleep bool      // nodes that have both dependencies and successors sleep 1 ms
}

// N returns the number of nodes.
func (s *Shape) N() int { return len(s.Deps) }

// New derives Succ, Roots, Sinks and IDs from deps and checks the
// numbering.
func New(name string, deps [][]int32) *Shape {
	s := &Shape{Name: name, Deps: deps, Succ: make([][]int32, len(deps)), IDs: make([]string, len(deps))}
	for i, ds := range deps {
		if len(ds) == 0 {
			s.Roots = append(s.Roots, int32(i))
		}
		for _, d := range ds {
			if int(d) >= i {
				panic(fmt.Sprintf("shape %s: node %d depends on %d, not a topological numbering", name, i, d))
			}
			s.Succ[d] = append(s.Succ[d], int32(i))
		}
		s.IDs[i] = "n" + strconv.Itoa(i)
	}
	for i, ss := range s.Succ {
		if len(ss) == 0 {
			s.Sinks = append(s.Sinks, int32(i))
		}
	}
	return s
}

// Chain: 0 → 1 → … → n-1.
func Chain(n int) *Shape {
	deps := make([][]int32, n)
	for i := 1; i < n; i++ {
		deps[i] = []int32{int32(i - 1)}
	}
	return New("chain", deps)
}

// Fan: 1 → n → 1, so n+2 nodes: node 0 is the source, n+1 the sink.
func Fan(n int) *Shape {
	deps := make([][]int32, n+2)
	all := make([]int32, n)
	for i := 1; i <= n; i++ {
		deps[i] = []int32{0}
		all[i-1] = int32(i)
	}
	deps[n+1] = all
	return New("fan", deps)
}

// Grid: a w×w wavefront; node (i, j) waits for (i-1, j) and (i, j-1).
func Grid(w int) *Shape {
	deps := make([][]int32, w*w)
	for i := range w {
		for j := range w {
			var ds []int32
			if i > 0 {
				ds = append(ds, int32((i-1)*w+j))
			}
			if j > 0 {
				ds = append(ds, int32(i*w+j-1))
			}
			deps[i*w+j] = ds
		}
	}
	return New("grid", deps)
}

// Tree: a complete binary out-tree with the given number of levels
// (2^levels - 1 nodes): the root fans out, each node to its two children
// (node i waits for node (i-1)/2).
func Tree(levels int) *Shape {
	n := 1<<levels - 1
	deps := make([][]int32, n)
	for i := 1; i < n; i++ {
		deps[i] = []int32{int32((i - 1) / 2)}
	}
	return New("tree", deps)
}

// Layered: layers×width nodes; every node past the first layer waits
// for k distinct nodes of the previous layer, chosen by a PCG with a fixed
// seed, so the graph is the same in every run and every implementation.
func Layered(layers, width, k int) *Shape {
	rng := rand.New(rand.NewPCG(5, 1000))
	deps := make([][]int32, layers*width)
	for l := 1; l < layers; l++ {
		for j := range width {
			ds := make([]int32, 0, k)
			for _, p := range rng.Perm(width)[:k] {
				ds = append(ds, int32((l-1)*width+p))
			}
			deps[l*width+j] = ds
		}
	}
	return New("layered", deps)
}

// Diamond: a → b, a → c, b → d, c → d, the common small request graph.
func Diamond() *Shape {
	return New("diamond", [][]int32{nil, {0}, {0}, {1, 2}})
}

// RPC: 1 → n → 1 where each of the n middle nodes sleeps 1 ms, standing
// in for an RPC.
func RPC(n int) *Shape {
	s := Fan(n)
	s.Name, s.Sleep = "rpcfanout", true
	return s
}

// Graph returns the 1,000-node shapes of the root suite's BenchmarkGraph.
func Graph() []*Shape {
	return []*Shape{
		Chain(1000),
		Fan(1000),
		Grid(32),
		Tree(10),
		Layered(10, 100, 4),
	}
}

// Compute is every node's work in every implementation: the sum of its
// dependencies' values plus one, stored in vals[i] and returned. The
// scheduler under test must make the dependencies' writes visible before
// node i starts; the race detector checks that it does.
func (s *Shape) Compute(vals []int64, i int32) int64 {
	v := int64(1)
	for _, d := range s.Deps[i] {
		v += vals[d]
	}
	vals[i] = v
	return v
}

// Work is Compute preceded, in the RPC shape, by a 1 ms sleep on the
// nodes that have both dependencies and successors.
func (s *Shape) Work(vals []int64, i int32) int64 {
	if s.Sleep && len(s.Deps[i]) > 0 && len(s.Succ[i]) > 0 {
		time.Sleep(time.Millisecond)
	}
	return s.Compute(vals, i)
}

// Reference computes every node's value serially, in node order.
func (s *Shape) Reference() []int64 {
	vals := make([]int64, s.N())
	for i := range vals {
		s.Compute(vals, int32(i))
	}
	return vals
}
