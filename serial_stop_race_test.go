package asynctool

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stopRaceExecutor is an executor for the stop-race tests, with what the
// test must do once the Serial or Keyed is stopped: finish runs the drain
// loops the executor still holds (late loops, which must find nothing),
// and waits for them.
type stopRaceExecutor struct {
	exec   Executor
	finish func()
	// panics: Submit may panic (after keeping the task to run later), so
	// only Submit may be used, never a timer's start of a loop.
	panics bool
}

// stopRaceExecutors are every kind of executor a Serial or Keyed may be
// given: goroutines, a Pool under each policy with little room, one that
// runs tasks inline, one that refuses them, one that runs them late (on a
// timer, often after Close), another Serial, and one whose Submit panics
// now and then.
var stopRaceExecutors = []struct {
	name string
	make func() stopRaceExecutor
}{
	{"Go", func() stopRaceExecutor { return stopRaceExecutor{exec: GoExecutor{}, finish: func() {}} }},
	{"PoolCallerRuns", func() stopRaceExecutor {
		p := NewPool(PoolSize(1), PoolQueue(1), PoolWhenFull(CallerRuns))
		return stopRaceExecutor{exec: p, finish: func() { _ = p.Close() }}
	}},
	{"PoolBlock", func() stopRaceExecutor {
		p := NewPool(PoolSize(2), PoolQueue(0), PoolWhenFull(Block))
		return stopRaceExecutor{exec: p, finish: func() { _ = p.Close() }}
	}},
	{"PoolReject", func() stopRaceExecutor {
		p := NewPool(PoolSize(1), PoolQueue(0), PoolWhenFull(Reject))
		return stopRaceExecutor{exec: p, finish: func() { _ = p.Close() }}
	}},
	{"Inline", func() stopRaceExecutor {
		return stopRaceExecutor{exec: ExecutorFunc(func(task func()) error { task(); return nil }), finish: func() {}}
	}},
	{"Refusing", func() stopRaceExecutor {
		refused := errors.New("refused")
		return stopRaceExecutor{exec: ExecutorFunc(func(func()) error { return refused }), finish: func() {}}
	}},
	{"Late", func() stopRaceExecutor {
		// A delayed task's timer may hand it a loop after Close has
		// returned: once finished, it refuses tasks, as a closed Pool
		// does.
		var (
			mu     sync.Mutex
			closed bool
			wg     sync.WaitGroup
		)
		exec := ExecutorFunc(func(task func()) error {
			mu.Lock()
			defer mu.Unlock()
			if closed {
				return ErrPoolClosed
			}
			wg.Add(1)
			time.AfterFunc(time.Duration(rand.IntN(300))*time.Microsecond, func() {
				defer wg.Done()
				task()
			})
			return nil
		})
		return stopRaceExecutor{exec: exec, finish: func() {
			mu.Lock()
			closed = true
			mu.Unlock()
			wg.Wait()
		}}
	}},
	{"Serial", func() stopRaceExecutor {
		// Another Serial, which runs every drain loop on one lane: once
		// it has shut down it refuses loops, which then run on goroutines
		// of their own.
		outer := NewSerial(GoExecutor{})
		return stopRaceExecutor{exec: outer, finish: func() { _ = outer.Shutdown(context.Background()) }}
	}},
	{"Panicking", func() stopRaceExecutor {
		e := &flakyExecutor{}
		return stopRaceExecutor{exec: e, finish: e.late.Wait, panics: true}
	}},
}

// stopRaceRounds is how many rounds each executor gets: the race
// detector slows each down.
func stopRaceRounds() int {
	if testing.Short() {
		return 5
	}
	if raceEnabled {
		return 25
	}
	return 60
}

// stopFuncs are a Serial's or a Keyed's Close and Shutdown.
type stopFuncs struct {
	close    func()
	shutdown func(context.Context) error
}

// stopRaceStops are the ways a round stops its Serial or Keyed, while its
// producers still submit. Each returns whether every accepted task must
// have run (or been cancelled) once it returns: a Shutdown that returned
// nil.
var stopRaceStops = []struct {
	name string
	stop func(stopFuncs) (allRan bool)
}{
	{"Close", func(f stopFuncs) bool { f.close(); return false }},
	{"CloseTwiceAtOnce", func(f stopFuncs) bool {
		var wg sync.WaitGroup
		wg.Go(f.close)
		f.close()
		wg.Wait()
		return false
	}},
	{"Shutdown", func(f stopFuncs) bool { return f.shutdown(context.Background()) == nil }},
	{"ShutdownWhoseCtxEnds", func(f stopFuncs) bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rand.IntN(200))*time.Microsecond)
		defer cancel()
		return f.shutdown(ctx) == nil
	}},
	{"ShutdownAndClose", func(f stopFuncs) bool {
		var wg sync.WaitGroup
		wg.Go(f.close)
		err := f.shutdown(context.Background())
		wg.Wait()
		return err == nil
	}},
}

