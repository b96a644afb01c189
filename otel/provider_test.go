package asynctoolotel_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynctool-go/asynctool"
	"github.com/asynctool-go/asynctool/asynctooltest"
	asynctoolotel "github.com/asynctool-go/asynctool/otel"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestUnsampledRunsEnd: runs whose spans are not sampled (a sampler that
// drops the trace, or the global provider's no-op tracer) end as any
// run, their sub-runs too, with two sets of hooks on them (a sub-run's
// OnRunStart compared such spans with != too, and panicked, which failed
// the sub-run's node). Comparing the span in a node's context with the run's by != made
// the start hook panic on such a span, a struct holding a slice, with
// the run's lock held, and the node's end hook then waited on the lock
// for ever.
func TestUnsampledRunsEnd(t *testing.T) {
	for _, tc := range []struct {
		name string
		tp   func(t *testing.T) *asynctool.Hooks
	}{
		{"never sample", func(t *testing.T) *asynctool.Hooks {
			tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()), sdktrace.WithSpanProcessor(tracetest.NewSpanRecorder()))
			t.Cleanup(func() { assert.NoError(t, tp.Shutdown(context.Background())) })
			return asynctoolotel.Hooks(tp, nil)
		}},
		{"global providers", func(*testing.T) *asynctool.Hooks { return asynctoolotel.Hooks(nil, nil) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Two sets of hooks, the Async's and the run's, so that each
			// finds the other's spans in its contexts, and a sub-run.
			a := asynctool.New(asynctool.WithHooks(tc.tp(t)))
			x := asynctool.NewWrapper("x", asynctooltest.Returns[int](1), 0)
			in := asynctool.NewWrapper("in", asynctooltest.Returns[int](2), 0)
			pl, err := asynctool.Compile(in)
			require.NoError(t, err)
			y := asynctool.NewWrapper("y", asynctool.SubPlan[int, int]{Plan: pl, Output: in.ValueIn}, 0).Depend(x, true)
			run, err := a.Start(asynctool.WithRunHooks(context.Background(), tc.tp(t)), time.Minute, x)
			require.NoError(t, err)
			select {
			case <-run.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("the run never ended")
			}
			require.NoError(t, run.Wait(context.Background()))
			require.NoError(t, a.Close())
			assert.Equal(t, 1, x.Result().Value)
			assert.Equal(t, asynctool.WorkResult[int]{Value: 2, State: asynctool.ResultSuccess}, y.Result(), "the sub-run's hooks did not panic")
		})
	}
}

// panickyProcessor is a span processor that panics, as a faulty
// processor of a user's might, or one whose exporter fails: in OnStart
// for node spans (atStart), in OnEnd for every span (atEnd) or in OnEnd
// for node spans only (atNodeEnd).
type panickyProcessor struct {
	sdktrace.SpanProcessor
	atStart, atEnd, atNodeEnd bool
}

func (p panickyProcessor) OnStart(ctx context.Context, s sdktrace.ReadWriteSpan) {
	if p.atStart && strings.HasPrefix(s.Name(), "asynctool.node") {
		panic("processor broke")
	}
	p.SpanProcessor.OnStart(ctx, s)
}

func (p panickyProcessor) OnEnd(s sdktrace.ReadOnlySpan) {
	if p.atEnd || p.atNodeEnd && strings.HasPrefix(s.Name(), "asynctool.node") {
		panic("processor broke")
	}
	p.SpanProcessor.OnEnd(s)
}

// TestPanickingSpanProcessorDoesNotHangTheRun: a span processor that
// panicked as a node's span started (in OnNodeStart, with the run's lock
// held) left the lock held, and the node's OnNodeEnd waited on it for
// ever. The panic is now the hook's, reported by the run, which ends.
func TestPanickingSpanProcessorDoesNotHangTheRun(t *testing.T) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(panickyProcessor{SpanProcessor: tracetest.NewSpanRecorder(), atStart: true}))
	t.Cleanup(func() { assert.NoError(t, tp.Shutdown(context.Background())) })
	a := asynctool.New(asynctool.WithHooks(asynctoolotel.Hooks(tp, nil)))
	x := asynctool.NewWrapper("x", asynctooltest.Returns[int](1), 0)
	run, err := a.Start(context.Background(), time.Minute, x)
	require.NoError(t, err)
	select {
	case <-run.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the run never ended")
	}
	err = run.Wait(context.Background())
	var cpe *asynctool.CallbackPanicError
	require.ErrorAs(t, err, &cpe)
	assert.Contains(t, err.Error(), "OnNodeStart")
	require.NoError(t, a.Close())
}

