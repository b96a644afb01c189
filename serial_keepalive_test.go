package asynctool

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Serial and Keyed keep their queues' buffers after a burst, as their
// docs say, but not the tasks: each slot is cleared as its task is
// taken, so once the tasks have run, one collection frees what they
// captured while the Serial and the Keyed (and the key's drained queue,
// kept for reuse) are still in use.
func TestDrainedQueuesKeepNoTaskAlive(t *testing.T) {
	const burst = 64
	s := NewSerial(GoExecutor{})
	k := NewKeyed[string](GoExecutor{})
	freed := make(chan struct{}, 2*burst)
	task := func() func() {
		big := tracked(freed)
		return func() { big[0]++ }
	}
	for range burst {
		require.NoError(t, s.Submit(task()))
		require.NoError(t, k.Submit("u", task()))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// A task of each, queued last, that runs once every other has.
	sDone, kDone := make(chan struct{}), make(chan struct{})
	require.NoError(t, s.Submit(func() { close(sDone) }))
	require.NoError(t, k.Submit("u", func() { close(kDone) }))
	for _, done := range []chan struct{}{sDone, kDone} {
		select {
		case <-done:
		case <-ctx.Done():
			t.Fatal("the tasks did not run")
		}
	}
	requireFreed(t, freed, 2*burst, "after the tasks ran, %d of %d were freed: a drained queue keeps the rest alive")
	require.NoError(t, s.Shutdown(ctx))
	require.NoError(t, k.Shutdown(ctx))
}
