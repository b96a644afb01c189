package asynctool

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// planStressRun is one run of the stress test: its identity, which every
// worker reads from its context and writes into its value (id*1000 plus
// the node's tag), and what the run is to do.
type planStressRun struct {
	id           int
	suspend      bool // the outer "susp" node fails its first attempt under PolicySuspend
	innerSuspend bool // the sub-plan's "i3" fails under PolicySuspend, which fails its SubPlan node
	lazy         bool // some workers ignore their context for a while
	detach       bool // the OnRunStart hook returns a context without the caller's cancellation
	innerFails   atomic.Int32
	suspAttempts atomic.Int32
	run          atomic.Pointer[Run]
	a            *Async
	bad          *planStressBad
}

type planStressKey struct{}
type planStressViaKey struct{}
type planStressHookKey struct{}

// planStressBad collects violations from every goroutine.
type planStressBad struct {
	mu   sync.Mutex
	msgs []string
}

func (b *planStressBad) add(format string, args ...any) {
	b.mu.Lock()
	if len(b.msgs) < 20 {
		b.msgs = append(b.msgs, fmt.Sprintf(format, args...))
	}
	b.mu.Unlock()
}

func stressRunOf(ctx context.Context) *planStressRun {
	sr, _ := ctx.Value(planStressKey{}).(*planStressRun)
	return sr
}

// stressNap sleeps up to max, ignoring ctx when the run is lazy.
func stressNap(ctx context.Context, sr *planStressRun, max time.Duration) {
	d := time.Duration(rand.Int64N(int64(max)))
	if sr.lazy && rand.IntN(3) == 0 {
		time.Sleep(d)
		return
	}
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}

// checkStressValue checks that v, a value of a node that succeeded in
// run id (or of a report of it), was written by that run: the stress
// tests' workers write their run's id times 1,000 plus a small number.
func checkStressValue(id int, bad *planStressBad, where string, v any) {
	switch x := v.(type) {
	case int:
		if x/1000 != id {
			bad.add("run %d: %s holds %d, written by run %d", id, where, x, x/1000)
		}
	case []WorkResult[int]:
		for k, item := range x {
			if item.State == ResultSuccess {
				checkStressValue(id, bad, fmt.Sprintf("%s[%d]", where, k), item.Value)
			}
		}
	}
}

// stressRuns returns the runs per goroutine of a stress test: def, or
// the number the environment variable env gives, for a longer search.
func stressRuns(t *testing.T, env string, def int) int {
	t.Helper()
	s := os.Getenv(env)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a number of runs above 0", env, s)
	}
	return n
}

// resultCounts returns a counter of Result calls for each node id.
func resultCounts(ids []string) map[string]*atomic.Int64 {
	calls := make(map[string]*atomic.Int64, len(ids))
	for _, id := range ids {
		calls[id] = new(atomic.Int64)
	}
	return calls
}

// runStressFrom calls one runs times on each of goroutines goroutines and
// waits for them, failing the test with every goroutine's stack if they
// have not returned within two minutes (a hang).
func runStressFrom(t *testing.T, goroutines, runs int, one func()) {
	t.Helper()
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range runs {
				one()
			}
		})
	}
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		buf := make([]byte, 1<<22)
		t.Fatalf("stress runs hung\n%s", buf[:runtime.Stack(buf, true)])
	}
}

// waitStressRun waits up to 30 seconds for run id, r, to end and returns
// Wait's error; hung says it did not end, and adds every goroutine's
// stack to bad.
func waitStressRun(r *Run, id int, bad *planStressBad) (hung bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = r.Wait(ctx)
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
		buf := make([]byte, 1<<22)
		bad.add("run %d hung\n%s", id, buf[:runtime.Stack(buf, true)])
		return true, err
	}
	return false, err
}

// checkStressReport checks every succeeded value of rep and its sub-runs'
// reports.
func checkStressReport(sr *planStressRun, where string, rep *Report) {
	if rep == nil {
		return
	}
	for _, n := range rep.Nodes {
		if n.Result == ResultSuccess {
			checkStressValue(sr.id, sr.bad, where+"/"+n.ID, n.Value)
		}
		checkStressReport(sr, where+"/"+n.ID, n.Sub)
	}
}

// planStressHookRun counts one (sub-)run's hook calls.
type planStressHookRun struct {
	mu      sync.Mutex
	id      int
	nested  bool
	nodes   int
	ends    map[int]int
	runEnds int
}

