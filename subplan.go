package asynctool

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// SubPlan is a worker that runs a compiled [Plan] as one node of another
// graph: a sub-graph built and checked once, reused as a step of many
// plans or requests, whose inside shows in the outer run's [Report].
//
// Its Action runs Plan on the outer run's [Async], under the node's
// context: the sub-run gets the node's deadline (the group deadline, the
// node's Timeout, a retry's AttemptTimeout), and the outer run's
// cancellation, and the hooks of both the Async and the context see its
// nodes as those of a run of their own. When it has ended, Output reads
// the node's value from it (with [WorkerWrapper.ResultIn]); a node of
// Plan that failed fails the SubPlan node only if Output says so.
//
// The node fails without calling Output when the sub-run could not start,
// when it was stopped (the node's context ended, or a node of Plan with
// [PolicyEnd] ended it: the error wraps that node's [*EndError]), when
// a Result callback or a hook panicked in it (the error wraps the
// [*CallbackPanicError], which [Run.Wait] would have returned), and
// when it suspended: a node of Plan whose [PolicySuspend] left it pending
// cancels the sub-run and fails the node with an error that wraps the
// pending node's error. Resuming works on the outer run, for the SubPlan
// node as a whole: give it PolicySuspend, and a [Rerun] runs Plan again.
//
// Each start of the worker (each attempt of a [RetryPolicy], each call of
// a [Hedged] worker) is a sub-run of its own. The outer run keeps them
// until it is released ([Run.Release]; a run of single-use wrappers keeps
// them until it is garbage), and [Run.Report] shows the last one started
// (for a Hedged worker, the winning call's) as the node's
// [NodeReport.Sub]. Called outside a run (with an empty
// [Wrappers]), Action returns an error.
//
// The worker's goroutine runs the sub-run's first nodes itself, then waits
// for the rest. So a node of Plan that ignores its context, run by this
// goroutine, keeps the worker from returning, as any worker that ignores
// its context would: the node's Timeout and the group deadline still end
// the SubPlan node on time, but the next attempt of a RetryPolicy starts
// only once the worker returned. One that another goroutine runs does
// not: once the node's context has ended, the sub-run's sweep ends that
// node, and the worker returns (the node's next attempt may start) while
// the node's worker still runs, as a stray worker of any run does, which
// [Async.Close] waits for.
// And a runtime.Goexit in user code of Plan's nodes (a worker, a
// callback, a custom join) that this goroutine runs ends the worker too:
// the sub-run is cancelled, and the SubPlan node fails with [ErrGoexit],
// as a Goexit in its own worker would make it. On another goroutine of
// the sub-run, the same Goexit does what it does in a run of its own (see
// the package doc).
// A run that ends with a node marked [WorkerWrapper.EndsRun] in Plan
// (and so an ended sub-run whose other nodes were stopped) is a run that
// ended in time: Output is called.
//
// [Compile] and [Async.BeginWork] reject a node whose SubPlan has no Plan
// or no Output ([ErrNilWorker]).
type SubPlan[P, R any] struct {
	// Plan is the graph to run.
	Plan *Plan
	// Input, if not nil, makes the sub-run's context from the node's, for
	// the node's param and its upstreams' results to reach the workers of
	// Plan, which take per-request data from their context. The context
	// it returns must derive from ctx (one that derives from no run's, or
	// from another run's, fails the node, as does one without a Done
	// channel, such as context.WithoutCancel(ctx)); nil means ctx. It may
	// end before ctx (a shorter deadline for the sub-run), not after:
	// the sub-run ends when ctx does, whatever context Input returned. An
	// error fails the node without starting the sub-run.
	Input func(ctx context.Context, param P, all Wrappers) (context.Context, error)
	// Output gives the node's value and error from the ended sub-run,
	// which it must not keep or release: often a node's ValueIn, as in
	// Output: card.ValueIn ([WorkerWrapper.ValueIn]).
	Output func(sub *Run) (R, error)
}

