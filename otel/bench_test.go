package asynctoolotel_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/asynctool-go/asynctool"
	asynctoolotel "github.com/asynctool-go/asynctool/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// BenchmarkWideRunWithSpans measures the otel hooks on a wide parallel run of a
// Plan: root → 100 nodes → sink, every edge a must dependency. It was
// written to price a442a50, which starts each node's span under the run's
// lock (st.mu), so that the node spans of one run start one at a time;
// run it against a442a50~1 for the comparison.
//
//	instant: the workers return at once (the plan learns them quick)
//	sleep1ms: the 100 workers sleep 1ms, so their spans overlap and their
//	          start hooks run on up to 100 goroutines at once
//
// Spans are sampled and recorded (the SDK's default sampler) and handed
// to a no-op exporter synchronously; metrics go to a manual reader that is
// never collected.
//
// Measured on the 2-core VM (8 alternating rounds, twice, a442a50 against
// a442a50~1): no difference benchstat resolves (p >= 0.16, rows ±9-40%);
// median per-round differences +2.6% to +10% (instant), +2.6% to +4.8%
// (sleep1ms); allocs/op 2.29k on both. What the lock serialises is the
// SDK's Start, about 1.2-1.5µs a span here, 100 a run.
func BenchmarkWideRunWithSpans(b *testing.B) {
	for _, sleep := range []time.Duration{0, time.Millisecond} {
		name := "instant"
		if sleep > 0 {
			name = fmt.Sprintf("sleep%s", sleep)
		}
		b.Run(name, func(b *testing.B) {
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewNoopExporter()))
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
			b.Cleanup(func() {
				_ = tp.Shutdown(context.Background())
				_ = mp.Shutdown(context.Background())
			})
			a := asynctool.New(asynctool.WithHooks(asynctoolotel.Hooks(tp, mp)))
			b.Cleanup(func() { _ = a.Close() })

			work := asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
				if sleep > 0 {
					time.Sleep(sleep)
				}
				return 1, nil
			})
			quick := asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
				return 1, nil
			})
			root := asynctool.NewWrapper("root", quick, 0)
			sink := asynctool.NewWrapper("sink", quick, 0)
			for i := range 100 {
				mid := asynctool.NewWrapper(fmt.Sprintf("mid%03d", i), work, i).Depend(root, true)
				sink.Depend(mid, true)
			}
			pl, err := asynctool.Compile(root)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				r, err := a.RunPlan(ctx, pl, time.Minute)
				if err != nil {
					b.Fatal(err)
				}
				if res := sink.ResultIn(r); res.Err != nil || res.Value != 1 {
					b.Fatalf("sink: %+v", res)
				}
				r.Release()
			}
		})
	}
}
