package asynctool

import (
	"context"
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
// for them (helper-38's review: they did, until the inner deadline).
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
