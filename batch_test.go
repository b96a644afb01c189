package asynctool

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pagedSource serves items 0..total-1 in pages of size items.
type pagedSource struct {
	total, size int
	fetches     atomic.Int32
}

func (s *pagedSource) fetch(_ context.Context, page int) ([]int, error) {
	s.fetches.Add(1)
	var items []int
	for i := page * s.size; i < min((page+1)*s.size, s.total); i++ {
		items = append(items, i)
	}
	return items, nil
}

func TestRunBatchesProcessesEveryItem(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name string
		exec func() (Executor, func())
	}{
		{"exec=pool", func() (Executor, func()) {
			p := NewPool(PoolSize(3), PoolQueue(5))
			return p, func() { _ = p.Close() }
		}},
		{"exec=pool-reject", func() (Executor, func()) {
			p := NewPool(PoolSize(2), PoolQueue(0), PoolWhenFull(Reject))
			return p, func() { _ = p.Close() }
		}},
		{"exec=go", func() (Executor, func()) { return GoExecutor{}, func() {} }},
		{"exec=nil", func() (Executor, func()) { return nil, func() {} }},
		// A nil func or pointer in exec counts as none, as the doc says:
		// ExecutorFunc(nil)'s Submit would panic, and a nil *Pool refuses
		// every task, which would run every item on this goroutine.
		{"exec=nil-func", func() (Executor, func()) { return ExecutorFunc(nil), func() {} }},
		{"exec=nil-pool", func() (Executor, func()) { return (*Pool)(nil), func() {} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			exec, stop := tt.exec()
			defer stop()
			src := &pagedSource{total: 1003, size: 50}
			seen := make([]atomic.Int32, src.total)
			report, err := RunBatches(t.Context(), exec, src.fetch, func(_ context.Context, item int) error {
				seen[item].Add(1)
				switch {
				case item%100 == 7:
					return fmt.Errorf("item %d: %w", item, boom)
				case item%250 == 9:
					panic("bad item")
				}
				return nil
			})
			require.NoError(t, err)
			for i := range seen {
				require.Equal(t, int32(1), seen[i].Load(), "item %d", i)
			}
			assert.Equal(t, 21, report.Pages)
			assert.Equal(t, int32(22), src.fetches.Load(), "stops at the first empty page")
			assert.Equal(t, 1003, report.Items)
			assert.Equal(t, 10+4, report.Failed)
			assert.Equal(t, 1003-14, report.Succeeded)
			assert.Zero(t, report.Skipped)
			require.Len(t, report.Failures, 14)
			assert.Equal(t, 0, report.Failures[0].Page)
			assert.Equal(t, 7, report.Failures[0].Index)
			assert.Equal(t, 9, report.Failures[1].Index)
			var pe *PanicError
			assert.ErrorAs(t, report.Failures[1], &pe)
			assert.ErrorIs(t, report.Err(), boom)
			joined, ok := report.Err().(interface{ Unwrap() []error })
			require.True(t, ok, "Err joins the failures")
			assert.Len(t, joined.Unwrap(), 14, "one error per failed item")
			assert.EqualError(t, report.Failures[1], "asynctool: page 0 item 9: asynctool: panic: bad item")
		})
	}
}

// TestRunBatchesClaimingSourceProcessesEachRowOnce runs the job
// RunBatches' doc recommends for a table of pending tasks: fetch claims the
// next unclaimed rows (as an UPDATE setting an owner would) and ignores
// page, process marks a row done, on a small CallerRuns pool, so pages
// are fetched while rows are in flight. Every row is processed exactly
// once and the run ends when no row is left to claim.
func TestRunBatchesClaimingSourceProcessesEachRowOnce(t *testing.T) {
	const rows, claimSize = 500, 7
	var (
		mu   sync.Mutex
		next int // the rows below next are claimed
		done = make([]atomic.Int32, rows)
	)
	fetch := func(_ context.Context, _ int) ([]int, error) {
		mu.Lock()
		defer mu.Unlock()
		var ids []int
		for ; next < rows && len(ids) < claimSize; next++ {
			ids = append(ids, next)
		}
		return ids, nil
	}
	p := NewPool(PoolSize(3), PoolQueue(4))
	defer p.Close()
	report, err := RunBatches(t.Context(), p, fetch, func(_ context.Context, id int) error {
		done[id].Add(1)
		if id%50 == 0 {
			return fmt.Errorf("row %d: payment pending", id)
		}
		return nil
	})
	require.NoError(t, err)
	for id := range done {
		require.Equal(t, int32(1), done[id].Load(), "row %d", id)
	}
	assert.Equal(t, rows, report.Items)
	assert.Equal(t, (rows+claimSize-1)/claimSize, report.Pages)
	assert.Equal(t, rows/50, report.Failed)
	assert.Equal(t, rows-rows/50, report.Succeeded)
}

