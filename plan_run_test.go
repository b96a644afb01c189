package asynctool

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type reqKey struct{}

// sumPlan builds x, y → z where each node reads the request number from
// the run's context.
func sumPlan(t testing.TB) (*Plan, *WorkerWrapper[int, int]) {
	read := func(ctx context.Context, k int, _ Wrappers) (int, error) {
		return ctx.Value(reqKey{}).(int) * k, nil
	}
	x := NewWrapper("x", WorkerFunc[int, int](read), 1)
	y := NewWrapper("y", WorkerFunc[int, int](read), 10)
	z := NewWrapper("z", WorkerFunc[int, int](func(ctx context.Context, _ int, all Wrappers) (int, error) {
		a, err := ResultOf[int](all, "x")
		if err != nil {
			return 0, err
		}
		b, err := ResultOf[int](all, "y")
		return a.Value + b.Value, err
	}), 0).Depend(x, true).Depend(y, true)
	pl, err := Compile(x, y)
	require.NoError(t, err)
	return pl, z
}

// TestPlanRunsManyTimesConcurrently runs one plan from many goroutines at
// once; each run sees its own context and results.
func TestPlanRunsManyTimesConcurrently(t *testing.T) {
	a := newAsync(t)
	pl, z := sumPlan(t)
	assert.Equal(t, 3, pl.Len())
	var wg sync.WaitGroup
	for g := range 1000 {
		wg.Go(func() {
			ctx := context.WithValue(context.Background(), reqKey{}, g)
			r, err := a.RunPlan(ctx, pl, time.Minute)
			if !assert.NoError(t, err) {
				return
			}
			assert.Equal(t, WorkResult[int]{Value: 11 * g, State: ResultSuccess}, z.ResultIn(r))
			r.Release()
		})
	}
	wg.Wait()
}

// TestPlanTemplateCannotRunAlone checks that compiled wrappers are
// reserved for the plan.
func TestPlanTemplateCannotRunAlone(t *testing.T) {
	a := newAsync(t)
	pl, z := sumPlan(t)
	_ = pl
	assert.ErrorIs(t, a.BeginWork(context.Background(), 0, z), ErrReused)
	_, err := Compile(z)
	assert.ErrorIs(t, err, ErrReused)
	assert.ErrorIs(t, z.Result().Err, ErrReused, "Result does not see plan runs")
	_, err = Compile()
	assert.ErrorIs(t, err, ErrNoStart)
}

// TestTemplateResultSaysToReadTheRun checks that Result on a compiled
// wrapper, after a run of its plan succeeded, does not pass for a node
// that has not ended yet (a zero WorkResult, which code moved from
// BeginWork to RunPlan would read as an empty success path): its Err
// says the node belongs to a plan and names ResultIn.
func TestTemplateResultSaysToReadTheRun(t *testing.T) {
	a := newAsync(t)
	pl, z := sumPlan(t)
	r, err := a.RunPlan(context.WithValue(t.Context(), reqKey{}, 2), pl, time.Minute)
	require.NoError(t, err)
	defer r.Release()
	require.Equal(t, WorkResult[int]{Value: 22, State: ResultSuccess}, z.ResultIn(r))
	res := z.Result()
	assert.Equal(t, ResultDefault, res.State)
	assert.Zero(t, res.Value)
	require.ErrorIs(t, res.Err, ErrReused)
	assert.EqualError(t, res.Err, `asynctool: wrapper already used in a run: node "z" belongs to a compiled Plan: read a run's result with ResultIn or ValueIn, or from a worker with ResultFrom`)
}

// TestResultInOtherRun checks that ResultIn ignores runs of other graphs.
func TestResultInOtherRun(t *testing.T) {
	a := newAsync(t)
	pl, z := sumPlan(t)
	w := NewWrapper("w", okWorker(), 0)
	r, err := a.Start(context.Background(), 0, w)
	require.NoError(t, err)
	require.NoError(t, r.Wait(context.Background()))
	assert.Equal(t, WorkResult[int]{}, z.ResultIn(r))
	assert.Equal(t, WorkResult[int]{}, z.ResultIn(nil))
	assert.Equal(t, WorkResult[int]{}, NewWrapper("free", okWorker(), 0).ResultIn(&Run{}), "a zero Run and a free wrapper")
	ctx := context.WithValue(context.Background(), reqKey{}, 1)
	r2, err := a.RunPlan(ctx, pl, 0)
	require.NoError(t, err)
	assert.Equal(t, WorkResult[int]{}, w.ResultIn(r2))
	r2.Release()
	r.Release() // no-op for single-use runs
	assert.Equal(t, ResultSuccess, w.Result().State)
}

