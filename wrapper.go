package asynctool

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
)

// Wrapper is a node of a graph: any [*WorkerWrapper], whatever its
// parameter and result types. It lets nodes of different types depend on
// each other and be passed together to [Async.BeginWork]. Only
// *WorkerWrapper implements it.
type Wrapper interface {
	// ID returns the node's id.
	ID() string
	// State returns the node's current state in its run (StateInit before
	// the run starts).
	State() State
	core() *nodeCore
}

// WorkerWrapper is a node: a [Worker] with its parameter, an optional
// [Callback], a default value, and its edges to other nodes. Build it with
// [NewWrapper] and the chaining methods, then pass the start nodes to
// [Async.BeginWork].
//
// A WorkerWrapper holds the state of one run: it can be part of one run
// only (a second BeginWork returns [ErrReused]; of two BeginWork, Start or
// Compile calls that take the same nodes at the same time, one gets them
// and the other returns ErrReused, and a call refused for another reason,
// such as a bad graph, leaves them free). Building (the chaining
// methods) is not safe for concurrent use and must finish before the run
// starts, or before [Compile] for a plan's template: a chaining method
// called later changes nothing (the run, or every run of the plan, keeps
// the node as it was), and is reported only by a later BeginWork, Compile
// or Describe of a graph that includes the node, with [ErrReused]. ID,
// State and Result are safe to call at any time from any goroutine, on a
// nil w too; the chaining methods need a wrapper made by NewWrapper, and
// panic with a nil pointer dereference on a nil one. A WorkerWrapper must
// not be copied.
type WorkerWrapper[P, R any] struct {
	nodeCore
	worker Worker[P, R]
	param  P
	cb     Callback[P, R]
	def    R
	res    slot[R] // the result of its single-use run, if any
}

// NewWrapper returns a node with the given id that runs worker with param.
// Ids must be unique among the nodes reachable from a run's start nodes;
// the empty id is allowed for any number of anonymous nodes, which
// [ResultOf] cannot look up. A nil worker is reported by BeginWork
// ([ErrNilWorker]), and so is a nil WorkerFunc or a nil pointer to one of
// this package's workers ([SubPlan], [SubGraph], [ForEach]).
//
// A nil pointer of a worker type of your own is not refused: it is a
// worker, as Go sees it. If its Action has a pointer receiver, the call
// is valid, and a worker without state may well be a nil *T. If Action has
// a value receiver, the call panics (Go's "value method T.Action called
// using nil *T pointer"), which fails the node with a [*PanicError], as
// any panic in a worker does, and its Reason says the worker panicked.
func NewWrapper[P, R any](id string, worker Worker[P, R], param P) *WorkerWrapper[P, R] {
	w := &WorkerWrapper[P, R]{worker: worker, param: param, cb: NopCallback[P, R]{}}
	w.nodeCore.id = id
	w.nodeCore.impl = w
	w.nodeCore.out = w.outBuf[:0]
	return w
}

// Callback sets the node's callback (nil, or a nil [ResultFunc], restores
// the no-op default) and returns w.
func (w *WorkerWrapper[P, R]) Callback(cb Callback[P, R]) *WorkerWrapper[P, R] {
	if !w.checkBuildable("Callback") {
		return w
	}
	if f, ok := cb.(ResultFunc[P, R]); cb == nil || ok && f == nil {
		cb = NopCallback[P, R]{}
	}
	w.cb = cb
	return w
}

// Default sets the value the node reports when it does not succeed and
// returns w. It takes precedence over the worker's [Defaulter]. It is the
// node's result once it failed, was skipped or timed out; a node that
// reads this one before it ended (an optional dependency) gets the zero
// value with ResultDefault, not this value.
func (w *WorkerWrapper[P, R]) Default(v R) *WorkerWrapper[P, R] {
	if !w.checkBuildable("Default") {
		return w
	}
	w.def, w.hasDef = v, true
	return w
}

