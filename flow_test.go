package asynctool

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// customAtLeast is a custom join that runs once n upstreams counted as
// successes.
func customAtLeast(n int) Join {
	return CustomJoin(func(ups []Upstream) Decision {
		ok := 0
		for _, u := range ups {
			if u.OK {
				ok++
			}
		}
		if ok >= n {
			return DecideRun
		}
		return DecideWait
	})
}

// TestJoinStrategies runs each strategy over upstreams that end in a fixed
// order (manual executor), and checks when the node runs or fails.
func TestJoinStrategies(t *testing.T) {
	atLeast3 := customAtLeast(3)
	tests := []struct {
		name     string
		join     Join
		outcomes string // upstream outcomes in end order: s=success, f=failure
		wantRun  bool
		wantErr  error
		// decidedAt is the index of the upstream whose end decided.
		decidedAt int
	}{
		{"all succeeded", AllSucceeded(), "sss", true, nil, 2},
		{"all succeeded fails first", AllSucceeded(), "sfs", false, errBoom, 1},
		{"all done with failures", AllDone(), "fsf", true, nil, 2},
		{"any: first success", AnySucceeded(), "fsf", true, nil, 1},
		{"any: all fail", AnySucceeded(), "fff", false, errBoom, 2},
		{"at least 2", AtLeast(2), "sfs", true, nil, 2},
		{"at least 2 impossible", AtLeast(2), "ffs", false, errBoom, 1},
		{"named u0,u2", NamedSucceeded("u0", "u2"), "sfs", true, nil, 2},
		{"named u1 fails", NamedSucceeded("u1"), "sfs", false, errBoom, 1},
		{"custom at least 3", atLeast3, "sssf", true, nil, 2},
		{"custom undecided", atLeast3, "ssff", false, ErrJoinUndecided, 3},
		{"custom fails", CustomJoin(func([]Upstream) Decision { return DecideFail }), "ss", false, ErrJoinFailed, 0},
		{"custom panics", CustomJoin(func([]Upstream) Decision { panic("bad join") }), "s", false, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ex := &manualExec{}
			a := newAsync(t, WithExecutor(ex))
			rec := newRecorder()
			c := rec.node("c", ok(9)).Join(tt.join)
			var starts []Wrapper
			for k, o := range tt.outcomes {
				fn := ok(1)
				if o == 'f' {
					fn = fail(errBoom)
				}
				u := rec.node(fmt.Sprint("u", k), fn).ShortCircuit(false)
				c.Depend(u, false)
				starts = append(starts, u)
			}
			r, err := a.Start(context.Background(), 0, starts...)
			require.NoError(t, err)
			ex.drain()
			require.NoError(t, r.Wait(context.Background()))
			assert.Equal(t, tt.wantRun, rec.count(rec.actions, "c") == 1, "c ran")
			res := c.Result()
			if tt.wantRun {
				assert.Equal(t, ResultSuccess, res.State)
			} else {
				assert.Equal(t, ResultException, res.State)
				if tt.wantErr != nil {
					assert.ErrorIs(t, res.Err, tt.wantErr)
				} else {
					var pe *PanicError
					assert.ErrorAs(t, res.Err, &pe)
				}
			}
			assert.Equal(t, fmt.Sprint("u", tt.decidedAt), r.Report().Nodes[len(tt.outcomes)].DecidedBy)
			assert.Equal(t, 1, rec.count(rec.results, "c"))
		})
	}
}

// TestCustomJoinSeesEveryUpstreamAtEachEnd checks what a custom join is
// given: it is asked each time an upstream ends, with every upstream in
// declaration order, those ended with their outcome, value (the default
// for a failure) and error, and those not ended zero.
func TestCustomJoinSeesEveryUpstreamAtEachEnd(t *testing.T) {
	ex := &manualExec{}
	a := newAsync(t, WithExecutor(ex))
	rec := newRecorder()
	var calls [][]string // no lock: calls for one node never overlap
	c := rec.node("c", ok(9)).Join(CustomJoin(func(ups []Upstream) Decision {
		var seen []string
		for _, u := range ups {
			seen = append(seen, fmt.Sprintf("%s ended=%v ok=%v %v %v %v", u.ID, u.Ended, u.OK, u.Result, u.Value, u.Err))
		}
		calls = append(calls, seen)
		if len(calls) < len(ups) {
			return DecideWait
		}
		return DecideRun
	}))
	u0 := rec.node("u0", ok(10)).ShortCircuit(false)
	u1 := rec.node("u1", fail(errBoom)).Default(-1).ShortCircuit(false)
	u2 := rec.node("u2", ok(30)).ShortCircuit(false)
	c.Depend(u0, true).Depend(u1, false).Depend(u2, true)
	r, err := a.Start(context.Background(), 0, u0, u1, u2)
	require.NoError(t, err)
	ex.drain() // the upstreams end in the order they were given
	require.NoError(t, r.Wait(context.Background()))
	const (
		notYet0 = "u0 ended=false ok=false default <nil> <nil>"
		notYet1 = "u1 ended=false ok=false default <nil> <nil>"
		notYet2 = "u2 ended=false ok=false default <nil> <nil>"
		ended0  = "u0 ended=true ok=true success 10 <nil>"
		ended1  = "u1 ended=true ok=false exception -1 boom"
		ended2  = "u2 ended=true ok=true success 30 <nil>"
	)
	assert.Equal(t, [][]string{
		{ended0, notYet1, notYet2},
		{ended0, ended1, notYet2},
		{ended0, ended1, ended2},
	}, calls)
	assert.Equal(t, WorkResult[int]{Value: 9, State: ResultSuccess}, c.Result())
}

// TestCustomJoinSeesAPendingUpstream: an upstream suspended under
// PolicySuspend has not ended, and a custom join asked meanwhile, at
// another upstream's end, sees it as pending; once it is resumed it ends,
// and the join is asked again.
func TestCustomJoinSeesAPendingUpstream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		rec := newRecorder()
		var calls [][]string // no lock: calls for one node never overlap
		c := rec.node("c", ok(9)).Join(CustomJoin(func(ups []Upstream) Decision {
			var seen []string
			for _, u := range ups {
				seen = append(seen, fmt.Sprintf("%s ended=%v pending=%v ok=%v", u.ID, u.Ended, u.Pending, u.OK))
			}
			calls = append(calls, seen)
			if ups[0].Ended && ups[1].Ended {
				return DecideRun
			}
			return DecideWait
		}))
		p := rec.node("p", fail(errBoom)).OnFailure(PolicySuspend)
		q := rec.node("q", func(context.Context, Wrappers) (int, error) { time.Sleep(time.Second); return 2, nil })
		c.Depend(p, true).Depend(q, true)
		r, err := a.Start(context.Background(), 0, p, q)
		require.NoError(t, err)
		<-r.Suspended() // p is pending, and q has ended
		assert.Equal(t, [][]string{
			{"p ended=false pending=true ok=false", "q ended=true pending=false ok=true"},
		}, calls)
		require.NoError(t, r.Resume("p", SucceedWith(1)))
		require.NoError(t, r.Wait(context.Background()))
		assert.Equal(t, []string{"p ended=true pending=false ok=true", "q ended=true pending=false ok=true"}, calls[len(calls)-1])
		assert.Len(t, calls, 2)
		assert.Equal(t, WorkResult[int]{Value: 9, State: ResultSuccess}, c.Result())
	})
}

// TestJoinDecidesOnceUnderRace has many upstreams end at the same instant
// into every strategy: the node runs exactly once.
func TestJoinDecidesOnceUnderRace(t *testing.T) {
	joins := map[string]Join{
		"all": AllSucceeded(), "alldone": AllDone(), "any": AnySucceeded(), "atleast": AtLeast(5),
		"custom": customAtLeast(4), // more than 3
	}
	for name, j := range joins {
		t.Run(name, func(t *testing.T) {
			a := newAsync(t, WithMaxWorkers(8))
			for range 100 {
				var runs atomic.Int32
				start := make(chan struct{})
				c := NewWrapper("c", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
					runs.Add(1)
					return 0, nil
				}), 0).Join(j)
				var ups []Wrapper
				for k := range 8 {
					u := NewWrapper(fmt.Sprint("u", k), WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
						<-start
						return k, nil
					}), 0).ShortCircuit(false)
					c.Depend(u, true)
					ups = append(ups, u)
				}
				r, err := a.Start(context.Background(), 0, ups...)
				require.NoError(t, err)
				close(start)
				require.NoError(t, r.Wait(context.Background()))
				require.Equal(t, int32(1), runs.Load())
			}
		})
	}
}

