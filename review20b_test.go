package asynctool

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestS20BCancelRacingRelease: a Run's methods are safe for concurrent
// use, so a Cancel (from a watchdog, say) racing the owner's Release of
// the same handle must neither read the state's fields as they are
// recycled (a data race, or a call of the nil cancel) nor cancel the next
// run of the plan that reuses the state; nor may a second Release of the
// handle, at the same time, release that next run.
func TestS20BCancelRacingRelease(t *testing.T) {
	a := New()
	defer a.Close()
	n := NewWrapper("n", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 1, nil }), 0)
	pl, err := Compile(n)
	require.NoError(t, err)
	for range 2000 {
		run, err := a.RunPlan(context.Background(), pl, time.Minute)
		require.NoError(t, err)
		var wg sync.WaitGroup
		wg.Go(run.Cancel)
		wg.Go(func() { _ = run.Report() })
		wg.Go(func() { _ = n.ResultIn(run) })
		wg.Go(run.Release) // released twice at once: once only
		run.Release()
		next, err := a.StartPlan(context.Background(), pl, time.Minute)
		require.NoError(t, err)
		wg.Wait()
		require.NoError(t, next.Wait(context.Background()), "the next run was not cancelled by the stale handle")
		assert.Equal(t, 1, n.ResultIn(next).Value)
		next.Release()
	}
}