// ShortCircuit sets whether the node may be skipped when no successor
// needs its result any more (the default is true) and returns w. Turn it
// off for nodes whose side effects must happen whenever their
// dependencies allow, and for an optional branch that should run even
// when its successor does not wait for it: one made ready by the same
// upstream that completes its successor's must dependencies is skipped
// in the same step, before it can start. Start nodes may be skipped too:
// an optional start node whose successor ran on its must dependencies
// before the start node got a goroutine is skipped.
func (w *WorkerWrapper[P, R]) ShortCircuit(enabled bool) *WorkerWrapper[P, R] {
	if !w.checkBuildable("ShortCircuit") {
		return w
	}
	w.noShortCircuit = !enabled
	return w
}

// Depend declares up as an upstream of w and returns w. If must is true,
// w runs only after up succeeded and fails as soon as up fails; otherwise
// up is optional (see the package documentation for the join rules).
func (w *WorkerWrapper[P, R]) Depend(up Wrapper, must bool) *WorkerWrapper[P, R] {
	link(coreOf(up), &w.nodeCore, must, "Depend")
	return w
}

// Next declares down as a successor of w and returns w: down depends on w,
// as a must dependency if must is true. a.Next(b, m) is the same edge as
// b.Depend(a, m).
func (w *WorkerWrapper[P, R]) Next(down Wrapper, must bool) *WorkerWrapper[P, R] {
	link(&w.nodeCore, coreOf(down), must, "Next")
	return w
}

// Result returns the node's result. Before the node ends its State is
// ResultDefault and Value is the zero value. It is safe to call
// concurrently with the run; inside a worker, read other nodes through
// [ResultOf] instead. For a nil w it returns a zero WorkResult.
//
// A node compiled into a [Plan] has no result of its own: each run of
// the plan has one, read with [WorkerWrapper.ResultIn] or
// [WorkerWrapper.ValueIn], or by a worker of the run with
// [WorkerWrapper.ResultFrom]. Its Result has State ResultDefault, the zero
// value and an Err wrapping [ErrReused] that says so, rather than pass
// for a node that has not ended yet.
func (w *WorkerWrapper[P, R]) Result() WorkResult[R] {
	if w == nil {
		return WorkResult[R]{}
	}
	if o := w.owner.Load(); o != nil && o.compiled.Load() {
		return WorkResult[R]{Err: fmt.Errorf("%w: node %q belongs to a compiled Plan: read a run's result with ResultIn or ValueIn, or from a worker with ResultFrom", ErrReused, w.id)}
	}
	return w.resultIn(w.singleRun()) // a single-use run is bound like a plan's
}

// ResultIn returns the node's result in r, a run of the [Plan] the node was
// compiled into, as Result does for single-use runs. r may also be the
// run of a single-use node, the Run that [Async.Start] returned, where
// ResultIn reads what Result does (ExampleWorkerWrapper_ValueIn_singleUse).
// It returns a zero WorkResult if r is not a run the node is part of, or
// was released, before the node has ended, and for a nil w.
func (w *WorkerWrapper[P, R]) ResultIn(r *Run) WorkResult[R] {
	if w == nil {
		return WorkResult[R]{}
	}
	s := r.live()
	if s == nil {
		return WorkResult[R]{}
	}
	defer s.unref()
	return w.resultIn(s)
}

// ValueIn returns the node's value and error in r, a run of the [Plan] the
// node was compiled into (or, as for ResultIn, the run of a single-use
// node), once the node has ended: its value (or default) and its
// WorkResult's Err. For a run the node is not part of, a released one,
// or a nil w, it returns an error wrapping [ErrUnknownID], and for a node
// that has not ended yet, an error wrapping [ErrNotEnded]. Its method
// value fits [SubPlan]'s Output: Output: card.ValueIn.
func (w *WorkerWrapper[P, R]) ValueIn(r *Run) (R, error) {
	var zero R
	if w == nil {
		return zero, fmt.Errorf("%w: node <nil> is not part of this run", ErrUnknownID)
	}
	s := r.live()
	if s == nil {
		return zero, fmt.Errorf("%w: node %q: no run, or a released one", ErrUnknownID, w.id)
	}
	defer s.unref()
	if s.p != w.owner.Load() {
		return zero, fmt.Errorf("%w: node %q is not part of this run", ErrUnknownID, w.id)
	}
	if !terminal(s.nodes[w.idx].st()) {
		return zero, fmt.Errorf("%w: node %q", ErrNotEnded, w.id)
	}
	res := w.resultIn(s)
	return res.Value, res.Err
}

