package asynctool

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// causeStressRun is one run of TestConcurrentRunsKeepCausesAndHedgedSubRuns:
// its identity (every value it writes is id*1000 plus a tag below 1000)
// and what its workers are to do.
type causeStressRun struct {
	ps    *planStressRun // id and the test's violations, for checkStressReport
	take  bool           // route takes user's branch
	fail  bool           // user's worker fails
	seq   atomic.Int32   // tags of the sub-runs' values, 1 up
	hooks []*planStressHookRun
	mu    sync.Mutex
}

type causeStressKey struct{}

func causeRunOf(ctx context.Context) *causeStressRun {
	cr, _ := ctx.Value(causeStressKey{}).(*causeStressRun)
	return cr
}

// causeStressErr is user's failure in one run.
type causeStressErr struct{ id int }

func (e *causeStressErr) Error() string { return "user of run " + strconv.Itoa(e.id) + " failed" }

// causeCached is the tag of a value a hedged call returns without
// starting a sub-run.
const causeCached = 999

// causeDefault is the DefaultValue of causeDefaulter.
const causeDefault = -7

// causeDefaulter is a worker with a DefaultValue that returns its
// run's tag 5.
type causeDefaulter struct{}

func (causeDefaulter) Action(ctx context.Context, _ int, _ Wrappers) (int, error) {
	return causeRunOf(ctx).ps.id*1000 + 5, nil
}

func (causeDefaulter) DefaultValue() int { return causeDefault }

// causeLateFailure is a worker that fails, often as its run ends, and
// whose DefaultValue takes a while: the run's end often finds its node's
// failure being recorded.
type causeLateFailure struct{}

func (causeLateFailure) Action(ctx context.Context, _ int, _ Wrappers) (int, error) {
	causeNap(ctx, 600*time.Microsecond)
	return 0, &causeStressErr{causeRunOf(ctx).ps.id}
}

func (causeLateFailure) DefaultValue() int {
	causeNap(context.Background(), 200*time.Microsecond)
	return causeDefault
}

