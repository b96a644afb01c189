package asynctool

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGoexitInDefaultValueDuringLateSucceedWith: endedLate
// calls the worker's DefaultValue (user code) on the caller's goroutine while Resume holds its task reference. If it ends
// the goroutine (runtime.Goexit), failResult's rescueEnding ends the node
// with references of its own, but settleResumed never runs: the
// reference resumeStart took is never released, and Close waits forever.
// Before dac8c32 SucceedWith called no user code.
func TestGoexitInDefaultValueDuringLateSucceedWith(t *testing.T) {
	a, r, p, release := holdSweepBeforeP(t, Worker[int, int](goexitDefaulter{}))
	defer release()
	resumed := make(chan struct{})
	go func() {
		defer close(resumed)
		_ = r.Resume("p", SucceedWith(7)) // ends p late: DefaultValue Goexits
	}()
	<-resumed
	release()
	requireEnds(t, r, "run never ended")
	assert.Equal(t, ResultTimeout, p.Result().State)
	requireCloses(t, a, "Close blocked: Resume's task reference leaked (busy=%d refs=%d)", r.busy.Load(), r.refs.Load())
}

// TestGoexitInDefaultValueDuringFailWith: Resume(FailWith) writes the
// node's default value; a DefaultValue that calls runtime.Goexit left
// Resume's reference held, so Close never returned.
func TestGoexitInDefaultValueDuringFailWith(t *testing.T) {
	a := New()
	p := NewWrapper("p", Worker[int, int](goexitDefaulter{}), 0).OnFailure(PolicySuspend)
	r, err := a.Start(context.Background(), time.Minute, p)
	require.NoError(t, err)
	<-r.Suspended()
	resumed := make(chan struct{})
	go func() {
		defer close(resumed)
		_ = r.Resume("p", FailWith(errBoom)) // DefaultValue ends this goroutine
	}()
	<-resumed
	requireEnds(t, r, "run never ended")
	requireCloses(t, a, "Close blocked: Resume's task reference leaked")
}

// TestGoexitFailureAppliesThePolicy: a worker that ends its goroutine with
// runtime.Goexit (t.FailNow in a test's worker) fails its node with
// ErrGoexit, and that failure is the node's like any other: its
// OnFailure policy applies, as it does to an error or a panic. It did
// not: under PolicyEnd the run went on and BeginWork returned nil, under
// PolicyContinue the must successor failed, and under PolicySuspend the
// node failed instead of becoming pending.
func TestGoexitFailureAppliesThePolicy(t *testing.T) {
	build := func(policy FailurePolicy, gate <-chan struct{}) (up, down, other *WorkerWrapper[int, int]) {
		up = NewWrapper("up", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			runtime.Goexit()
			return 0, nil
		}), 0).OnFailure(policy)
		down = NewWrapper("down", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 2, nil }), 0).
			Depend(up, true)
		other = NewWrapper("other", gatedWorker(gate, 1), 0)
		return up, down, other
	}
	t.Run("end", func(t *testing.T) {
		a := newAsync(t)
		gate := make(chan struct{}) // never closed: other runs until the run ends
		up, _, other := build(PolicyEnd, gate)
		err := a.BeginWork(context.Background(), time.Second, up, other)
		var ee *EndError
		if !errors.As(err, &ee) || ee.ID != "up" || !errors.Is(ee.Err, ErrGoexit) {
			t.Fatalf("BeginWork returned %v, want the EndError of up", err)
		}
		if res := other.Result(); res.Err != error(ee) {
			t.Errorf("other: %+v, want the run's EndError", res)
		}
	})
	t.Run("continue", func(t *testing.T) {
		a := newAsync(t)
		gate := make(chan struct{})
		close(gate)
		up, down, other := build(PolicyContinue, gate)
		if err := a.BeginWork(context.Background(), 10*time.Second, up, other); err != nil {
			t.Fatal(err)
		}
		if res := up.Result(); !errors.Is(res.Err, ErrGoexit) {
			t.Errorf("up: %+v", res)
		}
		if res := down.Result(); res.State != ResultSuccess {
			t.Errorf("down: %+v, want a success: up failed under PolicyContinue", res)
		}
	})
	t.Run("suspend", func(t *testing.T) {
		a := newAsync(t)
		gate := make(chan struct{})
		close(gate)
		up, down, other := build(PolicySuspend, gate)
		r, err := a.Start(context.Background(), 10*time.Second, up, other)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-r.Suspended():
		case <-r.Done():
			t.Fatalf("the run ended without suspending up: %+v", up.Result())
		}
		if err := r.Resume("up", SucceedWith(7)); err != nil {
			t.Fatal(err)
		}
		if err := r.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		if res := down.Result(); res.State != ResultSuccess {
			t.Errorf("down: %+v", res)
		}
	})
}

// goexits is a worker that ends its goroutine with runtime.Goexit, as
// t.FailNow does in a test's worker.
func goexits(context.Context, Wrappers) (int, error) {
	runtime.Goexit()
	return 0, nil
}

// A worker that calls runtime.Goexit fails its node with ErrGoexit, and
// the node's failure policy applies to that failure as to any other:
// under PolicyContinue its dependants go on. The salvage of the exiting
// goroutine ended the node as a plain failure, so they failed.
func TestGoexitUnderPolicyContinue(t *testing.T) {
	a := newAsync(t)
	rec := newRecorder()
	x := rec.node("x", goexits).OnFailure(PolicyContinue)
	y := rec.node("y", ok(2)).Depend(x, true)
	require.NoError(t, a.BeginWork(context.Background(), 0, x))
	assert.ErrorIs(t, x.Result().Err, ErrGoexit)
	assert.Equal(t, ResultSuccess, y.Result().State, "x failed under PolicyContinue: y runs")
}

