package asynctool

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHedgedCallAllocatesThreeObjects measures what a Hedged worker allocates, per
// Action and per hedged call, which docs/perf.md (change 39) gave as read
// from the code: with more than one attempt, each call carries a token in
// its context, "two objects per call" (the *hedgeCall and the
// context.WithValue around it).
//
// The hedged worker's Action is called directly, with delay 0, on a worker
// whose calls all block until their context ends except the last one of
// each Action, which returns at once: attempts=n makes exactly n calls.
// Measured on Go 1.26.8, amd64 (a memory profile of this test gave the
// sites):
//
//   - attempts=1 calls w on the worker's goroutine: nothing.
//   - each call: 3 objects, the token and its context.WithValue (the two
//     of the note) and the closure of the go statement that starts the
//     call's goroutine.
//   - each Action with attempts > 1, whatever the calls: 8 objects, the
//     WithCancel context and its cancel func, the done channel, the
//     WaitGroup, time.NewTimer's three, and the cancel context's Done
//     channel, made when the blocked calls wait on it.
//
// So attempts=2 costs 14 objects a call of the worker, 3 more per call
// beyond.
func TestHedgedCallAllocatesThreeObjects(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	var n atomic.Int64
	var attempts int64
	w := WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
		if n.Add(1)%attempts != 0 {
			<-ctx.Done() // a slow replica, cancelled by the last call's success
			return 0, ctx.Err()
		}
		return 1, nil
	})
	ctx := context.Background()
	measure := func(a int) float64 {
		attempts = int64(a)
		n.Store(0)
		h := Hedged[int, int](w, 0, a)
		call := func() {
			v, err := h.Action(ctx, 0, Wrappers{})
			if err != nil || v != 1 {
				panic("hedged call failed")
			}
		}
		for range 100 {
			call() // warm the goroutines' free list
		}
		got := testing.AllocsPerRun(1000, call)
		require.Equal(t, int64(0), n.Load()%attempts, "calls per Action")
		return got
	}
	one, two, three, four := measure(1), measure(2), measure(3), measure(4)
	perCall := three - two
	t.Logf("allocs per Action: attempts=1 %.0f, 2 %.0f, 3 %.0f, 4 %.0f; per hedged call %.0f, fixed %.0f",
		one, two, three, four, perCall, two-2*perCall)
	assert.Equal(t, 0.0, one, "attempts=1 calls w directly")
	assert.Equal(t, perCall, four-three, "each call costs the same")
	assert.InDelta(t, 3, perCall, 0.5, "allocs per hedged call: token, WithValue, the go statement's closure")
	assert.InDelta(t, 8, two-2*perCall, 0.5, "fixed allocs of a hedged Action")
	assert.InDelta(t, 14, two, 0.5, "allocs of a hedged Action of two calls")
}
