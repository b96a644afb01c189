package asynctool

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

// Errors returned before anything runs (by [Async.BeginWork], the other
// ways to start a run, [Compile] and [Describe]), errors of the executors
// and streams, and sentinels found in node results. Validation errors are
// [*GraphError] values that wrap one of these, and most others are
// returned wrapped with details, so match them with [errors.Is].
var (
	// ErrNoStart means BeginWork, Start, Compile or Describe was called
	// without start nodes.
	ErrNoStart = errors.New("asynctool: no start nodes")
	// ErrNilWrapper means a nil Wrapper was passed as a start node or to
	// Depend or Next.
	ErrNilWrapper = errors.New("asynctool: nil wrapper")
	// ErrNilWorker means a node was built with a nil Worker, or with one
	// of this package's workers that lacks what it runs: a [SubPlan]
	// without Plan or Output, a [SubGraph] without Build, a [ForEach]
	// without Items or Worker, a [Hedged] worker of a nil one.
	ErrNilWorker = errors.New("asynctool: nil worker")
	// ErrDuplicateID means two different wrappers reachable from the start
	// nodes have the same id. It is also wrapped by the error of a
	// [ForEach] node whose ID gave two items the same name.
	ErrDuplicateID = errors.New("asynctool: duplicate node id")
	// ErrCycle means the graph reachable from the start nodes has a cycle.
	ErrCycle = errors.New("asynctool: dependency cycle")
	// ErrUnreachableDependency means a node depends on a node that is not
	// reachable from the start nodes, so it could never run.
	ErrUnreachableDependency = errors.New("asynctool: dependency not reachable from the start nodes")
	// ErrConflictingEdge means the same edge was declared twice, once as
	// must and once as optional.
	ErrConflictingEdge = errors.New("asynctool: edge declared both must and optional")
	// ErrReused means a wrapper was already part of an earlier run.
	// Wrappers hold the state of one run; build new ones for the next.
	ErrReused = errors.New("asynctool: wrapper already used in a run")
	// ErrNilContext means a nil context.Context was passed where one is
	// needed (BeginWork and the other ways to start a run, Run.Wait,
	// Stream.Run, RunBatches, Serial.Shutdown, Keyed.Shutdown). Nothing
	// was started or stopped; pass context.Background() instead.
	ErrNilContext = errors.New("asynctool: nil context (use context.Background())")
	// ErrNegativeTimeout means BeginWork, Start, RunPlan or StartPlan was
	// given a negative timeout.
	ErrNegativeTimeout = errors.New("asynctool: negative timeout")
	// ErrTooManyNodes means the graph has more nodes than a run can index
	// (2^27 - 1), or more edges than a plan can index (2^31 - 1).
	ErrTooManyNodes = errors.New("asynctool: too many nodes")
	// ErrClosed means the Async was closed.
	ErrClosed = errors.New("asynctool: async is closed")

	// ErrGoexit is the Err of a node whose worker called runtime.Goexit
	// (as t.FailNow does in a test) instead of returning, or whose
	// Callback.Begin or OnNodeStart or OnNodeRetry hook did, of a
	// [Stream] node whose function did, and of a [RunBatches] item whose
	// process did. A Goexit elsewhere in user code is reported wrapping
	// it: see the package documentation. Its text names no caller, since
	// it is not only a worker's: a node's Report reason says which call
	// it was.
	ErrGoexit = errors.New("asynctool: runtime.Goexit was called instead of returning")
	// ErrSkipped is the Err of a node that was short-circuited: it had not
	// started and none of its successors needed its result any more.
	//
	// The engine stores ErrSkipped and ErrNotTaken as they are, and tells
	// such a node by comparing its Err with ==. A worker that returns
	// either (an upstream's error passed on), or a Resume(FailWith(...))
	// of either, fails its node: the error is wrapped, with the same
	// message, so errors.Is still finds the sentinel.
	ErrSkipped = errors.New("asynctool: skipped: no successor needs this node")
	// ErrNotTaken is the Err of a node that was not taken: its join decided
	// not to run it ([When], [WhenResult], [DecideSkip]), or an upstream it
	// needed was not taken (see When for how each join treats one).
	ErrNotTaken = errors.New("asynctool: not taken: the branch was not chosen")
	// ErrRunEnded is wrapped by the error of a node stopped because the
	// run had ended: every node marked with [WorkerWrapper.EndsRun] had
	// ended before it. A node that a must upstream's failure had decided
	// before that has the upstream's [*UpstreamError] instead, and one
	// whose must upstream was not taken has ErrNotTaken (see EndsRun).
	ErrRunEnded = errors.New("asynctool: the run ended")
	// ErrUnknownID is returned, wrapped, by [ResultOf] for an id that is
	// not a node of the run, by [WorkerWrapper.ResultFrom] and
	// [WorkerWrapper.ValueIn] for a node that is not part of the run, and
	// by [Run.Resume] for an id that names no node of it.
	ErrUnknownID = errors.New("asynctool: no node with this id in the run")
	// ErrResultType is returned, wrapped, by [ResultOf] when the node's
	// result type is not the one asked for, and by [Run.Resume] and
	// [Stream.Resume] for a [SucceedWith] value of another type; it is
	// wrapped too by the error of a node whose [When] or [WhenResult]
	// condition could not be given its upstream's value.
	ErrResultType = errors.New("asynctool: node result has another type")

	// Flow rules.

	// ErrJoinUndecided is the Err of a node whose custom join still said
	// wait when every upstream had ended.
	ErrJoinUndecided = errors.New("asynctool: join undecided after every upstream ended")
	// ErrJoinFailed is the Err of a node whose custom join decided to fail.
	ErrJoinFailed = errors.New("asynctool: join decided to fail")
	// ErrNotPending is returned by Run.Resume for a node that is not
	// pending, and by [Stream.Resume] when the stream is not paused.
	ErrNotPending = errors.New("asynctool: node is not pending")
	// ErrNotEnded is returned by [WorkerWrapper.ValueIn] for a node that
	// has not ended, and by [WorkerWrapper.ResultFrom] and [ResultOf] for
	// a node that has not ended and that the reader does not depend on
	// (a forgotten Depend), or that is the reader itself.
	ErrNotEnded = errors.New("asynctool: node has not ended")
	// ErrBadJoin means a join strategy does not fit the node's upstreams.
	ErrBadJoin = errors.New("asynctool: invalid join")
	// ErrBadRetry means a retry policy with fewer than one attempt, or
	// with a negative AttemptTimeout, or a [Hedged] worker with fewer
	// than one attempt or a negative delay.
	ErrBadRetry = errors.New("asynctool: invalid retry policy")
	// ErrBadTimeout means a negative node timeout, or a negative [ForEach]
	// Budget.
	ErrBadTimeout = errors.New("asynctool: invalid node timeout")
	// ErrBadPolicy means a FailurePolicy that is none of the four.
	ErrBadPolicy = errors.New("asynctool: invalid failure policy")
	// ErrBadLimit means a negative [ForEach] Limit.
	ErrBadLimit = errors.New("asynctool: invalid limit")

	// Executors: Pool, Serial, Keyed and Stream.

	// ErrPoolClosed is returned by [Pool.Submit] after [Pool.Close].
	ErrPoolClosed = errors.New("asynctool: pool is closed")
	// ErrPoolFull is returned by [Pool.Submit] when every worker is busy,
	// the queue is full and the pool's policy is [Reject].
	ErrPoolFull = errors.New("asynctool: pool is full")
	// ErrNilTask is returned when a nil task is submitted to a Pool,
	// Serial, Keyed or GoExecutor, and is the error of a nil Stream node.
	ErrNilTask = errors.New("asynctool: nil task")
	// ErrSerialClosed is returned by [Serial] and [Keyed] submissions
	// after Close.
	ErrSerialClosed = errors.New("asynctool: serial executor is closed")
	// ErrNaNKey is returned by [Keyed.Submit] for a key that is not
	// equal to itself: a NaN, or a struct, array or interface holding
	// one. Such a key would never find its queue, so its tasks would run
	// concurrently and its queues would never be removed.
	ErrNaNKey = errors.New("asynctool: keyed: key is not equal to itself (it holds a NaN)")
	// ErrUnhashableKey is returned by [Keyed.Submit] for a key that holds
	// a slice, map or func in an interface (a Keyed[any], or a key type
	// with an interface field), which Go cannot hash or compare: a map
	// with such a key panics.
	ErrUnhashableKey = errors.New("asynctool: keyed: key cannot be hashed (it holds a slice, map or func)")
	// ErrStreamClosed is the error of a [Stream] node appended after
	// [Stream.Close].
	ErrStreamClosed = errors.New("asynctool: stream is closed")
	// ErrStreamStopped wraps the error of every [Stream] node that did
	// not run because an earlier node failed or the stream's context
	// ended; the cause is wrapped too.
	ErrStreamStopped = errors.New("asynctool: stream stopped before this node")
	// ErrStreamStarted is returned by a second call to [Stream.Run].
	ErrStreamStarted = errors.New("asynctool: stream already started")
)

