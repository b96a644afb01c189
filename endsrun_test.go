package asynctool

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// endsSleeper is a worker that returns v after d, or ctx's cause.
func endsSleeper[R any](d time.Duration, v R) WorkerFunc[int, R] {
	return func(ctx context.Context, _ int, _ Wrappers) (R, error) {
		select {
		case <-time.After(d):
			return v, nil
		case <-ctx.Done():
			var zero R
			return zero, context.Cause(ctx)
		}
	}
}

// TestEndsRunReturnsWithThePage: the handler of helper-79's review. The
// page needs user and cart, and reads recs if it is there; recs is slow.
// With the page marked EndsRun, the run returns with the page, recs is
// stopped with its default, and BeginWork returns nil.
func TestEndsRunReturnsWithThePage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		user := NewWrapper("user", endsSleeper(10*time.Millisecond, "ada"), 0)
		cart := NewWrapper("cart", endsSleeper(20*time.Millisecond, 3), 0)
		var recsDone atomic.Bool
		recs := NewWrapper("recs", WorkerFunc[int, []string](func(ctx context.Context, _ int, _ Wrappers) ([]string, error) {
			defer recsDone.Store(true)
			<-ctx.Done()
			return nil, ctx.Err()
		}), 0).Default([]string{"bestsellers"}).ShortCircuit(false)
		var timeouts []string
		a2 := New(WithHooks(&Hooks{OnNodeTimeout: func(_ context.Context, ev NodeEvent) { timeouts = append(timeouts, ev.ID) }}))
		defer a2.Close()
		page := NewWrapper("page", WorkerFunc[int, string](func(_ context.Context, _ int, all Wrappers) (string, error) {
			u, _ := ResultOf[string](all, "user")
			return u.Value + " page", nil
		}), 0).Depend(user, true).Depend(cart, true).Depend(recs, false).EndsRun()

		start := time.Now()
		run, err := a2.Start(context.Background(), time.Second, user, cart, recs)
		require.NoError(t, err)
		require.NoError(t, run.Wait(context.Background()), "the run ended as designed")
		assert.Equal(t, 20*time.Millisecond, time.Since(start), "it returned with the page, not at the deadline")
		assert.Equal(t, WorkResult[string]{State: ResultSuccess, Value: "ada page"}, page.Result())
		r := recs.Result()
		assert.Equal(t, ResultTimeout, r.State)
		assert.Equal(t, []string{"bestsellers"}, r.Value)
		assert.ErrorIs(t, r.Err, ErrRunEnded)
		assert.EqualError(t, r.Err, `asynctool: the run ended with node "page"`)
		assert.Equal(t, []string{"recs"}, timeouts)
		rep := run.Report()
		assert.Nil(t, rep.RunErr)
		assert.Nil(t, subNode(t, rep, "page").Err)
		synctest.Wait()
		assert.True(t, recsDone.Load(), "the recs worker saw its context cancelled")
		for _, n := range rep.Nodes {
			if n.ID == "recs" {
				assert.Equal(t, StatusTimedOut, n.Status)
				assert.Equal(t, `stopped while running: asynctool: the run ended with node "page"`, n.Reason)
			}
		}
	})
}

// TestEndsRunWaitsForEveryMarkedNode: with two marked nodes, the run
// ends when the second ends, whatever its outcome; nodes after it and
// nodes not started are stopped.
func TestEndsRunWaitsForEveryMarkedNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		fast := NewWrapper("fast", endsSleeper(time.Millisecond, 1), 0).EndsRun()
		boom := errors.New("boom")
		slow := NewWrapper("slow", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			time.Sleep(5 * time.Millisecond)
			return 0, boom
		}), 0).EndsRun()
		other := NewWrapper("other", endsSleeper(time.Hour, 3), 0)
		after := NewWrapper("after", endsSleeper(0, 4), 0).Depend(slow, false)
		start := time.Now()
		require.NoError(t, a.BeginWork(context.Background(), time.Minute, fast, slow, other))
		assert.Equal(t, 5*time.Millisecond, time.Since(start))
		assert.Equal(t, ResultSuccess, fast.Result().State)
		assert.ErrorIs(t, slow.Result().Err, boom, "a failure of a marked node ends the run too")
		assert.ErrorIs(t, other.Result().Err, ErrRunEnded)
		assert.ErrorIs(t, after.Result().Err, ErrRunEnded, "a node after the last marked one is stopped with it")
	})
}