// resultIn is ResultIn for a run's state (nil: none).
func (w *WorkerWrapper[P, R]) resultIn(r *runState) WorkResult[R] {
	if r == nil || r.p == nil || r.p != w.owner.Load() {
		return WorkResult[R]{}
	}
	if st := r.nodes[w.idx].st(); terminal(st) {
		return w.slotIn(r).get(st)
	}
	return WorkResult[R]{}
}

// ResultFrom returns the node's result in the run that all belongs to:
// what [ResultOf] returns for the node's id, but typed by the compiler,
// with no id to mistype and no [ErrResultType] possible. A worker reads
// an upstream it holds in a variable:
//
//	u, err := user.ResultFrom(all)
//
// A node that has not ended yet reads as a zero WorkResult (State
// ResultDefault). When it is an upstream of the reader (an optional one,
// or one that the reader's join did not wait for), the error is nil:
// reading it before it ends is the reader's choice. Otherwise the error
// wraps [ErrNotEnded] and says that the reader does not depend on the
// node: that is what a worker reads from a node of its run that it forgot
// to Depend on. Declare every node whose result the worker needs with
// Depend(up, true), which makes the result final before the worker
// starts. A node the reader does not depend on reads as it ended once it
// has (a transitive must upstream always has), so a worker that reads one
// on purpose, if it has ended, checks the error with errors.Is(err,
// ErrNotEnded). It returns an error wrapping [ErrUnknownID] when the node
// is not part of that run (for the zero Wrappers, or a sub-run's, for
// example).
func (w *WorkerWrapper[P, R]) ResultFrom(all Wrappers) (WorkResult[R], error) {
	if w == nil || all.r == nil || all.r.p == nil || all.r.p != w.owner.Load() {
		id := "<nil>"
		if w != nil {
			id = w.id
		}
		if w != nil && all.r != nil {
			owner := w.owner.Load()
			return WorkResult[R]{}, notInRun(all, fmt.Sprintf("node %q is not part of this run", id), func(p *plan) bool { return p == owner })
		}
		return WorkResult[R]{}, fmt.Errorf("%w: node %q is not part of this run", ErrUnknownID, id)
	}
	if st := all.r.nodes[w.idx].st(); terminal(st) {
		return w.slotIn(all.r).get(st), nil
	}
	return WorkResult[R]{}, all.notEnded(w.idx)
}

// notEnded is the error of a read, through all, of node i of all's run,
// which has not ended: nil if i is an upstream of the node that all was
// given to, which may read it before it ends, and otherwise an error that
// says the reader does not depend on it, the mark of a forgotten Depend.
func (all Wrappers) notEnded(i int32) error {
	p := all.r.p
	if i == all.self {
		return fmt.Errorf("%w: node %s read its own result, which is not final while it runs", ErrNotEnded, errName(p.nodeID(i), int(i)))
	}
	for _, v := range p.in(all.self) {
		if up, _ := upstream(v); up == i {
			return nil
		}
	}
	return fmt.Errorf("%w: node %s, read by node %s, which does not depend on it: declare the dependency with Depend, so that its result is final (a must one) or may be read (an optional one) when the reader runs",
		ErrNotEnded, errName(p.nodeID(i), int(i)), errName(p.nodeID(all.self), int(all.self)))
}

