package asynctool

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRerunThatEndsTheRunIsAccepted: a Resume(Rerun) whose rerun ran and
// ended the run before Resume returned was reported as stopped first
// (ErrNotPending), although the worker ran again and succeeded. Resume
// looked at the run's context after handing the rerun on, and the end
// of the run had cancelled it. An executor that runs the task on the
// caller makes that order certain; helper-53 saw it in about 2 % of
// TestStatusAnyOfPendingUpstream's runs under -race.
func TestRerunThatEndsTheRunIsAccepted(t *testing.T) {
	inline := ExecutorFunc(func(task func()) error { task(); return nil })
	a := New(WithExecutor(inline))
	defer a.Close()
	var calls atomic.Int32
	p := NewWrapper("p", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		if calls.Add(1) == 1 {
			return 0, errBoom
		}
		return 7, nil
	}), 0).OnFailure(PolicySuspend)
	r, err := a.Start(context.Background(), time.Minute, p)
	require.NoError(t, err)
	<-r.Suspended()
	require.NoError(t, r.Resume("p", Rerun()), "the rerun ran and succeeded")
	require.NoError(t, r.Wait(context.Background()))
	assert.Equal(t, int32(2), calls.Load())
	assert.Equal(t, 7, p.Result().Value)
}
