package asynctool

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// subUserKey carries the user id into a profile plan's workers.
type subUserKey struct{}

// profilePlan is a plan of three nodes: name and avatar from the user id
// in the context, and card joining them.
func profilePlan(t *testing.T) (*Plan, *WorkerWrapper[int, string]) {
	t.Helper()
	uid := func(ctx context.Context) int { return ctx.Value(subUserKey{}).(int) }
	name := NewWrapper("name", WorkerFunc[int, string](func(ctx context.Context, _ int, _ Wrappers) (string, error) {
		return fmt.Sprintf("user%d", uid(ctx)), nil
	}), 0)
	avatar := NewWrapper("avatar", WorkerFunc[int, string](func(ctx context.Context, _ int, _ Wrappers) (string, error) {
		return fmt.Sprintf("/img/%d.png", uid(ctx)), nil
	}), 0)
	card := NewWrapper("card", WorkerFunc[int, string](func(_ context.Context, _ int, all Wrappers) (string, error) {
		n, _ := name.ResultFrom(all)
		a, _ := avatar.ResultFrom(all)
		return n.Value + " " + a.Value, nil
	}), 0).Depend(name, true).Depend(avatar, true)
	pl, err := Compile(name, avatar)
	require.NoError(t, err)
	return pl, card
}

// profileNode is a SubPlan node running profilePlan for the user id it
// reads from its upstream "user".
func profileNode(pl *Plan, card *WorkerWrapper[int, string]) *WorkerWrapper[int, string] {
	return NewWrapper("profile", SubPlan[int, string]{
		Plan: pl,
		Input: func(ctx context.Context, _ int, all Wrappers) (context.Context, error) {
			u, err := ResultOf[int](all, "user")
			if err != nil {
				return nil, err
			}
			return context.WithValue(ctx, subUserKey{}, u.Value), nil
		},
		Output: func(sub *Run) (string, error) {
			r := card.ResultIn(sub)
			return r.Value, r.Err
		},
	}, 0)
}

func TestSubPlanRunsAPlanAsANode(t *testing.T) {
	pl, card := profilePlan(t)
	a := New()
	defer a.Close()
	user := NewWrapper("user", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 7, nil }), 0)
	profile := profileNode(pl, card).Depend(user, true)
	page := NewWrapper("page", WorkerFunc[int, string](func(_ context.Context, _ int, all Wrappers) (string, error) {
		p, err := profile.ResultFrom(all)
		return "<" + p.Value + ">", err
	}), 0).Depend(profile, true)

	run, err := a.Start(context.Background(), time.Second, user)
	require.NoError(t, err)
	require.NoError(t, run.Wait(context.Background()))
	assert.Equal(t, "<user7 /img/7.png>", page.Result().Value)

	rep := run.Report()
	sub := subNode(t, rep, "profile").Sub
	require.NotNil(t, sub, "the SubPlan node's report holds its sub-run's")
	var ids []string
	for _, n := range sub.Nodes {
		ids = append(ids, n.ID)
		assert.Equal(t, StatusSucceeded, n.Status, n.ID)
	}
	assert.ElementsMatch(t, []string{"name", "avatar", "card"}, ids)
	for _, n := range rep.Nodes {
		if n.ID != "profile" {
			assert.Nil(t, n.Sub, "only SubPlan nodes have a Sub: %s", n.ID)
		}
	}
	s := rep.String()
	assert.Contains(t, s, "profile: succeeded by=user\n  name: succeeded\n  avatar: succeeded\n  card: succeeded by=", "the sub-run's nodes follow the node, indented:\n%s", s)
	assert.Contains(t, s, "\npage: succeeded by=profile\n", s)
}

// subNode returns the report of node id.
func subNode(t *testing.T, rep *Report, id string) NodeReport {
	t.Helper()
	for _, n := range rep.Nodes {
		if n.ID == id {
			return n
		}
	}
	t.Fatalf("no node %q in the report", id)
	return NodeReport{}
}

func TestSubPlanStaticReport(t *testing.T) {
	pl, card := profilePlan(t)
	user := NewWrapper("user", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 7, nil }), 0)
	profile := profileNode(pl, card).Depend(user, true)
	rep, err := Describe(user)
	require.NoError(t, err)
	sub := rep.Nodes[1].Sub
	require.Equal(t, "profile", rep.Nodes[1].ID)
	require.NotNil(t, sub, "a static report shows the sub-plan's shape")
	assert.Len(t, sub.Nodes, 3)
	for _, n := range sub.Nodes {
		assert.Equal(t, StateInit, n.State)
	}
	hedged := NewWrapper("hedged", Hedged[int, string](profile.worker, time.Millisecond, 2), 0).Depend(user, true)
	rep, err = Describe(user)
	require.NoError(t, err)
	assert.NotNil(t, rep.Nodes[len(rep.Nodes)-1].Sub, "a hedged SubPlan shows its plan too (%s)", hedged.id)
}

// TestSubPlanOnAPlanConcurrently runs an outer plan holding a SubPlan
// node from many goroutines, each with its own user: every run reads its
// own value, and releasing the outer run releases its sub-runs.
func TestSubPlanOnAPlanConcurrently(t *testing.T) {
	pl, card := profilePlan(t)
	a := New()
	defer a.Close()
	user := NewWrapper("user", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
		return ctx.Value(subUserKey{}).(int), nil
	}), 0)
	profile := profileNode(pl, card).Depend(user, true)
	outer, err := Compile(user)
	require.NoError(t, err)

	var wg sync.WaitGroup
	var bad atomic.Int32
	for g := range 50 {
		wg.Go(func() {
			for k := range 20 {
				u := g*100 + k
				ctx := context.WithValue(context.Background(), subUserKey{}, u)
				run, err := a.RunPlan(ctx, outer, time.Minute)
				if err != nil {
					bad.Add(1)
					continue
				}
				want := fmt.Sprintf("user%d /img/%d.png", u, u)
				if got := profile.ResultIn(run).Value; got != want {
					bad.Add(1)
				}
				if sub := run.Report().Nodes[1].Sub; sub == nil || sub.Nodes[2].Value != want {
					bad.Add(1)
				}
				run.Release()
			}
		})
	}
	wg.Wait()
	assert.Zero(t, bad.Load())
}

func TestSubPlanOutputDecides(t *testing.T) {
	boom := errors.New("boom")
	failing := NewWrapper("fails", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 0, boom }), 0)
	ok := NewWrapper("ok", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 5, nil }), 0)
	pl, err := Compile(failing, ok)
	require.NoError(t, err)
	a := New()
	defer a.Close()

	strict := NewWrapper("strict", SubPlan[int, int]{Plan: pl, Output: func(sub *Run) (int, error) {
		if r := failing.ResultIn(sub); r.Err != nil {
			return 0, r.Err
		}
		return ok.ResultIn(sub).Value, nil
	}}, 0)
	lenient := NewWrapper("lenient", SubPlan[int, int]{Plan: pl, Output: func(sub *Run) (int, error) {
		return ok.ResultIn(sub).Value, nil
	}}, 0)
	require.NoError(t, a.BeginWork(context.Background(), time.Second, strict, lenient))
	assert.ErrorIs(t, strict.Result().Err, boom)
	assert.Equal(t, ResultException, strict.Result().State)
	assert.Equal(t, 5, lenient.Result().Value)
	assert.Equal(t, ResultSuccess, lenient.Result().State)
}

