package asynctool

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// Hooks observe runs. Every field is optional; a nil field costs nothing,
// and a run without hooks records no timestamps. Set the fields before
// installing the hooks and leave them afterwards: runs read them
// concurrently, and a run notes which per-node hooks are set as it
// starts. Install hooks on every
// run of an Async with [WithHooks], or on one run through its context with
// [WithRunHooks] (all fire when several are set: the Async's, in the
// order given to WithHooks, then the run's; the same *Hooks given to
// both fires once).
//
// Hooks run synchronously on the goroutine where the event happens, so
// they must be quick and safe for concurrent use: nodes of one run end on
// many goroutines at once. A panic in a hook is recovered and reported by
// BeginWork as a [*CallbackPanicError].
//
// A sub-run (a [SubPlan]'s, [SubGraph]'s or [ForEach]'s) is a run of its
// own to the hooks: OnRunStart and OnRunEnd fire for it too, and its
// nodes' events carry their own ids and indexes ("0", "1", ... for a
// ForEach's items), not the outer node's. OnRunStart learns that a run is
// one from [RunInfo.Nested]; the context it returns, which every later
// hook of the run receives, can carry that (and the outer node's id, from
// a value the outer node's OnNodeStart put in its context) to the others.
type Hooks struct {
	// OnRunStart is called before any node starts. The context it returns
	// (if not nil) becomes the parent of the run's context, so values it
	// adds (a tracing span) reach every worker and every later hook. The
	// run still has the group deadline and ends when the context it was
	// started with does, with its cause, also when the hook's context
	// does not derive from ctx or has dropped its cancellation
	// (context.WithoutCancel); then, at a deadline of ctx's that has a
	// cause of its own (context.WithDeadlineCause), the run's cause may
	// be context.DeadlineExceeded instead.
	OnRunStart func(ctx context.Context, info RunInfo) context.Context
	// OnNodeStart is called when a node is about to run, after it waited
	// ev.Wait for a goroutine. The context it returns (if not nil) is the
	// one the node's worker receives; it must derive from ctx. One that
	// does not (one from no run, or from another run's node) fails the
	// node's attempt without calling its worker, with an error that names
	// OnNodeStart, as SubPlan's Input is checked; one that derives from
	// ctx but has dropped its cancellation (context.WithoutCancel) reaches
	// the worker wrapped so that the node's end still ends it, with the
	// node's cause. A context that only adds values costs nothing more.
	// It may come after the node's OnNodeEnd, and after the run's
	// OnRunEnd: a node that the run's context (its deadline, a
	// cancellation, the run's end with its EndsRun nodes) or its own
	// Timeout ends as its start is under way is ended without waiting for
	// that start (its worker is still called, with ctx done); a hook that
	// pairs starts with ends must allow for a start that comes last.
	OnNodeStart func(ctx context.Context, ev NodeEvent) context.Context
	// OnNodeEnd is called once for every node, after its Result callback,
	// with its final state, result and duration.
	OnNodeEnd func(ctx context.Context, ev NodeEvent)
	// OnNodeSkip is called, before OnNodeEnd, for a node that did not
	// run because it was short-circuited (ev.Err is [ErrSkipped]) or not
	// taken ([ErrNotTaken]); ev.Reason says why.
	OnNodeSkip func(ctx context.Context, ev NodeEvent)
	// OnNodeTimeout is called, before OnNodeEnd, for a node ended by the
	// group deadline, the run's cancellation, its own timeout, or the
	// run's end with its [WorkerWrapper.EndsRun] nodes, and for an item
	// of a [ForEach] that its Budget stopped or kept from starting (ev.Err
	// is then a [*BudgetError]): every node whose Result is
	// [ResultTimeout].
	OnNodeTimeout func(ctx context.Context, ev NodeEvent)
	// OnNodeRetry is called when a failed attempt will be retried, with
	// the attempt's error in ev.Err and the backoff in ev.Wait.
	OnNodeRetry func(ctx context.Context, ev NodeEvent)
	// OnNodePending is called when a node becomes pending, to wait for
	// [Run.Resume]: its worker failed under [PolicySuspend], after its
	// retries (ev.Err is the failure), or its [CustomJoin] decided
	// [DecideSuspend] (ev.Err is nil). It is where to alert a person,
	// who must look before the run can go on. A Rerun that fails again
	// calls it again. It is not called for a join that decides to
	// suspend in the run's sweep, once the run's context is done: the
	// sweep ends that node at once, as a timeout. Nor is it called for a
	// node of a [SubPlan]'s, [SubGraph]'s or [ForEach]'s sub-run, which
	// no Resume reaches: the sub-run is cancelled once it waits only on
	// pending nodes, and its node fails (and is pending in its turn,
	// resumable as a whole, if its policy is PolicySuspend).
	OnNodePending func(ctx context.Context, ev NodeEvent)
	// OnRunEnd is called once every node has ended, with the run's
	// report, before the run's Wait (BeginWork, RunPlan) returns. The
	// run's OnRunEnd hooks, the Async's and the context's, share one
	// report, which they must not change. It is called for each sub-run
	// too (a SubPlan's, SubGraph's or ForEach's), with the sub-run's
	// report, before the outer run's, unless the outer run is stopped
	// (its deadline, Cancel, EndsRun, PolicyEnd) while the sub-run goes
	// on: both then end as it stops, in either order, and the sub-run's
	// may come after the outer run's Wait has returned. A hook that
	// keeps the request's report tells them apart by RunInfo.Nested,
	// which OnRunStart can put in the context it returns
	// (ExampleHooks_nested).
	OnRunEnd func(ctx context.Context, rep *Report)
}

