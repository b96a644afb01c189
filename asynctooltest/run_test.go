package asynctooltest_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynctool-go/asynctool"
	"github.com/asynctool-go/asynctool/asynctooltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRunRejectsBadGraphs checks that a graph that does not validate
// stops the test at once, for Run and Start.
func TestRunRejectsBadGraphs(t *testing.T) {
	for name, run := range map[string]func(s *spy){
		"Run":   func(s *spy) { asynctooltest.Run(s) },
		"Start": func(s *spy) { asynctooltest.Start(s, 0) },
	} {
		t.Run(name, func(t *testing.T) {
			s := onSpy(t, run)
			assert.True(t, s.fatal)
			require.Len(t, s.errors, 1)
			assert.Contains(t, s.errors[0], "asynctooltest: the graph was rejected: "+asynctool.ErrNoStart.Error())
		})
	}
}

// TestRunRecordsTimes checks that the reports of Run, Start and RunPlan
// have the times the ordering assertions need.
func TestRunRecordsTimes(t *testing.T) {
	graph := func() asynctool.Wrapper {
		a := asynctool.NewWrapper("a", asynctooltest.Returns[int](1), 0)
		asynctool.NewWrapper("b", asynctooltest.Returns[int](2), 0).Depend(a, true)
		return a
	}
	for name, run := range map[string]func(t *testing.T) *asynctool.Report{
		"Run": func(t *testing.T) *asynctool.Report { return asynctooltest.Run(t, graph()) },
		"Start": func(t *testing.T) *asynctool.Report {
			r := asynctooltest.Start(t, 0, graph())
			require.NoError(t, r.Wait(context.Background()))
			return r.Report()
		},
		"RunPlan": func(t *testing.T) *asynctool.Report {
			pl, err := asynctool.Compile(graph())
			require.NoError(t, err)
			return asynctooltest.RunPlan(t, context.Background(), pl).Report()
		},
	} {
		t.Run(name, func(t *testing.T) {
			rep := run(t)
			require.NoError(t, rep.RunErr)
			for _, n := range rep.Nodes {
				assert.False(t, n.Started.IsZero(), "%s has a start time", n.ID)
			}
			asynctooltest.RanBefore(t, rep, "a", "b")
			assert.NoError(t, rep.Err())
		})
	}
}

// TestRunPlanReleasesItsRun checks that the run RunPlan returns is
// released when the test that made it ends, as its doc says: its state
// then serves the plan's next run, and reading the old one says so.
func TestRunPlanReleasesItsRun(t *testing.T) {
	a := asynctool.NewWrapper("a", asynctooltest.Returns[int](1), 0)
	pl, err := asynctool.Compile(a)
	require.NoError(t, err)
	var run *asynctool.Run
	t.Run("run", func(t *testing.T) {
		run = asynctooltest.RunPlan(t, context.Background(), pl)
		v, err := a.ValueIn(run)
		require.NoError(t, err)
		assert.Equal(t, 1, v)
	})
	_, err = a.ValueIn(run)
	assert.ErrorIs(t, err, asynctool.ErrUnknownID, "read after the test that ran it ended")
}

// TestRunEndsARunThatSuspends: Run, RunWithin and RunPlan waited for the
// run with no way to resume it, so a node that suspended
// (PolicySuspend) kept them waiting until the deadline, or, without one,
// until go test timed out; BeginWork and asynctool's own RunPlan cancel
// such a run once it waits on nothing but pending nodes, and so do these
// now. Under synctest, a wait that never ends is a deadlock the bubble
// reports at once.
func TestRunEndsARunThatSuspends(t *testing.T) {
	graph := func() []asynctool.Wrapper {
		pay := asynctool.NewWrapper("pay", asynctooltest.Fails[int, int](errors.New("needs review")), 0).
			OnFailure(asynctool.PolicySuspend)
		other := asynctool.NewWrapper("other", asynctooltest.Returns[int](1), 0)
		asynctool.NewWrapper("receipt", asynctooltest.Returns[int](2), 0).
			Depend(pay, true).Depend(other, true)
		return []asynctool.Wrapper{pay, other}
	}
	check := func(t *testing.T, rep *asynctool.Report) {
		assert.ErrorIs(t, rep.RunErr, context.Canceled)
		asynctooltest.Succeeded(t, rep, "other")
		asynctooltest.TimedOut(t, rep, "pay")
		asynctooltest.NeverStarted(t, rep, "receipt")
	}
	synctest.Test(t, func(t *testing.T) {
		check(t, asynctooltest.Run(t, graph()...))
	})
	synctest.Test(t, func(t *testing.T) {
		check(t, asynctooltest.RunWithin(t, 0, graph()...))
	})
	synctest.Test(t, func(t *testing.T) {
		pl, err := asynctool.Compile(graph()...)
		require.NoError(t, err)
		check(t, asynctooltest.RunPlan(t, context.Background(), pl).Report())
	})
}

