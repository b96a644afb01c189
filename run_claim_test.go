package asynctool

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRunWaitsForACustomJoinWhileItsClaimedSiblingEnds: a custom join is
// part of its upstream's end, which the run waits for (see CustomJoin),
// also past the deadline. up's goroutine claims last before it asks
// first's join, and unclaims it to do so; last is then ended by someone
// else, the sweep at the deadline or another goroutine's short-circuit
// here. Had last carried up's end (see carriedBit), the run would have
// ended with the join still running.
func TestRunWaitsForACustomJoinWhileItsClaimedSiblingEnds(t *testing.T) {
	t.Run("deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a := New()
			defer a.Close()
			var joinReturned atomic.Bool
			up := NewWrapper("up", okWorker(), 0)
			NewWrapper("first", okWorker(), 0).Depend(up, true).
				Join(CustomJoin(func([]Upstream) Decision {
					time.Sleep(3 * time.Second)
					joinReturned.Store(true)
					return DecideRun
				}))
			NewWrapper("last", okWorker(), 0).Depend(up, true)
			t0 := time.Now()
			err := a.BeginWork(context.Background(), time.Second, up)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			assert.True(t, joinReturned.Load(), "the run ended while up's custom join was still running")
			assert.Equal(t, 3*time.Second, time.Since(t0))
		})
	})
	t.Run("short-circuit", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a := New()
			defer a.Close()
			var joinReturned atomic.Bool
			entered := make(chan struct{})
			up := NewWrapper("up", okWorker(), 0)
			x := NewWrapper("x", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
				<-entered
				return 1, nil
			}), 0)
			s2 := NewWrapper("s2", okWorker(), 0).Depend(up, true).
				Join(CustomJoin(func([]Upstream) Decision {
					close(entered)
					time.Sleep(3 * time.Second)
					joinReturned.Store(true)
					return DecideRun
				}))
			s := NewWrapper("s", okWorker(), 0).Depend(up, true)
			NewWrapper("t", okWorker(), 0).Depend(s, false).Depend(s2, false).Depend(x, false)
			t0 := time.Now()
			require.NoError(t, a.BeginWork(context.Background(), time.Minute, up, x))
			assert.True(t, joinReturned.Load(), "the run ended while up's custom join was still running")
			assert.Equal(t, 3*time.Second, time.Since(t0))
			assert.ErrorIs(t, s.Result().Err, ErrSkipped, "s was ended by x's goroutine while the join ran")
		})
	})
}

// TestClaimedNodeStoppedBeforeItStarted: a goroutine that readies a node
// claims it to run next, but hands it back before user code runs ahead of
// it. Here the node's readying skips an optional upstream whose Result
// callback, or whose worker's DefaultValue (which ending it calls), runs
// past the group deadline; the sweep then ends the node before its worker
// started, and its report must say so, as for any node that waited for a
// goroutine.
func TestClaimedNodeStoppedBeforeItStarted(t *testing.T) {
	for _, via := range []string{"Result callback", "DefaultValue"} {
		t.Run(via, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a := New()
				defer a.Close()
				var ran atomic.Bool
				up := NewWrapper("up", okWorker(), 0)
				slow := NewWrapper("slow", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
					<-ctx.Done()
					return 0, ctx.Err()
				}), 0)
				var skipped *WorkerWrapper[int, int]
				if via == "DefaultValue" {
					skipped = NewWrapper[int, int]("skipped", sleepingDefault{}, 0)
				} else {
					skipped = NewWrapper("skipped", okWorker(), 0).
						Callback(ResultFunc[int, int](func(bool, int, WorkResult[int]) { time.Sleep(2 * time.Second) }))
				}
				skipped.Depend(slow, true)
				claimed := NewWrapper("claimed", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
					ran.Store(true)
					return 1, nil
				}), 0).Depend(up, true).Depend(skipped, false)
				r, err := a.Start(context.Background(), time.Second, up, slow)
				require.NoError(t, err)
				require.ErrorIs(t, r.Wait(context.Background()), context.DeadlineExceeded)
				assert.ErrorIs(t, skipped.Result().Err, ErrSkipped)
				assert.False(t, ran.Load())
				assert.Equal(t, ResultTimeout, claimed.Result().State)
				assertNotStarted(t, r, "claimed")
			})
		})
	}
}

// sleepingDefault is a worker whose DefaultValue takes two seconds.
type sleepingDefault struct{}

func (sleepingDefault) Action(context.Context, int, Wrappers) (int, error) { return 1, nil }
func (sleepingDefault) DefaultValue() int                                  { time.Sleep(2 * time.Second); return 0 }

// TestClaimedNodeCanBeSkipped: the node a goroutine claims (see
// worklist.claim) is still skipped by the short-circuit rule when the
// same goroutine then finds that no successor needs it. p's edges are
// looked at last first, so x is claimed before y's trigger releases it.
func TestClaimedNodeCanBeSkipped(t *testing.T) {
	a := newAsync(t)
	var xRan atomic.Bool
	p := NewWrapper("p", okWorker(), 0)
	y := NewWrapper("y", okWorker(), 0)
	x := NewWrapper("x", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { xRan.Store(true); return 1, nil }), 0)
	y.Depend(p, true)  // p's edge 0
	x.Depend(p, true)  // p's edge 1: looked at first, claimed
	y.Depend(x, false) // y's trigger releases x, which nothing needs any more
	require.NoError(t, a.BeginWork(context.Background(), 10*time.Second, p))
	assert.ErrorIs(t, x.Result().Err, ErrSkipped)
	assert.False(t, xRan.Load())
	assert.Equal(t, ResultSuccess, y.Result().State)
}

// TestClaimNotHeldAcrossAnInlineHelper: an executor of the user's may run
// a helper on the goroutine that shares work, which is user code ahead of
// the node that goroutine claimed. Here the helper runs past the
// deadline: the claimed node must not start after it, and its report
// must say it never started.
func TestClaimNotHeldAcrossAnInlineHelper(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New(WithExecutor(ExecutorFunc(func(task func()) error { task(); return nil })))
		defer a.Close()
		var bRan atomic.Bool
		up := NewWrapper("up", okWorker(), 0)
		NewWrapper("a", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
			<-ctx.Done()
			return 0, ctx.Err()
		}), 0).Depend(up, true)
		NewWrapper("b", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			bRan.Store(true)
			return 1, nil
		}), 0).Depend(up, true)
		r, err := a.Start(context.Background(), time.Second, up)
		require.NoError(t, err)
		require.ErrorIs(t, r.Wait(context.Background()), context.DeadlineExceeded)
		assert.False(t, bRan.Load())
		assertNotStarted(t, r, "b")
	})
}

// assertNotStarted checks that r's report says node id never started.
func assertNotStarted(t *testing.T, r *Run, id string) {
	t.Helper()
	for _, n := range r.Report().Nodes {
		if n.ID == id {
			assert.False(t, n.Ran, id)
			assert.Equal(t, 0, n.Attempts, id)
			assert.Contains(t, n.Reason, "stopped before it started", id)
			return
		}
	}
	t.Errorf("no node %q in the report", id)
}
