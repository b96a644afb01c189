package asynctool

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// gauge counts calls at work and keeps the most seen at once.
type gauge struct{ now, most atomic.Int32 }

func (g *gauge) in() {
	n := g.now.Add(1)
	for m := g.most.Load(); n > m && !g.most.CompareAndSwap(m, n); m = g.most.Load() {
	}
}

func (g *gauge) out() { g.now.Add(-1) }

// sleepItems is a ForEach of n items that each sleep d, counted by g.
func sleepItems(n, limit int, d time.Duration, g *gauge) ForEach[int, int, int] {
	return ForEach[int, int, int]{
		Items: func(context.Context, int, Wrappers) ([]int, error) {
			items := make([]int, n)
			for i := range items {
				items[i] = i
			}
			return items, nil
		},
		Worker: WorkerFunc[int, int](func(ctx context.Context, i int, _ Wrappers) (int, error) {
			g.in()
			defer g.out()
			select {
			case <-time.After(d):
				return i * 10, nil
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}),
		Limit: limit,
	}
}

func TestForEachLimitBoundsItemsAtOnce(t *testing.T) {
	for _, limit := range []int{1, 2, 3, 9} {
		t.Run(fmt.Sprint("limit=", limit), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a := New() // a pool far wider than the limit
				defer a.Close()
				var g gauge
				each := NewWrapper("each", sleepItems(10, limit, 10*time.Millisecond, &g), 0)
				start := time.Now()
				require.NoError(t, a.BeginWork(context.Background(), time.Minute, each))
				assert.Equal(t, int32(limit), g.most.Load())
				// Each item starts as soon as another ends: ceil(10/limit) rounds.
				assert.Equal(t, time.Duration((10+limit-1)/limit)*10*time.Millisecond, time.Since(start))
				res := each.Result()
				require.NoError(t, res.Err)
				require.Len(t, res.Value, 10)
				for i, r := range res.Value {
					assert.Equal(t, i*10, r.Value)
				}
			})
		})
	}
}

func TestForEachLimitAtOrAboveItemsChangesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		var g gauge
		each := NewWrapper("each", sleepItems(4, 4, 10*time.Millisecond, &g), 0)
		start := time.Now()
		require.NoError(t, a.BeginWork(context.Background(), time.Minute, each))
		assert.Equal(t, int32(4), g.most.Load())
		assert.Equal(t, 10*time.Millisecond, time.Since(start))
	})
}

// Items start in the list's order: with Limit k, items 0 to k-1 at once,
// then k to 2k-1 as they end, and so on (an item started rounds late
// when helpers raced for the slots, before admit).
func TestForEachLimitStartsItemsInOrder(t *testing.T) {
	for _, limit := range []int{1, 2, 3} {
		t.Run(fmt.Sprint("limit=", limit), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a := New()
				defer a.Close()
				const n = 9
				var mu sync.Mutex
				round := make(map[int][]int) // ms since start -> items started then
				start := time.Now()
				f := ForEach[int, int, int]{
					Items: func(context.Context, int, Wrappers) ([]int, error) {
						return []int{0, 1, 2, 3, 4, 5, 6, 7, 8}, nil
					},
					Worker: WorkerFunc[int, int](func(_ context.Context, i int, _ Wrappers) (int, error) {
						mu.Lock()
						ms := int(time.Since(start) / time.Millisecond)
						round[ms] = append(round[ms], i)
						mu.Unlock()
						time.Sleep(time.Millisecond)
						return i, nil
					}),
					Limit: limit,
				}
				each := NewWrapper("each", f, 0)
				require.NoError(t, a.BeginWork(context.Background(), time.Minute, each))
				rounds := (n + limit - 1) / limit
				require.Len(t, round, rounds, "rounds of %d items, 1 ms apart", limit)
				for ms := range rounds {
					assert.Len(t, round[ms], min(limit, n-ms*limit), "round %d", ms)
				}
				want := make(map[int][]int)
				for i := range n {
					want[i/limit] = append(want[i/limit], i)
				}
				for ms := range round {
					slices.Sort(round[ms])
				}
				assert.Equal(t, want, round)
			})
		})
	}
}

