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

// Randomized invariants of WorkerWrapper.EndsRun.
//
// A graph of 1 to 16 nodes with random joins (those of FuzzBranches,
// built by its makeJoin), workers that succeed, fail, fail under
// PolicyContinue, fail once then succeed, or block until their context
// ends, a few under PolicyEnd, random Timeouts and RetryPolicies and a
// random nonempty set of
// nodes marked EndsRun, is run on a pool of 1 to 4 goroutines once as a
// single-use run (Start or BeginWork) and, at the same time, a few times
// as runs of a compiled plan. Which nodes end how depends on timing; what
// is checked holds whatever the timing:
//
//   - every node ends exactly once (Result callback, OnNodeEnd);
//   - the run's error is nil, unless the deadline passed first, which only
//     a blocking worker with no bound of its own can make happen (then it
//     wraps DeadlineExceeded), or a node under PolicyEnd failed first (its
//     EndError, which every node it stopped has); then no node has
//     ErrRunEnded;
//   - when some node has ErrRunEnded (the run ended early): no marked node
//     has it, it names a marked node, every node with it has ResultTimeout
//     and its default value and ended (report times) no earlier than every
//     marked node, and its worker either never ran, or ran and saw its
//     context cancelled, or its result was dropped (a late return or a
//     retry not taken);
//   - a worker that starts with its context already done ends stopped
//     (the run's timeout or EndError, or its own timeout), and at most one
//     per goroutine of the run does (one that looked at the run just
//     before it ended);
//   - a node that ran and was not stopped keeps its own outcome: the last
//     attempt's value or error, after all its attempts;
//   - the report, the hooks and the wrappers' results agree.

// endsrunGraph is a generated graph: a branchGraph (for its joins and shape)
// plus the flow rules this test varies.
type endsrunGraph struct {
	*branchGraph
	kind     []int // 0 succeed, 1 fail, 2 fail under PolicyContinue, 3 fail the first attempt, 4 block
	sleep    []time.Duration
	timeout  []time.Duration
	attempts []int // 0: no RetryPolicy
	backoff  []time.Duration
	attemptT []time.Duration
	ends     []bool
	end      []bool // OnFailure(PolicyEnd)
	hooks    bool   // per-run hooks (else WithTimings only)
	callback []bool
	begin    bool // the single-use run with BeginWork (needs hooks for its report)
	mayHold  bool // a blocking worker with no bound of its own
}

const (
	endsrunOK = iota
	endsrunFail
	endsrunContinue
	endsrunFlaky
	endsrunBlock
)