// stopRaceTask is one task a producer offers, and what became of it.
type stopRaceTask struct {
	ran       atomic.Int32
	accepted  bool  // written by its producer, read once the producers are done
	cancelled bool  // its cancel reported true; likewise
	ranByStop int32 // ran when the stop returned
}

// TestSerialStopRaceLosesNothing races Close and Shutdown (with a ctx
// that may end, and with Close beside it) against producers that Submit,
// SubmitAfter (with and without a delay) and cancel, on every kind of
// executor, and then runs the drain loops the executor still held. Every
// accepted task must run once, or be cancelled (cancel true) or dropped,
// and the counters must say so exactly, also after the late loops ran;
// tasks run one at a time, each producer's undelayed tasks in its order;
// a Shutdown that returns nil has run every accepted task not cancelled;
// nothing is left queued or delayed.
func TestSerialStopRaceLosesNothing(t *testing.T) {
	eachStopRace(t, serialStopRaceRound)
}

// eachStopRace runs round on every kind of executor with every way to
// stop, stopRaceRounds times each.
func eachStopRace(t *testing.T, round func(t *testing.T, round int, ex stopRaceExecutor, stop func(stopFuncs) bool)) {
	for _, ex := range stopRaceExecutors {
		for _, st := range stopRaceStops {
			t.Run(ex.name+"/"+st.name, func(t *testing.T) {
				for r := range stopRaceRounds() {
					round(t, r, ex.make(), st.stop)
				}
			})
		}
	}
}

func serialStopRaceRound(t *testing.T, round int, ex stopRaceExecutor, stop func(stopFuncs) bool) {
	t.Helper()
	const producers, tasks = 3, 60
	s := NewSerial(ex.exec)
	var (
		all     [producers][tasks]stopRaceTask
		busy    atomic.Int32
		overlap atomic.Bool
		last    [producers]int // the last undelayed task run, per producer
		order   atomic.Bool
		wg      sync.WaitGroup
	)
	for g := range producers {
		last[g] = -1
		wg.Go(func() {
			var cancels []func() bool
			var cancelOf []int
			for i := range tasks {
				task := &all[g][i]
				delayed := !ex.panics && rand.IntN(3) == 0
				var d time.Duration
				if delayed && rand.IntN(2) == 0 {
					d = time.Duration(1+rand.IntN(300)) * time.Microsecond
				}
				fn := func() {
					if busy.Add(1) != 1 {
						overlap.Store(true)
					}
					defer busy.Add(-1)
					task.ran.Add(1)
					if d == 0 {
						if last[g] >= i {
							order.Store(true)
						}
						last[g] = i
					}
				}
				var err error
				if delayed {
					var cancel func() bool
					cancel, err = s.SubmitAfter(d, fn)
					if err == nil {
						cancels = append(cancels, cancel)
						cancelOf = append(cancelOf, i)
					}
				} else {
					err = submitThroughPanic(func() error { return s.Submit(fn) })
				}
				task.accepted = err == nil
				if err != nil && !errors.Is(err, ErrSerialClosed) {
					t.Errorf("round %d: Submit: %v", round, err)
				}
				if n := len(cancels); n > 0 && rand.IntN(4) == 0 {
					j := rand.IntN(n)
					if cancels[j]() {
						all[g][cancelOf[j]].cancelled = true
					}
					cancels[j], cancelOf[j] = cancels[n-1], cancelOf[n-1]
					cancels, cancelOf = cancels[:n-1], cancelOf[:n-1]
				}
			}
		})
	}
	time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
	allRan := stop(stopFuncs{close: s.Close, shutdown: s.Shutdown})
	for g := range producers {
		for i := range tasks {
			all[g][i].ranByStop = all[g][i].ran.Load()
		}
	}
	wg.Wait()
	s.Close() // idempotent; a no-op after a Shutdown that returned nil
	before := s.Stats()
	ex.finish() // the late drain loops: they must find nothing
	after := s.Stats()
	require.Equal(t, before, after, "round %d: the late drain loops changed the counters", round)

	var accepted, ran, cancelled uint64
	for g := range producers {
		for i := range tasks {
			task := &all[g][i]
			n := task.ran.Load()
			require.LessOrEqual(t, n, int32(1), "round %d: task %d of producer %d ran %d times", round, i, g, n)
			if !task.accepted {
				require.Zero(t, n, "round %d: a refused task ran", round)
				continue
			}
			accepted++
			ran += uint64(n)
			if task.cancelled {
				cancelled++
				require.Zero(t, n, "round %d: a task ran although its cancel reported true", round)
			} else if allRan {
				require.Equal(t, int32(1), task.ranByStop, "round %d: Shutdown returned nil before task %d of producer %d ran", round, i, g)
			}
		}
	}
	assert.False(t, overlap.Load(), "round %d: two tasks ran at once", round)
	assert.False(t, order.Load(), "round %d: a producer's tasks ran out of order", round)
	require.Equal(t, ran, after.Completed, "round %d: Completed", round)
	require.Equal(t, cancelled, after.Cancelled, "round %d: Cancelled", round)
	require.Equal(t, accepted, after.Completed+after.Cancelled+after.Dropped,
		"round %d: accepted tasks neither ran, nor were cancelled, nor were dropped (%+v)", round, after)
	if allRan {
		require.Zero(t, after.Dropped, "round %d: Dropped after a Shutdown that returned nil", round)
	}
	require.Zero(t, after.Queued, "round %d: Queued", round)
	require.Zero(t, after.Delayed, "round %d: Delayed", round)
}

