package asynctool

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// DefaultMaxWorkers is the number of goroutines an [Async] created without
// [WithMaxWorkers] or [WithExecutor] may run at once. It is far above the
// CPU count on purpose: workers usually block on RPCs, and capping them at
// GOMAXPROCS would serialise a fan-out. Nodes beyond it wait in the pool's
// queue, or run on the goroutine that made them ready when the queue is
// full; a pool never blocks a goroutine waiting for room.
const DefaultMaxWorkers = 4096

// Async runs graphs. Each Async owns its goroutine pool (unless given an
// [Executor] with [WithExecutor]), so separate Async values are isolated:
// a slow graph on one cannot starve another. An Async is safe for
// concurrent use by any number of runs; call [Async.Close] when done with
// it, never from one of its own workers or callbacks (Close waits for
// them, so it would wait for itself). Make it with [New]: the zero Async,
// and a nil *Async, refuse to run anything (every way to start a run
// returns an error). It must not be copied.
//
// An Async times the nodes of its first four single-use runs and of every
// 64th, and remembers by node id (for up to 4,096 ids; anonymous nodes
// never) whether each was quick. Later graphs that reuse those ids start
// one helper goroutine at a time for ready nodes that were quick, and one
// goroutine per node for the others, as a [Plan] does with its own
// timings. This changes how many goroutines run a graph, never its
// results or its deadline.
type Async struct {
	exec     Executor
	try      func(task func()) bool // non-blocking submit; false when there is no room
	start    func(task func()) bool // like try, but only onto a goroutine free now
	owned    *Pool                  // the pool New made, closed by Close; nil with WithExecutor
	hooks    []*Hooks               // the sets given to WithHooks, in order
	timings  bool
	inflight sync.WaitGroup // tasks handed to the executor and not yet returned
	mu       sync.RWMutex   // held for reading while a run is checked against Close (see launch)
	closed   bool
	cfgErr   error
	hist     history // what single-use runs timed, by node id
	// worklists are the goroutines' scratch lists, shared by every run
	// on this Async (a single-use graph's plan is new for each run).
	worklists sync.Pool // *worklist
	scratch   sync.Pool // *compileScratch, for BeginWork's compiles
	// epoch is when the Async was made: sampled runs time Actions as
	// time.Since(epoch), one read of the monotonic clock, where time.Now
	// reads the wall clock too.
	epoch time.Time
}

// Option configures an [Async]. A nil Option does nothing.
type Option interface {
	apply(*config)
}

