package asynctool

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Run is one execution of a graph: a handle on it while it runs and its
// results afterwards. [Async.Start] and [Async.StartPlan] return one;
// BeginWork and RunPlan are those followed by Wait. Its methods are safe
// for concurrent use.
//
// A run of a [Plan] reuses the state of an earlier run that was released
// ([Run.Release]); each Run is a handle on one run only, so a handle
// kept after its Release never shows or frees another run.
//
// A nil or zero Run (Start, StartPlan and RunPlan return a nil one when
// the run could not start) is a run that never started: Wait and Resume
// return an error saying so, Done and Suspended a nil channel, which never
// closes, Report a report without nodes, and Cancel and Release do
// nothing.
type Run struct {
	*runState               // embedded for the package's tests, which read its fields
	done      chan struct{} // runState.done for this run: a later run makes its own
	gen       uint64        // runState.gen for this run: a Release moves it on
	// workers is the context the run's workers receive (runState.ctx),
	// kept in the handle so that it costs no object of its own: start
	// makes the handle with the run.
	workers runCtx
}

// runCtx is the context of a run's workers: the run's own (its deadline,
// its cancel), marked as a run's for the runs they start and for
// SubPlan's check of its Input (see inRunKey), as context.WithValue
// would mark it. It lives in the run's handle, which is never reused: a
// worker that keeps its context past the run reads no later run's
// deadline, and the mark, which is the runCtx itself, is no later run's
// either, though the run's state may serve one. Every other key, and
// context.Cause, go to the run's own context, as they would through a
// WithValue.
type runCtx struct {
	context.Context
}

func (c *runCtx) Value(key any) any {
	if _, ok := key.(inRunKey); ok {
		return c
	}
	return c.Context.Value(key)
}

func (c *runCtx) String() string { return fmt.Sprint(c.Context) + ".WithValue(asynctool run)" }

// live returns the handle's run state with a reference taken, nil once
// the run was released. The caller drops the reference (unref) when done:
// until then the state is not recycled, so a Release racing the caller
// (from another goroutine, on the same handle) cannot hand the state to a
// later run while the caller reads or changes it. Checking the generation
// alone would leave that window open: the caller would go on with a state
// that was meanwhile recycled and reused.
func (h *Run) live() *runState {
	if h == nil || h.runState == nil {
		return nil
	}
	s := h.runState
	if s.gen.Load() != h.gen {
		return nil
	}
	for {
		n := s.refs.Load()
		if n <= 0 {
			return nil // recycled: in the plan's pool, or being reset
		}
		if s.refs.CompareAndSwap(n, n+1) {
			break
		}
	}
	if s.gen.Load() != h.gen {
		s.unref() // the state was released meanwhile, maybe reused
		return nil
	}
	return s
}

// Release returns the state of a run of a [Plan] to the plan, to be reused
// by a later run. Call it once the results are no longer needed, after
// Wait. The recycling waits for any worker that outlived the run's
// deadline. Afterwards h shows no results: [WorkerWrapper.ResultIn] gives
// a zero WorkResult, [Run.Report] a report without nodes, [Run.Resume]
// and [Run.Wait] an error, [Run.Cancel] and a second Release do nothing;
// h never shows or changes a later run of the plan, even if another
// goroutine is calling one of h's methods as Release recycles the run.
// A run released before it ended (a deferred Release on a path that did
// not wait) is cancelled first, as by [Run.Cancel]: nothing could reach
// it any more, and a pending node of a run without a deadline would keep
// it, and [Async.Close], waiting for ever. Its state is recycled once it
// has ended ([Run.Done] is still closed then). Release does nothing for
// runs of single-use wrappers, whose results stay readable from the
// wrappers.
func (h *Run) Release() {
	if s := h.live(); s != nil {
		if s.pooled {
			select {
			case <-h.done:
			default:
				s.Cancel()
			}
		}
		s.releaseGen(h.gen)
		s.unref()
	}
}

// Done returns a channel that is closed when every node has ended. For a
// nil or zero Run (a RunPlan or StartPlan that returned an error gives a
// nil one) it is nil, which never closes: [Run.Wait] returns an error
// that says why.
func (h *Run) Done() <-chan struct{} {
	if h == nil {
		return nil
	}
	return h.done
}

// Suspended returns a channel that is closed when the run can go no
// further until one of its pending nodes is resumed: no goroutine is
// working on the run (a worker that outlived its node's own Timeout by
// ignoring its ctx counts as working until it returns), and every node
// that has not ended is pending (its worker failed under [PolicySuspend],
// or a custom join suspended it) or waits on a pending node. The nodes
// that do not depend on a pending one have all ended by then. Until
// [Run.Resume], [Run.Cancel] or the deadline, the run stays as it is;
// [Run.Report] names the pending nodes (StatusPending; the suspended ones
// themselves are in StateWorking).
//
// The channel is never closed for a run that ends without stalling, nor
// once its deadline has passed, nor for a released run. After a Resume,
// call Suspended again to learn whether the run stalls again.
func (h *Run) Suspended() <-chan struct{} {
	if s := h.live(); s != nil {
		defer s.unref()
		return s.Suspended()
	}
	return nil
}

// Cancel stops the run as if its deadline had passed: nodes not yet ended
// end with ResultTimeout and the cause [context.Canceled].
func (h *Run) Cancel() {
	if s := h.live(); s != nil {
		defer s.unref()
		s.Cancel()
	}
}

// Wait waits until every node has ended, or ctx is done, and returns the
// run's error: nil if every node ended in time, or if the run ended once
// its [WorkerWrapper.EndsRun] nodes had ended; otherwise an error that
// wraps the run context's cause ([context.DeadlineExceeded] for the group
// deadline) if the run was stopped before every node ended, joined with
// any [*CallbackPanicError]. Worker failures are node results, not run
// errors. If ctx ends first, Wait returns ctx.Err() and the run goes on;
// a run that has already ended when Wait is called, or when ctx ends,
// gets its own error, whatever the state of ctx.
func (h *Run) Wait(ctx context.Context) error {
	if ctx == nil {
		return ErrNilContext
	}
	if h == nil || h.runState == nil {
		return errors.New("asynctool: Wait on a nil or zero Run (Start, StartPlan and RunPlan return one)")
	}
	select {
	case <-h.done:
	case <-ctx.Done():
		select {
		case <-h.done: // both ready: the run's end wins
		default:
			return ctx.Err()
		}
	}
	s := h.live()
	if s == nil {
		return errors.New("asynctool: Wait on a released run")
	}
	defer s.unref()
	return s.err()
}

// Report returns the run's report. Called before the run ends, it is a
// snapshot: nodes that have not ended show their current state, and a
// node shown ready, running or ended by its join shows the upstreams
// that its join waited for ended, before its Ready time. A released
// run's report has no nodes.
//
// A node that runs a sub-run ([SubPlan], [SubGraph], [ForEach]) and has
// ended, or any such node once the run has ended, shows its sub-run
// ended too: Report waits for the sub-run's sweep, which ends its nodes
// and runs their Result callbacks and hooks. While the sweep runs user
// code (one of those callbacks or hooks, a DefaultValue, a custom join),
// which may call Report itself and would then wait for itself, Report
// does not wait, whichever goroutine calls it: the sub-run shows as it
// is, with nodes the sweep has not reached yet not ended, also after the
// run's Wait has returned (the node that runs the sub-run may have been
// ended by the deadline while its worker goes on). Report does not wait
// for user code that the sub-run's other goroutines began before it
// stopped (it may be called from there): the nodes of callbacks and
// hooks show as ended; a node whose worker's DefaultValue another
// goroutine is running, as it ends the node, may show as running; and a
// [ForEach] join under a Budget that waits for such an item's end, or
// that another goroutine was calling as the sweep ended an item, may not
// have decided yet: the sweep does not wait for a custom join's call
// (calls of one node's join never overlap), it leaves its ask to the
// goroutine making the call.
func (h *Run) Report() *Report {
	if s := h.live(); s != nil {
		defer s.unref()
		return s.Report()
	}
	return &Report{Nodes: []NodeReport{}}
}

