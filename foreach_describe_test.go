package asynctool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pricesForEach is a ForEach of three items, each ready at once, with
// the given Join.
func pricesForEach(join Join) ForEach[int, int, int] {
	var g gauge
	f := sleepItems(3, 2, 0, &g)
	f.Budget = 150 * time.Millisecond
	f.Join = join
	return f
}

// Before a ForEach starts, its items are unknown; its report's Sub shows
// the shape it will have: one node for the items, its join, its Limit
// and its Budget.
func TestDescribeShowsAForEachsShape(t *testing.T) {
	root := NewWrapper("root", WorkerFunc[int, int](func(_ context.Context, i int, _ Wrappers) (int, error) { return i, nil }), 1)
	prices := NewWrapper("prices", pricesForEach(AtLeast(2)), 0)
	prices.Depend(root, true)
	rep, err := Describe(root)
	require.NoError(t, err)
	require.Len(t, rep.Nodes, 2)
	sub := rep.Nodes[1].Sub
	require.NotNil(t, sub)
	assert.Equal(t, 2, sub.Limit)
	assert.Equal(t, 150*time.Millisecond, sub.Budget)
	require.Len(t, sub.Nodes, 2)
	assert.Equal(t, "each item", sub.Nodes[0].ID)
	assert.Empty(t, sub.Nodes[0].Deps)
	assert.Equal(t, "join", sub.Nodes[1].ID)
	assert.Equal(t, []int{0}, sub.Nodes[1].Deps)
	assert.Equal(t, "at least 2 succeeded", sub.Nodes[1].Join)
	for _, n := range sub.Nodes {
		assert.Equal(t, StatusWaiting, n.Status, n.ID)
		assert.Equal(t, StateInit, n.State, n.ID)
	}

	assert.Equal(t, "root: waiting\nprices: waiting limit=2 budget=150ms\n  each item: waiting\n  join: waiting\n", rep.String())
	dot := rep.DOT()
	assert.Contains(t, dot, `label="prices\nat most 2 at once, within 150ms";`)
	assert.Contains(t, dot, `n1_1 [label="join\nat least 2 succeeded"];`)
	assert.Contains(t, dot, "n1_0 -> n1_1;")
	assert.NotRegexp(t, `n[0-9_]+ \[label=.*fillcolor`, dot, "a static report is drawn plain, no node filled by its outcome")
	assert.Contains(t, rep.Mermaid(), `subgraph cluster_n1 ["prices<br/>at most 2 at once, within 150ms"]`)

	pl, err := Compile(root)
	require.NoError(t, err)
	assert.Equal(t, rep.String(), pl.Describe().String(), "a plan describes the same shape")
}

// Without a Join, the shape is the one node; a Hedged ForEach has the
// same shape; a SubGraph, which is built only when it runs, has none.
func TestDescribeForEachWithoutJoinHedgedAndSubGraph(t *testing.T) {
	plain := NewWrapper("plain", ForEach[int, int, int]{
		Items:  func(context.Context, int, Wrappers) ([]int, error) { return []int{1}, nil },
		Worker: WorkerFunc[int, int](func(_ context.Context, i int, _ Wrappers) (int, error) { return i, nil }),
	}, 0)
	hedged := NewWrapper("hedged", Hedged[int, []WorkResult[int]](pricesForEach(AllSucceeded()), time.Millisecond, 2), 0)
	graph := NewWrapper("graph", SubGraph[int, int]{Build: func(context.Context, int, Wrappers) (Built[int], error) {
		return Built[int]{Output: func() (int, error) { return 0, nil }}, nil
	}}, 0)
	rep, err := Describe(plain, hedged, graph)
	require.NoError(t, err)
	byID := map[string]*Report{}
	for _, n := range rep.Nodes {
		byID[n.ID] = n.Sub
	}
	require.NotNil(t, byID["plain"])
	assert.Zero(t, byID["plain"].Limit)
	assert.Zero(t, byID["plain"].Budget)
	require.Len(t, byID["plain"].Nodes, 1)
	assert.Equal(t, "each item", byID["plain"].Nodes[0].ID)
	require.NotNil(t, byID["hedged"])
	require.Len(t, byID["hedged"].Nodes, 2)
	assert.Equal(t, "all succeeded", byID["hedged"].Nodes[1].Join)
	assert.Nil(t, byID["graph"], "a SubGraph's shape is known only once built")
}

