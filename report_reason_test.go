package asynctool

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPendingNodeStoppedByTheDeadlineSaysSo: a node that the deadline
// ends while it is pending did not run until then: its worker failed
// long before and it waited for a Resume. Its report and its
// OnNodeTimeout event used to say "stopped while running" (or, for a
// node its custom join suspended, "stopped before it started"), and the
// failure that suspended it, which the report showed while it was
// pending, was nowhere: an operator looked for a slow worker instead of
// a Resume nobody made.
func TestPendingNodeStoppedByTheDeadlineSaysSo(t *testing.T) {
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

// TestNodeStoppedDuringItsBackoffSaysSo: a node whose run is cancelled
// while it waits for its next attempt was not running: its worker had
// failed and returned. Its reason said "stopped while running". So it
// did when the run was cancelled while the node's OnNodeRetry hooks ran,
// before its retry timer was set. A node whose retry has started reads
// as running again.
func TestNodeStoppedDuringItsBackoffSaysSo(t *testing.T) {
	for _, tc := range []struct {
		name     string
		attempts int
		want     string
	}{
		{"backoff", 1, "stopped while waiting to retry: context canceled"},
		{"OnNodeRetry", 1, "stopped while waiting to retry: context canceled"},
		{"second attempt", 2, "stopped while running: context canceled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var event string
				var run *Run
				started, ended := make(chan struct{}), make(chan struct{})
				h := &Hooks{OnNodeTimeout: func(_ context.Context, ev NodeEvent) {
					event = ev.Reason
					close(ended)
				}}
				if tc.name == "OnNodeRetry" {
					h.OnNodeRetry = func(context.Context, NodeEvent) {
						<-started
						run.Cancel()
						<-ended // the sweep ended x before its retry timer is set
					}
				}
				a := New(WithHooks(h))
				defer func() { require.NoError(t, a.Close()) }()
				calls := 0
				x := NewWrapper("x", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
					if calls++; calls == 2 {
						<-ctx.Done()
						return 0, ctx.Err()
					}
					return 0, errBoom
				}), 0).Retry(RetryPolicy{Attempts: 3, Backoff: ConstantBackoff(time.Second)})
				r, err := a.Start(context.Background(), time.Minute, x)
				require.NoError(t, err)
				run = r
				close(started)
				synctest.Wait() // x failed once and waits a second for its next attempt
				if tc.attempts == 2 {
					time.Sleep(time.Second)
					synctest.Wait() // x's second attempt runs
				}
				r.Cancel()
				require.ErrorIs(t, r.Wait(context.Background()), context.Canceled)
				n := r.Report().Nodes[0]
				assert.Equal(t, StatusTimedOut, n.Status)
				assert.Equal(t, tc.attempts, n.Attempts)
				assert.Equal(t, tc.want, n.Reason)
				assert.Equal(t, n.Reason, event, "OnNodeTimeout's")
			})
		})
	}
}

// TestAtLeastReason guards the reason of a node that AtLeast failed: two
// of three upstreams failed while the third still ran, so the join could
// no longer be met. The reason said every optional upstream failed (the
// third had not), or, with must edges, that a must upstream failed
// (AtLeast ignores the must flag).
func TestAtLeastReason(t *testing.T) {
	for _, must := range []bool{false, true} {
		t.Run(fmt.Sprintf("must=%v", must), func(t *testing.T) {
			a := newAsync(t)
			gate, started := make(chan struct{}), make(chan struct{})
			release := releaser(t, gate)
			failing := func(id string) *WorkerWrapper[int, int] {
				return NewWrapper(id, WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
					<-started
					return 0, errBoom
				}), 0)
			}
			b1, b2 := failing("b1"), failing("b2")
			b3 := NewWrapper("b3", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
				close(started)
				<-gate
				return 3, nil
			}), 0)
			q := NewWrapper("quorum", okWorker(), 0).Depend(b1, must).Depend(b2, must).Depend(b3, must).Join(AtLeast(2))
			run, err := a.Start(context.Background(), 10*time.Second, b1, b2, b3)
			require.NoError(t, err)
			require.Eventually(t, func() bool { return q.State() == StateError }, 5*time.Second, time.Millisecond)
			rep := run.Report()
			release()
			require.NoError(t, run.Wait(context.Background()))
			assert.Equal(t, StateWorking, rep.Nodes[reportIndex(t, run, "b3")].State, "b3 still running when quorum failed")
			assert.Equal(t, "join at least 2 succeeded cannot be met", rep.Nodes[reportIndex(t, run, "quorum")].Reason)
		})
	}
}

