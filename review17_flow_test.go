package asynctool

// Regression tests from the seventeenth review: flow rules, streams and
// the executors.

import (
	"context"
	"errors"
	"math"
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// goexits is a worker that ends its goroutine with runtime.Goexit, as
// t.FailNow does in a test's worker.
func goexits(context.Context, Wrappers) (int, error) {
	runtime.Goexit()
	return 0, nil
}

// A worker that calls runtime.Goexit fails its node with ErrGoexit, and
// the node's failure policy applies to that failure as to any other:
// under PolicyContinue its dependants go on. The salvage of the exiting
// goroutine ended the node as a plain failure, so they failed.
func TestGoexitUnderPolicyContinue(t *testing.T) {
	a := newAsync(t)
	rec := newRecorder()
	x := rec.node("x", goexits).OnFailure(PolicyContinue)
	y := rec.node("y", ok(2)).Depend(x, true)
	require.NoError(t, a.BeginWork(context.Background(), 0, x))
	assert.ErrorIs(t, x.Result().Err, ErrGoexit)
	assert.Equal(t, ResultSuccess, y.Result().State, "x failed under PolicyContinue: y runs")
}

// Under PolicyEnd, a worker's Goexit ends the run with an *EndError, as
// its error would: the rest was left running until the deadline.
func TestGoexitUnderPolicyEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		rec := newRecorder()
		x := rec.node("x", goexits).OnFailure(PolicyEnd)
		z := rec.node("z", func(ctx context.Context, _ Wrappers) (int, error) {
			<-ctx.Done()
			return 0, ctx.Err()
		})
		start := time.Now()
		err := a.BeginWork(context.Background(), time.Hour, x, z)
		var ee *EndError
		require.ErrorAs(t, err, &ee)
		assert.Equal(t, "x", ee.ID)
		assert.ErrorIs(t, err, ErrGoexit)
		assert.Zero(t, time.Since(start), "the run ends at once, not at its deadline")
		assert.ErrorAs(t, z.Result().Err, &ee)
	})
}

// Under PolicySuspend, a worker's Goexit makes the node pending, to be
// resumed, instead of failing it.
func TestGoexitUnderPolicySuspend(t *testing.T) {
	a := newAsync(t)
	rec := newRecorder()
	x := rec.node("x", goexits).OnFailure(PolicySuspend).Retry(RetryPolicy{Attempts: 3})
	y := rec.node("y", ok(2)).Depend(x, true)
	r, err := a.Start(context.Background(), 0, x)
	require.NoError(t, err)
	waitClosed(t, r.Suspended(), "x is not pending after its worker's Goexit")
	assert.Equal(t, 1, rec.count(rec.actions, "x"), "a Goexit is not retried, as a panic is not")
	rep := r.Report()
	assert.Equal(t, StatusPending, rep.Nodes[indexOf(r, "x")].Status)
	assert.ErrorIs(t, rep.Nodes[indexOf(r, "x")].Err, ErrGoexit)
	require.NoError(t, r.Resume("x", SucceedWith(1)))
	require.NoError(t, r.Wait(context.Background()))
	assert.Equal(t, ResultSuccess, y.Result().State)
}

// ExponentialBackoff doubles its delay up to max. With a max near the
// largest Duration (no cap, in effect), the doubling overflowed into
// negative delays, which the retry treats as no delay at all; and a
// jitter factor above 1 on such a delay overflowed too.
func TestExponentialBackoffDoesNotOverflow(t *testing.T) {
	const most = time.Duration(math.MaxInt64)
	b := ExponentialBackoff(time.Second, most, 0)
	prev := time.Duration(0)
	for n := 1; n <= 100; n++ {
		d := b(n)
		require.GreaterOrEqual(t, d, prev, "attempt %d: the delay shrank to %v", n, d)
		prev = d
	}
	assert.Equal(t, most, prev, "the delay reaches the cap")
	j := ExponentialBackoff(most/2, most, 1)
	for n := 1; n <= 100; n++ {
		require.Positive(t, j(3), "a jittered delay near the cap")
	}
}

var _ = errors.New

// A custom join that returns a value that is not a Decision fails its
// node, as a panicking join does. It counted as decided without acting,
// so the join was never asked again and the node, neither run nor
// failed, kept the run open for ever (with no deadline).
func TestCustomJoinUnknownDecisionFailsTheNode(t *testing.T) {
	a := newAsync(t)
	rec := newRecorder()
	u1 := rec.node("u1", ok(1))
	u2 := rec.node("u2", ok(2))
	c := rec.node("c", ok(3)).Depend(u1, true).Depend(u2, true).
		Join(CustomJoin(func([]Upstream) Decision { return Decision(42) }))
	r, err := a.Start(context.Background(), 0, u1, u2)
	require.NoError(t, err)
	t.Cleanup(r.Cancel) // before newAsync's Close, if the run hangs
	requireEnds(t, r, "the run hangs on a join that returned Decision(42)")
	require.NoError(t, r.Wait(context.Background()))
	assert.Equal(t, ResultException, c.Result().State)
	assert.ErrorContains(t, c.Result().Err, "Decision(42)")
	assert.Zero(t, rec.count(rec.actions, "c"))
	// Its worker never ran: the report says the join failed it.
	assert.Contains(t, r.Report().Nodes[indexOf(r, "c")].Reason, "custom join failed")
}

