package asynctool

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// idsNode is a root that returns the ids 1..n.
func idsNode(n int) *WorkerWrapper[int, []int] {
	return NewWrapper("ids", WorkerFunc[int, []int](func(context.Context, int, Wrappers) ([]int, error) {
		ids := make([]int, n)
		for i := range ids {
			ids[i] = i + 1
		}
		return ids, nil
	}), 0)
}

// itemsOf reads the items of a ForEach from its upstream ids.
func itemsOf(ids *WorkerWrapper[int, []int]) func(context.Context, int, Wrappers) ([]int, error) {
	return func(_ context.Context, _ int, all Wrappers) ([]int, error) {
		r, err := ids.ResultFrom(all)
		return r.Value, err
	}
}

// sleepy returns id*10 after sleeping id milliseconds (for synctest), and
// fails for the ids in fail after the same sleep.
func sleepy(fail ...int) WorkerFunc[int, int] {
	return func(ctx context.Context, id int, _ Wrappers) (int, error) {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(time.Duration(id) * time.Millisecond):
		}
		for _, f := range fail {
			if id == f {
				return 0, fmt.Errorf("item %d failed", id)
			}
		}
		return id * 10, nil
	}
}

func TestForEachResultsInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		ids := idsNode(5)
		each := NewWrapper("each", ForEach[int, int, int]{Items: itemsOf(ids), Worker: sleepy(3)}, 0).Depend(ids, true)
		start := time.Now()
		run, err := a.Start(context.Background(), time.Second, ids)
		require.NoError(t, err)
		require.NoError(t, run.Wait(context.Background()))
		assert.Equal(t, 5*time.Millisecond, time.Since(start), "the items ran at once, so the slowest decides")

		r := each.Result()
		require.NoError(t, r.Err, "with the zero Join the node succeeds whatever its items did")
		require.Len(t, r.Value, 5)
		for i, x := range r.Value {
			if i == 2 {
				assert.Equal(t, ResultException, x.State)
				assert.EqualError(t, x.Err, "item 3 failed")
				continue
			}
			assert.Equal(t, WorkResult[int]{Value: (i + 1) * 10, State: ResultSuccess}, x, "item %d", i)
		}

		sub := subNode(t, run.Report(), "each").Sub
		require.NotNil(t, sub, "the node's report holds the sub-graph's run")
		require.Len(t, sub.Nodes, 5, "one node per item, and no join node without a Join")
		for i, n := range sub.Nodes {
			assert.Equal(t, strconv.Itoa(i), n.ID)
			want := StatusSucceeded
			if i == 2 {
				want = StatusFailed
			}
			assert.Equal(t, want, n.Status, n.ID)
		}
	})
}

func TestForEachAllSucceededFailsAtTheFirstFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		ids := idsNode(9)
		each := NewWrapper("each", ForEach[int, int, int]{Items: itemsOf(ids), Worker: sleepy(4), Join: AllSucceeded()}, 0).
			Depend(ids, true)
		var ended time.Duration
		start := time.Now()
		after := NewWrapper("after", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			ended = time.Since(start)
			return 0, nil
		}), 0).Depend(each, true).Join(AllDone())
		run, err := a.Start(context.Background(), time.Second, ids)
		require.NoError(t, err)
		require.NoError(t, run.Wait(context.Background()))
		assert.Equal(t, 4*time.Millisecond, ended, "the node ended with item 4's failure, not with item 9")
		assert.Equal(t, ResultSuccess, after.Result().State)

		r := each.Result()
		require.Error(t, r.Err)
		assert.ErrorContains(t, r.Err, "item 4 failed", "the node's error wraps the failed item's")
		assert.ErrorContains(t, r.Err, "ForEach's join (all succeeded)")
		var up *UpstreamError
		assert.ErrorAs(t, r.Err, &up)

		synctest.Wait()
		sub := subNode(t, run.Report(), "each").Sub
		require.NotNil(t, sub)
		require.Len(t, sub.Nodes, 10, "nine items and the join")
		for _, n := range sub.Nodes[:3] {
			assert.Equal(t, StatusSucceeded, n.Status, n.ID)
		}
		assert.Equal(t, StatusFailed, sub.Nodes[3].Status)
		for _, n := range sub.Nodes[4:9] {
			assert.Equal(t, StatusTimedOut, n.Status, "item %s was stopped when the join failed", n.ID)
			assert.ErrorIs(t, n.Err, ErrRunEnded, n.ID)
		}
		assert.Equal(t, joinID, sub.Nodes[9].ID)
		assert.Equal(t, StatusFailed, sub.Nodes[9].Status)
	})
}

func TestForEachAnySucceededReturnsAtTheFirstSuccess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		ids := idsNode(6)
		var calls atomic.Int32
		w := WorkerFunc[int, int](func(ctx context.Context, id int, all Wrappers) (int, error) {
			calls.Add(1)
			return sleepy(1, 2)(ctx, id, all)
		})
		each := NewWrapper("each", ForEach[int, int, int]{Items: itemsOf(ids), Worker: w, Join: AnySucceeded()}, 0).
			Depend(ids, true)
		start := time.Now()
		run, err := a.Start(context.Background(), time.Second, ids)
		require.NoError(t, err)
		require.NoError(t, run.Wait(context.Background()))
		assert.Equal(t, 3*time.Millisecond, time.Since(start), "items 1 and 2 failed; item 3 is the first success")
		r := each.Result()
		require.NoError(t, r.Err)
		assert.Equal(t, 30, r.Value[2].Value)
		for _, x := range r.Value[3:] {
			assert.ErrorIs(t, x.Err, ErrRunEnded, "the items still running were stopped")
		}
		assert.Equal(t, int32(6), calls.Load(), "every item started at once")
	})
}

