package asynctool

import (
	"cmp"
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// serialExecutors are the executors every Serial and Keyed test runs on.
func serialExecutors() []struct {
	name string
	make func() (Executor, func())
} {
	return []struct {
		name string
		make func() (Executor, func())
	}{
		{"exec=go", func() (Executor, func()) { return GoExecutor{}, func() {} }},
		{"exec=pool", func() (Executor, func()) {
			p := NewPool(PoolSize(4), PoolQueue(4))
			return p, func() { _ = p.Close() }
		}},
		{"exec=pool-callerruns", func() (Executor, func()) {
			p := NewPool(PoolSize(1), PoolQueue(0))
			return p, func() { _ = p.Close() }
		}},
		{"exec=pool-reject", func() (Executor, func()) {
			p := NewPool(PoolSize(1), PoolQueue(0), PoolWhenFull(Reject))
			return p, func() { _ = p.Close() }
		}},
		{"exec=refusing", func() (Executor, func()) {
			return ExecutorFunc(func(func()) error { return errors.New("no") }), func() {}
		}},
	}
}

func TestSerialRunsInOrder(t *testing.T) {
	for _, ex := range serialExecutors() {
		t.Run(ex.name, func(t *testing.T) {
			exec, stop := ex.make()
			defer stop()
			s := NewSerial(exec)
			const n = 10000
			var got []int // no lock: the race detector checks tasks never overlap
			var wg sync.WaitGroup
			wg.Add(n)
			for i := range n {
				require.NoError(t, s.Submit(func() { got = append(got, i); wg.Done() }))
			}
			wg.Wait()
			s.Close()
			require.Len(t, got, n)
			for i, v := range got {
				if v != i {
					t.Fatalf("position %d ran task %d", i, v)
				}
			}
			assert.Equal(t, uint64(n), s.Stats().Completed)
		})
	}
}

// TestSerialsShareOneExecutor: Serials made on one pool each run their
// own tasks in order and one at a time, but do not wait for each other;
// and as a Serial does not own its executor, closing one leaves the pool
// and the other Serials working.
func TestSerialsShareOneExecutor(t *testing.T) {
	p := NewPool(PoolSize(4), PoolQueue(64))
	defer p.Close()
	serials := []*Serial{NewSerial(p), NewSerial(p), NewSerial(p)}

	// The first Serial's task waits for the second's: were the Serials
	// run one after another, it would wait in vain.
	otherRan := make(chan struct{})
	waited := make(chan bool, 1)
	require.NoError(t, serials[0].Submit(func() {
		select {
		case <-otherRan:
			waited <- true
		case <-time.After(10 * time.Second):
			waited <- false
		}
	}))
	require.NoError(t, serials[1].Submit(func() { close(otherRan) }))
	assert.True(t, <-waited, "a task of one Serial waited for ever for a task of another")

	const n = 2000
	got := make([][]int, len(serials)) // no lock: each Serial's tasks never overlap
	var wg sync.WaitGroup
	wg.Add(n * len(serials))
	for k, s := range serials {
		go func() {
			for i := range n {
				assert.NoError(t, s.Submit(func() { got[k] = append(got[k], i); wg.Done() }))
			}
		}()
	}
	wg.Wait()
	for k := range serials {
		require.Len(t, got[k], n)
		for i, v := range got[k] {
			if v != i {
				t.Fatalf("serial %d: position %d ran task %d", k, i, v)
			}
		}
	}

	serials[0].Close()
	assert.ErrorIs(t, serials[0].Submit(func() {}), ErrSerialClosed)
	done := make(chan struct{}, 2)
	require.NoError(t, p.Submit(func() { done <- struct{}{} }), "the pool is still open")
	require.NoError(t, serials[1].Submit(func() { done <- struct{}{} }), "the other Serials still take tasks")
	<-done
	<-done
	for _, s := range serials[1:] {
		s.Close()
	}
}

// TestSerialConcurrentSubmitters submits from thousands of goroutines and
// checks that tasks never overlap, that each submitter's tasks run in its
// order, and that every task runs exactly once.
func TestSerialConcurrentSubmitters(t *testing.T) {
	for _, ex := range serialExecutors() {
		t.Run(ex.name, func(t *testing.T) {
			exec, stop := ex.make()
			defer stop()
			s := NewSerial(exec)
			const submitters, each = 2000, 10
			last := make([]int, submitters) // no lock: tasks are serial
			for i := range last {
				last[i] = -1
			}
			var running, total atomic.Int32
			var wg sync.WaitGroup
			wg.Add(submitters * each)
			for g := range submitters {
				go func() {
					for i := range each {
						err := s.Submit(func() {
							defer wg.Done()
							if running.Add(1) != 1 {
								t.Error("two tasks ran at once")
							}
							if last[g] != i-1 {
								t.Errorf("submitter %d: task %d ran after task %d", g, i, last[g])
							}
							last[g] = i
							total.Add(1)
							running.Add(-1)
						})
						assert.NoError(t, err)
					}
				}()
			}
			wg.Wait()
			s.Close()
			assert.Equal(t, int32(submitters*each), total.Load())
			for g, l := range last {
				assert.Equal(t, each-1, l, "submitter %d", g)
			}
		})
	}
}

func TestSerialSubmitFromTask(t *testing.T) {
	s := NewSerial(GoExecutor{})
	var order []string
	done := make(chan struct{})
	require.NoError(t, s.Submit(func() {
		order = append(order, "outer start")
		assert.NoError(t, s.Submit(func() { order = append(order, "inner"); close(done) }))
		order = append(order, "outer end")
	}))
	waitClosed(t, done, "the task submitted from a task did not run")
	s.Close()
	assert.Equal(t, []string{"outer start", "outer end", "inner"}, order)
}

func TestSerialPanicDoesNotStopDrain(t *testing.T) {
	var got []*PanicError
	s := NewSerial(GoExecutor{}, SerialPanicHandler(func(p *PanicError) { got = append(got, p) }))
	var ran []int
	done := make(chan struct{})
	for i := range 5 {
		require.NoError(t, s.Submit(func() {
			ran = append(ran, i)
			if i%2 == 0 {
				panic(i)
			}
		}))
	}
	require.NoError(t, s.Submit(runtime.Goexit))
	require.NoError(t, s.Submit(func() { close(done) }))
	<-done
	s.Close()
	assert.Equal(t, []int{0, 1, 2, 3, 4}, ran)
	require.Len(t, got, 3)
	assert.Equal(t, 0, got[0].Value)
	assert.Equal(t, uint64(3), s.Stats().Panicked)
	assert.Equal(t, uint64(7), s.Stats().Completed)
}

func TestSerialCloseDropsQueuedAndWaitsForRunning(t *testing.T) {
	s := NewSerial(GoExecutor{})
	started, release := make(chan struct{}), make(chan struct{})
	require.NoError(t, s.Submit(func() { close(started); <-release }))
	<-started
	var ran atomic.Int32
	for range 100 {
		require.NoError(t, s.Submit(func() { ran.Add(1) }))
	}
	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }()
	require.Eventually(t, s.closed.Load, 10*time.Second, time.Millisecond, "Close has begun")
	select {
	case <-closed:
		t.Fatal("Close returned while a task was running")
	case <-time.After(20 * time.Millisecond):
	}
	assert.ErrorIs(t, s.Submit(func() {}), ErrSerialClosed)
	close(release)
	<-closed
	assert.Zero(t, ran.Load())
	st := s.Stats()
	assert.Equal(t, uint64(100), st.Dropped)
	assert.Equal(t, uint64(1), st.Completed)
	s.Close() // idempotent
}

