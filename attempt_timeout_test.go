package asynctool

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const ms = time.Millisecond

// hangs returns a worker whose attempts 1..n (counted in calls) wait for
// their ctx to end and return its error; later attempts return v.
func hangs(calls *atomic.Int32, n int32, v int) WorkerFunc[int, int] {
	return func(ctx context.Context, _ int, _ Wrappers) (int, error) {
		if calls.Add(1) <= n {
			<-ctx.Done()
			return 0, ctx.Err()
		}
		return v, nil
	}
}

// slowBegin is a callback whose Begin takes 5 ms.
type slowBegin struct{ NopCallback[int, int] }

func (slowBegin) Begin() { time.Sleep(5 * ms) }

// TestAttemptTimeoutRetriesAHungAttempt: the first attempt hangs until
// its own bound, fails with an *AttemptTimeoutError that the default
// Retryable retries after the backoff, and the second attempt succeeds.
// The bound starts when Action is called: Begin and the backoff are
// outside it.
func TestAttemptTimeoutRetriesAHungAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var retryErrs []error
		a := New(WithHooks(&Hooks{OnNodeRetry: func(_ context.Context, ev NodeEvent) { retryErrs = append(retryErrs, ev.Err) }}))
		defer a.Close()
		var calls atomic.Int32
		var deadlines []time.Duration // each attempt's ctx deadline, from its Action's start
		var causes []error
		hang := hangs(&calls, 1, 42)
		rpc := NewWrapper("rpc", WorkerFunc[int, int](func(ctx context.Context, _ int, all Wrappers) (int, error) {
			d, ok := ctx.Deadline()
			require.True(t, ok, "an attempt's ctx has a deadline")
			deadlines = append(deadlines, time.Until(d))
			v, err := hang(ctx, 0, all)
			causes = append(causes, context.Cause(ctx))
			return v, err
		}), 0).
			Callback(slowBegin{}).
			Retry(RetryPolicy{Attempts: 3, AttemptTimeout: 50 * ms, Backoff: ConstantBackoff(10 * ms)})
		start := time.Now()
		require.NoError(t, a.BeginWork(context.Background(), time.Minute, rpc))
		assert.Equal(t, WorkResult[int]{Value: 42, State: ResultSuccess}, rpc.Result())
		assert.Equal(t, int32(2), calls.Load())
		assert.Equal(t, 5*ms+50*ms+10*ms+5*ms, time.Since(start), "Begin, the hung attempt, the backoff, Begin")
		assert.Equal(t, []time.Duration{50 * ms, 50 * ms}, deadlines, "each attempt has its own bound, from Action's start")
		want := &AttemptTimeoutError{ID: "rpc", Attempt: 1, Timeout: 50 * ms}
		require.Len(t, retryErrs, 1)
		assert.Equal(t, want, retryErrs[0], "the retried error")
		assert.Equal(t, error(want), causes[0], "the attempt's ctx cause")
		assert.NoError(t, causes[1])
	})
}