func TestForEachQuorum(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		for _, tc := range []struct {
			fail []int
			ok   bool
			at   time.Duration
		}{
			{fail: nil, ok: true, at: 3 * time.Millisecond},             // 1, 2, 3 succeed
			{fail: []int{2}, ok: true, at: 4 * time.Millisecond},        // 1, 3, 4
			{fail: []int{1, 2, 3}, ok: false, at: 3 * time.Millisecond}, // 4 and 5 cannot make 3
		} {
			ids := idsNode(5)
			each := NewWrapper("each", ForEach[int, int, int]{Items: itemsOf(ids), Worker: sleepy(tc.fail...), Join: AtLeast(3)}, 0).
				Depend(ids, true)
			start := time.Now()
			run, err := a.Start(context.Background(), time.Second, ids)
			require.NoError(t, err)
			require.NoError(t, run.Wait(context.Background()))
			assert.Equal(t, tc.at, time.Since(start), "fail %v", tc.fail)
			if tc.ok {
				assert.NoError(t, each.Result().Err, "fail %v", tc.fail)
			} else {
				assert.ErrorContains(t, each.Result().Err, "ForEach's join (at least 3 succeeded)", "fail %v", tc.fail)
			}
		}
	})
}

func TestForEachEmptyAndFailedItems(t *testing.T) {
	a := newAsync(t)
	none := NewWrapper("none", ForEach[int, int, int]{
		Items:  func(context.Context, int, Wrappers) ([]int, error) { return nil, nil },
		Worker: okWorker(),
		Join:   AllSucceeded(),
	}, 0)
	bad := NewWrapper("bad", ForEach[int, int, int]{
		Items:  func(context.Context, int, Wrappers) ([]int, error) { return nil, errors.New("no list") },
		Worker: okWorker(),
	}, 0)
	run, err := a.Start(context.Background(), time.Second, none, bad)
	require.NoError(t, err)
	require.NoError(t, run.Wait(context.Background()))
	assert.Equal(t, WorkResult[[]WorkResult[int]]{Value: []WorkResult[int]{}, State: ResultSuccess}, none.Result(), "no items: an empty result")
	assert.EqualError(t, bad.Result().Err, "asynctool: ForEach's Items: no list")
	rep := run.Report()
	assert.Nil(t, subNode(t, rep, "none").Sub, "nothing ran")
	assert.Nil(t, subNode(t, rep, "bad").Sub, "nothing ran")
}

func TestForEachNodeSetsUpItems(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		var tries sync.Map // item -> *atomic.Int32
		w := WorkerFunc[int, int](func(ctx context.Context, id int, _ Wrappers) (int, error) {
			n, _ := tries.LoadOrStore(id, new(atomic.Int32))
			if n.(*atomic.Int32).Add(1) == 1 && id%2 == 0 {
				return 0, errors.New("flaky")
			}
			if id == 3 {
				<-ctx.Done() // slow: its own Timeout ends it
				return 0, ctx.Err()
			}
			return id, nil
		})
		each := NewWrapper("each", ForEach[int, int, int]{
			Items:  func(context.Context, int, Wrappers) ([]int, error) { return []int{1, 2, 3, 4}, nil },
			Worker: w,
			Node: func(i int, _ int, n *WorkerWrapper[int, int]) {
				n.Retry(RetryPolicy{Attempts: 2}).Timeout(5 * time.Millisecond).Default(-i)
			},
		}, 0)
		run, err := a.Start(context.Background(), time.Second, each)
		require.NoError(t, err)
		require.NoError(t, run.Wait(context.Background()))
		r := each.Result().Value
		assert.Equal(t, []int{1, 2, -2, 4}, []int{r[0].Value, r[1].Value, r[2].Value, r[3].Value})
		assert.Equal(t, ResultTimeout, r[2].State)
		sub := subNode(t, run.Report(), "each").Sub
		assert.Equal(t, 2, sub.Nodes[1].Attempts, "item 2 was retried")
	})
}

// TestForEachEndsWithTheNode: the node's Timeout stops its sub-graph's
// run, whose items see their context end.
func TestForEachEndsWithTheNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		var stopped atomic.Int32
		each := NewWrapper("each", ForEach[int, int, int]{
			Items: func(context.Context, int, Wrappers) ([]int, error) { return []int{1, 2, 3}, nil },
			Worker: WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
				<-ctx.Done()
				stopped.Add(1)
				return 0, ctx.Err()
			}),
		}, 0).Timeout(10 * time.Millisecond)
		start := time.Now()
		run, err := a.Start(context.Background(), time.Second, each)
		require.NoError(t, err)
		require.NoError(t, run.Wait(context.Background()))
		assert.Equal(t, 10*time.Millisecond, time.Since(start))
		assert.Equal(t, ResultTimeout, each.Result().State)
		synctest.Wait()
		assert.Equal(t, int32(3), stopped.Load(), "every item's worker saw its context end")
		for _, n := range subNode(t, run.Report(), "each").Sub.Nodes {
			assert.Equal(t, StatusTimedOut, n.Status, n.ID)
		}
	})
}

// TestForEachBlockingItemsAreNotCapped: 200 items that each block for a
// second take a second with the default Async, as 200 goroutines would.
func TestForEachBlockingItemsAreNotCapped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		items := make([]int, 200)
		each := NewWrapper("each", ForEach[int, int, int]{
			Items: func(context.Context, int, Wrappers) ([]int, error) { return items, nil },
			Worker: WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
				time.Sleep(time.Second)
				return 1, nil
			}),
		}, 0)
		start := time.Now()
		run, err := a.Start(context.Background(), time.Minute, each)
		require.NoError(t, err)
		require.NoError(t, run.Wait(context.Background()))
		assert.Equal(t, time.Second, time.Since(start))
		assert.Len(t, each.Result().Value, 200)
	})
}