// Under PolicyEnd, a worker's Goexit ends the run with an *EndError, as
// its error would: the rest was left running until the deadline.
func TestGoexitUnderPolicyEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		rec := newRecorder()
		x := rec.node("x", goexits).OnFailure(PolicyEnd)
		z := rec.node("z", func(ctx context.Context, _ Wrappers) (int, error) {
			<-ctx.Done()
			return 0, ctx.Err()
		})
		start := time.Now()
		err := a.BeginWork(context.Background(), time.Hour, x, z)
		var ee *EndError
		require.ErrorAs(t, err, &ee)
		assert.Equal(t, "x", ee.ID)
		assert.ErrorIs(t, err, ErrGoexit)
		assert.Zero(t, time.Since(start), "the run ends at once, not at its deadline")
		assert.ErrorAs(t, z.Result().Err, &ee)
	})
}

// Under PolicySuspend, a worker's Goexit makes the node pending, to be
// resumed, instead of failing it.
func TestGoexitUnderPolicySuspend(t *testing.T) {
	a := newAsync(t)
	rec := newRecorder()
	x := rec.node("x", goexits).OnFailure(PolicySuspend).Retry(RetryPolicy{Attempts: 3})
	y := rec.node("y", ok(2)).Depend(x, true)
	r, err := a.Start(context.Background(), 0, x)
	require.NoError(t, err)
	waitClosed(t, r.Suspended(), "x is not pending after its worker's Goexit")
	assert.Equal(t, 1, rec.count(rec.actions, "x"), "a Goexit is not retried, as a panic is not")
	rep := r.Report()
	assert.Equal(t, StatusPending, rep.Nodes[indexOf(r, "x")].Status)
	assert.ErrorIs(t, rep.Nodes[indexOf(r, "x")].Err, ErrGoexit)
	require.NoError(t, r.Resume("x", SucceedWith(1)))
	require.NoError(t, r.Wait(context.Background()))
	assert.Equal(t, ResultSuccess, y.Result().State)
}

// skipsX makes a graph, started at starts, whose node x is skipped: z
// runs on u, its first optional upstream to succeed, so that x, which
// waits for g, is needed no more; g waits for z.
func skipsX() (x *WorkerWrapper[int, int], starts []Wrapper) {
	ok := okWorker()
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
	return x, []Wrapper{u, g}
}

// TestGoexitInOnRunEndIsReported checks that a runtime.Goexit in an
// OnRunEnd hook comes back from BeginWork as a *CallbackPanicError, as a
// panic there does, instead of being lost.
func TestGoexitInOnRunEndIsReported(t *testing.T) {
	for _, kind := range []string{"goexit", "panic"} {
		t.Run(kind, func(t *testing.T) {
			a := newAsync(t)
			h := &Hooks{OnRunEnd: func(context.Context, *Report) {
				if kind == "panic" {
					panic("boom")
				}
				runtime.Goexit()
			}}
			x := NewWrapper("x", okWorker(), 0)
			err := a.BeginWork(WithRunHooks(context.Background(), h), time.Minute, x)
			var cpe *CallbackPanicError
			require.ErrorAs(t, err, &cpe)
			assert.Equal(t, "OnRunEnd", cpe.Method)
			assert.Equal(t, ResultSuccess, x.Result().State, "the run itself went as it would have")
			if kind == "goexit" {
				assert.ErrorIs(t, err, ErrGoexit)
			}
		})
	}
}

