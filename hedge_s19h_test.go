package asynctool

import (
	"context"
	"math"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestS19HHedgedUnboundedAttempts checks that a hedge whose attempts bound
// is only a ceiling (math.MaxInt: hedge until the deadline) works, and
// that the worker's memory does not grow with attempts: only the calls
// that started need room for their outcome.
func TestS19HHedgedUnboundedAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &replica{took: []time.Duration{time.Hour, time.Hour, 5 * time.Millisecond}}
		v, err := Hedged[int, int](r, 10*time.Millisecond, math.MaxInt).Action(context.Background(), 0, Wrappers{})
		require.NoError(t, err)
		assert.Equal(t, 103, v)
		assert.Equal(t, 3, r.calls)
		assert.ElementsMatch(t, []int{1, 2}, r.cancelled)
	})

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	v, err := Hedged(okWorker(), time.Hour, 1<<20).Action(context.Background(), 0, Wrappers{})
	runtime.ReadMemStats(&after)
	require.NoError(t, err)
	assert.Equal(t, 1, v)
	assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(64<<10), "a call that answers at once costs no buffer for a million")
}