// causeNap waits up to max, or until ctx ends.
func causeNap(ctx context.Context, max time.Duration) {
	t := time.NewTimer(time.Duration(rand.Int64N(int64(max))))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// causeMust lists, by node, the must upstreams as the node's join sees
// them.
var causeMust = map[string][]string{
	"page":    {"user"},
	"recs":    {"user"},
	"mid":     {"user"},
	"chain":   {"mid"},
	"allS":    {"user", "slow"},
	"named":   {"user"},
	"whenN":   {"user", "slow"},
	"dv":      {"user"},
	"slowDep": {"slow"},
	"lateDep": {"late"},
}

// buildCauseStressPlan compiles one plan of the test, its edges declared
// in an order that seed picks: route decides whether user is taken; user
// fails or succeeds; page, marked EndsRun, needs user, and waits for the
// hedged nodes hsub (Hedged of a worker whose calls start a SubPlan,
// maybe two in a row, or return a cached value) and hh (a Hedged of
// such a Hedged); user's other dependants have the default join (one
// with a Default, one a Defaulter, one a chain), AllSucceeded,
// NamedSucceeded, When and AllDone joins, some beside slow, which often
// runs until the run ends; late fails at about the time the run ends,
// before lateDep. It counts every node's Result calls in calls.
func buildCauseStressPlan(t *testing.T, seed uint64, calls map[string]*atomic.Int64) *Plan {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	i1 := NewWrapper("i1", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
		causeNap(ctx, 300*time.Microsecond)
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		cr := causeRunOf(ctx)
		return cr.ps.id*1000 + int(cr.seq.Add(1)), nil
	}), 0)
	q, err := Compile(i1)
	if err != nil {
		t.Fatal(err)
	}
	sub := SubPlan[int, int]{Plan: q, Output: func(r *Run) (int, error) { return i1.ValueIn(r) }}
	// w is a hedged call: a cached value, now or late, or a sub-run's,
	// sometimes after a first sub-run whose value it drops.
	w := WorkerFunc[int, int](func(ctx context.Context, p int, all Wrappers) (int, error) {
		cr := causeRunOf(ctx)
		switch rand.IntN(4) {
		case 0:
			return cr.ps.id*1000 + causeCached, nil
		case 1:
			causeNap(ctx, 200*time.Microsecond)
			return cr.ps.id*1000 + causeCached, nil
		case 2:
			if _, err := sub.Action(ctx, p, all); err != nil {
				return 0, err
			}
		}
		return sub.Action(ctx, p, all)
	})
	route := NewWrapper("route", WorkerFunc[int, bool](func(ctx context.Context, _ int, _ Wrappers) (bool, error) {
		return causeRunOf(ctx).take, nil
	}), 0)
	user := NewWrapper("user", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
		cr := causeRunOf(ctx)
		causeNap(ctx, 400*time.Microsecond)
		if cr.fail {
			return 0, &causeStressErr{cr.ps.id}
		}
		return cr.ps.id*1000 + 2, nil
	}), 0).Depend(route, true).Join(When("route", func(b bool) bool { return b }))
	slow := NewWrapper("slow", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
		causeNap(ctx, 3*time.Millisecond) // often outlives the run
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		return causeRunOf(ctx).ps.id*1000 + 3, nil
	}), 0)
	tagged := func(tag int) WorkerFunc[int, int] {
		return func(ctx context.Context, _ int, _ Wrappers) (int, error) {
			return causeRunOf(ctx).ps.id*1000 + tag, nil
		}
	}
	hsub := NewWrapper("hsub", Hedged(Worker[int, int](w), 50*time.Microsecond, 3), 0)
	hh := NewWrapper("hh", Hedged(Hedged(Worker[int, int](w), 30*time.Microsecond, 2), 80*time.Microsecond, 2), 0)
	mid := NewWrapper("mid", tagged(6), 0)
	// deps declares a node's edges in a random order.
	type edge struct {
		up   Wrapper
		must bool
	}
	deps := func(n *WorkerWrapper[int, int], es ...edge) *WorkerWrapper[int, int] {
		rng.Shuffle(len(es), func(i, j int) { es[i], es[j] = es[j], es[i] })
		for _, e := range es {
			n.Depend(e.up, e.must)
		}
		return n
	}
	nodes := []*WorkerWrapper[int, int]{user, slow, hsub, hh, mid}
	// user's dependants, made in a random order: user's out-edges are in
	// that order, and so is its fan-out.
	makers := []func(){
		func() {
			nodes = append(nodes, deps(NewWrapper("page", tagged(4), 0), edge{user, true}, edge{hsub, false}, edge{hh, false}).EndsRun())
		},
		func() { nodes = append(nodes, NewWrapper("recs", tagged(7), 0).Depend(user, true).Default(-2)) },
		func() { deps(mid, edge{user, true}) },
		func() {
			nodes = append(nodes, deps(NewWrapper("allS", tagged(8), 0), edge{user, rng.IntN(2) == 0}, edge{slow, rng.IntN(2) == 0}).Join(AllSucceeded()))
		},
		func() {
			nodes = append(nodes, deps(NewWrapper("named", tagged(9), 0), edge{user, false}, edge{slow, false}).Join(NamedSucceeded("user")))
		},
		func() {
			nodes = append(nodes, deps(NewWrapper("whenN", tagged(10), 0), edge{user, true}, edge{slow, rng.IntN(2) == 0}).
				Join(When("user", func(v int) bool { return v%1000 == 2 })))
		},
		func() {
			nodes = append(nodes, NewWrapper("dv", Worker[int, int](causeDefaulter{}), 0).Depend(user, true))
		},
		func() {
			nodes = append(nodes, deps(NewWrapper("allDone", tagged(11), 0), edge{user, true}, edge{slow, true}).Join(AllDone()))
		},
	}
	rng.Shuffle(len(makers), func(i, j int) { makers[i], makers[j] = makers[j], makers[i] })
	for _, m := range makers {
		m()
	}
	// late fails, often as the run ends, and its DefaultValue takes a
	// while, during which lateDep must be given its failure all the same.
	late := NewWrapper("late", Worker[int, int](causeLateFailure{}), 0)
	nodes = append(nodes, late, NewWrapper("chain", tagged(12), 0).Depend(mid, true), NewWrapper("slowDep", tagged(13), 0).Depend(slow, true),
		NewWrapper("lateDep", tagged(14), 0).Depend(late, true))
	for _, n := range nodes {
		n.Callback(ResultFunc[int, int](func(bool, int, WorkResult[int]) { calls[n.ID()].Add(1) }))
	}
	route.Callback(ResultFunc[int, bool](func(bool, int, WorkResult[bool]) { calls["route"].Add(1) }))
	starts := []Wrapper{route, slow, hsub, hh, late}
	rng.Shuffle(len(starts), func(i, j int) { starts[i], starts[j] = starts[j], starts[i] })
	pl, err := Compile(starts...)
	if err != nil {
		t.Fatal(err)
	}
	return pl
}