// In a run, a ForEach node that has not started shows its static shape;
// once it has run, its items.
func TestRunReportShowsAForEachsShapeUntilItStarts(t *testing.T) {
	a := New()
	defer a.Close()
	release := make(chan struct{})
	gate := NewWrapper("gate", WorkerFunc[int, int](func(_ context.Context, i int, _ Wrappers) (int, error) {
		<-release
		return i, nil
	}), 1)
	prices := NewWrapper("prices", pricesForEach(AtLeast(2)), 0)
	prices.Depend(gate, true)
	run, err := a.Start(context.Background(), time.Minute, gate)
	require.NoError(t, err)
	before := run.Report().Nodes[1].Sub
	require.NotNil(t, before)
	assert.Equal(t, []string{"each item", "join"}, []string{before.Nodes[0].ID, before.Nodes[1].ID})
	close(release)
	require.NoError(t, run.Wait(context.Background()))
	after := run.Report().Nodes[1].Sub
	require.NotNil(t, after)
	var ids []string
	for _, n := range after.Nodes {
		ids = append(ids, n.ID)
	}
	assert.Equal(t, []string{"0", "1", "2", "join"}, ids)
	assert.Equal(t, 2, after.Limit)
}

// --- f130939: a ForEach's static shape in reports ---

// foreachGate is a start node that waits for release.
func foreachGate(release <-chan struct{}) *WorkerWrapper[int, int] {
	return NewWrapper("gate", WorkerFunc[int, int](func(ctx context.Context, i int, _ Wrappers) (int, error) {
		select {
		case <-release:
			return i, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}), 1)
}

// foreachPrices is a ForEach of 3 quick items with a Join, Limit 2 and a
// Budget.
func foreachPrices() ForEach[int, int, int] {
	f := foreachOfItems([]foreachItem{{d: time.Millisecond}, {d: time.Millisecond}, {d: time.Millisecond}}, nil)
	f.Limit, f.Budget, f.Join = 2, 150*time.Millisecond, AtLeast(2)
	return f
}

// A snapshot of a timed run, taken while a ForEach waits for its
// upstream, has the static shape in every rendering: the pictures draw
// its box plain, the Chrome trace adds no process for it (nothing ran),
// CriticalPath and Err stay with the outer nodes.
func TestSnapshotWithAStaticForEachRenders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New(WithTimings(true))
		defer a.Close()
		release := make(chan struct{})
		gate := foreachGate(release)
		prices := NewWrapper("prices", foreachPrices(), 0)
		prices.Depend(gate, true)
		run, err := a.Start(context.Background(), time.Minute, gate)
		require.NoError(t, err)
		time.Sleep(5 * time.Millisecond)
		rep := run.Report()
		sub := rep.Nodes[1].Sub
		require.NotNil(t, sub)
		require.Len(t, sub.Nodes, 2)
		assert.Equal(t, "gate: running\nprices: waiting limit=2 budget=150ms\n  each item: waiting\n  join: waiting\n", rep.String())
		dot := rep.DOT()
		assert.Contains(t, dot, `subgraph cluster_n1 {`)
		assert.Contains(t, dot, `n1_0 [label="each item"];`, "the static Sub is drawn plain")
		assert.Contains(t, dot, `n1_1 [label="join\nat least 2 succeeded"];`)
		assert.Contains(t, dot, `n0 [label="gate\nworking", fillcolor=`)
		mer := rep.Mermaid()
		assert.Contains(t, mer, `n1_0["each item"]`)
		assert.NotContains(t, mer, "n1_0,", "no class for a static node")
		assert.NotRegexp(t, `class .*n1_`, mer)
		var buf bytes.Buffer
		require.NoError(t, rep.WriteChromeTrace(&buf))
		require.True(t, json.Valid(buf.Bytes()))
		assert.NotContains(t, buf.String(), "sub-run of prices")
		assert.NotContains(t, buf.String(), "each item")
		assert.Nil(t, rep.CriticalPath(), "nothing has ended")
		assert.NoError(t, rep.Err())
		assert.NoError(t, sub.Err())
		assert.Nil(t, sub.CriticalPath())

		close(release)
		require.NoError(t, run.Wait(context.Background()))
		rep = run.Report()
		buf.Reset()
		require.NoError(t, rep.WriteChromeTrace(&buf))
		assert.Contains(t, buf.String(), "sub-run of prices")
		assert.Equal(t, []string{"0", "1", "2", "join"}, foreachIDs(rep.Nodes[1].Sub))
	})
}