func newStressHookRun(id int, info RunInfo) *planStressHookRun {
	return &planStressHookRun{id: id, nested: info.Nested, nodes: info.Nodes, ends: map[int]int{}}
}

// nodeEnded counts an OnNodeEnd of node i.
func (hr *planStressHookRun) nodeEnded(i int) {
	hr.mu.Lock()
	hr.ends[i]++
	hr.mu.Unlock()
}

// runEnded counts an OnRunEnd.
func (hr *planStressHookRun) runEnded() {
	hr.mu.Lock()
	hr.runEnds++
	hr.mu.Unlock()
}

// check fails t unless OnRunEnd fired once and OnNodeEnd once for each
// node. It is read once the Async's Close has waited for every hook.
func (hr *planStressHookRun) check(t *testing.T) {
	t.Helper()
	if hr.runEnds != 1 {
		t.Errorf("run %d (nested %v): OnRunEnd fired %d times", hr.id, hr.nested, hr.runEnds)
	}
	if len(hr.ends) != hr.nodes {
		t.Errorf("run %d (nested %v): OnNodeEnd for %d of %d nodes: %v", hr.id, hr.nested, len(hr.ends), hr.nodes, hr.ends)
	}
	for i, n := range hr.ends {
		if n != 1 {
			t.Errorf("run %d (nested %v): OnNodeEnd fired %d times for node %d", hr.id, hr.nested, n, i)
		}
	}
}

// planStressCallback counts a node's Result calls over every run of its
// plan.
type planStressCallback struct{ n *atomic.Int64 }

func (planStressCallback) Begin() {}

func (c planStressCallback) Result(bool, int, WorkResult[int]) { c.n.Add(1) }

// planStressOuter is an outer plan of the stress test, with its nodes
// and counts.
type planStressOuter struct {
	runs                                             atomic.Int64             // runs started
	callbacks                                        map[string]*atomic.Int64 // Result calls by node
	pl                                               *Plan
	root, susp, sub, hedge, nested, graph, fin, last *WorkerWrapper[int, int]
	each, eachSub                                    *WorkerWrapper[int, []WorkResult[int]]
}

