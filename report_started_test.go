package asynctool

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A node that a goroutine claimed and the deadline's sweep ended before
// its worker was called counts as not started when timings are on: Ran,
// Attempts, Reason and the OnNodeEnd event all say so. Runs whose deadline
// falls while the goroutines claim a fan's nodes hit that window now and
// then; after Close, when every worker has returned, each node's report
// must say whether its worker was called, both ways.
func TestReportOfANodeStoppedAsItWasClaimed(t *testing.T) {
	const n = 64
	for iter := range 400 {
		calls := make([]atomic.Int32, n+2)
		var ended endEvents
		a := New(WithHooks(&Hooks{OnNodeEnd: func(_ context.Context, ev NodeEvent) { ended.put(ev) }}))
		work := func(k int) Worker[int, int] {
			return WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
				calls[k].Add(1)
				return k, nil
			})
		}
		root := NewWrapper("root", work(0), 0)
		sink := NewWrapper("sink", work(n+1), 0)
		for k := 1; k <= n; k++ {
			w := NewWrapper(fmt.Sprint("n", k), work(k), 0).Depend(root, true)
			sink.Depend(w, true)
		}
		run, err := a.Start(context.Background(), time.Duration(iter%40)*time.Microsecond+time.Nanosecond, root)
		require.NoError(t, err)
		_ = run.Wait(context.Background())
		require.NoError(t, a.Close())
		rep := run.Report()
		for _, nr := range rep.Nodes {
			k := 0
			switch nr.ID {
			case "root":
			case "sink":
				k = n + 1
			default:
				_, err := fmt.Sscanf(nr.ID, "n%d", &k)
				require.NoError(t, err)
			}
			called := calls[k].Load() > 0
			require.Equal(t, called, nr.Ran, "iteration %d, node %s: %s", iter, nr.ID, nr.Reason)
			ev, ok := ended.get(nr.ID)
			if !called {
				require.Zero(t, nr.Attempts, "iteration %d, node %s", iter, nr.ID)
				require.NotContains(t, nr.Reason, "stopped while running", "iteration %d, node %s", iter, nr.ID)
				if ok {
					require.Zero(t, ev.Attempt, "iteration %d, node %s's OnNodeEnd", iter, nr.ID)
					require.NotContains(t, ev.Reason, "stopped while running", "iteration %d, node %s's OnNodeEnd", iter, nr.ID)
				}
			} else if ok {
				// The converse: the sweep can end a node
				// after its goroutine looked at the deadline and before
				// it wrote the start time; a worker called all the same
				// would have been reported as not started.
				require.NotZero(t, ev.Attempt, "iteration %d, node %s's OnNodeEnd: %s (report: %s)", iter, nr.ID, ev.Reason, nr.Reason)
				require.NotContains(t, ev.Reason, "stopped before it started", "iteration %d, node %s's OnNodeEnd", iter, nr.ID)
			}
		}
	}
}

// endEvents keeps the last OnNodeEnd event of each node.
type endEvents struct {
	mu  sync.Mutex
	evs map[string]NodeEvent
}

func (m *endEvents) put(ev NodeEvent) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.evs == nil {
		m.evs = map[string]NodeEvent{}
	}
	m.evs[ev.ID] = ev
}

func (m *endEvents) get(id string) (NodeEvent, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ev, ok := m.evs[id]
	return ev, ok
}

// The rule itself, on a run whose node the deadline stopped while its
// worker ran: with its start time taken back, as if the sweep had ended
// it the instant a goroutine claimed it, the report says it was stopped
// before it started.
func TestReportCountsANodeWithoutAStartTimeAsNotStarted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New(WithTimings(true))
		defer a.Close()
		slow := NewWrapper("slow", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
			<-ctx.Done()
			return 0, ctx.Err()
		}), 0)
		run, err := a.Start(context.Background(), 10*time.Millisecond, slow)
		require.NoError(t, err)
		require.ErrorIs(t, run.Wait(context.Background()), context.DeadlineExceeded)
		synctest.Wait()
		nr := run.Report().Nodes[0]
		assert.True(t, nr.Ran)
		assert.Equal(t, 1, nr.Attempts)
		assert.True(t, strings.HasPrefix(nr.Reason, "stopped while running"), nr.Reason)

		run.times[0].start.Store(0)
		nr = run.Report().Nodes[0]
		assert.False(t, nr.Ran)
		assert.Zero(t, nr.Attempts)
		assert.Equal(t, "stopped before it started: context deadline exceeded", nr.Reason)
	})
}
