package asynctool

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func okWorker() WorkerFunc[int, int] {
	return func(context.Context, int, Wrappers) (int, error) { return 1, nil }
}

// TestValidation checks rule 7: bad graphs are rejected before anything
// runs, with an error that names the problem.
func TestValidation(t *testing.T) {
	n := func(id string) *WorkerWrapper[int, int] { return NewWrapper(id, okWorker(), 0) }
	tests := []struct {
		name   string
		build  func() []Wrapper
		target error
		msg    string
		nodes  []string
	}{
		{"no start nodes", func() []Wrapper { return nil }, ErrNoStart, "no start nodes", nil},
		{"nil start node", func() []Wrapper { return []Wrapper{n("a"), nil} }, ErrNilWrapper, "start node 1 is nil", nil},
		{"typed nil start node", func() []Wrapper { var w *WorkerWrapper[int, int]; return []Wrapper{w} }, ErrNilWrapper, "start node 0", nil},
		{"nil worker", func() []Wrapper {
			return []Wrapper{NewWrapper[int, int]("w", nil, 0)}
		}, ErrNilWorker, `node "w"`, []string{"w"}},
		{"nil worker func", func() []Wrapper {
			return []Wrapper{NewWrapper("w", WorkerFunc[int, int](nil), 0)}
		}, ErrNilWorker, `node "w"`, []string{"w"}},
		{"nil dependency", func() []Wrapper { return []Wrapper{n("a").Depend(nil, true)} }, ErrNilWrapper, `Depend on node "a"`, []string{"a"}},
		{"nil successor", func() []Wrapper { return []Wrapper{n("a").Next(nil, true)} }, ErrNilWrapper, `Next on node "a"`, []string{"a"}},
		// The first misuse of a node is the one reported.
		{"two misuses", func() []Wrapper { return []Wrapper{n("a").Depend(nil, true).Next(nil, false)} }, ErrNilWrapper, `Depend on node "a"`, []string{"a"}},
		{"duplicate ids", func() []Wrapper {
			a := n("a")
			n("x").Depend(a, true)
			n("x").Depend(a, true)
			return []Wrapper{a}
		}, ErrDuplicateID, `"x"`, []string{"x"}},
		{"self cycle", func() []Wrapper { a := n("a"); a.Depend(a, true); return []Wrapper{a} }, ErrCycle, `"a" -> "a"`, []string{"a", "a"}},
		{"cycle with path", func() []Wrapper {
			a, b, c, d := n("a"), n("b"), n("c"), n("d")
			b.Depend(a, true)
			c.Depend(b, true)
			d.Depend(c, false)
			b.Depend(d, true)
			return []Wrapper{a}
		}, ErrCycle, `"b" -> "c" -> "d" -> "b"`, []string{"b", "c", "d", "b"}},
		{"unreachable dependency", func() []Wrapper {
			a, hidden := n("a"), n("hidden")
			n("c").Depend(a, true).Depend(hidden, true)
			return []Wrapper{a}
		}, ErrUnreachableDependency, `node "c" has 1 upstream edge(s) from nodes that no start node leads to (upstreams reached: "a")`, []string{"c"}},
		{"unreachable dependency of a start node", func() []Wrapper {
			hidden, c := n("hidden"), n("c")
			c.Depend(hidden, true).Depend(hidden, true)
			return []Wrapper{c}
		}, ErrUnreachableDependency, `node "c" has 2 upstream edge(s) from nodes that no start node leads to (upstreams reached: none)`, []string{"c"}},
		{"conflicting edge", func() []Wrapper {
			a := n("a")
			n("b").Depend(a, true).Depend(a, false)
			return []Wrapper{a}
		}, ErrConflictingEdge, `"a" -> "b"`, []string{"a", "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newAsync(t)
			err := a.BeginWork(context.Background(), 0, tt.build()...)
			require.ErrorIs(t, err, tt.target)
			assert.Contains(t, err.Error(), tt.msg)
			var ge *GraphError
			require.ErrorAs(t, err, &ge, "every validation error is a *GraphError")
			if tt.nodes != nil {
				assert.Equal(t, tt.nodes, ge.Nodes)
			}
		})
	}
}