// GraphError describes a graph that was rejected before anything ran.
// It wraps one of the package's sentinel errors ([ErrCycle],
// [ErrDuplicateID], ...) and names the nodes involved (for
// [ErrUnreachableDependency], the node whose upstream was not reached).
type GraphError struct {
	// Err is the sentinel that classifies the problem.
	Err error
	// Nodes are the ids involved, in order: for a cycle, the path from a
	// node back to itself.
	Nodes []string
	// Detail is a human-readable description.
	Detail string
}

func (e *GraphError) Error() string {
	if e.Detail == "" {
		return e.Err.Error()
	}
	return e.Err.Error() + ": " + e.Detail
}

// Unwrap returns the sentinel.
func (e *GraphError) Unwrap() error { return e.Err }

func graphErr(sentinel error, nodes []string, format string, args ...any) *GraphError {
	return &GraphError{Err: sentinel, Nodes: nodes, Detail: fmt.Sprintf(format, args...)}
}

// cycleErr reports a cycle, path, as GraphError.Nodes holds it. The ids
// are quoted, as in the other errors: an anonymous node shows as "", and
// an id holding " -> " stays one step.
func cycleErr(path []string) *GraphError {
	q := make([]string, len(path))
	for k, id := range path {
		q[k] = strconv.Quote(id)
	}
	return &GraphError{Err: ErrCycle, Nodes: path, Detail: strings.Join(q, " -> ")}
}