func endsrunDecode(data []byte) *endsrunGraph {
	h := fnv.New64a()
	h.Write(data)
	s := &branchSource{b: data, rest: rand.New(rand.NewPCG(h.Sum64(), uint64(len(data))+20))}
	n := 1 + s.next(16)
	g := &endsrunGraph{branchGraph: &branchGraph{n: n, workers: 1 + s.next(4), plans: 2 + s.next(3), noSkip: s.next(2) == 0}}
	g.hooks = s.next(3) != 0
	g.begin = g.hooks && s.next(3) == 0
	g.hasSucc = make([]bool, n)
	g.deps = make([][]int, n)
	g.must = make([][]bool, n)
	g.outcome = make([]int, n)
	g.join = make([]branchJoin, n)
	g.kind = make([]int, n)
	g.sleep = make([]time.Duration, n)
	g.timeout = make([]time.Duration, n)
	g.attempts = make([]int, n)
	g.backoff = make([]time.Duration, n)
	g.attemptT = make([]time.Duration, n)
	g.ends = make([]bool, n)
	g.end = make([]bool, n)
	g.callback = make([]bool, n)
	anyEnds := false
	for j := range n {
		switch k := s.next(24); {
		case k < 14:
			g.kind[j] = endsrunOK
		case k < 17:
			g.kind[j] = endsrunFail
		case k < 19:
			g.kind[j] = endsrunContinue
		case k < 22:
			g.kind[j] = endsrunFlaky
		default:
			g.kind[j] = endsrunBlock
		}
		if g.kind[j] == endsrunBlock && s.next(2) == 0 {
			g.kind[j] = endsrunOK // blocking one node in twenty-four
		}
		if k := g.kind[j]; (k == endsrunFail || k == endsrunFlaky || k == endsrunBlock) && s.next(5) == 0 {
			g.end[j] = true
		}
		if s.next(4) == 0 {
			g.sleep[j] = time.Duration(s.next(5)) * 250 * time.Microsecond
		}
		if s.next(6) == 0 {
			g.timeout[j] = time.Duration(1+s.next(20)) * time.Millisecond
		}
		if s.next(4) == 0 {
			g.attempts[j] = 1 + s.next(3)
			g.backoff[j] = time.Duration(s.next(3)) * time.Millisecond
			if g.kind[j] == endsrunBlock && s.next(2) == 0 {
				g.attemptT[j] = time.Duration(1+s.next(5)) * time.Millisecond
			}
		}
		if g.kind[j] == endsrunBlock && g.timeout[j] == 0 && g.attemptT[j] == 0 {
			g.mayHold = true
		}
		g.ends[j] = s.next(4) == 0
		anyEnds = anyEnds || g.ends[j]
		g.callback[j] = !g.hooks || s.next(4) != 0
		for i := range j {
			if s.next(4) == 0 {
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
			g.starts = append(g.starts, j)
		}
		d := g.deps[j]
		jn := &g.join[j]
		// The default, AllDone, AnySucceeded, AtLeast and When two times in
		// three, every kind of FuzzBranches's the other time.
		if s.next(3) != 0 {
			jn.kind = [...]branchJoinKind{branchDefault, branchAllDone, branchAny, branchAtLeast, branchWhen}[s.next(5)]
		} else {
			jn.kind = branchJoinKind(s.next(int(branchKinds)))
		}
		jn.drawParams(s, d)
	}
	if !anyEnds {
		g.ends[s.next(n)] = true
	}
	for j := range n {
		if g.kind[j] == endsrunContinue {
			g.outcome[j] = 2 // the When conditions of FuzzBranches' model see its default
		}
	}
	return g
}

func (g *endsrunGraph) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d nodes, %d workers, %d plan runs, ShortCircuit(false) %v, hooks %v, BeginWork %v, may hold %v, starts %v\n",
		g.n, g.workers, g.plans, g.noSkip, g.hooks, g.begin, g.mayHold, g.starts)
	for j := range g.n {
		fmt.Fprintf(&b, "  n%d: %s", j, [...]string{"ok", "fail", "continue", "flaky", "block"}[g.kind[j]])
		if g.ends[j] {
			b.WriteString(" EndsRun")
		}
		if g.end[j] {
			b.WriteString(" PolicyEnd")
		}
		if g.sleep[j] > 0 {
			fmt.Fprintf(&b, " sleep %v", g.sleep[j])
		}
		if g.timeout[j] > 0 {
			fmt.Fprintf(&b, " Timeout %v", g.timeout[j])
		}
		if g.attempts[j] > 0 {
			fmt.Fprintf(&b, " Retry(%d, backoff %v, attempt %v)", g.attempts[j], g.backoff[j], g.attemptT[j])
		}
		if !g.callback[j] {
			b.WriteString(" no callback")
		}
		if len(g.deps[j]) > 0 {
			b.WriteString(", deps")
			for k, i := range g.deps[j] {
				fmt.Fprintf(&b, " n%d(must=%v)", i, g.must[j][k])
			}
			fmt.Fprintf(&b, ", join %s", g.join[j].describe())
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// endsrunAttempt is one call of a node's worker.
type endsrunAttempt struct {
	startDone bool  // its context was done when it was called
	returned  bool  // it has returned
	ctxErr    error // its context's error when it returned
	err       error // what it returned
}

// endsrunRun records one run: its workers' attempts and its hooks.
type endsrunRun struct {
	mu                            sync.Mutex
	att                           [][]endsrunAttempt
	starts, ends, timeouts, skips []atomic.Int32
	endEvents                     []atomic.Pointer[NodeEvent]
	report                        atomic.Pointer[Report]
}

type endsrunRunKey struct{}

func newEndsrunRun(n int) *endsrunRun {
	return &endsrunRun{att: make([][]endsrunAttempt, n), starts: make([]atomic.Int32, n), ends: make([]atomic.Int32, n),
		timeouts: make([]atomic.Int32, n), skips: make([]atomic.Int32, n), endEvents: make([]atomic.Pointer[NodeEvent], n)}
}

func (rr *endsrunRun) ctx(hooks bool) context.Context {
	ctx := context.WithValue(context.Background(), endsrunRunKey{}, rr)
	if !hooks {
		return ctx
	}
	return WithRunHooks(ctx, &Hooks{
		OnNodeStart: func(_ context.Context, ev NodeEvent) context.Context {
			rr.starts[branchIndex(ev.ID)].Add(1)
			return nil
		},
		OnNodeEnd: func(_ context.Context, ev NodeEvent) {
			i := branchIndex(ev.ID)
			rr.ends[i].Add(1)
			rr.endEvents[i].Store(&ev)
		},
		OnNodeSkip:    func(_ context.Context, ev NodeEvent) { rr.skips[branchIndex(ev.ID)].Add(1) },
		OnNodeTimeout: func(_ context.Context, ev NodeEvent) { rr.timeouts[branchIndex(ev.ID)].Add(1) },
		OnRunEnd:      func(_ context.Context, rep *Report) { rr.report.Store(rep) },
	})
}

// endsrunBuilt is one set of wrappers for g, with their callbacks' counts
// over all their runs.
type endsrunBuilt struct {
	ws              []*WorkerWrapper[int, int]
	begins, results []atomic.Int32
	last            []atomic.Pointer[WorkResult[int]]
}

func (g *endsrunGraph) build(bad func(string, ...any)) *endsrunBuilt {
	b := &endsrunBuilt{ws: make([]*WorkerWrapper[int, int], g.n), begins: make([]atomic.Int32, g.n),
		results: make([]atomic.Int32, g.n), last: make([]atomic.Pointer[WorkResult[int]], g.n)}
	for j := range g.n {
		kind, sleep := g.kind[j], g.sleep[j]
		w := NewWrapper(branchID(j), WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
			rr, ok := ctx.Value(endsrunRunKey{}).(*endsrunRun)
			if !ok {
				bad("n%d: worker without its run's record", j)
				return 0, errBoom
			}
			rr.mu.Lock()
			k := len(rr.att[j])
			rr.att[j] = append(rr.att[j], endsrunAttempt{startDone: ctx.Err() != nil})
			rr.mu.Unlock()
			v, err := branchValue(j), error(nil)
			if sleep > 0 {
				time.Sleep(sleep)
			}
			switch kind {
			case endsrunFail, endsrunContinue:
				v, err = 7, errBoom
			case endsrunFlaky:
				if k == 0 {
					v, err = 7, errBoom
				}
			case endsrunBlock:
				<-ctx.Done()
				v, err = 7, ctx.Err()
			}
			rr.mu.Lock()
			a := &rr.att[j][k]
			a.returned, a.ctxErr, a.err = true, ctx.Err(), err
			rr.mu.Unlock()
			return v, err
		}), 0).Default(branchDefVal(j)).ShortCircuit(!g.noSkip)
		if g.callback[j] {
			w.Callback(branchCallback{&b.begins[j], &b.results[j], &b.last[j]})
		}
		if kind == endsrunContinue {
			w.OnFailure(PolicyContinue)
		}
		if g.end[j] {
			w.OnFailure(PolicyEnd)
		}
		if g.timeout[j] > 0 {
			w.Timeout(g.timeout[j])
		}
		if g.attempts[j] > 0 {
			w.Retry(RetryPolicy{Attempts: g.attempts[j], Backoff: ConstantBackoff(g.backoff[j]), AttemptTimeout: g.attemptT[j]})
		}
		if g.ends[j] {
			w.EndsRun()
		}
		for k, i := range g.deps[j] {
			w.Depend(b.ws[i], g.must[j][k])
		}
		switch {
		case len(g.deps[j]) == 0:
		case g.join[j].kind == branchWhenResult:
			// Its condition sees any result, the run's stops included
			// (makeJoin's expects the results of FuzzBranches's
			// model).
			on, mask := g.join[j].on, g.join[j].pred
			w.Join(WhenResult(branchID(on), func(r WorkResult[int]) bool {
				if r.State == ResultSuccess && (r.Value != branchValue(on) || r.Err != nil) ||
					r.State != ResultSuccess && (r.Value != branchDefVal(on) || r.Err == nil) {
					bad("n%d: WhenResult(n%d) got %+v", j, on, r)
				}
				c := branchFail
				switch {
				case r.State == ResultSuccess:
					c = branchOK
				case r.Err == ErrNotTaken:
					c = branchNotTaken
				}
				return mask&branchResultBit(c) != 0
			}))
		default:
			w.Join(g.makeJoin(j, bad))
		}
		b.ws[j] = w
	}
	return b
}

