package asynctool

import (
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGoexitOnAFullBlockingPoolCarriesOn runs a Serial and a Keyed on a
// one-worker Pool with no queue under Block, and queues a task behind one
// that calls runtime.Goexit (a test's t.FailNow). The loop that carries
// on after the Goexit is handed to the pool, whose only worker is the
// goroutine that is exiting: asked for from that goroutine, before its
// exit has given the worker's place to a fresh goroutine, the pool has
// no room, and the queue waited for ever.
func TestGoexitOnAFullBlockingPoolCarriesOn(t *testing.T) {
	for _, mk := range orderedQueues {
		t.Run(mk.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := NewPool(PoolSize(1), PoolQueue(0), PoolWhenFull(Block))
				q := mk.open(p)
				done := make(chan struct{})
				require.NoError(t, q.submit(0, runtime.Goexit))
				require.NoError(t, q.submit(0, func() { close(done) }))
				select {
				case <-done:
				case <-time.After(time.Minute):
					t.Error("the task queued behind a Goexit has not run a minute later")
				}
				q.close()
				require.NoError(t, p.Close())
				st := q.stats()
				assert.Equal(t, uint64(2), st.Completed, "Completed (the Goexit and the next task)")
				assert.Zero(t, st.Dropped, "Dropped")
				q.empty(t)
			})
		})
	}
}

// TestCloseDoesNotWaitForTheExecutorAfterAGoexit closes a Serial (a
// Keyed) while its (a key's) task runs; the task then calls
// runtime.Goexit, with another task queued. Close waits for the running
// task's loop; the loop that carries on after the Goexit must drop the
// queued task itself rather than hand a new loop to the executor, here a
// full Pool under Block, which Close would then wait for (the Goexit's
// worker is still busy, so the pool has room only once the other worker
// is released).
func TestCloseDoesNotWaitForTheExecutorAfterAGoexit(t *testing.T) {
	for _, mk := range orderedQueues {
		t.Run(mk.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := NewPool(PoolSize(2), PoolQueue(0), PoolWhenFull(Block))
				release := make(chan struct{})
				require.NoError(t, p.Submit(func() { <-release })) // one of two workers
				q := mk.open(p)
				started, exit := make(chan struct{}), make(chan struct{})
				require.NoError(t, q.submit(0, func() { close(started); <-exit; runtime.Goexit() }))
				ran := false
				require.NoError(t, q.submit(0, func() { ran = true }))
				<-started
				done := make(chan struct{})
				go func() { q.close(); close(done) }()
				synctest.Wait() // Close waits for the running task
				close(exit)
				time.Sleep(time.Minute)
				select {
				case <-done:
				default:
					t.Error("Close still waiting for the pool a minute after the task's Goexit")
				}
				close(release)
				<-done
				require.NoError(t, p.Close())
				assert.False(t, ran, "the dropped task ran")
				st := q.stats()
				assert.Equal(t, uint64(1), st.Dropped, "Dropped")
				assert.Equal(t, uint64(1), st.Completed, "Completed (the Goexit)")
				q.empty(t)
			})
		})
	}
}
