package asynctool

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRunHookPanicNamesTheRun: a panic in OnRunStart or OnRunEnd, which
// are called for the whole run, was reported as `callback OnRunStart of
// node "" panicked`, as if an anonymous node's callback had panicked.
func TestRunHookPanicNamesTheRun(t *testing.T) {
	for _, method := range []string{"OnRunStart", "OnRunEnd"} {
		h := &Hooks{}
		if method == "OnRunStart" {
			h.OnRunStart = func(context.Context, RunInfo) context.Context { panic("the tracer broke") }
		} else {
			h.OnRunEnd = func(context.Context, *Report) { panic("the tracer broke") }
		}
		a := newAsync(t, WithHooks(h))
		err := a.BeginWork(context.Background(), time.Second, NewWrapper("x", okWorker(), 0))
		var cpe *CallbackPanicError
		if assert.ErrorAs(t, err, &cpe) {
			assert.Equal(t, "", cpe.ID)
			assert.Equal(t, -1, cpe.Index)
			assert.Equal(t, method, cpe.Method)
			assert.Equal(t, "asynctool: hook "+method+" of the run panicked: the tracer broke", cpe.Error())
		}
	}
	cpe := &CallbackPanicError{ID: "", Index: 3, Method: "Result", Panic: &PanicError{Value: "x"}}
	assert.Equal(t, `asynctool: callback Result of node #3 panicked: x`, cpe.Error(), "an anonymous node's callback is named by its index (TestAnonymousCallbackPanicNamesItsIndex)")
}

// TestNodeHookPanicNamesTheNode: a panic in a hook called for a node is
// reported with the node's id and index, as one in its callbacks is.
func TestNodeHookPanicNamesTheNode(t *testing.T) {
	for _, method := range []string{"OnNodeStart", "OnNodeRetry", "OnNodeEnd"} {
		t.Run(method, func(t *testing.T) {
			h := &Hooks{}
			broke := func(ev NodeEvent) {
				if ev.ID == "y" {
					panic("the tracer broke")
				}
			}
			switch method {
			case "OnNodeStart":
				h.OnNodeStart = func(ctx context.Context, ev NodeEvent) context.Context { broke(ev); return ctx }
			case "OnNodeRetry":
				h.OnNodeRetry = func(_ context.Context, ev NodeEvent) { broke(ev) }
			case "OnNodeEnd":
				h.OnNodeEnd = func(_ context.Context, ev NodeEvent) { broke(ev) }
			}
			a := newAsync(t, WithHooks(h))
			x := NewWrapper("x", okWorker(), 0)
			calls := 0
			NewWrapper("y", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
				if calls++; calls == 1 {
					return 0, errBoom
				}
				return 1, nil
			}), 0).Retry(RetryPolicy{Attempts: 2}).Depend(x, true)
			err := a.BeginWork(context.Background(), time.Minute, x)
			var cpe *CallbackPanicError
			require.ErrorAs(t, err, &cpe)
			assert.Equal(t, "y", cpe.ID)
			assert.Equal(t, 1, cpe.Index)
			assert.Equal(t, method, cpe.Method)
		})
	}
}

// TestReturnWithTheSinkOnAPlan is the README's idiom for returning as soon
// as the sink has ended while an optional branch still runs, on a plan
// whose callbacks all runs share: cancel the run's parent context from an
// OnNodeEnd hook installed for that run only with WithRunHooks.
func TestReturnWithTheSinkOnAPlan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		user := NewWrapper("user", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			time.Sleep(10 * time.Millisecond)
			return 1, nil
		}), 0)
		recs := NewWrapper("recs", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
			<-ctx.Done() // slower than the page can wait for
			return 0, ctx.Err()
		}), 0).ShortCircuit(false)
		page := NewWrapper("page", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 2, nil }), 0).
			Depend(user, true).Depend(recs, false)
		pl, err := Compile(user, recs)
		require.NoError(t, err)
		for range 3 {
			ctx, cancel := context.WithCancel(context.Background())
			ctx = WithRunHooks(ctx, &Hooks{OnNodeEnd: func(_ context.Context, ev NodeEvent) {
				if ev.ID == "page" {
					cancel()
				}
			}})
			began := time.Now()
			r, err := a.StartPlan(ctx, pl, time.Minute)
			require.NoError(t, err)
			require.ErrorIs(t, r.Wait(context.Background()), context.Canceled)
			assert.Equal(t, 10*time.Millisecond, time.Since(began), "returned with the sink, not at the deadline")
			assert.Equal(t, 2, page.ResultIn(r).Value)
			assert.Equal(t, ResultTimeout, recs.ResultIn(r).State)
			r.Release()
			cancel()
		}
	})
}

