package asynctool

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Review of ResultFrom, WhenResult and asFailure, helper-72.

// TestS19QWhenResultOnAnInterfaceUpstreamThatFailed: a fallback whose
// primary's result type is an interface (an any, as a generic adapter
// or a durable node may have) and that fails without a default value
// ends with a nil value. WhenResult[int]'s condition must be asked with
// the zero int and the error, so that the backup runs; the node failed
// with ErrResultType instead, in exactly the case a fallback is for.
func TestS19QWhenResultOnAnInterfaceUpstreamThatFailed(t *testing.T) {
	a := newAsync(t)
	primary := NewWrapper("primary", WorkerFunc[int, any](func(context.Context, int, Wrappers) (any, error) { return nil, errBoom }), 0)
	var seen atomic.Pointer[WorkResult[int]]
	backup := NewWrapper("backup", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 2, nil }), 0).
		Depend(primary, false).
		Join(WhenResult("primary", func(r WorkResult[int]) bool {
			seen.Store(&r)
			return r.State != ResultSuccess
		}))
	require.NoError(t, a.BeginWork(context.Background(), 0, primary))
	assert.Equal(t, WorkResult[int]{Value: 2, State: ResultSuccess}, backup.Result())
	r := seen.Load()
	require.NotNil(t, r, "the condition was asked")
	assert.Equal(t, WorkResult[int]{State: ResultException, Err: errBoom}, *r)

	// A success whose value is not a T still fails the node.
	a2 := newAsync(t)
	up := NewWrapper("up", WorkerFunc[int, any](func(context.Context, int, Wrappers) (any, error) { return nil, nil }), 0)
	x := NewWrapper("x", okWorker(), 0).Depend(up, true).Join(WhenResult("up", func(WorkResult[int]) bool { return true }))
	require.NoError(t, a2.BeginWork(context.Background(), 0, up))
	assert.ErrorIs(t, x.Result().Err, ErrResultType)
}
