package asynctool

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// mKind is what a node's worker does in the model test.
type mKind uint8

const (
	mOK          mKind = iota
	mErr               // returns its own error
	mPanic             // panics with "panic j"
	mGoexit            // runtime.Goexit
	mNodeTimeout       // Timeout(2ms), waits for its ctx
	mHang              // waits for the run's ctx, which the test cancels
	mRetryOK           // fails twice, then succeeds; 3 attempts
	mRetryFail         // fails both of its 2 attempts
	mContinue          // fails under PolicyContinue
	mEnd               // fails under PolicyEnd
	mNested            // runs a small graph on the same Async, with its ctx
	mKinds
)

// mJoin is a node's join in the model test.
type mJoin uint8

const (
	jDefault mJoin = iota
	jAll
	jAllDone
	jAny
	jAtLeast
	jNamed  // NamedSucceeded of the upstreams marked in named
	jCustom // a custom join: once every upstream ended, run if one counts, else fail
	jJoins
)

// mVerdict is the model's verdict on a node, ignoring short-circuits.
type mVerdict uint8

const (
	vOK        mVerdict = iota // ended, counts as a success for joins
	vFail                      // ended, does not count
	vUndecided                 // does not end before the test cancels the run
)

// mGraph is a random graph with the model's prediction of every node.
type mGraph struct {
	seed    uint64
	n       int
	deps    [][]int
	must    [][]bool
	kind    []mKind
	join    []mJoin
	atLeast []int
	named   [][]bool // named[j][k]: deps[j][k] is named by j's NamedSucceeded
	noSC    []bool
	hasCB   []bool
	// cbPanic: 'b' its callback's Begin panics, 'r' its Result panics.
	cbPanic []byte
	// how an mContinue or mEnd worker fails: 'e' an error, 'p' a panic,
	// 'g' runtime.Goexit.
	how     []byte
	hasDef  []bool
	hasSucc []bool
	starts  []int
	workers int // 0: the default Async
	// exec, when not 0, replaces the pool: 1 a goroutine per task, 2 an
	// executor that refuses every other task, 3 one that runs tasks on
	// the caller (when the graph has no Goexit). A graph with a hang runs
	// on the default Async unless the test cancels it at random (see
	// newAsync).
	exec int
	errs []error

	verdict []mVerdict
	runs    []bool // the model runs its worker (the join said run)
	joinErr []bool // the join failed it
}

func genModel(seed uint64) *mGraph {
	rng := rand.New(rand.NewPCG(seed, 17))
	g := &mGraph{seed: seed, n: 1 + rng.IntN(14), workers: rng.IntN(5)}
	g.deps, g.must, g.named = make([][]int, g.n), make([][]bool, g.n), make([][]bool, g.n)
	g.kind, g.join, g.atLeast = make([]mKind, g.n), make([]mJoin, g.n), make([]int, g.n)
	g.noSC, g.hasCB, g.hasDef, g.hasSucc = make([]bool, g.n), make([]bool, g.n), make([]bool, g.n), make([]bool, g.n)
	g.errs, g.cbPanic, g.how = make([]error, g.n), make([]byte, g.n), make([]byte, g.n)
	g.verdict, g.runs, g.joinErr = make([]mVerdict, g.n), make([]bool, g.n), make([]bool, g.n)
	density := 1 + rng.IntN(4)
	if rng.IntN(3) == 0 {
		g.exec = 1 + rng.IntN(3)
	}
	for j := range g.n {
		g.errs[j] = fmt.Errorf("err%d", j)
		if rng.IntN(2) == 0 {
			g.kind[j] = mOK
		} else {
			g.kind[j] = mKind(rng.IntN(int(mKinds)))
		}
		if (g.kind[j] == mHang || g.kind[j] == mEnd) && rng.IntN(2) == 0 {
			g.kind[j] = mOK // fewer of them: hangs are slow, and an end hides much
		}
		g.how[j] = "eepg"[rng.IntN(4)]
		g.noSC[j] = rng.IntN(5) == 0
		g.hasCB[j] = rng.IntN(3) != 0
		if g.hasCB[j] && rng.IntN(8) == 0 {
			g.cbPanic[j] = "br"[rng.IntN(2)]
		}
		g.hasDef[j] = rng.IntN(2) == 0
		for i := range j {
			if rng.IntN(6) < density {
				g.deps[j] = append(g.deps[j], i)
				g.must[j] = append(g.must[j], rng.IntN(2) == 0)
				g.hasSucc[i] = true
			}
		}
		if len(g.deps[j]) > 0 && rng.IntN(3) == 0 {
			g.join[j] = 1 + mJoin(rng.IntN(int(jJoins)-1))
			if g.join[j] == jAtLeast {
				g.atLeast[j] = 1 + rng.IntN(len(g.deps[j]))
			}
			if g.join[j] == jNamed {
				g.named[j] = make([]bool, len(g.deps[j]))
				g.named[j][rng.IntN(len(g.deps[j]))] = true
				for k := range g.named[j] {
					g.named[j][k] = g.named[j][k] || rng.IntN(3) == 0
				}
			}
		}
		if len(g.deps[j]) == 0 || rng.IntN(8) == 0 {
			g.starts = append(g.starts, j)
		}
	}
	// The model, in topological order.
	for j := range g.n {
		run, fail := g.decide(j)
		switch {
		case fail:
			g.verdict[j], g.joinErr[j] = vFail, true
		case !run:
			g.verdict[j] = vUndecided
		default:
			g.runs[j] = true
			switch {
			case g.cbPanic[j] == 'b' && g.kind[j] == mContinue:
				g.verdict[j] = vOK // a panic in Begin is its node's failure
			case g.cbPanic[j] == 'b':
				g.verdict[j] = vFail
			}
			if g.cbPanic[j] == 'b' {
				break
			}
			switch g.kind[j] {
			case mOK, mRetryOK, mContinue, mNested:
				g.verdict[j] = vOK
			case mHang:
				g.verdict[j] = vUndecided
			default:
				g.verdict[j] = vFail
			}
		}
	}
	return g
}

