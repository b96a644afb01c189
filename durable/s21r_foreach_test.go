package durable

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynctool-go/asynctool"
	"github.com/riverqueue/river"
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

// gateDownOnce is a checkpointed node "gate" that fails the first
// attempt (its first call) and succeeds after, so that the job's retry
// replays the nodes checkpointed on the first.
func gateDownOnce(cp *Checkpoint, runs *atomic.Int32) *asynctool.WorkerWrapper[int, int] {
	return Node(cp, "gate", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
		if runs.Add(1) == 1 {
			return 0, errors.New("gate is down")
		}
		return 1, nil
	}), 0)
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
		gate := gateDownOnce(cp, &gateRuns)
		return append(starts, gate), err
	}
	evs := runJob(t, 3, 10*time.Second, build)
	require.Len(t, evs, 2)
	assert.Equal(t, river.EventKindJobFailed, evs[0].Kind)
	assert.Equal(t, river.EventKindJobCompleted, evs[1].Kind)
	assert.Equal(t, int32(3), calls.Load(), "the retry replayed each")
}

// TestS21RForEachWithAFailedItemIsCheckpointed: a checkpointed ForEach
// node one of whose items failed stores its []WorkResult, the failed
// item's Err as the message and the errors it matched
// (asynctool.WorkResult's MarshalJSON), and the retry of an attempt that
// failed elsewhere replays it without calling an item again; the sink
// reads the item's error back as an *asynctool.StoredError. Before the
// twenty-third session the error encoded as {} and did not decode back,
// so the checkpoint failed the node and every retry ran every item again.
func TestS21RForEachWithAFailedItemIsCheckpointed(t *testing.T) {
	var calls, gateRuns atomic.Int32
	var failing atomic.Bool
	failing.Store(true)
	var seen atomic.Value // the sink's view of item 2's error, on each attempt
	build := func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		starts, err := eachGraph(&calls, &failing, asynctool.Join{})(ctx, job, cp)
		gate := gateDownOnce(cp, &gateRuns)
		look := asynctool.NewWrapper("look", asynctool.WorkerFunc[int, int](func(_ context.Context, _ int, all asynctool.Wrappers) (int, error) {
			r, err := asynctool.ResultOf[[]asynctool.WorkResult[int]](all, "each")
			if err == nil && len(r.Value) == 3 {
				seen.Store(r.Value[1])
			}
			return 0, err
		}), 0)
		for _, s := range starts {
			look.Depend(s, true)
		}
		return append(starts, gate), err
	}
	evs := runJob(t, 3, 10*time.Second, build)
	require.Len(t, evs, 2)
	assert.Equal(t, river.EventKindJobFailed, evs[0].Kind)
	assert.Equal(t, river.EventKindJobCompleted, evs[1].Kind)
	assert.Equal(t, int32(3), calls.Load(), "the retry replayed each, failed item included")
	item, ok := seen.Load().(asynctool.WorkResult[int])
	require.True(t, ok)
	assert.Equal(t, asynctool.ResultException, item.State)
	assert.EqualError(t, item.Err, "item 2 is down")
	var stored *asynctool.StoredError
	assert.ErrorAs(t, item.Err, &stored, "the replayed error is the stored one")
}
