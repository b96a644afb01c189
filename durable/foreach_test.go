package durable

import (
	"context"
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

// eachGraph builds a checkpointed ForEach node "each" over the items 1, 2,
// 3, whose item 2 fails while failing says so (with an error that wraps
// context.DeadlineExceeded and asynctool.ErrNotEnded), before a sink that
// needs each.
func eachGraph(calls *atomic.Int32, failing *atomic.Bool, join asynctool.Join) BuildFunc[sumArgs] {
	return func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		each := Node(cp, "each", asynctool.ForEach[int, int, int]{
			Items: func(context.Context, int, asynctool.Wrappers) ([]int, error) { return []int{1, 2, 3}, nil },
			Worker: asynctool.WorkerFunc[int, int](func(_ context.Context, i int, _ asynctool.Wrappers) (int, error) {
				calls.Add(1)
				if i == 2 && failing.Load() {
					return 0, fmt.Errorf("item 2 is down: %w (%w)", context.DeadlineExceeded, asynctool.ErrNotEnded)
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

// TestForEachWithAllItemsSucceededIsCheckpointed: a checkpointed
// ForEach node whose items all succeeded stores its []WorkResult (each
// Err nil), and the retry of an attempt that failed elsewhere replays it
// without calling an item again.
func TestForEachWithAllItemsSucceededIsCheckpointed(t *testing.T) {
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

// TestForEachWithAFailedItemIsCheckpointed: a checkpointed ForEach
// node one of whose items failed stores its []WorkResult, the failed
// item's Err as the message and the errors it matched
// (asynctool.WorkResult's MarshalJSON), and the retry of an attempt that
// failed elsewhere replays it without calling an item again; the sink
// reads the item's error back as an *asynctool.StoredError, which matches
// with errors.Is the context and asynctool errors the item's error
// wrapped (ErrNotEnded, the newest sentinel, included), and no other. The
// error once encoded as {} and did not decode back,
// so the checkpoint failed the node and every retry ran every item again.
func TestForEachWithAFailedItemIsCheckpointed(t *testing.T) {
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
	assert.EqualError(t, item.Err, "item 2 is down: context deadline exceeded (asynctool: node has not ended)")
	var stored *asynctool.StoredError
	assert.ErrorAs(t, item.Err, &stored, "the replayed error is the stored one")
	assert.ErrorIs(t, item.Err, context.DeadlineExceeded)
	assert.ErrorIs(t, item.Err, asynctool.ErrNotEnded)
	assert.NotErrorIs(t, item.Err, context.Canceled)
	assert.NotErrorIs(t, item.Err, asynctool.ErrSkipped)
}

// foreachCents is an item's value whose JSON methods have pointer receivers,
// as many types' do (*big.Int's, for one): encoding/json calls them on an
// addressable value only.
type foreachCents struct{ n int }

func (c *foreachCents) MarshalJSON() ([]byte, error) {
	return json.Marshal(fmt.Sprintf("%d cents", c.n))
}

func (c *foreachCents) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	_, err := fmt.Sscanf(s, "%d cents", &c.n)
	return err
}

// TestForEachOfAPointerMarshalerIsCheckpointed: a ForEach whose items'
// values encode themselves through a pointer receiver is checkpointed and
// replayed, as a plain node of that type is. WorkResult's MarshalJSON
// encoded its copy of the value by value, so encoding/json wrote the
// value's fields ({}), which the value's UnmarshalJSON refused: the node
// failed at its checkpoint (ErrUndecodableResult) on every attempt.
func TestForEachOfAPointerMarshalerIsCheckpointed(t *testing.T) {
	var calls, gateRuns atomic.Int32
	var got atomic.Value
	build := func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		each := Node(cp, "each", asynctool.ForEach[int, int, foreachCents]{
			Items: func(context.Context, int, asynctool.Wrappers) ([]int, error) { return []int{1, 2, 3}, nil },
			Worker: asynctool.WorkerFunc[int, foreachCents](func(_ context.Context, i int, _ asynctool.Wrappers) (foreachCents, error) {
				calls.Add(1)
				return foreachCents{n: i * 100}, nil
			}),
		}, 0)
		Node(cp, "sink", asynctool.WorkerFunc[int, int](func(_ context.Context, _ int, all asynctool.Wrappers) (int, error) {
			r, err := asynctool.ResultOf[[]asynctool.WorkResult[foreachCents]](all, "each")
			if err == nil {
				got.Store(r.Value)
			}
			return 0, err
		}), 0).Depend(each, true)
		gate := gateDownOnce(cp, &gateRuns)
		return []asynctool.Wrapper{each, gate}, nil
	}
	evs := runJob(t, 3, 10*time.Second, build)
	require.NotEmpty(t, evs)
	require.Equal(t, river.EventKindJobCompleted, evs[len(evs)-1].Kind, "attempts: %d; first error: %v", len(evs), evs[0].Job.Errors)
	require.Len(t, evs, 2)
	assert.Equal(t, int32(3), calls.Load(), "the retry replayed each")
	items, _ := got.Load().([]asynctool.WorkResult[foreachCents])
	require.Len(t, items, 3)
	for i, it := range items {
		assert.Equal(t, (i+1)*100, it.Value.n, "item %d", i)
		assert.Equal(t, asynctool.ResultSuccess, it.State)
	}
}

// foreachItem is what a downstream node saw of one item of a ForEach.
type foreachItem struct {
	Value              int
	State              asynctool.ResultState
	Text               string
	Deadline, Skipped  bool
	RunEnded, Canceled bool
}

func foreachSee(rs []asynctool.WorkResult[int]) []foreachItem {
	out := make([]foreachItem, len(rs))
	for i, r := range rs {
		out[i] = foreachItem{Value: r.Value, State: r.State}
		if r.Err != nil {
			out[i].Text = r.Err.Error()
			out[i].Deadline = errors.Is(r.Err, context.DeadlineExceeded)
			out[i].Skipped = errors.Is(r.Err, asynctool.ErrSkipped)
			out[i].RunEnded = errors.Is(r.Err, asynctool.ErrRunEnded)
			out[i].Canceled = errors.Is(r.Err, context.Canceled)
		}
	}
	return out
}

// TestReplayedForEachLooksTheSame: a downstream node that is not
// checkpointed runs on every attempt; on the retry, which replays the two
// ForEach nodes, it sees each item as it did on the first attempt (value,
// state, message, and the errors it matches): an item its Budget stopped
// (a timeout, context.DeadlineExceeded), an item that failed, and the
// items a join that decided early stopped or kept from starting
// (ErrSkipped, ErrRunEnded).
func TestReplayedForEachLooksTheSame(t *testing.T) {
	var calls, gateRuns atomic.Int32
	var mu sync.Mutex
	var seen [][2][]foreachItem // per attempt: budgeted, joined
	build := func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		budgeted := Node(cp, "budgeted", asynctool.ForEach[int, int, int]{
			Items: func(context.Context, int, asynctool.Wrappers) ([]int, error) { return []int{0, 1, 2}, nil },
			Worker: asynctool.WorkerFunc[int, int](func(ctx context.Context, i int, _ asynctool.Wrappers) (int, error) {
				calls.Add(1)
				switch i {
				case 1:
					return 0, fmt.Errorf("item %d: <out of stock> & \"gone\"", i)
				case 2:
					<-ctx.Done()
					return 0, ctx.Err()
				}
				return 10, nil
			}),
			Node:   func(_ int, _ int, n *asynctool.WorkerWrapper[int, int]) { n.Default(-1) },
			Budget: 50 * time.Millisecond,
		}, 0)
		joined := Node(cp, "joined", asynctool.ForEach[int, int, int]{
			Items: func(context.Context, int, asynctool.Wrappers) ([]int, error) { return []int{0, 1, 2}, nil },
			Worker: asynctool.WorkerFunc[int, int](func(ctx context.Context, i int, _ asynctool.Wrappers) (int, error) {
				calls.Add(1)
				return 7, nil
			}),
			Node:  func(_ int, _ int, n *asynctool.WorkerWrapper[int, int]) { n.Default(-2) },
			Limit: 1,
			Join:  asynctool.AnySucceeded(),
		}, 0)
		look := asynctool.NewWrapper("look", asynctool.WorkerFunc[int, int](func(_ context.Context, _ int, all asynctool.Wrappers) (int, error) {
			b, err := asynctool.ResultOf[[]asynctool.WorkResult[int]](all, "budgeted")
			if err != nil {
				return 0, err
			}
			j, err := asynctool.ResultOf[[]asynctool.WorkResult[int]](all, "joined")
			if err != nil {
				return 0, err
			}
			mu.Lock()
			seen = append(seen, [2][]foreachItem{foreachSee(b.Value), foreachSee(j.Value)})
			mu.Unlock()
			return 0, nil
		}), 0).Depend(budgeted, true).Depend(joined, true)
		_ = look
		gate := gateDownOnce(cp, &gateRuns)
		return []asynctool.Wrapper{budgeted, joined, gate}, nil
	}
	evs := runJob(t, 3, 10*time.Second, build)
	require.Len(t, evs, 2, "first error: %v", evs[0].Job.Errors)
	assert.Equal(t, river.EventKindJobCompleted, evs[1].Kind)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, seen, 2)
	t.Logf("first attempt: %+v", seen[0])
	assert.Equal(t, seen[0], seen[1], "the replay looks as the first attempt did")
	assert.True(t, seen[0][0][2].Deadline)
	assert.Equal(t, asynctool.ResultTimeout, seen[0][0][2].State)
	assert.Equal(t, -1, seen[0][0][2].Value)
}

// TestForEachWithANULInAnItemsErrorIsCheckpointed: an item's error
// whose message holds a NUL character (bytes of a reply quoted with %s)
// is stored with U+FFFD in its place, as the Worker stores a NUL in the
// job's error: PostgreSQL's jsonb refuses \u0000, and the node failed
// with ErrUnstorableJSON at its checkpoint, so that every retry ran every
// item again, as before asynctool.WorkResult had a MarshalJSON.
func TestForEachWithANULInAnItemsErrorIsCheckpointed(t *testing.T) {
	var calls, gateRuns atomic.Int32
	var got atomic.Value
	build := func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		each := Node(cp, "each", asynctool.ForEach[int, int, int]{
			Items: func(context.Context, int, asynctool.Wrappers) ([]int, error) { return []int{1, 2, 3}, nil },
			Worker: asynctool.WorkerFunc[int, int](func(_ context.Context, i int, _ asynctool.Wrappers) (int, error) {
				calls.Add(1)
				if i == 2 {
					return 0, fmt.Errorf("item 2: bad reply %s", "\x00\x01")
				}
				return i, nil
			}),
		}, 0)
		asynctool.NewWrapper("look", asynctool.WorkerFunc[int, int](func(_ context.Context, _ int, all asynctool.Wrappers) (int, error) {
			r, err := asynctool.ResultOf[[]asynctool.WorkResult[int]](all, "each")
			if err == nil && len(r.Value) == 3 {
				got.Store(r.Value[1])
			}
			return 0, err
		}), 0).Depend(each, true)
		gate := gateDownOnce(cp, &gateRuns)
		return []asynctool.Wrapper{each, gate}, nil
	}
	evs := runJob(t, 3, 10*time.Second, build)
	require.NotEmpty(t, evs)
	require.Equal(t, river.EventKindJobCompleted, evs[len(evs)-1].Kind, "attempts: %d; first error: %v", len(evs), evs[0].Job.Errors)
	require.Len(t, evs, 2)
	assert.Equal(t, int32(3), calls.Load(), "the retry replayed each")
	item, _ := got.Load().(asynctool.WorkResult[int]) // as the replay read it back
	assert.EqualError(t, item.Err, "item 2: bad reply \uFFFD\x01")
}