// decide applies node j's join to its upstreams' verdicts.
func (g *mGraph) decide(j int) (run, fail bool) {
	if len(g.deps[j]) == 0 {
		return true, false
	}
	var ok, bad, und, mOKs, mBad, mUnd, nMust int
	for k, i := range g.deps[j] {
		m := g.mustEdge(j, k)
		if m {
			nMust++
		}
		switch g.verdict[i] {
		case vOK:
			ok++
			if m {
				mOKs++
			}
		case vFail:
			bad++
			if m {
				mBad++
			}
		default:
			und++
			if m {
				mUnd++
			}
		}
	}
	total := len(g.deps[j])
	switch g.join[j] {
	case jAllDone:
		return und == 0, false
	case jAtLeast:
		k := g.atLeast[j]
		return ok >= k, total-bad < k
	case jAny:
		return ok > 0, bad == total
	case jCustom:
		return und == 0 && ok > 0, und == 0 && ok == 0
	}
	if nMust > 0 { // the default join with must edges, AllSucceeded, NamedSucceeded
		return mBad == 0 && mUnd == 0, mBad > 0
	}
	return ok > 0, bad == total
}

// mustEdge reports whether node j's join needs its k-th upstream to
// succeed: a must edge of the default join, every edge of AllSucceeded,
// the named edges of NamedSucceeded.
func (g *mGraph) mustEdge(j, k int) bool {
	switch g.join[j] {
	case jDefault:
		return g.must[j][k]
	case jAll:
		return true
	case jNamed:
		return g.named[j][k]
	}
	return false
}

func (g *mGraph) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d, %d nodes, workers %d, exec %d, starts %v\n", g.seed, g.n, g.workers, g.exec, g.starts)
	kinds := [...]string{"ok", "err", "panic", "goexit", "nodetimeout", "hang", "retryok", "retryfail", "continue", "end", "nested"}
	joins := [...]string{"default", "all", "alldone", "any", "atleast", "named", "custom"}
	for j := range g.n {
		fmt.Fprintf(&b, "  n%d %s join=%s", j, kinds[g.kind[j]], joins[g.join[j]])
		if g.join[j] == jAtLeast {
			fmt.Fprintf(&b, "(%d)", g.atLeast[j])
		}
		for k, i := range g.deps[j] {
			fmt.Fprintf(&b, " n%d", i)
			if g.must[j][k] {
				b.WriteString("!")
			}
			if g.join[j] == jNamed && g.named[j][k] {
				b.WriteString("*")
			}
		}
		fmt.Fprintf(&b, " noSC=%v cb=%v%c def=%v verdict=%d runs=%v\n", g.noSC[j], g.hasCB[j], max(g.cbPanic[j], ' '), g.hasDef[j], g.verdict[j], g.runs[j])
	}
	return b.String()
}

// mRunRec records one run: what its workers and hooks saw.
type mRunRec struct {
	g          *mGraph
	a          *Async // for nested runs
	actions    []atomic.Int32
	hookStart  []atomic.Int32
	hookEnd    []atomic.Int32
	hookSkip   []atomic.Int32
	hookTO     []atomic.Int32
	hookRetry  []atomic.Int32
	runEnds    atomic.Int32
	mu         sync.Mutex
	endRes     []ResultState
	endErr     []error
	runEndRep  *Report
	violations []string
}

func newRunRec(g *mGraph) *mRunRec {
	return &mRunRec{
		g: g, actions: make([]atomic.Int32, g.n),
		hookStart: make([]atomic.Int32, g.n), hookEnd: make([]atomic.Int32, g.n), hookSkip: make([]atomic.Int32, g.n),
		hookTO: make([]atomic.Int32, g.n), hookRetry: make([]atomic.Int32, g.n),
		endRes: make([]ResultState, g.n), endErr: make([]error, g.n),
	}
}

func (rec *mRunRec) violate(format string, args ...any) {
	rec.mu.Lock()
	rec.violations = append(rec.violations, fmt.Sprintf(format, args...))
	rec.mu.Unlock()
}

