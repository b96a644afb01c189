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
