package asynctool

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestResumeOnANilRunSaysSo: Resume on a nil Run (a Start whose error was
// not checked) said "on a released run", as Wait's error does not.
func TestResumeOnANilRunSaysSo(t *testing.T) {
	var nilRun *Run
	assert.EqualError(t, nilRun.Resume("x", Rerun()), `asynctool: Resume("x") on a nil or zero Run (Start and StartPlan return one)`)
	assert.EqualError(t, new(Run).Resume("x", Rerun()), `asynctool: Resume("x") on a nil or zero Run (Start and StartPlan return one)`)
}

// TestCustomJoinSuspendKeepsUpstreams: a node its custom join suspended
// has not fired, so its upstreams that have not started must not be
// short-circuited: a Rerun reads them (they were skipped at the
// suspension). Once Resume decides the node with a value,
// they are released, as for a node that ended without starting.
func TestCustomJoinSuspendKeepsUpstreams(t *testing.T) {
	for _, how := range []string{"rerun", "succeed"} {
		t.Run(how, func(t *testing.T) {
			a := newAsync(t)
			gate := make(chan struct{})
			release := releaser(t, gate)
			value := func(v int) WorkerFunc[int, int] {
				return func(context.Context, int, Wrappers) (int, error) { return v, nil }
			}
			x := NewWrapper("x", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
				<-gate
				return 1, nil
			}), 0)
			b := NewWrapper("b", value(2), 0).Depend(x, true) // not started while x runs
			up := NewWrapper("a", value(3), 0)
			c := NewWrapper("c", WorkerFunc[int, int](func(_ context.Context, _ int, all Wrappers) (int, error) {
				rb, _ := ResultOf[int](all, "b")
				if rb.State != ResultSuccess {
					return 0, fmt.Errorf("c reads b: %w", rb.Err)
				}
				return 10 * rb.Value, nil
			}), 0).Depend(up, true).Depend(b, true).Join(CustomJoin(func(ups []Upstream) Decision {
				for _, u := range ups {
					if u.ID == "a" && u.Ended {
						return DecideSuspend // a person looks before c runs
					}
				}
				return DecideWait
			}))
			r, err := a.Start(context.Background(), time.Minute, x, up)
			require.NoError(t, err)
			require.Eventually(t, func() bool { return r.Report().Nodes[indexOf(r, "c")].Status == StatusPending },
				10*time.Second, time.Millisecond)
			switch how {
			case "rerun":
				release() // b runs now that x ended
				<-r.Suspended()
				assert.Equal(t, ResultSuccess, b.Result().State, "b was not skipped: %v", b.Result().Err)
				require.NoError(t, r.Resume("c", Rerun()))
				require.NoError(t, r.Wait(context.Background()))
				assert.Equal(t, ResultSuccess, c.Result().State, "%v", c.Result().Err)
				assert.Equal(t, 20, c.Result().Value)
			case "succeed":
				require.NoError(t, r.Resume("c", SucceedWith(5)))
				require.Eventually(t, func() bool { return b.State() == StateError }, 10*time.Second, time.Millisecond,
					"b, which only c needed, is released once c is decided")
				release()
				require.NoError(t, r.Wait(context.Background()))
				assert.ErrorIs(t, b.Result().Err, ErrSkipped)
				assert.Equal(t, 5, c.Result().Value)
			}
		})
	}
}

func indexOf(r *Run, id string) int {
	i, ok := r.p.lookup(id)
	if !ok {
		panic("no node " + id)
	}
	return int(i)
}