// A retry keeps the item's slot: the next item starts only once the
// retried one has ended, backoff included.
func TestForEachLimitHoldsTheSlotThroughRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		var g gauge
		var calls atomic.Int32
		var secondStart atomic.Int64
		start := time.Now()
		f := ForEach[int, int, int]{
			Items: func(context.Context, int, Wrappers) ([]int, error) { return []int{0, 1}, nil },
			Worker: WorkerFunc[int, int](func(_ context.Context, i int, _ Wrappers) (int, error) {
				g.in()
				defer g.out()
				if i == 1 {
					secondStart.Store(int64(time.Since(start)))
					return 1, nil
				}
				if calls.Add(1) == 1 {
					time.Sleep(5 * time.Millisecond)
					return 0, errors.New("flaky")
				}
				time.Sleep(5 * time.Millisecond)
				return 0, nil
			}),
			Node: func(i int, _ int, n *WorkerWrapper[int, int]) {
				n.Retry(RetryPolicy{Attempts: 2, Backoff: ConstantBackoff(20 * time.Millisecond)})
			},
			Limit: 1,
		}
		each := NewWrapper("each", f, 0)
		require.NoError(t, a.BeginWork(context.Background(), time.Minute, each))
		assert.Equal(t, int32(1), g.most.Load())
		assert.Equal(t, int32(2), calls.Load())
		// 5 ms, 20 ms of backoff, 5 ms: item 1 starts at 30 ms.
		assert.Equal(t, 30*time.Millisecond, time.Duration(secondStart.Load()))
		for i, r := range each.Result().Value {
			assert.NoError(t, r.Err, "item %d", i)
		}
	})
}

// An item's Timeout counts from its start, not from the time it waited
// for a slot.
func TestForEachLimitItemTimeoutCountsFromItsStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		var g gauge
		f := sleepItems(6, 2, 10*time.Millisecond, &g)
		f.Node = func(_ int, _ int, n *WorkerWrapper[int, int]) { n.Timeout(15 * time.Millisecond) }
		each := NewWrapper("each", f, 0)
		start := time.Now()
		require.NoError(t, a.BeginWork(context.Background(), time.Minute, each))
		assert.Equal(t, 30*time.Millisecond, time.Since(start))
		for i, r := range each.Result().Value {
			assert.NoError(t, r.Err, "item %d", i)
		}
	})
}

// The join is not an item: it decides while items are at work, and the
// item that the decisive one would hand its slot to does not start.
func TestForEachLimitJoinDecidesWithoutASlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		var g gauge
		var started atomic.Int32
		f := ForEach[int, int, int]{
			Items: func(context.Context, int, Wrappers) ([]int, error) { return []int{0, 1, 2, 3, 4, 5, 6, 7}, nil },
			Worker: WorkerFunc[int, int](func(ctx context.Context, i int, _ Wrappers) (int, error) {
				g.in()
				defer g.out()
				started.Add(1)
				select {
				case <-time.After(time.Duration(10*(i+1)) * time.Millisecond):
					return 7, nil
				case <-ctx.Done():
					return 0, ctx.Err()
				}
			}),
			Join:  AnySucceeded(),
			Limit: 2,
		}
		each := NewWrapper("each", f, 0)
		start := time.Now()
		run, err := a.Start(context.Background(), time.Minute, each)
		require.NoError(t, err)
		require.NoError(t, run.Wait(context.Background()))
		assert.Equal(t, 10*time.Millisecond, time.Since(start))
		assert.Equal(t, int32(2), started.Load(), "items kept back by the limit never start")
		assert.Equal(t, int32(2), g.most.Load())
		require.NoError(t, each.Result().Err)
		sub := run.Report().Nodes[0].Sub
		require.NotNil(t, sub)
		ran := 0
		for _, n := range sub.Nodes {
			if n.ID != joinID && n.Ran {
				ran++
			}
		}
		assert.Equal(t, 2, ran)
	})
}

