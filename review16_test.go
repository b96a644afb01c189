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
