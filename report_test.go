package asynctool

import (
	"bytes"
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

// TestReportExplainsEveryNode checks that the report says, for every node,
// how it ended and why.
func TestReportExplainsEveryNode(t *testing.T) {
	ex := &manualExec{}
	a := newAsync(t, WithExecutor(ex))
	rec := newRecorder()
	bad := rec.node("bad", fail(errBoom))
	after := rec.node("after", ok(1)).Depend(bad, true)
	w, starts := anyGraph(rec)
	starts = append(starts, bad)
	r, err := a.Start(context.Background(), 0, starts...)
	require.NoError(t, err)
	ex.drain()
	require.NoError(t, r.Wait(context.Background()))
	_ = after
	_ = w

	rep := r.Report()
	byID := map[string]NodeReport{}
	for _, n := range rep.Nodes {
		byID[n.ID] = n
	}
	require.Len(t, byID, 9)
	assert.Equal(t, "a", byID["g"].DecidedBy, "g was triggered by a")
	assert.True(t, byID["g"].Ran)
	assert.Equal(t, 1, byID["g"].Attempts)
	assert.Equal(t, "no successor needed it any more", byID["c"].Reason)
	assert.Equal(t, StatusSkipped, byID["c"].Status)
	assert.Equal(t, StatusSucceeded, byID["g"].Status)
	assert.Equal(t, StatusFailed, byID["after"].Status)
	assert.False(t, byID["c"].Ran)
	assert.Equal(t, `must upstream "bad" failed`, byID["after"].Reason)
	assert.Equal(t, "bad", byID["after"].DecidedBy)
	assert.Equal(t, "worker failed", byID["bad"].Reason)
	assert.Equal(t, 1, byID["g"].Value)
	assert.ElementsMatch(t, []bool{false, false, false}, byID["g"].Must)
	assert.Len(t, byID["g"].Deps, 3)
	assert.True(t, byID["g"].Started.IsZero(), "no timings without hooks or WithTimings")

	err = rep.Err()
	assert.ErrorIs(t, err, errBoom)
	assert.ErrorIs(t, err, ErrSkipped)
	assert.Contains(t, err.Error(), `node "after": asynctool: upstream "bad" failed: boom`)
	text := rep.String()
	assert.Contains(t, text, "g: succeeded by=a\n")
	assert.Contains(t, text, "c: skipped (no successor needed it any more)\n")
	assert.NoError(t, rep.RunErr)
}

// TestReportTimings checks the recorded times with fake time.
func TestReportTimings(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New(WithTimings(true), WithMaxWorkers(1))
		defer a.Close()
		rec := newRecorder()
		sleep := func(d time.Duration) func(context.Context, Wrappers) (int, error) {
			return func(context.Context, Wrappers) (int, error) { time.Sleep(d); return 1, nil }
		}
		x := rec.node("x", sleep(10*time.Millisecond))
		y := rec.node("y", sleep(20*time.Millisecond)).Depend(x, true)
		slow := rec.node("slow", sleep(time.Hour))
		start := time.Now()
		r, err := a.Start(context.Background(), 50*time.Millisecond, x, slow)
		require.NoError(t, err)
		assert.ErrorIs(t, r.Wait(context.Background()), context.DeadlineExceeded)
		_ = y
		rep := r.Report()
		byID := map[string]NodeReport{}
		for _, n := range rep.Nodes {
			byID[n.ID] = n
		}
		assert.Equal(t, start, rep.Start)
		assert.Equal(t, start.Add(50*time.Millisecond), rep.End)
		assert.Equal(t, 10*time.Millisecond, byID["x"].Duration())
		assert.Equal(t, 20*time.Millisecond, byID["y"].Duration())
		assert.Equal(t, byID["x"].Lane, byID["y"].Lane, "y ran inline after x")
		assert.Equal(t, ResultTimeout, byID["slow"].Result)
		assert.Contains(t, byID["slow"].Reason, "stopped while running")
		assert.ErrorIs(t, rep.RunErr, context.DeadlineExceeded)
		// One worker: slow waits in the queue while x and then y run.
		assert.Equal(t, time.Duration(0), byID["x"].Wait)
		assert.Equal(t, 30*time.Millisecond, byID["slow"].Wait)
		time.Sleep(time.Hour)
	})
}

