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

// TestSerialShutdownOfAnIdleSerialKeepsItsDeadline shuts down an idle
// Serial whose executor is a full Pool under Block. There is nothing to
// run, so Shutdown must not wait for room in the pool: it returns nil
// at once, well inside its ctx.
func TestSerialShutdownOfAnIdleSerialKeepsItsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := NewPool(PoolSize(1), PoolQueue(0), PoolWhenFull(Block))
		s := NewSerial(p)
		require.NoError(t, s.Submit(func() {})) // the Serial has worked before
		synctest.Wait()
		release := make(chan struct{})
		require.NoError(t, p.Submit(func() { <-release })) // the only worker
		synctest.Wait()

		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- s.Shutdown(ctx) }()
		time.Sleep(time.Minute)
		select {
		case err := <-done:
			assert.NoError(t, err, "Shutdown of an idle Serial")
			close(release)
		default:
			t.Error("Shutdown of an idle Serial was still waiting for the pool a minute after its 1s ctx")
			close(release)
			<-done
		}
		require.NoError(t, p.Close())
	})
}

// TestSerialShutdownOfAnIdleSerialCallsNoExecutor shuts down, and
// closes, idle Serials whose executor's Submit panics. Nothing is left to
// run, so the executor is not called and its panic does not reach the
// caller of Shutdown or Close.
func TestSerialShutdownOfAnIdleSerialCallsNoExecutor(t *testing.T) {
	calls := 0
	panicking := ExecutorFunc(func(func()) error {
		calls++
		panic("executor's Submit panicked")
	})
	s := NewSerial(panicking)
	require.NotPanics(t, func() { assert.NoError(t, s.Shutdown(context.Background())) })
	require.NotPanics(t, s.Close)
	s = NewSerial(panicking)
	require.NotPanics(t, s.Close)
	assert.Equal(t, 0, calls, "calls of the executor's Submit")
}

// TestSerialShutdownWhileTheExecutorPanics submits to a Serial whose
// executor's Submit panics while a Shutdown waits: the panic goes to the
// submitter, whose task still runs, and Shutdown returns nil once it has.
func TestSerialShutdownWhileTheExecutorPanics(t *testing.T) {
	s := NewSerial(ExecutorFunc(func(func()) error { panic("executor's Submit panicked") }))
	release := make(chan struct{})
	var ran []int // no lock: the race detector checks the tasks are ordered
	require.Panics(t, func() { _ = s.Submit(func() { <-release; ran = append(ran, 1) }) })
	require.NoError(t, s.Submit(func() { ran = append(ran, 2) })) // the loop is running
	done := make(chan error, 1)
	go func() { done <- s.Shutdown(context.Background()) }()
	require.Eventually(t, func() bool { return errors.Is(s.Submit(func() {}), ErrSerialClosed) },
		10*time.Second, time.Millisecond, "Submit after Shutdown began")
	close(release)
	require.NoError(t, <-done)
	assert.Equal(t, []int{1, 2}, ran)
}

// TestSerialStatsCountNoMarker checks that Queued counts only tasks: the
// marker Shutdown or Close queues behind the accepted tasks, to learn
// when they have been taken, is not one.
func TestSerialStatsCountNoMarker(t *testing.T) {
	for _, stop := range []struct {
		name string
		call func(*Serial)
	}{
		{"Shutdown", func(s *Serial) { _ = s.Shutdown(context.Background()) }},
		{"Close", (*Serial).Close},
	} {
		t.Run(stop.name, func(t *testing.T) {
			s := NewSerial(nil)
			release := make(chan struct{})
			started := make(chan struct{})
			require.NoError(t, s.Submit(func() { close(started); <-release }))
			<-started
			require.NoError(t, s.Submit(func() {}))
			assert.Equal(t, 1, s.Stats().Queued, "Queued before "+stop.name)
			done := make(chan struct{})
			go func() { stop.call(s); close(done) }()
			queued := 1 // and the tasks accepted until Submit is refused
			require.Eventually(t, func() bool {
				err := s.Submit(func() {})
				if err == nil {
					queued++
				}
				return errors.Is(err, ErrSerialClosed)
			}, 10*time.Second, time.Millisecond, "Submit after %s began", stop.name)
			require.Eventually(t, func() bool {
				s.mu.Lock()
				defer s.mu.Unlock()
				return len(s.queue) == queued+1
			}, 10*time.Second, time.Millisecond, "%s's marker queued", stop.name)
			assert.Equal(t, queued, s.Stats().Queued, "Queued while "+stop.name+" waits")
			close(release)
			<-done
			assert.Equal(t, 0, s.Stats().Queued, "Queued after "+stop.name)
		})
	}
}

