package durable

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynctool-go/asynctool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Review of the durable module as a newcomer adopting it, helper-106.

// TestH106NilWorkerFailsTheJobBeforeAnyNodeRuns checks, through River,
// that the attempt of a graph with a checkpointed node that cannot run
// fails before any node runs, its error, stored in the job's row, saying
// why: a nil worker (naming the node), or the empty id, where such a
// node failed only when its turn came, after the nodes before it.
func TestH106NilWorkerFailsTheJobBeforeAnyNodeRuns(t *testing.T) {
	for want, node := range map[string]func(cp *Checkpoint, o asynctool.Wrapper){
		`nil worker: node "n"`: func(cp *Checkpoint, o asynctool.Wrapper) {
			var f asynctool.WorkerFunc[int, int]
			Node(cp, "n", f, 0).Depend(o, true)
		},
		"a checkpointed node (Node) needs an id": func(cp *Checkpoint, o asynctool.Wrapper) {
			var runs atomic.Int32
			intNode(cp, "", &runs, nil).Depend(o, true)
		},
	} {
		var other atomic.Int32
		evs := runJob(t, 1, 5*time.Second, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
			o := intNode(cp, "other", &other, nil)
			node(cp, o)
			return []asynctool.Wrapper{o}, nil
		})
		require.Len(t, evs, 1, want)
		require.Len(t, evs[0].Job.Errors, 1, want)
		assert.Contains(t, evs[0].Job.Errors[0].Error, want)
		assert.Zero(t, other.Load(), want)
	}
}

// TestH106NilCheckpointFailsTheNode checks that a node made with a nil
// *Checkpoint fails with an error that says so, where Node panicked with
// a nil dereference.
func TestH106NilCheckpointFailsTheNode(t *testing.T) {
	var runs atomic.Int32
	var n *asynctool.WorkerWrapper[int, int]
	require.NotPanics(t, func() { n = intNode(nil, "n", &runs, nil) })
	require.NoError(t, newAsync(t).BeginWork(context.Background(), time.Second, n))
	r := n.Result()
	assert.Equal(t, asynctool.ResultException, r.State)
	require.Error(t, r.Err)
	assert.Contains(t, r.Err.Error(), `node "n" was made with a nil *Checkpoint`)
	assert.Zero(t, runs.Load())
	assert.False(t, errors.Is(r.Err, asynctool.ErrNilWorker))
}

// TestH106WhatAReplayShows pins two things Node's doc says of a replayed
// node. A struct result's unexported fields: JSON does not hold them, so
// the retry's replay gives them their zero values, without an error. And
// to asynctool's hooks (and so to the otel module's spans, whose
// asynctool.node.ran is an Attempt above 0) the replayed node ran once
// and succeeded, as the worker asynctool calls is Node's.
func TestH106WhatAReplayShows(t *testing.T) {
	type quote struct {
		Price int
		cost  int
	}
	var runs atomic.Int32
	var mu sync.Mutex
	var saw []quote
	var ends []asynctool.NodeEvent // q's OnNodeEnd, one per job attempt
	a := asynctool.New(asynctool.WithHooks(&asynctool.Hooks{OnNodeEnd: func(_ context.Context, ev asynctool.NodeEvent) {
		if ev.ID == "q" {
			mu.Lock()
			ends = append(ends, ev)
			mu.Unlock()
		}
	}}))
	t.Cleanup(func() { a.Close() })
	evs := runWorker(t, openSQLite(t), mustWorker(t, a, 5*time.Second, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		q := Node(cp, "q", asynctool.WorkerFunc[int, quote](func(context.Context, int, asynctool.Wrappers) (quote, error) {
			runs.Add(1)
			return quote{Price: 5, cost: 3}, nil
		}), 0)
		asynctool.NewWrapper("sink", asynctool.WorkerFunc[int, int](func(_ context.Context, _ int, all asynctool.Wrappers) (int, error) {
			r, err := q.ResultFrom(all)
			mu.Lock()
			saw = append(saw, r.Value)
			mu.Unlock()
			if job.Attempt == 1 {
				return 0, errors.New("once")
			}
			return 0, err
		}), 0).Depend(q, true)
		return []asynctool.Wrapper{q}, nil
	}), sumArgs{Base: 1}, 2)
	require.Len(t, evs, 2)
	assert.Equal(t, river.EventKindJobCompleted, evs[1].Kind)
	assert.Equal(t, int32(1), runs.Load(), "the worker ran on the first attempt only")
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []quote{{Price: 5, cost: 3}, {Price: 5}}, saw)
	require.Len(t, ends, 2)
	for k, ev := range ends {
		assert.Equal(t, 1, ev.Attempt, "job attempt %d", k+1)
		assert.Equal(t, asynctool.ResultSuccess, ev.Result, "job attempt %d", k+1)
	}
}

