package asynctool

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestH108ExponentialBackoffOfAZeroOrNegativeBaseIsQuick: the delay
// before attempt n+1 doubled base up to n times until it reached max, and
// a base of 0 (or a negative one, which doubles down to 0) never does: a
// policy retrying for ever (Attempts near the largest int) spent longer
// and longer computing each delay, billions of iterations for a delay of
// 0. Each call now returns at once.
func TestH108ExponentialBackoffOfAZeroOrNegativeBaseIsQuick(t *testing.T) {
	for _, base := range []time.Duration{0, -time.Nanosecond, -time.Second} {
		b := ExponentialBackoff(base, time.Second, 0)
		done := make(chan time.Duration, 1)
		go func() { done <- b(1 << 40) }()
		select {
		case d := <-done:
			assert.LessOrEqual(t, d, time.Duration(0), "base %v", base)
		case <-time.After(10 * time.Second):
			t.Fatalf("ExponentialBackoff(%v, 1s, 0)(1<<40) still computing after 10s", base)
		}
	}
	// The loop still stops at max, and a positive base still doubles.
	b := ExponentialBackoff(time.Millisecond, time.Second, 0)
	assert.Equal(t, 4*time.Millisecond, b(3))
	assert.Equal(t, time.Second, b(1<<40))
}
