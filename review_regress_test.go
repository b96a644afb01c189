package asynctool

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Regression tests for the findings of a code review: user code that
// panics or calls runtime.Goexit outside a worker's Action, Close with an
// open run, and stale times on recycled runs.

type panickyDefaulter struct{}

func (panickyDefaulter) Action(context.Context, int, Wrappers) (int, error) { return 0, errBoom }
func (panickyDefaulter) DefaultValue() int                                  { panic("bad default") }

func TestPanickingDefaulterDoesNotHang(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		w := NewWrapper("w", Worker[int, int](panickyDefaulter{}), 0)
		err := a.BeginWork(context.Background(), 50*time.Millisecond, w)
		var cpe *CallbackPanicError
		require.ErrorAs(t, err, &cpe)
		assert.Equal(t, "DefaultValue", cpe.Method)
		assert.Equal(t, WorkResult[int]{State: ResultException, Err: errBoom}, w.Result(), "the zero value stands in")
	})
}

// TestGoexitInCustomJoin also covers a claimed node (see worklist.claim):
// up's end readies other first (its out-edges are looked at last first),
// and its goroutine claims it to run next; the join's Goexit hands other
// to the goroutine that carries on.
func TestGoexitInCustomJoin(t *testing.T) {
	a := newAsync(t)
	up := NewWrapper("up", okWorker(), 0)
	down := NewWrapper("down", okWorker(), 0).Depend(up, true).
		Join(CustomJoin(func([]Upstream) Decision { runtime.Goexit(); return DecideRun }))
	other := NewWrapper("other", okWorker(), 0).Depend(up, true)
	require.NoError(t, a.BeginWork(context.Background(), time.Minute, up))
	assert.ErrorIs(t, down.Result().Err, ErrGoexit)
	assert.Equal(t, ResultSuccess, other.Result().State, "the other successors are still updated")
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

// TestRunWaitsForACustomJoinWhileItsClaimedSiblingEnds: a custom join is
// part of its upstream's end, which the run waits for (see CustomJoin),
// also past the deadline. up's goroutine claims last before it asks
// first's join, and unclaims it to do so; last is then ended by someone
// else, the sweep at the deadline or another goroutine's short-circuit
// here. Had last carried up's end (see carriedBit), the run would have
// ended with the join still running (found in review, helper-24).
func TestRunWaitsForACustomJoinWhileItsClaimedSiblingEnds(t *testing.T) {
	t.Run("deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a := New()
			defer a.Close()
			var joinReturned atomic.Bool
			up := NewWrapper("up", okWorker(), 0)
			NewWrapper("first", okWorker(), 0).Depend(up, true).
				Join(CustomJoin(func([]Upstream) Decision {
					time.Sleep(3 * time.Second)
					joinReturned.Store(true)
					return DecideRun
				}))
			NewWrapper("last", okWorker(), 0).Depend(up, true)
			t0 := time.Now()
			err := a.BeginWork(context.Background(), time.Second, up)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			assert.True(t, joinReturned.Load(), "the run ended while up's custom join was still running")
			assert.Equal(t, 3*time.Second, time.Since(t0))
		})
	})
	t.Run("short-circuit", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a := New()
			defer a.Close()
			var joinReturned atomic.Bool
			entered := make(chan struct{})
			up := NewWrapper("up", okWorker(), 0)
			x := NewWrapper("x", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
				<-entered
				return 1, nil
			}), 0)
			s2 := NewWrapper("s2", okWorker(), 0).Depend(up, true).
				Join(CustomJoin(func([]Upstream) Decision {
					close(entered)
					time.Sleep(3 * time.Second)
					joinReturned.Store(true)
					return DecideRun
				}))
			s := NewWrapper("s", okWorker(), 0).Depend(up, true)
			NewWrapper("t", okWorker(), 0).Depend(s, false).Depend(s2, false).Depend(x, false)
			t0 := time.Now()
			require.NoError(t, a.BeginWork(context.Background(), time.Minute, up, x))
			assert.True(t, joinReturned.Load(), "the run ended while up's custom join was still running")
			assert.Equal(t, 3*time.Second, time.Since(t0))
			assert.ErrorIs(t, s.Result().Err, ErrSkipped, "s was ended by x's goroutine while the join ran")
		})
	})
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