// runState is the state of one run at a time: a single-use graph's, or a
// Plan's, recycled from run to run (see Run).
type runState struct {
	a         *Async
	p         *plan
	ctx       context.Context
	cancel    context.CancelFunc
	stopSweep func() bool
	// nested: the run was started from inside a worker (its context
	// comes from a run's): it never waits on a task of its own that
	// waits in the pool's queue (see dispatch, submit and startLate).
	nested bool
	nodes  []rnode
	slots  []any // slots[i] is node i's *slot[R] in a pooled run (see slot)
	// helper is the run's task, built once per Run value: its first call
	// in a run starts the run, later calls drain the shared queue (see
	// init).
	helper func()
	// begun is set by helper's first call in a run, which every later
	// call happens after: they are started by tasks of the run.
	begun     bool
	queued    func()       // helper, queued on the pool when none could start (see queueHelper); made on first use
	searching atomic.Int32 // helpers started that have not taken a node yet
	starved   atomic.Bool  // a helper was refused for want of a goroutine (see retryHelper)
	waiting   atomic.Bool  // a helper waits in the pool's queue (see queueHelper)
	sample    bool         // time the nodes' Actions in this run (see plan.learn)

	// shared holds ready nodes that the goroutine that found them did not
	// run itself; helpers and that goroutine take from it.
	sharedMu   sync.Mutex
	shared     []int32
	sharedHead int      // shared[:sharedHead] were taken by helpers (see takeShared)
	sharedBuf  [4]int32 // shared's first array: a small graph's run shares without an allocation
	// lent lists the nodes goroutines took in batches (see takeBatch),
	// which others take when the queue is empty; an entry whose node was
	// started since is dropped when found.
	lent   []int32
	pooled bool // belongs to a Plan: Release recycles it

	// remaining: nodes whose end has not been fully processed, or is
	// carried by a claimed node whose end has not (see carriedBit).
	remaining atomic.Int32
	pending   atomic.Int32 // 2 = every node ended + the sweep resolved; done closes at 0
	// hold is the run's own share of a.inflight: 1 until the sweep is
	// resolved, plus the Resumes between enter and leave.
	hold    atomic.Int32
	refs    atomic.Int32 // owner + sweep + tasks in flight; recycled at 0
	busy    atomic.Int32 // tasks in flight: 0 with nodes not ended is a stall
	stopped atomic.Bool  // the run's context is done: nothing new starts
	// sweepCall is set while the sweep runs user code: a node's Result
	// callback or hooks, OnRunEnd, a DefaultValue, a custom join. A
	// Report of an outer run called from there must not wait for this
	// run's sweep, which waits for it (see reportSubs).
	sweepCall atomic.Bool
	timedOut  atomic.Bool // some node ended with ResultTimeout
	cause     error       // context.Cause(ctx), written before stopped is set
	done      chan struct{}

	mu        sync.Mutex
	callbacks []error // *CallbackPanicError values
	// stall is closed when the run stalls on pending nodes (see
	// Suspended); nil while nobody waits for that. Guarded by mu.
	stall chan struct{}

	exts   []*nodeExt // per node with flow rules, else nil
	endErr atomic.Pointer[EndError]
	// endsLeft counts the nodes marked EndsRun that have not ended; the
	// last to end sets early, the error of the nodes it stops.
	endsLeft atomic.Int32
	early    atomic.Pointer[runEnded]
	// noDefault: a DefaultValue ended its goroutine with runtime.Goexit;
	// no DefaultValue is called for the rest of the run (see failResult).
	noDefault atomic.Bool

	// Observation, all off (nil) unless hooks or timings are on.
	hooks []*Hooks
	times []nodeTimes
	began time.Time
	ended atomic.Int64 // when the run ended, as a clock() reading (0: not yet)
	lanes atomic.Int32

	// gen counts the runs of a Plan's state that were released: a Run
	// handle made with another count is stale (see Run.live). After the
	// fields above, so that they keep the offsets the benchmarks were
	// measured with.
	gen atomic.Uint64

	// subs are the runs that nodes' SubPlan, SubGraph and ForEach workers
	// started, by node index, in the order they started, but for a Hedged
	// worker's winning call's, moved last (preferSub); they are released
	// with the run. Guarded by mu.
	subs map[int32][]*Run
	// lateHelper is helper for a nested run, handed to a goroutine or a
	// queue that may not run it soon: it counts as busy only once it
	// runs (see startLate). Made by the first nested start of r.
	lateHelper func()

	// The fields of a ForEach's sub-run, after the others, which keep
	// their offsets (see gen).
	lim *limiter // its Limit on its items; nil for other runs
	// limit is its Limit, for reports, 0 for other runs; budget is the
	// cause of its stop when its Budget runs out, nil for other runs.
	limit  int
	budget *BudgetError
	// swept is 1 + the index of the first node the sweep found pending
	// (suspended), 0 if none, and sweptErr the failure that suspended it
	// (nil for a custom join's DecideSuspend): a sub-run that a ForEach's
	// Budget stopped is no error, unless it had suspended (see runSub).
	// Guarded by mu.
	swept    int32
	sweptErr error
	// sweepOver is set when the sweep has gone through every node, and
	// sweepWait, if a Report waits for that (see waitSwept), is closed
	// then. Guarded by mu.
	sweepOver bool
	sweepWait chan struct{}
	// inner is ctx without the handle's wrapper (see runCtx): stopping
	// asks its Err, a method call and an atomic load, where a receive on
	// its Done channel is a call into the runtime, once per node.
	inner context.Context
	// outer names the node whose worker started this run, a sub-run (see
	// runSub); it is nil for a run started otherwise. Set before the
	// sub-run's first task, cleared as it is recycled (see Wrappers.Path).
	// lastOuter is the last outer the state had that names nodes of
	// Plans only, kept through the recycling, for a later sub-run of the
	// state under the same node to reuse rather than allocate.
	outer, lastOuter *outerNode
	// nodeHooks says which per-node hooks the run's hooks have (see
	// hookStart), read once as the run starts: a run whose hooks observe
	// only its end builds no event per node.
	nodeHooks uint8
}

// nodeTimes are one node's timestamps in a timed run, each read from the
// monotonic clock as in [Run.clock] (0: not yet).
type nodeTimes struct {
	ready, start, end atomic.Int64
	lane              atomic.Int32
}

// rnode is one node's state in one run.
type rnode struct {
	// Every field counts up from zero, so that a run is reset by clearing
	// its nodes.
	state     atomic.Int64 // the state word: see stateMask
	failCount atomic.Int32 // counted upstream failures (see pnode.needFail)
	released  atomic.Int32 // successors that no longer need this node
	attempts  atomic.Int32 // times the worker was started, for nodes with flow rules
	// failMarks says what the node's failure decided, written on the
	// failure path only (see failContinued, failWritten).
	failMarks atomic.Uint32
}

// The bits of rnode.failMarks.
const (
	// failContinued: the node failed under PolicyContinue: it counts as
	// done.
	failContinued uint32 = 1 << iota
	// failWritten: the node, in sEnding, has its failure's State and Err
	// written, and its worker's DefaultValue runs, or has run (see
	// failedMust and waitSwept).
	failWritten
)

// worklist is the private to-do list of one goroutine driving the run. It
// replaces recursion, so that arbitrarily deep graphs use constant stack.
type worklist struct {
	ready []int32 // triggered nodes to run, inline or on the pool
	// batch: quick nodes taken from the shared queue with the node being
	// run (see takeBatch), run next, last first. Unlike ready, they are
	// not shared again.
	batch []int32
	left  []int32 // nodes that left sInit: release their predecessors
	ended []int32 // nodes with a final state: callback, then successors
	cur   int32   // node whose worker is running, or -1
	prop  int32   // node whose Result callback is running, or -1
	sweep bool    // this is the sweep's worklist
	roots bool    // ready holds the run's roots: share them with share's roots rule
	wake  bool    // wake a helper (wakeOne) once the loop is under way
	retry bool    // the first node is a retry: it is already in sWorking
	// fresh: this goroutine found the run not expired moments ago (after
	// the node it just ran returned), so the next start need not look
	// again.
	fresh bool
	// front: this goroutine began as a helper and takes from the front of
	// the shared queue (see takeShared), so that on a wide fan-out it and
	// the goroutine that shared work at opposite ends of the plan's
	// arrays.
	front bool
	lane  int32 // this goroutine's lane in the report, when timed
	// claim is 1 + the node this goroutine moved from sInit straight to
	// sWorking when it readied it (see Run.upstreamEndedFrom), to be run next; 0
	// for none. Like a node in ready, it is the goroutine's to start.
	claim int32
	// carried: the ends of node after are carried by the node claimed
	// after it (see carriedBit), and upstreamEndedFrom leaves none to
	// take off Run.remaining.
	carried bool
	// after and edge: the node whose successors are being updated, and
	// the edge being looked at (a custom join runs user code there).
	after int32
	edge  int32
	// action: the worker of node cur is in its Action, called without a
	// recover of its own (see WorkerWrapper.execute): a panic that reaches
	// drive is that node's failure, not an internal one, and the goroutine
	// goes on with the run.
	action bool
	// refused: the run was starved (see retryHelper) when this goroutine
	// last shared, woke or retried a helper; attempt then looks at nodes
	// that may block (see queueBeforeBlocking).
	refused bool
	// hook: the end hook of node prop that is running (see
	// Run.nodeEnded), "" while its Result callback is: the name a
	// runtime.Goexit there is reported under (see salvage). hookNext is
	// the position of the end hook after it.
	hook     string
	hookNext int
	// resume: node prop's Result callback or an end hook ended the
	// goroutine that was ending it; this worklist, the one that carries
	// on, runs its end hooks from hookNext on first (see resumeEnd). Or,
	// with prop -1, a custom join called after node after ended, on
	// edge edge, ended it, with why: the worklist fails the join's node
	// first (see resumeJoin).
	resume bool
	why    error
}

// getWorklist returns an empty worklist from the Async's free list,
// which the runs of every plan and of single-use graphs share.
func (a *Async) getWorklist() *worklist {
	if wl, ok := a.worklists.Get().(*worklist); ok {
		return wl
	}
	return &worklist{cur: -1, prop: -1, after: -1}
}

func (a *Async) putWorklist(wl *worklist) {
	wl.ready, wl.left, wl.ended, wl.batch = wl.ready[:0], wl.left[:0], wl.ended[:0], wl.batch[:0]
	wl.cur, wl.prop, wl.sweep, wl.retry, wl.fresh, wl.front = -1, -1, false, false, false, false
	wl.roots, wl.wake, wl.action, wl.refused = false, false, false, false
	wl.after, wl.claim, wl.carried, wl.hook, wl.hookNext, wl.resume = -1, 0, false, "", 0, false
	a.worklists.Put(wl)
}

// history returns what the Async remembers of single-use graphs' nodes
// (see plan.quick), nil for a run of a Plan, which learns by itself.
func (r *runState) history() *history {
	if r.pooled {
		return nil
	}
	return &r.a.hist
}

// slot returns node i's result slot: a pooled run's own, or the one in
// the wrapper for a single-use run, which keeps no slice of them.
func (r *runState) slot(i int32) any {
	if r.pooled {
		return r.slots[i]
	}
	return r.p.nodes[i].core.impl.ownSlot()
}

// newRun allocates the state of one run of p.
func newRun(p *plan, pooled bool) *runState {
	r := &runState{}
	r.init(p, pooled)
	return r
}

// init makes r, which is zero, the state of one run of p.
func (r *runState) init(p *plan, pooled bool) {
	r.p, r.nodes, r.pooled = p, make([]rnode, len(p.nodes)), pooled
	r.shared = r.sharedBuf[:0]
	if pooled {
		r.slots = make([]any, len(p.nodes))
	}
	for i := range p.nodes {
		if pooled {
			r.slots[i] = p.nodes[i].core.impl.newSlot()
		}
		if p.nodes[i].flow != nil {
			if r.exts == nil {
				r.exts = make([]*nodeExt, len(p.nodes))
			}
			r.exts[i] = &nodeExt{}
		}
	}
	r.helper = r.newHelper()
}

