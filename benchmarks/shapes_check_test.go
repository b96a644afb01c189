package benchmarks

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/asynctool-go/asynctool"
	"github.com/asynctool-go/asynctool/benchmarks/internal/shapes"
)

// TestShapes checks that every generator builds the graph the issue
// describes.
func TestShapes(t *testing.T) {
	tests := []struct {
		s            *shape
		nodes, edges int
		roots, sinks int
	}{
		{shapes.Chain(1000), 1000, 999, 1, 1},
		{shapes.Fan(1000), 1002, 2000, 1, 1},
		{shapes.Grid(32), 1024, 2 * 32 * 31, 1, 1},
		{shapes.Tree(10), 1023, 1022, 1, 512},
		{shapes.Layered(10, 100, 4), 1000, 9 * 100 * 4, 100, -1},
		{shapes.Diamond(), 4, 4, 1, 1},
		{shapes.RPC(100), 102, 200, 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.s.Name, func(t *testing.T) {
			s := tt.s
			edges := 0
			for i, ds := range s.Deps {
				edges += len(ds)
				seen := map[int32]bool{}
				for _, d := range ds {
					assert.False(t, seen[d], "node %d depends twice on %d", i, d)
					seen[d] = true
				}
			}
			assert.Equal(t, tt.nodes, s.N(), "nodes")
			assert.Equal(t, tt.edges, edges, "edges")
			assert.Len(t, s.Roots, tt.roots, "roots")
			if tt.sinks >= 0 {
				assert.Len(t, s.Sinks, tt.sinks, "sinks")
			}
		})
	}

	t.Run("grid edges", func(t *testing.T) {
		s := shapes.Grid(32)
		assert.Equal(t, []int32{30*32 + 31, 31*32 + 30}, slices.Sorted(slices.Values(s.Deps[31*32+31])))
		assert.Equal(t, []int32{4}, s.Deps[5], "(0,5) waits for (0,4)")
		assert.Equal(t, []int32{32}, s.Deps[64], "(2,0) waits for (1,0)")
	})
	t.Run("layered edges", func(t *testing.T) {
		s := shapes.Layered(10, 100, 4)
		for i, ds := range s.Deps {
			if i < 100 {
				assert.Empty(t, ds)
				continue
			}
			layer := i / 100
			for _, d := range ds {
				assert.Equal(t, layer-1, int(d)/100, "node %d depends on %d", i, d)
			}
		}
		assert.Equal(t, s.Deps, shapes.Layered(10, 100, 4).Deps, "the seed is fixed")
	})
}

// checkShapes are the shapes on which every implementation must compute
// the reference values: the benchmark shapes, with the RPC fan-out cut
// down to keep the test short.
func checkShapes() []*shape {
	return append(shapes.Graph(), shapes.Diamond(), shapes.RPC(8), shapes.Chain(100), shapes.Fan(100))
}