func TestForEachOnAPlanConcurrently(t *testing.T) {
	a := newAsync(t)
	ids := NewWrapper("ids", WorkerFunc[int, []int](func(ctx context.Context, _ int, _ Wrappers) ([]int, error) {
		n := ctx.Value(subUserKey{}).(int)
		return []int{n, n + 1, n + 2}, nil
	}), 0)
	each := NewWrapper("each", ForEach[int, int, int]{
		Items:  itemsOf(ids),
		Worker: WorkerFunc[int, int](func(_ context.Context, id int, _ Wrappers) (int, error) { return id * 2, nil }),
		Join:   AllSucceeded(),
	}, 0).Depend(ids, true)
	pl, err := Compile(ids)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for g := range 50 {
		wg.Go(func() {
			for k := range 20 {
				n := g*1000 + k
				run, err := a.RunPlan(context.WithValue(context.Background(), subUserKey{}, n), pl, time.Minute)
				if !assert.NoError(t, err) {
					return
				}
				r := each.ResultIn(run)
				if assert.NoError(t, r.Err) && assert.Len(t, r.Value, 3) {
					assert.Equal(t, []int{2 * n, 2*n + 2, 2*n + 4}, []int{r.Value[0].Value, r.Value[1].Value, r.Value[2].Value})
				}
				sub := subNode(t, run.Report(), "each").Sub
				if assert.NotNil(t, sub) {
					assert.Len(t, sub.Nodes, 4)
				}
				run.Release()
			}
		})
	}
	wg.Wait()
}

func TestSubGraph(t *testing.T) {
	a := newAsync(t)
	// A chain of as many nodes as the param says, each adding one.
	chain := SubGraph[int, int]{Build: func(_ context.Context, n int, _ Wrappers) (Built[int], error) {
		var first, last *WorkerWrapper[int, int]
		for i := range n {
			k := i
			w := NewWrapper("step"+strconv.Itoa(i), WorkerFunc[int, int](func(_ context.Context, _ int, all Wrappers) (int, error) {
				if k == 0 {
					return 1, nil
				}
				prev, err := ResultOf[int](all, "step"+strconv.Itoa(k-1))
				return prev.Value + 1, err
			}), 0)
			if last != nil {
				w.Depend(last, true)
			} else {
				first = w
			}
			last = w
		}
		if first == nil {
			return Built[int]{Output: func() (int, error) { return 0, nil }}, nil
		}
		return Built[int]{Starts: []Wrapper{first}, Output: func() (int, error) {
			r := last.Result()
			return r.Value, r.Err
		}}, nil
	}}
	three := NewWrapper("three", chain, 3)
	zero := NewWrapper("zero", chain, 0)
	run, err := a.Start(context.Background(), time.Second, three, zero)
	require.NoError(t, err)
	require.NoError(t, run.Wait(context.Background()))
	assert.Equal(t, 3, three.Result().Value)
	assert.Equal(t, WorkResult[int]{State: ResultSuccess}, zero.Result(), "a graph of no nodes: Output at once")
	rep := run.Report()
	assert.Len(t, subNode(t, rep, "three").Sub.Nodes, 3)
	assert.Nil(t, subNode(t, rep, "zero").Sub)
	assert.Contains(t, rep.String(), "three: succeeded\n  step0: succeeded\n  step1: succeeded by=step0\n  step2: succeeded by=step1\n", rep.String())
}

func TestSubGraphBadGraphs(t *testing.T) {
	a := newAsync(t)
	used := NewWrapper("used", okWorker(), 0)
	run, err := a.Start(context.Background(), time.Second, used)
	require.NoError(t, err)
	require.NoError(t, run.Wait(context.Background()))

	graph := func(build func() ([]Wrapper, error)) SubGraph[int, int] {
		return SubGraph[int, int]{Build: func(context.Context, int, Wrappers) (Built[int], error) {
			starts, err := build()
			return Built[int]{Starts: starts, Output: func() (int, error) { return 1, nil }}, err
		}}
	}
	dup := NewWrapper("dup", graph(func() ([]Wrapper, error) {
		x := NewWrapper("x", okWorker(), 0)
		return []Wrapper{x, NewWrapper("x", okWorker(), 0).Depend(x, true)}, nil
	}), 0)
	cycle := NewWrapper("cycle", graph(func() ([]Wrapper, error) {
		x, y := NewWrapper("x", okWorker(), 0), NewWrapper("y", okWorker(), 0)
		x.Depend(y, true)
		y.Depend(x, true)
		return []Wrapper{x}, nil
	}), 0)
	reused := NewWrapper("reused", graph(func() ([]Wrapper, error) { return []Wrapper{used}, nil }), 0)
	failed := NewWrapper("failed", graph(func() ([]Wrapper, error) { return nil, errors.New("cannot build") }), 0)
	noOutput := NewWrapper("nooutput", SubGraph[int, int]{Build: func(context.Context, int, Wrappers) (Built[int], error) {
		return Built[int]{}, nil
	}}, 0)
	run, err = a.Start(context.Background(), time.Second, dup, cycle, reused, failed, noOutput)
	require.NoError(t, err)
	require.NoError(t, run.Wait(context.Background()))

	var ge *GraphError
	assert.ErrorIs(t, dup.Result().Err, ErrDuplicateID)
	assert.ErrorAs(t, dup.Result().Err, &ge)
	assert.ErrorIs(t, cycle.Result().Err, ErrCycle)
	assert.ErrorContains(t, cycle.Result().Err, "SubGraph's graph: ")
	assert.ErrorIs(t, reused.Result().Err, ErrReused)
	assert.EqualError(t, failed.Result().Err, "asynctool: SubGraph's Build: cannot build")
	assert.ErrorIs(t, noOutput.Result().Err, ErrNilWorker)
	for _, id := range []string{"dup", "cycle", "reused", "failed", "nooutput"} {
		assert.Nil(t, subNode(t, run.Report(), id).Sub, "%s ran nothing", id)
	}
}