// A node its custom join suspended and Resume(Rerun) runs has no ready
// time (neither the suspension nor the Rerun records one), so its
// report's Wait is Started minus the zero time: the saturated maximum
// duration.
// TestRerunOfJoinSuspendedNodeHasAReadyTime: a node its custom join
// suspended had no ready time when Resume reran it, so its report's Wait
// was the time since the zero time.
func TestRerunOfJoinSuspendedNodeHasAReadyTime(t *testing.T) {
	a := New(WithTimings(true))
	defer a.Close()
	up := NewWrapper("up", okWorker(), 0)
	NewWrapper("c", okWorker(), 0).Depend(up, true).
		Join(CustomJoin(func([]Upstream) Decision { return DecideSuspend }))
	r, err := a.Start(context.Background(), time.Minute, up)
	require.NoError(t, err)
	<-r.Suspended()
	require.NoError(t, r.Resume("c", Rerun()))
	require.NoError(t, r.Wait(context.Background()))
	n := r.Report().Nodes[indexOf(r, "c")]
	assert.False(t, n.Ready.IsZero(), "ready time of a rerun node")
	assert.Less(t, n.Wait, time.Minute, "wait for a goroutine")
}

// TestLateResumeRacesClose: a Resume that comes after its run ended
// (ErrNotPending, as documented) while the Async is closing added to the
// Async's inflight count as Close waited for it to reach zero, a
// WaitGroup misuse that panicked the process.
func TestLateResumeRacesClose(t *testing.T) {
	for k := range 100 {
		a := New(WithMaxWorkers(2))
		slowDone := make(chan struct{})
		n := NewWrapper("p", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			return 0, errBoom
		}), 0).OnFailure(PolicySuspend)
		slow := NewWrapper("slow", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			<-slowDone // outlives the deadline: keeps Close waiting
			return 0, nil
		}), 0)
		r, err := a.Start(context.Background(), 2*time.Millisecond, n, slow)
		if err != nil {
			t.Fatal(err)
		}
		<-r.Done()
		var stop atomic.Bool
		var wg sync.WaitGroup
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !stop.Load() {
					if err := r.Resume("p", Rerun()); !errors.Is(err, ErrNotPending) {
						t.Errorf("Resume: %v", err)
						return
					}
				}
			}()
		}
		closed := make(chan struct{})
		go func() { a.Close(); close(closed) }()
		time.Sleep(time.Duration(k%5) * 100 * time.Microsecond)
		close(slowDone)
		<-closed
		stop.Store(true)
		wg.Wait()
	}
}

// TestRerunOfANodeThatRanIsNotSkipped: a PolicySuspend node that ran is
// made ready again by Resume(Rerun); if its only successor stops needing
// it before a goroutine starts it, it was skipped (ErrSkipped, although
// it ran), and the rerun Resume had accepted never happened.
func TestRerunOfANodeThatRanIsNotSkipped(t *testing.T) {
	ex := &holdExec{}
	a := New(WithExecutor(ex))
	defer a.Close()
	var calls atomic.Int32
	gate := make(chan struct{})
	nodeA := NewWrapper("a", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		if calls.Add(1) == 1 {
			return 0, errBoom // pending
		}
		return 1, nil
	}), 0).OnFailure(PolicySuspend)
	nodeG := NewWrapper("g", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { <-gate; return 2, nil }), 0)
	nodeB := NewWrapper("b", okWorker(), 0).Depend(nodeA, false).Depend(nodeG, false) // runs on the first success
	r, err := a.Start(context.Background(), time.Minute, nodeA, nodeG)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return r.Report().Nodes[indexOf(r, "a")].Status == StatusPending }, 10*time.Second, time.Millisecond)
	ex.hold.Store(true)                        // no goroutine for the rerun yet
	require.NoError(t, r.Resume("a", Rerun())) // a: pending -> ready
	close(gate)                                // g succeeds: b runs and releases a
	require.Eventually(t, func() bool { return nodeB.State() == StateFinish }, 10*time.Second, time.Millisecond)
	ex.release()
	require.NoError(t, r.Wait(context.Background()))
	assert.Equal(t, int32(2), calls.Load(), "a ran again, as Resume promised")
	assert.Equal(t, ResultSuccess, nodeA.Result().State, "%v", nodeA.Result().Err)
}