// TestGoexitInAnEndHookNamesTheHook: CallbackPanicError.Method is
// documented as "the name of a Hooks field (such as "OnNodeEnd")" for a
// hook. A runtime.Goexit in an end hook was reported as "Result", the
// name of the Result callback, which the node may not even have.
//
// The node's other end hooks still run, as after a panic there: OnNodeEnd
// is called once for every node. A Goexit in the Result callback, or in
// an end hook of the Async's hooks, used to skip the end hooks after it,
// the OnNodeEnd of the run's own hooks (an OpenTelemetry span's end, for
// one) among them.
func TestGoexitInAnEndHookNamesTheHook(t *testing.T) {
	for _, tc := range []struct{ name, method string }{
		{"OnNodeEnd", "OnNodeEnd"},
		{"OnNodeTimeout", "OnNodeTimeout"},
		{"OnNodeTimeout in the sweep", "OnNodeTimeout"},
		{"OnNodeSkip", "OnNodeSkip"},
		{"Result", "Result"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok := WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 1, nil })
			exit := func(_ context.Context, ev NodeEvent) {
				if ev.ID == "x" {
					runtime.Goexit()
				}
			}
			var ends atomic.Int32 // OnNodeEnd calls for x that returned
			countEnd := func(_ context.Context, ev NodeEvent) {
				if ev.ID == "x" {
					ends.Add(1)
				}
			}
			h := Hooks{OnNodeEnd: countEnd}
			x := NewWrapper("x", ok, 0)
			starts := []Wrapper{x}
			timeout := time.Minute
			var unblock func()
			switch tc.name {
			case "OnNodeEnd":
				h.OnNodeEnd = exit
			case "OnNodeTimeout":
				h.OnNodeTimeout = exit
				x = NewWrapper("x", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
					<-ctx.Done()
					return 0, ctx.Err()
				}), 0).Timeout(time.Millisecond)
				starts = []Wrapper{x}
			case "OnNodeTimeout in the sweep":
				// x ignores its ctx, so that the group deadline's sweep
				// ends it while it runs.
				h.OnNodeTimeout = exit
				gate := make(chan struct{})
				unblock = sync.OnceFunc(func() { close(gate) })
				t.Cleanup(unblock)
				x = NewWrapper("x", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
					<-gate
					return 1, nil
				}), 0)
				starts = []Wrapper{x}
				timeout = 10 * time.Millisecond
			case "OnNodeSkip":
				h.OnNodeSkip = exit
				x, starts = skipsX()
			case "Result":
				x.Callback(ResultFunc[int, int](func(bool, int, WorkResult[int]) { runtime.Goexit() }))
			}
			// h is the Async's, whose hooks come first; the run's own come
			// after them.
			a := newAsync(t, WithHooks(&h))
			err := a.BeginWork(WithRunHooks(context.Background(), &Hooks{OnNodeEnd: countEnd}), timeout, starts...)
			if unblock != nil {
				unblock()
			}
			var cpe *CallbackPanicError
			require.ErrorAs(t, err, &cpe)
			assert.Equal(t, "x", cpe.ID)
			assert.Equal(t, tc.method, cpe.Method, "the Goexit is reported under the name of what called it")
			assert.ErrorIs(t, err, ErrGoexit)
			want := int32(2)
			if tc.method == "OnNodeEnd" {
				want = 1 // the run's; the Async's is the one that exited
			}
			assert.Equal(t, want, ends.Load(), "x's end hooks after the one that exited run, as after a panic")
		})
	}
}

// TestGoexitInCustomJoin also covers a claimed node (see worklist.claim):
// up's end readies other first (its out-edges are looked at last first),
// and its goroutine claims it to run next; the join's Goexit hands other
// to the goroutine that carries on.
//
// The join's node may also have a DefaultValue that calls Goexit when
// the node fails: that ran in the deferred call that hands the exiting
// goroutine's work on, and its Goexit cut that call short, so up's other
// successors were never updated and the run was never done.
func TestGoexitInCustomJoin(t *testing.T) {
	for _, defaultExits := range []bool{false, true} {
		t.Run(fmt.Sprint("defaultExits=", defaultExits), func(t *testing.T) {
			a := newAsync(t)
			up := NewWrapper("up", okWorker(), 0)
			var w Worker[int, int] = okWorker()
			if defaultExits {
				w = goexitDefaulter{}
			}
			down := NewWrapper("down", w, 0).Depend(up, true).
				Join(CustomJoin(func([]Upstream) Decision { runtime.Goexit(); return DecideRun }))
			other := NewWrapper("other", okWorker(), 0).Depend(up, true)
			r, err := a.Start(context.Background(), time.Minute, up)
			require.NoError(t, err)
			requireEnds(t, r, "the run did not end: up's other successors were never updated")
			assert.ErrorIs(t, down.Result().Err, ErrGoexit)
			assert.Equal(t, ResultSuccess, other.Result().State, "the other successors are still updated")
		})
	}
}

// TestGoexitInCustomJoinWithAClaimedSibling: up's goroutine claims last
// (its out-edges are looked at last first), then down's join unclaims it
// and ends the goroutine; the goroutine that carries on updates first.
// Every end is taken off the run's count once, and the run waits for
// first.
func TestGoexitInCustomJoinWithAClaimedSibling(t *testing.T) {
	a := newAsync(t)
	up := NewWrapper("up", okWorker(), 0)
	var firstRan atomic.Bool
	first := NewWrapper("first", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		time.Sleep(10 * time.Millisecond)
		firstRan.Store(true)
		return 1, nil
	}), 0).Depend(up, true)
	down := NewWrapper("down", okWorker(), 0).Depend(up, true).
		Join(CustomJoin(func([]Upstream) Decision { runtime.Goexit(); return DecideRun }))
	last := NewWrapper("last", okWorker(), 0).Depend(up, true)
	r, err := a.Start(context.Background(), time.Minute, up)
	require.NoError(t, err)
	requireEnds(t, r, "the run did not end: an end was taken off its count twice")
	assert.True(t, firstRan.Load(), "the run waited for first")
	assert.Equal(t, ResultSuccess, first.Result().State)
	assert.ErrorIs(t, down.Result().Err, ErrGoexit)
	assert.Equal(t, ResultSuccess, last.Result().State)
	assert.Zero(t, up.singleRun().remaining.Load())
}

func TestGoexitInHooks(t *testing.T) {
	for _, h := range []*Hooks{
		{OnNodeStart: func(context.Context, NodeEvent) context.Context { runtime.Goexit(); return nil }},
		{OnNodeEnd: func(context.Context, NodeEvent) { runtime.Goexit() }},
	} {
		a := newAsync(t, WithHooks(h))
		x := NewWrapper("x", okWorker(), 0)
		y := NewWrapper("y", okWorker(), 0).Depend(x, true)
		_ = a.BeginWork(context.Background(), time.Minute, x)
		assert.NotEqual(t, ResultDefault, y.Result().State, "every node ends")
	}
}

