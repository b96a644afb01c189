package asynctool

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type ctxKey struct{}

// TestGroupDeadline checks rule 6 with fake time: BeginWork returns at the
// deadline; running and unstarted nodes end as timeouts with their default
// values and one callback each; unstarted nodes never start; running
// workers see ctx.Done(); request values flow to workers.
func TestGroupDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		rec := newRecorder()
		var sawValue, sawDone atomic.Bool
		fast := rec.node("fast", func(ctx context.Context, _ Wrappers) (int, error) {
			sawValue.Store(ctx.Value(ctxKey{}) == "req-1")
			return 1, nil
		})
		slow := rec.node("slow", func(ctx context.Context, _ Wrappers) (int, error) {
			<-ctx.Done()
			sawDone.Store(true)
			return 99, nil // returned after the deadline: dropped
		}).Default(-1)
		after := rec.node("after", ok(2)).Depend(slow, true).Default(-2)
		ctx := context.WithValue(context.Background(), ctxKey{}, "req-1")

		start := time.Now()
		err := a.BeginWork(ctx, 100*time.Millisecond, fast, slow)
		assert.Equal(t, 100*time.Millisecond, time.Since(start), "returns at the deadline")
		require.ErrorIs(t, err, context.DeadlineExceeded)

		assert.True(t, sawValue.Load(), "request-scoped values reach workers")
		assert.Equal(t, WorkResult[int]{Value: 1, State: ResultSuccess}, fast.Result())
		for id, w := range map[string]*WorkerWrapper[int, int]{"slow": slow, "after": after} {
			res := w.Result()
			assert.Equal(t, ResultTimeout, res.State, id)
			assert.ErrorIs(t, res.Err, context.DeadlineExceeded, id)
			assert.Equal(t, StateError, w.State(), id)
			assert.Equal(t, 1, rec.count(rec.results, id), id)
		}
		assert.Equal(t, -1, slow.Result().Value)
		assert.Equal(t, -2, after.Result().Value)
		assert.Equal(t, 0, rec.count(rec.begins, "after"), "an unstarted node never starts")
		synctest.Wait()
		assert.True(t, sawDone.Load(), "the running worker saw ctx.Done()")
		assert.Equal(t, -1, slow.Result().Value, "a late return cannot overwrite the timeout")
		assert.Equal(t, 0, rec.count(rec.begins, "after"), "a late return does not trigger the successor")
		assert.Equal(t, 0, rec.count(rec.actions, "after"), "a late return does not trigger the successor")
		for _, id := range []string{"slow", "after"} {
			assert.Equal(t, 1, rec.count(rec.results, id), "a late return calls no callback again: %s", id)
		}
	})
}

// TestDeadlineIgnoringWorker checks that a worker that ignores its context
// does not delay BeginWork, and that Close waits for it.
func TestDeadlineIgnoringWorker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		var returned atomic.Bool
		stubborn := NewWrapper("stubborn", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			time.Sleep(time.Second)
			returned.Store(true)
			return 1, nil
		}), 0)
		start := time.Now()
		err := a.BeginWork(context.Background(), 10*time.Millisecond, stubborn)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, 10*time.Millisecond, time.Since(start))
		assert.False(t, returned.Load())
		require.NoError(t, a.Close())
		assert.True(t, returned.Load(), "Close waited for the worker")
		assert.Equal(t, time.Second, time.Since(start))
		assert.Equal(t, ResultTimeout, stubborn.Result().State)
	})
}

// TestContextDeadlineWins checks that the group deadline is the earlier
// of ctx's and now+timeout.
func TestContextDeadlineWins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		deadlines := make(chan time.Time, 1)
		w := NewWrapper("w", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
			d, _ := ctx.Deadline()
			deadlines <- d
			<-ctx.Done()
			return 0, ctx.Err()
		}), 0)
		start := time.Now()
		err := a.BeginWork(ctx, time.Hour, w)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, start.Add(20*time.Millisecond), <-deadlines)
	})
}

