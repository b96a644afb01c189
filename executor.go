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

// Submit starts task on a new goroutine and returns nil.
func (GoExecutor) Submit(task func()) error {
	go task()
	return nil
}

// isNil reports whether e is nil, or holds a nil func or pointer (an
// ExecutorFunc(nil), a nil *Pool), whose Submit would panic: such an e
// counts as none.
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