// TestH106ResumeRefusesANilContextOrClient checks that Resume, which
// returns errors, returns one for a nil ctx or client, where it panicked
// with a nil dereference.
func TestH106ResumeRefusesANilContextOrClient(t *testing.T) {
	var (
		ctx    context.Context
		client *river.Client[*sql.Tx]
	)
	require.NotPanics(t, func() {
		_, err := Resume(ctx, client, 7, nil)
		assert.ErrorIs(t, err, asynctool.ErrNilContext)
		_, err = Resume(context.Background(), client, 7, nil)
		assert.ErrorContains(t, err, "durable: Resume of job 7 with a nil *river.Client")
	})
}

// TestH106RefusedWorkersAreGraphErrors checks that a checkpointed node
// whose worker asynctool refuses before a run (nil; and as ForEach's and
// Hedged's docs say, ErrNilWorker, ErrBadLimit) is refused the same way in a
// durable graph: before any node runs, with a *asynctool.GraphError.
// Wrapped by Node, such a worker was hidden from asynctool's checks,
// and the node failed only when it ran, after the rest of the graph.
func TestH106RefusedWorkersAreGraphErrors(t *testing.T) {
	items := func(context.Context, int, asynctool.Wrappers) ([]int, error) { return []int{1}, nil }
	each := asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) { return 1, nil })
	var nilFunc asynctool.WorkerFunc[int, int]
	for name, tc := range map[string]struct {
		make func(cp *Checkpoint) asynctool.Wrapper
		want error
	}{
		// Before, a nil Worker failed only when the node ran, and a nil
		// WorkerFunc panicked with a nil dereference that named nothing.
		"nil Worker": {func(cp *Checkpoint) asynctool.Wrapper {
			return Node[int, int](cp, "n", nil, 0)
		}, asynctool.ErrNilWorker},
		"nil WorkerFunc": {func(cp *Checkpoint) asynctool.Wrapper {
			return Node(cp, "n", asynctool.Worker[int, int](nilFunc), 0)
		}, asynctool.ErrNilWorker},
		"ForEach without a Worker": {func(cp *Checkpoint) asynctool.Wrapper {
			return Node[int, []asynctool.WorkResult[int]](cp, "n", asynctool.ForEach[int, int, int]{Items: items}, 0)
		}, asynctool.ErrNilWorker},
		"ForEach with a negative Limit": {func(cp *Checkpoint) asynctool.Wrapper {
			return Node[int, []asynctool.WorkResult[int]](cp, "n", asynctool.ForEach[int, int, int]{Items: items, Worker: each, Limit: -1}, 0)
		}, asynctool.ErrBadLimit},
		"Hedged of nil": {func(cp *Checkpoint) asynctool.Wrapper {
			return Node(cp, "n", asynctool.Hedged[int, int](nil, time.Millisecond, 2), 0)
		}, asynctool.ErrNilWorker},
	} {
		t.Run(name, func(t *testing.T) {
			var other atomic.Int32
			cp := newCheckpoint(nil)
			o := intNode(cp, "other", &other, nil)
			n := tc.make(cp)
			// n after o, so that o would run first if the run started.
			switch n := n.(type) {
			case *asynctool.WorkerWrapper[int, int]:
				n.Depend(o, true)
			case *asynctool.WorkerWrapper[int, []asynctool.WorkResult[int]]:
				n.Depend(o, true)
			}
			err := newAsync(t).BeginWork(context.Background(), time.Second, o)
			var ge *asynctool.GraphError
			require.ErrorAs(t, err, &ge)
			assert.ErrorIs(t, err, tc.want)
			assert.ErrorContains(t, err, `"n"`)
			assert.Zero(t, other.Load(), "no node runs")
		})
	}
}

// TestH106UndecodableResumeValueNamesTheType checks that the error of a
// value Resume gave that does not decode names the node's result type
// when that type is an interface, where %T of its zero value printed
// "<nil>".
func TestH106UndecodableResumeValueNamesTheType(t *testing.T) {
	cp := newCheckpoint(map[string]json.RawMessage{"n": json.RawMessage(`"x"`)})
	cp.decided = map[string]bool{"n": true}
	_, err := (&checkpointed[int, fmt.Stringer]{cp: cp, id: "n"}).decodeSaved(cp.saved["n"])
	require.Error(t, err)
	assert.Contains(t, err.Error(), `node "n": the value Resume gave does not decode into fmt.Stringer`)
	_, err = (&checkpointed[int, int]{cp: cp, id: "n"}).decodeSaved(cp.saved["n"])
	assert.ErrorContains(t, err, "does not decode into int")
}
