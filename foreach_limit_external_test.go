package asynctool_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynctool-go/asynctool"
	"github.com/asynctool-go/asynctool/asynctooltest"
)

// Tests of ForEach.Limit written from its public docs only
// (subgraph.go's ForEach doc, the README's ForEach row, doc.go,
// ExampleForEach_limit), through the public API.

// limitGauge counts the items at work and the most seen at once.
type limitGauge struct {
	now, most atomic.Int32
	// full, if not nil, is closed when fullAt items are at work at once.
	full   chan struct{}
	fullAt int32
	once   sync.Once
}

func (g *limitGauge) in() {
	n := g.now.Add(1)
	for m := g.most.Load(); n > m && !g.most.CompareAndSwap(m, n); m = g.most.Load() {
	}
	if g.full != nil && n >= g.fullAt {
		g.once.Do(func() { close(g.full) })
	}
}

func (g *limitGauge) out() { g.now.Add(-1) }

func limitItems(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

func limitList(_ context.Context, p []int, _ asynctool.Wrappers) ([]int, error) { return p, nil }

// "Each [starts] as soon as another ends": under synctest, with items of
// unequal lengths, Limit items are at work at every instant while some
// wait, an item that waited starts at the very instant another ends, and
// the most at once is min(Limit, items). Items start in the list's
// order, on a pool larger than Limit too: no item starts after a later
// one (items that start at the same instant run on goroutines of their
// own, so only their instants are compared).
func TestLimitStartsEachItemAsAnotherEnds(t *testing.T) {
	dur := func(i int) time.Duration { return time.Duration(10+(i*7)%13) * time.Millisecond }
	const items = 12
	for _, limit := range []int{1, 2, 3, 5, 11, 20} {
		t.Run(fmt.Sprint("limit", limit), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a := asynctool.New(asynctool.WithMaxWorkers(16))
				defer a.Close()
				var g limitGauge
				var mu sync.Mutex
				starts := map[int]time.Duration{}
				t0 := time.Now()
				n := asynctool.NewWrapper("fan", asynctool.ForEach[[]int, int, int]{
					Items: limitList,
					Worker: asynctool.WorkerFunc[int, int](func(ctx context.Context, i int, _ asynctool.Wrappers) (int, error) {
						g.in()
						defer g.out()
						mu.Lock()
						starts[i] = time.Since(t0)
						mu.Unlock()
						time.Sleep(dur(i))
						return i, nil
					}),
					Limit: limit,
				}, limitItems(items))
				if err := a.BeginWork(context.Background(), time.Minute, n); err != nil {
					t.Fatal(err)
				}
				want := min(limit, items)
				if got := int(g.most.Load()); got != want {
					t.Errorf("most at once %d, want %d", got, want)
				}
				ends := map[time.Duration]bool{}
				for i := range items {
					ends[starts[i]+dur(i)] = true
				}
				for i := range items {
					if s := starts[i]; s != 0 && !ends[s] {
						t.Errorf("item %d started at %v, when no item ended", i, s)
					}
				}
				for i := 1; i < items; i++ {
					if starts[i] < starts[i-1] {
						t.Errorf("item %d started at %v, before item %d at %v", i, starts[i], i-1, starts[i-1])
					}
				}
				for at := time.Duration(0); at < time.Second; at += time.Millisecond {
					running, waiting := 0, 0
					for i := range items {
						switch s := starts[i]; {
						case s <= at && at < s+dur(i):
							running++
						case s > at:
							waiting++
						}
					}
					if waiting > 0 && running != want {
						t.Fatalf("at %v, %d items at work and %d waiting (starts %v)", at, running, waiting, starts)
					}
				}
			})
		})
	}
}

// "No goroutine waits for a turn": 1,000 more items kept back by Limit 2
// add no goroutine.
func TestLimitKeepsNoGoroutinePerItemKeptBack(t *testing.T) {
	extra := func(items int) int {
		a := asynctool.New(asynctool.WithMaxWorkers(64))
		defer a.Close()
		release := make(chan struct{})
		var started atomic.Int32
		n := asynctool.NewWrapper("fan", asynctool.ForEach[[]int, int, int]{
			Items: limitList,
			Worker: asynctool.WorkerFunc[int, int](func(ctx context.Context, i int, _ asynctool.Wrappers) (int, error) {
				started.Add(1)
				<-release
				return i, nil
			}),
			Limit: 2,
		}, limitItems(items))
		base := runtime.NumGoroutine()
		run, err := a.Start(context.Background(), time.Minute, n)
		if err != nil {
			t.Fatal(err)
		}
		for started.Load() < 2 {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond) // let any helper that would start do so
		got := runtime.NumGoroutine() - base
		if s := started.Load(); s != 2 {
			t.Errorf("%d items: %d started under Limit 2", items, s)
		}
		close(release)
		if err := run.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		if s := started.Load(); int(s) != items {
			t.Errorf("%d items: %d ran", items, s)
		}
		return got
	}
	// Limit 0 here gives about 64 (the pool's size); goroutines of
	// earlier tests that exit meanwhile only lower the count.
	small, big := extra(3), extra(1002)
	if big > 16 {
		t.Errorf("goroutines while items are kept back: %d with 1 kept back, %d with 1000", small, big)
	}
}

