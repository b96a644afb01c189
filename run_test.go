package asynctool

import (
	"context"
	"errors"
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

// anyGraph builds any(a, b→c, d→e→f)→g: g's dependencies are all
// optional, and a, b, d are the start nodes.
func anyGraph(rec *recorder) (map[string]*WorkerWrapper[int, int], []Wrapper) {
	w := map[string]*WorkerWrapper[int, int]{}
	for _, id := range []string{"a", "b", "c", "d", "e", "f", "g"} {
		w[id] = rec.node(id, ok(1))
	}
	w["c"].Depend(w["b"], true)
	w["e"].Depend(w["d"], true)
	w["f"].Depend(w["e"], true)
	w["g"].Depend(w["a"], false).Depend(w["c"], false).Depend(w["f"], false)
	return w, []Wrapper{w["a"], w["b"], w["d"]}
}

// TestShortCircuitAnyOf checks rule 5 on the seed's example: once a has
// triggered g, every node of the other branches that has not started is
// skipped, with its callback fired and the ErrSkipped sentinel.
func TestShortCircuitAnyOf(t *testing.T) {
	ex := &manualExec{}
	a := newAsync(t, WithExecutor(ex))
	rec := newRecorder()
	w, starts := anyGraph(rec)
	r, err := a.Start(context.Background(), 0, starts...)
	require.NoError(t, err)
	require.True(t, ex.step(), "run a's task") // a runs, triggers g, g runs inline
	ex.drain()
	require.NoError(t, r.Wait(context.Background()))

	assert.Equal(t, []string{"a", "g"}, rec.order, "only a and g ran")
	for _, id := range []string{"b", "c", "d", "e", "f"} {
		res := w[id].Result()
		assert.Equal(t, StateError, w[id].State(), id)
		assert.ErrorIs(t, res.Err, ErrSkipped, id)
		assert.Equal(t, ResultException, res.State, id)
		assert.Equal(t, 1, rec.count(rec.results, id), "%s's callback fired once", id)
		assert.Equal(t, 0, rec.count(rec.begins, id), "%s's Begin never fired", id)
	}
	assert.Equal(t, ResultSuccess, w["g"].Result().State)
}

// TestShortCircuitSparesStartedNodes checks that nodes already running are
// not touched and their successors still skip.
func TestShortCircuitSparesStartedNodes(t *testing.T) {
	a := newAsync(t)
	rec := newRecorder()
	gateB, gateD := make(chan struct{}), make(chan struct{})
	releaseB, releaseD := releaser(t, gateB), releaser(t, gateD) // the run has no deadline
	w := map[string]*WorkerWrapper[int, int]{
		"a": rec.node("a", ok(1)), "b": rec.node("b", gated(gateB, 1)), "c": rec.node("c", ok(1)),
		"d": rec.node("d", gated(gateD, 1)), "e": rec.node("e", ok(1)), "f": rec.node("f", ok(1)),
		"g": rec.node("g", ok(1)),
	}
	w["c"].Depend(w["b"], true)
	w["e"].Depend(w["d"], true)
	w["f"].Depend(w["e"], true)
	// a must wait until b and d are running.
	started := make(chan struct{})
	releaseA := releaser(t, started) // a ignores its ctx
	w["a"] = rec.node("a", func(ctx context.Context, _ Wrappers) (int, error) { <-started; return 1, nil })
	w["g"].Depend(w["a"], false).Depend(w["c"], false).Depend(w["f"], false)
	r, err := a.Start(context.Background(), 0, w["a"], w["b"], w["d"])
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return w["b"].State() == StateWorking && w["d"].State() == StateWorking
	}, 10*time.Second, time.Millisecond)
	releaseA()
	require.Eventually(t, func() bool { return w["g"].State() == StateFinish }, 10*time.Second, time.Millisecond)
	for _, id := range []string{"c", "e", "f"} {
		assert.ErrorIs(t, w[id].Result().Err, ErrSkipped, id)
	}
	releaseB()
	releaseD()
	require.NoError(t, r.Wait(context.Background()))
	assert.Equal(t, ResultSuccess, w["b"].Result().State, "a started node finishes normally")
	assert.Equal(t, ResultSuccess, w["d"].Result().State)
}

// TestShortCircuitOptOut checks that a node with ShortCircuit(false) is
// never skipped and keeps its upstreams needed.
func TestShortCircuitOptOut(t *testing.T) {
	ex := &manualExec{}
	a := newAsync(t, WithExecutor(ex))
	rec := newRecorder()
	w, starts := anyGraph(rec)
	w["c"].ShortCircuit(false)
	r, err := a.Start(context.Background(), 0, starts...)
	require.NoError(t, err)
	ex.drain()
	require.NoError(t, r.Wait(context.Background()))
	assert.ElementsMatch(t, []string{"a", "g", "b", "c"}, rec.order, "c and its upstream b run")
	for _, id := range []string{"d", "e", "f"} {
		assert.ErrorIs(t, w[id].Result().Err, ErrSkipped, id)
	}
}