func (rec *mRunRec) hooks() *Hooks {
	// A nested run (of an mNested node) inherits the hooks with its
	// context: its nodes, x, y, z and sink, are not counted.
	return &Hooks{
		OnNodeStart: func(_ context.Context, ev NodeEvent) context.Context {
			if j := nodeNum(ev.ID); j >= 0 {
				rec.hookStart[j].Add(1)
			}
			return nil
		},
		OnNodeEnd: func(_ context.Context, ev NodeEvent) {
			if j := nodeNum(ev.ID); j >= 0 {
				rec.hookEnd[j].Add(1)
				rec.mu.Lock()
				rec.endRes[j], rec.endErr[j] = ev.Result, ev.Err
				rec.mu.Unlock()
			}
		},
		OnNodeSkip: func(_ context.Context, ev NodeEvent) {
			if j := nodeNum(ev.ID); j >= 0 {
				rec.hookSkip[j].Add(1)
			}
		},
		OnNodeTimeout: func(_ context.Context, ev NodeEvent) {
			if j := nodeNum(ev.ID); j >= 0 {
				rec.hookTO[j].Add(1)
			}
		},
		OnNodeRetry: func(_ context.Context, ev NodeEvent) {
			if j := nodeNum(ev.ID); j >= 0 {
				rec.hookRetry[j].Add(1)
			}
		},
		OnRunEnd: func(_ context.Context, rep *Report) {
			if nodeNum(rep.Nodes[0].ID) < 0 {
				return // a nested run's
			}
			rec.runEnds.Add(1)
			rec.mu.Lock()
			rec.runEndRep = rep
			rec.mu.Unlock()
		},
	}
}

type mRecKey struct{}

// nodeNum is j for the id "nj", -1 for the nodes of a nested run.
func nodeNum(id string) int {
	var j int
	if _, err := fmt.Sscanf(id, "n%d", &j); err != nil {
		return -1
	}
	return j
}

// mCbRec counts callbacks, over every run of the wrappers.
type mCbRec struct {
	begins, results []atomic.Int32
	mu              sync.Mutex
	bad             []string
}

type mCallback struct {
	rec   *mCbRec
	j     int
	panic byte
}

func (c mCallback) Begin() {
	c.rec.begins[c.j].Add(1)
	if c.panic == 'b' {
		panic(fmt.Sprint("begin ", c.j))
	}
}

func (c mCallback) Result(success bool, _ int, res WorkResult[int]) {
	c.rec.results[c.j].Add(1)
	if success != (res.State == ResultSuccess) || res.State == ResultDefault {
		c.rec.mu.Lock()
		c.rec.bad = append(c.rec.bad, fmt.Sprintf("n%d: Result(success=%v, %+v)", c.j, success, res))
		c.rec.mu.Unlock()
	}
	if c.panic == 'r' {
		panic(fmt.Sprint("result ", c.j))
	}
}

// build makes g's wrappers; every run finds its recorder in its context.
// single says the wrappers serve one run: a plan's runs share its
// custom joins, whose calls overlap from run to run.
func (g *mGraph) build(cbs *mCbRec, single bool) (ws []*WorkerWrapper[int, int], starts []Wrapper) {
	ws = make([]*WorkerWrapper[int, int], g.n)
	for j := range g.n {
		ws[j] = NewWrapper(fmt.Sprint("n", j), WorkerFunc[int, int](func(ctx context.Context, _ int, all Wrappers) (int, error) {
			rec := ctx.Value(mRecKey{}).(*mRunRec)
			attempt := rec.actions[j].Add(1)
			g.checkReads(rec, j, all)
			switch g.kind[j] {
			case mOK:
				return 1000 + j, nil
			case mContinue, mEnd:
				switch g.how[j] {
				case 'p':
					panic(fmt.Sprint("panic ", j))
				case 'g':
					runtime.Goexit()
				}
				return 0, g.errs[j]
			case mErr, mRetryFail:
				return 0, g.errs[j]
			case mNested:
				x := NewWrapper("x", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 1, nil }), 0)
				y := NewWrapper("y", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 2, nil }), 0).Depend(x, true)
				z := NewWrapper("z", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 3, nil }), 0).Depend(x, true)
				sink := NewWrapper("sink", WorkerFunc[int, int](func(_ context.Context, _ int, all Wrappers) (int, error) {
					a, _ := ResultOf[int](all, "y")
					b, _ := ResultOf[int](all, "z")
					return a.Value + b.Value, nil
				}), 0).Depend(y, true).Depend(z, true)
				if err := rec.a.BeginWork(ctx, 0, x); err != nil {
					return 0, err
				}
				if res := sink.Result(); res.State != ResultSuccess || res.Value != 5 {
					return 0, fmt.Errorf("nested sink: %+v", res)
				}
				return 1000 + j, nil
			case mRetryOK:
				if attempt <= 2 {
					return 0, g.errs[j]
				}
				return 1000 + j, nil
			case mPanic:
				panic(fmt.Sprint("panic ", j))
			case mGoexit:
				runtime.Goexit()
			}
			<-ctx.Done() // mNodeTimeout, mHang
			return 0, ctx.Err()
		}), j)
		w := ws[j]
		if g.hasCB[j] {
			w.Callback(mCallback{cbs, j, g.cbPanic[j]})
		}
		if g.hasDef[j] {
			w.Default(-1 - j)
		}
		if g.noSC[j] {
			w.ShortCircuit(false)
		}
		switch g.kind[j] {
		case mNodeTimeout:
			w.Timeout(2 * time.Millisecond)
		case mRetryOK:
			w.Retry(RetryPolicy{Attempts: 3})
		case mRetryFail:
			w.Retry(RetryPolicy{Attempts: 2, Backoff: ConstantBackoff(50 * time.Microsecond)})
		case mContinue:
			w.OnFailure(PolicyContinue)
		case mEnd:
			w.OnFailure(PolicyEnd)
		}
		switch g.join[j] {
		case jAll:
			w.Join(AllSucceeded())
		case jAllDone:
			w.Join(AllDone())
		case jAny:
			w.Join(AnySucceeded())
		case jAtLeast:
			w.Join(AtLeast(g.atLeast[j]))
		case jNamed:
			var ids []string
			for k, i := range g.deps[j] {
				if g.named[j][k] {
					ids = append(ids, fmt.Sprint("n", i))
				}
			}
			w.Join(NamedSucceeded(ids...))
		case jCustom:
			var calls atomic.Int32 // calls for one node of a run never overlap
			w.Join(CustomJoin(func(ups []Upstream) Decision {
				if calls.Add(1) != 1 && single {
					panic("custom join calls overlap")
				}
				defer calls.Add(-1)
				ok := 0
				for _, u := range ups {
					if !u.Ended {
						return DecideWait
					}
					if u.OK {
						ok++
					}
				}
				if ok > 0 {
					return DecideRun
				}
				return DecideFail
			}))
		}
		for k, i := range g.deps[j] {
			w.Depend(ws[i], g.must[j][k])
		}
	}
	for _, j := range g.starts {
		starts = append(starts, ws[j])
	}
	return ws, starts
}