// "An item counts from its start to its end, through its retries and
// their backoffs; an item's Timeout counts from its start": with Limit 1,
// item 0 fails once, backs off 10ms and retries until its 50ms Timeout;
// item 1 starts only when item 0 has ended, and item 3, started at 110ms,
// is not timed out by its 50ms Timeout.
func TestLimitSlotHeldThroughBackoffAndTimeoutFromStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var attempts [4]atomic.Int32
		var mu sync.Mutex
		starts := map[string]time.Duration{}
		t0 := time.Now()
		worker := asynctool.WorkerFunc[int, int](func(ctx context.Context, i int, _ asynctool.Wrappers) (int, error) {
			k := attempts[i].Add(1)
			mu.Lock()
			starts[fmt.Sprintf("%d#%d", i, k)] = time.Since(t0)
			mu.Unlock()
			select {
			case <-time.After(30 * time.Millisecond):
			case <-ctx.Done():
				return 0, ctx.Err()
			}
			if i == 0 && k == 1 {
				return 0, errors.New("flaky")
			}
			return i, nil
		})
		n := asynctool.NewWrapper("fan", asynctool.ForEach[[]int, int, int]{
			Items:  limitList,
			Worker: worker,
			Node: func(_ int, _ int, w *asynctool.WorkerWrapper[int, int]) {
				w.Timeout(50 * time.Millisecond).Retry(asynctool.RetryPolicy{Attempts: 2, Backoff: asynctool.ConstantBackoff(10 * time.Millisecond)})
			},
			Limit: 1,
		}, limitItems(4))
		rep := asynctooltest.RunWithin(t, time.Minute, n)
		want := map[string]time.Duration{"0#1": 0, "0#2": 40 * time.Millisecond, "1#1": 50 * time.Millisecond, "2#1": 80 * time.Millisecond, "3#1": 110 * time.Millisecond}
		for k, d := range want {
			if got, ok := starts[k]; !ok || got != d {
				t.Errorf("attempt %s started at %v (%v), want %v", k, got, ok, d)
			}
		}
		asynctooltest.TimedOut(t, rep, "fan/0")
		for _, id := range []string{"fan/1", "fan/2", "fan/3"} {
			asynctooltest.Succeeded(t, rep, id)
		}
	})
}

// "A worker that ignores its context and goes on after its item ended
// (its Timeout, the run's end) no longer counts": with Limit 1, item 0
// sleeps a second past its 20ms Timeout, and item 1 starts at 20ms.
func TestLimitWorkerIgnoringCtxNoLongerCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		starts := map[int]time.Duration{}
		t0 := time.Now()
		n := asynctool.NewWrapper("fan", asynctool.ForEach[[]int, int, int]{
			Items: limitList,
			Worker: asynctool.WorkerFunc[int, int](func(_ context.Context, i int, _ asynctool.Wrappers) (int, error) {
				mu.Lock()
				starts[i] = time.Since(t0)
				mu.Unlock()
				if i == 0 {
					time.Sleep(time.Second) // ignores its ctx
				}
				time.Sleep(10 * time.Millisecond)
				return i, nil
			}),
			Node: func(_ int, _ int, w *asynctool.WorkerWrapper[int, int]) {
				w.Timeout(20 * time.Millisecond)
			},
			Limit: 1,
		}, limitItems(3))
		rep := asynctooltest.RunWithin(t, time.Minute, n)
		if starts[1] != 20*time.Millisecond || starts[2] != 30*time.Millisecond {
			t.Errorf("items 1 and 2 started at %v and %v, want 20ms and 30ms", starts[1], starts[2])
		}
		asynctooltest.TimedOut(t, rep, "fan/0")
		asynctooltest.Succeeded(t, rep, "fan/2")
	})
}

