package asynctool

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// With a Budget, the node goes on when it runs out, with every item's
// result: those that ended, and those it stopped or kept from starting,
// each with its default and a BudgetError.
func TestForEachBudgetKeepsWhatArrived(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		var g gauge
		f := sleepItems(4, 1, 30*time.Millisecond, &g)
		f.Node = func(i int, _ int, n *WorkerWrapper[int, int]) { n.Default(-1) }
		f.Budget = 70 * time.Millisecond
		each := NewWrapper("each", f, 0)
		start := time.Now()
		run, err := a.Start(context.Background(), time.Minute, each)
		require.NoError(t, err)
		require.NoError(t, run.Wait(context.Background()))
		assert.Equal(t, 70*time.Millisecond, time.Since(start))
		res := each.Result()
		require.NoError(t, res.Err)
		require.Len(t, res.Value, 4)
		assert.Equal(t, 0, res.Value[0].Value)
		assert.Equal(t, 10, res.Value[1].Value)
		for _, i := range []int{2, 3} {
			r := res.Value[i]
			assert.Equal(t, -1, r.Value, "item %d", i)
			assert.Equal(t, ResultTimeout, r.State, "item %d", i)
			var be *BudgetError
			require.ErrorAs(t, r.Err, &be, "item %d", i)
			assert.Equal(t, 70*time.Millisecond, be.Budget)
			assert.ErrorIs(t, r.Err, context.DeadlineExceeded)
			assert.EqualError(t, r.Err, "asynctool: ForEach's Budget of 70ms ran out")
		}
		sub := run.Report().Nodes[0].Sub
		require.NotNil(t, sub)
		assert.True(t, sub.Nodes[2].Ran, "item 2 was stopped while running")
		assert.False(t, sub.Nodes[3].Ran, "item 3 never started")
		synctest.Wait()
		assert.Zero(t, g.now.Load(), "the stopped item's worker saw its context end")
	})
}

// The Budget counts from the moment Items has returned.
func TestForEachBudgetCountsFromTheItems(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		var g gauge
		f := sleepItems(2, 0, 20*time.Millisecond, &g)
		items := f.Items
		f.Items = func(ctx context.Context, p int, all Wrappers) ([]int, error) {
			time.Sleep(50 * time.Millisecond)
			return items(ctx, p, all)
		}
		f.Budget = 30 * time.Millisecond
		each := NewWrapper("each", f, 0)
		require.NoError(t, a.BeginWork(context.Background(), time.Minute, each))
		for i, r := range each.Result().Value {
			assert.NoError(t, r.Err, "item %d", i)
		}
	})
}

// A Join decides from the items' results as the Budget left them: a
// quorum met in time returns then; a join that had not decided fails the
// node, naming the Budget.
func TestForEachBudgetWithAJoin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		var g gauge
		f := sleepItems(4, 0, 0, &g)
		f.Worker = WorkerFunc[int, int](func(ctx context.Context, i int, _ Wrappers) (int, error) {
			select {
			case <-time.After(time.Duration(10+40*(i%2)) * time.Millisecond): // 10, 50, 10, 50
				return i, nil
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		})
		f.Budget = 30 * time.Millisecond

		f.Join = AtLeast(2)
		quorum := NewWrapper("quorum", f, 0)
		start := time.Now()
		require.NoError(t, a.BeginWork(context.Background(), time.Minute, quorum))
		assert.Equal(t, 10*time.Millisecond, time.Since(start))
		require.NoError(t, quorum.Result().Err)

		f.Join = AllSucceeded()
		all := NewWrapper("all", f, 0)
		start = time.Now()
		require.NoError(t, a.BeginWork(context.Background(), time.Minute, all))
		assert.Equal(t, 30*time.Millisecond, time.Since(start))
		err := all.Result().Err
		var be *BudgetError
		require.ErrorAs(t, err, &be)
		assert.ErrorContains(t, err, "ForEach's join (all succeeded)")
		assert.ErrorContains(t, err, "Budget of 30ms ran out")
	})
}

// The node's own deadline still ends it with its default when it comes
// before the Budget runs out.
func TestForEachBudgetBeyondTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		var g gauge
		f := sleepItems(2, 0, time.Second, &g)
		f.Budget = time.Minute
		each := NewWrapper("each", f, 0).Default([]WorkResult[int]{})
		err := a.BeginWork(context.Background(), 50*time.Millisecond, each)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		res := each.Result()
		assert.Equal(t, ResultTimeout, res.State)
		var be *BudgetError
		assert.False(t, errors.As(res.Err, &be), "the node's deadline, not the Budget: %v", res.Err)
	})
}

// A Budget does not hide another failure of the sub-run: a panic in an
// item's Result callback fails the node.
func TestForEachBudgetKeepsOtherFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		var g gauge
		f := sleepItems(2, 0, time.Second, &g)
		f.Node = func(i int, _ int, n *WorkerWrapper[int, int]) {
			if i == 0 {
				n.Callback(ResultFunc[int, int](func(bool, int, WorkResult[int]) { panic("callback") }))
			}
		}
		f.Budget = 10 * time.Millisecond
		each := NewWrapper("each", f, 0)
		require.NoError(t, a.BeginWork(context.Background(), time.Minute, each))
		err := each.Result().Err
		var cpe *CallbackPanicError
		assert.ErrorAs(t, err, &cpe)
	})
}

func TestForEachNegativeBudgetIsRefused(t *testing.T) {
	f := sleepItems(2, 0, 0, &gauge{})
	f.Budget = -time.Second
	_, err := Compile(NewWrapper("prices", f, 0))
	require.ErrorIs(t, err, ErrBadTimeout)
	assert.ErrorContains(t, err, "its ForEach's Budget is -1s")
}

// A ForEach whose Worker is a ForEach that Compile refuses names the
// Worker, not the outer node's own fields (it said "its ForEach's
// Limit is -3" for an outer ForEach whose Limit was 0).
func TestForEachOfARefusedForEachNamesTheWorker(t *testing.T) {
	inner := sleepItems(1, -3, 0, &gauge{})
	outer := ForEach[int, int, []WorkResult[int]]{
		Items:  func(context.Context, int, Wrappers) ([]int, error) { return []int{0}, nil },
		Worker: inner,
	}
	_, err := Compile(NewWrapper("outer", outer, 0))
	require.ErrorIs(t, err, ErrBadLimit)
	assert.ErrorContains(t, err, `node "outer": its ForEach's Worker is refused: its ForEach's Limit is -3`)
}