// TestV15Scenarios ports asyncTool V1.5's scenarios in their corrected
// form.
func TestV15Scenarios(t *testing.T) {
	t.Run("A->B1..B5, C1=all(B1,B2), C2=any(B3,B4,B5), 2 workers", func(t *testing.T) {
		a := newAsync(t, WithMaxWorkers(2))
		rec := newRecorder()
		root := rec.node("A", ok(1))
		var bs []*WorkerWrapper[int, int]
		for k := 1; k <= 5; k++ {
			fn := ok(k)
			if k == 3 {
				fn = fail(errBoom) // the first any-of branch fails; V1.5 failed C2 here
			}
			bs = append(bs, rec.node(fmt.Sprint("B", k), fn).Depend(root, true))
		}
		c1 := rec.node("C1", ok(1)).Join(AllSucceeded()).Depend(bs[0], true).Depend(bs[1], true)
		c2 := rec.node("C2", ok(2)).Join(AnySucceeded()).Depend(bs[2], false).Depend(bs[3], false).Depend(bs[4], false)
		require.NoError(t, a.BeginWork(context.Background(), time.Minute, root))
		assert.Equal(t, ResultSuccess, c1.Result().State)
		assert.Equal(t, ResultSuccess, c2.Result().State, "one failed branch does not fail an any-of join")
	})
	t.Run("custom: more than 3 of 9 succeeded; the rest are skipped", func(t *testing.T) {
		ex := &manualExec{}
		a := newAsync(t, WithExecutor(ex))
		rec := newRecorder()
		root := rec.node("A", ok(1))
		c := rec.node("C", ok(1)).Join(customAtLeast(4)) // "more than 3 succeeded"
		for k := 1; k <= 9; k++ {
			c.Depend(rec.node(fmt.Sprint("B", k), ok(k)).Depend(root, true), false)
		}
		r, err := a.Start(context.Background(), 0, root)
		require.NoError(t, err)
		ex.drain()
		require.NoError(t, r.Wait(context.Background()))
		assert.Equal(t, ResultSuccess, c.Result().State)
		ran, skipped := 0, 0
		for _, n := range r.Report().Nodes {
			if n.ID[0] == 'B' {
				if n.Ran {
					ran++
				}
				if n.Status == StatusSkipped {
					skipped++
				}
			}
		}
		assert.Equal(t, 4, ran, "B's ran until the join was satisfied")
		assert.Equal(t, 5, skipped, "the B's that had not started were skipped")
	})
	t.Run("at least 4 of A->B1..B9->C skips the B's not started", func(t *testing.T) {
		ex := &manualExec{}
		a := newAsync(t, WithExecutor(ex))
		rec := newRecorder()
		root := rec.node("A", ok(1))
		c := rec.node("C", ok(1)).Join(AtLeast(4))
		for k := 1; k <= 9; k++ {
			c.Depend(rec.node(fmt.Sprint("B", k), ok(k)).Depend(root, true), false)
		}
		r, err := a.Start(context.Background(), 0, root)
		require.NoError(t, err)
		ex.drain()
		require.NoError(t, r.Wait(context.Background()))
		assert.Len(t, rec.order, 1+4+1, "A, four B's, C")
	})
	t.Run("must(A3,A4) among ten", func(t *testing.T) {
		a := newAsync(t)
		rec := newRecorder()
		c := rec.node("C", ok(1)).Join(NamedSucceeded("A3", "A4"))
		var starts []Wrapper
		for k := range 10 {
			fn := fail(errBoom)
			if k == 3 || k == 4 {
				fn = ok(k)
			}
			u := rec.node(fmt.Sprint("A", k), fn)
			c.Depend(u, false)
			starts = append(starts, u)
		}
		require.NoError(t, a.BeginWork(context.Background(), time.Minute, starts...))
		assert.Equal(t, ResultSuccess, c.Result().State, "failures of unnamed upstreams are ignored")
	})
	t.Run("any-of where the slow branch is skipped", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a := New()
			defer a.Close()
			rec := newRecorder()
			fast := rec.node("fast", func(context.Context, Wrappers) (int, error) { time.Sleep(time.Millisecond); return 1, nil })
			slow1 := rec.node("slow1", func(context.Context, Wrappers) (int, error) { time.Sleep(time.Second); return 2, nil })
			slow2 := rec.node("slow2", ok(3)).Depend(slow1, true)
			c := rec.node("C", ok(4)).Join(AnySucceeded()).Depend(fast, false).Depend(slow2, false)
			start := time.Now()
			require.NoError(t, a.BeginWork(context.Background(), time.Minute, fast, slow1))
			assert.Equal(t, ResultSuccess, c.Result().State)
			assert.ErrorIs(t, slow2.Result().Err, ErrSkipped)
			assert.Equal(t, time.Second, time.Since(start), "the started slow1 finishes; slow2 never starts")
		})
	})
	t.Run("per-node timeouts inside a group deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a := New()
			defer a.Close()
			rec := newRecorder()
			hang := func(ctx context.Context, _ Wrappers) (int, error) { time.Sleep(time.Hour); return 0, nil }
			short := rec.node("short", hang).Timeout(10 * time.Millisecond).Default(-1)
			after := rec.node("after", ok(1)).Depend(short, false).Join(AllDone())
			long := rec.node("long", hang).Timeout(time.Hour)
			start := time.Now()
			err := a.BeginWork(context.Background(), 50*time.Millisecond, short, long)
			assert.ErrorIs(t, err, context.DeadlineExceeded)
			assert.Equal(t, 50*time.Millisecond, time.Since(start))
			res := short.Result()
			assert.Equal(t, ResultTimeout, res.State)
			assert.Equal(t, -1, res.Value)
			var nte *NodeTimeoutError
			assert.ErrorAs(t, res.Err, &nte)
			assert.ErrorIs(t, res.Err, context.DeadlineExceeded)
			assert.Equal(t, ResultSuccess, after.Result().State, "AllDone ran after the node timeout, before the group deadline")
			assert.Equal(t, ResultTimeout, long.Result().State, "the group deadline comes first")
			assert.NotErrorAs(t, long.Result().Err, &nte)
			time.Sleep(time.Hour) // let the hanging workers return
		})
	})
}