// TestHooks checks that every hook fires as documented, that contexts
// returned by hooks reach the workers, and that per-run hooks add to the
// Async's.
func TestHooks(t *testing.T) {
	type ev struct{ hook, id string }
	var got []ev
	var mu = make(chan struct{}, 1)
	mu <- struct{}{}
	record := func(hook, id string) {
		<-mu
		got = append(got, ev{hook, id})
		mu <- struct{}{}
	}
	type spanKey struct{}
	h := &Hooks{
		OnRunStart: func(ctx context.Context, info RunInfo) context.Context {
			record("runstart", "")
			assert.Equal(t, 4, info.Nodes)
			return context.WithValue(ctx, spanKey{}, "run")
		},
		OnNodeStart: func(ctx context.Context, e NodeEvent) context.Context {
			record("start", e.ID)
			assert.Equal(t, "run", ctx.Value(spanKey{}))
			return context.WithValue(ctx, spanKey{}, "node:"+e.ID)
		},
		OnNodeEnd:     func(ctx context.Context, e NodeEvent) { record("end", e.ID) },
		OnNodeSkip:    func(ctx context.Context, e NodeEvent) { record("skip", e.ID) },
		OnNodeTimeout: func(ctx context.Context, e NodeEvent) { record("timeout", e.ID) },
		OnRunEnd: func(ctx context.Context, rep *Report) {
			record("runend", "")
			assert.Len(t, rep.Nodes, 4)
		},
	}
	ex := &manualExec{}
	a := newAsync(t, WithExecutor(ex), WithHooks(h))
	var seen []string
	node := func(id string) *WorkerWrapper[int, int] {
		return NewWrapper(id, WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
			seen = append(seen, ctx.Value(spanKey{}).(string))
			return 1, nil
		}), 0)
	}
	fast, other := node("fast"), node("other")
	otherNext := node("othernext").Depend(other, true)
	sink := node("sink").Depend(fast, false).Depend(otherNext, false)
	_ = sink
	perRun := 0
	ctx := WithRunHooks(context.Background(), &Hooks{OnNodeEnd: func(context.Context, NodeEvent) { perRun++ }})
	r, err := a.Start(ctx, 0, fast, other)
	require.NoError(t, err)
	ex.drain()
	require.NoError(t, r.Wait(context.Background()))

	assert.Equal(t, []string{"node:fast", "node:sink"}, seen)
	assert.Equal(t, 4, perRun, "per-run hooks fire too")
	// Skipped branches are settled before the node that made them
	// unneeded starts.
	want := []ev{
		{"runstart", ""}, {"start", "fast"}, {"end", "fast"},
		{"skip", "other"}, {"end", "other"}, {"skip", "othernext"}, {"end", "othernext"},
		{"start", "sink"}, {"end", "sink"}, {"runend", ""},
	}
	assert.Equal(t, want, got)
}

// TestHookTimeoutAndPanic checks OnNodeTimeout and that a panicking hook
// is reported, not fatal.
func TestHookTimeoutAndPanic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		timeouts := 0
		h := &Hooks{
			OnNodeTimeout: func(context.Context, NodeEvent) { timeouts++ },
			OnNodeStart:   func(context.Context, NodeEvent) context.Context { panic("hook bug") },
		}
		a := New(WithHooks(h))
		defer a.Close()
		w := NewWrapper("w", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
			<-ctx.Done()
			return 0, ctx.Err()
		}), 0)
		err := a.BeginWork(context.Background(), time.Second, w)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		var cpe *CallbackPanicError
		require.True(t, errors.As(err, &cpe))
		assert.Equal(t, "OnNodeStart", cpe.Method)
		assert.Equal(t, 1, timeouts)
		assert.True(t, strings.Contains(err.Error(), "hook bug"))
	})
}

func TestDescribe(t *testing.T) {
	x := NewWrapper("x", okWorker(), 0)
	y := NewWrapper("y", okWorker(), 0).Depend(x, true)
	z := NewWrapper("z", okWorker(), 0).Depend(x, false).Depend(y, true)
	rep, err := Describe(x)
	require.NoError(t, err)
	require.Len(t, rep.Nodes, 3)
	assert.Equal(t, "z", rep.Nodes[2].ID)
	assert.Equal(t, []int{0, 1}, rep.Nodes[2].Deps)
	assert.Equal(t, []bool{false, true}, rep.Nodes[2].Must)
	assert.Equal(t, StateInit, rep.Nodes[2].State)
	assert.NoError(t, rep.Err())
	_, err = Describe()
	assert.ErrorIs(t, err, ErrNoStart)
	// Describe did not consume the wrappers.
	a := newAsync(t)
	require.NoError(t, a.BeginWork(context.Background(), 0, x))
	assert.Equal(t, ResultSuccess, z.Result().State)
	pl, err := Compile(NewWrapper("p", okWorker(), 0))
	require.NoError(t, err)
	assert.Equal(t, "p", pl.Describe().Nodes[0].ID)
}

