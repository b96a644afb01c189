package asynctool

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type hookValueKey struct{}

// cancelList holds the cancel functions of contexts that hooks made, to
// be called when the test is done with them.
type cancelList struct {
	mu  sync.Mutex
	fns []context.CancelFunc
}

func (l *cancelList) add(f context.CancelFunc) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fns = append(l.fns, f)
}

// cancel calls every function added, and reports how many.
func (l *cancelList) cancel() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range l.fns {
		f()
	}
	n := len(l.fns)
	l.fns = nil
	return n
}

// TestCancelList: cancel calls what was added, once.
func TestCancelList(t *testing.T) {
	var l cancelList
	ctx, cancel := context.WithCancel(t.Context())
	l.add(cancel)
	assert.NoError(t, ctx.Err())
	assert.Equal(t, 1, l.cancel())
	assert.ErrorIs(t, ctx.Err(), context.Canceled)
	assert.Zero(t, l.cancel())
}

// waitForCtx is a worker that returns when its context ends, and records
// whether it ended; it gives up after an hour.
func waitForCtx(ended *atomic.Bool) WorkerFunc[int, int] {
	return func(ctx context.Context, _ int, _ Wrappers) (int, error) {
		select {
		case <-ctx.Done():
			ended.Store(true)
			return 0, ctx.Err()
		case <-time.After(time.Hour):
			return 0, nil
		}
	}
}

// TestWaitForCtx: the test worker returns when its context ends, and
// after an hour without.
func TestWaitForCtx(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ended atomic.Bool
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_, err := waitForCtx(&ended)(ctx, 0, Wrappers{})
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.True(t, ended.Load())
		ended.Store(false)
		t0 := time.Now()
		_, err = waitForCtx(&ended)(context.WithoutCancel(ctx), 0, Wrappers{})
		assert.NoError(t, err)
		assert.False(t, ended.Load())
		assert.Equal(t, time.Hour, time.Since(t0))
	})
}

// TestOnNodeStartCannotDropTheNodesCancellation: a context returned by
// OnNodeStart that keeps the node's values but not its cancellation
// (context.WithoutCancel, then WithCancel of that for a context that
// looks live) reached the worker as it was: the group deadline never
// reached the worker, which held Close until it gave up on its own. The
// node's end now ends the worker's context, with the node's cause, as it
// does for SubPlan's Input.
func TestOnNodeStartCannotDropTheNodesCancellation(t *testing.T) {
	for name, detach := range map[string]func(context.Context, *cancelList) context.Context{
		"WithoutCancel": func(ctx context.Context, _ *cancelList) context.Context { return context.WithoutCancel(ctx) },
		"WithCancel of WithoutCancel": func(ctx context.Context, cancels *cancelList) context.Context {
			c, cancel := context.WithCancel(context.WithoutCancel(ctx))
			cancels.add(cancel) // called when the test is done: the point is a context nothing cancels
			return c
		},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var cancels cancelList
				defer cancels.cancel()
				var ended atomic.Bool
				var got atomic.Value
				a := New(WithHooks(&Hooks{OnNodeStart: func(ctx context.Context, _ NodeEvent) context.Context {
					return detach(context.WithValue(ctx, hookValueKey{}, "span"), &cancels)
				}}))
				w := NewWrapper("w", WorkerFunc[int, int](func(ctx context.Context, p int, all Wrappers) (int, error) {
					got.Store(ctx.Value(hookValueKey{}))
					return waitForCtx(&ended)(ctx, p, all)
				}), 0)
				t0 := time.Now()
				err := a.BeginWork(t.Context(), time.Second, w)
				require.ErrorIs(t, err, context.DeadlineExceeded)
				require.NoError(t, a.Close())
				assert.True(t, ended.Load(), "the worker's context ended")
				assert.Equal(t, time.Second, time.Since(t0), "Close returned with the deadline")
				assert.Equal(t, "span", got.Load(), "the hook's value reached the worker")
			})
		})
	}
}