// TestDownOptionalBackendFailsWhileThePageSucceeds runs the graph and the
// assertions of ExampleRun, which is compiled but not run: keep the two
// in step. With an instant fake for user, as the example had, page ran
// before recs, an optional start node, got a goroutine, recs was skipped,
// and Failed(recs, errDown) failed in every run.
func TestDownOptionalBackendFailsWhileThePageSucceeds(t *testing.T) {
	for range 20 {
		synctest.Test(t, func(t *testing.T) {
			s := &spy{TB: t}
			errDown := errors.New("recs down")
			user := asynctool.NewWrapper("user", asynctooltest.Sleeps[int64](10*time.Millisecond, "ada"), 42)
			recs := asynctool.NewWrapper("recs", asynctooltest.Fails[int64, []string](errDown), 42).
				Default([]string{"bestsellers"})
			asynctool.NewWrapper("page", asynctooltest.Returns[int64]("<html>"), 42).
				Depend(user, true).
				Depend(recs, false)

			rep := asynctooltest.Run(t, user, recs)

			asynctooltest.Succeeded(s, rep, "page")
			asynctooltest.RanBefore(s, rep, "user", "page")
			asynctooltest.Failed(s, rep, "recs", errDown)
			assert.Empty(t, s.errors)
		})
	}
}

// TestPlanCompiledOutsideABubbleRunsInsideOne: a service compiles its
// plan once, at start-up or in a package variable, and its tests run
// that plan inside testing/synctest bubbles, one after another and
// outside them too. A plan keeps no goroutine, timer or channel from one
// run to the next, so each run belongs to the bubble it runs in.
func TestPlanCompiledOutsideABubbleRunsInsideOne(t *testing.T) {
	type uidKey struct{}
	user := asynctool.NewWrapper("user", asynctooltest.Func(func(ctx context.Context, _ int) (int, error) {
		timer := time.NewTimer(10 * time.Millisecond)
		defer timer.Stop()
		select {
		case <-timer.C:
			return ctx.Value(uidKey{}).(int), nil
		case <-ctx.Done():
			return 0, context.Cause(ctx)
		}
	}), 0)
	cart := asynctool.NewWrapper("cart", asynctooltest.Returns[int]([]int{1, 2, 3}), 0)
	prices := asynctool.NewWrapper("prices", asynctool.ForEach[int, int, int]{
		Items: func(_ context.Context, _ int, all asynctool.Wrappers) ([]int, error) {
			c, err := cart.ResultFrom(all)
			return c.Value, err
		},
		Worker: asynctooltest.Func(func(_ context.Context, x int) (int, error) { return 10 * x, nil }),
		Limit:  2,
	}, 0).Depend(cart, true).Timeout(time.Minute)
	recs := asynctool.NewWrapper("recs", asynctooltest.Sleeps[int](time.Hour, "lamp"), 0)
	page := asynctool.NewWrapper("page", asynctool.WorkerFunc[int, int](
		func(_ context.Context, _ int, all asynctool.Wrappers) (int, error) {
			u, _ := user.ResultFrom(all)
			p, _ := prices.ResultFrom(all)
			sum := u.Value
			for _, r := range p.Value {
				sum += r.Value
			}
			return sum, nil
		}), 0).Depend(user, true).Depend(prices, true).Depend(recs, false).EndsRun()
	pl, err := asynctool.Compile(user, cart, recs)
	require.NoError(t, err)

	runOnce := func(t *testing.T, uid int) {
		run := asynctooltest.RunPlan(t, context.WithValue(context.Background(), uidKey{}, uid), pl)
		v, err := page.ValueIn(run)
		require.NoError(t, err)
		assert.Equal(t, uid+60, v)
		asynctooltest.TimedOut(t, run.Report(), "recs")
	}
	t.Run("outside", func(t *testing.T) { runOnce(t, 1000) })
	t.Run("bubble", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			runOnce(t, 2000)
			runOnce(t, 3000)
		})
	})
	t.Run("another bubble", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) { runOnce(t, 4000) })
	})
	t.Run("outside again", func(t *testing.T) { runOnce(t, 5000) })
}
