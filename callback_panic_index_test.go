package asynctool

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAnonymousCallbackPanicNamesItsIndex: a panic in the callback
// of an anonymous node read `callback Result of node "" panicked`, where
// Report.String, Report.Err and the pictures name such a node "#" and
// its index (149f985), and two anonymous nodes' panics could not be told
// apart. CallbackPanicError now carries the node's Index, -1 for a hook
// of the whole run and for an internal panic outside any node.
func TestAnonymousCallbackPanicNamesItsIndex(t *testing.T) {
	h := Hooks{OnRunEnd: func(context.Context, *Report) { panic("the tracer broke") }}
	a := newAsync(t, WithHooks(&h))
	first := NewWrapper("", okWorker(), 0).Callback(ResultFunc[int, int](func(bool, int, WorkResult[int]) { panic("first broke") }))
	second := NewWrapper("named", okWorker(), 0)
	NewWrapper("", okWorker(), 0).Callback(ResultFunc[int, int](func(bool, int, WorkResult[int]) { panic("third broke") })).
		Depend(second, true)
	second.Depend(first, true)
	r, err := a.Start(context.Background(), time.Minute, first)
	require.NoError(t, err)
	err = r.Wait(context.Background())
	require.Error(t, err)
	got := map[string]int{}
	var msgs []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var cpe *CallbackPanicError
		require.True(t, errors.As(e, &cpe), "%v", e)
		got[cpe.Method+" "+cpe.Error()] = cpe.Index
		msgs = append(msgs, cpe.Error())
	}
	assert.Equal(t, map[string]int{
		`Result asynctool: callback Result of node #0 panicked: first broke`:      0,
		`Result asynctool: callback Result of node #2 panicked: third broke`:      2,
		`OnRunEnd asynctool: hook OnRunEnd of the run panicked: the tracer broke`: -1,
	}, got, "%q", msgs)
	rep := r.Report().String()
	assert.Contains(t, rep, "#0: succeeded")
	assert.Contains(t, rep, "#2: succeeded")
}

// TestInternalPanicOutsideAnyNodeHasNoIndex: a panic that reaches a run's
// goroutine while it works on no node (here an executor's Submit that
// panics, against its contract, as the goroutine shares ready nodes) is
// an internal panic of the run, Index -1 as CallbackPanicError's doc
// says, not one of node 0, which had long ended.
func TestInternalPanicOutsideAnyNodeHasNoIndex(t *testing.T) {
	var submits atomic.Int32
	a := New(WithExecutor(ExecutorFunc(func(task func()) error {
		if submits.Add(1) == 2 { // the first goroutine the run asks for beyond its start
			panic("executor broke")
		}
		go task()
		return nil
	})))
	root := NewWrapper("root", okWorker(), 0)
	for _, id := range []string{"b", "c", "d"} {
		NewWrapper(id, okWorker(), 0).Depend(root, true)
	}
	err := a.BeginWork(context.Background(), time.Minute, root)
	var cpe *CallbackPanicError
	require.ErrorAs(t, err, &cpe)
	assert.Equal(t, "internal", cpe.Method)
	assert.Equal(t, -1, cpe.Index, "%v", cpe)
	assert.Equal(t, "", cpe.ID, "%v", cpe)
	assert.Equal(t, "asynctool: internal panic of the run: executor broke", cpe.Error())
}