// TestKeyedStopRaceLosesNothing is TestSerialStopRaceLosesNothing for a
// Keyed: tasks of one key run one at a time, each producer's in its order
// per key, every accepted task runs once or is dropped, and no key is
// left once the late drain loops have run.
func TestKeyedStopRaceLosesNothing(t *testing.T) {
	eachStopRace(t, keyedStopRaceRound)
}

func keyedStopRaceRound(t *testing.T, round int, ex stopRaceExecutor, stop func(stopFuncs) bool) {
	t.Helper()
	const producers, tasks, keys = 3, 60, 4
	k := NewKeyed[int](ex.exec)
	var (
		all     [producers][tasks]stopRaceTask
		busy    [keys]atomic.Int32
		overlap atomic.Bool
		last    [producers][keys]int
		order   atomic.Bool
		wg      sync.WaitGroup
	)
	for g := range producers {
		for key := range keys {
			last[g][key] = -1
		}
		wg.Go(func() {
			for i := range tasks {
				task := &all[g][i]
				key := rand.IntN(keys)
				fn := func() {
					if busy[key].Add(1) != 1 {
						overlap.Store(true)
					}
					defer busy[key].Add(-1)
					task.ran.Add(1)
					if last[g][key] >= i {
						order.Store(true)
					}
					last[g][key] = i
				}
				err := submitThroughPanic(func() error { return k.Submit(key, fn) })
				task.accepted = err == nil
				if err != nil && !errors.Is(err, ErrSerialClosed) {
					t.Errorf("round %d: Submit: %v", round, err)
				}
			}
		})
	}
	time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
	allRan := stop(stopFuncs{close: k.Close, shutdown: k.Shutdown})
	for g := range producers {
		for i := range tasks {
			all[g][i].ranByStop = all[g][i].ran.Load()
		}
	}
	wg.Wait()
	k.Close()
	before := k.Stats()
	ex.finish()
	after := k.Stats()
	require.Equal(t, before, after, "round %d: the late drain loops changed the counters", round)

	var accepted, ran uint64
	for g := range producers {
		for i := range tasks {
			task := &all[g][i]
			n := task.ran.Load()
			require.LessOrEqual(t, n, int32(1), "round %d: task %d of producer %d ran %d times", round, i, g, n)
			if !task.accepted {
				require.Zero(t, n, "round %d: a refused task ran", round)
				continue
			}
			accepted++
			ran += uint64(n)
			if allRan {
				require.Equal(t, int32(1), task.ranByStop, "round %d: Shutdown returned nil before task %d of producer %d ran", round, i, g)
			}
		}
	}
	assert.False(t, overlap.Load(), "round %d: two tasks of one key ran at once", round)
	assert.False(t, order.Load(), "round %d: a producer's tasks of one key ran out of order", round)
	require.Equal(t, ran, after.Completed, "round %d: Completed", round)
	require.Equal(t, accepted, after.Completed+after.Dropped,
		"round %d: accepted tasks neither ran nor were dropped (%+v)", round, after)
	if allRan {
		require.Zero(t, after.Dropped, "round %d: Dropped after a Shutdown that returned nil", round)
	}
	require.Zero(t, after.Keys, "round %d: Keys", round)
	assertNoKeyQueues(t, k)
}

// submitThroughPanic calls submit and returns its error, or nil if it
// panicked: the executor's panic goes on up Submit's caller's stack, and
// the task is accepted all the same.
func submitThroughPanic(submit func() error) (err error) {
	defer func() {
		if recover() != nil {
			err = nil
		}
	}()
	return submit()
}