// TestShortCircuitMultipleSuccessors checks the generalisation beyond
// asyncTool's single-successor chains: a node with two successors is
// skipped once neither needs it.
func TestShortCircuitMultipleSuccessors(t *testing.T) {
	ex := &manualExec{}
	a := newAsync(t, WithExecutor(ex))
	rec := newRecorder()
	fast := rec.node("fast", ok(1))
	shared := rec.node("shared", ok(1)) // feeds both x and y
	x := rec.node("x", ok(1)).Depend(fast, false).Depend(shared, false)
	y := rec.node("y", ok(1)).Depend(fast, false).Depend(shared, false)
	r, err := a.Start(context.Background(), 0, fast, shared)
	require.NoError(t, err)
	ex.drain()
	require.NoError(t, r.Wait(context.Background()))
	assert.ErrorIs(t, shared.Result().Err, ErrSkipped)
	assert.Equal(t, ResultSuccess, x.Result().State)
	assert.Equal(t, ResultSuccess, y.Result().State)
}

// TestSinksAreNeverSkipped checks that a node without successors always
// runs when its join allows, even if it is a start node queued behind
// others.
func TestSinksAreNeverSkipped(t *testing.T) {
	ex := &manualExec{}
	a := newAsync(t, WithExecutor(ex))
	rec := newRecorder()
	var starts []Wrapper
	for _, id := range ids(5, "s") {
		starts = append(starts, rec.node(id, ok(1)))
	}
	r, err := a.Start(context.Background(), 0, starts...)
	require.NoError(t, err)
	ex.drain()
	require.NoError(t, r.Wait(context.Background()))
	assert.Len(t, rec.order, 5)
}

// TestPoolOfOneCompletesAnyDAG checks rule 8: with a single worker
// goroutine, wide and deep graphs complete, because no goroutine waits for
// another node.
func TestPoolOfOneCompletesAnyDAG(t *testing.T) {
	a := newAsync(t, WithMaxWorkers(1))
	rec := newRecorder()
	root := rec.node("root", ok(1))
	sink := rec.node("sink", ok(1))
	for _, id := range ids(200, "m") {
		m := rec.node(id, ok(1)).Depend(root, true)
		sink.Depend(m, true)
	}
	prev := sink
	for _, id := range ids(2000, "chain") { // deep: no recursion per level
		n := rec.node(id, ok(1)).Depend(prev, true)
		prev = n
	}
	require.NoError(t, a.BeginWork(context.Background(), 0, root))
	assert.Equal(t, ResultSuccess, prev.Result().State)
	assert.Len(t, rec.order, 2202)
}

// TestRejectingExecutorLosesNothing checks that an executor that refuses
// every task still completes the graph: the submitting goroutine runs the
// work itself.
func TestRejectingExecutorLosesNothing(t *testing.T) {
	var accepted atomic.Int32
	ex := ExecutorFunc(func(task func()) error {
		if accepted.Add(1) == 1 { // accept exactly one task, then refuse all
			go task()
			return nil
		}
		return errBoom
	})
	a := newAsync(t, WithExecutor(ex))
	rec := newRecorder()
	root := rec.node("root", ok(1))
	sink := rec.node("sink", ok(1))
	for _, id := range ids(50, "m") {
		sink.Depend(rec.node(id, ok(1)).Depend(root, true), true)
	}
	require.NoError(t, a.BeginWork(context.Background(), 0, root))
	assert.Equal(t, ResultSuccess, sink.Result().State)
	assert.Len(t, rec.order, 52)
}

// TestGoexitInWorker checks that a worker ending its goroutine with
// runtime.Goexit (t.FailNow in a test's fake) fails its node instead of
// hanging the run.
func TestGoexitInWorker(t *testing.T) {
	a := newAsync(t, WithMaxWorkers(1))
	rec := newRecorder()
	x := rec.node("x", func(context.Context, Wrappers) (int, error) { runtime.Goexit(); return 0, nil })
	y := rec.node("y", ok(1)).Depend(x, true)
	z := rec.node("z", ok(1)).Depend(x, false)
	other := rec.node("other", ok(2))
	require.NoError(t, a.BeginWork(context.Background(), 0, x, other))
	assert.ErrorIs(t, x.Result().Err, ErrGoexit)
	assert.ErrorIs(t, y.Result().Err, ErrGoexit)
	assert.ErrorIs(t, z.Result().Err, ErrGoexit)
	assert.Equal(t, ResultSuccess, other.Result().State)
}

// TestGoexitInCallback checks the same for a Result callback.
func TestGoexitInCallback(t *testing.T) {
	a := newAsync(t)
	x := NewWrapper("x", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 1, nil }), 0).
		Callback(ResultFunc[int, int](func(bool, int, WorkResult[int]) { runtime.Goexit() }))
	y := NewWrapper("y", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 2, nil }), 0).Depend(x, true)
	err := a.BeginWork(context.Background(), 0, x)
	var cpe *CallbackPanicError
	require.ErrorAs(t, err, &cpe)
	assert.Equal(t, "x", cpe.ID)
	assert.Equal(t, ResultSuccess, y.Result().State, "successors still run")
}