// endsrunChecker collects the first broken invariant of a graph's runs, and
// counts what happened, for the log.
type endsrunChecker struct {
	g   *endsrunGraph
	mu  sync.Mutex
	err error
	st  *endsrunStats
}

type endsrunStats struct {
	runs, early, deadline, policyEnd, normal, stopped, lateStarts, markedLast, reportSkew atomic.Int32
}

func (c *endsrunChecker) bad(format string, args ...any) {
	c.mu.Lock()
	if c.err == nil {
		c.err = fmt.Errorf(format, args...)
	}
	c.mu.Unlock()
}

func (g *endsrunGraph) maxAttempts(j int) int {
	if g.attempts[j] > 0 {
		return g.attempts[j]
	}
	return 1
}

// checkRun checks one ended run; res gives each node's result in it, and
// runErr is what Wait (or BeginWork) returned.
func (c *endsrunChecker) checkRun(kind string, runErr error, elapsed, deadline time.Duration, rep *Report, rr *endsrunRun, results []WorkResult[int]) {
	g := c.g
	c.st.runs.Add(1)
	bad := func(format string, args ...any) {
		c.bad("%s run (err %v, %v): %s", kind, runErr, elapsed, fmt.Sprintf(format, args...))
	}
	early := -1 // a node with ErrRunEnded
	for j := range g.n {
		if errors.Is(results[j].Err, ErrRunEnded) {
			early = j
		}
	}
	// A node under PolicyEnd ended the run (perhaps with its own
	// Timeout, whose error wraps DeadlineExceeded too).
	var endErr *EndError
	errors.As(runErr, &endErr)
	deadlined := endErr == nil && errors.Is(runErr, context.DeadlineExceeded)
	switch {
	case runErr == nil:
	case deadlined && g.mayHold:
	case endErr != nil && g.end[branchIndex(endErr.ID)]:
		if r := results[branchIndex(endErr.ID)]; r.State == ResultSuccess || errors.As(r.Err, new(*EndError)) || errors.Is(r.Err, ErrRunEnded) {
			bad("the run ended with %v, and n%s ended with %+v", runErr, endErr.ID, r)
		}
	default:
		bad("run error %v (a blocking worker with no bound: %v)", runErr, g.mayHold)
		return
	}
	if !g.mayHold && elapsed >= deadline {
		bad("took %v, the deadline is %v, and no worker blocks", elapsed, deadline)
	}
	if runErr != nil && early >= 0 {
		bad("the run failed, and n%d ended with %v", early, results[early].Err)
	}
	switch {
	case early >= 0:
		c.st.early.Add(1)
	case endErr != nil:
		c.st.policyEnd.Add(1)
	case deadlined:
		c.st.deadline.Add(1)
	default:
		c.st.normal.Add(1)
	}
	// The marked nodes' latest end: the run ended after it.
	var lastMarked time.Time
	if rep != nil {
		for j := range g.n {
			if g.ends[j] {
				if e := rep.Nodes[branchRepIndex(rep, branchID(j))].Ended; e.After(lastMarked) {
					lastMarked = e
				}
			}
		}
		if rep.RunErr != runErr && (rep.RunErr == nil || runErr == nil || rep.RunErr.Error() != runErr.Error()) {
			bad("report's RunErr %v", rep.RunErr)
		}
	}
	rr.mu.Lock()
	defer rr.mu.Unlock()
	// A goroutine looks at the run before it starts a worker: only one
	// that looked just before the run ended can start one after, once
	// (the next time it looks, it sees the run ended). The goroutines are
	// the pool's, the caller's and those of the timers (Timeout, retries).
	late, goroutines := 0, g.workers+1
	for j := range g.n {
		for _, a := range rr.att[j] {
			if a.startDone && g.attemptT[j] == 0 {
				late++
			}
		}
		if g.timeout[j] > 0 || g.attempts[j] > 0 {
			goroutines++
		}
	}
	if late > goroutines {
		bad("%d workers started after the run ended, and at most %d goroutines could have looked at it just before", late, goroutines)
	}
	for j := range g.n {
		id, r := branchID(j), results[j]
		bad := func(format string, args ...any) {
			bad("n%d (%+v): %s", j, r, fmt.Sprintf(format, args...))
		}
		att := rr.att[j]
		ee, endStopped := r.Err.(*EndError) // stopped by a PolicyEnd node
		for k, a := range att {
			if !a.returned {
				bad("attempt %d has not returned", k+1)
			}
			if a.startDone {
				c.st.lateStarts.Add(1)
				// An AttemptTimeout may pass before the worker's first
				// line, under the race detector.
				if r.State != ResultTimeout && !endStopped && g.attemptT[j] == 0 {
					bad("attempt %d started with its context done, and the node did not end as a timeout", k+1)
				}
			}
		}
		if len(att) > g.maxAttempts(j) {
			bad("%d attempts, at most %d allowed", len(att), g.maxAttempts(j))
		}
		_, ownTimeout := r.Err.(*NodeTimeoutError)
		stopped := errors.Is(r.Err, ErrRunEnded)
		if stopped {
			var re *runEnded
			if !errors.As(r.Err, &re) || !g.ends[branchIndex(re.id)] {
				bad("the run ended with a node not marked: %v", r.Err)
			}
		}
		switch {
		case g.ends[j] && stopped:
			bad("a marked node stopped because the run ended")
		case stopped:
			c.st.stopped.Add(1)
			if r.State != ResultTimeout || r.Value != branchDefVal(j) {
				bad("stopped with the wrong state or value")
			}
			if len(att) > 0 {
				last := att[len(att)-1]
				// Stopped running (it saw its context cancelled), or its
				// last result was dropped: it returned late, or it
				// failed and had attempts left.
				if !errors.Is(last.ctxErr, context.Canceled) && last.err == nil && g.kind[j] == endsrunBlock {
					bad("a blocking worker returned %v, context %v", last.err, last.ctxErr)
				}
				if g.kind[j] == endsrunBlock && g.timeout[j] == 0 && g.attemptT[j] == 0 && !errors.Is(last.ctxErr, context.Canceled) {
					bad("an unbounded blocking worker saw %v", last.ctxErr)
				}
			}
			if rep != nil {
				if e := rep.Nodes[branchRepIndex(rep, id)].Ended; e.Before(lastMarked) {
					bad("stopped at %v, before the last marked node ended (%v)", e.Sub(rep.Start), lastMarked.Sub(rep.Start))
				}
			}
		case endStopped:
			if endErr == nil || ee.ID != endErr.ID {
				bad("stopped by a PolicyEnd node, and the run's error is %v", runErr)
			}
			if r.State != ResultException || r.Value != branchDefVal(j) {
				bad("stopped with the wrong state or value")
			}
		case r.State == ResultTimeout && !ownTimeout:
			// The deadline, perhaps before a PolicyEnd node ended the
			// run (its EndError is then the run's error).
			if !deadlined && endErr == nil || !g.mayHold || !errors.Is(r.Err, context.DeadlineExceeded) {
				bad("a timeout that is neither its own nor the deadline's")
			}
		case ownTimeout:
			if g.timeout[j] == 0 {
				bad("a timeout of its own without a Timeout")
			}
			if r.Value != branchDefVal(j) {
				bad("timed out with the wrong value")
			}
		case len(att) > 0:
			// It ran and ended with what its last attempt returned.
			last := att[len(att)-1]
			if !last.returned {
				break
			}
			switch {
			case r.State == ResultSuccess:
				if last.err != nil || r.Value != branchValue(j) || r.Err != nil {
					bad("succeeded, its last attempt returned %v", last.err)
				}
			case r.State == ResultException:
				if last.err == nil && g.attemptT[j] == 0 {
					bad("failed, its last attempt returned nil")
				}
				// Fewer attempts when a backoff would have ended past the
				// node's Timeout or the run's deadline (short only if a
				// worker may hold the run).
				if len(att) != g.maxAttempts(j) && g.timeout[j] == 0 && !g.mayHold {
					bad("failed after %d attempts of %d", len(att), g.maxAttempts(j))
				}
				if g.kind[j] != endsrunBlock && !errors.Is(r.Err, errBoom) {
					bad("failed, its worker returned errBoom")
				}
				if r.Value != branchDefVal(j) {
					bad("failed with the wrong value")
				}
			default:
				bad("ran and ended with state %v", r.State)
			}
			if g.kind[j] == endsrunBlock && g.timeout[j] == 0 && g.attemptT[j] == 0 {
				bad("an unbounded blocking worker ran, and the node was not stopped")
			}
		default:
			if r.State != ResultException || r.Value != branchDefVal(j) || r.Err == nil {
				bad("did not run, and ended so")
			}
		}
		// The hooks.
		if g.hooks {
			if n := rr.ends[j].Load(); n != 1 {
				bad("OnNodeEnd fired %d times", n)
			} else if ev := rr.endEvents[j].Load(); ev.Err != r.Err || ev.Result != r.State {
				bad("OnNodeEnd saw %v, %v", ev.Result, ev.Err)
			}
			if n := rr.timeouts[j].Load(); n != endsrunB32(r.State == ResultTimeout) {
				bad("OnNodeTimeout fired %d times", n)
			}
			if n := rr.starts[j].Load(); int(n) != len(att) {
				bad("OnNodeStart fired %d times, %d attempts", n, len(att))
			}
			if n := rr.skips[j].Load(); n != endsrunB32(errors.Is(r.Err, ErrSkipped) || errors.Is(r.Err, ErrNotTaken)) {
				bad("OnNodeSkip fired %d times", n)
			}
		}
		// The report.
		if rep != nil {
			nr := rep.Nodes[branchRepIndex(rep, id)]
			var want Status
			switch {
			case r.State == ResultSuccess:
				want = StatusSucceeded
			case r.State == ResultTimeout:
				want = StatusTimedOut
			case errors.Is(r.Err, ErrSkipped) || errors.Is(r.Err, ErrNotTaken):
				want = StatusSkipped
			default:
				want = StatusFailed
			}
			// The report is taken when the run ends: for a node stopped
			// while its goroutine was between counting an attempt and
			// calling the worker (or finding the run stopped and taking
			// the count back), it may count one attempt more or less
			// than the worker's calls.
			attOK := nr.Attempts == len(att) && nr.Ran == (len(att) > 0)
			if r.State == ResultTimeout || endStopped {
				attOK = nr.Attempts >= len(att)-1 && nr.Attempts <= len(att)+1 && (!nr.Ran || nr.Attempts > 0)
				if !attOK || nr.Attempts != len(att) {
					c.st.reportSkew.Add(1)
				}
			}
			if nr.ID != id || nr.Status != want || nr.Result != r.State || nr.Err != r.Err || nr.Value != any(r.Value) ||
				!attOK || nr.Ended.IsZero() {
				bad("reported %v %v %v %v, ran %v, %d attempts, ended %v; the worker's attempts: %+v", nr.Status, nr.Result, nr.Err, nr.Value, nr.Ran, nr.Attempts, nr.Ended, att)
			}
		}
	}
	if early >= 0 && rep != nil {
		// Which marked node ended the run: the last one counted, whose
		// end is no later than any stopped node's.
		var re *runEnded
		errors.As(results[early].Err, &re)
		if rep.Nodes[branchRepIndex(rep, re.id)].Ended.Equal(lastMarked) {
			c.st.markedLast.Add(1)
		}
	}
}