// TestCancelCause checks that cancelling the caller's context ends the run
// with the cancellation cause.
func TestCancelCause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		ctx, cancel := context.WithCancelCause(context.Background())
		why := errors.New("client went away")
		w := NewWrapper("w", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
			<-ctx.Done()
			return 0, ctx.Err()
		}), 0)
		time.AfterFunc(5*time.Millisecond, func() { cancel(why) })
		err := a.BeginWork(ctx, 0, w)
		assert.ErrorIs(t, err, why)
		assert.ErrorIs(t, w.Result().Err, why)
		assert.Equal(t, ResultTimeout, w.Result().State)
	})
}

// TestAlreadyExpiredContext checks that a dead context starts nothing.
func TestAlreadyExpiredContext(t *testing.T) {
	a := newAsync(t)
	rec := newRecorder()
	x := rec.node("x", ok(1))
	y := rec.node("y", ok(1)).Depend(x, true)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := a.BeginWork(ctx, 0, x)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Empty(t, rec.order)
	assert.Equal(t, ResultTimeout, y.Result().State)
}

// TestStartAndCancel checks the asynchronous form.
func TestStartAndCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		rec := newRecorder()
		x := rec.node("x", func(ctx context.Context, _ Wrappers) (int, error) { <-ctx.Done(); return 0, ctx.Err() })
		r, err := a.Start(context.Background(), 0, x)
		require.NoError(t, err)
		synctest.Wait()
		select {
		case <-r.Done():
			t.Fatal("run ended early")
		default:
		}
		waitCtx, cancelWait := context.WithTimeout(context.Background(), time.Millisecond)
		defer cancelWait()
		assert.ErrorIs(t, r.Wait(waitCtx), context.DeadlineExceeded, "Wait gives up with its own ctx")
		r.Cancel()
		assert.ErrorIs(t, r.Wait(context.Background()), context.Canceled)
		assert.Equal(t, ResultTimeout, x.Result().State)
	})
}

// TestPanicsInPlainWorkers is TestPanics for nodes without a callback or
// flow rules, whose Action is called without a recover of its own: the
// run's loop recovers the panic and must end the node with it, as a node
// result and not a run error. late panics after the deadline: it ends
// as a timeout whether the sweep or the loop's recover gets to it first
// (the test does not control which).
func TestPanicsInPlainWorkers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		plain := func(id string, fn func(context.Context) (int, error)) *WorkerWrapper[int, int] {
			return NewWrapper(id, WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) { return fn(ctx) }), 0)
		}
		boom := plain("boom", func(context.Context) (int, error) { panic("kaboom") })
		errPanic := plain("errpanic", func(context.Context) (int, error) { panic(errBoom) })
		late := plain("late", func(ctx context.Context) (int, error) { <-ctx.Done(); panic("too late") })
		after := plain("after", func(context.Context) (int, error) { return 1, nil }).Depend(boom, true)

		err := a.BeginWork(context.Background(), time.Second, boom, errPanic, late)

		require.ErrorIs(t, err, context.DeadlineExceeded, "late's timeout; no panic is a run error")
		var cpe *CallbackPanicError
		assert.False(t, errors.As(err, &cpe), "a worker's panic is its node's result: %v", err)
		var pe *PanicError
		require.ErrorAs(t, boom.Result().Err, &pe)
		assert.Equal(t, "kaboom", pe.Value)
		assert.Contains(t, string(pe.Stack), "async_test.go", "the stack points at the panicking worker")
		assert.Equal(t, ResultException, boom.Result().State)
		assert.ErrorIs(t, errPanic.Result().Err, errBoom, "a panic with an error unwraps to it")
		assert.ErrorIs(t, after.Result().Err, pe, "the must successor fails with the panic")
		assert.Equal(t, ResultTimeout, late.Result().State, "a panic after the deadline is a timeout")
	})
}