// TestGoexitInCallbackDuringSweep checks that a Result callback calling
// runtime.Goexit while the deadline sweep runs it does not stop the sweep.
func TestGoexitInCallbackDuringSweep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		rec := newRecorder()
		slow := rec.node("slow", func(ctx context.Context, _ Wrappers) (int, error) { <-ctx.Done(); return 0, nil })
		x := NewWrapper("x", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 1, nil }), 0).
			Depend(slow, true).
			Callback(ResultFunc[int, int](func(bool, int, WorkResult[int]) { runtime.Goexit() }))
		y := rec.node("y", ok(1)).Depend(x, true)
		z := rec.node("z", ok(1)).Depend(slow, true)
		err := a.BeginWork(context.Background(), time.Millisecond, slow)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		var cpe *CallbackPanicError
		assert.ErrorAs(t, err, &cpe)
		for _, w := range []*WorkerWrapper[int, int]{x, y, z} {
			assert.Equal(t, ResultTimeout, w.Result().State, w.ID())
		}
	})
}

// Helpers take the shared queue from the front and the goroutine that
// shared from the back, so that two goroutines draining a wide fan-out
// work at opposite ends of the plan's arrays instead of on neighbouring
// nodes; the queue empties and restarts cleanly whichever end took last.
func TestTakeSharedFromBothEnds(t *testing.T) {
	r := &runState{shared: []int32{1, 2, 3, 4, 5}}
	type take struct {
		i    int32
		ok   bool
		left int
	}
	var got []take
	for _, front := range []bool{true, false, true, false, true, false} {
		i, ok, left := r.takeShared(false, front)
		got = append(got, take{i, ok, left})
	}
	want := []take{{1, true, 4}, {5, true, 3}, {2, true, 2}, {4, true, 1}, {3, true, 0}, {-1, false, 0}}
	if !slices.Equal(got, want) {
		t.Fatalf("takes = %v, want %v", got, want)
	}
	if len(r.shared) != 0 || r.sharedHead != 0 {
		t.Fatalf("empty queue kept len %d, head %d", len(r.shared), r.sharedHead)
	}
	r.shared = append(r.shared, 7)
	if i, ok, _ := r.takeShared(false, false); !ok || i != 7 {
		t.Fatalf("after refill: took %d, %v; want 7", i, ok)
	}
}

// A goroutine whose own work ran out takes, with one node, up to
// maxBatch-1 more quick nodes from its end of the shared queue, at most
// half of those left, and in the order takeShared would give them; a node
// that may block (not known, or timed slow) ends the batch, and is taken
// alone.
func TestTakeBatchTakesOnlyQuickNodes(t *testing.T) {
	p := &plan{nodes: make([]pnode, 40)}
	for i := range p.nodes {
		p.nodes[i].timed(time.Microsecond)
	}
	p.nodes[30].timed(time.Second) // slow
	p.nodes[5] = pnode{}           // never timed
	take := func(r *runState, front bool) (int32, []int32) {
		wl := &worklist{front: front}
		i, ok, _ := r.takeBatch(wl)
		require.True(t, ok)
		return i, wl.batch
	}
	queue := func(nodes ...int32) *runState { return &runState{p: p, shared: nodes} }

	r := queue(10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29)
	i, batch := take(r, false)
	assert.Equal(t, int32(29), i)
	assert.Equal(t, []int32{22, 23, 24, 25, 26, 27, 28}, batch, "run last first: 28 next")
	i, batch = take(r, true)
	assert.Equal(t, int32(10), i)
	assert.Equal(t, []int32{15, 14, 13, 12, 11}, batch, "at most half of the 11 left after 10")
	assert.Equal(t, []int32{16, 17, 18, 19, 20, 21}, r.shared[r.sharedHead:])

	r = queue(1, 2, 3, 4, 5, 6, 7, 8, 9)
	i, batch = take(r, true)
	assert.Equal(t, int32(1), i)
	assert.Equal(t, []int32{4, 3, 2}, batch, "5 was never timed: the batch stops before it")

	r = queue(1, 2, 3, 30, 31, 32, 33, 34)
	i, batch = take(r, false)
	assert.Equal(t, int32(34), i)
	assert.Equal(t, []int32{31, 32, 33}, batch, "30 is slow: the batch stops before it")
	i, batch = take(r, false)
	assert.Equal(t, int32(30), i, "a slow node is taken alone")
	assert.Empty(t, batch)
	i, batch = take(r, true)
	assert.Equal(t, int32(1), i)
	assert.Equal(t, []int32{2}, batch)

	r = queue(7)
	i, batch = take(r, false)
	assert.Equal(t, int32(7), i)
	assert.Empty(t, batch)
	assert.Equal(t, 0, len(r.shared)+r.sharedHead, "empty queue restarts at 0")
	_, ok, _ := r.takeBatch(&worklist{})
	assert.False(t, ok)
}

