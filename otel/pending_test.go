package asynctoolotel_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/asynctool-go/asynctool"
	"github.com/asynctool-go/asynctool/asynctooltest"
	asynctoolotel "github.com/asynctool-go/asynctool/otel"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// A node that becomes pending is counted in asynctool.node.pending, once
// per time (a Rerun that fails again counts again), and its failed
// attempt's span gets a "pending" event naming the failure; a node its
// custom join suspended, which has no span yet, is counted.
func TestPendingNodesAreCountedAndMarked(t *testing.T) {
	h, exp, reader, _ := setup(t)
	errDown := errors.New("payments down")
	x := asynctool.NewWrapper("x", asynctooltest.Func(func(context.Context, int) (int, error) {
		return 0, errDown
	}), 0).OnFailure(asynctool.PolicySuspend)
	up := asynctool.NewWrapper("up", asynctooltest.Func(func(context.Context, int) (int, error) { return 1, nil }), 0)
	j := asynctool.NewWrapper("j", asynctooltest.Func(func(context.Context, int) (int, error) { return 2, nil }), 0).
		Depend(up, true).Join(asynctool.CustomJoin(func([]asynctool.Upstream) asynctool.Decision { return asynctool.DecideSuspend }))
	a := asynctool.New(asynctool.WithHooks(h))
	run, err := a.Start(context.Background(), time.Minute, x, up)
	require.NoError(t, err)
	<-run.Suspended()
	require.NoError(t, run.Resume("x", asynctool.Rerun()))
	// x fails again: pending once more, after its second attempt. The
	// run stalls again only once the goroutine that ran x has returned,
	// its OnNodePending hook included; the report shows x pending a
	// moment before that hook has marked the span.
	select {
	case <-run.Suspended():
	case <-time.After(10 * time.Second):
		t.Fatal("the run did not stall again after x's rerun")
	}
	xs := slices.IndexFunc(run.Report().Nodes, func(n asynctool.NodeReport) bool { return n.ID == "x" })
	require.GreaterOrEqual(t, xs, 0)
	n := run.Report().Nodes[xs]
	require.Equal(t, 2, n.Attempts, "x's attempts")
	require.Equal(t, asynctool.StatusPending, n.Status, "x pending again after its rerun")
	require.NoError(t, run.Resume("x", asynctool.SucceedWith(7)))
	require.NoError(t, run.Resume("j", asynctool.SucceedWith(3)))
	require.NoError(t, run.Wait(context.Background()))
	require.NoError(t, a.Close())
	assert.Equal(t, 3, j.ResultIn(run).Value)

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	pending := map[string]int64{}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name == "asynctool.node.pending" {
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				id, _ := dp.Attributes.Value("asynctool.node.id")
				pending[id.AsString()] = dp.Value
			}
		}
	}
	assert.Equal(t, map[string]int64{"x": 2, "j": 1}, pending)

	events := 0
	for _, s := range exp.GetSpans() {
		if s.Name != "asynctool.node x" {
			continue
		}
		k := slices.IndexFunc(s.Events, func(e sdktrace.Event) bool { return e.Name == "pending" })
		if k < 0 {
			continue
		}
		events++
		assert.Equal(t, "pending after payments down: waiting for Resume", attrs(s.Events[k].Attributes)["asynctool.node.reason"].AsString())
	}
	assert.Equal(t, 2, events, "each failed attempt's span says it left the node pending")
}

// asynctool.node.duration recorded a resumed node's whole span, the time
// it waited for a person's Resume included, as its latency: one such
// node put hours into a histogram of RPC times. It now leaves out
// NodeEvent.Pending.
func TestPendingTimeIsNotLatency(t *testing.T) {
	h, _, reader, _ := setup(t)
	const pause = 200 * time.Millisecond
	calls := 0
	x := asynctool.NewWrapper("x", asynctooltest.Func(func(context.Context, int) (int, error) {
		if calls++; calls == 1 {
			return 0, errors.New("payments down")
		}
		return 1, nil
	}), 0).OnFailure(asynctool.PolicySuspend)
	a := asynctool.New(asynctool.WithHooks(h))
	run, err := a.Start(context.Background(), time.Minute, x)
	require.NoError(t, err)
	<-run.Suspended()
	time.Sleep(pause)
	require.NoError(t, run.Resume("x", asynctool.Rerun()))
	require.NoError(t, run.Wait(context.Background()))
	require.NoError(t, a.Close())
	rep := run.Report().Nodes[0]
	require.GreaterOrEqual(t, rep.Pending, pause)

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	var sum float64
	var count uint64
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name == "asynctool.node.duration" {
			for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
				sum, count = sum+dp.Sum, count+dp.Count
			}
		}
	}
	require.Equal(t, uint64(1), count)
	assert.InDelta(t, (rep.Duration() - rep.Pending).Seconds(), sum, 1e-9)
	assert.Less(t, sum, pause.Seconds(), "the pending time is not the node's latency")
}

