package asynctool

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type callbackBeginPanics struct{ NopCallback[int, int] }

func (callbackBeginPanics) Begin() { panic("begin broke") }

// TestBeginPanicIsNotTheWorkers: a node whose Callback.Begin panics
// fails without its worker being called, yet its report and its
// OnNodeEnd event said "worker panicked", blaming code that never ran.
// The Reason now names Begin; a worker's own panic still says worker.
func TestBeginPanicIsNotTheWorkers(t *testing.T) {
	var mu sync.Mutex
	reasons := map[string]string{}
	h := Hooks{OnNodeEnd: func(_ context.Context, ev NodeEvent) {
		mu.Lock()
		reasons[ev.ID] = ev.Reason
		mu.Unlock()
	}}
	a := newAsync(t, WithHooks(&h))
	called := make(chan struct{}, 1)
	x := NewWrapper("x", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		called <- struct{}{}
		return 0, nil
	}), 0).Callback(callbackBeginPanics{})
	y := NewWrapper("y", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		panic("worker broke")
	}), 0)
	r, err := a.Start(context.Background(), time.Minute, x, y)
	require.NoError(t, err)
	var cpe *CallbackPanicError
	require.ErrorAs(t, r.Wait(context.Background()), &cpe)
	assert.Empty(t, called, "x's worker was called")
	want := map[string]string{"x": "callback Begin panicked", "y": "worker panicked"}
	mu.Lock()
	defer mu.Unlock()
	for _, n := range r.Report().Nodes {
		assert.Equal(t, want[n.ID], n.Reason, "report of %s", n.ID)
		assert.Equal(t, want[n.ID], reasons[n.ID], "OnNodeEnd of %s", n.ID)
	}
}

// beginGoexits is a callback whose Begin calls runtime.Goexit, as a test's
// t.FailNow does.
type beginGoexits struct{ NopCallback[int, int] }

func (beginGoexits) Begin() { runtime.Goexit() }

// TestGoexitBeforeTheWorkerIsNotTheWorkers: a node whose Callback.Begin
// or OnNodeStart hook called runtime.Goexit (a test's t.FailNow) said
// "worker called runtime.Goexit", its worker never called. Its reason
// names the call now, and the run's error carries it as a
// *CallbackPanicError, as for a panic there; a worker's own Goexit keeps
// its words.
func TestGoexitBeforeTheWorkerIsNotTheWorkers(t *testing.T) {
	var mu sync.Mutex
	reasons := map[string]string{}
	h := Hooks{
		OnNodeStart: func(ctx context.Context, ev NodeEvent) context.Context {
			if ev.ID == "s" {
				runtime.Goexit()
			}
			return ctx
		},
		OnNodeEnd: func(_ context.Context, ev NodeEvent) {
			mu.Lock()
			reasons[ev.ID] = ev.Reason
			mu.Unlock()
		},
	}
	a := newAsync(t, WithHooks(&h))
	called := make(chan string, 3)
	worker := func(id string, exit bool) WorkerFunc[int, int] {
		return func(context.Context, int, Wrappers) (int, error) {
			called <- id
			if exit {
				runtime.Goexit()
			}
			return 0, nil
		}
	}
	b := NewWrapper("b", worker("b", false), 0).Callback(beginGoexits{})
	s := NewWrapper("s", worker("s", false), 0)
	w := NewWrapper("w", worker("w", true), 0)
	r, err := a.Start(context.Background(), time.Minute, b, s, w)
	require.NoError(t, err)
	err = r.Wait(context.Background())
	var methods []string
	for _, e := range asCallbackPanics(err) {
		if errors.Is(e.Panic.Value.(error), ErrGoexit) {
			methods = append(methods, e.Method+" "+e.ID)
		}
	}
	assert.ElementsMatch(t, []string{"Begin b", "OnNodeStart s"}, methods)
	close(called)
	var ran []string
	for id := range called {
		ran = append(ran, id)
	}
	assert.Equal(t, []string{"w"}, ran, "workers called")
	want := map[string]string{
		"b": "callback Begin called runtime.Goexit",
		"s": "hook OnNodeStart called runtime.Goexit",
		"w": "worker called runtime.Goexit",
	}
	mu.Lock()
	defer mu.Unlock()
	for _, n := range r.Report().Nodes {
		assert.Equal(t, want[n.ID], n.Reason, "report of %s", n.ID)
		assert.Equal(t, want[n.ID], reasons[n.ID], "OnNodeEnd of %s", n.ID)
		assert.ErrorIs(t, n.Err, ErrGoexit, "%s", n.ID)
	}
}

// asCallbackPanics returns the *CallbackPanicError values joined in err.
func asCallbackPanics(err error) []*CallbackPanicError {
	var out []*CallbackPanicError
	var walk func(error)
	walk = func(err error) {
		if c, ok := err.(*CallbackPanicError); ok {
			out = append(out, c)
			return
		}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
		}
	}
	walk(err)
	return out
}

// TestNilResultFuncIsNoCallback: Callback(nil) restores the no-op
// callback, and a nil ResultFunc, the adapter for a plain function, is
// taken the same way, as a nil WorkerFunc is taken as no worker. It was
// called, so every run of the node reported a panic in its Result.
func TestNilResultFuncIsNoCallback(t *testing.T) {
	a := newAsync(t)
	w := NewWrapper("w", okWorker(), 1).Callback(ResultFunc[int, int](nil))
	require.NoError(t, a.BeginWork(context.Background(), 0, w))
	assert.Equal(t, ResultSuccess, w.Result().State)
}

// TestResultRunsBeforeSuccessorsStart pins Callback's contract that
// Result runs before the node's successors are triggered, so that it may
// set state they read: neither the successor the finishing goroutine
// runs itself nor those it hands to the pool may start before Result has
// returned. Result yields the processor before it returns, to give a
// successor started too early the chance to show.
func TestResultRunsBeforeSuccessorsStart(t *testing.T) {
	for range 50 {
		resulted := make(chan struct{})
		up := NewWrapper("up", okWorker(), 0).Callback(ResultFunc[int, int](func(bool, int, WorkResult[int]) {
			for range 50 {
				runtime.Gosched()
			}
			close(resulted)
		}))
		var downs []*WorkerWrapper[int, bool]
		for range 3 {
			downs = append(downs, NewWrapper("", WorkerFunc[int, bool](func(context.Context, int, Wrappers) (bool, error) {
				select {
				case <-resulted:
					return true, nil
				default:
					return false, nil
				}
			}), 0).Depend(up, true))
		}
		a := New()
		require.NoError(t, a.BeginWork(context.Background(), time.Minute, up))
		require.NoError(t, a.Close())
		for k, d := range downs {
			require.Equal(t, ResultSuccess, d.Result().State, "successor %d", k)
			require.True(t, d.Result().Value, "successor %d started before up's Result returned", k)
		}
	}
}