// R3-2: 77db72f keeps a Rerun-ed node from being skipped only when its
// started bit is set. A node its custom join suspended never started, so
// once Resume(Rerun) has made it ready (and returned nil), the
// short-circuit can still skip it before a goroutine starts it: the
// accepted rerun never happens, as in TestRerunOfANodeThatRanIsNotSkipped.
// TestRerunOfAJoinSuspendedNodeIsNotSkipped: once Resume(Rerun) has
// accepted a node its custom join suspended (one that never started), it
// is not skipped when its last successor stops needing it.
func TestRerunOfAJoinSuspendedNodeIsNotSkipped(t *testing.T) {
	ex := &holdExec{}
	a := New(WithExecutor(ex))
	defer a.Close()
	var calls atomic.Int32
	gate := make(chan struct{})
	p := NewWrapper("p", okWorker(), 0)
	i := NewWrapper("i", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		calls.Add(1)
		return 1, nil
	}), 0).Depend(p, true).Join(CustomJoin(func([]Upstream) Decision { return DecideSuspend }))
	g := NewWrapper("g", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { <-gate; return 2, nil }), 0)
	s := NewWrapper("s", okWorker(), 0).Depend(i, false).Depend(g, false) // runs on the first success
	r, err := a.Start(context.Background(), time.Minute, p, g)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return r.Report().Nodes[indexOf(r, "i")].Status == StatusPending }, 10*time.Second, time.Millisecond)
	ex.hold.Store(true)
	require.NoError(t, r.Resume("i", Rerun())) // accepted: i pending -> ready
	close(gate)                                // g succeeds: s runs and releases i
	require.Eventually(t, func() bool { return s.State() == StateFinish }, 10*time.Second, time.Millisecond)
	ex.release()
	require.NoError(t, r.Wait(context.Background()))
	assert.Equal(t, int32(1), calls.Load(), "i ran, as Resume(Rerun) promised")
	assert.Equal(t, ResultSuccess, i.Result().State, "%v", i.Result().Err)
}

// TestResumeAfterTheDeadlineBeforeTheSweep: a SucceedWith or FailWith
// that comes after the deadline, while the sweep has not reached the
// pending node yet, decided the node's result, where a worker returning
// then ends as a timeout. The node now ends as a timeout and
// Resume returns ErrNotPending.
func TestResumeAfterTheDeadlineBeforeTheSweep(t *testing.T) {
	for _, how := range []Resumption{SucceedWith(7), FailWith(errBoom)} {
		sweeping, resumed, release := make(chan struct{}), make(chan struct{}), make(chan struct{})
		var once sync.Once
		a := New(WithHooks(&Hooks{OnNodeTimeout: func(_ context.Context, ev NodeEvent) {
			if ev.ID == "s" {
				once.Do(func() { close(sweeping) })
				<-resumed // holds the sweep at s, before p
			}
		}}))
		s := NewWrapper("s", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { <-release; return 0, nil }), 0)
		q := NewWrapper("q", okWorker(), 0)
		p := NewWrapper("p", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 0, errBoom }), 0).
			Depend(q, true).OnFailure(PolicySuspend)
		r, err := a.Start(context.Background(), 50*time.Millisecond, s, q)
		require.NoError(t, err)
		<-sweeping
		rerr := r.Resume("p", how)
		close(resumed)
		werr := r.Wait(context.Background())
		close(release)
		require.NoError(t, a.Close())
		require.ErrorIs(t, werr, context.DeadlineExceeded)
		assert.ErrorIs(t, rerr, ErrNotPending)
		assert.Equal(t, ResultTimeout, p.Result().State, "%v", p.Result().Err)
	}
}

