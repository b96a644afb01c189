package asynctool

import (
	"context"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestKeyedCloseDoesNotWaitForTheExecutor closes a Keyed whose keys'
// drain loops wait in its Pool's queue behind a busy worker. No task of
// the Keyed is running, so Close (and a Shutdown whose ctx ends) drops
// the queued tasks itself, without waiting for the pool to get to the
// loops; those loops, when the pool runs them, find nothing left.
func TestKeyedCloseDoesNotWaitForTheExecutor(t *testing.T) {
	for _, stop := range []struct {
		name string
		call func(*Keyed[int]) error
		want error
	}{
		{"Close", func(k *Keyed[int]) error { k.Close(); return nil }, nil},
		{"Shutdown", func(k *Keyed[int]) error {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			return k.Shutdown(ctx)
		}, context.DeadlineExceeded},
	} {
		t.Run(stop.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := NewPool(PoolSize(1), PoolQueue(8))
				release := make(chan struct{})
				require.NoError(t, p.Submit(func() { <-release })) // the only worker
				k := NewKeyed[int](p)
				ran := 0
				for key := range 3 {
					require.NoError(t, k.Submit(key, func() { ran++ })) // loops queued in p
					require.NoError(t, k.Submit(key, func() { ran++ }))
				}
				done := make(chan error, 1)
				go func() { done <- stop.call(k) }()
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
				require.NoError(t, p.Close()) // runs the loops the pool had queued
				assert.Zero(t, ran, "dropped tasks ran")
				st := k.Stats()
				assert.Equal(t, uint64(6), st.Dropped, "Dropped")
				assert.Zero(t, st.Completed, "Completed")
				assert.Zero(t, st.Keys, "Keys")
				assertNoKeyQueues(t, k)
				assert.ErrorIs(t, k.Submit(1, func() {}), ErrSerialClosed)
			})
		})
	}
}

// TestKeyedCloseDoesNotWaitForTheExecutorAfterAGoexit closes a Keyed
// while a key's task runs; the task then calls runtime.Goexit, with
// another task of the key queued. Close found the key's queue held, so
// it waits for that loop; the loop that carries on after the Goexit must
// drop the queued task itself rather than hand a new loop to the
// executor, here a full Pool under Block, which Close would then wait
// for (the Goexit's worker is still busy, so the pool has room only once
// the other worker is released).
func TestKeyedCloseDoesNotWaitForTheExecutorAfterAGoexit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := NewPool(PoolSize(2), PoolQueue(0), PoolWhenFull(Block))
		release := make(chan struct{})
		require.NoError(t, p.Submit(func() { <-release })) // one of two workers
		k := NewKeyed[int](p)
		started, exit := make(chan struct{}), make(chan struct{})
		require.NoError(t, k.Submit(1, func() { close(started); <-exit; runtime.Goexit() }))
		ran := false
		require.NoError(t, k.Submit(1, func() { ran = true }))
		<-started
		done := make(chan struct{})
		go func() { k.Close(); close(done) }()
		synctest.Wait() // Close waits for key 1's running task
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
		st := k.Stats()
		assert.Equal(t, uint64(1), st.Dropped, "Dropped")
		assert.Equal(t, uint64(1), st.Completed, "Completed (the Goexit)")
		assert.Zero(t, st.Keys, "Keys")
		assertNoKeyQueues(t, k)
	})
}
