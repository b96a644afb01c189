package asynctool

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestS18VRunBatchesSubmitPanicDoesNotHang: a panic in the executor's
// Submit goes on up RunBatches' caller's stack. Since RunBatches waits
// for its items when it unwinds, it waited forever for the item whose
// Submit panicked without running or queuing it. An item Submit queued
// before panicking, and that runs later, must not upset the count.
func TestS18VRunBatchesSubmitPanicDoesNotHang(t *testing.T) {
	fetch := func(_ context.Context, page int) ([]int, error) {
		if page > 0 {
			return nil, nil
		}
		return []int{1, 2}, nil
	}
	for _, tt := range []struct {
		name  string
		queue bool // Submit queues the task before it panics
	}{
		{"dropped", false},
		{"queued", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var (
				calls     atomic.Int32
				processed atomic.Int32
				queued    = make(chan func(), 2)
			)
			exec := ExecutorFunc(func(task func()) error {
				if calls.Add(1) == 1 {
					go task() // the first item runs
					return nil
				}
				if tt.queue {
					queued <- task
				}
				panic("executor broke")
			})
			process := func(context.Context, int) error {
				processed.Add(1)
				return nil
			}
			done := make(chan any, 1)
			go func() {
				defer func() { done <- recover() }()
				_, _ = RunBatches(context.Background(), exec, fetch, process)
			}()
			select {
			case v := <-done:
				assert.Equal(t, "executor broke", v)
			case <-time.After(10 * time.Second):
				t.Fatal("RunBatches hung after its executor's Submit panicked")
			}
			if tt.queue {
				before := processed.Load() // the first item, run or skipped
				assert.NotPanics(t, func() { (<-queued)() }, "the queued item, run after RunBatches unwound")
				assert.Equal(t, before, processed.Load(), "the abandoned item does not run")
			}
		})
	}
}