// notInRun is the error of a read, through all, of a node that all's run
// does not have (what names it). When a run outside it has the node (has
// says which), all is a sub-run's view, given to a ForEach item's worker
// or to a node of a SubGraph or SubPlan, and the error says so, and how to
// reach the outer node's result.
func notInRun(all Wrappers, what string, has func(p *plan) bool) error {
	for o := all.r.outer; o != nil; o = o.up {
		if has(o.p) {
			return fmt.Errorf("%w: %s: it belongs to a run outside this sub-run (%s), and a ForEach item or a SubGraph's or SubPlan's node reads only its own run: read it in Items, Build or Input, and pass it on in the param or the context", ErrUnknownID, what, strings.Join(all.Path(), "/"))
		}
	}
	return fmt.Errorf("%w: %s", ErrUnknownID, what)
}

// ID returns the node's id ("" for a nil w).
func (w *WorkerWrapper[P, R]) ID() string {
	if w == nil {
		return ""
	}
	return w.id
}

// State returns the node's current state.
func (w *WorkerWrapper[P, R]) State() State {
	if w == nil {
		return StateInit
	}
	r := w.singleRun()
	if r == nil {
		return StateInit
	}
	return publicState(r.nodes[w.idx].st())
}

func (w *WorkerWrapper[P, R]) core() *nodeCore {
	if w == nil {
		return nil
	}
	return &w.nodeCore
}

// String names the node for logs and errors: node "id" (node "" for a
// node without an id, and node <nil> for a nil w, as [WorkerWrapper.ValueIn]
// names it).
func (w *WorkerWrapper[P, R]) String() string {
	if w == nil {
		return "node <nil>"
	}
	return fmt.Sprintf("node %q", w.id)
}

// nodeCore is the untyped half of a wrapper: identity, declared edges and
// the binding to the run it belongs to.
//
// Edges are kept once, out of the upstream node, which is the direction
// compile walks from the start nodes; the downstream node only counts
// them (inEdges), which is enough to tell that one of its upstreams was not
// reached. A wrapper is the bulk of what building a graph allocates, so
// it is kept small.
type nodeCore struct {
	id     string
	out    []edge     // edges out of this node, as declared
	outBuf [2]edge    // the first two of out, without an allocation
	extra  *nodeExtra // what few nodes have; nil if none of it
	// owner is the plan that claimed the node: while it is being
	// compiled, and for good once compiled. nil while the node is free.
	// A single-use run is owner's single.
	owner atomic.Pointer[plan]
	impl  nodeImpl
	// idx is the node's position while it is being compiled, then its
	// index in plan.nodes.
	idx     int32
	inEdges int32 // edges declared into this node, repeats included
	// noShortCircuit turns the short-circuit rule off for this node.
	noShortCircuit bool
	hasDef         bool // the typed wrapper has a default value
}

// singleRun returns the node's single-use run, nil if it has none. The
// run is stored after the node's idx (see Run.start).
func (c *nodeCore) singleRun() *runState {
	if p := c.owner.Load(); p != nil {
		return p.single.Load()
	}
	return nil
}

// nodeExtra is the part of a node that few nodes have, kept out of
// nodeCore so that a wrapper stays in a smaller size class.
type nodeExtra struct {
	flow     flowSpec
	hasFlow  bool        // flow holds flow rules
	buildErr *GraphError // first misuse seen while building, reported by BeginWork
}

// spec returns the node's flow rules, nil if it has none.
func (c *nodeCore) spec() *flowSpec {
	if c.extra == nil || !c.extra.hasFlow {
		return nil
	}
	return &c.extra.flow
}

// buildErr returns the first misuse seen while building the node.
func (c *nodeCore) buildErr() *GraphError {
	if c.extra == nil {
		return nil
	}
	return c.extra.buildErr
}

// misused records err as the node's build error, unless it has one.
func (c *nodeCore) misused(err *GraphError) {
	if c.extra == nil {
		c.extra = &nodeExtra{}
	}
	if c.extra.buildErr == nil {
		c.extra.buildErr = err
	}
}

