package asynctool

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestKeyedPerKeyOrder submits from thousands of goroutines over a few
// dozen keys: per key, tasks never overlap (checked by the race detector
// on unsynchronised per-key state) and each submitter's tasks for a key
// run in its order; every task runs exactly once.
func TestKeyedPerKeyOrder(t *testing.T) {
	for _, ex := range serialExecutors() {
		t.Run(ex.name, func(t *testing.T) {
			exec, stop := ex.make()
			defer stop()
			k := NewKeyed[string](exec)
			const submitters, each, keys = 2000, 10, 37
			type keyState struct {
				last    map[int]int // submitter -> last sequence run; no lock
				running atomic.Int32
				count   int
			}
			states := make([]*keyState, keys)
			for i := range states {
				states[i] = &keyState{last: map[int]int{}}
			}
			var wg sync.WaitGroup
			wg.Add(submitters * each)
			for g := range submitters {
				go func() {
					for i := range each {
						key := (g + i) % keys
						st := states[key]
						err := k.Submit(fmt.Sprint("user-", key), func() {
							defer wg.Done()
							if st.running.Add(1) != 1 {
								t.Error("two tasks of one key ran at once")
							}
							if prev, ok := st.last[g]; ok && prev >= i {
								t.Errorf("key %d submitter %d: task %d ran after %d", key, g, i, prev)
							}
							st.last[g] = i
							st.count++
							st.running.Add(-1)
						})
						assert.NoError(t, err)
					}
				}()
			}
			wg.Wait()
			k.Close()
			total := 0
			for _, st := range states {
				total += st.count
			}
			assert.Equal(t, submitters*each, total)
			assert.Zero(t, k.Stats().Keys)
			assertNoKeyQueues(t, k)
		})
	}
}

func assertNoKeyQueues[K comparable](t *testing.T, k *Keyed[K]) {
	t.Helper()
	for i := range k.shards {
		sh := &k.shards[i]
		sh.mu.Lock()
		assert.Empty(t, sh.queues, "shard %d still has key queues", i)
		assert.LessOrEqual(t, len(sh.free), keyedFreeQueues)
		sh.mu.Unlock()
	}
}

func TestKeyedDifferentKeysRunInParallel(t *testing.T) {
	k := NewKeyed[int](GoExecutor{})
	bRan := make(chan struct{})
	done := make(chan struct{})
	// Key 1's task waits for key 2's: this would deadlock if keys shared
	// one queue.
	require.NoError(t, k.Submit(1, func() { <-bRan; close(done) }))
	require.NoError(t, k.Submit(2, func() { close(bRan) }))
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("keys did not run in parallel")
	}
	k.Close()
}

func TestKeyedTableShrinks(t *testing.T) {
	p := NewPool(PoolSize(4))
	defer p.Close()
	k := NewKeyed[int](p)
	var wg sync.WaitGroup
	for round := range 10 {
		for key := range 1000 {
			wg.Add(1)
			require.NoError(t, k.Submit(round*1000+key, wg.Done))
		}
		wg.Wait()
		// A key's queue is removed just after its last task returns.
		require.Eventually(t, func() bool { return k.Stats().Keys == 0 }, 10*time.Second, time.Millisecond)
		assertNoKeyQueues(t, k)
	}
	k.Close()
	assert.Equal(t, uint64(10000), k.Stats().Completed)
}

// TestKeyedGivesBackItsTableAfterABurst has 100 000 keys pending at
// once (their drain loops held by the executor until all are
// submitted), then runs them. Each key's queue was removed, but the
// shards' maps kept the room they had grown to, which a Go map never
// gives back: 2.3 MiB stayed allocated for good, 37 MiB after a burst of
// a million keys. A shard now drops a map grown past keyedMapKeep keys
// once it has no key left.
func TestKeyedGivesBackItsTableAfterABurst(t *testing.T) {
	liveHeap := func() int64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapAlloc)
	}
	var loops []func()
	k := NewKeyed[int](ExecutorFunc(func(loop func()) error { loops = append(loops, loop); return nil }))
	before := liveHeap()
	const keys = 100_000
	for key := range keys {
		require.NoError(t, k.Submit(key, func() {}))
	}
	require.Equal(t, keys, k.Stats().Keys)
	for _, loop := range loops {
		loop()
	}
	loops = nil
	require.Zero(t, k.Stats().Keys)
	assert.Less(t, liveHeap()-before, int64(1<<20), "bytes still allocated once every key's tasks have run")
	assert.Equal(t, uint64(keys), k.Stats().Completed)
	k.Close()
}

