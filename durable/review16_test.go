package durable

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynctool-go/asynctool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Regression tests for helper-41's review of the durable module.

// suspendingOn builds a → s, s checkpointed under PolicySuspend, whose
// worker fails with first(n) on its nth run (n from 1) and succeeds once
// first returns nil.
func suspendingOn(s *atomic.Int32, first func(n int32) error) BuildFunc[sumArgs] {
	var a atomic.Int32
	return func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		na := intNode(cp, "a", &a, nil)
		Node(cp, "s", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			return 1, first(s.Add(1))
		}), 0).Depend(na, true).OnFailure(asynctool.PolicySuspend)
		return []asynctool.Wrapper{na}, nil
	}
}

// TestSuspendedNodeSnoozeStillParks guards the package doc's rule that a
// suspension outranks a snooze when the snooze comes from the suspended
// node itself: SuspendedError must not unwrap to its JobSnoozeError, or
// River, which looks for a snooze before a cancellation, snoozes the job
// and the suspended node runs again with nobody having looked at it.
func TestSuspendedNodeSnoozeStillParks(t *testing.T) {
	var s atomic.Int32
	build := suspendingOn(&s, func(n int32) error {
		if n == 1 {
			return river.JobSnooze(time.Millisecond)
		}
		return nil
	})
	workers := river.NewWorkers()
	river.AddWorker(workers, mustWorker(t, newAsync(t), time.Minute, build))
	client := newClient(t, riversqlite.New(openSQLite(t)), workers)
	events, cancel := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobCancelled, river.EventKindJobFailed, river.EventKindJobSnoozed)
	defer cancel()
	_, err := client.Insert(context.Background(), sumArgs{Base: 1}, nil)
	require.NoError(t, err)
	ev := waitFor(t, events, 1)[0]
	assert.Equal(t, river.EventKindJobCancelled, ev.Kind, "the suspension parks the job")
	time.Sleep(500 * time.Millisecond) // a snoozed job would have run again by now
	assert.Equal(t, int32(1), s.Load(), "nobody resumed the job: s must not run again")
}

// TestSuspendedNodeCancelIsNotParked guards the package doc's rule that a
// river.JobCancel outranks the suspension even when the suspended node
// itself returned it: the job is cancelled, not parked, so Resume
// refuses it.
func TestSuspendedNodeCancelIsNotParked(t *testing.T) {
	var s atomic.Int32
	client, id, _ := runParked(t, suspendingOn(&s, func(int32) error {
		return river.JobCancel(errors.New("order withdrawn"))
	}))
	row, err := client.JobGet(context.Background(), id)
	require.NoError(t, err)
	assert.Contains(t, row.Errors[len(row.Errors)-1].Error, "order withdrawn")
	assert.NotContains(t, row.Errors[len(row.Errors)-1].Error, "suspended", "not a park")
	_, err = Resume(context.Background(), client, id, nil)
	assert.ErrorIs(t, err, ErrNotParked, "the job was cancelled by a node, not parked")
}

// TestJobRetryThenCancelIsNotParked guards Resume's rule that a job is
// parked only if its last attempt parked it: after a Client.JobRetry of a
// parked job, an attempt whose BuildFunc cancels the job stores no
// checkpoint, so the row keeps the park mark of the attempt before; the
// mark names its attempt, and Resume refuses the job.
func TestJobRetryThenCancelIsNotParked(t *testing.T) {
	var s atomic.Int32
	var approved, cancelled atomic.Bool
	inner := gatedApproval(&s, &approved, func(int32) error { return nil })
	client, id, events := runParked(t, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		if cancelled.Load() {
			return nil, river.JobCancel(errors.New("order deleted"))
		}
		return inner(ctx, job, cp)
	})
	cancelled.Store(true)
	_, err := client.JobRetry(context.Background(), id)
	require.NoError(t, err)
	ev := untilParkedOrDone(t, events)
	require.Equal(t, river.EventKindJobCancelled, ev.Kind)
	require.Contains(t, ev.Job.Errors[len(ev.Job.Errors)-1].Error, "order deleted")
	_, err = Resume(context.Background(), client, id, nil)
	assert.ErrorIs(t, err, ErrNotParked, "the last attempt cancelled the job for another reason")
}
