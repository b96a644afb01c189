package asynctool

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestEarlyEndStandsOnlyIfItCancelledTheRun: the last EndsRun node's
// end and the run's context ending otherwise can come in the same
// instant: endedOne finds the run not stopping, then records its end
// after the context ended. An early end recorded after the deadline
// passed is the deadline's (24f802a), and one recorded after the parent
// context was cancelled with a cause of its own is the cause's: the context, and every worker, saw that cause
// (context.Cause) first, so the nodes that end now end with it, not
// with ErrRunEnded, and the run is stopped (Wait's error). The deadline's
// check, ctx.Err() == DeadlineExceeded, misses it: Err is Canceled. An
// early end that cancelled the context itself, or a plain cancel it
// cannot tell from one, stands.
func TestEarlyEndStandsOnlyIfItCancelledTheRun(t *testing.T) {
	w := NewWrapper("page", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 0, nil }), 0)
	pl, err := Compile(w)
	require.NoError(t, err)
	gone := errors.New("the client went away")
	for _, c := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{"deadline first", func() (context.Context, context.CancelFunc) {
			return context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		}, context.DeadlineExceeded},
		{"parent cancelled with a cause", func() (context.Context, context.CancelFunc) {
			parent, cancel := context.WithCancelCause(context.Background())
			ctx, stop := context.WithCancel(parent)
			cancel(gone)
			return ctx, stop
		}, gone},
		{"parent's deadline with a cause", func() (context.Context, context.CancelFunc) {
			return context.WithDeadlineCause(context.Background(), time.Now().Add(-time.Second), gone)
		}, gone},
		{"cancelled by the early end", func() (context.Context, context.CancelFunc) {
			parent, cancel := context.WithCancelCause(context.Background())
			ctx, stop := context.WithCancel(parent)
			stop()
			cancel(gone)
			return ctx, stop
		}, ErrRunEnded},
		{"a plain cancel of the parent", func() (context.Context, context.CancelFunc) {
			parent, cancel := context.WithCancel(context.Background())
			ctx, stop := context.WithCancel(parent)
			cancel()
			return ctx, stop
		}, ErrRunEnded},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRun(pl.p, false)
			var cancel context.CancelFunc
			r.ctx, cancel = c.ctx()
			defer cancel()
			r.inner = r.ctx
			r.early.Store(&runEnded{id: "page"})
			st, err, late := r.expired()
			require.True(t, late)
			assert.Equal(t, ResultTimeout, st)
			assert.ErrorIs(t, err, c.want)
			if c.want != ErrRunEnded {
				assert.NotErrorIs(t, err, ErrRunEnded)
			}
		})
	}
}
