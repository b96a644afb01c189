package asynctool

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestH109SubPlanInputCannotDetachTheSubRun: a SubPlan's Input whose
// context keeps the node's values but not its cancellation, such as
// context.WithCancel(context.WithoutCancel(ctx)), passed the check on
// Input's context (it has a Done channel, and the node's run mark), and
// the sub-run then ran on after the node ended, for ever when its nodes
// wait for their context: Close hung. The sub-run now ends when the
// node's context does, by the group deadline or by the outer run's
// Cancel, whatever context Input returned.
func TestH109SubPlanInputCannotDetachTheSubRun(t *testing.T) {
	detach := map[string]func(context.Context) (context.Context, context.CancelFunc){
		"WithCancel(WithoutCancel)": func(ctx context.Context) (context.Context, context.CancelFunc) {
			return context.WithCancel(context.WithoutCancel(ctx))
		},
		"WithTimeout(WithoutCancel, an hour)": func(ctx context.Context) (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.WithoutCancel(ctx), time.Hour)
		},
	}
	for name, input := range detach {
		for _, end := range []string{"deadline", "cancel"} {
			t.Run(name+"/"+end, func(t *testing.T) {
				gate := make(chan struct{})
				saw := make(chan error, 1)
				started := make(chan struct{})
				waiter := NewWrapper("waiter", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
					close(started)
					select {
					case <-ctx.Done():
						saw <- context.Cause(ctx)
						return 0, ctx.Err()
					case <-gate:
						return 0, nil
					}
				}), 0)
				pl, err := Compile(waiter)
				require.NoError(t, err)
				a := New()
				release := releaser(t, gate) // lets a sub-run that was not stopped go, on failure
				node := NewWrapper("sub", SubPlan[int, int]{Plan: pl, Output: waiter.ValueIn,
					Input: func(ctx context.Context, _ int, _ Wrappers) (context.Context, error) {
						c, cancel := input(ctx)
						t.Cleanup(cancel) // only once the test ended: the point is that nothing else ends it
						return c, nil
					}}, 0)
				timeout := time.Duration(0)
				if end == "deadline" {
					timeout = 50 * time.Millisecond
				}
				run, err := a.Start(context.Background(), timeout, node)
				require.NoError(t, err)
				<-started
				if end == "cancel" {
					run.Cancel()
				}
				select {
				case cause := <-saw:
					if end == "deadline" {
						assert.ErrorIs(t, cause, context.DeadlineExceeded, "the sub-run ends with the node's cause")
					} else {
						assert.ErrorIs(t, cause, context.Canceled)
					}
				case <-time.After(10 * time.Second):
					t.Errorf("the sub-run's node still runs 10 s after the outer run's %s", end)
				}
				closed := make(chan error, 1)
				go func() { closed <- a.Close() }()
				select {
				case err := <-closed:
					assert.NoError(t, err)
				case <-time.After(10 * time.Second):
					t.Errorf("Close still waits 10 s after the outer run's %s", end)
					release()
					<-closed
				}
				assert.Equal(t, ResultTimeout, node.Result().State)
			})
		}
	}
}
