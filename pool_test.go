package asynctool

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPoolRunsEveryTask(t *testing.T) {
	p := NewPool(PoolSize(4), PoolQueue(8))
	var ran atomic.Int64
	var wg sync.WaitGroup
	for range 1000 {
		wg.Add(1)
		require.NoError(t, p.Submit(func() { ran.Add(1); wg.Done() }))
	}
	wg.Wait()
	require.NoError(t, p.Close())
	assert.Equal(t, int64(1000), ran.Load())
	s := p.Stats()
	assert.Equal(t, uint64(1000), s.Completed)
	assert.Zero(t, s.Workers)
	assert.Zero(t, s.Running)
	assert.Zero(t, s.Queued)
}

// fillPool occupies every worker of p with a task that waits for release,
// and fills its queue with tasks that do the same.
func fillPool(t *testing.T, p *Pool, workers, queue int, release <-chan struct{}) {
	t.Helper()
	var started sync.WaitGroup
	started.Add(workers)
	for range workers {
		require.True(t, p.trySubmit(func() { started.Done(); <-release }))
	}
	started.Wait()
	for range queue {
		require.True(t, p.trySubmit(func() { <-release }))
	}
	require.False(t, p.trySubmit(func() {}), "pool should be full")
}

func TestPoolFullPolicies(t *testing.T) {
	tests := []struct {
		policy FullPolicy
		check  func(t *testing.T, p *Pool, release chan struct{})
	}{
		{CallerRuns, func(t *testing.T, p *Pool, release chan struct{}) {
			ranOnCaller := false
			require.NoError(t, p.Submit(func() { ranOnCaller = true }))
			assert.True(t, ranOnCaller, "task should have run before Submit returned")
			assert.Equal(t, uint64(1), p.Stats().CallerRan)
			close(release)
		}},
		{Reject, func(t *testing.T, p *Pool, release chan struct{}) {
			err := p.Submit(func() { t.Error("rejected task ran") })
			assert.ErrorIs(t, err, ErrPoolFull)
			assert.Equal(t, uint64(1), p.Stats().Rejected)
			close(release)
		}},
		{Block, func(t *testing.T, p *Pool, release chan struct{}) {
			ran := make(chan struct{})
			returned := make(chan error)
			go func() { returned <- p.Submit(func() { close(ran) }) }()
			select {
			case <-returned:
				t.Fatal("Submit returned while the pool was full")
			case <-time.After(20 * time.Millisecond):
			}
			close(release)
			require.NoError(t, <-returned)
			<-ran
		}},
	}
	for _, tt := range tests {
		t.Run("policy="+tt.policy.String(), func(t *testing.T) {
			p := NewPool(PoolSize(2), PoolQueue(3), PoolWhenFull(tt.policy))
			release := make(chan struct{})
			fillPool(t, p, 2, 3, release)
			tt.check(t, p, release)
			require.NoError(t, p.Close())
			assert.Equal(t, uint64(2+3+1)-p.Stats().Rejected, p.Stats().Completed)
		})
	}
}

// TestPoolCallerRunsTaskEndsTheCallerOnGoexit pins what CallerRuns says
// of a task run on the caller: it runs on the submitting goroutine's own
// stack, so a runtime.Goexit in it ends that goroutine (its deferred
// calls run, the code after Submit does not), while its panic, as on a
// worker, is recovered and counted.
func TestPoolCallerRunsTaskEndsTheCallerOnGoexit(t *testing.T) {
	p := NewPool(PoolSize(1), PoolQueue(0))
	release := make(chan struct{})
	fillPool(t, p, 1, 0, release)
	var afterSubmit, deferred atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer deferred.Store(true)
		_ = p.Submit(runtime.Goexit)
		afterSubmit.Store(true)
	}()
	<-done
	assert.True(t, deferred.Load(), "the caller's deferred calls ran")
	assert.False(t, afterSubmit.Load(), "Goexit in the task ended the caller before Submit returned")
	require.NoError(t, p.Submit(func() { panic("on the caller") }), "a panic on the caller is recovered")
	st := p.Stats()
	assert.Equal(t, uint64(2), st.CallerRan)
	assert.Equal(t, uint64(1), st.Panicked)
	assert.Equal(t, uint64(2), st.Completed, "both caller-run tasks are counted completed")
	close(release)
	require.NoError(t, p.Close())
}