func TestPanickingRetryPolicy(t *testing.T) {
	a := newAsync(t)
	w := NewWrapper("w", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 0, errBoom }), 0).
		Retry(RetryPolicy{Attempts: 3, Retryable: func(error) bool { panic("bad predicate") }})
	b := NewWrapper("b", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 0, errBoom }), 0).
		Retry(RetryPolicy{Attempts: 3, Backoff: func(int) time.Duration { panic("bad backoff") }})
	require.NoError(t, a.BeginWork(context.Background(), time.Minute, w, b))
	for _, n := range []*WorkerWrapper[int, int]{w, b} {
		var pe *PanicError
		require.ErrorAs(t, n.Result().Err, &pe, n.ID())
		assert.False(t, errors.Is(n.Result().Err, ErrGoexit))
	}
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

func TestContinueAppliesToNodeTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		slow := NewWrapper("slow", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
			<-ctx.Done()
			return 0, ctx.Err()
		}), 0).Timeout(10 * time.Millisecond).OnFailure(PolicyContinue)
		down := NewWrapper("down", okWorker(), 0).Depend(slow, true)
		require.NoError(t, a.BeginWork(context.Background(), time.Minute, slow))
		assert.Equal(t, ResultTimeout, slow.Result().State)
		assert.Equal(t, ResultSuccess, down.Result().State)
	})
}

func TestUntimedRecycledRunHasNoStart(t *testing.T) {
	pl, err := Compile(NewWrapper("w", okWorker(), 0))
	require.NoError(t, err)
	timed := newAsync(t, WithTimings(true))
	plain := newAsync(t)
	r, err := timed.RunPlan(context.Background(), pl, 0)
	require.NoError(t, err)
	r.Release()
	for range 20 {
		r, err = plain.RunPlan(context.Background(), pl, 0)
		require.NoError(t, err)
		require.True(t, r.Report().Start.IsZero())
		r.Release()
	}
}

// Regression tests from a second review.

func TestGoexitInOnRunEnd(t *testing.T) {
	a := New(WithHooks(&Hooks{OnRunEnd: func(context.Context, *Report) { runtime.Goexit() }}))
	x := NewWrapper("x", okWorker(), 0)
	r, err := a.Start(context.Background(), time.Minute, x)
	require.NoError(t, err)
	requireEnds(t, r, "run never done after Goexit in OnRunEnd")
	require.NoError(t, a.Close())
}

type goexitDefaulter struct{}

func (goexitDefaulter) Action(context.Context, int, Wrappers) (int, error) { return 0, errBoom }
func (goexitDefaulter) DefaultValue() int                                  { runtime.Goexit(); return 0 }

func TestGoexitInDefaultValue(t *testing.T) {
	a := New()
	w := NewWrapper("w", Worker[int, int](goexitDefaulter{}), 0)
	next := NewWrapper("next", okWorker(), 0).Depend(w, true)
	r, err := a.Start(context.Background(), time.Minute, w)
	require.NoError(t, err)
	requireEnds(t, r, "run never done after Goexit in DefaultValue, state %v", w.State())
	var cpe *CallbackPanicError
	assert.ErrorAs(t, r.Wait(context.Background()), &cpe)
	assert.Equal(t, WorkResult[int]{State: ResultException, Err: errBoom}, w.Result())
	assert.ErrorIs(t, next.Result().Err, errBoom)
	require.NoError(t, a.Close())
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

func TestGoexitInOnRunStart(t *testing.T) {
	a := New(WithHooks(&Hooks{OnRunStart: func(context.Context, RunInfo) context.Context { runtime.Goexit(); return nil }}))
	x := NewWrapper("x", okWorker(), 0)
	done := make(chan struct{})
	go func() { defer close(done); _, _ = a.Start(context.Background(), time.Minute, x) }()
	<-done
	cdone := make(chan struct{})
	go func() { _ = a.Close(); close(cdone) }()
	select {
	case <-cdone:
	case <-time.After(10 * time.Second):
		t.Fatal("Close hangs after Goexit in OnRunStart")
	}
}

func TestConcurrentDescribe(t *testing.T) {
	root := NewWrapper("root", okWorker(), 0)
	for range 50 {
		NewWrapper("", okWorker(), 0).Depend(root, true)
	}
	var wg sync.WaitGroup
	var fails atomic.Int32
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if _, err := Describe(root); err != nil {
					fails.Add(1)
				}
			}
		})
	}
	wg.Wait()
	assert.Zero(t, fails.Load(), "concurrent Describe calls failed")
	a := newAsync(t)
	require.NoError(t, a.BeginWork(context.Background(), time.Minute, root), "Describe consumed nothing")
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