// checkReads checks what node j's worker reads of its upstreams: its join
// was satisfied by final results.
func (g *mGraph) checkReads(rec *mRunRec, j int, all Wrappers) {
	counted, ended := 0, 0
	for k, i := range g.deps[j] {
		res, err := ResultOf[int](all, fmt.Sprint("n", i))
		if err != nil {
			rec.violate("n%d: ResultOf(n%d): %v", j, i, err)
			continue
		}
		counts := res.State == ResultSuccess || res.State == ResultException && g.kind[i] == mContinue && g.runs[i] && !errors.Is(res.Err, ErrSkipped)
		if res.State != ResultDefault {
			ended++
		}
		if counts {
			counted++
		}
		if g.mustEdge(j, k) && !counts {
			rec.violate("n%d started before must upstream n%d counted: %+v", j, i, res)
		}
	}
	switch {
	case len(g.deps[j]) == 0:
	case g.join[j] == jAllDone && ended != len(g.deps[j]):
		rec.violate("n%d (AllDone) started with %d of %d upstreams ended", j, ended, len(g.deps[j]))
	case g.join[j] == jAtLeast && counted < g.atLeast[j]:
		rec.violate("n%d (AtLeast(%d)) started with %d successes", j, g.atLeast[j], counted)
	case g.join[j] == jCustom && (ended != len(g.deps[j]) || counted == 0):
		rec.violate("n%d (custom) started with %d of %d upstreams ended, %d counted", j, ended, len(g.deps[j]), counted)
	case (g.join[j] == jAny || g.join[j] == jDefault) && counted == 0:
		rec.violate("n%d started with no upstream counted", j)
	}
}

// expectedActions is how often node j's worker runs when it runs.
func (g *mGraph) expectedActions(j int) int32 {
	if g.cbPanic[j] == 'b' {
		return 0
	}
	switch g.kind[j] {
	case mRetryOK:
		return 3
	case mRetryFail:
		return 2
	}
	return 1
}

// mObserved is what a run left, read before it is released.
type mObserved struct {
	// canceled: the test cancelled the run at a random time, and any
	// node may have ended as a timeout.
	canceled bool
	// lag is how long the run took to end once its context was cancelled
	// (0 if the test did not cancel it).
	lag  time.Duration
	rec  *mRunRec
	res  []WorkResult[int]
	rep  *Report
	err  error
	hook bool
}

