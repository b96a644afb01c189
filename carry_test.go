package asynctool

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Tests of the ends a claimed node carries (see carriedBit), from the
// reviews of that change.

// TestCustomOutThroughDuplicateEdges: a custom-join successor reached
// through duplicate edges still marks its upstream customOut (see
// Run.upstreamEndedFrom), single-use and compiled, and the run waits for
// the join past the deadline.
func TestCustomOutThroughDuplicateEdges(t *testing.T) {
	build := func(joinReturned *atomic.Bool) *WorkerWrapper[int, int] {
		up := NewWrapper("up", okWorker(), 0)
		NewWrapper("first", okWorker(), 0).Depend(up, true).Depend(up, true).
			Join(CustomJoin(func([]Upstream) Decision {
				time.Sleep(3 * time.Second)
				joinReturned.Store(true)
				return DecideRun
			}))
		NewWrapper("last", okWorker(), 0).Depend(up, true).Depend(up, true)
		// A flow node with another join kind next to it changes nothing.
		NewWrapper("any", okWorker(), 0).Depend(up, true).Join(AnySucceeded()).Timeout(time.Hour)
		return up
	}
	t.Run("single-use", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a := New()
			defer a.Close()
			var joinReturned atomic.Bool
			up := build(&joinReturned)
			t0 := time.Now()
			err := a.BeginWork(context.Background(), time.Second, up)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			assert.True(t, joinReturned.Load())
			assert.Equal(t, 3*time.Second, time.Since(t0))
			r := up.singleRun()
			assert.True(t, r.p.nodes[up.idx].customOut)
			assert.Len(t, r.p.out(up.idx), 3, "duplicate edges deduplicated")
			assert.Zero(t, r.remaining.Load())
		})
	})
	t.Run("plan", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a := New()
			defer a.Close()
			var joinReturned atomic.Bool
			p, err := Compile(build(&joinReturned))
			require.NoError(t, err)
			k, _ := p.p.lookup("up")
			assert.True(t, p.p.nodes[k].customOut)
			for run := range 3 {
				joinReturned.Store(false)
				t0 := time.Now()
				r, err := a.RunPlan(context.Background(), p, time.Second)
				require.ErrorIs(t, err, context.DeadlineExceeded, "run %d", run)
				assert.True(t, joinReturned.Load(), "run %d", run)
				assert.Equal(t, 3*time.Second, time.Since(t0), "run %d", run)
				assert.Zero(t, r.remaining.Load())
				r.Release()
			}
		})
	})
}

// goexitOnceDefaulter ends its goroutine from DefaultValue, once per run,
// on the goroutine that ran up (so from up's out-edge loop, after the
// run stopped), and counts the calls made after the claimed sibling was
// given up's end to carry (wl.carried true).
type goexitOnceDefaulter struct {
	fired   *atomic.Bool
	hit     *atomic.Int32
	r       *atomic.Pointer[Run]
	claimed *atomic.Int32
	gid     *atomic.Uint64 // the goroutine that ran up
}

func goid() uint64 {
	var buf [64]byte
	n := runtime.Stack(buf[:], false)
	var id uint64
	fmt.Sscanf(string(buf[:n]), "goroutine %d", &id)
	return id
}

func (g goexitOnceDefaulter) Action(context.Context, int, Wrappers) (int, error) { return 1, nil }
func (g goexitOnceDefaulter) DefaultValue() int {
	if goid() == g.gid.Load() && g.fired.CompareAndSwap(false, true) {
		if r := g.r.Load(); r != nil {
			w := r.nodes[g.claimed.Load()].state.Load()
			if w&carriedBit != 0 {
				g.hit.Add(1)
			}
		}
		runtime.Goexit()
	}
	return 0
}

// TestGoexitInDefaultValueAfterACarryingClaim: the run stops while up's
// goroutine is in its out-edge loop after claiming a sibling that carries
// up's end; a successor readied then is ended there, and its DefaultValue
// ends the goroutine. salvage must hand the carried flag on: each end is
// taken off exactly once and the run ends (the case happens on up's
// goroutine in most of the 60 runs).
//
// Nothing in up's out-edge loop runs user code before the run stops, so
// the Cancel must land in the loop from another goroutine running in
// parallel. With one P that can only happen if the loop is preempted, which
// a loop of a few milliseconds rarely is: under -race -cpu 1 the case was
// reached in 0 to 4 runs of 60, and the test failed on "no run reached the
// case". So the test runs with at least two Ps, and goes on past 60 runs
// (up to 300) until the case has been reached once, for a machine so loaded
// that the canceller's thread missed the loop 60 times.
func TestGoexitInDefaultValueAfterACarryingClaim(t *testing.T) {
	if n := runtime.GOMAXPROCS(0); n < 2 {
		runtime.GOMAXPROCS(2)
		defer runtime.GOMAXPROCS(n)
	}
	const fan = 4000
	const minRuns, maxRuns = 60, 300
	var hits atomic.Int32
	runs := 0
	for iter := 0; iter < minRuns || hits.Load() == 0 && iter < maxRuns; iter++ {
		runs++
		a := New()
		release := make(chan struct{})
		var gid atomic.Uint64
		up := NewWrapper("up", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			gid.Store(goid())
			<-release
			return 1, nil
		}), 0)
		var fired atomic.Bool
		var rp atomic.Pointer[Run]
		var claimed atomic.Int32
		d := goexitOnceDefaulter{fired: &fired, hit: &hits, r: &rp, claimed: &claimed, gid: &gid}
		for k := range fan {
			NewWrapper(fmt.Sprintf("s%d", k), Worker[int, int](d), 0).Depend(up, true)
		}
		r, err := a.Start(context.Background(), time.Minute, up)
		require.NoError(t, err)
		out := r.p.out(up.idx)
		c := out[len(out)-1].node // claimed: readied first (edges go last first)
		claimed.Store(c)
		rp.Store(r)
		go func() {
			close(release)
			for r.nodes[c].state.Load()&carriedBit == 0 {
				runtime.Gosched()
			}
			r.Cancel()
		}()
		requireEnds(t, r, "iter %d: the run did not end", iter)
		require.NoError(t, a.Close())
		require.Zero(t, r.remaining.Load(), "iter %d", iter)
		for k := range r.nodes {
			require.True(t, terminal(r.nodes[k].st()), "iter %d node %d", iter, k)
		}
	}
	t.Logf("Goexit in DefaultValue on up's goroutine after a carrying claim: %d of %d", hits.Load(), runs)
	assert.Positive(t, hits.Load(), "no run reached the case")
}

