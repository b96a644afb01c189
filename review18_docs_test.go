package asynctool

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Tests from the eighteenth session's review of the documentation
// (helper s18-docs): places where the code did not do what its docs say.

// TestS18DocGoexitInAnEndHookNamesTheHook: CallbackPanicError.Method is
// documented as "the name of a Hooks field (such as "OnNodeEnd")" for a
// hook. A runtime.Goexit in an end hook was reported as "Result", the
// name of the Result callback, which the node may not even have.
func TestS18DocGoexitInAnEndHookNamesTheHook(t *testing.T) {
	for _, method := range []string{"OnNodeEnd", "OnNodeTimeout", "OnNodeSkip", "Result"} {
		t.Run(method, func(t *testing.T) {
			a := newAsync(t)
			ok := WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 1, nil })
			exit := func(_ context.Context, ev NodeEvent) {
				if ev.ID == "x" {
					runtime.Goexit()
				}
			}
			var h Hooks
			x := NewWrapper("x", ok, 0)
			starts := []Wrapper{x}
			switch method {
			case "OnNodeEnd":
				h.OnNodeEnd = exit
			case "OnNodeTimeout":
				h.OnNodeTimeout = exit
				x = NewWrapper("x", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
					<-ctx.Done()
					return 0, ctx.Err()
				}), 0).Timeout(time.Millisecond)
				starts = []Wrapper{x}
			case "OnNodeSkip":
				// z runs on u, its first optional upstream to succeed,
				// so x, which waits for g, is skipped; g waits for z.
				h.OnNodeSkip = exit
				zRan := make(chan struct{})
				u := NewWrapper("u", ok, 0)
				g := NewWrapper("g", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
					<-zRan
					return 1, nil
				}), 0)
				x = NewWrapper("x", ok, 0).Depend(g, true)
				NewWrapper("z", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
					close(zRan)
					return 1, nil
				}), 0).Depend(u, false).Depend(x, false)
				starts = []Wrapper{u, g}
			case "Result":
				x.Callback(ResultFunc[int, int](func(bool, int, WorkResult[int]) { runtime.Goexit() }))
				h.OnNodeEnd = func(context.Context, NodeEvent) {}
			}
			err := a.BeginWork(WithRunHooks(context.Background(), &h), time.Minute, starts...)
			var cpe *CallbackPanicError
			require.ErrorAs(t, err, &cpe)
			assert.Equal(t, "x", cpe.ID)
			assert.Equal(t, method, cpe.Method, "the Goexit is reported under the name of what called it")
			assert.ErrorIs(t, err, ErrGoexit)
		})
	}
}

// TestS18DocNilOptionsDoNothing: the package documentation says the
// library never panics on bad input, but New, NewPool, NewSerial and
// NewKeyed called a nil option's method and panicked with a nil
// dereference. A nil option now does nothing.
func TestS18DocNilOptionsDoNothing(t *testing.T) {
	assert.NotPanics(t, func() {
		a := New(nil, WithMaxWorkers(2), nil)
		assert.NoError(t, a.BeginWork(context.Background(), 0, NewWrapper("x", okWorker(), 0)))
		assert.NoError(t, a.Close())
	}, "New")
	assert.NotPanics(t, func() {
		p := NewPool(nil, PoolSize(2), nil)
		assert.NoError(t, p.Submit(func() {}))
		assert.NoError(t, p.Close())
	}, "NewPool")
	assert.NotPanics(t, func() {
		s := NewSerial(nil, nil)
		assert.NoError(t, s.Submit(func() {}))
		s.Close()
	}, "NewSerial")
	assert.NotPanics(t, func() {
		k := NewKeyed[int](nil, nil)
		assert.NoError(t, k.Submit(1, func() {}))
		k.Close()
	}, "NewKeyed")
}
