package asynctool

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGoExecutorRunsTask: GoExecutor runs a task on a goroutine of its
// own, so Submit returns while the task still waits for its caller.
func TestGoExecutorRunsTask(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		returned := make(chan struct{})
		ran := make(chan struct{})
		require.NoError(t, GoExecutor{}.Submit(func() {
			<-returned
			close(ran)
		}))
		close(returned)
		<-ran
	})
}

// TestGoExecutorRefusesANilTask: GoExecutor's Submit ran `go task()` on a
// nil task, which is not a panic but a fatal runtime error ("go of nil
// func value") that no recover catches: a nil task crashed the process,
// where a Pool, a Serial and a Keyed return ErrNilTask.
func TestGoExecutorRefusesANilTask(t *testing.T) {
	assert.ErrorIs(t, GoExecutor{}.Submit(nil), ErrNilTask)
}

func TestExecutorFuncPassesThrough(t *testing.T) {
	errFull := errors.New("full")
	var got int
	e := ExecutorFunc(func(task func()) error { task(); got++; return errFull })
	err := e.Submit(func() {})
	assert.ErrorIs(t, err, errFull)
	assert.Equal(t, 1, got)
}

// flakyExecutor starts a goroutine per task, but, until mended, one
// Submit in five panics; half of those keep the task first and run it
// later, from a goroutine of their own, after a random pause. late waits
// for those.
type flakyExecutor struct {
	late   sync.WaitGroup
	mended atomic.Bool
}

func (e *flakyExecutor) Submit(task func()) error {
	if e.mended.Load() || rand.IntN(5) != 0 {
		go task()
		return nil
	}
	if rand.IntN(2) == 0 {
		e.late.Go(func() {
			time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
			task()
		})
	}
	panic("executor broke")
}

// TestFlakyExecutorLosesNothing: with an executor whose Submit
// panics now and then, some after keeping the drain loop they were given
// and running it later, when a Keyed's queue may have been reused for
// another key, every task accepted still runs once, in order per key, one
// at a time per key (a Serial's tasks all have one key), and Shutdown
// returns with no key left. Before the fix the first panic left its
// key's tasks unrun and Shutdown waiting for ever.
func TestFlakyExecutorLosesNothing(t *testing.T) {
	for _, kind := range orderedQueues {
		t.Run(kind.name, func(t *testing.T) {
			for iter := range 20 {
				exec := &flakyExecutor{}
				q := kind.open(exec)
				const producers, tasks, maxKeys = 4, 300, 6
				require.LessOrEqual(t, q.keys, maxKeys)
				var (
					ran      [producers][tasks]atomic.Int32
					accepted [producers][tasks]bool
					busy     [maxKeys]atomic.Int32
					overlap  atomic.Bool
					last     [producers][maxKeys]int
					disorder atomic.Bool
					wg       sync.WaitGroup
				)
				for g := range producers {
					for i := range last[g] {
						last[g][i] = -1
					}
					wg.Go(func() {
						for i := range tasks {
							key := rand.IntN(q.keys)
							task := func() {
								if busy[key].Add(1) != 1 {
									overlap.Store(true)
								}
								defer busy[key].Add(-1)
								ran[g][i].Add(1)
								if last[g][key] >= i {
									disorder.Store(true)
								}
								last[g][key] = i
							}
							func() {
								defer func() { _ = recover() }() // the executor's panic: the task is accepted all the same
								accepted[g][i] = true
								if q.submit(key, task) != nil {
									accepted[g][i] = false
								}
							}()
						}
					})
				}
				wg.Wait()
				exec.mended.Store(true) // the Shutdown's own Submit must not panic
				err := shutdownWithin(t, q.shutdown)
				exec.late.Wait()
				require.NoError(t, err, "iteration %d: Shutdown", iter)
				for g := range producers {
					for i := range tasks {
						require.Equal(t, accepted[g][i], ran[g][i].Load() == 1, "iteration %d: task %d of producer %d ran %d times", iter, i, g, ran[g][i].Load())
						require.LessOrEqual(t, ran[g][i].Load(), int32(1))
					}
				}
				assert.False(t, overlap.Load(), "two tasks of one key ran at once")
				assert.False(t, disorder.Load(), "a key's tasks ran out of order")
				if q.keysLeft != nil {
					assert.Zero(t, q.keysLeft(), "iteration %d: a key left after Shutdown", iter)
				}
			}
		})
	}
}