func TestPoolBlockedSubmitEndsOnClose(t *testing.T) {
	p := NewPool(PoolSize(1), PoolQueue(0), PoolWhenFull(Block))
	release := make(chan struct{})
	fillPool(t, p, 1, 0, release)
	returned := make(chan error)
	go func() { returned <- p.Submit(func() { t.Error("task ran after Close") }) }()
	closed := make(chan struct{})
	go func() { assert.NoError(t, p.Close()); close(closed) }()
	assert.ErrorIs(t, <-returned, ErrPoolClosed)
	close(release)
	<-closed
}

func TestPoolNoQueueHandsOffOrSpawns(t *testing.T) {
	p := NewPool(PoolSize(3), PoolQueue(0), PoolWhenFull(Reject))
	release := make(chan struct{})
	fillPool(t, p, 3, 0, release)
	assert.ErrorIs(t, p.Submit(func() {}), ErrPoolFull)
	close(release)
	require.NoError(t, p.Close())
}

func TestPoolCloseRunsQueuedTasks(t *testing.T) {
	p := NewPool(PoolSize(1), PoolQueue(100))
	release := make(chan struct{})
	var ran atomic.Int64
	require.NoError(t, p.Submit(func() { <-release }))
	for range 100 {
		require.NoError(t, p.Submit(func() { ran.Add(1) }))
	}
	closed := make(chan struct{})
	go func() { assert.NoError(t, p.Close()); close(closed) }()
	require.Eventually(t, p.closed.Load, 10*time.Second, time.Millisecond, "Close has begun")
	select {
	case <-closed:
		t.Fatal("Close returned before the running task finished")
	case <-time.After(20 * time.Millisecond):
	}
	assert.ErrorIs(t, p.Submit(func() {}), ErrPoolClosed)
	assert.False(t, p.trySubmit(func() {}))
	close(release)
	<-closed
	assert.Equal(t, int64(100), ran.Load())
	assert.NoError(t, p.Close(), "Close is idempotent")
}

// TestPoolCloseWaitsForItsGoroutines checks that no worker goroutine is
// still waiting for a task once Close has returned: idle workers, and
// workers the reaper retired just before, must have taken their exit.
func TestPoolCloseWaitsForItsGoroutines(t *testing.T) {
	// poolWorkersWaiting counts the idle workers of every pool in the
	// process: let those of earlier tests' pools left open (as
	// TestAcceptanceResultsByID leaves its Async) exit on their idle
	// timeout first. Run right after that test (-shuffle, or -run with
	// both), round 0 failed with that Async's idle workers.
	require.Eventually(t, func() bool { return poolWorkersWaiting(t) == 0 }, 30*time.Second, time.Millisecond,
		"idle workers of other tests' pools are still waiting")
	for round := range 50 {
		p := NewPool(PoolSize(8), PoolIdleTimeout(time.Duration(round%5+1)*20*time.Microsecond))
		var started, finished sync.WaitGroup
		release := make(chan struct{})
		for range 8 {
			started.Add(1)
			finished.Add(1)
			require.NoError(t, p.Submit(func() { started.Done(); <-release; finished.Done() }))
		}
		started.Wait()
		close(release)
		finished.Wait()
		time.Sleep(time.Duration(round%3) * 50 * time.Microsecond) // let some park, some be reaped
		require.NoError(t, p.Close())
		if n := poolWorkersWaiting(t); n > 0 {
			t.Fatalf("round %d: Close returned with %d worker goroutines still waiting on their channel", round, n)
		}
	}
}

// poolWorkersWaiting counts the goroutines whose innermost frame is
// Pool.worker's receive from its channel: idle workers, or workers woken
// to exit that have not run yet. (A runnable goroutine's stack shows no
// runtime frames, so the receive is found by its line in pool.go.)
func poolWorkersWaiting(t *testing.T) int {
	src, err := os.ReadFile("pool.go")
	require.NoError(t, err)
	line := 0
	for k, l := range strings.Split(string(src), "\n") {
		if strings.Contains(l, "task = <-w.ch") {
			line = k + 1
		}
	}
	require.NotZero(t, line, "the worker's receive is not in pool.go any more")
	at := []byte("asynctool.(*Pool).worker(")
	where := fmt.Appendf(nil, "pool.go:%d ", line)
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		frames := bytes.SplitN(g, []byte("\n"), 4) // header, function, file:line, rest
		if len(frames) >= 3 && bytes.Contains(frames[1], at) && bytes.Contains(frames[2], where) {
			n++
		}
	}
	return n
}