func TestSubGraphRefusals(t *testing.T) {
	var nilGraph *SubGraph[int, int]
	var nilEach *ForEach[int, int, int]
	for name, w := range map[string]Worker[int, int]{
		"no Build":          SubGraph[int, int]{},
		"nil *SubGraph":     nilGraph,
		"Hedged of nothing": Hedged[int, int](nilGraph, time.Millisecond, 2),
	} {
		_, err := Compile(NewWrapper("n", w, 0))
		assert.ErrorIs(t, err, ErrNilWorker, name)
	}
	for name, w := range map[string]Worker[int, []WorkResult[int]]{
		"no Items":        ForEach[int, int, int]{Worker: okWorker()},
		"no Worker":       ForEach[int, int, int]{Items: func(context.Context, int, Wrappers) ([]int, error) { return nil, nil }},
		"nil WorkerFunc":  ForEach[int, int, int]{Items: func(context.Context, int, Wrappers) ([]int, error) { return nil, nil }, Worker: WorkerFunc[int, int](nil)},
		"nil *ForEach":    nilEach,
		"bad Hedged item": ForEach[int, int, int]{Items: func(context.Context, int, Wrappers) ([]int, error) { return nil, nil }, Worker: Hedged[int, int](okWorker(), -1, 2)},
	} {
		_, err := Compile(NewWrapper("n", w, 0))
		assert.Error(t, err, name)
		if name != "bad Hedged item" {
			assert.ErrorIs(t, err, ErrNilWorker, name)
		} else {
			assert.ErrorIs(t, err, ErrBadRetry, name)
		}
	}
	_, err := ForEach[int, int, int]{}.Action(context.Background(), 0, Wrappers{})
	assert.ErrorIs(t, err, ErrNilWorker, "called by hand")
	_, err = SubGraph[int, int]{Build: func(context.Context, int, Wrappers) (Built[int], error) { return Built[int]{}, nil }}.
		Action(context.Background(), 0, Wrappers{})
	assert.ErrorContains(t, err, "called outside a run")
}

// TestForEachSuspendedItem: an item whose PolicySuspend leaves it pending
// cancels the sub-graph's run and fails the node, as in a SubPlan.
func TestForEachSuspendedItem(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		each := NewWrapper("each", ForEach[int, int, int]{
			Items: func(context.Context, int, Wrappers) ([]int, error) { return []int{1, 2}, nil },
			Worker: WorkerFunc[int, int](func(_ context.Context, id int, _ Wrappers) (int, error) {
				if id == 2 {
					return 0, errors.New("needs a person")
				}
				return id, nil
			}),
			Node: func(_ int, _ int, n *WorkerWrapper[int, int]) { n.OnFailure(PolicySuspend) },
		}, 0)
		start := time.Now()
		run, err := a.Start(context.Background(), time.Minute, each)
		require.NoError(t, err)
		require.NoError(t, run.Wait(context.Background()))
		assert.Less(t, time.Since(start), time.Minute, "the node did not wait for the deadline")
		assert.ErrorContains(t, each.Result().Err, `asynctool: ForEach's items suspended at node "1", and was cancelled: needs a person`)
	})
}

// TestForEachItemUnderPolicyEnd: an item under PolicyEnd that fails ends
// the items' sub-run, not the outer run: the other items are stopped with
// its EndError, and the node fails with it, with the zero Join (which
// otherwise succeeds however its items ended) as with AllDone.
func TestForEachItemUnderPolicyEnd(t *testing.T) {
	for _, j := range []Join{{}, AllDone()} {
		t.Run(j.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a := New()
				defer a.Close()
				items := make([]*WorkerWrapper[int, int], 3)
				each := NewWrapper("each", ForEach[int, int, int]{
					Items: func(context.Context, int, Wrappers) ([]int, error) { return []int{0, 1, 2}, nil },
					Worker: WorkerFunc[int, int](func(ctx context.Context, i int, _ Wrappers) (int, error) {
						if i == 1 {
							time.Sleep(time.Millisecond)
							return 0, errBoom
						}
						<-ctx.Done()
						return 0, ctx.Err()
					}),
					Node: func(i int, _ int, n *WorkerWrapper[int, int]) { items[i] = n.OnFailure(PolicyEnd) },
					Join: j,
				}, 0)
				other := NewWrapper("other", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
					time.Sleep(time.Second)
					return 1, nil
				}), 0)
				start := time.Now()
				require.NoError(t, a.BeginWork(context.Background(), time.Minute, each, other), "the outer run is not ended")
				var ee *EndError
				require.ErrorAs(t, each.Result().Err, &ee)
				assert.Equal(t, "1", ee.ID)
				assert.ErrorIs(t, ee, errBoom)
				for _, i := range []int{0, 2} {
					assert.ErrorAs(t, items[i].Result().Err, &ee, "item %d", i)
				}
				assert.Equal(t, WorkResult[int]{Value: 1, State: ResultSuccess}, other.Result())
				assert.Equal(t, time.Second, time.Since(start), "the outer run waited for other")
			})
		})
	}
}