// checkRun compares one run with the model; the Async has been closed, so
// every worker has returned.
func (g *mGraph) checkRun(o *mObserved) []string {
	var bad []string
	add := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	bad = append(bad, o.rec.violations...)
	// Every worker returns on its ctx, every callback is quick: the run
	// ends promptly once cancelled.
	if o.lag > 2*time.Second {
		add("the run ended %v after it was cancelled", o.lag)
	}
	groupTimeout := false
	for _, res := range o.res {
		var nte *NodeTimeoutError
		groupTimeout = groupTimeout || res.State == ResultTimeout && !errors.As(res.Err, &nte)
	}
	// A PolicyEnd node that failed ends the run: nodes not ended by then
	// end with its EndError.
	var ee *EndError
	ended := errors.As(o.err, &ee)
	if ended {
		k := nodeNum(ee.ID)
		if res := o.res[k]; g.kind[k] != mEnd || res.State != ResultException || ee.Err != res.Err {
			add("the run ended by %s (%v), whose result is %+v", ee.ID, ee.Err, res)
		}
	}
	// The run's error: the callbacks' panics, and why it stopped.
	resultPanics, beginPanics := make([]int, g.n), make([]int, g.n)
	for _, e := range flattenErr(o.err) {
		var cpe *CallbackPanicError
		switch {
		case errors.As(e, &cpe) && cpe.Method == "Result" && cpe.Panic.Value == fmt.Sprint("result ", nodeNum(cpe.ID)):
			resultPanics[nodeNum(cpe.ID)]++
		case errors.As(e, &cpe) && cpe.Method == "Begin" && cpe.Panic.Value == fmt.Sprint("begin ", nodeNum(cpe.ID)):
			beginPanics[nodeNum(cpe.ID)]++
		case e == error(ee):
		case groupTimeout && errors.Is(e, context.Canceled):
		default:
			add("run error %v", e)
		}
	}
	for j := range g.n {
		res, acts := o.res[j], o.rec.actions[j].Load()
		id := fmt.Sprint("n", j)
		def := 0
		if g.hasDef[j] {
			def = -1 - j
		}
		var nte *NodeTimeoutError
		errors.As(res.Err, &nte)
		var pe *PanicError
		begun := errors.As(res.Err, &pe) && pe.Value == fmt.Sprint("begin ", j) // its Begin panicked
		if n, w := resultPanics[j], b2i(g.cbPanic[j] == 'r'); int32(n) != w {
			add("%s: %d Result panics in the run's error, want %d", id, n, w)
		}
		if n := beginPanics[j]; n > 1 || begun && n != 1 || n == 1 && g.cbPanic[j] != 'b' {
			add("%s: %d Begin panics in the run's error (its result %+v)", id, n, res)
		}
		skipped := res.Err == ErrSkipped
		switch {
		case skipped:
			if !g.hasSucc[j] || g.noSC[j] {
				add("%s skipped (successors %v, noSC %v)", id, g.hasSucc[j], g.noSC[j])
			}
			if acts != 0 {
				add("%s skipped after %d actions", id, acts)
			}
			if res.State != ResultException || res.Value != def {
				add("%s skipped with %+v", id, res)
			}
		case ended && res.State == ResultException && res.Err == error(ee):
			if res.Value != def {
				add("%s: ended by the run's end with %+v", id, res)
			}
			if acts > g.expectedActions(j) || !g.runs[j] && acts != 0 {
				add("%s: ended by the run's end after %d actions (model runs it: %v)", id, acts, g.runs[j])
			}
		case g.kind[j] == mEnd && (g.ownFailure(j, res) || begun) && !ended && !groupTimeout:
			add("%s failed under PolicyEnd, the run's error is %v", id, o.err)
			fallthrough
		case o.canceled && res.State == ResultTimeout && errors.Is(res.Err, context.Canceled):
			if res.Value != def {
				add("%s: cancelled with %+v", id, res)
			}
			if acts > g.expectedActions(j) || !g.runs[j] && acts != 0 {
				add("%s: cancelled after %d actions (model runs it: %v)", id, acts, g.runs[j])
			}
		case g.verdict[j] == vUndecided:
			if res.State != ResultTimeout || !errors.Is(res.Err, context.Canceled) || res.Value != def {
				add("%s: want a timeout (canceled), got %+v", id, res)
			}
			if g.runs[j] && acts > 1 || !g.runs[j] && acts != 0 {
				add("%s: %d actions (model runs it: %v)", id, acts, g.runs[j])
			}
		case g.joinErr[j]:
			var ue *UpstreamError
			if res.State != ResultException || !errors.As(res.Err, &ue) && !(g.join[j] == jCustom && errors.Is(res.Err, ErrJoinFailed)) || res.Value != def {
				add("%s: want an upstream failure, got %+v", id, res)
			}
			if acts != 0 {
				add("%s: failed by its join after %d actions", id, acts)
			}
		default:
			// A node's own timeout may pass before its worker is called
			// (a goroutine descheduled for 2ms under the race detector).
			if want := g.expectedActions(j); acts != want && !(g.kind[j] == mNodeTimeout && acts == 0) {
				add("%s: %d actions, want %d", id, acts, want)
			}
			kind := g.kind[j]
			if g.cbPanic[j] == 'b' {
				kind = mKinds
				// Its own 2ms timeout may pass first on a loaded machine.
				late := g.kind[j] == mNodeTimeout && res.State == ResultTimeout && nte != nil
				if (res.State != ResultException || !begun) && !late || res.Value != def {
					add("%s: want its Begin's panic, got %+v", id, res)
				}
			}
			switch kind {
			case mOK, mRetryOK, mNested:
				if res.State != ResultSuccess || res.Value != 1000+j || res.Err != nil {
					add("%s: want success, got %+v", id, res)
				}
			case mErr, mRetryFail, mContinue, mEnd:
				if res.State != ResultException || !g.ownFailure(j, res) || res.Value != def {
					add("%s: want its failure (%c), got %+v", id, g.how[j], res)
				}
			case mPanic:
				var pe *PanicError
				if res.State != ResultException || !errors.As(res.Err, &pe) || pe.Value != fmt.Sprint("panic ", j) || res.Value != def {
					add("%s: want its panic, got %+v", id, res)
				}
			case mGoexit:
				if res.State != ResultException || !errors.Is(res.Err, ErrGoexit) || res.Value != def {
					add("%s: want ErrGoexit, got %+v", id, res)
				}
			case mNodeTimeout:
				if res.State != ResultTimeout || nte == nil || nte.ID != id || res.Value != def {
					add("%s: want its own timeout, got %+v", id, res)
				}
			}
		}
		// The report agrees with the result.
		nr := o.rep.Nodes[indexOf2(o.rep, id)]
		if nr.Result != res.State || nr.Err != res.Err || nr.Value != any(res.Value) {
			add("%s: report %v/%v/%v, result %+v", id, nr.Result, nr.Err, nr.Value, res)
		}
		var want Status
		switch {
		case res.State == ResultSuccess:
			want = StatusSucceeded
		case res.State == ResultTimeout:
			want = StatusTimedOut
		case skipped:
			want = StatusSkipped
		default:
			want = StatusFailed
		}
		if nr.Status != want {
			add("%s: report status %v, want %v", id, nr.Status, want)
		}
		// Known and accepted: a node claimed, then ended by the sweep
		// before its worker was called, shows one attempt more, and, in a
		// timed run, Ran false; its worker may still be called after the
		// run ended, with a done context (then after the report).
		stopped := res.State == ResultTimeout || ended && res.Err == error(ee)
		// A Begin that panicked counts as a start; its panic is in the
		// run's error even if the node was stopped meanwhile.
		starts := acts + int32(beginPanics[j])
		known := stopped && (int32(nr.Attempts) == starts+1 || !nr.Ran)
		if int32(nr.Attempts) != starts && !known {
			add("%s: report attempts %d, %d starts", id, nr.Attempts, starts)
		}
		if nr.Ran != (nr.Attempts > 0) && !(known && !nr.Ran) {
			add("%s: report ran=%v attempts=%d", id, nr.Ran, nr.Attempts)
		}
		if o.hook {
			if n := o.rec.hookEnd[j].Load(); n != 1 {
				add("%s: OnNodeEnd %d times", id, n)
			}
			o.rec.mu.Lock()
			er, ee := o.rec.endRes[j], o.rec.endErr[j]
			o.rec.mu.Unlock()
			if er != res.State || ee != res.Err {
				add("%s: OnNodeEnd saw %v/%v, result %+v", id, er, ee, res)
			}
			if n, w := o.rec.hookSkip[j].Load(), b2i(skipped); n != w {
				add("%s: OnNodeSkip %d times, want %d", id, n, w)
			}
			if n, w := o.rec.hookTO[j].Load(), b2i(res.State == ResultTimeout); n != w {
				add("%s: OnNodeTimeout %d times, want %d", id, n, w)
			}
			if n := o.rec.hookStart[j].Load(); n != starts && !(known && n == starts+1) {
				add("%s: OnNodeStart %d times, %d starts", id, n, starts)
			}
			// A retry scheduled when the run stopped never runs.
			if n := o.rec.hookRetry[j].Load(); acts > 0 && n != acts-1 && !(stopped && n == acts) {
				add("%s: OnNodeRetry %d times, %d actions", id, n, acts)
			}
		}
	}
	if o.hook {
		if n := o.rec.runEnds.Load(); n != 1 {
			add("OnRunEnd %d times", n)
		} else {
			o.rec.mu.Lock()
			rep := o.rec.runEndRep
			o.rec.mu.Unlock()
			for k, nr := range rep.Nodes {
				if f := o.rep.Nodes[k]; nr.Status != f.Status || nr.Err != f.Err {
					add("OnRunEnd's report: %s %v/%v, final %v/%v", nr.ID, nr.Status, nr.Err, f.Status, f.Err)
				}
			}
			if (rep.RunErr == nil) != (o.err == nil) {
				add("OnRunEnd's RunErr %v, run's %v", rep.RunErr, o.err)
			}
		}
	}
	// A run cancelled by the test (at random, or once the nodes the model
	// decides have ended) as a PolicyEnd node fails may end with both,
	// and says EndError.
	if groupTimeout != errors.Is(o.err, context.Canceled) && !ended {
		add("run error %v, but a node timed out by the run's cancellation: %v", o.err, groupTimeout)
	}
	if o.rep.RunErr == nil != (o.err == nil) {
		add("report's RunErr %v, run's %v", o.rep.RunErr, o.err)
	}
	return bad
}