// RunInfo describes a run to [Hooks.OnRunStart].
type RunInfo struct {
	// Nodes is the number of nodes in the run.
	Nodes int
	// Deadline is the group deadline, zero if there is none.
	Deadline time.Time
	// Nested reports whether the run was started with the context of a
	// worker of another run (or one derived from it): a [SubPlan]'s,
	// [SubGraph]'s or [ForEach]'s sub-run, or a run a worker started with
	// its ctx. The context that another run's hooks receive (all but
	// OnRunStart, which receives its caller's) is such a context too: a
	// run started with it is nested. The hooks of its Async and of its
	// context (which it inherits from the worker's) see it as a run of
	// its own.
	Nested bool
}

// NodeEvent describes a node to a hook.
type NodeEvent struct {
	// ID and Index identify the node; Index is its position in the run's
	// topological order, as in [Report.Nodes].
	ID    string
	Index int
	// State and Result are the node's state and result state at the event.
	State  State
	Result ResultState
	// Err is the node's error, for OnNodeEnd, OnNodeSkip and OnNodeTimeout,
	// and the failed attempt's error for OnNodeRetry.
	Err error
	// Reason explains, in words, why a node did not succeed.
	Reason string
	// Attempt counts the node's attempts begun (1 for the first), as
	// [NodeReport.Attempts] does: an attempt begins with OnNodeStart, then
	// Callback.Begin, and a Begin that panics ends it before the worker's
	// Action is called.
	Attempt int
	// Wait is how long the node waited for a goroutine once ready
	// (OnNodeStart of its first attempt; zero for a later one) or the
	// backoff before its next attempt (OnNodeRetry);
	// Duration how long it ran (OnNodeEnd; zero for nodes that never ran),
	// from its first start to its end, as [NodeReport.Duration]; and
	// Pending the part of Duration it spent pending, waiting for a
	// Resume (OnNodeEnd), as [NodeReport.Pending]: Duration-Pending is
	// how long its attempts took, with their backoffs.
	Wait, Duration, Pending time.Duration
}

// WithHooks installs hooks on every run of the Async. Given more than
// once, it installs each set, so that hooks from two sources (a tracer's
// and your own) both fire: for each event, the sets' hooks are called in
// the order the options were given, then those of [WithRunHooks]. A nil
// h, and a set already given, add nothing.
func WithHooks(h *Hooks) Option {
	return optionFunc(func(c *config) {
		if h != nil && !slices.Contains(c.hooks, h) {
			c.hooks = append(c.hooks, h)
		}
	})
}