// TestJoinReasons guards the reasons of nodes whose join failed them: a
// custom join's failures were reported as the worker's ("worker failed",
// "worker panicked") although the worker never ran, and AnySucceeded with
// must-flagged edges (which it ignores) named a must upstream.
func TestJoinReasons(t *testing.T) {
	custom := func(fn func([]Upstream) Decision) Join { return CustomJoin(fn) }
	tests := []struct {
		name string
		must bool
		join Join
		// hold keeps u1 running until n failed, for joins that fail on
		// u0 alone, so that the reason names u0.
		hold bool
		want string
	}{
		{"default optional", false, Join{}, false, "every optional upstream failed"},
		{"default must", true, Join{}, true, `must upstream "u0" failed`},
		{"any optional", false, AnySucceeded(), false, "every upstream failed"}, // it has no must upstreams (TestMustIsTheJoins)
		{"any must", true, AnySucceeded(), false, "every upstream failed"},
		{"all", false, AllSucceeded(), true, `must upstream "u0" failed`},
		{"named", false, NamedSucceeded("u0"), true, `must upstream "u0" failed`},
		{"at least", true, AtLeast(1), false, "join at least 1 succeeded cannot be met"},
		{"custom fail", false, custom(func([]Upstream) Decision { return DecideFail }), false, "custom join decided to fail"},
		{"custom undecided", false, custom(func([]Upstream) Decision { return DecideWait }), false, "custom join undecided after every upstream ended"},
		{"custom panic", false, custom(func([]Upstream) Decision { panic("no") }), false, "custom join panicked"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newAsync(t)
			gate := make(chan struct{})
			release := releaser(t, gate)
			if !tt.hold {
				release()
			}
			fail := func(id string, wait chan struct{}) *WorkerWrapper[int, int] {
				return NewWrapper(id, WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
					<-wait
					return 0, errBoom
				}), 0)
			}
			now := make(chan struct{})
			close(now)
			u0, u1 := fail("u0", now), fail("u1", gate)
			n := NewWrapper("n", okWorker(), 0).Depend(u0, tt.must).Depend(u1, tt.must)
			if tt.join.kind != joinDefault {
				n.Join(tt.join)
			}
			run, err := a.Start(context.Background(), 10*time.Second, u0, u1)
			require.NoError(t, err)
			require.Eventually(t, func() bool { return n.State() == StateError }, 5*time.Second, time.Millisecond)
			release()
			requireEnds(t, run, "the run did not end")
			nr := run.Report().Nodes[reportIndex(t, run, "n")]
			require.False(t, nr.Ran)
			assert.Equal(t, tt.want, nr.Reason, "err: %v", nr.Err)
		})
	}
}

// TestFailedByResumeReason: a node that Resume ended with FailWith was
// reported as "worker failed", although for a node its custom join
// suspended no worker ran.
func TestFailedByResumeReason(t *testing.T) {
	a := newAsync(t)
	up := NewWrapper("up", okWorker(), 0)
	NewWrapper("c", okWorker(), 0).Depend(up, true).Join(CustomJoin(func([]Upstream) Decision { return DecideSuspend }))
	p := NewWrapper("p", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 0, errBoom }), 0).
		OnFailure(PolicySuspend)
	r, err := a.Start(context.Background(), time.Minute, up, p)
	require.NoError(t, err)
	<-r.Suspended()
	no := errors.New("declined")
	require.NoError(t, r.Resume("c", FailWith(no)))
	require.NoError(t, r.Resume("p", FailWith(no)))
	require.NoError(t, r.Wait(context.Background()))
	rep := r.Report()
	for _, id := range []string{"c", "p"} {
		n := rep.Nodes[indexOf(r, id)]
		assert.Equal(t, "failed by Resume", n.Reason, id)
		assert.ErrorIs(t, n.Err, no, id)
	}
}

// TestReportReasonAttemptTimeout: a node whose last attempt passed its
// RetryPolicy.AttemptTimeout is reported as timed out, not as "worker
// failed": its worker may well have returned a value, too late. A worker
// that returns someone else's *AttemptTimeoutError (a nested run's) still
// failed.
func TestReportReasonAttemptTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		late := NewWrapper("late", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			time.Sleep(20 * ms) // ignores ctx, then returns a value
			return 1, nil
		}), 0).Retry(RetryPolicy{Attempts: 2, AttemptTimeout: 10 * ms})
		nested := NewWrapper("nested", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			return 0, &AttemptTimeoutError{ID: "inner", Attempt: 1, Timeout: ms}
		}), 0)
		r, err := a.Start(context.Background(), time.Minute, late, nested)
		require.NoError(t, err)
		require.NoError(t, r.Wait(context.Background()))
		rep := r.Report()
		reasons := map[string]string{}
		for _, n := range rep.Nodes {
			reasons[n.ID] = n.Reason
		}
		assert.Equal(t, "attempt 2 passed its attempt timeout of 10ms", reasons["late"])
		assert.Equal(t, "worker failed", reasons["nested"])
	})
}