// TestAttemptTimeoutExhausted: every attempt hangs, so the node fails with
// the last attempt's *AttemptTimeoutError, under its failure policy.
func TestAttemptTimeoutExhausted(t *testing.T) {
	policy := RetryPolicy{Attempts: 3, AttemptTimeout: 50 * ms}
	wantErr := &AttemptTimeoutError{ID: "rpc", Attempt: 3, Timeout: 50 * ms}
	check := func(t *testing.T, res WorkResult[int]) {
		t.Helper()
		assert.Equal(t, WorkResult[int]{Value: -1, State: ResultException, Err: wantErr}, res)
		assert.ErrorIs(t, res.Err, context.DeadlineExceeded)
		var ate *AttemptTimeoutError
		assert.ErrorAs(t, res.Err, &ate)
	}
	for _, tt := range []struct {
		policy FailurePolicy
		runErr error // BeginWork's, nil for none
		down   WorkResult[int]
	}{
		{PolicyFail, nil, WorkResult[int]{State: ResultException, Err: &UpstreamError{ID: "rpc", Err: wantErr}}},
		{PolicyContinue, nil, WorkResult[int]{Value: 1, State: ResultSuccess}},
		{PolicyEnd, &EndError{ID: "rpc", Err: wantErr}, WorkResult[int]{State: ResultException, Err: &EndError{ID: "rpc", Err: wantErr}}},
	} {
		t.Run(tt.policy.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a := New()
				defer a.Close()
				var calls atomic.Int32
				rpc := NewWrapper("rpc", hangs(&calls, 100, 0), 0).Default(-1).Retry(policy).OnFailure(tt.policy)
				down := NewWrapper("down", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 1, nil }), 0).
					Depend(rpc, true)
				start := time.Now()
				err := a.BeginWork(context.Background(), time.Minute, rpc)
				if tt.runErr == nil {
					require.NoError(t, err)
				} else {
					var ee *EndError
					require.ErrorAs(t, err, &ee)
					assert.Equal(t, tt.runErr, ee)
				}
				assert.Equal(t, 150*ms, time.Since(start), "three bounded attempts, no backoff")
				assert.Equal(t, int32(3), calls.Load())
				check(t, rpc.Result())
				assert.Equal(t, tt.down, down.Result())
			})
		})
	}
	t.Run("suspend then rerun", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a := New()
			defer a.Close()
			var calls atomic.Int32
			rpc := NewWrapper("rpc", hangs(&calls, 3, 9), 0).Default(-1).Retry(policy).OnFailure(PolicySuspend)
			r, err := a.Start(context.Background(), time.Minute, rpc)
			require.NoError(t, err)
			<-r.Suspended()
			rep := r.Report()
			assert.Equal(t, StatusPending, rep.Nodes[0].Status)
			assert.Equal(t, error(wantErr), rep.Nodes[0].Err, "the report says why it is pending")
			require.NoError(t, r.Resume("rpc", Rerun()))
			require.NoError(t, r.Wait(context.Background()))
			assert.Equal(t, WorkResult[int]{Value: 9, State: ResultSuccess}, rpc.Result())
			assert.Equal(t, int32(4), calls.Load(), "the rerun's first attempt succeeded")
		})
	})
	t.Run("suspend then rerun times out again", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a := New()
			defer a.Close()
			var calls atomic.Int32
			rpc := NewWrapper("rpc", hangs(&calls, 100, 0), 0).Default(-1).Retry(policy).OnFailure(PolicySuspend)
			r, err := a.Start(context.Background(), time.Minute, rpc)
			require.NoError(t, err)
			<-r.Suspended()
			require.NoError(t, r.Resume("rpc", Rerun()))
			<-r.Suspended()
			rep := r.Report()
			assert.Equal(t, &AttemptTimeoutError{ID: "rpc", Attempt: 6, Timeout: 50 * ms}, rep.Nodes[0].Err,
				"Attempt counts on across a Rerun")
			require.NoError(t, r.Resume("rpc", FailWith(rep.Nodes[0].Err)))
			require.NoError(t, r.Wait(context.Background()))
			assert.ErrorIs(t, rpc.Result().Err, context.DeadlineExceeded)
		})
	})
}

// TestAttemptTimeoutNodeTimeoutWins: an attempt's ctx ends at the earliest
// of its own bound and the node's Timeout; when the node's Timeout comes
// first, the node ends as a timeout, with a *NodeTimeoutError.
func TestAttemptTimeoutNodeTimeoutWins(t *testing.T) {
	for _, tt := range []struct {
		name      string
		timeout   time.Duration
		wantCalls int32
	}{
		{"shorter than one attempt", 30 * ms, 1},
		{"during the third attempt", 120 * ms, 3}, // attempts at 0, 50, 100 ms
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a := New()
				defer a.Close()
				var calls atomic.Int32
				rpc := NewWrapper("rpc", hangs(&calls, 100, 0), 0).Timeout(tt.timeout).Retry(RetryPolicy{Attempts: 5, AttemptTimeout: 50 * ms})
				start := time.Now()
				require.NoError(t, a.BeginWork(context.Background(), time.Minute, rpc))
				assert.Equal(t, tt.timeout, time.Since(start))
				assert.Equal(t, tt.wantCalls, calls.Load())
				res := rpc.Result()
				assert.Equal(t, ResultTimeout, res.State)
				assert.Equal(t, error(&NodeTimeoutError{ID: "rpc", Timeout: tt.timeout}), res.Err)
			})
		})
	}
}