func endsrunB32(b bool) int32 {
	if b {
		return 1
	}
	return 0
}

// endsrunEnded is what one run left to check, taken before it is released.
type endsrunEnded struct {
	kind    string
	err     error
	elapsed time.Duration
	rep     *Report
	rr      *endsrunRun
	results []WorkResult[int]
}

// check runs g once as a single-use run and, at the same time, g.plans
// times as runs of a plan, and returns the first broken invariant. The
// runs are checked once the Async is closed: every worker has returned.
func (g *endsrunGraph) check(st *endsrunStats) error {
	c := &endsrunChecker{g: g, st: st}
	deadline := 30 * time.Second
	if g.mayHold {
		deadline = 100 * time.Millisecond
	}
	a := New(WithMaxWorkers(g.workers), WithTimings(true))
	starts := func(b *endsrunBuilt) []Wrapper {
		s := make([]Wrapper, len(g.starts))
		for k, i := range g.starts {
			s[k] = b.ws[i]
		}
		return s
	}
	one := g.build(c.bad)
	pb := g.build(c.bad)
	pl, err := Compile(starts(pb)...)
	if err != nil {
		a.Close()
		return fmt.Errorf("Compile: %w", err)
	}
	results := func(b *endsrunBuilt, run *Run) []WorkResult[int] {
		res := make([]WorkResult[int], g.n)
		for j, w := range b.ws {
			if run == nil {
				res[j] = w.Result()
			} else {
				res[j] = w.ResultIn(run)
			}
		}
		return res
	}
	ended := make([]*endsrunEnded, 1+g.plans)
	var wg sync.WaitGroup
	rr := newEndsrunRun(g.n)
	wg.Go(func() {
		t0 := time.Now()
		if g.begin {
			err := a.BeginWork(rr.ctx(true), deadline, starts(one)...)
			ended[0] = &endsrunEnded{"single-use (BeginWork)", err, time.Since(t0), rr.report.Load(), rr, results(one, nil)}
			return
		}
		run, err := a.Start(rr.ctx(g.hooks), deadline, starts(one)...)
		if err != nil {
			c.bad("Start: %v", err)
			return
		}
		err = run.Wait(context.Background())
		ended[0] = &endsrunEnded{"single-use", err, time.Since(t0), run.Report(), rr, results(one, run)}
	})
	rrs := make([]*endsrunRun, g.plans)
	for k := range g.plans {
		rrs[k] = newEndsrunRun(g.n)
		wg.Go(func() {
			t0 := time.Now()
			run, err := a.RunPlan(rrs[k].ctx(g.hooks), pl, deadline)
			el := time.Since(t0)
			if err != nil && run == nil {
				c.bad("plan run %d: %v", k, err)
				return
			}
			ended[1+k] = &endsrunEnded{fmt.Sprint("plan ", k), err, el, run.Report(), rrs[k], results(pb, run)}
			run.Release()
		})
	}
	wg.Wait()
	a.Close()
	for _, e := range ended {
		if e == nil {
			continue
		}
		if e.rep == nil && g.hooks {
			c.bad("%s run: OnRunEnd did not fire", e.kind)
			continue
		}
		c.checkRun(e.kind, e.err, e.elapsed, deadline, e.rep, e.rr, e.results)
	}
	// The callbacks, over all the runs.
	for j := range g.n {
		if !g.callback[j] {
			continue
		}
		att := len(rr.att[j])
		if n := one.results[j].Load(); n != 1 {
			c.bad("single-use run, n%d: Result callback fired %d times", j, n)
		} else if last := one.last[j].Load(); *last != one.ws[j].Result() {
			c.bad("single-use run, n%d: Result callback got %+v, the result is %+v", j, *last, one.ws[j].Result())
		}
		if b := one.begins[j].Load(); int(b) != att {
			c.bad("single-use run, n%d: %d Begin, %d attempts", j, b, att)
		}
		att = 0
		for _, rr := range rrs {
			att += len(rr.att[j])
		}
		if n := pb.results[j].Load(); n != int32(g.plans) {
			c.bad("plan runs, n%d: Result callback fired %d times in %d runs", j, n, g.plans)
		}
		if b := pb.begins[j].Load(); int(b) != att {
			c.bad("plan runs, n%d: %d Begin, %d attempts", j, b, att)
		}
	}
	return c.err
}

