package asynctool

import (
	"context"
	"testing"
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