// TestOnNodeStartContextFromElsewhereFailsTheNode: a context returned by
// OnNodeStart that does not derive from the node's (from no run, or from
// another run) went to the worker: without the node's deadline,
// cancellation or values, and without the mark that tells a run started
// by the worker that it is nested (see WithMaxWorkers). The node now
// fails, with an error that names OnNodeStart, and its worker is not
// called, as SubPlan's Input does for such a context.
func TestOnNodeStartContextFromElsewhereFailsTheNode(t *testing.T) {
	var cancels cancelList
	defer cancels.cancel()
	for name, foreign := range map[string]func(context.Context) context.Context{
		"Background": func(context.Context) context.Context { return context.Background() },
		"TODO with a deadline": func(context.Context) context.Context {
			c, cancel := context.WithTimeout(context.TODO(), time.Minute)
			cancels.add(cancel)
			return c
		},
	} {
		t.Run(name, func(t *testing.T) {
			var called atomic.Bool
			a := newAsync(t, WithHooks(&Hooks{OnNodeStart: func(ctx context.Context, _ NodeEvent) context.Context {
				return foreign(ctx)
			}}))
			w := NewWrapper("w", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
				called.Store(true)
				return 1, nil
			}), 0)
			next := NewWrapper("next", okWorker(), 0).Depend(w, true)
			run, err := a.Start(t.Context(), 0, w)
			require.NoError(t, err)
			require.NoError(t, run.Wait(t.Context()))
			assert.False(t, called.Load(), "the worker ran with the hook's context")
			require.Equal(t, ResultException, w.Result().State)
			assert.EqualError(t, w.Result().Err, "asynctool: OnNodeStart returned a context that does not derive from the node's")
			assert.ErrorIs(t, next.Result().Err, w.Result().Err, "its must downstream fails with it")
			assert.Equal(t, "hook OnNodeStart returned a context that does not derive from the node's; the worker was not called",
				run.Report().Nodes[w.idx].Reason, "not a worker's failure")
		})
	}
}

// TestOnNodeStartContextOfAnotherRunFailsTheNode: a context of another
// run's node, kept by a hook, derives from a run's context, but not from
// this node's.
func TestOnNodeStartContextOfAnotherRunFailsTheNode(t *testing.T) {
	var kept atomic.Value
	first := true
	a := newAsync(t, WithHooks(&Hooks{OnNodeStart: func(ctx context.Context, _ NodeEvent) context.Context {
		if first {
			first = false
			kept.Store(ctx)
			return nil
		}
		return kept.Load().(context.Context)
	}}))
	require.NoError(t, a.BeginWork(t.Context(), 0, NewWrapper("one", okWorker(), 0)))
	two := NewWrapper("two", okWorker(), 0)
	require.NoError(t, a.BeginWork(t.Context(), 0, two))
	assert.EqualError(t, two.Result().Err, "asynctool: OnNodeStart returned a context that does not derive from the node's")
}

// TestOnNodeStartContextsThatDerive: a context that derives from the
// node's (values added, a shorter deadline) reaches the worker as the
// hook returned it.
func TestOnNodeStartContextsThatDerive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var cancels cancelList
		defer cancels.cancel()
		a := New(WithHooks(&Hooks{OnNodeStart: func(ctx context.Context, ev NodeEvent) context.Context {
			ctx = context.WithValue(ctx, hookValueKey{}, ev.ID)
			if ev.ID == "short" {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, time.Second)
				cancels.add(cancel)
			}
			return ctx
		}}))
		defer a.Close()
		var ended atomic.Bool
		short := NewWrapper("short", waitForCtx(&ended), 0)
		plain := NewWrapper("plain", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
			if ctx.Value(hookValueKey{}) != "plain" {
				return 0, context.Canceled
			}
			return 1, nil
		}), 0)
		t0 := time.Now()
		require.NoError(t, a.BeginWork(t.Context(), time.Minute, short, plain))
		assert.Equal(t, time.Second, time.Since(t0), "the hook's deadline")
		assert.True(t, ended.Load())
		assert.ErrorIs(t, short.Result().Err, context.DeadlineExceeded)
		assert.Equal(t, WorkResult[int]{State: ResultSuccess, Value: 1}, plain.Result())
	})
}