// TestRerunAfterAGoexitInOnNodeRetryReadsAsRunning: a Goexit in an
// OnNodeRetry hook, which the node's retry had marked as waiting to
// retry, ends the attempt without a retry; under PolicySuspend the node
// is pending, and a Rerun stopped while its worker runs reads as running.
func TestRerunAfterAGoexitInOnNodeRetryReadsAsRunning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hookCalls := 0
		a := New(WithHooks(&Hooks{OnNodeRetry: func(context.Context, NodeEvent) {
			if hookCalls++; hookCalls == 1 {
				runtime.Goexit()
			}
		}}))
		defer func() { require.NoError(t, a.Close()) }()
		calls := 0
		x := NewWrapper("x", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
			if calls++; calls == 1 {
				return 0, errBoom
			}
			<-ctx.Done()
			return 0, ctx.Err()
		}), 0).Retry(RetryPolicy{Attempts: 3, Backoff: ConstantBackoff(time.Second)}).OnFailure(PolicySuspend)
		r, err := a.Start(context.Background(), time.Minute, x)
		require.NoError(t, err)
		synctest.Wait()
		require.Equal(t, StatusPending, r.Report().Nodes[0].Status)
		require.NoError(t, r.Resume("x", Rerun()))
		synctest.Wait() // the Rerun's worker waits for its context
		r.Cancel()
		require.ErrorIs(t, r.Wait(context.Background()), context.Canceled)
		assert.Equal(t, 2, calls)
		assert.Equal(t, "stopped while running: context canceled", r.Report().Nodes[0].Reason)
	})
}

// TestReasonOfAWorkerThatRanIsTheWorkers: a node whose worker ran and
// failed is explained by its worker, whatever the error it returned or
// the hooks around it did: an error wrapping a sub-run's EndError (a
// SubPlan whose plan a PolicyEnd node ended) is not this run's end; an
// UpstreamError the worker read from an optional upstream and returned
// is not its join's decision; and an OnNodeStart hook that panicked
// before the worker ran, as the worker then panicked or called
// runtime.Goexit itself, did not end the attempt.
func TestReasonOfAWorkerThatRanIsTheWorkers(t *testing.T) {
	denied := NewWrapper("denied", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		return 0, errors.New("denied")
	}), 0).OnFailure(PolicyEnd)
	endedPlan, err := Compile(denied)
	require.NoError(t, err)
	hookPanics := &Hooks{OnNodeStart: func(ctx context.Context, ev NodeEvent) context.Context {
		if ev.ID == "x" {
			panic("the tracer broke")
		}
		return ctx
	}}
	for _, tt := range []struct {
		name  string
		hooks *Hooks
		graph func() (starts []Wrapper, x Wrapper)
		want  string
	}{
		{"a sub-run's EndError", nil, func() ([]Wrapper, Wrapper) {
			x := NewWrapper("x", SubPlan[int, int]{Plan: endedPlan, Output: func(*Run) (int, error) { return 1, nil }}, 0)
			return []Wrapper{x}, x
		}, "worker failed"},
		{"an optional upstream's UpstreamError", nil, func() ([]Wrapper, Wrapper) {
			root := NewWrapper("root", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 0, errBoom }), 0)
			mid := NewWrapper("mid", okWorker(), 0).Depend(root, true).ShortCircuit(false)
			slow := NewWrapper("slow", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
				time.Sleep(10 * time.Millisecond) // virtual time: mid has failed by then
				return 1, nil
			}), 0)
			x := NewWrapper("x", WorkerFunc[int, int](func(_ context.Context, _ int, all Wrappers) (int, error) {
				m, err := mid.ResultFrom(all)
				if err != nil {
					return 0, err
				}
				return 0, m.Err // the upstream's error, as a page might pass it on
			}), 0).Depend(slow, true).Depend(mid, false)
			return []Wrapper{root, slow}, x
		}, "worker failed"},
		{"a worker's panic after a hook's", hookPanics, func() ([]Wrapper, Wrapper) {
			x := NewWrapper("x", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { panic("worker broke") }), 0)
			return []Wrapper{x}, x
		}, "worker panicked"},
		{"a worker's Goexit after a hook's panic", hookPanics, func() ([]Wrapper, Wrapper) {
			x := NewWrapper("x", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { runtime.Goexit(); return 0, nil }), 0)
			return []Wrapper{x}, x
		}, "worker called runtime.Goexit"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a := New(WithHooks(tt.hooks))
				defer a.Close()
				starts, x := tt.graph()
				r, err := a.Start(context.Background(), time.Minute, starts...)
				require.NoError(t, err)
				_ = r.Wait(context.Background()) // the hook's panic is the run's error
				rep := r.Report()
				var got *NodeReport
				for i := range rep.Nodes {
					if rep.Nodes[i].ID == x.ID() {
						got = &rep.Nodes[i]
					}
				}
				require.NotNil(t, got)
				assert.True(t, got.Ran, "the worker ran")
				assert.Equal(t, tt.want, got.Reason, "err: %v", got.Err)
			})
		})
	}
}

// TestStatusString guards every Status's words, which Report.String
// shows.
func TestStatusString(t *testing.T) {
	want := []string{"unknown", "waiting", "ready", "running", "pending", "succeeded", "failed", "skipped", "timed out", "Status(9)"}
	for s := range Status(len(want)) {
		assert.Equal(t, want[s], s.String())
	}
	assert.Equal(t, "Status(-1)", Status(-1).String())
}