// blocker is a one-node plan whose worker waits for its context.
func blocker(t *testing.T, started chan<- struct{}) *Plan {
	t.Helper()
	w := NewWrapper("waits", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
		if started != nil {
			started <- struct{}{}
		}
		<-ctx.Done()
		return 0, ctx.Err()
	}), 0)
	pl, err := Compile(w)
	require.NoError(t, err)
	return pl
}

func TestSubPlanEndsWithTheNodesDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		pl := blocker(t, nil)
		timed := NewWrapper("timed", SubPlan[int, int]{Plan: pl, Output: func(*Run) (int, error) { return 1, nil }}, 0).
			Timeout(10 * time.Millisecond).Default(-1)
		grouped := NewWrapper("grouped", SubPlan[int, int]{Plan: pl, Output: func(*Run) (int, error) { return 1, nil }}, 0).Default(-2)
		start := time.Now()
		run, err := a.Start(context.Background(), 30*time.Millisecond, timed, grouped)
		require.NoError(t, err)
		err = run.Wait(context.Background())
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, 30*time.Millisecond, time.Since(start))
		assert.Equal(t, WorkResult[int]{State: ResultTimeout, Value: -1, Err: timed.Result().Err}, timed.Result())
		assert.ErrorIs(t, timed.Result().Err, context.DeadlineExceeded)
		assert.Equal(t, ResultTimeout, grouped.Result().State)
		assert.Equal(t, -2, grouped.Result().Value)
		synctest.Wait() // the SubPlan workers return once their sub-runs have ended
		rep := run.Report()
		for _, n := range rep.Nodes {
			require.NotNil(t, n.Sub, n.ID)
			assert.Equal(t, StatusTimedOut, n.Sub.Nodes[0].Status, "%s's sub-run was stopped with it", n.ID)
		}
	})
}

// deadlinePassedCtx is a context whose deadline has passed but whose
// Done channel is not closed yet: the instant a context's deadline timer
// fires, drawn out until the test closes done.
type deadlinePassedCtx struct {
	context.Context
	deadline time.Time
	done     chan struct{}
}

func (c *deadlinePassedCtx) Deadline() (time.Time, bool) { return c.deadline, true }
func (c *deadlinePassedCtx) Done() <-chan struct{}       { return c.done }
func (c *deadlinePassedCtx) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// TestDetachedSubRunEndsItsNodeAsATimeout: a sub-run whose OnRunStart
// hook drops its context's cancellation gets a timer of its own for the
// node's deadline (see keepCaller), which may fire before the node's
// context is done at the same instant. The sub-run's worker then returned
// "run stopped: context deadline exceeded" to a run not yet stopping,
// and the node failed (ResultException, and under PolicySuspend it would
// go pending, calling OnNodePending, and under PolicyEnd end the run
// with its EndError) instead of ending as a timeout at the group deadline: in
// about one run in a thousand of a stress test of plans, and one in 200
// of this graph with real timers under -race. The caller's context here
// holds that instant open, so that the test fails every time.
func TestDetachedSubRunEndsItsNodeAsATimeout(t *testing.T) {
	for _, policy := range []FailurePolicy{PolicyFail, PolicySuspend, PolicyEnd} {
		t.Run(policy.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var pending atomic.Int32
				a := New(WithHooks(&Hooks{
					OnRunStart: func(ctx context.Context, info RunInfo) context.Context {
						if info.Nested {
							return context.WithoutCancel(ctx)
						}
						return nil
					},
					OnNodePending: func(context.Context, NodeEvent) { pending.Add(1) },
				}))
				defer a.Close()
				pl := blocker(t, nil)
				sub := NewWrapper("sub", SubPlan[int, int]{Plan: pl, Output: func(*Run) (int, error) { return 1, nil }}, 0).
					OnFailure(policy)
				graph := NewWrapper("graph", SubGraph[int, int]{Build: func(context.Context, int, Wrappers) (Built[int], error) {
					w := NewWrapper("waits", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
						<-ctx.Done()
						return 0, ctx.Err()
					}), 0)
					return Built[int]{Starts: []Wrapper{w}, Output: func() (int, error) { return 1, nil }}, nil
				}}, 0).OnFailure(policy)
				caller := &deadlinePassedCtx{Context: context.Background(), deadline: time.Now().Add(time.Second), done: make(chan struct{})}
				run, err := a.Start(caller, 0, sub, graph)
				require.NoError(t, err)
				time.Sleep(2 * time.Second) // the sub-runs' own timers fire; the caller's deadline has passed
				synctest.Wait()
				close(caller.done)
				err = run.Wait(context.Background())
				assert.ErrorIs(t, err, context.DeadlineExceeded)
				var end *EndError
				assert.False(t, errors.As(err, &end), "the run was ended by a node: %v", err)
				for _, w := range []*WorkerWrapper[int, int]{sub, graph} {
					assert.Equal(t, ResultTimeout, w.Result().State, "%s: %v", w.ID(), w.Result().Err)
				}
				assert.Zero(t, pending.Load(), "OnNodePending calls")
			})
		})
	}
}

// TestSubRunEndedByItsNodeAfterTheDeadlineFailsItsNode: the wait of a
// sub-run's worker for its context whose deadline has passed (see
// TestDetachedSubRunEndsItsNodeAsATimeout) is for a sub-run stopped by its
// own copy of that deadline only. A sub-run that a PolicyEnd node ended
// is a failure of the node, which ends at once as failed: it waited for
// the context, and then ended as a timeout, and for a context whose Done
// is never closed it never ended.
func TestSubRunEndedByItsNodeAfterTheDeadlineFailsItsNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		fails := func() *WorkerWrapper[int, int] {
			return NewWrapper("fails", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
				return 0, errBoom
			}), 0).OnFailure(PolicyEnd)
		}
		pl, err := Compile(fails())
		require.NoError(t, err)
		sub := NewWrapper("sub", SubPlan[int, int]{Plan: pl, Output: func(*Run) (int, error) { return 1, nil }}, 0)
		graph := NewWrapper("graph", SubGraph[int, int]{Build: func(context.Context, int, Wrappers) (Built[int], error) {
			return Built[int]{Starts: []Wrapper{fails()}, Output: func() (int, error) { return 1, nil }}, nil
		}}, 0)
		caller := &deadlinePassedCtx{Context: context.Background(), deadline: time.Now().Add(-time.Second), done: make(chan struct{})}
		defer close(caller.done)
		run, err := a.Start(caller, 0, sub, graph)
		require.NoError(t, err)
		synctest.Wait()
		for _, w := range []*WorkerWrapper[int, int]{sub, graph} {
			r := w.ResultIn(run)
			assert.Equal(t, ResultException, r.State, "%s: %v", w.ID(), r.Err)
			var end *EndError
			assert.ErrorAs(t, r.Err, &end, w.ID())
		}
		select {
		case <-run.Done():
		default:
			t.Error("the run has not ended")
		}
	})
}

func TestSubPlanCancelledWithTheOuterRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		started := make(chan struct{}, 1)
		node := NewWrapper("sub", SubPlan[int, int]{Plan: blocker(t, started), Output: func(*Run) (int, error) { return 1, nil }}, 0)
		run, err := a.Start(context.Background(), time.Hour, node)
		require.NoError(t, err)
		<-started
		run.Cancel()
		require.ErrorIs(t, run.Wait(context.Background()), context.Canceled)
		assert.Equal(t, ResultTimeout, node.Result().State)
	})
}

func TestSubPlanEndedByAPolicyEndNode(t *testing.T) {
	auth := NewWrapper("auth", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		return 0, errors.New("denied")
	}), 0).OnFailure(PolicyEnd)
	pl, err := Compile(auth)
	require.NoError(t, err)
	a := New()
	defer a.Close()
	called := false
	node := NewWrapper("sub", SubPlan[int, int]{Plan: pl, Output: func(*Run) (int, error) { called = true; return 1, nil }}, 0)
	after := NewWrapper("after", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 2, nil }), 0).Depend(node, false)
	require.NoError(t, a.BeginWork(context.Background(), time.Second, node), "the outer run goes on: the sub-plan's end is its own")
	var end *EndError
	require.ErrorAs(t, node.Result().Err, &end)
	assert.Equal(t, "auth", end.ID)
	assert.False(t, called, "Output is not called for a stopped sub-run")
	assert.Equal(t, ResultException, after.Result().State, "a must-less optional join fails when its only upstream failed")
}

// TestSubPlanSuspendedInside: a node of the sub-plan that suspends
// cancels the sub-run and fails the SubPlan node with its error; with
// PolicySuspend on the SubPlan node, Rerun runs the whole plan again.
func TestSubPlanSuspendedInside(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		pay := NewWrapper("pay", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			if calls.Add(1) == 1 {
				return 0, errors.New("card declined")
			}
			return 9, nil
		}), 0).OnFailure(PolicySuspend)
		pl, err := Compile(pay)
		require.NoError(t, err)
		a := New()
		defer a.Close()
		node := NewWrapper("checkout", SubPlan[int, int]{Plan: pl, Output: func(sub *Run) (int, error) {
			r := pay.ResultIn(sub)
			return r.Value, r.Err
		}}, 0).OnFailure(PolicySuspend)
		run, err := a.Start(context.Background(), time.Hour, node)
		require.NoError(t, err)
		<-run.Suspended()
		rep := run.Report()
		assert.Equal(t, StatusPending, rep.Nodes[0].Status)
		assert.ErrorContains(t, rep.Nodes[0].Err, `sub-plan suspended at node "pay"`)
		assert.ErrorContains(t, rep.Nodes[0].Err, "card declined")
		assert.Equal(t, StatusTimedOut, rep.Nodes[0].Sub.Nodes[0].Status, "the suspended sub-run was cancelled")
		require.NoError(t, run.Resume("checkout", Rerun()))
		require.NoError(t, run.Wait(context.Background()))
		assert.Equal(t, WorkResult[int]{State: ResultSuccess, Value: 9}, node.Result())
		assert.Equal(t, StatusSucceeded, run.Report().Nodes[0].Sub.Nodes[0].Status, "the report shows the last sub-run")
	})
}

func TestSubPlanRetriedRunsThePlanAgain(t *testing.T) {
	var calls atomic.Int32
	flaky := NewWrapper("flaky", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		if n := calls.Add(1); n < 3 {
			return 0, fmt.Errorf("attempt %d failed", n)
		}
		return 3, nil
	}), 0)
	pl, err := Compile(flaky)
	require.NoError(t, err)
	a := New()
	defer a.Close()
	node := NewWrapper("sub", SubPlan[int, int]{Plan: pl, Output: func(sub *Run) (int, error) {
		r := flaky.ResultIn(sub)
		return r.Value, r.Err
	}}, 0).Retry(RetryPolicy{Attempts: 3})
	run, err := a.Start(context.Background(), time.Second, node)
	require.NoError(t, err)
	require.NoError(t, run.Wait(context.Background()))
	assert.Equal(t, 3, node.Result().Value)
	rep := run.Report()
	assert.Equal(t, 3, rep.Nodes[0].Attempts)
	assert.Equal(t, 3, rep.Nodes[0].Sub.Nodes[0].Value, "the report shows the last attempt's sub-run")
}

func TestSubPlanRefusals(t *testing.T) {
	pl, card := profilePlan(t)
	for _, tc := range []struct {
		name string
		w    Worker[int, string]
		want string
	}{
		{"no plan", SubPlan[int, string]{Output: func(*Run) (string, error) { return "", nil }}, `node "bad": its SubPlan has no Plan`},
		{"zero plan", SubPlan[int, string]{Plan: &Plan{}, Output: func(*Run) (string, error) { return "", nil }}, `node "bad": its SubPlan has no Plan`},
		{"no output", SubPlan[int, string]{Plan: pl}, `node "bad": its SubPlan has no Output`},
		{"hedged", Hedged[int, string](SubPlan[int, string]{Plan: pl}, time.Millisecond, 2), `node "bad": its SubPlan has no Output`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Compile(NewWrapper("bad", tc.w, 0))
			require.ErrorIs(t, err, ErrNilWorker)
			assert.ErrorContains(t, err, tc.want)
			a := New()
			defer a.Close()
			err = a.BeginWork(context.Background(), time.Second, NewWrapper("bad", tc.w, 0))
			assert.ErrorIs(t, err, ErrNilWorker)
		})
	}
	_, err := SubPlan[int, string]{Plan: pl, Output: func(sub *Run) (string, error) { return card.ResultIn(sub).Value, nil }}.
		Action(context.Background(), 0, Wrappers{})
	assert.ErrorContains(t, err, "SubPlan called outside a run")
}