// quickReadyRun returns a run of a plan of n nodes all timed as quick,
// every node ready, with shared in its queue.
func quickReadyRun(n int, shared ...int32) *runState {
	p := &plan{nodes: make([]pnode, n)}
	for i := range p.nodes {
		p.nodes[i].timed(time.Microsecond)
	}
	r := &runState{p: p, nodes: make([]rnode, n), shared: shared}
	for i := range r.nodes {
		r.nodes[i].state.Store(int64(sReady))
	}
	return r
}

// A batch is lent, not owned: once the queue is empty, takers get the
// nodes of other goroutines' batches that are still ready (their holder
// may be stuck in a node), the last to be run by their holder first, and
// the helpers' count of what is left includes them.
func TestLentNodesAreTakenOnceTheQueueIsEmpty(t *testing.T) {
	r := quickReadyRun(20, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
	wl := &worklist{}
	i, ok, _ := r.takeBatch(wl)
	require.True(t, ok)
	assert.Equal(t, int32(10), i)
	assert.Equal(t, []int32{6, 7, 8, 9}, wl.batch)
	assert.Equal(t, []int32{9, 8, 7, 6}, r.lent, "in the holder's order")

	// The holder starts 9 and 8 (last first); a helper then takes from
	// the queue and is told of the 4 queued and the 4 lent nodes left.
	for _, x := range []int32{9, 8} {
		require.True(t, r.nodes[x].move(sReady, sWorking, startedBit))
	}
	i, ok, left := r.takeShared(false, true)
	require.True(t, ok)
	assert.Equal(t, int32(1), i)
	assert.Equal(t, 4+4, left)
	for range 4 {
		_, ok, _ = r.takeShared(false, true)
		require.True(t, ok)
	}

	// The queue is empty: the lent nodes still ready come next, those
	// the holder would run last first; the started ones are dropped.
	i, ok, left = r.takeShared(false, false)
	require.True(t, ok)
	assert.Equal(t, int32(6), i)
	assert.Equal(t, 3, left)
	i, ok, _ = r.takeBatch(&worklist{})
	require.True(t, ok)
	assert.Equal(t, int32(7), i)
	_, ok, left = r.takeShared(false, false)
	assert.False(t, ok, "9 and 8 were started by their holder")
	assert.Zero(t, left)
}

// A node started from its batch, suspended and resumed with Rerun is
// ready again, but it is Resume's task's to run: a taker does not take it
// from the lent list (found by review).
func TestResumedNodeIsNotTakenFromTheLentList(t *testing.T) {
	r := quickReadyRun(8, 1, 2, 3, 4, 5)
	wl := &worklist{}
	i, ok, _ := r.takeBatch(wl)
	require.True(t, ok)
	require.Equal(t, int32(5), i)
	require.Equal(t, []int32{3, 4}, wl.batch)
	// The holder starts 4; it fails and is suspended, then resumed.
	require.True(t, r.nodes[4].move(sReady, sWorking, startedBit))
	require.True(t, r.nodes[4].move(sWorking, sPending, 0))
	require.True(t, r.nodes[4].move(sPending, sReady, 0))
	for range 2 {
		_, ok, _ := r.takeShared(false, true)
		require.True(t, ok)
	}
	got, ok, _ := r.takeBatch(&worklist{})
	require.True(t, ok)
	assert.Equal(t, int32(3), got)
	got, ok, _ = r.takeBatch(&worklist{})
	assert.False(t, ok, "took %d", got)
}

// Room freed at the front by helpers is reused before the queue grows.
func TestShareReusesRoomTakenFromTheFront(t *testing.T) {
	r := &runState{shared: make([]int32, 0, 4)}
	r.shared = append(r.shared, 1, 2, 3, 4)
	for range 3 {
		_, ok, _ := r.takeShared(false, true)
		require.True(t, ok)
	}
	r.enqueue([]int32{5, 6, 7})
	assert.Equal(t, 4, cap(r.shared), "grew instead of reusing the front")
	var got []int32
	for {
		i, ok, _ := r.takeShared(false, true)
		if !ok {
			break
		}
		got = append(got, i)
	}
	assert.Equal(t, []int32{4, 5, 6, 7}, got)
}

// TestWaitOnAnEndedRunIgnoresADoneContext checks that Wait returns the
// run's own result for a run that has ended, even with a ctx that is
// already done: the select used to pick between the two at random.
func TestWaitOnAnEndedRunIgnoresADoneContext(t *testing.T) {
	a := newAsync(t)
	run, err := a.Start(context.Background(), time.Second, NewWrapper("x", okWorker(), 0))
	require.NoError(t, err)
	<-run.Done()
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for range 200 {
		require.NoError(t, run.Wait(done))
	}
}

// TestReleaseOfAPendingRunEndsIt releases a run of a plan whose node is
// pending and which has no deadline, before the run ended. Once released
// the handle, the only way to Resume or Cancel the run, reaches nothing,
// so the run must end there: before, it stayed pending for ever and
// Async.Close, which waits for runs still open, never returned.
func TestReleaseOfAPendingRunEndsIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		x := NewWrapper("x", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			return 0, errors.New("needs a look")
		}), 0).OnFailure(PolicySuspend)
		pl, err := Compile(x)
		require.NoError(t, err)
		run, err := a.StartPlan(context.Background(), pl, 0)
		require.NoError(t, err)
		<-run.Suspended()
		run.Release()
		select {
		case <-run.Done():
		case <-time.After(time.Hour):
			t.Fatal("the released run is still pending")
		}
		closed := make(chan struct{})
		go func() { a.Close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(time.Hour):
			t.Fatal("Close waits for a released run that nothing can reach")
		}
	})
}