func TestPoolNilTask(t *testing.T) {
	p := NewPool()
	defer p.Close()
	assert.ErrorIs(t, p.Submit(nil), ErrNilTask)
}

func TestPoolPanicIsRecoveredAndReported(t *testing.T) {
	var got []*PanicError
	var mu sync.Mutex
	p := NewPool(PoolSize(1), PoolPanicHandler(func(pe *PanicError) {
		mu.Lock()
		got = append(got, pe)
		mu.Unlock()
	}))
	boom := errors.New("boom")
	require.NoError(t, p.Submit(func() { panic(boom) }))
	ran := make(chan struct{})
	require.NoError(t, p.Submit(func() { close(ran) }))
	<-ran
	require.NoError(t, p.Close())
	require.Len(t, got, 1)
	assert.ErrorIs(t, got[0], boom)
	assert.Contains(t, string(got[0].Stack), "TestPoolPanicIsRecoveredAndReported")
	assert.Equal(t, uint64(1), p.Stats().Panicked)
	assert.Equal(t, uint64(2), p.Stats().Completed)
}

func TestPoolPanicWithoutHandlerIsCounted(t *testing.T) {
	p := NewPool(PoolSize(1))
	require.NoError(t, p.Submit(func() { panic("no handler") }))
	require.NoError(t, p.Close())
	assert.Equal(t, uint64(1), p.Stats().Panicked)
}

func TestPoolSurvivesGoexit(t *testing.T) {
	p := NewPool(PoolSize(1), PoolQueue(10))
	var ran atomic.Int64
	for range 5 {
		require.NoError(t, p.Submit(runtime.Goexit))
		require.NoError(t, p.Submit(func() { ran.Add(1) }))
	}
	require.NoError(t, p.Close())
	assert.Equal(t, int64(5), ran.Load())
	assert.Zero(t, p.Stats().Workers)
}

// TestPoolIdleWorkersExit checks that idle workers exit after the idle
// timeout, a lone one as well as several: the reaper stays armed while
// any worker is idle.
func TestPoolIdleWorkersExit(t *testing.T) {
	for _, workers := range []int{1, 4} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			testPoolIdleWorkersExit(t, workers)
		})
	}
}

func testPoolIdleWorkersExit(t *testing.T, workers int) {
	synctest.Test(t, func(t *testing.T) {
		p := NewPool(PoolSize(workers), PoolIdleTimeout(time.Second))
		var wg sync.WaitGroup
		for range workers {
			wg.Add(1)
			require.NoError(t, p.Submit(func() { time.Sleep(time.Millisecond); wg.Done() }))
		}
		wg.Wait()
		assert.Equal(t, workers, p.Stats().Workers)

		time.Sleep(time.Second / 2)
		synctest.Wait()
		assert.Equal(t, workers, p.Stats().Workers, "workers left before the idle timeout")

		// A worker exits between one and two idle periods after its last task.
		time.Sleep(2 * time.Second)
		synctest.Wait()
		assert.Zero(t, p.Stats().Workers, "idle workers still alive")

		// The pool still works: the next task starts a worker.
		done := make(chan struct{})
		require.NoError(t, p.Submit(func() { close(done) }))
		<-done
		require.NoError(t, p.Close())
	})
}

// TestPoolBlockedSubmitWakesWhenAQueuedTaskStarts checks that a Submit
// blocked under Block is woken as soon as a worker takes a task from the
// full queue, not only once a worker goes idle: the queued task may wait
// for what the blocked submitter does after Submit returns.
func TestPoolBlockedSubmitWakesWhenAQueuedTaskStarts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := NewPool(PoolSize(1), PoolQueue(1), PoolWhenFull(Block))
		release := make(chan struct{})
		submitted := make(chan struct{})
		require.NoError(t, p.Submit(func() { <-release }))
		require.NoError(t, p.Submit(func() { <-submitted })) // queued
		returned := make(chan error, 1)
		go func() {
			err := p.Submit(func() {})
			close(submitted)
			returned <- err
		}()
		synctest.Wait()
		select {
		case err := <-returned:
			t.Fatalf("Submit returned %v while the pool was full", err)
		default:
		}
		close(release) // the worker takes the queued task, which waits for the Submit to return
		require.NoError(t, <-returned)
		require.NoError(t, p.Close())
		assert.Equal(t, uint64(3), p.Stats().Completed)
	})
}