// newHelper makes the run's task (see helper). One closure serves as the
// first task and as every helper: a run makes one instead of two.
func (r *runState) newHelper() func() {
	return func() {
		defer r.taskDone()
		if !r.begun {
			r.begun = true
			// The roots go in the worklist before anything can start a
			// helper, so that the loop's salvage keeps them if a helper
			// run inline by the executor ends this goroutine
			// (runtime.Goexit).
			wl := r.a.getWorklist()
			wl.ready = append(wl.ready, r.p.startOrder...)
			wl.roots = true
			r.loop(-1, wl)
			return
		}
		// The first take is from the back, where the goroutine that
		// shared takes too, so that the roots (and every node that gets a
		// helper of its own) start in the order they were shared; the
		// helper's later takes come from the front (see worklist.front).
		i, ok, left := r.takeShared(true, false)
		if !ok {
			return
		}
		// Node i goes in the worklist before the wake-up, for the same
		// reason as the roots.
		wl := r.a.getWorklist()
		wl.ready = append(wl.ready, i)
		wl.wake = left > 0 // keep one helper looking while work is queued
		// From the front, unless the run limits its roots (a ForEach's
		// Limit): they start in order then, as the limiter's parked ones.
		wl.front = r.lim == nil
		r.loop(-1, wl)
	}
}

// nodeTask returns a task that runs node i (if it is ready) and whatever
// it makes ready; i = -1 drains the shared queue.
func (r *runState) nodeTask(i int32) func() {
	return func() {
		defer r.taskDone()
		r.loop(i, r.a.getWorklist())
	}
}

// reset prepares r for a run: every per-node counter back to zero (they
// count up against the plan's thresholds), the roots ready, the shared
// queue and flow state emptied.
func (r *runState) reset() {
	clear(r.nodes)
	r.noDefault.Store(false)
	r.shared, r.sharedHead, r.lent = r.shared[:0], 0, r.lent[:0]
	r.searching.Store(0)
	r.starved.Store(false)
	r.waiting.Store(false)
	r.begun = false
	r.sample = r.pooled && r.p.learn()
	for _, e := range r.exts {
		if e != nil {
			*e = nodeExt{}
		}
	}
	r.endErr.Store(nil)
	r.early.Store(nil)
	r.endsLeft.Store(r.p.endsRun)
	for _, i := range r.p.roots {
		r.nodes[i].state.Store(int64(sReady))
	}
	r.remaining.Store(int32(len(r.p.nodes)))
	r.pending.Store(2)
	r.refs.Store(2)
	r.busy.Store(0)
	r.stopped.Store(false)
	r.timedOut.Store(false)
	r.cause = nil
	r.done = make(chan struct{})
	r.callbacks = r.callbacks[:0]
	r.stall = nil
	r.swept, r.sweptErr = 0, nil
	r.sweepOver, r.sweepWait = false, nil
}

// start runs r on a under the group deadline. The caller has reset r.
// A single-use run is shown to its wrappers here, only once it is sure to
// start: a run refused by a closed Async releases its nodes, which
// another Start may then compile, and a State call that had seen the
// refused run would read their indexes while that Start rewrites them.
//
// With inline, start hands the run's first task to no goroutine: it
// counts it, and the caller runs it, r.helper, next (see SubPlan, which
// first makes the run visible in its outer run's report).
func (r *runState) start(ctx context.Context, a *Async, timeout time.Duration, inline bool) *Run {
	if !r.pooled {
		r.p.single.Store(r)
	}
	r.a = a
	r.hooks = append(r.hooks[:0], a.hooks...)
	if h, ok := ctx.Value(hooksKey{}).(*Hooks); ok && h != nil && !slices.Contains(a.hooks, h) {
		// The Async's own hooks, given again for the run (or inherited by
		// a sub-run from a run that was given them), fire once.
		r.hooks = append(r.hooks, h)
	}
	_, r.nested = ctx.Value(inRunKey{}).(*runCtx)
	caller, hooked := ctx, false // hooked: an OnRunStart hook returned a context
	r.nodeHooks = nodeHooksOf(r.hooks)
	if len(r.hooks) > 0 || a.timings {
		r.startTimes()
		if len(r.hooks) > 0 {
			info := RunInfo{Nodes: len(r.nodes), Nested: r.nested}
			if timeout > 0 {
				info.Deadline = r.began.Add(timeout)
			}
			if d, ok := ctx.Deadline(); ok && (info.Deadline.IsZero() || d.Before(info.Deadline)) {
				info.Deadline = d
			}
			for _, h := range r.hooks {
				if h.OnRunStart != nil {
					r.hooked("OnRunStart", -1, func() {
						if c := h.OnRunStart(ctx, info); c != nil {
							ctx, hooked = c, true
						}
					})
				}
			}
		}
	} else {
		r.times, r.began = nil, time.Time{}
	}
	// Workers' contexts say which run they are in, for runs they start
	// (and SubPlan's check of its Input): the handle holds that mark.
	h := &Run{runState: r, done: r.done, gen: r.gen.Load()}
	switch {
	case hooked && ctx.Done() != caller.Done():
		// Not ctx != caller: two contexts of a type that is not
		// comparable (a struct value) would panic.
		ctx, r.cancel = keepCaller(caller, ctx, timeout)
	case timeout > 0:
		ctx, r.cancel = context.WithTimeout(ctx, timeout)
	default:
		ctx, r.cancel = context.WithCancel(ctx)
	}
	h.workers = runCtx{Context: ctx}
	r.ctx = &h.workers
	r.inner = ctx
	if r.nested && r.lateHelper == nil {
		r.lateHelper = func() {
			r.busy.Add(1) // see startLate
			r.helper()
		}
	}
	a.inflight.Add(1) // the run itself, until its sweep is resolved: Close waits for open runs
	r.hold.Store(1)
	r.stopSweep = context.AfterFunc(ctx, r.sweep)
	if inline {
		// The caller's goroutine runs the first task, as a CallerRuns
		// executor would (see SubPlan).
		r.taskStart()
		return h
	}
	r.dispatch(r.helper) // its first call in the run: it starts the run
	return h
}

// keepCaller returns the context of a run whose OnRunStart hooks returned
// c in place of caller, the context the run was started with, and its
// cancel function. c's Done channel is not caller's: it may not derive
// from caller, or may have dropped its cancellation
// (context.WithoutCancel), and the run would then not end with caller,
// as BeginWork promises. The run's context has c's values, the group
// deadline (the earlier of caller's deadline and now+timeout, unless c
// has an earlier one), and ends when caller does, with caller's cause.
// The cancel function also stops the watch on caller, so that a
// long-lived caller does not keep the run. One seam: when caller's own
// deadline is the group deadline and caller has a cause of its own for
// it (context.WithDeadlineCause), the run's deadline and caller's fire
// at one instant, and the run's cause is either caller's or
// context.DeadlineExceeded; it ends on time either way.
func keepCaller(caller, c context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	c, release := endingWith(c, caller)
	deadline, ok := caller.Deadline()
	if timeout > 0 {
		if t := time.Now().Add(timeout); !ok || t.Before(deadline) {
			deadline, ok = t, true
		}
	}
	cancelDeadline := context.CancelFunc(func() {})
	if ok {
		c, cancelDeadline = context.WithDeadline(c, deadline)
	}
	return c, func() {
		cancelDeadline()
		release()
	}
}

// endingWith returns a context with c's values and deadline that also
// ends when parent does, with parent's cause, and the function that
// releases it: it stops the watch on parent and cancels the context. It
// keeps a context that may have dropped parent's cancellation
// (context.WithoutCancel, or one from elsewhere) tied to parent: a run's
// to its caller's (keepCaller), a worker's to its node's (hookedCtx), a
// SubPlan's sub-run to its node's.
func endingWith(c, parent context.Context) (context.Context, func()) {
	c, cancel := context.WithCancelCause(c)
	stop := context.AfterFunc(parent, func() { cancel(context.Cause(parent)) })
	return c, func() {
		stop()
		cancel(nil)
	}
}

// owns reports whether c is, or derives from, the context that r's
// workers receive: a context a hook or a SubPlan's Input returns must,
// for the node's deadline, cancellation and values to reach what runs
// under it, and the mark that makes a run started under it a nested one
// (see WithMaxWorkers).
func (r *runState) owns(c context.Context) bool {
	mark, _ := c.Value(inRunKey{}).(*runCtx)
	return mark != nil && context.Context(mark) == r.ctx
}

// inRunKey marks the contexts that workers receive, with their run's
// *runCtx.
type inRunKey struct{}

// startTimes turns on timestamps for this run.
func (r *runState) startTimes() {
	if len(r.times) != len(r.nodes) {
		r.times = make([]nodeTimes, len(r.nodes))
	}
	r.began = time.Now()
	now := int64(1) // r.clock() at r.began
	clear(r.times)  // as clear(r.nodes) in reset: nothing else touches the run yet
	for _, i := range r.p.roots {
		r.times[i].ready.Store(now)
	}
	r.ended.Store(0)
	r.lanes.Store(0)
}

// clock returns the time in a timed run: nanoseconds since r.began plus
// one, so that 0 can mean "not yet". It reads only the monotonic clock,
// one read where time.Now makes two, and a change of the wall clock during
// the run cannot make a node's wait or duration negative.
func (r *runState) clock() int64 { return int64(time.Since(r.began)) + 1 }

// wall turns a reading of r.clock into a time, the zero time for 0 (and
// startSealed).
func (r *runState) wall(c int64) time.Time {
	if c <= 0 {
		return time.Time{}
	}
	return r.began.Add(time.Duration(c - 1)).Round(0) // wall clock only, as time.Unix gives
}

func (r *runState) taskStart() {
	r.a.inflight.Add(1)
	r.refs.Add(1)
	r.busy.Add(1)
}

