package graph

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// topo is TopoOrder of edges (node i's successors are edges[i]) in a
// fresh buffer.
func topo(edges [][]int) (order, cycle []int) {
	first, flat := csr(edges)
	return TopoOrder(first, flat, nil)
}

// randomEdges returns a random graph of n nodes: each forward edge i -> j
// (i < j) with probability 1/fwd, and each other edge, which may close a
// cycle, with probability 1/(fwd*back).
func randomEdges(rng *rand.Rand, n, fwd, back int) [][]int {
	edges := make([][]int, n)
	for i := range n {
		for j := range n {
			if rng.IntN(fwd) == 0 && (i < j || rng.IntN(back) == 0) {
				edges[i] = append(edges[i], j)
			}
		}
	}
	return edges
}

func TestTopoOrder(t *testing.T) {
	tests := []struct {
		name  string
		edges [][]int
		order []int
		cycle []int
	}{
		{"empty", nil, []int{}, nil},
		{"chain", [][]int{{1}, {2}, {}}, []int{0, 1, 2}, nil},
		{"diamond", [][]int{{1, 2}, {3}, {3}, {}}, []int{0, 2, 1, 3}, nil},
		{"last made ready first", [][]int{{1, 2}, {3}, {4}, {}, {}}, []int{0, 2, 4, 1, 3}, nil},
		{"sources in order", [][]int{{2}, {2}, {}}, []int{0, 1, 2}, nil},
		{"reversed", [][]int{{}, {0}, {1}}, []int{2, 1, 0}, nil},
		{"self loop", [][]int{{0}}, nil, []int{0, 0}},
		{"two cycle", [][]int{{1}, {0}}, nil, []int{0, 1, 0}},
		{"cycle below a root", [][]int{{1}, {2}, {3}, {1}}, nil, []int{1, 2, 3, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			order, cycle := topo(tt.edges)
			assert.Equal(t, tt.order, order)
			assert.Equal(t, tt.cycle, cycle)
		})
	}
}

// TestTopoOrderRandom checks on random graphs that an order respects every
// edge and that a reported cycle is made of real edges.
func TestTopoOrderRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 500 {
		n := 1 + rng.IntN(30)
		edges := randomEdges(rng, n, 10, 20)
		order, cycle := topo(edges)
		if order != nil {
			require.Len(t, order, n)
			pos := make([]int, n)
			for k, v := range order {
				pos[v] = k
			}
			for i := range n {
				for _, j := range edges[i] {
					assert.Less(t, pos[i], pos[j], "edge %d->%d out of order", i, j)
				}
			}
			continue
		}
		require.GreaterOrEqual(t, len(cycle), 2)
		assert.Equal(t, cycle[0], cycle[len(cycle)-1])
		for k := 0; k+1 < len(cycle); k++ {
			assert.Contains(t, edges[cycle[k]], cycle[k+1], "cycle step %d->%d is not an edge", cycle[k], cycle[k+1])
		}
	}
}

// TestTopoOrderReusesBuffer checks that one buffer, reused across
// graphs of different sizes, gives the same answers as fresh buffers and
// that a buffer with room is used without allocating.
func TestTopoOrderReusesBuffer(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var buf []int
	for range 300 {
		n := rng.IntN(40)
		edges := randomEdges(rng, n, 8, 30)
		wantOrder, wantCycle := topo(edges)
		first, flat := csr(edges)
		order, cycle := TopoOrder(first, flat, buf)
		require.Equal(t, wantOrder, order)
		require.Equal(t, wantCycle, cycle)
		if cap(buf) < 3*n {
			buf = make([]int, 3*n)
		}
	}
	edges := [][]int{{1, 2}, {3}, {3}, {}}
	buf = make([]int, 12)
	first, flat := csr(edges)
	allocs := testing.AllocsPerRun(100, func() { TopoOrder(first, flat, buf) })
	assert.Zero(t, allocs)
}

// csr returns edges as TopoOrder takes them: node i's successors are
// adj[first[i]:first[i+1]].
func csr(edges [][]int) (first, adj []int) {
	first = make([]int, len(edges)+1)
	for i, out := range edges {
		adj = append(adj, out...)
		first[i+1] = len(adj)
	}
	return first, adj
}