// The run's deadline ends items kept back as not started, and nothing is
// left running.
func TestForEachLimitDeadlineEndsItemsKeptBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		var g gauge
		each := NewWrapper("each", sleepItems(6, 1, 10*time.Millisecond, &g), 0)
		start := time.Now()
		run, err := a.Start(context.Background(), 25*time.Millisecond, each)
		require.NoError(t, err)
		assert.ErrorIs(t, run.Wait(context.Background()), context.DeadlineExceeded)
		assert.Equal(t, 25*time.Millisecond, time.Since(start))
		synctest.Wait()
		assert.Equal(t, int32(0), g.now.Load())
		sub := run.Report().Nodes[0].Sub
		require.NotNil(t, sub)
		ran := 0
		for _, n := range sub.Nodes {
			if n.Ran {
				ran++
			}
			assert.Equal(t, StateFinish == n.State, n.Err == nil, "item %s", n.ID)
		}
		assert.Equal(t, 3, ran, "items 0 and 1 ended, item 2 was stopped, 3 to 5 never started")
	})
}

// An item that panics or fails gives its slot back as one that succeeds.
func TestForEachLimitFailedItemsGiveTheirSlotBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		f := ForEach[int, int, int]{
			Items: func(context.Context, int, Wrappers) ([]int, error) { return []int{0, 1, 2, 3}, nil },
			Worker: WorkerFunc[int, int](func(_ context.Context, i int, _ Wrappers) (int, error) {
				time.Sleep(time.Millisecond)
				switch i {
				case 0:
					panic("boom")
				case 1:
					return 0, errors.New("no price")
				}
				return i, nil
			}),
			Limit: 1,
		}
		each := NewWrapper("each", f, 0)
		require.NoError(t, a.BeginWork(context.Background(), time.Minute, each))
		res := each.Result().Value
		require.Len(t, res, 4)
		var pe *PanicError
		assert.ErrorAs(t, res[0].Err, &pe)
		assert.EqualError(t, res[1].Err, "no price")
		assert.Equal(t, 2, res[2].Value)
		assert.Equal(t, 3, res[3].Value)
	})
}

func TestForEachNegativeLimitIsRefused(t *testing.T) {
	f := sleepItems(2, -1, 0, &gauge{})
	_, err := Compile(NewWrapper("prices", f, 0))
	require.ErrorIs(t, err, ErrBadLimit)
	assert.ErrorContains(t, err, "its ForEach's Limit is -1")
	_, err = New().Start(context.Background(), time.Second, NewWrapper("prices", f, 0))
	require.ErrorIs(t, err, ErrBadLimit)
}

// Many runs of one plan at once, on a small pool, with items of uneven
// length, some quick enough for the plan to learn them quick (which
// changes how helpers are started): every item runs once, and never more
// than Limit at once in a run.
func TestForEachLimitUnderLoad(t *testing.T) {
	a := New(WithMaxWorkers(4))
	defer a.Close()
	const items, limit = 40, 3
	type runGauge struct {
		g     gauge
		calls []atomic.Int32
	}
	f := ForEach[*runGauge, int, int]{
		Items: func(_ context.Context, _ *runGauge, _ Wrappers) ([]int, error) {
			s := make([]int, items)
			for i := range s {
				s[i] = i
			}
			return s, nil
		},
		Worker: WorkerFunc[int, int](func(ctx context.Context, i int, _ Wrappers) (int, error) {
			rg := ctx.Value(runGaugeKey{}).(*runGauge)
			rg.g.in()
			defer rg.g.out()
			rg.calls[i].Add(1)
			if i%4 == 0 {
				time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
			}
			return i, nil
		}),
		Limit: limit,
	}
	each := NewWrapper("each", f, nil)
	pl, err := Compile(each)
	require.NoError(t, err)
	var wg sync.WaitGroup
	var bad atomic.Int32
	for range 8 {
		wg.Go(func() {
			for range 25 {
				rg := &runGauge{calls: make([]atomic.Int32, items)}
				ctx := context.WithValue(context.Background(), runGaugeKey{}, rg)
				run, err := a.RunPlan(ctx, pl, time.Minute)
				if err != nil {
					bad.Add(1)
					t.Error(err)
					return
				}
				res := each.ResultIn(run)
				run.Release()
				if res.Err != nil || len(res.Value) != items {
					bad.Add(1)
					t.Errorf("result %v, %d items", res.Err, len(res.Value))
				}
				if m := rg.g.most.Load(); m > limit {
					bad.Add(1)
					t.Errorf("%d items at once, limit %d", m, limit)
				}
				for i := range rg.calls {
					if c := rg.calls[i].Load(); c != 1 {
						bad.Add(1)
						t.Errorf("item %d called %d times", i, c)
					}
				}
				if bad.Load() > 0 {
					return
				}
			}
		})
	}
	wg.Wait()
}