// TestAttemptTimeoutGroupDeadlineWins: when the group deadline comes
// before an attempt's bound, the node ends as the deadline ends it.
func TestAttemptTimeoutGroupDeadlineWins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		var calls atomic.Int32
		rpc := NewWrapper("rpc", hangs(&calls, 100, 0), 0).Retry(RetryPolicy{Attempts: 5, AttemptTimeout: 50 * ms})
		start := time.Now()
		err := a.BeginWork(context.Background(), 80*ms, rpc)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, 80*ms, time.Since(start))
		assert.Equal(t, int32(2), calls.Load())
		res := rpc.Result()
		assert.Equal(t, ResultTimeout, res.State)
		assert.Equal(t, context.DeadlineExceeded, res.Err, "the deadline's cause, not an attempt's timeout")
	})
}

// TestAttemptTimeoutNotRetryable: Retryable sees the *AttemptTimeoutError
// and may refuse it.
func TestAttemptTimeoutNotRetryable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		var calls atomic.Int32
		var seen []error
		rpc := NewWrapper("rpc", hangs(&calls, 100, 0), 0).Retry(RetryPolicy{Attempts: 5, AttemptTimeout: 50 * ms, Retryable: func(err error) bool {
			seen = append(seen, err)
			var ate *AttemptTimeoutError
			return !errors.As(err, &ate)
		}})
		require.NoError(t, a.BeginWork(context.Background(), time.Minute, rpc))
		assert.Equal(t, int32(1), calls.Load())
		want := &AttemptTimeoutError{ID: "rpc", Attempt: 1, Timeout: 50 * ms}
		assert.Equal(t, []error{want}, seen)
		assert.Equal(t, WorkResult[int]{State: ResultException, Err: want}, rpc.Result())
	})
}

// TestAttemptTimeoutPanicStays: a worker that panics after its bound
// passed fails with the panic, which the default Retryable does not retry.
func TestAttemptTimeoutPanicStays(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		var calls atomic.Int32
		rpc := NewWrapper("rpc", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
			calls.Add(1)
			<-ctx.Done()
			panic("late")
		}), 0).Retry(RetryPolicy{Attempts: 3, AttemptTimeout: 50 * ms})
		require.NoError(t, a.BeginWork(context.Background(), time.Minute, rpc))
		assert.Equal(t, int32(1), calls.Load())
		var pe *PanicError
		require.ErrorAs(t, rpc.Result().Err, &pe)
		assert.Equal(t, "late", pe.Value)
	})
}

// ignoring returns a worker that ignores its ctx: attempts 1..n (counted
// in calls) sleep for d and then return a value, later ones return v at
// once. It records the most attempts that ever ran at once in most.
func ignoring(calls, running, most *atomic.Int32, n int32, d time.Duration, v int) WorkerFunc[int, int] {
	return func(context.Context, int, Wrappers) (int, error) {
		k := calls.Add(1)
		now := running.Add(1)
		defer running.Add(-1)
		for {
			m := most.Load()
			if now <= m || most.CompareAndSwap(m, now) {
				break
			}
		}
		if k <= n {
			time.Sleep(d)
			return 100 + int(k), nil // late: the attempt has failed
		}
		return v, nil
	}
}

