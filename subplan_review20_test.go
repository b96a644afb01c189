package asynctool

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// suspendingPlan is a plan of two roots: "ok", which succeeds, and
// "pay", which fails under PolicySuspend.
func suspendingPlan(t *testing.T) *Plan {
	t.Helper()
	ok := NewWrapper("ok", okWorker(), 0)
	pay := NewWrapper("pay", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		return 0, errors.New("card declined")
	}), 0).OnFailure(PolicySuspend)
	pl, err := Compile(ok, pay)
	require.NoError(t, err)
	return pl
}

// TestS20RSuspendOnAFullPool: on a pool of one goroutine, held by the
// SubPlan node's worker, a sub-plan whose roots the worker's goroutine
// shares must still be seen to suspend: the node fails at once, not at
// the deadline.
func TestS20RSuspendOnAFullPool(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New(WithMaxWorkers(1))
		defer a.Close()
		node := NewWrapper("sub", SubPlan[int, int]{Plan: suspendingPlan(t), Output: func(*Run) (int, error) { return 1, nil }}, 0)
		start := time.Now()
		require.NoError(t, a.BeginWork(context.Background(), time.Hour, node))
		assert.Zero(t, time.Since(start), "the sub-run's suspension was seen at once")
		assert.ErrorContains(t, node.Result().Err, `sub-plan suspended at node "pay"`)
	})
}

// TestS20RSuspendOnAFullUserPool: the same with a Pool of the user's, of
// one goroutine, and a sub-plan that fans out from one root: the helper
// offered for the fan-out waits in that pool's queue behind the SubPlan
// node's worker, and must not keep the sub-run from being seen to
// suspend.
func TestS20RSuspendOnAFullUserPool(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := NewPool(PoolSize(1))
		defer p.Close()
		a := New(WithExecutor(p))
		defer a.Close()
		root := NewWrapper("root", okWorker(), 0)
		NewWrapper("ok", okWorker(), 0).Depend(root, true)
		NewWrapper("pay", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			return 0, errors.New("card declined")
		}), 0).OnFailure(PolicySuspend).Depend(root, true)
		pl, err := Compile(root)
		require.NoError(t, err)
		node := NewWrapper("sub", SubPlan[int, int]{Plan: pl, Output: func(*Run) (int, error) { return 1, nil }}, 0)
		start := time.Now()
		require.NoError(t, a.BeginWork(context.Background(), time.Hour, node))
		assert.Zero(t, time.Since(start), "the sub-run's suspension was seen at once")
		assert.ErrorContains(t, node.Result().Err, `sub-plan suspended at node "pay"`)
	})
}

// TestS20RReportShowsTheRunningSubRun: while the sub-run runs, the outer
// run's report shows it as the node's Sub (NodeReport.Sub: the last run
// the node started), not the plan's static shape, also while the SubPlan
// worker's own goroutine runs the sub-run's first nodes, which in a
// chain are all of them.
func TestS20RReportShowsTheRunningSubRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		started, release := make(chan struct{}), make(chan struct{})
		slow := NewWrapper("slow", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			close(started)
			<-release
			return 1, nil
		}), 0)
		pl, err := Compile(slow)
		require.NoError(t, err)
		a := New()
		defer a.Close()
		node := NewWrapper("sub", SubPlan[int, int]{Plan: pl, Output: func(sub *Run) (int, error) { return slow.ResultIn(sub).Value, nil }}, 0)
		run, err := a.Start(context.Background(), time.Hour, node)
		require.NoError(t, err)
		<-started
		sub := run.Report().Nodes[0].Sub
		require.NotNil(t, sub)
		assert.Equal(t, StatusRunning, sub.Nodes[0].Status, "the report shows the sub-run under way")
		close(release)
		require.NoError(t, run.Wait(context.Background()))
		assert.Equal(t, StatusSucceeded, run.Report().Nodes[0].Sub.Nodes[0].Status)
	})
}

// TestS20RInputFromAnotherRun: Input must return a context that derives
// from the node's; one that derives from another run's worker context
// would run the sub-plan outside the node's deadline and cancellation,
// and is refused as one from outside any run is.
func TestS20RInputFromAnotherRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		other := make(chan context.Context, 1)
		hold := make(chan struct{})
		holder := NewWrapper("holder", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
			other <- ctx
			<-hold
			return 0, nil
		}), 0)
		first, err := a.Start(context.Background(), time.Hour, holder)
		require.NoError(t, err)
		foreign := <-other
		pl := blocker(t, nil)
		node := NewWrapper("sub", SubPlan[int, int]{Plan: pl,
			Input:  func(context.Context, int, Wrappers) (context.Context, error) { return foreign, nil },
			Output: func(*Run) (int, error) { return 1, nil }}, 0).Timeout(time.Second)
		start := time.Now()
		require.NoError(t, a.BeginWork(context.Background(), time.Hour, node))
		assert.ErrorContains(t, node.Result().Err, "does not derive from the node's")
		assert.Zero(t, time.Since(start), "no sub-run ran outside the node's timeout")
		close(hold)
		require.NoError(t, first.Wait(context.Background()))
	})
}