// An Async on a Pool of the user's under Block: a node's end that shares
// its successors asked the pool for a helper with Submit, which waited for
// a free worker while holding the pool's only one. The run deadlocked, and
// neither Cancel (the worker waits in Submit, not on the run) nor Close
// ended it. The Async now asks a Pool without waiting, whatever its
// FullPolicy.
func TestAsyncOnABlockingPoolDoesNotDeadlock(t *testing.T) {
	for _, policy := range []FullPolicy{Block, CallerRuns, Reject} {
		t.Run(policy.String(), func(t *testing.T) {
			p := NewPool(PoolSize(1), PoolQueue(0), PoolWhenFull(policy))
			a := newAsync(t, WithExecutor(p))
			// Before the Async's Close, if the run deadlocks: closing the
			// pool ends a Submit that waits under Block.
			t.Cleanup(func() { p.Close() })
			rec := newRecorder()
			root := rec.node("root", ok(1))
			for _, id := range ids(4, "c") {
				rec.node(id, ok(2)).Depend(root, true)
			}
			r, err := a.Start(context.Background(), 0, root)
			require.NoError(t, err)
			requireEnds(t, r, "the run deadlocked on a pool of one under %v", policy)
			require.NoError(t, r.Wait(context.Background()))
			for _, id := range ids(4, "c") {
				assert.Equal(t, 1, rec.count(rec.actions, id), id)
			}
		})
	}
}

// A nil ExecutorFunc or *Pool inside an Executor is a nil executor:
// WithExecutor refuses it as it refuses nil, and NewSerial, NewKeyed and
// RunBatches use their default instead. Start panicked in Submit after
// counting the run, so Close then waited for ever; a Serial's first
// Submit panicked with its drain loop marked running, so no task ever ran
// and Close hung.
func TestTypedNilExecutorIsNil(t *testing.T) {
	for name, e := range map[string]Executor{"ExecutorFunc": ExecutorFunc(nil), "*Pool": (*Pool)(nil)} {
		t.Run(name, func(t *testing.T) {
			a := New(WithExecutor(e))
			x := NewWrapper("x", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 1, nil }), 0)
			var err error
			require.NotPanics(t, func() { err = a.BeginWork(context.Background(), 0, x) })
			assert.ErrorContains(t, err, "WithExecutor(nil)")
			require.NoError(t, a.Close())

			s := NewSerial(e)
			done := make(chan struct{})
			require.NotPanics(t, func() { require.NoError(t, s.Submit(func() { close(done) })) })
			<-done
			s.Close()

			k := NewKeyed[int](e)
			done = make(chan struct{})
			require.NotPanics(t, func() { require.NoError(t, k.Submit(1, func() { close(done) })) })
			<-done
			k.Close()

			var rep BatchReport
			require.NotPanics(t, func() {
				rep, err = RunBatches(context.Background(), e,
					func(_ context.Context, page int) ([]int, error) { return make([]int, 1-min(page, 1)), nil },
					func(context.Context, int) error { return nil })
			})
			require.NoError(t, err)
			assert.Equal(t, 1, rep.Succeeded)
		})
	}
}

// TestCancelStopsTheLatestRetryTimer: ending a retried node (here by
// Cancel) must stop its retry timer, which holds the run's tasks, and
// Close, until its backoff (an hour here) passes. It missed it in two
// ways. A retry with no backoff could fire, run, fail and schedule the
// next retry's timer before the first scheduleRetry recorded its own
// timer, over the next one; without -race this happened within the first
// 15 rounds. And a Cancel between the worker's return and scheduleRetry
// ended and disarmed the node before its timer was recorded; under -race
// this happened in about one run of two (round 309, for one).
func TestCancelStopsTheLatestRetryTimer(t *testing.T) {
	for round := range 500 {
		a := New()
		var calls atomic.Int32
		second := make(chan struct{})
		p := NewWrapper("p", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			if calls.Add(1) == 2 {
				defer close(second)
			}
			return 0, errBoom
		}), 0).Retry(RetryPolicy{Attempts: 5, Backoff: func(n int) time.Duration {
			if n == 1 {
				return 0 // the second attempt at once
			}
			return time.Hour
		}})
		r, err := a.Start(context.Background(), 2*time.Hour, p)
		require.NoError(t, err)
		<-second
		r.Cancel()
		_ = r.Wait(context.Background())
		closed := make(chan struct{})
		go func() { _ = a.Close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: Close still waits for a retry timer that Cancel did not stop", round)
		}
	}
}
