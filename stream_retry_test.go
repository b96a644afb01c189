package asynctool

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestStreamRetryNoneAllocatesNothingExtra pins the cost of appending a
// node without retries: the node, its done channel and its intake link
// (a PolicySuspend node adds its Suspended channel and the pointer to
// it). Retries must not add to it.
func TestStreamRetryNoneAllocatesNothingExtra(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	fn := func(_ context.Context, prev int) (int, error) { return prev, nil }
	for _, tt := range []struct {
		policy FailurePolicy
		want   float64
	}{
		{PolicyFail, 3},
		{PolicyContinue, 3},
		{PolicyEnd, 3},
		{PolicySuspend, 5},
	} {
		t.Run(tt.policy.String(), func(t *testing.T) {
			s := NewStream(0) // never run: the nodes wait in the intake
			got := testing.AllocsPerRun(1000, func() { s.AppendWith(fn, tt.policy) })
			assert.Equal(t, tt.want, got, "allocations per AppendWith: got, want")
		})
	}
}