// TestReleaseWaitsForLateWorker checks that a run whose worker outlived
// the deadline is recycled only after that worker returned: the next run
// of the plan must not see its late write.
func TestReleaseWaitsForLateWorker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		var calls atomic.Int32
		slow := NewWrapper("slow", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
			if calls.Add(1) == 1 {
				time.Sleep(time.Second) // ignores ctx
			}
			return 7, nil
		}), 0)
		pl, err := Compile(slow)
		require.NoError(t, err)

		r1, err := a.RunPlan(context.Background(), pl, time.Millisecond)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, ResultTimeout, slow.ResultIn(r1).State)
		r1.Release() // the late worker still holds the run

		r2, err := a.RunPlan(context.Background(), pl, time.Minute)
		require.NoError(t, err)
		assert.NotSame(t, r1, r2, "a run still referenced is not reused")
		assert.Equal(t, WorkResult[int]{Value: 7, State: ResultSuccess}, slow.ResultIn(r2))
		time.Sleep(2 * time.Second) // the late worker returns and drops its result
		assert.Equal(t, WorkResult[int]{Value: 7, State: ResultSuccess}, slow.ResultIn(r2))
		r2.Release()
	})
}

// TestPlanRerunAllocatesNothingPerNode guards issue 5's zero-allocation
// claim: running a compiled plan again allocates a small constant (the
// run's context and done channel), not per node.
func TestPlanRerunAllocatesNothingPerNode(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	a := newAsync(t, WithMaxWorkers(2))
	const n = 1000
	root := NewWrapper("root", okWorker(), 0)
	sink := NewWrapper("sink", okWorker(), 0)
	for range n - 2 {
		sink.Depend(NewWrapper("", okWorker(), 0).Depend(root, true), true)
	}
	pl, err := Compile(root)
	require.NoError(t, err)
	allocs := planRunAllocs(a, pl, 200)
	t.Logf("%.1f allocs per run of %d nodes = %.4f per node", allocs, n, allocs/n)
	assert.LessOrEqual(t, allocs/n, 0.05, "allocs per node")
}

// TestPlanLearnsWhichNodesBlock checks how many helper goroutines a fan of
// 100 nodes starts per run of a plan: about one per node while the plan
// does not know its nodes or knows they block, a few once sampled runs
// showed the nodes are quick.
//
// It runs on fake time, so that what the sampled runs time is the
// nodes' Actions and nothing else: on a real clock, a goroutine held back
// in a node (a loaded machine, a GC) made the node look slow. How many
// helpers quick nodes wake still depends on how fast the machine runs
// them (each helper wakes the next while nodes are queued), so the test
// takes the fewest of three runs: one helper per node would show in all
// three.
func TestPlanLearnsWhichNodesBlock(t *testing.T) {
	synctest.Test(t, planLearnsWhichNodesBlock)
}

func planLearnsWhichNodesBlock(t *testing.T) {
	fanPlan := func(work func()) *Plan {
		w := WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { work(); return 0, nil })
		root, sink := NewWrapper("root", w, 0), NewWrapper("sink", w, 0)
		for range 100 {
			sink.Depend(NewWrapper("", w, 0).Depend(root, true), true)
		}
		pl, err := Compile(root)
		require.NoError(t, err)
		return pl
	}
	var submits atomic.Int32
	a := newAsync(t, WithExecutor(ExecutorFunc(func(task func()) error {
		submits.Add(1)
		go task()
		return nil
	})))
	perRun := func(pl *Plan) int32 {
		submits.Store(0)
		r, err := a.RunPlan(context.Background(), pl, time.Minute)
		require.NoError(t, err)
		r.Release()
		return submits.Load()
	}

	quick := fanPlan(func() {})
	assert.GreaterOrEqual(t, perRun(quick), int32(99), "first run: nodes unknown, one helper each")
	for range 3 {
		perRun(quick) // sampled runs learn the nodes are quick
	}
	assert.Less(t, min(perRun(quick), perRun(quick), perRun(quick)), int32(30), "quick nodes: a few helpers, not one per node")

	slow := fanPlan(func() { time.Sleep(100 * time.Microsecond) })
	for range 5 {
		perRun(slow)
	}
	assert.GreaterOrEqual(t, perRun(slow), int32(99), "blocking nodes keep a helper each")
}

// A node the plan timed as quick may block in a later run (a cache miss,
// a lock). The quick nodes shared with it must not wait for it: each
// starts as soon as a goroutine is free, as if none of them blocked.
// Batched takes from the shared queue broke this twice (the second time
// in 0e1aefa: quick nodes started 20 ms late, behind the blocked node of
// their batch); batches are now lent (see Run.takeBatch), and with every
// third node blocking they also need the helpers to count lent nodes as
// queued.
func TestQuickNodeThatBlocksHoldsNoOtherNodeBack(t *testing.T) {
	for _, every := range []int{3, 10} {
		for _, n := range []int{50, 200, 1000} {
			t.Run(fmt.Sprintf("every=%d/n=%d", every, n), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) { quickNodesBlocking(t, every, n) })
			})
		}
	}
}