// workerProblem says what makes s unusable, for Compile (see
// checkedWorker).
func (s SubPlan[P, R]) workerProblem() (string, error) {
	switch {
	case s.Plan == nil || s.Plan.p == nil:
		return "its SubPlan has no Plan", ErrNilWorker
	case s.Output == nil:
		return "its SubPlan has no Output", ErrNilWorker
	}
	return "", nil
}

// isNilWorker reports whether w is a nil pointer to one of this package's
// workers (SubPlan, SubGraph, ForEach), whose value methods
// (workerProblem, subPlan, Action) would panic: a nil worker.
func isNilWorker(w any) bool {
	o, ok := w.(ownWorker)
	return ok && o.isNil()
}

// ownWorker is a pointer to one of this package's worker structs.
type ownWorker interface{ isNil() bool }

func (s *SubPlan[P, R]) isNil() bool    { return s == nil }
func (s *SubGraph[P, R]) isNil() bool   { return s == nil }
func (f *ForEach[P, T, R]) isNil() bool { return f == nil }

// staticSub is the static shape of the plan s runs, for reports (see
// staticWorker).
func (s SubPlan[P, R]) staticSub() *Report { return s.Plan.Describe() }

// Action runs the sub-plan and reads the node's value from it.
func (s SubPlan[P, R]) Action(ctx context.Context, param P, all Wrappers) (v R, err error) {
	if why, err := s.workerProblem(); err != nil {
		return v, fmt.Errorf("%w: %s", err, why) // only if Compile was bypassed
	}
	outer := all.r
	if outer == nil {
		return v, fmt.Errorf("asynctool: SubPlan called outside a run (its Wrappers are empty)")
	}
	in := ctx
	if s.Input != nil {
		if in, err = s.Input(ctx, param, all); err != nil {
			return v, fmt.Errorf("asynctool: SubPlan's Input: %w", err)
		}
		if in == nil {
			in = ctx
		} else if !outer.owns(in) || in.Done() == nil {
			// From outside any run, from another run's worker (an earlier
			// run's too, whose state this run reuses), or detached
			// (context.WithoutCancel): the sub-run would not have the
			// node's deadline and cancellation.
			return v, fmt.Errorf("asynctool: SubPlan's Input returned a context that does not derive from the node's, or drops its cancellation")
		}
		if in.Done() != ctx.Done() {
			// A context that keeps the node's values may still have
			// dropped its cancellation out of sight:
			// context.WithCancel(context.WithoutCancel(ctx)) passes the
			// check above, and a sub-run under it would outlive the
			// node, and hold Close, for as long as its workers wait for
			// their context. So the node's end ends the sub-run too,
			// with the node's cause. Not when in has ctx's own Done
			// channel (ctx with values added, Input's usual result): it
			// ends with ctx already, and the wrapping would cost each
			// call 8 allocations.
			var release func()
			in, release = endingWith(in, ctx)
			defer release()
		}
	}
	h, err := runSub(in, all, s.Plan.p.getRun(), "sub-plan")
	if err != nil {
		return v, err
	}
	return s.Output(h)
}