// TestRetries checks attempts, backoff, the retryable predicate, Begin per
// attempt and Result once.
func TestRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		retries := 0
		var waits []time.Duration // the OnNodeRetry events' Wait
		a := New(WithHooks(&Hooks{OnNodeRetry: func(_ context.Context, ev NodeEvent) { retries++; waits = append(waits, ev.Wait) }}))
		defer a.Close()
		rec := newRecorder()
		var calls atomic.Int32
		flaky := rec.node("flaky", func(context.Context, Wrappers) (int, error) {
			if calls.Add(1) < 3 {
				return 0, errBoom
			}
			return 42, nil
		}).Retry(RetryPolicy{Attempts: 5, Backoff: ConstantBackoff(10 * time.Millisecond)})
		start := time.Now()
		require.NoError(t, a.BeginWork(context.Background(), time.Minute, flaky))
		assert.Equal(t, WorkResult[int]{Value: 42, State: ResultSuccess}, flaky.Result())
		assert.Equal(t, 20*time.Millisecond, time.Since(start), "two backoffs")
		assert.Equal(t, 3, rec.count(rec.begins, "flaky"), "Begin before every attempt")
		assert.Equal(t, 1, rec.count(rec.results, "flaky"), "Result once")
		assert.Equal(t, 2, retries)
		assert.Equal(t, []time.Duration{10 * time.Millisecond, 10 * time.Millisecond}, waits)

		// Backoff gives the delay before a retry, and is not asked for one
		// that Retryable refused.
		permanent := errors.New("permanent")
		calls.Store(0)
		backoffs := 0
		picky := rec.node("picky", func(context.Context, Wrappers) (int, error) {
			calls.Add(1)
			return 0, permanent
		}).Retry(RetryPolicy{
			Attempts:  5,
			Retryable: func(err error) bool { return !errors.Is(err, permanent) },
			Backoff:   func(int) time.Duration { backoffs++; return time.Millisecond },
		})
		require.NoError(t, a.BeginWork(context.Background(), time.Minute, picky))
		assert.Equal(t, int32(1), calls.Load(), "not retryable")
		assert.ErrorIs(t, picky.Result().Err, permanent)
		assert.Zero(t, backoffs, "Backoff asked for a retry not made")

		// A negative delay is no delay: the retry starts at once, and the
		// OnNodeRetry hooks are told it waits 0, not the negative delay.
		calls.Store(0)
		waits = nil
		start = time.Now()
		eager := rec.node("eager", func(context.Context, Wrappers) (int, error) { calls.Add(1); return 0, errBoom }).
			Retry(RetryPolicy{Attempts: 3, Backoff: ConstantBackoff(-time.Second)})
		require.NoError(t, a.BeginWork(context.Background(), time.Minute, eager))
		assert.Equal(t, int32(3), calls.Load())
		assert.Equal(t, []time.Duration{0, 0}, waits)
		assert.Zero(t, time.Since(start))

		calls.Store(0)
		always := rec.node("always", func(context.Context, Wrappers) (int, error) { calls.Add(1); return 0, errBoom }).
			Retry(RetryPolicy{Attempts: 3})
		require.NoError(t, a.BeginWork(context.Background(), time.Minute, always))
		assert.Equal(t, int32(3), calls.Load(), "Attempts is the total")

		// The default Retryable refuses an error that wraps a panic: a
		// Hedged worker whose calls all failed, one of them by a panic.
		calls.Store(0)
		hedged := NewWrapper("hedged", Hedged[int, int](WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			if calls.Add(1) == 1 {
				panic("first call")
			}
			return 0, errBoom
		}), 0, 2), 0).Retry(RetryPolicy{Attempts: 3})
		require.NoError(t, a.BeginWork(context.Background(), time.Minute, hedged))
		assert.Equal(t, int32(2), calls.Load(), "one attempt of two calls")
		var pe *PanicError
		require.ErrorAs(t, hedged.Result().Err, &pe)
		assert.Equal(t, "first call", pe.Value)
		assert.ErrorIs(t, hedged.Result().Err, errBoom)

		// And one that wraps ErrGoexit, as a worker's own Goexit is not
		// retried: a Hedged worker whose calls both called
		// runtime.Goexit (t.FailNow in a test's fake) made 6 calls.
		calls.Store(0)
		exits := NewWrapper("exits", Hedged[int, int](WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			calls.Add(1)
			runtime.Goexit()
			return 0, nil
		}), 0, 2), 0).Retry(RetryPolicy{Attempts: 3})
		require.NoError(t, a.BeginWork(context.Background(), time.Minute, exits))
		assert.Equal(t, int32(2), calls.Load(), "one attempt of two calls")
		assert.ErrorIs(t, exits.Result().Err, ErrGoexit)
	})
}

// TestRetryNeverPassesTheDeadline checks that a retry whose backoff would
// end after the deadline is not scheduled.
func TestRetryNeverPassesTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		var calls atomic.Int32
		w := NewWrapper("w", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			calls.Add(1)
			return 0, errBoom
		}), 0).Retry(RetryPolicy{Attempts: 10, Backoff: ExponentialBackoff(10*time.Millisecond, time.Second, 0)})
		start := time.Now()
		require.NoError(t, a.BeginWork(context.Background(), 100*time.Millisecond, w))
		// Attempts at 0, 10, 30, 70 ms; the next would start at 150 ms.
		assert.Equal(t, int32(4), calls.Load())
		assert.Equal(t, 70*time.Millisecond, time.Since(start), "ends with the last failure, not the deadline")
		assert.Equal(t, ResultException, w.Result().State)
	})
}

// TestRetryRacingCancellation cancels runs while retries are scheduled:
// every node ends once and nothing leaks.
func TestRetryRacingCancellation(t *testing.T) {
	a := newAsync(t, WithMaxWorkers(4))
	for k := range 200 {
		var calls atomic.Int32
		w := NewWrapper("w", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			calls.Add(1)
			return 0, errBoom
		}), 0).Retry(RetryPolicy{Attempts: 1 << 30, Backoff: ConstantBackoff(time.Duration(k%3+1) * time.Microsecond)})
		results := 0
		w.Callback(ResultFunc[int, int](func(bool, int, WorkResult[int]) { results++ }))
		r, err := a.Start(context.Background(), 0, w)
		require.NoError(t, err)
		for calls.Load() < 2 {
			time.Sleep(time.Microsecond)
		}
		r.Cancel()
		assert.ErrorIs(t, r.Wait(context.Background()), context.Canceled)
		assert.Equal(t, 1, results)
		assert.Equal(t, ResultTimeout, w.Result().State)
	}
}

// TestFailurePolicies checks continue and end.
func TestFailurePolicies(t *testing.T) {
	t.Run("continue counts as done for dependants", func(t *testing.T) {
		a := newAsync(t)
		rec := newRecorder()
		bad := rec.node("bad", fail(errBoom)).OnFailure(PolicyContinue).Default(7)
		next := rec.node("next", func(_ context.Context, all Wrappers) (int, error) {
			r, _ := ResultOf[int](all, "bad")
			return r.Value + 1, nil
		}).Depend(bad, true)
		require.NoError(t, a.BeginWork(context.Background(), 0, bad))
		assert.Equal(t, ResultException, bad.Result().State, "the failure is recorded")
		assert.Equal(t, WorkResult[int]{Value: 8, State: ResultSuccess}, next.Result(), "the must dependant still ran")
	})
	t.Run("continue and end do not apply to an upstream's failure", func(t *testing.T) {
		// A policy is the node's own: a node that never ran because a
		// must upstream failed fails its dependants as under PolicyFail,
		// and does not end the run.
		for _, p := range []FailurePolicy{PolicyContinue, PolicyEnd} {
			a := newAsync(t)
			rec := newRecorder()
			up := rec.node("up", fail(errBoom))
			fallback := rec.node("fallback", ok(1)).Depend(up, true).OnFailure(p).Default(7)
			other := rec.node("other", ok(2)).ShortCircuit(false)
			next := rec.node("next", ok(3)).Depend(fallback, true).Depend(other, true)
			require.NoError(t, a.BeginWork(context.Background(), 0, up, other), "%v", p)
			var ue *UpstreamError
			require.ErrorAs(t, fallback.Result().Err, &ue, "%v", p)
			assert.Equal(t, "up", ue.ID, "%v", p)
			assert.Equal(t, 7, fallback.Result().Value, "%v", p)
			assert.ErrorIs(t, next.Result().Err, errBoom, "%v: the dependant failed", p)
			assert.Equal(t, 0, rec.count(rec.actions, "next"), "%v", p)
			assert.Equal(t, WorkResult[int]{Value: 2, State: ResultSuccess}, other.Result(), "%v: the run went on", p)
		}
	})
	t.Run("continue and end do not apply to a failure by the node's join or by FailWith", func(t *testing.T) {
		// A node its own join fails, and a node its join suspended that
		// Resume fails, did not fail in its worker: its dependants see a
		// plain failure, and the run goes on.
		for _, p := range []FailurePolicy{PolicyContinue, PolicyEnd} {
			for _, how := range []string{"join fails", "FailWith"} {
				a := newAsync(t)
				rec := newRecorder()
				up := rec.node("up", ok(1))
				decide := DecideFail
				if how == "FailWith" {
					decide = DecideSuspend
				}
				node := rec.node("node", ok(2)).Depend(up, true).OnFailure(p).
					Join(CustomJoin(func([]Upstream) Decision { return decide }))
				other := rec.node("other", ok(3)).Depend(up, true)
				next := rec.node("next", ok(4)).Depend(node, true)
				r, err := a.Start(context.Background(), time.Minute, up)
				require.NoError(t, err)
				t.Cleanup(r.Cancel)
				if how == "FailWith" {
					<-r.Suspended()
					require.NoError(t, r.Resume("node", FailWith(errBoom)))
				}
				require.NoError(t, r.Wait(context.Background()), "%v, %s: the run was not ended", p, how)
				assert.Equal(t, ResultException, node.Result().State, "%v, %s", p, how)
				var ue *UpstreamError
				require.ErrorAs(t, next.Result().Err, &ue, "%v, %s: the dependant failed", p, how)
				assert.Equal(t, "node", ue.ID)
				assert.Equal(t, 0, rec.count(rec.actions, "next"), "%v, %s", p, how)
				assert.Equal(t, WorkResult[int]{Value: 3, State: ResultSuccess}, other.Result(), "%v, %s: the run went on", p, how)
			}
		}
	})
	t.Run("fail (default) fails dependants", func(t *testing.T) {
		a := newAsync(t)
		rec := newRecorder()
		bad := rec.node("bad", fail(errBoom)).OnFailure(PolicyFail)
		next := rec.node("next", ok(1)).Depend(bad, true)
		require.NoError(t, a.BeginWork(context.Background(), 0, bad))
		assert.ErrorIs(t, next.Result().Err, errBoom)
	})
	t.Run("end stops the whole run", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a := New()
			defer a.Close()
			rec := newRecorder()
			var sawCancel atomic.Bool
			bad := rec.node("bad", func(context.Context, Wrappers) (int, error) {
				time.Sleep(time.Millisecond)
				return 0, errBoom
			}).OnFailure(PolicyEnd)
			running := rec.node("running", func(ctx context.Context, _ Wrappers) (int, error) {
				<-ctx.Done()
				sawCancel.Store(true)
				return 0, ctx.Err()
			})
			later := rec.node("later", ok(1)).Depend(running, true)
			start := time.Now()
			err := a.BeginWork(context.Background(), time.Minute, bad, running)
			var ee *EndError
			require.ErrorAs(t, err, &ee)
			assert.Equal(t, "bad", ee.ID)
			assert.ErrorIs(t, err, errBoom)
			assert.Equal(t, time.Millisecond, time.Since(start))
			assert.ErrorAs(t, running.Result().Err, &ee)
			assert.ErrorAs(t, later.Result().Err, &ee)
			assert.Equal(t, ResultException, later.Result().State)
			assert.Equal(t, 0, rec.count(rec.actions, "later"))
			synctest.Wait()
			assert.True(t, sawCancel.Load())
		})
	})
}