// TestNodeHooksSplitAcrossHookSets: a run calls its per-node hooks when
// any of its hook sets has them (it notes which as it starts), here the
// Async's OnNodeEnd and the run's OnNodeStart, whose context reaches the
// worker; and a run whose hooks have none of them still ends with its
// OnRunEnd. (Tests with OnNodeSkip or OnNodeTimeout alone are in
// branch_test.go and endsrun_test.go.)
func TestNodeHooksSplitAcrossHookSets(t *testing.T) {
	type key struct{}
	var mu sync.Mutex
	var ended, started []string
	a := newAsync(t, WithHooks(&Hooks{
		OnNodeEnd: func(_ context.Context, ev NodeEvent) {
			mu.Lock()
			defer mu.Unlock()
			ended = append(ended, ev.ID)
		},
	}))
	ctx := WithRunHooks(context.Background(), &Hooks{
		OnNodeStart: func(ctx context.Context, ev NodeEvent) context.Context {
			mu.Lock()
			defer mu.Unlock()
			started = append(started, ev.ID)
			return context.WithValue(ctx, key{}, ev.ID)
		},
	})
	seen := WorkerFunc[int, string](func(ctx context.Context, _ int, _ Wrappers) (string, error) {
		id, _ := ctx.Value(key{}).(string)
		return id, nil
	})
	fail := WorkerFunc[int, string](func(context.Context, int, Wrappers) (string, error) {
		return "", errors.New("boom")
	})
	x := NewWrapper("x", seen, 0)
	y := NewWrapper("y", fail, 0).Depend(x, true)
	z := NewWrapper("z", seen, 0).Depend(y, true)
	require.NoError(t, a.BeginWork(ctx, time.Minute, x))
	assert.Equal(t, "x", x.Result().Value, "OnNodeStart's context reaches x's worker")
	assert.Equal(t, ResultException, z.Result().State)
	assert.Equal(t, []string{"x", "y"}, started)
	assert.ElementsMatch(t, []string{"x", "y", "z"}, ended)

	var reports int
	b := newAsync(t, WithHooks(&Hooks{OnRunEnd: func(context.Context, *Report) { reports++ }}))
	w := NewWrapper("w", seen, 0)
	require.NoError(t, b.BeginWork(context.Background(), time.Minute, w))
	assert.Equal(t, 1, reports)
	assert.Equal(t, ResultSuccess, w.Result().State)
}

// TestOnRunEndHooksShareOneFinishedReport: the run's OnRunEnd hooks, the
// Async's and the context's, get one report, made once the run has
// ended: it has the run's end time and its error (here a panic in a
// Result callback), which a report asked for while the run is still
// under way does not have.
func TestOnRunEndHooksShareOneFinishedReport(t *testing.T) {
	var mu sync.Mutex
	var reps []*Report
	keep := func(_ context.Context, rep *Report) {
		mu.Lock()
		defer mu.Unlock()
		reps = append(reps, rep)
	}
	a := newAsync(t, WithHooks(&Hooks{OnRunEnd: keep}))
	x := NewWrapper("x", okWorker(), 0).Callback(ResultFunc[int, int](func(bool, int, WorkResult[int]) { panic("the log broke") }))
	err := a.BeginWork(WithRunHooks(context.Background(), &Hooks{OnRunEnd: keep}), time.Minute, x)
	var cpe *CallbackPanicError
	require.ErrorAs(t, err, &cpe)
	require.Len(t, reps, 2)
	assert.Same(t, reps[0], reps[1], "the Async's and the run's OnRunEnd got one report")
	rep := reps[0]
	assert.False(t, rep.End.IsZero(), "the report has the run's end")
	assert.False(t, rep.End.Before(rep.Start), "the run ended before it began")
	assert.ErrorAs(t, rep.RunErr, &cpe, "the report has the run's error")
}

// TestRunInfoDeadlineIsTheEarlier: OnRunStart's RunInfo.Deadline is the
// run's group deadline, the earlier of the context's deadline and the
// start plus BeginWork's timeout, zero when there is neither.
func TestRunInfoDeadlineIsTheEarlier(t *testing.T) {
	for _, tt := range []struct {
		name         string
		ctx, timeout time.Duration // 0: none
		want         time.Duration // from the start; 0: no deadline
	}{
		{"the context's", time.Minute, time.Hour, time.Minute},
		{"the timeout's", time.Hour, time.Minute, time.Minute},
		{"the context's alone", time.Minute, 0, time.Minute},
		{"the timeout's alone", 0, time.Minute, time.Minute},
		{"none", 0, 0, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var got time.Time
				a := New(WithHooks(&Hooks{OnRunStart: func(ctx context.Context, info RunInfo) context.Context {
					got = info.Deadline
					return ctx
				}}))
				defer a.Close()
				ctx := context.Background()
				if tt.ctx > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tt.ctx)
					defer cancel()
				}
				start := time.Now()
				require.NoError(t, a.BeginWork(ctx, tt.timeout, NewWrapper("x", okWorker(), 0)))
				if tt.want == 0 {
					assert.True(t, got.IsZero(), "deadline %v, want none", got)
					return
				}
				assert.True(t, got.Equal(start.Add(tt.want)), "deadline %v after the start, want %v", got.Sub(start), tt.want)
			})
		})
	}
}