// runSub runs sub, a run prepared to start (not started), as the sub-run
// of the node whose worker got all, under ctx (the node's, or one that
// derives from it), and returns its handle once it has ended. The error
// says why the node fails without reading the sub-run's results (noun
// names the sub-run in it): it was stopped, a callback or hook panicked
// in it, or it suspended, which cancels it. A sub-run stopped by ctx's
// own deadline whose cause is sub.budget (a ForEach's Budget, not the
// node's deadline), and by nothing else, is no error: its nodes ended with what
// they had; unless one of them was suspended, which fails the node as a
// stall does.
func runSub(ctx context.Context, all Wrappers, sub *runState, noun string) (*Run, error) {
	outer := all.r
	// The outer run holds the Async open while this worker runs, so the
	// sub-run starts even if Close was called since: it is part of a run
	// Close waits for. This goroutine runs the sub-run's nodes as far as
	// it can before it waits, so the worker holds no goroutine idle while
	// the plan has work for it.
	h := sub.start(ctx, outer.a, 0, true)
	// Adopted after start's writes, which a report must not read beside,
	// and before its first task runs, so that the outer run's report
	// shows the sub-run from its start: this goroutine may run all of a
	// chain. A worker of the plan, run here, that ends this goroutine
	// with runtime.Goexit fails the node with ErrGoexit, and cancels the
	// sub-run first, as a node that ends otherwise stops its sub-run.
	outer.adopt(all.self, h)
	sub.outer = outer.outerOf(sub, all.self)
	if tok := hedgeCallOf(ctx, all); tok != nil {
		// The call of a Hedged worker that started it: the last sub-run
		// a call starts is its own, as the last a worker starts is the
		// node's (a worker that falls back on a second SubPlan).
		tok.sub.Store(h)
	}
	returned := false
	defer func() {
		if !returned {
			sub.Cancel()
		}
	}()
	sub.helper()
	returned = true
	var stall <-chan struct{} // nil, never ready, for a plan that cannot suspend
	if sub.p.suspends {
		stall = sub.Suspended()
	}
	select {
	case <-sub.done:
	case <-stall:
		if name, why, ok := sub.cancelStalled(); ok {
			return nil, suspendedError(noun, name, "was cancelled", why)
		}
		// The sub-run's context (an Input's, a ForEach's Budget, the
		// node's end) ended between the stall and the cancel: the
		// sub-run ended as that says, below.
	}
	if err := sub.err(); err != nil {
		if ctx.Err() == nil && sub.endErr.Load() == nil && sub.timedOut.Load() {
			if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
				// The sub-run was stopped, not by a node of its own (a
				// PolicyEnd failure is the node's failure, which it
				// ends with), and ctx's deadline has passed, and ctx
				// ends in a moment: a sub-run whose OnRunStart hook
				// dropped ctx's cancellation ends by a timer of its own
				// for that deadline (see keepCaller), which may fire
				// first. Wait for ctx, so that the node ends as its
				// deadline ends it, a timeout, not as failed by the
				// sub-run's stop.
				<-ctx.Done()
			}
		}
		if sub.budget == nil || context.Cause(ctx) != error(sub.budget) || !sub.onlyTimedOut() {
			return nil, fmt.Errorf("asynctool: %s: %w", noun, err)
		}
		// A node suspended before the Budget ran out (while another
		// still worked, so the sub-run had not stalled), or a custom
		// join that suspended on the items the Budget stopped: the node
		// fails as it would have once the sub-run stalled, rather than
		// report the suspended node as stopped by the Budget.
		if name, why, ok := sub.suspendedWhenSwept(); ok {
			return nil, suspendedError(noun, name, "its Budget ran out", why)
		}
	}
	return h, nil
}

// outerNode names the node whose worker started a sub-run: its index
// in its run's plan, and the node that started that run, if it is a
// sub-run too. It is immutable, and holds no run state: a worker of the
// sub-run that goes on after the sub-run ended may ask for its path
// (Wrappers.Path) once the outer runs have been released, and their
// states recycled or reused by other runs.
type outerNode struct {
	p    *plan
	self int32
	// plans: every run on the way up is a Plan's, not a graph of
	// single-use wrappers (a SubGraph's, a ForEach's), whose nodes hold
	// their results: only such an outerNode is kept by a sub-run's state
	// for reuse (see outerOf), past the sub-run.
	plans bool
	up    *outerNode
}