// checkBuildable reports whether the node may still be changed. A node
// that is part of a run or a plan may not: the change is refused and
// reported by the next BeginWork or Compile that includes the node.
func (c *nodeCore) checkBuildable(method string) bool {
	if c.owner.Load() == nil {
		return true
	}
	if c.buildErr() == nil {
		c.misused(graphErr(ErrReused, []string{c.id}, "%s called on node %q after it was used in a run", method, c.id))
	}
	return false
}

// nodeImpl is the typed half of a wrapper, called by the engine.
type nodeImpl interface {
	hasWorker() bool
	// staticSub is the static shape of the sub-run the worker starts,
	// if it is a SubPlan or a ForEach, for reports; else nil.
	staticSub() *Report
	// workerProblem is what makes the worker unusable when it can tell
	// (see checkedWorker): the words that follow the node's id, and a
	// sentinel.
	workerProblem() (string, error)
	newSlot() any
	// ownSlot returns the slot inside the wrapper, for its single-use run.
	ownSlot() any
	// execute runs Begin and Action for node i, which the caller has moved
	// to sWorking, and ends the node unless the deadline ended it first.
	// The Action of a node without a callback or flow rules is called
	// without a recover: a panic unwinds to Run.drive, which ends the node
	// (see worklist.action).
	execute(ctx context.Context, r *runState, i int32, wl *worklist)
	// setFailure writes a failed result (default value) into slot, for
	// node i, which the caller holds in sEnding; sweep says the caller is
	// the run's sweep (see runState.sweepCall).
	setFailure(r *runState, i int32, slot any, st ResultState, err error, sweep bool)
	// fireResult calls the Result callback with the node's final result.
	fireResult(slot any, st int32) *PanicError
	// resultErr returns the Err of the result in slot.
	resultErr(slot any, st int32) error
	// resultMeta returns the State and Err of the result in slot, without
	// reading its value.
	resultMeta(slot any, st int32) (ResultState, error)
	// resultType names R, for error messages.
	resultType() reflect.Type
	// clearSlot drops the result in slot, so a recycled run retains nothing.
	clearSlot(slot any)
	// hasCallback is false when the callback is the no-op default.
	hasCallback() bool
	// resultAny returns the result in slot, boxed.
	resultAny(slot any, st int32) (any, ResultState, error)
	// checkValue reports whether v can be the node's value.
	checkValue(v any) error
	// setSuccess writes a successful result with value v (checked).
	setSuccess(slot any, v any)
}

func coreOf(w Wrapper) *nodeCore {
	if w == nil {
		return nil
	}
	return w.core()
}

func (w *WorkerWrapper[P, R]) hasWorker() bool { return !noWorker(w.worker) }

// noWorker reports whether w is no worker at all: nil, a nil WorkerFunc,
// or a nil pointer to one of this package's workers (see isNilWorker).
func noWorker[P, R any](w Worker[P, R]) bool {
	if w == nil {
		return true
	}
	if f, ok := w.(WorkerFunc[P, R]); ok && f == nil {
		return true
	}
	return isNilWorker(w)
}

// checkedWorker is a worker of this package that can tell, before it
// runs, that it never can ([Hedged]'s).
type checkedWorker interface {
	workerProblem() (string, error)
}

func (w *WorkerWrapper[P, R]) workerProblem() (string, error) {
	if c, ok := w.worker.(checkedWorker); ok {
		return c.workerProblem()
	}
	return "", nil
}

func (w *WorkerWrapper[P, R]) staticSub() *Report {
	if s, ok := w.worker.(staticWorker); ok {
		return s.staticSub()
	}
	return nil
}

func (w *WorkerWrapper[P, R]) newSlot() any { return new(slot[R]) }

func (w *WorkerWrapper[P, R]) ownSlot() any { return &w.res }