// TestPoolHasRoom checks the lock-free hint a run uses to retry a helper
// it was refused: room while a worker can be started or is idle, none
// while every worker is busy, room again once one goes idle, and room
// after the idle workers have been retired (their slots are free).
func TestPoolHasRoom(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := NewPool(PoolSize(2), PoolIdleTimeout(time.Second))
		assert.True(t, p.hasRoom(), "no worker started yet")
		gate := [2]chan struct{}{make(chan struct{}), make(chan struct{})}
		for _, g := range gate {
			require.True(t, p.tryStart(func() { <-g }))
		}
		synctest.Wait()
		assert.False(t, p.hasRoom(), "both workers busy")
		assert.False(t, p.tryStart(func() {}))
		close(gate[0])
		synctest.Wait()
		assert.True(t, p.hasRoom(), "a worker went idle")
		close(gate[1])
		time.Sleep(3 * time.Second) // both retired
		synctest.Wait()
		assert.Zero(t, p.Stats().Workers)
		assert.True(t, p.hasRoom(), "workers can be started again")
		require.NoError(t, p.Close())
		assert.False(t, p.tryStart(func() {}), "closed")
	})
}

// TestPoolReusesTheLastIdleWorker checks that idle workers are reused
// last in, first out: under a load one worker can carry, the same worker
// takes every task, and the workers a burst started time out.
func TestPoolReusesTheLastIdleWorker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := NewPool(PoolSize(4), PoolIdleTimeout(time.Second))
		release := make(chan struct{})
		var started sync.WaitGroup
		for range 4 {
			started.Add(1)
			require.NoError(t, p.Submit(func() { started.Done(); <-release }))
		}
		started.Wait()
		close(release)
		synctest.Wait()
		require.Equal(t, 4, p.Stats().Workers)

		for range 8 {
			oneTaskThenHalfAPeriod(t, p)
		}
		assert.Equal(t, 1, p.Stats().Workers, "a light load should keep one worker warm and let the others go")
		require.NoError(t, p.Close())
	})
}

// oneTaskThenHalfAPeriod runs one task on p and then lets half of a
// one-second idle timeout pass, inside a synctest bubble.
func oneTaskThenHalfAPeriod(t *testing.T, p *Pool) {
	t.Helper()
	done := make(chan struct{})
	require.NoError(t, p.Submit(func() { close(done) }))
	<-done
	time.Sleep(time.Second / 2)
	synctest.Wait()
}

func TestPoolBusyWorkerDoesNotExit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := NewPool(PoolSize(1), PoolIdleTimeout(time.Second))
		for range 10 {
			oneTaskThenHalfAPeriod(t, p)
			assert.Equal(t, 1, p.Stats().Workers)
		}
		require.NoError(t, p.Close())
	})
}

func TestPoolNestedSubmitCallerRuns(t *testing.T) {
	p := NewPool(PoolSize(2), PoolQueue(0))
	var ran atomic.Int64
	var wg sync.WaitGroup
	var rec func(depth int)
	rec = func(depth int) {
		defer wg.Done()
		ran.Add(1)
		if depth == 0 {
			return
		}
		for range 2 {
			wg.Add(1)
			assert.NoError(t, p.Submit(func() { rec(depth - 1) }))
		}
	}
	wg.Add(1)
	require.NoError(t, p.Submit(func() { rec(10) }))
	wg.Wait()
	require.NoError(t, p.Close())
	assert.Equal(t, int64(1<<11-1), ran.Load())
}