// TestReleaseBeforeTheEndCancelsTheRun releases a run of a plan while its
// worker runs: the worker's context is cancelled, as by Run.Cancel, and
// the next run of the plan gets a fresh state once the first has ended.
func TestReleaseBeforeTheEndCancelsTheRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		var sawCancel bool
		x := NewWrapper("x", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
			select {
			case <-ctx.Done():
				sawCancel = errors.Is(context.Cause(ctx), context.Canceled)
				return 0, ctx.Err()
			case <-time.After(time.Minute):
				return 1, nil
			}
		}), 0)
		pl, err := Compile(x)
		require.NoError(t, err)
		run, err := a.StartPlan(context.Background(), pl, time.Hour)
		require.NoError(t, err)
		synctest.Wait() // x is running
		start := time.Now()
		run.Release()
		<-run.Done()
		synctest.Wait() // the worker has returned
		assert.Zero(t, time.Since(start), "the run ended at once")
		assert.True(t, sawCancel, "the worker's context was cancelled")
		assert.Equal(t, WorkResult[int]{}, x.ResultIn(run), "a released run shows no result")

		run2, err := a.RunPlan(context.Background(), pl, time.Hour)
		assert.NoError(t, err, "the next run is not cancelled")
		assert.Equal(t, WorkResult[int]{Value: 1, State: ResultSuccess}, x.ResultIn(run2))
		run2.Release()
	})
}

// whoKey carries the caller's name to a plan's worker.
type whoKey struct{}

// TestStaleRunHandle: a run's handle kept after Release never shows
// another request's run, and a second Release does nothing (the *Run
// itself was recycled, so a second Release dropped the next request's
// reference and ResultIn read its data).
func TestStaleRunHandle(t *testing.T) {
	a := New()
	defer a.Close()
	who := NewWrapper("who", WorkerFunc[int, string](func(ctx context.Context, _ int, _ Wrappers) (string, error) {
		return ctx.Value(whoKey{}).(string), nil
	}), 0)
	pl, err := Compile(who)
	require.NoError(t, err)
	as := func(name string) context.Context { return context.WithValue(context.Background(), whoKey{}, name) }

	alice, err := a.RunPlan(as("alice"), pl, time.Second)
	require.NoError(t, err)
	assert.Equal(t, "alice", who.ResultIn(alice).Value)
	alice.Release()
	bob, err := a.RunPlan(as("bob"), pl, time.Second)
	require.NoError(t, err)
	assert.NotSame(t, alice, bob)
	assert.Zero(t, who.ResultIn(alice), "a released run shows no result, not bob's")
	assert.Empty(t, alice.Report().Nodes)
	assert.ErrorContains(t, alice.Resume("who", Rerun()), "released run")
	alice.Release() // a second Release of alice's handle
	carol, err := a.RunPlan(as("carol"), pl, time.Second)
	require.NoError(t, err)
	assert.Equal(t, "bob", who.ResultIn(bob).Value, "bob's run is still bob's")
	assert.Equal(t, "carol", who.ResultIn(carol).Value)
	bob.Release()
	carol.Release()
}

// TestDoubleReleaseUnderLoad: with one request in ten releasing its
// run twice (early, and again deferred), every request reads its own
// result, race-free.
func TestDoubleReleaseUnderLoad(t *testing.T) {
	a := New()
	defer a.Close()
	who := NewWrapper("who", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
		return ctx.Value(whoKey{}).(int), nil
	}), 0)
	pl, err := Compile(who)
	require.NoError(t, err)
	var wrong atomic.Int32
	var wg sync.WaitGroup
	for k := range 2000 {
		wg.Go(func() {
			run, err := a.RunPlan(context.WithValue(context.Background(), whoKey{}, k), pl, time.Minute)
			if err != nil {
				wrong.Add(1)
				return
			}
			defer run.Release()
			if k%10 == 0 {
				run.Release() // early, and again deferred
				return
			}
			runtime.Gosched()
			if who.ResultIn(run).Value != k {
				wrong.Add(1)
			}
		})
	}
	wg.Wait()
	assert.Zero(t, wrong.Load(), "requests that read another request's result")
}