// UpstreamError is the Err of a node that did not run because an upstream
// node it depended on failed. It wraps the upstream's error, so
// errors.Is(err, cause) sees through any chain of failed nodes. Its
// message names an upstream without an id as [EndError]'s does.
type UpstreamError struct {
	// ID is the id of the failed upstream node.
	ID string
	// Err is the upstream node's error.
	Err error
	// at is 1 + the upstream's index when it has no id (see EndError).
	at int
}

func (e *UpstreamError) Error() string {
	return fmt.Sprintf("asynctool: upstream %s failed: %v", nameAt(e.ID, e.at), e.Err)
}

// nameAt is the name in messages of the node with the given id, or, when
// the id is empty and at (1 + the node's index) is known, "#" and the
// index, as errName gives.
func nameAt(id string, at int) string {
	if id == "" && at > 0 {
		return errName("", at-1)
	}
	return strconv.Quote(id)
}

// Unwrap returns the upstream's error.
func (e *UpstreamError) Unwrap() error { return e.Err }

// PanicError is a panic recovered from user code (a worker or a callback):
// the value passed to panic and the stack of the goroutine that panicked.
type PanicError struct {
	// Value is the value passed to panic.
	Value any
	// Stack is the panicking goroutine's stack trace (runtime/debug.Stack).
	Stack []byte
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("asynctool: panic: %v", e.Value)
}

// Unwrap returns Value if it is an error, so errors.Is and errors.As see
// the panic's cause.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

func newPanicError(v any) *PanicError {
	return &PanicError{Value: v, Stack: debug.Stack()}
}

// CallbackPanicError reports a panic in a node's [Callback], in its
// [Defaulter]'s DefaultValue or in a [Hooks] function. [Async.BeginWork]
// returns it (joined with any other error) so that the panic is never
// lost. Only a panic in Begin changes the node's result: the node fails
// with the [*PanicError] and its Action is not called.
type CallbackPanicError struct {
	// ID is the node whose callback panicked; empty for a hook called for
	// the whole run.
	ID string
	// Index is the node's position in the run's topological order, as in
	// [NodeReport.Index] and [NodeEvent.Index], which tells anonymous
	// nodes apart: Error names a node whose ID is empty by "#" and its
	// index, as [Report.String] does. It is -1 for a hook called for the
	// whole run (OnRunStart, OnRunEnd) and for an internal panic outside
	// any node.
	Index int
	// Method is what panicked: "Begin", "Result", "DefaultValue", the
	// name of a Hooks field (such as "OnNodeEnd"), or "internal" for a
	// panic that escaped the library's own code, which is a bug.
	Method string
	// Panic is the recovered panic.
	Panic *PanicError
}

