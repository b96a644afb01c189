package durable

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynctool-go/asynctool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// eachGraph builds a checkpointed ForEach node "each" over the items 1, 2,
// 3, whose item 2 fails while failing says so, before a sink that needs
// each.
func eachGraph(calls *atomic.Int32, failing *atomic.Bool, join asynctool.Join) BuildFunc[sumArgs] {
	return func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		each := Node(cp, "each", asynctool.ForEach[int, int, int]{
			Items: func(context.Context, int, asynctool.Wrappers) ([]int, error) { return []int{1, 2, 3}, nil },
			Worker: asynctool.WorkerFunc[int, int](func(_ context.Context, i int, _ asynctool.Wrappers) (int, error) {
				calls.Add(1)
				if i == 2 && failing.Load() {
					return 0, errors.New("item 2 is down")
				}
				return i * 10, nil
			}),
			Join: join,
		}, 0)
		Node(cp, "sink", asynctool.WorkerFunc[int, int](func(_ context.Context, _ int, all asynctool.Wrappers) (int, error) {
			r, err := asynctool.ResultOf[[]asynctool.WorkResult[int]](all, "each")
			return len(r.Value), err
		}), 0).Depend(each, true)
		return []asynctool.Wrapper{each}, nil
	}
}

// TestS21RForEachWithAllItemsSucceededIsCheckpointed: a checkpointed
// ForEach node whose items all succeeded stores its []WorkResult (each
// Err nil), and the retry of an attempt that failed elsewhere replays it
// without calling an item again.
func TestS21RForEachWithAllItemsSucceededIsCheckpointed(t *testing.T) {
	var calls, gateRuns atomic.Int32
	var failing atomic.Bool
	build := func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		starts, err := eachGraph(&calls, &failing, asynctool.Join{})(ctx, job, cp)
		gate := Node(cp, "gate", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			if gateRuns.Add(1) == 1 {
				return 0, errors.New("gate is down")
			}
			return 1, nil
		}), 0)
		return append(starts, gate), err
	}
	evs := runJob(t, 3, 10*time.Second, build)
	require.Len(t, evs, 2)
	assert.Equal(t, river.EventKindJobFailed, evs[0].Kind)
	assert.Equal(t, river.EventKindJobCompleted, evs[1].Kind)
	assert.Equal(t, int32(3), calls.Load(), "the retry replayed each")
}

// TestS21RForEachWithAFailedItemCannotBeCheckpointed documents what a
// durable graph does with a checkpointed ForEach node one of whose items
// failed: the node itself succeeds (the zero Join), but its result, a
// []WorkResult[int] with an Err holding an error, encodes the error as {}
// and does not decode back into the error interface, so the checkpoint
// fails the node with ErrUndecodableResult (as durable's package doc says
// of a result holding an error), the attempt fails, and every retry runs
// every item again. With AnySucceeded the items the join stopped carry an
// error too, so the same happens whenever the join decides before the last
// item ends. Checkpoint a node downstream of the ForEach that maps its
// results into a decodable type instead.
func TestS21RForEachWithAFailedItemCannotBeCheckpointed(t *testing.T) {
	var calls atomic.Int32
	var failing atomic.Bool
	failing.Store(true)
	evs := runJob(t, 2, 10*time.Second, eachGraph(&calls, &failing, asynctool.Join{}))
	require.Len(t, evs, 2)
	assert.Equal(t, rivertype.JobStateDiscarded, evs[1].Job.State)
	for _, e := range evs[1].Job.Errors {
		assert.Contains(t, e.Error, `"each" failed`)
		assert.Contains(t, e.Error, "result cannot be checkpointed")
		t.Log(e.Error)
	}
	assert.Equal(t, int32(6), calls.Load(), "every attempt ran every item again")
}
