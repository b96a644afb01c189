package asynctool

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Regression tests for the report and export defects of helper-40's
// review.

// reportIndex returns the index in run's report of the node with id.
func reportIndex(t *testing.T, run *Run, id string) int {
	t.Helper()
	i, ok := run.p.lookup(id)
	require.True(t, ok, "no node %q", id)
	return int(i)
}

// TestCriticalPathSkipsDependenciesStillRunning guards CriticalPath and
// the thick edges of the pictures against going through a dependency the
// node never waited for: with racing optional replicas (any-of), the slow
// loser, still running when the sink started, is not on the path, and
// the path's durations fit in the run.
func TestCriticalPathSkipsDependenciesStillRunning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New(WithTimings(true))
		defer a.Close()
		sleeper := func(d time.Duration) WorkerFunc[int, int] {
			return func(ctx context.Context, _ int, _ Wrappers) (int, error) {
				time.Sleep(d)
				return 1, nil
			}
		}
		fast := NewWrapper("fast", sleeper(10*time.Millisecond), 0)
		slow := NewWrapper("slow", sleeper(50*time.Millisecond), 0)
		sink := NewWrapper("sink", sleeper(50*time.Millisecond), 0).
			Depend(fast, false).Depend(slow, false) // any of the replicas
		run, err := a.Start(context.Background(), time.Second, fast, slow)
		require.NoError(t, err)
		require.NoError(t, run.Wait(context.Background()))
		rep := run.Report()
		require.Equal(t, ResultSuccess, sink.Result().State)
		var path []string
		var sum time.Duration
		for _, i := range rep.CriticalPath() {
			path = append(path, rep.Nodes[i].ID)
			sum += rep.Nodes[i].Duration()
		}
		assert.Equal(t, []string{"fast", "sink"}, path)
		assert.LessOrEqual(t, sum, rep.End.Sub(rep.Start), "a chain run one after another fits in the run")
		fastI, slowI, sinkI := reportIndex(t, run, "fast"), reportIndex(t, run, "slow"), reportIndex(t, run, "sink")
		assert.Contains(t, rep.Mermaid(), fmt.Sprintf("n%d ==> n%d\n", fastI, sinkI))
		assert.Contains(t, rep.Mermaid(), fmt.Sprintf("n%d -.-> n%d\n", slowI, sinkI), "the loser's edge is not thick")
	})
}

// TestChromeTraceOfSuspendedRun guards WriteChromeTrace on a snapshot
// report (Run.Report is one at any time): a run with timings whose node
// is pending exported nothing, with an error saying the report had no
// times. The pending node is now a begin event without an end, tagged
// with its status.
func TestChromeTraceOfSuspendedRun(t *testing.T) {
	a := newAsync(t, WithTimings(true))
	var calls atomic.Int32
	p := NewWrapper("p", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
		if calls.Add(1) == 1 {
			return 0, errBoom
		}
		return 1, nil
	}), 0).OnFailure(PolicySuspend)
	run, err := a.Start(context.Background(), 10*time.Second, p)
	require.NoError(t, err)
	<-run.Suspended()
	rep := run.Report()
	var buf bytes.Buffer
	terr := rep.WriteChromeTrace(&buf)
	require.NoError(t, run.Resume("p", Rerun()))
	require.NoError(t, run.Wait(context.Background()))
	require.NoError(t, terr, "a snapshot report of a suspended run, with timings on")

	var trace struct {
		TraceEvents []traceEvent `json:"traceEvents"`
	}
	require.NoError(t, json.Unmarshal(buf.Bytes(), &trace), "got %s", buf.Bytes())
	var begins []traceEvent
	for _, e := range trace.TraceEvents {
		assert.NotEqual(t, "X", e.Ph, "nothing has ended: %+v", e)
		if e.Ph == "B" {
			begins = append(begins, e)
		}
	}
	require.Len(t, begins, 1)
	assert.Equal(t, "p", begins[0].Name)
	assert.Nil(t, begins[0].Dur, "not ended")
	assert.Equal(t, "pending", begins[0].Args["status"])
	assert.Equal(t, rep.Nodes[0].Lane, begins[0].Tid)

	// Once the run ended, the node is a complete event.
	buf.Reset()
	require.NoError(t, run.Report().WriteChromeTrace(&buf))
	assert.Contains(t, buf.String(), `"ph":"X"`)
	assert.NotContains(t, buf.String(), `"ph":"B"`)
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
		{"any optional", false, AnySucceeded(), false, "every optional upstream failed"},
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

