package asynctool

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The last EndsRun node's end and the deadline can come in the same
// instant: endedOne finds the run not stopping, the deadline passes, and
// then it records the early end. The context, and so every worker, saw
// the deadline: the nodes ended now end as timeouts of the deadline, not
// as stopped by the run's end. An early end that cancelled the context
// itself stands.
func TestEarlyEndAfterTheDeadlineIsTheDeadlines(t *testing.T) {
	w := NewWrapper("page", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 0, nil }), 0)
	pl, err := Compile(w)
	require.NoError(t, err)
	for _, c := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{"deadline first", func() (context.Context, context.CancelFunc) {
			return context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		}, context.DeadlineExceeded},
		{"cancelled by the early end", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx, cancel
		}, ErrRunEnded},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRun(pl.p, false)
			var cancel context.CancelFunc
			r.ctx, cancel = c.ctx()
			defer cancel()
			r.ctxDone = r.ctx.Done()
			r.early.Store(&runEnded{id: "page"})
			st, err, late := r.expired()
			require.True(t, late)
			assert.Equal(t, ResultTimeout, st)
			assert.ErrorIs(t, err, c.want)
			if c.want == context.DeadlineExceeded {
				assert.False(t, errors.Is(err, ErrRunEnded), "%v", err)
			}
		})
	}
}