// A ForEach's Limit and Budget show in its report: on its line in String,
// under its box's title in the pictures, and in its Sub's fields, so
// that items that waited, or were stopped, have a visible cause.
func TestForEachReportShowsLimitAndBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		var g gauge
		f := sleepItems(3, 2, 10*time.Millisecond, &g)
		f.Budget = 150 * time.Millisecond
		each := NewWrapper("each", f, 0)
		run, err := a.Start(context.Background(), time.Minute, each)
		require.NoError(t, err)
		require.NoError(t, run.Wait(context.Background()))
		rep := run.Report()
		sub := rep.Nodes[0].Sub
		require.NotNil(t, sub)
		assert.Equal(t, 2, sub.Limit)
		assert.Equal(t, 150*time.Millisecond, sub.Budget)
		assert.Contains(t, rep.String(), "each: succeeded limit=2 budget=150ms\n")
		assert.Contains(t, rep.DOT(), `label="each\nat most 2 at once, within 150ms";`)
		assert.Contains(t, rep.Mermaid(), `subgraph cluster_n0 ["each<br/>at most 2 at once, within 150ms"]`)

		plain := NewWrapper("plain", sleepItems(3, 0, 0, &g), 0)
		run, err = a.Start(context.Background(), time.Minute, plain)
		require.NoError(t, err)
		require.NoError(t, run.Wait(context.Background()))
		rep = run.Report()
		assert.Zero(t, rep.Nodes[0].Sub.Limit)
		assert.NotContains(t, rep.String(), "limit=")
		assert.NotContains(t, rep.DOT(), "at once")
	})
}

// A custom join decides from the items as the Budget left them, even
// when an item whose worker returns on ctx.Done (the usual way) ends
// after the sweep has passed the join: the sweep leaves the join to
// decide on every item's end (the node failed as undecided in 6 of 50
// runs when the sweep ended it).
func TestForEachBudgetCustomJoinSeesItemsEndedAtTheBudget(t *testing.T) {
	for range 100 {
		synctest.Test(t, func(t *testing.T) {
			a := New()
			defer a.Close()
			f := pastTheBudget()
			f.Join = onceAllEnded(func(ups []Upstream) Decision {
				for _, u := range ups {
					if u.OK {
						return DecideRun // whatever arrived
					}
				}
				return DecideFail
			})
			each := NewWrapper("each", f, 0)
			require.NoError(t, a.BeginWork(context.Background(), time.Minute, each))
			res := each.Result()
			require.NoError(t, res.Err)
			require.Len(t, res.Value, 3)
			assert.Equal(t, 0, res.Value[0].Value)
			var be *BudgetError
			assert.ErrorAs(t, res.Value[1].Err, &be)
		})
		if t.Failed() {
			return
		}
	}
}

// A custom join that panics on the items as the Budget left them fails
// the node with its panic, whether the stop asked it or the node asks it
// once more.
func TestForEachBudgetCustomJoinPanicFailsTheNode(t *testing.T) {
	for range 50 {
		synctest.Test(t, func(t *testing.T) {
			a := New()
			defer a.Close()
			f := pastTheBudget()
			f.Join = onceAllEnded(func([]Upstream) Decision { panic("join") })
			each := NewWrapper("each", f, 0)
			require.NoError(t, a.BeginWork(context.Background(), time.Minute, each))
			var pe *PanicError
			assert.ErrorAs(t, each.Result().Err, &pe)
		})
		if t.Failed() {
			return
		}
	}
}

// pastTheBudget is three items under a Budget of 30ms: item 0 succeeds
// at 10ms, and items 1 and 2, which would take 50 and 90ms, return on
// ctx.Done as the Budget runs out (the usual way).
func pastTheBudget() ForEach[int, int, int] {
	f := sleepItems(3, 0, 0, &gauge{})
	f.Worker = WorkerFunc[int, int](func(ctx context.Context, i int, _ Wrappers) (int, error) {
		select {
		case <-time.After(time.Duration(10+40*i) * time.Millisecond):
			return i, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	})
	f.Budget = 30 * time.Millisecond
	return f
}

// An item that succeeds in the very instant the Budget runs out counts
// for a counting join even when its end reaches the join after the
// sweep has passed it: a node all of whose items succeeded does not fail
// (a probe of 500 runs × 3 CPUs saw 3 such failures of 840 runs whose
// items all succeeded when the sweep ended the join). Item 2 of
// each run ends exactly at the Budget, so it is stopped or succeeds,
// depending on timing; whichever it does, the node follows its items.
func TestForEachBudgetCountsAnItemEndedAsItRanOut(t *testing.T) {
	for _, join := range []Join{AllSucceeded(), AtLeast(3), NamedSucceeded("2"), When("2", func(v int) bool { return v == 2 })} {
		t.Run(join.String(), func(t *testing.T) {
			for range 200 {
				synctest.Test(t, func(t *testing.T) {
					a := New()
					defer a.Close()
					f := sleepItems(3, 0, 0, &gauge{})
					f.Worker = WorkerFunc[int, int](func(_ context.Context, i int, _ Wrappers) (int, error) {
						time.Sleep(time.Duration(10*(i+1)) * time.Millisecond) // item 2: 30ms, the Budget
						return i, nil
					})
					f.Budget = 30 * time.Millisecond
					f.Join = join
					each := NewWrapper("each", f, 0)
					run, err := a.Start(context.Background(), time.Minute, each)
					require.NoError(t, err)
					require.NoError(t, run.Wait(context.Background()))
					sub := run.Report().Nodes[indexOf(run, "each")].Sub
					require.NotNil(t, sub)
					allOK := true
					for _, n := range sub.Nodes {
						if n.ID != joinID && n.Result != ResultSuccess {
							allOK = false
						}
					}
					err = each.Result().Err
					if allOK {
						assert.NoError(t, err, "every item succeeded")
					} else {
						var be *BudgetError
						assert.ErrorAs(t, err, &be, "item 2 was stopped")
					}
				})
				if t.Failed() {
					return
				}
			}
		})
	}
}

// A custom join that suspends on the items as the Budget left them (once
// the Budget's stop, which leaves the join to decide, has begun) fails
// the node as a suspend does under a Budget: the run does not wait for a
// Resume.
func TestForEachBudgetCustomJoinSuspendingAfterTheStop(t *testing.T) {
	for range 200 {
		forEachBudgetSuspendAfterTheStop(t)
		if t.Failed() {
			return
		}
	}
}

// forEachBudgetSuspendAfterTheStop is one run of
// TestForEachBudgetCustomJoinSuspendingAfterTheStop: the last item's end
// reaches the join as the sweep ends it, or after the sweep has passed
// the join, depending on timing.
func forEachBudgetSuspendAfterTheStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		f := pastTheBudget()
		f.Join = onceAllEnded(func([]Upstream) Decision { return DecideSuspend })
		each := NewWrapper("each", f, 0)
		require.NoError(t, a.BeginWork(context.Background(), time.Minute, each))
		assert.ErrorContains(t, each.Result().Err, `suspended at node "join", and its Budget ran out`)
	})
}

