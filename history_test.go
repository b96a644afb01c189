package asynctool

import (
	"context"
	"fmt"
	"strconv"
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
	assert.Equal(t, 102, a.hist.testSize(), "every id of the sampled runs is remembered")
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
	assert.Zero(t, a.hist.testSize(), "anonymous nodes have no history")

	first := NewWrapper("n0", w, 0)
	prev := first
	for k := 1; k < maxHistory+500; k++ {
		prev = NewWrapper(fmt.Sprint("n", k), w, 0).Depend(prev, true)
	}
	require.NoError(t, a.BeginWork(context.Background(), time.Minute, first)) // sampled
	assert.Equal(t, maxHistory, a.hist.testSize())
	a.hist.record(p1000(t, "late")) // a full history takes no more ids
	assert.Equal(t, maxHistory, a.hist.testSize())
	_, ok := a.hist.ids.Load().slot["late0"]
	assert.False(t, ok)
}

// p1000 compiles 1,000 nodes with ids prefix0 … prefix999, each marked
// timed, quick when its number is even.
func p1000(t *testing.T, prefix string) *plan {
	t.Helper()
	w := okWorker()
	ws := make([]Wrapper, 1000)
	for k := range ws {
		ws[k] = NewWrapper(fmt.Sprint(prefix, k), w, 0)
	}
	p, err := Compile(ws...)
	require.NoError(t, err)
	for k := range p.p.nodes {
		n := &p.p.nodes[k]
		num, err := strconv.Atoi(n.core.id[len(prefix):])
		require.NoError(t, err)
		n.quick.Store(num%2 == 0)
		n.known.Store(true)
	}
	return p.p
}

// TestHistoryLearnsFromConcurrentRuns records plans with overlapping ids
// from several goroutines at once, beside goroutines recalling them (the
// race detector checks the snapshot's publication), and checks that every
// id is remembered once, in a slot of its own, with what it timed.
func TestHistoryLearnsFromConcurrentRuns(t *testing.T) {
	var h history
	plans := []*plan{p1000(t, "a"), p1000(t, "b"), p1000(t, "a"), p1000(t, "c"), p1000(t, "b")}
	var wg sync.WaitGroup
	for _, p := range plans {
		wg.Go(func() { h.record(p) })
		wg.Go(func() {
			for k := range p.nodes {
				h.recall(&p.nodes[k]) // the same parity as recorded: no value changes
			}
		})
	}
	wg.Wait()
	x := h.ids.Load()
	require.NotNil(t, x)
	assert.Equal(t, 3000, len(x.slot), "ids a0…a999, b0…b999, c0…c999, once each")
	seen := make(map[int32]string, len(x.slot))
	for id, s := range x.slot {
		if s < 0 || int(s) >= len(x.slot) {
			t.Fatalf("slot %d of %q", s, id)
		}
		if other, ok := seen[s]; ok {
			t.Fatalf("slot %d held by %q and %q", s, other, id)
		}
		seen[s] = id
		num, err := strconv.Atoi(id[1:])
		require.NoError(t, err)
		assert.Equal(t, num%2 == 0, x.quick[s].Load(), "id %q", id)
	}
	fresh := p1000(t, "a")
	for k := range fresh.nodes {
		n := &fresh.nodes[k]
		want := n.learnedQuick()
		n.known.Store(false)
		n.quick.Store(false)
		h.recall(n)
		assert.Equal(t, want, n.learnedQuick(), "id %q", n.core.id)
	}
}

// testSize is the number of ids h remembers.
func (h *history) testSize() int {
	if x := h.ids.Load(); x != nil {
		return len(x.slot)
	}
	return 0
}