type config struct {
	maxWorkers int
	exec       Executor
	err        error
	hooks      []*Hooks
	timings    bool
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithMaxWorkers bounds the number of goroutines the Async runs workers on
// at once (default [DefaultMaxWorkers]), on a [Pool] it owns. Any DAG
// completes even with n = 1: no goroutine waits for another node, but a
// worker that waits for a run it started (a [SubPlan]'s, for one). The
// n goroutines are shared by every run on the Async; a run that found none
// free goes on with those it has, and takes one that frees up later while
// it still has nodes queued. A run started from inside a worker (with a
// context that comes from the worker's) is the exception: when no
// goroutine of the pool is free, its first node, and a retry or a resumed
// node of it, run on a goroutine of their own, past the bound, since the
// workers that would free one may be waiting for such runs. A node's own
// [WorkerWrapper.Timeout] is the other: when it passes, the node ends on
// the timer's goroutine, which goes on with the nodes that its end makes
// ready, past the bound while the node's worker, which ignored its ctx,
// still holds a goroutine of the pool, so that such a worker does not hold
// the run back. A task that neither a free goroutine nor the pool's queue
// can take (a burst that fills both) is not lost either: a run's first
// node, each of its start nodes not known to be quick (see [Async]), a
// retry and a resumed node then run on a goroutine of their own (a retry
// on its backoff timer's), past the bound, and other ready nodes on the
// goroutine that made them ready. The calls of a [Hedged] worker with
// more than one attempt run on goroutines of their own too, the worker's
// waiting for them; a sub-run that such a call starts (a hedged SubPlan's
// or ForEach's) runs its first nodes on the call's goroutine. n must be
// at least 1; a smaller n makes every BeginWork return an error saying
// so.
func WithMaxWorkers(n int) Option {
	return optionFunc(func(c *config) {
		if n < 1 {
			c.err = fmt.Errorf("asynctool: WithMaxWorkers(%d): must be at least 1", n)
			return
		}
		c.maxWorkers, c.exec = n, nil
	})
}

// WithExecutor runs workers on e instead of a pool owned by the Async. A
// nil e, or a nil ExecutorFunc or pointer in it, makes every BeginWork
// return an error saying so. The Async does not close e.
//
// When e rejects a task the node stays in the run's queue, which the
// goroutine that shared it drains itself, so a rejecting or bounded
// executor slows a run down but never loses a node or deadlocks. Unlike
// the Async's own pool, e is not asked again when it may have room: a run
// it refused asks again only when it next puts nodes in its queue.
//
// Start nodes are the exception, so that one start node never waits
// behind another: each start node not known to be quick (every one
// until the Async, or the plan, has timed it; see [Async]) gets a task
// of its own, and one that e refuses runs on a goroutine of its own. A graph
// with many start nodes runs them all at once, whatever e's bound; to
// bound calls to a service, bound the nodes (a [ForEach] with a Limit,
// or nodes behind one start node, which e's bound holds to).
//
// An executor whose Submit runs the task on the caller (a caller-runs
// policy) nests the scheduler's loops on that goroutine and makes Start
// run work before it returns; prefer one that rejects when full. e's
// Submit must not wait for room: the run's own tasks submit to it, so if
// every goroutine of e waits in Submit for another to free up, the run
// deadlocks, and neither Cancel nor Close ends it (an ants pool must be
// made with ants.WithNonblocking(true)). A [*Pool] is exempt: whatever
// its [FullPolicy], the Async neither waits on it (Block) nor lets it run
// tasks on the caller (CallerRuns), and a full Pool counts as a refusal.
//
// A run started from inside a worker does not hand its first node,
// retries or resumed nodes to e but to goroutines of their own, since e
// might queue them behind the worker that waits for the run. The nodes
// made ready by a node's own Timeout run on the timer's goroutine, not on
// e (see [WithMaxWorkers]). A run started from one of e's own tasks that
// is not such a worker (a task of a [Serial], [Keyed] or [RunBatches]
// that shares e, and calls BeginWork) is a run like any other: its nodes
// queue in e behind the tasks that wait for them, until its deadline,
// once e's goroutines all run such tasks. Give such an Async a pool of
// its own (the default, or [WithMaxWorkers]).
func WithExecutor(e Executor) Option {
	return optionFunc(func(c *config) {
		if isNil(e) {
			c.err = errors.New("asynctool: WithExecutor(nil)")
			return
		}
		c.exec, c.maxWorkers = e, 0
	})
}

// New returns an Async configured by opts, applied in order: of
// [WithMaxWorkers] and [WithExecutor], which both choose where workers
// run, the last one given wins; each [WithHooks] adds its set. An option
// given a value that can never work (WithMaxWorkers(0), WithExecutor(nil))
// makes every way to start a run return its error, whatever options come
// after it.
func New(opts ...Option) *Async {
	c := config{maxWorkers: DefaultMaxWorkers}
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	a := &Async{cfgErr: c.err, hooks: c.hooks, timings: c.timings, epoch: time.Now()}
	if c.exec != nil {
		a.exec = c.exec
		if p, ok := c.exec.(*Pool); ok && p != nil {
			// Never Submit: under Block it waits for a worker, which the
			// run's own tasks submitting here may be holding.
			a.try, a.start = p.trySubmit, p.trySubmit
			return a
		}
		a.try = func(task func()) bool { return c.exec.Submit(task) == nil }
		a.start = a.try
		return a
	}
	p := NewPool(PoolSize(c.maxWorkers), PoolIdleTimeout(asyncIdleTimeout))
	a.exec, a.try, a.start, a.owned = p, p.trySubmit, p.tryStart, p
	return a
}

// asyncIdleTimeout is how long the workers of an Async's own pool wait for
// work before exiting. It is short so that an Async dropped without Close
// holds no goroutine for long (well inside the grace period of leak
// checkers such as goleak); under steady load workers are reused.
const asyncIdleTimeout = 100 * time.Millisecond

func (a *Async) trySubmit(task func()) bool { return a.try(task) }

// BeginWork runs the graph reachable from starts and returns when every
// node has ended, or promptly once the group deadline passes or ctx ends.
//
// The group deadline is the earlier of ctx's deadline and now+timeout
// (timeout 0 means ctx's deadline alone). Every worker receives a context
// with that deadline, derived from ctx. When it passes, every node that
// has not ended ends with [ResultTimeout] and its default value, its
// callback fires, nodes that have not started never start (see the package
// documentation for a start under way), and BeginWork returns an error
// wrapping [context.DeadlineExceeded] (or ctx's cause).
//
// BeginWork returns nil when every node ended in time, or when the run
// ended once its [WorkerWrapper.EndsRun] nodes had ended, whatever the
// workers returned: read failures from the nodes' results. Before running
// anything it rejects a bad graph with a [*GraphError] (see [ErrCycle] and
// the other sentinels). It also returns any [*CallbackPanicError].
//
// A pending node ([PolicySuspend], a custom join's DecideSuspend) can be
// resumed only through the [Run] that [Async.Start] returns: once the
// run waits on nothing but pending nodes, BeginWork cancels it, so that
// it does not wait for its deadline (or, without one, for ever), and
// returns an error naming the pending node and wrapping its failure,
// joined with the run's error.
func (a *Async) BeginWork(ctx context.Context, timeout time.Duration, starts ...Wrapper) error {
	h, err := a.startGraph(ctx, timeout, starts...)
	if err != nil {
		return err
	}
	return h.waitUnresumable("BeginWork")
}

// Start is the asynchronous form of [Async.BeginWork]: it validates the
// graph, starts it and returns at once with a handle on the run.
func (a *Async) Start(ctx context.Context, timeout time.Duration, starts ...Wrapper) (*Run, error) {
	return a.startGraph(ctx, timeout, starts...)
}

// startGraph is Start.
func (a *Async) startGraph(ctx context.Context, timeout time.Duration, starts ...Wrapper) (*Run, error) {
	if err := a.check(ctx, timeout); err != nil {
		return nil, err
	}
	r, err := a.compileSingleUse(starts)
	if err != nil {
		return nil, err
	}
	h, err := a.launch(ctx, r, timeout)
	if err != nil {
		unclaim(r.p, len(r.p.nodes))
		return nil, err
	}
	return h, nil
}

// compileSingleUse compiles the single-use wrappers that starts lead to, with
// working arrays from a's pool, and returns their run, ready to start.
func (a *Async) compileSingleUse(starts []Wrapper) (*runState, error) {
	sc, ok := a.scratch.Get().(*compileScratch)
	if !ok {
		sc = &compileScratch{}
	}
	p, err := compile(starts, sc)
	if sc.fits() {
		a.scratch.Put(sc)
	}
	if err != nil {
		return nil, err
	}
	bind(p)
	r := &p.one
	r.init(p, false)
	r.reset()
	r.sample = a.hist.sample()
	return r, nil
}

// RunPlan runs pl and waits, like BeginWork. It returns the run, whose
// results are read with [WorkerWrapper.ResultIn] and which should be
// released with [Run.Release] when they are no longer needed, and the
// run's error. The run is nil only if the run could not start. A run
// that waits on nothing but pending nodes is cancelled, as BeginWork
// cancels one: resume them through [Async.StartPlan]'s Run instead.
func (a *Async) RunPlan(ctx context.Context, pl *Plan, timeout time.Duration) (*Run, error) {
	h, err := a.startPlan(ctx, pl, timeout, "RunPlan")
	if err != nil {
		return nil, err
	}
	return h, h.waitUnresumable("RunPlan")
}

// waitUnresumable waits for h, a run of BeginWork or RunPlan (method),
// and returns its error. Its caller has no handle to resume it with, so
// once it has stalled on pending nodes ([PolicySuspend], a custom join's
// DecideSuspend), nothing but its deadline can end it, and nothing
// without one: it is cancelled then, as a SubPlan's sub-run is, and the
// error names the pending node and wraps its failure (unless the run's
// context ended the node first, which the run's error then says).
func (h *Run) waitUnresumable(method string) error {
	if !h.p.suspends {
		// A plain receive: a select, even with one case never ready,
		// costs a small run a fraction of a microsecond.
		<-h.done
		return h.err()
	}
	select {
	case <-h.done:
		return h.err()
	case <-h.runState.Suspended():
	}
	name, why, ok := h.runState.cancelStalled()
	if !ok {
		// The run's context ended between the stall and the cancel:
		// the run's error says so.
		return h.err()
	}
	return errors.Join(suspendedError("run", name, "was cancelled: "+method+" gives no Run to resume it with", why), h.err())
}

// StartPlan is the asynchronous form of [Async.RunPlan].
func (a *Async) StartPlan(ctx context.Context, pl *Plan, timeout time.Duration) (*Run, error) {
	return a.startPlan(ctx, pl, timeout, "StartPlan")
}

// startPlan is StartPlan; method names the caller in its errors.
func (a *Async) startPlan(ctx context.Context, pl *Plan, timeout time.Duration, method string) (*Run, error) {
	if err := a.check(ctx, timeout); err != nil {
		return nil, err
	}
	if pl == nil || pl.p == nil {
		return nil, fmt.Errorf("asynctool: %s with a nil or zero Plan (make one with Compile)", method)
	}
	r := pl.p.getRun()
	h, err := a.launch(ctx, r, timeout)
	if err != nil {
		r.refs.Store(1)
		r.unref()
		return nil, err
	}
	return h, nil
}

func (a *Async) check(ctx context.Context, timeout time.Duration) error {
	if a == nil || a.try == nil {
		return errors.New("asynctool: Async not made with New (nil or zero)")
	}
	if ctx == nil {
		return ErrNilContext
	}
	if a.cfgErr != nil {
		return a.cfgErr
	}
	if timeout < 0 {
		return fmt.Errorf("%w: %v", ErrNegativeTimeout, timeout)
	}
	return nil
}

// launch starts r unless a is closed, and returns its handle. The lock
// covers only the check and a hold on inflight, which keeps Close waiting
// until start has taken the run's own: start runs user code (OnRunStart
// hooks, and the run's nodes when the executor runs tasks on the caller),
// which may start a run on a, and a read lock held across it would make
// that run's launch wait behind a Close waiting for the lock, and so for
// the first run.
func (a *Async) launch(ctx context.Context, r *runState, timeout time.Duration) (*Run, error) {
	a.mu.RLock()
	if a.closed {
		a.mu.RUnlock()
		return nil, ErrClosed
	}
	a.inflight.Add(1)
	a.mu.RUnlock()
	defer a.inflight.Done()
	return r.start(ctx, a, timeout, false), nil
}

// bind gives every node of p, which compile claimed for p, its index in
// p; until then the node's idx held its position during compile.
func bind(p *plan) {
	for i := range p.nodes {
		c := p.nodes[i].core
		c.idx = int32(i)
	}
}

// unclaim releases the first n nodes of p, for a run that did not start.
func unclaim(p *plan, n int) {
	for i := range n {
		c := p.nodes[i].core
		c.owner.Store(nil)
	}
}

// Close stops the Async from starting new runs, waits until every run it
// started has ended and every worker it started has returned (including
// workers that outlived their run's deadline), and releases its pool. A
// run with a pending node keeps Close waiting until the node is resumed,
// the run is cancelled, or its deadline passes. It is safe to call more
// than once, and on a nil *Async (it does nothing), but not from a worker,
// callback or hook (OnRunStart, OnRunEnd and the others) of one of the
// Async's runs: it would wait for its own return. Call it on a goroutine
// of its own there. [Async.Shutdown] bounds the wait with a context.
func (a *Async) Close() error {
	if a == nil {
		return nil // it never started a run
	}
	a.refuse()
	a.inflight.Wait()
	if a.owned != nil {
		return a.owned.Close()
	}
	return nil
}

// refuse stops a from starting new runs.
func (a *Async) refuse() {
	a.mu.Lock()
	a.closed = true
	a.mu.Unlock()
}

// Shutdown is [Async.Close] bounded by ctx, for a service that must stop
// within a grace period. It stops the Async from starting new runs and
// waits, as Close does, until every run it started has ended and every
// worker it started has returned (including workers that outlived their
// run's deadline); it then releases the pool and returns nil.
//
// If ctx is done first, Shutdown returns ctx's error at once; so does a
// Shutdown whose ctx is already done when it is called, even with
// nothing left to wait for. The Async is closed all the same: it starts
// no new run, and a goroutine that Shutdown leaves (one per such call)
// finishes closing it (releases its pool) once the last run has ended
// and the last worker has returned. A worker that ignores its ctx, or a
// run with a pending node and no deadline, keeps that goroutine waiting
// as long as it would keep Close. Shutdown stops no run: runs end at
// their deadlines, and a run with a pending node waits for a Resume; to
// end them sooner, call [Run.Cancel] or cancel their contexts, before or
// after Shutdown.
//
// A nil ctx gets [ErrNilContext], and the Async is not closed. Shutdown
// is safe to call more than once, together with Close, and on a nil or
// zero *Async (it returns nil). Called from a worker, callback or hook of
// one of the Async's runs, it cannot see its own run end, and returns
// ctx's error once ctx is done.
func (a *Async) Shutdown(ctx context.Context) error {
	if ctx == nil {
		return ErrNilContext
	}
	if a == nil {
		return nil
	}
	a.refuse()
	done := make(chan error, 1)
	go func() { done <- a.Close() }()
	if err := ctx.Err(); err != nil {
		return err // before the select, which might see done first
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}
