package asynctool

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Randomized checks of the branch rules (When, WhenResult, DecideSkip and
// how every join propagates a branch not taken) against a reference
// model.
//
// What is left to timing is modelled: a node's outcome is checked against
// the set of outcomes the documented rules allow given the outcomes its
// upstreams actually had, in topological order. Roots are fixed by their
// workers, so by induction every node is checked against the rules; the
// set has two elements where the contract leaves a race ("a failed
// upstream fails the node at once", "an upstream not taken makes the node
// not taken": when a node has both, which comes first decides).
//
// Half the graphs have ShortCircuit(false) on every node, and then no
// node may be short-circuited. In the others short-circuiting is on, and
// whether a node is skipped (ErrSkipped) depends on timing: the model
// allows it for any node that has successors and did not run, and its
// successors, which had all decided while it had not ended, are checked
// with it as an upstream that has not ended: a node that needs every
// upstream to end (AllDone, WhenResult, a custom join that waits for
// all) must never see one skipped, and the others must have decided on
// the rest.

// branchCat is a node's outcome as the model sees it.
type branchCat uint8

const (
	branchOK       branchCat = iota // ran and succeeded
	branchContinue                  // ran and failed under PolicyContinue: counts as a success for joins
	branchFail                      // ran and failed
	branchNotTaken                  // did not run: ErrNotTaken
	branchUpFail                    // did not run: failed by its upstreams (or its join)
	branchSkipped                   // did not run: short-circuited (ErrSkipped)
)

func (c branchCat) String() string {
	return [...]string{"ok", "continue", "fail", "not taken", "failed by upstream", "skipped"}[c]
}

func (c branchCat) okish() bool { return c == branchOK || c == branchContinue }

func (c branchCat) failed() bool { return c == branchFail || c == branchUpFail }

type branchSet uint8

func (s branchSet) has(c branchCat) bool { return s&(1<<c) != 0 }

func branchOne(cs ...branchCat) branchSet {
	var s branchSet
	for _, c := range cs {
		s |= 1 << c
	}
	return s
}

func (s branchSet) String() string {
	var names []string
	for c := branchOK; c <= branchSkipped; c++ {
		if s.has(c) {
			names = append(names, c.String())
		}
	}
	return "{" + strings.Join(names, ", ") + "}"
}

type branchJoinKind uint8

const (
	branchDefault branchJoinKind = iota
	branchAll
	branchAllDone
	branchAny
	branchAtLeast
	branchNamed
	branchWhen
	branchWhenResult
	branchCustom
	branchKinds
)

// branchJoin is a node's generated join.
type branchJoin struct {
	kind  branchJoinKind
	k     int   // AtLeast's n
	named []int // NamedSucceeded's upstreams
	on    int   // When's and WhenResult's upstream
	// pred: When's condition, on the value v of upstream on (100+on when
	// it succeeded, its default -(100+on) under PolicyContinue): 0 true,
	// 1 false, 2 v > 0, 3 v < 0. WhenResult's: a mask of the upstream's
	// outcomes it is true for: 1 success, 2 not taken, 4 anything else.
	pred int
	// The custom join: rule 0 waits for every upstream, then answers
	// table[anyFailed*2+anyNotTaken]; rule 1 answers early as soon as an
	// upstream ended without counting as a success, else runs once all
	// succeeded; rule 2 always waits (the run fails it, undecided).
	rule  int
	table [4]Decision
	early Decision
}

type branchGraph struct {
	n, workers int
	deps       [][]int
	must       [][]bool
	outcome    []int // 0 succeed, 1 fail, 2 fail under PolicyContinue
	join       []branchJoin
	starts     []int
	plans      int  // concurrent plan runs
	noSkip     bool // ShortCircuit(false) on every node
	hasSucc    []bool
}

// branchSource is where the generator takes its choices from: the fuzz
// input's bytes, then a generator seeded from them (zeros would make every
// later pair of nodes an edge).
type branchSource struct {
	b    []byte
	rest *rand.Rand
}

func (s *branchSource) next(n int) int {
	if n <= 1 {
		return 0
	}
	if len(s.b) == 0 {
		return s.rest.IntN(n)
	}
	v := int(s.b[0])
	s.b = s.b[1:]
	return v % n
}

func branchDecode(data []byte) *branchGraph {
	h := fnv.New64a()
	h.Write(data)
	s := &branchSource{b: data, rest: rand.New(rand.NewPCG(h.Sum64(), uint64(len(data))))}
	g := &branchGraph{n: 1 + s.next(14), workers: 1 + s.next(4), plans: 2 + s.next(3), noSkip: s.next(2) == 0}
	g.hasSucc = make([]bool, g.n)
	g.deps = make([][]int, g.n)
	g.must = make([][]bool, g.n)
	g.outcome = make([]int, g.n)
	g.join = make([]branchJoin, g.n)
	for j := range g.n {
		switch s.next(10) {
		case 7, 8:
			g.outcome[j] = 1
		case 9:
			g.outcome[j] = 2
		}
		for i := range j {
			if s.next(3) == 0 {
				g.deps[j] = append(g.deps[j], i)
				g.hasSucc[i] = true
				g.must[j] = append(g.must[j], s.next(2) == 0)
			}
		}
		if len(g.deps[j]) == 0 {
			g.starts = append(g.starts, j)
			continue
		}
		if s.next(10) == 0 {
			g.starts = append(g.starts, j) // a start node with upstreams still waits for its join
		}
		d := g.deps[j]
		jn := &g.join[j]
		// When one time in four, the others one time in eleven each.
		if jn.kind = branchJoinKind(s.next(int(branchKinds) + 3)); jn.kind >= branchKinds {
			jn.kind = branchWhen
		}
		jn.drawParams(s, d)
	}
	return g
}

// drawParams draws, from s, the parameters of a join of kind jn.kind over
// the upstreams d: AtLeast's count, the named upstreams, a When's
// upstream and condition, a custom join's rule and answers.
func (jn *branchJoin) drawParams(s *branchSource, d []int) {
	switch jn.kind {
	case branchAtLeast:
		jn.k = 1 + s.next(len(d))
	case branchNamed:
		for _, i := range d {
			if s.next(2) == 0 {
				jn.named = append(jn.named, i)
			}
		}
		if len(jn.named) == 0 {
			jn.named = []int{d[s.next(len(d))]}
		}
	case branchWhen:
		jn.on, jn.pred = d[s.next(len(d))], s.next(4)
	case branchWhenResult:
		jn.on, jn.pred = d[s.next(len(d))], s.next(8)
	case branchCustom:
		if s.next(7) == 0 { // rule 2 one time in seven
			jn.rule = 2
		} else {
			jn.rule = s.next(2)
		}
		for k := range jn.table {
			jn.table[k] = [...]Decision{DecideRun, DecideSkip, DecideFail}[s.next(3)]
		}
		jn.early = [...]Decision{DecideSkip, DecideFail}[s.next(2)]
	}
}

func (g *branchGraph) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d nodes, %d workers, %d plan runs, ShortCircuit(false) %v, starts %v\n", g.n, g.workers, g.plans, g.noSkip, g.starts)
	for j := range g.n {
		fmt.Fprintf(&b, "  n%d: outcome %d, deps", j, g.outcome[j])
		for k, i := range g.deps[j] {
			fmt.Fprintf(&b, " n%d(must=%v)", i, g.must[j][k])
		}
		if len(g.deps[j]) > 0 {
			fmt.Fprintf(&b, ", join %s", g.join[j].describe())
		}
		b.WriteByte('\n')
	}
	return b.String()
}

