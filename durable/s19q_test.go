package durable

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynctool-go/asynctool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Review of WhenResult in durable graphs, helper-72.

// TestS19QFallbackAcrossAttempts checks a fallback (asynctool.WhenResult)
// in a durable graph: a checkpointed primary that succeeded is replayed
// on the retry, so the backup's condition sees the same result (the
// decoded value, a success, no error) and the backup is not taken on
// either attempt; and a primary whose result type is any and that fails
// without a default has the backup run, whose value the sink reads.
func TestS19QFallbackAcrossAttempts(t *testing.T) {
	t.Run("primary replayed", func(t *testing.T) {
		var primary, backup, quote atomic.Int32
		var mu sync.Mutex
		var saw []asynctool.WorkResult[int]
		evs := runJob(t, 3, 10*time.Second, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
			p := intNode(cp, "primary", &primary, nil)
			b := intNode(cp, "backup", &backup, nil).Depend(p, false).
				Join(asynctool.WhenResult("primary", func(r asynctool.WorkResult[int]) bool {
					mu.Lock()
					saw = append(saw, r)
					mu.Unlock()
					return r.State != asynctool.ResultSuccess
				}))
			asynctool.NewWrapper("quote", asynctool.WorkerFunc[int, int](func(_ context.Context, _ int, all asynctool.Wrappers) (int, error) {
				quote.Add(1)
				if job.Attempt == 1 {
					return 0, errors.New("quote is down")
				}
				r, err := p.ResultFrom(all)
				return r.Value, err
			}), 0).Depend(p, false).Depend(b, false)
			return []asynctool.Wrapper{p}, nil
		})
		require.Len(t, evs, 2)
		assert.Equal(t, river.EventKindJobCompleted, evs[1].Kind)
		assert.Equal(t, int32(1), primary.Load(), "primary was replayed")
		assert.Zero(t, backup.Load())
		assert.Equal(t, int32(2), quote.Load())
		mu.Lock()
		defer mu.Unlock()
		// The page may run on primary's success before backup's join is
		// asked, and backup be short-circuited: its condition is asked
		// at most once per attempt, and sees the same result each time.
		for _, r := range saw {
			assert.Equal(t, asynctool.WorkResult[int]{Value: 1, State: asynctool.ResultSuccess}, r)
		}
	})
	t.Run("primary failed, then runs again", func(t *testing.T) {
		var backup, primary atomic.Int32
		// taken records the condition's answers by attempt: the backup,
		// checkpointed once it ran, would be replayed, not called, if the
		// retry took it, so its call count cannot tell.
		var mu sync.Mutex
		taken := map[int][]bool{}
		evs := runJob(t, 3, 10*time.Second, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
			p := Node(cp, "primary", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
				primary.Add(1)
				if job.Attempt == 1 {
					return 0, errors.New("primary is down")
				}
				return 1, nil
			}), 0)
			b := intNode(cp, "backup", &backup, nil).Depend(p, false).
				Join(asynctool.WhenResult("primary", func(r asynctool.WorkResult[int]) bool {
					take := r.State != asynctool.ResultSuccess
					mu.Lock()
					taken[job.Attempt] = append(taken[job.Attempt], take)
					mu.Unlock()
					return take
				}))
			asynctool.NewWrapper("quote", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
				if job.Attempt == 1 {
					return 0, errors.New("quote is down")
				}
				return 0, nil
			}), 0).Depend(p, false).Depend(b, false)
			return []asynctool.Wrapper{p}, nil
		})
		require.Len(t, evs, 2)
		assert.Equal(t, river.EventKindJobCompleted, evs[1].Kind)
		assert.Equal(t, int32(1), backup.Load(), "the backup ran on the first attempt")
		assert.Equal(t, int32(2), primary.Load(), "the retry called the primary again")
		mu.Lock()
		defer mu.Unlock()
		assert.Equal(t, []bool{true}, taken[1], "the first attempt took the backup")
		// The quote may run on the primary's success and the backup be
		// short-circuited before its join is asked: at most one answer.
		assert.NotContains(t, taken[2], true, "the retry did not take the backup")
		assert.LessOrEqual(t, len(taken[2]), 1)
	})
	t.Run("any primary fails", func(t *testing.T) {
		var backup atomic.Int32
		var got atomic.Int64
		evs := runJob(t, 2, 10*time.Second, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
			p := Node(cp, "primary", asynctool.WorkerFunc[int, any](func(context.Context, int, asynctool.Wrappers) (any, error) {
				return nil, errors.New("primary is down")
			}), 0)
			b := intNode(cp, "backup", &backup, nil).Depend(p, false).
				Join(asynctool.WhenResult("primary", func(r asynctool.WorkResult[int]) bool { return r.State != asynctool.ResultSuccess }))
			asynctool.NewWrapper("quote", asynctool.WorkerFunc[int, int](func(_ context.Context, _ int, all asynctool.Wrappers) (int, error) {
				r, err := b.ResultFrom(all)
				got.Store(int64(r.Value))
				return r.Value, err
			}), 0).Depend(p, false).Depend(b, false)
			return []asynctool.Wrapper{p}, nil
		})
		require.Len(t, evs, 1)
		assert.Equal(t, river.EventKindJobCompleted, evs[0].Kind, "the primary is no sink: its failure, tolerated, does not fail the job")
		assert.Equal(t, int32(1), backup.Load())
		assert.Equal(t, int64(1), got.Load())
	})
}