// WithTimings makes every run of the Async record when each node became
// ready, started and ended, for [Run.Report], even without hooks. It
// costs a few clock reads per node.
func WithTimings(on bool) Option {
	return optionFunc(func(c *config) { c.timings = on })
}

type hooksKey struct{}

// WithRunHooks returns a copy of ctx that installs h on the run started
// with it (by BeginWork, Start, RunPlan or StartPlan), besides the hooks
// of its Async; an h that is one of the Async's own (a pointer given to
// [WithHooks]) is not called twice. A run has one set of context hooks:
// on a ctx that already holds some (installed by an earlier call, or
// inherited from a worker's context by a nested run), h replaces them for
// the runs started with the copy. ctx must not be nil, as for
// [context.WithValue], which panics on it.
func WithRunHooks(ctx context.Context, h *Hooks) context.Context {
	return context.WithValue(ctx, hooksKey{}, h)
}

// hooked calls f, a hook called for node i (-1 for the whole run),
// turning a panic into a reported *CallbackPanicError.
func (r *runState) hooked(name string, i int32, f func()) {
	defer func() {
		if v := recover(); v != nil {
			r.callbackPanic(i, name, newPanicError(v))
		}
	}()
	f()
}

// The bits of runState.nodeHooks: some hook has OnNodeStart (hookStart),
// or one of OnNodeEnd, OnNodeSkip and OnNodeTimeout (hookEnd).
const (
	hookStart uint8 = 1 << iota
	hookEnd
)

// nodeHooksOf returns the nodeHooks bits of hooks.
func nodeHooksOf(hooks []*Hooks) uint8 {
	var b uint8
	for _, h := range hooks {
		if h.OnNodeStart != nil {
			b |= hookStart
		}
		if h.OnNodeEnd != nil || h.OnNodeSkip != nil || h.OnNodeTimeout != nil {
			b |= hookEnd
		}
	}
	return b
}

func (r *runState) event(i int32) NodeEvent {
	pn, n := &r.p.nodes[i], &r.nodes[i]
	st := n.st()
	ev := NodeEvent{ID: pn.core.id, Index: int(i), State: publicState(st), Attempt: int(r.attemptsOf(i))}
	if terminal(st) {
		ev.Result, ev.Err = pn.core.impl.resultMeta(r.slot(i), st)
		ev.Reason = r.reason(i)
	}
	if r.times != nil {
		t := &r.times[i]
		if s := t.start.Load(); s > 0 { // not startSealed
			ev.Wait = time.Duration(s - t.ready.Load())
			if e := t.end.Load(); e != 0 {
				ev.Duration = time.Duration(e - s)
				ev.Pending = r.pendingTime(i)
			}
		}
	}
	return ev
}

// nodeStarted runs the OnNodeStart hooks and returns the worker's context.
func (r *runState) nodeStarted(i int32, ctx context.Context) context.Context {
	ev := r.event(i)
	if ev.Attempt > 1 {
		// The times hold the first start: the wait before a later
		// attempt was OnNodeRetry's backoff.
		ev.Wait = 0
	}
	for _, h := range r.hooks {
		if h.OnNodeStart == nil {
			continue
		}
		// A Goexit here ends the node's attempt (see salvage): recorded,
		// so that its reason names the hook, not the worker.
		r.hookedToTheEnd("OnNodeStart", i, func() {
			if c := h.OnNodeStart(ctx, ev); c != nil {
				ctx = c
			}
		})
	}
	return ctx
}