// TestRunBatchesBackpressure checks that with a CallerRuns pool the next
// page is not fetched while the pool is saturated: the items fetched and
// not finished never exceed the pool's workers and queue plus one page.
func TestRunBatchesBackpressure(t *testing.T) {
	const workers, queue, pageSize = 2, 3, 10
	p := NewPool(PoolSize(workers), PoolQueue(queue))
	defer p.Close()
	var fetched, finished, maxInFlight atomic.Int64
	fetch := func(_ context.Context, page int) ([]int, error) {
		if page == 30 {
			return nil, nil
		}
		inFlight := fetched.Load() - finished.Load()
		for {
			m := maxInFlight.Load()
			if inFlight <= m || maxInFlight.CompareAndSwap(m, inFlight) {
				break
			}
		}
		fetched.Add(pageSize)
		return make([]int, pageSize), nil
	}
	release := make(chan struct{})
	go func() {
		// Let items finish one at a time, slowly compared with fetching.
		for range 30 * pageSize {
			release <- struct{}{}
		}
	}()
	report, err := RunBatches(t.Context(), p, fetch, func(context.Context, int) error {
		<-release
		finished.Add(1)
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, 30*pageSize, report.Succeeded)
	assert.LessOrEqual(t, maxInFlight.Load(), int64(workers+queue+1),
		"items in flight when a page was fetched")
	assert.Positive(t, p.Stats().CallerRan, "the fetching goroutine helped")
}

func TestRunBatchesContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancelCause(t.Context())
	stop := errors.New("operator stop")
	src := &pagedSource{total: 10000, size: 100}
	p := NewPool(PoolSize(2), PoolQueue(10))
	defer p.Close()
	var processed atomic.Int32
	report, err := RunBatches(ctx, p, src.fetch, func(context.Context, int) error {
		if processed.Add(1) == 150 {
			cancel(stop)
		}
		return nil
	})
	assert.ErrorIs(t, err, stop)
	assert.Less(t, report.Items, 10000)
	assert.Equal(t, report.Items, report.Succeeded+report.Failed+report.Skipped)
	assert.Equal(t, int(processed.Load()), report.Succeeded)
	assert.Positive(t, report.Skipped)
}

func TestRunBatchesFetchError(t *testing.T) {
	bad := errors.New("db down")
	var mu sync.Mutex
	var got []string
	p := NewPool(PoolSize(1))
	defer p.Close()
	report, err := RunBatches(t.Context(), p,
		func(_ context.Context, page int) ([]string, error) {
			if page == 2 {
				// Items beside an error are ignored, as RunBatches says.
				return []string{"2a"}, bad
			}
			return []string{fmt.Sprint(page, "a"), fmt.Sprint(page, "b")}, nil
		},
		func(_ context.Context, s string) error {
			mu.Lock()
			got = append(got, s)
			mu.Unlock()
			return nil
		})
	assert.ErrorIs(t, err, bad)
	assert.ErrorContains(t, err, "page 2")
	assert.Equal(t, 2, report.Pages)
	assert.Equal(t, 4, report.Items)
	assert.ElementsMatch(t, []string{"0a", "0b", "1a", "1b"}, got)
	assert.NoError(t, report.Err())
}