// "With 0, only the pool bounds the calls; a negative Limit is refused by
// Compile and BeginWork (ErrBadLimit)", and by Start, whose error names
// the node and the Limit.
func TestLimitZeroAndNegative(t *testing.T) {
	mk := func(limit int, g *limitGauge, release chan struct{}) *asynctool.WorkerWrapper[[]int, []asynctool.WorkResult[int]] {
		return asynctool.NewWrapper("fan", asynctool.ForEach[[]int, int, int]{
			Items: limitList,
			Worker: asynctool.WorkerFunc[int, int](func(_ context.Context, i int, _ asynctool.Wrappers) (int, error) {
				g.in()
				defer g.out()
				if g.most.Load() == 6 {
					close(release)
				}
				<-release
				return i, nil
			}),
			Limit: limit,
		}, limitItems(6))
	}
	if _, err := asynctool.Compile(mk(-1, nil, nil)); !errors.Is(err, asynctool.ErrBadLimit) {
		t.Errorf("Compile: %v", err)
	}
	a := asynctool.New(asynctool.WithMaxWorkers(8))
	defer a.Close()
	err := a.BeginWork(context.Background(), time.Second, mk(-1, nil, nil))
	if !errors.Is(err, asynctool.ErrBadLimit) || !strings.Contains(err.Error(), `"fan"`) || !strings.Contains(err.Error(), "-1") {
		t.Errorf("BeginWork: %v", err)
	}
	if _, err := a.Start(context.Background(), time.Second, mk(-7, nil, nil)); !errors.Is(err, asynctool.ErrBadLimit) {
		t.Errorf("Start: %v", err)
	}
	var g limitGauge
	n := mk(0, &g, make(chan struct{})) // all six must be at work at once to end
	if err := a.BeginWork(context.Background(), 30*time.Second, n); err != nil {
		t.Fatal(err)
	}
	if r := n.Result(); r.Err != nil || g.most.Load() != 6 {
		t.Errorf("Limit 0: %v, most at once %d", r.Err, g.most.Load())
	}
}

// Limit with WithMaxWorkers both smaller and larger: the most at once is
// the smaller of the two, and every item runs.
func TestLimitWithPoolSmallerAndLarger(t *testing.T) {
	for _, mw := range []int{1, 2, 3, 16} {
		for _, limit := range []int{1, 2, 4} {
			t.Run(fmt.Sprintf("workers%d_limit%d", mw, limit), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					a := asynctool.New(asynctool.WithMaxWorkers(mw))
					defer a.Close()
					var g limitGauge
					var mu sync.Mutex
					var order []int
					n := asynctool.NewWrapper("fan", asynctool.ForEach[[]int, int, int]{
						Items: limitList,
						Worker: asynctool.WorkerFunc[int, int](func(_ context.Context, i int, _ asynctool.Wrappers) (int, error) {
							g.in()
							defer g.out()
							mu.Lock()
							order = append(order, i)
							mu.Unlock()
							time.Sleep(time.Duration(1+i%4) * time.Millisecond)
							return i, nil
						}),
						Limit: limit,
					}, limitItems(12))
					if err := a.BeginWork(context.Background(), time.Minute, n); err != nil {
						t.Fatal(err)
					}
					if got := int(g.most.Load()); got != min(mw, limit) {
						t.Errorf("most at once %d, want %d", got, min(mw, limit))
					}
					if len(order) != 12 {
						t.Errorf("%d items ran", len(order))
					}
				})
			})
		}
	}
}

type gaugeKey struct{}

