package asynctool

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A custom join in a sub-run, asked on a goroutine of the sub-run (not
// its sweep), that calls Report of the outer run once the node that runs
// the sub-run has ended by its Timeout: Report waits for
// the sub-run's sweep, and the sweep, ending the join's other upstream,
// had to ask the same join, whose lock the caller held. Report hung for good
// (Report's doc named the case). The sweep now hands its ask to the
// goroutine in the join, which asks again once its call returns.
//
// The sweep must reach the join only after Report began to wait (had it
// reached it first, its mark on the run, sweepCall, tells Report not to
// wait): it first ends the many successors of b, which come before u in
// its order. u and b ignore their context, so that the sweep ends them.
// On a real clock: a sync.Mutex is no durable block, so synctest does
// not see the deadlock.
func TestReportFromACustomJoinOffTheSweep(t *testing.T) {
	const fan = 50000
	for _, budget := range []bool{false, true} {
		t.Run("budget="+strconv.FormatBool(budget), func(t *testing.T) {
			a := New()
			gate := make(chan struct{})
			runs := make(chan *Run, 1)
			reported := make(chan *Report, 1)
			var calls atomic.Int32
			var offSweep atomic.Bool // the first call was on v's goroutine
			var subCtx atomic.Pointer[context.Context]
			var x *WorkerWrapper[int, int]
			join := CustomJoin(func(ups []Upstream) Decision {
				if calls.Add(1) == 1 {
					// The first call, for v, on v's goroutine: once the
					// sub-run is stopping and x has ended, Report. (On a
					// slow machine x's Timeout may pass before any item
					// starts: the sweep then ends v and asks the join.)
					if p := subCtx.Load(); p != nil {
						offSweep.Store(true)
						<-(*p).Done()
						for x.State() == StateWorking {
							runtime.Gosched()
						}
					}
					r := <-runs
					reported <- r.Report()
				}
				for _, u := range ups {
					if !u.Ended {
						return DecideWait
					}
				}
				return DecideRun
			})
			blocked := WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
				<-gate // ignores its ctx: only the sweep ends it
				return 0, nil
			})
			quick := WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
				subCtx.Store(&ctx)
				return 0, nil
			})
			// Starts b, v0, a; in the sweep's order: b, v0, a, c0...,
			// v, u, s. Made before x starts, as its Timeout runs.
			b := NewWrapper("b", blocked, 0)
			for k := range fan {
				NewWrapper(fmt.Sprint("c", k), quick, 0).Depend(b, true)
			}
			v0 := NewWrapper("v0", quick, 0)
			a0 := NewWrapper("a", quick, 0)
			v := NewWrapper("v", quick, 0).Depend(v0, true)
			u := NewWrapper("u", blocked, 0).Depend(a0, true)
			NewWrapper("s", quick, 0).Depend(v, true).Depend(u, true).Join(join)
			g := Built[int]{Starts: []Wrapper{b, v0, a0}, Output: func() (int, error) { return 0, nil }}
			if budget {
				g.budget = time.Hour
			}
			x = NewWrapper("x", SubGraph[int, int]{Build: func(context.Context, int, Wrappers) (Built[int], error) {
				return g, nil
			}}, 0).Timeout(300 * time.Millisecond)
			run, err := a.Start(context.Background(), time.Minute, x)
			require.NoError(t, err)
			runs <- run
			select {
			case rep := <-reported:
				sub := subNode(t, rep, "x").Sub
				require.NotNil(t, sub)
				for _, n := range sub.Nodes {
					if n.ID == "u" && offSweep.Load() || n.ID == "b" {
						assert.Equal(t, StatusTimedOut, n.Status, "%s, which the sweep ended", n.ID)
					}
				}
			case <-time.After(10 * time.Second):
				buf := make([]byte, 1<<20)
				buf = buf[:runtime.Stack(buf, true)]
				t.Fatalf("Report from the custom join did not return in 10s (hung); %d bytes of stacks:\n%s", len(buf), buf[:min(len(buf), 20000)])
			}
			close(gate)
			_ = run.Wait(context.Background())
			require.NoError(t, a.Close())
			if budget && offSweep.Load() {
				// The sweep leaves s to its join (see stop): the ask
				// for u's end, which the sweep left to v's goroutine,
				// was made once the first call returned.
				assert.Equal(t, int32(2), calls.Load(), "calls of s's join")
			}
		})
	}
}

// A join whose call ends its goroutine (runtime.Goexit) while the sweep
// left it an ask: the goroutine takes up no asks, and the node, which
// under a Budget the sweep leaves to its join, is failed by the salvage
// of the goroutine as a join that did not return, so the sub-run still
// ends (it waits for every node) and Close returns.
func TestCustomJoinThatEndsItsGoroutineWithAnAskLeft(t *testing.T) {
	a := New()
	gate := make(chan struct{})
	var subCtx atomic.Pointer[context.Context]
	var x, s *WorkerWrapper[int, int]
	var calls atomic.Int32
	uStarted := make(chan struct{})
	firstDone := make(chan struct{}) // the first call has ended its goroutine
	var offSweep atomic.Bool         // the first call was on v's goroutine
	join := CustomJoin(func(ups []Upstream) Decision {
		if calls.Add(1) == 1 {
			defer close(firstDone)
			if p := subCtx.Load(); p != nil { // else x's Timeout passed first
				offSweep.Store(true)
				select {
				case <-uStarted: // so that only the sweep ends u
				case <-(*p).Done():
					offSweep.Store(false) // u may end on its goroutine
				}
				<-(*p).Done()
				for x.State() == StateWorking {
					time.Sleep(time.Millisecond)
				}
				// The sweep ends u meanwhile, and leaves its ask here.
				sub := s.singleRun()
				for k := 0; k < 5000 && sub.exts[s.idx].nasks.Load() == 0; k++ {
					time.Sleep(time.Millisecond)
				}
			}
			runtime.Goexit()
		}
		return DecideWait
	})
	blocked := WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		close(uStarted)
		<-gate
		return 0, nil
	})
	quick := WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
		subCtx.Store(&ctx)
		return 0, nil
	})
	v := NewWrapper("v", quick, 0)
	u := NewWrapper("u", blocked, 0)
	s = NewWrapper("s", quick, 0).Depend(v, true).Depend(u, true).Join(join)
	g := Built[int]{Starts: []Wrapper{v, u}, Output: func() (int, error) { return 0, nil }, budget: time.Hour}
	x = NewWrapper("x", SubGraph[int, int]{Build: func(context.Context, int, Wrappers) (Built[int], error) {
		return g, nil
	}}, 0).Timeout(50 * time.Millisecond)
	run, err := a.Start(context.Background(), time.Minute, x)
	require.NoError(t, err)
	_ = run.Wait(context.Background())
	select {
	case <-firstDone: // u's worker returns only then: else it could end u first
	case <-time.After(10 * time.Second):
		t.Fatal("the join's first call did not end in 10s")
	}
	close(gate)
	closed := make(chan error, 1)
	go func() { closed <- a.Close() }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return in 10s: the sub-run never ended")
	}
	assert.Equal(t, StateError, s.State(), "s, its join's goroutine ended")
	if sub := s.singleRun(); offSweep.Load() && assert.NotNil(t, sub) {
		assert.Equal(t, int32(1), sub.exts[s.idx].nasks.Load(), "the ask the sweep left (for u's end), never taken up")
	}
}