// TestDeadlineEndsUnstartedNodesAsTimeouts: when the group deadline
// passes, every node that has not ended ends as a timeout, as BeginWork's
// doc says. The sweep's end of one node released the unstarted upstreams
// of a successor it failed, and the short-circuit rule skipped them
// (seen under load: cart and recs ended as skipped, with
// OnNodeSkip instead of OnNodeTimeout).
func TestDeadlineEndsUnstartedNodesAsTimeouts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var skips, timeouts []string
		// A saturated pool: every node waits a second for a goroutine.
		slow := ExecutorFunc(func(task func()) error {
			go func() { time.Sleep(time.Second); task() }()
			return nil
		})
		a := New(WithExecutor(slow), WithHooks(&Hooks{
			OnNodeSkip: func(_ context.Context, ev NodeEvent) {
				mu.Lock()
				skips = append(skips, ev.ID)
				mu.Unlock()
			},
			OnNodeTimeout: func(_ context.Context, ev NodeEvent) {
				mu.Lock()
				timeouts = append(timeouts, ev.ID)
				mu.Unlock()
			},
		}))
		defer a.Close()
		one := WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 1, nil })
		user, cart, recs := NewWrapper("user", one, 0), NewWrapper("cart", one, 0), NewWrapper("recs", one, 0)
		page := NewWrapper("page", one, 0).Depend(user, true).Depend(cart, true).Depend(recs, false)
		err := a.BeginWork(context.Background(), 100*time.Millisecond, user, cart, recs)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		for _, w := range []*WorkerWrapper[int, int]{user, cart, recs, page} {
			assert.Equal(t, ResultTimeout, w.Result().State, "%s: %v", w, w.Result().Err)
		}
		mu.Lock()
		defer mu.Unlock()
		assert.Empty(t, skips)
		assert.ElementsMatch(t, []string{"user", "cart", "recs", "page"}, timeouts)
	})
}

// R3-1b: the same gap for the deadline, which ef35ccc set out to fix:
// a worker that returns at the deadline ends as a timeout and fails its
// successor before the sweep has set r.stopped; the successor's release
// skips the unstarted upstream x (and could skip its chain), which
// should end as a timeout ("nodes that had not started end as
// timeouts").
// TestDeadlineSkipsNothingBeforeTheSweepStarts: a worker that returns
// at the deadline fails its successor before the sweep has started; the
// successor's unstarted upstream must still end as a timeout, not as
// skipped (ef35ccc checked only the sweep's flag).
func TestDeadlineSkipsNothingBeforeTheSweepStarts(t *testing.T) {
	var skipped atomic.Int32
	a := New(WithHooks(&Hooks{OnNodeSkip: func(context.Context, NodeEvent) { skipped.Add(1) }}))
	defer a.Close()
	bad := 0
	const runs = 200
	for range runs {
		y := NewWrapper("y", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
			<-ctx.Done()
			return 0, ctx.Err()
		}), 0)
		g := NewWrapper("g", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
			<-ctx.Done()
			time.Sleep(time.Millisecond) // x stays unstarted until the sweep
			return 0, ctx.Err()
		}), 0)
		x := NewWrapper("x", okWorker(), 0).Depend(g, true)
		NewWrapper("s", okWorker(), 0).Depend(y, true).Depend(x, true)
		err := a.BeginWork(context.Background(), 2*time.Millisecond, y, g)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		if x.Result().State != ResultTimeout {
			bad++
		}
	}
	assert.Zero(t, bad, "x not a timeout in %d of %d runs (OnNodeSkip fired %d times)", bad, runs, skipped.Load())
}

// TestDoubleReleaseWaitsForALateWorker: Release drops the owner's
// reference to a plan's run, and a worker that outlived the deadline
// holds another, so the run is recycled only once that worker returns. A
// second Release of the same run (a deferred Release after an explicit
// one) dropped the worker's reference instead: the run was recycled, and
// handed to the plan's next run, while the late worker still used it.
// Release now does nothing the second time.
func TestDoubleReleaseWaitsForALateWorker(t *testing.T) {
	a := New()
	gate, started := make(chan struct{}), make(chan struct{})
	late := NewWrapper("late", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		close(started)
		<-gate // ignores its ctx
		return 1, nil
	}), 0)
	pl, err := Compile(late)
	if err != nil {
		t.Fatal(err)
	}
	r, err := a.StartPlan(context.Background(), pl, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	<-started
	r.Cancel()
	if err := r.Wait(context.Background()); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait: %v", err)
	}
	// Done is closed just before the sweep lets go of its reference:
	// wait for that, leaving the owner's and the late worker's.
	for k := 0; r.refs.Load() != 2; k++ {
		if k == 10000 {
			t.Fatalf("the run holds %d references, want 2", r.refs.Load())
		}
		time.Sleep(100 * time.Microsecond)
	}
	r.Release()
	r.Release()
	if n := r.refs.Load(); n != 1 {
		// The late worker would return into a recycled run: leave it
		// blocked (goleak reports it too).
		t.Fatalf("after two Releases the run has %d references; want 1, the late worker's", n)
	}
	close(gate)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestCancelRacingRelease: a Run's methods are safe for concurrent
