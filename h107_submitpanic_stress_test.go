package asynctool

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// h107FlakyExecutor starts a goroutine per task, but, until mended, one
// Submit in five panics; half of those keep the task first and run it
// later, from a goroutine of their own, after a random pause. late waits
// for those.
type h107FlakyExecutor struct {
	late   sync.WaitGroup
	mended atomic.Bool
}

func (e *h107FlakyExecutor) Submit(task func()) error {
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

// TestH107FlakyExecutorLosesNothing: with an executor whose Submit
// panics now and then, some after keeping the drain loop they were given
// and running it later, when a Keyed's queue may have been reused for
// another key, every task accepted still runs once, in order per key, one
// at a time per key (a Serial's tasks all have one key), and Shutdown
// returns with no key left. Before the fix the first panic left its
// key's tasks unrun and Shutdown waiting for ever.
func TestH107FlakyExecutorLosesNothing(t *testing.T) {
	for _, kind := range h107Queues {
		t.Run(kind.name, func(t *testing.T) {
			for iter := range 20 {
				exec := &h107FlakyExecutor{}
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
				err := h107ShutdownWithin(t, q.shutdown)
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

// h107ShutdownWithin calls shutdown with a ctx of 10 seconds, and fails
// the test if it has not returned 10 seconds later: once ctx ends,
// Shutdown closes, which waited for ever on the code before the fix.
func h107ShutdownWithin(t *testing.T, shutdown func(context.Context) error) error {
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
