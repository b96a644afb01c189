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

// replica is a worker whose n-th call (from 1) takes took[n-1] and then
// returns fails[n-1] or, when that is nil, 100+n; it records its calls,
// and which of them saw their context cancelled.
type replica struct {
	took      []time.Duration
	fails     []error
	mu        sync.Mutex
	calls     int
	cancelled []int
}

func (r *replica) Action(ctx context.Context, _ int, _ Wrappers) (int, error) {
	r.mu.Lock()
	r.calls++
	n := r.calls
	r.mu.Unlock()
	d, err := r.took[n-1], error(nil)
	if n <= len(r.fails) {
		err = r.fails[n-1]
	}
	select {
	case <-time.After(d):
	case <-ctx.Done():
		r.mu.Lock()
		r.cancelled = append(r.cancelled, n)
		r.mu.Unlock()
		return 0, ctx.Err()
	}
	if err != nil {
		return 0, err
	}
	return 100 + n, nil
}

// TestHedgedSlowFirstCall checks the point of hedging: the first call is
// slow, the second, started after the delay, answers first; the first is
// cancelled, and the worker returns at the second's answer, not the
// first's.
func TestHedgedSlowFirstCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &replica{took: []time.Duration{time.Second, 5 * time.Millisecond}}
		start := time.Now()
		v, err := Hedged[int, int](r, 10*time.Millisecond, 3).Action(context.Background(), 0, Wrappers{})
		require.NoError(t, err)
		assert.Equal(t, 102, v)
		assert.Equal(t, 15*time.Millisecond, time.Since(start))
		assert.Equal(t, 2, r.calls, "a third call after 20ms is not needed")
		assert.Equal(t, []int{1}, r.cancelled)
	})
}

// TestHedgedFastFirstCall checks that a call answering within the delay
// is the only one.
func TestHedgedFastFirstCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &replica{took: []time.Duration{9 * time.Millisecond}}
		v, err := Hedged[int, int](r, 10*time.Millisecond, 3).Action(context.Background(), 0, Wrappers{})
		require.NoError(t, err)
		assert.Equal(t, 101, v)
		assert.Equal(t, 1, r.calls)
	})
}

// TestHedgedFailureStartsTheNextCall checks that a failed call starts the
// next one at once, not after the delay, and that when every call failed
// the errors are joined in the order they came.
func TestHedgedFailureStartsTheNextCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e1, e2, e3 := errors.New("e1"), errors.New("e2"), errors.New("e3")
		r := &replica{took: []time.Duration{time.Millisecond, 2 * time.Millisecond, 3 * time.Millisecond}, fails: []error{e1, e2, e3}}
		start := time.Now()
		_, err := Hedged[int, int](r, time.Hour, 3).Action(context.Background(), 0, Wrappers{})
		assert.Equal(t, 6*time.Millisecond, time.Since(start), "each failure started the next call at once")
		assert.Equal(t, 3, r.calls)
		for _, e := range []error{e1, e2, e3} {
			assert.ErrorIs(t, err, e)
		}
		assert.Equal(t, "e1\ne2\ne3", err.Error())

		r = &replica{took: []time.Duration{time.Millisecond, time.Millisecond}, fails: []error{e1}}
		v, err := Hedged[int, int](r, time.Hour, 3).Action(context.Background(), 0, Wrappers{})
		require.NoError(t, err)
		assert.Equal(t, 102, v, "the retry after a failure succeeded")

		// After a failure, the next hedge is due delay after the call the
		// failure started, not when the first timer would have fired: call
		// 1 fails at 5ms and starts call 2, which answers at 13ms, before
		// the hedge due at 15ms (the first timer, due at 10ms, would have
		// started a third call).
		r = &replica{took: []time.Duration{5 * time.Millisecond, 8 * time.Millisecond, time.Hour}, fails: []error{e1}}
		v, err = Hedged[int, int](r, 10*time.Millisecond, 3).Action(context.Background(), 0, Wrappers{})
		require.NoError(t, err)
		assert.Equal(t, 102, v)
		assert.Equal(t, 2, r.calls, "the delay counts again from the call the failure started")
	})
}

// TestHedgedAttemptsBound checks that no more than attempts calls start,
// and that delay 0 starts them all at once.
func TestHedgedAttemptsBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &replica{took: []time.Duration{40 * time.Millisecond, 30 * time.Millisecond, 20 * time.Millisecond, time.Millisecond}}
		start := time.Now()
		v, err := Hedged[int, int](r, 0, 3).Action(context.Background(), 0, Wrappers{})
		require.NoError(t, err)
		assert.Equal(t, 103, v, "the three calls started together; the third answered first")
		assert.Equal(t, 20*time.Millisecond, time.Since(start))
		assert.Equal(t, 3, r.calls)
		assert.ElementsMatch(t, []int{1, 2}, r.cancelled)
	})
}