// TestGoexitInOnNodeStartSkipsTheLaterSetsStart: as doc.go says, a
// Goexit in the Async's OnNodeStart fails the attempt with ErrGoexit at
// once, so the run's own OnNodeStart is not called for it, while the
// node's end hooks of both sets are, once.
func TestGoexitInOnNodeStartSkipsTheLaterSetsStart(t *testing.T) {
	a := newAsync(t, WithHooks(&Hooks{
		OnNodeStart: func(context.Context, NodeEvent) context.Context { runtime.Goexit(); return nil },
	}))
	var starts, ends atomic.Int32
	own := &Hooks{
		OnNodeStart: func(ctx context.Context, _ NodeEvent) context.Context { starts.Add(1); return ctx },
		OnNodeEnd:   func(context.Context, NodeEvent) { ends.Add(1) },
	}
	x := NewWrapper("x", okWorker(), 0)
	err := a.BeginWork(WithRunHooks(context.Background(), own), time.Minute, x)
	var cpe *CallbackPanicError
	require.ErrorAs(t, err, &cpe)
	assert.Equal(t, "OnNodeStart", cpe.Method)
	assert.ErrorIs(t, x.Result().Err, ErrGoexit)
	assert.Zero(t, starts.Load(), "the run's OnNodeStart is not called for the attempt")
	assert.Equal(t, int32(1), ends.Load(), "the run's OnNodeEnd is called once")
}

// TestGoexitInOnNodeRetryIsNamed: a Goexit in an OnNodeRetry hook fails
// the node with ErrGoexit, as one in OnNodeStart does, and like it is
// returned by BeginWork as a *CallbackPanicError naming the hook, which
// the node's reason names too: it read "worker called runtime.Goexit",
// of a worker that had returned an error.
func TestGoexitInOnNodeRetryIsNamed(t *testing.T) {
	a := newAsync(t, WithHooks(&Hooks{
		OnNodeRetry: func(context.Context, NodeEvent) { runtime.Goexit() },
	}))
	var calls atomic.Int32
	x := NewWrapper("x", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		calls.Add(1)
		return 0, errBoom
	}), 0).Retry(RetryPolicy{Attempts: 3})
	r, err := a.Start(context.Background(), time.Minute, x)
	require.NoError(t, err)
	requireEnds(t, r, "the run did not end after a Goexit in OnNodeRetry")
	var cpe *CallbackPanicError
	require.ErrorAs(t, r.Wait(context.Background()), &cpe)
	assert.Equal(t, "OnNodeRetry", cpe.Method)
	assert.Equal(t, "x", cpe.ID)
	assert.ErrorIs(t, cpe, ErrGoexit)
	assert.ErrorIs(t, x.Result().Err, ErrGoexit)
	assert.Equal(t, int32(1), calls.Load(), "no retry")
	assert.Equal(t, "hook OnNodeRetry called runtime.Goexit", r.Report().Nodes[0].Reason)
	// Neither text blames the worker, which returned, nor calls a Goexit
	// a panic: they read "callback OnNodeRetry of node "x" panicked:
	// asynctool: worker called runtime.Goexit".
	assert.Equal(t, `asynctool: callback OnNodeRetry of node "x" called runtime.Goexit`, cpe.Error())
	assert.NotContains(t, x.Result().Err.Error(), "worker")
}

// Regression tests from a second review.

// TestGoexitInOnRunEnd: a run whose OnRunEnd hook ends its goroutine
// with runtime.Goexit ends, and the OnRunEnd hooks of the sets after it
// (here the run's own, after the Async's) still run, before the run is
// done, as after a panic: they were skipped, and an OpenTelemetry run
// span among them would never end. The run ends on a worker's goroutine,
// or on the sweep's when the deadline ends it.
//
// The run's last node may itself have ended the goroutine first, in its
// Result callback or its last end hook: its end was then processed in
// the deferred call that hands the goroutine's work on, and the Goexit of
// OnRunEnd there cut that call short. On the sweep's goroutine the sweep
// never finished, so the run was never done and Close hung.
func TestGoexitInOnRunEnd(t *testing.T) {
	for _, swept := range []bool{false, true} {
		for _, first := range []string{"", "Result", "OnNodeEnd"} {
			t.Run(fmt.Sprint("swept=", swept, ",first=", first), func(t *testing.T) {
				a := New(WithHooks(&Hooks{OnRunEnd: func(context.Context, *Report) { runtime.Goexit() }}))
				gate := make(chan struct{})
				release := sync.OnceFunc(func() { close(gate) })
				t.Cleanup(release)
				x := NewWrapper("x", okWorker(), 0)
				timeout := time.Minute
				if swept {
					// x ignores its ctx: the deadline's sweep ends it, and the run.
					x = NewWrapper("x", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
						<-gate
						return 1, nil
					}), 0)
					timeout = 10 * time.Millisecond
				}
				var ends atomic.Int32
				own := &Hooks{OnRunEnd: func(context.Context, *Report) { ends.Add(1) }}
				switch first {
				case "Result":
					x.Callback(ResultFunc[int, int](func(bool, int, WorkResult[int]) { runtime.Goexit() }))
				case "OnNodeEnd":
					// The run's own hooks come last: this is x's last end hook.
					own.OnNodeEnd = func(context.Context, NodeEvent) { runtime.Goexit() }
				}
				r, err := a.Start(WithRunHooks(context.Background(), own), timeout, x)
				require.NoError(t, err)
				requireEnds(t, r, "run never done after Goexit in OnRunEnd")
				assert.Equal(t, int32(1), ends.Load(), "the run's own OnRunEnd ran, before the run was done")
				err = r.Wait(context.Background())
				var cpe *CallbackPanicError
				require.ErrorAs(t, err, &cpe)
				methods := []string{}
				for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
					if errors.As(e, &cpe) {
						methods = append(methods, cpe.Method)
					}
				}
				want := []string{"OnRunEnd"}
				if first != "" {
					want = []string{first, "OnRunEnd"}
				}
				assert.Equal(t, want, methods, "each Goexit is reported once, in order")
				assert.Equal(t, "asynctool: hook OnRunEnd of the run called runtime.Goexit", cpe.Error())
				release()
				require.NoError(t, a.Close())
			})
		}
	}
}

