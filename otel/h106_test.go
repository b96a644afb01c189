package asynctoolotel_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynctool-go/asynctool"
	"github.com/asynctool-go/asynctool/asynctooltest"
	asynctoolotel "github.com/asynctool-go/asynctool/otel"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestH106WaitIsOnTheFirstAttemptsSpanOnly checks that a retried node's
// later attempts do not carry asynctool.node.wait_ms: the core's
// OnNodeStart event of a later attempt repeats the first start's wait,
// which each later attempt's span showed as its own.
func TestH106WaitIsOnTheFirstAttemptsSpanOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, exp, _, _ := setup(t)
		var calls atomic.Int32
		flaky := asynctool.NewWrapper("flaky", asynctooltest.Func(func(context.Context, int) (int, error) {
			if calls.Add(1) < 3 {
				return 0, errDown
			}
			return 7, nil
		}), 0).Retry(asynctool.RetryPolicy{Attempts: 3, Backoff: asynctool.ConstantBackoff(5 * time.Millisecond)})
		a := asynctool.New(asynctool.WithHooks(h))
		require.NoError(t, a.BeginWork(context.Background(), time.Second, flaky))
		require.NoError(t, a.Close())

		var attempts []tracetest.SpanStub
		for _, s := range exp.GetSpans() {
			if s.Name == "asynctool.node flaky" {
				attempts = append(attempts, s)
			}
		}
		require.Len(t, attempts, 3)
		slices.SortFunc(attempts, func(x, y tracetest.SpanStub) int { return x.StartTime.Compare(y.StartTime) })
		assert.Contains(t, attrs(attempts[0].Attributes), asynctoolotel.KeyNodeWaitMS)
		for k, s := range attempts[1:] {
			assert.NotContains(t, attrs(s.Attributes), asynctoolotel.KeyNodeWaitMS, "attempt %d", k+2)
		}
	})
}