// TestHedgedPanicAndGoexit checks that a call that panics or calls
// runtime.Goexit is a failed call, which neither crashes the process nor
// hangs the worker, and that another call can still succeed.
func TestHedgedPanicAndGoexit(t *testing.T) {
	for _, how := range []string{"panic", "goexit"} {
		t.Run(how, func(t *testing.T) {
			var calls atomic.Int32
			w := WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
				if calls.Add(1) == 1 {
					if how == "panic" {
						panic("boom")
					}
					runtime.Goexit()
				}
				return 7, nil
			})
			v, err := Hedged[int, int](w, time.Hour, 2).Action(context.Background(), 0, Wrappers{})
			require.NoError(t, err)
			assert.Equal(t, 7, v)

			calls.Store(-10) // every call fails now
			_, err = Hedged[int, int](WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
				if how == "panic" {
					panic("boom")
				}
				runtime.Goexit()
				return 0, nil
			}), time.Hour, 2).Action(context.Background(), 0, Wrappers{})
			if how == "panic" {
				var pe *PanicError
				require.ErrorAs(t, err, &pe)
				assert.Equal(t, "boom", pe.Value)
			} else {
				assert.ErrorIs(t, err, ErrGoexit)
			}
		})
	}
}

// TestHedgedContextEnds checks that when the worker's context ends, no
// further call starts and the worker returns with the calls' errors.
func TestHedgedContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &replica{took: []time.Duration{time.Hour, time.Hour, time.Hour}}
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Millisecond)
		defer cancel()
		_, err := Hedged[int, int](r, 10*time.Millisecond, 3).Action(ctx, 0, Wrappers{})
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, 2, r.calls, "the call due at 20ms never started")
	})
}

type hedgeDefaulting struct{ WorkerFunc[int, int] }

func (hedgeDefaulting) DefaultValue() int { return -5 }

// TestHedgedInAGraph checks a hedged node in a run: it succeeds with the
// hedge's value, counts as one attempt, keeps its worker's default value,
// and Compile rejects bad hedges with the node named.
func TestHedgedInAGraph(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		r := &replica{took: []time.Duration{time.Second, 5 * time.Millisecond}}
		x := NewWrapper("x", Hedged[int, int](r, 10*time.Millisecond, 2), 0)
		run, err := a.Start(context.Background(), time.Minute, x)
		require.NoError(t, err)
		require.NoError(t, run.Wait(context.Background()))
		assert.Equal(t, WorkResult[int]{Value: 102, State: ResultSuccess}, x.Result())
		assert.Equal(t, 1, run.Report().Nodes[0].Attempts)

		failing := hedgeDefaulting{func(context.Context, int, Wrappers) (int, error) { return 0, errBoom }}
		y := NewWrapper("y", Hedged[int, int](failing, time.Millisecond, 2), 0)
		require.NoError(t, a.BeginWork(context.Background(), time.Minute, y))
		assert.Equal(t, -5, y.Result().Value, "the worker's Defaulter")
		assert.ErrorIs(t, y.Result().Err, errBoom)
	})
	for _, tc := range []struct {
		w      Worker[int, int]
		target error
		msg    string
	}{
		{Hedged[int, int](nil, time.Millisecond, 2), ErrNilWorker, `node "h": its Hedged worker has a nil worker`},
		{Hedged[int, int](WorkerFunc[int, int](nil), time.Millisecond, 2), ErrNilWorker, `node "h": its Hedged worker has a nil WorkerFunc`},
		{Hedged(okWorker(), time.Millisecond, 0), ErrBadRetry, `node "h": its Hedged worker has 0 attempts`},
		{Hedged(okWorker(), -time.Millisecond, 2), ErrBadRetry, `node "h": its Hedged worker has a negative delay (-1ms)`},
	} {
		t.Run(fmt.Sprint(tc.target), func(t *testing.T) {
			_, err := Compile(NewWrapper("h", tc.w, 0))
			require.ErrorIs(t, err, tc.target)
			assert.Contains(t, err.Error(), tc.msg)
			_, err = tc.w.Action(context.Background(), 0, Wrappers{})
			assert.ErrorIs(t, err, tc.target, "called directly, it says so too")
		})
	}
}