// TestImplementationsAgree runs every implementation on every shape and
// checks that every node's value, the sinks' included, is the reference
// value computed serially; for the library it also checks the values the
// library itself reports as the nodes' results.
func TestImplementationsAgree(t *testing.T) {
	ctx := context.Background()
	a := asynctool.New()
	defer a.Close()

	for _, s := range checkShapes() {
		ref := s.Reference()
		name := fmt.Sprintf("shape=%s/n=%d", s.Name, s.N())

		t.Run(name+"/impl=byhand", func(t *testing.T) {
			vals := make([]int64, s.N())
			require.NoError(t, runByHand(ctx, s, vals, groupDeadline))
			assert.Equal(t, ref, vals)
		})
		t.Run(name+"/impl=goroutines", func(t *testing.T) {
			if len(s.Roots) != 1 || len(s.Sinks) != 1 || s.N() < 3 || len(s.Deps[s.N()-1]) != s.N()-2 {
				t.Skip("1 → n → 1 shapes only")
			}
			vals := make([]int64, s.N())
			runGoroutines(s, vals)
			assert.Equal(t, ref, vals)
		})
		t.Run(name+"/impl=limit", func(t *testing.T) {
			for _, workers := range []int{1, 2, 4} {
				vals := make([]int64, s.N())
				l := newLimit(s, vals, workers)
				for run := range 3 {
					clear(vals)
					within(t, l.run)
					assert.Equal(t, ref, vals, "workers=%d run %d", workers, run)
				}
				within(t, l.close)
			}
		})
		t.Run(name+"/impl=floor", func(t *testing.T) {
			last := int32(s.N() - 1)
			for _, groups := range []int{1, 2} {
				for _, inline := range []bool{false, true} {
					for _, workers := range []int{1, 2, 4} {
						vals := make([]int64, s.N())
						f := newFloor(s, nil, workers, inline, groups)
						// Each node has a worker of its own, which checks its
						// parameter, last-i: a floor that ran node i with
						// another node's worker or parameter would fail it.
						inner := newLibGraph(s, vals).worker
						for i := range s.N() {
							want := last - int32(i)
							f.set(i, asynctool.WorkerFunc[int32, int64](func(ctx context.Context, p int32, all asynctool.Wrappers) (int64, error) {
								if p != want {
									return 0, fmt.Errorf("node %d ran with parameter %d, want %d", i, p, want)
								}
								return inner.Action(ctx, int32(i), all)
							}), want)
						}
						for run := range 3 {
							clear(vals)
							f.clearValues()
							within(t, f.run)
							how := fmt.Sprintf("groups=%d inline=%v workers=%d run %d", groups, inline, workers, run)
							assert.Equal(t, ref, vals, how)
							assert.Equal(t, ref, f.values(), "results, "+how)
							assert.Equal(t, slices.Repeat([]int32{fFinish}, s.N()), states(f), "states, "+how)
						}
						within(t, f.close)
					}
				}
			}
		})
		t.Run(name+"/impl=library-build+run", func(t *testing.T) {
			vals := make([]int64, s.N())
			g := newLibGraph(s, vals)
			for run := range 2 {
				clear(vals)
				require.NoError(t, a.BeginWork(ctx, groupDeadline, g.build()...))
				assert.Equal(t, ref, vals, "run %d", run)
				assert.Equal(t, ref, results(g), "results, run %d", run)
			}
		})
		t.Run(name+"/impl=library-resultof", func(t *testing.T) {
			vals := make([]int64, s.N())
			g := newLibGraph(s, vals).byID(vals)
			require.NoError(t, a.BeginWork(ctx, groupDeadline, g.build()...))
			assert.Equal(t, ref, vals)
			assert.Equal(t, ref, results(g), "results")
		})
		t.Run(name+"/impl=library-callback", func(t *testing.T) {
			vals, got := make([]int64, s.N()), make([]int64, s.N())
			g := newLibGraph(s, vals).withCallback(got)
			require.NoError(t, a.BeginWork(ctx, groupDeadline, g.build()...))
			assert.Equal(t, ref, vals)
			assert.Equal(t, ref, got, "values seen by the callbacks")
		})
		t.Run(name+"/impl=library-run", func(t *testing.T) {
			checkPlanRuns(t, a, s, ref)
		})
		t.Run(name+"/impl=library-hooks", func(t *testing.T) {
			var ends []int
			h := &asynctool.Hooks{OnNodeEnd: func(_ context.Context, ev asynctool.NodeEvent) {
				if ev.Result == asynctool.ResultSuccess {
					ends[ev.Index]++
				}
			}}
			ha := asynctool.New(asynctool.WithHooks(h))
			defer ha.Close()
			vals, got := make([]int64, s.N()), make([]int64, s.N())
			g := newLibGraph(s, vals).withCallback(got)
			p, err := asynctool.Compile(g.build()...)
			require.NoError(t, err)
			for run := range 2 {
				clear(vals)
				clear(got)
				ends = make([]int, s.N())
				r, err := ha.RunPlan(ctx, p, groupDeadline)
				require.NoError(t, err)
				r.Release()
				assert.Equal(t, ref, vals, "run %d", run)
				assert.Equal(t, ref, got, "values seen by the callbacks, run %d", run)
				assert.Equal(t, slices.Repeat([]int{1}, s.N()), ends, "successful ends seen by the hook, run %d", run)
			}
		})
	}
}

// results returns the values the library reports as the results of the
// last build of g.
func results(g *libGraph) []int64 {
	out := make([]int64, len(g.nodes))
	for i, w := range g.nodes {
		r := w.Result()
		if r.State != asynctool.ResultSuccess {
			out[i] = -1
			continue
		}
		out[i] = r.Value
	}
	return out
}

// checkPlanRuns compiles s once and runs the plan three times, checking
// every node's value and its result in the run.
func checkPlanRuns(t *testing.T, a *asynctool.Async, s *shape, ref []int64) {
	vals := make([]int64, s.N())
	g := newLibGraph(s, vals)
	p, err := asynctool.Compile(g.build()...)
	require.NoError(t, err)
	for run := range 3 {
		clear(vals)
		r, err := a.RunPlan(context.Background(), p, groupDeadline)
		require.NoError(t, err)
		assert.Equal(t, ref, vals, "run %d", run)
		got := make([]int64, s.N())
		for i, w := range g.nodes {
			res := w.ResultIn(r)
			if res.State != asynctool.ResultSuccess {
				got[i] = -1
				continue
			}
			got[i] = res.Value
		}
		assert.Equal(t, ref, got, "results, run %d", run)
		r.Release()
	}
}

// within calls run and fails the test if it has not returned in 10 s: a
// scheduler that loses a node would otherwise hang the package until go
// test's timeout, without saying where.
func within(t *testing.T, run func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		run()
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the run did not end within 10 s")
	}
}