type runGaugeKey struct{}

// An item whose worker ends its goroutine (t.FailNow in a fake) gives its
// slot back too: the items after it run. (Item 0 runs on the ForEach
// node's own goroutine, whose end fails the node, with or without Limit.)
func TestForEachLimitGoexitGivesTheSlotBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		f := ForEach[int, int, int]{
			Items: func(context.Context, int, Wrappers) ([]int, error) { return []int{0, 1, 2, 3, 4}, nil },
			Worker: WorkerFunc[int, int](func(_ context.Context, i int, _ Wrappers) (int, error) {
				time.Sleep(time.Duration(i+1) * time.Millisecond)
				if i == 1 {
					runtime.Goexit()
				}
				return i, nil
			}),
			Limit: 2,
		}
		each := NewWrapper("each", f, 0)
		require.NoError(t, a.BeginWork(context.Background(), time.Minute, each))
		res := each.Result()
		require.NoError(t, res.Err)
		require.Len(t, res.Value, 5)
		assert.ErrorIs(t, res.Value[1].Err, ErrGoexit)
		for _, i := range []int{0, 2, 3, 4} {
			assert.Equal(t, i, res.Value[i].Value)
		}
	})
}

// At the run's deadline, the item that gets the slot of one the deadline
// ended is not started, and no item whose worker was never called is
// reported as stopped while running (it happened once in about 200
// runs: the hand-over started the item as the sweep ended it).
func TestForEachLimitDeadlineReportsNoPhantomStart(t *testing.T) {
	for range 300 {
		synctest.Test(t, func(t *testing.T) {
			a := New(WithTimings(true))
			defer a.Close()
			var calls atomic.Int32
			var g gauge
			f := sleepItems(10, 1, 30*time.Millisecond, &g)
			w := f.Worker
			f.Worker = WorkerFunc[int, int](func(ctx context.Context, i int, all Wrappers) (int, error) {
				calls.Add(1)
				return w.Action(ctx, i, all)
			})
			each := NewWrapper("each", f, 0)
			run, err := a.Start(context.Background(), 100*time.Millisecond, each)
			require.NoError(t, err)
			require.ErrorIs(t, run.Wait(context.Background()), context.DeadlineExceeded)
			sub := run.Report().Nodes[0].Sub
			require.NotNil(t, sub)
			ran := 0
			for _, n := range sub.Nodes {
				if n.Ran {
					ran++
					continue
				}
				assert.Zero(t, n.Attempts, "item %s", n.ID)
				assert.NotContains(t, n.Reason, "stopped while running", "item %s", n.ID)
			}
			assert.Equal(t, 4, ran, "items 0 to 2 ended, item 3 was stopped")
			assert.Equal(t, int32(4), calls.Load())
		})
		if t.Failed() {
			return
		}
	}
}

// An item that Node makes depend on another is counted too: when its
// upstream ends, it starts through the limiter, not claimed by the
// goroutine that ended the upstream.
func TestForEachLimitCountsItemsWithUpstreams(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		var g gauge
		nodes := make([]*WorkerWrapper[int, int], 5)
		f := ForEach[int, int, int]{
			Items: func(context.Context, int, Wrappers) ([]int, error) { return []int{0, 1, 2, 3, 4}, nil },
			Worker: WorkerFunc[int, int](func(_ context.Context, i int, _ Wrappers) (int, error) {
				g.in()
				defer g.out()
				time.Sleep([]time.Duration{1, 1, 10, 10, 20}[i] * time.Millisecond)
				return i, nil
			}),
			Node: func(i int, _ int, n *WorkerWrapper[int, int]) {
				nodes[i] = n
				if i == 2 || i == 3 {
					n.Depend(nodes[i-2], true) // 2 after 0, 3 after 1
				}
			},
			Limit: 2,
		}
		each := NewWrapper("each", f, 0)
		start := time.Now()
		require.NoError(t, a.BeginWork(context.Background(), time.Minute, each))
		assert.Equal(t, int32(2), g.most.Load())
		// 0 and 1 first; then 4 (20 ms) beside 2 and 3 in turn (10 ms each).
		assert.Equal(t, 21*time.Millisecond, time.Since(start))
		for i, r := range each.Result().Value {
			assert.Equal(t, i, r.Value)
		}
	})
}