// TestPanics checks rule 9: panics in workers and callbacks never crash
// the process nor leave a node stuck.
func TestPanics(t *testing.T) {
	a := newAsync(t)
	rec := newRecorder()
	boom := rec.node("boom", func(context.Context, Wrappers) (int, error) { panic("kaboom") })
	errPanic := rec.node("errpanic", func(context.Context, Wrappers) (int, error) { panic(errBoom) })
	after := rec.node("after", ok(1)).Depend(boom, true)
	badBegin := NewWrapper("badbegin", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		t.Error("Action must not run after Begin panicked")
		return 0, nil
	}), 0).Callback(panicky{begin: true})
	badResult := NewWrapper("badresult", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 5, nil }), 0).
		Callback(panicky{})
	next := rec.node("next", ok(1)).Depend(badResult, true)

	err := a.BeginWork(context.Background(), 0, boom, errPanic, badBegin, badResult)

	var pe *PanicError
	require.ErrorAs(t, boom.Result().Err, &pe)
	assert.Equal(t, "kaboom", pe.Value)
	assert.Contains(t, string(pe.Stack), "async_test.go", "the stack points at the panicking worker")
	assert.ErrorIs(t, errPanic.Result().Err, errBoom, "a panic with an error unwraps to it")
	assert.ErrorIs(t, after.Result().Err, pe)
	assert.Equal(t, ResultException, badBegin.Result().State)
	assert.Equal(t, WorkResult[int]{Value: 5, State: ResultSuccess}, badResult.Result(), "a Result panic does not change the result")
	assert.Equal(t, ResultSuccess, next.Result().State)

	var cpes []*CallbackPanicError
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var c *CallbackPanicError
		require.ErrorAs(t, e, &c)
		cpes = append(cpes, c)
	}
	require.Len(t, cpes, 2)
	got := []string{cpes[0].ID + "." + cpes[0].Method, cpes[1].ID + "." + cpes[1].Method}
	assert.ElementsMatch(t, []string{"badbegin.Begin", "badresult.Result"}, got)
}

type panicky struct{ begin bool }

func (p panicky) Begin() {
	if p.begin {
		panic("begin")
	}
}
func (p panicky) Result(bool, int, WorkResult[int]) {
	if !p.begin {
		panic("result")
	}
}

// TestIsolation checks that two Async values do not share goroutines: one
// saturated does not delay the other.
func TestIsolation(t *testing.T) {
	busy := newAsync(t, WithMaxWorkers(1))
	free := newAsync(t, WithMaxWorkers(1))
	gate := make(chan struct{})
	releaseGate := releaser(t, gate) // blocker ignores its ctx
	blocker := NewWrapper("blocker", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
		<-gate
		return 0, nil
	}), 0)
	r, err := busy.Start(context.Background(), 0, blocker)
	require.NoError(t, err)
	quick := NewWrapper("quick", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 1, nil }), 0)
	require.NoError(t, free.BeginWork(context.Background(), 0, quick))
	assert.Equal(t, ResultSuccess, quick.Result().State)
	releaseGate()
	require.NoError(t, r.Wait(context.Background()))
}

// TestCloseRejectsNewRuns checks Close's contract.
func TestCloseRejectsNewRuns(t *testing.T) {
	a := New()
	require.NoError(t, a.Close())
	require.NoError(t, a.Close(), "Close is idempotent")
	w := NewWrapper("w", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 1, nil }), 0)
	assert.ErrorIs(t, a.BeginWork(context.Background(), 0, w), ErrClosed)
	// The wrapper was not consumed by the refused run.
	b := newAsync(t)
	require.NoError(t, b.BeginWork(context.Background(), 0, w))
}

// TestRefusedStartPublishesNoRun checks that a Start refused by a closed
// Async never shows its run to readers of the wrappers' state: State
// called while refused Starts claim and release the same wrappers must
// not read a node index that another Start is rewriting (-race reports
// it if it does).
func TestRefusedStartPublishesNoRun(t *testing.T) {
	a := New()
	require.NoError(t, a.Close())
	up := NewWrapper("up", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 1, nil }), 0)
	w := NewWrapper("w", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 1, nil }), 0).Depend(up, true)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				// Refused by the closed Async, or by the other
				// goroutine's claim on the wrappers.
				_, err := a.Start(context.Background(), 0, up)
				assert.Error(t, err)
			}
		})
	}
	for range 20000 {
		assert.Equal(t, StateInit, w.State())
	}
	close(stop)
	wg.Wait()
}