func indexOf2(rep *Report, id string) int {
	for k, n := range rep.Nodes {
		if n.ID == id {
			return k
		}
	}
	panic("no node " + id)
}

func b2i(b bool) int32 {
	if b {
		return 1
	}
	return 0
}

// cancelWhenDecided cancels the run once every node the model decides
// has ended: what is left waits on a hang.
// It returns a function that waits for its goroutine to return.
func (g *mGraph) cancelWhenDecided(r *Run, state func(j int) ResultState, cancel context.CancelFunc) (wait func()) {
	undecided := false
	for j := range g.n {
		undecided = undecided || g.verdict[j] == vUndecided
	}
	if !undecided {
		return func() {} // the run ends by itself
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer cancel()
		for {
			all := true
			for j := range g.n {
				if g.verdict[j] != vUndecided && state(j) == ResultDefault {
					all = false
					break
				}
			}
			if all {
				return
			}
			select {
			case <-r.Done():
				return
			case <-time.After(50 * time.Microsecond):
			}
		}
	}()
	return func() { <-done }
}

// newAsync makes the Async for g's runs; canceled says the test cancels
// every run at a random time.
func (g *mGraph) newAsync(canceled bool) *Async {
	hangs, goexits := false, false
	for j := range g.n {
		hangs = hangs || g.kind[j] == mHang
		goexits = goexits || g.kind[j] == mGoexit || (g.kind[j] == mContinue || g.kind[j] == mEnd) && g.how[j] == 'g'
	}
	// A hanging worker holds its goroutine until the test cancels the
	// run, which it does once the other nodes ended: they need goroutines
	// of their own, which a small pool shared by concurrent runs may not
	// have (a capacity limit, not a deadlock).
	if hangs && !canceled {
		return New()
	}
	switch g.exec {
	case 1:
		return New(WithExecutor(GoExecutor{}))
	case 2:
		var n atomic.Int64
		return New(WithExecutor(ExecutorFunc(func(task func()) error {
			if n.Add(1)%2 == 0 {
				return ErrPoolFull
			}
			go task()
			return nil
		})))
	case 3:
		// A Goexit on the caller's goroutine would end the test's.
		if !goexits {
			return New(WithExecutor(ExecutorFunc(func(task func()) error { task(); return nil })))
		}
	}
	if g.workers == 0 {
		return New()
	}
	return New(WithMaxWorkers(g.workers))
}

