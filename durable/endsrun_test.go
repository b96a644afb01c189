package durable

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynctool-go/asynctool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestEndsRunCompletesTheJob: a graph whose page ends the run stops a
// slow sink the page did not need; the job completes instead of failing
// on that sink and being retried.
func TestEndsRunCompletesTheJob(t *testing.T) {
	var user, page atomic.Int32
	evs := runJob(t, 3, 30*time.Second, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		u := intNode(cp, "user", &user, nil)
		asynctool.NewWrapper("analytics", asynctool.WorkerFunc[int, int](func(ctx context.Context, _ int, _ asynctool.Wrappers) (int, error) {
			<-ctx.Done() // a slow side call nobody waits for
			return 0, ctx.Err()
		}), 0).Depend(u, true)
		intNode(cp, "page", &page, nil).Depend(u, true).EndsRun()
		return []asynctool.Wrapper{u}, nil
	})
	require.Len(t, evs, 1)
	assert.Equal(t, river.EventKindJobCompleted, evs[0].Kind, "%v", evs[0].Job.Errors)
	assert.Equal(t, int32(1), page.Load())
}