func (r *runState) taskDone() {
	a := r.a
	// The stall check comes before the task lets go of its reference, so
	// that the run cannot be recycled under it.
	if r.busy.Add(-1) == 0 && r.remaining.Load() > 0 {
		r.noteStall() // no task left, and nodes have not ended
	}
	r.unref()
	a.inflight.Done()
}

// unref drops one reference; the last one recycles a released pooled run.
func (r *runState) unref() {
	if r.refs.Add(-1) == 0 {
		r.recycle()
	}
}

// recycle returns a pooled run, whose last reference is gone, to its plan.
func (r *runState) recycle() {
	if r.pooled {
		scalar := r.p.scalarResults()
		for i := range r.nodes {
			if scalar[i] && r.nodes[i].st() == sFinish {
				continue // its slot holds a number, no error: nothing to keep alive
			}
			r.p.nodes[i].core.impl.clearSlot(r.slots[i])
		}
		r.releaseSubs()
		r.a, r.ctx, r.cancel, r.stopSweep, r.inner, r.outer = nil, nil, nil, nil, nil, nil
		r.p.runs.Put(r)
	}
}

// resolve marks one of the two conditions for the end of the run (every
// node ended; the sweep ran or never will) and closes done after both.
func (r *runState) resolve() {
	if r.pending.Add(-1) == 0 {
		close(r.done)
	}
}

// releaseGen drops the owner's reference of the run of generation gen, if it
// is still r's run and was not released yet.
func (r *runState) releaseGen(gen uint64) {
	// Once only: a second call would drop the reference of a worker that
	// outlived the deadline, and the run would be reused under it. The
	// generation, not a flag that reset clears, makes it once per run: a
	// Release of a stale handle must not release the run that reused r.
	if r.pooled && r.gen.CompareAndSwap(gen, gen+1) { // the handles on this run see it released
		r.unref()
	}
}

// Suspended is Run.Suspended's, without the handle's check.
func (r *runState) Suspended() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stall == nil {
		r.stall = make(chan struct{})
	}
	ch := r.stall
	if r.stalled() {
		close(ch)
		r.stall = nil
	}
	return ch
}

// noteStall closes the channel of Suspended if the run has stalled.
func (r *runState) noteStall() {
	r.mu.Lock()
	if r.stall != nil && r.stalled() {
		close(r.stall)
		r.stall = nil
	}
	r.mu.Unlock()
}

// stalled reports whether nothing is working on the run although nodes
// have not ended. Every activity is a task (see taskStart): a goroutine
// running nodes, a scheduled retry, a node's own timeout, a Resume in
// progress; so with no task in flight, a node that has not ended cannot
// be ready or running, and waits, directly or through its upstreams, on
// a pending node. The sweep is no task, hence the check that the
// deadline has not passed.
func (r *runState) stalled() bool {
	return r.busy.Load() == 0 && r.remaining.Load() != 0 && !r.stopped.Load() && r.inner.Err() == nil
}

// Cancel is Run.Cancel's, without the handle's check.
func (r *runState) Cancel() { r.cancel() }

func (r *runState) err() error {
	var errs []error
	if e := r.endErr.Load(); e != nil {
		errs = append(errs, e)
	} else if r.timedOut.Load() {
		// A node timed out, so ctx was done already; its cause is fixed.
		// (r.cause may still be being written by the sweep.)
		errs = append(errs, fmt.Errorf("asynctool: run stopped before every node ended: %w", context.Cause(r.ctx)))
	}
	r.mu.Lock()
	errs = append(errs, r.callbacks...)
	r.mu.Unlock()
	return errors.Join(errs...)
}

// callbackPanic records p, a panic in method of node i, or of the whole
// run when i is -1.
func (r *runState) callbackPanic(i int32, method string, p *PanicError) {
	e := &CallbackPanicError{Index: int(i), Method: method, Panic: p}
	if i >= 0 {
		e.ID = r.p.nodes[i].core.id
	}
	r.mu.Lock()
	r.callbacks = append(r.callbacks, e)
	r.mu.Unlock()
}

// loop runs node first (if it is still ready to run) and then keeps going
// with the nodes it makes ready: the last one here, the others through the
// run's shared queue (see share), which it drains too before it returns.
// No goroutine ever waits here for another node.
func (r *runState) loop(first int32, wl *worklist) {
	defer r.a.putWorklist(wl)
	if r.times != nil {
		wl.lane = r.lanes.Add(1)
	}
	if wl.wake {
		wl.wake = false
		r.wakeOne()
		wl.refused = r.starved.Load()
	}
	for r.drive(first, wl) {
		first = -1 // a plain node's Action panicked; its end is in wl
	}
}

// drive is loop's body. It reports whether to call it again: a plain
// node's Action panicked, the panic has been recovered, the node ended
// into wl, and this goroutine goes on with it (see worklist.action),
// within the executor's bounds and in the same lane, as when call
// recovers a panic.
func (r *runState) drive(first int32, wl *worklist) (again bool) {
	normal := false
	defer func() {
		if normal {
			return
		}
		// runtime.Goexit, or a panic that escaped user code's own
		// recovery.
		var pe *PanicError
		if v := recover(); v != nil {
			pe = newPanicError(v)
			if wl.action {
				r.endPanicked(wl, pe)
				again = true
				return
			}
			r.callbackPanic(max(wl.cur, wl.prop, wl.after), "internal", pe) // -1: outside any node
		}
		// The goroutine's work goes on elsewhere.
		r.continueAfterGoexit(wl, pe)
	}()
	if wl.resume {
		r.resumeWork(wl)
	}
	i := first
	if wl.retry {
		wl.retry = false
		r.attempt(i, wl)
		i = -1
	}
	for {
		if i >= 0 {
			r.exec(i, wl)
		}
		r.settle(wl)
		if wl.claim != 0 && len(wl.ready) > 0 && r.a.owned == nil {
			// An executor of the user's may run a helper here, in share:
			// user code ahead of the claimed node.
			r.unclaim(wl)
		}
		if len(wl.ready) > 1 && !wl.roots {
			// Successors are readied last first (see upstreamEndedFrom):
			// back in order, for the shared queue.
			slices.Reverse(wl.ready)
		}
		if c := wl.claim - 1; c >= 0 {
			// The node this goroutine claimed: run it here (it is in
			// sWorking already), share the others. The claim is kept
			// until then, for salvage if sharing ends the goroutine.
			if len(wl.ready) > 0 {
				r.share(wl.ready, wl.roots)
				wl.refused = r.starved.Load()
				wl.roots = false
				wl.ready = wl.ready[:0]
			}
			wl.claim = 0
			r.attempt(c, wl)
			i = -1
			continue
		}
		if r.lim != nil && wl.roots {
			// A ForEach's items under its Limit: those that get a slot
			// now go on, the others wait in the limiter, in order.
			wl.ready = r.lim.admit(wl.ready)
		}
		if n := len(wl.ready); n > 0 {
			// Run the last ready node here; share the others.
			i = wl.ready[n-1]
			if n > 1 {
				r.share(wl.ready[:n-1], wl.roots)
				wl.refused = r.starved.Load()
				if r.a.owned == nil {
					wl.fresh = false // the user's executor may have run a helper here
				}
			}
			wl.roots = false // only the first ready list holds roots
			wl.ready = wl.ready[:0]
			continue
		}
		if n := len(wl.batch); n > 0 {
			i = wl.batch[n-1]
			wl.batch = wl.batch[:n-1]
			if r.nodes[i].state.Load()&startedBit != 0 {
				i = -1 // a taker started it (see takeLent)
			}
			continue
		}
		var ok bool
		var left int
		if i, ok, left = r.takeBatch(wl); !ok {
			break
		}
		if left > 0 && r.starved.Load() {
			r.retryHelper()
			wl.refused = r.starved.Load()
		}
	}
	normal = true
	return false
}

// endPanicked ends node wl.cur, whose Action, called without a recover of
// its own, panicked with pe: as execute ends a node that failed, or as a
// timeout if the deadline has passed.
func (r *runState) endPanicked(wl *worklist, pe *PanicError) {
	i := wl.cur
	wl.cur, wl.action = -1, false
	st, why := ResultException, error(pe)
	if s, cause, late := r.expiredNode(i); late {
		st, why = s, cause
	}
	r.end(i, sWorking, st, why, -1, wl)
}

// share puts ready nodes in the run's shared queue. The goroutine that
// shares keeps taking from the queue itself, so no node ever waits for a
// helper, and a small pool runs a wide graph without a hand-off per node.
//
// How many helpers to start depends on whether the nodes block. Each node
// that may block (an RPC) gets a helper of its own at once, while the
// executor has a goroutine free. Nodes known to be quick (their plan timed
// them, see plan.learn) get helpers the way Go's scheduler wakes threads:
// one looking for work at a time, each waking the next while work is
// queued, which costs a few wake-ups instead of one per node.
//
// Start nodes (roots) that may block are promised a task each, as when
// every root was a task of its own: if no goroutine is free now, the
// helper is submitted to the executor (which may queue it), or else given
// a goroutine of its own.
func (r *runState) share(nodes []int32, roots bool) {
	r.sharedMu.Lock()
	r.enqueue(nodes)
	// Decided under the lock that helpers leave searching under, so a
	// helper that found the queue empty cannot be counted as looking.
	idle := r.searching.Load() == 0
	r.sharedMu.Unlock()
	slow := r.p.notQuick(nodes, r.history())
	for range slow {
		if r.startHelper() {
			continue
		}
		if !roots {
			r.queueHelper()
			return
		}
		if r.nested {
			r.startLate()
			continue
		}
		r.taskStart()
		r.searching.Add(1)
		if !r.a.trySubmit(r.helper) {
			go r.helper()
		}
	}
	if slow < len(nodes) && idle {
		r.wakeOne()
	}
}

