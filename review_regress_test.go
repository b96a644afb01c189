package asynctool

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Regression tests for the findings of a code review: user code that
// panics or calls runtime.Goexit outside a worker's Action, Close with an
// open run, and stale times on recycled runs.

type panickyDefaulter struct{}

func (panickyDefaulter) Action(context.Context, int, Wrappers) (int, error) { return 0, errBoom }
func (panickyDefaulter) DefaultValue() int                                  { panic("bad default") }

func TestPanickingDefaulterDoesNotHang(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		w := NewWrapper("w", Worker[int, int](panickyDefaulter{}), 0)
		err := a.BeginWork(context.Background(), 50*time.Millisecond, w)
		var cpe *CallbackPanicError
		require.ErrorAs(t, err, &cpe)
		assert.Equal(t, "DefaultValue", cpe.Method)
		assert.Equal(t, WorkResult[int]{State: ResultException, Err: errBoom}, w.Result(), "the zero value stands in")
	})
}

func TestGoexitInCustomJoin(t *testing.T) {
	a := newAsync(t)
	up := NewWrapper("up", okWorker(), 0)
	down := NewWrapper("down", okWorker(), 0).Depend(up, true).
		Join(CustomJoin(func([]Upstream) Decision { runtime.Goexit(); return DecideRun }))
	other := NewWrapper("other", okWorker(), 0).Depend(up, true)
	require.NoError(t, a.BeginWork(context.Background(), time.Minute, up))
	assert.ErrorIs(t, down.Result().Err, ErrGoexit)
	assert.Equal(t, ResultSuccess, other.Result().State, "the other successors are still updated")
}

func TestGoexitInHooks(t *testing.T) {
	for _, h := range []*Hooks{
		{OnNodeStart: func(context.Context, NodeEvent) context.Context { runtime.Goexit(); return nil }},
		{OnNodeEnd: func(context.Context, NodeEvent) { runtime.Goexit() }},
	} {
		a := newAsync(t, WithHooks(h))
		x := NewWrapper("x", okWorker(), 0)
		y := NewWrapper("y", okWorker(), 0).Depend(x, true)
		_ = a.BeginWork(context.Background(), time.Minute, x)
		assert.NotEqual(t, ResultDefault, y.Result().State, "every node ends")
	}
}

func TestPanickingRetryPolicy(t *testing.T) {
	a := newAsync(t)
	w := NewWrapper("w", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 0, errBoom }), 0).
		Retry(RetryPolicy{Attempts: 3, Retryable: func(error) bool { panic("bad predicate") }})
	b := NewWrapper("b", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 0, errBoom }), 0).
		Retry(RetryPolicy{Attempts: 3, Backoff: func(int) time.Duration { panic("bad backoff") }})
	require.NoError(t, a.BeginWork(context.Background(), time.Minute, w, b))
	for _, n := range []*WorkerWrapper[int, int]{w, b} {
		var pe *PanicError
		require.ErrorAs(t, n.Result().Err, &pe, n.ID())
		assert.False(t, errors.Is(n.Result().Err, ErrGoexit))
	}
}

func TestCloseWaitsForOpenRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		var calls atomic.Int32
		w := NewWrapper("w", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			if calls.Add(1) == 1 {
				return 0, errBoom
			}
			return 1, nil
		}), 0).OnFailure(PolicySuspend)
		r, err := a.Start(context.Background(), time.Minute, w)
		require.NoError(t, err)
		synctest.Wait() // w is pending
		closed := make(chan struct{})
		go func() { _ = a.Close(); close(closed) }()
		synctest.Wait()
		select {
		case <-closed:
			t.Fatal("Close returned while a run was open")
		default:
		}
		require.NoError(t, r.Resume("w", Rerun()))
		<-closed
		assert.Equal(t, WorkResult[int]{Value: 1, State: ResultSuccess}, w.Result())
	})
}

func TestContinueAppliesToNodeTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		slow := NewWrapper("slow", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
			<-ctx.Done()
			return 0, ctx.Err()
		}), 0).Timeout(10 * time.Millisecond).OnFailure(PolicyContinue)
		down := NewWrapper("down", okWorker(), 0).Depend(slow, true)
		require.NoError(t, a.BeginWork(context.Background(), time.Minute, slow))
		assert.Equal(t, ResultTimeout, slow.Result().State)
		assert.Equal(t, ResultSuccess, down.Result().State)
	})
}

func TestUntimedRecycledRunHasNoStart(t *testing.T) {
	pl, err := Compile(NewWrapper("w", okWorker(), 0))
	require.NoError(t, err)
	timed := newAsync(t, WithTimings(true))
	plain := newAsync(t)
	r, err := timed.RunPlan(context.Background(), pl, 0)
	require.NoError(t, err)
	r.Release()
	for range 20 {
		r, err = plain.RunPlan(context.Background(), pl, 0)
		require.NoError(t, err)
		require.True(t, r.Report().Start.IsZero())
		r.Release()
	}
}