// TestTimedRunWritesNoReadyTimeAfterItsEnd: a report read when a timed
// run is done has every ready time. Had the node claimed from up carried
// up's end, the sweep could end it and complete the run while up's
// goroutine still readied (and timed) the rest of the fan: a review saw
// that in 2 to 9 runs of 300 with carrying in timed runs.
// Under the race detector it saw none in 100, so make test runs it
// without (the norace target).
func TestTimedRunWritesNoReadyTimeAfterItsEnd(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's slowdown hides the race this test looks for; make norace runs it")
	}
	const fan = 2000
	const runs = 300
	late := 0
	for iter := range runs {
		a := New(WithTimings(true))
		release := make(chan struct{})
		up := NewWrapper("up", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			<-release
			return 1, nil
		}), 0)
		for k := range fan {
			NewWrapper(fmt.Sprintf("s%d", k), okWorker(), 0).Depend(up, true)
		}
		r, err := a.Start(context.Background(), time.Minute, up)
		require.NoError(t, err)
		out := r.p.out(up.idx)
		c := out[len(out)-1].node
		go func() {
			close(release)
			for r.nodes[c].st() == sInit {
				runtime.Gosched()
			}
			r.Cancel()
		}()
		<-r.Done()
		snap := make([]int64, len(r.times))
		for k := range r.times {
			snap[k] = r.times[k].ready.Load()
		}
		require.NoError(t, a.Close())
		for k := range r.times {
			if r.times[k].ready.Load() != snap[k] {
				late++
				t.Logf("iter %d: node %d ready written after Done (%d -> %d), end %d", iter, k, snap[k], r.times[k].ready.Load(), r.times[k].end.Load())
				break
			}
		}
	}
	assert.Zero(t, late, "runs with a ready time written after Done, of %d", runs)
}

// TestCarriedEndsDoNotHoldTheRunPastItsDeadline: along a chain, each node
// that a goroutine claims carries the ends of the nodes before it off the
// run's remaining count (see carriedBit). A claimed node whose worker
// ignores its ctx must still let the run end at the deadline: the sweep
// that ends it takes the carried ends off with its own. Counting ends per
// goroutine instead (a dropped experiment) held the run until the worker
// returned.
func TestCarriedEndsDoNotHoldTheRunPastItsDeadline(t *testing.T) {
	const before = 10
	chain := func() (first, stuck *WorkerWrapper[int, int], all []*WorkerWrapper[int, int]) {
		prev := NewWrapper("c0", okWorker(), 0)
		first, all = prev, []*WorkerWrapper[int, int]{prev}
		for k := 1; k < before; k++ {
			prev = NewWrapper("c"+string(rune('0'+k)), okWorker(), 0).Depend(prev, true)
			all = append(all, prev)
		}
		stuck = NewWrapper("stuck", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			time.Sleep(5 * time.Second) // ignores its ctx
			return 1, nil
		}), 0).Depend(prev, true)
		NewWrapper("sink", okWorker(), 0).Depend(stuck, true)
		return first, stuck, all
	}
	t.Run("single-use", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a := New()
			defer a.Close()
			first, stuck, all := chain()
			t0 := time.Now()
			err := a.BeginWork(context.Background(), time.Second, first)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			assert.Equal(t, time.Second, time.Since(t0), "the run ended at its deadline")
			for _, w := range all {
				assert.Equal(t, ResultSuccess, w.Result().State, w.ID())
			}
			assert.Equal(t, ResultTimeout, stuck.Result().State)
			r := stuck.singleRun()
			assert.EqualValues(t, before, r.nodes[stuck.idx].carried(), "stuck carried the chain's ends")
			assert.Zero(t, r.remaining.Load())
			time.Sleep(5 * time.Second) // let the worker return before Close
		})
	})
	t.Run("plan", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a := New()
			defer a.Close()
			first, _, _ := chain()
			p, err := Compile(first)
			require.NoError(t, err)
			stuck, ok := p.p.lookup("stuck")
			require.True(t, ok)
			for run := range 5 { // the plan learns its nodes from the first runs
				t0 := time.Now()
				r, err := a.RunPlan(context.Background(), p, time.Second)
				require.ErrorIs(t, err, context.DeadlineExceeded, "run %d", run)
				assert.Equal(t, time.Second, time.Since(t0), "run %d ended at its deadline", run)
				assert.EqualValues(t, before, r.nodes[stuck].carried(), "run %d", run)
				assert.Zero(t, r.remaining.Load(), "run %d", run)
				r.Release()
				time.Sleep(5 * time.Second)
			}
		})
	})
}