// startLate gives a root that may block a helper of its own, for a
// nested run refused a goroutine free now: on the executor, whose queue
// may hold it behind the very worker that waits for the run, else on a
// goroutine of its own. Such a helper holds the run and the Async, but
// counts as busy only once it runs, as queueHelper's does: the goroutine
// that shared drains the queue before it ends, so a run with no busy task
// has stalled even if a helper still waits in a queue, and a worker that
// waits for the run to suspend (a SubPlan's) must not wait for the
// helper, which may wait for that worker's goroutine.
func (r *runState) startLate() {
	r.a.inflight.Add(1)
	r.refs.Add(1)
	r.searching.Add(1)
	if !r.a.trySubmit(r.lateHelper) {
		go r.lateHelper()
	}
}

// wakeOne starts a helper unless one is already looking for work.
func (r *runState) wakeOne() {
	if r.searching.Load() == 0 {
		r.startHelper()
	}
}

// startHelper starts a helper on a goroutine the executor has free now.
// An executor of the user's may queue it instead (a user's Pool, whose
// trySubmit is start, does): a nested run's helper then counts as busy
// only once it runs, as in startLate.
func (r *runState) startHelper() bool {
	late := r.nested && r.a.owned == nil
	task := r.helper
	if late {
		task = r.lateHelper
		r.a.inflight.Add(1)
		r.refs.Add(1)
	} else {
		r.taskStart()
	}
	r.searching.Add(1)
	if r.a.start(task) {
		return true
	}
	r.searching.Add(-1)
	if !late {
		r.busy.Add(-1) // cannot reach 0: the caller is a task
	}
	r.refs.Add(-1) // cannot reach 0: the caller holds a reference
	r.a.inflight.Done()
	if !r.starved.Load() { // a store only when it changes: the line is hot
		r.starved.Store(true)
	}
	return false
}

// retryHelper starts a helper for a run that was refused one earlier,
// once its Async's pool has a goroutine free again: when another run's
// task, or a helper of an earlier run of the plan that had not yet
// returned, held the last one. Without it the run would go on with the
// goroutines it has until its next share, which in a fan-out never comes:
// a capped pool's free worker would stay idle while one goroutine ran
// every node, and nodes learned quick that block would run one after
// another. It is called after each take that left nodes in the queue
// (lent ones are not counted: the list keeps entries started since, and
// each would start a helper that finds nothing); it costs one atomic
// load unless the run was refused a helper. A
// user's executor gives no cheap sign of room, so such a run is not
// retried; its next share tries again.
func (r *runState) retryHelper() {
	if r.searching.Load() == 0 && r.a.owned != nil && r.a.owned.hasRoom() &&
		r.starved.CompareAndSwap(true, false) {
		r.startHelper() // sets starved again if refused
	}
}

// queueHelper puts one helper in the queue of the Async's own pool, for a
// run refused a goroutine for nodes that may block: the pool's next
// worker to finish a task runs it. retryHelper does not cover this case:
// it runs when a goroutine of the run takes from the queue, and the one
// that shared such nodes may be inside one of them, or running a chain
// of them through the nodes it makes ready, for as long as they take. A
// run has at most one helper queued at a time (waiting). It keeps the run
// from being recycled, and the Async from closing, until a worker has run
// it, which is why quick nodes do not queue one: a run of a plan released
// at once would find its state still held and allocate another (+27 to
// +67 ns/node in an A/B of WithMaxWorkers(2) when every refusal queued a
// helper), and the goroutine that shares quick nodes comes back to the
// queue soon (but see queueBeforeBlocking). A user's executor was asked
// already (start is its Submit) and is not asked again.
func (r *runState) queueHelper() {
	if r.a.owned == nil || r.waiting.Load() || !r.waiting.CompareAndSwap(false, true) {
		return
	}
	// It holds the run (refs) and the Async (inflight), but is not busy
	// until it runs: the goroutine that shared drains the queue before it
	// ends, so a run with no busy task has stalled even if a helper still
	// waits behind other tasks in the pool's queue (Suspended).
	r.a.inflight.Add(1)
	r.refs.Add(1)
	r.searching.Add(1)
	if r.queued == nil {
		// Made here, where the CAS above lets one goroutine at a time:
		// most runs never queue a helper. The next one to pass that
		// CAS happens after this write (the Store that reopens it).
		r.queued = func() {
			r.busy.Add(1)          // counted as busy only from now (see queueHelper)
			r.waiting.Store(false) // a refusal may queue another from now
			r.helper()
		}
	}
	if r.a.try(r.queued) {
		return
	}
	// The pool's queue is full too: the run goes on with the goroutines
	// it has, and retryHelper.
	r.searching.Add(-1)
	r.refs.Add(-1) // cannot reach 0: the caller holds a reference
	r.a.inflight.Done()
	r.waiting.Store(false)
}

// queueBeforeBlocking queues a helper (see queueHelper) when a goroutine
// of a run refused one is about to run node i, not learned quick, while
// nodes wait in the shared queue and no helper is looking: the goroutine
// may not come back to the queue (and to retryHelper) for as long as i
// takes, whether the nodes it left there are quick or not.
func (r *runState) queueBeforeBlocking(i int32) {
	if !r.starved.Load() || r.searching.Load() != 0 || r.waiting.Load() {
		return
	}
	if r.p.quick(i, r.history()) { // a single-use graph's node: its id's history may know better
		return
	}
	r.sharedMu.Lock()
	left := len(r.shared) - r.sharedHead
	r.sharedMu.Unlock()
	if left > 0 {
		r.queueHelper()
	}
}

// enqueue appends nodes to the shared queue; r.sharedMu is held. The room
// that helpers' takes left at the front is reused before the queue grows,
// so its array stays as large as its most crowded moment, not as all the
// nodes ever shared.
func (r *runState) enqueue(nodes []int32) {
	if h := r.sharedHead; h > 0 && len(r.shared)+len(nodes) > cap(r.shared) {
		k := copy(r.shared, r.shared[h:])
		r.shared, r.sharedHead = r.shared[:k], 0
	}
	r.shared = append(r.shared, nodes...)
}

// takeShared takes a node from the shared queue, or if it is empty one
// lent in a batch (see takeBatch), and says how many are left in both
// (counting lent nodes their holders may have started since). A helper's
// first take also stops it counting as searching, under the same lock
// that share decides under.
func (r *runState) takeShared(helper, front bool) (int32, bool, int) {
	r.sharedMu.Lock()
	defer r.sharedMu.Unlock()
	if helper {
		r.searching.Add(-1)
	}
	if r.sharedHead == len(r.shared) {
		i, ok := r.takeLent()
		return i, ok, len(r.lent)
	}
	i := r.pop(front)
	return i, true, len(r.shared) - r.sharedHead + len(r.lent)
}

// pop takes the node at the front or the back of the shared queue, which
// is not empty; r.sharedMu is held. An emptied queue starts again at 0.
func (r *runState) pop(front bool) int32 {
	var i int32
	if front {
		i = r.shared[r.sharedHead]
		r.sharedHead++
	} else {
		n := len(r.shared) - 1
		i = r.shared[n]
		r.shared = r.shared[:n]
	}
	if r.sharedHead == len(r.shared) {
		r.shared, r.sharedHead = r.shared[:0], 0
	}
	return i
}

// peek returns the node pop(front) would take.
func (r *runState) peek(front bool) int32 {
	if front {
		return r.shared[r.sharedHead]
	}
	return r.shared[len(r.shared)-1]
}

// takeLent takes a node from r.lent that is still ready and was never
// started; r.sharedMu is held and the queue is empty. The started bit
// tells a node started from its batch (or by another taker) apart from
// one that is ready again because it was resumed with Rerun after a
// suspend: such a node is run by Resume's task alone, and the batch's
// holder skips it too.
func (r *runState) takeLent() (int32, bool) {
	for n := len(r.lent); n > 0; n-- {
		i := r.lent[n-1]
		r.lent = r.lent[:n-1]
		if w := r.nodes[i].state.Load(); w&stateMask == int64(sReady) && w&startedBit == 0 {
			return i, true
		}
	}
	return -1, false
}

// maxBatch is the most nodes takeBatch takes at once.
const maxBatch = 8

// takeBatch takes a node from the shared queue, as takeShared does, for
// a goroutine whose own work has run out, and with it up to maxBatch-1
// more from the same end into wl.batch (which is empty), under the same
// lock: nodes the plan has timed as quick, and at most half of those
// left, so that goroutines taking from both ends share the tail. One
// lock then serves several nodes. A node that may block is never taken
// in a batch, nor with a batch behind it. It also says how many nodes
// are left in the queue (for retryHelper).
//
// A node learned quick may still block. So a batch is lent, not owned:
// its nodes are also listed in r.lent, where a goroutine that finds the
// queue empty takes them, and the CAS that starts a node decides between
// it and the batch's holder. Lent nodes count as queued for the helpers'
// wake-up chain (takeShared's left), so a batch held by a goroutine stuck
// in a node is taken by others once the queue is empty, and while lent
// nodes are left a helper is looking for work: a helper looking when
// the batch is taken wakes the next, and if none is looking, the chain
// stopped on an empty queue and the batch's nodes were shared later, by
// a share that woke one (TestQuickNodeThatBlocksHoldsNoOtherNodeBack).
func (r *runState) takeBatch(wl *worklist) (int32, bool, int) {
	r.sharedMu.Lock()
	defer r.sharedMu.Unlock()
	if r.sharedHead == len(r.shared) {
		i, ok := r.takeLent()
		return i, ok, 0
	}
	i := r.pop(wl.front)
	k := min(maxBatch-1, (len(r.shared)-r.sharedHead)/2) // never empties the queue
	if !r.p.nodes[i].learnedQuick() {
		k = 0
	}
	for ; k > 0 && r.p.nodes[r.peek(wl.front)].learnedQuick(); k-- {
		wl.batch = append(wl.batch, r.pop(wl.front))
	}
	slices.Reverse(wl.batch) // run in the order taken
	for k := len(wl.batch) - 1; k >= 0; k-- {
		// In the order the holder runs them: takers take from the end,
		// the node the holder would run last.
		r.lent = append(r.lent, wl.batch[k])
	}
	return i, true, len(r.shared) - r.sharedHead
}

