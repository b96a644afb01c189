package durable

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/asynctool-go/asynctool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Regression tests for the eighteenth review of the durable module: result
// types a checkpoint cannot give back, nil Resume values, and the run's
// error when River's ctx has ended.

// shortRiverTimeout is a Worker whose River job timeout is 100ms, whatever
// the graph's deadline.
type shortRiverTimeout struct{ *Worker[sumArgs] }

func (shortRiverTimeout) Timeout(*river.Job[sumArgs]) time.Duration { return 100 * time.Millisecond }

// TestS18RCallbackPanicSurvivesRiversTimeout guards the attempt's error
// when River's ctx ends while the run is still ending: the run's error,
// with the callback panic in it, must be waited for, not replaced by
// ctx.Err(). Here a node suspends, the attempt cancels the run to park
// the job, and the node's OnNodeEnd hook, called as the cancellation ends
// the node, outlasts River's timeout and then panics. Run.Wait(ctx)
// returned ctx.Err() at once, and the attempt failed without the panic.
func TestS18RCallbackPanicSurvivesRiversTimeout(t *testing.T) {
	riverDone := make(chan (<-chan struct{}), 1)
	async := asynctool.New(asynctool.WithHooks(&asynctool.Hooks{
		OnNodeEnd: func(_ context.Context, ev asynctool.NodeEvent) {
			if ev.ID != "approve" {
				return
			}
			<-<-riverDone
			time.Sleep(300 * time.Millisecond) // the attempt, without waiting for the run, is gone by now
			panic("the audit hook broke")
		},
	}))
	t.Cleanup(func() { async.Close() })
	build := func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		riverDone <- ctx.Done()
		approve := Node(cp, "approve", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			return 0, errors.New("needs a person")
		}), 0).OnFailure(asynctool.PolicySuspend)
		return []asynctool.Wrapper{approve}, nil
	}
	events := runWorkerAs(t, shortRiverTimeout{mustWorker(t, async, 0, build)}, 1)
	require.Len(t, events, 1)
	ev := events[0]
	require.Equal(t, rivertype.JobStateDiscarded, ev.Job.State, "River's timeout ended the attempt: no park")
	require.NotEmpty(t, ev.Job.Errors)
	assert.Contains(t, ev.Job.Errors[len(ev.Job.Errors)-1].Error, `callback OnNodeEnd of node "approve" panicked: the audit hook broke`)
}

// runWorkerAs is runWorker for any river.Worker of sumArgs.
func runWorkerAs(t *testing.T, worker river.Worker[sumArgs], maxAttempts int) []*river.Event {
	t.Helper()
	workers := river.NewWorkers()
	river.AddWorker(workers, worker)
	client := newClient[*sql.Tx](t, riversqlite.New(openSQLite(t)), workers)
	events, cancel := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled)
	defer cancel()
	_, err := client.Insert(context.Background(), sumArgs{Base: 1}, &river.InsertOpts{MaxAttempts: maxAttempts})
	require.NoError(t, err)
	var got []*river.Event
	for {
		ev := waitFor(t, events, 1)[0]
		got = append(got, ev)
		if ev.Kind != river.EventKindJobFailed || ev.Job.State == rivertype.JobStateDiscarded {
			return got
		}
	}
}
