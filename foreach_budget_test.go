package asynctool

import (
	"context"
	"errors"
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
// Worker, not the outer node's own fields (helper-93 saw "its ForEach's
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
// decide on every item's end (helper-94 saw the node fail as undecided
// in 6 of 50 runs when the sweep ended it).
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
					sub := run.Report().Nodes[0].Sub
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