// slotIn returns the node's result slot in r, a run of the plan it was
// compiled into: Run.slot, typed, without an interface call for a
// single-use run.
func (w *WorkerWrapper[P, R]) slotIn(r *runState) *slot[R] {
	if r.pooled {
		return r.slots[w.idx].(*slot[R])
	}
	return &w.res
}

// defaultValue returns the default value of node i, which the caller
// holds in sEnding, its failure's State and Err written (see
// failResult). A panic in the worker's DefaultValue is recovered: the
// zero value is used and the panic is reported as a *CallbackPanicError
// of method "DefaultValue". Called by the sweep (sweep), the worker's
// DefaultValue is marked as sweepCall: user code that the sweep runs,
// the engine's own default is not.
func (w *WorkerWrapper[P, R]) defaultValue(r *runState, i int32, sweep bool) (v R) {
	if w.hasDef {
		return w.def
	}
	d, ok := w.worker.(Defaulter[R])
	if !ok {
		return v
	}
	r.nodes[i].failMarks.Or(failWritten) // see failedMust and waitSwept
	if sweep {
		r.sweepCall.Store(true) // cleared by sweepFrom if it ends the goroutine
	}
	defer func() {
		if sweep {
			r.sweepCall.Store(false)
		}
		if p := recover(); p != nil {
			var zero R
			v = zero
			r.callbackPanic(i, "DefaultValue", newPanicError(p))
		}
	}()
	return d.DefaultValue()
}

func (w *WorkerWrapper[P, R]) execute(ctx context.Context, r *runState, i int32, wl *worklist) {
	pn := &r.p.nodes[i]
	var v R
	var err error
	if pn.hasCallback || pn.flow != nil {
		var beginPanic bool
		v, err, beginPanic = w.call(ctx, r, i, pn.hasCallback)
		if beginPanic {
			r.callbackPanic(i, "Begin", err.(*PanicError))
		}
	} else {
		// Nothing to tell apart and no failure policy: a panic in Action
		// unwinds to the loop, whose recover ends the node with it as
		// call would have (see worklist.action), without a deferred call
		// per node.
		wl.action = true
		v, err = w.worker.Action(ctx, w.param, Wrappers{r, i})
		wl.action = false
	}
	if err != nil {
		r.attemptFailed(i, err, wl)
		return
	}
	if r.mayEndLate(i) && r.returnedLate(i, wl) {
		return
	}
	wl.fresh = true
	w.slotIn(r).val = v
	if r.nodes[i].move(sWorking, sFinish, 0) {
		r.finished(i, wl)
	}
	// Or the deadline ended the node first: the late value is not read.
}

// call runs the callback's Begin (if the node has a callback) and then
// the worker's Action, under one recover. A panic becomes err, a
// *PanicError; beginPanic says whether it came from Begin, in which case
// Action did not run. With a RetryPolicy.AttemptTimeout, Action gets a
// context bounded by it, and an attempt that returns after the bound
// passed fails with its *AttemptTimeoutError (see callBounded).
func (w *WorkerWrapper[P, R]) call(ctx context.Context, r *runState, i int32, hasCallback bool) (v R, err error, beginPanic bool) {
	inBegin := hasCallback
	defer func() {
		if p := recover(); p != nil {
			err, beginPanic = newPanicError(p), inBegin
		} else if inBegin {
			// Begin called runtime.Goexit, which ends the node's attempt
			// (see salvage): recorded, as a panic in Begin is, so that
			// its reason names Begin, not the worker.
			r.callbackPanic(i, "Begin", &PanicError{Value: ErrGoexit})
		}
	}()
	if hasCallback {
		w.cb.Begin()
		inBegin = false
	}
	if f := r.p.nodes[i].flow; f != nil && f.retry != nil && f.retry.AttemptTimeout > 0 {
		bound := &AttemptTimeoutError{ID: w.id, Attempt: int(r.nodes[i].attempts.Load()), Timeout: f.retry.AttemptTimeout}
		v, err = callBounded(ctx, bound, func(ctx context.Context) (R, error) {
			return w.worker.Action(ctx, w.param, Wrappers{r, i})
		})
		return v, err, false
	}
	v, err = w.worker.Action(ctx, w.param, Wrappers{r, i})
	return v, err, false
}