// continueAfterGoexit finishes the work of a goroutine that user code
// ended with runtime.Goexit (for example t.FailNow in a test's worker):
// the rest of its worklist goes on in a new goroutine.
func (r *runState) continueAfterGoexit(wl *worklist, pe *PanicError) {
	cont := r.salvage(wl, pe)
	r.taskStart()
	go func() {
		defer r.taskDone()
		r.loop(-1, cont)
	}()
}

// salvage copies the worklist of a goroutine that is exiting through
// runtime.Goexit: the node whose worker was running fails with ErrGoexit,
// and a Result callback or end hook that did not return is reported and
// skipped; the node's end hooks after it run on the goroutine that
// carries on (see resumeEnd), as they would after a panic.
func (r *runState) salvage(wl *worklist, pe *PanicError) *worklist {
	cont := &worklist{
		ready: append([]int32(nil), wl.ready...),
		batch: append([]int32(nil), wl.batch...),
		left:  append([]int32(nil), wl.left...),
		ended: append([]int32(nil), wl.ended...),
		claim: wl.claim,
		// A DefaultValue that ended the goroutine in the loop of
		// upstreamEndedFrom may leave a node carrying that loop's ends.
		carried: wl.carried,
		cur:     -1,
		prop:    -1,
		after:   -1,
		sweep:   wl.sweep,
		roots:   wl.roots,
	}
	var why error = ErrGoexit
	if pe != nil {
		why = pe
	}
	if wl.cur >= 0 {
		r.endAborted(wl.cur, why, cont)
	}
	switch {
	case wl.prop >= 0:
		// A Result callback or an end hook did not return.
		i, method := wl.prop, "Result"
		if wl.hook != "" {
			method = wl.hook
		}
		r.callbackPanic(i, method, &PanicError{Value: why})
		next := 0 // the Result callback: every end hook is still to run
		if wl.hook != "" {
			next = wl.hookNext
		}
		// The node's other end hooks run, as after a panic, on the
		// goroutine that carries on (see resumeEnd), which then updates
		// the node's successors. Not here: the node's end may be the
		// run's last, whose OnRunEnd hooks would run in the deferred call
		// of the goroutine that is exiting, where a Goexit of theirs would
		// end that call before it hands the rest of the work on (the
		// sweep's end with it, so the run would never be done).
		cont.prop, cont.hookNext, cont.resume = i, next, true
	case wl.after >= 0:
		// A custom join did not return: its node fails, then the other
		// successors of the node that ended are updated, on the
		// goroutine that carries on (see resumeJoin). Not here: the
		// node's DefaultValue would run in the deferred call of the
		// goroutine that is exiting, where a Goexit of its own would end
		// that call before it hands the rest of the work on.
		cont.after, cont.edge, cont.why, cont.resume = wl.after, wl.edge, why, true
	}
	return cont
}

// dispatch hands task, the run's first, to a goroutine: never to the
// caller's, so that Start returns at once and BeginWork stays prompt (see
// submit), or to a new goroutine.
func (r *runState) dispatch(task func()) {
	r.taskStart()
	if !r.submit(task) {
		go task()
	}
}

// submit hands task, which runs nodes of r, to an idle or new goroutine
// of the Async's pool if there is one, else to the executor's queue; it
// reports false if neither took it. A nested run's tasks are never
// queued: the worker that started the run may hold the goroutine the
// queue waits for, as every worker of a busy pool may, so they are left
// to the caller's fallback (a goroutine of their own, past the pool's
// bound, or the calling goroutine). A nested run on an executor of the
// user's does not use it for them at all, since it may queue.
func (r *runState) submit(task func()) bool {
	if r.a.owned != nil && r.a.owned.tryStart(task) {
		return true
	}
	return !r.nested && r.a.trySubmit(task)
}

// expired reports whether the run's context is done, and if so how nodes
// that end now end: as timeouts with the context's cause, or with the
// EndError of a PolicyEnd node. It looks at the context itself, not only
// at the sweep's flag, so that a worker that returns after the deadline but
// before the sweep got to its node still ends as a timeout.
func (r *runState) expired() (ResultState, error, bool) {
	if !r.stopping() {
		return 0, nil, false
	}
	// endRun and endedOne decide under r.mu, reading the context,
	// whether the run is theirs to stop: one that decided before the
	// context was done has stored its stop once r.mu is free, and one
	// that decides later sees the context done and stores none. Read
	// before that, a stop still being stored would be missed, and this
	// node would end by the context while the nodes after it end by that
	// stop. The sweep sets stopped under r.mu, after which they are
	// final.
	var end *EndError
	var early *runEnded
	if r.stopped.Load() {
		end, early = r.endErr.Load(), r.early.Load()
	} else {
		r.mu.Lock()
		end, early = r.endErr.Load(), r.early.Load()
		r.mu.Unlock()
	}
	if end != nil {
		return ResultException, end, true
	}
	if early != nil && context.Cause(r.ctx) == context.Canceled {
		// The run ended with its EndsRun nodes, unless its context ended
		// otherwise between endedOne's check and its cancel: the
		// deadline passed, or the parent context was cancelled with a
		// cause of its own. The context, and every worker, saw that
		// first (ctx.Err, context.Cause), and so do the nodes that end
		// now. endedOne's cancel leaves context.Canceled as the cause,
		// which a plain cancel of the parent also does: no worker can
		// tell the two apart.
		return ResultTimeout, early, true
	}
	if r.stopped.Load() {
		return ResultTimeout, r.cause, true
	}
	return ResultTimeout, context.Cause(r.ctx), true
}

// mayEndLate reports whether expiredNode(i) may find node i late: the
// run is stopping, or the node has flow rules (its own timeout). It is
// inlined, so that a node without them, on a run not stopping, does
// not pay expiredNode's calls after its worker returns.
func (r *runState) mayEndLate(i int32) bool {
	// The context is done whenever stopped is set: the sweep sets it.
	return r.inner.Err() != nil || r.exts != nil && r.exts[i] != nil
}

// returnedLate ends node i, whose attempt has returned, as a timeout if it
// returned at or after the deadline (or its own timeout): the result is
// a timeout then, whoever gets to end the node. It reports whether it
// did. Callers ask mayEndLate first, which is inlined, so that a node's
// attempt pays no call while the run has no deadline passed and the node
// no timeout of its own.
func (r *runState) returnedLate(i int32, wl *worklist) bool {
	if st, cause, late := r.expiredNode(i); late {
		r.end(i, sWorking, st, cause, -1, wl)
		return true
	}
	return false
}

// attemptFailed ends node i's attempt, which failed with err (its worker
// returned err, or the attempt failed without calling it): as a timeout
// if it returned late (see returnedLate), else by its failure policy, which
// may retry it or make it pending, else as failed.
func (r *runState) attemptFailed(i int32, err error, wl *worklist) {
	if r.mayEndLate(i) && r.returnedLate(i, wl) {
		return
	}
	wl.fresh = true
	if r.p.nodes[i].flow != nil {
		var handled bool
		if handled, err = r.afterFailure(i, err, wl); handled {
			return // retrying or pending
		}
	}
	r.failAttempt(i, err, wl)
}

// expiredNode is expired, plus node i's own timeout.
func (r *runState) expiredNode(i int32) (ResultState, error, bool) {
	if st, err, late := r.expired(); late {
		return st, err, true
	}
	if r.exts == nil || r.exts[i] == nil || r.p.nodes[i].flow.timeout <= 0 {
		return 0, nil, false
	}
	ext := r.exts[i]
	ext.mu.Lock()
	ctx := ext.ctx
	ext.mu.Unlock()
	if ctx != nil && ctx.Err() != nil {
		return ResultTimeout, &NodeTimeoutError{ID: r.p.nodes[i].core.id, Timeout: r.p.nodes[i].flow.timeout, at: anonymousAt(r.p.nodes[i].core.id, i)}, true
	}
	return 0, nil, false
}

// exec runs node i if it is still ready: it may have been skipped or
// timed out while it waited for a goroutine.
func (r *runState) exec(i int32, wl *worklist) {
	n := &r.nodes[i]
	if r.lim != nil && r.lim.limited[i] {
		if r.stopping() {
			// The run is ending (an item that its context ended may be
			// handing its slot on): the sweep ends this one, as not
			// started.
			return
		}
		if !r.lim.start(i, wl) {
			return // parked, or no longer ready
		}
	} else if !n.move(sReady, sWorking, startedBit) {
		return
	}
	if r.exts != nil && r.exts[i] != nil {
		r.arm(i)
	}
	r.attempt(i, wl)
}

// attempt runs one attempt of node i's worker; the node is in sWorking.
func (r *runState) attempt(i int32, wl *worklist) {
	n := &r.nodes[i]
	if n.st() != sWorking {
		return // ended while a retry was scheduled
	}
	if wl.refused && !r.p.nodes[i].learnedQuick() {
		r.queueBeforeBlocking(i)
	}
	if r.exts != nil && r.exts[i] != nil {
		n.attempts.Add(1) // other nodes have one attempt: the started bit
	}
	if wl.fresh && r.exts == nil {
		wl.fresh = false
	} else if r.mayEndLate(i) {
		if st, err, late := r.expiredNode(i); late {
			// The worker does not start: take back the start counted
			// for it.
			if r.exts != nil && r.exts[i] != nil {
				n.attempts.Add(-1)
			} else {
				n.state.And(^startedBit)
			}
			r.end(i, sWorking, st, err, -1, wl)
			return
		}
	}
	ctx := r.ctx
	if r.exts != nil && r.exts[i] != nil {
		ext := r.exts[i]
		ext.mu.Lock()
		if ext.ctx != nil {
			ctx = ext.ctx
		}
		ext.mu.Unlock()
	}
	if r.times != nil && !r.times[i].start.CompareAndSwap(0, r.clock()) && r.times[i].start.Load() == startSealed {
		// Something ended the node (the sweep, as the deadline passed
		// after the look above) and counted it as not started, sealing
		// its start time (see attemptsOf): its worker is not called.
		return
	}
	wl.cur = i
	if r.times != nil {
		t := &r.times[i]
		t.lane.Store(wl.lane)
		if r.nodeHooks&hookStart != 0 {
			node := ctx
			if ctx = r.nodeStarted(i, ctx); ctx != node {
				r.executeHooked(i, node, ctx, wl)
				return
			}
		}
	}
	if r.sample {
		t0 := time.Since(r.a.epoch)
		r.p.nodes[i].core.impl.execute(ctx, r, i, wl)
		r.p.nodes[i].timed(time.Since(r.a.epoch) - t0)
	} else {
		r.p.nodes[i].core.impl.execute(ctx, r, i, wl)
	}
	wl.cur = -1
}