// TestRunEndHookDuringSweep reproduces a race helper tests found: a worker
// that honours ctx returns while the sweep runs, and OnRunEnd reads the
// run's error.
func TestRunEndHookDuringSweep(t *testing.T) {
	var got atomic.Pointer[error]
	a := newAsync(t, WithHooks(&Hooks{OnRunEnd: func(_ context.Context, rep *Report) {
		err := rep.RunErr
		got.Store(&err)
	}}))
	for range 200 {
		w := NewWrapper("w", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
			<-ctx.Done()
			return 0, ctx.Err()
		}), 0)
		err := a.BeginWork(context.Background(), 50*time.Microsecond, w)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.ErrorIs(t, *got.Load(), context.DeadlineExceeded)
	}
}

// TestDescribeOfAUsedGraphPointsToItsReport: Describe of a plan's
// template, or of a graph that ran, was refused with BeginWork's advice
// ("run the plan with RunPlan or StartPlan", "build new wrappers for
// every run"), which does not describe anything. It names the call that
// does.
func TestDescribeOfAUsedGraphPointsToItsReport(t *testing.T) {
	tpl := NewWrapper("tpl", okWorker(), 0)
	pl, err := Compile(tpl)
	require.NoError(t, err)
	_, err = Describe(tpl)
	require.ErrorIs(t, err, ErrReused)
	assert.EqualError(t, err, `asynctool: wrapper already used in a run: node "tpl" belongs to a compiled Plan: Plan.Describe describes it`)
	assert.Equal(t, "tpl", pl.Describe().Nodes[0].ID, "which it does")

	ran := NewWrapper("ran", okWorker(), 0)
	a := newAsync(t)
	require.NoError(t, a.BeginWork(t.Context(), 0, ran))
	_, err = Describe(ran)
	require.ErrorIs(t, err, ErrReused)
	assert.EqualError(t, err, `asynctool: wrapper already used in a run: node "ran" is part of a run: Run.Report describes it`)
}

// reportIndex returns the index in run's report of the node with id.
func reportIndex(t *testing.T, run *Run, id string) int {
	t.Helper()
	i, ok := run.p.lookup(id)
	require.True(t, ok, "no node %q", id)
	return int(i)
}

// TestStatusOptionalPendingUpstream guards StatusPending against pending
// upstreams the node does not wait for: with a must dependency still
// running and a pending optional one, the node was reported pending
// although it ran, without any Resume, once the must one succeeded.
func TestStatusOptionalPendingUpstream(t *testing.T) {
	a := newAsync(t)
	gate := make(chan struct{})
	release := releaser(t, gate)
	p := NewWrapper("p", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 0, errBoom }), 0).
		OnFailure(PolicySuspend)
	m := NewWrapper("m", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
		<-gate
		return 1, nil
	}), 0)
	n := NewWrapper("n", okWorker(), 0).Depend(m, true).Depend(p, false)
	run, err := a.Start(context.Background(), 10*time.Second, p, m)
	require.NoError(t, err)
	pi, ni := reportIndex(t, run, "p"), reportIndex(t, run, "n")
	require.Eventually(t, func() bool { return run.Report().Nodes[pi].Status == StatusPending }, 5*time.Second, time.Millisecond)
	st := run.Report().Nodes[ni].Status
	release()
	<-run.Suspended()
	assert.Equal(t, ResultSuccess, n.Result().State, "n never waited on p")
	assert.Equal(t, StatusWaiting, st, "n waits on its must dependency m, not on the pending optional p")
	require.NoError(t, run.Resume("p", FailWith(errBoom)))
	requireEnds(t, run, "the run did not end once p was resumed")
}

// TestStatusAnyOfPendingUpstream checks the other side of StatusPending
// for an any-of join: while another upstream may still succeed the node
// is waiting; once that one failed, only a Resume of the pending
// upstream can run it, and it is pending.
func TestStatusAnyOfPendingUpstream(t *testing.T) {
	a := newAsync(t)
	gate := make(chan struct{})
	release := releaser(t, gate)
	var calls atomic.Int32
	p := NewWrapper("p", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		if calls.Add(1) == 1 {
			return 0, errBoom
		}
		return 1, nil
	}), 0).OnFailure(PolicySuspend)
	m := NewWrapper("m", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
		<-gate
		return 0, errBoom
	}), 0)
	n := NewWrapper("n", okWorker(), 0).Depend(m, false).Depend(p, false)
	run, err := a.Start(context.Background(), 10*time.Second, p, m)
	require.NoError(t, err)
	pi, ni := reportIndex(t, run, "p"), reportIndex(t, run, "n")
	require.Eventually(t, func() bool { return run.Report().Nodes[pi].Status == StatusPending }, 5*time.Second, time.Millisecond)
	assert.Equal(t, StatusWaiting, run.Report().Nodes[ni].Status, "m may still succeed")
	release()
	<-run.Suspended()
	assert.Equal(t, StatusPending, run.Report().Nodes[ni].Status, "m failed: n waits on p")
	require.NoError(t, run.Resume("p", Rerun()))
	require.NoError(t, run.Wait(context.Background()))
	assert.Equal(t, ResultSuccess, n.Result().State)
}

