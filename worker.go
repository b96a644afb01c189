package asynctool

import "context"

// Worker does one node's work. Action receives the run's context, which
// carries the group deadline and the caller's request-scoped values, the
// node's parameter, and a view of every node of the run through which it
// reads upstream results (see [ResultOf]).
//
// Action should return promptly once ctx is done: the node's result is
// then already fixed as a timeout and whatever Action returns is dropped.
// A panic in Action is recovered and becomes the node's error (a
// [*PanicError]). Action is called at most once per run, unless the
// node's [RetryPolicy] or a [Run.Resume] with [Rerun] runs it again.
type Worker[P, R any] interface {
	Action(ctx context.Context, param P, all Wrappers) (R, error)
}

// WorkerFunc adapts a function to the [Worker] interface.
type WorkerFunc[P, R any] func(ctx context.Context, param P, all Wrappers) (R, error)

// Action calls f.
func (f WorkerFunc[P, R]) Action(ctx context.Context, param P, all Wrappers) (R, error) {
	return f(ctx, param, all)
}

// Defaulter may be implemented by a [Worker] to supply the value a node
// reports when it does not succeed (it failed, timed out or was skipped).
// [WorkerWrapper.Default] takes precedence over it; without either, the
// zero value of R is used. DefaultValue must be safe to call from any
// goroutine.
//
// The default is the node's value once it has ended without success: a
// node that reads this one before it ended (an optional dependency) gets
// the zero value with ResultDefault, not DefaultValue, as for
// [WorkerWrapper.Default]. It belongs to the worker, so a test that puts
// a fake in the worker's place (asynctooltest's fakes) loses it: a
// fallback the graph relies on is better set with [WorkerWrapper.Default]
// where the graph is built.
type Defaulter[R any] interface {
	DefaultValue() R
}