// quickNodesBlocking runs a 1 -> n fan learned quick, then with every
// every-th node sleeping, and checks that all the others start at once.
func quickNodesBlocking(t *testing.T, every, n int) {
	var block atomic.Bool
	var began time.Time
	var latest atomic.Int64
	w := WorkerFunc[int, int](func(_ context.Context, k int, _ Wrappers) (int, error) {
		if !block.Load() {
			return k, nil
		}
		if k%every == 1 {
			time.Sleep(20 * time.Millisecond)
			return k, nil
		}
		// The bubble's clock stands still until every goroutine in it
		// blocks: d is 0 unless this node waited for a sleeping one.
		d := int64(time.Since(began))
		for l := latest.Load(); d > l && !latest.CompareAndSwap(l, d); l = latest.Load() {
		}
		return k, nil
	})
	root := NewWrapper("root", w, -1)
	for k := range n {
		NewWrapper("", w, k).Depend(root, true)
	}
	pl, err := Compile(root)
	require.NoError(t, err)
	a := New()
	defer a.Close()
	for range 6 { // runs 1-4 are sampled: every node is learned quick
		r, err := a.RunPlan(context.Background(), pl, time.Minute)
		require.NoError(t, err)
		r.Release()
	}
	block.Store(true)
	for range 3 {
		latest.Store(0)
		began = time.Now()
		r, err := a.RunPlan(context.Background(), pl, time.Minute)
		require.NoError(t, err)
		r.Release()
		assert.Zero(t, time.Duration(latest.Load()), "a quick node waited for a blocked one")
	}
}

// TestRunTakesAPoolWorkerFreedAfterItWasRefusedOne runs a 1 -> 200 fan
// in which every third node sleeps 20 ms, on an Async of two workers
// whose other worker another run holds for the first 10 ms: the fan's
// helper is refused, and once the worker is free the run must take it.
// On one goroutine the fan needs 67 x 20 ms, past its 1 s deadline; on
// two about 680 ms. With learn, the plan has first timed every node as
// quick (one searching helper at a time); without it, each node may
// block (a helper each).
func TestRunTakesAPoolWorkerFreedAfterItWasRefusedOne(t *testing.T) {
	for _, learn := range []bool{false, true} {
		t.Run(fmt.Sprintf("learn=%v", learn), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { refusedHelperRetried(t, learn) })
		})
	}
}

func refusedHelperRetried(t *testing.T, learn bool) {
	var block atomic.Bool
	w := WorkerFunc[int, int](func(_ context.Context, k int, _ Wrappers) (int, error) {
		if block.Load() && k%3 == 1 {
			time.Sleep(20 * time.Millisecond)
		}
		return k, nil
	})
	root := NewWrapper("root", w, -1)
	for k := range 200 {
		NewWrapper("", w, k).Depend(root, true)
	}
	fan, err := Compile(root)
	require.NoError(t, err)
	a := New(WithMaxWorkers(2))
	defer a.Close()
	if learn {
		for range 6 { // runs 1-4 are sampled: every node is learned quick
			r, err := a.RunPlan(context.Background(), fan, time.Minute)
			require.NoError(t, err)
			r.Release()
		}
	}
	held := holdOneWorker(t, a, 10*time.Millisecond)
	block.Store(true)
	began := time.Now()
	r, err := a.RunPlan(context.Background(), fan, time.Second)
	require.NoError(t, err, "the fan ran on one goroutine")
	r.Release()
	assert.Less(t, time.Since(began), 800*time.Millisecond)
	require.NoError(t, <-held)
}

// TestRefusedRunGetsTheFreedWorkerWhileItsGoroutineIsBusy is the same
// situation when the run's only goroutine does not come back to the
// queue: it is inside a node that sleeps 500 ms, or running a chain of
// 50 nodes of 10 ms each through the nodes it makes ready. The quick
// nodes it shared must start when the other worker frees up, at 10 ms,
// not when the goroutine is done (found by review).
func TestRefusedRunGetsTheFreedWorkerWhileItsGoroutineIsBusy(t *testing.T) {
	for _, shape := range []string{"long", "chain"} {
		t.Run(shape, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { refusedRunBusy(t, shape) })
		})
	}
}