func foreachIDs(rep *Report) []string {
	if rep == nil {
		return nil
	}
	var ids []string
	for _, n := range rep.Nodes {
		ids = append(ids, n.ID)
	}
	return ids
}

// A ForEach node that ended without starting a sub-run has no Sub: the
// run cancelled (or its deadline passed) before it started, its Items
// failed, it had no items, its Join could not fit the items. While its
// Items runs, the node shows the static shape.
func TestForEachNoSubWithoutASubRun(t *testing.T) {
	t.Run("cancelled before it started", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a := New()
			defer a.Close()
			gate := foreachGate(make(chan struct{}))
			prices := NewWrapper("prices", foreachPrices(), 0)
			prices.Depend(gate, true)
			run, err := a.Start(context.Background(), time.Minute, gate)
			require.NoError(t, err)
			time.Sleep(time.Millisecond)
			require.NotNil(t, run.Report().Nodes[1].Sub)
			run.Cancel()
			require.Error(t, run.Wait(context.Background()))
			rep := run.Report()
			assert.Nil(t, rep.Nodes[1].Sub)
			assert.Equal(t, StatusTimedOut, rep.Nodes[1].Status)
			assert.NotContains(t, rep.String(), "each item")
			assert.NotContains(t, rep.DOT(), "cluster")
		})
	})
	for _, c := range []struct {
		name  string
		items []int
		err   error
		join  Join
	}{
		{name: "items failed", err: errors.New("no list")},
		{name: "no items", items: []int{}},
		{name: "join does not fit", items: []int{1}, join: AtLeast(2)},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a := New()
				defer a.Close()
				inItems := make(chan struct{})
				release := make(chan struct{})
				f := foreachPrices()
				f.Join = c.join
				f.Items = func(context.Context, int, Wrappers) ([]int, error) {
					close(inItems)
					<-release
					return c.items, c.err
				}
				prices := NewWrapper("prices", f, 0)
				run, err := a.Start(context.Background(), time.Minute, prices)
				require.NoError(t, err)
				<-inItems
				rep := run.Report()
				assert.Equal(t, StatusRunning, rep.Nodes[0].Status)
				assert.Equal(t, []string{"each item"}, foreachIDs(rep.Nodes[0].Sub)[:1], "the static shape while Items runs")
				close(release)
				_ = run.Wait(context.Background())
				assert.Nil(t, run.Report().Nodes[0].Sub)
			})
		})
	}
}

// A Hedged ForEach shows the static shape until a call starts its
// items, then the sub-run of the call that won.
func TestHedgedForEachSnapshot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		release := make(chan struct{})
		gate := foreachGate(release)
		f := foreachPrices()
		prices := NewWrapper("prices", Hedged[int, []WorkResult[int]](f, 5*time.Millisecond, 2), 0)
		prices.Depend(gate, true)
		run, err := a.Start(context.Background(), time.Minute, gate)
		require.NoError(t, err)
		time.Sleep(time.Millisecond)
		assert.Equal(t, []string{"each item", "join"}, foreachIDs(run.Report().Nodes[1].Sub))
		assert.Equal(t, 150*time.Millisecond, run.Report().Nodes[1].Sub.Budget)
		close(release)
		require.NoError(t, run.Wait(context.Background()))
		assert.Equal(t, []string{"0", "1", "2", "join"}, foreachIDs(run.Report().Nodes[1].Sub))
	})
}