// A pending node that the run's cancellation ends keeps its "pending"
// event and gets a "timeout" one, as the package doc says of a node that
// had started and was ended while pending.
func TestPendingNodeCancelledGetsTimeoutEvent(t *testing.T) {
	h, exp, _, _ := setup(t)
	x := asynctool.NewWrapper("x", asynctooltest.Fails[int, int](errDown), 0).OnFailure(asynctool.PolicySuspend)
	a := asynctool.New(asynctool.WithHooks(h))
	run, err := a.Start(context.Background(), time.Minute, x)
	require.NoError(t, err)
	<-run.Suspended()
	run.Cancel()
	<-run.Done()
	require.NoError(t, a.Close())

	var events []string
	for _, s := range exp.GetSpans() {
		if s.Name == "asynctool.node x" {
			for _, e := range s.Events {
				events = append(events, e.Name)
			}
			assert.Equal(t, "timeout", attrs(s.Attributes)["asynctool.node.outcome"].AsString())
		}
	}
	assert.Equal(t, []string{"pending", "timeout", "exception"}, events)
}

// A node of a SubPlan's sub-run that its PolicySuspend leaves pending is
// not counted in asynctool.node.pending, nor marked pending: no Resume
// reaches it, and the sub-run is cancelled. The SubPlan node, pending
// under its own PolicySuspend, is.
func TestSubRunPendingNodeIsNotCounted(t *testing.T) {
	h, exp, reader, _ := setup(t)
	inner := asynctool.NewWrapper("inner", asynctooltest.Fails[int, int](errDown), 0).OnFailure(asynctool.PolicySuspend)
	pl, err := asynctool.Compile(inner)
	require.NoError(t, err)
	sp := asynctool.NewWrapper("sp", asynctool.SubPlan[int, int]{Plan: pl, Output: inner.ValueIn}, 0).OnFailure(asynctool.PolicySuspend)
	a := asynctool.New(asynctool.WithHooks(h))
	run, err := a.Start(context.Background(), time.Minute, sp)
	require.NoError(t, err)
	<-run.Suspended()
	run.Cancel()
	<-run.Done()
	require.NoError(t, a.Close())

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	pending := map[string]int64{}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name == "asynctool.node.pending" {
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				id, _ := dp.Attributes.Value("asynctool.node.id")
				pending[id.AsString()] = dp.Value
			}
		}
	}
	assert.Equal(t, map[string]int64{"sp": 1}, pending)
	for _, s := range exp.GetSpans() {
		if s.Name == "asynctool.node inner" {
			assert.False(t, slices.ContainsFunc(s.Events, func(e sdktrace.Event) bool { return e.Name == "pending" }),
				"inner is not marked pending")
		}
	}
}

// TestPendingEventStaysOnTheFailedAttempt: a node is resumable as soon
// as it is pending, before its OnNodePending hooks have run. A Rerun
// that started while a slow hook held the node's OnNodePending (here
// one that calls the otel hook late) made the otel hook mark the rerun's
// span, an attempt that succeeded, with the "pending" event of the
// attempt before it.
func TestPendingEventStaysOnTheFailedAttempt(t *testing.T) {
	h, exp, _, _ := setup(t)
	pendingNow, rerunStarted, marked := make(chan struct{}), make(chan struct{}), make(chan struct{})
	held := *h
	held.OnNodePending = func(ctx context.Context, ev asynctool.NodeEvent) {
		close(pendingNow)
		<-rerunStarted // Resume reruns the node meanwhile
		h.OnNodePending(ctx, ev)
		close(marked)
	}
	calls := 0
	x := asynctool.NewWrapper("x", asynctooltest.Func(func(context.Context, int) (int, error) {
		if calls++; calls == 1 {
			return 0, errDown
		}
		close(rerunStarted)
		<-marked // the rerun's span is open while the hook marks
		return 7, nil
	}), 0).OnFailure(asynctool.PolicySuspend)
	a := asynctool.New(asynctool.WithHooks(&held))
	run, err := a.Start(context.Background(), time.Minute, x)
	require.NoError(t, err)
	t.Cleanup(run.Cancel)
	<-pendingNow
	require.NoError(t, run.Resume("x", asynctool.Rerun()))
	require.NoError(t, run.Wait(context.Background()))
	require.NoError(t, a.Close())

	spans := map[int64][]string{} // attempt -> events
	for _, s := range exp.GetSpans() {
		if s.Name != "asynctool.node x" {
			continue
		}
		var events []string
		for _, e := range s.Events {
			events = append(events, e.Name)
		}
		spans[attrs(s.Attributes)[asynctoolotel.KeyNodeAttempts].AsInt64()] = events
	}
	require.Len(t, spans, 2, "one span per attempt")
	assert.Empty(t, spans[2], "the rerun, which succeeded, was never pending")
}
