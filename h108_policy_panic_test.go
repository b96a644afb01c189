package asynctool

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestH108RetryPolicyPanicIsNotTheWorkers: a panic in a RetryPolicy's
// Retryable or Backoff became the node's error as a bare *PanicError, so
// the node's report said "worker panicked" (the worker had returned an
// error, and panicked nowhere), and the error the worker returned, the
// failure the policy was asked about, was lost. The node's error now
// wraps both, and its Reason blames the retry policy; errors.As still
// finds the *PanicError, for graph and stream nodes alike.
func TestH108RetryPolicyPanicIsNotTheWorkers(t *testing.T) {
	policies := map[string]RetryPolicy{
		"Retryable": {Attempts: 3, Retryable: func(error) bool { panic("bad policy") }},
		"Backoff":   {Attempts: 3, Backoff: func(int) time.Duration { panic("bad policy") }},
	}
	check := func(t *testing.T, err error) {
		t.Helper()
		var pe *PanicError
		require.ErrorAs(t, err, &pe)
		assert.Equal(t, "bad policy", pe.Value)
		assert.ErrorIs(t, err, errBoom, "the worker's own error")
		assert.Contains(t, err.Error(), "retry policy")
		assert.Contains(t, err.Error(), errBoom.Error())
	}
	for name, rp := range policies {
		t.Run(name, func(t *testing.T) {
			a := newAsync(t)
			x := NewWrapper("x", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
				return 0, errBoom
			}), 0).Retry(rp)
			r, err := a.Start(context.Background(), time.Minute, x)
			require.NoError(t, err)
			require.NoError(t, r.Wait(context.Background()))
			check(t, x.Result().Err)
			n := r.Report().Nodes[0]
			assert.Equal(t, 1, n.Attempts)
			assert.Equal(t, "retry policy panicked", n.Reason)

			s := NewStream(0)
			sn := s.AppendWith(func(context.Context, int) (int, error) { return 0, errBoom }, PolicyContinue, StreamRetry(rp))
			go s.Close()
			require.NoError(t, s.Run(context.Background()))
			_, err = sn.Wait()
			check(t, err)
		})
	}
}