func refusedRunBusy(t *testing.T, shape string) {
	var began time.Time
	var latest atomic.Int64
	quick := WorkerFunc[int, int](func(_ context.Context, k int, _ Wrappers) (int, error) {
		d := int64(time.Since(began))
		for l := latest.Load(); d > l && !latest.CompareAndSwap(l, d); l = latest.Load() {
		}
		return k, nil
	})
	sleep := func(d time.Duration) Worker[int, int] {
		return WorkerFunc[int, int](func(_ context.Context, k int, _ Wrappers) (int, error) {
			time.Sleep(d)
			return k, nil
		})
	}
	root := NewWrapper("root", WorkerFunc[int, int](func(_ context.Context, k int, _ Wrappers) (int, error) {
		return k, nil
	}), 0)
	// The busy branch is the root's last successor: the one the root's
	// goroutine runs itself (see upstreamEndedFrom).
	busy := func(name string) {
		switch shape {
		case "long":
			NewWrapper(name, sleep(500*time.Millisecond), 0).Depend(root, true)
		case "chain":
			prev := NewWrapper(name, sleep(10*time.Millisecond), 0).Depend(root, true)
			for k := range 49 {
				prev = NewWrapper(fmt.Sprintf("%s%d", name, k), sleep(10*time.Millisecond), 0).Depend(prev, true)
			}
		}
	}
	for k := range 20 {
		NewWrapper(fmt.Sprintf("q%d", k), quick, k).Depend(root, true)
	}
	busy("last")
	pl, err := Compile(root)
	require.NoError(t, err)

	a := New(WithMaxWorkers(2))
	defer a.Close()
	// Run 1 knows no node; from run 2 the plan has learned the quick
	// nodes quick and the busy one slow (runs 1-4 are sampled).
	for run := range 5 {
		latest.Store(0)
		held := holdOneWorker(t, a, 10*time.Millisecond)
		began = time.Now()
		r, err := a.RunPlan(context.Background(), pl, time.Minute)
		require.NoError(t, err)
		r.Release()
		assert.LessOrEqual(t, time.Duration(latest.Load()), 10*time.Millisecond,
			"run %d: a quick node waited for the run's busy goroutine", run+1)
		require.NoError(t, <-held)
	}
}

// earlyStarts counts the nodes whose worker starts within 100 ms of
// began; each then takes 500 ms (a node that may block: never timed).
type earlyStarts struct {
	began time.Time
	early atomic.Int32
}

func (e *earlyStarts) worker() WorkerFunc[int, int] {
	return func(_ context.Context, k int, _ Wrappers) (int, error) {
		if time.Since(e.began) < 100*time.Millisecond {
			e.early.Add(1)
		}
		time.Sleep(500 * time.Millisecond)
		return k, nil
	}
}

// TestRefusedRunUsesEveryWorkerThatFreesUp: on an Async of three workers
// whose two others are held until 10 and 20 ms, a fan of ten nodes of
// 500 ms each (never timed) gets the first worker through the helper it
// queued when refused, and the second through the one that helper queues
// when it is refused in turn, before it runs a node that may block: three
// nodes start before 100 ms, not two (found by review).
func TestRefusedRunUsesEveryWorkerThatFreesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ec earlyStarts
		w := ec.worker()
		root := NewWrapper("root", WorkerFunc[int, int](func(_ context.Context, k int, _ Wrappers) (int, error) {
			return k, nil
		}), 0)
		for k := range 10 {
			NewWrapper(fmt.Sprintf("s%d", k), w, k).Depend(root, true)
		}
		pl, err := Compile(root)
		require.NoError(t, err)
		a := New(WithMaxWorkers(3))
		defer a.Close()
		h1 := holdOneWorker(t, a, 10*time.Millisecond)
		h2 := holdOneWorker(t, a, 20*time.Millisecond)
		ec.began = time.Now()
		r, err := a.RunPlan(context.Background(), pl, time.Minute)
		require.NoError(t, err)
		r.Release()
		require.NoError(t, <-h1)
		require.NoError(t, <-h2)
		assert.Equal(t, int32(3), ec.early.Load(), "nodes started before 100 ms")
	})
}

// TestQueuedHelperDoesNotDelaySuspended: a run refused a goroutine queues
// a helper on the pool, behind another run's task that takes 30 minutes;
// meanwhile the run's own goroutine runs every node and one suspends.
// Suspended reports the stall at once: the queued helper does not count
// as working on the run until it runs (found by review).
func TestQueuedHelperDoesNotDelaySuspended(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New(WithMaxWorkers(2))
		defer a.Close()
		proceed := make(chan struct{})
		root := NewWrapper("root", WorkerFunc[int, int](func(_ context.Context, k int, _ Wrappers) (int, error) {
			<-proceed
			return k, nil
		}), 0)
		NewWrapper("sus", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			return 0, errBoom
		}), 0).Depend(root, true).OnFailure(PolicySuspend)
		for _, id := range []string{"a", "b"} {
			NewWrapper(id, WorkerFunc[int, int](func(_ context.Context, k int, _ Wrappers) (int, error) {
				return k, nil
			}), 0).Depend(root, true)
		}
		pl, err := Compile(root)
		require.NoError(t, err)

		held := holdOneWorker(t, a, time.Hour)
		r, err := a.StartPlan(context.Background(), pl, 0)
		require.NoError(t, err)
		synctest.Wait() // the run's root has the other worker
		x, long := gatedPlan(t, "x")
		xr, err := a.StartPlan(context.Background(), x, 0) // queued: no worker free
		require.NoError(t, err)
		close(proceed)
		synctest.Wait()
		began := time.Now()
		go func() {
			time.Sleep(30 * time.Minute)
			close(long)
		}()
		<-r.Suspended()
		assert.Zero(t, time.Since(began), "the stalled run was reported late")
		r.Cancel()
		require.Error(t, r.Wait(context.Background()))
		r.Release()
		require.NoError(t, xr.Wait(context.Background()))
		xr.Release()
		require.NoError(t, <-held)
	})
}