func (jn branchJoin) describe() string {
	switch jn.kind {
	case branchDefault:
		return "default"
	case branchAll:
		return "AllSucceeded"
	case branchAllDone:
		return "AllDone"
	case branchAny:
		return "AnySucceeded"
	case branchAtLeast:
		return fmt.Sprintf("AtLeast(%d)", jn.k)
	case branchNamed:
		return fmt.Sprintf("Named%v", jn.named)
	case branchWhen:
		return fmt.Sprintf("When(n%d, pred %d)", jn.on, jn.pred)
	case branchWhenResult:
		return fmt.Sprintf("WhenResult(n%d, mask %d)", jn.on, jn.pred)
	}
	return fmt.Sprintf("Custom(rule %d, table %v, early %v)", jn.rule, jn.table, jn.early)
}

func branchID(i int) string { return fmt.Sprint("n", i) }

// branchValue and branchDefault are node i's value when it succeeds and its
// default value.
func branchValue(i int) int { return 100 + i }

func branchDefVal(i int) int { return -(100 + i) }

func branchWhenPred(pred, v int) bool {
	return [...]bool{true, false, v > 0, v < 0}[pred]
}

// branchResultBit is the bit of WhenResult's mask for an upstream's outcome.
func branchResultBit(c branchCat) int {
	switch c {
	case branchOK:
		return 1
	case branchNotTaken:
		return 2
	}
	return 4
}

