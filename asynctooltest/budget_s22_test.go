package asynctooltest_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynctool-go/asynctool"
	"github.com/asynctool-go/asynctool/asynctooltest"
	"github.com/stretchr/testify/assert"
)

// TimedOut holds for an item its ForEach's Budget stopped, named by its
// path, as its doc says; Succeeded for the node that went on.
func TestS22BTimedOutForABudgetStoppedItem(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prices := asynctool.NewWrapper("prices", asynctool.ForEach[int, int, int]{
			Items: func(context.Context, int, asynctool.Wrappers) ([]int, error) { return []int{0, 1}, nil },
			Worker: asynctool.WorkerFunc[int, int](func(ctx context.Context, i int, _ asynctool.Wrappers) (int, error) {
				select {
				case <-time.After(time.Duration(1+i*1000) * time.Millisecond):
					return i, nil
				case <-ctx.Done():
					return 0, ctx.Err()
				}
			}),
			Budget: 50 * time.Millisecond,
		}, 0)
		rep := asynctooltest.RunWithin(t, time.Minute, prices)
		asynctooltest.Succeeded(t, rep, "prices")
		asynctooltest.Succeeded(t, rep, "prices/0")
		asynctooltest.TimedOut(t, rep, "prices/1")
		var be *asynctool.BudgetError
		assert.True(t, errors.As(prices.Result().Value[1].Err, &be))
	})
}