func TestSubPlanInput(t *testing.T) {
	pl, card := profilePlan(t)
	a := New()
	defer a.Close()
	out := func(sub *Run) (string, error) { return card.ResultIn(sub).Value, nil }
	refused := errors.New("no user")
	var started atomic.Bool
	hooks := &Hooks{OnRunStart: func(ctx context.Context, info RunInfo) context.Context {
		if info.Nodes == 3 {
			started.Store(true)
		}
		return nil
	}}
	failing := NewWrapper("failing", SubPlan[int, string]{Plan: pl, Output: out,
		Input: func(context.Context, int, Wrappers) (context.Context, error) { return nil, refused }}, 0)
	detached := NewWrapper("detached", SubPlan[int, string]{Plan: pl, Output: out,
		Input: func(context.Context, int, Wrappers) (context.Context, error) {
			return context.WithValue(context.Background(), subUserKey{}, 1), nil
		}}, 0)
	ctx := WithRunHooks(context.Background(), hooks)
	require.NoError(t, a.BeginWork(ctx, time.Second, failing, detached))
	assert.ErrorIs(t, failing.Result().Err, refused)
	assert.ErrorContains(t, detached.Result().Err, "does not derive from the node's")
	assert.False(t, started.Load(), "no sub-run started")
}

// TestSubPlanStartsDuringClose: a SubPlan node that starts after Close
// was called runs its plan: its run is one Close waits for.
func TestSubPlanStartsDuringClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pl, card := profilePlan(t)
		a := New()
		gate := make(chan struct{})
		user := NewWrapper("user", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			<-gate
			return 4, nil
		}), 0)
		profile := profileNode(pl, card).Depend(user, true)
		run, err := a.Start(context.Background(), time.Hour, user)
		require.NoError(t, err)
		closed := make(chan error)
		go func() { closed <- a.Close() }()
		synctest.Wait() // Close waits for the run
		close(gate)
		require.NoError(t, <-closed)
		require.NoError(t, run.Wait(context.Background()))
		assert.Equal(t, WorkResult[string]{State: ResultSuccess, Value: "user4 /img/4.png"}, profile.Result())
	})
}

// TestSubPlanOnABusyPool: with one goroutine in the pool, held by the
// SubPlan node's worker, the sub-run's nodes still run.
func TestSubPlanOnABusyPool(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pl, card := profilePlan(t)
		a := New(WithMaxWorkers(1))
		defer a.Close()
		user := NewWrapper("user", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 2, nil }), 0)
		profile := profileNode(pl, card).Depend(user, true)
		start := time.Now()
		require.NoError(t, a.BeginWork(context.Background(), time.Minute, user))
		assert.Equal(t, "user2 /img/2.png", profile.Result().Value)
		assert.Zero(t, time.Since(start), "nothing waited for a deadline")
	})
}

// TestSubPlanHooksSeeTheSubRun: the Async's hooks observe the sub-run as
// a run of its own, nested in the node's context.
func TestSubPlanHooksSeeTheSubRun(t *testing.T) {
	pl, card := profilePlan(t)
	var mu sync.Mutex
	var ended []string
	a := New(WithHooks(&Hooks{OnNodeEnd: func(_ context.Context, ev NodeEvent) {
		mu.Lock()
		ended = append(ended, ev.ID)
		mu.Unlock()
	}}))
	defer a.Close()
	user := NewWrapper("user", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 2, nil }), 0)
	profileNode(pl, card).Depend(user, true)
	require.NoError(t, a.BeginWork(context.Background(), time.Second, user))
	assert.ElementsMatch(t, []string{"user", "name", "avatar", "card", "profile"}, ended)
	assert.Equal(t, "profile", ended[len(ended)-1], "the sub-run's nodes end before the node")
	assert.True(t, strings.Contains(strings.Join(ended, ","), "user,"), "%v", ended)
}

// TestSubPlanGoexitInside: a worker of the sub-plan that ends its
// goroutine with runtime.Goexit ends it on the SubPlan node's goroutine,
// which runs the sub-run's first nodes: the sub-plan's node fails with
// ErrGoexit, the sub-run still ends, and so does the outer run.
func TestSubPlanGoexitInside(t *testing.T) {
	quits := NewWrapper("quits", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		runtime.Goexit()
		return 0, nil
	}), 0)
	pl, err := Compile(quits)
	require.NoError(t, err)
	a := New()
	defer a.Close()
	node := NewWrapper("sub", SubPlan[int, int]{Plan: pl, Output: func(sub *Run) (int, error) {
		r := quits.ResultIn(sub)
		return r.Value, r.Err
	}}, 0)
	run, err := a.Start(context.Background(), time.Minute, node)
	require.NoError(t, err)
	require.NoError(t, run.Wait(context.Background()))
	assert.ErrorIs(t, node.Result().Err, ErrGoexit)
	sub := run.Report().Nodes[0].Sub
	assert.Equal(t, StatusFailed, sub.Nodes[0].Status, "the report shows the sub-run that ran:\n%v", sub)
	assert.ErrorIs(t, sub.Nodes[0].Err, ErrGoexit)
}

// TestSubPlanRerunAllocatesLittle: releasing a run of a plan that holds
// a SubPlan node releases its sub-runs too, so running it again reuses
// them: a few objects per run, whatever the size of the sub-plan.
func TestSubPlanRerunAllocates(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	a := newAsync(t, WithMaxWorkers(2))
	const n = 200
	root := NewWrapper("root", okWorker(), 0)
	sink := NewWrapper("sink", okWorker(), 0)
	for range n - 2 {
		sink.Depend(NewWrapper("", okWorker(), 0).Depend(root, true), true)
	}
	inner, err := Compile(root)
	require.NoError(t, err)
	node := NewWrapper("sub", SubPlan[int, int]{Plan: inner, Output: func(sub *Run) (int, error) {
		r := sink.ResultIn(sub)
		return r.Value, r.Err
	}}, 0)
	outer, err := Compile(node)
	require.NoError(t, err)
	ctx := context.Background()
	run := func() {
		r, err := a.RunPlan(ctx, outer, time.Minute)
		if err != nil || node.ResultIn(r).Err != nil {
			panic(fmt.Sprint(err, node.ResultIn(r).Err))
		}
		r.Release()
	}
	for range 50 {
		run() // warm the pools
	}
	allocs := testing.AllocsPerRun(200, run)
	t.Logf("%.1f allocs per run of an outer plan with a SubPlan of %d nodes", allocs, n)
	assert.LessOrEqual(t, allocs, 30.0, "a plain run of either plan makes 12")
}

// TestSubPlanSuspendedByACustomJoin: a custom join of the sub-plan that
// suspends its node, which has no error, cancels the sub-run too.
func TestSubPlanSuspendedByACustomJoin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := NewWrapper("up", okWorker(), 0)
		held := NewWrapper("held", okWorker(), 0).Depend(up, true).
			Join(CustomJoin(func([]Upstream) Decision { return DecideSuspend }))
		pl, err := Compile(up)
		require.NoError(t, err)
		a := New()
		defer a.Close()
		node := NewWrapper("sub", SubPlan[int, int]{Plan: pl, Output: func(sub *Run) (int, error) { return held.ResultIn(sub).Value, nil }}, 0)
		require.NoError(t, a.BeginWork(context.Background(), time.Minute, node))
		assert.EqualError(t, node.Result().Err, `asynctool: sub-plan suspended at node "held", and was cancelled`)
	})
}