// TestHedgedUnboundedAttempts checks that a hedge whose attempts bound
// is only a ceiling (math.MaxInt: hedge until the deadline) works, and
// that the worker's memory does not grow with attempts: only the calls
// that started need room for their outcome.
func TestHedgedUnboundedAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &replica{took: []time.Duration{time.Hour, time.Hour, 5 * time.Millisecond}}
		v, err := Hedged[int, int](r, 10*time.Millisecond, math.MaxInt).Action(context.Background(), 0, Wrappers{})
		require.NoError(t, err)
		assert.Equal(t, 103, v)
		assert.Equal(t, 3, r.calls)
		assert.ElementsMatch(t, []int{1, 2}, r.cancelled)
	})

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	v, err := Hedged(okWorker(), time.Hour, 1<<20).Action(context.Background(), 0, Wrappers{})
	runtime.ReadMemStats(&after)
	require.NoError(t, err)
	assert.Equal(t, 1, v)
	assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(64<<10), "a call that answers at once costs no buffer for a million")
}

// TestHedgedNestedProblem checks that Compile sees a bad Hedged worker
// inside another Hedged, as it sees one at the top: the node could never
// succeed, and the doc promises it is rejected before anything runs.
func TestHedgedNestedProblem(t *testing.T) {
	for _, tc := range []struct {
		inner  Worker[int, int]
		target error
		msg    string
	}{
		{Hedged[int, int](nil, time.Millisecond, 2), ErrNilWorker, "nil worker"},
		{Hedged[int, int](WorkerFunc[int, int](nil), time.Millisecond, 2), ErrNilWorker, "nil WorkerFunc"},
		{Hedged(okWorker(), time.Millisecond, 0), ErrBadRetry, "0 attempts"},
		{Hedged(okWorker(), -time.Millisecond, 2), ErrBadRetry, "negative delay"},
	} {
		_, err := Compile(NewWrapper("h", Hedged(tc.inner, time.Millisecond, 2), 0))
		require.ErrorIs(t, err, tc.target)
		assert.Contains(t, err.Error(), `node "h": `)
		assert.Contains(t, err.Error(), tc.msg)
	}
	_, err := Compile(NewWrapper("h", Hedged(Hedged(okWorker(), time.Millisecond, 2), 0, 3), 0))
	require.NoError(t, err, "a good hedge of a good hedge")
}

// TestHedgedNoCallAfterContextEnds checks that once the worker's
// context ended, the hedge timer starts no further call, also while the
// calls already running ignore the context: a call started then is an
// RPC sent after the caller gave up, and the worker would wait for it.
func TestHedgedNoCallAfterContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		deaf := WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			calls.Add(1)
			time.Sleep(30 * time.Millisecond) // ignores its context
			return 0, errBoom
		})
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := Hedged(deaf, 10*time.Millisecond, 3).Action(ctx, 0, Wrappers{})
		assert.ErrorIs(t, err, errBoom)
		assert.Equal(t, int32(2), calls.Load(), "the call due at 20ms, after the context ended at 15ms, never started")
		assert.Equal(t, 40*time.Millisecond, time.Since(start), "the second call, started at 10ms, returned at 40ms")
	})
}

// TestHedgedForEachReportShowsTheWinner: a Hedged ForEach whose first
// call wins, after the hedge started a second one, returns the first
// call's items, and its report should show the first call's sub-run. It
// shows the last one started (the documented rule for SubPlan, "each call
// of a Hedged worker is a sub-run of its own ... Report shows the last one
// started"): the loser's, cancelled, so the node "succeeded" with item 0's
// value while its Sub says item 0 "timed out (context canceled)".
func TestHedgedForEachReportShowsTheWinner(t *testing.T) {
	a := newAsync(t)
	var calls atomic.Int32
	fe := ForEach[int, int, int]{
		Items:  func(context.Context, int, Wrappers) ([]int, error) { return []int{int(calls.Add(1))}, nil },
		Worker: firstCallWins(10 * time.Millisecond),
	}
	each := NewWrapper("each", Hedged[int, []WorkResult[int]](fe, 5*time.Millisecond, 2), 0)
	run, err := a.Start(context.Background(), time.Minute, each)
	require.NoError(t, err)
	require.NoError(t, run.Wait(context.Background()))
	require.Equal(t, 1, each.Result().Value[0].Value, "the first call won")
	sub := subNode(t, run.Report(), "each").Sub
	require.NotNil(t, sub)
	assert.Equal(t, StatusSucceeded, sub.Nodes[0].Status, "the report shows the sub-run whose items the node returned:\n%v", sub)
}