type goexitDefaulter struct{}

func (goexitDefaulter) Action(context.Context, int, Wrappers) (int, error) { return 0, errBoom }

func (goexitDefaulter) DefaultValue() int { runtime.Goexit(); return 0 }

// TestGoexitInDefaultValue: a DefaultValue that calls runtime.Goexit
// ends its node with the zero value, is reported, and the run goes on;
// no DefaultValue is called again in the run, but a node that fails
// afterwards still gets its Default, which is no user code (it got the
// zero value).
func TestGoexitInDefaultValue(t *testing.T) {
	a := New()
	w := NewWrapper("w", Worker[int, int](goexitDefaulter{}), 0)
	next := NewWrapper("next", okWorker(), 0).Depend(w, true).Default(7)
	r, err := a.Start(context.Background(), time.Minute, w)
	require.NoError(t, err)
	requireEnds(t, r, "run never done after Goexit in DefaultValue, state %v", w.State())
	var cpe *CallbackPanicError
	assert.ErrorAs(t, r.Wait(context.Background()), &cpe)
	assert.Equal(t, WorkResult[int]{State: ResultException, Err: errBoom}, w.Result())
	assert.ErrorIs(t, next.Result().Err, errBoom)
	assert.Equal(t, 7, next.Result().Value, "next's Default")
	require.NoError(t, a.Close())
}

// A Goexit in OnRunStart ends the caller's goroutine before the run
// starts, as the package doc says: no node runs, no OnRunEnd is called
// (that of a set whose OnRunStart returned before included), a later
// set's OnRunStart is not called, the wrapper reads as not ended and
// cannot be run again, and Close does not wait for the run.
func TestGoexitInOnRunStart(t *testing.T) {
	for _, goexitFirst := range []bool{false, true} {
		var starts, ends, calls atomic.Int32
		other := &Hooks{
			OnRunStart: func(ctx context.Context, _ RunInfo) context.Context { starts.Add(1); return ctx },
			OnRunEnd:   func(context.Context, *Report) { ends.Add(1) },
		}
		goexit := &Hooks{OnRunStart: func(context.Context, RunInfo) context.Context { runtime.Goexit(); return nil }}
		own, run := other, goexit // the Async's hooks run before the run's
		if goexitFirst {
			own, run = goexit, other
		}
		a := New(WithHooks(own))
		x := NewWrapper("x", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			calls.Add(1)
			return 1, nil
		}), 0)
		returned := false
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = a.Start(WithRunHooks(context.Background(), run), time.Minute, x)
			returned = true
		}()
		<-done
		assert.False(t, returned, "Start returned")
		requireCloses(t, a, "Close hangs after Goexit in OnRunStart")
		if goexitFirst {
			assert.Zero(t, starts.Load(), "the later set's OnRunStart")
		} else {
			assert.Equal(t, int32(1), starts.Load(), "the earlier set's OnRunStart")
		}
		assert.Zero(t, ends.Load(), "OnRunEnd")
		assert.Zero(t, calls.Load(), "the worker")
		assert.Equal(t, StateInit, x.State())
		assert.Equal(t, WorkResult[int]{}, x.Result())
		again := New()
		assert.ErrorIs(t, again.BeginWork(context.Background(), time.Minute, x), ErrReused)
		require.NoError(t, again.Close())
	}
}

// TestGoexitInALaterRootWithInlineExecutor: with an executor that runs
// tasks submitted from its own tasks inline, the helper for root b runs
// inside the task that starts the run; b's worker ending that goroutine
// (runtime.Goexit) must not lose root a, which the task was about to run.
func TestGoexitInALaterRootWithInlineExecutor(t *testing.T) {
	var inTask atomic.Bool
	a := newAsync(t, WithExecutor(ExecutorFunc(func(task func()) error {
		if inTask.Load() {
			task()
			return nil
		}
		go func() {
			inTask.Store(true)
			task()
		}()
		return nil
	})))
	x := NewWrapper("a", okWorker(), 0)
	y := NewWrapper("b", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		runtime.Goexit()
		return 0, nil
	}), 0)
	r, err := a.Start(context.Background(), time.Minute, x, y)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, r.Wait(ctx), "the run ends without its deadline")
	assert.Equal(t, ResultSuccess, x.Result().State)
	assert.ErrorIs(t, y.Result().Err, ErrGoexit)
}

