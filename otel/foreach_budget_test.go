package asynctoolotel_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynctool-go/asynctool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// A ForEach's sub-run carries its Limit and Budget; one its Budget
// stopped has a "budget" event and no Error status, under a ForEach node
// that succeeded, and its items that the Budget stopped (or kept from
// starting) have outcome budget, are not counted as failed, and have no
// Error status.
func TestForEachBudgetSpans(t *testing.T) {
	// Fake time: item 1 starts before the Budget runs out, however slow
	// the machine (on a real clock, item 0 held back 30ms kept item 1 from
	// starting, and its span from saying it ran).
	synctest.Test(t, func(t *testing.T) {
		h, exp, _, _ := setup(t)
		a := asynctool.New(asynctool.WithHooks(h))
		each := asynctool.NewWrapper("each", asynctool.ForEach[int, int, int]{
			Items: func(context.Context, int, asynctool.Wrappers) ([]int, error) { return []int{0, 1, 2}, nil },
			Worker: asynctool.WorkerFunc[int, int](func(ctx context.Context, i int, _ asynctool.Wrappers) (int, error) {
				if i == 0 {
					return 1, nil
				}
				<-ctx.Done() // item 1 waits for the Budget; item 2 never starts
				return 0, ctx.Err()
			}),
			Limit:  1,
			Budget: 30 * time.Millisecond,
		}, 0)
		require.NoError(t, a.BeginWork(context.Background(), 10*time.Second, each))
		require.NoError(t, a.Close())
		require.NoError(t, each.Result().Err)

		byName := map[string][]tracetest.SpanStub{}
		for _, s := range exp.GetSpans() {
			byName[s.Name] = append(byName[s.Name], s)
		}
		require.Len(t, byName["asynctool.run"], 2, "the outer run and the items'")
		var sub tracetest.SpanStub
		for _, s := range byName["asynctool.run"] {
			if attrs(s.Attributes)["asynctool.run.nested"].AsBool() {
				sub = s
			}
		}
		ra := attrs(sub.Attributes)
		assert.Equal(t, int64(1), ra["asynctool.run.limit"].AsInt64())
		assert.Equal(t, 30.0, ra["asynctool.run.budget_ms"].AsFloat64())
		assert.Equal(t, int64(0), ra["asynctool.run.failed"].AsInt64())
		assert.NotEqual(t, codes.Error, sub.Status.Code, "the Budget did its job")
		events := []string{}
		for _, e := range sub.Events {
			events = append(events, e.Name)
		}
		assert.Contains(t, events, "budget")
		for id, ran := range map[string]bool{"1": true, "2": false} {
			spans := byName["asynctool.node "+id]
			require.Len(t, spans, 1, id)
			na := attrs(spans[0].Attributes)
			assert.Equal(t, "budget", na["asynctool.node.outcome"].AsString(), id)
			assert.Equal(t, ran, na["asynctool.node.ran"].AsBool(), id)
			assert.NotEqual(t, codes.Error, spans[0].Status.Code, id)
		}
		eachSpan := byName["asynctool.node each"]
		require.Len(t, eachSpan, 1)
		assert.Equal(t, "success", attrs(eachSpan[0].Attributes)["asynctool.node.outcome"].AsString())
	})
}

// TestForEachBudgetAndAHookPanicIsAnErrorRun: a ForEach's sub-run that
// its Budget stopped, and in which a hook also panicked, did not only do
// the Budget's job: its span records the error with status Error and no
// "budget" event.
func TestForEachBudgetAndAHookPanicIsAnErrorRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, exp, _, _ := setup(t)
		breaks := &asynctool.Hooks{OnNodeEnd: func(_ context.Context, ev asynctool.NodeEvent) {
			if ev.ID == "0" {
				panic("hook broke")
			}
		}}
		a := asynctool.New(asynctool.WithHooks(h), asynctool.WithHooks(breaks))
		each := asynctool.NewWrapper("each", asynctool.ForEach[int, int, int]{
			Items: func(context.Context, int, asynctool.Wrappers) ([]int, error) { return []int{0, 1}, nil },
			Worker: asynctool.WorkerFunc[int, int](func(ctx context.Context, i int, _ asynctool.Wrappers) (int, error) {
				if i == 0 {
					return 1, nil
				}
				<-ctx.Done() // item 1 waits for the Budget
				return 0, ctx.Err()
			}),
			Limit:  1,
			Budget: 30 * time.Millisecond,
		}, 0)
		require.NoError(t, a.BeginWork(context.Background(), 10*time.Second, each))
		require.NoError(t, a.Close())
		var be *asynctool.BudgetError
		var cpe *asynctool.CallbackPanicError
		require.ErrorAs(t, each.Result().Err, &be, "the items' run was stopped by its Budget")
		require.ErrorAs(t, each.Result().Err, &cpe, "and a hook panicked in it")

		var sub tracetest.SpanStub
		for _, s := range exp.GetSpans() {
			if s.Name == "asynctool.run" && attrs(s.Attributes)["asynctool.run.nested"].AsBool() {
				sub = s
			}
		}
		require.True(t, sub.SpanContext.IsValid(), "the items' run")
		assert.Equal(t, codes.Error, sub.Status.Code, "a hook panicked")
		var events []string
		for _, e := range sub.Events {
			events = append(events, e.Name)
		}
		assert.Equal(t, []string{"exception"}, events)
	})
}
