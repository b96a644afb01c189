package asynctoolotel_test

import (
	"context"
	"testing"
	"time"

	"github.com/asynctool-go/asynctool"
	"github.com/asynctool-go/asynctool/asynctooltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestNotTaken runs a switch
//
//	route ─▶ cache (When route == "cache") ──must─▶ parse
//	route ─▶ db    (When route == "db")
//	cache, db ──optional─▶ merge
//
// where route chooses db, and checks that the branch not taken (cache)
// and the node not taken after it (parse) are outcome "not_taken", with
// no error and no Error status on their spans, that they are not counted
// in asynctool.run.failed, and that the outcome counter names them so.
func TestNotTaken(t *testing.T) {
	h, exp, reader, _ := setup(t)
	route := asynctool.NewWrapper("route", asynctooltest.Returns[int]("db"), 0)
	is := func(want string) func(string) bool { return func(v string) bool { return v == want } }
	cache := asynctool.NewWrapper("cache", asynctooltest.Returns[int](1), 0).Depend(route, true).Join(asynctool.When("route", is("cache")))
	db := asynctool.NewWrapper("db", asynctooltest.Returns[int](2), 0).Depend(route, true).Join(asynctool.When("route", is("db")))
	asynctool.NewWrapper("parse", asynctooltest.Returns[int](3), 0).Depend(cache, true)
	asynctool.NewWrapper("merge", asynctooltest.Returns[int](4), 0).Depend(cache, false).Depend(db, false)

	a := asynctool.New(asynctool.WithHooks(h))
	require.NoError(t, a.BeginWork(context.Background(), 10*time.Second, route))
	require.NoError(t, a.Close())

	spans := map[string]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		spans[s.Name] = s
	}
	require.Len(t, spans, 6, "run and 5 nodes")
	for id, reason := range map[string]string{
		"cache": `not taken: join when "route" decided so`,
		"parse": `upstream "cache" was not taken`,
	} {
		s := spans["asynctool.node "+id]
		at := attrs(s.Attributes)
		assert.Equal(t, "not_taken", at["asynctool.node.outcome"].AsString(), id)
		assert.Equal(t, reason, at["asynctool.node.reason"].AsString(), id)
		assert.Equal(t, "error", at["asynctool.node.state"].AsString(), id)
		assert.False(t, at["asynctool.node.ran"].AsBool(), id)
		assert.Equal(t, s.StartTime, s.EndTime, "%s never ran: a zero-length span", id)
		assert.Equal(t, codes.Unset, s.Status.Code, "%s: a branch not taken is not an error", id)
		assert.Empty(t, s.Events, "%s: no RecordError", id)
	}
	for _, id := range []string{"route", "db", "merge"} {
		assert.Equal(t, "success", attrs(spans["asynctool.node "+id].Attributes)["asynctool.node.outcome"].AsString(), id)
	}
	run := spans["asynctool.run"]
	assert.Equal(t, int64(0), attrs(run.Attributes)["asynctool.run.failed"].AsInt64(), "a branch not taken is not a failure")
	assert.Equal(t, codes.Unset, run.Status.Code)

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	outcomes := map[string]int64{}
	durations := 0
	for _, m := range rm.ScopeMetrics[0].Metrics {
		switch m.Name {
		case "asynctool.node.outcomes":
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				outcomes[outcomeKey(dp.Attributes)] = dp.Value
			}
		case "asynctool.node.duration":
			durations = len(m.Data.(metricdata.Histogram[float64]).DataPoints)
		}
	}
	assert.Equal(t, map[string]int64{
		"route/success": 1, "db/success": 1, "merge/success": 1,
		"cache/not_taken": 1, "parse/not_taken": 1,
	}, outcomes)
	assert.Equal(t, 3, durations, "only nodes that ran")
}

// TestNotTakenBesideAFailure checks that asynctool.run.failed still
// counts the nodes that failed in a run where a branch was not taken, and
// that a node whose join failed because an upstream failed beside one not
// taken is upstream_failed, not not_taken.
func TestNotTakenBesideAFailure(t *testing.T) {
	h, exp, _, _ := setup(t)
	route := asynctool.NewWrapper("route", asynctooltest.Returns[int](0), 0)
	skipped := asynctool.NewWrapper("skipped", asynctooltest.Returns[int](1), 0).Depend(route, true).
		Join(asynctool.When("route", func(int) bool { return false }))
	bad := asynctool.NewWrapper("bad", asynctooltest.Fails[int, int](errDown), 0).Depend(route, true)
	asynctool.NewWrapper("x", asynctooltest.Returns[int](2), 0).Depend(skipped, false).Depend(bad, false)

	a := asynctool.New(asynctool.WithHooks(h))
	require.NoError(t, a.BeginWork(context.Background(), 10*time.Second, route))
	require.NoError(t, a.Close())

	spans := map[string]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		spans[s.Name] = s
	}
	for id, want := range map[string]string{"skipped": "not_taken", "bad": "failed", "x": "upstream_failed"} {
		s := spans["asynctool.node "+id]
		assert.Equal(t, want, attrs(s.Attributes)["asynctool.node.outcome"].AsString(), id)
		if want != "not_taken" {
			assert.Equal(t, codes.Error, s.Status.Code, id)
		}
	}
	assert.Equal(t, int64(2), attrs(spans["asynctool.run"].Attributes)["asynctool.run.failed"].AsInt64(), "bad and x")
}

func outcomeKey(set attribute.Set) string {
	id, _ := set.Value("asynctool.node.id")
	out, _ := set.Value("asynctool.node.outcome")
	return id.AsString() + "/" + out.AsString()
}

// TestRunCancelledWithNotTakenCauseHasFailed: a node that the run's
// context ended has the context's cause for its error, which may be
// ErrNotTaken itself; such a node was not taken by no join, and has
// timed out: it counts in asynctool.run.failed, with outcome timeout and
// status Error.
func TestRunCancelledWithNotTakenCauseHasFailed(t *testing.T) {
	h, exp, _, _ := setup(t)
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	a := asynctool.New(asynctool.WithHooks(h))
	x := asynctool.NewWrapper("x", asynctooltest.Func(func(ctx context.Context, _ int) (int, error) {
		cancel(asynctool.ErrNotTaken)
		<-ctx.Done()
		return 0, ctx.Err()
	}), 0)
	y := asynctool.NewWrapper("y", asynctooltest.Returns[int](1), 0).Depend(x, true)
	require.ErrorIs(t, a.BeginWork(ctx, time.Minute, x), asynctool.ErrNotTaken)
	require.NoError(t, a.Close())
	require.Equal(t, asynctool.ErrNotTaken, y.Result().Err, "the cause itself, as the engine stores it")

	spans := map[string]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		spans[s.Name] = s
	}
	for _, id := range []string{"x", "y"} {
		s := spans["asynctool.node "+id]
		assert.Equal(t, "timeout", attrs(s.Attributes)["asynctool.node.outcome"].AsString(), id)
		assert.Equal(t, codes.Error, s.Status.Code, id)
	}
	assert.Equal(t, int64(2), attrs(spans["asynctool.run"].Attributes)["asynctool.run.failed"].AsInt64(), "x and y")
}