// use, so a Cancel (from a watchdog, say) racing the owner's Release of
// the same handle must neither read the state's fields as they are
// recycled (a data race, or a call of the nil cancel) nor cancel the next
// run of the plan that reuses the state; nor may a second Release of the
// handle, at the same time, release that next run.
func TestCancelRacingRelease(t *testing.T) {
	a := New()
	defer a.Close()
	n := NewWrapper("n", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 1, nil }), 0)
	pl, err := Compile(n)
	require.NoError(t, err)
	for range 2000 {
		run, err := a.RunPlan(context.Background(), pl, time.Minute)
		require.NoError(t, err)
		var wg sync.WaitGroup
		wg.Go(run.Cancel)
		wg.Go(func() { _ = run.Report() })
		wg.Go(func() { _ = n.ResultIn(run) })
		wg.Go(run.Release) // released twice at once: once only
		run.Release()
		next, err := a.StartPlan(context.Background(), pl, time.Minute)
		require.NoError(t, err)
		wg.Wait()
		require.NoError(t, next.Wait(context.Background()), "the next run was not cancelled by the stale handle")
		assert.Equal(t, 1, n.ResultIn(next).Value)
		next.Release()
	}
}

func TestUntimedRecycledRunHasNoStart(t *testing.T) {
	pl, err := Compile(NewWrapper("w", okWorker(), 0))
	require.NoError(t, err)
	timed := newAsync(t, WithTimings(true))
	plain := newAsync(t)
	r, err := timed.RunPlan(context.Background(), pl, 0)
	require.NoError(t, err)
	r.Release()
	for range 20 {
		r, err = plain.RunPlan(context.Background(), pl, 0)
		require.NoError(t, err)
		require.True(t, r.Report().Start.IsZero())
		r.Release()
	}
}

// TestWorkerReturningWhileTheSweepIsBusyEndsAsATimeout: a worker that
// returns after the group deadline, while the sweep is still running an
// earlier node's Result callback and has not reached its node, ends as a
// timeout, as every node that had not ended at the deadline does: its
// value is not kept as a success, and its error or panic is not its
// failure.
func TestWorkerReturningWhileTheSweepIsBusyEndsAsATimeout(t *testing.T) {
	for _, how := range []string{"value", "error", "panic"} {
		t.Run(how, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a := New()
				defer a.Close()
				// first comes before late in the sweep's order; its callback,
				// which the sweep runs as it ends it, holds the sweep for a
				// second.
				first := NewWrapper("first", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
					time.Sleep(3 * time.Second) // ignores its ctx
					return 1, nil
				}), 0).Callback(ResultFunc[int, int](func(bool, int, WorkResult[int]) { time.Sleep(time.Second) }))
				late := NewWrapper("late", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
					time.Sleep(1500 * time.Millisecond) // returns half-way through first's callback
					switch how {
					case "error":
						return 0, errBoom
					case "panic":
						panic("late")
					}
					return 2, nil
				}), 0)
				err := a.BeginWork(context.Background(), time.Second, first, late)
				require.ErrorIs(t, err, context.DeadlineExceeded)
				assert.Equal(t, ResultTimeout, first.Result().State)
				res := late.Result()
				assert.Equal(t, ResultTimeout, res.State, "late returned after the deadline")
				assert.ErrorIs(t, res.Err, context.DeadlineExceeded)
				assert.Zero(t, res.Value)
			})
		})
	}
}

// TestWorkersContextEndsWithTheRun: the context a run's workers receive
// is cancelled once every node has ended, for a run with a deadline and
// one without, of a single-use graph and of a plan. Left open, a run
// started under a long-lived parent context (a server's) would stay
// registered with that parent, and its timer, for as long as the parent
// lives, and a goroutine a worker left watching its ctx would never be
// told the run is over.
func TestWorkersContextEndsWithTheRun(t *testing.T) {
	for _, timeout := range []time.Duration{0, time.Hour} {
		for _, plan := range []bool{false, true} {
			parent, cancel := context.WithCancel(context.Background())
			a := newAsync(t)
			var got context.Context
			x := NewWrapper("x", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
				got = ctx
				return 1, nil
			}), 0)
			if plan {
				pl, err := Compile(x)
				require.NoError(t, err)
				run, err := a.RunPlan(parent, pl, timeout)
				require.NoError(t, err)
				run.Release()
			} else {
				require.NoError(t, a.BeginWork(parent, timeout, x))
			}
			require.NotNil(t, got)
			assert.ErrorIs(t, got.Err(), context.Canceled, "timeout %v, plan %v", timeout, plan)
			assert.NoError(t, parent.Err())
			cancel()
		}
	}
}

