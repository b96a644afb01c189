package asynctool

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pendingEvents records OnNodePending's events; goexit makes the hook
// end its goroutine with runtime.Goexit after recording.
type pendingEvents struct {
	mu     sync.Mutex
	evs    []NodeEvent
	goexit bool
}

func (p *pendingEvents) hooks() *Hooks {
	return &Hooks{OnNodePending: func(_ context.Context, ev NodeEvent) {
		p.mu.Lock()
		p.evs = append(p.evs, ev)
		exit := p.goexit
		p.mu.Unlock()
		if exit {
			runtime.Goexit()
		}
	}}
}

func (p *pendingEvents) all() []NodeEvent {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]NodeEvent(nil), p.evs...)
}

// waitSuspended waits for run to wait only on pending nodes.
func waitSuspended(t *testing.T, run *Run) {
	t.Helper()
	select {
	case <-run.Suspended():
	case <-time.After(10 * time.Second):
		t.Fatal("the run never waited only on its pending node")
	}
}

// OnNodePending fires each time a node becomes pending: after its
// worker's failure under PolicySuspend, again when a Rerun fails, and
// for a custom join's DecideSuspend, without an error. A hook that ends
// its goroutine is reported, and leaves the node pending and resumable;
// the OnNodePending hooks of the sets after it (here the run's own, after
// the Async's) still run, as after a panic: they were skipped.
func TestOnNodePending(t *testing.T) {
	for _, goexit := range []bool{false, true} {
		name := map[bool]string{false: "plain", true: "goexit"}[goexit]
		t.Run(name+"/policy", func(t *testing.T) {
			p, own := &pendingEvents{goexit: goexit}, &pendingEvents{}
			a := New(WithHooks(p.hooks()))
			defer func() { require.NoError(t, a.Close()) }()
			sus := NewWrapper("sus", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
				return 0, errBoom
			}), 0).OnFailure(PolicySuspend)
			run, err := a.Start(WithRunHooks(context.Background(), own.hooks()), time.Minute, sus)
			require.NoError(t, err)
			defer run.Cancel()
			for range 2 {
				waitSuspended(t, run)
				rep := run.Report()
				assert.Equal(t, "pending after boom: waiting for Resume", rep.Nodes[0].Reason, "the failure, not the hook's goexit")
				if len(p.all()) == 1 {
					require.NoError(t, run.Resume("sus", Rerun()))
				}
			}
			require.NoError(t, run.Resume("sus", SucceedWith(7)))
			err = run.Wait(context.Background())
			evs := p.all()
			require.Len(t, evs, 2, "one event per time the node became pending")
			assert.Equal(t, evs, own.all(), "the run's own hooks saw the same")
			for k, ev := range evs {
				assert.Equal(t, "sus", ev.ID)
				assert.ErrorIs(t, ev.Err, errBoom)
				assert.Equal(t, "pending after boom: waiting for Resume", ev.Reason)
				assert.Equal(t, k+1, ev.Attempt)
			}
			assert.Equal(t, WorkResult[int]{Value: 7, State: ResultSuccess}, sus.ResultIn(run))
			if goexit {
				var cpe *CallbackPanicError
				require.ErrorAs(t, err, &cpe)
				assert.Contains(t, err.Error(), "OnNodePending")
			} else {
				require.NoError(t, err)
			}
		})
		t.Run(name+"/join", func(t *testing.T) {
			p, own := &pendingEvents{goexit: goexit}, &pendingEvents{}
			a := New(WithHooks(p.hooks()))
			defer func() { require.NoError(t, a.Close()) }()
			up := NewWrapper("up", okWorker(), 0)
			x := NewWrapper("x", okWorker(), 0).Depend(up, true).Join(CustomJoin(func([]Upstream) Decision { return DecideSuspend }))
			run, err := a.Start(WithRunHooks(context.Background(), own.hooks()), time.Minute, up)
			require.NoError(t, err)
			defer run.Cancel()
			waitSuspended(t, run)
			assert.Len(t, own.all(), 1, "the run's own hook, before the run waited only on x")
			require.NoError(t, run.Resume("x", SucceedWith(3)))
			err = run.Wait(context.Background())
			evs := p.all()
			require.Len(t, evs, 1)
			assert.Equal(t, evs, own.all(), "the run's own hooks saw the same")
			assert.Equal(t, "x", evs[0].ID)
			assert.NoError(t, evs[0].Err)
			assert.Equal(t, "pending: waiting for Resume", evs[0].Reason)
			assert.Zero(t, evs[0].Attempt, "a node its join suspended has not run")
			assert.Equal(t, WorkResult[int]{Value: 3, State: ResultSuccess}, x.ResultIn(run))
			if goexit {
				assert.Contains(t, err.Error(), "OnNodePending")
			} else {
				require.NoError(t, err)
			}
		})
	}
}

// TestOnNodePendingNotForSubRuns: a node of a SubPlan's or ForEach's
// sub-run that became pending called OnNodePending, the hook where a
// person is alerted, for a node no Resume reaches: the sub-run is
// cancelled and fails its node at once. Only the outer node, pending
// under its own PolicySuspend, calls it.
func TestOnNodePendingNotForSubRuns(t *testing.T) {
	fails := WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 0, errBoom })
	inner := NewWrapper("inner", fails, 0).OnFailure(PolicySuspend)
	pl, err := Compile(inner)
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		node func() Wrapper
	}{
		{"subplan", func() Wrapper {
			return NewWrapper("outer", SubPlan[int, int]{Plan: pl, Output: inner.ValueIn}, 0).OnFailure(PolicySuspend)
		}},
		{"foreach", func() Wrapper {
			return NewWrapper("outer", ForEach[int, int, int]{
				Items:  func(context.Context, int, Wrappers) ([]int, error) { return []int{1, 2}, nil },
				Worker: fails,
				Node:   func(_ int, _ int, n *WorkerWrapper[int, int]) { n.OnFailure(PolicySuspend) },
			}, 0).OnFailure(PolicySuspend)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &pendingEvents{}
			a := New(WithHooks(p.hooks()))
			defer func() { require.NoError(t, a.Close()) }()
			run, err := a.Start(context.Background(), time.Minute, tc.node())
			require.NoError(t, err)
			defer run.Cancel()
			waitSuspended(t, run)
			var ids []string
			for _, ev := range p.all() {
				ids = append(ids, ev.ID)
			}
			assert.Equal(t, []string{"outer"}, ids, "only the node a Resume reaches")
		})
	}
}
