package asynctool

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSingleUseRunsLearnByID checks that graphs built afresh for every
// run learn, by node id, which nodes are quick, as plans do: a fan of 100
// nodes starts a helper per node while its ids are unknown, a few once
// sampled runs found them quick, and a helper per node again for new ids.
// It runs on fake time and takes the fewest helpers of three runs, as
// TestPlanLearnsWhichNodesBlock does, and for the same reasons.
func TestSingleUseRunsLearnByID(t *testing.T) {
	synctest.Test(t, singleUseRunsLearnByID)
}

func singleUseRunsLearnByID(t *testing.T) {
	var submits atomic.Int32
	a := newAsync(t, WithExecutor(ExecutorFunc(func(task func()) error {
		submits.Add(1)
		go task()
		return nil
	})))
	fan := func(prefix string, work func()) []Wrapper {
		w := WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { work(); return 0, nil })
		root, sink := NewWrapper(prefix+"root", w, 0), NewWrapper(prefix+"sink", w, 0)
		for k := range 100 {
			sink.Depend(NewWrapper(fmt.Sprint(prefix, k), w, 0).Depend(root, true), true)
		}
		return []Wrapper{root}
	}
	perRun := func(starts []Wrapper) int32 {
		submits.Store(0)
		require.NoError(t, a.BeginWork(context.Background(), time.Minute, starts...))
		return submits.Load()
	}
	quick := func() int32 { return perRun(fan("q", func() {})) }

	assert.GreaterOrEqual(t, quick(), int32(99), "first run: ids unknown, one helper each")
	for range 3 {
		quick() // the Async's first four runs are sampled
	}
	assert.Equal(t, int32(102), a.hist.size.Load(), "every id of the sampled runs is remembered")
	assert.Less(t, min(quick(), quick(), quick()), int32(30), "known quick ids: a few helpers, not one per node")
	assert.GreaterOrEqual(t, perRun(fan("s", func() { time.Sleep(100 * time.Microsecond) })), int32(99), "new ids: one helper each")
}

// TestHistoryIsBounded checks that anonymous nodes are not remembered and
// that an Async remembers at most maxHistory ids.
func TestHistoryIsBounded(t *testing.T) {
	a := newAsync(t)
	w := okWorker()
	anon := NewWrapper("", w, 0)
	NewWrapper("", w, 0).Depend(anon, true)
	require.NoError(t, a.BeginWork(context.Background(), time.Minute, anon)) // sampled
	assert.Zero(t, a.hist.size.Load(), "anonymous nodes have no history")

	first := NewWrapper("n0", w, 0)
	prev := first
	for k := 1; k < maxHistory+500; k++ {
		prev = NewWrapper(fmt.Sprint("n", k), w, 0).Depend(prev, true)
	}
	require.NoError(t, a.BeginWork(context.Background(), time.Minute, first)) // sampled
	assert.Equal(t, int32(maxHistory), a.hist.size.Load())
	n := 0
	a.hist.byID.Range(func(any, any) bool { n++; return true })
	assert.Equal(t, maxHistory, n)
}

// idsPlan compiles n nodes with ids prefix0 … prefix(n-1), each marked
// timed, quick or not.
func idsPlan(t testing.TB, prefix string, n int, quick bool) *plan {
	t.Helper()
	w := okWorker()
	ws := make([]Wrapper, n)
	for k := range ws {
		ws[k] = NewWrapper(fmt.Sprint(prefix, k), w, 0)
	}
	p, err := Compile(ws...)
	require.NoError(t, err)
	for k := range p.p.nodes {
		p.p.nodes[k].quick.Store(quick)
		p.p.nodes[k].known.Store(true)
	}
	return p.p
}

// TestHistoryShowsNoIDBeforeItsValue records quick ids while another
// goroutine recalls them: a recall finds an id remembered with the value
// its run timed, or not at all. Storing an id before its value (as the
// history did until session 37) let recalls find ids that quick runs had
// timed as not quick: under the race detector, within the first four
// rounds in each of four runs.
func TestHistoryShowsNoIDBeforeItsValue(t *testing.T) {
	for round := range 20 {
		var h history
		p := idsPlan(t, "x", 2000, true)
		probe := idsPlan(t, "x", 2000, false)
		var bad atomic.Int64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				for k := range probe.nodes {
					n := &probe.nodes[k]
					n.known.Store(false)
					h.recall(n)
					if n.known.Load() && !n.quick.Load() {
						bad.Add(1)
					}
				}
			}
		})
		h.record(p)
		close(stop)
		wg.Wait()
		require.Zero(t, bad.Load(), "round %d: recalls found an id without its value", round)
	}
}

// TestHistoryFollowsLaterTimings checks that an id remembers what it was
// last timed as.
func TestHistoryFollowsLaterTimings(t *testing.T) {
	var h history
	h.record(idsPlan(t, "a", 10, true))
	h.record(idsPlan(t, "a", 10, false)) // the same ids, now slow
	fresh := idsPlan(t, "a", 10, true)
	for k := range fresh.nodes {
		n := &fresh.nodes[k]
		n.known.Store(false)
		h.recall(n)
		assert.True(t, n.known.Load(), "%q is remembered", n.core.id)
		assert.False(t, n.quick.Load(), "%q was last timed slow", n.core.id)
	}
}

// TestHistoryCountsConcurrentRecordsOnce records overlapping ids from
// several goroutines at once, past maxHistory: each id is counted once,
// and the count stops at the bound.
func TestHistoryCountsConcurrentRecordsOnce(t *testing.T) {
	var h history
	var wg sync.WaitGroup
	for k := range 8 {
		p := idsPlan(t, fmt.Sprint("p", k%6, "-"), 700, true) // 6 × 700 = 4,200 ids
		wg.Go(func() { h.record(p) })
	}
	wg.Wait()
	assert.Equal(t, int32(maxHistory), h.size.Load())
	n := 0
	h.byID.Range(func(any, any) bool { n++; return true })
	assert.Equal(t, maxHistory, n)
}