// A ForEach in a SubPlan's plan: Describe nests the plan's shape, with
// the ForEach's own inside it, and a run's snapshot shows the same
// until the SubPlan starts; then the sub-run's ForEach shows its own
// static shape until it starts.
func TestForEachInASubPlan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		inner := foreachGate(release)
		prices := NewWrapper("prices", foreachPrices(), 0)
		prices.Depend(inner, true)
		pl, err := Compile(inner)
		require.NoError(t, err)
		outer := NewWrapper("page", SubPlan[int, []WorkResult[int]]{
			Plan:   pl,
			Output: prices.ValueIn,
		}, 0)
		rep, err := Describe(outer)
		require.NoError(t, err)
		want := "page: waiting\n  gate: waiting\n  prices: waiting limit=2 budget=150ms\n    each item: waiting\n    join: waiting\n"
		assert.Equal(t, want, rep.String())
		dot := rep.DOT()
		assert.Contains(t, dot, `subgraph cluster_n0_1 {`)
		assert.Contains(t, dot, `n0_1_0 [label="each item"];`)
		assert.Contains(t, dot, "n0_1 -> n0_1_0 [style=dotted, arrowhead=none];")
		assert.Contains(t, rep.Mermaid(), `subgraph cluster_n0_1 ["prices<br/>at most 2 at once, within 150ms"]`)

		a := New(WithTimings(true))
		defer a.Close()
		run, err := a.Start(context.Background(), time.Minute, outer)
		require.NoError(t, err)
		time.Sleep(time.Millisecond)
		rep = run.Report()
		got := rep.String()
		assert.Contains(t, got, "  prices: waiting limit=2 budget=150ms\n    each item: waiting\n    join: waiting\n")
		var buf bytes.Buffer
		require.NoError(t, rep.WriteChromeTrace(&buf))
		assert.NotContains(t, buf.String(), "each item")
		close(release)
		require.NoError(t, run.Wait(context.Background()))
		assert.Equal(t, []string{"0", "1", "2", "join"}, foreachIDs(run.Report().Nodes[0].Sub.Nodes[1].Sub))
	})
}

// In a ForEach of ForEach nodes, the items kept back by the Limit show
// the inner ForEach's static shape in a snapshot; the static shape of
// the outer ForEach is one level deep ("each item" has no Sub of its
// own), which the docs promise.
func TestForEachOfForEachShapes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		release := make(chan struct{})
		inner := foreachPrices()
		outerF := ForEach[int, int, []WorkResult[int]]{
			Items: func(context.Context, int, Wrappers) ([]int, error) { return []int{0, 1}, nil },
			Worker: WorkerFunc[int, []WorkResult[int]](func(ctx context.Context, i int, all Wrappers) ([]WorkResult[int], error) {
				select {
				case <-release:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
				return inner.Action(ctx, i, all)
			}),
			Limit: 1,
		}
		outerStatic := NewWrapper("outer", outerF, 0)
		rep, err := Describe(outerStatic)
		require.NoError(t, err)
		require.NotNil(t, rep.Nodes[0].Sub)
		assert.Nil(t, rep.Nodes[0].Sub.Nodes[0].Sub, "one level")

		blocked := inner
		items := inner.Items
		blocked.Items = func(ctx context.Context, p int, all Wrappers) ([]int, error) {
			<-release
			return items(ctx, p, all)
		}
		outerF.Worker = blocked // items that are ForEach nodes
		w := NewWrapper("outer", outerF, 0)
		run, err := a.Start(context.Background(), time.Minute, w)
		require.NoError(t, err)
		time.Sleep(time.Millisecond)
		snap := run.Report().Nodes[0].Sub
		require.Equal(t, []string{"0", "1"}, foreachIDs(snap))
		assert.Equal(t, StatusRunning, snap.Nodes[0].Status)
		assert.Equal(t, StatusReady, snap.Nodes[1].Status, "kept back by the Limit")
		for _, n := range snap.Nodes {
			assert.Equal(t, []string{"each item", "join"}, foreachIDs(n.Sub), n.ID)
		}
		close(release)
		require.NoError(t, run.Wait(context.Background()))
		sub := run.Report().Nodes[0].Sub
		assert.Equal(t, []string{"0", "1"}, foreachIDs(sub))
		for _, n := range sub.Nodes {
			assert.Equal(t, []string{"0", "1", "2", "join"}, foreachIDs(n.Sub), n.ID)
		}
	})
}
