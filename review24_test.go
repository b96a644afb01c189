package asynctool

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The converse of TestReportOfANodeStoppedAsItWasClaimed: a node whose
// worker was called must not be reported, by its OnNodeEnd event, as not
// started. The sweep can end a node after its goroutine looked at the
// deadline and before it wrote the start time; the worker is called all
// the same.
func TestReview24OnNodeEndOfACalledNodeCountsItsStart(t *testing.T) {
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
		for _, nr := range run.Report().Nodes {
			k := 0
			switch nr.ID {
			case "root":
			case "sink":
				k = n + 1
			default:
				_, err := fmt.Sscanf(nr.ID, "n%d", &k)
				require.NoError(t, err)
			}
			if calls[k].Load() == 0 {
				continue
			}
			if ev, ok := ended.get(nr.ID); ok {
				require.NotZero(t, ev.Attempt, "iteration %d, node %s's OnNodeEnd: %s (report: %s)", iter, nr.ID, ev.Reason, nr.Reason)
				require.False(t, strings.HasPrefix(ev.Reason, "stopped before it started"), "iteration %d, node %s's OnNodeEnd", iter, nr.ID)
			}
		}
	}
}