// TestSameHooksForAsyncAndRunFireOnce: hooks given both to the Async and
// to a run's context (a shared value, installed everywhere) fired twice
// for every event, so that a tracer started two spans per node and
// counted each node's outcome twice.
func TestSameHooksForAsyncAndRunFireOnce(t *testing.T) {
	var mu sync.Mutex
	calls := map[string]int{}
	count := func(name string) {
		mu.Lock()
		defer mu.Unlock()
		calls[name]++
	}
	h := &Hooks{
		OnRunStart: func(ctx context.Context, _ RunInfo) context.Context { count("OnRunStart"); return ctx },
		OnNodeStart: func(ctx context.Context, _ NodeEvent) context.Context {
			count("OnNodeStart")
			return ctx
		},
		OnNodeEnd: func(context.Context, NodeEvent) { count("OnNodeEnd") },
		OnRunEnd:  func(context.Context, *Report) { count("OnRunEnd") },
	}
	a := newAsync(t, WithHooks(h))
	inner := NewWrapper("inner", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 1, nil }), 0)
	pl, err := Compile(inner)
	require.NoError(t, err)
	x := NewWrapper("x", SubPlan[int, int]{Plan: pl, Output: inner.ValueIn}, 0)
	require.NoError(t, a.BeginWork(WithRunHooks(context.Background(), h), time.Minute, x))
	// The run and its SubPlan's sub-run, which inherits the run's
	// hooks from x's context: each calls h once per event.
	assert.Equal(t, map[string]int{"OnRunStart": 2, "OnNodeStart": 2, "OnNodeEnd": 2, "OnRunEnd": 2}, calls)
}

// TestHooksGivenTwice: WithHooks given twice installs both sets, in
// order, so that a tracer's hooks and a user's both fire (it kept only
// the last, and an OpenTelemetry set given first was silently lost); the
// same set given again, and nil, add nothing. WithRunHooks on a context
// that already holds run hooks replaces them, as context.WithValue does;
// the Async's hooks and the context's all fire, the Async's first, for
// every event: the run's start and end, and a node's start, retry and
// end. A nil set given to WithRunHooks adds nothing either.
func TestHooksGivenTwice(t *testing.T) {
	var mu sync.Mutex
	var fired []string
	named := func(name string) *Hooks {
		fire := func(hook string) {
			mu.Lock()
			defer mu.Unlock()
			fired = append(fired, hook+" "+name)
		}
		return &Hooks{
			OnRunStart: func(ctx context.Context, _ RunInfo) context.Context { fire("OnRunStart"); return ctx },
			OnNodeStart: func(ctx context.Context, _ NodeEvent) context.Context {
				fire("OnNodeStart")
				return ctx
			},
			OnNodeRetry: func(context.Context, NodeEvent) { fire("OnNodeRetry") },
			OnNodeEnd:   func(context.Context, NodeEvent) { fire("OnNodeEnd") },
			OnRunEnd:    func(context.Context, *Report) { fire("OnRunEnd") },
		}
	}
	// flaky fails its first call, and the node's retry succeeds.
	flaky := func(id string) *WorkerWrapper[int, int] {
		calls := 0
		return NewWrapper(id, WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			if calls++; calls == 1 {
				return 0, errBoom
			}
			return 1, nil
		}), 0).Retry(RetryPolicy{Attempts: 2})
	}
	// each is what one event fires: the hook of each set, in order.
	each := func(sets ...string) func(hooks ...string) []string {
		return func(hooks ...string) []string {
			var want []string
			for _, h := range hooks {
				for _, s := range sets {
					want = append(want, h+" "+s)
				}
			}
			return want
		}
	}
	first := named("async 1")
	a := newAsync(t, WithHooks(first), WithHooks(nil), WithHooks(named("async 2")), WithHooks(first))
	ctx := WithRunHooks(WithRunHooks(context.Background(), named("run 1")), named("run 2"))
	require.NoError(t, a.BeginWork(ctx, time.Minute, flaky("x")))
	assert.Equal(t, each("async 1", "async 2", "run 2")("OnRunStart", "OnNodeStart", "OnNodeRetry", "OnNodeStart", "OnNodeEnd", "OnRunEnd"), fired)

	// A run's hooks that are one of the Async's sets, or nil, fire once,
	// or add nothing.
	for _, h := range []*Hooks{first, nil} {
		fired = nil
		require.NoError(t, a.BeginWork(WithRunHooks(context.Background(), h), time.Minute, NewWrapper("y", okWorker(), 0)))
		assert.Equal(t, each("async 1", "async 2")("OnRunStart", "OnNodeStart", "OnNodeEnd", "OnRunEnd"), fired)
	}
}