// TestSuspendAndResume checks PolicySuspend, pending propagation in the
// report, and each way of resuming.
func TestSuspendAndResume(t *testing.T) {
	build := func(rec *recorder, calls *atomic.Int32) (*WorkerWrapper[int, int], *WorkerWrapper[int, int], *WorkerWrapper[int, int], *WorkerWrapper[int, int]) {
		sus := rec.node("sus", func(context.Context, Wrappers) (int, error) {
			if calls.Add(1) == 1 {
				return 0, errBoom
			}
			return 5, nil
		}).OnFailure(PolicySuspend).Retry(RetryPolicy{Attempts: 1})
		down := rec.node("down", func(_ context.Context, all Wrappers) (int, error) {
			r, _ := ResultOf[int](all, "sus")
			return r.Value * 10, nil
		}).Depend(sus, true)
		down2 := rec.node("down2", ok(0)).Depend(down, true)
		other := rec.node("other", ok(1))
		return sus, down, down2, other
	}
	for _, tc := range []struct {
		name string
		how  Resumption
		want WorkResult[int]
	}{
		{"rerun", Rerun(), WorkResult[int]{Value: 50, State: ResultSuccess}},
		{"succeed with", SucceedWith(7), WorkResult[int]{Value: 70, State: ResultSuccess}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAsync(t)
			rec := newRecorder()
			var calls atomic.Int32
			sus, down, down2, other := build(rec, &calls)
			r, err := a.Start(context.Background(), 0, sus, other)
			require.NoError(t, err)
			t.Cleanup(r.Cancel) // a failed test leaves sus pending: Close would wait for it
			require.Eventually(t, func() bool {
				rep := r.Report()
				return rep.Nodes[0].Status == StatusPending && other.State() == StateFinish
			}, 10*time.Second, time.Millisecond)
			rep := r.Report()
			status := map[string]Status{}
			for _, n := range rep.Nodes {
				status[n.ID] = n.Status
			}
			assert.Equal(t, map[string]Status{"sus": StatusPending, "down": StatusPending, "down2": StatusPending, "other": StatusSucceeded}, status)
			assert.ErrorIs(t, rep.Nodes[0].Err, errBoom, "the report says why it is pending")
			assert.Equal(t, StateWorking, sus.State())
			select {
			case <-r.Done():
				t.Fatal("a run with a pending node stays open")
			default:
			}
			require.NoError(t, r.Resume("sus", tc.how))
			require.NoError(t, r.Wait(context.Background()))
			assert.Equal(t, tc.want, down.Result())
			assert.Equal(t, ResultSuccess, down2.Result().State)
			assert.Equal(t, 1, rec.count(rec.results, "sus"), "Result once")
		})
	}
	t.Run("fail with", func(t *testing.T) {
		a := newAsync(t)
		rec := newRecorder()
		var calls atomic.Int32
		sus, down, _, other := build(rec, &calls)
		r, err := a.Start(context.Background(), 0, sus, other)
		require.NoError(t, err)
		t.Cleanup(r.Cancel) // a failed test leaves sus pending: Close would wait for it
		require.Eventually(t, func() bool { return r.Report().Nodes[0].Status == StatusPending }, 10*time.Second, time.Millisecond)
		gaveUp := errors.New("operator gave up")
		assert.ErrorIs(t, r.Resume("sus", SucceedWith("not an int")), ErrResultType)
		assert.ErrorIs(t, r.Resume("nope", Rerun()), ErrUnknownID)
		assert.ErrorIs(t, r.Resume("other", Rerun()), ErrNotPending)
		require.NoError(t, r.Resume("sus", FailWith(gaveUp)))
		assert.ErrorIs(t, r.Resume("sus", Rerun()), ErrNotPending, "resumes once")
		require.NoError(t, r.Wait(context.Background()))
		assert.ErrorIs(t, down.Result().Err, gaveUp)
	})
	t.Run("the deadline ends a pending node", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a := New()
			defer a.Close()
			rec := newRecorder()
			var calls atomic.Int32
			sus, down, _, other := build(rec, &calls)
			// Started, not BeginWork: BeginWork, which gives no Run to
			// resume with, cancels a run once it waits only on a Resume
			// (TestBeginWorkDoesNotWaitForAResumeThatCannotCome).
			r, err := a.Start(context.Background(), time.Second, sus, other)
			require.NoError(t, err)
			assert.ErrorIs(t, r.Wait(context.Background()), context.DeadlineExceeded)
			assert.Equal(t, ResultTimeout, sus.Result().State)
			assert.Equal(t, ResultTimeout, down.Result().State)
		})
	})
}

// TestResumeRacingDeadline races Resume against the deadline: exactly one
// wins, and the node ends once.
func TestResumeRacingDeadline(t *testing.T) {
	a := newAsync(t)
	for k := range 200 {
		results := 0
		sus := NewWrapper("sus", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 0, errBoom }), 0).
			OnFailure(PolicySuspend).
			Callback(ResultFunc[int, int](func(bool, int, WorkResult[int]) { results++ }))
		r, err := a.Start(context.Background(), time.Duration(k%5)*100*time.Microsecond+time.Millisecond, sus)
		require.NoError(t, err)
		for r.Report().Nodes[0].Status != StatusPending && sus.State() != StateError {
			time.Sleep(10 * time.Microsecond)
		}
		time.Sleep(time.Duration(k%7) * 100 * time.Microsecond)
		rerr := r.Resume("sus", SucceedWith(1))
		werr := r.Wait(context.Background())
		if rerr == nil {
			assert.Equal(t, ResultSuccess, sus.Result().State)
			assert.NoError(t, werr)
		} else {
			assert.ErrorIs(t, rerr, ErrNotPending)
			assert.Equal(t, ResultTimeout, sus.Result().State)
			assert.ErrorIs(t, werr, context.DeadlineExceeded)
		}
		assert.Equal(t, 1, results)
	}
}