// TestOnRunStartCannotDetachTheRunFromItsCaller: the context OnRunStart
// returns becomes the parent of the run's context, and one that did not
// keep the caller's (context.WithoutCancel, or one from elsewhere) took
// the caller's deadline and cancellation from the run: BeginWork with a
// context that ended after a second returned only when the worker gave
// up, an hour later, and reported success. The run now ends with the
// caller's context, with its cause, and keeps the hook's values.
func TestOnRunStartCannotDetachTheRunFromItsCaller(t *testing.T) {
	errCaller := errors.New("the caller gave up")
	for name, detach := range map[string]func(context.Context) context.Context{
		"WithoutCancel": context.WithoutCancel,
		"Background":    func(context.Context) context.Context { return context.Background() },
	} {
		t.Run(name, func(t *testing.T) {
			for _, c := range []struct {
				name    string
				timeout time.Duration
				caller  func() (context.Context, context.CancelFunc)
				want    error
				at      time.Duration
			}{
				{"caller's deadline", 0, func() (context.Context, context.CancelFunc) {
					return context.WithTimeout(context.Background(), time.Second)
				}, context.DeadlineExceeded, time.Second},
				{"caller's cancel", time.Minute, func() (context.Context, context.CancelFunc) {
					ctx, cancel := context.WithCancelCause(context.Background())
					time.AfterFunc(2*time.Second, func() { cancel(errCaller) })
					return ctx, func() { cancel(nil) }
				}, errCaller, 2 * time.Second},
				{"group timeout", 3 * time.Second, func() (context.Context, context.CancelFunc) {
					return context.WithCancel(context.Background())
				}, context.DeadlineExceeded, 3 * time.Second},
				{"group timeout before the caller's deadline", 3 * time.Second, func() (context.Context, context.CancelFunc) {
					return context.WithTimeout(context.Background(), time.Hour)
				}, context.DeadlineExceeded, 3 * time.Second},
			} {
				t.Run(c.name, func(t *testing.T) {
					synctest.Test(t, func(t *testing.T) {
						var ended atomic.Bool
						var got atomic.Value
						a := New(WithHooks(&Hooks{OnRunStart: func(ctx context.Context, _ RunInfo) context.Context {
							return context.WithValue(detach(ctx), hookValueKey{}, "span")
						}}))
						w := NewWrapper("w", WorkerFunc[int, int](func(ctx context.Context, p int, all Wrappers) (int, error) {
							got.Store(ctx.Value(hookValueKey{}))
							return waitForCtx(&ended)(ctx, p, all)
						}), 0)
						ctx, cancel := c.caller()
						defer cancel()
						t0 := time.Now()
						err := a.BeginWork(ctx, c.timeout, w)
						assert.ErrorIs(t, err, c.want)
						assert.Equal(t, c.at, time.Since(t0), "BeginWork returned")
						require.NoError(t, a.Close())
						assert.True(t, ended.Load(), "the worker's context ended")
						assert.Equal(t, c.at, time.Since(t0), "Close returned")
						assert.Equal(t, "span", got.Load(), "the hook's value reached the worker")
					})
				})
			}
		})
	}
}

// mapCtx is a context of a type that == cannot compare: comparing two
// of them as interfaces panics.
type mapCtx struct {
	context.Context
	tags map[string]string
}