// nodeEnded runs the end hooks of node i, from position from on: each
// set of hooks has three, OnNodeSkip, OnNodeTimeout and OnNodeEnd, at
// positions 3k to 3k+2 for r.hooks[k]. It names the one running in
// wl.hook, so that a runtime.Goexit in it is reported under its name, and
// keeps the position after it in wl.hookNext, where the goroutine that
// carries on takes up the others (see salvage).
func (r *runState) nodeEnded(i int32, from int, wl *worklist) {
	ev := r.event(i)
	for k := from / 3; k < len(r.hooks); k++ {
		h, p := r.hooks[k], 3*k
		if h.OnNodeSkip != nil && p >= from && didNotRun(ev.Result, ev.Err) {
			wl.hook, wl.hookNext = "OnNodeSkip", p+1
			r.hooked("OnNodeSkip", i, func() { h.OnNodeSkip(r.ctx, ev) })
		}
		if h.OnNodeTimeout != nil && p+1 >= from && ev.Result == ResultTimeout {
			wl.hook, wl.hookNext = "OnNodeTimeout", p+2
			r.hooked("OnNodeTimeout", i, func() { h.OnNodeTimeout(r.ctx, ev) })
		}
		if h.OnNodeEnd != nil && p+2 >= from {
			wl.hook, wl.hookNext = "OnNodeEnd", p+3
			r.hooked("OnNodeEnd", i, func() { h.OnNodeEnd(r.ctx, ev) })
		}
	}
	wl.hook, wl.hookNext = "", 0
}

// resumeWork goes on with the work that a goroutine ended by
// runtime.Goexit left unfinished (see salvage): a node's end, or the
// decision of a custom join.
func (r *runState) resumeWork(wl *worklist) {
	if wl.after >= 0 {
		r.resumeJoin(wl)
		return
	}
	r.resumeEnd(wl)
}

// resumeJoin goes on after the custom join of the successor on edge
// wl.edge of node wl.after ended the goroutine that called it, with
// wl.why: it fails that successor (whose DefaultValue may run), then
// updates the node's other successors, as upstreamEndedFrom would have.
func (r *runState) resumeJoin(wl *worklist) {
	i, k, why := wl.after, wl.edge, wl.why
	wl.resume, wl.why = false, nil
	s := r.p.out(i)[k].node
	r.failFromUpstream(s, i, fmt.Errorf("asynctool: join of %s: %w", errName(r.p.nodes[s].core.id, int(s)), why), wl)
	wl.after = -1
	r.afterCallback(i, len(r.p.out(i))-int(k), wl)
}

// resumeEnd goes on with the end of node wl.prop, whose Result callback
// or one of whose end hooks ended the goroutine that was ending it with
// runtime.Goexit (see salvage): it runs the node's end hooks from
// wl.hookNext on, then updates its successors, as processEnd would have.
func (r *runState) resumeEnd(wl *worklist) {
	i := wl.prop
	wl.resume, wl.fresh = false, false
	if wl.claim != 0 {
		r.unclaim(wl)
	}
	if wl.sweep {
		r.sweepCall.Store(true) // cleared by sweepFrom if a hook ends the goroutine
	}
	if r.nodeHooks&hookEnd != 0 && wl.hookNext < 3*len(r.hooks) {
		r.nodeEnded(i, wl.hookNext, wl)
	}
	if wl.sweep {
		r.sweepCall.Store(false)
	}
	wl.prop = -1
	r.afterCallback(i, 0, wl)
}

func (r *runState) nodeRetrying(i int32, err error, delay time.Duration) {
	ev := r.event(i)
	ev.Err, ev.Wait = err, delay
	for _, h := range r.hooks {
		if h.OnNodeRetry != nil {
			r.hookedToTheEnd("OnNodeRetry", i, func() { h.OnNodeRetry(r.ctx, ev) })
		}
	}
}

// nodePending runs the OnNodePending hooks of node i, which has just
// become pending after err (nil for a join's decision) and its attempt
// (read before the move: once the node is pending, a Rerun may begin the
// next, and the event would carry its number).
//
// A hook that ends the goroutine with runtime.Goexit is reported as a
// panic is (see hookedToTheEnd), and the node stays pending: the
// goroutine's other work goes on elsewhere (see salvage), which must not
// end the node as the one whose worker was running (wl.cur), since it is
// pending or, resumed by then, running again elsewhere. A join's node
// (wl.after's successor) has left sInit, where salvage would fail it.
// The OnNodePending hooks after it still run (see pendingHooks).
func (r *runState) nodePending(i, attempt int32, err error, wl *worklist) {
	if wl.cur == i {
		wl.cur = -1 // attempt clears it once the worker's call is over anyway
	}
	if r.outer != nil {
		// A SubPlan's, SubGraph's or ForEach's sub-run, which no Resume
		// reaches: it is cancelled once it waits only on pending nodes,
		// and fails its node (see runSub), whose own PolicySuspend, if
		// any, is the one a person resumes.
		return
	}
	ev := r.event(i)
	ev.Attempt = int(attempt) // the event may be read after a Rerun began the next
	ev.Err, ev.Reason = err, pendingReason(err)
	r.pendingHooks(i, ev, 0)
}