// TestS20RCallbackPanicInsideFailsTheNode pins what SubPlan's doc now
// says: a Result callback of the sub-plan that panics makes the
// sub-run's error, which fails the node without calling Output, though
// every node of the sub-plan succeeded.
func TestS20RCallbackPanicInsideFailsTheNode(t *testing.T) {
	w := NewWrapper("w", okWorker(), 0).Callback(ResultFunc[int, int](func(bool, int, WorkResult[int]) { panic("oops") }))
	pl, err := Compile(w)
	require.NoError(t, err)
	a := New()
	defer a.Close()
	called := false
	node := NewWrapper("sub", SubPlan[int, int]{Plan: pl, Output: func(*Run) (int, error) { called = true; return 1, nil }}, 0)
	run, err := a.Start(context.Background(), time.Minute, node)
	require.NoError(t, err)
	require.NoError(t, run.Wait(context.Background()), "the outer run's own callbacks did not panic")
	var cpe *CallbackPanicError
	require.ErrorAs(t, node.Result().Err, &cpe)
	assert.Equal(t, "w", cpe.ID)
	assert.False(t, called)
	assert.Equal(t, StatusSucceeded, run.Report().Nodes[0].Sub.Nodes[0].Status)
}

// TestS20RNestedSuspendOnFullExecutors: SubPlans two levels deep, on
// executors of one goroutine each (the Async's own pool, a Pool of the
// user's, and an executor of the user's that queues), with a node of
// the innermost plan that suspends and a middle SubPlan node that
// suspends in turn: each level sees the level below suspend, at once.
func TestS20RNestedSuspendOnFullExecutors(t *testing.T) {
	for _, tc := range []struct {
		name string
		mk   func() (*Async, func())
	}{
		{"WithMaxWorkers(1)", func() (*Async, func()) { return New(WithMaxWorkers(1)), func() {} }},
		{"Pool of 1", func() (*Async, func()) {
			p := NewPool(PoolSize(1))
			return New(WithExecutor(p)), func() { _ = p.Close() }
		}},
		{"queueing executor", func() (*Async, func()) {
			tasks, stop := make(chan func(), 64), make(chan struct{})
			ended := make(chan struct{})
			go func() {
				defer close(ended)
				for {
					select {
					case f := <-tasks:
						f()
					case <-stop:
						return
					}
				}
			}()
			e := ExecutorFunc(func(f func()) error {
				select {
				case tasks <- f:
					return nil
				default:
					return errors.New("full")
				}
			})
			return New(WithExecutor(e)), func() { close(stop); <-ended }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a, stop := tc.mk()
				defer stop()
				defer a.Close()
				root := NewWrapper("root", okWorker(), 0)
				NewWrapper("ok1", okWorker(), 0).Depend(root, true)
				NewWrapper("ok2", okWorker(), 0).Depend(root, true)
				NewWrapper("pay", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
					return 0, errors.New("card declined")
				}), 0).OnFailure(PolicySuspend).Depend(root, true)
				inner, err := Compile(root)
				require.NoError(t, err)
				out := func(*Run) (int, error) { return 1, nil }
				m1 := NewWrapper("m1", SubPlan[int, int]{Plan: inner, Output: out}, 0).OnFailure(PolicySuspend)
				m2 := NewWrapper("m2", okWorker(), 0)
				m3 := NewWrapper("m3", SubPlan[int, int]{Plan: inner, Output: out}, 0)
				middle, err := Compile(m1, m2, m3)
				require.NoError(t, err)
				top := NewWrapper("top", SubPlan[int, int]{Plan: middle, Output: out}, 0)
				top2 := NewWrapper("top2", SubPlan[int, int]{Plan: middle, Output: out}, 0)
				start := time.Now()
				require.NoError(t, a.BeginWork(context.Background(), time.Hour, top, top2))
				assert.Zero(t, time.Since(start), "every level saw the one below suspend at once")
				for _, w := range []*WorkerWrapper[int, int]{top, top2} {
					assert.ErrorContains(t, w.Result().Err, `sub-plan suspended at node "m1", and was cancelled: asynctool: sub-plan suspended at node "pay"`)
				}
			})
		})
	}
}

// TestS20RNilSubPlanPointer: a nil *SubPlan (a pointer to a SubPlan is a
// worker too) is refused as a nil worker, as a SubPlan without Plan is,
// not with a panic from Compile calling its methods.
func TestS20RNilSubPlanPointer(t *testing.T) {
	var sp *SubPlan[int, int]
	for name, w := range map[string]Worker[int, int]{"plain": sp, "hedged": Hedged[int, int](sp, time.Millisecond, 2)} {
		t.Run(name, func(t *testing.T) {
			require.NotPanics(t, func() {
				_, err := Compile(NewWrapper("x", w, 0))
				assert.ErrorIs(t, err, ErrNilWorker)
				_, err = Describe(NewWrapper("x", w, 0))
				assert.ErrorIs(t, err, ErrNilWorker)
			})
		})
	}
}