// A compiled plan with a Limit run from 100 goroutines at once: each run
// keeps its own bound and gets its own results.
func TestLimitPlanFrom100Goroutines(t *testing.T) {
	a := asynctool.New(asynctool.WithMaxWorkers(400))
	defer a.Close()
	n := asynctool.NewWrapper("fan", asynctool.ForEach[[]int, int, int]{
		Items: limitList,
		Worker: asynctool.WorkerFunc[int, int](func(ctx context.Context, i int, _ asynctool.Wrappers) (int, error) {
			g := ctx.Value(gaugeKey{}).(*limitGauge)
			g.in()
			defer g.out()
			if i < 3 {
				// The first three, which the Limit lets start at once,
				// wait for one another (or, on a machine too loaded to
				// run them together, for a while), so that the check
				// below that a run reached its Limit cannot fail
				// because goroutines started late.
				select {
				case <-g.full:
				case <-time.After(2 * time.Second):
				}
			}
			time.Sleep(time.Duration(i%3) * time.Millisecond)
			return i * 2, nil
		}),
		Limit: 3,
	}, limitItems(20))
	pl, err := asynctool.Compile(n)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var reached atomic.Int32
	for range 100 {
		wg.Go(func() {
			g := &limitGauge{full: make(chan struct{}), fullAt: 3}
			run, err := a.RunPlan(context.WithValue(context.Background(), gaugeKey{}, g), pl, time.Minute)
			if err != nil {
				t.Error(err)
				return
			}
			defer run.Release()
			r := n.ResultIn(run)
			if r.Err != nil || len(r.Value) != 20 {
				t.Errorf("run: %v, %d items", r.Err, len(r.Value))
				return
			}
			for i, it := range r.Value {
				if it.Value != 2*i || it.Err != nil {
					t.Errorf("item %d: %v, %v", i, it.Value, it.Err)
				}
			}
			switch m := g.most.Load(); {
			case m > 3:
				t.Errorf("a run had %d items at once under Limit 3", m)
			case m == 3:
				reached.Add(1)
			}
		})
	}
	wg.Wait()
	if reached.Load() == 0 {
		t.Error("no run reached its Limit: the test checks nothing")
	}
}

// A Join with a Limit: AllSucceeded fails the node at the first failed
// item, whose error the node's wraps; the items kept back never start,
// and each ends skipped or stopped (the docs' two outcomes); with
// AnySucceeded, the node returns at the first success.
func TestLimitJoinLeavesItemsKeptBackUnstarted(t *testing.T) {
	boom := errors.New("sku 3: no price")
	for _, tc := range []struct {
		join    asynctool.Join
		started int32
	}{
		// Limit 2: items 0..3 start (3 fails at 24ms), item 4 starts at
		// 22ms when item 2 ends and is stopped; 5..9 never start.
		{asynctool.AllSucceeded(), 5},
		// items 0 and 1 fail, 2 and 3 start at 10ms, 3 succeeds at 23ms
		// after item 2 handed its slot to 4 at 22ms.
		{asynctool.AnySucceeded(), 5},
	} {
		t.Run(tc.join.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var started atomic.Int32
				any := tc.join.String() == asynctool.AnySucceeded().String()
				n := asynctool.NewWrapper("fan", asynctool.ForEach[[]int, int, int]{
					Items: limitList,
					Worker: asynctool.WorkerFunc[int, int](func(ctx context.Context, i int, _ asynctool.Wrappers) (int, error) {
						started.Add(1)
						select {
						case <-time.After(time.Duration(10+i) * time.Millisecond):
						case <-ctx.Done():
							return 0, ctx.Err()
						}
						if (any && i < 3) || (!any && i == 3) {
							return 0, boom
						}
						return i, nil
					}),
					Join:  tc.join,
					Limit: 2,
				}, limitItems(10))
				rep := asynctooltest.RunWithin(t, time.Minute, n)
				// As many as 5 (one handed a slot at 22ms); 4 when the
				// items start out of the list's order.
				if got := started.Load(); got < 4 || got > tc.started {
					t.Errorf("%d items started, want at most %d", got, tc.started)
				}
				if any {
					asynctooltest.Succeeded(t, rep, "fan")
					asynctooltest.Succeeded(t, rep, "fan/3")
				} else {
					asynctooltest.Failed(t, rep, "fan", boom)
					if err := n.Result().Err; err == nil || !strings.Contains(err.Error(), `"3"`) {
						t.Errorf("the node's error does not name the item: %v", err)
					}
				}
				for i := 5; i < 10; i++ {
					id := fmt.Sprintf("fan/%d", i)
					asynctooltest.NeverStarted(t, rep, id)
					nr := rep.Nodes[0].Sub.Nodes[i]
					if nr.Err != asynctool.ErrSkipped && !errors.Is(nr.Err, asynctool.ErrRunEnded) {
						t.Errorf("%s kept back ended with %v (%v), neither skipped nor stopped", id, nr.Err, nr.Status)
					}
				}
			})
		})
	}
}