// gatedPlan compiles a plan of one node, id, that returns once gate is
// closed.
func gatedPlan(t *testing.T, id string) (pl *Plan, gate chan struct{}) {
	t.Helper()
	gate = make(chan struct{})
	pl, err := Compile(NewWrapper(id, WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		<-gate
		return 0, nil
	}), 0))
	require.NoError(t, err)
	return pl, gate
}

// holdOneWorker runs a plan on a whose one node holds a worker for d,
// and returns once the node is running; the channel gets the run's error.
func holdOneWorker(t *testing.T, a *Async, d time.Duration) <-chan error {
	t.Helper()
	hold, gate := gatedPlan(t, "hold")
	held := make(chan error, 1)
	go func() {
		r, err := a.RunPlan(context.Background(), hold, 0)
		if err == nil {
			r.Release()
		}
		held <- err
	}()
	synctest.Wait() // hold's node has one of the workers
	go func() {
		time.Sleep(d)
		close(gate)
	}()
	return held
}

// TestGoexitInAQuickFan runs a fan of nodes the plan knows are quick (one
// searching helper at a time) and ends the goroutines running some of
// them with runtime.Goexit: those nodes fail with ErrGoexit and every
// other node still runs.
func TestGoexitInAQuickFan(t *testing.T) {
	var exit atomic.Bool
	w := WorkerFunc[int, int](func(_ context.Context, k int, _ Wrappers) (int, error) {
		if exit.Load() && k%50 == 7 {
			runtime.Goexit()
		}
		return k, nil
	})
	root := NewWrapper("root", w, -1)
	mids := make([]*WorkerWrapper[int, int], 400)
	for k := range mids {
		mids[k] = NewWrapper("", w, k).Depend(root, true)
	}
	pl, err := Compile(root)
	require.NoError(t, err)
	a := newAsync(t)
	for range 5 { // runs 1-4 are sampled
		r, err := a.RunPlan(context.Background(), pl, time.Minute)
		require.NoError(t, err)
		r.Release()
	}

	exit.Store(true)
	for range 20 {
		r, err := a.RunPlan(context.Background(), pl, time.Minute)
		require.NoError(t, err)
		for k, m := range mids {
			res := m.ResultIn(r)
			if k%50 == 7 {
				assert.ErrorIs(t, res.Err, ErrGoexit, "node %d", k)
			} else {
				assert.Equal(t, WorkResult[int]{Value: k, State: ResultSuccess}, res, "node %d", k)
			}
		}
		r.Release()
	}
}

// TestSingleUseRunAllocatesLittle guards the allocations of BeginWork on
// a freshly built graph, the build itself excluded: a fan of 100 nodes
// that each block for a moment, so that every one of them gets a helper
// goroutine of its own. The goroutines' worklists come from the Async, not
// from the single-use plan, which is new for every run (before, each
// helper allocated its worklist: about 3.6 allocations per node).
func TestSingleUseRunAllocatesLittle(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	a := newAsync(t)
	const n = 100
	w := WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		time.Sleep(100 * time.Microsecond)
		return 0, nil
	})
	ids := make([]string, n)
	for k := range ids {
		ids[k] = fmt.Sprint("mid", k)
	}
	build := func() *WorkerWrapper[int, int] {
		root, sink := NewWrapper("root", w, 0), NewWrapper("sink", w, 0)
		for _, id := range ids {
			sink.Depend(NewWrapper(id, w, 0).Depend(root, true), true)
		}
		return root
	}
	ctx := context.Background()
	for range 20 {
		require.NoError(t, a.BeginWork(ctx, time.Minute, build())) // warm the pools and the history
	}
	var before, after runtime.MemStats
	var total uint64
	const runs = 50
	for range runs {
		root := build()
		runtime.ReadMemStats(&before)
		require.NoError(t, a.BeginWork(ctx, time.Minute, root))
		runtime.ReadMemStats(&after)
		total += after.Mallocs - before.Mallocs
	}
	per := float64(total) / runs / (n + 2)
	t.Logf("%.2f allocs per node for BeginWork, the build excluded", per)
	assert.LessOrEqual(t, per, 1.0, "allocs per node")
}