// TestEveryRootStartsWhenTheExecutorRefuses: every start node that may
// block gets a goroutine even when the executor takes no task, so root a,
// which waits for root b, is not stuck behind it.
func TestEveryRootStartsWhenTheExecutorRefuses(t *testing.T) {
	a := newAsync(t, WithExecutor(ExecutorFunc(func(func()) error { return errBoom })))
	bRan := make(chan struct{})
	x := NewWrapper("a", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
		select {
		case <-bRan:
			return 1, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}), 0)
	y := NewWrapper("b", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		close(bRan)
		return 2, nil
	}), 0)
	require.NoError(t, a.BeginWork(context.Background(), 10*time.Second, x, y))
	assert.Equal(t, WorkResult[int]{Value: 1, State: ResultSuccess}, x.Result())
	assert.Equal(t, WorkResult[int]{Value: 2, State: ResultSuccess}, y.Result())
}

// TestOnlyRootsGetExtraGoroutines: the promise of a goroutine per start
// node must not leak to the nodes a single root makes ready. With an
// executor that refuses every task, those run one after another on the
// run's own goroutine.
func TestOnlyRootsGetExtraGoroutines(t *testing.T) {
	a := newAsync(t, WithExecutor(ExecutorFunc(func(func()) error { return errBoom })))
	var running, most atomic.Int32
	w := WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		n := running.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(time.Millisecond)
		running.Add(-1)
		return 0, nil
	})
	root := NewWrapper("root", okWorker(), 0)
	for range 8 {
		NewWrapper("", w, 0).Depend(root, true)
	}
	require.NoError(t, a.BeginWork(context.Background(), time.Minute, root))
	assert.Equal(t, int32(1), most.Load(), "no goroutine beyond the run's own")
}

// TestMisuseIsAnError checks that misuse a newcomer met returns errors
// that name it, instead of panicking or being accepted: a nil plan, the
// zero Async, a nil context, an unknown FailurePolicy, FailWith(nil), and
// Resume of a node that only waits on a pending one.
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
	require.NoError(t, r.Resume("pay", FailWith(errors.New("refunded"))))
	require.NoError(t, r.Wait(context.Background()))
	assert.Equal(t, ResultException, ship.Result().State)
}

// TestClaimedNodeStoppedBeforeItStarted: a goroutine that readies a node
// claims it to run next, but hands it back before user code runs ahead of
// it. Here the node's readying skips an optional upstream whose Result
// callback runs past the group deadline; the sweep then ends the node
// before its worker started, and its report must say so, as for any node
// that waited for a goroutine.
func TestClaimedNodeStoppedBeforeItStarted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		var ran atomic.Bool
		up := NewWrapper("up", okWorker(), 0)
		slow := NewWrapper("slow", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
			<-ctx.Done()
			return 0, ctx.Err()
		}), 0)
		skipped := NewWrapper("skipped", okWorker(), 0).Depend(slow, true).
			Callback(ResultFunc[int, int](func(bool, int, WorkResult[int]) { time.Sleep(2 * time.Second) }))
		claimed := NewWrapper("claimed", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			ran.Store(true)
			return 1, nil
		}), 0).Depend(up, true).Depend(skipped, false)
		r, err := a.Start(context.Background(), time.Second, up, slow)
		require.NoError(t, err)
		require.ErrorIs(t, r.Wait(context.Background()), context.DeadlineExceeded)
		assert.ErrorIs(t, skipped.Result().Err, ErrSkipped)
		assert.False(t, ran.Load())
		assert.Equal(t, ResultTimeout, claimed.Result().State)
		assertNotStarted(t, r, "claimed")
	})
}