// outerOf returns the outerNode of sub, a sub-run that the worker of r's
// node self started: sub's last one, if that names the same node, else a
// new one, which sub keeps for its next run if every run on the way up
// is a Plan's.
func (r *runState) outerOf(sub *runState, self int32) *outerNode {
	if o := sub.lastOuter; o != nil && o.p == r.p && o.self == self && o.up == r.outer {
		return o
	}
	o := &outerNode{p: r.p, self: self, up: r.outer, plans: r.pooled && (r.outer == nil || r.outer.plans)}
	if o.plans {
		sub.lastOuter = o
	}
	return o
}

// suspendedError is the error of a node whose sub-run (noun) suspended
// at the node named name (see errName), with the failure why (nil for a
// custom join's DecideSuspend), and then ended as then says.
func suspendedError(noun, name, then string, why error) error {
	if why == nil {
		return fmt.Errorf("asynctool: %s suspended at node %s, and %s", noun, name, then)
	}
	return fmt.Errorf("asynctool: %s suspended at node %s, and %s: %w", noun, name, then, why)
}

// errName is how errors name the node with the given id and index: the
// id quoted, or, for the empty id, "#" and the index unquoted, as
// [Report.Err] names it, so that it is not taken for a node whose id is
// "#3".
func errName(id string, index int) string {
	if id == "" {
		return plainName(id, index)
	}
	return strconv.Quote(id)
}

// onlyTimedOut reports whether r, which has ended, was stopped by its
// context and had no other error (see err).
func (r *runState) onlyTimedOut() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.endErr.Load() == nil && r.timedOut.Load() && len(r.callbacks) == 0
}

// suspendedWhenSwept returns the first node of r, which has ended, that
// its sweep ended while it was pending, and the failure that suspended it.
func (r *runState) suspendedWhenSwept() (name string, why error, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.swept == 0 {
		return "", nil, false
	}
	k := r.swept - 1
	return errName(r.p.nodes[k].core.id, int(k)), r.sweptErr, true
}

// stopping reports whether h's run is stopping (its context is done, so
// its sweep ends what has not ended), false once it was released.
func (h *Run) stopping() bool {
	s := h.live()
	if s == nil {
		return false
	}
	defer s.unref()
	return s.stopping()
}

// waitSwept is runState.waitSwept's, for a run not yet released.
func (h *Run) waitSwept() {
	if s := h.live(); s != nil {
		defer s.unref()
		s.waitSwept()
	}
}

// inSweepCall reports whether h's run's sweep is running a callback or
// hook, which may be the caller (see runState.sweepCall).
func (h *Run) inSweepCall() bool {
	s := h.live()
	if s == nil {
		return false
	}
	defer s.unref()
	return s.sweepCall.Load()
}

// staticWorker is a worker of this package whose sub-run's shape is
// known before it starts (SubPlan, ForEach), for reports.
type staticWorker interface {
	staticSub() *Report
}

// adopt records sub, a run that node i's worker started, to be shown in
// r's report and released with r.
//
// The outer run keeps sub's handle, not its state: an Output that released
// sub (which it must not do) makes it stale, so the outer run neither shows
// nor releases whatever run reuses the state.
func (r *runState) adopt(i int32, sub *Run) {
	r.mu.Lock()
	if r.subs == nil {
		r.subs = make(map[int32][]*Run)
	}
	r.subs[i] = append(r.subs[i], sub)
	r.mu.Unlock()
}

// preferSub makes sub, a run that node i's worker started, the one that
// the node's report shows: the winning call's of a Hedged worker, which
// need not have started last. A nil sub, for a winning call that started
// none, makes the report show none.
func (r *runState) preferSub(i int32, sub *Run) {
	r.mu.Lock()
	defer r.mu.Unlock()
	runs := r.subs[i]
	switch k := slices.Index(runs, sub); {
	case sub == nil && len(runs) > 0 && runs[len(runs)-1] != nil:
		r.subs[i] = append(runs, nil) // releaseSubs releases a nil Run as nothing
	case sub != nil && k >= 0:
		r.subs[i] = append(slices.Delete(runs, k, k+1), sub)
	}
}