// TestStatusOptionalPendingUpstream guards StatusPending against pending
// upstreams the node does not wait for: with a must dependency still
// running and a pending optional one, the node was reported pending
// although it ran, without any Resume, once the must one succeeded.
func TestStatusOptionalPendingUpstream(t *testing.T) {
	a := newAsync(t)
	gate := make(chan struct{})
	release := releaser(t, gate)
	p := NewWrapper("p", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 0, errBoom }), 0).
		OnFailure(PolicySuspend)
	m := NewWrapper("m", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
		<-gate
		return 1, nil
	}), 0)
	n := NewWrapper("n", okWorker(), 0).Depend(m, true).Depend(p, false)
	run, err := a.Start(context.Background(), 10*time.Second, p, m)
	require.NoError(t, err)
	pi, ni := reportIndex(t, run, "p"), reportIndex(t, run, "n")
	require.Eventually(t, func() bool { return run.Report().Nodes[pi].Status == StatusPending }, 5*time.Second, time.Millisecond)
	st := run.Report().Nodes[ni].Status
	release()
	<-run.Suspended()
	assert.Equal(t, ResultSuccess, n.Result().State, "n never waited on p")
	assert.Equal(t, StatusWaiting, st, "n waits on its must dependency m, not on the pending optional p")
	require.NoError(t, run.Resume("p", FailWith(errBoom)))
	requireEnds(t, run, "the run did not end once p was resumed")
}

// TestStatusAnyOfPendingUpstream checks the other side of StatusPending
// for an any-of join: while another upstream may still succeed the node
// is waiting; once that one failed, only a Resume of the pending
// upstream can run it, and it is pending.
func TestStatusAnyOfPendingUpstream(t *testing.T) {
	a := newAsync(t)
	gate := make(chan struct{})
	release := releaser(t, gate)
	var calls atomic.Int32
	p := NewWrapper("p", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		if calls.Add(1) == 1 {
			return 0, errBoom
		}
		return 1, nil
	}), 0).OnFailure(PolicySuspend)
	m := NewWrapper("m", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
		<-gate
		return 0, errBoom
	}), 0)
	n := NewWrapper("n", okWorker(), 0).Depend(m, false).Depend(p, false)
	run, err := a.Start(context.Background(), 10*time.Second, p, m)
	require.NoError(t, err)
	pi, ni := reportIndex(t, run, "p"), reportIndex(t, run, "n")
	require.Eventually(t, func() bool { return run.Report().Nodes[pi].Status == StatusPending }, 5*time.Second, time.Millisecond)
	assert.Equal(t, StatusWaiting, run.Report().Nodes[ni].Status, "m may still succeed")
	release()
	<-run.Suspended()
	assert.Equal(t, StatusPending, run.Report().Nodes[ni].Status, "m failed: n waits on p")
	require.NoError(t, run.Resume("p", Rerun()))
	require.NoError(t, run.Wait(context.Background()))
	assert.Equal(t, ResultSuccess, n.Result().State)
}

// TestStatusPendingByJoin checks StatusPending's rule for each join, on
// one snapshot: p is suspended and m still runs (it would succeed).
func TestStatusPendingByJoin(t *testing.T) {
	a := newAsync(t)
	gate := make(chan struct{})
	release := releaser(t, gate)
	p := NewWrapper("p", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 0, errBoom }), 0).
		OnFailure(PolicySuspend)
	m := NewWrapper("m", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
		<-gate
		return 1, nil
	}), 0)
	want := map[string]Status{
		"named m":    StatusWaiting, // p is not named
		"named p":    StatusPending,
		"all done":   StatusPending,
		"at least 1": StatusWaiting, // m may meet it
		"at least 2": StatusPending,
		"custom":     StatusWaiting, // m has not ended
	}
	joins := map[string]Join{
		"named m": NamedSucceeded("m"), "named p": NamedSucceeded("p"), "all done": AllDone(),
		"at least 1": AtLeast(1), "at least 2": AtLeast(2),
		"custom": CustomJoin(func([]Upstream) Decision { return DecideWait }),
	}
	for id, j := range joins {
		NewWrapper(id, okWorker(), 0).Depend(m, false).Depend(p, false).Join(j)
	}
	run, err := a.Start(context.Background(), 10*time.Second, p, m)
	require.NoError(t, err)
	pi := reportIndex(t, run, "p")
	require.Eventually(t, func() bool { return run.Report().Nodes[pi].Status == StatusPending }, 5*time.Second, time.Millisecond)
	rep := run.Report()
	release()
	got := map[string]Status{}
	for id := range want {
		got[id] = rep.Nodes[reportIndex(t, run, id)].Status
	}
	assert.Equal(t, want, got)
	<-run.Suspended()
	require.NoError(t, run.Resume("p", FailWith(errBoom)))
	requireEnds(t, run, "the run did not end once p was resumed")
}