// TestStatusPendingByJoin checks StatusPending's rule for each join, on
// one snapshot: p is suspended and m still runs (it would succeed).
func TestStatusPendingByJoin(t *testing.T) {
	a := newAsync(t)
	gate := make(chan struct{})
	release := releaser(t, gate)
	p := NewWrapper("p", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 0, errBoom }), 0).
		OnFailure(PolicySuspend)
	m := NewWrapper("m", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
		<-gate
		return 1, nil
	}), 0)
	want := map[string]Status{
		"named m":    StatusWaiting, // p is not named
		"named p":    StatusPending,
		"all done":   StatusPending,
		"at least 1": StatusWaiting, // m may meet it
		"at least 2": StatusPending,
		"custom":     StatusWaiting, // m has not ended
	}
	joins := map[string]Join{
		"named m": NamedSucceeded("m"), "named p": NamedSucceeded("p"), "all done": AllDone(),
		"at least 1": AtLeast(1), "at least 2": AtLeast(2),
		"custom": CustomJoin(func([]Upstream) Decision { return DecideWait }),
	}
	for id, j := range joins {
		NewWrapper(id, okWorker(), 0).Depend(m, false).Depend(p, false).Join(j)
	}
	run, err := a.Start(context.Background(), 10*time.Second, p, m)
	require.NoError(t, err)
	pi := reportIndex(t, run, "p")
	require.Eventually(t, func() bool { return run.Report().Nodes[pi].Status == StatusPending }, 5*time.Second, time.Millisecond)
	rep := run.Report()
	release()
	got := map[string]Status{}
	for id := range want {
		got[id] = rep.Nodes[reportIndex(t, run, id)].Status
	}
	assert.Equal(t, want, got)
	<-run.Suspended()
	require.NoError(t, run.Resume("p", FailWith(errBoom)))
	requireEnds(t, run, "the run did not end once p was resumed")
}

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

// TestNilReportReadsAsEmpty: the Sub of a node that started no sub-run
// (any plain node, or a ForEach whose Items failed) is nil, and so is
// Describe's report with its error; calling Sub.Err(), as the README
// suggests for a sub-run's errors, or any other method of a nil *Report
// panicked with a nil dereference. A nil report now reads as an empty
// one.
func TestNilReportReadsAsEmpty(t *testing.T) {
	a := newAsync(t)
	page := NewWrapper("page", okWorker(), 0)
	prices := NewWrapper("prices", ForEach[int, int, int]{
		Items:  func(context.Context, int, Wrappers) ([]int, error) { return nil, errBoom },
		Worker: okWorker(),
	}, 0)
	r, err := a.Start(t.Context(), 0, page, prices)
	require.NoError(t, err)
	require.NoError(t, r.Wait(t.Context()))
	rep := r.Report()
	require.Len(t, rep.Nodes, 2)
	empty := &Report{}
	for _, n := range rep.Nodes {
		require.Nil(t, n.Sub, n.ID)
		assert.NotPanics(t, func() {
			assert.NoError(t, n.Sub.Err())
			assert.Empty(t, n.Sub.String())
			assert.Nil(t, n.Sub.CriticalPath())
			assert.Equal(t, empty.DOT(), n.Sub.DOT())
			assert.Equal(t, empty.Mermaid(), n.Sub.Mermaid())
			var got, want bytes.Buffer
			require.NoError(t, n.Sub.WriteChromeTrace(&got))
			require.NoError(t, empty.WriteChromeTrace(&want))
			assert.Equal(t, want.String(), got.String())
		}, n.ID)
	}
	assert.ErrorIs(t, rep.Err(), errBoom, "the ForEach node failed")

	d, err := Describe()
	require.ErrorIs(t, err, ErrNoStart)
	assert.NotPanics(t, func() { assert.Empty(t, d.String()) })
}