// TestGoexitInAnInlineHelper: a helper that an executor of the user's
// runs on the sharing goroutine ends it with runtime.Goexit; the rest of
// that goroutine's work (here b) goes on elsewhere.
func TestGoexitInAnInlineHelper(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int32
		a := New(WithExecutor(ExecutorFunc(func(task func()) error {
			if n.Add(1) == 1 {
				go task()
			} else {
				task()
			}
			return nil
		})))
		defer a.Close()
		up := NewWrapper("up", okWorker(), 0)
		NewWrapper("a", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { runtime.Goexit(); return 0, nil }), 0).Depend(up, true)
		b := NewWrapper("b", okWorker(), 0).Depend(up, true)
		r, err := a.Start(context.Background(), time.Minute, up)
		require.NoError(t, err)
		require.NoError(t, r.Wait(context.Background()))
		assert.Equal(t, ResultSuccess, b.Result().State)
	})
}

// TestGoexitInRetryPolicyIsNotTheWorkers: a RetryPolicy's Retryable or
// Backoff that ended its goroutine with runtime.Goexit made the node fail
// with a bare ErrGoexit, "worker called runtime.Goexit", and a report
// that blamed the worker (which had returned an error and called Goexit
// nowhere), and the error the worker returned, the failure the policy
// was asked about, was lost; a stream node's Goexit there stopped the
// stream as if the node's function had called it. As for a panic there
// (TestRetryPolicyPanicIsNotTheWorkers), the node now fails with an error
// that wraps ErrGoexit and the attempt's error and blames the retry
// policy, under its failure policy, for graph and stream nodes alike.
func TestGoexitInRetryPolicyIsNotTheWorkers(t *testing.T) {
	policies := map[string]RetryPolicy{
		"Retryable": {Attempts: 3, Retryable: func(error) bool { runtime.Goexit(); return true }},
		"Backoff":   {Attempts: 3, Backoff: func(int) time.Duration { runtime.Goexit(); return 0 }},
	}
	check := func(t *testing.T, err error) {
		t.Helper()
		assert.ErrorIs(t, err, ErrGoexit)
		assert.ErrorIs(t, err, errBoom, "the worker's own error")
		assert.Contains(t, err.Error(), "retry policy")
		assert.Contains(t, err.Error(), errBoom.Error())
	}
	for name, rp := range policies {
		t.Run(name, func(t *testing.T) {
			a := newAsync(t)
			x := NewWrapper("x", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
				return 0, errBoom
			}), 0).Retry(rp).OnFailure(PolicyContinue)
			y := NewWrapper("y", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
				return 1, nil
			}), 0).Depend(x, true)
			r, err := a.Start(context.Background(), time.Minute, x)
			require.NoError(t, err)
			require.NoError(t, r.Wait(context.Background()))
			check(t, x.ResultIn(r).Err)
			assert.Equal(t, ResultSuccess, y.ResultIn(r).State, "x failed under PolicyContinue")
			n := r.Report().Nodes[0]
			assert.Equal(t, 1, n.Attempts)
			assert.Equal(t, "retry policy called runtime.Goexit", n.Reason)

			s := NewStream(0)
			sn := s.AppendWith(func(context.Context, int) (int, error) { return -1, errBoom }, PolicyFail, StreamRetry(rp))
			next := s.Append(func(_ context.Context, v int) (int, error) { return v + 1, nil })
			go func() { _ = s.Run(context.Background()) }()
			v, err := sn.Wait()
			check(t, err)
			assert.Equal(t, -1, v, "the value the failed attempt returned, which called no Goexit")
			assert.NotErrorIs(t, err, ErrStreamStopped, "the node failed; it was not stopped")
			_, err = next.Wait()
			assert.ErrorIs(t, err, ErrStreamStopped)
			assert.ErrorIs(t, err, errBoom, "stopped by the node's failure")
			assert.ErrorIs(t, s.Close(), errBoom)
		})
	}
}