// TestSubPlanOutputThatReleasesTheSubRun: an Output that releases the
// sub-run, which it must not do, does not let the outer run release, or
// show, the run of the sub-plan that reuses its state.
func TestSubPlanOutputThatReleasesTheSubRun(t *testing.T) {
	a := New()
	defer a.Close()
	inner := NewWrapper("inner", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
		v, _ := ctx.Value(subUserKey{}).(int)
		return v, nil
	}), 0)
	pl, err := Compile(inner)
	require.NoError(t, err)
	var released *runState
	node := NewWrapper("sub", SubPlan[int, int]{Plan: pl, Output: func(sub *Run) (int, error) {
		released = sub.runState
		v := inner.ResultIn(sub).Value
		sub.Release() // misuse
		return v, nil
	}}, 0)
	outer, err := Compile(node)
	require.NoError(t, err)
	for range 50 { // until the plan's pool hands the released state out again (-race drops some)
		run1, err := a.RunPlan(context.WithValue(context.Background(), subUserKey{}, 1), outer, time.Second)
		require.NoError(t, err)
		require.Equal(t, 1, node.ResultIn(run1).Value)
		other, err := a.RunPlan(context.WithValue(context.Background(), subUserKey{}, 2), pl, time.Second)
		require.NoError(t, err)
		if other.runState != released {
			run1.Release()
			other.Release()
			continue
		}
		assert.Empty(t, run1.Report().Nodes[0].Sub.Nodes, "the outer run shows its sub-run as released, not the other run")
		run1.Release()
		assert.Equal(t, 2, inner.ResultIn(other).Value, "the outer run's Release left the other run alone")
		other.Release()
		return
	}
	t.Skip("the sub-plan's pool never handed the released state out again")
}

// TestSubPlanRunInfoNested: OnRunStart tells a sub-run from the run that
// started it.
func TestSubPlanRunInfoNested(t *testing.T) {
	pl, card := profilePlan(t)
	var mu sync.Mutex
	var infos []RunInfo
	a := New(WithHooks(&Hooks{OnRunStart: func(_ context.Context, info RunInfo) context.Context {
		mu.Lock()
		infos = append(infos, info)
		mu.Unlock()
		return nil
	}}))
	defer a.Close()
	user := NewWrapper("user", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 2, nil }), 0)
	profileNode(pl, card).Depend(user, true)
	require.NoError(t, a.BeginWork(context.Background(), time.Second, user))
	require.Len(t, infos, 2)
	assert.Equal(t, RunInfo{Nodes: 2, Deadline: infos[0].Deadline}, infos[0], "the outer run")
	assert.Equal(t, 3, infos[1].Nodes)
	assert.True(t, infos[1].Nested, "the sub-run")
}

// TestValueIn: ValueIn gives a node's value and error in a run of its
// plan, fits SubPlan's Output as a method value, and says why it has none.
func TestValueIn(t *testing.T) {
	pl, card := profilePlan(t)
	a := New()
	defer a.Close()
	run, err := a.RunPlan(context.WithValue(context.Background(), subUserKey{}, 5), pl, time.Second)
	require.NoError(t, err)
	v, err := card.ValueIn(run)
	require.NoError(t, err)
	assert.Equal(t, "user5 /img/5.png", v)
	run.Release()
	_, err = card.ValueIn(run)
	assert.ErrorIs(t, err, ErrUnknownID, "a released run")
	_, err = NewWrapper("free", okWorker(), 0).ValueIn(nil)
	assert.ErrorIs(t, err, ErrUnknownID)

	user := NewWrapper("user", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 9, nil }), 0)
	NewWrapper("profile", SubPlan[int, string]{Plan: pl, Output: card.ValueIn,
		Input: func(ctx context.Context, _ int, all Wrappers) (context.Context, error) {
			return context.WithValue(ctx, subUserKey{}, 9), nil
		}}, 0).Depend(user, true)
	rep := startReport(t, a, user)
	assert.Equal(t, "user9 /img/9.png", subNode(t, rep, "profile").Value)

	blocked := NewWrapper("blocked", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
		<-ctx.Done()
		return 0, ctx.Err()
	}), 0)
	bpl, err := Compile(blocked)
	require.NoError(t, err)
	brun, err := a.StartPlan(context.Background(), bpl, time.Minute)
	require.NoError(t, err)
	_, err = blocked.ValueIn(brun)
	assert.ErrorContains(t, err, `node has not ended: node "blocked"`)
	assert.ErrorIs(t, err, ErrNotEnded)
	brun.Cancel()
	require.NoError(t, func() error { <-brun.Done(); return nil }())
	brun.Release()
}

// startReport runs the graph from starts on a and returns its report.
func startReport(t *testing.T, a *Async, starts ...Wrapper) *Report {
	t.Helper()
	run, err := a.Start(context.Background(), time.Second, starts...)
	require.NoError(t, err)
	require.NoError(t, run.Wait(context.Background()))
	return run.Report()
}

// TestSubPlanReportAfterTheDeadline: the report of an outer run that the
// deadline ended shows its sub-run ended too, although the outer run
// ended without waiting for the SubPlan worker (the inner node still
// showed running in 8 runs of 100).
func TestSubPlanReportAfterTheDeadline(t *testing.T) {
	fast := NewWrapper("fast", okWorker(), 0)
	slow := NewWrapper("slow", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
		<-ctx.Done()
		return 0, ctx.Err()
	}), 0)
	merge := NewWrapper("merge", okWorker(), 0).Depend(fast, true).Depend(slow, true)
	pl, err := Compile(fast, slow)
	require.NoError(t, err)
	a := New()
	defer a.Close()
	checked := 0
	for k := range 300 {
		node := NewWrapper("sub", SubPlan[int, int]{Plan: pl, Output: merge.ValueIn}, 0)
		run, err := a.Start(context.Background(), time.Millisecond, node)
		require.NoError(t, err)
		require.Error(t, run.Wait(context.Background()))
		sub := run.Report().Nodes[0].Sub
		if sub == nil {
			continue // the deadline ended the node before its worker started a sub-run
		}
		checked++
		for _, n := range sub.Nodes {
			if n.ID == "slow" && n.Status != StatusTimedOut {
				t.Fatalf("run %d: the ended run's report shows sub/slow %v", k, n.Status)
			}
		}
	}
	t.Logf("%d of 300 runs had started their sub-run", checked)
	assert.Positive(t, checked, "no run started its sub-run: nothing was checked")
}