// shutdownWithin calls shutdown with a ctx of 10 seconds, and fails
// the test if it has not returned 10 seconds later: once ctx ends,
// Shutdown closes, which waited for ever on the code before the fix.
func shutdownWithin(t *testing.T, shutdown func(context.Context) error) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- shutdown(ctx) }()
	select {
	case err := <-errc:
		return err
	case <-time.After(20 * time.Second):
		t.Fatal("Shutdown still waiting 10 seconds after its ctx ended")
		return nil
	}
}

// brokenExecutor is an Executor whose first Submit panics, as a
// channel-based executor does once its channel is closed; with keep, it
// keeps that task first, to run it later (kept). Later Submits start a
// goroutine.
func brokenExecutor(keep bool) (Executor, chan func()) {
	var calls atomic.Int32
	kept := make(chan func(), 1)
	return ExecutorFunc(func(task func()) error {
		if calls.Add(1) == 1 {
			if keep {
				kept <- task
			}
			panic("executor broke")
		}
		go task()
		return nil
	}), kept
}

// panicValueOf calls f and returns what it panicked with.
func panicValueOf(f func()) (v any) {
	defer func() { v = recover() }()
	f()
	return nil
}

// serialLog runs tasks that record their number, note whether two
// ever ran at once, and, for the first, signal that it started and wait
// for release.
type serialLog struct {
	mu      sync.Mutex
	ran     []int
	running atomic.Int32
	overlap atomic.Bool
	started chan struct{}
	release chan struct{}
}

func newSerialLog() *serialLog {
	return &serialLog{started: make(chan struct{}), release: make(chan struct{})}
}

func (l *serialLog) task(i int) func() {
	return func() {
		if l.running.Add(1) != 1 {
			l.overlap.Store(true)
		}
		defer l.running.Add(-1)
		if i == 1 {
			close(l.started)
			<-l.release
		}
		l.mu.Lock()
		l.ran = append(l.ran, i)
		l.mu.Unlock()
	}
}

// orderedQueue is a Serial or a Keyed[int], seen through what the tests of a
// panicking Submit and of a task's Goexit use.
type orderedQueue struct {
	keys     int // keys it runs apart: 1 for a Serial, whose submit ignores the key
	submit   func(key int, task func()) error
	shutdown func(context.Context) error
	close    func()
	stats    func() SerialStats
	keysLeft func() int         // nil for a Serial, which holds no keys
	empty    func(t *testing.T) // checks that nothing is left queued
}

// orderedQueues opens each kind of queue on an executor.
var orderedQueues = []struct {
	name string
	open func(Executor) orderedQueue
}{
	{"Serial", func(exec Executor) orderedQueue {
		s := NewSerial(exec)
		return orderedQueue{keys: 1, submit: func(_ int, task func()) error { return s.Submit(task) }, shutdown: s.Shutdown,
			close: s.Close, stats: s.Stats, empty: func(t *testing.T) { assert.Zero(t, s.Stats().Queued, "Queued") }}
	}},
	{"Keyed", func(exec Executor) orderedQueue {
		k := NewKeyed[int](exec)
		return orderedQueue{keys: 6, submit: k.Submit, shutdown: k.Shutdown, close: k.Close, stats: k.Stats,
			keysLeft: func() int { return k.Stats().Keys }, empty: func(t *testing.T) {
				assert.Zero(t, k.Stats().Keys, "Keys")
				assertNoKeyQueues(t, k)
			}}
	}},
}

// TestSurvivesAPanickingSubmit: a panic in the executor's Submit goes
// on up Serial.Submit's (Keyed.Submit's) caller's stack, but it left the
// drain loop marked as scheduled with none running (for a Keyed, the
// key's queue registered with no drain loop): the task and every later
// one never ran, and Close and Shutdown waited for ever. The queue now
// starts its loop on a goroutine of its own, as when the executor refuses
// it; if the executor kept the loop and runs it later too (kept), that
// second loop finds the queue held and returns, so tasks still run one at
// a time.
func TestSurvivesAPanickingSubmit(t *testing.T) {
	for _, kind := range orderedQueues {
		t.Run(kind.name, func(t *testing.T) {
			for _, keep := range []bool{false, true} {
				name := map[bool]string{false: "dropped", true: "kept"}[keep]
				t.Run(name, func(t *testing.T) {
					exec, kept := brokenExecutor(keep)
					q := kind.open(exec)
					l := newSerialLog()
					assert.Equal(t, "executor broke", panicValueOf(func() { _ = q.submit(0, l.task(1)) }),
						"the executor's panic goes on up Submit's caller's stack")
					select {
					case <-l.started:
					case <-time.After(10 * time.Second):
						t.Fatal("no task ran after the executor's Submit panicked")
					}
					// Task 2 waits in the queue while task 1 runs, for the
					// kept loop to find: it must leave it to the loop that
					// holds the queue.
					require.NoError(t, q.submit(0, l.task(2)))
					if keep {
						stale := make(chan struct{})
						go func() { defer close(stale); (<-kept)() }()
						select {
						case <-stale:
						case <-time.After(10 * time.Second):
							t.Fatal("the loop the executor kept did not return while another held the queue")
						}
					}
					close(l.release)
					require.NoError(t, shutdownWithin(t, q.shutdown))
					assert.Equal(t, []int{1, 2}, l.ran, "each task ran once, in order")
					assert.False(t, l.overlap.Load(), "two tasks ran at once")
					if q.keysLeft != nil {
						assert.Zero(t, q.keysLeft(), "a key left after Shutdown")
					}
				})
			}
		})
	}
}