// executeHooked is the end of attempt, under c, the context that node
// i's OnNodeStart hooks returned in place of node, the node's own, once
// hookedCtx has checked it; a context it made is released when the
// worker has returned. It is a function of its own, so that attempt,
// which every node goes through, has no defer and no extra call.
func (r *runState) executeHooked(i int32, node, c context.Context, wl *worklist) {
	c, release, ok := r.hookedCtx(node, c)
	if !ok {
		// The attempt fails without calling Begin or the worker.
		r.attemptFailed(i, errHookCtx, wl)
		wl.cur = -1
		return
	}
	if release != nil {
		defer release()
	}
	if r.sample {
		t0 := time.Since(r.a.epoch)
		r.p.nodes[i].core.impl.execute(c, r, i, wl)
		r.p.nodes[i].timed(time.Since(r.a.epoch) - t0)
	} else {
		r.p.nodes[i].core.impl.execute(c, r, i, wl)
	}
	wl.cur = -1
}

// errHookCtx fails a node whose OnNodeStart hook returned a context that
// does not derive from the node's (see hookedCtx).
var errHookCtx = errors.New("asynctool: OnNodeStart returned a context that does not derive from the node's")

// hookedCtx checks c, the context that node's OnNodeStart hooks returned
// in place of node, the node's own, and returns the worker's. A context
// that does not derive from node (from no run's, or from another run's,
// as SubPlan's Input is checked) would take from the worker the node's
// deadline, cancellation and values, and the mark that makes a run it
// starts a nested one (see WithMaxWorkers): the worker is not called
// then, and the node fails with errHookCtx (ok is false). A context
// that derives from node but has a Done channel of its own may have
// dropped node's cancellation (context.WithoutCancel): the worker gets
// one that node's end ends too, with node's cause (see endingWith), which
// the caller releases once the worker has returned (release is nil when
// c's Done is node's, as for values added, the usual case).
func (r *runState) hookedCtx(node, c context.Context) (_ context.Context, release func(), ok bool) {
	if !r.owns(c) {
		return node, nil, false
	}
	if c.Done() == node.Done() {
		return c, nil, true
	}
	c, release = endingWith(c, node)
	return c, release, true
}

// trigger marks node s ready to run: the end of upstream by satisfied its
// join.
func (r *runState) trigger(s, by int32, wl *worklist) {
	if r.nodes[s].move(sInit, sReady, byBits(by)) {
		r.triggered(s, wl)
	}
}

// triggered queues node s, which has just moved from sInit to sReady.
func (r *runState) triggered(s int32, wl *worklist) {
	if !r.p.nodes[s].afterAll {
		wl.left = append(wl.left, s)
	}
	if r.times != nil {
		r.times[s].ready.Store(r.clock())
	}
	// Only the sweep's flag, a plain load: a node triggered just after the
	// deadline but before the sweep started is caught by the check before
	// it starts, or ended by the sweep while it waits.
	if r.stopped.Load() {
		st, err, _ := r.expired()
		r.end(s, sReady, st, err, -1, wl)
		return
	}
	wl.ready = append(wl.ready, s)
}

// unclaim makes the node this goroutine claimed a ready one again, before
// user code (a callback, a hook, a custom join, a DefaultValue, a helper
// that an executor of the user's runs in share) runs on the goroutine
// ahead of it, and before the goroutine skips it (the short-circuit rule
// applies to a node that has not started). The node is in sWorking with
// startedBit set,
// which says that its worker was started: if the deadline ended it while
// the user code ran, its report would say it was stopped while running.
// In sReady, the sweep ends it as not started, and the goroutine starts it
// as any node it takes from its ready list. The node goes where it would
// have been had it been readied like the others (see upstreamEndedFrom).
func (r *runState) unclaim(wl *worklist) {
	c := wl.claim - 1
	wl.claim = 0
	n := &r.nodes[c]
	for {
		w := n.state.Load()
		if w&stateMask != int64(sWorking) {
			return // the sweep ended it a moment after it was claimed
		}
		if n.state.CompareAndSwap(w, w&^(stateMask|startedBit)|int64(sReady)) {
			break
		}
	}
	wl.ready = slices.Insert(wl.ready, 0, c)
}

// failFromUpstream fast-fails node s because the end of upstream by made
// its join impossible; after the deadline that counts as a timeout, and
// after the run's end with its EndsRun nodes too, unless a must upstream
// of s had failed for a reason of its own (failedMust): s ends as that
// upstream decided.
func (r *runState) failFromUpstream(s, by int32, err error, wl *worklist) {
	if st, cause, late := r.expired(); late {
		st, by, cause := r.stopCause(s, sInit, st, cause)
		r.end(s, sInit, st, cause, by, wl)
		return
	}
	r.end(s, sInit, ResultException, err, by, wl)
}

// end moves node i from state from to sError with a failed result. It
// reports whether it did (another goroutine may have moved it first). by
// is the upstream that decided it, or -1; only a node in sInit has none
// recorded yet.
func (r *runState) end(i int32, from int32, st ResultState, err error, by int32, wl *worklist) bool {
	// A failed result may call the worker's DefaultValue: user code.
	wl.fresh = false
	if wl.claim != 0 {
		r.unclaim(wl)
	}
	n := &r.nodes[i]
	set := int64(0)
	if by >= 0 && from == sInit {
		set = byBits(by)
	}
	if !n.move(from, sEnding, set) {
		return false
	}
	if from == sInit {
		wl.left = append(wl.left, i)
	}
	r.noteTimeout(st, err)
	_, ownTimeout := err.(*NodeTimeoutError)
	if ownTimeout || (r.budget != nil && err == error(r.budget)) {
		// PolicyContinue applies to the node's own timeout, and to a
		// ForEach item's end when the Budget runs out, whoever ends it:
		// the join counts it as done, as if its Timeout had ended it.
		r.failedFinally(i)
	}
	if ownTimeout {
		if f := r.p.nodes[i].flow; f != nil && f.policy == PolicyEnd {
			r.endRun(i, err) // before setFailure and finish, as in failAttempt
		}
	}
	r.p.nodes[i].core.impl.setFailure(r, i, r.slot(i), st, err, wl.sweep)
	r.finish(i, sError, wl)
	return true
}

// noteTimeout records that the run was stopped before every node ended
// (see err) when a node ends with st and err by the run's deadline or
// cancellation: not by the node's own Timeout, which is that node's
// result, nor by the run's end with its EndsRun nodes, which is no
// timeout of the run's.
func (r *runState) noteTimeout(st ResultState, err error) {
	if st != ResultTimeout {
		return
	}
	switch err.(type) {
	case *NodeTimeoutError, *runEnded:
		return
	}
	r.timedOut.Store(true)
}

// rescueEnding ends node i, whose result has been written but whose
// goroutine is exiting through runtime.Goexit, and processes the
// consequences on a new goroutine.
func (r *runState) rescueEnding(i int32) {
	wl := &worklist{cur: -1, prop: -1, after: -1}
	r.finish(i, sError, wl)
	r.taskStart()
	go func() {
		defer r.taskDone()
		r.loop(-1, wl)
	}()
}

// finish publishes the final state of node i, whose result has been
// written by the caller, which holds it in sEnding.
func (r *runState) finish(i int32, final int32, wl *worklist) {
	n := &r.nodes[i]
	n.state.Store(n.state.Load()&^stateMask | int64(final)) // the caller holds it in sEnding
	r.finished(i, wl)
}

// finished queues the consequences of the end of node i, which has just
// reached its final state, after stopping its timers.
func (r *runState) finished(i int32, wl *worklist) {
	if r.exts != nil && r.exts[i] != nil {
		r.disarm(i)
	}
	if r.lim != nil {
		r.lim.end(i, wl) // a node parked for its slot goes in wl.ready
	}
	if r.times != nil {
		r.times[i].end.CompareAndSwap(0, r.clock())
	}
	if f := r.p.nodes[i].flow; f != nil && f.endsRun {
		r.endedOne(i)
	}
	wl.ended = append(wl.ended, i)
}

// skip short-circuits node x: none of its successors needs it any more.
func (r *runState) skip(x int32, wl *worklist) {
	if wl.claim-1 == x {
		r.unclaim(wl) // claimed but not started: skipped like a ready node
	}
	for {
		w := r.nodes[x].state.Load()
		st := int32(w & stateMask)
		if st != sInit && st != sReady || w&startedBit != 0 {
			// Ended, running, or ready for a Rerun of a pending node,
			// which Resume has promised (it sets the bit): only a node
			// that never started is skipped.
			return
		}
		if r.end(x, st, ResultException, ErrSkipped, -1, wl) {
			return
		}
	}
}

// settle processes the worklist's pending events until none is left.
func (r *runState) settle(wl *worklist) {
	for {
		if n := len(wl.left); n > 0 {
			i := wl.left[n-1]
			wl.left = wl.left[:n-1]
			r.release(i, wl)
			continue
		}
		if n := len(wl.ended); n > 0 {
			i := wl.ended[n-1]
			wl.ended = wl.ended[:n-1]
			r.processEnd(i, wl)
			continue
		}
		return
	}
}

