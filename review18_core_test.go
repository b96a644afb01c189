package asynctool

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGoexitInOnRunEndIsReported checks that a runtime.Goexit in an
// OnRunEnd hook comes back from BeginWork as a *CallbackPanicError, as a
// panic there does, instead of being lost.
func TestGoexitInOnRunEndIsReported(t *testing.T) {
	for _, kind := range []string{"goexit", "panic"} {
		t.Run(kind, func(t *testing.T) {
			a := newAsync(t)
			h := &Hooks{OnRunEnd: func(context.Context, *Report) {
				if kind == "panic" {
					panic("boom")
				}
				runtime.Goexit()
			}}
			x := NewWrapper("x", okWorker(), 0)
			err := a.BeginWork(WithRunHooks(context.Background(), h), time.Minute, x)
			var cpe *CallbackPanicError
			require.ErrorAs(t, err, &cpe)
			assert.Equal(t, "OnRunEnd", cpe.Method)
			assert.Equal(t, ResultSuccess, x.Result().State, "the run itself went as it would have")
			if kind == "goexit" {
				assert.ErrorIs(t, err, ErrGoexit)
			}
		})
	}
}

// TestRetryPolicyPanicAppliesTheFailurePolicy checks that a panic in a
// node's Retryable ends its retries with the node's failure policy, as
// any failure does: under PolicySuspend the node used to fail instead of
// becoming pending (a stream node with the same policy paused).
func TestRetryPolicyPanicAppliesTheFailurePolicy(t *testing.T) {
	errBad := errors.New("bad")
	policies := map[string]RetryPolicy{
		"retryable": {Attempts: 3, Retryable: func(error) bool { panic("policy panicked") }},
		"backoff":   {Attempts: 3, Backoff: func(int) time.Duration { panic("policy panicked") }},
	}
	failing := func() Worker[int, int] {
		return WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 0, errBad })
	}
	for name, retry := range policies {
		t.Run(name+"/suspend", func(t *testing.T) {
			a := newAsync(t)
			x := NewWrapper("x", failing(), 0).Retry(retry).OnFailure(PolicySuspend)
			run, err := a.Start(context.Background(), 0, x)
			require.NoError(t, err)
			t.Cleanup(run.Cancel)
			select {
			case <-run.Suspended():
			case <-run.Done():
				t.Fatalf("the run ended instead of suspending: %v", x.Result())
			case <-time.After(10 * time.Second):
				t.Fatal("the node neither suspended nor ended")
			}
			rep := run.Report()
			assert.Equal(t, StatusPending, rep.Nodes[0].Status)
			assert.Equal(t, 1, rep.Nodes[0].Attempts)
			require.NoError(t, run.Resume("x", FailWith(errBad)))
			require.NoError(t, run.Wait(context.Background()))
			assert.Equal(t, ResultException, x.Result().State)
		})

		t.Run(name+"/continue", func(t *testing.T) {
			a := newAsync(t)
			x := NewWrapper("x", failing(), 0).Retry(retry).OnFailure(PolicyContinue)
			y := NewWrapper("y", okWorker(), 0).Depend(x, true)
			require.NoError(t, a.BeginWork(context.Background(), time.Minute, x))
			var pe *PanicError
			require.ErrorAs(t, x.Result().Err, &pe)
			assert.Equal(t, "policy panicked", pe.Value)
			assert.Equal(t, ResultSuccess, y.Result().State, "the failure counts as done for y")
		})

		t.Run(name+"/end", func(t *testing.T) {
			a := newAsync(t)
			x := NewWrapper("x", failing(), 0).Retry(retry).OnFailure(PolicyEnd)
			err := a.BeginWork(context.Background(), time.Minute, x)
			var ee *EndError
			require.ErrorAs(t, err, &ee, "PolicyEnd ended the run")
			var pe *PanicError
			assert.ErrorAs(t, x.Result().Err, &pe)
		})
	}
}

// TestNamedSucceededCopiesItsIDs checks that NamedSucceeded keeps its own
// copy of the ids: a caller that reuses its slice afterwards (a loop that
// builds several joins from one buffer) used to change the join.
func TestNamedSucceededCopiesItsIDs(t *testing.T) {
	a := newAsync(t)
	fail := WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 0, errors.New("down") })
	good := NewWrapper("good", okWorker(), 0)
	bad := NewWrapper("bad", fail, 0)
	ids := []string{"good"}
	x := NewWrapper("x", okWorker(), 0).Depend(good, false).Depend(bad, false).Join(NamedSucceeded(ids...))
	ids[0] = "bad" // reused by the caller
	require.NoError(t, a.BeginWork(context.Background(), time.Minute, good, bad))
	assert.Equal(t, ResultSuccess, x.Result().State, "x waits on good, as it was told when the join was made")
	names := []string{"good"}
	j := NamedSucceeded(names...)
	before := j.String()
	names[0] = "bad"
	assert.Equal(t, before, j.String(), "a join's name does not change with the caller's slice")
}

// TestTimeoutStopsWhilePendingAndRestartsOnRerun pins the Timeout row of
// the README's flow rules: a node's own Timeout does not run while the
// node is pending (a second of waiting for Resume does not time it out),
// and a Rerun starts it again from the rerun's start.
func TestTimeoutStopsWhilePendingAndRestartsOnRerun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		var calls atomic.Int32
		x := NewWrapper("x", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
			if calls.Add(1) == 1 {
				return 0, errors.New("needs review")
			}
			<-ctx.Done() // the rerun hangs until its Timeout
			return 0, context.Cause(ctx)
		}), 0).Timeout(50 * time.Millisecond).OnFailure(PolicySuspend)
		run, err := a.Start(context.Background(), 0, x)
		require.NoError(t, err)
		<-run.Suspended()
		time.Sleep(time.Second) // ten times the Timeout, pending
		synctest.Wait()
		require.Equal(t, StatusPending, run.Report().Nodes[0].Status, "the Timeout did not run while pending")

		rerun := time.Now()
		require.NoError(t, run.Resume("x", Rerun()))
		require.NoError(t, run.Wait(context.Background()))
		assert.Equal(t, 50*time.Millisecond, time.Since(rerun), "the Timeout ran again from the rerun")
		var nte *NodeTimeoutError
		assert.ErrorAs(t, x.Result().Err, &nte)
		assert.Equal(t, ResultTimeout, x.Result().State)
	})
}