// runSingle runs g once with single-use wrappers, cancelled after
// cancelAfter if it is positive, before it starts if it is negative.
func (g *mGraph) runSingle(hook bool, cancelAfter time.Duration) (*mObserved, *mCbRec, error) {
	cbs := &mCbRec{begins: make([]atomic.Int32, g.n), results: make([]atomic.Int32, g.n)}
	ws, starts := g.build(cbs, true)
	rec := newRunRec(g)
	ctx, cancelCtx := context.WithCancel(context.WithValue(context.Background(), mRecKey{}, rec))
	defer cancelCtx()
	var cancelled atomic.Int64
	cancel := func() {
		cancelled.CompareAndSwap(0, time.Now().UnixNano())
		cancelCtx()
	}
	if hook {
		ctx = WithRunHooks(ctx, rec.hooks())
	}
	a := g.newAsync(cancelAfter != 0)
	rec.a = a
	switch {
	case cancelAfter < 0:
		cancel() // before the run starts
	case cancelAfter > 0:
		defer time.AfterFunc(cancelAfter, cancel).Stop()
	}
	r, err := a.Start(ctx, 10*time.Second, starts...)
	if err != nil {
		a.Close()
		return nil, nil, err
	}
	wait := g.cancelWhenDecided(r, func(j int) ResultState { return ws[j].Result().State }, cancel)
	o := &mObserved{rec: rec, hook: hook, canceled: cancelAfter != 0}
	o.err = r.Wait(context.Background())
	if c := cancelled.Load(); c != 0 {
		o.lag = time.Duration(time.Now().UnixNano() - c)
	}
	wait()
	o.rep = r.Report()
	for _, w := range ws {
		o.res = append(o.res, w.Result())
	}
	a.Close()
	return o, cbs, nil
}

// runPlan runs g's plan rounds times, k runs at once, releasing the runs
// after each round.
func (g *mGraph) runPlan(rounds, k int, hook func(int) bool, cancelAfter func() time.Duration) ([]*mObserved, *mCbRec, error) {
	cbs := &mCbRec{begins: make([]atomic.Int32, g.n), results: make([]atomic.Int32, g.n)}
	ws, starts := g.build(cbs, false)
	pl, err := Compile(starts...)
	if err != nil {
		return nil, nil, err
	}
	a := g.newAsync(cancelAfter() != 0)
	var all []*mObserved
	for round := range rounds {
		obs := make([]*mObserved, k)
		runs := make([]*Run, k)
		var wg sync.WaitGroup
		for x := range k {
			wg.Go(func() {
				rec := newRunRec(g)
				rec.a = a
				h := hook(round*k + x)
				ctx, cancelCtx := context.WithCancel(context.WithValue(context.Background(), mRecKey{}, rec))
				defer cancelCtx()
				var cancelled atomic.Int64
				cancel := func() {
					cancelled.CompareAndSwap(0, time.Now().UnixNano())
					cancelCtx()
				}
				if h {
					ctx = WithRunHooks(ctx, rec.hooks())
				}
				after := cancelAfter()
				switch {
				case after < 0:
					cancel() // before the run starts
				case after > 0:
					defer time.AfterFunc(after, cancel).Stop()
				}
				r, err := a.StartPlan(ctx, pl, 10*time.Second)
				if err != nil {
					panic(err)
				}
				wait := g.cancelWhenDecided(r, func(j int) ResultState { return ws[j].ResultIn(r).State }, cancel)
				o := &mObserved{rec: rec, hook: h, canceled: after != 0}
				o.err = r.Wait(context.Background())
				if c := cancelled.Load(); c != 0 {
					o.lag = time.Duration(time.Now().UnixNano() - c)
				}
				wait()
				o.rep = r.Report()
				for _, w := range ws {
					o.res = append(o.res, w.ResultIn(r))
				}
				obs[x], runs[x] = o, r
			})
		}
		wg.Wait()
		for _, r := range runs {
			r.Release()
		}
		all = append(all, obs...)
	}
	a.Close()
	return all, cbs, nil
}