// firstCallWins is the worker of an item whose param is the number of the
// hedged call that made it: call 1's returns 1 after first, the hedge's
// (call 2) only when cancelled.
func firstCallWins(first time.Duration) WorkerFunc[int, int] {
	return func(ctx context.Context, call int, _ Wrappers) (int, error) {
		d := first
		if call == 2 {
			d = time.Minute
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(d):
		}
		return call, nil
	}
}

// TestHedgedCallsRunPastThePoolBound pins what Hedged and WithMaxWorkers
// say: with more than one attempt, each call runs on a goroutine of its
// own, which WithMaxWorkers does not count, so three calls that each wait
// for the other two all meet under WithMaxWorkers(1), and so do the items
// of three calls of a hedged ForEach, each run on its call's goroutine.
func TestHedgedCallsRunPastThePoolBound(t *testing.T) {
	meet := func(n int32) Worker[int, int] {
		var in atomic.Int32
		all := make(chan struct{})
		return WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
			if in.Add(1) == n {
				close(all)
			}
			select {
			case <-all:
				return 1, nil
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		})
	}
	synctest.Test(t, func(t *testing.T) {
		a := New(WithMaxWorkers(1))
		defer a.Close()
		calls := NewWrapper("calls", Hedged(meet(3), 0, 3), 0)
		items := NewWrapper("items", Hedged[int, []WorkResult[int]](ForEach[int, int, int]{
			Items:  func(context.Context, int, Wrappers) ([]int, error) { return []int{0}, nil },
			Worker: meet(3),
		}, 0, 3), 0)
		require.NoError(t, a.BeginWork(context.Background(), time.Minute, calls, items))
		assert.Equal(t, ResultSuccess, calls.Result().State, "%v", calls.Result().Err)
		require.Equal(t, ResultSuccess, items.Result().State, "%v", items.Result().Err)
		assert.NoError(t, items.Result().Value[0].Err, "the winning call's item met the other calls' items")
	})
}

// TestHedgedOfHedgedReportShowsTheWinner checks that a Hedged worker
// whose calls are Hedged workers too shows, as its node's sub-run, the
// one whose value the node returned: the outer hedge's winning call's
// inner winner, even when the losing call's inner hedge also succeeds,
// later, as it is cancelled (here its Output ignores the cancel).
func TestHedgedOfHedgedReportShowsTheWinner(t *testing.T) {
	a := newAsync(t)
	type callKey struct{}
	var (
		inputs atomic.Int32
		mu     sync.Mutex
		ctxs   [3]context.Context    // by call, its SubPlan's context
		second = make(chan struct{}) // call 2's sub-run has ended
	)
	val := NewWrapper("val", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
		return ctx.Value(callKey{}).(int), nil
	}), 0)
	pl, err := Compile(val)
	require.NoError(t, err)
	sp := SubPlan[int, int]{
		Plan: pl,
		Input: func(ctx context.Context, _ int, _ Wrappers) (context.Context, error) {
			k := int(inputs.Add(1))
			mu.Lock()
			ctxs[k] = ctx
			mu.Unlock()
			return context.WithValue(ctx, callKey{}, k), nil
		},
		Output: func(sub *Run) (int, error) {
			v, err := val.ValueIn(sub)
			if v != 2 {
				<-second
				return v, err
			}
			close(second)
			mu.Lock()
			ctx := ctxs[2]
			mu.Unlock()
			<-ctx.Done() // the outer hedge took call 1's value
			return v, err
		},
	}
	node := NewWrapper("node", Hedged(Hedged[int, int](sp, time.Hour, 2), 0, 2), 0)
	run, err := a.Start(context.Background(), time.Minute, node)
	require.NoError(t, err)
	require.NoError(t, run.Wait(context.Background()))
	require.Equal(t, 1, node.Result().Value, "the call that ended first won")
	sub := subNode(t, run.Report(), "node").Sub
	require.NotNil(t, sub)
	assert.Equal(t, 1, sub.Nodes[0].Value, "the report shows the sub-run whose value the node returned:\n%v", sub)
}