// TestGoexitsInEndHooksOfSeveralNodes: OnNodeEnd is called once for
// every node, and every other end hook once where it applies, even when
// several end hooks of several nodes, in both sets of hooks, end their
// goroutines with runtime.Goexit (one after another on one node, and a
// panic after them), on workers' goroutines or the deadline's sweep, and
// in runs of one Plan reused from its pool. Every node runs once, the
// OnRunEnd hooks of both sets run once, and the run is done.
func TestGoexitsInEndHooksOfSeveralNodes(t *testing.T) {
	for _, swept := range []bool{false, true} {
		for _, pooled := range []bool{false, true} {
			t.Run(fmt.Sprint("swept=", swept, ",pooled=", pooled), func(t *testing.T) {
				var mu sync.Mutex
				calls := map[string]int{}
				count := func(key string) {
					mu.Lock()
					calls[key]++
					mu.Unlock()
				}
				hooks := func(set string, exitOn map[string]bool) *Hooks {
					end := func(name string) func(context.Context, NodeEvent) {
						return func(_ context.Context, ev NodeEvent) {
							count(set + " " + name + " " + ev.ID)
							if exitOn[name+" "+ev.ID] {
								runtime.Goexit()
							}
							if set == "run" && name == "OnNodeEnd" && ev.ID == "y0" {
								panic("boom")
							}
						}
					}
					return &Hooks{
						OnNodeEnd: end("OnNodeEnd"), OnNodeTimeout: end("OnNodeTimeout"), OnNodeSkip: end("OnNodeSkip"),
						OnRunEnd: func(context.Context, *Report) {
							count(set + " OnRunEnd")
							runtime.Goexit()
						},
					}
				}
				a := New(WithHooks(hooks("async", map[string]bool{
					"OnNodeEnd x0": true, "OnNodeEnd x1": true, "OnNodeTimeout x0": true, "OnNodeEnd y1": true,
				})))
				ctx := WithRunHooks(context.Background(), hooks("run", map[string]bool{
					"OnNodeEnd x0": true, "OnNodeTimeout x1": true, "OnNodeEnd x1": true,
				}))
				gate := make(chan struct{})
				release := sync.OnceFunc(func() { close(gate) })
				t.Cleanup(release)
				var ran sync.Map
				worker := func(id string) WorkerFunc[int, int] {
					return func(context.Context, int, Wrappers) (int, error) {
						_, again := ran.LoadOrStore(id, true)
						assert.False(t, again, "%s ran twice", id)
						if swept && id[0] == 'x' {
							<-gate // ignores its ctx: the sweep ends it
						}
						return 1, nil
					}
				}
				x0 := NewWrapper("x0", worker("x0"), 0)
				x1 := NewWrapper("x1", worker("x1"), 0)
				y0 := NewWrapper("y0", worker("y0"), 0).Depend(x0, true).Depend(x1, true)
				y1 := NewWrapper("y1", worker("y1"), 0).Depend(x1, true)
				NewWrapper("z", worker("z"), 0).Depend(y0, true).Depend(y1, true)
				ids := []string{"x0", "x1", "y0", "y1", "z"}
				timeout := time.Minute
				if swept {
					timeout = 20 * time.Millisecond
				}
				runs := 1
				var pl *Plan
				if pooled {
					runs = 3
					var err error
					pl, err = Compile(x0, x1)
					require.NoError(t, err)
				}
				for range runs {
					mu.Lock()
					clear(calls)
					mu.Unlock()
					ran.Clear()
					var r *Run
					var err error
					if pooled {
						r, err = a.StartPlan(ctx, pl, timeout)
					} else {
						r, err = a.Start(ctx, timeout, x0, x1)
					}
					require.NoError(t, err)
					requireEnds(t, r, "the run is not done")
					mu.Lock()
					for key, n := range calls {
						assert.Equal(t, 1, n, "%s called %d times", key, n)
					}
					for _, set := range []string{"async", "run"} {
						for _, id := range ids {
							assert.Equal(t, 1, calls[set+" OnNodeEnd "+id], "%s OnNodeEnd of %s", set, id)
						}
						assert.Equal(t, 1, calls[set+" OnRunEnd"], "%s OnRunEnd", set)
						if swept {
							assert.Equal(t, 1, calls[set+" OnNodeTimeout x0"], "%s OnNodeTimeout of x0", set)
							assert.Equal(t, 1, calls[set+" OnNodeTimeout x1"], "%s OnNodeTimeout of x1", set)
						}
					}
					mu.Unlock()
					if !swept {
						for _, id := range ids {
							_, ok := ran.Load(id)
							assert.True(t, ok, "%s never ran", id)
						}
					}
					r.Release()
				}
				release()
				require.NoError(t, a.Close())
			})
		}
	}
}

// TestGoexitOnTheCallersGoroutineEndsOnlyThatCall pins what doc.go says
// of an executor that runs tasks on its caller: a worker's
// runtime.Goexit ends the goroutine that called BeginWork, so that call
// never returns, but the run still ends, with the worker's node failed
// with ErrGoexit, and Close returns.
func TestGoexitOnTheCallersGoroutineEndsOnlyThatCall(t *testing.T) {
	a := New(WithExecutor(ExecutorFunc(func(task func()) error { task(); return nil })))
	x := NewWrapper("x", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		runtime.Goexit()
		return 0, nil
	}), 0)
	y := NewWrapper("y", okWorker(), 0).Depend(x, false)
	returned, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		_ = a.BeginWork(context.Background(), time.Minute, x)
		close(returned)
	}()
	<-exited
	select {
	case <-returned:
		t.Fatal("BeginWork returned on the goroutine that Goexit ended")
	default:
	}
	require.Eventually(t, func() bool { return y.State() == StateError }, 10*time.Second, time.Millisecond,
		"the run goes on: y, whose only upstream failed, fails")
	assert.ErrorIs(t, x.Result().Err, ErrGoexit)
	require.NoError(t, a.Close())
}

// defaultEnder is a worker that fails, with errBoom or, under its own
// Timeout, by waiting for its ctx, and whose DefaultValue panics or
// ends its goroutine with runtime.Goexit.
type defaultEnder struct{ wait, goexit bool }

func (d defaultEnder) Action(ctx context.Context, _ int, _ Wrappers) (int, error) {
	if d.wait {
		<-ctx.Done()
		return 0, ctx.Err()
	}
	return 0, errBoom
}

func (d defaultEnder) DefaultValue() int {
	if d.goexit {
		runtime.Goexit()
	}
	panic("no default")
}

