package asynctool

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNestedRunOnABusyPool runs a graph from inside a worker, on the same
// Async, while every goroutine of its pool is busy: with WithMaxWorkers(2)
// both outer workers wait for their inner runs. The inner runs' first
// tasks must not wait in the pool's queue behind the workers that wait
// for them (they did, until the inner deadline).
func TestNestedRunOnABusyPool(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  Option
	}{
		{"own pool", WithMaxWorkers(2)},
		{"user executor", WithExecutor(NewPool(PoolSize(2), PoolQueue(16)))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a := New(tc.opt)
				defer a.Close()
				if p, ok := a.exec.(*Pool); ok && a.owned == nil {
					defer p.Close()
				}
				outer := func(id string, v int) *WorkerWrapper[int, int] {
					return NewWrapper(id, WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
						time.Sleep(time.Millisecond) // both outer nodes hold a goroutine
						inner := NewWrapper("inner", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
							return v, nil
						}), 0)
						if err := a.BeginWork(ctx, time.Second, inner); err != nil {
							return 0, err
						}
						return inner.Result().Value, nil
					}), 0)
				}
				x, y := outer("x", 7), outer("y", 8)
				start := time.Now()
				require.NoError(t, a.BeginWork(context.Background(), time.Minute, x, y))
				assert.Equal(t, ResultSuccess, x.Result().State, "%v", x.Result().Err)
				assert.Equal(t, 7, x.Result().Value)
				assert.Equal(t, 8, y.Result().Value)
				assert.Equal(t, time.Millisecond, time.Since(start), "no run waited for a deadline")
			})
		})
	}
}

// TestNestedRunRetriesAndResumesOnABusyPool: a nested run's retry and
// Resume tasks, like its first, must not wait in the pool's queue behind
// the workers that wait for the run (the first fix covered only the
// first task).
func TestNestedRunRetriesAndResumesOnABusyPool(t *testing.T) {
	for _, how := range []string{"retry", "resume"} {
		t.Run(how, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a := New(WithMaxWorkers(2))
				defer a.Close()
				outer := func(id string, v int) *WorkerWrapper[int, int] {
					return NewWrapper(id, WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
						time.Sleep(time.Millisecond) // both outer nodes hold a goroutine
						var calls atomic.Int32
						inner := NewWrapper("inner", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
							if calls.Add(1) == 1 {
								return 0, errors.New("transient")
							}
							return v, nil
						}), 0)
						if how == "retry" {
							inner.Retry(RetryPolicy{Attempts: 2})
						} else {
							inner.OnFailure(PolicySuspend)
						}
						run, err := a.Start(ctx, time.Second, inner)
						if err != nil {
							return 0, err
						}
						if how == "resume" {
							select {
							case <-run.Suspended():
								if err := run.Resume("inner", Rerun()); err != nil {
									return 0, err
								}
							case <-run.Done():
							}
						}
						if err := run.Wait(context.Background()); err != nil {
							return 0, err
						}
						return inner.Result().Value, inner.Result().Err
					}), 0)
				}
				x, y := outer("x", 7), outer("y", 8)
				start := time.Now()
				require.NoError(t, a.BeginWork(context.Background(), time.Minute, x, y))
				assert.Equal(t, ResultSuccess, x.Result().State, "%v", x.Result().Err)
				assert.Equal(t, 7, x.Result().Value)
				assert.Equal(t, 8, y.Result().Value)
				assert.Equal(t, time.Millisecond, time.Since(start), "no run waited for a deadline")
			})
		})
	}
}

// TestNestedRunNeedsTheWorkersContext pins the condition of the rule
// above: a run is nested, and so never queued behind the worker that
// waits for it, when its context is the worker's ctx or derives from
// it. Started from a worker with context.Background(), it is a run like
// any other: on a pool of one, busy with that worker, its node waits in
// the pool's queue until the run's deadline (for ever without one).
func TestNestedRunNeedsTheWorkersContext(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ctx    func(worker context.Context) context.Context
		took   time.Duration
		result ResultState
	}{
		{"worker's ctx", func(ctx context.Context) context.Context { return ctx }, 0, ResultSuccess},
		{"derived from it", func(ctx context.Context) context.Context {
			return context.WithValue(ctx, reqKey{}, 1)
		}, 0, ResultSuccess},
		{"context.Background", func(context.Context) context.Context { return context.Background() }, time.Hour, ResultTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a := New(WithMaxWorkers(1))
				defer a.Close()
				var took time.Duration
				var inner *WorkerWrapper[int, int]
				outer := NewWrapper("outer", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
					inner = NewWrapper("inner", okWorker(), 0)
					start := time.Now()
					err := a.BeginWork(tc.ctx(ctx), time.Hour, inner)
					took = time.Since(start)
					return 0, err
				}), 0)
				require.NoError(t, a.BeginWork(context.Background(), 2*time.Hour, outer))
				assert.Equal(t, tc.took, took)
				assert.Equal(t, tc.result, inner.Result().State)
			})
		})
	}
}

// A snapshot taken while a node is being started: its started bit (Ran) is
// set by the CAS into sWorking (or the claim) before attempt records its
// start time, so WriteChromeTrace refuses the snapshot of a timed run,
// saying times were not recorded.
