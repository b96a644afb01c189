package asynctool

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// h107BrokenExecutor is an Executor whose first Submit panics, as a
// channel-based executor does once its channel is closed; with keep, it
// keeps that task first, to run it later (kept). Later Submits start a
// goroutine.
func h107BrokenExecutor(keep bool) (Executor, chan func()) {
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

// h107PanicOf calls f and returns what it panicked with.
func h107PanicOf(f func()) (v any) {
	defer func() { v = recover() }()
	f()
	return nil
}

// h107SerialLog runs tasks that record their number, note whether two
// ever ran at once, and, for the first, signal that it started and wait
// for release.
type h107SerialLog struct {
	mu      sync.Mutex
	ran     []int
	running atomic.Int32
	overlap atomic.Bool
	started chan struct{}
	release chan struct{}
}

func newH107SerialLog() *h107SerialLog {
	return &h107SerialLog{started: make(chan struct{}), release: make(chan struct{})}
}

func (l *h107SerialLog) task(i int) func() {
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

// h107Queue is a Serial or a Keyed[int], seen through what the tests of a
// panicking Submit use.
type h107Queue struct {
	keys     int // keys it runs apart: 1 for a Serial, whose submit ignores the key
	submit   func(key int, task func()) error
	shutdown func(context.Context) error
	keysLeft func() int // nil for a Serial, which holds no keys
}

// h107Queues opens each kind of queue on an executor.
var h107Queues = []struct {
	name string
	open func(Executor) h107Queue
}{
	{"Serial", func(exec Executor) h107Queue {
		s := NewSerial(exec)
		return h107Queue{keys: 1, submit: func(_ int, task func()) error { return s.Submit(task) }, shutdown: s.Shutdown}
	}},
	{"Keyed", func(exec Executor) h107Queue {
		k := NewKeyed[int](exec)
		return h107Queue{keys: 6, submit: k.Submit, shutdown: k.Shutdown, keysLeft: func() int { return k.Stats().Keys }}
	}},
}

// TestH107SurvivesAPanickingSubmit: a panic in the executor's Submit goes
// on up Serial.Submit's (Keyed.Submit's) caller's stack, but it left the
// drain loop marked as scheduled with none running (for a Keyed, the
// key's queue registered with no drain loop): the task and every later
// one never ran, and Close and Shutdown waited for ever. The queue now
// starts its loop on a goroutine of its own, as when the executor refuses
// it; if the executor kept the loop and runs it later too (kept), that
// second loop finds the queue held and returns, so tasks still run one at
// a time.
func TestH107SurvivesAPanickingSubmit(t *testing.T) {
	for _, kind := range h107Queues {
		t.Run(kind.name, func(t *testing.T) {
			for _, keep := range []bool{false, true} {
				name := map[bool]string{false: "dropped", true: "kept"}[keep]
				t.Run(name, func(t *testing.T) {
					exec, kept := h107BrokenExecutor(keep)
					q := kind.open(exec)
					l := newH107SerialLog()
					assert.Equal(t, "executor broke", h107PanicOf(func() { _ = q.submit(0, l.task(1)) }),
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
					require.NoError(t, h107ShutdownWithin(t, q.shutdown))
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