// buildStressPlans compiles the inner plan (i1 -> i2, and i3, which may
// suspend) and two outer plans that run it as a SubPlan, a Hedged one,
// each item of a ForEach and a nested run, beside a ForEach, a SubGraph
// and a node under PolicySuspend. The first outer plan suspends its
// SubPlan node too and gives its ForEach a Budget and a Limit; the
// second retries the hedge under an AttemptTimeout, has an EndsRun node
// and a ForEach under AnySucceeded. It returns the inner plan's Result
// counts by node and the outer plans.
func buildStressPlans(t *testing.T) (qCalls map[string]*atomic.Int64, outers []*planStressOuter) {
	checkPath := func(ctx context.Context, all Wrappers, want []string) {
		if got := all.Path(); !slices.Equal(got, want) {
			stressRunOf(ctx).bad.add("run %d: path %v, want %v", stressRunOf(ctx).id, got, want)
		}
	}
	i1 := NewWrapper("i1", WorkerFunc[int, int](func(ctx context.Context, _ int, all Wrappers) (int, error) {
		sr := stressRunOf(ctx)
		via, _ := ctx.Value(planStressViaKey{}).([]string)
		checkPath(ctx, all, append(slices.Clone(via), "i1"))
		nap := 300 * time.Microsecond
		if sr.lazy {
			nap = 2 * time.Millisecond // outlives the sub-run, and maybe the outer run's release
		}
		stressNap(ctx, sr, nap)
		// i1 does not depend on i3: reading it before it ends is an
		// error, ErrNotEnded, and after, its result.
		if r, err := ResultOf[int](all, "i3"); err != nil && !errors.Is(err, ErrNotEnded) {
			sr.bad.add("run %d: i1 reads i3: %v", sr.id, err)
		} else if r.State == ResultSuccess {
			checkStressValue(sr.id, sr.bad, "i1 reads i3", r.Value)
		}
		checkPath(ctx, all, append(slices.Clone(via), "i1")) // also late, past the sub-run's end
		return sr.id*1000 + 50, nil
	}), 0)
	i2 := NewWrapper("i2", WorkerFunc[int, int](func(ctx context.Context, _ int, all Wrappers) (int, error) {
		sr := stressRunOf(ctx)
		up, err := i1.ResultFrom(all)
		if err != nil || up.State != ResultSuccess {
			return 0, fmt.Errorf("i2 reads i1: %v %w", up.State, err)
		}
		checkStressValue(sr.id, sr.bad, "i2 reads i1", up.Value)
		return up.Value + 1, nil
	}), 0).Depend(i1, true)
	i3 := NewWrapper("i3", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
		via, _ := ctx.Value(planStressViaKey{}).([]string)
		if sr := stressRunOf(ctx); sr.innerSuspend && (len(via) == 0 || via[0] == "sub" || rand.IntN(4) == 0) && sr.innerFails.Add(1) == 1 {
			return 0, errBoom
		}
		return stressRunOf(ctx).id*1000 + 52, nil
	}), 0).OnFailure(PolicySuspend)
	qCalls = map[string]*atomic.Int64{}
	for _, w := range []*WorkerWrapper[int, int]{i1, i2, i3} {
		qCalls[w.ID()] = new(atomic.Int64)
		w.Callback(planStressCallback{qCalls[w.ID()]})
	}
	q, err := Compile(i1, i3)
	if err != nil {
		t.Fatal(err)
	}
	via := func(ctx context.Context, _ int, all Wrappers) (context.Context, error) {
		return context.WithValue(ctx, planStressViaKey{}, all.Path()), nil
	}
	output := func(sub *Run) (int, error) {
		v, err := i2.ValueIn(sub)
		if rand.IntN(4) == 0 {
			if sr := stressRunOf(sub.workers.Context); sr != nil {
				checkStressReport(sr, "Output's report", sub.Report())
			}
		}
		return v, err
	}
	subPlan := SubPlan[int, int]{Plan: q, Input: via, Output: output}
	for variant := range 2 {
		o := &planStressOuter{}
		o.root = NewWrapper("root", WorkerFunc[int, int](func(ctx context.Context, _ int, all Wrappers) (int, error) {
			checkPath(ctx, all, []string{"root"})
			return stressRunOf(ctx).id*1000 + 1, nil
		}), 0)
		o.susp = NewWrapper("susp", WorkerFunc[int, int](func(ctx context.Context, _ int, all Wrappers) (int, error) {
			sr := stressRunOf(ctx)
			up, _ := o.root.ResultFrom(all)
			checkStressValue(sr.id, sr.bad, "susp reads root", up.Value)
			if sr.suspAttempts.Add(1) == 1 && sr.suspend {
				return 0, errBoom
			}
			return sr.id*1000 + 2, nil
		}), 0).Depend(o.root, true).OnFailure(PolicySuspend)
		o.sub = NewWrapper("sub", Worker[int, int](subPlan), 0).Depend(o.root, true)
		o.hedge = NewWrapper("hedge", Hedged(Worker[int, int](subPlan), 100*time.Microsecond, 3), 0).Depend(o.root, false)
		if variant == 0 {
			o.sub.OnFailure(PolicySuspend)
		} else {
			o.hedge.Retry(RetryPolicy{Attempts: 2, AttemptTimeout: 3 * time.Millisecond})
		}
		o.nested = NewWrapper("nested", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
			sr := stressRunOf(ctx)
			r, err := sr.a.StartPlan(ctx, q, 0)
			if err != nil {
				return 0, err
			}
			defer r.Release()
			select {
			case <-r.Done():
			case <-r.Suspended():
				r.Cancel()
			}
			checkStressReport(sr, "nested report", r.Report())
			v, err := i2.ValueIn(r)
			if err == nil {
				checkStressValue(sr.id, sr.bad, "nested i2", v)
			}
			return v, err
		}), 0).Depend(o.root, false)
		items := func(n int) func(ctx context.Context, _ int, _ Wrappers) ([]int, error) {
			return func(ctx context.Context, _ int, _ Wrappers) ([]int, error) {
				id := stressRunOf(ctx).id
				out := make([]int, n)
				for k := range out {
					out[k] = id*1000 + 10 + k
				}
				return out, nil
			}
		}
		each := ForEach[int, int, int]{
			Items: items(3),
			Worker: WorkerFunc[int, int](func(ctx context.Context, item int, all Wrappers) (int, error) {
				sr := stressRunOf(ctx)
				checkStressValue(sr.id, sr.bad, "item", item)
				checkPath(ctx, all, []string{"each", strconv.Itoa(item%1000 - 10)})
				stressNap(ctx, sr, 200*time.Microsecond)
				return item, nil
			}),
		}
		if variant == 1 {
			each.Join = AnySucceeded()
		} else {
			each.Budget, each.Limit = time.Millisecond, 2
		}
		o.each = NewWrapper("each", Worker[int, []WorkResult[int]](each), 0).Depend(o.root, true)
		o.eachSub = NewWrapper("eachSub", Worker[int, []WorkResult[int]](ForEach[int, int, int]{
			Items:  items(2),
			Worker: subPlan,
			Limit:  1,
		}), 0).Depend(o.root, true)
		o.graph = NewWrapper("graph", Worker[int, int](SubGraph[int, int]{
			Build: func(context.Context, int, Wrappers) (Built[int], error) {
				g1 := NewWrapper("g1", WorkerFunc[int, int](func(ctx context.Context, _ int, all Wrappers) (int, error) {
					checkPath(ctx, all, []string{"graph", "g1"})
					stressNap(ctx, stressRunOf(ctx), 200*time.Microsecond)
					return stressRunOf(ctx).id*1000 + 60, nil
				}), 0)
				g2 := NewWrapper("g2", WorkerFunc[int, int](func(ctx context.Context, _ int, all Wrappers) (int, error) {
					up, _ := g1.ResultFrom(all)
					sr := stressRunOf(ctx)
					checkStressValue(sr.id, sr.bad, "g2 reads g1", up.Value)
					return up.Value + 1, nil
				}), 0).Depend(g1, true)
				return Built[int]{Starts: []Wrapper{g1}, Output: func() (int, error) {
					r := g2.Result()
					return r.Value, r.Err
				}}, nil
			},
		}), 0).Depend(o.root, false)
		o.last = NewWrapper("last", WorkerFunc[int, int](func(ctx context.Context, _ int, all Wrappers) (int, error) {
			sr := stressRunOf(ctx)
			for _, id := range []string{"susp", "sub", "hedge", "graph", "nested"} {
				if r, err := ResultOf[int](all, id); err != nil {
					sr.bad.add("run %d: last reads %s: %v", sr.id, id, err)
				} else if r.State == ResultSuccess {
					checkStressValue(sr.id, sr.bad, "last reads "+id, r.Value)
				}
			}
			return sr.id*1000 + 9, nil
		}), 0).Join(AllDone()).Depend(o.susp, false).Depend(o.sub, false).Depend(o.hedge, false).
			Depend(o.each, false).Depend(o.eachSub, false).Depend(o.graph, false).Depend(o.nested, false)
		starts := []Wrapper{o.root}
		if variant == 1 {
			o.fin = NewWrapper("fin", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
				sr := stressRunOf(ctx)
				stressNap(ctx, sr, 400*time.Microsecond)
				return sr.id*1000 + 3, nil
			}), 0).Depend(o.root, true).EndsRun()
		}
		o.callbacks = map[string]*atomic.Int64{}
		for _, w := range []*WorkerWrapper[int, int]{o.root, o.susp, o.sub, o.hedge, o.nested, o.graph, o.fin, o.last} {
			if w != nil {
				o.callbacks[w.ID()] = new(atomic.Int64)
				w.Callback(planStressCallback{o.callbacks[w.ID()]})
			}
		}
		if o.pl, err = Compile(starts...); err != nil {
			t.Fatal(err)
		}
		outers = append(outers, o)
	}
	return qCalls, outers
}