// Items not started when the join decides end skipped if it succeeded
// (no successor needs them any more), and stopped, as the running ones,
// if it failed (the run ended with the join), as ForEach's doc says.
func TestForEachItemsNotStartedEndByTheJoinsOutcome(t *testing.T) {
	for _, tc := range []struct {
		join    Join
		fail    bool // item 0 fails
		wantErr error
	}{
		{AnySucceeded(), false, ErrSkipped},
		{AtLeast(1), false, ErrSkipped},
		{AllSucceeded(), true, ErrRunEnded},
	} {
		t.Run(tc.join.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a := New()
				defer a.Close()
				f := ForEach[int, int, int]{
					Items: func(context.Context, int, Wrappers) ([]int, error) { return []int{0, 1, 2, 3, 4}, nil },
					Worker: WorkerFunc[int, int](func(ctx context.Context, i int, _ Wrappers) (int, error) {
						select {
						case <-time.After(time.Duration(1+10*i) * time.Millisecond):
						case <-ctx.Done():
							return 0, ctx.Err()
						}
						if i == 0 && tc.fail {
							return 0, errors.New("no price")
						}
						return i, nil
					}),
					Join:  tc.join,
					Limit: 2,
				}
				each := NewWrapper("each", f, 0)
				run, err := a.Start(context.Background(), time.Minute, each)
				require.NoError(t, err)
				require.NoError(t, run.Wait(context.Background()))
				sub := run.Report().Nodes[0].Sub
				require.NotNil(t, sub)
				seen := 0
				for _, n := range sub.Nodes {
					switch n.ID {
					case "1": // running when item 0 ended
						assert.ErrorIs(t, n.Err, ErrRunEnded, "item 1 was running")
						seen++
					case "2", "3", "4": // kept back by the limit
						assert.False(t, n.Ran, "item %s", n.ID)
						assert.ErrorIs(t, n.Err, tc.wantErr, "item %s", n.ID)
						seen++
					}
				}
				assert.Equal(t, 4, seen)
			})
		})
	}
}

// saturatedRuns is an executor of one goroutine at a time that runs a
// task on the caller's goroutine when that one is taken: a caller-runs
// policy, which Executor allows.
type saturatedRuns struct{ busy atomic.Bool }

func (e *saturatedRuns) Submit(task func()) error {
	if !e.busy.CompareAndSwap(false, true) {
		task()
		return nil
	}
	go func() {
		defer e.busy.Store(false)
		task()
	}()
	return nil
}

// With an executor that runs helpers on the caller's goroutine, the items
// run once each, never more than Limit at once, but not in the list's
// order, as ForEach.Limit's comment says: the goroutine that shares the
// items runs the helper it starts, and the items that helper's end hands
// slots to, before the item it kept (1 2 3 4 5 0, one at a time; 5 4 3 2
// 1 0 on 2cc118f, before admit).
func TestForEachLimitCallerRunsExecutor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New(WithExecutor(&saturatedRuns{}))
		defer a.Close()
		var g gauge
		var mu sync.Mutex
		var order []int
		f := sleepItems(6, 2, time.Millisecond, &g)
		inner := f.Worker
		f.Worker = WorkerFunc[int, int](func(ctx context.Context, i int, all Wrappers) (int, error) {
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			return inner.Action(ctx, i, all)
		})
		each := NewWrapper("each", f, 0)
		require.NoError(t, a.BeginWork(context.Background(), time.Minute, each))
		assert.LessOrEqual(t, g.most.Load(), int32(2))
		assert.ElementsMatch(t, []int{0, 1, 2, 3, 4, 5}, order)
		for i, r := range each.Result().Value {
			assert.Equal(t, i*10, r.Value)
		}
	})
}