func TestKeyedCloseDropsQueuedAndWaitsForRunning(t *testing.T) {
	k := NewKeyed[string](GoExecutor{})
	started, release := make(chan struct{}), make(chan struct{})
	require.NoError(t, k.Submit("a", func() { close(started); <-release }))
	<-started
	var ran atomic.Int32
	for range 50 {
		require.NoError(t, k.Submit("a", func() { ran.Add(1) }))
	}
	closed := make(chan struct{})
	go func() { k.Close(); close(closed) }()
	require.Eventually(t, k.closed.Load, 10*time.Second, time.Millisecond, "Close has begun")
	select {
	case <-closed:
		t.Fatal("Close returned while a task was running")
	case <-time.After(20 * time.Millisecond):
	}
	close(release)
	<-closed
	assert.ErrorIs(t, k.Submit("a", func() {}), ErrSerialClosed)
	assert.Zero(t, ran.Load())
	assert.Equal(t, uint64(50), k.Stats().Dropped)
	assertNoKeyQueues(t, k)
	k.Close()
}

func TestKeyedCloseRace(t *testing.T) {
	for _, ex := range serialExecutors() {
		t.Run(ex.name, func(t *testing.T) {
			exec, stop := ex.make()
			defer stop()
			k := NewKeyed[int](exec)
			var accepted, ran atomic.Int64
			var afterClose atomic.Bool
			var wg sync.WaitGroup
			for g := range 1000 {
				wg.Go(func() {
					for i := range 20 {
						err := k.Submit((g+i)%13, func() {
							if afterClose.Load() {
								t.Error("task ran after Close returned")
							}
							ran.Add(1)
						})
						if err == nil {
							accepted.Add(1)
						}
					}
				})
			}
			time.Sleep(time.Millisecond)
			k.Close()
			afterClose.Store(true)
			wg.Wait()
			assert.Equal(t, accepted.Load(), ran.Load()+int64(k.Stats().Dropped))
			assertNoKeyQueues(t, k)
		})
	}
}

func TestKeyedPanicAndGoexit(t *testing.T) {
	var panics atomic.Int32
	k := NewKeyed[int](GoExecutor{}, SerialPanicHandler(func(*PanicError) { panics.Add(1) }))
	var ran []int
	done := make(chan struct{})
	require.NoError(t, k.Submit(1, func() { ran = append(ran, 1); panic("boom") }))
	require.NoError(t, k.Submit(1, runtime.Goexit))
	require.NoError(t, k.Submit(1, func() { ran = append(ran, 2); close(done) }))
	<-done
	k.Close()
	assert.Equal(t, []int{1, 2}, ran)
	assert.Equal(t, int32(1), panics.Load())
	assert.Equal(t, uint64(1), k.Stats().Panicked)
	assert.Equal(t, uint64(3), k.Stats().Completed)
}

func TestKeyedNilTask(t *testing.T) {
	k := NewKeyed[int](nil)
	defer k.Close()
	assert.ErrorIs(t, k.Submit(1, nil), ErrNilTask)
}