// TestSubPlanInputErrorReport: a SubPlan node whose Input failed says so,
// and has no Sub, since no sub-run started.
func TestSubPlanInputErrorReport(t *testing.T) {
	pl, card := profilePlan(t)
	a := New()
	defer a.Close()
	node := NewWrapper("profile", SubPlan[int, string]{Plan: pl, Output: card.ValueIn,
		Input: func(context.Context, int, Wrappers) (context.Context, error) { return nil, errors.New("no uid") }}, 0)
	detached := NewWrapper("detached", SubPlan[int, string]{Plan: pl, Output: card.ValueIn,
		Input: func(ctx context.Context, _ int, _ Wrappers) (context.Context, error) {
			return context.WithoutCancel(ctx), nil
		}}, 0)
	run, err := a.Start(context.Background(), time.Second, node, detached)
	require.NoError(t, err)
	require.NoError(t, run.Wait(context.Background()))
	assert.EqualError(t, node.Result().Err, "asynctool: SubPlan's Input: no uid")
	assert.ErrorContains(t, detached.Result().Err, "drops its cancellation")
	for _, n := range run.Report().Nodes {
		assert.Nil(t, n.Sub, "%s started no sub-run", n.ID)
	}
}

// TestSubPlanRunsItsFirstNodeOnTheWorkersGoroutine: the goroutine of the
// SubPlan node's worker runs the sub-run's first node itself (its stack
// holds SubPlan's Action), rather than handing it to another goroutine.
func TestSubPlanRunsItsFirstNodeOnTheWorkersGoroutine(t *testing.T) {
	var stack string
	first := NewWrapper("first", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		buf := make([]byte, 1<<16)
		stack = string(buf[:runtime.Stack(buf, false)])
		return 1, nil
	}), 0)
	pl, err := Compile(first)
	require.NoError(t, err)
	a := New()
	defer a.Close()
	node := NewWrapper("sub", SubPlan[int, int]{Plan: pl, Output: first.ValueIn}, 0)
	require.NoError(t, a.BeginWork(context.Background(), time.Second, node))
	require.Equal(t, 1, node.Result().Value)
	ran := false
	for _, line := range strings.Split(stack, "\n") {
		// A frame of the goroutine, not the "created by" line of one
		// that SubPlan's Action started.
		ran = ran || strings.HasPrefix(line, "github.com/asynctool-go/asynctool.SubPlan[...].Action(")
	}
	assert.True(t, ran, "the first node ran under the SubPlan worker:\n%s", stack)
}

// TestSubPlanInputCannotDetachTheSubRun: a SubPlan's Input whose
// context keeps the node's values but not its cancellation, such as
// context.WithCancel(context.WithoutCancel(ctx)), passed the check on
// Input's context (it has a Done channel, and the node's run mark), and
// the sub-run then ran on after the node ended, for ever when its nodes
// wait for their context: Close hung. The sub-run now ends when the
// node's context does, by the group deadline or by the outer run's
// Cancel, whatever context Input returned.
func TestSubPlanInputCannotDetachTheSubRun(t *testing.T) {
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

// suspendingPlan is a plan of two roots: "ok", which succeeds, and
// "pay", which fails under PolicySuspend.
func suspendingPlan(t *testing.T) *Plan {
	t.Helper()
	ok := NewWrapper("ok", okWorker(), 0)
	pay := NewWrapper("pay", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		return 0, errors.New("card declined")
	}), 0).OnFailure(PolicySuspend)
	pl, err := Compile(ok, pay)
	require.NoError(t, err)
	return pl
}

// TestSubPlanSuspendOnAFullPool: on a pool of one goroutine, held by the
// SubPlan node's worker, a sub-plan whose roots the worker's goroutine
// shares must still be seen to suspend: the node fails at once, not at
// the deadline.
func TestSubPlanSuspendOnAFullPool(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New(WithMaxWorkers(1))
		defer a.Close()
		node := NewWrapper("sub", SubPlan[int, int]{Plan: suspendingPlan(t), Output: func(*Run) (int, error) { return 1, nil }}, 0)
		start := time.Now()
		require.NoError(t, a.BeginWork(context.Background(), time.Hour, node))
		assert.Zero(t, time.Since(start), "the sub-run's suspension was seen at once")
		assert.ErrorContains(t, node.Result().Err, `sub-plan suspended at node "pay"`)
	})
}

// TestSubPlanSuspendOnAFullUserPool: the same with a Pool of the user's, of
// one goroutine, and a sub-plan that fans out from one root: the helper
// offered for the fan-out waits in that pool's queue behind the SubPlan
// node's worker, and must not keep the sub-run from being seen to
// suspend.
func TestSubPlanSuspendOnAFullUserPool(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := NewPool(PoolSize(1))
		defer p.Close()
		a := New(WithExecutor(p))
		defer a.Close()
		root := NewWrapper("root", okWorker(), 0)
		NewWrapper("ok", okWorker(), 0).Depend(root, true)
		NewWrapper("pay", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			return 0, errors.New("card declined")
		}), 0).OnFailure(PolicySuspend).Depend(root, true)
		pl, err := Compile(root)
		require.NoError(t, err)
		node := NewWrapper("sub", SubPlan[int, int]{Plan: pl, Output: func(*Run) (int, error) { return 1, nil }}, 0)
		start := time.Now()
		require.NoError(t, a.BeginWork(context.Background(), time.Hour, node))
		assert.Zero(t, time.Since(start), "the sub-run's suspension was seen at once")
		assert.ErrorContains(t, node.Result().Err, `sub-plan suspended at node "pay"`)
	})
}

// TestReportShowsTheRunningSubRun: while the sub-run runs, the outer
// run's report shows it as the node's Sub (NodeReport.Sub: the last run
// the node started), not the plan's static shape, also while the SubPlan
// worker's own goroutine runs the sub-run's first nodes, which in a
// chain are all of them.
func TestReportShowsTheRunningSubRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		started, release := make(chan struct{}), make(chan struct{})
		slow := NewWrapper("slow", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			close(started)
			<-release
			return 1, nil
		}), 0)
		pl, err := Compile(slow)
		require.NoError(t, err)
		a := New()
		defer a.Close()
		node := NewWrapper("sub", SubPlan[int, int]{Plan: pl, Output: func(sub *Run) (int, error) { return slow.ResultIn(sub).Value, nil }}, 0)
		run, err := a.Start(context.Background(), time.Hour, node)
		require.NoError(t, err)
		<-started
		sub := run.Report().Nodes[0].Sub
		require.NotNil(t, sub)
		assert.Equal(t, StatusRunning, sub.Nodes[0].Status, "the report shows the sub-run under way")
		close(release)
		require.NoError(t, run.Wait(context.Background()))
		assert.Equal(t, StatusSucceeded, run.Report().Nodes[0].Sub.Nodes[0].Status)
	})
}