// TestDiamondBeginWorkAllocatesFixedCost guards the fixed cost of a small
// single-use graph: what BeginWork allocates for a diamond (a → b, c → d)
// once the Async's pools are warm, the wrappers excluded. Most of it is
// the plan and the run's contexts: the deadline's, and the mark that
// tells a run started from inside a worker (see Run.dispatch); see docs/perf.md. The median over many
// runs is guarded: MemStats counts every goroutine's allocations, and a
// collection that empties the pools, or a pool worker that retires, adds
// a few to the odd run.
func TestDiamondBeginWorkAllocatesFixedCost(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	a := newAsync(t)
	w := WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 1, nil })
	build := func() *WorkerWrapper[int, int] {
		root := NewWrapper("a", w, 0)
		b, c := NewWrapper("b", w, 0).Depend(root, true), NewWrapper("c", w, 0).Depend(root, true)
		NewWrapper("d", w, 0).Depend(b, true).Depend(c, true)
		return root
	}
	ctx := context.Background()
	for range 20 {
		require.NoError(t, a.BeginWork(ctx, time.Minute, build())) // warm the pools
	}
	var before, after runtime.MemStats
	counts := make([]uint64, 201)
	for k := range counts {
		root := build()
		waitAllIdle(t, a.owned)
		runtime.ReadMemStats(&before)
		require.NoError(t, a.BeginWork(ctx, time.Minute, root))
		runtime.ReadMemStats(&after)
		counts[k] = after.Mallocs - before.Mallocs
	}
	slices.Sort(counts)
	median := counts[len(counts)/2]
	t.Logf("allocs per BeginWork of a diamond, the build excluded: median %d, lowest %d, highest %d", median, counts[0], counts[len(counts)-1])
	assert.LessOrEqual(t, median, uint64(18), "median allocs per BeginWork")
}

// waitAllIdle waits until every worker of p is idle. A worker that ran
// the last node of a run may not yet be back among the idle ones when the
// caller starts the next run, which then starts a new worker: on this
// VM, after some earlier tests, that happened on every run for a hundred
// runs in a row (4 or 5 more objects each; p.Stats() showed a new
// worker per run).
func waitAllIdle(t *testing.T, p *Pool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		p.mu.Lock()
		idle := len(p.idlers) == int(p.workers.Load())
		p.mu.Unlock()
		if idle {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the pool's workers did not all go idle")
		}
		runtime.Gosched()
	}
}

// The roots start in order even though helpers take later work from the
// front of the shared queue: a helper's first take is the next root.
// With a pool of two goroutines as the executor, the run's first task runs
// r0 and blocks in it until another root starts; the pool's other
// goroutine runs the first helper, which must start r1, not r5.
func TestRootsStartInOrderWithHelpers(t *testing.T) {
	e := NewPool(PoolSize(2)) // queues in submission order
	defer e.Close()
	a := New(WithExecutor(e))
	defer a.Close()
	var mu sync.Mutex
	var order []string
	otherStarted := make(chan struct{})
	var once sync.Once
	var starts []Wrapper
	for k := range 6 {
		id := fmt.Sprint("r", k)
		starts = append(starts, NewWrapper(id, WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
			mu.Lock()
			order = append(order, id)
			mu.Unlock()
			if id == "r0" {
				select {
				case <-otherStarted:
				case <-ctx.Done():
				}
			} else {
				once.Do(func() { close(otherStarted) })
			}
			return 0, nil
		}), 0))
	}
	p, err := Compile(starts...)
	require.NoError(t, err)
	r, err := a.RunPlan(context.Background(), p, time.Minute)
	require.NoError(t, err)
	r.Release()
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, order, 6)
	assert.Less(t, slices.Index(order, "r1"), slices.Index(order, "r5"), "roots started in order %v", order)
}

// collectedErr is an error whose collection the test watches.
type collectedErr struct{ _ [64]byte }

func (*collectedErr) Error() string { return "collected" }

// TestRecycledRunKeepsNothingAlive checks that a released run, recycled
// into its plan's pool, does not keep the last run's results alive: a
// pointer value, and the error of a failed node whose result type is a
// number (whose slot is not cleared when it succeeds). One collection
// after the run was recycled frees both, although the pool still holds
// the run.
func TestRecycledRunKeepsNothingAlive(t *testing.T) {
	freed := make(chan string, 2)
	big := NewWrapper("big", WorkerFunc[int, *[1 << 16]byte](func(context.Context, int, Wrappers) (*[1 << 16]byte, error) {
		v := new([1 << 16]byte)
		runtime.AddCleanup(v, func(s string) { freed <- s }, "value")
		return v, nil
	}), 0)
	NewWrapper("failed", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		e := &collectedErr{}
		runtime.AddCleanup(e, func(s string) { freed <- s }, "error")
		return 0, e
	}), 0).Depend(big, true)
	p, err := Compile(big)
	require.NoError(t, err)
	a := New()
	r, err := a.RunPlan(context.Background(), p, 0)
	require.NoError(t, err)
	r.Release()
	require.NoError(t, a.Close()) // every task has returned: the run is recycled
	runtime.GC()
	got := map[string]bool{}
	timeout := time.After(10 * time.Second)
	for len(got) < 2 {
		select {
		case s := <-freed:
			got[s] = true
		case <-timeout:
			t.Fatalf("after a collection, freed only %v: the recycled run keeps the rest alive", got)
		}
	}
	runtime.KeepAlive(p)
}

