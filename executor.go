package asynctool

import "reflect"

// Executor runs tasks on goroutines it owns. It is the one-method seam
// through which an [Async] (and the serial executors and streams built on
// it) gets goroutines: the package's own [Pool], a pool from another
// library (a *ants.Pool satisfies it as is), or [GoExecutor] for a plain
// go statement.
//
// Submit must either arrange for task to run exactly once and return nil,
// or not run it at all and return a non-nil error. It may run task on the
// calling goroutine before returning (a caller-runs policy). An Executor
// must be safe for concurrent use. An Async's executor must also not wait
// for room in Submit (see [WithExecutor]).
//
// Submit must not panic: a closed channel-based executor should return an
// error. Outside a run's own goroutines (below) the package does not
// recover such a panic, which goes on up the stack of whatever called
// Submit: a [Serial] or [Keyed] first starts its drain loop on a
// goroutine of its own, so that its tasks still run, but on a timer's
// goroutine (a task of [Serial.SubmitAfter] once its delay has passed, an
// Async's retry after its backoff), or on the goroutine a Serial or Keyed
// starts to carry on after a task called runtime.Goexit, there is no
// caller to take the panic, and it ends the program, as a panic in any
// time.AfterFunc function does. It is not kept to be reported later:
// SubmitAfter returned long before, a later Submit's error would say that
// its own task was refused (and invite a second submission of a task that
// runs), Close returns nothing, and Shutdown may never be called, so the
// executor's bug would go unseen; the crash names it. An [Async] calls
// Submit from the goroutine that starts a run, where the panic goes on up
// to the caller of Start, BeginWork, StartPlan or RunPlan, and from the
// run's own goroutines, which recover it: the run goes on, and its Wait
// (BeginWork, RunPlan) returns the panic as a [*CallbackPanicError] of
// Method "internal". Either way the Async counted the task as handed over
// and never takes that back, so its Close then waits for ever.
type Executor interface {
	Submit(task func()) error
}

// ExecutorFunc adapts an ordinary function to the [Executor] interface.
type ExecutorFunc func(task func()) error

// Submit calls f(task).
func (f ExecutorFunc) Submit(task func()) error { return f(task) }

// GoExecutor is an [Executor] that starts a new goroutine for every task.
// It never rejects a task and never bounds concurrency. Its zero value is
// ready to use.
type GoExecutor struct{}

// Submit starts task on a new goroutine and returns nil, or returns
// [ErrNilTask] for a nil task.
func (GoExecutor) Submit(task func()) error {
	if task == nil {
		return ErrNilTask // go on a nil func is a fatal error, not a panic
	}
	go task()
	return nil
}

// isNil reports whether e is nil, or holds a nil func or pointer: an
// ExecutorFunc(nil), whose Submit would panic, or a nil *Pool, which
// refuses every task. Such an e counts as none.
func isNil(e Executor) bool {
	if e == nil {
		return true
	}
	switch v := reflect.ValueOf(e); v.Kind() {
	case reflect.Func, reflect.Pointer:
		return v.IsNil()
	}
	return false
}
