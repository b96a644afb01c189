package asynctooltest

import (
	"context"
	"testing"
	"time"

	"github.com/asynctool-go/asynctool"
)

// Run runs the graph reachable from starts, with no deadline, on a fresh
// Async that records times ([asynctool.WithTimings]), waits for it, closes
// the Async and returns the run's report. A graph that does not validate
// fails the test at once (t.Fatalf). The run's error, if any, is the
// report's RunErr.
//
// The run's context is t.Context(), which ends only after the test
// function returns, so a fake that blocks and that nothing releases makes
// Run wait until `go test` times out (inside a testing/synctest bubble,
// synctest reports the deadlock at once): use [RunWithin] for a deadline,
// or [Start] to release it while the run is going on. A run that waits on
// nothing but pending nodes (a node suspended by
// [asynctool.PolicySuspend] or a custom join), which no Resume can reach
// before Run returns, is cancelled, as [asynctool.Async.BeginWork]
// cancels one: its pending nodes, and those that wait on them, end as
// timeouts, and RunErr wraps context.Canceled. Use Start to resume such
// a node.
func Run(t testing.TB, starts ...asynctool.Wrapper) *asynctool.Report {
	t.Helper()
	return RunWithin(t, 0, starts...)
}

// RunWithin is [Run] with a group deadline of timeout (0 means none).
// Inside a testing/synctest bubble the deadline is virtual time.
func RunWithin(t testing.TB, timeout time.Duration, starts ...asynctool.Wrapper) *asynctool.Report {
	t.Helper()
	a := asynctool.New(asynctool.WithTimings(true))
	defer a.Close()
	r, err := a.Start(t.Context(), timeout, starts...)
	if err != nil {
		t.Fatalf("asynctooltest: the graph was rejected: %v", err)
		return nil
	}
	// It returns no Run before the run has ended, so nothing could resume
	// a pending node: a run that stalls on one is cancelled, as BeginWork
	// and RunPlan cancel theirs (BeginWork gives no report).
	select {
	case <-r.Done():
	case <-r.Suspended():
		r.Cancel()
	}
	_ = r.Wait(context.Background())
	return r.Report()
}

// Start starts the graph reachable from starts, with a group deadline of
// timeout (0 means none), on a fresh Async that records times, and
// returns the run at once. The run's context is t.Context(), as Run's is,
// which ends as the test function returns: a run the test left with a
// pending node or a fake that Blocks is then stopped, and the Async is
// closed when the test ends (which waits for the run's workers). A graph
// that does not validate fails the test at once.
func Start(t testing.TB, timeout time.Duration, starts ...asynctool.Wrapper) *asynctool.Run {
	t.Helper()
	a := asynctool.New(asynctool.WithTimings(true))
	t.Cleanup(func() { _ = a.Close() })
	r, err := a.Start(t.Context(), timeout, starts...)
	if err != nil {
		t.Fatalf("asynctooltest: the graph was rejected: %v", err)
		return nil
	}
	return r
}

// RunPlan runs pl once on a fresh Async that records times, with ctx as
// the run's context (a [asynctool.Plan]'s workers take per-request data
// from it, and its deadline is the run's), waits for it, closes the
// Async, and returns the run: read its nodes with
// [asynctool.WorkerWrapper.ResultIn] and its report with Report. The run
// is released when the test ends. A nil or zero plan fails the test at
// once; the run's error, if any, is the report's RunErr. A run that
// stalls on pending nodes is cancelled, as Run says.
func RunPlan(t testing.TB, ctx context.Context, pl *asynctool.Plan) *asynctool.Run {
	t.Helper()
	if pl.Len() == 0 {
		t.Fatalf("asynctooltest: RunPlan with a nil or empty plan")
		return nil
	}
	a := asynctool.New(asynctool.WithTimings(true))
	defer a.Close()
	// RunPlan waits, and cancels a run stalled on pending nodes itself;
	// its error is the report's RunErr, or, with a nil Run, why the run
	// did not start.
	r, err := a.RunPlan(ctx, pl, 0)
	if r == nil {
		t.Fatalf("asynctooltest: the plan did not start: %v", err)
		return nil
	}
	t.Cleanup(r.Release)
	return r
}
