package asynctool

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Regression tests for the sixteenth session's reviews (helpers 38-42).

// TestRanNodeIsNotReportedSkipped: a node that ran and failed with an
// error wrapping ErrSkipped (it returned the error of a skipped optional
// upstream it read, as the README suggests reading one) was reported as
// skipped, and so was its must successor: OnNodeSkip fired for both and
// their reasons said no successor needed them.
func TestRanNodeIsNotReportedSkipped(t *testing.T) {
	var mu sync.Mutex
	var skipped []string
	a := newAsync(t, WithHooks(&Hooks{OnNodeSkip: func(_ context.Context, ev NodeEvent) {
		mu.Lock()
		skipped = append(skipped, ev.ID)
		mu.Unlock()
	}}))
	one := WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 1, nil })
	gate := make(chan struct{})
	release := releaser(t, gate)
	must := NewWrapper("must", one, 0)
	slow := NewWrapper("slow", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { <-gate; return 1, nil }), 0).
		ShortCircuit(false) // runs whatever happens, so only opt can be skipped
	opt := NewWrapper("opt", one, 0).Depend(slow, true) // not started while slow runs
	page := NewWrapper("page", WorkerFunc[int, int](func(_ context.Context, _ int, all Wrappers) (int, error) {
		defer release()
		r, _ := ResultOf[int](all, "opt")
		if r.State != ResultSuccess {
			return 0, fmt.Errorf("page needs opt: %w", r.Err)
		}
		return 1, nil
	}), 0).Depend(must, true).Depend(opt, false)
	NewWrapper("sink", one, 0).Depend(page, true)

	r, err := a.Start(context.Background(), time.Minute, must, slow)
	require.NoError(t, err)
	require.NoError(t, r.Wait(context.Background()))
	require.ErrorIs(t, opt.Result().Err, ErrSkipped, "precondition: opt was short-circuited")
	require.ErrorIs(t, page.Result().Err, ErrSkipped, "precondition: page's own error wraps it")

	mu.Lock()
	assert.Equal(t, []string{"opt"}, skipped, "only opt was short-circuited")
	mu.Unlock()
	reasons := map[string]string{}
	for _, n := range r.Report().Nodes {
		reasons[n.ID] = n.Reason
		if n.ID == "page" {
			assert.Equal(t, StatusFailed, n.Status)
		}
	}
	assert.Equal(t, "worker failed", reasons["page"])
	assert.Equal(t, `must upstream "page" failed`, reasons["sink"])
}

// TestZeroWrapperIsAnError: a zero WorkerWrapper (not made with
// NewWrapper) made BeginWork panic inside compile, which then left the
// valid nodes it had claimed claimed (helper-38).
func TestZeroWrapperIsAnError(t *testing.T) {
	a := newAsync(t)
	var w WorkerWrapper[int, int]
	var err error
	require.NotPanics(t, func() { err = a.BeginWork(context.Background(), time.Second, &w) })
	require.ErrorIs(t, err, ErrNilWorker)
	assert.Contains(t, err.Error(), "NewWrapper")

	one := WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 1, nil })
	up := NewWrapper("up", one, 0)
	var down WorkerWrapper[int, int]
	down.Depend(up, true)
	require.NotPanics(t, func() { err = a.BeginWork(context.Background(), time.Second, up) })
	require.ErrorIs(t, err, ErrNilWorker)
	require.NotPanics(t, func() { _, err = Compile(up) })
	require.ErrorIs(t, err, ErrNilWorker, "up was released by the failed BeginWork, not left claimed")
	_, err = Describe(up)
	require.ErrorIs(t, err, ErrNilWorker)
	assert.NotPanics(t, func() { _, _, _ = w.Result(), w.State(), w.String() })
}

// TestCustomJoinSuspendKeepsUpstreams: a node its custom join suspended
// has not fired, so its upstreams that have not started must not be
// short-circuited: a Rerun reads them (helper-40's review: they were
// skipped at the suspension). Once Resume decides the node with a value,
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

// TestDeadlineEndsUnstartedNodesAsTimeouts: when the group deadline
// passes, every node that has not ended ends as a timeout, as BeginWork's
// doc says. The sweep's end of one node released the unstarted upstreams
// of a successor it failed, and the short-circuit rule skipped them
// (helper-48 hit it under load: cart and recs ended as skipped, with
// OnNodeSkip instead of OnNodeTimeout).
func TestDeadlineEndsUnstartedNodesAsTimeouts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var skips, timeouts []string
		// A saturated pool: every node waits a second for a goroutine.
		slow := ExecutorFunc(func(task func()) error {
			go func() { time.Sleep(time.Second); task() }()
			return nil
		})
		a := New(WithExecutor(slow), WithHooks(&Hooks{
			OnNodeSkip: func(_ context.Context, ev NodeEvent) {
				mu.Lock()
				skips = append(skips, ev.ID)
				mu.Unlock()
			},
			OnNodeTimeout: func(_ context.Context, ev NodeEvent) {
				mu.Lock()
				timeouts = append(timeouts, ev.ID)
				mu.Unlock()
			},
		}))
		defer a.Close()
		one := WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 1, nil })
		user, cart, recs := NewWrapper("user", one, 0), NewWrapper("cart", one, 0), NewWrapper("recs", one, 0)
		page := NewWrapper("page", one, 0).Depend(user, true).Depend(cart, true).Depend(recs, false)
		err := a.BeginWork(context.Background(), 100*time.Millisecond, user, cart, recs)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		for _, w := range []*WorkerWrapper[int, int]{user, cart, recs, page} {
			assert.Equal(t, ResultTimeout, w.Result().State, "%s: %v", w, w.Result().Err)
		}
		mu.Lock()
		defer mu.Unlock()
		assert.Empty(t, skips)
		assert.ElementsMatch(t, []string{"user", "cart", "recs", "page"}, timeouts)
	})
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