// TestSerialCloseRace closes while thousands of goroutines submit: every
// accepted task runs once or is dropped, none runs after Close returns.
func TestSerialCloseRace(t *testing.T) {
	for _, ex := range serialExecutors() {
		t.Run(ex.name, func(t *testing.T) {
			exec, stop := ex.make()
			defer stop()
			s := NewSerial(exec)
			const submitters, each = 1000, 20
			var accepted, ran atomic.Int64
			var afterClose atomic.Bool
			var wg sync.WaitGroup
			for range submitters {
				wg.Go(func() {
					for range each {
						err := s.Submit(func() {
							if afterClose.Load() {
								t.Error("task ran after Close returned")
							}
							ran.Add(1)
						})
						if err == nil {
							accepted.Add(1)
						} else {
							assert.ErrorIs(t, err, ErrSerialClosed)
						}
					}
				})
			}
			time.Sleep(time.Millisecond)
			s.Close()
			afterClose.Store(true)
			wg.Wait()
			// A Submit that raced Close may have been accepted after
			// Close's marker went by; its task is dropped by a drain loop
			// that can still be going when the submitters return, and
			// its count is published when that loop empties the queue.
			require.Eventually(t, func() bool {
				return accepted.Load() == ran.Load()+int64(s.Stats().Dropped)
			}, 10*time.Second, time.Millisecond, "accepted = ran + dropped")
			assert.Equal(t, uint64(ran.Load()), s.Stats().Completed)
		})
	}
}