// onceAllEnded is a custom join that waits until every item has ended,
// then answers decide.
func onceAllEnded(decide func(ups []Upstream) Decision) Join {
	return CustomJoin(func(ups []Upstream) Decision {
		for _, u := range ups {
			if !u.Ended {
				return DecideWait
			}
		}
		return decide(ups)
	})
}

// An item under PolicyContinue that the Budget stopped, or kept from
// starting, counts as done for the join, as it would had its own Timeout
// ended it: AllSucceeded goes on.
func TestForEachBudgetStopsItemsUnderPolicyContinueAsDone(t *testing.T) {
	for _, policy := range []FailurePolicy{PolicyContinue, PolicyFail} {
		t.Run(policy.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a := New()
				defer a.Close()
				var g gauge
				f := sleepItems(4, 1, 30*time.Millisecond, &g) // 0 and 1 end; 2 is stopped; 3 never starts
				f.Node = func(_ int, _ int, n *WorkerWrapper[int, int]) { n.OnFailure(policy).Default(-1) }
				f.Budget = 70 * time.Millisecond
				f.Join = AllSucceeded()
				each := NewWrapper("each", f, 0)
				require.NoError(t, a.BeginWork(context.Background(), time.Minute, each))
				res := each.Result()
				var be *BudgetError
				if policy == PolicyFail {
					require.ErrorAs(t, res.Err, &be, "without PolicyContinue a stopped item fails AllSucceeded")
					return
				}
				require.NoError(t, res.Err)
				require.Len(t, res.Value, 4)
				assert.Equal(t, []int{0, 10}, []int{res.Value[0].Value, res.Value[1].Value})
				for _, i := range []int{2, 3} {
					assert.Equal(t, -1, res.Value[i].Value, "item %d", i)
					assert.ErrorAs(t, res.Value[i].Err, &be, "item %d", i)
				}
			})
		})
	}
}

// budgetItems is a ForEach of n items whose item i returns i after
// 10ms+40ms*i, or its context's error.
func budgetItems(n int, budget time.Duration) ForEach[int, int, int] {
	f := sleepItems(n, 0, 0, &gauge{})
	f.Worker = WorkerFunc[int, int](func(ctx context.Context, i int, _ Wrappers) (int, error) {
		select {
		case <-time.After(time.Duration(10+40*i) * time.Millisecond):
			return i, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	})
	f.Budget = budget
	return f
}

// An item suspended (PolicySuspend) while another still works is not
// hidden by the Budget that later stops the sub-run: the node fails, as
// it does without a Budget once the other item ends, naming the item and
// its failure. Before the fix the node succeeded, the suspended item
// reported as stopped by the Budget and its failure lost.
func TestBudgetDoesNotHideASuspendedItem(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		f := budgetItems(2, 30*time.Millisecond)
		worker := f.Worker
		f.Worker = WorkerFunc[int, int](func(ctx context.Context, i int, all Wrappers) (int, error) {
			if i == 0 {
				return 0, errors.New("needs a human")
			}
			return worker.Action(ctx, i+10, all) // 450ms, past the Budget
		})
		f.Node = func(i int, _ int, n *WorkerWrapper[int, int]) {
			if i == 0 {
				n.OnFailure(PolicySuspend)
			}
		}
		each := NewWrapper("each", f, 0)
		require.NoError(t, a.BeginWork(context.Background(), time.Minute, each))
		err := each.Result().Err
		require.Error(t, err, "the suspended item fails the node")
		assert.ErrorContains(t, err, `suspended at node "0"`)
		assert.ErrorContains(t, err, "needs a human")
	})
}

// The same for a custom join that answered DecideSuspend before the
// Budget ran out.
func TestBudgetDoesNotHideASuspendedJoin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		f := budgetItems(2, 100*time.Millisecond)
		f.Worker = WorkerFunc[int, int](func(ctx context.Context, i int, _ Wrappers) (int, error) {
			select {
			case <-time.After(time.Duration(10+990*i) * time.Millisecond): // 10ms, 1s
				return i, nil
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		})
		f.Join = CustomJoin(func(ups []Upstream) Decision {
			for _, u := range ups {
				if u.OK {
					return DecideSuspend // a person decides
				}
			}
			return DecideWait
		})
		each := NewWrapper("each", f, 0)
		require.NoError(t, a.BeginWork(context.Background(), time.Minute, each))
		err := each.Result().Err
		require.Error(t, err, "the suspended join fails the node")
		assert.ErrorContains(t, err, `suspended at node "join"`)
	})
}

// AllDone never fails the node: with a Budget, it runs once the Budget
// has ended the items that had not ended, as the zero Join succeeds.
// Before the fix the sweep stopped the join it had just readied, and the
// node failed with "ForEach's join (all done): ... Budget of 30ms ran
// out".
func TestBudgetWithAllDoneSucceeds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		f := budgetItems(3, 30*time.Millisecond) // item 0 at 10ms, 1 and 2 past the Budget
		f.Join = AllDone()
		each := NewWrapper("each", f, 0)
		start := time.Now()
		require.NoError(t, a.BeginWork(context.Background(), time.Minute, each))
		assert.Equal(t, 30*time.Millisecond, time.Since(start))
		res := each.Result()
		require.NoError(t, res.Err)
		require.Len(t, res.Value, 3)
		assert.Equal(t, ResultSuccess, res.Value[0].State)
		for _, r := range res.Value[1:] {
			var be *BudgetError
			assert.ErrorAs(t, r.Err, &be)
		}
	})
}

