package asynctool

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// whoKey carries the caller's name to a plan's worker.
type whoKey struct{}

// TestS20NStaleRunHandle: a run's handle kept after Release never shows
// another request's run, and a second Release does nothing (helper-79's
// review: the *Run itself was recycled, so a second Release dropped the
// next request's reference and ResultIn read its data).
func TestS20NStaleRunHandle(t *testing.T) {
	a := New()
	defer a.Close()
	who := NewWrapper("who", WorkerFunc[int, string](func(ctx context.Context, _ int, _ Wrappers) (string, error) {
		return ctx.Value(whoKey{}).(string), nil
	}), 0)
	pl, err := Compile(who)
	require.NoError(t, err)
	as := func(name string) context.Context { return context.WithValue(context.Background(), whoKey{}, name) }

	alice, err := a.RunPlan(as("alice"), pl, time.Second)
	require.NoError(t, err)
	assert.Equal(t, "alice", who.ResultIn(alice).Value)
	alice.Release()
	bob, err := a.RunPlan(as("bob"), pl, time.Second)
	require.NoError(t, err)
	assert.NotSame(t, alice, bob)
	assert.Zero(t, who.ResultIn(alice), "a released run shows no result, not bob's")
	assert.Empty(t, alice.Report().Nodes)
	assert.ErrorContains(t, alice.Resume("who", Rerun()), "released run")
	alice.Release() // a second Release of alice's handle
	carol, err := a.RunPlan(as("carol"), pl, time.Second)
	require.NoError(t, err)
	assert.Equal(t, "bob", who.ResultIn(bob).Value, "bob's run is still bob's")
	assert.Equal(t, "carol", who.ResultIn(carol).Value)
	bob.Release()
	carol.Release()
}

// TestS20NDoubleReleaseUnderLoad: with one request in ten releasing its
// run twice (early, and again deferred), every request reads its own
// result, race-free.
func TestS20NDoubleReleaseUnderLoad(t *testing.T) {
	a := New()
	defer a.Close()
	who := NewWrapper("who", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
		return ctx.Value(whoKey{}).(int), nil
	}), 0)
	pl, err := Compile(who)
	require.NoError(t, err)
	var wrong atomic.Int32
	var wg sync.WaitGroup
	for k := range 2000 {
		wg.Go(func() {
			run, err := a.RunPlan(context.WithValue(context.Background(), whoKey{}, k), pl, time.Minute)
			if err != nil {
				wrong.Add(1)
				return
			}
			defer run.Release()
			if k%10 == 0 {
				run.Release() // early, and again deferred
				return
			}
			runtime.Gosched()
			if who.ResultIn(run).Value != k {
				wrong.Add(1)
			}
		})
	}
	wg.Wait()
	assert.Zero(t, wrong.Load(), "requests that read another request's result")
}
