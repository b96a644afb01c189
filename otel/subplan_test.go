package asynctoolotel_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynctool-go/asynctool"
	"github.com/asynctool-go/asynctool/asynctooltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// TestSubPlanSpansNest runs
//
//	user ──must─▶ profile (SubPlan, retried once) ──must─▶ page
//	              name ──must─▶ card
//	              bad ───must─▶ never (never runs)
//
// where name makes a client span of its own and profile's first attempt
// fails, and checks that each sub-run is a run span under the span of
// the attempt of profile that started it, with its nodes (the one that
// never ran too) under it and the client span under name, whether the
// hooks are the Async's or the outer run's context's.
func TestSubPlanSpansNest(t *testing.T) {
	for _, perRun := range []bool{false, true} {
		name := "Async hooks"
		if perRun {
			name = "run hooks"
		}
		t.Run(name, func(t *testing.T) {
			h, exp, _, tracer := setup(t)
			nameW := asynctool.NewWrapper("name", asynctooltest.Func(func(ctx context.Context, _ int) (string, error) {
				_, span := tracer.Start(ctx, "rpc GetName")
				span.End()
				return "ada", nil
			}), 0)
			card := asynctool.NewWrapper("card", asynctooltest.Returns[int]("card"), 0).Depend(nameW, true)
			bad := asynctool.NewWrapper("bad", asynctooltest.Fails[int, int](errDown), 0)
			asynctool.NewWrapper("never", asynctooltest.Returns[int](1), 0).Depend(bad, true)
			pl, err := asynctool.Compile(nameW, bad)
			require.NoError(t, err)

			var attempts atomic.Int32
			user := asynctool.NewWrapper("user", asynctooltest.Returns[int](7), 0)
			profile := asynctool.NewWrapper("profile", asynctool.SubPlan[int, string]{Plan: pl, Output: func(sub *asynctool.Run) (string, error) {
				if attempts.Add(1) == 1 {
					return "", errDown
				}
				r := card.ResultIn(sub)
				return r.Value, r.Err
			}}, 0).Depend(user, true).Retry(asynctool.RetryPolicy{Attempts: 2})
			asynctool.NewWrapper("page", asynctooltest.Returns[int](1), 0).Depend(profile, true)

			ctx, parent := tracer.Start(context.Background(), "request")
			var a *asynctool.Async
			if perRun {
				a = asynctool.New()
				ctx = asynctool.WithRunHooks(ctx, h)
			} else {
				a = asynctool.New(asynctool.WithHooks(h))
			}
			require.NoError(t, a.BeginWork(ctx, 10*time.Second, user))
			require.NoError(t, a.Close())
			parent.End()

			byID := map[trace.SpanID]tracetest.SpanStub{}
			byName := map[string][]tracetest.SpanStub{}
			for _, s := range exp.GetSpans() {
				byID[s.SpanContext.SpanID()] = s
				byName[s.Name] = append(byName[s.Name], s)
			}
			parentOf := func(s tracetest.SpanStub) string {
				p, ok := byID[s.Parent.SpanID()]
				if !ok {
					return "(none)"
				}
				return p.Name
			}
			runs := byName["asynctool.run"]
			require.Len(t, runs, 3, "the outer run and two sub-runs")
			var outer tracetest.SpanStub
			var subs []tracetest.SpanStub
			for _, r := range runs {
				if parentOf(r) == "request" {
					outer = r
				} else {
					subs = append(subs, r)
				}
			}
			require.Len(t, subs, 2, "one run span under the request")
			for _, id := range []string{"user", "profile", "page"} {
				for _, s := range byName["asynctool.node "+id] {
					assert.Equal(t, outer.SpanContext.SpanID(), s.Parent.SpanID(), "%s nests under the outer run", id)
				}
			}
			profiles := byName["asynctool.node profile"]
			require.Len(t, profiles, 2, "one span per attempt")
			for _, sub := range subs {
				p := byID[sub.Parent.SpanID()]
				assert.Equal(t, "asynctool.node profile", p.Name, "a sub-run nests under its SubPlan node")
				assert.False(t, sub.StartTime.Before(p.StartTime), "the sub-run starts within the attempt")
				assert.False(t, sub.EndTime.After(p.EndTime), "the sub-run ends within the attempt")
				assert.Equal(t, int64(4), attrs(sub.Attributes)["asynctool.run.nodes"].AsInt64())
				assert.True(t, attrs(sub.Attributes)["asynctool.run.nested"].AsBool(), "a sub-run's span says it is nested")
			}
			_, has := attrs(outer.Attributes)["asynctool.run.nested"]
			assert.False(t, has, "the outer run is not nested")
			assert.NotEqual(t, subs[0].Parent.SpanID(), subs[1].Parent.SpanID(), "each attempt has its own sub-run")
			retried := 0
			for _, p := range profiles {
				if attrs(p.Attributes)["asynctool.node.outcome"].AsString() == "retried" {
					retried++
					assert.Equal(t, codes.Error, p.Status.Code)
				}
			}
			assert.Equal(t, 1, retried)

			subIDs := map[trace.SpanID]bool{subs[0].SpanContext.SpanID(): true, subs[1].SpanContext.SpanID(): true}
			for _, id := range []string{"name", "card", "bad", "never"} {
				spans := byName["asynctool.node "+id]
				require.Len(t, spans, 2, "%s: one span per sub-run", id)
				assert.NotEqual(t, spans[0].Parent.SpanID(), spans[1].Parent.SpanID(), id)
				for _, s := range spans {
					assert.True(t, subIDs[s.Parent.SpanID()], "%s nests under a sub-run, not under %s", id, parentOf(s))
				}
			}
			for _, s := range byName["asynctool.node never"] {
				assert.Equal(t, "upstream_failed", attrs(s.Attributes)["asynctool.node.outcome"].AsString())
			}
			for _, s := range byName["rpc GetName"] {
				assert.Equal(t, "asynctool.node name", parentOf(s), "the worker's client span nests under its node")
			}
		})
	}
}