// A custom join that decides to run from the items as the Budget left
// them runs too: before the fix its decision was dropped and the node
// failed naming the Budget. The items' workers ignore their context, so
// that the stop ends each of them before it reaches the join; workers
// that return on ctx.Done(), whose items may end after the stop ended
// the join, are TestForEachBudgetCustomJoinSeesItemsEndedAtTheBudget's.
func TestBudgetWithACustomJoinThatRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		f := budgetItems(3, 30*time.Millisecond)
		f.Worker = WorkerFunc[int, int](func(_ context.Context, i int, _ Wrappers) (int, error) {
			time.Sleep(time.Duration(10+40*i) * time.Millisecond) // 10ms, then past the Budget
			return i, nil
		})
		f.Join = CustomJoin(func(ups []Upstream) Decision {
			for _, u := range ups {
				if !u.Ended {
					return DecideWait
				}
			}
			return DecideRun // whatever arrived
		})
		each := NewWrapper("each", f, 0)
		require.NoError(t, a.BeginWork(context.Background(), time.Minute, each))
		require.NoError(t, each.Result().Err)
		assert.Len(t, each.Result().Value, 3)
	})
}

// A join that had not decided when the Budget ran out, and that the
// items as it left them do not satisfy, still fails the node naming the
// Budget (AllSucceeded; and a custom join still waiting).
func TestBudgetWithAnUndecidedJoinFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		f := budgetItems(3, 30*time.Millisecond)
		f.Join = CustomJoin(func([]Upstream) Decision { return DecideWait })
		each := NewWrapper("each", f, 0)
		require.NoError(t, a.BeginWork(context.Background(), time.Minute, each))
		err := each.Result().Err
		assert.ErrorContains(t, err, "ForEach's join (custom)")
		f.Join = AllSucceeded()
		all := NewWrapper("all", f, 0)
		require.NoError(t, a.BeginWork(context.Background(), time.Minute, all))
		var be *BudgetError
		assert.ErrorAs(t, all.Result().Err, &be)
	})
}

// foreachItem is how one item of foreachOfItems behaves: it returns i*10 after d,
// or fails after d if fail is set; it returns ctx.Err() if its context
// ends first. policy is its failure policy (0 leaves it alone).
type foreachItem struct {
	d      time.Duration
	fail   bool
	policy FailurePolicy
}

// foreachOfItems is a ForEach over items, each item's node recorded in nodes
// (sized by the call) with Default(-1) and its policy.
func foreachOfItems(items []foreachItem, nodes []*WorkerWrapper[int, int]) ForEach[int, int, int] {
	return ForEach[int, int, int]{
		Items: func(context.Context, int, Wrappers) ([]int, error) {
			idx := make([]int, len(items))
			for i := range idx {
				idx[i] = i
			}
			return idx, nil
		},
		Worker: WorkerFunc[int, int](func(ctx context.Context, i int, _ Wrappers) (int, error) {
			select {
			case <-time.After(items[i].d):
				if items[i].fail {
					return 0, fmt.Errorf("item %d failed", i)
				}
				return i * 10, nil
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}),
		Node: func(i int, _ int, n *WorkerWrapper[int, int]) {
			n.Default(-1)
			if items[i].policy != 0 {
				n.OnFailure(items[i].policy)
			}
			if nodes != nil {
				nodes[i] = n
			}
		},
	}
}

// foreachContinued reports whether item n, whose sub-run has ended, was
// marked as done under PolicyContinue.
func foreachContinued(n *WorkerWrapper[int, int]) bool {
	r := n.singleRun()
	if r == nil {
		return false
	}
	return r.nodes[n.idx].failMarks.Load()&failContinued != 0
}

// foreachRecorder is a custom join that waits for every item and records
// what it saw of them (ID -> OK), then answers DecideRun.
type foreachRecorder struct {
	mu  sync.Mutex
	saw map[string]bool
}

func (rec *foreachRecorder) join() Join {
	return onceAllEnded(func(ups []Upstream) Decision {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		rec.saw = map[string]bool{}
		for _, u := range ups {
			rec.saw[u.ID] = u.OK
		}
		return DecideRun
	})
}

func (rec *foreachRecorder) ok() map[string]bool {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.saw
}

// The stopped items keep their default and the Budget's error in the
// node's result and in the report, all with the one *BudgetError; only
// they (and an item that failed on its own) are marked as done under
// PolicyContinue, the one kept back by the Limit included; the node and
// its join succeed. Under Limit 2: 0 and 1 start at once, 0 ends at
// 10ms, 2 starts then and fails at 30ms, 3 starts then; at 50ms the
// Budget stops 1 and 3, and 4 never starts.
func TestBudgetContinueKeepsDefaultsAndBudgetError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		nodes := make([]*WorkerWrapper[int, int], 5)
		items := []foreachItem{
			{d: 10 * time.Millisecond, policy: PolicyContinue},
			{d: time.Second, policy: PolicyContinue},                       // stopped
			{d: 20 * time.Millisecond, fail: true, policy: PolicyContinue}, // fails on its own: continued anyway
			{d: time.Second, policy: PolicyContinue},                       // stopped
			{d: time.Second, policy: PolicyContinue},                       // kept back by the Limit, never starts
		}
		f := foreachOfItems(items, nodes)
		f.Limit = 2
		f.Budget = 50 * time.Millisecond
		f.Join = AllSucceeded()
		each := NewWrapper("each", f, 0)
		run, err := a.Start(context.Background(), time.Minute, each)
		require.NoError(t, err)
		require.NoError(t, run.Wait(context.Background()))
		synctest.Wait()
		res := each.Result()
		require.NoError(t, res.Err)
		require.Len(t, res.Value, 5)
		assert.Equal(t, 0, res.Value[0].Value)
		assert.Equal(t, -1, res.Value[2].Value)
		assert.EqualError(t, res.Value[2].Err, "item 2 failed")
		stopped := []int{1, 3, 4}
		var first *BudgetError
		for _, i := range stopped {
			r := res.Value[i]
			assert.Equal(t, -1, r.Value, "item %d", i)
			assert.Equal(t, ResultTimeout, r.State, "item %d", i)
			var be *BudgetError
			require.ErrorAs(t, r.Err, &be, "item %d", i)
			if first == nil {
				first = be
			}
			assert.Same(t, first, be, "one BudgetError for the sub-run")
			assert.Equal(t, 50*time.Millisecond, be.Budget)
		}
		var done []bool
		for _, n := range nodes {
			done = append(done, foreachContinued(n))
		}
		assert.Equal(t, []bool{false, true, true, true, true}, done)

		rep := run.Report()
		assert.Equal(t, StatusSucceeded, rep.Nodes[0].Status)
		sub := rep.Nodes[0].Sub
		require.NotNil(t, sub)
		require.Len(t, sub.Nodes, 6)
		for _, i := range stopped {
			assert.Equal(t, StatusTimedOut, sub.Nodes[i].Status, "item %d", i)
			assert.Equal(t, -1, sub.Nodes[i].Value, "item %d", i)
			var be *BudgetError
			assert.ErrorAs(t, sub.Nodes[i].Err, &be, "item %d", i)
		}
		assert.True(t, sub.Nodes[1].Ran)
		assert.True(t, sub.Nodes[3].Ran)
		assert.False(t, sub.Nodes[4].Ran)
		assert.Equal(t, "join", sub.Nodes[5].ID)
		var be *BudgetError
		assert.ErrorAs(t, sub.Nodes[5].Err, &be, "the join was stopped after it decided")
		assert.Equal(t, StatusTimedOut, sub.Nodes[5].Status)
		assert.Contains(t, []string{"1", "3", "4"}, sub.Nodes[5].DecidedBy, "a stopped item's end decided the join")
		assert.NoError(t, rep.Err(), "the node's error is its Join's; the sub-run's are in Sub.Err")
		assert.Error(t, sub.Err())
	})
}