// TestBadOptions checks that invalid options surface as errors.
func TestBadOptions(t *testing.T) {
	w := func() Wrapper {
		return NewWrapper("w", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 1, nil }), 0)
	}
	for _, o := range []Option{WithMaxWorkers(0), WithExecutor(nil)} {
		a := New(o)
		err := a.BeginWork(context.Background(), 0, w())
		assert.ErrorContains(t, err, "asynctool: With")
		require.NoError(t, a.Close())
		// A good option after a bad one does not mend it.
		a = New(o, WithMaxWorkers(2))
		assert.ErrorContains(t, a.BeginWork(context.Background(), 0, w()), "asynctool: With")
		require.NoError(t, a.Close())
	}
	a := newAsync(t)
	assert.ErrorIs(t, a.BeginWork(context.Background(), -time.Second, w()), ErrNegativeTimeout)
}

// TestExecutorOptionsLastOneWins: WithMaxWorkers and WithExecutor each
// choose where workers run, and of the two the last one given wins, as
// New says.
func TestExecutorOptionsLastOneWins(t *testing.T) {
	var submitted atomic.Int32
	e := ExecutorFunc(func(task func()) error {
		submitted.Add(1)
		go task()
		return nil
	})
	w := NewWrapper("w", okWorker(), 0)
	require.NoError(t, newAsync(t, WithExecutor(e), WithMaxWorkers(2)).BeginWork(context.Background(), 0, w))
	assert.Zero(t, submitted.Load(), "WithMaxWorkers, given last, makes the Async's own pool")
	w = NewWrapper("w", okWorker(), 0)
	require.NoError(t, newAsync(t, WithMaxWorkers(2), WithExecutor(e)).BeginWork(context.Background(), 0, w))
	assert.Positive(t, submitted.Load(), "WithExecutor, given last, runs the nodes on e")
}

// TestConcurrentRuns checks that one Async runs many graphs at once.
func TestConcurrentRuns(t *testing.T) {
	a := newAsync(t, WithMaxWorkers(4))
	var wg sync.WaitGroup
	for g := range 50 {
		wg.Go(func() {
			rec := newRecorder()
			x := rec.node("x", ok(g))
			y := rec.node("y", func(ctx context.Context, all Wrappers) (int, error) {
				r, err := ResultOf[int](all, "x")
				return r.Value * 2, err
			}).Depend(x, true)
			assert.NoError(t, a.BeginWork(context.Background(), 0, x))
			assert.Equal(t, 2*g, y.Result().Value)
		})
	}
	wg.Wait()
}

// TestNoPartialResult checks rule 3: a node whose must dependencies end at
// nearly the same instant always reads their final results.
func TestNoPartialResult(t *testing.T) {
	a := newAsync(t, WithMaxWorkers(8))
	for i := range 300 {
		c := NewWrapper("c", WorkerFunc[int, string](func(ctx context.Context, _ int, all Wrappers) (string, error) {
			var sb strings.Builder
			for k := range 4 {
				r, err := ResultOf[string](all, fmt.Sprint("x", k))
				if err != nil || r.State != ResultSuccess {
					return "", fmt.Errorf("x%d not final: %+v %v", k, r, err)
				}
				sb.WriteString(r.Value)
			}
			return sb.String(), nil
		}), 0)
		var starts []Wrapper
		for k := range 4 {
			x := NewWrapper(fmt.Sprint("x", k), WorkerFunc[int, string](func(context.Context, int, Wrappers) (string, error) {
				return fmt.Sprint(k), nil
			}), 0)
			c.Depend(x, true)
			starts = append(starts, x)
		}
		require.NoError(t, a.BeginWork(context.Background(), 0, starts...))
		require.Equal(t, WorkResult[string]{Value: "0123", State: ResultSuccess}, c.Result(), "iteration %d", i)
	}
}