// TestSubPlanInputFromAnotherRun: Input must return a context that derives
// from the node's; one that derives from another run's worker context
// would run the sub-plan outside the node's deadline and cancellation,
// and is refused as one from outside any run is.
func TestSubPlanInputFromAnotherRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		other := make(chan context.Context, 1)
		hold := make(chan struct{})
		holder := NewWrapper("holder", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
			other <- ctx
			<-hold
			return 0, nil
		}), 0)
		first, err := a.Start(context.Background(), time.Hour, holder)
		require.NoError(t, err)
		foreign := <-other
		pl := blocker(t, nil)
		node := NewWrapper("sub", SubPlan[int, int]{Plan: pl,
			Input:  func(context.Context, int, Wrappers) (context.Context, error) { return foreign, nil },
			Output: func(*Run) (int, error) { return 1, nil }}, 0).Timeout(time.Second)
		start := time.Now()
		require.NoError(t, a.BeginWork(context.Background(), time.Hour, node))
		assert.ErrorContains(t, node.Result().Err, "does not derive from the node's")
		assert.Zero(t, time.Since(start), "no sub-run ran outside the node's timeout")
		close(hold)
		require.NoError(t, first.Wait(context.Background()))
	})
}

// TestSubPlanCallbackPanicInsideFailsTheNode pins what SubPlan's doc now
// says: a Result callback of the sub-plan that panics makes the
// sub-run's error, which fails the node without calling Output, though
// every node of the sub-plan succeeded.
func TestSubPlanCallbackPanicInsideFailsTheNode(t *testing.T) {
	w := NewWrapper("w", okWorker(), 0).Callback(ResultFunc[int, int](func(bool, int, WorkResult[int]) { panic("oops") }))
	pl, err := Compile(w)
	require.NoError(t, err)
	a := New()
	defer a.Close()
	called := false
	node := NewWrapper("sub", SubPlan[int, int]{Plan: pl, Output: func(*Run) (int, error) { called = true; return 1, nil }}, 0)
	run, err := a.Start(context.Background(), time.Minute, node)
	require.NoError(t, err)
	require.NoError(t, run.Wait(context.Background()), "the outer run's own callbacks did not panic")
	var cpe *CallbackPanicError
	require.ErrorAs(t, node.Result().Err, &cpe)
	assert.Equal(t, "w", cpe.ID)
	assert.False(t, called)
	assert.Equal(t, StatusSucceeded, run.Report().Nodes[0].Sub.Nodes[0].Status)
}

// TestSubPlanNestedSuspendOnFullExecutors: SubPlans two levels deep, on
// executors of one goroutine each (the Async's own pool, a Pool of the
// user's, and an executor of the user's that queues), with a node of
// the innermost plan that suspends and a middle SubPlan node that
// suspends in turn: each level sees the level below suspend, at once.
func TestSubPlanNestedSuspendOnFullExecutors(t *testing.T) {
	for _, tc := range []struct {
		name string
		mk   func() (*Async, func())
	}{
		{"WithMaxWorkers(1)", func() (*Async, func()) { return New(WithMaxWorkers(1)), func() {} }},
		{"Pool of 1", func() (*Async, func()) {
			p := NewPool(PoolSize(1))
			return New(WithExecutor(p)), func() { _ = p.Close() }
		}},
		{"queueing executor", func() (*Async, func()) {
			tasks, stop := make(chan func(), 64), make(chan struct{})
			ended := make(chan struct{})
			go func() {
				defer close(ended)
				for {
					select {
					case f := <-tasks:
						f()
					case <-stop:
						return
					}
				}
			}()
			e := ExecutorFunc(func(f func()) error {
				select {
				case tasks <- f:
					return nil
				default:
					return errors.New("full")
				}
			})
			return New(WithExecutor(e)), func() { close(stop); <-ended }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a, stop := tc.mk()
				defer stop()
				defer a.Close()
				root := NewWrapper("root", okWorker(), 0)
				NewWrapper("ok1", okWorker(), 0).Depend(root, true)
				NewWrapper("ok2", okWorker(), 0).Depend(root, true)
				NewWrapper("pay", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
					return 0, errors.New("card declined")
				}), 0).OnFailure(PolicySuspend).Depend(root, true)
				inner, err := Compile(root)
				require.NoError(t, err)
				out := func(*Run) (int, error) { return 1, nil }
				m1 := NewWrapper("m1", SubPlan[int, int]{Plan: inner, Output: out}, 0).OnFailure(PolicySuspend)
				m2 := NewWrapper("m2", okWorker(), 0)
				m3 := NewWrapper("m3", SubPlan[int, int]{Plan: inner, Output: out}, 0)
				middle, err := Compile(m1, m2, m3)
				require.NoError(t, err)
				top := NewWrapper("top", SubPlan[int, int]{Plan: middle, Output: out}, 0)
				top2 := NewWrapper("top2", SubPlan[int, int]{Plan: middle, Output: out}, 0)
				start := time.Now()
				require.NoError(t, a.BeginWork(context.Background(), time.Hour, top, top2))
				assert.Zero(t, time.Since(start), "every level saw the one below suspend at once")
				for _, w := range []*WorkerWrapper[int, int]{top, top2} {
					assert.ErrorContains(t, w.Result().Err, `sub-plan suspended at node "m1", and was cancelled: asynctool: sub-plan suspended at node "pay"`)
				}
			})
		})
	}
}

// TestNilSubPlanPointer: a nil *SubPlan (a pointer to a SubPlan is a
// worker too) is refused as a nil worker, as a SubPlan without Plan is,
// not with a panic from Compile calling its methods.
func TestNilSubPlanPointer(t *testing.T) {
	var sp *SubPlan[int, int]
	for name, w := range map[string]Worker[int, int]{"plain": sp, "hedged": Hedged[int, int](sp, time.Millisecond, 2)} {
		t.Run(name, func(t *testing.T) {
			require.NotPanics(t, func() {
				_, err := Compile(NewWrapper("x", w, 0))
				assert.ErrorIs(t, err, ErrNilWorker)
				_, err = Describe(NewWrapper("x", w, 0))
				assert.ErrorIs(t, err, ErrNilWorker)
			})
		})
	}
}

