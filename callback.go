package asynctool

// Callback observes one node. Begin is called on the worker's goroutine
// right before Action, and only if Action is about to run. Result is
// called exactly once for every node reachable from the start nodes, once
// the node's result is final, including nodes that never ran (success is
// then false and r carries the default value and the reason).
//
// Result runs before the node's successors are triggered, so it may be
// used to log or to adjust shared state they read. Callbacks should be
// quick: Result for nodes ended by the group deadline runs on a goroutine
// started when the deadline passes, and BeginWork returns only after it
// has run for each of them. A callback should not start a run and wait
// for it: it holds one of the run's goroutines, and it has no context
// that would make the new run a nested one (see Scheduling in the package
// doc), so with a small bound ([WithMaxWorkers] of 1) that run's nodes
// wait for the goroutine the callback holds. Start such a run from a
// worker, with its ctx. A panic in a callback is recovered and reported
// as a [*CallbackPanicError] by BeginWork; a panic in Begin also fails
// the node. A Begin called as the group deadline passes, for a node whose
// start was under way then (its worker is called too, with ctx done), is
// not waited for: the deadline ends the node without it, and a panic in
// it may come after BeginWork has returned, without it.
type Callback[P, R any] interface {
	Begin()
	Result(success bool, param P, r WorkResult[R])
}

// NopCallback is a [Callback] that does nothing. It is the default.
type NopCallback[P, R any] struct{}

// Begin does nothing.
func (NopCallback[P, R]) Begin() {}

// Result does nothing.
func (NopCallback[P, R]) Result(bool, P, WorkResult[R]) {}

// ResultFunc adapts a function to a [Callback] whose Begin does nothing.
type ResultFunc[P, R any] func(success bool, param P, r WorkResult[R])

// Begin does nothing.
func (ResultFunc[P, R]) Begin() {}

// Result calls f.
func (f ResultFunc[P, R]) Result(success bool, param P, r WorkResult[R]) { f(success, param, r) }