// A nil ExecutorFunc or *Pool inside an Executor is a nil executor:
// WithExecutor refuses it as it refuses nil, and NewSerial, NewKeyed and
// RunBatches use their default instead. Start panicked in Submit after
// counting the run, so Close then waited for ever; a Serial's first
// Submit panicked with its drain loop marked running, so no task ever ran
// and Close hung.
func TestTypedNilExecutorIsNil(t *testing.T) {
	for name, e := range map[string]Executor{"ExecutorFunc": ExecutorFunc(nil), "*Pool": (*Pool)(nil)} {
		t.Run(name, func(t *testing.T) {
			a := New(WithExecutor(e))
			x := NewWrapper("x", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 1, nil }), 0)
			var err error
			require.NotPanics(t, func() { err = a.BeginWork(context.Background(), 0, x) })
			assert.ErrorContains(t, err, "WithExecutor(nil)")
			require.NoError(t, a.Close())

			s := NewSerial(e)
			done := make(chan struct{})
			require.NotPanics(t, func() { require.NoError(t, s.Submit(func() { close(done) })) })
			<-done
			s.Close()

			k := NewKeyed[int](e)
			done = make(chan struct{})
			require.NotPanics(t, func() { require.NoError(t, k.Submit(1, func() { close(done) })) })
			<-done
			k.Close()

			var rep BatchReport
			require.NotPanics(t, func() {
				rep, err = RunBatches(context.Background(), e,
					func(_ context.Context, page int) ([]int, error) { return make([]int, 1-min(page, 1)), nil },
					func(context.Context, int) error { return nil })
			})
			require.NoError(t, err)
			assert.Equal(t, 1, rep.Succeeded)
		})
	}
}

// TestEveryRootStartsWhenTheExecutorRefuses: every start node that may
// block gets a goroutine even when the executor takes no task, so root a,
// which waits for root b, is not stuck behind it.
func TestEveryRootStartsWhenTheExecutorRefuses(t *testing.T) {
	a := newAsync(t, WithExecutor(ExecutorFunc(func(func()) error { return errBoom })))
	bRan := make(chan struct{})
	x := NewWrapper("a", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
		select {
		case <-bRan:
			return 1, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}), 0)
	y := NewWrapper("b", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		close(bRan)
		return 2, nil
	}), 0)
	require.NoError(t, a.BeginWork(context.Background(), 10*time.Second, x, y))
	assert.Equal(t, WorkResult[int]{Value: 1, State: ResultSuccess}, x.Result())
	assert.Equal(t, WorkResult[int]{Value: 2, State: ResultSuccess}, y.Result())
}

// TestOnlyRootsGetExtraGoroutines: the promise of a goroutine per start
// node must not leak to the nodes a single root makes ready. With an
// executor that refuses every task, those run one after another on the
// run's own goroutine.
func TestOnlyRootsGetExtraGoroutines(t *testing.T) {
	a := newAsync(t, WithExecutor(ExecutorFunc(func(func()) error { return errBoom })))
	var running, most atomic.Int32
	w := WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		n := running.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(time.Millisecond)
		running.Add(-1)
		return 0, nil
	})
	root := NewWrapper("root", okWorker(), 0)
	for range 8 {
		NewWrapper("", w, 0).Depend(root, true)
	}
	require.NoError(t, a.BeginWork(context.Background(), time.Minute, root))
	assert.Equal(t, int32(1), most.Load(), "no goroutine beyond the run's own")
}
