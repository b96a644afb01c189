package asynctool

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// submitUntilRefused runs n goroutines that Submit to s until it refuses,
// counting the tasks accepted and those that ran.
func submitUntilRefused(s *Serial, n int, accepted, ran *atomic.Int64) *sync.WaitGroup {
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for {
				if s.Submit(func() { ran.Add(1) }) != nil {
					return
				}
				accepted.Add(1)
			}
		})
	}
	return &wg
}

// TestSerialShutdownRunsEveryAcceptedTask: a Submit that returned nil
// while Shutdown began had its task dropped by Shutdown's final Close,
// and Shutdown still returned nil, although it promises that every
// accepted task has run. Submit looked at refuse before taking mu, so
// its task could land behind Shutdown's marker. Keyed, which checks
// under the shard's lock, had no such gap.
func TestSerialShutdownRunsEveryAcceptedTask(t *testing.T) {
	for i := range 1000 {
		s := NewSerial(GoExecutor{})
		var accepted, ran atomic.Int64
		wg := submitUntilRefused(s, max(4, runtime.GOMAXPROCS(0)), &accepted, &ran)
		runtime.Gosched()
		err := s.Shutdown(context.Background())
		wg.Wait()
		require.NoError(t, err)
		st := s.Stats()
		require.Equal(t, accepted.Load(), ran.Load(), "iteration %d: an accepted task did not run, Dropped %d", i, st.Dropped)
		require.Zero(t, st.Dropped, "iteration %d", i)
	}
}

// TestSerialCloseSettlesAcceptedTasks: once Close has returned, every task
// whose Submit returned nil has run or been counted as dropped; none is
// dropped afterwards.
func TestSerialCloseSettlesAcceptedTasks(t *testing.T) {
	for i := range 1000 {
		s := NewSerial(GoExecutor{})
		var accepted, ran atomic.Int64
		wg := submitUntilRefused(s, max(4, runtime.GOMAXPROCS(0)), &accepted, &ran)
		runtime.Gosched()
		s.Close()
		st := s.Stats() // before the submitters are known to be done
		wg.Wait()
		require.Equal(t, uint64(accepted.Load()), st.Completed+st.Dropped, "iteration %d: %+v", i, st)
	}
}

// TestConcurrentShutdownsBothSucceed: two Shutdowns at once, and no Close,
// both wait for the accepted tasks, which all run; the one that closed
// the Serial (or Keyed) second reported ErrSerialClosed, as if Close had
// dropped them.
func TestConcurrentShutdownsBothSucceed(t *testing.T) {
	t.Run("Serial", func(t *testing.T) {
		for range 10 {
			synctest.Test(t, func(t *testing.T) {
				s := NewSerial(GoExecutor{})
				release := make(chan struct{})
				var ran atomic.Int32
				require.NoError(t, s.Submit(func() { <-release; ran.Add(1) }))
				require.NoError(t, s.Submit(func() { ran.Add(1) }))
				errs := make(chan error, 2)
				for range 2 {
					go func() { errs <- s.Shutdown(context.Background()) }()
				}
				synctest.Wait()
				close(release)
				assert.NoError(t, <-errs)
				assert.NoError(t, <-errs)
				assert.Equal(t, int32(2), ran.Load())
				assert.Zero(t, s.Stats().Dropped)
				assert.ErrorIs(t, s.Shutdown(context.Background()), ErrSerialClosed, "a Shutdown after one that returned")
			})
		}
	})
	t.Run("Keyed", func(t *testing.T) {
		for range 10 {
			synctest.Test(t, func(t *testing.T) {
				k := NewKeyed[int](GoExecutor{})
				release := make(chan struct{})
				var ran atomic.Int32
				require.NoError(t, k.Submit(1, func() { <-release; ran.Add(1) }))
				require.NoError(t, k.Submit(1, func() { ran.Add(1) }))
				errs := make(chan error, 2)
				for range 2 {
					go func() { errs <- k.Shutdown(context.Background()) }()
				}
				synctest.Wait()
				close(release)
				assert.NoError(t, <-errs)
				assert.NoError(t, <-errs)
				assert.Equal(t, int32(2), ran.Load())
				assert.Zero(t, k.Stats().Dropped)
				assert.ErrorIs(t, k.Shutdown(context.Background()), ErrSerialClosed, "a Shutdown after one that returned")
				assert.ErrorIs(t, k.Submit(1, func() {}), ErrSerialClosed)
			})
		}
	})
}