// Each stop that is not the Budget's leaves items under PolicyContinue
// not done: the run's deadline, a Cancel of the outer run, the node's
// own Timeout, a RetryPolicy's AttemptTimeout, all before the Budget.
// The custom join (asked once every item ended) sees them not OK, and
// the items' errors are not the BudgetError.
func TestOtherStopsAreNotTheBudget(t *testing.T) {
	cases := []struct {
		name    string
		setup   func(w *WorkerWrapper[int, []WorkResult[int]])
		timeout time.Duration
		cancel  bool
	}{
		{name: "run deadline", timeout: 40 * time.Millisecond},
		{name: "cancel", timeout: time.Minute, cancel: true},
		{name: "node timeout", timeout: time.Minute, setup: func(w *WorkerWrapper[int, []WorkResult[int]]) { w.Timeout(40 * time.Millisecond) }},
		{name: "attempt timeout", timeout: time.Minute, setup: func(w *WorkerWrapper[int, []WorkResult[int]]) {
			w.Retry(RetryPolicy{Attempts: 1, AttemptTimeout: 40 * time.Millisecond})
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a := New()
				defer a.Close()
				nodes := make([]*WorkerWrapper[int, int], 3)
				f := foreachOfItems([]foreachItem{
					{d: 10 * time.Millisecond, policy: PolicyContinue},
					{d: time.Second, policy: PolicyContinue},
					{d: time.Second, policy: PolicyContinue},
				}, nodes)
				f.Budget = 100 * time.Millisecond
				var rec foreachRecorder
				f.Join = rec.join()
				each := NewWrapper("each", f, 0)
				if c.setup != nil {
					c.setup(each)
				}
				run, err := a.Start(context.Background(), c.timeout, each)
				require.NoError(t, err)
				if c.cancel {
					time.Sleep(40 * time.Millisecond)
					run.Cancel()
				}
				_ = run.Wait(context.Background())
				synctest.Wait() // the sub-run's sweep
				assert.Equal(t, map[string]bool{"0": true, "1": false, "2": false}, rec.ok())
				for _, i := range []int{1, 2} {
					assert.False(t, foreachContinued(nodes[i]), "item %d", i)
					var be *BudgetError
					r := nodes[i].Result()
					assert.False(t, errors.As(r.Err, &be), "item %d: %v", i, r.Err)
				}
				var be *BudgetError
				assert.False(t, errors.As(each.Result().Err, &be), "%v", each.Result().Err)
			})
		})
	}
}

// An item under PolicyEnd that fails ends the sub-run before the Budget:
// the items it stopped are not done, and the node fails with the
// EndError. An item under PolicyEnd that the Budget stops does not end
// the run (PolicyEnd answers the node's own failure, and the Budget is
// no failure of it): the node goes on.
func TestPolicyEndAndTheBudget(t *testing.T) {
	t.Run("end before the budget", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a := New()
			defer a.Close()
			nodes := make([]*WorkerWrapper[int, int], 3)
			f := foreachOfItems([]foreachItem{
				{d: 10 * time.Millisecond, fail: true, policy: PolicyEnd},
				{d: time.Second, policy: PolicyContinue},
				{d: time.Second, policy: PolicyContinue},
			}, nodes)
			f.Budget = 50 * time.Millisecond
			f.Join = AllSucceeded()
			each := NewWrapper("each", f, 0)
			require.NoError(t, a.BeginWork(context.Background(), time.Minute, each))
			synctest.Wait()
			var ee *EndError
			require.ErrorAs(t, each.Result().Err, &ee)
			assert.Equal(t, "0", ee.ID)
			for _, i := range []int{1, 2} {
				assert.False(t, foreachContinued(nodes[i]), "item %d", i)
				assert.ErrorAs(t, nodes[i].Result().Err, &ee, "item %d", i)
			}
		})
	})
	t.Run("budget stops a PolicyEnd item", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a := New()
			defer a.Close()
			nodes := make([]*WorkerWrapper[int, int], 3)
			f := foreachOfItems([]foreachItem{
				{d: 10 * time.Millisecond, policy: PolicyContinue},
				{d: time.Second, policy: PolicyEnd},
				{d: time.Second, policy: PolicyContinue},
			}, nodes)
			f.Budget = 50 * time.Millisecond
			f.Join = AllDone()
			each := NewWrapper("each", f, 0)
			require.NoError(t, a.BeginWork(context.Background(), time.Minute, each))
			synctest.Wait()
			require.NoError(t, each.Result().Err)
			assert.False(t, foreachContinued(nodes[1]))
			assert.True(t, foreachContinued(nodes[2]))
			var be *BudgetError
			assert.ErrorAs(t, nodes[1].Result().Err, &be)
		})
	})
}

