package asynctool

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestH108PendingNodeStoppedByTheDeadlineSaysSo: a node that the deadline
// ends while it is pending did not run until then: its worker failed
// long before and it waited for a Resume. Its report and its
// OnNodeTimeout event used to say "stopped while running" (or, for a
// node its custom join suspended, "stopped before it started"), and the
// failure that suspended it, which the report showed while it was
// pending, was nowhere: an operator looked for a slow worker instead of
// a Resume nobody made.
func TestH108PendingNodeStoppedByTheDeadlineSaysSo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		reasons := map[string]string{}
		h := Hooks{OnNodeTimeout: func(_ context.Context, ev NodeEvent) {
			mu.Lock()
			reasons[ev.ID] = ev.Reason
			mu.Unlock()
		}}
		a := New(WithHooks(&h))
		defer func() { require.NoError(t, a.Close()) }()
		work := func(err error) Worker[int, int] {
			return WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 1, err })
		}
		p := NewWrapper("p", work(errBoom), 0).OnFailure(PolicySuspend)
		u := NewWrapper("u", work(nil), 0)
		NewWrapper("j", work(nil), 0).Depend(u, true).
			Join(CustomJoin(func([]Upstream) Decision { return DecideSuspend }))
		slow := NewWrapper("slow", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
			<-ctx.Done()
			return 0, ctx.Err()
		}), 0)
		r, err := a.Start(context.Background(), time.Minute, p, u, slow)
		require.NoError(t, err)
		synctest.Wait()
		pend := r.Report()
		require.Equal(t, StatusPending, pend.Nodes[0].Status, "p before the deadline:\n%v", pend)
		require.ErrorIs(t, pend.Nodes[0].Err, errBoom, "p before the deadline")
		require.ErrorIs(t, r.Wait(context.Background()), context.DeadlineExceeded)
		rep := r.Report()
		byID := map[string]NodeReport{}
		for _, n := range rep.Nodes {
			byID[n.ID] = n
		}
		mu.Lock()
		defer mu.Unlock()
		for _, tc := range []struct{ id, want string }{
			{"p", "stopped while pending after boom: context deadline exceeded"},
			{"j", "stopped while pending (its join suspended it): context deadline exceeded"},
			{"slow", "stopped while running: context deadline exceeded"},
		} {
			assert.Equal(t, StatusTimedOut, byID[tc.id].Status, "%s", tc.id)
			assert.Equal(t, tc.want, byID[tc.id].Reason, "report of %s", tc.id)
			assert.Equal(t, tc.want, reasons[tc.id], "OnNodeTimeout of %s", tc.id)
		}
	})
}