func TestForEachID(t *testing.T) {
	a := newAsync(t)
	skus := func(context.Context, int, Wrappers) ([]string, error) { return []string{"book", "lamp"}, nil }
	length := WorkerFunc[string, int](func(_ context.Context, s string, _ Wrappers) (int, error) { return len(s), nil })
	named := NewWrapper("named", ForEach[int, string, int]{
		Items: skus, Worker: length, Join: AllSucceeded(),
		ID: func(i int, sku string) string { return fmt.Sprintf("%s#%d", sku, i) },
	}, 0)
	same := NewWrapper("same", ForEach[int, string, int]{
		Items: skus, Worker: length,
		ID: func(int, string) string { return "x" },
	}, 0)
	clash := NewWrapper("clash", ForEach[int, string, int]{
		Items: skus, Worker: length, Join: AllSucceeded(),
		ID: func(i int, _ string) string { return []string{"a", joinID}[i] },
	}, 0)
	joinless := NewWrapper("joinless", ForEach[int, string, int]{
		Items: skus, Worker: length,
		ID: func(int, string) string { return joinID },
	}, 0)
	run, err := a.Start(context.Background(), time.Second, named, same, clash, joinless)
	require.NoError(t, err)
	require.NoError(t, run.Wait(context.Background()))
	require.NoError(t, named.Result().Err)
	assert.Equal(t, 4, named.Result().Value[1].Value)
	var ids []string
	for _, n := range subNode(t, run.Report(), "named").Sub.Nodes {
		ids = append(ids, n.ID)
	}
	assert.Equal(t, []string{"book#0", "lamp#1", joinID}, ids)
	assert.ErrorIs(t, same.Result().Err, ErrDuplicateID)
	assert.ErrorContains(t, same.Result().Err, `ForEach's ID gave items 0 and 1 the same name "x"`)
	assert.ErrorIs(t, clash.Result().Err, ErrDuplicateID, "an item named join clashes with the join node")
	assert.ErrorContains(t, clash.Result().Err, `ForEach's ID gave item 1 the name "join", which its Join's node has`)
	assert.ErrorContains(t, joinless.Result().Err, `ForEach's ID gave items 0 and 1 the same name "join"`, "without a Join, no node is named join")

	empty := NewWrapper("empty", ForEach[int, string, int]{
		Items: skus, Worker: length,
		ID: func(i int, _ string) string { return []string{"a", ""}[i] },
	}, 0)
	run, err = a.Start(context.Background(), time.Second, empty)
	require.NoError(t, err)
	require.NoError(t, run.Wait(context.Background()))
	assert.EqualError(t, empty.Result().Err, "asynctool: ForEach's ID gave item 1 an empty name")
	assert.Nil(t, subNode(t, run.Report(), "empty").Sub, "nothing ran")
}

// TestForEachIDInAJoin: with ID, a Join names items by their names, which
// Compile cannot know; a name that is no item's fails the node when the
// items are known.
func TestForEachIDInAJoin(t *testing.T) {
	a := newAsync(t)
	skus := func(context.Context, int, Wrappers) ([]string, error) { return []string{"book", "lamp", "mug"}, nil }
	length := WorkerFunc[string, int](func(_ context.Context, s string, _ Wrappers) (int, error) {
		if s == "mug" {
			return 0, errors.New("no mug")
		}
		return len(s), nil
	})
	byName := func(_ int, sku string) string { return sku }
	named := NewWrapper("named", ForEach[int, string, int]{
		Items: skus, Worker: length, ID: byName, Join: NamedSucceeded("book", "lamp"),
	}, 0)
	when := NewWrapper("when", ForEach[int, string, int]{
		Items: skus, Worker: length, ID: byName, Join: When("lamp", func(n int) bool { return n == 4 }),
	}, 0)
	unknown := NewWrapper("unknown", ForEach[int, string, int]{
		Items: skus, Worker: length, ID: byName, Join: NamedSucceeded("sofa"),
	}, 0)
	pl, err := Compile(named, when, unknown)
	require.NoError(t, err, "names are checked when the items are known")
	run, err := a.RunPlan(context.Background(), pl, time.Second)
	require.NoError(t, err)
	defer run.Release()
	assert.NoError(t, named.ResultIn(run).Err, "book and lamp succeeded; mug's failure is not named")
	assert.ErrorContains(t, when.ResultIn(run).Err, "no mug", "When needs every item to succeed, and mug failed")
	assert.ErrorIs(t, unknown.ResultIn(run).Err, ErrBadJoin)
	assert.ErrorContains(t, unknown.ResultIn(run).Err, `it names item "sofa", and there are 3 items, which ID names "book", "lamp", "mug"`)
}

// TestSubGraphGoexitCancelsTheSubRun: a node of the sub-graph that ends
// the worker's goroutine with runtime.Goexit (t.FailNow in a fake) fails
// the node with ErrGoexit and stops the rest of the sub-graph then, not
// when the outer run ends.
func TestSubGraphGoexitCancelsTheSubRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		start := time.Now()
		var stoppedAt atomic.Int64 // ns after start, -1 if waits never started
		stoppedAt.Store(-1)
		node := NewWrapper("sub", SubGraph[int, int]{Build: func(context.Context, int, Wrappers) (Built[int], error) {
			quits := NewWrapper("quits", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
				runtime.Goexit()
				return 0, nil
			}), 0)
			waits := NewWrapper("waits", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
				<-ctx.Done()
				stoppedAt.Store(int64(time.Since(start)))
				return 0, ctx.Err()
			}), 0)
			return Built[int]{Starts: []Wrapper{quits, waits}, Output: func() (int, error) { return 1, nil }}, nil
		}}, 0)
		other := NewWrapper("other", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			time.Sleep(time.Second) // the outer run goes on
			return 0, nil
		}), 0)
		run, err := a.Start(context.Background(), time.Minute, node, other)
		require.NoError(t, err)
		time.Sleep(500 * time.Millisecond)
		mid := run.Report() // the outer run goes on; its node sub has ended
		require.NoError(t, run.Wait(context.Background()))
		assert.Equal(t, time.Second, time.Since(start))
		assert.ErrorIs(t, node.Result().Err, ErrGoexit)
		assert.Contains(t, []int64{-1, 0}, stoppedAt.Load(), "the sub-graph's other node, if it started, was stopped at once, not with the outer run")
		require.Equal(t, StatusFailed, mid.Nodes[0].Status)
		sub := mid.Nodes[0].Sub
		require.NotNil(t, sub)
		assert.ErrorIs(t, sub.Nodes[0].Err, ErrGoexit)
		assert.Equal(t, StatusTimedOut, sub.Nodes[1].Status, "the sub-run ended with its node:\n%v", mid)
	})
}

