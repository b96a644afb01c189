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
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestRunEndedIsNoFailure: a node stopped because the run ended with its
// EndsRun node has the outcome run_ended, no error status, and does not
// count in asynctool.run.failed.
func TestRunEndedIsNoFailure(t *testing.T) {
	h, exp, _, _ := setup(t)
	recs := asynctool.NewWrapper("recs", asynctooltest.Blocks[int, int](1), 0).ShortCircuit(false)
	user := asynctool.NewWrapper("user", asynctooltest.Returns[int](2), 0)
	asynctool.NewWrapper("page", asynctooltest.Returns[int](3), 0).Depend(user, true).Depend(recs, false).EndsRun()

	a := asynctool.New(asynctool.WithHooks(h))
	require.NoError(t, a.BeginWork(context.Background(), time.Minute, recs, user))
	require.NoError(t, a.Close())

	spans := map[string]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		spans[s.Name] = s
	}
	s := spans["asynctool.node recs"]
	at := attrs(s.Attributes)
	assert.Equal(t, "run_ended", at["asynctool.node.outcome"].AsString())
	assert.Equal(t, codes.Unset, s.Status.Code)
	run := spans["asynctool.run"]
	assert.Equal(t, int64(0), attrs(run.Attributes)["asynctool.run.failed"].AsInt64())
	assert.Equal(t, codes.Unset, run.Status.Code)
}

// TestANodeEndedBeforeItsStartHookHasOneSpan: a node whose OnNodeStart
// hook comes after its end (the run ended with its EndsRun node while the
// node's start was under way) has one span, the zero-length one that
// OnNodeEnd gave it with its outcome; before, OnNodeStart started and
// ended a second span with no outcome, which a lookup by name could find
// instead (TestRunEndedIsNoFailure failed 3 times in 300 under -race).
func TestANodeEndedBeforeItsStartHookHasOneSpan(t *testing.T) {
	h, exp, _, _ := setup(t)
	ended := make(chan struct{})
	late := *h
	late.OnNodeStart = func(ctx context.Context, ev asynctool.NodeEvent) context.Context {
		if ev.ID == "recs" {
			<-ended // the run ends with page meanwhile, and ends recs
		}
		return h.OnNodeStart(ctx, ev)
	}
	late.OnNodeEnd = func(ctx context.Context, ev asynctool.NodeEvent) {
		h.OnNodeEnd(ctx, ev)
		if ev.ID == "recs" {
			close(ended)
		}
	}
	recs := asynctool.NewWrapper("recs", asynctooltest.Blocks[int, int](1), 0).ShortCircuit(false)
	user := asynctool.NewWrapper("user", asynctooltest.Returns[int](2), 0)
	asynctool.NewWrapper("page", asynctooltest.Returns[int](3), 0).Depend(user, true).Depend(recs, false).EndsRun()
	a := asynctool.New(asynctool.WithHooks(&late))
	require.NoError(t, a.BeginWork(context.Background(), time.Minute, recs, user))
	require.NoError(t, a.Close())

	spans := nodeSpans(exp, "recs")
	require.Len(t, spans, 1)
	assert.Equal(t, "run_ended", attrs(spans[0].Attributes)["asynctool.node.outcome"].AsString())
}

// TestPolicyEndStopsNodesAsFailures pins what the package doc says of the
// nodes that a PolicyEnd failure stops: they failed, as the core reports
// them (their Err is an *EndError), the running one with no "timeout"
// event, and their reason names the node that ended the run.
func TestPolicyEndStopsNodesAsFailures(t *testing.T) {
	h, exp, _, _ := setup(t)
	blocked := asynctooltest.Func(func(ctx context.Context, _ int) (int, error) { <-ctx.Done(); return 0, ctx.Err() })
	running := asynctool.NewWrapper("running", blocked, 0)
	end := asynctool.NewWrapper("end", asynctooltest.Func(func(context.Context, int) (int, error) {
		<-blocked.Started()
		return 0, errDown
	}), 0).OnFailure(asynctool.PolicyEnd)
	asynctool.NewWrapper("later", asynctooltest.Returns[int](1), 0).Depend(running, true)
	a := asynctool.New(asynctool.WithHooks(h))
	var ee *asynctool.EndError
	require.ErrorAs(t, a.BeginWork(context.Background(), time.Minute, end, running), &ee)
	require.NoError(t, a.Close())

	spans := map[string]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		spans[s.Name] = s
	}
	for id, ran := range map[string]bool{"running": true, "later": false} {
		s := spans["asynctool.node "+id]
		at := attrs(s.Attributes)
		assert.Equal(t, "failed", at[asynctoolotel.KeyNodeOutcome].AsString(), id)
		assert.Equal(t, ran, at[asynctoolotel.KeyNodeRan].AsBool(), id)
		assert.Contains(t, at[asynctoolotel.KeyNodeReason].AsString(), `node "end" ended the run`, id)
		assert.Equal(t, codes.Error, s.Status.Code, id)
		for _, e := range s.Events {
			assert.NotEqual(t, "timeout", e.Name, id)
		}
	}
}