func TestSerialIdleHoldsNoGoroutine(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	s := NewSerial(GoExecutor{})
	k := NewKeyed[int](GoExecutor{})
	var wg sync.WaitGroup
	for i := range 1000 {
		wg.Add(2)
		require.NoError(t, s.Submit(wg.Done))
		require.NoError(t, k.Submit(i%10, wg.Done))
	}
	wg.Wait()
	// Not closed: an idle Serial or Keyed holds no goroutine anyway.
}

func TestSerialSubmitAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewSerial(GoExecutor{})
		var got []string
		start := time.Now()
		var at time.Duration
		_, err := s.SubmitAfter(2*time.Second, func() { got = append(got, "late"); at = time.Since(start) })
		require.NoError(t, err)
		require.NoError(t, s.Submit(func() { got = append(got, "now") }))
		synctest.Wait()
		assert.Equal(t, []string{"now"}, got)
		assert.Equal(t, 1, s.Stats().Delayed)

		time.Sleep(2 * time.Second)
		synctest.Wait()
		assert.Equal(t, []string{"now", "late"}, got)
		assert.Equal(t, 2*time.Second, at)
		assert.Zero(t, s.Stats().Delayed)
		s.Close()
	})
}

func TestSerialSubmitAfterCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewSerial(GoExecutor{})
		var ran atomic.Int32
		cancel, err := s.SubmitAfter(time.Second, func() { ran.Add(1) })
		require.NoError(t, err)
		assert.True(t, cancel(), "cancel before the delay")
		assert.False(t, cancel(), "second cancel")

		fired, err := s.SubmitAfter(time.Second, func() { ran.Add(1) })
		require.NoError(t, err)
		time.Sleep(2 * time.Second)
		synctest.Wait()
		assert.False(t, fired(), "cancel after the task was queued")
		assert.Equal(t, int32(1), ran.Load())

		now, err := s.SubmitAfter(0, func() { ran.Add(1) })
		require.NoError(t, err)
		synctest.Wait()
		assert.False(t, now())
		assert.Equal(t, int32(2), ran.Load())
		s.Close()
	})
}

func TestSerialCloseCancelsDelayed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewSerial(GoExecutor{})
		var ran atomic.Int32
		var cancels []func() bool
		for range 10 {
			c, err := s.SubmitAfter(time.Minute, func() { ran.Add(1) })
			require.NoError(t, err)
			cancels = append(cancels, c)
		}
		s.Close()
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		assert.Zero(t, ran.Load())
		assert.Equal(t, uint64(10), s.Stats().Dropped)
		assert.False(t, cancels[0](), "cancel after Close")
		_, err := s.SubmitAfter(time.Second, func() {})
		assert.ErrorIs(t, err, ErrSerialClosed)
	})
}