// TestBeginWorkDoesNotWaitForAResumeThatCannotCome: BeginWork and
// RunPlan give the caller no Run, so nothing can resume a node their run
// suspends. Such a run waited for its deadline, doing nothing, and for
// ever without one (a context without a deadline and timeout 0, the
// common call): BeginWork, and Close after it, hung. It now ends once the
// run has stalled on its pending nodes, with an error naming the node and
// wrapping its failure, as a SubPlan's sub-run does; the other branches
// still run to their end first.
func TestBeginWorkDoesNotWaitForAResumeThatCannotCome(t *testing.T) {
	work := func(v int, err error) Worker[int, int] {
		return WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return v, err })
	}
	graph := func() (start []Wrapper, p, d, other *WorkerWrapper[int, int]) {
		p = NewWrapper("p", work(0, errBoom), 0).OnFailure(PolicySuspend)
		d = NewWrapper("d", work(2, nil), 0).Depend(p, true)
		other = NewWrapper("other", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			time.Sleep(10 * time.Millisecond) // still running when p suspends
			return 3, nil
		}), 0)
		return []Wrapper{p, other}, p, d, other
	}
	call := func(t *testing.T, f func() error) error {
		t.Helper()
		errc := make(chan error, 1)
		go func() { errc <- f() }()
		select {
		case err := <-errc:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("still waiting after 10s for a Resume nothing can make")
			return nil
		}
	}
	check := func(t *testing.T, err error, p, d, other *WorkerWrapper[int, int], in *Run) {
		t.Helper()
		require.Error(t, err)
		assert.ErrorIs(t, err, errBoom)
		assert.Contains(t, err.Error(), `suspended at node "p"`)
		res := func(w *WorkerWrapper[int, int]) WorkResult[int] {
			if in != nil {
				return w.ResultIn(in)
			}
			return w.Result()
		}
		assert.Equal(t, ResultSuccess, res(other).State, "the other branch ran to its end")
		assert.Equal(t, ResultTimeout, res(p).State)
		assert.Equal(t, ResultTimeout, res(d).State)
	}

	t.Run("BeginWork", func(t *testing.T) {
		a := newAsync(t)
		ctx, cancel := context.WithCancel(context.Background()) // no deadline
		t.Cleanup(cancel)                                       // before Close, should BeginWork still wait
		starts, p, d, other := graph()
		err := call(t, func() error { return a.BeginWork(ctx, 0, starts...) })
		t.Log(err)
		check(t, err, p, d, other, nil)
	})
	t.Run("RunPlan", func(t *testing.T) {
		a := newAsync(t)
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		starts, p, d, other := graph()
		pl, err := Compile(starts...)
		require.NoError(t, err)
		var r *Run
		err = call(t, func() error {
			var err error
			r, err = a.RunPlan(ctx, pl, 0)
			return err
		})
		require.NotNil(t, r)
		check(t, err, p, d, other, r)
		r.Release()
	})
	t.Run("Start still waits for Resume", func(t *testing.T) {
		a := newAsync(t)
		starts, p, _, _ := graph()
		r, err := a.Start(context.Background(), 0, starts...)
		require.NoError(t, err)
		<-r.Suspended()
		select {
		case <-r.Done():
			t.Fatal("a run with a handle ended while pending")
		case <-time.After(50 * time.Millisecond):
		}
		require.NoError(t, r.Resume("p", SucceedWith(1)))
		require.NoError(t, r.Wait(context.Background()))
		assert.Equal(t, 1, p.Result().Value)
	})
}

// TestRunPlanErrorNamesRunPlan: RunPlan with a nil or zero Plan said
// "StartPlan with a nil Plan", naming a method the caller did not call,
// and a Plan that is not nil.
func TestRunPlanErrorNamesRunPlan(t *testing.T) {
	a := newAsync(t)
	_, err := a.RunPlan(context.Background(), nil, time.Second)
	assert.EqualError(t, err, "asynctool: RunPlan with a nil or zero Plan (make one with Compile)")
	_, err = a.RunPlan(context.Background(), &Plan{}, time.Second)
	assert.EqualError(t, err, "asynctool: RunPlan with a nil or zero Plan (make one with Compile)")
	_, err = a.StartPlan(context.Background(), &Plan{}, time.Second)
	assert.EqualError(t, err, "asynctool: StartPlan with a nil or zero Plan (make one with Compile)")
}