// checkCallbacks checks the callback counts of runs runs of g.
func (g *mGraph) checkCallbacks(cbs *mCbRec, obs []*mObserved) []string {
	var bad []string
	bad = append(bad, cbs.bad...)
	for j := range g.n {
		if !g.hasCB[j] {
			continue
		}
		var acts int32
		for _, o := range obs {
			acts += o.rec.actions[j].Load()
		}
		if n := cbs.results[j].Load(); int(n) != len(obs) {
			bad = append(bad, fmt.Sprintf("n%d: Result callback %d times in %d runs", j, n, len(obs)))
		}
		if n := cbs.begins[j].Load(); n != acts && g.cbPanic[j] != 'b' || g.cbPanic[j] == 'b' && (acts != 0 || int(n) > len(obs)) {
			bad = append(bad, fmt.Sprintf("n%d: Begin %d times, %d actions", j, n, acts))
		}
	}
	return bad
}

// TestModelDifferential runs random graphs with single-use wrappers and as
// plans (concurrent runs, released and reused), and compares every run
// with a sequential model of the documented rules.
func TestModelDifferential(t *testing.T) {
	first, seeds := uint64(0), uint64(200)
	if testing.Short() {
		seeds = 30
	}
	// MODEL_SEEDS=first:count explores further.
	if v := os.Getenv("MODEL_SEEDS"); v != "" {
		fmt.Sscanf(v, "%d:%d", &first, &seeds)
	}
	for s := first; s < first+seeds; s++ {
		g := genModel(s)
		o, cbs, err := g.runSingle(s%2 == 0, 0)
		if err != nil {
			t.Fatalf("%v\nStart: %v", g, err)
		}
		bad := g.checkRun(o)
		bad = append(bad, g.checkCallbacks(cbs, []*mObserved{o})...)
		if len(bad) > 0 {
			t.Fatalf("single-use run of %v\n%s\nreport:\n%v", g, strings.Join(bad, "\n"), o.rep)
		}
		obs, cbs, err := g.runPlan(2, 4, func(x int) bool { return x%3 == int(s%3) }, func() time.Duration { return 0 })
		if err != nil {
			t.Fatalf("%v\nCompile: %v", g, err)
		}
		for x, o := range obs {
			if bad := g.checkRun(o); len(bad) > 0 {
				t.Fatalf("plan run %d of %v\n%s\nreport:\n%v", x, g, strings.Join(bad, "\n"), o.rep)
			}
		}
		if bad := g.checkCallbacks(cbs, obs); len(bad) > 0 {
			t.Fatalf("plan runs of %v\n%s", g, strings.Join(bad, "\n"))
		}
	}
}

// TestModelCancelled runs random graphs as TestModelDifferential does, and
// cancels every run's context at a random moment, on pools of any size:
// every node ends once, as the model says or as a timeout, and nothing
// hangs or leaks (goleak, in TestMain).
func TestModelCancelled(t *testing.T) {
	first, seeds := uint64(0), uint64(120)
	if testing.Short() {
		seeds = 20
	}
	if v := os.Getenv("MODEL_SEEDS"); v != "" {
		fmt.Sscanf(v, "%d:%d", &first, &seeds)
	}
	for s := first; s < first+seeds; s++ {
		g := genModel(s)
		rng := rand.New(rand.NewPCG(s, 99))
		var mu sync.Mutex
		after := func() time.Duration {
			mu.Lock()
			defer mu.Unlock()
			if rng.IntN(8) == 0 {
				return -1 // cancelled before it starts
			}
			return time.Duration(1+rng.IntN(3000)) * time.Microsecond
		}
		o, cbs, err := g.runSingle(s%2 == 1, after())
		if err != nil {
			t.Fatalf("%v\nStart: %v", g, err)
		}
		bad := g.checkRun(o)
		bad = append(bad, g.checkCallbacks(cbs, []*mObserved{o})...)
		if len(bad) > 0 {
			t.Fatalf("single-use run of %v\n%s\nreport:\n%v", g, strings.Join(bad, "\n"), o.rep)
		}
		obs, cbs, err := g.runPlan(2, 4, func(x int) bool { return x%2 == int(s%2) }, after)
		if err != nil {
			t.Fatalf("%v\nCompile: %v", g, err)
		}
		for x, o := range obs {
			if bad := g.checkRun(o); len(bad) > 0 {
				t.Fatalf("plan run %d of %v\n%s\nreport:\n%v", x, g, strings.Join(bad, "\n"), o.rep)
			}
		}
		if bad := g.checkCallbacks(cbs, obs); len(bad) > 0 {
			t.Fatalf("plan runs of %v\n%s", g, strings.Join(bad, "\n"))
		}
	}
}

// ownFailure reports whether res is the failure of node j's own worker,
// an mErr, mRetryFail, mContinue or mEnd node.
func (g *mGraph) ownFailure(j int, res WorkResult[int]) bool {
	var ue *UpstreamError
	if res.State != ResultException || errors.As(res.Err, &ue) {
		return false
	}
	if g.kind[j] != mContinue && g.kind[j] != mEnd {
		return errors.Is(res.Err, g.errs[j])
	}
	var pe *PanicError
	switch g.how[j] {
	case 'p':
		return errors.As(res.Err, &pe) && pe.Value == fmt.Sprint("panic ", j)
	case 'g':
		return res.Err == ErrGoexit
	}
	return errors.Is(res.Err, g.errs[j])
}

// flattenErr lists the errors errors.Join joined in err.
func flattenErr(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flattenErr(e)...)
		}
		return out
	}
	return []error{err}
}
