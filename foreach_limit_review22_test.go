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

// saturatedRuns is an executor of one goroutine at a time that runs a
// task on the caller's goroutine when that one is taken: a caller-runs
// policy, which Executor allows.
type saturatedRuns struct{ busy atomic.Bool }

func (e *saturatedRuns) Submit(task func()) error {
	if !e.busy.CompareAndSwap(false, true) {
		task()
		return nil
	}
	go func() {
		defer e.busy.Store(false)
		task()
	}()
	return nil
}

// With an executor that runs helpers on the caller's goroutine, the items
// run once each, never more than Limit at once, but not in the list's
// order, as ForEach.Limit's comment says: the goroutine that shares the
// items runs the helper it starts, and the items that helper's end hands
// slots to, before the item it kept (1 2 3 4 5 0, one at a time; 5 4 3 2
// 1 0 on 2cc118f, before admit).
func TestForEachLimitCallerRunsExecutor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New(WithExecutor(&saturatedRuns{}))
		defer a.Close()
		var g gauge
		var mu sync.Mutex
		var order []int
		f := sleepItems(6, 2, time.Millisecond, &g)
		inner := f.Worker
		f.Worker = WorkerFunc[int, int](func(ctx context.Context, i int, all Wrappers) (int, error) {
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			return inner.Action(ctx, i, all)
		})
		each := NewWrapper("each", f, 0)
		require.NoError(t, a.BeginWork(context.Background(), time.Minute, each))
		assert.LessOrEqual(t, g.most.Load(), int32(2))
		assert.ElementsMatch(t, []int{0, 1, 2, 3, 4, 5}, order)
		for i, r := range each.Result().Value {
			assert.Equal(t, i*10, r.Value)
		}
	})
}