// allowed is the model: the outcomes node j may have, given the outcomes
// its upstreams had, by the rules documented on When and the joins.
func (g *branchGraph) allowed(j int, cats []branchCat) branchSet {
	deps := g.deps[j]
	if len(deps) == 0 {
		return g.ran(j)
	}
	jn := g.join[j]
	// An upstream skipped had not ended when the node decided: it is
	// neither a success nor a failure nor a branch not taken, and a join
	// that needs it cannot have decided (the empty set).
	ups := func(pick func(k int) bool) (okAll, anyFail, anyNT, anySkipped bool) {
		okAll = true
		for k, i := range deps {
			if !pick(k) {
				continue
			}
			c := cats[i]
			okAll = okAll && c.okish()
			anyFail = anyFail || c.failed()
			anyNT = anyNT || c == branchNotTaken
			anySkipped = anySkipped || c == branchSkipped
		}
		return
	}
	// A join where every counted upstream must succeed: run when all
	// did; fail at the first failure, not taken at the first upstream
	// not taken, whichever comes first.
	allOf := func(pick func(k int) bool, run branchSet) branchSet {
		okAll, anyFail, anyNT, _ := ups(pick)
		switch {
		case okAll:
			return run
		case anyFail && anyNT:
			return branchOne(branchUpFail, branchNotTaken)
		case anyFail:
			return branchOne(branchUpFail)
		case anyNT:
			return branchOne(branchNotTaken)
		}
		return 0 // only upstreams that had not ended kept it from running
	}
	// At least k of the counted upstreams must succeed: the join is
	// impossible once n-k+1 did not; it is not taken if those that had
	// ended then were all not taken, failed if one of them failed.
	atLeast := func(pick func(k int) bool, k int) branchSet {
		n, ok, nt, failed := 0, 0, 0, 0
		for kk, i := range deps {
			if !pick(kk) {
				continue
			}
			n++
			switch c := cats[i]; {
			case c.okish():
				ok++
			case c == branchNotTaken:
				nt++
			case c.failed():
				failed++
			}
		}
		if ok >= k {
			return g.ran(j)
		}
		var s branchSet
		if nt >= n-k+1 {
			s |= branchOne(branchNotTaken)
		}
		if failed > 0 && nt+failed >= n-k+1 {
			s |= branchOne(branchUpFail)
		}
		return s
	}
	_, _, _, anySkipped := ups(func(int) bool { return true })
	every := func(int) bool { return true }
	switch jn.kind {
	case branchDefault:
		anyMust := false
		for _, m := range g.must[j] {
			anyMust = anyMust || m
		}
		if anyMust {
			return allOf(func(k int) bool { return g.must[j][k] }, g.ran(j))
		}
		return atLeast(every, 1)
	case branchAll:
		return allOf(every, g.ran(j))
	case branchAllDone:
		if anySkipped {
			return 0
		}
		return g.ran(j)
	case branchAny:
		return atLeast(every, 1)
	case branchAtLeast:
		return atLeast(every, jn.k)
	case branchNamed:
		return allOf(func(k int) bool {
			for _, i := range jn.named {
				if deps[k] == i {
					return true
				}
			}
			return false
		}, g.ran(j))
	case branchWhen:
		if okAll, _, _, _ := ups(every); okAll {
			v := branchValue(jn.on)
			if cats[jn.on] == branchContinue {
				v = branchDefVal(jn.on)
			}
			if !branchWhenPred(jn.pred, v) {
				return branchOne(branchNotTaken)
			}
		}
		return allOf(every, g.ran(j))
	case branchWhenResult:
		if anySkipped {
			return 0
		}
		if jn.pred&branchResultBit(cats[jn.on]) == 0 {
			return branchOne(branchNotTaken)
		}
		return g.ran(j)
	}
	var d Decision
	okAll, anyFail, anyNT, _ := ups(every)
	switch {
	case jn.rule == 1 && (anyFail || anyNT):
		d = jn.early
	case anySkipped:
		return 0
	case jn.rule == 0:
		d = jn.table[branchB(anyFail)*2+branchB(anyNT)]
	case jn.rule == 1 && okAll:
		d = DecideRun
	default:
		return branchOne(branchUpFail)
	}
	switch d {
	case DecideRun:
		return g.ran(j)
	case DecideSkip:
		return branchOne(branchNotTaken)
	}
	return branchOne(branchUpFail)
}