// TestHooksTakeContextsOfAnyType: a run started with a context whose
// type is not comparable, and hooks that return it, or one made from it,
// unchanged, runs as any other.
func TestHooksTakeContextsOfAnyType(t *testing.T) {
	a := newAsync(t, WithHooks(&Hooks{
		OnRunStart: func(ctx context.Context, _ RunInfo) context.Context { return ctx },
		OnNodeStart: func(ctx context.Context, _ NodeEvent) context.Context {
			return mapCtx{Context: ctx, tags: map[string]string{"node": "w"}}
		},
	}))
	var tags atomic.Value
	w := NewWrapper("w", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
		if m, ok := ctx.(mapCtx); ok {
			tags.Store(m.tags["node"])
		}
		return 1, nil
	}), 0)
	require.NoError(t, a.BeginWork(mapCtx{Context: t.Context(), tags: map[string]string{}}, 0, w))
	assert.Equal(t, WorkResult[int]{State: ResultSuccess, Value: 1}, w.Result())
	assert.Equal(t, "w", tags.Load(), "the worker got the hook's context")
}

// TestOnNodeStartForeignContextCannotHideANestedRun: a worker that starts
// a run with its context and waits for it is the one case WithMaxWorkers
// lets past its bound: the nested run's first node gets a goroutine of
// its own, found by the mark in the worker's context. A context from
// OnNodeStart that does not derive from the node's has no mark: with one
// goroutine, the nested run's node waited in the pool's queue behind the
// worker waiting for it, and BeginWork never returned. The node now fails
// without its worker being called.
func TestOnNodeStartForeignContextCannotHideANestedRun(t *testing.T) {
	a := newAsync(t, WithMaxWorkers(1), WithHooks(&Hooks{OnNodeStart: func(ctx context.Context, ev NodeEvent) context.Context {
		if ev.ID == "outer" {
			return context.Background()
		}
		return ctx
	}}))
	var called atomic.Bool
	outer := NewWrapper("outer", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
		called.Store(true)
		return 0, a.BeginWork(ctx, 0, NewWrapper("inner", okWorker(), 0))
	}), 0)
	done := make(chan error, 1)
	go func() { done <- a.BeginWork(t.Context(), 0, outer) }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("BeginWork did not return")
	}
	assert.False(t, called.Load(), "the worker ran with the hook's context")
	assert.ErrorContains(t, outer.Result().Err, "OnNodeStart returned a context that does not derive from the node's")
}

// TestRunsStartedWithAHooksContextAreNested: RunInfo.Nested is true for
// a run started with the context that a node hook or OnRunEnd of another
// run received, as for one started with a worker's, and false for one
// started with OnRunStart's, its caller's.
func TestRunsStartedWithAHooksContextAreNested(t *testing.T) {
	a := newAsync(t)
	nested := map[string]bool{}
	var mu sync.Mutex
	// innerRun runs a one-node graph with ctx, recording under name
	// whether its OnRunStart saw it nested. Its own hooks replace outer's
	// in ctx, so that it starts no run of its own.
	innerRun := func(ctx context.Context, name string) {
		inner := &Hooks{OnRunStart: func(_ context.Context, info RunInfo) context.Context {
			mu.Lock()
			nested[name] = info.Nested
			mu.Unlock()
			return nil
		}}
		assert.NoError(t, a.BeginWork(WithRunHooks(ctx, inner), time.Minute, NewWrapper("inner", okWorker(), 0)), name)
	}
	outer := &Hooks{
		OnRunStart: func(ctx context.Context, _ RunInfo) context.Context {
			innerRun(ctx, "OnRunStart")
			return nil
		},
		OnNodeStart: func(ctx context.Context, _ NodeEvent) context.Context {
			innerRun(ctx, "OnNodeStart")
			return nil
		},
		OnNodeEnd: func(ctx context.Context, _ NodeEvent) { innerRun(ctx, "OnNodeEnd") },
		OnRunEnd:  func(ctx context.Context, _ *Report) { innerRun(ctx, "OnRunEnd") },
	}
	require.NoError(t, a.BeginWork(WithRunHooks(context.Background(), outer), time.Minute, NewWrapper("x", okWorker(), 0)))
	assert.Equal(t, map[string]bool{"OnRunStart": false, "OnNodeStart": true, "OnNodeEnd": true, "OnRunEnd": true}, nested)
}
