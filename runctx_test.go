package asynctool

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type runCtxTestKey struct{}

// The workers' context, which lives in the run's handle, behaves as the
// context.WithValue it replaces: the run's deadline, the caller's values
// and cause, children cancelled with it, and a context kept past the run
// stays done after its state serves another run.
func TestWorkersContextIsTheRunsMarkedContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		cause := errors.New("the caller's cause")
		parent, cancel := context.WithDeadlineCause(context.WithValue(context.Background(), runCtxTestKey{}, "v"), time.Now().Add(time.Hour), cause)
		defer cancel()
		var kept []context.Context
		var runs []*runState
		w := NewWrapper("w", WorkerFunc[int, int](func(ctx context.Context, _ int, all Wrappers) (int, error) {
			kept = append(kept, ctx)
			runs = append(runs, all.r)
			d, ok := ctx.Deadline()
			assert.True(t, ok)
			assert.Equal(t, time.Now().Add(50*time.Millisecond), d, "the run's deadline")
			assert.Equal(t, "v", ctx.Value(runCtxTestKey{}), "the caller's values")
			assert.Same(t, all.r.ctx, ctx.Value(inRunKey{}), "marked with its run")
			child, stop := context.WithCancel(ctx)
			defer stop()
			<-child.Done() // cancelled with the run's context, at its deadline
			assert.ErrorIs(t, context.Cause(ctx), context.DeadlineExceeded)
			return 0, ctx.Err()
		}), 0)
		pl, err := Compile(w)
		require.NoError(t, err)
		for range 2 {
			r, err := a.RunPlan(parent, pl, 50*time.Millisecond)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			synctest.Wait()
			r.Release()
		}
		require.Len(t, kept, 2)
		if runs[0] == runs[1] { // a sync.Pool may drop the state (it does at random under -race)
			t.Log("the second run reused the first one's state")
		}
		assert.NotSame(t, kept[0], kept[1], "each run's workers have a context of its own")
		assert.ErrorIs(t, kept[0].Err(), context.DeadlineExceeded, "a context kept past its run stays done")

		cancel()
		assert.Equal(t, context.DeadlineExceeded, kept[0].Err(), "and keeps its own error")
	})
}

// The caller's cause reaches the workers through the run's context.
func TestWorkersContextCarriesTheCallersCause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		cause := errors.New("client went away")
		parent, cancel := context.WithCancelCause(context.Background())
		// The run ends with its context, without waiting for the worker
		// to return: the worker hands its cause over a channel.
		seen := make(chan error, 1)
		w := NewWrapper("w", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
			cancel(cause)
			<-ctx.Done()
			seen <- context.Cause(ctx)
			return 0, ctx.Err()
		}), 0)
		err := a.BeginWork(parent, time.Minute, w)
		require.ErrorIs(t, err, cause)
		assert.Equal(t, cause, <-seen)
	})
}

// A context derived from the workers' context is registered with the
// run's, as it would be under a context.WithValue: the context package
// starts no goroutine to watch it (it does for a parent it cannot see
// through).
func TestWorkersContextChildrenStartNoGoroutine(t *testing.T) {
	a := New()
	defer a.Close()
	grew := -1
	w := NewWrapper("w", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
		before := runtime.NumGoroutine()
		var cancels []context.CancelFunc
		for range 100 {
			_, c := context.WithTimeout(ctx, time.Hour)
			cancels = append(cancels, c)
		}
		grew = runtime.NumGoroutine() - before
		for _, c := range cancels {
			c()
		}
		return 0, nil
	}), 0)
	require.NoError(t, a.BeginWork(context.Background(), time.Minute, w))
	assert.Less(t, grew, 50, "100 children of the workers' context")
}

// A SubPlan's Input that returns a context kept from an earlier run of
// the same plan is refused, as one from another run is, even when this
// run reuses the earlier one's state: the mark on the workers' context is
// the run's, not its state's. The sub-run would otherwise start with the
// earlier run's context, done since that run ended.
func TestSubPlanRefusesAContextKeptFromAnEarlierRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		inner := NewWrapper("inner", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 1, nil }), 0)
		innerPlan, err := Compile(inner)
		require.NoError(t, err)
		var kept context.Context
		node := NewWrapper("sub", SubPlan[int, int]{Plan: innerPlan,
			Input: func(ctx context.Context, _ int, _ Wrappers) (context.Context, error) {
				if kept == nil {
					kept = ctx
				}
				return kept, nil
			},
			Output: func(*Run) (int, error) { return 1, nil }}, 0)
		pl, err := Compile(node)
		require.NoError(t, err)
		reused := false
		var states []*runState
		for k := range 20 { // a sync.Pool may drop the state: under -race it does at random
			r, err := a.RunPlan(context.Background(), pl, time.Minute)
			require.NoError(t, err, "a node's failure is its result's")
			states = append(states, r.runState)
			res := node.ResultIn(r)
			if k == 0 {
				assert.NoError(t, res.Err, "the first run's own context")
			} else {
				assert.ErrorContains(t, res.Err, "does not derive from the node's", "run %d", k)
				reused = reused || states[k] == states[0]
			}
			r.Release()
		}
		if !reused {
			t.Log("no run reused the first one's state")
		}
	})
}
