package asynctooltest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynctool-go/asynctool"
)

// Fake is a worker for tests: it does what its constructor says and
// records its calls. Build it with [Returns], [Fails], [Panics], [Sleeps],
// [Blocks] or [Func]; the zero value, and a nil *Fake, are not usable:
// as a worker they fail their node with an error that says so, and
// their Started channel is nil, which never closes. A Fake is safe for
// concurrent use and must not be copied.
//
// A Fake does not implement [asynctool.Defaulter]: a fallback that the
// real worker gives with DefaultValue is lost when a test puts a Fake in
// its place, and the node's default is then the zero value. Set a
// fallback the handler relies on with [asynctool.WorkerWrapper.Default]
// where the graph is built, which holds whatever the worker.
type Fake[P, R any] struct {
	act func(ctx context.Context, p P) (R, error)

	calls   atomic.Int32
	mu      sync.Mutex
	params  []P
	started chan struct{} // closed by the first call
	once    sync.Once

	release     chan struct{} // closed by Release
	releaseOnce sync.Once
}

func newFake[P, R any](act func(ctx context.Context, p P) (R, error)) *Fake[P, R] {
	return &Fake[P, R]{act: act, started: make(chan struct{}), release: make(chan struct{})}
}

// Action implements [asynctool.Worker]: it records the call, then acts as
// the fake was built to.
func (f *Fake[P, R]) Action(ctx context.Context, p P, _ asynctool.Wrappers) (R, error) {
	if f == nil || f.started == nil {
		var zero R
		return zero, errNotMade
	}
	f.calls.Add(1)
	f.mu.Lock()
	f.params = append(f.params, p)
	f.mu.Unlock()
	f.once.Do(func() { close(f.started) })
	return f.act(ctx, p)
}

// Calls returns how many times Action was called (0 for a nil f).
func (f *Fake[P, R]) Calls() int {
	if f == nil {
		return 0
	}
	return int(f.calls.Load())
}

// Params returns a copy of the parameters of every call so far, in call
// order (nil for a nil f, and before the first call).
func (f *Fake[P, R]) Params() []P {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]P(nil), f.params...)
}

// Started returns a channel that is closed when Action is first called,
// so a test can wait until a node is running. For a Fake not made by a
// constructor, a nil one included, it is nil, which never closes.
func (f *Fake[P, R]) Started() <-chan struct{} {
	if f == nil {
		return nil
	}
	return f.started
}

// Release lets every call of a fake built by [Blocks] return, those
// waiting now and those to come. It is idempotent and does nothing for
// other fakes.
func (f *Fake[P, R]) Release() {
	if f == nil || f.release == nil {
		return // not made by a constructor: nothing waits on it
	}
	f.releaseOnce.Do(func() { close(f.release) })
}

// Returns returns a fake that returns v and no error.
func Returns[P, R any](v R) *Fake[P, R] {
	return newFake(func(context.Context, P) (R, error) { return v, nil })
}

// Fails returns a fake that returns err and the zero value.
func Fails[P, R any](err error) *Fake[P, R] {
	return newFake(func(context.Context, P) (R, error) {
		var zero R
		return zero, err
	})
}

// Panics returns a fake that panics with v. The run turns the panic into
// the node's *asynctool.PanicError.
func Panics[P, R any](v any) *Fake[P, R] {
	return newFake(func(context.Context, P) (R, error) { panic(v) })
}

// Sleeps returns a fake that waits d, then returns v; if the run's
// context ends first, it returns at once with the context's cause. It
// waits on a timer, so inside a testing/synctest bubble d is virtual time:
// the test does not wait, and durations in the report are exact.
func Sleeps[P, R any](d time.Duration, v R) *Fake[P, R] {
	return newFake(func(ctx context.Context, _ P) (R, error) {
		timer := time.NewTimer(d)
		defer timer.Stop()
		select {
		case <-timer.C:
			return v, nil
		case <-ctx.Done():
			var zero R
			return zero, context.Cause(ctx)
		}
	})
}

// Blocks returns a fake that blocks until [Fake.Release] is called, then
// returns v; if the run's context ends first, it returns at once with the
// context's cause. Use it to hold a node in StateWorking while the test
// looks at the run.
func Blocks[P, R any](v R) *Fake[P, R] {
	var f *Fake[P, R]
	f = newFake(func(ctx context.Context, _ P) (R, error) {
		select {
		case <-f.release:
			return v, nil
		case <-ctx.Done():
			var zero R
			return zero, context.Cause(ctx)
		}
	})
	return f
}

// Func returns a fake that calls fn, for behaviour the other constructors
// do not cover, with the same call recording.
func Func[P, R any](fn func(ctx context.Context, p P) (R, error)) *Fake[P, R] {
	if fn == nil {
		fn = func(context.Context, P) (R, error) {
			var zero R
			return zero, errors.New("asynctooltest: Func(nil): the fake has no function to call")
		}
	}
	return newFake(fn)
}

// errNotMade is the error of a Fake that no constructor made.
var errNotMade = errors.New("asynctooltest: a Fake must be made with Returns, Fails, Panics, Sleeps, Blocks or Func")
