package asynctool

import (
	"context"
	"math"
	"runtime"
	"sync/atomic"
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

// TestS19HHedgedNestedProblem checks that Compile sees a bad Hedged worker
// inside another Hedged, as it sees one at the top: the node could never
// succeed, and the doc promises it is rejected before anything runs.
func TestS19HHedgedNestedProblem(t *testing.T) {
	for _, tc := range []struct {
		inner  Worker[int, int]
		target error
		msg    string
	}{
		{Hedged[int, int](nil, time.Millisecond, 2), ErrNilWorker, "nil worker"},
		{Hedged[int, int](WorkerFunc[int, int](nil), time.Millisecond, 2), ErrNilWorker, "nil WorkerFunc"},
		{Hedged(okWorker(), time.Millisecond, 0), ErrBadRetry, "0 attempts"},
		{Hedged(okWorker(), -time.Millisecond, 2), ErrBadRetry, "negative delay"},
	} {
		_, err := Compile(NewWrapper("h", Hedged(tc.inner, time.Millisecond, 2), 0))
		require.ErrorIs(t, err, tc.target)
		assert.Contains(t, err.Error(), `node "h": `)
		assert.Contains(t, err.Error(), tc.msg)
	}
	_, err := Compile(NewWrapper("h", Hedged(Hedged(okWorker(), time.Millisecond, 2), 0, 3), 0))
	require.NoError(t, err, "a good hedge of a good hedge")
}

// TestS19HHedgedNoCallAfterContextEnds checks that once the worker's
// context ended, the hedge timer starts no further call, also while the
// calls already running ignore the context: a call started then is an
// RPC sent after the caller gave up, and the worker would wait for it.
func TestS19HHedgedNoCallAfterContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		deaf := WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			calls.Add(1)
			time.Sleep(30 * time.Millisecond) // ignores its context
			return 0, errBoom
		})
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := Hedged(deaf, 10*time.Millisecond, 3).Action(ctx, 0, Wrappers{})
		assert.ErrorIs(t, err, errBoom)
		assert.Equal(t, int32(2), calls.Load(), "the call due at 20ms, after the context ended at 15ms, never started")
		assert.Equal(t, 40*time.Millisecond, time.Since(start), "the second call, started at 10ms, returned at 40ms")
	})
}