// A join that runs (EndsRun) before the Budget stops the other items
// with ErrRunEnded: they are not marked done, and the node succeeds.
func TestJoinEndsTheRunBeforeTheBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		nodes := make([]*WorkerWrapper[int, int], 3)
		f := foreachOfItems([]foreachItem{
			{d: 10 * time.Millisecond, policy: PolicyContinue},
			{d: time.Second, policy: PolicyContinue},
			{d: time.Second, policy: PolicyContinue},
		}, nodes)
		f.Budget = 50 * time.Millisecond
		f.Join = AnySucceeded()
		each := NewWrapper("each", f, 0)
		start := time.Now()
		require.NoError(t, a.BeginWork(context.Background(), time.Minute, each))
		assert.Equal(t, 10*time.Millisecond, time.Since(start))
		synctest.Wait()
		require.NoError(t, each.Result().Err)
		for _, i := range []int{1, 2} {
			assert.False(t, foreachContinued(nodes[i]), "item %d", i)
			assert.ErrorIs(t, nodes[i].Result().Err, ErrRunEnded, "item %d", i)
		}
	})
}

// A ForEach whose items are ForEach nodes, each level under a Budget.
// The outer Budget running out first stops the inner items with the
// outer BudgetError, which is not the inner run's: the inner items are
// not done and the inner node fails, while the outer item (PolicyContinue)
// counts as done. The inner Budget running out first marks the inner
// items done, and every level succeeds.
func TestNestedForEachBudgets(t *testing.T) {
	for _, c := range []struct {
		name         string
		outer, inner time.Duration
	}{
		{"outer first", 30 * time.Millisecond, time.Minute},
		{"inner first", time.Minute, 30 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a := New()
				defer a.Close()
				var mu sync.Mutex
				var inner [][]*WorkerWrapper[int, int]
				var recs []*foreachRecorder
				innerEach := ForEach[int, int, []WorkResult[int]]{
					Items: func(context.Context, int, Wrappers) ([]int, error) { return []int{0, 1}, nil },
					Worker: WorkerFunc[int, []WorkResult[int]](func(ctx context.Context, _ int, all Wrappers) ([]WorkResult[int], error) {
						nodes := make([]*WorkerWrapper[int, int], 2)
						f := foreachOfItems([]foreachItem{
							{d: 10 * time.Millisecond, policy: PolicyContinue},
							{d: time.Hour, policy: PolicyContinue},
						}, nodes)
						f.Budget = c.inner
						rec := &foreachRecorder{}
						f.Join = rec.join()
						mu.Lock()
						inner, recs = append(inner, nodes), append(recs, rec)
						mu.Unlock()
						return f.Action(ctx, 0, all)
					}),
					Node: func(_ int, _ int, n *WorkerWrapper[int, []WorkResult[int]]) {
						n.OnFailure(PolicyContinue)
					},
					Budget: c.outer,
					Join:   AllSucceeded(),
				}
				outer := NewWrapper("outer", innerEach, 0)
				require.NoError(t, a.BeginWork(context.Background(), time.Hour, outer))
				synctest.Wait()
				res := outer.Result()
				require.NoError(t, res.Err)
				require.Len(t, res.Value, 2)
				require.Len(t, inner, 2)
				for k := range inner {
					r := res.Value[k]
					assert.Equal(t, map[string]bool{"0": true, "1": c.name == "inner first"}, recs[k].ok(), "outer item %d", k)
					assert.Equal(t, c.name == "inner first", foreachContinued(inner[k][1]), "outer item %d", k)
					var be *BudgetError
					if c.name == "outer first" {
						require.ErrorAs(t, r.Err, &be, "outer item %d", k)
						assert.Equal(t, c.outer, be.Budget)
						require.ErrorAs(t, inner[k][1].Result().Err, &be)
						assert.Equal(t, c.outer, be.Budget, "the inner item was stopped by the outer Budget")
					} else {
						require.NoError(t, r.Err, "outer item %d", k)
						require.Len(t, r.Value, 2)
						require.ErrorAs(t, r.Value[1].Err, &be)
						assert.Equal(t, c.inner, be.Budget)
					}
				}
			})
		})
	}
}

// Items that depend on other items (a Depend made in Node): an item
// under PolicyContinue whose upstream item the Budget stopped is kept
// from starting by the Budget, and counts as done, whatever the
// upstream's policy; without the Budget (the upstream failing on its
// own, PolicyFail), it fails with the UpstreamError and is not done.
func TestItemsDependingOnItems(t *testing.T) {
	for _, c := range []struct {
		name       string
		upPolicy   FailurePolicy
		upFails    bool
		wantDone   bool
		wantBudget bool
	}{
		{"upstream continue, stopped", PolicyContinue, false, true, true},
		{"upstream fail, stopped", PolicyFail, false, true, true},
		{"upstream fail, failed", PolicyFail, true, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a := New()
				defer a.Close()
				nodes := make([]*WorkerWrapper[int, int], 3)
				d := time.Second
				if c.upFails {
					d = 10 * time.Millisecond
				}
				items := []foreachItem{
					{d: d, fail: c.upFails, policy: c.upPolicy},
					{d: 10 * time.Millisecond, policy: PolicyContinue}, // after item 0
					{d: 10 * time.Millisecond, policy: PolicyContinue},
				}
				f := foreachOfItems(items, nodes)
				node := f.Node
				f.Node = func(i int, item int, n *WorkerWrapper[int, int]) {
					node(i, item, n)
					if i == 1 {
						n.Depend(nodes[0], true)
					}
				}
				f.Budget = 50 * time.Millisecond
				var rec foreachRecorder
				f.Join = rec.join()
				each := NewWrapper("each", f, 0)
				require.NoError(t, a.BeginWork(context.Background(), time.Minute, each))
				synctest.Wait()
				require.NoError(t, each.Result().Err)
				r1 := nodes[1].Result()
				assert.Equal(t, c.wantDone, foreachContinued(nodes[1]), "item 1: %v", r1.Err)
				assert.Equal(t, c.wantDone, rec.ok()["1"])
				var be *BudgetError
				assert.Equal(t, c.wantBudget, errors.As(r1.Err, &be), "item 1: %v", r1.Err)
				assert.Equal(t, -1, r1.Value)
			})
		})
	}
}

