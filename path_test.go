package asynctool

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pathLog records the path each worker sees, by a name of the test's.
type pathLog struct {
	mu    sync.Mutex
	paths map[string][][]string
}

func (l *pathLog) worker(name string) Worker[int, int] {
	return WorkerFunc[int, int](func(_ context.Context, k int, all Wrappers) (int, error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.paths == nil {
			l.paths = make(map[string][][]string)
		}
		l.paths[name] = append(l.paths[name], all.Path())
		return k, nil
	})
}

func (l *pathLog) get(name string) [][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.paths[name]
}

// Path names a node from the outermost run down, through SubGraph,
// SubPlan and ForEach nodes, so that nodes of two sub-runs that share an
// id have different paths, and a plan run on its own after it served as
// a sub-plan has a path of its own id alone.
func TestWrappersPath(t *testing.T) {
	var log pathLog
	a := New()
	defer func() { require.NoError(t, a.Close()) }()

	px := NewWrapper("x", log.worker("plan x"), 0)
	inner, err := Compile(px)
	require.NoError(t, err)
	sub := func(id string) *WorkerWrapper[int, int] {
		return NewWrapper(id, SubGraph[int, int]{
			Build: func(context.Context, int, Wrappers) (Built[int], error) {
				x := NewWrapper("x", log.worker(id+" x"), 0)
				p := NewWrapper("p", SubPlan[int, int]{Plan: inner, Output: px.ValueIn}, 0).Depend(x, true)
				return Built[int]{Starts: []Wrapper{x}, Output: func() (int, error) { return p.Result().Value, p.Result().Err }}, nil
			},
		}, 0)
	}
	root := NewWrapper("root", log.worker("root"), 0)
	sub("g1").Depend(root, true)
	sub("g2").Depend(root, true)
	NewWrapper("q", SubPlan[int, int]{Plan: inner, Output: px.ValueIn}, 0).Depend(root, true)
	NewWrapper("each", ForEach[int, int, int]{
		Items:  func(context.Context, int, Wrappers) ([]int, error) { return []int{7}, nil },
		Worker: log.worker("item"),
		ID:     func(int, int) string { return "seven" },
	}, 0).Depend(root, true)
	outer, err := Compile(root)
	require.NoError(t, err)
	run, err := a.RunPlan(context.Background(), outer, time.Minute)
	require.NoError(t, err)
	require.NoError(t, run.Report().Err(), "%v", run.Report())
	run.Release() // and with it the sub-runs, whose states the plans keep

	assert.Equal(t, [][]string{{"root"}}, log.get("root"))
	assert.Equal(t, [][]string{{"g1", "x"}}, log.get("g1 x"))
	assert.Equal(t, [][]string{{"g2", "x"}}, log.get("g2 x"))
	got := log.get("plan x")
	slices.SortFunc(got, func(a, b []string) int { return slices.Compare(a, b) })
	assert.Equal(t, [][]string{{"g1", "p", "x"}, {"g2", "p", "x"}, {"q", "x"}}, got)
	require.Len(t, log.get("item"), 1)
	assert.Equal(t, "each", log.get("item")[0][0])
	assert.Len(t, log.get("item")[0], 2, "an item is a node of the ForEach's sub-run")

	// The plan's pooled run state served q's sub-run above (the
	// release of the outer run released it); run on its own, the plan's
	// node is at the top.
	for range 4 {
		run, err := a.RunPlan(context.Background(), inner, time.Minute)
		require.NoError(t, err)
		run.Release()
	}
	got = log.get("plan x")
	for _, p := range got[3:] {
		assert.Equal(t, []string{"x"}, p)
	}

	assert.Nil(t, Wrappers{}.Path())
}

// Nodes without ids are named in a path by "#" and their index, as the
// reports and Run.Resume name them: the nodes "x" of two anonymous
// SubGraph nodes' sub-runs do not share a path, as Path's doc says. Before,
// both were ["", "x"], which a durable graph's check of checkpointed ids
// (one stored result per id, and per path) could not tell apart.
func TestWrappersPathNamesAnonymousNodes(t *testing.T) {
	var log pathLog
	sub := func() *WorkerWrapper[int, int] {
		return NewWrapper("", SubGraph[int, int]{
			Build: func(context.Context, int, Wrappers) (Built[int], error) {
				x := NewWrapper("x", log.worker("x"), 0)
				NewWrapper("", log.worker("anonymous"), 0).Depend(x, true)
				return Built[int]{Starts: []Wrapper{x}, Output: func() (int, error) { return 0, nil }}, nil
			},
		}, 0)
	}
	a := New()
	defer func() { require.NoError(t, a.Close()) }()
	run, err := a.Start(context.Background(), time.Minute, sub(), sub())
	require.NoError(t, err)
	require.NoError(t, run.Wait(context.Background()))

	got := log.get("x")
	slices.SortFunc(got, func(a, b []string) int { return slices.Compare(a, b) })
	assert.Equal(t, [][]string{{"#0", "x"}, {"#1", "x"}}, got)
	got = log.get("anonymous")
	slices.SortFunc(got, func(a, b []string) int { return slices.Compare(a, b) })
	assert.Equal(t, [][]string{{"#0", "#1"}, {"#1", "#1"}}, got)
}