// holdSweepBeforeP starts s (a start node the sweep reaches first, whose
// OnNodeTimeout hook holds the sweep until release is closed), q, and p
// after q; p's worker fails once under PolicySuspend. It returns once p
// is pending and the deadline has passed with the sweep held at s.
func holdSweepBeforeP(t *testing.T, pw Worker[int, int]) (a *Async, r *Run, p *WorkerWrapper[int, int], release func()) {
	sweeping, held, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var once, relOnce sync.Once
	a = New(WithHooks(&Hooks{OnNodeTimeout: func(_ context.Context, ev NodeEvent) {
		if ev.ID == "s" {
			once.Do(func() { close(sweeping) })
			<-held
		}
	}}))
	s := NewWrapper("s", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { <-done; return 0, nil }), 0)
	q := NewWrapper("q", okWorker(), 0)
	p = NewWrapper("p", pw, 0).Depend(q, true).OnFailure(PolicySuspend)
	r, err := a.Start(context.Background(), 100*time.Millisecond, s, q)
	require.NoError(t, err)
	<-sweeping
	require.Equal(t, StatusPending, r.Report().Nodes[indexOf(r, "p")].Status)
	return a, r, p, func() { relOnce.Do(func() { close(held); close(done) }) }
}

// TestLateRerunIsNotAcceptedSilently: after the deadline, Resume(Rerun) still returns nil (the rerun
// "is promised") though the worker never runs again and the node ends as
// a timeout, while SucceedWith/FailWith in the same situation now return
// ErrNotPending (dac8c32's contract: the run was stopped first).
func TestLateRerunIsNotAcceptedSilently(t *testing.T) {
	var calls atomic.Int32
	_, r, p, release := holdSweepBeforeP(t, WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		calls.Add(1)
		return 0, errBoom
	}))
	rerr := r.Resume("p", Rerun())
	release()
	requireEnds(t, r, "run never ended")
	t.Logf("Resume(Rerun) = %v; p: %v, worker calls %d, report attempts %d", rerr, p.Result().State,
		calls.Load(), r.Report().Nodes[indexOf(r, "p")].Attempts)
	if rerr == nil {
		assert.Equal(t, int32(2), calls.Load(), "Resume(Rerun) returned nil, but p's worker never ran again")
	} else {
		assert.ErrorIs(t, rerr, ErrNotPending)
	}
}