// TestPoolStress submits from many goroutines while the pool closes, under
// every policy, and checks that each task whose Submit returned nil ran
// exactly once and every other task never ran.
func TestPoolStress(t *testing.T) {
	for _, policy := range []FullPolicy{CallerRuns, Block, Reject} {
		for _, queue := range []int{0, 16} {
			t.Run(fmt.Sprintf("policy=%v/queue=%d", policy, queue), func(t *testing.T) {
				const submitters, perSubmitter = 64, 200
				p := NewPool(PoolSize(4), PoolQueue(queue), PoolWhenFull(policy), PoolIdleTimeout(time.Millisecond))
				runs := make([]atomic.Int32, submitters*perSubmitter)
				accepted := make([]bool, len(runs))
				var wg sync.WaitGroup
				for s := range submitters {
					wg.Go(func() {
						for i := range perSubmitter {
							n := s*perSubmitter + i
							err := p.Submit(func() {
								runs[n].Add(1)
								if n%7 == 0 {
									runtime.Gosched()
								}
							})
							accepted[n] = err == nil
							if err != nil && !errors.Is(err, ErrPoolClosed) && !errors.Is(err, ErrPoolFull) {
								t.Errorf("Submit: unexpected error %v", err)
							}
						}
					})
				}
				time.Sleep(time.Millisecond)
				require.NoError(t, p.Close())
				wg.Wait()
				okCount := 0
				for n := range runs {
					want := int32(0)
					if accepted[n] {
						want = 1
						okCount++
					}
					if got := runs[n].Load(); got != want {
						t.Fatalf("task %d ran %d times, want %d (accepted=%v)", n, got, want, accepted[n])
					}
				}
				assert.Equal(t, uint64(okCount), p.Stats().Completed)
				assert.Zero(t, p.Stats().Workers)
			})
		}
	}
}

// TestPoolIdleExitRace makes workers time out constantly while tasks keep
// arriving, to catch a queued task left without a worker.
func TestPoolIdleExitRace(t *testing.T) {
	p := NewPool(PoolSize(2), PoolQueue(4), PoolWhenFull(Block), PoolIdleTimeout(time.Microsecond))
	var ran atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range 500 {
				var done sync.WaitGroup
				done.Add(1)
				require.NoError(t, p.Submit(func() { ran.Add(1); done.Done() }))
				if i%3 == 0 {
					done.Wait() // let the pool go idle now and then
				}
			}
		})
	}
	wg.Wait()
	require.NoError(t, p.Close())
	assert.Equal(t, int64(8*500), ran.Load())
}

func TestPoolTrySubmitNeverRunsOnCaller(t *testing.T) {
	p := NewPool(PoolSize(1), PoolQueue(1))
	release := make(chan struct{})
	fillPool(t, p, 1, 1, release)
	assert.Zero(t, p.Stats().CallerRan)
	assert.Equal(t, 1, p.Stats().Running)
	assert.Equal(t, 1, p.Stats().Queued)
	close(release)
	require.NoError(t, p.Close())
}

func TestPoolSubmitDoesNotAllocate(t *testing.T) {
	p := NewPool(PoolSize(1), PoolQueue(0), PoolWhenFull(Block), PoolIdleTimeout(time.Hour))
	defer p.Close()
	var wg sync.WaitGroup
	task := func() { wg.Done() }
	allocs := testing.AllocsPerRun(1000, func() {
		wg.Add(1)
		_ = p.Submit(task)
		wg.Wait()
	})
	assert.Zero(t, allocs)
}

func TestPoolOptionsValidate(t *testing.T) {
	assert.Panics(t, func() { PoolSize(0) })
	assert.Panics(t, func() { PoolQueue(-1) })
	assert.Panics(t, func() { PoolIdleTimeout(0) })
	assert.Panics(t, func() { PoolWhenFull(FullPolicy(9)) })
	assert.Panics(t, func() { PoolWhenFull(FullPolicy(-1)) })
	assert.NotPanics(t, func() { PoolWhenFull(0) })
}

func TestFullPolicyString(t *testing.T) {
	tests := []struct {
		p    FullPolicy
		want string
	}{
		{CallerRuns, "CallerRuns"},
		{Block, "Block"},
		{Reject, "Reject"},
		{0, "FullPolicy(0)"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, tt.p.String())
	}
}

var _ Executor = (*Pool)(nil)

// TestPoolQueueGrowsOnDemand guards the memory a large PoolQueue costs:
// the whole ring of n slots used to be made when the first task was
// queued, so PoolQueue(math.MaxInt) took 8 GiB (1<<30 slots) for one
// waiting task, and PoolQueue(1<<24) 128 MiB. The ring now grows with
// the tasks that wait.
func TestPoolQueueGrowsOnDemand(t *testing.T) {
	p := NewPool(PoolSize(1), PoolQueue(1<<24))
	defer p.Close()
	release := make(chan struct{})
	defer close(release)
	require.NoError(t, p.Submit(func() { <-release })) // the only worker is busy
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	require.NoError(t, p.Submit(func() {})) // queued
	runtime.ReadMemStats(&after)
	assert.Equal(t, 1, p.Stats().Queued)
	assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1<<20), "bytes allocated to queue one task")
}