// TestCompiledWrapperInBeginWork: a wrapper compiled into a Plan,
// given to BeginWork or Compile, gets an error that says to run the plan
// (it said "build new wrappers for every run", about
// a wrapper that never ran); given to Describe, one that names
// Plan.Describe (TestDescribeOfAUsedGraphPointsToItsReport).
func TestCompiledWrapperInBeginWork(t *testing.T) {
	w := NewWrapper("who", okWorker(), 0)
	_, err := Compile(w)
	require.NoError(t, err)
	a := New()
	defer a.Close()
	for _, err := range []error{
		a.BeginWork(context.Background(), time.Second, w),
		func() error { _, err := Compile(w); return err }(),
	} {
		assert.ErrorIs(t, err, ErrReused)
		assert.ErrorContains(t, err, `node "who" belongs to a compiled Plan: run the plan with RunPlan or StartPlan`)
	}
	_, err = Describe(w)
	assert.ErrorIs(t, err, ErrReused)
	assert.ErrorContains(t, err, `node "who" belongs to a compiled Plan: Plan.Describe describes it`)
	used := NewWrapper("used", okWorker(), 0)
	require.NoError(t, a.BeginWork(context.Background(), time.Second, used))
	err = a.BeginWork(context.Background(), time.Second, used)
	assert.ErrorContains(t, err, `node "used"; build new wrappers for every run`)
}

// TestNodeTimeoutGoesOnPastTheBound pins what WithMaxWorkers now says: a
// node's own timeout ends it on the timer's goroutine, which runs what its
// end makes ready, so a worker that ignores its ctx and holds the only
// goroutine of the pool does not hold its successors back. The docs said
// that only nested runs went past the bound.
func TestNodeTimeoutGoesOnPastTheBound(t *testing.T) {
	a := newAsync(t, WithMaxWorkers(1))
	gate, next := make(chan struct{}), make(chan struct{})
	release := releaser(t, gate)
	hung := NewWrapper("hung", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		<-gate // ignores its ctx
		return 1, nil
	}), 0).Timeout(time.Millisecond).OnFailure(PolicyContinue)
	NewWrapper("next", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		close(next)
		return 2, nil
	}), 0).Depend(hung, true)
	r, err := a.Start(context.Background(), time.Minute, hung)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-next:
	case <-time.After(10 * time.Second):
		t.Error("next waited for the hung worker's goroutine")
	}
	release()
	if err := r.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestNilOptionsDoNothing: the package documentation says the
// library never panics on bad input, but New, NewPool, NewSerial and
// NewKeyed called a nil option's method and panicked with a nil
// dereference. A nil option now does nothing.
func TestNilOptionsDoNothing(t *testing.T) {
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

func TestCloseWaitsForOpenRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		var calls atomic.Int32
		w := NewWrapper("w", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			if calls.Add(1) == 1 {
				return 0, errBoom
			}
			return 1, nil
		}), 0).OnFailure(PolicySuspend)
		r, err := a.Start(context.Background(), time.Minute, w)
		require.NoError(t, err)
		synctest.Wait() // w is pending
		closed := make(chan struct{})
		go func() { _ = a.Close(); close(closed) }()
		synctest.Wait()
		select {
		case <-closed:
			t.Fatal("Close returned while a run was open")
		default:
		}
		require.NoError(t, r.Resume("w", Rerun()))
		<-closed
		assert.Equal(t, WorkResult[int]{Value: 1, State: ResultSuccess}, w.Result())
	})
}

type gatedDefaulter struct {
	gate  chan struct{}
	calls *atomic.Int32
}

func (g gatedDefaulter) Action(context.Context, int, Wrappers) (int, error) { return 0, errBoom }

func (g gatedDefaulter) DefaultValue() int {
	if g.calls.Add(1) == 2 { // the call made by Resume(FailWith)
		<-g.gate
	}
	return 0
}