// TestRunBatchesSkippedAfterLastPageReportsCause checks that items skipped
// because ctx ended after the last page was fetched make RunBatches
// return the context's cause, not nil, and that when the last fetch
// failed as ctx ended, the error names both: the fetch error alone hid
// why the items were skipped.
func TestRunBatchesSkippedAfterLastPageReportsCause(t *testing.T) {
	dbDown := errors.New("db down")
	for _, tt := range []struct {
		name     string
		fetchErr error // of the fetch of page 1, during which ctx ends
		items    int   // on page 0: all but the first are skipped
	}{
		{"last page empty", nil, 3},
		{"last fetch failed", dbDown, 3},
		{"one item skipped", nil, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			stop := errors.New("operator stop")
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			pool := NewPool(PoolSize(1), PoolQueue(10))
			defer pool.Close()
			gate, running := make(chan struct{}), make(chan struct{}, 3)
			fetch := func(_ context.Context, page int) ([]int, error) {
				if page == 0 {
					return []int{1, 2, 3}[:tt.items], nil
				}
				<-running    // item 1 is being processed
				cancel(stop) // ctx ends during the fetch of page 1
				close(gate)
				return nil, tt.fetchErr
			}
			process := func(context.Context, int) error { running <- struct{}{}; <-gate; return nil }
			rep, err := RunBatches(ctx, pool, fetch, process)
			// One worker: item 1 runs and waits for the gate, the others
			// wait in the queue and find ctx ended.
			if rep.Skipped != tt.items-1 || rep.Succeeded != 1 {
				t.Fatalf("got %d skipped, %d succeeded; want %d and 1", rep.Skipped, rep.Succeeded, tt.items-1)
			}
			if !errors.Is(err, stop) {
				t.Fatalf("got err %v with %d skipped, want the cause %v", err, rep.Skipped, stop)
			}
			if tt.fetchErr != nil {
				assert.ErrorIs(t, err, tt.fetchErr)
				assert.ErrorContains(t, err, "page 1")
			}
		})
	}
}

// TestRunBatchesStopsBeforeAnyItem checks the two ways a run ends with
// no item: a ctx already ended, which fetches nothing and returns the
// cause, and a source whose first page is empty, which is fetched once
// and is no error.
func TestRunBatchesStopsBeforeAnyItem(t *testing.T) {
	stop := errors.New("operator stop")
	ended, cancel := context.WithCancelCause(context.Background())
	cancel(stop)
	for _, tt := range []struct {
		name    string
		ctx     context.Context
		fetches int32
		err     error
	}{
		{"ctx ended", ended, 0, stop},
		{"empty source", context.Background(), 1, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			src := &pagedSource{total: 0, size: 10}
			var processed atomic.Int32
			rep, err := RunBatches(tt.ctx, nil, src.fetch, func(context.Context, int) error {
				processed.Add(1)
				return nil
			})
			if tt.err == nil {
				assert.NoError(t, err)
			} else {
				assert.ErrorIs(t, err, tt.err)
			}
			assert.Equal(t, tt.fetches, src.fetches.Load(), "fetches")
			assert.Zero(t, processed.Load(), "items processed")
			assert.Equal(t, BatchReport{}, rep)
		})
	}
}

func TestRunBatchesRejectsNilFunctions(t *testing.T) {
	fetch := func(context.Context, int) ([]int, error) { return nil, nil }
	process := func(context.Context, int) error { return nil }
	_, err := RunBatches(context.Background(), GoExecutor{}, nil, process)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "nil fetch")
	_, err = RunBatches(context.Background(), GoExecutor{}, fetch, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "nil process")
}

// TestRunBatchesCountsAnItemWhoseProcessCallsGoexit: an item whose
// process ended its goroutine with runtime.Goexit (t.FailNow) was in no
// count of the report.
func TestRunBatchesCountsAnItemWhoseProcessCallsGoexit(t *testing.T) {
	src := &pagedSource{total: 4, size: 2}
	// GoExecutor: process never runs on RunBatches' own goroutine, which
	// Goexit would end.
	rep, err := RunBatches(context.Background(), GoExecutor{}, src.fetch, func(_ context.Context, item int) error {
		if item == 1 {
			runtime.Goexit()
		}
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, 4, rep.Items)
	assert.Equal(t, 3, rep.Succeeded)
	assert.Equal(t, 1, rep.Failed)
	require.Len(t, rep.Failures, 1)
	assert.ErrorIs(t, rep.Failures[0], ErrGoexit)
}

// TestRunBatchesSubmitPanicDoesNotHang: a panic in the executor's
// Submit goes on up RunBatches' caller's stack. Since RunBatches waits
// for its items when it unwinds, it waited forever for the item whose
// Submit panicked without running or queuing it. An item Submit queued
// before panicking, and that runs later, must not upset the count.
func TestRunBatchesSubmitPanicDoesNotHang(t *testing.T) {
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
