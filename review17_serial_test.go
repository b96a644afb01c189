package asynctool

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

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