// TestResumeRacingCancel: two Resumes of a pending node race a Cancel
// (or the deadline) and Reports. At most one Resume is accepted; one
// refused wraps ErrNotPending, and then the node ended as a timeout; an
// accepted SucceedWith or FailWith decided the node; and every node,
// those after it included, ends exactly once. Run with -race.
func TestResumeRacingCancel(t *testing.T) {
	a := newAsync(t, WithMaxWorkers(3))
	hows := []Resumption{Rerun(), SucceedWith(1), FailWith(errBoom)}
	for k := range 60 {
		for _, byJoin := range []bool{false, true} {
			how := hows[k%3]
			var mu sync.Mutex
			results := map[string]int{}
			count := func(id string) Callback[int, int] {
				return ResultFunc[int, int](func(bool, int, WorkResult[int]) { mu.Lock(); results[id]++; mu.Unlock() })
			}
			var calls atomic.Int32
			var sus *WorkerWrapper[int, int]
			var starts []Wrapper
			if byJoin {
				up := NewWrapper("up", okWorker(), 0).Callback(count("up"))
				sus = NewWrapper("sus", okWorker(), 0).Depend(up, true).
					Join(CustomJoin(func([]Upstream) Decision { return DecideSuspend }))
				starts = []Wrapper{up}
			} else {
				sus = NewWrapper("sus", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
					if calls.Add(1) == 1 {
						return 0, errBoom
					}
					return 2, nil
				}), 0).OnFailure(PolicySuspend).Timeout(time.Duration(k%3+1) * time.Millisecond)
				starts = []Wrapper{sus}
			}
			sus.Callback(count("sus"))
			NewWrapper("down", okWorker(), 0).Depend(sus, true).Callback(count("down"))
			NewWrapper("after", okWorker(), 0).Depend(sus, false).Join(AllDone()).Callback(count("after"))
			r, err := a.Start(context.Background(), time.Duration(k%4)*200*time.Microsecond+500*time.Microsecond, starts...)
			require.NoError(t, err)
			var wg sync.WaitGroup
			var errs [2]error
			for m := range errs {
				wg.Go(func() {
					for r.Report().Nodes[indexOf(r, "sus")].Status != StatusPending && !terminal(r.nodes[indexOf(r, "sus")].st()) {
						runtime.Gosched()
					}
					errs[m] = r.Resume("sus", how)
				})
			}
			wg.Go(func() {
				time.Sleep(time.Duration(k%5) * 100 * time.Microsecond)
				if k%2 == 0 {
					r.Cancel()
				}
			})
			wg.Wait()
			_ = r.Wait(context.Background())
			accepted := 0
			for _, err := range errs {
				if err == nil {
					accepted++
				} else {
					require.ErrorIs(t, err, ErrNotPending)
				}
			}
			res := sus.Result()
			switch {
			case accepted == 0:
				assert.Equal(t, ResultTimeout, res.State, "k=%d join=%v: refused, yet %v", k, byJoin, res)
			case how.kind == resumeSucceed:
				assert.Equal(t, WorkResult[int]{Value: 1, State: ResultSuccess}, res)
			case how.kind == resumeFail:
				assert.Equal(t, ResultException, res.State)
				assert.ErrorIs(t, res.Err, errBoom)
			}
			assert.LessOrEqual(t, accepted, 1, "k=%d join=%v: Resumes accepted", k, byJoin)
			mu.Lock()
			for _, id := range []string{"sus", "down", "after"} {
				assert.Equal(t, 1, results[id], "k=%d join=%v: Result callbacks of %s", k, byJoin, id)
			}
			mu.Unlock()
			r.Release()
		}
	}
}

// TestCustomJoinSuspend checks a join that suspends its node.
func TestCustomJoinSuspend(t *testing.T) {
	a := newAsync(t)
	rec := newRecorder()
	up := rec.node("up", fail(errBoom))
	c := rec.node("c", ok(3)).Depend(up, true).Join(CustomJoin(func(ups []Upstream) Decision {
		if !ups[0].OK {
			return DecideSuspend // ask a human
		}
		return DecideRun
	}))
	r, err := a.Start(context.Background(), 0, up)
	require.NoError(t, err)
	t.Cleanup(r.Cancel) // a failed test leaves c pending: Close would wait for it
	require.Eventually(t, func() bool { return r.Report().Nodes[1].Status == StatusPending }, 10*time.Second, time.Millisecond)
	require.NoError(t, r.Resume("c", Rerun()))
	require.NoError(t, r.Wait(context.Background()))
	assert.Equal(t, WorkResult[int]{Value: 3, State: ResultSuccess}, c.Result())
}