// TestNodeTakenAfterTheDeadlineIsReportedNotStarted: a node that waited
// in the run's queue is taken by a goroutine after the group deadline,
// while the sweep is still held up by an earlier node's Result callback.
// The goroutine finds the deadline passed and ends the node without
// calling its worker, and the report says it never started: not Ran,
// no attempt, "stopped before it started".
func TestNodeTakenAfterTheDeadlineIsReportedNotStarted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// An executor that refuses every task: b waits in the run's
		// queue for the goroutine that shared it, which is in c.
		a := New(WithExecutor(ExecutorFunc(func(func()) error { return errors.New("full") })))
		defer a.Close()
		first := NewWrapper("first", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			time.Sleep(3 * time.Second) // ignores its ctx
			return 1, nil
		}), 0).Callback(ResultFunc[int, int](func(bool, int, WorkResult[int]) { time.Sleep(time.Second) }))
		up := NewWrapper("up", okWorker(), 0)
		var bRan atomic.Bool
		NewWrapper("b", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			bRan.Store(true)
			return 1, nil
		}), 0).Depend(up, true)
		NewWrapper("c", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			time.Sleep(1500 * time.Millisecond) // ignores its ctx; returns while the sweep is in first's callback
			return 1, nil
		}), 0).Depend(up, true)
		r, err := a.Start(context.Background(), time.Second, first, up)
		require.NoError(t, err)
		require.ErrorIs(t, r.Wait(context.Background()), context.DeadlineExceeded)
		assert.False(t, bRan.Load())
		assertNotStarted(t, r, "b")
	})
}

// TestChainDepthCostsNoStack pins the package doc's "graph depth costs no
// stack": a goroutine that finishes a node runs the next one in a loop,
// not by a call from the one before, so the last node of a long chain
// runs about as deep in its goroutine's stack as the second one, with
// the default pool and with a pool of one.
func TestChainDepthCostsNoStack(t *testing.T) {
	for _, opts := range [][]Option{nil, {WithMaxWorkers(1)}} {
		const n = 500
		depth := make([]int, n)
		first := NewWrapper("", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 0, nil }), 0)
		prev := first
		for k := 1; k < n; k++ {
			prev = NewWrapper("", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
				depth[k] = runtime.Callers(0, make([]uintptr, 4096))
				return 0, nil
			}), 0).Depend(prev, true)
		}
		a := New(opts...)
		require.NoError(t, a.BeginWork(context.Background(), time.Minute, first))
		require.NoError(t, a.Close())
		// A call per node would add at least n frames; a few frames
		// either way are only the path that started each node (claimed,
		// shared, taken in a batch), which scheduling decides.
		assert.InDelta(t, depth[1], depth[n-1], 16, "frames under the second node and under the last, with %d options", len(opts))
	}
}

// TestCancelledRunStartsNoNodeOnAGoroutineThatRanAnotherRun: a goroutine
// that has just run a node of one run looks at the deadline before it
// starts a node of another: what it learned of the first run (that its
// context had not ended) says nothing of the second. Here the second
// run's context has ended before its first task runs, on the pool's only
// worker, right after that worker ran the first run's node; its sweep is
// held in blocker's Result callback, so the task reaches victim first,
// and must end it without calling its worker.
func TestCancelledRunStartsNoNodeOnAGoroutineThatRanAnotherRun(t *testing.T) {
	a := newAsync(t, WithMaxWorkers(1))
	gate := make(chan struct{})
	open := releaser(t, gate)
	started := make(chan struct{})
	hold := NewWrapper("hold", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
		close(started)
		<-gate
		return 1, nil
	}), 0)
	first, err := a.Start(context.Background(), 0, hold)
	require.NoError(t, err)
	<-started // the pool's only worker runs hold

	inCallback, unblock := make(chan struct{}), make(chan struct{})
	blocker := NewWrapper("blocker", okWorker(), 0).Callback(ResultFunc[int, int](func(bool, int, WorkResult[int]) {
		close(inCallback)
		<-unblock
	}))
	var called atomic.Int32
	victimEnded := make(chan struct{})
	victim := NewWrapper("victim", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		called.Add(1)
		return 1, nil
	}), 0).Callback(ResultFunc[int, int](func(bool, int, WorkResult[int]) { close(victimEnded) }))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	second, err := a.Start(ctx, 0, blocker, victim) // its task waits in the pool's queue
	require.NoError(t, err)
	require.Equal(t, "blocker", second.p.nodes[0].core.id, "the sweep reaches blocker first")
	require.Equal(t, []int32{0, 1}, second.p.roots)
	<-inCallback // the sweep waits in blocker's callback
	open()       // hold returns; the worker takes the second run's task
	require.NoError(t, first.Wait(context.Background()))
	<-victimEnded // by the second run's task: the sweep still waits
	assert.Zero(t, called.Load(), "victim's worker was called after its run's context ended")
	res := victim.Result()
	assert.Equal(t, ResultTimeout, res.State)
	assert.ErrorIs(t, res.Err, context.Canceled)
	close(unblock)
	assert.ErrorIs(t, second.Wait(context.Background()), context.Canceled)
}