// TestHedgedReportShowsTheWinningCallsLastSubRun checks that a Hedged
// worker whose call starts two sub-runs, a fallback's SubPlan after the
// first failed, shows the second as its node's sub-run, the one its
// value came from, as the worker does without Hedged.
func TestHedgedReportShowsTheWinningCallsLastSubRun(t *testing.T) {
	a := newAsync(t)
	plan := func(id string, v int, err error) SubPlan[int, int] {
		w := NewWrapper(id, WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return v, err }), 0)
		pl, cerr := Compile(w)
		require.NoError(t, cerr)
		return SubPlan[int, int]{Plan: pl, Output: w.ValueIn}
	}
	primary, backup := plan("primary", 0, errBoom), plan("backup", 2, nil)
	fallback := WorkerFunc[int, int](func(ctx context.Context, p int, all Wrappers) (int, error) {
		if v, err := primary.Action(ctx, p, all); err == nil {
			return v, nil
		}
		return backup.Action(ctx, p, all)
	})
	for name, w := range map[string]Worker[int, int]{"plain": fallback, "hedged": Hedged[int, int](fallback, time.Hour, 2)} {
		n := NewWrapper("n", w, 0)
		run, err := a.Start(context.Background(), time.Minute, n)
		require.NoError(t, err)
		require.NoError(t, run.Wait(context.Background()))
		require.Equal(t, 2, n.Result().Value, name)
		sub := subNode(t, run.Report(), "n").Sub
		require.NotNil(t, sub, name)
		assert.Equal(t, "backup", sub.Nodes[0].ID, "%s: the report shows the sub-run the value came from", name)
	}
}

// TestHedgedWinnerWithoutASubRunShowsNone: a Hedged call that wins
// without starting a sub-run (a cached answer) beside a call that
// started one (the slow SubPlan it hedges) left the node's report
// showing the losing call's cancelled sub-run, whose value the node did
// not return. The node shows no sub-run now, as the same worker shows
// none when its only call takes the cached path; nested in an outer
// Hedged too.
func TestHedgedWinnerWithoutASubRunShowsNone(t *testing.T) {
	for _, nested := range []bool{false, true} {
		t.Run(fmt.Sprint("nested=", nested), func(t *testing.T) {
			a := newAsync(t)
			started := make(chan struct{})
			slow := NewWrapper("slow", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
				close(started)
				<-ctx.Done() // cancelled once the cached call has won
				return 0, ctx.Err()
			}), 0)
			pl, err := Compile(slow)
			require.NoError(t, err)
			sp := SubPlan[int, int]{Plan: pl, Output: slow.ValueIn}
			var calls atomic.Int32
			w := WorkerFunc[int, int](func(ctx context.Context, p int, all Wrappers) (int, error) {
				if calls.Add(1) == 1 {
					return sp.Action(ctx, p, all)
				}
				<-started // the first call's sub-run is running
				return 7, nil
			})
			var hw Worker[int, int] = Hedged[int, int](w, 0, 2)
			if nested {
				hw = Hedged(Hedged[int, int](w, 0, 2), time.Hour, 2)
			}
			n := NewWrapper("n", hw, 0)
			run, err := a.Start(context.Background(), time.Minute, n)
			require.NoError(t, err)
			require.NoError(t, run.Wait(context.Background()))
			require.Equal(t, 7, n.Result().Value)
			assert.Nil(t, subNode(t, run.Report(), "n").Sub, "the value came from no sub-run")
		})
	}
}

// TestHedgedOfHedgedFailedInnerHedgeLeavesNoSubRunShown: in a Hedged of
// a Hedged, the outer hedge's second call is an inner hedge whose first
// call starts a sub-run that fails, and whose second fails at once, so
// that inner hedge fails; the outer hedge's first call then wins with a
// cached value. The node's value came from no sub-run, so its report
// shows none, not the failed inner hedge's sub-run, which the outer
// hedge must know was started though its call failed.
func TestHedgedOfHedgedFailedInnerHedgeLeavesNoSubRunShown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		bad := NewWrapper("bad", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			return 0, errBoom
		}), 0)
		pl, err := Compile(bad)
		require.NoError(t, err)
		sp := SubPlan[int, int]{Plan: pl, Output: bad.ValueIn}
		var calls atomic.Int32
		w := WorkerFunc[int, int](func(ctx context.Context, p int, all Wrappers) (int, error) {
			switch calls.Add(1) {
			case 1: // the outer hedge's first call, whose inner hedge starts no second
				time.Sleep(10 * time.Millisecond)
				return 7, nil
			case 2: // the outer hedge's second call (at 1ms), first inner call
				return sp.Action(ctx, p, all)
			}
			return 0, errBoom // its second inner call, started at its first's failure
		})
		n := NewWrapper("n", Hedged(Hedged[int, int](w, time.Hour, 2), time.Millisecond, 2), 0)
		run, err := a.Start(context.Background(), time.Minute, n)
		require.NoError(t, err)
		require.NoError(t, run.Wait(context.Background()))
		require.Equal(t, 7, n.ResultIn(run).Value)
		require.EqualValues(t, 3, calls.Load())
		assert.Nil(t, subNode(t, run.Report(), "n").Sub, "the value came from no sub-run")
	})
}