// TestAttemptTimeoutWorkerIgnoringContext: the library cannot stop a
// worker that ignores its ctx. Its attempt fails with the
// *AttemptTimeoutError when it returns, whatever it returned; the next
// attempt starts only then, so attempts never overlap; the node's own
// Timeout still ends the node at once, and Close waits for the worker.
func TestAttemptTimeoutWorkerIgnoringContext(t *testing.T) {
	t.Run("retried once it returns", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var retryErrs []error
			a := New(WithHooks(&Hooks{OnNodeRetry: func(_ context.Context, ev NodeEvent) { retryErrs = append(retryErrs, ev.Err) }}))
			defer a.Close()
			var calls, running, most atomic.Int32
			rpc := NewWrapper("rpc", ignoring(&calls, &running, &most, 2, 200*ms, 7), 0).Retry(RetryPolicy{Attempts: 3, AttemptTimeout: 50 * ms})
			start := time.Now()
			require.NoError(t, a.BeginWork(context.Background(), time.Minute, rpc))
			assert.Equal(t, 400*ms, time.Since(start), "each retry waited for the late attempt to return")
			assert.Equal(t, WorkResult[int]{Value: 7, State: ResultSuccess}, rpc.Result())
			assert.Equal(t, int32(3), calls.Load())
			assert.Equal(t, int32(1), most.Load(), "attempts at once")
			assert.Equal(t, []error{
				&AttemptTimeoutError{ID: "rpc", Attempt: 1, Timeout: 50 * ms},
				&AttemptTimeoutError{ID: "rpc", Attempt: 2, Timeout: 50 * ms},
			}, retryErrs, "a value returned after the bound is dropped")
		})
	})
	t.Run("node timeout ends it, Close waits", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a := New()
			var calls, running, most atomic.Int32
			rpc := NewWrapper("rpc", ignoring(&calls, &running, &most, 100, 200*ms, 7), 0).Timeout(120 * ms).Retry(RetryPolicy{Attempts: 3, AttemptTimeout: 50 * ms})
			start := time.Now()
			require.NoError(t, a.BeginWork(context.Background(), time.Minute, rpc))
			assert.Equal(t, 120*ms, time.Since(start), "the node's Timeout ends it while the worker runs")
			assert.Equal(t, error(&NodeTimeoutError{ID: "rpc", Timeout: 120 * ms}), rpc.Result().Err)
			assert.Equal(t, int32(1), running.Load(), "the first attempt still runs")
			require.NoError(t, a.Close())
			assert.Equal(t, 200*ms, time.Since(start), "Close waited for the worker")
			assert.Equal(t, int32(0), running.Load())
			assert.Equal(t, int32(1), calls.Load(), "no attempt after the node ended")
			assert.Equal(t, int32(1), most.Load())
		})
	})
	t.Run("many runs, no overlap", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a := New(WithMaxWorkers(2))
			defer a.Close()
			var wg sync.WaitGroup
			for k := range 20 {
				wg.Go(func() {
					var calls, running, most atomic.Int32
					rpc := NewWrapper("rpc", ignoring(&calls, &running, &most, 3, time.Duration(k+1)*10*ms, k), 0).Retry(RetryPolicy{Attempts: 4, AttemptTimeout: 5 * ms, Backoff: ConstantBackoff(time.Duration(k%3) * ms)})
					assert.NoError(t, a.BeginWork(context.Background(), time.Minute, rpc))
					assert.Equal(t, WorkResult[int]{Value: k, State: ResultSuccess}, rpc.Result())
					assert.Equal(t, int32(1), most.Load(), "attempts at once")
				})
			}
			wg.Wait()
		})
	})
}

// TestAttemptTimeoutNegativeRejected: a negative AttemptTimeout is a bad
// rule, rejected before anything runs, on a graph node and a stream node.
func TestAttemptTimeoutNegativeRejected(t *testing.T) {
	a := newAsync(t)
	var calls atomic.Int32
	rpc := NewWrapper("rpc", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		calls.Add(1)
		return 0, nil
	}), 0).Retry(RetryPolicy{Attempts: 2, AttemptTimeout: -time.Second})
	err := a.BeginWork(context.Background(), 0, rpc)
	assert.ErrorIs(t, err, ErrBadRetry)
	var ge *GraphError
	assert.ErrorAs(t, err, &ge)
	_, err = Compile(rpc)
	assert.ErrorIs(t, err, ErrBadRetry, "Compile too")
	assert.Equal(t, int32(0), calls.Load())

	s := NewStream(0)
	n := s.AppendWith(func(_ context.Context, prev int) (int, error) {
		calls.Add(1)
		return prev, nil
	}, PolicyFail, StreamRetry(RetryPolicy{Attempts: 2, AttemptTimeout: -time.Second}))
	select {
	case <-n.Done():
	default:
		t.Fatal("the node did not end at once")
	}
	_, err = n.Wait()
	assert.ErrorIs(t, err, ErrBadRetry)
	assert.Equal(t, 0, n.Attempts())
}