// TestEndsRunAfterTheDeadline: a marked node that ends as the deadline
// stops the run does not change how the others end.
func TestEndsRunAfterTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		page := NewWrapper("page", endsSleeper(time.Hour, 1), 0).EndsRun()
		other := NewWrapper("other", endsSleeper(time.Hour, 2), 0)
		err := a.BeginWork(context.Background(), 10*time.Millisecond, page, other)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.ErrorIs(t, other.Result().Err, context.DeadlineExceeded)
		assert.NotErrorIs(t, other.Result().Err, ErrRunEnded)
	})
}

// TestEndsRunOnAPlan: each run of a plan ends with its own marked node.
func TestEndsRunOnAPlan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		user := NewWrapper("user", endsSleeper(time.Millisecond, 7), 0)
		recs := NewWrapper("recs", endsSleeper(time.Hour, 1), 0).ShortCircuit(false)
		page := NewWrapper("page", endsSleeper(time.Millisecond, 8), 0).Depend(user, true).Depend(recs, false).EndsRun()
		pl, err := Compile(user, recs)
		require.NoError(t, err)
		for range 3 {
			start := time.Now()
			run, err := a.RunPlan(context.Background(), pl, time.Minute)
			require.NoError(t, err)
			assert.Equal(t, 2*time.Millisecond, time.Since(start))
			assert.Equal(t, 8, page.ResultIn(run).Value)
			assert.ErrorIs(t, recs.ResultIn(run).Err, ErrRunEnded)
			run.Release()
		}
	})
}

// TestEndsRunOnASkippedNode: a marked node that ends without running
// (not taken) counts as ended.
func TestEndsRunOnANodeNotTaken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		route := NewWrapper("route", endsSleeper(0, false), 0)
		branch := NewWrapper("branch", endsSleeper(0, 1), 0).Depend(route, true).
			Join(When("route", func(b bool) bool { return b })).EndsRun()
		slow := NewWrapper("slow", endsSleeper(time.Hour, 2), 0)
		require.NoError(t, a.BeginWork(context.Background(), time.Minute, route, slow))
		assert.ErrorIs(t, branch.Result().Err, ErrNotTaken)
		assert.ErrorIs(t, slow.Result().Err, ErrRunEnded)
	})
}

// TestEndsRunOnTheLastNode: a marked node that ends last stops nothing,
// so the run does not cancel its context early and wait for a sweep.
func TestEndsRunOnTheLastNode(t *testing.T) {
	a := New()
	defer a.Close()
	first := NewWrapper("first", endsSleeper(0, 1), 0)
	NewWrapper("last", endsSleeper(0, 2), 0).Depend(first, true).EndsRun()
	run, err := a.Start(context.Background(), time.Minute, first)
	require.NoError(t, err)
	require.NoError(t, run.Wait(context.Background()))
	assert.Nil(t, run.early.Load(), "no early end recorded: nothing was stopped, no sweep started")
}

// TestEndsRunInPictures: a node stopped by the run's end is drawn grey,
// "run ended", as a node not needed, not as a timeout.
func TestEndsRunInPictures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		slow := NewWrapper("slow", endsSleeper(time.Hour, 1), 0).ShortCircuit(false)
		user := NewWrapper("user", endsSleeper(time.Millisecond, 2), 0)
		NewWrapper("page", endsSleeper(0, 3), 0).Depend(user, true).Depend(slow, false).EndsRun()
		run, err := a.Start(context.Background(), time.Minute, slow, user)
		require.NoError(t, err)
		require.NoError(t, run.Wait(context.Background()))
		dot := run.Report().DOT()
		assert.Contains(t, dot, `label="slow\nrun ended`, dot)
		assert.Contains(t, dot, `fillcolor="#d9d9d9"`, dot)
		assert.NotContains(t, dot, `"#fdae61"`, "no node drawn as a timeout:\n%s", dot)
	})
}

// TestNilRunWait: Wait on a nil or zero Run is an error, not a panic or a
// hang.
func TestNilRunWait(t *testing.T) {
	var nilRun *Run
	assert.ErrorContains(t, nilRun.Wait(context.Background()), "nil or zero Run")
	assert.ErrorContains(t, (&Run{}).Wait(context.Background()), "nil or zero Run")
	assert.Nil(t, nilRun.Done())
}
