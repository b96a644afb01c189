// Package asynctool orchestrates a request's work as a directed acyclic
// graph of typed tasks that run in parallel inside one process: the fan-out
// of one request to many RPCs, with dependencies between them, fallbacks,
// and one deadline for the whole group.
//
// # Building a graph
//
// A [Worker] does one piece of work (typically an RPC). [NewWrapper] wraps
// it with its parameter into a node, a [*WorkerWrapper]; chaining methods
// add a [Callback], a default value, and edges: w.Depend(up, must) makes up
// an upstream of w. [Async.BeginWork] runs every node reachable from the
// start nodes on a bounded goroutine pool and returns when all of them have
// ended, the group deadline passed, or the nodes marked
// [WorkerWrapper.EndsRun] have ended (the others are then stopped). Each
// node's typed [WorkResult] is then available from its wrapper; inside a
// worker, upstream results are read through the upstream's wrapper with
// [WorkerWrapper.ResultFrom], or by id with [ResultOf].
//
// # Lifecycle
//
// Every node reachable from the start nodes ends exactly once, in
// [StateFinish] (the worker succeeded in time) or [StateError] (it failed,
// panicked, was skipped, was a branch not taken (see [When]), an upstream
// it needed failed, the deadline passed, or the run ended with its
// [WorkerWrapper.EndsRun] nodes before it). A worker's Action runs at most once (once per attempt with a
// RetryPolicy or a Resume(Rerun)). Callback.Begin runs right
// before Action, only if it runs; Callback.Result runs exactly once per
// node, whether or not the node ran. A node's result is written before its
// final state is published, so no node ever reads an upstream's partial
// result, and once a result is final nothing overwrites it.
//
// # Joins
//
// A node with must dependencies runs once all of them succeeded and fails
// as soon as any of them fails, whatever the order they end in; its
// optional dependencies neither delay it nor fail it. A node whose
// dependencies are all optional runs on the first one that succeeds and
// fails once all of them failed. A node without dependencies starts at
// once. Failures propagate: a node that does not run gets an
// [*UpstreamError] wrapping the cause, so errors.Is finds the root cause
// through any chain.
//
// One difference from asyncTool v1.4, on purpose: asyncTool runs a node
// whose dependencies are all optional as soon as the first of them ends,
// unless it timed out, even when it ended with an exception. Here the rules
// above apply the same way whatever the number of dependencies and the
// order they end in, because a node's outcome should not depend on how
// many edges it has or on timing. (asyncTool decides a node with a single
// dependency from that dependency alone, ignoring must; the outcome is the
// same as here, where a node whose only dependency is optional has all its
// dependencies optional, and so fails when that one fails.)
//
// # Branches
//
// A node with a [When] join is a branch: it runs once its upstreams
// succeeded and its condition holds for one upstream's value, and
// otherwise it is not taken (a [WhenResult] join looks at how an
// upstream ended instead, for a fallback): it ends in StateError with [ErrNotTaken], its
// default value and its callback, without running. A custom join does the
// same with [DecideSkip]. A node not taken is not a failure: it applies no
// [FailurePolicy], and the nodes that needed it are not taken either,
// unless one of their upstreams failed (see When for each join).
//
// # Sub-plans
//
// A compiled [Plan] can be one node of another graph: a [SubPlan] worker
// runs it under the node's context, so the sub-run has the node's
// deadline and cancellation, and reads the node's value from it. To the
// outer run the sub-run is the node's one attempt: its flow rules apply
// to the node as a whole. The worker's goroutine runs the sub-run's first
// nodes itself; like any run started from a worker, the sub-run never
// waits on a task of its own that the pool's queue holds behind the
// worker that waits for it. A node's [NodeReport.Sub] shows its sub-run.
//
// A sub-graph whose shape is known only when the node runs is a
// [SubGraph]: its Build makes the graph of fresh wrappers each time, and
// it runs as a SubPlan's does. [ForEach] builds the most common one: a
// call per item of a list, all at once, with an optional [Join] that
// decides the node from its items as they end, stopping the rest (at the
// first failure with [AllSucceeded], at the first success with
// [AnySucceeded], at a quorum with [AtLeast]), an optional Limit on how
// many items work at once, which keeps no goroutine waiting, and an
// optional Budget, the time the items have in all, after which the node
// goes on with whatever arrived.
//
// # Short-circuit
//
// A node that has not started and has successors is skipped (it ends in
// StateError with [ErrSkipped], its default value, and its callback) as
// soon as none of its successors needs it any more. A successor needs it
// while that successor has not been triggered nor ended without starting
// (its join failed it, or did not take it) and is itself still needed; a
// node without successors is always needed, and so is one its custom
// join suspended ([DecideSuspend]), which a Rerun runs. So in any(a, b→c, d→e→f)→g,
// where g's dependencies are all optional, once a has triggered g, every one
// of b, c, d, e, f that has not started is skipped. This generalises
// asyncTool's check, which only followed single-successor chains. The
// bookkeeping is one counter per node, decremented once per edge, so a
// whole run stays linear in nodes plus edges. [WorkerWrapper.ShortCircuit]
// opts a node out.
//
// # Deadline and cancellation
//
// The run's context has the earlier of ctx's deadline and now+timeout
// (ctx's deadline alone for a timeout of 0), carries ctx's values, and is
// the context every worker receives. When it is done, BeginWork returns
// promptly with an error wrapping its cause
// ([context.DeadlineExceeded] for a deadline); every node not yet ended
// ends with [ResultTimeout] and its default value, its callback fires
// once, nodes that have not started never start (a worker whose start was
// under way as the deadline passed may still be called, with ctx already
// done), running workers see ctx.Done(), and whatever they return later is
// dropped. [Async.Close] waits for such workers. A run whose nodes
// marked with [WorkerWrapper.EndsRun] have all ended is stopped the same
// way, its stopped nodes' errors wrapping [ErrRunEnded], and BeginWork
// returns nil (a node whose must upstream had already failed, or was not
// taken, then ends with that upstream's [*UpstreamError], or with
// [ErrNotTaken], instead: see EndsRun). A node's own
// [WorkerWrapper.Timeout] ends it earlier in the same way, and a
// [RetryPolicy.AttemptTimeout] bounds each of its attempts: an attempt
// not returned by then fails with an [*AttemptTimeoutError], which is
// retried like any failure once the worker has returned.
//
// # Scheduling
//
// A goroutine that finishes a node runs one newly ready successor itself
// and hands the others to the pool; when the pool has no room, it runs
// them itself, one after another. No goroutine ever blocks waiting for
// another node, so any graph completes on a pool of one goroutine, and
// graph depth costs no stack. The one exception is a worker that waits
// for a run it started, a [SubPlan]'s included: once it has run what it
// could of the sub-run, it waits for the rest, which other goroutines
// run (a nested run never waits on a task of its own that the pool has
// queued, so a busy pool, even of one goroutine, cannot stall it). A run
// is nested when its context is the worker's ctx or derives from it: a
// worker that starts one with context.Background() starts a run like any
// other, whose nodes may wait in the pool's queue behind the worker that
// waits for them, until the run's deadline.
//
// # Panics
//
// This is the package's whole panic policy. A panic in a worker's Action
// is recovered and becomes that node's failure: Err is a [*PanicError]
// with the panic value and the goroutine's stack (it unwraps to the value
// when that is an error). A panic in Callback.Begin fails the node the
// same way, without calling Action. A panic in Callback.Result leaves the
// node's result as it was. A panic in a Defaulter's DefaultValue makes the
// zero value stand in; a panic in a RetryPolicy's Retryable or Backoff
// ends the retries and becomes the node's failure, an error that wraps
// the *PanicError and the failed attempt's error, under the node's
// failure policy as any failure is (for a stream node too); a panic in a
// custom join or a When condition fails the join's node; a panic in a
// hook is recovered. A
// panic in Begin, Result, DefaultValue or a hook is also returned by
// BeginWork as a [*CallbackPanicError], so none is lost (but for a
// Begin or an OnNodeStart hook called as the run's context ended, for a
// node whose start was under way then: the run does not wait for it, and
// its panic may come after BeginWork returned; a later [Run.Wait] returns
// it); a panic in
// Retryable, Backoff or a custom join is, like a worker's, the node's
// failure, found in its result and not returned by BeginWork. User code
// that ends its goroutine with runtime.Goexit (t.FailNow in a test) does
// not hang the run either. In a worker, Callback.Begin, or an OnNodeStart
// or OnNodeRetry hook, it fails the node it was working for with
// [ErrGoexit] (for a worker's Goexit the node's failure policy applies,
// but not its retries, as for a panic; unlike after a panic, the
// OnNodeStart or OnNodeRetry hooks of the hook sets after the one that
// called it are not called for that attempt), and one in Begin,
// OnNodeStart or OnNodeRetry is also returned by BeginWork as a
// *CallbackPanicError wrapping ErrGoexit, its node's reason naming the
// call; in a RetryPolicy's
// Retryable or Backoff it ends the retries as a panic there does, with an
// error that wraps ErrGoexit and the failed attempt's error (a stream
// node's stops the stream, whose goroutine it ended); in a custom join it
// fails the join's node with an error wrapping ErrGoexit. In Callback.Result,
// DefaultValue or an end hook (OnNodeEnd, OnNodeSkip, OnNodeTimeout,
// OnRunEnd) the node's result, or the run's, stands, as for a panic there,
// the end hooks after it (the node's, or the run's OnRunEnd) still run,
// and BeginWork returns a *CallbackPanicError wrapping ErrGoexit. So it
// does for one in OnNodePending, after which the node stays pending and
// the OnNodePending hooks of the later sets still run.
// A Goexit in user code that an executor running tasks on its caller (an
// [ExecutorFunc] that calls the task) runs on the goroutine that called
// BeginWork or Start ends that goroutine: the run goes on and ends, but
// that BeginWork call does not return. OnRunStart runs on that goroutine
// too, before the run starts, and a Goexit in it ends the goroutine
// before the run has started: no node runs and none ends, the later hook
// sets' OnRunStart and every OnRunEnd are not called (so a span that an
// earlier set's OnRunStart began stays open), the graph's wrappers read
// as not ended, and running them again returns [ErrReused]; for a
// [SubPlan]'s run, the Goexit is its worker's, which fails its node. The
// Async holds nothing of that run: Close does not wait for it. The library itself never panics on bad input: it
// returns errors (the Pool's option constructors excepted, which panic on
// values that can never work, such as PoolSize(0) or
// PoolWhenFull(FullPolicy(9)), WithRunHooks, which panics on a nil ctx
// as context.WithValue does, and the chaining methods of a nil
// *WorkerWrapper, which dereference it).
//
// # Errors
//
// Before running anything, BeginWork rejects a bad graph with a
// [*GraphError] naming the nodes involved: no start nodes, a nil wrapper or
// worker, two nodes with one id, a cycle (with its path), a dependency not
// reachable from the start nodes (the node that has it is named, with the
// upstreams that were reached: an edge is kept only on its upstream, so
// the missing one cannot be), an edge declared both must and optional, a
// wrapper already used by another run, or bad flow rules (a join that
// cannot fit, a negative timeout, a retry policy or [Hedged] worker that
// can never work). Worker failures are node
// results, not BeginWork errors.
//
// # Executors and streams
//
// The package also has executors and streams of use without a graph.
// Serial, Keyed and RunBatches run their tasks on any [Executor], the
// one-method seam for a goroutine pool (a Pool, GoExecutor, or another
// library's pool); a Stream runs on the goroutine that calls its Run.
//
//   - [Pool]: a bounded pool with a bounded queue; when it is full, the
//     submitter runs the task itself ([CallerRuns], the default), waits
//     ([Block]) or gets [ErrPoolFull] ([Reject]). Close runs what is
//     queued.
//   - [Serial]: tasks one at a time in submission order on a shared
//     executor, delayed ones ([Serial.SubmitAfter]) with a cancel.
//     Shutdown runs the accepted tasks; Close drops those not started.
//   - [Keyed]: the tasks of each key (a user, an account) in order, the
//     keys in parallel on one executor; Shutdown and Close as on a Serial.
//   - [Stream]: an append-only chain whose nodes each receive their
//     predecessor's result, with the failure policies of graph nodes
//     ([PolicySuspend] and [Stream.Resume] among them), in memory only.
//   - [RunBatches]: a page loop that fetches on the caller and processes
//     each item on an executor, whose backpressure slows the fetching.
//
// A graph that must outlive its process, or be shared by several
// machines, runs as a River job with the durable module
// (github.com/asynctool-go/asynctool/durable).
package asynctool