// TestKeyedRejectsNaNKey guards per-key order against keys that are not
// equal to themselves. A NaN, or a struct or interface key holding one,
// never finds its own queue: every Submit made a new queue and drain
// loop, so "same key" tasks ran concurrently, and the queues were never
// deleted, so the key table grew. Such keys are refused with ErrNaNKey
// and leave nothing behind; keys that merely look odd (-0 and +0, which
// are equal) keep working.
func TestKeyedRejectsNaNKey(t *testing.T) {
	nan := math.NaN()
	type pair struct {
		id string
		f  float64
	}
	k := NewKeyed[float64](nil)
	ks := NewKeyed[pair](nil)
	ka := NewKeyed[any](nil)
	kc := NewKeyed[complex128](nil)
	ran := func() {}
	for _, err := range []error{
		k.Submit(nan, ran),
		k.Submit(nan, ran),
		ks.Submit(pair{"a", nan}, ran),
		ka.Submit(nan, ran),
		ka.Submit(pair{"a", nan}, ran),
		kc.Submit(complex(0, nan), ran),
	} {
		assert.ErrorIs(t, err, ErrNaNKey)
	}
	var wg sync.WaitGroup
	wg.Add(3)
	require.NoError(t, k.Submit(0, wg.Done))
	require.NoError(t, k.Submit(math.Copysign(0, -1), wg.Done))
	require.NoError(t, ks.Submit(pair{"a", 1}, wg.Done))
	wg.Wait()
	for _, c := range []interface {
		Close()
		Stats() SerialStats
	}{k, ks, ka, kc} {
		c.Close()
		st := c.Stats()
		assert.Zero(t, st.Keys)
		assert.Zero(t, st.Dropped)
	}
	assert.Equal(t, uint64(2), k.Stats().Completed)
	n := 0
	for i := range k.shards {
		n += len(k.shards[i].queues)
	}
	assert.Zero(t, n, "queues left in the key table")
}

// TestKeyedShutdownRunsAcceptedTasks: Shutdown refuses new tasks, also
// from inside a task, and runs every accepted task in order per key
// before it returns nil.
func TestKeyedShutdownRunsAcceptedTasks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := NewKeyed[string](GoExecutor{})
		release := make(chan struct{})
		// a's and b's tasks run in parallel, each key's in order.
		var mu sync.Mutex
		got := map[string][]int{}
		var inner error
		for _, key := range []string{"a", "b"} {
			require.NoError(t, k.Submit(key, func() { <-release }))
			for i := range 3 {
				require.NoError(t, k.Submit(key, func() {
					mu.Lock()
					defer mu.Unlock()
					got[key] = append(got[key], i)
				}))
			}
		}
		require.NoError(t, k.Submit("a", func() { inner = k.Submit("c", func() {}) }))
		shut := make(chan error, 1)
		go func() { shut <- k.Shutdown(context.Background()) }()
		synctest.Wait()
		assert.ErrorIs(t, k.Submit("a", func() {}), ErrSerialClosed)
		assert.ErrorIs(t, k.Submit("new", func() {}), ErrSerialClosed)
		assert.Empty(t, shut, "Shutdown returned while tasks were queued")
		close(release)
		require.NoError(t, <-shut)
		assert.Equal(t, map[string][]int{"a": {0, 1, 2}, "b": {0, 1, 2}}, got)
		assert.ErrorIs(t, inner, ErrSerialClosed)
		st := k.Stats()
		assert.Equal(t, uint64(9), st.Completed)
		assert.Zero(t, st.Dropped)
		assertNoKeyQueues(t, k)
		assert.ErrorIs(t, k.Shutdown(context.Background()), ErrSerialClosed, "second Shutdown")
	})
}

// TestKeyedShutdownUntilCtx: when ctx ends first, Shutdown drops the tasks
// that have not started and returns ctx's error once the running ones
// have returned; a Close during Shutdown makes it report ErrSerialClosed.
func TestKeyedShutdownUntilCtx(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := NewKeyed[int](GoExecutor{})
		release := make(chan struct{})
		require.NoError(t, k.Submit(1, func() { <-release }))
		require.NoError(t, k.Submit(1, func() { t.Error("a task after the deadline ran") }))
		go func() {
			time.Sleep(2 * time.Second)
			close(release)
		}()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		assert.ErrorIs(t, k.Shutdown(ctx), context.DeadlineExceeded)
		assert.Equal(t, 2*time.Second, time.Since(start), "Shutdown waits for the running task")
		assert.Equal(t, uint64(1), k.Stats().Dropped)
	})
	synctest.Test(t, func(t *testing.T) {
		k := NewKeyed[int](GoExecutor{})
		started, release := make(chan struct{}), make(chan struct{})
		require.NoError(t, k.Submit(1, func() { close(started); <-release }))
		require.NoError(t, k.Submit(1, func() { t.Error("a task Close dropped ran") }))
		<-started
		shut := make(chan error, 1)
		go func() { shut <- k.Shutdown(context.Background()) }()
		synctest.Wait()
		go k.Close()
		synctest.Wait()
		close(release)
		assert.ErrorIs(t, <-shut, ErrSerialClosed)
		assert.Equal(t, uint64(1), k.Stats().Dropped)
		synctest.Wait()
	})
}