// TestSerialDelayedRaceWithClose fires timers while Close runs: each
// delayed task runs once or is dropped.
func TestSerialDelayedRaceWithClose(t *testing.T) {
	for range 20 {
		s := NewSerial(GoExecutor{})
		var ran, cancelled atomic.Int64
		for i := range 200 {
			c, err := s.SubmitAfter(time.Duration(i%5)*time.Microsecond+time.Microsecond, func() { ran.Add(1) })
			require.NoError(t, err)
			if i%7 == 0 && c() {
				cancelled.Add(1)
			}
		}
		time.Sleep(3 * time.Microsecond)
		s.Close()
		assert.Equal(t, int64(200), ran.Load()+cancelled.Load()+int64(s.Stats().Dropped))
	}
}

func TestSerialNilTask(t *testing.T) {
	s := NewSerial(nil)
	defer s.Close()
	assert.ErrorIs(t, s.Submit(nil), ErrNilTask)
	_, err := s.SubmitAfter(time.Second, nil)
	assert.ErrorIs(t, err, ErrNilTask)
}

// TestSerialSubmitAfterKeepsOrder submits delayed tasks with equal and
// with different delays, cancels some, and checks that the others run in
// the order of their due times, ties in submission order. Timers due
// together fire on goroutines of their own, in no particular order.
func TestSerialSubmitAfterKeepsOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewSerial(nil)
		defer s.Close()
		type key struct{ due, seq int }
		var got []key
		var want []key
		var wg sync.WaitGroup
		for k := range 300 {
			due := []int{3, 1, 2}[k%3] // seconds
			wg.Add(1)
			cancel, err := s.SubmitAfter(time.Duration(due)*time.Second, func() {
				got = append(got, key{due, k})
				wg.Done()
			})
			require.NoError(t, err)
			if k%7 == 0 {
				require.True(t, cancel())
				wg.Done()
				continue
			}
			want = append(want, key{due, k})
		}
		wg.Wait()
		slices.SortFunc(want, func(a, b key) int {
			return cmp.Or(cmp.Compare(a.due, b.due), cmp.Compare(a.seq, b.seq))
		})
		require.Equal(t, want, got)
		assert.Zero(t, s.Stats().Delayed)
	})
}

// TestSerialSubmitAfterWithoutDelayKeepsSubmissionOrder: a task given
// SubmitAfter with a d of 0 or less is queued at once, as Submit queues
// it, so it runs in submission order among the plain tasks, not after
// them as a timer's task would.
func TestSerialSubmitAfterWithoutDelayKeepsSubmissionOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewSerial(GoExecutor{})
		defer s.Close()
		release := make(chan struct{})
		var got []string
		require.NoError(t, s.Submit(func() { <-release; got = append(got, "a") }))
		synctest.Wait() // a runs: the rest queue behind it
		_, err := s.SubmitAfter(-time.Second, func() { got = append(got, "b") })
		require.NoError(t, err)
		require.NoError(t, s.Submit(func() { got = append(got, "c") }))
		_, err = s.SubmitAfter(0, func() { got = append(got, "d") })
		require.NoError(t, err)
		require.NoError(t, s.Submit(func() { got = append(got, "e") }))
		assert.Zero(t, s.Stats().Delayed, "nothing waits for a timer")
		close(release)
		synctest.Wait()
		assert.Equal(t, []string{"a", "b", "c", "d", "e"}, got)
	})
}

// TestSerialSubmitAfterOrderOnARealClock checks the order of tasks with
// one delay on the real clock, where their due times differ by the time
// between the calls.
func TestSerialSubmitAfterOrderOnARealClock(t *testing.T) {
	s := NewSerial(nil)
	defer s.Close()
	var got []int
	var wg sync.WaitGroup
	for k := range 2000 {
		wg.Add(1)
		_, err := s.SubmitAfter(time.Millisecond, func() { got = append(got, k); wg.Done() })
		require.NoError(t, err)
	}
	wg.Wait()
	assert.True(t, slices.IsSorted(got), "delayed tasks ran out of submission order")
}