// TestRerunThatEndsTheRunIsAccepted: Resume(Rerun) looked at the run's
// context after handing the node to a goroutine, to tell whether the run
// had been stopped first; but a rerun that succeeds can end the whole run
// before that look, and the run's end cancels its context too. Resume then
// returned ErrNotPending ("the run was stopped first") for a rerun that
// ran and succeeded. It happened now and then on the Async's own pool
// (TestSuspendAndResume/rerun failed about once in 20 runs under -race),
// and every time with an executor that runs tasks on the caller.
func TestRerunThatEndsTheRunIsAccepted(t *testing.T) {
	inline := ExecutorFunc(func(task func()) error { task(); return nil })
	for _, tc := range []struct {
		name string
		opts []Option
		runs int
	}{
		{"own pool", nil, 200},
		{"caller runs", []Option{WithExecutor(inline)}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAsync(t, tc.opts...)
			for k := range tc.runs {
				var calls atomic.Int32
				sus := NewWrapper("sus", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
					if calls.Add(1) == 1 {
						return 0, errBoom
					}
					return 5, nil
				}), 0).OnFailure(PolicySuspend)
				r, err := a.Start(context.Background(), 0, sus)
				if err != nil {
					t.Fatal(err)
				}
				<-r.Suspended()
				if err := r.Resume("sus", Rerun()); err != nil {
					r.Cancel()
					t.Fatalf("run %d: Resume: %v; the rerun: %+v after %d calls", k, err, sus.Result(), calls.Load())
				}
				if err := r.Wait(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestResumeANodeWithoutAnID: a node with the empty id could become
// pending (PolicySuspend, or its custom join's DecideSuspend), but
// Resume finds nodes by id, and it has none: nothing could resume it,
// and a run without a deadline waited for ever, holding Close. Resume
// now names it as the reports and pictures do, "#" and its index, and
// the error of a run cancelled at it names it as Report.Err does: #0,
// unquoted, not "" (nor "#0", a node with that id).
func TestResumeANodeWithoutAnID(t *testing.T) {
	fails := func() WorkerFunc[int, int] {
		var n atomic.Int32
		return func(context.Context, int, Wrappers) (int, error) {
			if n.Add(1) == 1 {
				return 0, errors.New("first attempt fails")
			}
			return 5, nil
		}
	}
	t.Run("PolicySuspend", func(t *testing.T) {
		a := newAsync(t)
		up := NewWrapper("up", okWorker(), 0)
		anon := NewWrapper("", fails(), 0).OnFailure(PolicySuspend).Depend(up, true)
		run, err := a.Start(t.Context(), 0, up)
		require.NoError(t, err)
		<-run.Suspended()
		idx := anon.idx
		name := fmt.Sprintf("#%d", idx)
		require.Equal(t, StatusPending, run.Report().Nodes[idx].Status)
		require.NoError(t, run.Resume(name, Rerun()))
		require.NoError(t, run.Wait(t.Context()))
		assert.Equal(t, WorkResult[int]{State: ResultSuccess, Value: 5}, anon.Result())
	})
	t.Run("DecideSuspend", func(t *testing.T) {
		a := newAsync(t)
		up := NewWrapper("up", okWorker(), 0)
		anon := NewWrapper("", okWorker(), 0).Depend(up, true).
			Join(CustomJoin(func([]Upstream) Decision { return DecideSuspend }))
		run, err := a.Start(t.Context(), 0, up)
		require.NoError(t, err)
		<-run.Suspended()
		require.NoError(t, run.Resume(fmt.Sprintf("#%d", anon.idx), SucceedWith(9)))
		require.NoError(t, run.Wait(t.Context()))
		assert.Equal(t, WorkResult[int]{State: ResultSuccess, Value: 9}, anon.Result())
	})
	t.Run("BeginWork names it", func(t *testing.T) {
		a := newAsync(t)
		anon := NewWrapper("", fails(), 0).OnFailure(PolicySuspend)
		err := a.BeginWork(t.Context(), 0, anon)
		require.ErrorContains(t, err, `asynctool: run suspended at node #0, and was cancelled`)
	})
	t.Run("names that are not an anonymous node's", func(t *testing.T) {
		// A chain, whose order is its indexes: "#1" -> anonymous -> "x".
		a := newAsync(t)
		named := NewWrapper("#1", okWorker(), 0)
		anon := NewWrapper("", fails(), 0).OnFailure(PolicySuspend).Depend(named, true)
		NewWrapper("x", okWorker(), 0).Depend(anon, true)
		run, err := a.Start(t.Context(), 0, named)
		require.NoError(t, err)
		<-run.Suspended()
		require.Equal(t, int32(1), anon.idx, "the anonymous node's index")
		assert.ErrorIs(t, run.Resume("#1", Rerun()), ErrNotPending, `"#1" is the node with that id`)
		assert.EqualError(t, run.Resume("x", Rerun()), `asynctool: node is not pending: "x" waits on pending node #1: resume that one`,
			"the pending upstream is named as one without an id, not \"\"")
		for _, id := range []string{"#0", "#2", "#01", "#+1", "# 1", "#", "#9", "#-1", ""} {
			assert.ErrorIs(t, run.Resume(id, Rerun()), ErrUnknownID, id)
		}
		run.Cancel()
		require.ErrorIs(t, run.Wait(t.Context()), context.Canceled)
	})
}

// TestResumeSucceedWithNil: Run.Resume(SucceedWith(nil)) ends a pending
// node with the zero value when nil converts to its result type, and is
// refused with ErrResultType, the node staying pending, when it does
// not, as Stream.Resume does. A node of unsafe.Pointer refused it,
// although nil converts to an unsafe.Pointer.
func TestResumeSucceedWithNil(t *testing.T) {
	for _, tt := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"pointer", checkResumeWithNil[*int](true)},
		{"slice", checkResumeWithNil[[]int](true)},
		{"map", checkResumeWithNil[map[string]int](true)},
		{"chan", checkResumeWithNil[chan int](true)},
		{"func", checkResumeWithNil[func()](true)},
		{"interface", checkResumeWithNil[error](true)},
		{"any", checkResumeWithNil[any](true)},
		{"unsafe.Pointer", checkResumeWithNil[unsafe.Pointer](true)},
		{"int", checkResumeWithNil[int](false)},
		{"string", checkResumeWithNil[string](false)},
		{"struct", checkResumeWithNil[struct{ p *int }](false)},
	} {
		t.Run(tt.name, tt.run)
	}
}

// checkResumeWithNil resumes a pending node of result type R with
// SucceedWith(nil), which it accepts or not as accepted says.
func checkResumeWithNil[R any](accepted bool) func(t *testing.T) {
	return func(t *testing.T) {
		a := newAsync(t)
		sus := NewWrapper("sus", WorkerFunc[int, R](func(context.Context, int, Wrappers) (R, error) {
			var zero R
			return zero, errBoom
		}), 0).OnFailure(PolicySuspend)
		r, err := a.Start(context.Background(), 0, sus)
		require.NoError(t, err)
		t.Cleanup(r.Cancel) // a failed test leaves sus pending: Close would wait for it
		<-r.Suspended()
		err = r.Resume("sus", SucceedWith(nil))
		if !accepted {
			assert.ErrorIs(t, err, ErrResultType)
			require.NoError(t, r.Resume("sus", FailWith(errBoom)), "a refused resumption leaves the node pending")
			require.NoError(t, r.Wait(context.Background()))
			assert.ErrorIs(t, sus.Result().Err, errBoom)
			return
		}
		require.NoError(t, err)
		require.NoError(t, r.Wait(context.Background()))
		res := sus.Result()
		assert.Equal(t, ResultSuccess, res.State)
		assert.True(t, reflect.ValueOf(&res.Value).Elem().IsZero(), "the node's value is the zero value: got %v", res.Value)
	}
}

// TestJoinSuspendedNodeIsNotShortCircuited: a node its custom join
// suspended stays pending, and holds the run, once no successor needs it
// any more, as DecideSuspend says: the node after it was skipped when
// their common successor ran without it, and only a Resume ends the run
// before its deadline.
func TestJoinSuspendedNodeIsNotShortCircuited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		t.Cleanup(func() { require.NoError(t, a.Close()) })
		up := NewWrapper("up", okWorker(), 0)
		held := NewWrapper("held", okWorker(), 0).Depend(up, true).
			Join(CustomJoin(func([]Upstream) Decision { return DecideSuspend }))
		mid := NewWrapper("mid", okWorker(), 0).Depend(held, true)
		gate := make(chan struct{})
		fast := NewWrapper("fast", gatedWorker(gate, 1), 0)
		page := NewWrapper("page", okWorker(), 0).Depend(mid, false).Depend(fast, false).Join(AnySucceeded())
		r, err := a.Start(context.Background(), time.Hour, up, fast)
		require.NoError(t, err)
		t.Cleanup(r.Cancel)
		synctest.Wait() // held is pending, fast waits
		require.Equal(t, StatusPending, r.Report().Nodes[indexOf(r, "held")].Status)
		close(gate)
		<-r.Suspended()
		require.Equal(t, ResultSuccess, page.Result().State)
		assert.ErrorIs(t, mid.Result().Err, ErrSkipped)
		assert.Equal(t, StatusPending, r.Report().Nodes[indexOf(r, "held")].Status)
		require.NoError(t, r.Resume("held", SucceedWith(5)))
		require.NoError(t, r.Wait(context.Background()))
		assert.Equal(t, WorkResult[int]{Value: 5, State: ResultSuccess}, held.Result())
	})
}