// TestHedgedForEachOfSubGraphsShowsTheWinner: a Hedged ForEach whose items
// are SubGraphs (sub-runs inside the call's sub-run) still shows the
// winning call's sub-run: the items' sub-runs carry the call's token in
// their context, and must not take the call's place.
func TestHedgedForEachOfSubGraphsShowsTheWinner(t *testing.T) {
	// Fake time: the hedge starts at 5ms, well before call 1 answers at
	// 20ms, however slow the machine (on a real clock, a goroutine held
	// back 15ms let call 1 answer first, and the timer and the answer, both
	// ready, were picked at random).
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		var calls atomic.Int32
		leaf := SubGraph[int, int]{Build: func(_ context.Context, call int, _ Wrappers) (Built[int], error) {
			w := NewWrapper("leaf", firstCallWins(20*time.Millisecond), call)
			return Built[int]{Starts: []Wrapper{w}, Output: func() (int, error) { r := w.Result(); return r.Value, r.Err }}, nil
		}}
		fe := ForEach[int, int, int]{
			Items:  func(context.Context, int, Wrappers) ([]int, error) { return []int{int(calls.Add(1))}, nil },
			Worker: leaf,
		}
		each := NewWrapper("each", Hedged[int, []WorkResult[int]](fe, 5*time.Millisecond, 2), 0)
		run, err := a.Start(context.Background(), time.Minute, each)
		require.NoError(t, err)
		require.NoError(t, run.Wait(context.Background()))
		require.Equal(t, 2, int(calls.Load()), "the hedge started")
		require.Equal(t, 1, each.Result().Value[0].Value, "the first call won")
		sub := subNode(t, run.Report(), "each").Sub
		require.NotNil(t, sub)
		assert.Equal(t, StatusSucceeded, sub.Nodes[0].Status, "the report shows the sub-run whose items the node returned:\n%v", run.Report())
		require.NotNil(t, sub.Nodes[0].Sub)
		assert.Equal(t, StatusSucceeded, sub.Nodes[0].Sub.Nodes[0].Status)
	})
}

// TestForEachAllocatesAboutOneObjectPerItem guards the README's claim: an
// item costs about one object (its wrapper) on top of a fixed cost per
// ForEach call.
func TestForEachAllocatesAboutOneObjectPerItem(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	a := newAsync(t, WithMaxWorkers(2))
	allocs := func(n int) float64 {
		items := make([]int, n)
		each := NewWrapper("each", ForEach[int, int, int]{
			Items:  func(context.Context, int, Wrappers) ([]int, error) { return items, nil },
			Worker: okWorker(),
		}, 0)
		pl, err := Compile(each)
		require.NoError(t, err)
		run := func() {
			r, err := a.RunPlan(context.Background(), pl, time.Minute)
			if err != nil || len(each.ResultIn(r).Value) != n {
				panic(fmt.Sprint(err, each.ResultIn(r)))
			}
			r.Release()
		}
		for range 50 {
			run() // warm the pools
		}
		return testing.AllocsPerRun(200, run)
	}
	small, large := allocs(10), allocs(110)
	perItem := (large - small) / 100
	t.Logf("%.0f objects per run with 10 items, %.0f with 110: %.2f per item", small, large, perItem)
	assert.LessOrEqual(t, perItem, 1.3, "1.14 when written")
	assert.LessOrEqual(t, small, 60.0, "the fixed cost of a run with a ForEach (48 when written)")
}

// TestForEachItemsBoundedByThePool: the README says the Async's pool
// bounds a ForEach's calls. With WithMaxWorkers(2), ten items of 10ms
// never run more than two at once (the ForEach worker's goroutine, which
// runs items itself, is one of the two), and take 50ms.
func TestForEachItemsBoundedByThePool(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New(WithMaxWorkers(2))
		defer a.Close()
		var now, most atomic.Int32
		each := NewWrapper("each", ForEach[int, int, int]{
			Items: func(context.Context, int, Wrappers) ([]int, error) { return make([]int, 10), nil },
			Worker: WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
				n := now.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(10 * time.Millisecond)
				now.Add(-1)
				return 1, nil
			}),
		}, 0)
		start := time.Now()
		run, err := a.Start(context.Background(), time.Minute, each)
		require.NoError(t, err)
		require.NoError(t, run.Wait(context.Background()))
		assert.Equal(t, int32(2), most.Load())
		assert.Equal(t, 50*time.Millisecond, time.Since(start))
		assert.Len(t, each.Result().Value, 10)
	})
}