// TestDefaultValueEndingItsGoroutineKeepsThePolicy: a node's failure
// policy applies whatever its DefaultValue does, as it does when the
// DefaultValue panics. After a DefaultValue's runtime.Goexit, the node
// was finished without its policy: under PolicyContinue its must
// successor was skipped, and under PolicyEnd the run went on to its
// deadline and returned no EndError. The same held for a node ended by
// its own Timeout under PolicyEnd.
func TestDefaultValueEndingItsGoroutineKeepsThePolicy(t *testing.T) {
	for _, c := range []struct {
		name   string
		wait   bool // the node ends by its own Timeout, not by errBoom
		goexit bool // DefaultValue calls runtime.Goexit, else panics
	}{
		{"error/panic", false, false},
		{"error/goexit", false, true},
		{"timeout/panic", true, false},
		{"timeout/goexit", true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			x := func(p FailurePolicy) *WorkerWrapper[int, int] {
				w := NewWrapper("x", Worker[int, int](defaultEnder{wait: c.wait, goexit: c.goexit}), 0).OnFailure(p)
				if c.wait {
					w.Timeout(time.Second)
				}
				return w
			}
			t.Run("continue", func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					a := New()
					defer a.Close()
					up := x(PolicyContinue)
					down := NewWrapper("down", okWorker(), 0).Depend(up, true)
					err := a.BeginWork(context.Background(), time.Hour, up)
					var pe *PanicError
					require.ErrorAs(t, err, &pe, "the DefaultValue's end is reported")
					assert.Equal(t, ResultSuccess, down.Result().State,
						"up failed under PolicyContinue: down runs (%+v)", down.Result())
				})
			})
			t.Run("end", func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					a := New()
					defer a.Close()
					up := x(PolicyEnd)
					other := NewWrapper("other", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
						<-ctx.Done()
						return 0, ctx.Err()
					}), 0)
					start := time.Now()
					err := a.BeginWork(context.Background(), time.Hour, up, other)
					var ee *EndError
					require.ErrorAs(t, err, &ee, "up failed under PolicyEnd: the run ends with it")
					assert.Equal(t, "x", ee.ID)
					want := time.Duration(0)
					if c.wait {
						want = time.Second
					}
					assert.Equal(t, want, time.Since(start), "the run ends with up, not at its deadline")
				})
			})
		})
	}
}

// TestGoexitInAHookOfAMiddleSet: with three to five hook sets (the
// Async's, given to WithHooks, then the run's), a Goexit in one set's hook
// leaves the others' hooks of that kind called once each, for every kind,
// as doc.go says: the end hooks, OnNodePending and OnRunEnd of the sets
// after it run on a goroutine that carries on (the end hooks' positions
// are 3k to 3k+2 for set k), while OnNodeStart and OnNodeRetry of the
// sets after it are not called, for the attempt that the Goexit ended.
func TestGoexitInAHookOfAMiddleSet(t *testing.T) {
	kinds := []string{"OnNodeEnd", "OnNodeTimeout", "OnNodeSkip", "OnNodePending", "OnRunEnd", "OnNodeRetry", "OnNodeStart"}
	for _, kind := range kinds {
		for nsets := 3; nsets <= 5; nsets++ {
			for exitAt := 0; exitAt < nsets; exitAt++ {
				t.Run(fmt.Sprintf("%s/%d/%d", kind, nsets, exitAt), func(t *testing.T) {
					counts := make([]atomic.Int32, nsets)
					sets := make([]*Hooks, nsets)
					for k := range sets {
						count := func(ev NodeEvent) {
							if ev.ID == "x" {
								if k == exitAt {
									runtime.Goexit()
								}
								counts[k].Add(1)
							}
						}
						h := &Hooks{}
						switch kind {
						case "OnNodeEnd":
							h.OnNodeEnd = func(_ context.Context, ev NodeEvent) { count(ev) }
						case "OnNodeTimeout":
							h.OnNodeTimeout = func(_ context.Context, ev NodeEvent) { count(ev) }
						case "OnNodeSkip":
							h.OnNodeSkip = func(_ context.Context, ev NodeEvent) { count(ev) }
						case "OnNodePending":
							h.OnNodePending = func(_ context.Context, ev NodeEvent) { count(ev) }
						case "OnRunEnd":
							h.OnRunEnd = func(context.Context, *Report) { count(NodeEvent{ID: "x"}) }
						case "OnNodeRetry":
							h.OnNodeRetry = func(_ context.Context, ev NodeEvent) { count(ev) }
						case "OnNodeStart":
							h.OnNodeStart = func(ctx context.Context, ev NodeEvent) context.Context { count(ev); return ctx }
						}
						sets[k] = h
					}
					var opts []Option
					for _, h := range sets[:nsets-1] {
						opts = append(opts, WithHooks(h))
					}
					a := newAsync(t, opts...)
					ctx := WithRunHooks(context.Background(), sets[nsets-1])
					var starts []Wrapper
					switch kind {
					case "OnNodeTimeout":
						starts = []Wrapper{NewWrapper("x", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
							<-ctx.Done()
							return 0, ctx.Err()
						}), 0).Timeout(time.Millisecond)}
					case "OnNodeSkip":
						_, starts = skipsX()
					case "OnNodePending":
						starts = []Wrapper{NewWrapper("x", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
							return 0, errBoom
						}), 0).OnFailure(PolicySuspend)}
					case "OnNodeRetry":
						starts = []Wrapper{NewWrapper("x", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
							return 0, errBoom
						}), 0).Retry(RetryPolicy{Attempts: 2})}
					default:
						starts = []Wrapper{NewWrapper("x", okWorker(), 0)}
					}
					err := a.BeginWork(ctx, time.Minute, starts...)
					var cpe *CallbackPanicError
					if assert.ErrorAs(t, err, &cpe) {
						assert.Equal(t, kind, cpe.Method)
					}
					for k := range counts {
						want := int32(1)
						if k == exitAt {
							want = 0
						}
						if (kind == "OnNodeStart" || kind == "OnNodeRetry") && k > exitAt {
							want = 0
						}
						assert.Equal(t, want, counts[k].Load(), "%s of set %d", kind, k)
					}
				})
			}
		}
	}
}