// TestOptionalBranchReadiedWithItsSuccessorIsSkipped pins down what the
// README says of the enrichment shape user → recs -.-> page ← user: the
// end of user readies recs and completes page's must dependencies in one
// step, so recs, not started, is skipped, unless ShortCircuit(false).
func TestOptionalBranchReadiedWithItsSuccessorIsSkipped(t *testing.T) {
	for _, short := range []bool{true, false} {
		a := newAsync(t)
		one := WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 1, nil })
		var calls atomic.Int32
		user := NewWrapper("user", one, 0)
		recs := NewWrapper("recs", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			calls.Add(1)
			return 2, nil
		}), 0).Depend(user, true).ShortCircuit(short)
		page := NewWrapper("page", one, 0).Depend(user, true).Depend(recs, false)
		require.NoError(t, a.BeginWork(context.Background(), time.Minute, user))
		assert.Equal(t, ResultSuccess, page.Result().State)
		if short {
			assert.Zero(t, calls.Load(), "recs was skipped")
			assert.ErrorIs(t, recs.Result().Err, ErrSkipped)
		} else {
			assert.Equal(t, int32(1), calls.Load(), "recs ran")
		}
	}
}

// TestSnapshotTraceOfATimedRun: a snapshot taken while a node starts
// (its started bit set, its start time not yet written) made
// WriteChromeTrace fail with "ran but the report has no times for it"
// (helper-46); the report now shows such a node as not having run yet.
func TestSnapshotTraceOfATimedRun(t *testing.T) {
	a := New(WithTimings(true), WithMaxWorkers(4))
	defer a.Close()
	var failures, snapshots atomic.Int64
	var firstErr atomic.Value
	for round := 0; round < 300 && failures.Load() == 0; round++ {
		quick := WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 0, nil })
		root := NewWrapper("root", quick, 0)
		prev := root
		for k := 0; k < 64; k++ {
			n := NewWrapper("n"+string(rune('A'+k%26))+string(rune('a'+k/26)), quick, 0)
			n.Depend(prev, true)
			prev = n
		}
		run, err := a.Start(context.Background(), time.Minute, root)
		require.NoError(t, err)
		for {
			select {
			case <-run.Done():
			default:
				snapshots.Add(1)
				rep := run.Report()
				if err := rep.WriteChromeTrace(discard{}); err != nil {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
				continue
			}
			break
		}
	}
	assert.Zero(t, failures.Load(), "of %d snapshots: %v", snapshots.Load(), firstErr.Load())
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// A node its custom join suspended and Resume(Rerun) runs has no ready
// time (neither the suspension nor the Rerun records one), so its
// report's Wait is Started minus the zero time: the saturated maximum
// duration.
// TestRerunOfJoinSuspendedNodeHasAReadyTime: a node its custom join
// suspended had no ready time when Resume reran it, so its report's Wait
// was the time since the zero time (helper-46).
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

// TestFailedByResumeReason: a node that Resume ended with FailWith was
// reported as "worker failed", although for a node its custom join
// suspended no worker ran (helper-48).
func TestFailedByResumeReason(t *testing.T) {
	a := newAsync(t)
	up := NewWrapper("up", okWorker(), 0)
	NewWrapper("c", okWorker(), 0).Depend(up, true).Join(CustomJoin(func([]Upstream) Decision { return DecideSuspend }))
	p := NewWrapper("p", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 0, errBoom }), 0).
		OnFailure(PolicySuspend)
	r, err := a.Start(context.Background(), time.Minute, up, p)
	require.NoError(t, err)
	<-r.Suspended()
	no := errors.New("declined")
	require.NoError(t, r.Resume("c", FailWith(no)))
	require.NoError(t, r.Resume("p", FailWith(no)))
	require.NoError(t, r.Wait(context.Background()))
	rep := r.Report()
	for _, id := range []string{"c", "p"} {
		n := rep.Nodes[indexOf(r, id)]
		assert.Equal(t, "failed by Resume", n.Reason, id)
		assert.ErrorIs(t, n.Err, no, id)
	}
}

