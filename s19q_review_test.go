package asynctool

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

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

// TestS19QWhenResultNotTakenReason: a WhenResult join looks at one
// upstream's result and does not propagate another's not being taken
// (it runs whatever its upstreams did, as AllDone). When its condition
// said no and the last upstream to end was a branch not taken, the
// report said "upstream "other" was not taken", which is not why the node
// was not taken: its condition on "primary" decided.
func TestS19QWhenResultNotTakenReason(t *testing.T) {
	a := newAsync(t)
	gate := make(chan struct{})
	release := releaser(t, gate)
	flag := NewWrapper("flag", WorkerFunc[int, bool](func(context.Context, int, Wrappers) (bool, error) {
		<-gate
		return false, nil
	}), 0)
	other := NewWrapper("other", okWorker(), 0).Depend(flag, true).Join(When("flag", func(on bool) bool { return on }))
	primary := NewWrapper("primary", okWorker(), 0)
	x := NewWrapper("x", okWorker(), 0).Depend(primary, true).Depend(other, true).
		Join(WhenResult("primary", func(r WorkResult[int]) bool { return r.State != ResultSuccess }))
	run, err := a.Start(context.Background(), 0, flag, primary)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return primary.State() == StateFinish }, 10*time.Second, time.Millisecond)
	release()
	require.NoError(t, run.Wait(context.Background()))
	require.Equal(t, ErrNotTaken, x.Result().Err)
	n := nodeReport(t, run.Report(), "x")
	assert.Equal(t, "other", n.DecidedBy)
	assert.Equal(t, `not taken: join when result of "primary" decided so`, n.Reason)
}