// The built-in joins count an item the Budget stopped under
// PolicyContinue as a success, as they count one its own Timeout ended:
// AnySucceeded and AtLeast are met by stopped items alone (item 0 fails
// on its own under PolicyFail), and When's condition gets the stopped
// item's default.
func TestCountingJoinsCountStoppedItemsAsSuccesses(t *testing.T) {
	failing := []foreachItem{
		{d: 10 * time.Millisecond, fail: true, policy: PolicyFail},
		{d: time.Second, policy: PolicyContinue},
		{d: time.Second, policy: PolicyContinue},
	}
	succeeding := []foreachItem{
		{d: 10 * time.Millisecond},
		{d: time.Second, policy: PolicyContinue},
		{d: time.Second, policy: PolicyContinue},
	}
	var got []int
	var mu sync.Mutex
	for _, c := range []struct {
		items []foreachItem
		join  Join
		ok    bool
	}{
		{failing, AnySucceeded(), true},
		{failing, AtLeast(2), true},
		{failing, AtLeast(3), false},
		{failing, AllSucceeded(), false},
		{succeeding, AllSucceeded(), true},
		{succeeding, When("1", func(v int) bool { mu.Lock(); got = append(got, v); mu.Unlock(); return true }), true},
		{succeeding, When("1", func(v int) bool { return false }), false},
	} {
		t.Run(c.join.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a := New()
				defer a.Close()
				f := foreachOfItems(c.items, nil)
				f.Budget = 50 * time.Millisecond
				f.Join = c.join
				each := NewWrapper("each", f, 0)
				require.NoError(t, a.BeginWork(context.Background(), time.Minute, each))
				synctest.Wait()
				err := each.Result().Err
				if c.ok {
					require.NoError(t, err)
					return
				}
				require.Error(t, err)
			})
		})
	}
	assert.Equal(t, []int{-1}, got, "When's condition got the stopped item's default")
}

// An item under PolicyContinue with a RetryPolicy, stopped by the Budget
// in its fourth attempt (10ms each, 5ms apart), counts as done with the
// Budget's error, not its last failed attempt's.
func TestBudgetStoppedItemInARetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		nodes := make([]*WorkerWrapper[int, int], 2)
		f := foreachOfItems([]foreachItem{
			{d: 10 * time.Millisecond, policy: PolicyContinue},
			{d: 10 * time.Millisecond, fail: true, policy: PolicyContinue},
		}, nodes)
		node := f.Node
		f.Node = func(i int, item int, n *WorkerWrapper[int, int]) {
			node(i, item, n)
			if i == 1 {
				n.Retry(RetryPolicy{Attempts: 5, Backoff: func(int) time.Duration { return 5 * time.Millisecond }})
			}
		}
		f.Budget = 50 * time.Millisecond
		f.Join = AllSucceeded()
		each := NewWrapper("each", f, 0)
		require.NoError(t, a.BeginWork(context.Background(), time.Minute, each))
		synctest.Wait()
		require.NoError(t, each.Result().Err)
		assert.True(t, foreachContinued(nodes[1]))
		var be *BudgetError
		assert.ErrorAs(t, nodes[1].Result().Err, &be)
	})
}

// The rule holds for each of the ways an item ends as the Budget runs
// out, run many times: the worker returns on ctx.Done (before or after
// the sweep reaches it), the worker ignores its context (the sweep ends
// it), the item has not started (Limit).
func TestBudgetContinueRacingEnds(t *testing.T) {
	for range 50 {
		synctest.Test(t, func(t *testing.T) {
			a := New()
			defer a.Close()
			nodes := make([]*WorkerWrapper[int, int], 4)
			f := foreachOfItems([]foreachItem{
				{d: 30 * time.Millisecond, policy: PolicyContinue}, // ends at the Budget's instant
				{d: time.Second, policy: PolicyContinue},
				{d: time.Second, policy: PolicyContinue},
				{d: time.Second, policy: PolicyContinue},
			}, nodes)
			worker := f.Worker
			f.Worker = WorkerFunc[int, int](func(ctx context.Context, i int, all Wrappers) (int, error) {
				if i == 2 {
					time.Sleep(time.Second) // ignores its context
					return 20, nil
				}
				return worker.Action(ctx, i, all)
			})
			f.Limit = 3
			f.Budget = 30 * time.Millisecond
			f.Join = AllSucceeded()
			each := NewWrapper("each", f, 0)
			require.NoError(t, a.BeginWork(context.Background(), time.Minute, each))
			require.NoError(t, each.Result().Err)
			synctest.Wait()
			for i := 1; i < 4; i++ {
				assert.True(t, foreachContinued(nodes[i]), "item %d", i)
			}
			time.Sleep(2 * time.Second) // let item 2's worker return
		})
		if t.Failed() {
			return
		}
	}
}

// A ForEach's sub-run that stalls on a suspended item is cancelled, and
// the node's error names the item. When the Budget ran out after the
// stall but before the node looked for the item (here while the report
// it reads calls the As method of the other item's error), the sweep had
// ended the item already: no item was pending, and the error named
// "node #0", which no item is called, with no failure. The node fails as
// it does when the Budget ends a suspended item, naming it and its
// failure.
func TestBudgetEndingAStalledSubRunNamesTheSuspendedItem(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		var suspended *WorkerWrapper[int, int]
		xerr := &stallRacingErr{}
		xerr.hook = func() {
			time.Sleep(time.Second)                 // past the Budget: its sweep ends the suspended item
			for suspended.State() == StateWorking { // pending
				time.Sleep(time.Millisecond)
			}
		}
		f := budgetItems(2, 30*time.Millisecond)
		f.Worker = WorkerFunc[int, int](func(_ context.Context, i int, all Wrappers) (int, error) {
			if i == 0 {
				return 0, xerr
			}
			for { // item 1 fails once item 0 has, so that the report reads item 0's error
				if st, _ := all.State("0"); st == StateError {
					return 0, errBoom
				}
				time.Sleep(time.Millisecond)
			}
		})
		f.Node = func(i int, _ int, n *WorkerWrapper[int, int]) {
			if i == 1 {
				n.OnFailure(PolicySuspend)
				suspended = n
			}
		}
		each := NewWrapper("each", f, 0)
		require.NoError(t, a.BeginWork(context.Background(), time.Minute, each))
		err := each.Result().Err
		require.Error(t, err, "the suspended item fails the node")
		assert.NotContains(t, err.Error(), "node #0")
		assert.ErrorContains(t, err, `suspended at node "1", and its Budget ran out`)
		assert.ErrorIs(t, err, errBoom)
	})
}

