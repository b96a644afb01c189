package asynctool

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// Tests from the seventeenth session's review of the core (helper
// s17-corereview): regressions, and a differential model test.

// TestGoexitFailureAppliesThePolicy: a worker that ends its goroutine with
// runtime.Goexit (t.FailNow in a test's worker) fails its node with
// ErrGoexit, and that failure is the node's like any other: its
// OnFailure policy applies, as it does to an error or a panic. It did
// not: under PolicyEnd the run went on and BeginWork returned nil, under
// PolicyContinue the must successor failed, and under PolicySuspend the
// node failed instead of becoming pending.
func TestGoexitFailureAppliesThePolicy(t *testing.T) {
	build := func(policy FailurePolicy, gate <-chan struct{}) (up, down, other *WorkerWrapper[int, int]) {
		up = NewWrapper("up", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			runtime.Goexit()
			return 0, nil
		}), 0).OnFailure(policy)
		down = NewWrapper("down", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 2, nil }), 0).
			Depend(up, true)
		other = NewWrapper("other", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
			select {
			case <-gate:
				return 1, nil
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}), 0)
		return up, down, other
	}
	t.Run("end", func(t *testing.T) {
		a := newAsync(t)
		gate := make(chan struct{}) // never closed: other runs until the run ends
		up, _, other := build(PolicyEnd, gate)
		err := a.BeginWork(context.Background(), time.Second, up, other)
		var ee *EndError
		if !errors.As(err, &ee) || ee.ID != "up" || !errors.Is(ee.Err, ErrGoexit) {
			t.Fatalf("BeginWork returned %v, want the EndError of up", err)
		}
		if res := other.Result(); res.Err != error(ee) {
			t.Errorf("other: %+v, want the run's EndError", res)
		}
	})
	t.Run("continue", func(t *testing.T) {
		a := newAsync(t)
		gate := make(chan struct{})
		close(gate)
		up, down, other := build(PolicyContinue, gate)
		if err := a.BeginWork(context.Background(), 10*time.Second, up, other); err != nil {
			t.Fatal(err)
		}
		if res := up.Result(); !errors.Is(res.Err, ErrGoexit) {
			t.Errorf("up: %+v", res)
		}
		if res := down.Result(); res.State != ResultSuccess {
			t.Errorf("down: %+v, want a success: up failed under PolicyContinue", res)
		}
	})
	t.Run("suspend", func(t *testing.T) {
		a := newAsync(t)
		gate := make(chan struct{})
		close(gate)
		up, down, other := build(PolicySuspend, gate)
		r, err := a.Start(context.Background(), 10*time.Second, up, other)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-r.Suspended():
		case <-r.Done():
			t.Fatalf("the run ended without suspending up: %+v", up.Result())
		}
		if err := r.Resume("up", SucceedWith(7)); err != nil {
			t.Fatal(err)
		}
		if err := r.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		if res := down.Result(); res.State != ResultSuccess {
			t.Errorf("down: %+v", res)
		}
	})
}

// TestRerunThatEndsTheRunIsAccepted: Resume(Rerun) looked at the run's
// context after handing the node to a goroutine, to tell whether the run
// had been stopped first; but a rerun that succeeds can end the whole run
// before that look, and the run's end cancels its context too. Resume then
// returned ErrNotPending ("the run was stopped first") for a rerun that
// ran and succeeded. It happened now and then on the Async's own pool
// (TestSuspendAndResume/rerun failed about once in 20 runs under -race),
// and every time with an executor that runs tasks on the caller.
func TestRerunThatEndsTheRunIsAccepted(t *testing.T) {
	inline := ExecutorFunc(func(task func()) error { task(); return nil })
	for _, tc := range []struct {
		name string
		opts []Option
		runs int
	}{
		{"own pool", nil, 200},
		{"caller runs", []Option{WithExecutor(inline)}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAsync(t, tc.opts...)
			for k := range tc.runs {
				var calls atomic.Int32
				sus := NewWrapper("sus", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
					if calls.Add(1) == 1 {
						return 0, errBoom
					}
					return 5, nil
				}), 0).OnFailure(PolicySuspend)
				r, err := a.Start(context.Background(), 0, sus)
				if err != nil {
					t.Fatal(err)
				}
				<-r.Suspended()
				if err := r.Resume("sus", Rerun()); err != nil {
					r.Cancel()
					t.Fatalf("run %d: Resume: %v; the rerun: %+v after %d calls", k, err, sus.Result(), calls.Load())
				}
				if err := r.Wait(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
