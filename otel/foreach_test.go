package asynctoolotel_test

import (
	"context"
	"testing"
	"time"

	"github.com/asynctool-go/asynctool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// TestForEachSpansNest: a ForEach node's items, and the hidden join,
// are node spans under a nested run span under the ForEach node's span,
// the items its join stopped included, each with its outcome.
func TestForEachSpansNest(t *testing.T) {
	h, exp, _, _ := setup(t)
	a := asynctool.New(asynctool.WithHooks(h))
	each := asynctool.NewWrapper("each", asynctool.ForEach[int, int, int]{
		Items: func(context.Context, int, asynctool.Wrappers) ([]int, error) { return []int{0, 1, 2}, nil },
		Worker: asynctool.WorkerFunc[int, int](func(ctx context.Context, i int, _ asynctool.Wrappers) (int, error) {
			if i == 0 {
				return 1, nil
			}
			<-ctx.Done()
			return 0, ctx.Err()
		}),
		Join: asynctool.AnySucceeded(),
	}, 0)
	require.NoError(t, a.BeginWork(context.Background(), 10*time.Second, each))
	require.NoError(t, a.Close())
	require.NoError(t, each.Result().Err)

	byID := map[trace.SpanID]tracetest.SpanStub{}
	byName := map[string][]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		byID[s.SpanContext.SpanID()] = s
		byName[s.Name] = append(byName[s.Name], s)
	}
	require.Len(t, byName["asynctool.run"], 2, "the outer run and the sub-graph's")
	require.Len(t, byName["asynctool.node each"], 1)
	eachSpan := byName["asynctool.node each"][0]
	outcomes := map[string]string{}
	for _, id := range []string{"0", "1", "2", "join"} {
		spans := byName["asynctool.node "+id]
		require.Len(t, spans, 1, id)
		run := byID[spans[0].Parent.SpanID()]
		assert.Equal(t, "asynctool.run", run.Name, id)
		assert.Equal(t, eachSpan.SpanContext.SpanID(), run.Parent.SpanID(), "%s: its run nests under the ForEach node", id)
		outcomes[id] = attrs(spans[0].Attributes)["asynctool.node.outcome"].AsString()
	}
	t.Log(outcomes)
	assert.Equal(t, "success", outcomes["0"])
	assert.Equal(t, "success", outcomes["join"])
}
