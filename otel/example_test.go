package asynctoolotel_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/asynctool-go/asynctool"
	asynctoolotel "github.com/asynctool-go/asynctool/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// Hooks traces every run of an Async: a span for the run, one per node
// under it, the node's outcome as an attribute, and metrics of node
// durations and outcomes. In a service, pass the providers the process
// set up (or nil for the global ones); here, an in-memory exporter and
// a manual reader show what they receive.
func ExampleHooks() {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())

	a := asynctool.New(asynctool.WithHooks(asynctoolotel.Hooks(tp, mp)))
	defer a.Close()
	user := asynctool.NewWrapper("user", asynctool.WorkerFunc[int, string](
		func(context.Context, int, asynctool.Wrappers) (string, error) { return "ada", nil }), 42)
	ads := asynctool.NewWrapper("ads", asynctool.WorkerFunc[int, string](
		func(context.Context, int, asynctool.Wrappers) (string, error) {
			return "", errors.New("ad server down")
		}), 42)
	_ = a.BeginWork(context.Background(), time.Second, user, ads)

	var lines []string
	for _, s := range exp.GetSpans() {
		line := s.Name + " " + s.Status.Code.String()
		for _, kv := range s.Attributes {
			if kv.Key == asynctoolotel.KeyNodeOutcome {
				line += " outcome=" + kv.Value.AsString()
			}
		}
		lines = append(lines, line)
	}
	slices.Sort(lines)
	for _, l := range lines {
		fmt.Println(l)
	}

	var rm metricdata.ResourceMetrics
	_ = reader.Collect(context.Background(), &rm)
	var metrics []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			metrics = append(metrics, m.Name)
		}
	}
	slices.Sort(metrics)
	fmt.Println(metrics)
	// Output:
	// asynctool.node ads Error outcome=failed
	// asynctool.node user Unset outcome=success
	// asynctool.run Unset
	// [asynctool.node.duration asynctool.node.outcomes asynctool.run.duration]
}