func TestCloseWaitsForResumeFailWith(t *testing.T) {
	a := New()
	gate := make(chan struct{})
	var calls atomic.Int32
	var closed, late atomic.Bool
	w := NewWrapper("w", Worker[int, int](gatedDefaulter{gate: gate, calls: &calls}), 0).
		OnFailure(PolicySuspend).
		Callback(ResultFunc[int, int](func(bool, int, WorkResult[int]) {
			if closed.Load() {
				late.Store(true)
			}
		}))
	r, err := a.Start(context.Background(), time.Minute, w)
	require.NoError(t, err)
	for r.nodes[0].st() != sPending {
		time.Sleep(time.Millisecond)
	}
	calls.Store(1)
	resumed := make(chan error)
	go func() { resumed <- r.Resume("w", FailWith(errBoom)) }()
	for calls.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	r.Cancel() // the sweep finds w ending and resolves
	cdone := make(chan struct{})
	go func() { _ = a.Close(); closed.Store(true); close(cdone) }()
	select {
	case <-cdone:
		t.Error("Close returned while Resume was still ending a node")
	case <-time.After(100 * time.Millisecond):
	}
	close(gate)
	require.NoError(t, <-resumed)
	<-r.Done()
	<-cdone
	assert.False(t, late.Load(), "a callback ran after Close returned")
}

// TestMisuseIsAnError checks that misuse a newcomer met returns errors
// that name it, instead of panicking or being accepted: a nil plan, the
// zero Async, a nil context, an unknown FailurePolicy, FailWith(nil), a
// zero Resumption, and Resume of a node that only waits on a pending
// one.
func TestMisuseIsAnError(t *testing.T) {
	a := newAsync(t)
	_, err := a.RunPlan(context.Background(), nil, time.Second)
	assert.ErrorContains(t, err, "nil or zero Plan")
	var zero Async
	assert.ErrorContains(t, zero.BeginWork(context.Background(), time.Second, NewWrapper("x", okWorker(), 0)), "not made with New")
	var noCtx context.Context // the misuse under test
	assert.ErrorContains(t, a.BeginWork(noCtx, time.Second, NewWrapper("x", okWorker(), 0)), "nil context")

	bad := NewWrapper("bad", okWorker(), 0).OnFailure(FailurePolicy(99))
	err = a.BeginWork(context.Background(), time.Second, bad)
	assert.ErrorIs(t, err, ErrBadPolicy)
	assert.NotErrorIs(t, err, ErrBadJoin)

	pay := NewWrapper("pay", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		return 0, errors.New("card declined")
	}), 0).OnFailure(PolicySuspend)
	ship := NewWrapper("ship", okWorker(), 0).Depend(pay, true)
	NewWrapper("mail", okWorker(), 0).Depend(ship, true)
	r, err := a.Start(context.Background(), time.Minute, pay)
	require.NoError(t, err)
	t.Cleanup(r.Cancel)
	<-r.Suspended()
	assert.Contains(t, r.Report().String(), "pay: pending (pending after card declined: waiting for Resume)")
	err = r.Resume("mail", Rerun())
	assert.ErrorIs(t, err, ErrNotPending)
	assert.ErrorContains(t, err, `waits on pending node "pay"`)
	assert.ErrorContains(t, r.Resume("pay", FailWith(nil)), "FailWith(nil)")
	assert.ErrorContains(t, r.Resume("pay", Resumption{}), `Resume("pay"): zero Resumption: make one with Rerun, SucceedWith or FailWith`)
	require.NoError(t, r.Resume("pay", FailWith(errors.New("refunded"))))
	require.NoError(t, r.Wait(context.Background()))
	assert.Equal(t, ResultException, ship.Result().State)
}