// lastSubs returns, by node index, the last run each node's worker
// started, nil if none did (see preferSub).
func (r *runState) lastSubs() map[int32]*Run {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.subs) == 0 {
		return nil
	}
	last := make(map[int32]*Run, len(r.subs))
	for i, runs := range r.subs {
		if len(runs) > 0 {
			last[i] = runs[len(runs)-1]
		}
	}
	return last
}

// releaseSubs releases the runs that r's nodes started, whose last
// reader, r, is being recycled.
func (r *runState) releaseSubs() {
	if r.subs == nil {
		// No node started a sub-run, in this run or an earlier one of the
		// state (adopt's write happens before the last task's end, and so
		// before the recycling, which reads this).
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, runs := range r.subs {
		for _, sub := range runs {
			sub.Release()
		}
		clear(runs)
		r.subs[i] = runs[:0] // kept, with the map, for the plan's next run
	}
}

// cancelStalled cancels r, which stalled on pending nodes, and waits for
// it to end. It returns the name (see errName) of the first node that
// was pending, and the failure that suspended it; ok is false when r's
// context ended between the stall and this cancel, so that r's own error
// says how it ended. Report reads the nodes' states before it calls any
// user code (an error's As method, say), which may be what ends the
// context: the pending nodes it shows may have been ended by then.
func (r *runState) cancelStalled() (name string, why error, ok bool) {
	rep := r.Report()
	stopped := r.stopping()
	r.Cancel()
	<-r.done
	if stopped {
		return "", nil, false
	}
	var first *NodeReport
	for i := range rep.Nodes {
		if n := &rep.Nodes[i]; n.Status == StatusPending && (first == nil || first.Err == nil && n.Err != nil) {
			first = n
		}
	}
	if first == nil {
		return "", nil, false
	}
	return errName(first.ID, first.Index), first.Err, true
}

// reportSubs fills in the Sub of rep's nodes that run a sub-run (SubPlan,
// SubGraph, ForEach).
//
// The report of a run that has ended shows its sub-runs ended too, and so
// does the report of a node that has ended, in a run that goes on: the
// outer run, or the node, can end (its deadline, a Cancel, EndsRun, the
// node's own Timeout) while a sub-run's sweep, on a goroutine of its own,
// is still ending its nodes, since neither waits for the node's worker.
// A node that ended while its sub-run ran ended because its context did
// (the node's worker, which waits for the sub-run, had not returned), and
// the sub-run's context ended with it (Input's context must keep the
// node's cancellation), so that wait is its sweep's, not its workers'.
// A worker's goroutine that ended with runtime.Goexit inside the sub-run
// cancelled it on the way out (see runSub). The wait ends when the sweep
// has gone through every node (waitSwept), not when the sub-run is done:
// that also waits for the Result callbacks and hooks that its other
// goroutines began before it stopped, and one of them may be the caller
// (Report and Close hung so). The wait is skipped
// while the sweep runs user code (sweepCall): that may be the caller,
// which would wait for itself; the sub-run is then shown as it is. For a node
// ended by its own Timeout, the wait starts once the sub-run's context is
// done: a report taken in the moment between the node's end and that may
// still show items running.
// A SubPlan node that ended without starting a sub-run (its Input failed,
// or it did not run) has no Sub.
func (r *runState) reportSubs(rep *Report) {
	last := r.lastSubs()
	ended := false
	select {
	case <-r.done: // nil, never ready, before the run starts
		ended = true
	default:
	}
	for i := range rep.Nodes {
		if sub := last[int32(i)]; sub != nil {
			if (ended || rep.Nodes[i].Status >= StatusSucceeded && sub.stopping()) && !sub.inSweepCall() {
				sub.waitSwept()
			}
			rep.Nodes[i].Sub = sub.Report()
		} else if rep.Nodes[i].Status < StatusSucceeded { // not ended, as the report says
			rep.Nodes[i].Sub = r.p.nodes[i].core.impl.staticSub()
		}
	}
}
