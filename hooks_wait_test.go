package asynctool

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOnNodeStartWaitIsTheFirstAttempts: OnNodeStart's Wait is how long
// the node waited once ready, for its first attempt; a retry's start
// reports zero, where it repeated the first start's wait (seen in
// otel's wait_ms on every attempt's span).
func TestOnNodeStartWaitIsTheFirstAttempts(t *testing.T) {
	var mu sync.Mutex
	waits := map[int]time.Duration{}
	a := New(WithHooks(&Hooks{OnNodeStart: func(ctx context.Context, ev NodeEvent) context.Context {
		mu.Lock()
		defer mu.Unlock()
		waits[ev.Attempt] = ev.Wait
		return ctx
	}}))
	defer a.Close()
	calls := 0
	up := NewWrapper("up", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		time.Sleep(time.Millisecond)
		return 1, nil
	}), 0)
	// The root is ready at once; the second node waits for up's end, so
	// its first start's wait is measured from its ready time.
	n := NewWrapper("n", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		calls++
		if calls == 1 {
			return 0, errors.New("flaky")
		}
		return 2, nil
	}), 0).Depend(up, true).Retry(RetryPolicy{Attempts: 3, Backoff: ConstantBackoff(2 * time.Millisecond)})
	require.NoError(t, a.BeginWork(context.Background(), time.Minute, up))
	require.Equal(t, 2, calls)
	assert.Equal(t, 2, n.Result().Value)
	mu.Lock()
	defer mu.Unlock()
	require.Contains(t, waits, 1)
	require.Contains(t, waits, 2)
	assert.Zero(t, waits[2], "the second attempt's start")
}