// TestLateResumeRacesClose: a Resume that comes after its run ended
// (ErrNotPending, as documented) while the Async is closing added to the
// Async's inflight count as Close waited for it to reach zero, a
// WaitGroup misuse that panicked the process (helper-49).
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
// it ran), and the rerun Resume had accepted never happened (helper-49).
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

// TestPolicyEndFailsUnstartedNodesWithEndError: under PolicyEnd every
// node not yet ended fails with *EndError; unstarted upstreams of the
// nodes the end failed were skipped instead, before the sweep started
// (helper-51).
func TestPolicyEndFailsUnstartedNodesWithEndError(t *testing.T) {
	var skipped atomic.Int32
	a := New(WithHooks(&Hooks{OnNodeSkip: func(context.Context, NodeEvent) { skipped.Add(1) }}))
	defer a.Close()
	bad := 0
	const runs = 200
	for k := range runs {
		e := NewWrapper("e", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			return 0, errBoom
		}), 0).OnFailure(PolicyEnd)
		g := NewWrapper("g", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
			<-ctx.Done()
			return 0, ctx.Err()
		}), 0)
		x := NewWrapper("x", okWorker(), 0).Depend(g, true)
		NewWrapper("s", okWorker(), 0).Depend(e, true).Depend(x, true)
		err := a.BeginWork(context.Background(), time.Minute, e, g)
		var ee *EndError
		require.ErrorAs(t, err, &ee)
		if xe := x.Result().Err; !errors.As(xe, &ee) {
			bad++
			if bad == 1 {
				t.Logf("run %d: x ended with %v (state %v), want *EndError", k, xe, x.Result().State)
			}
		}
	}
	assert.Zero(t, bad, "x skipped instead of failing with *EndError in %d of %d runs (OnNodeSkip fired %d times)", bad, runs, skipped.Load())
}

// R3-1b: the same gap for the deadline, which ef35ccc set out to fix:
// a worker that returns at the deadline ends as a timeout and fails its
// successor before the sweep has set r.stopped; the successor's release
// skips the unstarted upstream x (and could skip its chain), which
// should end as a timeout ("nodes that had not started end as
// timeouts").
// TestDeadlineSkipsNothingBeforeTheSweepStarts: a worker that returns
// at the deadline fails its successor before the sweep has started; the
// successor's unstarted upstream must still end as a timeout, not as
// skipped (helper-51: ef35ccc checked only the sweep's flag).
func TestDeadlineSkipsNothingBeforeTheSweepStarts(t *testing.T) {
	var skipped atomic.Int32
	a := New(WithHooks(&Hooks{OnNodeSkip: func(context.Context, NodeEvent) { skipped.Add(1) }}))
	defer a.Close()
	bad := 0
	const runs = 200
	for range runs {
		y := NewWrapper("y", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
			<-ctx.Done()
			return 0, ctx.Err()
		}), 0)
		g := NewWrapper("g", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
			<-ctx.Done()
			time.Sleep(time.Millisecond) // x stays unstarted until the sweep
			return 0, ctx.Err()
		}), 0)
		x := NewWrapper("x", okWorker(), 0).Depend(g, true)
		NewWrapper("s", okWorker(), 0).Depend(y, true).Depend(x, true)
		err := a.BeginWork(context.Background(), 2*time.Millisecond, y, g)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		if x.Result().State != ResultTimeout {
			bad++
		}
	}
	assert.Zero(t, bad, "x not a timeout in %d of %d runs (OnNodeSkip fired %d times)", bad, runs, skipped.Load())
}

// R3-2: 77db72f keeps a Rerun-ed node from being skipped only when its
// started bit is set. A node its custom join suspended never started, so
// once Resume(Rerun) has made it ready (and returned nil), the
// short-circuit can still skip it before a goroutine starts it: the
// accepted rerun never happens, as in TestRerunOfANodeThatRanIsNotSkipped.
// TestRerunOfAJoinSuspendedNodeIsNotSkipped: once Resume(Rerun) has
// accepted a node its custom join suspended (one that never started), it
// is not skipped when its last successor stops needing it (helper-51).
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
// then ends as a timeout (helper-50). The node now ends as a timeout and
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

// TestGoexitInDefaultValueDuringLateSucceedWith (helper-52): endedLate
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
	closed := make(chan struct{})
	go func() { _ = a.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatalf("Close blocked 5s: Resume's task reference leaked (busy=%d refs=%d)", r.busy.Load(), r.refs.Load())
	}
}

// TestLateRerunIsNotAcceptedSilently (helper-52): after the deadline, Resume(Rerun) still returns nil (the rerun
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

// TestGoexitInDefaultValueDuringFailWith: Resume(FailWith) writes the
// node's default value; a DefaultValue that calls runtime.Goexit left
// Resume's reference held, so Close never returned (helper-52).
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
	closed := make(chan struct{})
	go func() { _ = a.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close blocked: Resume's task reference leaked")
	}
}
