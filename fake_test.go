package asynctool

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// recorder is a callback source that counts, per node, the Begin and
// Result calls and keeps the results, so tests can check "exactly once".
type recorder struct {
	mu      sync.Mutex
	begins  map[string]int
	results map[string]int
	res     map[string]WorkResult[int]
	success map[string]bool
	actions map[string]int
	order   []string // node ids in the order their Action started
}

func newRecorder() *recorder {
	return &recorder{
		begins: map[string]int{}, results: map[string]int{}, actions: map[string]int{},
		res: map[string]WorkResult[int]{}, success: map[string]bool{},
	}
}

type recCallback struct {
	rec *recorder
	id  string
}

func (c recCallback) Begin() {
	c.rec.mu.Lock()
	c.rec.begins[c.id]++
	c.rec.mu.Unlock()
}

func (c recCallback) Result(success bool, _ int, r WorkResult[int]) {
	c.rec.mu.Lock()
	c.rec.results[c.id]++
	c.rec.res[c.id] = r
	c.rec.success[c.id] = success
	c.rec.mu.Unlock()
}

func (rec *recorder) acted(id string) {
	rec.mu.Lock()
	rec.actions[id]++
	rec.order = append(rec.order, id)
	rec.mu.Unlock()
}

func (rec *recorder) count(m map[string]int, id string) int {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return m[id]
}

// node builds an int node that records its Action and then runs fn.
func (rec *recorder) node(id string, fn func(ctx context.Context, all Wrappers) (int, error)) *WorkerWrapper[int, int] {
	return NewWrapper(id, WorkerFunc[int, int](func(ctx context.Context, _ int, all Wrappers) (int, error) {
		rec.acted(id)
		return fn(ctx, all)
	}), 0).Callback(recCallback{rec, id})
}

func ok(v int) func(context.Context, Wrappers) (int, error) {
	return func(context.Context, Wrappers) (int, error) { return v, nil }
}

func fail(err error) func(context.Context, Wrappers) (int, error) {
	return func(context.Context, Wrappers) (int, error) { return 0, err }
}

// gated waits for gate (or the run's end) and then returns v.
func gated(gate <-chan struct{}, v int) func(context.Context, Wrappers) (int, error) {
	return func(ctx context.Context, _ Wrappers) (int, error) {
		select {
		case <-gate:
			return v, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// gatedWorker is gated as a worker (its parameter unused).
func gatedWorker(gate <-chan struct{}, v int) WorkerFunc[int, int] {
	g := gated(gate, v)
	return func(ctx context.Context, _ int, all Wrappers) (int, error) { return g(ctx, all) }
}

// manualExec queues tasks and runs them only when the test says so, which
// makes interleavings deterministic.
type manualExec struct {
	mu    sync.Mutex
	tasks []func()
}

func (m *manualExec) Submit(task func()) error {
	m.mu.Lock()
	m.tasks = append(m.tasks, task)
	m.mu.Unlock()
	return nil
}

// step runs the oldest queued task and reports whether there was one.
func (m *manualExec) step() bool {
	m.mu.Lock()
	if len(m.tasks) == 0 {
		m.mu.Unlock()
		return false
	}
	t := m.tasks[0]
	m.tasks = m.tasks[1:]
	m.mu.Unlock()
	t()
	return true
}

func (m *manualExec) drain() {
	for m.step() {
	}
}

// newAsync returns an Async closed at the end of the test.
func newAsync(t *testing.T, opts ...Option) *Async {
	t.Helper()
	a := New(opts...)
	t.Cleanup(func() { require.NoError(t, a.Close()) })
	return a
}

// releaser returns a function that closes gate once, and also closes it
// when the test ends. A worker that waits for gate and ignores its ctx
// would otherwise keep the cleanup that closes its Async (see newAsync)
// waiting for good when a require fails before the test releases it. Call
// it after newAsync: cleanups run last registered first.
func releaser(t *testing.T, gate chan struct{}) func() {
	release := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(release)
	return release
}

var errBoom = errors.New("boom")

// requireEnds fails the test unless run r is done within 10 s, with why
// (a format and its arguments) saying what that would mean.
func requireEnds(t *testing.T, r *Run, why string, args ...any) {
	t.Helper()
	select {
	case <-r.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf(why, args...)
	}
}

// requireCloses fails the test unless a.Close returns within 10 s, with
// why (a format and its arguments) saying what that would mean.
func requireCloses(t *testing.T, a *Async, why string, args ...any) {
	t.Helper()
	closed := make(chan struct{})
	go func() { _ = a.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatalf(why, args...)
	}
}

func ids(n int, prefix string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}
