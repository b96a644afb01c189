package asynctool

import (
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGoexitOnAFullBlockingPoolCarriesOn runs a Serial and a Keyed on a
// one-worker Pool with no queue under Block, and queues a task behind one
// that calls runtime.Goexit (a test's t.FailNow). The loop that carries
// on after the Goexit is handed to the pool, whose only worker is the
// goroutine that is exiting: asked for from that goroutine, before its
// exit has given the worker's place to a fresh goroutine, the pool has
// no room, and the queue waited for ever.
func TestGoexitOnAFullBlockingPoolCarriesOn(t *testing.T) {
	queues := []struct {
		name   string
		submit func(p *Pool) (submit func(func()) error, stats func() SerialStats, close func())
	}{
		{"Serial", func(p *Pool) (func(func()) error, func() SerialStats, func()) {
			s := NewSerial(p)
			return s.Submit, s.Stats, s.Close
		}},
		{"Keyed", func(p *Pool) (func(func()) error, func() SerialStats, func()) {
			k := NewKeyed[int](p)
			return func(f func()) error { return k.Submit(1, f) }, k.Stats, k.Close
		}},
	}
	for _, q := range queues {
		t.Run(q.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := NewPool(PoolSize(1), PoolQueue(0), PoolWhenFull(Block))
				submit, stats, closeQueue := q.submit(p)
				done := make(chan struct{})
				require.NoError(t, submit(runtime.Goexit))
				require.NoError(t, submit(func() { close(done) }))
				select {
				case <-done:
				case <-time.After(time.Minute):
					t.Error("the task queued behind a Goexit has not run a minute later")
				}
				closeQueue()
				require.NoError(t, p.Close())
				st := stats()
				assert.Equal(t, uint64(2), st.Completed, "Completed (the Goexit and the next task)")
				assert.Zero(t, st.Dropped, "Dropped")
			})
		})
	}
}