// TestAttemptTimeoutStream: a stream node's attempts are bounded the same
// way, within Run's context.
func TestAttemptTimeoutStream(t *testing.T) {
	hang := func(calls *atomic.Int32, n int32, late bool) StreamFunc[int] {
		return func(ctx context.Context, prev int) (int, error) {
			if calls.Add(1) <= n {
				if late {
					time.Sleep(200 * ms) // ignores ctx
					return prev + 100, nil
				}
				<-ctx.Done()
				return 0, ctx.Err()
			}
			return prev + 10, nil
		}
	}
	inc := func(_ context.Context, prev int) (int, error) { return prev + 1, nil }
	runStream := func(t *testing.T, ctx context.Context, s *Stream[int]) error {
		t.Helper()
		errc := make(chan error, 1)
		go func() { errc <- s.Run(ctx) }()
		s.Close()
		return <-errc
	}
	t.Run("retried", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var calls atomic.Int32
			s := NewStream(1)
			node := s.AppendWith(hang(&calls, 1, false), PolicyFail,
				StreamRetry(RetryPolicy{Attempts: 3, AttemptTimeout: 50 * ms, Backoff: ConstantBackoff(10 * ms)}))
			next := s.Append(inc)
			start := time.Now()
			require.NoError(t, runStream(t, context.Background(), s))
			assert.Equal(t, 60*ms, time.Since(start))
			v, err := node.Wait()
			assert.NoError(t, err)
			assert.Equal(t, 11, v)
			assert.Equal(t, 2, node.Attempts())
			v, _ = next.Wait()
			assert.Equal(t, 12, v)
		})
	})
	t.Run("exhausted under continue", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var calls atomic.Int32
			s := NewStream(1)
			node := s.AppendWith(hang(&calls, 100, false), PolicyContinue,
				StreamRetry(RetryPolicy{Attempts: 2, AttemptTimeout: 50 * ms}))
			next := s.Append(inc)
			start := time.Now()
			require.NoError(t, runStream(t, context.Background(), s))
			assert.Equal(t, 100*ms, time.Since(start))
			v, err := node.Wait()
			assert.Equal(t, 0, v)
			assert.Equal(t, error(&AttemptTimeoutError{Attempt: 2, Timeout: 50 * ms}), err)
			assert.ErrorIs(t, err, context.DeadlineExceeded)
			v, _ = next.Wait()
			assert.Equal(t, 2, v, "the next node got the initial value")
		})
	})
	t.Run("ignoring ctx, no overlap", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var calls atomic.Int32
			s := NewStream(1)
			node := s.AppendWith(hang(&calls, 1, true), PolicyFail,
				StreamRetry(RetryPolicy{Attempts: 2, AttemptTimeout: 50 * ms}))
			start := time.Now()
			require.NoError(t, runStream(t, context.Background(), s))
			assert.Equal(t, 200*ms, time.Since(start), "the retry waited for the late call")
			v, err := node.Wait()
			assert.NoError(t, err)
			assert.Equal(t, 11, v, "the late value was dropped")
		})
	})
	t.Run("Run's context wins", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var calls atomic.Int32
			ctx, cancel := context.WithTimeout(context.Background(), 30*ms)
			defer cancel()
			s := NewStream(1)
			node := s.AppendWith(hang(&calls, 100, false), PolicyFail,
				StreamRetry(RetryPolicy{Attempts: 3, AttemptTimeout: 50 * ms}))
			err := runStream(t, ctx, s)
			assert.ErrorIs(t, err, context.DeadlineExceeded)
			_, err = node.Wait()
			var ate *AttemptTimeoutError
			assert.False(t, errors.As(err, &ate), "got %v, want the context's end", err)
			assert.Equal(t, int32(1), calls.Load())
		})
	})
}