// checkCauses checks the rule of EndsRun in rep, the report of a run that
// ended with its EndsRun node: a node that never started, one of whose
// must upstreams failed for a reason of its own or was not taken, ends
// with that upstream's *UpstreamError (whose root is this run's user's
// failure) or ErrNotTaken, never ErrRunEnded; a node whose must
// upstreams did neither was stopped by the run's end, or ran.
func checkCauses(cr *causeStressRun, rep *Report, why string) {
	id, bad := cr.ps.id, cr.ps.bad
	byID := map[string]*NodeReport{}
	for k := range rep.Nodes {
		byID[rep.Nodes[k].ID] = &rep.Nodes[k]
	}
	for name, ups := range causeMust {
		n := byID[name]
		if n == nil {
			bad.add("run %d: no node %s", id, name)
			continue
		}
		if n.Status == StatusPending || n.State != StateFinish && n.State != StateError {
			bad.add("run %d (%s): %s has not ended: %v %v", id, why, name, n.Status, n.State)
			continue
		}
		if n.Ran || n.Result == ResultSuccess {
			continue
		}
		var failed, notTaken []string
		for _, u := range ups {
			switch un := byID[u]; {
			case un.Err == ErrNotTaken:
				notTaken = append(notTaken, u)
			case un.Result == ResultException:
				failed = append(failed, u)
			}
		}
		if len(failed) == 0 && len(notTaken) == 0 {
			if !errors.Is(n.Err, ErrRunEnded) {
				bad.add("run %d (%s): %s, whose must upstreams %v neither failed nor were not taken, ended with %v (%s), not the run's end", id, why, name, ups, n.Err, n.Reason)
			}
			continue
		}
		if errors.Is(n.Err, ErrRunEnded) || n.Result == ResultTimeout {
			bad.add("run %d (%s): %s, whose must upstreams %v failed and %v were not taken, ended with %v (%s)", id, why, name, failed, notTaken, n.Err, n.Reason)
			continue
		}
		if n.Err == ErrNotTaken {
			if len(notTaken) == 0 || n.Status != StatusSkipped {
				bad.add("run %d (%s): %s not taken (%v), though no must upstream of %v was", id, why, name, n.Status, ups)
			}
			continue
		}
		var up *UpstreamError
		var root *causeStressErr
		switch {
		case !errors.As(n.Err, &up) || !slices.Contains(failed, up.ID):
			bad.add("run %d (%s): %s ended with %v, not the failure of one of %v", id, why, name, n.Err, failed)
		case !errors.As(n.Err, &root) || root.id != id:
			bad.add("run %d (%s): %s ended with %v, not this run's failure", id, why, name, n.Err)
		case !strings.Contains(n.Reason, strconv.Quote(up.ID)):
			bad.add("run %d (%s): %s's reason %q does not name %s", id, why, name, n.Reason, up.ID)
		}
		if name == "dv" && n.Value != causeDefault {
			bad.add("run %d (%s): dv's value %v, not its DefaultValue", id, why, n.Value)
		}
		if name == "recs" && n.Value != -2 {
			bad.add("run %d (%s): recs's value %v, not its Default", id, why, n.Value)
		}
	}
}

// checkHedgedSubs checks that each hedged node that succeeded in rep shows
// the sub-run whose value it returned, or none for a cached value.
func checkHedgedSubs(cr *causeStressRun, rep *Report, why string) {
	id, bad := cr.ps.id, cr.ps.bad
	for _, n := range rep.Nodes {
		if (n.ID != "hsub" && n.ID != "hh") || n.Result != ResultSuccess {
			continue
		}
		v, _ := n.Value.(int)
		switch {
		case v%1000 == causeCached:
			if n.Sub != nil {
				bad.add("run %d (%s): %s returned a cached %d, and shows a sub-run:\n%v", id, why, n.ID, v, n.Sub)
			}
		case n.Sub == nil:
			bad.add("run %d (%s): %s returned a sub-run's %d, and shows none", id, why, n.ID, v)
		case len(n.Sub.Nodes) != 1 || n.Sub.Nodes[0].Value != v:
			bad.add("run %d (%s): %s returned %d, and shows a sub-run of another value:\n%v", id, why, n.ID, v, n.Sub)
		}
	}
}

