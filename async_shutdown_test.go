package asynctool

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// deafWorker returns a worker that waits for gate, ignoring its ctx, and
// then returns 1.
func deafWorker(gate <-chan struct{}) WorkerFunc[int, int] {
	return func(context.Context, int, Wrappers) (int, error) {
		<-gate
		return 1, nil
	}
}

// TestShutdownWaitsForRuns checks that Shutdown refuses new runs at once
// and returns nil once the runs in flight have ended and their workers
// have returned.
func TestShutdownWaitsForRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		gate := make(chan struct{})
		w := NewWrapper("w", deafWorker(gate), 0)
		r, err := a.Start(context.Background(), time.Minute, w)
		require.NoError(t, err)
		synctest.Wait() // w is running
		shut := make(chan error, 1)
		go func() { shut <- a.Shutdown(context.Background()) }()
		synctest.Wait()
		select {
		case err := <-shut:
			t.Fatalf("Shutdown returned %v while a worker was running", err)
		default:
		}
		later := NewWrapper("later", okWorker(), 0)
		assert.ErrorIs(t, a.BeginWork(context.Background(), time.Minute, later), ErrClosed)
		close(gate)
		require.NoError(t, <-shut)
		require.NoError(t, r.Wait(context.Background()))
		assert.Equal(t, WorkResult[int]{Value: 1, State: ResultSuccess}, w.Result())
		require.NoError(t, a.Close(), "Close after Shutdown")
	})
}

// TestShutdownReturnsWhenCtxEnds checks that Shutdown returns ctx's error
// when ctx ends before a worker that ignores its own ctx returns, and that
// the Async finishes closing once it does.
func TestShutdownReturnsWhenCtxEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		gate := make(chan struct{})
		w := NewWrapper("w", deafWorker(gate), 0)
		start := time.Now()
		err := a.BeginWork(context.Background(), time.Second, w)
		require.ErrorIs(t, err, context.DeadlineExceeded, "the run ends at its deadline")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err = a.Shutdown(ctx)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, 6*time.Second, time.Since(start), "Shutdown waited for its ctx, not for the worker")
		assert.ErrorIs(t, a.BeginWork(context.Background(), time.Minute, NewWrapper("later", okWorker(), 0)), ErrClosed)

		synctest.Wait()
		assert.False(t, a.owned.closed.Load(), "the pool was released while a worker was running")
		close(gate) // the worker returns, and Shutdown's goroutine finishes the close
		synctest.Wait()
		assert.True(t, a.owned.closed.Load(), "Shutdown's goroutine released the pool")
		require.NoError(t, a.Close())
		assert.Equal(t, ResultTimeout, w.Result().State)
	})
}

// TestShutdownWithCtxDone checks that a ctx already done makes Shutdown
// return its error even with nothing to wait for, and still close the
// Async: it refuses new runs at once, and its goroutine releases the pool.
func TestShutdownWithCtxDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		require.NoError(t, a.BeginWork(context.Background(), time.Minute, NewWrapper("w", okWorker(), 0)))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		assert.ErrorIs(t, a.Shutdown(ctx), context.Canceled)
		assert.ErrorIs(t, a.BeginWork(context.Background(), time.Minute, NewWrapper("later", okWorker(), 0)), ErrClosed)
		synctest.Wait()
		assert.True(t, a.owned.closed.Load(), "Shutdown's goroutine released the pool")
		require.NoError(t, a.Close())
		require.NoError(t, a.Shutdown(context.Background()), "a second Shutdown finds nothing to wait for")
	})
}