// TestCompileRejectsAForEachJoinNoListFits: a ForEach Join that no list
// of items can satisfy is refused by Compile (and BeginWork) with
// ErrBadJoin, as the same Join on a node is, instead of failing every run
// of the plan at run time with a GraphError about a hidden node "join"
// (and succeeding on an empty list). Item ids are "0", "1", ...: a name
// that is no index can never be an upstream of the join, and R is fixed,
// so When's type is known too.
func TestCompileRejectsAForEachJoinNoListFits(t *testing.T) {
	items := func(context.Context, int, Wrappers) ([]int, error) { return []int{1, 2, 3}, nil }
	a := newAsync(t)
	for name, j := range map[string]Join{
		"AtLeast(0)":             AtLeast(0),
		"AtLeast(-1)":            AtLeast(-1),
		"NamedSucceeded()":       NamedSucceeded(),
		`NamedSucceeded("join")`: NamedSucceeded("0", "join"),
		`NamedSucceeded("01")`:   NamedSucceeded("01"),
		`NamedSucceeded("-1")`:   NamedSucceeded("-1"),
		"CustomJoin(nil)":        CustomJoin(nil),
		"When nil cond":          When[int]("0", nil),
		"When a string":          When("0", func(string) bool { return true }),
		`When("x")`:              When("x", func(int) bool { return true }),
		"WhenResult a string":    WhenResult("1", func(WorkResult[string]) bool { return true }),
	} {
		w := NewWrapper("each", ForEach[int, int, int]{Items: items, Worker: okWorker(), Join: j}, 0)
		_, err := Compile(w)
		if assert.Error(t, err, name) {
			assert.ErrorIs(t, err, ErrBadJoin, name)
			assert.ErrorContains(t, err, `node "each"`, name)
			assert.ErrorContains(t, err, "ForEach's Join", name)
		}
		w = NewWrapper("each", ForEach[int, int, int]{Items: items, Worker: okWorker(), Join: j}, 0)
		assert.ErrorIs(t, a.BeginWork(context.Background(), 0, w), ErrBadJoin, name)
	}
	// Joins a list may fit are for the run to check, against its items.
	for name, j := range map[string]Join{
		"AtLeast(3)":                AtLeast(3),
		`NamedSucceeded("0", "10")`: NamedSucceeded("0", "10"),
		`When("2")`:                 When("2", func(int) bool { return true }),
		"When any":                  When("0", func(any) bool { return true }),
		"WhenResult":                WhenResult("0", func(WorkResult[int]) bool { return true }),
		"CustomJoin":                CustomJoin(func([]Upstream) Decision { return DecideRun }),
	} {
		_, err := Compile(NewWrapper("each", ForEach[int, int, int]{Items: items, Worker: okWorker(), Join: j}, 0))
		require.NoError(t, err, name)
	}
}

// reviewCallback is a Callback from a function of the result.
type reviewCallback[P, R any] func(r WorkResult[R])

func (reviewCallback[P, R]) Begin() {}

func (f reviewCallback[P, R]) Result(_ bool, _ P, r WorkResult[R]) { f(r) }

// TestForEachJoinNoItemsCanMeetFailsOnAnEmptyList: a Join that names items
// or counts successes (AtLeast(n), NamedSucceeded, When, WhenResult) fails
// the node with ErrBadJoin when the list has too few items for it, as
// AtLeast(3) over 2 items does, and so also when the list is empty: a
// quorum of 2 over no items is not met. Before, an empty list skipped the
// join and the node succeeded with an empty result, while one item more
// made it fail. Joins that an empty list meets (the zero Join,
// AllSucceeded, AllDone, AnySucceeded, CustomJoin: as for a node with no
// upstreams, which runs) still give an empty result.
func TestForEachJoinNoItemsCanMeetFailsOnAnEmptyList(t *testing.T) {
	a := newAsync(t)
	run := func(j Join, items ...int) WorkResult[[]WorkResult[int]] {
		t.Helper()
		each := NewWrapper("each", ForEach[int, int, int]{
			Items:  func(context.Context, int, Wrappers) ([]int, error) { return items, nil },
			Worker: okWorker(),
			Join:   j,
		}, 0)
		r, err := a.Start(context.Background(), time.Minute, each)
		require.NoError(t, err)
		require.NoError(t, r.Wait(context.Background()))
		return each.Result()
	}
	for name, j := range map[string]Join{
		"AtLeast(2)":          AtLeast(2),
		`NamedSucceeded("0")`: NamedSucceeded("0"),
		`When("0")`:           When("0", func(int) bool { return true }),
		`WhenResult("0")`:     WhenResult("0", func(WorkResult[int]) bool { return true }),
		"AnySucceeded":        AnySucceeded(), // a read of any replica over no replicas read nothing
	} {
		if name == "AtLeast(2)" {
			assert.ErrorIs(t, run(j, 1).Err, ErrBadJoin, "%s over one item", name)
		}
		r := run(j)
		assert.ErrorIs(t, r.Err, ErrBadJoin, "%s over no items", name)
		assert.ErrorContains(t, r.Err, "ForEach's join ("+j.String()+")", name)
		assert.ErrorContains(t, r.Err, "0 items", name)
	}
	for name, j := range map[string]Join{
		"zero":         {},
		"AllSucceeded": AllSucceeded(),
		"AllDone":      AllDone(),
		"CustomJoin":   CustomJoin(func([]Upstream) Decision { return DecideFail }),
	} {
		assert.Equal(t, WorkResult[[]WorkResult[int]]{Value: []WorkResult[int]{}, State: ResultSuccess}, run(j), name)
	}
}