// TestReuseIsRejected checks that a wrapper serves one run only, and that
// a rejected graph does not consume its wrappers.
func TestReuseIsRejected(t *testing.T) {
	a := newAsync(t)
	x := NewWrapper("x", okWorker(), 0)
	require.NoError(t, a.BeginWork(context.Background(), 0, x))
	err := a.BeginWork(context.Background(), 0, x)
	require.ErrorIs(t, err, ErrReused)
	assert.Contains(t, err.Error(), `"x"`)

	// A graph sharing x with a fresh node is rejected as a whole, and the
	// fresh node stays usable.
	y := NewWrapper("y", okWorker(), 0)
	z := NewWrapper("z", okWorker(), 0).Depend(y, true)
	z.Depend(x, false)
	require.ErrorIs(t, a.BeginWork(context.Background(), 0, y, x), ErrReused)
	assert.Nil(t, y.owner.Load(), "y was not consumed")

	// Changing a used wrapper is reported too.
	x.Callback(nil)
	assert.ErrorIs(t, x.buildErr(), ErrReused)

	// An edge with a used end, declared on either end, is refused: the
	// used wrapper is left as it was, and a run that starts from the
	// fresh end reports the refusal instead of running without the edge.
	fresh := NewWrapper("fresh", okWorker(), 0)
	x.Depend(fresh, true)
	err = a.BeginWork(context.Background(), 0, fresh)
	require.ErrorIs(t, err, ErrReused)
	assert.Contains(t, err.Error(), `Depend linking "fresh" -> "x": "x" was used in a run`)
	assert.Equal(t, StateInit, fresh.State(), "fresh did not run")
	for _, link := range []func(w *WorkerWrapper[int, int]){
		func(w *WorkerWrapper[int, int]) { x.Next(w, true) },
		func(w *WorkerWrapper[int, int]) { w.Depend(x, true) },
	} {
		w := NewWrapper("w", okWorker(), 0)
		link(w)
		require.ErrorIs(t, a.BeginWork(context.Background(), 0, w), ErrReused)
	}
	assert.Empty(t, x.out, "the used wrapper's edges did not change")
}

// TestDuplicateStartIsFine checks that passing the same wrapper twice, or
// a node that is also reachable, is not a duplicate id.
func TestDuplicateStartIsFine(t *testing.T) {
	a := newAsync(t)
	x := NewWrapper("x", okWorker(), 0)
	y := NewWrapper("y", okWorker(), 0).Depend(x, true)
	require.NoError(t, a.BeginWork(context.Background(), 0, x, x, y))
	assert.Equal(t, ResultSuccess, y.Result().State)
}

// TestAnonymousNodes checks that empty ids are allowed and not looked up:
// neither the empty id nor "#0", the name Run.Resume and the reports give
// node 0, finds it through ResultOf or Wrappers.State, while ResultFrom
// reads it through its wrapper.
func TestAnonymousNodes(t *testing.T) {
	a := newAsync(t)
	x := NewWrapper("", okWorker(), 0)
	var byEmpty, byIndex, byWrapper error
	var found []bool
	var via WorkResult[int]
	y := NewWrapper("", WorkerFunc[int, int](func(_ context.Context, _ int, all Wrappers) (int, error) {
		_, byEmpty = ResultOf[int](all, "")
		_, byIndex = ResultOf[int](all, "#0")
		via, byWrapper = x.ResultFrom(all)
		for _, id := range []string{"", "#0"} {
			_, ok := all.State(id)
			found = append(found, ok)
		}
		return 1, nil
	}), 0).Depend(x, true)
	require.NoError(t, a.BeginWork(context.Background(), 0, x))
	assert.Equal(t, ResultSuccess, y.Result().State)
	assert.ErrorIs(t, byEmpty, ErrUnknownID)
	assert.ErrorIs(t, byIndex, ErrUnknownID)
	assert.Equal(t, []bool{false, false}, found)
	require.NoError(t, byWrapper)
	assert.Equal(t, ResultSuccess, via.State)
}

// TestPlanIsTopological checks the compiled order and the deduplicated
// edge counts the joins rely on.
func TestPlanIsTopological(t *testing.T) {
	x := NewWrapper("x", okWorker(), 0)
	y := NewWrapper("y", okWorker(), 0)
	z := NewWrapper("z", okWorker(), 0).Depend(y, true).Depend(x, false).Depend(y, true)
	x.Next(z, false)
	p, err := compile([]Wrapper{z, y, x}, nil)
	require.NoError(t, err)
	pos := map[string]int{}
	for i := range p.nodes {
		pos[p.nodes[i].core.id] = i
	}
	assert.Less(t, pos["y"], pos["z"])
	assert.Less(t, pos["x"], pos["z"])
	zn := &p.nodes[pos["z"]]
	assert.Equal(t, int32(1), zn.nMust)
	assert.Equal(t, int32(1), zn.nOpt)
	assert.Equal(t, 2, zn.nIn())
	assert.ElementsMatch(t, []int32{int32(pos["x"]), int32(pos["y"])}, p.roots)
}

