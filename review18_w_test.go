package asynctool

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestS18WReportReasonAttemptTimeout: a node whose last attempt passed its
// RetryPolicy.AttemptTimeout is reported as timed out, not as "worker
// failed": its worker may well have returned a value, too late. A worker
// that returns someone else's *AttemptTimeoutError (a nested run's) still
// failed.
func TestS18WReportReasonAttemptTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		late := NewWrapper("late", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			time.Sleep(20 * ms) // ignores ctx, then returns a value
			return 1, nil
		}), 0).Retry(RetryPolicy{Attempts: 2, AttemptTimeout: 10 * ms})
		nested := NewWrapper("nested", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			return 0, &AttemptTimeoutError{ID: "inner", Attempt: 1, Timeout: ms}
		}), 0)
		r, err := a.Start(context.Background(), time.Minute, late, nested)
		require.NoError(t, err)
		require.NoError(t, r.Wait(context.Background()))
		rep := r.Report()
		reasons := map[string]string{}
		for _, n := range rep.Nodes {
			reasons[n.ID] = n.Reason
		}
		assert.Equal(t, "attempt 2 passed its attempt timeout of 10ms", reasons["late"])
		assert.Equal(t, "worker failed", reasons["nested"])
	})
}
