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
func TestS22BBudgetDoesNotHideASuspendedItem(t *testing.T) {
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
func TestS22BBudgetDoesNotHideASuspendedJoin(t *testing.T) {
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
func TestS22BBudgetWithAllDoneSucceeds(t *testing.T) {
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
func TestS22BBudgetWithACustomJoinThatRuns(t *testing.T) {
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
func TestS22BBudgetWithAnUndecidedJoinFails(t *testing.T) {
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
