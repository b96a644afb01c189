package asynctool

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPendingTimeIsShown: a node suspended under PolicySuspend and
// then resumed reported a Duration (and, to OnNodeEnd, an ev.Duration,
// which otel records as the node's latency) from its first attempt's
// start to its end, so the time it waited for a person's Resume read as
// time its worker ran: "ran 3h0m1s" for a worker that took a second.
// Duration still spans it, and NodeReport.Pending and NodeEvent.Pending
// now give the pending part, also in a snapshot while the node waits.
func TestPendingTimeIsShown(t *testing.T) {
	const pause = 150 * time.Millisecond
	for _, tc := range []struct {
		name   string
		resume func(r *Run) error
		ok     bool
	}{
		{"rerun", func(r *Run) error { return r.Resume("sus", Rerun()) }, true},
		{"succeed with", func(r *Run) error { return r.Resume("sus", SucceedWith(7)) }, true},
		{"fail with", func(r *Run) error { return r.Resume("sus", FailWith(errBoom)) }, false},
		{"cancelled", func(r *Run) error { r.Cancel(); return nil }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ended atomic.Pointer[NodeEvent]
			h := Hooks{OnNodeEnd: func(_ context.Context, ev NodeEvent) {
				if ev.ID == "sus" {
					ended.Store(&ev)
				}
			}}
			a := newAsync(t, WithHooks(&h))
			var calls atomic.Int32
			sus := NewWrapper("sus", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
				if calls.Add(1) == 1 {
					return 0, errBoom
				}
				return 5, nil
			}), 0).OnFailure(PolicySuspend)
			r, err := a.Start(context.Background(), 0, sus)
			require.NoError(t, err)
			t.Cleanup(r.Cancel)
			select {
			case <-r.Suspended():
			case <-time.After(10 * time.Second):
				t.Fatal("sus never became pending")
			}
			time.Sleep(pause)
			snap := r.Report().Nodes[0]
			assert.Equal(t, StatusPending, snap.Status)
			assert.GreaterOrEqual(t, snap.Pending, pause, "a snapshot counts the pending time so far")
			require.NoError(t, tc.resume(r))
			err = r.Wait(context.Background())
			if tc.ok {
				require.NoError(t, err)
			}
			n := r.Report().Nodes[0]
			assert.Equal(t, tc.ok, n.Result == ResultSuccess, "%v %v", n.Result, n.Err)
			assert.GreaterOrEqual(t, n.Pending, pause)
			assert.GreaterOrEqual(t, n.Duration(), n.Pending, "Duration includes Pending")
			assert.Less(t, n.Duration()-n.Pending, pause, "the attempts themselves were quick")
			assert.Contains(t, r.Report().String(), " pending ")
			ev := ended.Load()
			require.NotNil(t, ev)
			assert.Equal(t, n.Duration(), ev.Duration)
			assert.Equal(t, n.Pending, ev.Pending)
		})
	}
}

// TestNoPendingTimeWithoutSuspension: a node that never waited for
// a Resume has no Pending, nor one whose custom join suspended it (it
// was pending before it started: the time is in no field).
func TestNoPendingTimeWithoutSuspension(t *testing.T) {
	a := newAsync(t, WithTimings(true))
	up := NewWrapper("up", okWorker(), 0)
	NewWrapper("j", okWorker(), 0).Depend(up, true).
		Join(CustomJoin(func([]Upstream) Decision { return DecideSuspend }))
	retried := NewWrapper("retried", WorkerFunc[int, int](func() func(context.Context, int, Wrappers) (int, error) {
		var n atomic.Int32
		return func(context.Context, int, Wrappers) (int, error) {
			if n.Add(1) == 1 {
				return 0, errors.New("once")
			}
			return 1, nil
		}
	}()), 0).Retry(RetryPolicy{Attempts: 2})
	r, err := a.Start(context.Background(), 0, up, retried)
	require.NoError(t, err)
	t.Cleanup(r.Cancel)
	<-r.Suspended()
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, r.Resume("j", Rerun()))
	require.NoError(t, r.Wait(context.Background()))
	rep := r.Report()
	for _, n := range rep.Nodes {
		assert.Zero(t, n.Pending, n.ID)
	}
	assert.NotContains(t, rep.String(), "pending")
}