// TestFlowValidation checks that bad flow rules are rejected up front.
func TestFlowValidation(t *testing.T) {
	n := func(id string) *WorkerWrapper[int, int] { return NewWrapper(id, okWorker(), 0) }
	tests := []struct {
		name   string
		build  func() []Wrapper
		target error
		msg    string
	}{
		{"at least too many", func() []Wrapper {
			a := n("a")
			n("c").Depend(a, true).Join(AtLeast(2))
			return []Wrapper{a}
		}, ErrBadJoin, `node "c": AtLeast(2) needs 2 upstreams, it has 1`},
		{"at least zero", func() []Wrapper {
			a := n("a")
			n("c").Depend(a, true).Join(AtLeast(0))
			return []Wrapper{a}
		}, ErrBadJoin, "AtLeast(0)"},
		{"named not an upstream", func() []Wrapper {
			a := n("a")
			n("c").Depend(a, true).Join(NamedSucceeded("a", "zz"))
			return []Wrapper{a}
		}, ErrBadJoin, `"zz" is not one of its upstreams`},
		{"nil custom", func() []Wrapper {
			a := n("a")
			n("c").Depend(a, true).Join(CustomJoin(nil))
			return []Wrapper{a}
		}, ErrBadJoin, "CustomJoin(nil)"},
		{"zero attempts", func() []Wrapper { return []Wrapper{n("a").Retry(RetryPolicy{})} }, ErrBadRetry, `node "a": RetryPolicy.Attempts is 0; it counts every attempt, the first included, so it must be at least 1`},
		{"negative timeout", func() []Wrapper { return []Wrapper{n("a").Timeout(-time.Second)} }, ErrBadTimeout, "Timeout(-1s)"},
		{"cycle", func() []Wrapper {
			a, b := n("a"), n("b")
			b.Depend(a, true).Join(AllDone())
			a.Depend(b, true)
			return []Wrapper{a}
		}, ErrCycle, `"a" -> "b" -> "a"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newAsync(t)
			err := a.BeginWork(context.Background(), 0, tt.build()...)
			require.ErrorIs(t, err, tt.target)
			assert.Contains(t, err.Error(), tt.msg)
		})
	}
}

func TestBackoffs(t *testing.T) {
	assert.Equal(t, 5*time.Millisecond, ConstantBackoff(5*time.Millisecond)(3))
	exp := ExponentialBackoff(time.Millisecond, 10*time.Millisecond, 0)
	assert.Equal(t, []time.Duration{time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond, 8 * time.Millisecond, 10 * time.Millisecond},
		[]time.Duration{exp(1), exp(2), exp(3), exp(4), exp(5)})
	// A delay doubles until doubling it would pass the cap, and only then
	// is the cap: with an odd cap, half of it rounds down, and a delay
	// equal to that half still doubles.
	odd := ExponentialBackoff(time.Millisecond, 2*time.Millisecond+1, 0)
	assert.Equal(t, []time.Duration{time.Millisecond, 2 * time.Millisecond, 2*time.Millisecond + 1},
		[]time.Duration{odd(1), odd(2), odd(3)})
	// A jitter of 0 is none: the delay is exact, also past the 53 bits a
	// float64 holds.
	const huge = time.Duration(1<<60 + 1)
	assert.Equal(t, huge, ExponentialBackoff(huge, time.Duration(math.MaxInt64), 0)(1))
	jit := ExponentialBackoff(100*time.Millisecond, time.Second, 0.5)
	for range 100 {
		d := jit(1)
		assert.GreaterOrEqual(t, d, 50*time.Millisecond)
		assert.LessOrEqual(t, d, 150*time.Millisecond)
	}
	var mu sync.Mutex
	_ = &mu
	assert.Equal(t, "continue", PolicyContinue.String())
	assert.Equal(t, "at least 3 succeeded", AtLeast(3).String())
}

// TestEndReason checks that the report names the node that ended the run.
func TestEndReason(t *testing.T) {
	a := newAsync(t)
	rec := newRecorder()
	gate := make(chan struct{})
	bad := rec.node("bad", func(context.Context, Wrappers) (int, error) { <-gate; return 0, errBoom }).OnFailure(PolicyEnd)
	slow := rec.node("slow", func(ctx context.Context, _ Wrappers) (int, error) { close(gate); <-ctx.Done(); return 0, ctx.Err() })
	r, err := a.Start(context.Background(), 0, bad, slow)
	require.NoError(t, err)
	var ee *EndError
	require.ErrorAs(t, r.Wait(context.Background()), &ee)
	rep := r.Report()
	assert.Equal(t, "worker failed", rep.Nodes[0].Reason)
	assert.Equal(t, `stopped: node "bad" ended the run`, rep.Nodes[1].Reason)
	assert.Equal(t, StatusFailed, rep.Nodes[1].Status)
}

// TestNodeTimeoutCountsFromItsFirstStart: a node's Timeout counts from
// its own start, not from the run's: a node of 20 ms with a 30 ms
// Timeout, behind an upstream of 50 ms, succeeds, and one of 40 ms ends
// as a timeout 30 ms after it started.
func TestNodeTimeoutCountsFromItsFirstStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		sleeps := func(d time.Duration) WorkerFunc[int, int] {
			return func(ctx context.Context, _ int, _ Wrappers) (int, error) {
				select {
				case <-time.After(d):
					return 1, nil
				case <-ctx.Done():
					return 0, ctx.Err()
				}
			}
		}
		up := NewWrapper("up", sleeps(50*time.Millisecond), 0)
		quick := NewWrapper("quick", sleeps(20*time.Millisecond), 0).Depend(up, true).Timeout(30 * time.Millisecond)
		slow := NewWrapper("slow", sleeps(40*time.Millisecond), 0).Depend(up, true).Timeout(30 * time.Millisecond)
		start := time.Now()
		require.NoError(t, a.BeginWork(context.Background(), time.Second, up))
		assert.Equal(t, WorkResult[int]{Value: 1, State: ResultSuccess}, quick.Result())
		var nte *NodeTimeoutError
		assert.ErrorAs(t, slow.Result().Err, &nte)
		assert.Equal(t, 80*time.Millisecond, time.Since(start), "slow ended 30 ms after its start at 50 ms")
	})
}

// TestNodeTimeoutIsNotARunError checks that a node's own timeout is that
// node's result: BeginWork still returns nil when the run ends in time.
func TestNodeTimeoutIsNotARunError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		hang := NewWrapper("hang", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
			<-ctx.Done()
			return 0, ctx.Err()
		}), 0).Timeout(10 * time.Millisecond)
		next := NewWrapper("next", okWorker(), 0).Depend(hang, false).Join(AllDone())
		require.NoError(t, a.BeginWork(context.Background(), time.Minute, hang))
		var nte *NodeTimeoutError
		assert.ErrorAs(t, hang.Result().Err, &nte)
		assert.Equal(t, ResultTimeout, hang.Result().State)
		assert.Equal(t, ResultSuccess, next.Result().State)
	})
}

// waitClosed fails the test with msg unless ch is closed within 10 s.
func waitClosed(t *testing.T, ch <-chan struct{}, msg string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal(msg)
	}
}

// isClosed reports whether ch is closed, without waiting.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestSuspendedSignalsAStall checks Run.Suspended: it is not closed while
// a branch independent of the pending node still runs, it is closed once
// that branch ended, and again when a rerun suspends the node a second
// time; a Resume that lets the run end never closes it.
func TestSuspendedSignalsAStall(t *testing.T) {
	a := newAsync(t)
	rec := newRecorder()
	var calls atomic.Int32
	sus := rec.node("sus", func(context.Context, Wrappers) (int, error) {
		if calls.Add(1) <= 2 {
			return 0, errBoom
		}
		return 5, nil
	}).OnFailure(PolicySuspend)
	down := rec.node("down", ok(1)).Depend(sus, true)
	gate := make(chan struct{})
	releaseGate := releaser(t, gate) // slow ignores its ctx, so r.Cancel does not free it
	slow := rec.node("slow", func(context.Context, Wrappers) (int, error) {
		<-gate
		return 2, nil
	})
	r, err := a.Start(context.Background(), 0, sus, slow)
	require.NoError(t, err)
	t.Cleanup(r.Cancel) // a failed test leaves sus pending: Close would wait for it
	stall := r.Suspended()
	require.Eventually(t, func() bool { return r.Report().Nodes[0].Status == StatusPending }, 10*time.Second, time.Millisecond)
	assert.False(t, isClosed(stall), "slow still runs: the run has not stalled")
	releaseGate()
	waitClosed(t, stall, "the run stalled on sus, but Suspended was not closed")
	assert.Equal(t, StateFinish, slow.State(), "every branch that does not need sus ended first")
	assert.True(t, isClosed(r.Suspended()), "a stalled run's Suspended is closed at once")

	// Rerun fails again: the run stalls a second time.
	require.NoError(t, r.Resume("sus", Rerun()))
	waitClosed(t, r.Suspended(), "the rerun suspended sus again, but Suspended was not closed")
	assert.EqualValues(t, 2, calls.Load())

	// The third attempt succeeds: the run ends, and a fresh Suspended
	// channel is not closed by that.
	require.NoError(t, r.Resume("sus", Rerun()))
	after := r.Suspended()
	require.NoError(t, r.Wait(context.Background()))
	assert.Equal(t, WorkResult[int]{Value: 1, State: ResultSuccess}, down.Result())
	assert.False(t, isClosed(after), "a run that ended did not stall")
}

// TestSuspendedOnAPlan checks that Suspended works on pooled runs of a
// plan, that a join's DecideSuspend counts as pending, and that a run
// that never suspends and one whose deadline passed never close it.
func TestSuspendedOnAPlan(t *testing.T) {
	a := newAsync(t)
	var suspend atomic.Bool
	up := NewWrapper("up", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 1, nil }), 0)
	joined := NewWrapper("joined", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 2, nil }), 0).
		Depend(up, true).
		Join(CustomJoin(func([]Upstream) Decision {
			if suspend.Load() {
				return DecideSuspend
			}
			return DecideRun
		}))
	p, err := Compile(up)
	require.NoError(t, err)
	for k := range 3 {
		suspend.Store(k == 1)
		r, err := a.StartPlan(context.Background(), p, 0)
		require.NoError(t, err)
		released := false
		t.Cleanup(func() { // a failed test leaves the join pending
			if !released {
				r.Cancel()
			}
		})
		stall := r.Suspended()
		if k != 1 {
			require.NoError(t, r.Wait(context.Background()))
			assert.False(t, isClosed(stall), "run %d did not stall", k)
			released = true
			r.Release()
			continue
		}
		waitClosed(t, stall, "the join suspended the node, but Suspended was not closed")
		assert.Equal(t, StatusPending, r.Report().Nodes[1].Status)
		r.Cancel()
		require.ErrorIs(t, r.Wait(context.Background()), context.Canceled)
		assert.False(t, isClosed(r.Suspended()), "a cancelled run is not stalled")
		released = true
		r.Release()
	}
	_ = joined
}

// TestStallCheckDoesNotRaceRecycling checks that the stall check of a
// task that ends does not read a pooled run that is being recycled and
// reused: after a Cancel, the late goroutine of a worker that ignored its
// ctx ends while another task still holds the run, which then completes,
// is released and is started again (-race reported the stall check's
// reads against reset before the check moved ahead of the reference's
// release).
func TestStallCheckDoesNotRaceRecycling(t *testing.T) {
	a := newAsync(t)
	var gateB chan struct{}
	inB := make(chan struct{}, 1)
	inA := make(chan struct{}, 1)
	na := NewWrapper("A", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
		inA <- struct{}{}
		<-ctx.Done()
		time.Sleep(time.Millisecond) // outlives the cancel
		return 1, nil
	}), 0)
	nb := NewWrapper("B", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 2, nil }), 0).
		Callback(ResultFunc[int, int](func(bool, int, WorkResult[int]) { inB <- struct{}{}; <-gateB }))
	p, err := Compile(na, nb)
	require.NoError(t, err)
	for range 30 {
		gateB = make(chan struct{})
		r, err := a.StartPlan(context.Background(), p, 0)
		require.NoError(t, err)
		<-inA
		<-inB
		r.Cancel()
		for r.refs.Load() != 2 { // A's late goroutine let go of the run
			time.Sleep(50 * time.Microsecond)
		}
		close(gateB)
		<-r.Done()
		r.Release()
	}
}

// TestCancelFromTheSinkReturnsWithIt checks the pattern the README gives
// for returning as soon as the sink is done: Start, and Cancel from the
// sink's Result callback. The optional branch still running is stopped,
// and Wait returns long before the group deadline.
func TestCancelFromTheSinkReturnsWithIt(t *testing.T) {
	a := newAsync(t)
	var run atomic.Pointer[Run]
	gate, recsRunning := make(chan struct{}), make(chan struct{})
	user := NewWrapper("user", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		<-gate        // until the run is stored
		<-recsRunning // so that recs is running, not skipped
		return 1, nil
	}), 0)
	recs := NewWrapper("recs", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
		close(recsRunning)
		<-ctx.Done() // slower than the page can wait for
		return 0, ctx.Err()
	}), 0)
	page := NewWrapper("page", okWorker(), 0).Depend(user, true).Depend(recs, false).
		Callback(ResultFunc[int, int](func(bool, int, WorkResult[int]) { run.Load().Cancel() }))
	began := time.Now()
	r, err := a.Start(context.Background(), time.Minute, user, recs)
	require.NoError(t, err)
	run.Store(r)
	close(gate)
	require.ErrorIs(t, r.Wait(context.Background()), context.Canceled)
	assert.Less(t, time.Since(began), 30*time.Second, "Wait returned with the sink, not at the deadline")
	assert.Equal(t, ResultSuccess, page.Result().State)
	assert.Equal(t, ResultTimeout, recs.Result().State)
}

// TestSuspendedWaitsForALateWorker checks that a worker which outlived
// its node's own Timeout by ignoring its ctx keeps the run busy: the run
// is not reported stalled until the worker returns.
func TestSuspendedWaitsForALateWorker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		release := make(chan struct{})
		x := NewWrapper("x", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			return 0, errBoom
		}), 0).OnFailure(PolicySuspend)
		z := NewWrapper("z", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			<-release // ignores its ctx
			return 1, nil
		}), 0).Timeout(time.Millisecond)
		r, err := a.Start(context.Background(), time.Minute, x, z)
		require.NoError(t, err)
		defer r.Cancel()
		time.Sleep(time.Millisecond) // z's own timeout passes (fake time: only once z's worker blocks)
		synctest.Wait()
		rep := r.Report()
		require.Equal(t, StatusPending, rep.Nodes[0].Status, "x pending")
		require.Equal(t, StatusTimedOut, rep.Nodes[1].Status, "z timed out")
		stall := r.Suspended() // taken before z returns, so the run must close it
		assert.False(t, isClosed(stall), "z's worker is still running")
		close(release)
		synctest.Wait()
		assert.True(t, isClosed(stall), "z's worker returned, but Suspended was not closed")
	})
}

// holdExec runs each task on a new goroutine or, while hold is set, keeps
// it until release.
type holdExec struct {
	hold atomic.Bool
	mu   sync.Mutex
	held []func()
}

func (e *holdExec) Submit(task func()) error {
	if e.hold.Load() {
		e.mu.Lock()
		e.held = append(e.held, task)
		e.mu.Unlock()
		return nil
	}
	go task()
	return nil
}

func (e *holdExec) release() {
	e.hold.Store(false)
	e.mu.Lock()
	h := e.held
	e.held = nil
	e.mu.Unlock()
	for _, t := range h {
		go t()
	}
}

// A node resumed with Rerun runs through the task Resume submits, and
// only through it: not from the batch of a goroutine that started it
// before it was suspended, nor from the run's list of lent nodes (see
// Run.takeBatch). Found by review of the lent batches, in which both
// started it again while the executor held Resume's task.
func TestResumedNodeRunsOnlyThroughItsTask(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 40
		var phase atomic.Int32
		rel := make(chan struct{})
		attempts := make([]atomic.Int32, n)
		w := WorkerFunc[int, int](func(ctx context.Context, k int, _ Wrappers) (int, error) {
			if phase.Load() == 0 || k < 0 {
				return k, nil
			}
			if k%2 == 0 { // learned quick, now blocks: heads a batch
				select {
				case <-rel:
				case <-ctx.Done():
				}
				return k, nil
			}
			if attempts[k].Add(1) == 1 {
				return 0, errors.New("first attempt fails")
			}
			return k, nil
		})
		id := func(k int) string { return fmt.Sprintf("n%d", k) }
		root := NewWrapper("root", w, -1)
		for k := range n {
			x := NewWrapper(id(k), w, k).Depend(root, true)
			if k%2 == 1 {
				x.OnFailure(PolicySuspend)
			}
		}
		pl, err := Compile(root)
		require.NoError(t, err)
		e := &holdExec{}
		a := New(WithExecutor(e))
		defer a.Close()
		for range 6 { // sampled runs: every node learned quick
			r, err := a.RunPlan(context.Background(), pl, time.Minute)
			require.NoError(t, err)
			r.Release()
		}
		for round := range 5 {
			phase.Store(1)
			for k := range attempts {
				attempts[k].Store(0)
			}
			rel = make(chan struct{})
			r, err := a.StartPlan(context.Background(), pl, time.Minute)
			require.NoError(t, err)
			synctest.Wait() // blockers wait on rel; odd nodes that ran are pending
			e.hold.Store(true)
			var resumed []int
			for k := 1; k < n; k += 2 {
				if r.Resume(id(k), Rerun()) == nil {
					resumed = append(resumed, k)
				}
			}
			require.NotEmpty(t, resumed)
			close(rel)
			synctest.Wait()
			for _, k := range resumed {
				assert.Equal(t, int32(1), attempts[k].Load(), "round %d: node %d started again while its Resume task was held", round, k)
			}
			e.release()
			require.NoError(t, r.Wait(context.Background()))
			r.Release()
		}
	})
}

// TestPolicyEndFailsUnstartedNodesWithEndError: under PolicyEnd every
// node not yet ended fails with *EndError; unstarted upstreams of the
// nodes the end failed were skipped instead, before the sweep started.
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

// TestPolicyEndAfterTheDeadline: a PolicyEnd failure settled after the
// run was stopped by its context (the group deadline, a Cancel, the
// caller's context cancelled with a cause), but before the sweep reached
// the failing node, stops nothing, as after the run's end with its
// EndsRun nodes (TestPolicyEndAfterTheRunEndedBeforeTheSweepReachesIt):
// the run ends as it was stopped, the node keeps its own failure, and
// the nodes the sweep reaches after it end as that stop says. Its
// EndError made them fail, so that the nodes of one run that the
// deadline stopped ended some as timeouts and some with an EndError
// naming a node that stopped nothing, and Wait returned that EndError.
// So does a failure that ends the run's last EndsRun node then: the run
// was stopped, and ends as it was, not as ended with its marked nodes
// (ErrRunEnded, a nil error). The retry policy refuses the failure once
// the sweep is held at the node before.
func TestPolicyEndAfterTheDeadline(t *testing.T) {
	errStop := errors.New("the caller stopped")
	for _, stop := range []struct {
		name  string
		cause error
		// stop stops the run, once the retry policy is being asked;
		// nil for the deadline, which passes on its own.
		stop func(run *Run, cancel context.CancelCauseFunc)
	}{
		{"deadline", context.DeadlineExceeded, nil},
		{"Cancel", context.Canceled, func(run *Run, _ context.CancelCauseFunc) { run.Cancel() }},
		{"caller's context", errStop, func(_ *Run, cancel context.CancelCauseFunc) { cancel(errStop) }},
	} {
		for _, mark := range []struct {
			name    string
			policy  FailurePolicy
			endsRun bool
		}{
			{"PolicyEnd", PolicyEnd, false},
			{"EndsRun", PolicyFail, true},
			{"PolicyEnd and EndsRun", PolicyEnd, true},
		} {
			t.Run(stop.name+"/"+mark.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					a := New()
					defer a.Close()
					ctx, cancel := context.WithCancelCause(context.Background())
					defer cancel(nil)
					running, done, sweeping, settled, asked := make(chan struct{}), make(chan struct{}), make(chan struct{}), make(chan struct{}), make(chan struct{})
					defer close(done)
					hold := NewWrapper("hold", Worker[int, int](sweepHolder{running, done, sweeping, settled}), 0)
					critical := NewWrapper("critical", Worker[int, int](settlingFailure{settled}), 0).
						Retry(RetryPolicy{Attempts: 2, Retryable: func(error) bool {
							close(asked)
							<-sweeping // the run stopped, and the sweep is held at hold
							return false
						}}).OnFailure(mark.policy)
					if mark.endsRun {
						critical.EndsRun()
					}
					late := NewWrapper("late", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
						<-done // only the sweep ends it
						return 1, nil
					}), 0)
					run, err := a.Start(ctx, time.Second, hold, critical, late)
					require.NoError(t, err)
					require.Less(t, indexOf(run, "hold"), indexOf(run, "critical"), "the sweep reaches hold first")
					require.Less(t, indexOf(run, "critical"), indexOf(run, "late"), "and late after critical")
					if stop.stop != nil {
						<-running
						<-asked
						stop.stop(run, cancel)
					}
					err = run.Wait(context.Background())
					assert.ErrorIs(t, err, stop.cause)
					var ee *EndError
					assert.False(t, errors.As(err, &ee), "the run was stopped by its %s, not by critical: %v", stop.name, err)
					assert.Equal(t, err, run.Report().RunErr)
					assert.Equal(t, WorkResult[int]{State: ResultException, Value: -1, Err: errBoom}, critical.ResultIn(run), "its own failure")
					for _, w := range []*WorkerWrapper[int, int]{hold, late} {
						res := w.ResultIn(run)
						assert.Equal(t, ResultTimeout, res.State, "%s: %v", w.ID(), res.Err)
						assert.ErrorIs(t, res.Err, stop.cause, w.ID())
						assert.NotErrorIs(t, res.Err, ErrRunEnded, w.ID())
					}
				})
			})
		}
	}
}

// TestOwnTimeoutAfterTheDeadlineStopsNothing: a node's own Timeout,
// under PolicyEnd, that would pass after the group deadline ends
// nothing: the node's timer derives from the run's context, so it fires
// with the deadline, and finds the run stopped. While the sweep is held
// at the node before it, past the node's own Timeout, the node keeps
// running; the sweep then ends it as the deadline says, as every other
// node, and Wait returns the deadline's error, not an EndError.
func TestOwnTimeoutAfterTheDeadlineStopsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		running, done, sweeping, settled := make(chan struct{}), make(chan struct{}), make(chan struct{}), make(chan struct{})
		defer close(done)
		hold := NewWrapper("hold", Worker[int, int](sweepHolder{running, done, sweeping, settled}), 0)
		blocked := WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			<-done // only the sweep ends it
			return 1, nil
		})
		timed := NewWrapper("timed", blocked, 0).Timeout(2 * time.Second).OnFailure(PolicyEnd)
		late := NewWrapper("late", blocked, 0)
		run, err := a.Start(context.Background(), time.Second, hold, timed, late)
		require.NoError(t, err)
		require.Less(t, indexOf(run, "hold"), indexOf(run, "timed"), "the sweep reaches hold first")
		require.Less(t, indexOf(run, "timed"), indexOf(run, "late"), "and late after timed")
		<-sweeping
		time.Sleep(2 * time.Second) // fake time: timed's own Timeout has passed
		close(settled)
		err = run.Wait(context.Background())
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		var ee *EndError
		assert.False(t, errors.As(err, &ee), "the run ended by its deadline, not by timed: %v", err)
		for _, w := range []*WorkerWrapper[int, int]{hold, timed, late} {
			res := w.ResultIn(run)
			assert.Equal(t, ResultTimeout, res.State, "%s: %v", w.ID(), res.Err)
			assert.ErrorIs(t, res.Err, context.DeadlineExceeded, w.ID())
			var nt *NodeTimeoutError
			assert.False(t, errors.As(res.Err, &nt), "%s: %v", w.ID(), res.Err)
		}
	})
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

func TestContinueAppliesToNodeTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		slow := NewWrapper("slow", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
			<-ctx.Done()
			return 0, ctx.Err()
		}), 0).Timeout(10 * time.Millisecond).OnFailure(PolicyContinue)
		down := NewWrapper("down", okWorker(), 0).Depend(slow, true)
		require.NoError(t, a.BeginWork(context.Background(), time.Minute, slow))
		assert.Equal(t, ResultTimeout, slow.Result().State)
		assert.Equal(t, ResultSuccess, down.Result().State)
	})
}

// TestLateReturnAfterTheNodesTimeoutChangesNothing is the defect the
// seed's analysis finds in asyncTool, for a node's own Timeout: a worker
// that ignores its ctx and succeeds after the node timed out neither
// overwrites the timeout, nor calls the callback again, nor triggers the
// successor a second time (PolicyContinue made it run once already).
func TestLateReturnAfterTheNodesTimeoutChangesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		rec := newRecorder()
		slow := rec.node("slow", func(context.Context, Wrappers) (int, error) {
			time.Sleep(time.Second) // ignores its ctx
			return 1, nil
		}).Default(-1).Timeout(10 * time.Millisecond).OnFailure(PolicyContinue)
		down := rec.node("down", ok(2)).Depend(slow, true)
		require.NoError(t, a.BeginWork(context.Background(), time.Minute, slow))
		time.Sleep(2 * time.Second) // the worker has returned its success
		synctest.Wait()
		assert.Equal(t, ResultTimeout, slow.Result().State)
		assert.Equal(t, -1, slow.Result().Value)
		assert.Equal(t, WorkResult[int]{Value: 2, State: ResultSuccess}, down.Result())
		for _, id := range []string{"slow", "down"} {
			assert.Equal(t, 1, rec.count(rec.actions, id), "%s ran once", id)
			assert.Equal(t, 1, rec.count(rec.results, id), "%s's callback fired once", id)
		}
		assert.Equal(t, 1, rec.count(rec.begins, "down"))
	})
}

// TestErrorsNameANodeWithoutAnID: the errors that name a node named a
// node without an id "", which names no node: BeginWork's "run ended by
// node \"\"" (PolicyEnd) and every stopped node's Err and Reason, the
// error of the nodes an EndsRun node stopped, an UpstreamError, a
// NodeTimeoutError, a join's errors and the Reason of a node downstream
// of one not taken. They name it as Report.Err does, "#" and its index,
// unquoted; a node with an id is named as before.
func TestErrorsNameANodeWithoutAnID(t *testing.T) {
	boom := errors.New("boom")
	block := WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
		<-ctx.Done()
		return 0, ctx.Err()
	})
	t.Run("PolicyEnd", func(t *testing.T) {
		a := newAsync(t)
		// A chain, so that the anonymous node is node 1.
		first := NewWrapper("first", okWorker(), 0)
		anon := NewWrapper("", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 0, boom }), 0).
			OnFailure(PolicyEnd).Depend(first, true)
		waiting := NewWrapper("waiting", block, 0)
		run, err := a.Start(t.Context(), 0, first, waiting)
		require.NoError(t, err)
		err = run.Wait(t.Context())
		require.Equal(t, int32(1), anon.idx)
		var ee *EndError
		require.ErrorAs(t, err, &ee)
		assert.Empty(t, ee.ID, "the node has no id")
		assert.EqualError(t, ee, "asynctool: run ended by node #1: boom")
		rep := run.Report()
		assert.Equal(t, "stopped: node #1 ended the run", rep.Nodes[waiting.idx].Reason)
		assert.EqualError(t, (&EndError{ID: "x", Err: boom}), `asynctool: run ended by node "x": boom`, "a node with an id")
	})
	t.Run("UpstreamError", func(t *testing.T) {
		a := newAsync(t)
		anon := NewWrapper("", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 0, boom }), 0)
		down := NewWrapper("down", okWorker(), 0).Depend(anon, true)
		require.NoError(t, a.BeginWork(t.Context(), 0, anon))
		var ue *UpstreamError
		require.ErrorAs(t, down.Result().Err, &ue)
		assert.Empty(t, ue.ID)
		assert.EqualError(t, ue, "asynctool: upstream #0 failed: boom")
		assert.EqualError(t, &UpstreamError{ID: "x", Err: boom}, `asynctool: upstream "x" failed: boom`, "a node with an id")
	})
	t.Run("NodeTimeoutError", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a := New()
			defer a.Close()
			anon := NewWrapper("", block, 0).Timeout(time.Second)
			require.NoError(t, a.BeginWork(t.Context(), 0, anon))
			var te *NodeTimeoutError
			require.ErrorAs(t, anon.Result().Err, &te)
			assert.EqualError(t, te, "asynctool: node #0 exceeded its timeout of 1s")
		})
	})
	t.Run("joins", func(t *testing.T) {
		// A chain whose order is its indexes: up -> #1 (its join fails)
		// and up -> #2 (not taken) -> down.
		a := newAsync(t)
		up := NewWrapper("up", okWorker(), 0)
		failed := NewWrapper("", okWorker(), 0).Depend(up, true).Join(CustomJoin(func([]Upstream) Decision { return DecideFail }))
		skipped := NewWrapper("", okWorker(), 0).Depend(failed, false).Depend(up, true).
			Join(CustomJoin(func([]Upstream) Decision { return DecideSkip }))
		down := NewWrapper("down", okWorker(), 0).Depend(skipped, true)
		run, err := a.Start(t.Context(), 0, up)
		require.NoError(t, err)
		require.NoError(t, run.Wait(t.Context()))
		require.Equal(t, []int32{1, 2}, []int32{failed.idx, skipped.idx})
		assert.EqualError(t, failed.Result().Err, ErrJoinFailed.Error()+": node #1")
		assert.Equal(t, "upstream #2 was not taken", run.Report().Nodes[down.idx].Reason)
	})
	t.Run("EndsRun", func(t *testing.T) {
		a := newAsync(t)
		anon := NewWrapper("", okWorker(), 0).EndsRun()
		waiting := NewWrapper("waiting", block, 0)
		require.NoError(t, a.BeginWork(t.Context(), 0, anon, waiting))
		assert.ErrorIs(t, waiting.Result().Err, ErrRunEnded)
		assert.EqualError(t, waiting.Result().Err, fmt.Sprintf("asynctool: the run ended with node #%d", anon.idx))
	})
}