// TestPoolQueueRingWrapsAcrossGrowth guards the queue's FIFO order while
// its ring grows: tasks are queued and taken in a pseudo-random
// interleaving, so that the ring grows while its head is mid-ring and
// its tasks wrap around the end, and every take must return the oldest
// task. The capacity (100, not a power of two) must cap both the ring
// and the number of tasks queued.
func TestPoolQueueRingWrapsAcrossGrowth(t *testing.T) {
	const qcap = 100
	p := NewPool(PoolSize(1), PoolQueue(qcap))
	// Pretend the only worker is busy, so that place queues; no worker
	// goroutine exists, so the test takes tasks itself.
	p.workers.Store(p.size)
	defer p.workers.Store(0)
	var (
		ran      []int // ids of the tasks taken, in order
		next     int   // id of the next task to queue
		want     int   // id the next take must return
		rng      = rand.New(rand.NewPCG(1, 2))
		wrapGrow int // growths with the head mid-ring
	)
	take := func() {
		p.mu.Lock()
		task := p.dequeue()
		p.mu.Unlock()
		require.NotNil(t, task)
		task()
		require.Equal(t, want, ran[len(ran)-1], "FIFO order")
		want++
	}
	// Head mid-ring before the first growth: 10 in, 7 out, then fill up
	// past 16 so that the tasks wrap and the ring grows.
	for step := range 3000 {
		queued := p.Stats().Queued
		var doPut bool
		switch {
		case step < 10:
			doPut = true
		case step < 17:
			doPut = false
		case queued == 0:
			doPut = true
		case queued == qcap:
			doPut = false
		default:
			doPut = rng.IntN(100) < 55 // drift upwards, so the ring fills
		}
		if !doPut {
			take()
			continue
		}
		if queued == len(p.queue) && p.head != 0 {
			wrapGrow++
		}
		id := next
		res, w, spawn := p.place(func() { ran = append(ran, id) }, true)
		require.Equal(t, offerOK, res)
		require.Nil(t, w)
		require.False(t, spawn)
		next++
		require.LessOrEqual(t, len(p.queue), qcap)
	}
	assert.Positive(t, wrapGrow, "the ring grew with its head mid-ring")
	// Full: the next task is refused.
	for p.Stats().Queued < qcap {
		id := next
		res, _, _ := p.place(func() { ran = append(ran, id) }, true)
		require.Equal(t, offerOK, res)
		next++
	}
	res, _, _ := p.place(func() { t.Error("refused task ran") }, true)
	assert.Equal(t, offerFull, res)
	for p.Stats().Queued > 0 {
		take()
	}
	assert.Equal(t, next, len(ran), "every queued task taken once")
	assert.Equal(t, qcap, len(p.queue), "ring grew to the capacity and no further")
}

// TestPoolQueueSteadyStateDoesNotAllocate guards the queue's reuse: once
// the ring has grown to fit the load, queueing and taking tasks allocate
// nothing; the ring is kept, not shrunk and regrown.
func TestPoolQueueSteadyStateDoesNotAllocate(t *testing.T) {
	p := NewPool(PoolSize(1), PoolQueue(128), PoolWhenFull(Block), PoolIdleTimeout(time.Hour))
	defer p.Close()
	gate := make(chan struct{})
	var wg sync.WaitGroup
	blocker := func() { <-gate; wg.Done() }
	task := func() { wg.Done() }
	allocs := testing.AllocsPerRun(100, func() {
		wg.Add(101)
		_ = p.Submit(blocker) // the worker is busy until gate
		for range 100 {
			_ = p.Submit(task) // queued
		}
		gate <- struct{}{}
		wg.Wait()
	})
	assert.Zero(t, allocs)
}