// TestPanicInPlainWorkerKeepsTheWorkerLimit: a plain node's panic unwinds
// to the run's loop (see worklist.action); the goroutine must go on with
// the run itself, not hand it to a new goroutine beside the pool's.
func TestPanicInPlainWorkerKeepsTheWorkerLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New(WithMaxWorkers(1))
		defer a.Close()
		var cur, peak atomic.Int32
		busy := func(context.Context, int, Wrappers) (int, error) {
			n := cur.Add(1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			time.Sleep(100 * time.Millisecond)
			cur.Add(-1)
			return 1, nil
		}
		p := NewWrapper("p", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { panic("x") }), 0)
		q := NewWrapper("q", WorkerFunc[int, int](busy), 0)
		s := NewWrapper("s", WorkerFunc[int, int](busy), 0).Depend(p, false).Join(AllDone())
		require.NoError(t, a.BeginWork(context.Background(), 10*time.Second, p, q))
		assert.Equal(t, int32(1), peak.Load(), "Actions running at once")
		var pe *PanicError
		assert.ErrorAs(t, p.Result().Err, &pe)
		assert.Equal(t, ResultSuccess, s.Result().State)
	})
}

// TestCloseDuringARunStartedOnTheCallerDoesNotDeadlock checks that a run
// whose start runs its nodes on the calling goroutine (an executor of the
// user's that runs tasks on the caller) does not hold the Async's lock
// while they run: a worker that starts a run of its own on the same Async
// as Close waits for that lock would wait behind Close, which waits for
// the worker's run.
func TestCloseDuringARunStartedOnTheCallerDoesNotDeadlock(t *testing.T) {
	a := New(WithExecutor(ExecutorFunc(func(task func()) error { task(); return nil })))
	closing := make(chan error, 1)
	var inner error
	w := NewWrapper("outer", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
		go func() { closing <- a.Close() }()
		// Until Close waits for the lock, or has taken it.
		for {
			if !a.mu.TryRLock() {
				break // Close waits for the lock
			}
			closed := a.closed
			a.mu.RUnlock()
			if closed {
				break
			}
			time.Sleep(time.Millisecond)
		}
		leaf := NewWrapper("leaf", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 1, nil }), 0)
		inner = a.BeginWork(ctx, 0, leaf)
		return 1, nil
	}), 0)
	ran := make(chan error, 1)
	go func() { ran <- a.BeginWork(context.Background(), 0, w) }()
	select {
	case err := <-ran:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("BeginWork still running after 10s: its worker's run waits for Close, which waits for it")
	}
	require.NoError(t, <-closing)
	assert.ErrorIs(t, inner, ErrClosed, "a run started after Close is refused")
}

// stallRacingErr is a node's error whose As method, called by the report
// that BeginWork reads once its run has stalled on a pending node, first
// runs hook: as if the run's context ended right then.
type stallRacingErr struct{ hook func() }

func (e *stallRacingErr) Error() string { return "x failed" }

func (e *stallRacingErr) As(any) bool {
	if e.hook != nil {
		h := e.hook
		e.hook = nil
		h()
	}
	return false
}

// TestBeginWorkStallEndedByItsContextNamesNoPendingNode: BeginWork
// cancels a run stalled on a pending node with an error naming that node.
// When the run's context ended the node after the stall but before
// BeginWork looked for it (here the caller's cancel, in a race the
// hook makes certain), no node was pending any more, and the error said
// the run "suspended at node #0", a node that does not exist by that
// name. The run's own error is returned then: its context's cause.
func TestBeginWorkStallEndedByItsContextNamesNoPendingNode(t *testing.T) {
	a := newAsync(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var p *WorkerWrapper[int, int]
	xerr := &stallRacingErr{}
	xerr.hook = func() {
		cancel()
		for p.State() != StateError { // the sweep ends the pending node
			time.Sleep(time.Millisecond)
		}
	}
	x := NewWrapper("x", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 0, xerr }), 0)
	p = NewWrapper("p", WorkerFunc[int, int](func(_ context.Context, _ int, all Wrappers) (int, error) {
		for {
			if st, _ := all.State("x"); st == StateError {
				return 0, errBoom
			}
			time.Sleep(time.Millisecond)
		}
	}), 0).OnFailure(PolicySuspend)
	err := a.BeginWork(ctx, 0, x, p)
	require.Error(t, err)
	assert.ErrorIs(t, err, context.Canceled)
	assert.NotContains(t, err.Error(), "suspended at node")
	assert.Equal(t, ResultTimeout, p.Result().State)
}