// TestForEachJoinTooFewItemsMeetNamesTheItems: the error of a Join that the
// list has too few items for speaks of the ForEach's join and its items,
// not of a GraphError about a node "join" and its upstreams, which the
// caller never made; and Node is not called for a graph that cannot run.
func TestForEachJoinTooFewItemsMeetNamesTheItems(t *testing.T) {
	a := newAsync(t)
	for j, want := range map[*Join]string{
		ptr(AtLeast(4)):                                `asynctool: ForEach's join (at least 4 succeeded): asynctool: invalid join: 3 items cannot make 4 successes`,
		ptr(NamedSucceeded("0", "3")):                  `asynctool: ForEach's join (named ["0" "3"] succeeded): asynctool: invalid join: it names item "3", and there are 3 items`,
		ptr(When("5", func(int) bool { return true })): `asynctool: ForEach's join (when "5"): asynctool: invalid join: it names item "5", and there are 3 items`,
	} {
		nodes := 0
		each := NewWrapper("each", ForEach[int, int, int]{
			Items:  func(context.Context, int, Wrappers) ([]int, error) { return []int{1, 2, 3}, nil },
			Worker: okWorker(),
			Node:   func(int, int, *WorkerWrapper[int, int]) { nodes++ },
			Join:   *j,
		}, 0)
		r, err := a.Start(context.Background(), time.Minute, each)
		require.NoError(t, err)
		require.NoError(t, r.Wait(context.Background()))
		assert.EqualError(t, each.Result().Err, want)
		assert.ErrorIs(t, each.Result().Err, ErrBadJoin)
		assert.Zero(t, nodes, want)
		assert.Nil(t, subNode(t, r.Report(), "each").Sub, "nothing ran")
	}
}

func ptr[T any](v T) *T { return &v }

// TestForEachReportFromAStoppedItemsCallback: a Result callback of an item
// that the sub-run's sweep stops, which calls Report on the outer run
// while the outer run goes on (and again once it has ended), returns:
// Report does not wait for a sweep that is running the caller. Before, it
// waited for itself, for good, and Close with it.
//
// It runs on a real clock: an item's goroutine held back past each's
// Timeout runs its own callback, not the sweep, which is how it hung
// before 4028a04 (under synctest the sweep runs every callback). A run in
// which each's goroutine was held back past the 5ms Timeout before it
// called Items has no sub-run and no item callback: it is run again (it
// waited 30s for reports that could never come, 4 runs in 50 with
// CHAOS=5, each reported "stopped before it started").
func TestForEachReportFromAStoppedItemsCallback(t *testing.T) {
	for try := 0; !reportFromAStoppedItemsCallback(t); try++ {
		if try == 9 {
			t.Fatal("each ended before it called Items in 10 runs")
		}
	}
}

// reportFromAStoppedItemsCallback runs TestForEachReportFromAStoppedItemsCallback's case once; false
// if each ended before it called Items.
func reportFromAStoppedItemsCallback(t *testing.T) bool {
	a := newAsync(t)
	gate := make(chan struct{})
	release := releaser(t, gate)
	var run *Run
	started := make(chan struct{})
	reported := make(chan *Report, 3)
	itemsCalled := make(chan struct{})
	calledItems := sync.OnceFunc(func() { close(itemsCalled) })
	called := func() bool {
		select {
		case <-itemsCalled:
			return true
		default:
			return false
		}
	}
	each := NewWrapper("each", ForEach[int, int, int]{
		Items: func(context.Context, int, Wrappers) ([]int, error) {
			calledItems()
			return []int{1, 2, 3}, nil
		},
		Worker: WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			<-gate // ignores its ctx
			return 0, nil
		}),
		Node: func(_ int, _ int, n *WorkerWrapper[int, int]) {
			n.Callback(reviewCallback[int, int](func(r WorkResult[int]) {
				if r.State == ResultTimeout {
					<-started
					reported <- run.Report()
				}
			}))
		},
	}, 0).Timeout(5 * time.Millisecond)
	other := NewWrapper("other", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		<-gate // keeps the run going
		return 1, nil
	}), 0)
	var err error
	run, err = a.Start(context.Background(), time.Minute, each, other)
	require.NoError(t, err)
	close(started)
	for deadline := time.Now().Add(30 * time.Second); !called() && each.State() != StateError; {
		require.True(t, time.Now().Before(deadline), "each neither called Items nor ended")
		time.Sleep(time.Millisecond)
	}
	if !called() {
		// each ended first. Its goroutine may still call Items if it was
		// past its checks: once the run is done, it cannot.
		release()
		_ = run.Wait(context.Background())
		require.NoError(t, a.Close())
		if !called() {
			return false
		}
	}
	for range 3 {
		select {
		case rep := <-reported:
			assert.NotNil(t, subNode(t, rep, "each").Sub, "a snapshot, taken while the sweep ran the callback")
		case <-time.After(30 * time.Second):
			t.Fatal("Report, called from a stopped item's callback, did not return")
		}
	}
	release()
	require.NoError(t, run.Wait(context.Background()))
	require.NoError(t, a.Close()) // the sub-run's sweep has returned
	for _, n := range subNode(t, run.Report(), "each").Sub.Nodes {
		assert.Equal(t, StatusTimedOut, n.Status, n.ID)
	}
	return true
}

// TestJoinMisfitCountsInWords: the error of a join the items cannot meet
// says "1 item" and "1 success", not "1 items" and "1 successes".
func TestJoinMisfitCountsInWords(t *testing.T) {
	for _, c := range []struct {
		j     Join
		ids   []string
		named bool // the ids are the names a ForEach's ID gave
		want  string
	}{
		{AtLeast(1), nil, false, "0 items cannot make 1 success"},
		{AtLeast(2), []string{"0"}, false, "1 item cannot make 2 successes"},
		{AtLeast(4), []string{"0", "1", "2"}, false, "3 items cannot make 4 successes"},
		{AnySucceeded(), nil, false, "0 items cannot make 1 success"},
		{NamedSucceeded("1"), []string{"0"}, false, `it names item "1", and there is 1 item`},
		{NamedSucceeded("0"), []string{"book"}, true, `it names item "0", and there is 1 item, which ID names "book"`},
		{NamedSucceeded("0"), []string{"a", "b", "c", "d", "e", "f"}, true, `it names item "0", and there are 6 items, which ID names "a", "b", "c", "d", "e", ...`},
		{AtLeast(2), []string{"book"}, true, "1 item cannot make 2 successes"},
	} {
		assert.Equal(t, c.want, c.j.misfit(c.ids, c.named), c.j.String())
	}
}
