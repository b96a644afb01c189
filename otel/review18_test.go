package asynctoolotel_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynctool-go/asynctool"
	"github.com/asynctool-go/asynctool/asynctooltest"
	asynctoolotel "github.com/asynctool-go/asynctool/otel"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestS18NodeStartedAfterItsRunEndedEndsItsSpan: a cancellation that
// ends a node while its OnNodeStart hooks run (here held open by an
// earlier hook until the whole run has ended) made nodeStart store a span
// after nodeEnd and runEnd had gone by, and nothing ever ended it.
func TestS18NodeStartedAfterItsRunEndedEndsItsSpan(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { assert.NoError(t, tp.Shutdown(context.Background())) })
	h := asynctoolotel.Hooks(tp, nil)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runs := make(chan *asynctool.Run, 1)
	// The Async's hooks run before the run's, so this one holds the node
	// before the otel hook starts its span.
	hold := &asynctool.Hooks{OnNodeStart: func(context.Context, asynctool.NodeEvent) context.Context {
		cancel()
		<-(<-runs).Done() // the run has ended, OnRunEnd included
		return nil
	}}
	a := asynctool.New(asynctool.WithHooks(hold))
	x := asynctool.NewWrapper("x", asynctooltest.Returns[int](1), 0)
	run, err := a.Start(asynctool.WithRunHooks(ctx, h), time.Minute, x)
	require.NoError(t, err)
	runs <- run
	<-run.Done()
	require.NoError(t, a.Close()) // waits for the worker, so its hooks have returned

	started, ended := sr.Started(), sr.Ended()
	for _, s := range started {
		assert.False(t, s.EndTime().IsZero(), "span %q never ended", s.Name())
	}
	assert.Len(t, ended, len(started))
}

// TestS18CallbackPanicIsNotAStoppedRun: a run whose every node ended in
// time but whose Result callback panicked (BeginWork returns the
// *CallbackPanicError) was counted in asynctool.run.duration with
// outcome "stopped", as if it had been cut short.
func TestS18CallbackPanicIsNotAStoppedRun(t *testing.T) {
	h, exp, reader, _ := setup(t)
	x := asynctool.NewWrapper("x", asynctooltest.Returns[int](1), 0).
		Callback(asynctool.ResultFunc[int, int](func(bool, int, asynctool.WorkResult[int]) { panic("boom") }))
	a := asynctool.New(asynctool.WithHooks(h))
	err := a.BeginWork(context.Background(), time.Minute, x)
	var cpe *asynctool.CallbackPanicError
	require.ErrorAs(t, err, &cpe)
	require.NoError(t, a.Close())

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	var outcomes []string
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name == "asynctool.run.duration" {
			for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
				v, _ := dp.Attributes.Value(asynctoolotel.KeyRunOutcome)
				outcomes = append(outcomes, v.AsString())
			}
		}
	}
	assert.Equal(t, []string{"ok"}, outcomes, "every node ended in time")

	// The run's span still records the error BeginWork returned.
	for _, s := range exp.GetSpans() {
		if s.Name == "asynctool.run" {
			assert.Equal(t, codes.Error, s.Status.Code)
		}
	}
}

// TestS18SuspendedAttemptSpanSaysItFailed: the span of an attempt that
// failed and suspended its node, then rerun by Resume, ended with status
// Unset and no outcome, so the trace showed no failure at all.
func TestS18SuspendedAttemptSpanSaysItFailed(t *testing.T) {
	h, exp, _, _ := setup(t)
	var calls atomic.Int32
	x := asynctool.NewWrapper("x", asynctooltest.Func(func(context.Context, int) (int, error) {
		if calls.Add(1) == 1 {
			return 0, errDown
		}
		return 7, nil
	}), 0).OnFailure(asynctool.PolicySuspend)
	a := asynctool.New(asynctool.WithHooks(h))
	run, err := a.Start(context.Background(), time.Minute, x)
	require.NoError(t, err)
	<-run.Suspended()
	require.NoError(t, run.Resume("x", asynctool.Rerun()))
	require.NoError(t, run.Wait(context.Background()))
	require.NoError(t, a.Close())

	var spans []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == "asynctool.node x" {
			spans = append(spans, s)
		}
	}
	require.Len(t, spans, 2, "one span per attempt")
	slices.SortFunc(spans, func(p, q tracetest.SpanStub) int { return p.StartTime.Compare(q.StartTime) })
	first := attrs(spans[0].Attributes)
	assert.Equal(t, codes.Error, spans[0].Status.Code)
	assert.Equal(t, "suspended", first["asynctool.node.outcome"].AsString())
	assert.Equal(t, int64(1), first["asynctool.node.attempts"].AsInt64())
	last := attrs(spans[1].Attributes)
	assert.Equal(t, "success", last["asynctool.node.outcome"].AsString())
	assert.Equal(t, int64(2), last["asynctool.node.attempts"].AsInt64())
}
