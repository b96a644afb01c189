package asynctool

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestRunBatchesPanicInFetchLeavesNoItemRunning checks that a panic or a
// runtime.Goexit in fetch reaches RunBatches' caller only after the items
// in flight, on a user executor, have been told to stop and have
// returned.
func TestRunBatchesPanicInFetchLeavesNoItemRunning(t *testing.T) {
	for _, tt := range []struct {
		name  string
		abort func()
		want  any // what RunBatches' caller recovers
	}{
		{"panic", func() { panic("fetch failed") }, "fetch failed"},
		{"goexit", runtime.Goexit, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var (
				running  sync.WaitGroup
				returned atomic.Int32
				release  = make(chan struct{}) // in case the items are never told
				causes   sync.Map
			)
			t.Cleanup(func() { close(release) })
			running.Add(3)
			fetch := func(_ context.Context, page int) ([]int, error) {
				if page == 1 {
					running.Wait() // the page-0 items are all running
					tt.abort()
				}
				return []int{1, 2, 3}, nil
			}
			process := func(ctx context.Context, item int) error {
				running.Done()
				defer returned.Add(1)
				select {
				case <-ctx.Done():
					causes.Store(item, context.Cause(ctx))
				case <-release:
				}
				return nil
			}
			type end struct {
				recovered any
				returned  int32 // items returned when RunBatches' caller ended
			}
			ended := make(chan end, 1)
			go func() {
				defer func() { ended <- end{recover(), returned.Load()} }()
				_, _ = RunBatches(context.Background(), GoExecutor{}, fetch, process)
				t.Error("RunBatches returned")
			}()
			e := <-ended
			assert.Equal(t, tt.want, e.recovered)
			assert.Equal(t, int32(3), e.returned, "every item in flight returned before RunBatches' caller ended")
			for item := 1; item <= 3; item++ {
				cause, ok := causes.Load(item)
				if assert.True(t, ok, "item %d was not told to stop", item) {
					assert.ErrorIs(t, cause.(error), errBatchAborted, "item %d", item)
				}
			}
		})
	}
}

// TestRunBatchesGoexitOnTheCallerLeavesNoItemRunning checks the same for
// a process that calls runtime.Goexit on RunBatches' own goroutine (its
// item refused by the executor): RunBatches' caller ends, but only once
// the other items in flight have returned.
func TestRunBatchesGoexitOnTheCallerLeavesNoItemRunning(t *testing.T) {
	var (
		running  sync.WaitGroup
		returned atomic.Int32
		release  = make(chan struct{})
		calls    atomic.Int32
	)
	t.Cleanup(func() { close(release) })
	running.Add(2)
	// The first two items go to goroutines, the third is refused and runs
	// on RunBatches' goroutine.
	exec := ExecutorFunc(func(task func()) error {
		if calls.Add(1) > 2 {
			return errors.New("full")
		}
		go task()
		return nil
	})
	fetch := func(_ context.Context, page int) ([]int, error) {
		if page > 0 {
			return nil, nil
		}
		return []int{1, 2, 3}, nil
	}
	process := func(ctx context.Context, item int) error {
		if item == 3 {
			running.Wait()
			runtime.Goexit()
		}
		running.Done()
		defer returned.Add(1)
		select {
		case <-ctx.Done():
		case <-release:
		}
		return nil
	}
	ended := make(chan int32)
	go func() {
		defer func() { ended <- returned.Load() }()
		_, _ = RunBatches(context.Background(), exec, fetch, process)
	}()
	assert.Equal(t, int32(2), <-ended, "the items in flight returned before RunBatches' goroutine ended")
}