// release tells the predecessors of node i that i no longer needs them:
// it has been triggered or has ended without starting. A predecessor that
// no successor needs any more is skipped (the short-circuit rule), unless
// the run is stopping (its context is done): the sweep then ends it, as a
// timeout (or with the EndError), like every other node that had not
// ended. The sweep reaches it later, since a predecessor comes before its
// successors in the sweep's order and one it has passed has ended.
func (r *runState) release(i int32, wl *worklist) {
	for _, v := range r.p.in(i) {
		x, _ := upstream(v)
		xn, xp := &r.nodes[x], &r.p.nodes[x]
		if terminal(xn.st()) {
			continue // ended: nothing left to skip, no need to count
		}
		if xn.released.Add(1) == xp.out1-xp.out0 && xp.shortCircuit && !r.stopping() {
			r.skip(x, wl)
		}
	}
}

// stopping reports whether the run's context is done, the sweep started
// or not: it will end every node not yet ended, as a timeout or with the
// EndError of a PolicyEnd node, so nothing is to be skipped any more.
func (r *runState) stopping() bool {
	return r.stopped.Load() || r.inner.Err() != nil
}

// processEnd runs the Result callback of node i, which has a final state,
// and then updates its successors.
func (r *runState) processEnd(i int32, wl *worklist) {
	n := &r.nodes[i]
	pn := &r.p.nodes[i]
	if wl.claim != 0 && (pn.hasCallback || len(r.hooks) > 0) {
		r.unclaim(wl)
	}
	wl.prop = i
	user := wl.sweep && (pn.hasCallback || len(r.hooks) > 0)
	if user {
		r.sweepCall.Store(true) // cleared by sweepFrom if user code ends the goroutine
	}
	if pn.hasCallback {
		wl.fresh = false // user code ran: look at the deadline again
		if p := pn.core.impl.fireResult(r.slot(i), n.st()); p != nil {
			r.callbackPanic(i, "Result", p)
		}
	}
	if len(r.hooks) > 0 {
		wl.fresh = false
		if r.nodeHooks&hookEnd != 0 {
			r.nodeEnded(i, 0, wl)
		}
	}
	if user {
		r.sweepCall.Store(false)
	}
	wl.prop = -1
	r.afterCallback(i, 0, wl)
}

// afterCallback updates the successors of node i, whose callbacks have
// run, skipping the last done of its out-edges (see upstreamEndedFrom),
// and then takes its end, and those it carried, off the run's remaining
// count, unless the node claimed there carries them on.
func (r *runState) afterCallback(i int32, done int, wl *worklist) {
	ends := 1 + r.nodes[i].carried() // see carriedBit
	if left := r.upstreamEndedFrom(i, done, r.counts(i), ends, wl); left != 0 && r.remaining.Add(-left) == 0 {
		r.complete(wl.sweep)
	}
}

// complete is called once, by whoever processed the last node's end. The
// sweep must not touch stopSweep: with an already expired context it can
// start before start() has stored it.
func (r *runState) complete(inSweep bool) {
	if r.sample && !r.pooled {
		r.a.hist.record(r.p)
	}
	if r.times != nil {
		r.ended.Store(r.clock())
		if len(r.hooks) > 0 {
			if inSweep {
				r.sweepCall.Store(true) // cleared by sweepFrom if OnRunEnd ends the goroutine
			}
			r.runEnded(0, nil, inSweep) // ends the run once its OnRunEnd hooks have run
			if inSweep {
				r.sweepCall.Store(false)
			}
			return
		}
	}
	r.completed(inSweep)
}

// completed ends the run, whose nodes have all ended and whose OnRunEnd
// hooks have run (see complete).
func (r *runState) completed(inSweep bool) {
	if !inSweep && r.stopSweep() {
		r.sweepResolved() // the sweep will never run
	}
	r.cancel()
	r.resolve()
}

func (r *runState) sweepResolved() {
	a := r.a
	r.resolve()
	last := r.hold.Add(-1) == 0 // before unref, which may recycle r
	r.unref()
	if last {
		a.inflight.Done()
	}
}

// enter takes a share of the run's own hold on the Async's inflight
// count, for a call from outside the run (Resume) that is about to add to
// that count: it fails once the run has let go of it. Adding to inflight
// while it may be zero would race Close's Wait (a WaitGroup misuse,
// which panics). The caller adds to inflight, then calls leave.
func (r *runState) enter() bool {
	for {
		h := r.hold.Load()
		if h == 0 {
			return false
		}
		if r.hold.CompareAndSwap(h, h+1) {
			return true
		}
	}
}

// leave gives back what enter took; the caller holds a reference to r.
func (r *runState) leave() {
	if r.hold.Add(-1) == 0 {
		r.a.inflight.Done()
	}
}

// sweep runs when the run's context is done before every node ended: it
// ends every node that has not ended with ResultTimeout. Workers still
// running see ctx.Done() and whatever they return later is dropped.
func (r *runState) sweep() {
	r.mu.Lock() // see expired
	r.cause = context.Cause(r.ctx)
	r.stopped.Store(true)
	r.mu.Unlock()
	wl := &worklist{cur: -1, prop: -1, after: -1, sweep: true}
	r.sweepFrom(0, wl)
}

// sweepFrom sweeps nodes k and up. If a callback ends the goroutine with
// runtime.Goexit, the sweep goes on in a new goroutine.
func (r *runState) sweepFrom(k int, wl *worklist) {
	normal := false
	defer func() {
		if normal {
			r.sweepResolved()
			return
		}
		r.sweepCall.Store(false) // a callback or hook ended the goroutine
		var pe *PanicError
		if v := recover(); v != nil {
			pe = newPanicError(v)
			r.callbackPanic(-1, "internal", pe)
		}
		cont := r.salvage(wl, pe)
		go r.sweepFrom(k, cont)
	}()
	if wl.resume {
		r.resumeWork(wl)
	}
	for ; k < len(r.nodes); k++ {
		r.stop(int32(k), wl)
		r.settle(wl)
	}
	r.mu.Lock()
	r.sweepOver = true
	if r.sweepWait != nil {
		close(r.sweepWait)
		r.sweepWait = nil
	}
	r.mu.Unlock()
	normal = true
}

// waitSwept returns once the run has ended or its sweep has gone through
// every node, whichever comes first: every node has ended then, but
// for a ForEach's join that its sub-run's Budget left to decide (see
// stop), which the end of an item still running its callback decides,
// or the goroutine calling the join that the sweep left its asks to (see
// customJoin), and a node whose worker's DefaultValue runs, held in
// sEnding by another goroutine, which the sweep passes by.
// The run's end (done) also waits for the Result callbacks and hooks
// that other goroutines are running, one of which may be the caller.
func (r *runState) waitSwept() {
	r.mu.Lock()
	if !r.sweepOver {
		if r.sweepWait == nil {
			r.sweepWait = make(chan struct{})
		}
		ch := r.sweepWait
		r.mu.Unlock()
		select {
		case <-ch:
		case <-r.done:
			return
		}
	} else {
		r.mu.Unlock()
	}
	// The sweep passes by a node that another goroutine holds in sEnding
	// (a worker that returned as the deadline passed, ending its node
	// itself): it is waited for while it is settling, not once it calls
	// the worker's DefaultValue, user code that may be the caller.
	for i := range r.nodes {
		for r.nodes[i].settling() {
			select {
			case <-r.done:
				return
			default:
				runtime.Gosched()
			}
		}
	}
}

// stop ends node i, for the sweep, unless it has ended.
//
// In a ForEach's sub-run with a Budget, a node whose join has not decided
// (the ForEach's join) is left to decide: the sweep ends its upstreams
// first, as they come before it, and every upstream's end reaches its
// join, whoever ends it, so that the join decides on the items as the
// Budget left them. Ended here, it would miss an item whose worker
// returned as the Budget ran out and whose end came after it.
func (r *runState) stop(i int32, wl *worklist) {
	rs, err, _ := r.expired()
	for {
		st := r.nodes[i].st()
		if st != sInit && st != sReady && st != sWorking && st != sPending {
			return
		}
		if st == sInit && r.budget != nil {
			return
		}
		if st == sPending {
			r.notePendingSwept(i)
		}
		ends, by, cause := r.stopCause(i, st, rs, err)
		if r.end(i, st, ends, cause, by, wl) {
			return
		}
	}
}

// notePendingSwept records node i, which the sweep is about to end while
// it is pending, if it is the first (see swept).
func (r *runState) notePendingSwept(i int32) {
	var why error
	if r.exts != nil && r.exts[i] != nil {
		ext := r.exts[i]
		ext.mu.Lock()
		why = ext.lastErr
		r.unpend(ext) // the node ends now
		ext.mu.Unlock()
	}
	r.mu.Lock()
	if r.swept == 0 {
		r.swept, r.sweptErr = i+1, why
	}
	r.mu.Unlock()
}

// attemptsOf returns how many times node i's worker was started.
//
// The count goes up when a goroutine claims the node, a moment before it
// checks the run's deadline and calls the worker; the deadline's sweep
// can end the node in between. With timings on (a run with hooks, or
// WithTimings), the start time written just before the first call tells
// such a node apart: none of its attempts was called. Once the node has
// ended, a start time still unwritten is sealed, so that the goroutine,
// which may have looked at the deadline just before the sweep, does not
// call the worker after all. Without timings, it
// counts as started, at no cost to a node's start.
func (r *runState) attemptsOf(i int32) int32 {
	n := &r.nodes[i]
	var k int32
	if r.exts != nil && r.exts[i] != nil {
		k = n.attempts.Load()
	} else if n.state.Load()&startedBit != 0 {
		k = 1
	}
	if k > 0 && r.times != nil {
		t := &r.times[i]
		s := t.start.Load()
		if s == 0 && terminal(n.st()) && !t.start.CompareAndSwap(0, startSealed) {
			s = t.start.Load() // its goroutine wrote it first: the worker is called
		}
		if s <= 0 {
			// Claimed, its worker not called: yet, in a snapshot of a
			// node not ended; never, once it has ended, as the sealed
			// start time tells its goroutine (see attempt), which may
			// have looked at the deadline before the sweep ended it.
			return 0
		}
	}
	return k
}

// startSealed is the start time of a node that ended, counted as not
// started, before its goroutine wrote one: the goroutine does not call
// its worker then. A node's start time and its count are one decision
// so, whichever of the goroutine and the sweep comes first.
const startSealed = -1
