package asynctoolotel_test

import (
	"context"
	"testing"
	"time"

	"github.com/asynctool-go/asynctool"
	"github.com/asynctool-go/asynctool/asynctooltest"
	asynctoolotel "github.com/asynctool-go/asynctool/otel"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