// TestSerialSubmitAfterErrorsGiveNoCancel: every error of SubmitAfter
// comes with a nil cancel, whatever the delay.
func TestSerialSubmitAfterErrorsGiveNoCancel(t *testing.T) {
	s := NewSerial(nil)
	s.Close()
	for _, d := range []time.Duration{-time.Second, 0, time.Second} {
		cancel, err := s.SubmitAfter(d, func() {})
		assert.ErrorIs(t, err, ErrSerialClosed, "d=%v", d)
		assert.Nil(t, cancel, "d=%v", d)
		cancel, err = s.SubmitAfter(d, nil)
		assert.ErrorIs(t, err, ErrNilTask, "d=%v", d)
		assert.Nil(t, cancel, "d=%v", d)
	}
}

// TestSerialStatsCurrentWithinBatch guards Stats' Completed and Panicked
// while a batch runs. The drain loop counted in locals and published at
// the end of each batch, so with a task blocked late in a batch Completed
// read 1 while 101 tasks had run (Keyed publishes per task). The counters
// are now published as each task returns.
func TestSerialStatsCurrentWithinBatch(t *testing.T) {
	s := NewSerial(nil)
	defer s.Close()
	started, gate0 := make(chan struct{}), make(chan struct{})
	reached, gate1 := make(chan struct{}), make(chan struct{})
	require.NoError(t, s.Submit(func() { close(started); <-gate0 }))
	<-started // the loop has taken a batch holding only this task
	for i := range 100 {
		require.NoError(t, s.Submit(func() {
			if i%10 == 0 {
				panic(i)
			}
		}))
	}
	require.NoError(t, s.Submit(func() { close(reached); <-gate1 }))
	close(gate0)
	<-reached // 101 tasks have returned, 10 of them by panicking
	st := s.Stats()
	close(gate1)
	assert.Equal(t, uint64(101), st.Completed)
	assert.Equal(t, uint64(10), st.Panicked)
}

// TestSerialCancelQueuedTask cancels tasks of SubmitAfter that are
// queued behind a running task, as the seed's scheduler does when an
// action is unsubscribed: they never run, the others keep their order,
// and each cancel reports true once.
func TestSerialCancelQueuedTask(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewSerial(GoExecutor{})
		release := make(chan struct{})
		var got []string
		require.NoError(t, s.Submit(func() { <-release; got = append(got, "first") }))
		synctest.Wait() // the first task is running

		now, err := s.SubmitAfter(0, func() { got = append(got, "now") })
		require.NoError(t, err)
		_, err = s.SubmitAfter(0, func() { got = append(got, "kept") })
		require.NoError(t, err)
		due, err := s.SubmitAfter(time.Second, func() { got = append(got, "due") })
		require.NoError(t, err)
		time.Sleep(2 * time.Second)
		synctest.Wait() // "due" is queued behind the blocked task
		assert.Equal(t, 3, s.Stats().Queued)

		assert.True(t, now(), "cancel of a queued task")
		assert.True(t, due(), "cancel of a delayed task that is queued")
		assert.False(t, now(), "second cancel")
		close(release)
		synctest.Wait()
		assert.Equal(t, []string{"first", "kept"}, got)
		st := s.Stats()
		assert.Equal(t, uint64(2), st.Cancelled)
		assert.Equal(t, uint64(2), st.Completed)
		assert.Zero(t, st.Queued)
		s.Close()
	})
}

// TestSerialCancelAfterStartOrClose: cancel reports false once the task
// has started or Close has dropped it, and such a task is not counted as
// cancelled.
func TestSerialCancelAfterStartOrClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewSerial(GoExecutor{})
		started, release := make(chan struct{}), make(chan struct{})
		running, err := s.SubmitAfter(0, func() { close(started); <-release })
		require.NoError(t, err)
		<-started
		assert.False(t, running(), "cancel of a running task")

		queued, err := s.SubmitAfter(0, func() { t.Error("a task dropped by Close ran") })
		require.NoError(t, err)
		delayed, err := s.SubmitAfter(time.Minute, func() { t.Error("a delayed task dropped by Close ran") })
		require.NoError(t, err)
		go func() {
			synctest.Wait()
			close(release)
		}()
		s.Close() // drops the queued task and the delayed one
		assert.False(t, queued(), "cancel of a task Close dropped")
		assert.False(t, delayed(), "cancel of a delayed task Close dropped")
		st := s.Stats()
		assert.Equal(t, uint64(2), st.Dropped)
		assert.Zero(t, st.Cancelled)
		assert.Equal(t, uint64(1), st.Completed)
	})
}