// An Async on a Pool of the user's under Block: a node's end that shares
// its successors asked the pool for a helper with Submit, which waited for
// a free worker while holding the pool's only one. The run deadlocked, and
// neither Cancel (the worker waits in Submit, not on the run) nor Close
// ended it. The Async now asks a Pool without waiting, whatever its
// FullPolicy.
func TestAsyncOnABlockingPoolDoesNotDeadlock(t *testing.T) {
	for _, policy := range []FullPolicy{Block, CallerRuns, Reject} {
		t.Run(policy.String(), func(t *testing.T) {
			p := NewPool(PoolSize(1), PoolQueue(0), PoolWhenFull(policy))
			a := newAsync(t, WithExecutor(p))
			// Before the Async's Close, if the run deadlocks: closing the
			// pool ends a Submit that waits under Block.
			t.Cleanup(func() { p.Close() })
			rec := newRecorder()
			root := rec.node("root", ok(1))
			for _, id := range ids(4, "c") {
				rec.node(id, ok(2)).Depend(root, true)
			}
			r, err := a.Start(context.Background(), 0, root)
			require.NoError(t, err)
			requireEnds(t, r, "the run deadlocked on a pool of one under %v", policy)
			require.NoError(t, r.Wait(context.Background()))
			for _, id := range ids(4, "c") {
				assert.Equal(t, 1, rec.count(rec.actions, id), id)
			}
		})
	}
}

// TestZeroPoolRunsTasksOnTheCaller pins what Pool's doc says of the zero
// Pool: no worker, no queue, every task run by Submit on the caller.
func TestZeroPoolRunsTasksOnTheCaller(t *testing.T) {
	var p Pool
	caller := goid()
	var on uint64
	require.NoError(t, p.Submit(func() { on = goid() }))
	assert.Equal(t, caller, on, "the task ran on the caller")
	st := p.Stats()
	assert.Equal(t, 0, st.Workers)
	assert.Equal(t, uint64(1), st.CallerRan)
	assert.NoError(t, p.Close())
	assert.ErrorIs(t, p.Submit(func() {}), ErrPoolClosed)
}

// TestNilPoolRefusesTasks: a nil *Pool (a field never set) panicked with
// a nil dereference. It is not the zero Pool, which runs tasks on the
// caller: Submit refuses the task with an error naming the nil pool,
// Close does nothing, Stats is zero.
func TestNilPoolRefusesTasks(t *testing.T) {
	var p *Pool
	ran := false
	err := p.Submit(func() { ran = true })
	assert.ErrorContains(t, err, "nil *Pool")
	assert.ErrorIs(t, p.Submit(nil), ErrNilTask)
	assert.NoError(t, p.Close())
	assert.Equal(t, PoolStats{}, p.Stats())
	assert.False(t, ran, "the task ran")
}

// TestPoolDrainedQueueKeepsNoTaskAlive: a pool keeps its queue's ring
// for reuse, but not the tasks: each slot is cleared as its task is
// taken, so once the queued tasks have run, one collection frees what
// they captured while the pool is still in use.
func TestPoolDrainedQueueKeepsNoTaskAlive(t *testing.T) {
	const queued = 32
	p := NewPool(PoolSize(1), PoolQueue(queued))
	release := make(chan struct{})
	require.NoError(t, p.Submit(func() { <-release }))
	freed := make(chan struct{}, queued)
	var wg sync.WaitGroup
	for range queued {
		big := tracked(freed)
		wg.Add(1)
		require.NoError(t, p.Submit(func() { big[0]++; wg.Done() }))
	}
	require.Equal(t, queued, p.Stats().Queued)
	close(release)
	wg.Wait()
	requireFreed(t, freed, queued, "after the queued tasks ran, %d of %d were freed: the queue keeps the rest alive")
	require.NoError(t, p.Close())
}

// tracked returns a new 4 KiB object that sends on freed once the
// garbage collector has freed it.
func tracked(freed chan<- struct{}) *[1 << 12]byte {
	big := new([1 << 12]byte)
	runtime.AddCleanup(big, func(struct{}) { freed <- struct{}{} }, struct{}{})
	return big
}

// requireFreed collects garbage until n tracked objects have been freed,
// and fails the test with why (given how many were freed, and n) if
// they have not been within 10 seconds.
func requireFreed(t *testing.T, freed <-chan struct{}, n int, why string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for got := 0; got < n; {
		runtime.GC()
		select {
		case <-freed:
			got++
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			t.Fatalf(why, got, n)
		}
	}
}
