package asynctool

import (
	"context"
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

// TestKeyedExecutorRunsTheLoopThenPanics: an executor that runs a key's
// drain loop before its Submit panics has run the key's tasks and
// recycled its queue. The panic goes on up Keyed.Submit's caller's
// stack, and the recycled queue is left alone: no second loop drains it
// (which would uncount the key twice), and it serves the next key.
func TestKeyedExecutorRunsTheLoopThenPanics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		exec := ExecutorFunc(func(task func()) error { task(); panic("executor broke") })
		k := NewKeyed[int](exec)
		var ran []int
		for key := range 3 {
			assert.Equal(t, "executor broke", panicValueOf(func() {
				_ = k.Submit(key, func() { ran = append(ran, key) })
			}))
			synctest.Wait() // a loop started for the queue would run now
			assert.Zero(t, k.Stats().Keys, "after key %d", key)
		}
		require.NoError(t, k.Shutdown(context.Background()))
		assert.Equal(t, []int{0, 1, 2}, ran)
		assert.Equal(t, uint64(3), k.Stats().Completed)
		assertNoKeyQueues(t, k)
	})
}