// The group deadline with a Limit: the items kept back never start and
// they end timed out; the items that waited for a slot show the wait.
func TestLimitDeadlineReportsItemsKeptBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := asynctool.NewWrapper("fan", asynctool.ForEach[[]int, int, int]{
			Items: limitList,
			Worker: asynctool.WorkerFunc[int, int](func(ctx context.Context, i int, _ asynctool.Wrappers) (int, error) {
				select {
				case <-time.After(30 * time.Millisecond):
					return i, nil
				case <-ctx.Done():
					return 0, ctx.Err()
				}
			}),
			Limit: 1,
		}, limitItems(10))
		rep := asynctooltest.RunWithin(t, 100*time.Millisecond, n)
		if !errors.Is(rep.RunErr, context.DeadlineExceeded) {
			t.Errorf("run error %v", rep.RunErr)
		}
		asynctooltest.TimedOut(t, rep, "fan")
		sub := rep.Nodes[0].Sub
		if sub == nil {
			t.Fatal("no sub-report")
		}
		for i := range 3 {
			asynctooltest.Succeeded(t, rep, fmt.Sprintf("fan/%d", i))
			if w := sub.Nodes[i].Wait; w != time.Duration(i)*30*time.Millisecond {
				t.Errorf("item %d waited %v", i, w)
			}
		}
		asynctooltest.TimedOut(t, rep, "fan/3")
		for i := 4; i < 10; i++ {
			id := fmt.Sprintf("fan/%d", i)
			asynctooltest.NeverStarted(t, rep, id)
			asynctooltest.TimedOut(t, rep, id)
			if r := sub.Nodes[i].Reason; !strings.Contains(r, "before it started") {
				t.Errorf("%s, which never ran, has the reason %q", id, r)
			}
		}
	})
}

// A realistic order page: 50 SKUs priced at most 5 at once, each call
// 5–20ms with a 50ms Timeout and one retry, under a 300ms group deadline,
// AllSucceeded. It prices every SKU well in time; when one SKU cannot be
// priced, the node's error names that SKU and wraps the service's error.
func TestLimitOrderPage(t *testing.T) {
	skus := make([]string, 50)
	for i := range skus {
		skus[i] = fmt.Sprintf("SKU-%03d", i)
	}
	unknown := errors.New("pricing: unknown SKU")
	for _, down := range []string{"", "SKU-017"} {
		t.Run("down="+down, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var g limitGauge
				var calls atomic.Int32
				prices := asynctool.NewWrapper("prices", asynctool.ForEach[[]string, string, int]{
					Items: func(_ context.Context, skus []string, _ asynctool.Wrappers) ([]string, error) { return skus, nil },
					Worker: asynctool.WorkerFunc[string, int](func(ctx context.Context, sku string, _ asynctool.Wrappers) (int, error) {
						g.in()
						defer g.out()
						c := calls.Add(1)
						select {
						case <-time.After(time.Duration(5+c*7%16) * time.Millisecond):
						case <-ctx.Done():
							return 0, ctx.Err()
						}
						if sku == down {
							return 0, unknown
						}
						if c%10 == 0 {
							return 0, errors.New("503")
						}
						return 100 + int(sku[len(sku)-1]-'0'), nil
					}),
					ID: func(_ int, sku string) string { return sku },
					Node: func(_ int, _ string, n *asynctool.WorkerWrapper[string, int]) {
						n.Timeout(50 * time.Millisecond).Retry(asynctool.RetryPolicy{Attempts: 2})
					},
					Join:  asynctool.AllSucceeded(),
					Limit: 5,
				}, skus)
				t0 := time.Now()
				rep := asynctooltest.RunWithin(t, 300*time.Millisecond, prices)
				if g.most.Load() != 5 {
					t.Errorf("most calls at once %d, want 5", g.most.Load())
				}
				if d := time.Since(t0); d >= 300*time.Millisecond {
					t.Errorf("the page took %v", d)
				}
				if down == "" {
					r := prices.Result()
					if r.Err != nil || len(r.Value) != 50 {
						t.Fatalf("%v, %d prices", r.Err, len(r.Value))
					}
					for i, p := range r.Value {
						if p.Err != nil || p.Value != 100+i%10 {
							t.Errorf("%s: %v %v", skus[i], p.Value, p.Err)
						}
					}
					return
				}
				asynctooltest.Failed(t, rep, "prices", unknown)
				if err := prices.Result().Err; !strings.Contains(err.Error(), down) {
					t.Errorf("the error does not name the SKU: %v", err)
				}
				if nr := rep.Nodes[0].Sub.Nodes[17]; nr.ID != down || nr.Attempts != 2 {
					t.Errorf("%s: %d attempts", nr.ID, nr.Attempts)
				}
				asynctooltest.NeverStarted(t, rep, "prices/SKU-049")
			})
		})
	}
}