// TestSubPlanStallEndedByItsContextNamesNoPendingNode: a SubPlan node
// whose sub-run stalls on a pending node fails with an error naming that
// node. When the sub-run's context ended the pending node after the
// stall but before the node looked for it (here a cancel of the context
// Input made, in a race stallRacingErr's hook makes certain), no node was
// pending any more, and the error said the sub-plan "suspended at node
// #0", a node that does not exist by that name. The sub-run's own error
// is the node's then, as it is for BeginWork.
func TestSubPlanStallEndedByItsContextNamesNoPendingNode(t *testing.T) {
	a := newAsync(t)
	var cancelSub context.CancelFunc
	swept := make(chan struct{})
	xerr := &stallRacingErr{}
	xerr.hook = func() {
		cancelSub()
		select {
		case <-swept: // the sweep ended the pending node
		case <-time.After(10 * time.Second):
			t.Error("the pending node was not ended 10s after the cancel")
		}
	}
	x := NewWrapper("x", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 0, xerr }), 0)
	p := NewWrapper("p", WorkerFunc[int, int](func(_ context.Context, _ int, all Wrappers) (int, error) {
		for {
			if st, _ := all.State("x"); st == StateError {
				return 0, errBoom
			}
			time.Sleep(time.Millisecond)
		}
	}), 0).OnFailure(PolicySuspend).Callback(ResultFunc[int, int](func(bool, int, WorkResult[int]) { close(swept) }))
	pl, err := Compile(x, p)
	require.NoError(t, err)
	node := NewWrapper("outer", SubPlan[int, int]{
		Plan: pl,
		Input: func(ctx context.Context, _ int, _ Wrappers) (context.Context, error) {
			ctx, cancelSub = context.WithCancel(ctx)
			return ctx, nil
		},
		Output: func(*Run) (int, error) { return 1, nil },
	}, 0)
	require.NoError(t, a.BeginWork(context.Background(), time.Minute, node))
	assert.Equal(t, ResultException, node.Result().State)
	assert.ErrorIs(t, node.Result().Err, context.Canceled)
	assert.NotContains(t, node.Result().Err.Error(), "suspended at node")
	assert.Nil(t, xerr.hook, "the race was made")
}

// TestSubPlanDoesNotWaitForItsNodesOnOtherGoroutines pins what SubPlan's
// doc says of a node of Plan that ignores its context: one on another
// goroutine than the worker's does not keep the worker from returning
// once the node's context has ended (the sub-run's sweep ends it), and
// Close waits for it. (One on the worker's own goroutine does: the worker
// is running it.)
func TestSubPlanDoesNotWaitForItsNodesOnOtherGoroutines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		gate := make(chan struct{})
		elsewhere := make(chan struct{}) // the node off the worker's goroutine has started
		onWorker := func() bool {
			buf := make([]byte, 1<<16)
			for _, line := range strings.Split(string(buf[:runtime.Stack(buf, false)]), "\n") {
				if strings.HasPrefix(line, "github.com/asynctool-go/asynctool.SubPlan[...].Action(") {
					return true
				}
			}
			return false
		}
		f := WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			if onWorker() {
				<-elsewhere
				return 1, nil
			}
			close(elsewhere)
			<-gate // ignores its context
			return 2, nil
		})
		x, y := NewWrapper("x", f, 0), NewWrapper("y", f, 0)
		pl, err := Compile(x, y)
		require.NoError(t, err)
		sp := SubPlan[int, int]{Plan: pl, Output: x.ValueIn}
		returned := make(chan error, 1)
		node := NewWrapper("node", WorkerFunc[int, int](func(ctx context.Context, p int, all Wrappers) (int, error) {
			v, err := sp.Action(ctx, p, all)
			returned <- err
			return v, err
		}), 0).Timeout(time.Second)
		run, err := a.Start(context.Background(), time.Minute, node)
		require.NoError(t, err)
		<-run.Done()
		select {
		case err := <-returned:
			require.Error(t, err, "the sub-run was stopped by the node's Timeout")
		case <-time.After(time.Hour):
			t.Fatal("the SubPlan worker waits for a node of its plan that runs on another goroutine and ignores its context")
		}
		closed := make(chan struct{})
		go func() {
			_ = a.Close()
			close(closed)
		}()
		synctest.Wait()
		select {
		case <-closed:
			t.Fatal("Close returned while a node of the sub-run still ran")
		default:
		}
		close(gate)
		<-closed
	})
}

// TestRecycledRunKeepsNoEarlierSubRuns: a run of a Plan reuses the state
// of a released run, which held the sub-runs its nodes started. A
// SubPlan node that starts none in the later run (its Input failed)
// shows no Sub, as in a run of its own, not the earlier run's released
// sub-run; and the state holds this run's sub-runs only, not a slot for
// each earlier run's, which would grow with every run. The runs
// alternate many times, so that the plan's pool hands a released state
// out again.
func TestRecycledRunKeepsNoEarlierSubRuns(t *testing.T) {
	a := newAsync(t)
	inner := NewWrapper("inner", okWorker(), 0)
	pl, err := Compile(inner)
	require.NoError(t, err)
	var calls int
	node := NewWrapper("sub", SubPlan[int, int]{
		Plan: pl,
		Input: func(ctx context.Context, _ int, _ Wrappers) (context.Context, error) {
			if calls++; calls%2 == 0 {
				return nil, errBoom
			}
			return ctx, nil
		},
		Output: inner.ValueIn,
	}, 0)
	outer, err := Compile(node)
	require.NoError(t, err)
	for round := range 20 {
		run, err := a.RunPlan(context.Background(), outer, time.Minute)
		require.NoError(t, err)
		sub := subNode(t, run.Report(), "sub").Sub
		run.runState.mu.Lock()
		held := len(run.runState.subs[0])
		run.runState.mu.Unlock()
		assert.LessOrEqual(t, held, 1, "round %d: sub-runs the state holds for the node", round)
		if round%2 == 0 {
			require.NotNil(t, sub, "round %d", round)
			assert.Equal(t, StatusSucceeded, sub.Nodes[0].Status, "round %d", round)
		} else {
			assert.Nil(t, sub, "round %d: the Input failed, and no sub-run started", round)
		}
		run.Release()
	}
}

// TestSubPlanSuspendedNamesTheFailedPendingNode: of the pending nodes of
// a sub-run that stalled, the error names one that a failure suspended,
// and wraps that failure, rather than one before it that a custom join
// suspended, which has no error to tell.
func TestSubPlanSuspendedNamesTheFailedPendingNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := NewWrapper("up", okWorker(), 0)
		NewWrapper("pay", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			return 0, errors.New("card declined")
		}), 0).Depend(up, true).OnFailure(PolicySuspend)
		NewWrapper("held", okWorker(), 0).Depend(up, true).
			Join(CustomJoin(func([]Upstream) Decision { return DecideSuspend }))
		pl, err := Compile(up)
		require.NoError(t, err)
		a := New()
		defer a.Close()
		node := NewWrapper("sub", SubPlan[int, int]{Plan: pl, Output: func(*Run) (int, error) { return 1, nil }}, 0)
		run, err := a.Start(context.Background(), time.Minute, node)
		require.NoError(t, err)
		require.NoError(t, run.Wait(context.Background()))
		sub := subNode(t, run.Report(), "sub").Sub
		require.NotNil(t, sub)
		require.Less(t, subNode(t, sub, "held").Index, subNode(t, sub, "pay").Index, "the custom join's node comes first")
		err = node.ResultIn(run).Err
		assert.ErrorContains(t, err, `sub-plan suspended at node "pay", and was cancelled`)
		assert.ErrorContains(t, err, "card declined")
	})
}