// FuzzEndsRun decodes a graph with nodes marked EndsRun from its
// input (see the comment at the top), runs it once as a single-use run
// and a few times as runs of a plan, concurrently, and checks the
// invariants of EndsRun that hold whatever the timing.
func FuzzEndsRun(f *testing.F) {
	rng := rand.New(rand.NewPCG(20, 5))
	for range 16 {
		b := make([]byte, 20+rng.IntN(200))
		for k := range b {
			b[k] = byte(rng.Uint32())
		}
		f.Add(b)
	}
	var st endsrunStats
	f.Fuzz(func(t *testing.T, data []byte) {
		g := endsrunDecode(data)
		if err := g.check(&st); err != nil {
			t.Fatalf("%v\ngraph: %v", err, g)
		}
	})
}

// TestEndsRunRandom runs a fixed sample of FuzzEndsRun's space on
// every test run, eight graphs at a time.
func TestEndsRunRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(20, 20))
	graphs := 400
	if testing.Short() {
		graphs = 60
	}
	inputs := make([][]byte, graphs)
	for k := range inputs {
		inputs[k] = make([]byte, 20+rng.IntN(250))
		for i := range inputs[k] {
			inputs[k][i] = byte(rng.Uint32())
		}
	}
	var st endsrunStats
	var next atomic.Int32
	var mu sync.Mutex
	var failures []string
	var nodes, holding atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				k := int(next.Add(1)) - 1
				if k >= graphs {
					return
				}
				g := endsrunDecode(inputs[k])
				nodes.Add(int32(g.n))
				if g.mayHold {
					holding.Add(1)
				}
				if err := g.check(&st); err != nil {
					mu.Lock()
					failures = append(failures, fmt.Sprintf("graph %d (input %x): %v\n%v", k, inputs[k], err, g))
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	for _, f := range failures {
		t.Error(f)
	}
	t.Logf("%d graphs (%d nodes, %d with a blocking worker that may hold the run): %d runs, %d ended early (%d nodes stopped, the run named the last marked node %d times), %d by the deadline, %d by a PolicyEnd node, %d normally; %d attempts started with their context done, %d reports with an attempt more or less than the worker's calls",
		graphs, nodes.Load(), holding.Load(), st.runs.Load(), st.early.Load(), st.stopped.Load(), st.markedLast.Load(), st.deadline.Load(), st.policyEnd.Load(), st.normal.Load(), st.lateStarts.Load(), st.reportSkew.Load())
}