// serialStop is a way to stop a Serial, and what it returns.
type serialStop struct {
	name string
	call func(*Serial) error
	want error
}

// stopsThatMustNotWait are Close and a Shutdown whose ctx ends after a
// second: neither may wait for an executor that has no room, once no
// task of the Serial runs.
func stopsThatMustNotWait() []serialStop {
	return []serialStop{
		{"Close", func(s *Serial) error { s.Close(); return nil }, nil},
		{"Shutdown", func(s *Serial) error {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			return s.Shutdown(ctx)
		}, context.DeadlineExceeded},
	}
}

// TestSerialCloseDoesNotWaitForTheExecutor closes a Serial whose drain
// loop waits in its Pool's queue behind a busy worker. No task of the
// Serial is running, so Close (and a Shutdown whose ctx ends) drops the
// queued tasks and returns without waiting for the pool to get to the
// loop; the loop, when the pool runs it, finds nothing left.
func TestSerialCloseDoesNotWaitForTheExecutor(t *testing.T) {
	for _, stop := range stopsThatMustNotWait() {
		t.Run(stop.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := NewPool(PoolSize(1), PoolQueue(4))
				release := make(chan struct{})
				require.NoError(t, p.Submit(func() { <-release })) // the only worker
				s := NewSerial(p)
				ran := false
				require.NoError(t, s.Submit(func() { ran = true })) // its loop is queued in p
				done := make(chan error, 1)
				go func() { done <- stop.call(s) }()
				time.Sleep(time.Minute)
				select {
				case err := <-done:
					assert.Equal(t, stop.want, err)
				default:
					t.Errorf("%s still waiting for the pool a minute later", stop.name)
					close(release)
					<-done
					release = nil
				}
				if release != nil {
					close(release)
				}
				require.NoError(t, p.Close()) // runs the loop the pool had queued
				assert.False(t, ran, "the dropped task ran")
				st := s.Stats()
				assert.Equal(t, uint64(1), st.Dropped, "Dropped")
				assert.Equal(t, uint64(0), st.Completed, "Completed")
				assert.ErrorIs(t, s.Submit(func() {}), ErrSerialClosed)
			})
		})
	}
}

// TestSerialCloseDoesNotWaitForABlockedTimer closes a Serial whose
// delayed task has come due while its executor, a full Pool under Block,
// has no room for the drain loop: the timer waits in the pool's Submit.
// The task is queued and no task runs, so Close (and a Shutdown whose ctx
// ends) drops it and returns without waiting for the pool.
func TestSerialCloseDoesNotWaitForABlockedTimer(t *testing.T) {
	for _, stop := range stopsThatMustNotWait() {
		t.Run(stop.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := NewPool(PoolSize(1), PoolQueue(0), PoolWhenFull(Block))
				release := make(chan struct{})
				require.NoError(t, p.Submit(func() { <-release })) // the only worker
				s := NewSerial(p)
				ran := false
				cancel, err := s.SubmitAfter(time.Second, func() { ran = true })
				require.NoError(t, err)
				time.Sleep(2 * time.Second) // its timer waits for room in p
				done := make(chan error, 1)
				go func() { done <- stop.call(s) }()
				time.Sleep(time.Minute)
				select {
				case err := <-done:
					assert.Equal(t, stop.want, err)
					close(release)
				default:
					t.Errorf("%s still waiting for the pool a minute later", stop.name)
					close(release)
					<-done
				}
				require.NoError(t, p.Close())
				assert.False(t, ran, "the dropped task ran")
				assert.False(t, cancel(), "cancel of a dropped task")
				st := s.Stats()
				assert.Equal(t, uint64(1), st.Dropped, "Dropped")
				assert.Zero(t, st.Completed, "Completed")
			})
		})
	}
}