func branchB(b bool) int {
	if b {
		return 1
	}
	return 0
}

// ran is node j's outcome once it runs.
func (g *branchGraph) ran(j int) branchSet {
	return branchOne([...]branchCat{branchOK, branchFail, branchContinue}[g.outcome[j]])
}

// branchRun records one run's view of its nodes, from its workers' contexts
// and its own hooks.
type branchRun struct {
	acts, starts, ends, skips []atomic.Int32
}

type branchRunKey struct{}

func newBranchRun(n int) *branchRun {
	return &branchRun{acts: make([]atomic.Int32, n), starts: make([]atomic.Int32, n), ends: make([]atomic.Int32, n), skips: make([]atomic.Int32, n)}
}

// ctx returns the context of a run recorded in rr.
func (rr *branchRun) ctx() context.Context {
	ctx := context.WithValue(context.Background(), branchRunKey{}, rr)
	return WithRunHooks(ctx, &Hooks{
		OnNodeStart: func(_ context.Context, ev NodeEvent) context.Context {
			rr.starts[branchIndex(ev.ID)].Add(1)
			return nil
		},
		OnNodeEnd:  func(_ context.Context, ev NodeEvent) { rr.ends[branchIndex(ev.ID)].Add(1) },
		OnNodeSkip: func(_ context.Context, ev NodeEvent) { rr.skips[branchIndex(ev.ID)].Add(1) },
	})
}

func branchIndex(id string) int {
	var i int
	fmt.Sscanf(id, "n%d", &i)
	return i
}

// branchCallback counts a set of wrappers' callbacks over all their runs.
type branchCallback struct {
	begins, results *atomic.Int32
	last            *atomic.Pointer[WorkResult[int]]
}

func (c branchCallback) Begin() { c.begins.Add(1) }

func (c branchCallback) Result(_ bool, _ int, r WorkResult[int]) {
	c.results.Add(1)
	c.last.Store(&r)
}

// branchBuilt is one set of wrappers for g.
type branchBuilt struct {
	ws              []*WorkerWrapper[int, int]
	begins, results []atomic.Int32
	last            []atomic.Pointer[WorkResult[int]]
}

// build makes fresh wrappers for g; a condition that sees a value the
// model says it cannot see records it in bad.
func (g *branchGraph) build(bad func(string, ...any)) *branchBuilt {
	b := &branchBuilt{ws: make([]*WorkerWrapper[int, int], g.n), begins: make([]atomic.Int32, g.n),
		results: make([]atomic.Int32, g.n), last: make([]atomic.Pointer[WorkResult[int]], g.n)}
	for j := range g.n {
		outcome := g.outcome[j]
		w := NewWrapper(branchID(j), WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
			if rr, ok := ctx.Value(branchRunKey{}).(*branchRun); ok {
				rr.acts[j].Add(1)
			} else {
				bad("n%d: worker without its run's record", j)
			}
			if outcome != 0 {
				return 7, errBoom
			}
			return branchValue(j), nil
		}), 0).Default(branchDefVal(j)).ShortCircuit(!g.noSkip).
			Callback(branchCallback{&b.begins[j], &b.results[j], &b.last[j]})
		if outcome == 2 {
			w.OnFailure(PolicyContinue)
		}
		for k, i := range g.deps[j] {
			w.Depend(b.ws[i], g.must[j][k])
		}
		if len(g.deps[j]) > 0 {
			w.Join(g.makeJoin(j, bad))
		}
		b.ws[j] = w
	}
	return b
}

