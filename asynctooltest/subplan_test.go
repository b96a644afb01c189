package asynctooltest_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynctool-go/asynctool"
	"github.com/asynctool-go/asynctool/asynctooltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAssertionsReachIntoSubPlans names the nodes of a SubPlan node's
// sub-run by path, and still finds an id of the report that contains a
// slash.
func TestAssertionsReachIntoSubPlans(t *testing.T) {
	fetch := asynctool.NewWrapper("fetch", asynctooltest.Returns[int](5), 0)
	asynctool.NewWrapper("check", asynctooltest.Fails[int, int](errDown), 0).Depend(fetch, true)
	inner, err := asynctool.Compile(fetch)
	require.NoError(t, err)
	outerOf := func(inner *asynctool.Plan) asynctool.Worker[int, int] {
		return asynctool.SubPlan[int, int]{Plan: inner, Output: func(sub *asynctool.Run) (int, error) {
			return fetch.ResultIn(sub).Value, nil
		}}
	}
	mid := asynctool.NewWrapper("mid", outerOf(inner), 0)
	middle, err := asynctool.Compile(mid)
	require.NoError(t, err)
	top := asynctool.NewWrapper("top", asynctool.SubPlan[int, int]{Plan: middle, Output: func(sub *asynctool.Run) (int, error) {
		return mid.ResultIn(sub).Value, nil
	}}, 0)
	slashed := asynctool.NewWrapper("top/mid", asynctooltest.Fails[int, int](context.Canceled), 0)
	rep := asynctooltest.Run(t, top, slashed)

	s := onSpy(t, func(s *spy) {
		assert.True(t, asynctooltest.Succeeded(s, rep, "top"))
		assert.True(t, asynctooltest.Succeeded(s, rep, "top/mid/fetch"))
		assert.True(t, asynctooltest.Failed(s, rep, "top/mid/check", errDown))
		assert.True(t, asynctooltest.Failed(s, rep, "top/mid", context.Canceled), "the report's own id comes first")
	})
	assert.Empty(t, s.errors)
	s = onSpy(t, func(s *spy) { asynctooltest.Succeeded(s, rep, "top/mid/none") })
	assert.Equal(t, []string{`asynctooltest: no node "top/mid/none" in the report (its paths: top, top/mid, top/mid/fetch, top/mid/check, top/mid)`}, s.errors)
	rep = asynctooltest.Run(t, asynctool.NewWrapper("top", asynctool.SubPlan[int, int]{Plan: middle, Output: func(sub *asynctool.Run) (int, error) {
		return mid.ResultIn(sub).Value, nil
	}}, 0))
	s = onSpy(t, func(s *spy) { assert.True(t, asynctooltest.Succeeded(s, rep, "top/mid")) })
	assert.Empty(t, s.errors)
}

// userKey carries a request's user id to a plan's workers.
type userKey struct{}

// TestRunPlan runs a plan twice with different request data in the
// context, and checks each run's results and report.
func TestRunPlan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		user := asynctool.NewWrapper("user", asynctooltest.Func(func(ctx context.Context, _ int) (string, error) {
			return fmt.Sprint("user", ctx.Value(userKey{})), nil
		}), 0)
		slow := asynctool.NewWrapper("slow", asynctooltest.Sleeps[int](time.Hour, 1), 0)
		pl, err := asynctool.Compile(user, slow)
		require.NoError(t, err)
		for _, id := range []int{1, 2} {
			ctx, cancel := context.WithTimeout(context.WithValue(t.Context(), userKey{}, id), time.Second)
			run := asynctooltest.RunPlan(t, ctx, pl)
			cancel()
			assert.Equal(t, fmt.Sprint("user", id), user.ResultIn(run).Value)
			rep := run.Report()
			asynctooltest.Succeeded(t, rep, "user")
			asynctooltest.TimedOut(t, rep, "slow")
			assert.ErrorIs(t, rep.RunErr, context.DeadlineExceeded)
		}
	})
	for name, pl := range map[string]*asynctool.Plan{"nil": nil, "zero": {}} {
		s := onSpy(t, func(s *spy) { asynctooltest.RunPlan(s, context.Background(), pl) })
		assert.True(t, s.fatal, name)
		assert.Equal(t, []string{"asynctooltest: RunPlan with a nil or empty plan"}, s.errors, name)
	}
}

// TestAssertionsReachIntoForEachItems names a ForEach node's items by
// their index, and its join node by "join".
func TestAssertionsReachIntoForEachItems(t *testing.T) {
	prices := asynctool.NewWrapper("prices", asynctool.ForEach[int, int, int]{
		Items: func(context.Context, int, asynctool.Wrappers) ([]int, error) { return []int{1, 2, 3}, nil },
		Worker: asynctool.WorkerFunc[int, int](func(_ context.Context, item int, _ asynctool.Wrappers) (int, error) {
			if item == 2 {
				return 0, errDown
			}
			return item, nil
		}),
		Join: asynctool.AllDone(), // every item runs, whatever the order
	}, 0)
	rep := asynctooltest.Run(t, prices)
	s := onSpy(t, func(s *spy) {
		assert.True(t, asynctooltest.Succeeded(s, rep, "prices"))
		assert.True(t, asynctooltest.RanOnce(s, rep, "prices/0"))
		assert.True(t, asynctooltest.Failed(s, rep, "prices/1", errDown))
		assert.True(t, asynctooltest.Succeeded(s, rep, "prices/2"))
		assert.True(t, asynctooltest.Succeeded(s, rep, "prices/join"))
	})
	assert.Empty(t, s.errors)
	s = onSpy(t, func(s *spy) { asynctooltest.Succeeded(s, rep, "prices/3") })
	assert.Equal(t, []string{`asynctooltest: no node "prices/3" in the report (its paths: prices, prices/0, prices/1, prices/2, prices/join)`}, s.errors)
}
