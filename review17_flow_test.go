package asynctool

// Regression tests from the seventeenth review: flow rules, streams and
// the executors.

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ExponentialBackoff doubles its delay up to max. With a max near the
// largest Duration (no cap, in effect), the doubling overflowed into
// negative delays, which the retry treats as no delay at all; and a
// jitter factor above 1 on such a delay overflowed too.
func TestExponentialBackoffDoesNotOverflow(t *testing.T) {
	const most = time.Duration(math.MaxInt64)
	b := ExponentialBackoff(time.Second, most, 0)
	prev := time.Duration(0)
	for n := 1; n <= 100; n++ {
		d := b(n)
		require.GreaterOrEqual(t, d, prev, "attempt %d: the delay shrank to %v", n, d)
		prev = d
	}
	assert.Equal(t, most, prev, "the delay reaches the cap")
	j := ExponentialBackoff(most/2, most, 1)
	for n := 1; n <= 100; n++ {
		require.Positive(t, j(3), "a jittered delay near the cap")
	}
}