func (w *WorkerWrapper[P, R]) hasCallback() bool {
	_, nop := w.cb.(NopCallback[P, R])
	return !nop
}

func (w *WorkerWrapper[P, R]) setFailure(r *runState, i int32, sl any, st ResultState, err error, sweep bool) {
	w.failResult(r, i, sl.(*slot[R]), st, err, sweep)
}

// failResult writes a failed result with the node's default value. The
// caller holds node i in sEnding. If the worker's DefaultValue ends the
// goroutine with runtime.Goexit, the node is still ended (with the zero
// value) and its consequences handed to a new goroutine, and no worker's
// DefaultValue is called again in this run: the nodes that fail later
// get their Default, which is no user code, or else the zero value.
func (w *WorkerWrapper[P, R]) failResult(r *runState, i int32, s *slot[R], st ResultState, err error, sweep bool) {
	if r.noDefault.Load() {
		var v R
		if w.hasDef {
			v = w.def
		}
		s.res = WorkResult[R]{Value: v, State: st, Err: err}
		return
	}
	normal := false
	defer func() {
		if !normal {
			r.noDefault.Store(true)
			r.callbackPanic(i, "DefaultValue", &PanicError{Value: ErrGoexit})
			var zero R
			s.res.Value = zero
			r.rescueEnding(i)
		}
	}()
	// State and Err first, field by field: once the worker's DefaultValue
	// is called, the nodes after i may read them (see failedMust) while
	// its value is written.
	s.res.State, s.res.Err = st, err
	s.res.Value = w.defaultValue(r, i, sweep)
	normal = true
}

func (w *WorkerWrapper[P, R]) fireResult(sl any, st int32) (p *PanicError) {
	defer func() {
		if v := recover(); v != nil {
			p = newPanicError(v)
		}
	}()
	w.cb.Result(st == sFinish, w.param, sl.(*slot[R]).get(st))
	return nil
}

func (w *WorkerWrapper[P, R]) resultErr(sl any, st int32) error { return sl.(*slot[R]).get(st).Err }

func (w *WorkerWrapper[P, R]) resultMeta(sl any, st int32) (ResultState, error) {
	if st == sFinish {
		return ResultSuccess, nil
	}
	// The fields alone, not the value, which the node's DefaultValue may
	// still be computing (see failedMust).
	s := sl.(*slot[R])
	return s.res.State, s.res.Err
}

func (w *WorkerWrapper[P, R]) resultType() reflect.Type { return reflect.TypeFor[R]() }

func (w *WorkerWrapper[P, R]) clearSlot(sl any) { *sl.(*slot[R]) = slot[R]{} }

// nilable reports whether nil converts to T.
func nilable[T any]() bool {
	switch reflect.TypeFor[T]().Kind() {
	case reflect.Interface, reflect.Pointer, reflect.UnsafePointer, reflect.Slice, reflect.Map, reflect.Chan, reflect.Func:
		return true
	}
	return false
}

func (w *WorkerWrapper[P, R]) checkValue(v any) error {
	if _, ok := v.(R); ok {
		return nil
	}
	if v == nil && nilable[R]() {
		return nil
	}
	return fmt.Errorf("got %T, want %v", v, reflect.TypeFor[R]())
}

func (w *WorkerWrapper[P, R]) setSuccess(sl any, v any) {
	sl.(*slot[R]).val, _ = v.(R)
}

func (w *WorkerWrapper[P, R]) resultAny(sl any, st int32) (any, ResultState, error) {
	res := sl.(*slot[R]).get(st)
	return res.Value, res.State, res.Err
}