// TestPlanRunOfADiamondAllocatesTwelveObjects counts a run's fixed cost
// in objects: a run of a 4-node plan under a deadline makes 12, most of
// them the context package's (the deadline's context and timer, the
// sweep's AfterFunc), then the run's done channel and its handle, which
// also holds the workers' context. It was 13 while the workers' context
// was marked with a context.WithValue of its own. Hooks with no OnRunEnd
// add none: the end of such a run made 2 more, the loop position and
// the report of runEnded, moved to the heap by the closure that carries
// the hooks on after a runtime.Goexit.
func TestPlanRunOfADiamondAllocatesTwelveObjects(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, opts := range [][]Option{nil, {WithHooks(&Hooks{OnNodeEnd: func(context.Context, NodeEvent) {}})}} {
		a := newAsync(t, append(opts, WithMaxWorkers(2))...)
		top := NewWrapper("top", okWorker(), 0)
		left := NewWrapper("left", okWorker(), 0).Depend(top, true)
		right := NewWrapper("right", okWorker(), 0).Depend(top, true)
		NewWrapper("bottom", okWorker(), 0).Depend(left, true).Depend(right, true)
		pl, err := Compile(top)
		require.NoError(t, err)
		allocs := planRunAllocs(a, pl, 500)
		t.Logf("hooks %v: %.0f objects per run", len(opts) > 0, allocs)
		assert.LessOrEqual(t, allocs, 12.0, "hooks %v", len(opts) > 0)
	}
}

// planRunAllocs returns the objects a run of pl on a makes, released
// at once, averaged over runs once 50 runs have warmed the pools.
func planRunAllocs(a *Async, pl *Plan, runs int) float64 {
	run := func() {
		r, err := a.RunPlan(context.Background(), pl, time.Minute)
		if err != nil {
			panic(err)
		}
		r.Release()
	}
	for range 50 {
		run()
	}
	return testing.AllocsPerRun(runs, run)
}

// TestQueuedHelperCountsAsBusyOnceItRuns: a run refused a goroutine
// queues a helper for a node that may block; once a worker frees up at
// 10 ms, the helper runs that node (20 ms) while the run's own goroutine
// is still inside its node (500 ms). The helper counts as busy while it
// runs, so its end leaves the run working, not stalled: Suspended,
// asked before, is never closed by a run that simply ends.
func TestQueuedHelperCountsAsBusyOnceItRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sleep := func(d time.Duration) Worker[int, int] {
			return WorkerFunc[int, int](func(_ context.Context, k int, _ Wrappers) (int, error) {
				time.Sleep(d)
				return k, nil
			})
		}
		root := NewWrapper("root", sleep(0), 0)
		NewWrapper("short", sleep(20*time.Millisecond), 0).Depend(root, true)
		NewWrapper("long", sleep(500*time.Millisecond), 0).Depend(root, true) // the last successor: run by root's goroutine
		pl, err := Compile(root)
		require.NoError(t, err)
		a := New(WithMaxWorkers(2))
		defer a.Close()
		held := holdOneWorker(t, a, 10*time.Millisecond)
		r, err := a.StartPlan(context.Background(), pl, 0)
		require.NoError(t, err)
		stall := r.Suspended()
		require.NoError(t, r.Wait(context.Background()))
		assert.False(t, isClosed(stall), "Suspended was closed while a node of the run was running")
		r.Release()
		require.NoError(t, <-held)
	})
}

// TestRunOnAUserPoolQueuesAHelperForABlockingNode: on a Pool of the
// user's (WithExecutor), a run refused a free goroutine for a node that
// may block hands the helper to the Pool's queue, as New's own start
// would not: the node starts when the Pool's other worker frees up at
// 10 ms, not after the run's goroutine has run its own 500 ms node.
func TestRunOnAUserPoolQueuesAHelperForABlockingNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ec earlyStarts
		w := ec.worker()
		root := NewWrapper("root", WorkerFunc[int, int](func(_ context.Context, k int, _ Wrappers) (int, error) {
			return k, nil
		}), 0)
		NewWrapper("s0", w, 0).Depend(root, true)
		NewWrapper("s1", w, 1).Depend(root, true)
		pl, err := Compile(root)
		require.NoError(t, err)
		p := NewPool(PoolSize(2))
		defer p.Close()
		a := New(WithExecutor(p))
		defer a.Close()
		gate := make(chan struct{})
		require.NoError(t, p.Submit(func() { <-gate }))
		synctest.Wait() // the gate holds one of the Pool's workers
		go func() {
			time.Sleep(10 * time.Millisecond)
			close(gate)
		}()
		ec.began = time.Now()
		r, err := a.RunPlan(context.Background(), pl, time.Minute)
		require.NoError(t, err)
		r.Release()
		assert.Equal(t, int32(2), ec.early.Load(), "nodes started before 100 ms")
	})
}

