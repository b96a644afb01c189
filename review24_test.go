package asynctool

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
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

// slowDefault is an item worker that fails at once and whose DefaultValue,
// which the item's own goroutine calls as it ends the item, takes 50ms.
type slowDefault struct{}

func (slowDefault) Action(context.Context, int, Wrappers) (int, error) {
	return 0, errors.New("bad")
}

func (slowDefault) DefaultValue() int {
	time.Sleep(50 * time.Millisecond)
	return -1
}

// The report of a run that has ended shows its sub-runs ended (Report's
// doc). An item that failed before the ForEach node's Timeout, and whose
// goroutine is still in its DefaultValue when the sweep goes through the
// sub-run, is in no final state yet: the sweep passes it by, and a report
// that waits only for the sweep (waitSwept) shows it running.
func TestReview24ReportOfAnEndedRunWaitsForAnItemsDefaultValue(t *testing.T) {
	t.Skip("review24: known since 4028a04 (Report waits for the sweep, not Done); documented in Report's doc, not fixed: remove to reproduce")
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		each := NewWrapper("each", ForEach[int, int, int]{
			Items:  func(context.Context, int, Wrappers) ([]int, error) { return []int{0}, nil },
			Worker: slowDefault{},
		}, 0).Timeout(10 * time.Millisecond)
		run, err := a.Start(context.Background(), time.Minute, each)
		require.NoError(t, err)
		_ = run.Wait(context.Background())
		rep := run.Report()
		sub := subNode(t, rep, "each").Sub
		require.NotNil(t, sub)
		for _, n := range sub.Nodes {
			assert.NotEqual(t, StatusRunning, n.Status, "item %s of an ended run: %v", n.ID, rep)
		}
	})
}

// A custom join in a sub-run, asked on a goroutine of the sub-run (not its
// sweep) and calling Report of the outer run once the SubPlan node's
// Timeout ended it, holds the join's lock while Report waits for the
// sub-run's sweep; the sweep, ending the join's other upstream, asks the
// same join and waits for that lock. Report's doc names only a ForEach's
// join under a Budget.
//
// It hangs for good (a sync.Mutex is no durable block: synctest does not
// see the deadlock), before 4028a04 too; run it with -timeout.
func TestReview24ReportFromACustomJoinOffTheSweep(t *testing.T) {
	t.Skip("review24: known hang, documented in Report's doc, not fixed: remove to reproduce (-count=20 -cpu 1,2,4 -timeout 60s)")
	for range 50 {
		synctest.Test(t, func(t *testing.T) {
			a := New()
			defer a.Close()
			runs := make(chan *Run, 1)
			var x *WorkerWrapper[int, int]
			u := NewWrapper("u", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
				<-ctx.Done()
				return 0, ctx.Err()
			}), 0)
			v := NewWrapper("v", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 1, nil }), 0)
			asked := false
			_ = NewWrapper("s", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 2, nil }), 0).
				Depend(u, true).Depend(v, true).Join(CustomJoin(func(ups []Upstream) Decision {
				if !asked {
					asked = true
					time.Sleep(10 * time.Millisecond)
					for x.State() == StateWorking {
						runtime.Gosched()
					}
					r := <-runs
					runs <- r
					_ = r.Report()
				}
				return DecideWait
			}))
			inner, err := Compile(u, v)
			require.NoError(t, err)
			x = NewWrapper("x", SubPlan[int, int]{Plan: inner, Output: func(*Run) (int, error) { return 0, nil }}, 0).Timeout(10 * time.Millisecond)
			run, err := a.Start(context.Background(), time.Minute, x)
			require.NoError(t, err)
			runs <- run
			_ = run.Wait(context.Background())
		})
	}
}