func TestGraphErrorUnwraps(t *testing.T) {
	err := error(cycleErr([]string{"a", "b", "a"}))
	assert.True(t, errors.Is(err, ErrCycle))
	assert.Equal(t, `asynctool: dependency cycle: "a" -> "b" -> "a"`, err.Error())
	assert.Equal(t, "asynctool: no start nodes", (&GraphError{Err: ErrNoStart}).Error())
}

// TestCompileWithScratchAllocates guards what BeginWork's compile
// allocates once the Async's scratch arrays are warm: the plan, its
// nodes, its edges and its int32s (roots, start order, id index), four
// objects whatever the graph's size and nothing per node (without the
// scratch, compiling a fan of 1,000 made 23 objects; with it, and one
// array each, 8).
func TestCompileWithScratchAllocates(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	w := WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 0, nil })
	build := func(n int) []Wrapper {
		root, sink := NewWrapper("root", w, 0), NewWrapper("sink", w, 0)
		for k := range n {
			sink.Depend(NewWrapper(fmt.Sprint("mid", k), w, 0).Depend(root, true), true)
		}
		return []Wrapper{root}
	}
	sc := &compileScratch{}
	_, err := compile(build(1000), sc) // warm the scratch
	require.NoError(t, err)
	for _, n := range []int{10, 1000} {
		// The least of three compiles: MemStats counts the allocations of
		// every goroutine, and one of the runtime's or the test
		// framework's now and then lands in the window (about one run in
		// thirty).
		allocs := uint64(math.MaxUint64)
		for range 3 {
			g := build(n)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			p, err := compile(g, sc)
			runtime.ReadMemStats(&after)
			require.NoError(t, err)
			require.Equal(t, n+2, len(p.nodes))
			allocs = min(allocs, after.Mallocs-before.Mallocs)
		}
		t.Logf("compile of %d nodes: %d allocations", n+2, allocs)
		assert.LessOrEqual(t, allocs, uint64(4), "compile of %d nodes", n+2)
		for _, c := range sc.cores[:cap(sc.cores)] {
			require.Nil(t, c, "the scratch keeps no wrapper alive")
		}
	}
}

// TestInEdgeKeepsNodeAndFlag checks the encoding of plan.ins: the must
// flag in the sign bit, any node index up to maxNodes kept whole.
func TestInEdgeKeepsNodeAndFlag(t *testing.T) {
	for _, node := range []int32{0, 1, 7, 1 << 20, maxNodes} {
		for _, must := range []bool{false, true} {
			gotNode, gotMust := upstream(inEdge(node, must))
			assert.Equal(t, node, gotNode, "node %d must %v", node, must)
			assert.Equal(t, must, gotMust, "node %d must %v", node, must)
		}
	}
}

func TestNilAndZeroPlanAreEmpty(t *testing.T) {
	for _, pl := range []*Plan{nil, {}} {
		assert.Equal(t, 0, pl.Len())
		rep := pl.Describe()
		require.NotNil(t, rep)
		assert.Empty(t, rep.Nodes)
		assert.NotPanics(t, func() { _ = rep.DOT(); _ = rep.Mermaid(); _ = rep.String(); _ = rep.CriticalPath() })
	}
}

