package asynctool

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReleaseOfAPendingRunEndsIt releases a run of a plan whose node is
// pending and which has no deadline, before the run ended. Once released
// the handle, the only way to Resume or Cancel the run, reaches nothing,
// so the run must end there: before, it stayed pending for ever and
// Async.Close, which waits for runs still open, never returned.
func TestReleaseOfAPendingRunEndsIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		x := NewWrapper("x", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			return 0, errors.New("needs a look")
		}), 0).OnFailure(PolicySuspend)
		pl, err := Compile(x)
		require.NoError(t, err)
		run, err := a.StartPlan(context.Background(), pl, 0)
		require.NoError(t, err)
		<-run.Suspended()
		run.Release()
		select {
		case <-run.Done():
		case <-time.After(time.Hour):
			t.Fatal("the released run is still pending")
		}
		closed := make(chan struct{})
		go func() { a.Close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(time.Hour):
			t.Fatal("Close waits for a released run that nothing can reach")
		}
	})
}

// TestReleaseBeforeTheEndCancelsTheRun releases a run of a plan while its
// worker runs: the worker's context is cancelled, as by Run.Cancel, and
// the next run of the plan gets a fresh state once the first has ended.
func TestReleaseBeforeTheEndCancelsTheRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		var sawCancel bool
		x := NewWrapper("x", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
			select {
			case <-ctx.Done():
				sawCancel = errors.Is(context.Cause(ctx), context.Canceled)
				return 0, ctx.Err()
			case <-time.After(time.Minute):
				return 1, nil
			}
		}), 0)
		pl, err := Compile(x)
		require.NoError(t, err)
		run, err := a.StartPlan(context.Background(), pl, time.Hour)
		require.NoError(t, err)
		synctest.Wait() // x is running
		start := time.Now()
		run.Release()
		<-run.Done()
		synctest.Wait() // the worker has returned
		assert.Zero(t, time.Since(start), "the run ended at once")
		assert.True(t, sawCancel, "the worker's context was cancelled")
		assert.Equal(t, WorkResult[int]{}, x.ResultIn(run), "a released run shows no result")

		run2, err := a.RunPlan(context.Background(), pl, time.Hour)
		assert.NoError(t, err, "the next run is not cancelled")
		assert.Equal(t, WorkResult[int]{Value: 1, State: ResultSuccess}, x.ResultIn(run2))
		run2.Release()
	})
}