// TestSerialCancelRacesDrain cancels queued tasks while the drain loop
// takes them: each task either runs or is cancelled, never both, and the
// counters agree with what cancel reported.
func TestSerialCancelRacesDrain(t *testing.T) {
	for range 50 {
		s := NewSerial(GoExecutor{})
		var ran atomic.Int64
		cancels := make([]func() bool, 0, 300)
		for range 300 {
			c, err := s.SubmitAfter(0, func() { ran.Add(1) })
			require.NoError(t, err)
			cancels = append(cancels, c)
		}
		var won atomic.Int64
		var wg sync.WaitGroup
		for g := range 3 {
			wg.Go(func() {
				for i := g; i < len(cancels); i += 3 {
					if cancels[i]() {
						won.Add(1)
					}
				}
			})
		}
		wg.Wait()
		done := make(chan struct{})
		require.NoError(t, s.Submit(func() { close(done) }))
		<-done
		s.Close() // the drain loop counts the last task before Close's marker
		st := s.Stats()
		assert.Equal(t, int64(300), ran.Load()+won.Load())
		assert.Equal(t, uint64(won.Load()), st.Cancelled)
		assert.Equal(t, uint64(ran.Load()+1), st.Completed)
		assert.Zero(t, st.Dropped)
	}
}

// TestSerialShutdownRunsAcceptedTasks: Shutdown refuses new tasks, also
// from inside a task, and runs every task it had accepted, queued or
// delayed, in order, before it returns nil.
func TestSerialShutdownRunsAcceptedTasks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewSerial(GoExecutor{})
		release := make(chan struct{})
		var got []string
		var inner error
		require.NoError(t, s.Submit(func() { <-release; got = append(got, "first") }))
		require.NoError(t, s.Submit(func() { got = append(got, "second"); inner = s.Submit(func() {}) }))
		_, err := s.SubmitAfter(time.Minute, func() { got = append(got, "delayed") })
		require.NoError(t, err)
		dropIt, err := s.SubmitAfter(time.Hour, func() { got = append(got, "cancelled") })
		require.NoError(t, err)
		synctest.Wait()

		shut := make(chan error, 1)
		go func() { shut <- s.Shutdown(context.Background()) }()
		synctest.Wait()
		assert.ErrorIs(t, s.Submit(func() {}), ErrSerialClosed)
		_, err = s.SubmitAfter(time.Second, func() {})
		assert.ErrorIs(t, err, ErrSerialClosed)
		close(release)
		synctest.Wait()
		assert.Empty(t, shut, "Shutdown returned before the delayed task ran")
		assert.True(t, dropIt(), "cancel during Shutdown")
		time.Sleep(time.Minute)
		require.NoError(t, <-shut)
		assert.Equal(t, []string{"first", "second", "delayed"}, got)
		assert.ErrorIs(t, inner, ErrSerialClosed)
		st := s.Stats()
		assert.Equal(t, uint64(3), st.Completed)
		assert.Equal(t, uint64(1), st.Cancelled)
		assert.Zero(t, st.Dropped)
		assert.ErrorIs(t, s.Submit(func() {}), ErrSerialClosed, "closed after Shutdown")
		assert.ErrorIs(t, s.Shutdown(context.Background()), ErrSerialClosed, "second Shutdown")
	})
}

