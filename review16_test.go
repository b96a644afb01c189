package asynctool

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDeadlineEndsUnstartedNodesAsTimeouts: when the group deadline
// passes, every node that has not ended ends as a timeout, as BeginWork's
// doc says. The sweep's end of one node released the unstarted upstreams
// of a successor it failed, and the short-circuit rule skipped them
// (helper-48 hit it under load: cart and recs ended as skipped, with
// OnNodeSkip instead of OnNodeTimeout).
func TestDeadlineEndsUnstartedNodesAsTimeouts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var skips, timeouts []string
		// A saturated pool: every node waits a second for a goroutine.
		slow := ExecutorFunc(func(task func()) error {
			go func() { time.Sleep(time.Second); task() }()
			return nil
		})
		a := New(WithExecutor(slow), WithHooks(&Hooks{
			OnNodeSkip: func(_ context.Context, ev NodeEvent) {
				mu.Lock()
				skips = append(skips, ev.ID)
				mu.Unlock()
			},
			OnNodeTimeout: func(_ context.Context, ev NodeEvent) {
				mu.Lock()
				timeouts = append(timeouts, ev.ID)
				mu.Unlock()
			},
		}))
		defer a.Close()
		one := WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 1, nil })
		user, cart, recs := NewWrapper("user", one, 0), NewWrapper("cart", one, 0), NewWrapper("recs", one, 0)
		page := NewWrapper("page", one, 0).Depend(user, true).Depend(cart, true).Depend(recs, false)
		err := a.BeginWork(context.Background(), 100*time.Millisecond, user, cart, recs)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		for _, w := range []*WorkerWrapper[int, int]{user, cart, recs, page} {
			assert.Equal(t, ResultTimeout, w.Result().State, "%s: %v", w, w.Result().Err)
		}
		mu.Lock()
		defer mu.Unlock()
		assert.Empty(t, skips)
		assert.ElementsMatch(t, []string{"user", "cart", "recs", "page"}, timeouts)
	})
}

// R3-1b: the same gap for the deadline, which ef35ccc set out to fix:
// a worker that returns at the deadline ends as a timeout and fails its
// successor before the sweep has set r.stopped; the successor's release
// skips the unstarted upstream x (and could skip its chain), which
// should end as a timeout ("nodes that had not started end as
// timeouts").
// TestDeadlineSkipsNothingBeforeTheSweepStarts: a worker that returns
// at the deadline fails its successor before the sweep has started; the
// successor's unstarted upstream must still end as a timeout, not as
// skipped (helper-51: ef35ccc checked only the sweep's flag).
func TestDeadlineSkipsNothingBeforeTheSweepStarts(t *testing.T) {
	var skipped atomic.Int32
	a := New(WithHooks(&Hooks{OnNodeSkip: func(context.Context, NodeEvent) { skipped.Add(1) }}))
	defer a.Close()
	bad := 0
	const runs = 200
	for range runs {
		y := NewWrapper("y", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
			<-ctx.Done()
			return 0, ctx.Err()
		}), 0)
		g := NewWrapper("g", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
			<-ctx.Done()
			time.Sleep(time.Millisecond) // x stays unstarted until the sweep
			return 0, ctx.Err()
		}), 0)
		x := NewWrapper("x", okWorker(), 0).Depend(g, true)
		NewWrapper("s", okWorker(), 0).Depend(y, true).Depend(x, true)
		err := a.BeginWork(context.Background(), 2*time.Millisecond, y, g)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		if x.Result().State != ResultTimeout {
			bad++
		}
	}
	assert.Zero(t, bad, "x not a timeout in %d of %d runs (OnNodeSkip fired %d times)", bad, runs, skipped.Load())
}