// TestRerunRacingTheSweepKeepsTheNodesReason: a pending node that the
// run's stop ends reads "stopped while pending ..." (after its worker's
// failure, or its join's suspension). A Resume(Rerun) made the node ready
// first, then recorded the new round (cleared the failure, released the
// join's suspension) under the node's lock: a sweep that ended the node
// in between gave it the pending reason, which OnRunEnd's report showed,
// and the Rerun's bookkeeping, done after, turned it into "stopped while
// running" (or "stopped before it started") in a later Report. The stress
// of the flow rules (TestConcurrentRunsKeepFlowRules) saw it once in 100
// tests under -race. Here the test holds the node's lock while a Rerun
// and a Cancel both wait for it: if the node has ended by then, with its
// failure or suspension recorded, its reason must say pending, then and
// later; and whatever the order, OnNodeEnd's reason and a Report's after
// the run agree.
func TestRerunRacingTheSweepKeepsTheNodesReason(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func() (start Wrapper, n *WorkerWrapper[int, int])
	}{
		{"suspended after its worker failed", func() (Wrapper, *WorkerWrapper[int, int]) {
			n := NewWrapper("n", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
				return 0, errBoom
			}), 0).OnFailure(PolicySuspend)
			return n, n
		}},
		{"suspended by its join", func() (Wrapper, *WorkerWrapper[int, int]) {
			up := NewWrapper("up", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 1, nil }), 0)
			n := NewWrapper("n", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 2, nil }), 0).
				Depend(up, true).Join(CustomJoin(func([]Upstream) Decision { return DecideSuspend }))
			return up, n
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := New()
			t.Cleanup(func() { _ = a.Close() })
			start, n := tc.build()
			var endReason atomic.Value
			hooks := &Hooks{OnNodeEnd: func(_ context.Context, ev NodeEvent) {
				if ev.ID == "n" {
					endReason.Store(ev.Reason)
				}
			}}
			r, err := a.Start(WithRunHooks(context.Background(), hooks), time.Minute, start)
			require.NoError(t, err)
			t.Cleanup(r.Cancel)
			<-r.Suspended()
			s := r.runState
			i, _ := s.p.lookup("n")
			ext := s.exts[i]
			ext.mu.Lock()
			locked := true
			defer func() {
				if locked {
					ext.mu.Unlock()
				}
			}()
			resumed := make(chan error, 1)
			go func() { resumed <- r.Resume("n", Rerun()) }()
			cancelled := make(chan struct{})
			go func() {
				defer close(cancelled)
				r.Cancel()
			}()
			// Both wait for the lock: the Rerun (before or after it made
			// the node ready) and the sweep (before or after it ended it).
			pollFor(t)("the Rerun and the sweep both wait for the node's lock", func() bool {
				return strings.Count(allStacks(), "[sync.Mutex.Lock]") >= 2
			})
			// A reason read now, once the lock is free, says pending if
			// the node has ended with its failure or suspension recorded.
			pendingAtEnd := terminal(s.nodes[i].st()) && (ext.lastErr != nil || ext.joinSuspended.Load())
			ext.mu.Unlock()
			locked = false
			<-cancelled
			if err := <-resumed; err != nil {
				require.ErrorIs(t, err, ErrNotPending)
			}
			_ = r.Wait(context.Background())
			require.NoError(t, a.Close())
			reason := r.Report().Nodes[i].Reason
			assert.Equal(t, endReason.Load(), reason, "OnNodeEnd's reason, and the report's after the run")
			if pendingAtEnd {
				assert.True(t, strings.HasPrefix(reason, "stopped while pending "), "the node ended pending, its reason says %q", reason)
			}
			t.Logf("%s: the node ended pending while the Rerun waited: %v; its reason: %q", n.ID(), pendingAtEnd, reason)
		})
	}
}