// TestSlowCustomJoinDoesNotHoldTheSweep: a custom join runs under its
// node's join lock; the sweep, which locks the node's timers, must not
// wait for it. A node the sweep ends at the deadline gets its Result
// callback then, and the run ends when the join returns (like a Result
// callback, the join is part of its upstream's end, which the run waits
// for). Before the two locks were split, the sweep waited on the join
// (under synctest: forever, as a mutex wait is not durably blocked).
func TestSlowCustomJoinDoesNotHoldTheSweep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		t0 := time.Now()
		var swept time.Duration
		up := NewWrapper("up", okWorker(), 0)
		NewWrapper("slowjoin", okWorker(), 0).Depend(up, true).
			Join(CustomJoin(func([]Upstream) Decision { time.Sleep(5 * time.Second); return DecideRun }))
		waiter := NewWrapper("waiter", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
			<-ctx.Done()
			return 0, ctx.Err()
		}), 0).Callback(ResultFunc[int, int](func(bool, int, WorkResult[int]) { swept = time.Since(t0) }))
		err := a.BeginWork(context.Background(), time.Second, up, waiter)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, time.Second, swept, "the sweep ended waiter at the deadline")
		assert.Equal(t, 5*time.Second, time.Since(t0), "the run waited for the join")
		assert.Equal(t, ResultTimeout, waiter.Result().State)
	})
}

// TestClaimedNodeCanBeSkipped: the node a goroutine claims (see
// worklist.claim) is still skipped by the short-circuit rule when the
// same goroutine then finds that no successor needs it. p's edges are
// looked at last first, so x is claimed before y's trigger releases it.
func TestClaimedNodeCanBeSkipped(t *testing.T) {
	a := newAsync(t)
	var xRan atomic.Bool
	p := NewWrapper("p", okWorker(), 0)
	y := NewWrapper("y", okWorker(), 0)
	x := NewWrapper("x", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { xRan.Store(true); return 1, nil }), 0)
	y.Depend(p, true)  // p's edge 0
	x.Depend(p, true)  // p's edge 1: looked at first, claimed
	y.Depend(x, false) // y's trigger releases x, which nothing needs any more
	require.NoError(t, a.BeginWork(context.Background(), 10*time.Second, p))
	assert.ErrorIs(t, x.Result().Err, ErrSkipped)
	assert.False(t, xRan.Load())
	assert.Equal(t, ResultSuccess, y.Result().State)
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

// TestClaimNotHeldAcrossAnInlineHelper: an executor of the user's may run
// a helper on the goroutine that shares work, which is user code ahead of
// the node that goroutine claimed. Here the helper runs past the
// deadline: the claimed node must not start after it, and its report
// must say it never started.
func TestClaimNotHeldAcrossAnInlineHelper(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New(WithExecutor(ExecutorFunc(func(task func()) error { task(); return nil })))
		defer a.Close()
		var bRan atomic.Bool
		up := NewWrapper("up", okWorker(), 0)
		NewWrapper("a", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
			<-ctx.Done()
			return 0, ctx.Err()
		}), 0).Depend(up, true)
		NewWrapper("b", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			bRan.Store(true)
			return 1, nil
		}), 0).Depend(up, true)
		r, err := a.Start(context.Background(), time.Second, up)
		require.NoError(t, err)
		require.ErrorIs(t, r.Wait(context.Background()), context.DeadlineExceeded)
		assert.False(t, bRan.Load())
		assertNotStarted(t, r, "b")
	})
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

// assertNotStarted checks that r's report says node id never started.
func assertNotStarted(t *testing.T, r *Run, id string) {
	t.Helper()
	for _, n := range r.Report().Nodes {
		if n.ID == id {
			assert.False(t, n.Ran, id)
			assert.Equal(t, 0, n.Attempts, id)
			assert.Contains(t, n.Reason, "stopped before it started", id)
			return
		}
	}
	t.Errorf("no node %q in the report", id)
}