// TestCycleErrorQuotesIDs: a cycle's path was its ids joined with
// " -> " as they are, so a cycle of anonymous nodes read "dependency
// cycle:  ->  -> ", and one through an id holding " -> " could not be
// told from a longer cycle. Ids are quoted, as in every other
// GraphError (`"a" -> "b"` of a conflicting edge).
func TestCycleErrorQuotesIDs(t *testing.T) {
	n := func(id string) *WorkerWrapper[int, int] { return NewWrapper(id, okWorker(), 0) }
	tests := []struct {
		name  string
		build func() Wrapper
		msg   string
		nodes []string
	}{
		{"anonymous", func() Wrapper {
			s, b, c := n("s"), n(""), n("")
			b.Depend(s, true)
			c.Depend(b, true)
			b.Depend(c, true)
			return s
		}, `asynctool: dependency cycle: "" -> "" -> ""`, []string{"", "", ""}},
		{"arrow in an id", func() Wrapper {
			x, y := n("x -> y"), n("y")
			y.Depend(x, true)
			x.Depend(y, true)
			return x
		}, `asynctool: dependency cycle: "x -> y" -> "y" -> "x -> y"`, []string{"x -> y", "y", "x -> y"}},
		{"self", func() Wrapper { a := n("a"); a.Depend(a, false); return a }, `asynctool: dependency cycle: "a" -> "a"`, []string{"a", "a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Describe(tt.build())
			require.ErrorIs(t, err, ErrCycle)
			assert.EqualError(t, err, tt.msg)
			var ge *GraphError
			require.ErrorAs(t, err, &ge)
			assert.Equal(t, tt.nodes, ge.Nodes)
		})
	}
}

// TestEdgeBetweenUsedNodesIsRefusedWithoutTrace: an edge both of whose
// ends were used (in a run, or compiled into a Plan) has no free end to
// record its refusal on, so link drops it without a word. No later call
// can tell: the nodes are left as they were, no run or report of theirs
// changes, and every call that would take either of them is refused
// with ErrReused anyway.
func TestEdgeBetweenUsedNodesIsRefusedWithoutTrace(t *testing.T) {
	a := newAsync(t)
	ran := NewWrapper("ran", okWorker(), 0)
	run, err := a.Start(t.Context(), 0, ran)
	require.NoError(t, err)
	require.NoError(t, run.Wait(t.Context()))
	tpl := NewWrapper("tpl", okWorker(), 0)
	pl, err := Compile(tpl)
	require.NoError(t, err)
	before := run.Report()

	ran.Depend(tpl, true)
	tpl.Next(ran, false)
	tpl.Depend(ran, true)
	for _, w := range []*WorkerWrapper[int, int]{ran, tpl} {
		assert.Empty(t, w.out, "%s: edges", w.ID())
		assert.Zero(t, w.inEdges, "%s: edges in", w.ID())
		assert.Nil(t, w.buildErr(), "%s: a used node records no error", w.ID())
		require.ErrorIs(t, a.BeginWork(t.Context(), 0, w), ErrReused, w.ID())
		_, err := a.Start(t.Context(), 0, w)
		require.ErrorIs(t, err, ErrReused, w.ID())
		_, err = Compile(w)
		require.ErrorIs(t, err, ErrReused, w.ID())
		_, err = Describe(w)
		require.ErrorIs(t, err, ErrReused, w.ID())
	}
	assert.Equal(t, before.DOT(), run.Report().DOT(), "the run's report")
	assert.Empty(t, pl.Describe().Nodes[0].Deps, "the plan's node")
	prun, err := a.RunPlan(t.Context(), pl, 0)
	require.NoError(t, err)
	defer prun.Release()
	assert.Equal(t, ResultSuccess, tpl.ResultIn(prun).State, "the plan runs as compiled")
}

// TestEdgeToAPlansNodeNamesThePlan: an edge declared to or from a
// node compiled into a Plan was refused saying that node "was used in a
// run", which it never was, with no word of how to use a plan inside
// another graph. It says the node belongs to a compiled Plan, and names
// SubPlan.
func TestEdgeToAPlansNodeNamesThePlan(t *testing.T) {
	tpl := NewWrapper("tpl", okWorker(), 0)
	_, err := Compile(tpl)
	require.NoError(t, err)
	for _, link := range []func(f *WorkerWrapper[int, int]){
		func(f *WorkerWrapper[int, int]) { f.Depend(tpl, true) },
		func(f *WorkerWrapper[int, int]) { tpl.Next(f, true) },
	} {
		f := NewWrapper("fresh", okWorker(), 0)
		link(f)
		_, err := Describe(f)
		require.ErrorIs(t, err, ErrReused)
		assert.ErrorContains(t, err, `linking "tpl" -> "fresh": "tpl" belongs to a compiled Plan (a SubPlan node runs a plan inside another graph)`)
	}
	ran := NewWrapper("ran", okWorker(), 0)
	require.NoError(t, newAsync(t).BeginWork(t.Context(), 0, ran))
	f := NewWrapper("fresh", okWorker(), 0).Depend(ran, true)
	_, err = Describe(f)
	assert.ErrorContains(t, err, `Depend linking "ran" -> "fresh": "ran" was used in a run`)
}