// TestSerialShutdownUntilCtx: when ctx ends first, Shutdown drops what has
// not started, as Close does, and returns ctx's error.
func TestSerialShutdownUntilCtx(t *testing.T) {
	for _, blockedBy := range []string{"queued", "delayed"} {
		t.Run(blockedBy, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := NewSerial(GoExecutor{})
				release := make(chan struct{})
				if blockedBy == "queued" {
					require.NoError(t, s.Submit(func() { <-release }))
					require.NoError(t, s.Submit(func() { t.Error("a task after the deadline ran") }))
					go func() {
						time.Sleep(2 * time.Second) // Close waits for the running task
						close(release)
					}()
				} else {
					_, err := s.SubmitAfter(time.Hour, func() { t.Error("a delayed task after the deadline ran") })
					require.NoError(t, err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				err := s.Shutdown(ctx)
				assert.ErrorIs(t, err, context.DeadlineExceeded)
				assert.Equal(t, uint64(1), s.Stats().Dropped)
				assert.ErrorIs(t, s.Submit(func() {}), ErrSerialClosed)
				synctest.Wait()
			})
		})
	}
}

// TestSerialShutdownAndClose: a Close during Shutdown drops the tasks, and
// Shutdown then reports ErrSerialClosed, as it does after Close.
func TestSerialShutdownAndClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewSerial(GoExecutor{})
		started, release := make(chan struct{}), make(chan struct{})
		require.NoError(t, s.Submit(func() { close(started); <-release }))
		require.NoError(t, s.Submit(func() { t.Error("a task Close dropped ran") }))
		<-started
		shut := make(chan error, 1)
		go func() { shut <- s.Shutdown(context.Background()) }()
		synctest.Wait()
		closed := make(chan struct{})
		go func() { s.Close(); close(closed) }()
		synctest.Wait()
		close(release)
		<-closed
		assert.ErrorIs(t, <-shut, ErrSerialClosed)
		assert.Equal(t, uint64(1), s.Stats().Dropped)
	})
}

// TestZeroSerialRefusesTasks uses a Serial declared as a variable (a
// struct field, say) instead of made with NewSerial. Submit and Shutdown
// panicked on its nil executor, and SubmitAfter accepted the task and
// crashed the process when its timer fired, on the timer's goroutine,
// where no recover could reach. The package's rule is that bad input
// gets an error, as the zero Async's BeginWork does.
func TestZeroSerialRefusesTasks(t *testing.T) {
	var s Serial
	ran := false
	assert.ErrorContains(t, s.Submit(func() { ran = true }), "NewSerial")
	cancel, err := s.SubmitAfter(time.Millisecond, func() { ran = true })
	assert.ErrorContains(t, err, "NewSerial")
	assert.Nil(t, cancel)
	_, err = s.SubmitAfter(0, func() { ran = true })
	assert.ErrorContains(t, err, "NewSerial")
	assert.ErrorContains(t, s.Shutdown(context.Background()), "NewSerial")
	time.Sleep(5 * time.Millisecond) // a timer, had one been set, has fired
	s.Close()
	assert.False(t, ran)
	assert.Equal(t, SerialStats{}, s.Stats())
}

// submitUntilRefused runs n goroutines that Submit to s until it refuses,
// counting the tasks accepted and those that ran.
func submitUntilRefused(s *Serial, n int, accepted, ran *atomic.Int64) *sync.WaitGroup {
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for {
				if s.Submit(func() { ran.Add(1) }) != nil {
					return
				}
				accepted.Add(1)
			}
		})
	}
	return &wg
}

// TestSerialShutdownRunsEveryAcceptedTask: a Submit that returned nil
// while Shutdown began had its task dropped by Shutdown's final Close,
// and Shutdown still returned nil, although it promises that every
// accepted task has run. Submit looked at refuse before taking mu, so
// its task could land behind Shutdown's marker. Keyed, which checks
// under the shard's lock, had no such gap.
func TestSerialShutdownRunsEveryAcceptedTask(t *testing.T) {
	for i := range 1000 {
		s := NewSerial(GoExecutor{})
		var accepted, ran atomic.Int64
		wg := submitUntilRefused(s, max(4, runtime.GOMAXPROCS(0)), &accepted, &ran)
		runtime.Gosched()
		err := s.Shutdown(context.Background())
		wg.Wait()
		require.NoError(t, err)
		st := s.Stats()
		require.Equal(t, accepted.Load(), ran.Load(), "iteration %d: an accepted task did not run, Dropped %d", i, st.Dropped)
		require.Zero(t, st.Dropped, "iteration %d", i)
	}
}