func (g *branchGraph) makeJoin(j int, bad func(string, ...any)) Join {
	jn := g.join[j]
	switch jn.kind {
	case branchAll:
		return AllSucceeded()
	case branchAllDone:
		return AllDone()
	case branchAny:
		return AnySucceeded()
	case branchAtLeast:
		return AtLeast(jn.k)
	case branchNamed:
		ids := make([]string, len(jn.named))
		for k, i := range jn.named {
			ids[k] = branchID(i)
		}
		return NamedSucceeded(ids...)
	case branchWhen:
		on := jn.on
		return When(branchID(on), func(v int) bool {
			if v != branchValue(on) && v != branchDefVal(on) {
				bad("n%d: When(n%d) got value %d", j, on, v)
			}
			return branchWhenPred(jn.pred, v)
		})
	case branchWhenResult:
		on := jn.on
		return WhenResult(branchID(on), func(r WorkResult[int]) bool {
			var c branchCat
			switch {
			case r.State == ResultSuccess:
				if r.Value != branchValue(on) || r.Err != nil {
					bad("n%d: WhenResult(n%d) got the success %+v", j, on, r)
				}
				c = branchOK
			case r.State != ResultException || r.Value != branchDefVal(on) || r.Err == nil:
				bad("n%d: WhenResult(n%d) got %+v", j, on, r)
				c = branchFail
			case r.Err == ErrNotTaken:
				c = branchNotTaken
			default:
				c = branchFail
			}
			return jn.pred&branchResultBit(c) != 0
		})
	case branchCustom:
		return CustomJoin(func(ups []Upstream) Decision {
			all, okAll, anyFail, anyNT := true, true, false, false
			for _, u := range ups {
				if !u.Ended {
					all = false
					continue
				}
				switch {
				case u.OK:
				case u.Err == ErrNotTaken:
					okAll, anyNT = false, true
				default:
					okAll, anyFail = false, true
				}
			}
			switch jn.rule {
			case 0:
				if all {
					return jn.table[branchB(anyFail)*2+branchB(anyNT)]
				}
			case 1:
				if !okAll {
					return jn.early
				}
				if all {
					return DecideRun
				}
			}
			return DecideWait
		})
	}
	return Join{} // the default: Depend's must flags
}

// branchChecker collects the first broken invariant of a graph's runs.
type branchChecker struct {
	g   *branchGraph
	mu  sync.Mutex
	err error
	// ambiguous counts the nodes whose rules allowed two outcomes.
	ambiguous atomic.Int32
	// seen counts the outcomes by join kind, for the test's log.
	seen *[branchKinds][6]atomic.Int32
}

func (c *branchChecker) bad(format string, args ...any) {
	c.mu.Lock()
	if c.err == nil {
		c.err = fmt.Errorf(format, args...)
	}
	c.mu.Unlock()
}