// pendingHooks calls the OnNodePending hooks of r.hooks[k:] with ev, for
// node i. When one ends the goroutine with runtime.Goexit, the hooks
// after it run, as after a panic, on a goroutine of their own, a task of
// the run: the run does not count as waiting only on pending nodes (see
// Run.Suspended) until they have.
func (r *runState) pendingHooks(i int32, ev NodeEvent, k int) {
	normal := false
	defer func() {
		if !normal {
			next := k + 1 // a copy: k, which the loop moves, stays off the heap
			r.carryOn(func() { r.pendingHooks(i, ev, next) })
		}
	}()
	for ; k < len(r.hooks); k++ {
		if f := r.hooks[k].OnNodePending; f != nil {
			r.hookedToTheEnd("OnNodePending", i, func() { f(r.ctx, ev) })
		}
	}
	normal = true
}

// carryOn runs rest, the hooks after one that ended its goroutine with
// runtime.Goexit, on a goroutine of its own, a task of the run. Its
// callers copy the loop's position into rest before they call it: a
// closure that captured the loop variable itself would move it to the
// heap, one allocation on every call, not only after a Goexit.
func (r *runState) carryOn(rest func()) {
	r.taskStart()
	go func() {
		defer r.taskDone()
		rest()
	}()
}

// pendingReason is the Reason of a pending node, suspended after err
// (nil for a join's decision).
func pendingReason(err error) string {
	if err != nil {
		return fmt.Sprintf("pending after %v: waiting for Resume", err)
	}
	return "pending: waiting for Resume"
}

// runEnded runs the OnRunEnd hooks of r.hooks[k:] with rep, the run's
// report (nil: not made yet), and then ends the run (see completed). A
// hook that ends the goroutine with runtime.Goexit is reported as a panic
// is (see runEndHook); the hooks after it run then, as after a panic, on
// a goroutine of their own, which ends the run once they have.
func (r *runState) runEnded(k int, rep *Report, inSweep bool) {
	normal := false
	defer func() {
		if !normal {
			next, rep := k+1, rep // copies: k and rep, which the loop sets, stay off the heap
			r.carryOn(func() { r.runEnded(next, rep, inSweep) })
		}
	}()
	for ; k < len(r.hooks); k++ {
		h := r.hooks[k]
		if h.OnRunEnd == nil {
			continue
		}
		if rep == nil {
			rep = r.Report()
			rep.End = r.wall(r.ended.Load())
			rep.RunErr = r.err()
		}
		r.runEndHook(h.OnRunEnd, rep)
	}
	normal = true
	r.completed(inSweep)
}

// runEndHook calls an OnRunEnd hook. A runtime.Goexit in it is reported
// as a panic is, before the run ends (see runEnded), so the record is in
// place before the run resolves.
func (r *runState) runEndHook(f func(context.Context, *Report), rep *Report) {
	r.hookedToTheEnd("OnRunEnd", -1, func() { f(r.ctx, rep) })
}

// hookedToTheEnd is hooked for a hook whose runtime.Goexit nothing else
// reports by its name (salvage reports the end hooks' by wl.hook): it
// reports it itself, as a panic is, and lets the goroutine end.
// OnNodeStart's and OnNodeRetry's are reported so too, which the node's
// reason then names: the node itself only fails with ErrGoexit, as for
// its worker's Goexit.
func (r *runState) hookedToTheEnd(name string, i int32, f func()) {
	returned := false
	defer func() {
		if !returned {
			r.callbackPanic(i, name, &PanicError{Value: ErrGoexit})
		}
	}()
	r.hooked(name, i, f)
	returned = true
}