// TestConcurrentPlanRunsStayApart runs two plans, which share a
// sub-plan, from many goroutines at once, on three Asyncs (one on a
// user's pool that runs tasks on the caller when full), each run
// cancelled, stopped by its own or its caller's deadline, started with a
// context already done, ended early (EndsRun), suspended and resumed
// (Rerun, SucceedWith, FailWith) or cancelled while pending, or released
// before it ended, at random; with hooks that read the run's report as
// it goes and may drop the caller's cancellation, and with workers of
// SubPlan, SubGraph, ForEach and Hedged nodes that may outlive their
// sub-runs. Every value a run shows, in its results, its reports (the
// sub-runs' too), its hooks and its workers' views (ResultOf,
// Wrappers.Path), must be its own; every Result callback and OnNodeEnd
// must fire once per node and run, and OnRunEnd once per run; a handle
// kept after its Release must show nothing while the state serves other
// runs; and the nodes a stop ended, in each run and sub-run, must carry
// one stop, the run's error's (checkOneStop). ASYNCTOOL_PLAN_STRESS_RUNS sets the runs per goroutine (25): a
// few hundred each, with -count, for a longer search.
func TestConcurrentPlanRunsStayApart(t *testing.T) {
	runs, goroutines := stressRuns(t, "ASYNCTOOL_PLAN_STRESS_RUNS", 25), 8
	bad := &planStressBad{}
	var hookMu sync.Mutex
	var hookRuns []*planStressHookRun
	hooks := &Hooks{
		OnRunStart: func(ctx context.Context, info RunInfo) context.Context {
			sr := stressRunOf(ctx)
			if sr == nil {
				return nil
			}
			hr := newStressHookRun(sr.id, info)
			hookMu.Lock()
			hookRuns = append(hookRuns, hr)
			hookMu.Unlock()
			if sr.detach {
				// The run must still end with its caller's context.
				return context.WithValue(context.WithoutCancel(ctx), planStressHookKey{}, hr)
			}
			return context.WithValue(ctx, planStressHookKey{}, hr)
		},
		OnNodeEnd: func(ctx context.Context, ev NodeEvent) {
			sr := stressRunOf(ctx)
			hr, _ := ctx.Value(planStressHookKey{}).(*planStressHookRun)
			if sr == nil || hr == nil {
				bad.add("OnNodeEnd of %q without the run's context", ev.ID)
				return
			}
			hr.nodeEnded(ev.Index)
			if rand.IntN(4) == 0 {
				if r := sr.run.Load(); r != nil {
					checkStressReport(sr, "hook report", r.Report())
				}
			}
		},
		OnNodeStart: func(ctx context.Context, ev NodeEvent) context.Context {
			if sr := stressRunOf(ctx); sr != nil && sr.detach && ev.Index%2 == 0 {
				return context.WithoutCancel(ctx) // the node's end still ends it
			}
			return nil
		},
		OnRunEnd: func(ctx context.Context, rep *Report) {
			sr := stressRunOf(ctx)
			hr, _ := ctx.Value(planStressHookKey{}).(*planStressHookRun)
			if sr == nil || hr == nil {
				bad.add("OnRunEnd without the run's context")
				return
			}
			hr.runEnded()
			checkStressReport(sr, "OnRunEnd report", rep)
		},
	}
	a := New(WithMaxWorkers(16))
	// Runs of the same plans on a second Async, whose own hooks are the
	// ones some runs' contexts install again (they fire once).
	ah := New(WithMaxWorkers(4), WithHooks(hooks), WithTimings(true))
	// And on a third, on a user's pool whose full queue runs tasks on
	// the caller.
	pool := NewPool(PoolSize(3), PoolQueue(2), PoolWhenFull(CallerRuns))
	ap := New(WithExecutor(pool))
	qCalls, outers := buildStressPlans(t)

	var stale sync.Map // run id → released handle
	var nextID atomic.Int64
	one := func() {
		sr := &planStressRun{id: int(nextID.Add(1)), bad: bad, a: a}
		switch rand.IntN(4) {
		case 0:
			sr.a = ah
		case 1:
			sr.a = ap
		}
		sr.detach = rand.IntN(6) == 0
		sr.suspend = rand.IntN(3) == 0
		sr.innerSuspend = rand.IntN(4) == 0
		sr.lazy = rand.IntN(4) == 0
		o := outers[rand.IntN(len(outers))]
		ctx := context.WithValue(context.Background(), planStressKey{}, sr)
		if rand.IntN(4) != 0 {
			ctx = WithRunHooks(ctx, hooks)
		}
		timeout := time.Minute
		mode := rand.IntN(10)
		switch mode {
		case 0: // the group deadline
			timeout = time.Duration(100+rand.IntN(3000)) * time.Microsecond
		case 4: // the caller's deadline
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, time.Duration(100+rand.IntN(3000))*time.Microsecond)
			defer cancel()
		case 5: // the caller's context has ended before the run starts
			var cancel context.CancelFunc
			ctx, cancel = context.WithCancel(ctx)
			cancel()
		}
		o.runs.Add(1)
		r, err := sr.a.StartPlan(ctx, o.pl, timeout)
		if err != nil {
			bad.add("run %d: StartPlan: %v", sr.id, err)
			return
		}
		sr.run.Store(r)
		var side sync.WaitGroup
		switch mode {
		case 1: // cancelled at a random point
			side.Go(func() {
				time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
				r.Cancel()
			})
		case 2: // a reader of the report as it goes
			side.Go(func() {
				for {
					checkStressReport(sr, "side report", r.Report())
					select {
					case <-r.Done():
						return
					default:
						runtime.Gosched()
					}
				}
			})
		case 3: // released before it ended, from here and elsewhere at once
			side.Go(func() {
				time.Sleep(time.Duration(rand.IntN(1000)) * time.Microsecond)
				r.Release()
			})
			time.Sleep(time.Duration(rand.IntN(1000)) * time.Microsecond)
			r.Release()
		}
		// Stale handles of other runs show nothing.
		stale.Range(func(k, v any) bool {
			h := v.(*Run)
			if rep := h.Report(); len(rep.Nodes) != 0 {
				bad.add("stale handle of run %v shows %d nodes", k, len(rep.Nodes))
			}
			if res := o.root.ResultIn(h); res != (WorkResult[int]{}) {
				bad.add("stale handle of run %v shows root %+v", k, res)
			}
			if err := h.Resume("susp", Rerun()); err == nil {
				bad.add("stale handle of run %v resumed", k)
			}
			h.Cancel()
			stale.Delete(k)
			return rand.IntN(2) == 0
		})
	resuming:
		for mode != 3 { // a run released as it goes has no Resume
			select {
			case <-r.Suspended():
			case <-r.Done():
				break resuming
			}
			if rand.IntN(8) == 0 {
				r.Cancel()
			}
			for _, n := range r.Report().Nodes {
				if n.Status != StatusPending || n.State != StateWorking {
					continue
				}
				tag := 2
				if n.ID == "sub" {
					tag = 51
				}
				hows := []Resumption{Rerun(), SucceedWith(sr.id*1000 + tag), FailWith(errBoom)}
				err := r.Resume(n.ID, hows[rand.IntN(len(hows))])
				if err != nil && !errors.Is(err, ErrNotPending) {
					bad.add("run %d: Resume: %v", sr.id, err)
				}
			}
		}
		hung, err := waitStressRun(r, sr.id, bad)
		if hung {
			return
		}
		if mode != 3 {
			want := map[*WorkerWrapper[int, int]]int{o.root: 1, o.susp: 2, o.sub: 51, o.hedge: 51, o.nested: 51, o.graph: 61, o.last: 9}
			if o.fin != nil {
				want[o.fin] = 3
			}
			for w, tag := range want {
				if res := w.ResultIn(r); res.State == ResultSuccess && res.Value != sr.id*1000+tag {
					bad.add("run %d: %s = %d, want %d", sr.id, w.ID(), res.Value, sr.id*1000+tag)
				} else if res.State == ResultDefault && err == nil {
					bad.add("run %d ended without error, %s has no result", sr.id, w.ID())
				}
			}
			for _, w := range []*WorkerWrapper[int, []WorkResult[int]]{o.each, o.eachSub} {
				if res := w.ResultIn(r); res.State == ResultSuccess {
					for k, item := range res.Value {
						want := sr.id*1000 + 10 + k
						if w == o.eachSub {
							want = sr.id*1000 + 51
						}
						if item.State == ResultSuccess && item.Value != want {
							bad.add("run %d: %s[%d] = %d, want %d", sr.id, w.ID(), k, item.Value, want)
						}
					}
				}
			}
			rep := r.Report()
			checkStressReport(sr, "report", rep)
			for _, m := range checkOneStop(rep, err, fmt.Sprintf("run %d (mode %d)", sr.id, mode)) {
				bad.add("%s", m)
			}
		}
		side.Wait()
		if rand.IntN(2) == 0 {
			side.Go(func() { checkStressReport(sr, "racing report", r.Report()) })
		}
		r.Release()
		side.Wait()
		if res := o.root.ResultIn(r); res != (WorkResult[int]{}) {
			bad.add("run %d: released handle shows root %+v", sr.id, res)
		}
		stale.Store(sr.id, r)
	}
	runStressFrom(t, goroutines, runs, one)
	if err := ap.Close(); err != nil {
		t.Fatal(err)
	}
	if err := pool.Close(); err != nil {
		t.Fatal(err)
	}
	if err := ah.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	for _, m := range bad.msgs {
		t.Error(m)
	}
	for _, o := range outers {
		for id, n := range o.callbacks {
			if n.Load() != o.runs.Load() {
				t.Errorf("node %s: %d Result calls in %d runs", id, n.Load(), o.runs.Load())
			}
		}
	}
	if n1, n2, n3 := qCalls["i1"].Load(), qCalls["i2"].Load(), qCalls["i3"].Load(); n1 != n2 || n1 != n3 {
		t.Errorf("the sub-plan's nodes had %d, %d and %d Result calls, one each per run", n1, n2, n3)
	}
	for _, hr := range hookRuns {
		hr.check(t)
	}
	t.Logf("%d runs, %d hooked (sub-)runs", nextID.Load(), len(hookRuns))
}