// Wrappers is a run's view of all its nodes, passed to every worker so it
// can read the results of other nodes by id with [ResultOf]. The zero
// value is an empty view (useful when calling a worker directly in a
// test). A Wrappers is valid only during and after the run it came from,
// until that run of a [Plan] is released ([Run.Release]): the run's
// state then serves a later run, which a Wrappers kept past the release
// would show.
type Wrappers struct {
	r *runState
	// self is the index of the node whose worker was given this view
	// (see SubPlan).
	self int32
}

// Path returns the ids of the nodes from the outermost run down to the
// node whose worker was given this view: its id alone for a node of a
// run that BeginWork, Start, RunPlan or StartPlan started, and the path
// of the node whose worker started the run ([SubGraph], [SubPlan],
// [ForEach]) followed by its id for a node of a sub-run. A node without
// an id is named, as [Run.Resume] and the reports name it, "#" and its
// index in its run ("#3"). Ids are unique
// within one run only, so the nodes of two sub-runs may share an id, but
// not a path, unless both sub-runs are one node's: the concurrent calls
// of a [Hedged] one, or a SubGraph node whose worker runs again (a
// retry), which builds its nodes at the same paths. Nor is an id that is
// "#" and a number told apart from the name of the anonymous node with
// that index in the same run: node "#0" and an anonymous node 0 of one
// run both have the path ["#0"], and so do the nodes of their sub-runs
// that share an id. The zero Wrappers has a nil path.
func (all Wrappers) Path() []string {
	if all.r == nil {
		return nil
	}
	depth := 1
	for o := all.r.outer; o != nil; o = o.up {
		depth++
	}
	path := make([]string, depth)
	path[depth-1] = plainName(all.r.p.nodeID(all.self), int(all.self))
	k := depth - 2
	for o := all.r.outer; o != nil; o = o.up {
		path[k] = plainName(o.p.nodeID(o.self), int(o.self))
		k--
	}
	return path
}

// State returns the current state of the node with the given id, and
// false if the run has no such node. A node without an id cannot be
// found (neither the empty id nor "#" and its index, which [Run.Resume]
// and the reports use, names it here).
func (all Wrappers) State(id string) (State, bool) {
	if all.r == nil {
		return StateInit, false
	}
	i, ok := all.r.p.lookup(id)
	if !ok {
		return StateInit, false
	}
	return publicState(all.r.nodes[i].st()), true
}

// ResultOf returns the result of the node with the given id in the run
// that all belongs to. For a node that has not ended yet it returns a
// zero WorkResult (State ResultDefault), and a nil error if the node is
// an upstream of the reader, an error wrapping [ErrNotEnded] that says
// the reader does not depend on it otherwise, as
// [WorkerWrapper.ResultFrom] does. It returns an error wrapping
// [ErrUnknownID] if the run has no such node, or [ErrResultType] if the
// node's result type is not R. A node without an id cannot be read by id
// (neither the empty id nor "#" and its index, which [Run.Resume] and the
// reports use, names it here): read it through its wrapper with
// [WorkerWrapper.ResultFrom].
//
// A node reads its must dependencies' results safely: they are final
// before the node starts.
func ResultOf[R any](all Wrappers, id string) (WorkResult[R], error) {
	if all.r == nil {
		return WorkResult[R]{}, fmt.Errorf("%w: %q (empty view)", ErrUnknownID, id)
	}
	i, ok := all.r.p.lookup(id)
	if !ok {
		return WorkResult[R]{}, notInRun(all, strconv.Quote(id), func(p *plan) bool {
			_, ok := p.lookup(id)
			return ok
		})
	}
	n := &all.r.nodes[i]
	s, ok := all.r.slot(i).(*slot[R])
	if !ok {
		return WorkResult[R]{}, fmt.Errorf("%w: node %q produces %v, not %v",
			ErrResultType, id, all.r.p.nodes[i].core.impl.resultType(), reflect.TypeFor[R]())
	}
	if st := n.st(); terminal(st) {
		return s.get(st), nil
	}
	return WorkResult[R]{}, all.notEnded(i)
}