// With more than one item suspended when the Budget runs out, the node's
// error names the first in the sub-run's order, with its failure, as the
// sweep found them.
func TestBudgetNamesTheFirstSuspendedItem(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		f := budgetItems(3, 30*time.Millisecond)
		worker := f.Worker
		f.Worker = WorkerFunc[int, int](func(ctx context.Context, i int, all Wrappers) (int, error) {
			if i < 2 {
				return 0, fmt.Errorf("item %d needs a human", i)
			}
			return worker.Action(ctx, i+10, all) // past the Budget
		})
		f.Node = func(i int, _ int, n *WorkerWrapper[int, int]) {
			if i < 2 {
				n.OnFailure(PolicySuspend)
			}
		}
		each := NewWrapper("each", f, 0)
		require.NoError(t, a.BeginWork(context.Background(), time.Minute, each))
		err := each.Result().Err
		require.Error(t, err)
		assert.ErrorContains(t, err, `suspended at node "0"`)
		assert.ErrorContains(t, err, "item 0 needs a human")
		assert.NotContains(t, err.Error(), "item 1")
	})
}

// TestForEachStoppedByAHookDeadlineIsNoBudget: a ForEach's items'
// sub-run that a deadline of its own stops (one its OnRunStart hook
// gave it) before the Budget ran out was stopped, as by any stop that is
// not the Budget's: the node fails, rather than succeed with the items
// as the stop left them, while its own context is not done.
func TestForEachStoppedByAHookDeadlineIsNoBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			mu      sync.Mutex
			cancels []context.CancelFunc
		)
		a := New(WithHooks(&Hooks{OnRunStart: func(ctx context.Context, info RunInfo) context.Context {
			if !info.Nested {
				return nil
			}
			ctx, cancel := context.WithTimeout(ctx, 40*time.Millisecond)
			mu.Lock()
			cancels = append(cancels, cancel)
			mu.Unlock()
			return ctx
		}}))
		defer a.Close()
		defer func() {
			for _, cancel := range cancels {
				cancel()
			}
		}()
		nodes := make([]*WorkerWrapper[int, int], 2)
		f := foreachOfItems([]foreachItem{{d: 10 * time.Millisecond}, {d: time.Second}}, nodes)
		f.Budget = 100 * time.Millisecond
		each := NewWrapper("each", f, 0)
		run, err := a.Start(context.Background(), time.Minute, each)
		require.NoError(t, err)
		_ = run.Wait(context.Background())
		r := each.ResultIn(run)
		assert.Equal(t, ResultException, r.State, "%v", r.Err)
		assert.ErrorIs(t, r.Err, context.DeadlineExceeded, "the hook's deadline stopped the items")
		var be *BudgetError
		assert.False(t, errors.As(r.Err, &be), "%v", r.Err)
	})
}

// TestForEachJoinDecidingAfterTheDeadline: a ForEach's custom join that
// answers after the group deadline stopped the run decides nothing: the
// ForEach node, its items still running and its join node end as the
// deadline says, and so does Wait, whether the join decides to run or
// to fail, and whether a Budget (which leaves the join to decide once
// its sub-run is stopping) is set or not.
func TestForEachJoinDecidingAfterTheDeadline(t *testing.T) {
	for _, budget := range []time.Duration{0, time.Minute} {
		for _, d := range []Decision{DecideRun, DecideFail} {
			t.Run(fmt.Sprintf("budget=%v/%v", budget, d), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					a := New()
					defer a.Close()
					nodes := make([]*WorkerWrapper[int, int], 2)
					f := foreachOfItems([]foreachItem{{}, {d: time.Hour}}, nodes)
					f.Budget = budget
					stopped := make(chan struct{})
					var asked atomic.Bool
					f.Join = CustomJoin(func([]Upstream) Decision {
						if !asked.Swap(true) {
							<-stopped // the deadline has passed
						}
						return d
					})
					// Item 1 tells the join that the deadline has reached
					// the sub-run: the join waits for no timer, since
					// another item's end waits for it on a lock, which
					// stops synctest's clock. (A node of the outer run,
					// told first as the deadline passes, could let the join
					// answer before the sub-run's context was done.)
					items := f.Worker
					f.Worker = WorkerFunc[int, int](func(ctx context.Context, i int, all Wrappers) (int, error) {
						if i != 1 {
							return items.Action(ctx, i, all)
						}
						<-ctx.Done()
						close(stopped)
						return 0, ctx.Err()
					})
					each := NewWrapper("each", f, 0)
					run, err := a.Start(context.Background(), time.Second, each)
					require.NoError(t, err)
					err = run.Wait(context.Background())
					synctest.Wait() // the sub-run's end
					assert.ErrorIs(t, err, context.DeadlineExceeded)
					res := each.ResultIn(run)
					assert.Equal(t, ResultTimeout, res.State, "%v", res.Err)
					assert.ErrorIs(t, res.Err, context.DeadlineExceeded)
					assert.True(t, asked.Load())
					assert.Equal(t, ResultSuccess, nodes[0].Result().State)
					sub := run.Report().Nodes[indexOf(run, "each")].Sub
					require.NotNil(t, sub)
					for _, n := range sub.Nodes[1:] { // item 1 and the join
						assert.Equal(t, ResultTimeout, n.Result, "%s: %v", n.ID, n.Err)
						assert.ErrorIs(t, n.Err, context.DeadlineExceeded, n.ID)
					}
				})
			})
		}
	}
}