func (e *CallbackPanicError) Error() string {
	goexit := e.Panic.Value == ErrGoexit // see ErrGoexit: a Goexit, not a panic
	switch {
	case (e.Method == "OnRunStart" || e.Method == "OnRunEnd") && goexit: // called for the whole run, not a node
		return fmt.Sprintf("asynctool: hook %s of the run called runtime.Goexit", e.Method)
	case e.Method == "OnRunStart" || e.Method == "OnRunEnd":
		return fmt.Sprintf("asynctool: hook %s of the run panicked: %v", e.Method, e.Panic.Value)
	case e.ID == "" && e.Index < 0:
		return fmt.Sprintf("asynctool: %s panic of the run: %v", e.Method, e.Panic.Value)
	case goexit:
		return fmt.Sprintf("asynctool: callback %s of node %s called runtime.Goexit", e.Method, errName(e.ID, e.Index))
	}
	return fmt.Sprintf("asynctool: callback %s of node %s panicked: %v", e.Method, errName(e.ID, e.Index), e.Panic.Value)
}

// Unwrap returns the recovered panic.
func (e *CallbackPanicError) Unwrap() error { return e.Panic }

// BudgetError is the error of a [ForEach]'s items that its Budget
// stopped, or kept from starting, and the cause of their context. It
// wraps [context.DeadlineExceeded].
type BudgetError struct {
	// Budget is the ForEach's Budget.
	Budget time.Duration
}

func (e *BudgetError) Error() string {
	return fmt.Sprintf("asynctool: ForEach's Budget of %v ran out", e.Budget)
}

// Unwrap returns context.DeadlineExceeded.
func (e *BudgetError) Unwrap() error { return context.DeadlineExceeded }

// NodeTimeoutError is the Err of a node that exceeded its own Timeout. It
// unwraps to [context.DeadlineExceeded].
type NodeTimeoutError struct {
	// ID is the node's id, empty for a node without one (Error then
	// names it by "#" and its index, as Report.String does).
	ID string
	// Timeout is the node's [WorkerWrapper.Timeout].
	Timeout time.Duration
	at      int // 1 + the node's index when it has no id (see EndError)
}

func (e *NodeTimeoutError) Error() string {
	return fmt.Sprintf("asynctool: node %s exceeded its timeout of %v", nameAt(e.ID, e.at), e.Timeout)
}

// Unwrap returns context.DeadlineExceeded.
func (e *NodeTimeoutError) Unwrap() error { return context.DeadlineExceeded }

// AttemptTimeoutError is the error of one attempt of a node whose
// [RetryPolicy.AttemptTimeout] passed before its worker (or stream
// function) returned. It is an ordinary failure: the policy's Retryable
// sees it, and after the last attempt it is the node's Err. It unwraps
// to [context.DeadlineExceeded], and it is the context.Cause of the
// attempt's context once the bound has passed.
type AttemptTimeoutError struct {
	// ID is the node's id; empty for a stream node.
	ID string
	// Attempt counts the times the node's worker was started, this one
	// included, as [NodeEvent.Attempt], [NodeReport.Attempts] and
	// [StreamNode.Attempts] do (a [Rerun] does not start again from 1).
	Attempt int
	// Timeout is the policy's AttemptTimeout.
	Timeout time.Duration
}

func (e *AttemptTimeoutError) Error() string {
	if e.ID == "" {
		return fmt.Sprintf("asynctool: attempt %d exceeded its attempt timeout of %v", e.Attempt, e.Timeout)
	}
	return fmt.Sprintf("asynctool: attempt %d of node %q exceeded its attempt timeout of %v", e.Attempt, e.ID, e.Timeout)
}

// Unwrap returns context.DeadlineExceeded.
func (e *AttemptTimeoutError) Unwrap() error { return context.DeadlineExceeded }

// EndError is how a run ends when a node with [PolicyEnd] fails: it is
// BeginWork's error and the Err of every node that had not ended. Its
// message names the node by its id, quoted, or, for a node without one,
// by "#" and its index, as [Report.Err] does.
type EndError struct {
	// ID is the node whose failure ended the run.
	ID string
	// Err is that node's error.
	Err error
	// at is 1 + the index of the node, when it has no id (0 otherwise):
	// Error names it "#" and its index, as Report.Err does.
	at int
}

func (e *EndError) Error() string {
	return fmt.Sprintf("asynctool: run ended by node %s: %v", e.name(), e.Err)
}

// name is the node's name in messages (see errName).
func (e *EndError) name() string { return nameAt(e.ID, e.at) }

// Unwrap returns the failing node's error.
func (e *EndError) Unwrap() error { return e.Err }