// TestKeyedRefusesUnhashableKey: a Keyed[any] (or a key type with an
// interface field) compiles with a key that holds a slice, map or func,
// which Go cannot hash: Submit panicked with the runtime's "hash of
// unhashable type", where a NaN key, the other key that cannot work, gets
// ErrNaNKey. It now gets ErrUnhashableKey, leaves nothing behind, and the
// Keyed goes on taking good keys.
func TestKeyedRefusesUnhashableKey(t *testing.T) {
	type wrapped struct {
		id  string
		any any
	}
	k := NewKeyed[any](nil)
	kw := NewKeyed[wrapped](nil)
	ran := false
	task := func() { ran = true }
	for name, submit := range map[string]func() error{
		"slice":           func() error { return k.Submit([]int{1}, task) },
		"map":             func() error { return k.Submit(map[string]int{}, task) },
		"func":            func() error { return k.Submit(func() {}, task) },
		"struct of slice": func() error { return k.Submit(wrapped{"a", []int{1}}, task) },
		"field of map":    func() error { return kw.Submit(wrapped{"a", map[int]int{}}, task) },
	} {
		var err error
		require.NotPanics(t, func() { err = submit() }, name)
		assert.ErrorIs(t, err, ErrUnhashableKey, name)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	require.NoError(t, k.Submit("u1", wg.Done))
	require.NoError(t, kw.Submit(wrapped{"a", 1}, wg.Done))
	wg.Wait()
	k.Close()
	kw.Close()
	assert.False(t, ran, "a refused task ran")
	for _, st := range []SerialStats{k.Stats(), kw.Stats()} {
		assert.Equal(t, uint64(1), st.Completed)
		assert.Zero(t, st.Keys)
	}
}

// TestZeroKeyedRefusesTasks: a zero Keyed's Submit panicked on its nil
// map, with its shard's lock held.
func TestZeroKeyedRefusesTasks(t *testing.T) {
	var k Keyed[string]
	assert.ErrorContains(t, k.Submit("u1", func() {}), "NewKeyed")
	assert.ErrorContains(t, k.Submit("u1", func() {}), "NewKeyed", "and again: no lock was left held")
	assert.NoError(t, k.Shutdown(context.Background()))
	k.Close()
}

// TestNilKeyedRefusesTasks: a nil *Keyed (a field never set) panicked
// with a nil dereference; it refuses tasks as the zero Keyed does.
func TestNilKeyedRefusesTasks(t *testing.T) {
	var k *Keyed[string]
	ran := false
	assert.ErrorContains(t, k.Submit("u1", func() { ran = true }), "NewKeyed")
	assert.NoError(t, k.Shutdown(context.Background()))
	k.Close()
	assert.Equal(t, SerialStats{}, k.Stats())
	assert.False(t, ran)
}

// TestKeyedSteadySubmitAllocatesNothing (run by make test's allocs
// target, without the race detector): a shard whose keys come and go
// keeps its map while it has never held more than keyedMapKeep keys, and
// a drained key's queue is reused, so a Keyed under a steady light load
// does not allocate per task.
func TestKeyedSteadySubmitAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	k := NewKeyed[int](ExecutorFunc(func(loop func()) error { loop(); return nil }))
	ran := 0
	task := func() { ran++ }
	require.NoError(t, k.Submit(1, task)) // makes the shard's map and the queue
	allocs := testing.AllocsPerRun(100, func() { _ = k.Submit(1, task) })
	assert.Zero(t, allocs)
	assert.Equal(t, 101+1, ran)
	require.NoError(t, k.Shutdown(context.Background()))
}
