package asynctool

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Review of conditional branches (When, DecideSkip), helper-71.

// TestS19RWhenFailsAtOnceInAnyOrder: When is documented as AllSucceeded
// with a condition, and AllSucceeded fails at the first failure, in any
// declaration order. A When join on [slow, bad] waited for slow, listed
// first, before looking at bad's failure: the node did not fail until
// slow ended, and a pending (PolicySuspend) slow stalled the run.
func TestS19RWhenFailsAtOnceInAnyOrder(t *testing.T) {
	for _, slowFirst := range []bool{true, false} {
		t.Run(map[bool]string{true: "slow first", false: "slow last"}[slowFirst], func(t *testing.T) {
			a := newAsync(t)
			gate := make(chan struct{})
			release := releaser(t, gate)
			slow := NewWrapper("slow", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
				return gated(gate, 1)(ctx, Wrappers{})
			}), 0)
			bad := NewWrapper("bad", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 0, errBoom }), 0)
			x := NewWrapper("x", okWorker(), 0)
			if slowFirst {
				x.Depend(slow, true).Depend(bad, true)
			} else {
				x.Depend(bad, true).Depend(slow, true)
			}
			x.Join(When("slow", func(int) bool { return true }))
			run, err := a.Start(context.Background(), 0, slow, bad)
			require.NoError(t, err)
			assert.Eventually(t, func() bool { return x.State() == StateError }, 5*time.Second, time.Millisecond,
				"x waited for slow although bad had failed")
			release()
			require.NoError(t, run.Wait(context.Background()))
			var ue *UpstreamError
			require.ErrorAs(t, x.Result().Err, &ue)
			assert.Equal(t, "bad", ue.ID)
		})
	}
}

// TestS19RWhenNotTakenAtOnceInAnyOrder: the same for an upstream not
// taken, which makes the node not taken at once.
func TestS19RWhenNotTakenAtOnceInAnyOrder(t *testing.T) {
	a := newAsync(t)
	gate := make(chan struct{})
	release := releaser(t, gate)
	slow := NewWrapper("slow", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
		return gated(gate, 1)(ctx, Wrappers{})
	}), 0)
	root := NewWrapper("root", okWorker(), 0)
	no := NewWrapper("no", okWorker(), 0).Depend(root, true).Join(When("root", func(int) bool { return false }))
	x := NewWrapper("x", okWorker(), 0).Depend(slow, true).Depend(no, true).Join(When("slow", func(int) bool { return true }))
	run, err := a.Start(context.Background(), 0, slow, root)
	require.NoError(t, err)
	assert.Eventually(t, func() bool { return x.State() == StateError }, 5*time.Second, time.Millisecond,
		"x waited for slow although no was not taken")
	release()
	require.NoError(t, run.Wait(context.Background()))
	assert.Equal(t, ErrNotTaken, x.Result().Err)
}

// TestS19RWhenFailsBesidePendingUpstream: an upstream suspended under
// PolicySuspend, listed first, and another that fails: the When node
// fails at once, as AllSucceeded's does, instead of becoming pending
// with the run stalled on it.
//
// bad fails only once susp's worker has been called: had bad failed
// first, x's failure would have skipped susp, a start node not started
// yet that no successor needed any more (see ShortCircuit), and the run
// would never have stalled.
func TestS19RWhenFailsBesidePendingUpstream(t *testing.T) {
	for _, join := range []Join{AllSucceeded(), When("susp", func(int) bool { return true })} {
		t.Run(join.String(), func(t *testing.T) {
			a := newAsync(t)
			suspCalled := make(chan struct{})
			susp := NewWrapper("susp", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
				close(suspCalled) // called once: SucceedWith does not rerun it
				return 0, errBoom
			}), 0).OnFailure(PolicySuspend)
			bad := NewWrapper("bad", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
				select {
				case <-suspCalled: // susp started: it is no longer skipped
				case <-ctx.Done():
					return 0, ctx.Err()
				}
				time.Sleep(10 * time.Millisecond) // after susp is pending
				return 0, errBoom
			}), 0)
			x := NewWrapper("x", okWorker(), 0).Depend(susp, true).Depend(bad, true).Join(join)
			run, err := a.Start(context.Background(), time.Minute, susp, bad)
			require.NoError(t, err)
			select {
			case <-run.Suspended():
			case <-time.After(10 * time.Second):
				t.Fatal("the run did not stall on susp")
			}
			assert.Equal(t, StateError, x.State(), "x waits on pending susp although bad failed")
			require.NoError(t, run.Resume("susp", SucceedWith(1)))
			require.NoError(t, run.Wait(context.Background()))
			assert.ErrorIs(t, x.Result().Err, errBoom)
		})
	}
}

// TestS19RWhenConditionGoexit: a condition that ends its goroutine with
// runtime.Goexit fails the node with ErrGoexit, as a CustomJoin's fn
// does, the run goes on, and the report does not blame the worker, which
// never ran.
func TestS19RWhenConditionGoexit(t *testing.T) {
	a := newAsync(t)
	up := NewWrapper("up", okWorker(), 0)
	x := NewWrapper("x", okWorker(), 0).Depend(up, true).Join(When("up", func(int) bool { runtime.Goexit(); return true }))
	other := NewWrapper("other", okWorker(), 0).Depend(up, true)
	after := NewWrapper("after", okWorker(), 0).Depend(x, false)
	run, err := a.Start(context.Background(), time.Minute, up)
	require.NoError(t, err)
	requireEnds(t, run, "the run did not end after the condition's Goexit")
	require.NoError(t, run.Wait(context.Background()))
	assert.ErrorIs(t, x.Result().Err, ErrGoexit)
	assert.Equal(t, ResultSuccess, other.Result().State)
	assert.ErrorIs(t, after.Result().Err, ErrGoexit)
	n := nodeReport(t, run.Report(), "x")
	assert.False(t, n.Ran)
	assert.Equal(t, StatusFailed, n.Status)
	assert.NotContains(t, n.Reason, "worker", "the worker never ran")
	assert.Contains(t, n.Reason, `when "up"`)
}