// TestSerialCloseSettlesAcceptedTasks: once Close has returned, every task
// whose Submit returned nil has run or been counted as dropped; none is
// dropped afterwards.
func TestSerialCloseSettlesAcceptedTasks(t *testing.T) {
	for i := range 1000 {
		s := NewSerial(GoExecutor{})
		var accepted, ran atomic.Int64
		wg := submitUntilRefused(s, max(4, runtime.GOMAXPROCS(0)), &accepted, &ran)
		runtime.Gosched()
		s.Close()
		st := s.Stats() // before the submitters are known to be done
		wg.Wait()
		require.Equal(t, uint64(accepted.Load()), st.Completed+st.Dropped, "iteration %d: %+v", i, st)
	}
}

// TestConcurrentShutdownsBothSucceed: two Shutdowns at once, and no Close,
// both wait for the accepted tasks, which all run; the one that closed
// the Serial (or Keyed) second reported ErrSerialClosed, as if Close had
// dropped them.
func TestConcurrentShutdownsBothSucceed(t *testing.T) {
	t.Run("Serial", func(t *testing.T) {
		for range 10 {
			synctest.Test(t, func(t *testing.T) {
				s := NewSerial(GoExecutor{})
				release := make(chan struct{})
				var ran atomic.Int32
				require.NoError(t, s.Submit(func() { <-release; ran.Add(1) }))
				require.NoError(t, s.Submit(func() { ran.Add(1) }))
				errs := make(chan error, 2)
				for range 2 {
					go func() { errs <- s.Shutdown(context.Background()) }()
				}
				synctest.Wait()
				close(release)
				assert.NoError(t, <-errs)
				assert.NoError(t, <-errs)
				assert.Equal(t, int32(2), ran.Load())
				assert.Zero(t, s.Stats().Dropped)
				assert.ErrorIs(t, s.Shutdown(context.Background()), ErrSerialClosed, "a Shutdown after one that returned")
			})
		}
	})
	t.Run("Keyed", func(t *testing.T) {
		for range 10 {
			synctest.Test(t, func(t *testing.T) {
				k := NewKeyed[int](GoExecutor{})
				release := make(chan struct{})
				var ran atomic.Int32
				require.NoError(t, k.Submit(1, func() { <-release; ran.Add(1) }))
				require.NoError(t, k.Submit(1, func() { ran.Add(1) }))
				errs := make(chan error, 2)
				for range 2 {
					go func() { errs <- k.Shutdown(context.Background()) }()
				}
				synctest.Wait()
				close(release)
				assert.NoError(t, <-errs)
				assert.NoError(t, <-errs)
				assert.Equal(t, int32(2), ran.Load())
				assert.Zero(t, k.Stats().Dropped)
				assert.ErrorIs(t, k.Shutdown(context.Background()), ErrSerialClosed, "a Shutdown after one that returned")
				assert.ErrorIs(t, k.Submit(1, func() {}), ErrSerialClosed)
			})
		}
	})
}

// TestNilSerialRefusesTasks: a nil *Serial (a field never set) panicked
// with a nil dereference; it refuses tasks as the zero Serial does.
func TestNilSerialRefusesTasks(t *testing.T) {
	var s *Serial
	ran := false
	assert.ErrorContains(t, s.Submit(func() { ran = true }), "NewSerial")
	cancel, err := s.SubmitAfter(time.Millisecond, func() { ran = true })
	assert.ErrorContains(t, err, "NewSerial")
	assert.Nil(t, cancel)
	assert.ErrorContains(t, s.Shutdown(context.Background()), "NewSerial")
	s.Close()
	assert.Equal(t, SerialStats{}, s.Stats())
	assert.False(t, ran)
}