// TestPanickingSpanProcessorKeepsTheMetrics: a span processor that
// panicked as a span ended (in OnNodeEnd, OnRunEnd), or as a node's span
// started (in OnNodeStart, and again in OnNodeEnd, which then gives the
// node a zero-length span), made the hook panic before it recorded the
// node's outcome and duration, or the run's duration: the run reported
// the panic, but the metrics never had the node or the run. They are
// now recorded before any span of the hook starts or ends.
func TestPanickingSpanProcessorKeepsTheMetrics(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    panickyProcessor
	}{
		{"as spans end", panickyProcessor{atEnd: true}},
		{"as node spans start", panickyProcessor{atStart: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.p.SpanProcessor = tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tc.p))
			reader := sdkmetric.NewManualReader()
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
			t.Cleanup(func() {
				assert.NoError(t, tp.Shutdown(context.Background()))
				assert.NoError(t, mp.Shutdown(context.Background()))
			})
			a := asynctool.New(asynctool.WithHooks(asynctoolotel.Hooks(tp, mp)))
			x := asynctool.NewWrapper("x", asynctooltest.Returns[int](1), 0)
			err := a.BeginWork(context.Background(), time.Minute, x)
			var cpe *asynctool.CallbackPanicError
			require.ErrorAs(t, err, &cpe, "the hooks' panics are reported")
			require.NoError(t, a.Close())

			var rm metricdata.ResourceMetrics
			require.NoError(t, reader.Collect(context.Background(), &rm))
			counts := map[string]uint64{}
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					switch d := m.Data.(type) {
					case metricdata.Sum[int64]:
						for _, dp := range d.DataPoints {
							counts[m.Name] += uint64(dp.Value)
						}
					case metricdata.Histogram[float64]:
						for _, dp := range d.DataPoints {
							counts[m.Name] += dp.Count
						}
					}
				}
			}
			assert.Equal(t, map[string]uint64{"asynctool.node.outcomes": 1, "asynctool.node.duration": 1, "asynctool.run.duration": 1}, counts)
		})
	}
}

// TestPanickingSpanProcessorLeavesNoSpanOpenAtRunEnd: OnRunEnd ends the
// node spans still open (here a copy of the hooks without OnNodeEnd
// leaves them so) and then the run's span. A processor that panicked as
// the first of them ended made the hook panic there, and the other node
// spans and the run's span never ended. One that panics as every span
// ends, the run's too, must not keep the node spans open either.
func TestPanickingSpanProcessorLeavesNoSpanOpenAtRunEnd(t *testing.T) {
	for name, proc := range map[string]panickyProcessor{
		"node spans": {atNodeEnd: true},
		"every span": {atEnd: true},
	} {
		t.Run(name, func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			proc.SpanProcessor = rec
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(proc))
			t.Cleanup(func() { assert.NoError(t, tp.Shutdown(context.Background())) })
			h := *asynctoolotel.Hooks(tp, nil)
			h.OnNodeEnd = nil
			a := asynctool.New(asynctool.WithHooks(&h))
			x := asynctool.NewWrapper("x", asynctooltest.Returns[int](1), 0)
			asynctool.NewWrapper("y", asynctooltest.Returns[int](2), 0).Depend(x, true)
			err := a.BeginWork(context.Background(), time.Minute, x)
			var cpe *asynctool.CallbackPanicError
			require.ErrorAs(t, err, &cpe, "the hook's panic is reported")
			require.NoError(t, a.Close())

			started := rec.Started()
			require.Len(t, started, 3, "the run's span and two node spans")
			for _, s := range started {
				assert.False(t, s.EndTime().IsZero(), "span %q never ended", s.Name())
			}
		})
	}
}

// TestNilPointerProvidersMeanTheGlobalOnes: Hooks took a nil interface
// for the global provider, but panicked on a nil *sdktrace.TracerProvider
// or *sdkmetric.MeterProvider, as a variable set only when telemetry is
// configured holds otherwise.
func TestNilPointerProvidersMeanTheGlobalOnes(t *testing.T) {
	var tp *sdktrace.TracerProvider
	var mp *sdkmetric.MeterProvider
	var h *asynctool.Hooks
	require.NotPanics(t, func() { h = asynctoolotel.Hooks(tp, mp) })
	a := asynctool.New(asynctool.WithHooks(h))
	x := asynctool.NewWrapper("x", asynctooltest.Returns[int](1), 0)
	require.NoError(t, a.BeginWork(context.Background(), time.Minute, x))
	require.NoError(t, a.Close())
	assert.Equal(t, 1, x.Result().Value)
}

// TestRetriedAttemptWithoutItsSpan: an attempt whose span never began (a
// copy of the hooks without OnNodeStart here; an earlier set's start
// hook that ended with runtime.Goexit, or a node that ended as its start
// hook ran, is another) has none for OnNodeRetry to end: the hook ends
// nothing and does not panic, and the node's end still gets its span.
func TestRetriedAttemptWithoutItsSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { assert.NoError(t, tp.Shutdown(context.Background())) })
	h := *asynctoolotel.Hooks(tp, nil)
	h.OnNodeStart = nil
	a := asynctool.New(asynctool.WithHooks(&h))
	var calls atomic.Int32
	x := asynctool.NewWrapper("x", asynctooltest.Func(func(context.Context, int) (int, error) {
		if calls.Add(1) == 1 {
			return 0, errDown
		}
		return 1, nil
	}), 0).Retry(asynctool.RetryPolicy{Attempts: 2})
	require.NoError(t, a.BeginWork(context.Background(), time.Minute, x), "no hook panicked")
	require.NoError(t, a.Close())
	require.NoError(t, x.Result().Err)

	var names []string
	for _, s := range rec.Ended() {
		names = append(names, s.Name())
	}
	assert.ElementsMatch(t, []string{"asynctool.run", "asynctool.node x"}, names)
}