// checkRun checks one ended run: each node's result, report line and hooks
// against the model; it returns each node's outcome.
func (c *branchChecker) checkRun(kind string, run *Run, rr *branchRun, ws []*WorkerWrapper[int, int]) []branchCat {
	g := c.g
	rep := run.Report()
	cats := make([]branchCat, g.n)
	for _, j := range g.topo() {
		id := branchID(j)
		bad := func(format string, args ...any) {
			c.bad("%s run, %s: %s", kind, id, fmt.Sprintf(format, args...))
		}
		res := ws[j].ResultIn(run)
		acts, starts := rr.acts[j].Load(), rr.starts[j].Load()
		if n := rr.ends[j].Load(); n != 1 {
			bad("OnNodeEnd fired %d times", n)
		}
		if acts > 1 || starts != acts {
			bad("%d actions, %d OnNodeStart", acts, starts)
		}
		var cat branchCat
		switch {
		case acts == 1 && res.State == ResultSuccess:
			cat = branchOK
			if res.Value != branchValue(j) || res.Err != nil {
				bad("succeeded with %+v", res)
			}
		case acts == 1:
			cat = branchFail
			if g.outcome[j] == 2 {
				cat = branchContinue
			}
			if !errors.Is(res.Err, errBoom) || res.State != ResultException {
				bad("ran and failed with %+v", res)
			}
		case res.Err == ErrNotTaken:
			cat = branchNotTaken
		case res.Err == ErrSkipped:
			cat = branchSkipped
			if g.noSkip || !g.hasSucc[j] {
				bad("short-circuited (ShortCircuit(false) %v, has successors %v)", g.noSkip, g.hasSucc[j])
			}
		default:
			cat = branchUpFail
			// A failure traces back to a worker's or a custom join's,
			// and the joined errors leave upstreams not taken out.
			if res.Err == nil || errors.Is(res.Err, ErrNotTaken) || errors.Is(res.Err, ErrSkipped) ||
				!errors.Is(res.Err, errBoom) && !errors.Is(res.Err, ErrJoinFailed) && !errors.Is(res.Err, ErrJoinUndecided) {
				bad("did not run and ended with %+v", res)
			}
		}
		cats[j] = cat
		if c.seen != nil && len(g.deps[j]) > 0 {
			c.seen[g.join[j].kind][cat].Add(1)
		}
		if acts == 0 {
			if res.State != ResultException || res.Value != branchDefVal(j) {
				bad("did not run and ended with %+v", res)
			}
		}
		if (rr.skips[j].Load() == 1) != (cat == branchNotTaken || cat == branchSkipped) || rr.skips[j].Load() > 1 {
			bad("OnNodeSkip fired %d times for a node %v", rr.skips[j].Load(), cat)
		}
		nr := rep.Nodes[branchRepIndex(rep, id)]
		want := map[branchCat]Status{branchOK: StatusSucceeded, branchContinue: StatusFailed, branchFail: StatusFailed,
			branchNotTaken: StatusSkipped, branchUpFail: StatusFailed, branchSkipped: StatusSkipped}[cat]
		if nr.Status != want || nr.Ran != (acts == 1) || nr.Err != res.Err {
			bad("reported %v (ran %v, err %v) for a node %v", nr.Status, nr.Ran, nr.Err, cat)
		}
		if cat == branchSkipped {
			continue // whenever its successors had decided
		}
		allowed := g.allowed(j, cats)
		if allowed&(allowed-1) != 0 {
			c.ambiguous.Add(1)
		}
		if !allowed.has(cat) {
			ups := make([]string, len(g.deps[j]))
			for k, i := range g.deps[j] {
				ups[k] = fmt.Sprintf("n%d=%v", i, cats[i])
			}
			bad("%v (%+v), the model allows %v; join %s, upstreams %v", cat, res, allowed, g.join[j].describe(), ups)
		}
	}
	return cats
}

func branchRepIndex(rep *Report, id string) int {
	for k, n := range rep.Nodes {
		if n.ID == id {
			return k
		}
	}
	return 0
}

// topo is the nodes in a topological order: every upstream has a lower
// index.
func (g *branchGraph) topo() []int {
	order := make([]int, g.n)
	for i := range order {
		order[i] = i
	}
	return order
}