// TestBlockingNodeSharedByARefusedRunStartsWhenAWorkerFreesUp: a run
// refused a goroutine shares a node that may block (500 ms) and goes on
// itself with a node learned quick that, in run 5, blocks for 500 ms
// too. The shared node starts when the other worker frees up at 10 ms,
// through the helper queued when it was shared: the goroutine checks
// for that only before a node not learned quick.
func TestBlockingNodeSharedByARefusedRunStartsWhenAWorkerFreesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var began time.Time
		var started atomic.Int64
		var run atomic.Int32
		slow := WorkerFunc[int, int](func(_ context.Context, k int, _ Wrappers) (int, error) {
			started.Store(int64(time.Since(began)))
			time.Sleep(500 * time.Millisecond)
			return k, nil
		})
		quickThenBlocks := WorkerFunc[int, int](func(_ context.Context, k int, _ Wrappers) (int, error) {
			if run.Load() == 5 {
				time.Sleep(500 * time.Millisecond)
			}
			return k, nil
		})
		root := NewWrapper("root", WorkerFunc[int, int](func(_ context.Context, k int, _ Wrappers) (int, error) {
			return k, nil
		}), 0)
		NewWrapper("slow", slow, 0).Depend(root, true)
		NewWrapper("quick", quickThenBlocks, 0).Depend(root, true) // the last successor: run by root's goroutine
		pl, err := Compile(root)
		require.NoError(t, err)
		a := New(WithMaxWorkers(2))
		defer a.Close()
		for k := range 5 {
			run.Store(int32(k + 1))
			held := holdOneWorker(t, a, 10*time.Millisecond)
			began = time.Now()
			r, err := a.RunPlan(context.Background(), pl, time.Minute)
			require.NoError(t, err)
			r.Release()
			assert.LessOrEqual(t, time.Duration(started.Load()), 10*time.Millisecond,
				"run %d: the shared node waited for the run's busy goroutine", k+1)
			require.NoError(t, <-held)
		}
	})
}

// TestRefusedRunQueuesAHelperOnceThePoolQueueHasRoom: a run refused a
// goroutine finds the pool's queue full too (1,024 tasks wait behind a
// worker held until 10 ms), so the helper it would queue for the node
// that may block it shared (500 ms) is not queued. Its goroutine runs
// a chain of two such nodes, 20 ms then 500 ms. Once the queue has
// drained, the goroutine queues the helper before its second node, and
// the shared node starts at 20 ms, not after that goroutine's 520 ms:
// a queue found full leaves the run free to queue a helper later.
func TestRefusedRunQueuesAHelperOnceThePoolQueueHasRoom(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var began time.Time
		var started atomic.Int64
		started.Store(-1)
		sleep := func(d time.Duration) Worker[int, int] {
			return WorkerFunc[int, int](func(_ context.Context, k int, _ Wrappers) (int, error) {
				time.Sleep(d)
				return k, nil
			})
		}
		gate := make(chan struct{})
		root := NewWrapper("root", WorkerFunc[int, int](func(_ context.Context, k int, _ Wrappers) (int, error) {
			<-gate
			return k, nil
		}), 0)
		NewWrapper("shared", WorkerFunc[int, int](func(_ context.Context, k int, _ Wrappers) (int, error) {
			started.Store(int64(time.Since(began)))
			time.Sleep(500 * time.Millisecond)
			return k, nil
		}), 0).Depend(root, true)
		// The last successor: run by root's goroutine, then its successor.
		first := NewWrapper("first", sleep(20*time.Millisecond), 0).Depend(root, true)
		NewWrapper("second", sleep(500*time.Millisecond), 0).Depend(first, true)
		pl, err := Compile(root)
		require.NoError(t, err)
		a := New(WithMaxWorkers(2))
		defer a.Close()
		held := holdOneWorker(t, a, 10*time.Millisecond)
		r, err := a.StartPlan(context.Background(), pl, 0)
		require.NoError(t, err)
		synctest.Wait() // root has the other worker
		queued := 0
		for a.owned.trySubmit(func() {}) {
			queued++
		}
		require.Equal(t, 1024, queued, "tasks the pool's queue took")
		began = time.Now()
		close(gate)
		require.NoError(t, r.Wait(context.Background()))
		r.Release()
		require.NoError(t, <-held)
		assert.Equal(t, 20*time.Millisecond, time.Duration(started.Load()),
			"the shared node waited for the run's busy goroutine")
	})
}