// A worker of a sub-run that goes on after the sub-run ended (stopped by
// an EndsRun node, it returns when it is done) still sees the path it ran
// under, also once the outer runs have been released and their states
// recycled. Before, Path walked up the outer runs' states: a worker that
// called it after the release of the outermost run saw ["sp", "other"]
// (the recycled middle run no longer knew its node), or, once a later run
// reused that state, the later run's path.
func TestWrappersPathOfAWorkerThatOutlivesTheOuterRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer func() { require.NoError(t, a.Close()) }()
		otherStarted, gate := make(chan struct{}), make(chan struct{})
		var got []string
		first := NewWrapper("first", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			<-otherStarted // so that other runs on a goroutine of its own
			return 1, nil
		}), 0).EndsRun()
		other := NewWrapper("other", WorkerFunc[int, int](func(ctx context.Context, _ int, all Wrappers) (int, error) {
			close(otherStarted)
			<-ctx.Done() // first ended the sub-run
			<-gate
			got = all.Path()
			return 0, ctx.Err()
		}), 0)
		inner, err := Compile(first, other)
		require.NoError(t, err)
		sp := NewWrapper("sp", SubPlan[int, int]{Plan: inner, Output: first.ValueIn}, 0)
		middle, err := Compile(sp)
		require.NoError(t, err)
		wrap := NewWrapper("wrap", SubPlan[int, int]{Plan: middle, Output: sp.ValueIn}, 0)
		outer, err := Compile(wrap)
		require.NoError(t, err)

		run, err := a.RunPlan(context.Background(), outer, time.Minute)
		require.NoError(t, err)
		require.Equal(t, 1, wrap.ResultIn(run).Value)
		run.Release()
		synctest.Wait() // the outer runs' states are recycled; other waits for the gate
		close(gate)
		require.NoError(t, a.Close()) // other has returned
		assert.Equal(t, []string{"wrap", "sp", "other"}, got)
	})
}

// A sub-run's state, which its Plan recycles, keeps the name of the node
// that last ran it for the next sub-run under that node to reuse; a
// sub-run under another node sees its own path: another node of the same
// run (m1 and m2), the same node of a Plan run under another node (a/m1
// and b/m1), or a node at the same index of another Plan (c and d). The
// runs are made one after the other, many times, so that the states are
// reused across them in every order.
func TestWrappersPathOfRecycledSubRunStates(t *testing.T) {
	var log pathLog
	a := newAsync(t)
	px := NewWrapper("x", log.worker("x"), 0)
	inner, err := Compile(px)
	require.NoError(t, err)
	subPlan := func(id string, p *Plan) *WorkerWrapper[int, int] {
		return NewWrapper(id, SubPlan[int, int]{Plan: p, Output: func(*Run) (int, error) { return 0, nil }}, 0)
	}
	m1 := subPlan("m1", inner)
	subPlan("m2", inner).Depend(m1, true)
	mid, err := Compile(m1)
	require.NoError(t, err)
	plans := map[string]*Plan{}
	for _, id := range []string{"a", "b"} {
		plans[id], err = Compile(subPlan(id, mid))
		require.NoError(t, err)
	}
	for _, id := range []string{"c", "d"} {
		plans[id], err = Compile(subPlan(id, inner))
		require.NoError(t, err)
	}
	want := map[string][][]string{
		"a": {{"a", "m1", "x"}, {"a", "m2", "x"}},
		"b": {{"b", "m1", "x"}, {"b", "m2", "x"}},
		"c": {{"c", "x"}},
		"d": {{"d", "x"}},
	}
	seen := 0
	for range 20 {
		for _, id := range []string{"a", "b", "c", "d"} {
			run, err := a.RunPlan(context.Background(), plans[id], time.Minute)
			require.NoError(t, err)
			require.NoError(t, run.Report().Err(), "%v", run.Report())
			run.Release() // and its sub-runs, whose states their plans keep
			got := log.get("x")[seen:]
			seen += len(got)
			require.Equal(t, want[id], got, "the paths of plan %s's run", id)
		}
	}

	// A run of a plan whose first SubPlan node, on every other run,
	// fails before its sub-run starts (and the run goes on): the second
	// node's sub-run then takes the state that the first node's served.
	var k int
	skip := NewWrapper("m1", SubPlan[int, int]{
		Plan: inner,
		Input: func(ctx context.Context, _ int, _ Wrappers) (context.Context, error) {
			if k++; k%2 == 0 {
				return nil, errBoom
			}
			return ctx, nil
		},
		Output: func(*Run) (int, error) { return 0, nil },
	}, 0).OnFailure(PolicyContinue)
	subPlan("m2", inner).Depend(skip, false)
	alt, err := Compile(skip)
	require.NoError(t, err)
	for round := range 20 {
		run, err := a.RunPlan(context.Background(), alt, time.Minute)
		require.NoError(t, err)
		require.NoError(t, run.Wait(context.Background()))
		run.Release()
		got := log.get("x")[seen:]
		seen += len(got)
		if round%2 == 0 {
			require.Equal(t, [][]string{{"m1", "x"}, {"m2", "x"}}, got, "round %d", round)
		} else {
			require.Equal(t, [][]string{{"m2", "x"}}, got, "round %d: m1 failed", round)
		}
	}
}