// TestConcurrentRunsKeepCausesAndHedgedSubRuns runs compiled plans (pooled
// run states) from several goroutines at once, each run with its own
// values carried by its context, its EndsRun node ended by a failing,
// not taken or succeeding upstream, its edges declared in one of several
// orders, beside Hedged nodes (one a Hedged of a Hedged) whose calls
// start a SubPlan, two in a row, or none; runs are cancelled or released
// before their Wait returns at random, and their reports read as they
// go. In every run that ended with its EndsRun node, a node that never
// started and whose must upstream had failed (or was not taken) reports
// that upstream, never the run's end; every hedged node shows the
// sub-run whose value it returned, none for a cached value; every value
// is its run's; every Result callback and OnNodeEnd fires once per node
// and run; in every run and sub-run, the nodes a stop ended (the run's
// end with page, or a Cancel) carry one stop, the run's error's
// (checkOneStop). ASYNCTOOL_CAUSE_STRESS_RUNS sets the runs per goroutine (20).
func TestConcurrentRunsKeepCausesAndHedgedSubRuns(t *testing.T) {
	runs, goroutines := stressRuns(t, "ASYNCTOOL_CAUSE_STRESS_RUNS", 20), 6
	ids := []string{"route", "user", "slow", "hsub", "hh", "page", "recs", "mid", "chain", "allS", "named", "whenN", "dv", "allDone", "slowDep", "late", "lateDep"}
	calls := resultCounts(ids)
	base := rand.Uint64()
	var plans []*Plan
	for k := range 6 {
		plans = append(plans, buildCauseStressPlan(t, base+uint64(k), calls))
	}
	bad := &planStressBad{}
	hooks := &Hooks{
		OnRunStart: func(ctx context.Context, info RunInfo) context.Context {
			cr := causeRunOf(ctx)
			hr := newStressHookRun(cr.ps.id, info)
			cr.mu.Lock()
			cr.hooks = append(cr.hooks, hr)
			cr.mu.Unlock()
			return context.WithValue(ctx, planStressHookKey{}, hr)
		},
		OnNodeEnd: func(ctx context.Context, ev NodeEvent) {
			hr, _ := ctx.Value(planStressHookKey{}).(*planStressHookRun)
			hr.nodeEnded(ev.Index)
		},
		OnRunEnd: func(ctx context.Context, rep *Report) {
			hr, _ := ctx.Value(planStressHookKey{}).(*planStressHookRun)
			hr.runEnded()
			checkStressReport(causeRunOf(ctx).ps, "OnRunEnd report", rep)
		},
	}
	asyncs := []*Async{New(WithMaxWorkers(16)), New(WithMaxWorkers(8), WithTimings(true))}
	crs := make(chan *causeStressRun, runs*goroutines)
	var nextID atomic.Int64
	var ended, failed, notTaken, released, cancelled atomic.Int64
	one := func() {
		cr := &causeStressRun{ps: &planStressRun{id: int(nextID.Add(1)), bad: bad}}
		cr.take = rand.IntN(5) != 0
		cr.fail = rand.IntN(2) == 0
		id := cr.ps.id
		ctx := WithRunHooks(context.WithValue(context.Background(), causeStressKey{}, cr), hooks)
		r, err := asyncs[rand.IntN(len(asyncs))].StartPlan(ctx, plans[rand.IntN(len(plans))], time.Minute)
		if err != nil {
			bad.add("run %d: StartPlan: %v", id, err)
			return
		}
		mode := rand.IntN(8)
		var side sync.WaitGroup
		switch mode {
		case 0: // cancelled at a random point
			cancelled.Add(1)
			side.Go(func() {
				causeNap(context.Background(), time.Millisecond)
				r.Cancel()
			})
		case 1: // released before Wait returns
			released.Add(1)
			side.Go(func() {
				causeNap(context.Background(), time.Millisecond)
				r.Release()
			})
		case 2, 3: // its report read as it goes
			side.Go(func() {
				for {
					rep := r.Report()
					checkStressReport(cr.ps, "report read as it goes", rep)
					checkHedgedSubs(cr, rep, "report read as it goes")
					select {
					case <-r.Done():
						return
					default:
						runtime.Gosched()
					}
				}
			})
		}
		hung, err := waitStressRun(r, id, bad)
		if hung {
			return
		}
		side.Wait()
		if mode != 1 {
			rep := r.Report()
			checkStressReport(cr.ps, "report", rep)
			checkHedgedSubs(cr, rep, "report")
			for _, m := range checkOneStop(rep, err, fmt.Sprintf("run %d (mode %d)", id, mode)) {
				bad.add("%s", m)
			}
			if mode != 0 { // a Cancel may stop nodes whatever their upstreams
				if err != nil {
					bad.add("run %d: Wait: %v", id, err)
				}
				checkCauses(cr, rep, "report")
				ended.Add(1)
				if !cr.take {
					notTaken.Add(1)
				} else if cr.fail {
					failed.Add(1)
				}
			}
		}
		r.Release()
		crs <- cr
	}
	runStressFrom(t, goroutines, runs, one)
	for _, a := range asyncs {
		if err := a.Close(); err != nil {
			t.Error(err)
		}
	}
	// Hedged calls that lost may outlive their run, with their sub-runs'
	// hooks: Close has waited for them.
	close(crs)
	for cr := range crs {
		for _, hr := range cr.hooks {
			hr.check(t)
		}
	}
	for _, m := range bad.msgs {
		t.Error(m)
	}
	for _, id := range ids {
		if n := calls[id].Load(); n != nextID.Load() {
			t.Errorf("node %s: %d Result calls in %d runs", id, n, nextID.Load())
		}
	}
	t.Logf("seed %d: %d runs; %d ended with their EndsRun node (%d with user failed, %d not taken); %d cancelled, %d released early",
		base, nextID.Load(), ended.Load(), failed.Load(), notTaken.Load(), cancelled.Load(), released.Load())
}