// check runs g once as a single-use run and g.plans times concurrently
// as runs of a plan, and returns the first broken invariant.
func (g *branchGraph) check(seen *[branchKinds][6]atomic.Int32) (err error, ambiguous int) {
	c := &branchChecker{g: g, seen: seen}
	a := New(WithMaxWorkers(g.workers))
	defer a.Close()
	starts := func(b *branchBuilt) []Wrapper {
		s := make([]Wrapper, len(g.starts))
		for k, i := range g.starts {
			s[k] = b.ws[i]
		}
		return s
	}

	// A single-use run.
	one := g.build(c.bad)
	rr := newBranchRun(g.n)
	run, err := a.Start(rr.ctx(), 30*time.Second, starts(one)...)
	if err != nil {
		return fmt.Errorf("Start: %w", err), 0
	}
	if err := run.Wait(context.Background()); err != nil {
		return fmt.Errorf("single-use run: %w", err), 0
	}
	c.checkRun("single-use", run, rr, one.ws)
	for j, w := range one.ws {
		if n := one.results[j].Load(); n != 1 {
			c.bad("single-use run, n%d: Result callback fired %d times", j, n)
		} else if last := one.last[j].Load(); *last != w.Result() {
			c.bad("single-use run, n%d: Result callback got %+v, the result is %+v", j, *last, w.Result())
		}
		if b, acts := one.begins[j].Load(), rr.acts[j].Load(); b != acts {
			c.bad("single-use run, n%d: %d Begin, %d actions", j, b, acts)
		}
	}

	// Runs of a plan, concurrently.
	pb := g.build(c.bad)
	pl, err := Compile(starts(pb)...)
	if err != nil {
		return fmt.Errorf("Compile: %w", err), 0
	}
	var wg sync.WaitGroup
	rrs := make([]*branchRun, g.plans)
	for k := range g.plans {
		rrs[k] = newBranchRun(g.n)
		wg.Go(func() {
			run, err := a.RunPlan(rrs[k].ctx(), pl, 30*time.Second)
			if err != nil {
				c.bad("plan run %d: %v", k, err)
				if run != nil {
					run.Release()
				}
				return
			}
			c.checkRun(fmt.Sprint("plan ", k), run, rrs[k], pb.ws)
			run.Release()
		})
	}
	wg.Wait()
	for j := range g.n {
		var acts int32
		for _, rr := range rrs {
			acts += rr.acts[j].Load()
		}
		if n := pb.results[j].Load(); n != int32(g.plans) {
			c.bad("plan runs, n%d: Result callback fired %d times in %d runs", j, n, g.plans)
		}
		if b := pb.begins[j].Load(); b != acts {
			c.bad("plan runs, n%d: %d Begin, %d actions", j, b, acts)
		}
	}
	return c.err, int(c.ambiguous.Load())
}

// FuzzBranches decodes a graph of random joins (the default with
// random must and optional edges, AllSucceeded, AllDone, AnySucceeded,
// AtLeast, NamedSucceeded, When, WhenResult and a custom join that runs,
// skips or fails by a rule) and worker outcomes from its input, runs it
// on a pool of 1 to 4 goroutines once as a single-use run and a few
// times concurrently as a plan, and checks every node against the model.
func FuzzBranches(f *testing.F) {
	rng := rand.New(rand.NewPCG(19, 73))
	for range 16 {
		b := make([]byte, 20+rng.IntN(200))
		for k := range b {
			b[k] = byte(rng.Uint32())
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		g := branchDecode(data)
		if err, _ := g.check(nil); err != nil {
			t.Fatalf("%v\ngraph: %v", err, g)
		}
	})
}

// TestBranchesRandom runs a fixed sample of FuzzBranches's space
// on every test run.
func TestBranchesRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 19))
	graphs := 600
	if testing.Short() {
		graphs = 50
	}
	ambiguous, nodes := 0, 0
	var seen [branchKinds][6]atomic.Int32
	for k := range graphs {
		b := make([]byte, 20+rng.IntN(200))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		g := branchDecode(b)
		err, amb := g.check(&seen)
		if err != nil {
			t.Fatalf("graph %d (input %x): %v\n%v", k, b, err, g)
		}
		ambiguous += amb
		nodes += g.n
	}
	t.Logf("%d graphs, %d nodes, %d node runs with two outcomes allowed", graphs, nodes, ambiguous)
	for k := range branchKinds {
		var line []string
		for c := branchOK; c <= branchSkipped; c++ {
			line = append(line, fmt.Sprintf("%v %d", c, seen[k][c].Load()))
		}
		t.Logf("%-14s %s", [...]string{"default", "AllSucceeded", "AllDone", "AnySucceeded", "AtLeast", "Named", "When", "WhenResult", "Custom"}[k], strings.Join(line, ", "))
	}
}
