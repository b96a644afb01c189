package asynctoolotel_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"

	"github.com/asynctool-go/asynctool"
	"github.com/asynctool-go/asynctool/asynctooltest"
	asynctoolotel "github.com/asynctool-go/asynctool/otel"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var errDown = errors.New("down")

// setup returns hooks feeding an in-memory span exporter and a manual
// metric reader.
func setup(t *testing.T) (*asynctool.Hooks, *tracetest.InMemoryExporter, *sdkmetric.ManualReader, trace.Tracer) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() {
		assert.NoError(t, tp.Shutdown(context.Background()))
		assert.NoError(t, mp.Shutdown(context.Background()))
	})
	return asynctoolotel.Hooks(tp, mp), exp, reader, tp.Tracer("test")
}

func attrs(kvs []attribute.KeyValue) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range kvs {
		m[kv.Key] = kv.Value
	}
	return m
}

// nodeSpans returns the spans of node id (one per attempt), in the order
// they started.
func nodeSpans(exp *tracetest.InMemoryExporter, id string) []tracetest.SpanStub {
	var spans []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == "asynctool.node "+id {
			spans = append(spans, s)
		}
	}
	slices.SortFunc(spans, func(p, q tracetest.SpanStub) int { return p.StartTime.Compare(q.StartTime) })
	return spans
}

// suspendsOnce makes node x, whose first attempt fails with errDown and
// suspends it (PolicySuspend), and whose later attempts return 7.
func suspendsOnce() *asynctool.WorkerWrapper[int, int] {
	var calls atomic.Int32
	return asynctool.NewWrapper("x", asynctooltest.Func(func(context.Context, int) (int, error) {
		if calls.Add(1) == 1 {
			return 0, errDown
		}
		return 7, nil
	}), 0).OnFailure(asynctool.PolicySuspend)
}

// TestSpans runs
//
//	user ──must─▶ page ──must─▶ audit (never runs)
//	bad ───must─▶ page
//
// where user's worker makes a client span of its own, and checks the
// tree of spans and their attributes.
func TestSpans(t *testing.T) {
	h, exp, _, tracer := setup(t)
	var rpcParent trace.SpanContext
	userFake := asynctooltest.Func(func(ctx context.Context, _ int) (int, error) {
		rpcParent = trace.SpanContextFromContext(ctx)
		_, span := tracer.Start(ctx, "rpc GetUser")
		span.End()
		return 1, nil
	})
	user := asynctool.NewWrapper("user", userFake, 0)
	// bad waits for user to start, so that user is not skipped when the
	// failure makes page give up on it.
	bad := asynctool.NewWrapper("bad", asynctooltest.Func(func(context.Context, int) (int, error) {
		<-userFake.Started()
		return 0, nil
	}), 0)
	bad2 := asynctool.NewWrapper("bad2", asynctooltest.Fails[int, int](errDown), 0).Depend(bad, true)
	page := asynctool.NewWrapper("page", asynctooltest.Returns[int](2), 0).Depend(user, true).Depend(bad2, true)
	asynctool.NewWrapper("audit", asynctooltest.Returns[int](3), 0).Depend(page, true)

	ctx, parent := tracer.Start(context.Background(), "request")
	var runEnd time.Time
	ends := &asynctool.Hooks{OnRunEnd: func(_ context.Context, rep *asynctool.Report) { runEnd = rep.End }}
	a := asynctool.New(asynctool.WithHooks(h), asynctool.WithHooks(ends))
	require.NoError(t, a.BeginWork(ctx, 10*time.Second, user, bad))
	require.NoError(t, a.Close())
	parent.End()

	spans := map[string]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		_, dup := spans[s.Name]
		require.False(t, dup, "one span named %q", s.Name)
		spans[s.Name] = s
	}
	require.Len(t, spans, 8, "request, run, 5 nodes, rpc")
	run := spans["asynctool.run"]
	assert.Equal(t, parent.SpanContext().SpanID(), run.Parent.SpanID(), "the run nests under the caller's span")
	assert.Equal(t, int64(5), attrs(run.Attributes)["asynctool.run.nodes"].AsInt64())
	assert.Equal(t, int64(3), attrs(run.Attributes)["asynctool.run.failed"].AsInt64())
	assert.Equal(t, codes.Unset, run.Status.Code)
	require.False(t, runEnd.IsZero())
	assert.True(t, run.EndTime.Equal(runEnd), "the run's span ends when its report says it ended")
	deadline, err := time.Parse(time.RFC3339Nano, attrs(run.Attributes)[asynctoolotel.KeyRunDeadline].AsString())
	require.NoError(t, err, "the run's deadline, under its exported key")
	assert.WithinDuration(t, run.StartTime.Add(10*time.Second), deadline, time.Second)
	for _, id := range []string{"user", "bad", "bad2", "page", "audit"} {
		s := spans["asynctool.node "+id]
		assert.Equal(t, run.SpanContext.SpanID(), s.Parent.SpanID(), "%s nests under the run", id)
		assert.Equal(t, id, attrs(s.Attributes)["asynctool.node.id"].AsString())
	}
	assert.Equal(t, spans["asynctool.node user"].SpanContext, rpcParent, "the worker's ctx carries its node's span")
	assert.Equal(t, spans["asynctool.node user"].SpanContext.SpanID(), spans["rpc GetUser"].Parent.SpanID())

	u := attrs(spans["asynctool.node user"].Attributes)
	assert.Equal(t, "finish", u["asynctool.node.state"].AsString())
	assert.Equal(t, "success", u["asynctool.node.outcome"].AsString())
	assert.Equal(t, int64(1), u["asynctool.node.attempts"].AsInt64())
	assert.True(t, u["asynctool.node.ran"].AsBool())

	b := spans["asynctool.node bad2"]
	assert.Equal(t, "failed", attrs(b.Attributes)["asynctool.node.outcome"].AsString())
	assert.Equal(t, "worker failed", attrs(b.Attributes)["asynctool.node.reason"].AsString())
	assert.Equal(t, codes.Error, b.Status.Code)
	assert.Equal(t, "worker failed", b.Status.Description, "the status says why, as the reason does")
	require.Len(t, b.Events, 1)
	assert.Equal(t, "exception", b.Events[0].Name, "RecordError")

	for _, id := range []string{"page", "audit"} {
		s := spans["asynctool.node "+id]
		a := attrs(s.Attributes)
		assert.Equal(t, "upstream_failed", a["asynctool.node.outcome"].AsString(), id)
		assert.False(t, a["asynctool.node.ran"].AsBool(), id)
		assert.Equal(t, int64(0), a["asynctool.node.attempts"].AsInt64(), id)
		assert.Equal(t, s.StartTime, s.EndTime, "%s never ran: a zero-length span", id)
		assert.Contains(t, a["asynctool.node.reason"].AsString(), "must upstream", id)
	}
}

// TestNodesWithoutIDsAreNamedByIndex: a node without an id had a span
// named "asynctool.node ", the same for every such node, where the core's
// reports, errors and Run.Resume name it "#" and its index. Both spans,
// the one of a node that ran and the zero-length one of a node that did
// not, are named so; the id attribute stays the id, empty.
func TestNodesWithoutIDsAreNamedByIndex(t *testing.T) {
	h, exp, reader, _ := setup(t)
	first := asynctool.NewWrapper("", asynctooltest.Fails[int, int](errDown), 0)
	asynctool.NewWrapper("", asynctooltest.Returns[int](1), 0).Depend(first, true)
	a := asynctool.New(asynctool.WithHooks(h))
	require.NoError(t, a.BeginWork(context.Background(), 10*time.Second, first))
	require.NoError(t, a.Close())

	// In metrics, which have no index, each is a series of its own.
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	outcomes := map[string]int64{}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name != "asynctool.node.outcomes" {
			continue
		}
		for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
			id, _ := dp.Attributes.Value(asynctoolotel.KeyNodeID)
			out, _ := dp.Attributes.Value(asynctoolotel.KeyNodeOutcome)
			outcomes[id.AsString()+"/"+out.AsString()] = dp.Value
		}
	}
	assert.Equal(t, map[string]int64{"#0/failed": 1, "#1/upstream_failed": 1}, outcomes)

	ran := map[string]bool{}
	for _, s := range exp.GetSpans() {
		if s.Name == "asynctool.run" {
			continue
		}
		at := attrs(s.Attributes)
		ran[s.Name] = at[asynctoolotel.KeyNodeRan].AsBool()
		assert.Empty(t, at[asynctoolotel.KeyNodeID].AsString(), s.Name)
	}
	assert.Equal(t, map[string]bool{"asynctool.node #0": true, "asynctool.node #1": false}, ran)
}

// TestIDsThatAreNotUTF8AreQuoted: OTLP carries only UTF-8 strings, and
// its exporter drops a whole batch that holds another, yet a node's id
// may be any bytes. Such an id went as it was into its spans' names and
// asynctool.node.id, and into the metrics' asynctool.node.id. It is now
// quoted there, as Report.String shows it, and two such ids stay apart.
func TestIDsThatAreNotUTF8AreQuoted(t *testing.T) {
	h, exp, reader, _ := setup(t)
	first := asynctool.NewWrapper("\xff", asynctooltest.Fails[int, int](errDown), 0)
	asynctool.NewWrapper("\xfe", asynctooltest.Returns[int](1), 0).Depend(first, true)
	a := asynctool.New(asynctool.WithHooks(h))
	require.NoError(t, a.BeginWork(context.Background(), 10*time.Second, first))
	require.NoError(t, a.Close())

	valid := func(what string, kvs []attribute.KeyValue) {
		for _, kv := range kvs {
			if kv.Value.Type() == attribute.STRING {
				assert.True(t, utf8.ValidString(kv.Value.AsString()), "%s: %s = %q", what, kv.Key, kv.Value.AsString())
			}
		}
	}
	ids := map[string]string{}
	for _, s := range exp.GetSpans() {
		assert.True(t, utf8.ValidString(s.Name), "span name %q", s.Name)
		valid(s.Name, s.Attributes)
		for _, e := range s.Events {
			valid(s.Name+" "+e.Name, e.Attributes)
		}
		if s.Name != "asynctool.run" {
			ids[s.Name] = attrs(s.Attributes)[asynctoolotel.KeyNodeID].AsString()
		}
	}
	assert.Equal(t, map[string]string{`asynctool.node "\xff"`: `"\xff"`, `asynctool.node "\xfe"`: `"\xfe"`}, ids)

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	outcomes := map[string]int64{}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name != "asynctool.node.outcomes" {
			continue
		}
		for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
			valid(m.Name, dp.Attributes.ToSlice())
			id, _ := dp.Attributes.Value(asynctoolotel.KeyNodeID)
			outcomes[id.AsString()] = dp.Value
		}
	}
	assert.Equal(t, map[string]int64{`"\xff"`: 1, `"\xfe"`: 1}, outcomes)
}

// TestSkipAndTimeout checks the outcomes that only the deadline and
// short-circuit produce, and that only a node that had started gets a
// "timeout" event.
func TestSkipAndTimeout(t *testing.T) {
	// In a synctest bubble the 50 ms deadline is fake time: it passes
	// only once every goroutine is blocked, so first and any have ended
	// and slow has started, however slow the machine.
	synctest.Test(t, func(t *testing.T) {
		h, exp, _, _ := setup(t)
		// The stuck workers ignore their context and return only once the run
		// is over, so the run ends by its deadline, on the goroutine that
		// sweeps it.
		release := make(chan struct{})
		stuck := func() *asynctooltest.Fake[int, int] {
			return asynctooltest.Func(func(context.Context, int) (int, error) { <-release; return 1, nil })
		}
		first := asynctool.NewWrapper("first", asynctooltest.Returns[int](1), 0)
		upSlow := asynctool.NewWrapper("up-slow", stuck(), 0)
		spare := asynctool.NewWrapper("spare", asynctooltest.Returns[int](1), 0).Depend(upSlow, true)
		asynctool.NewWrapper("any", asynctooltest.Returns[int](1), 0).Depend(first, false).Depend(spare, false)
		slow := asynctool.NewWrapper("slow", stuck(), 0)
		// after never starts: the deadline ends it while slow runs.
		asynctool.NewWrapper("after", asynctooltest.Returns[int](1), 0).Depend(slow, true)

		a := asynctool.New(asynctool.WithHooks(h))
		err := a.BeginWork(context.Background(), 50*time.Millisecond, first, upSlow, slow)
		close(release)
		require.NoError(t, a.Close())
		assert.ErrorIs(t, err, context.DeadlineExceeded)

		spans := map[string]tracetest.SpanStub{}
		for _, s := range exp.GetSpans() {
			spans[s.Name] = s
		}
		sp := attrs(spans["asynctool.node spare"].Attributes)
		assert.Equal(t, "skipped", sp["asynctool.node.outcome"].AsString())
		assert.Equal(t, "no successor needed it any more", sp["asynctool.node.reason"].AsString())

		s := spans["asynctool.node slow"]
		assert.Equal(t, "timeout", attrs(s.Attributes)["asynctool.node.outcome"].AsString())
		assert.True(t, attrs(s.Attributes)["asynctool.node.ran"].AsBool())
		require.NotEmpty(t, s.Events)
		assert.Equal(t, "timeout", s.Events[0].Name)
		assert.Equal(t, codes.Error, s.Status.Code)

		// A node the deadline kept from starting timed out too, but
		// nothing of its own was cut: its error, no "timeout" event.
		af := spans["asynctool.node after"]
		assert.Equal(t, "timeout", attrs(af.Attributes)["asynctool.node.outcome"].AsString())
		assert.False(t, attrs(af.Attributes)["asynctool.node.ran"].AsBool())
		assert.Equal(t, codes.Error, af.Status.Code)
		var events []string
		for _, e := range af.Events {
			events = append(events, e.Name)
		}
		assert.Equal(t, []string{"exception"}, events, "after never ran")

		run := spans["asynctool.run"]
		assert.Equal(t, codes.Error, run.Status.Code, "the run was cut short")
		require.Len(t, run.Events, 1)
		assert.Equal(t, "exception", run.Events[0].Name, "the run's error, recorded")
	})
}

// TestRetriedAttemptsHaveTheirOwnSpans checks that each attempt of a
// retried node is a span, that the failed ones carry their error, and
// that only the first carries the wait for a goroutine (a later one's
// showed the first's).
func TestRetriedAttemptsHaveTheirOwnSpans(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, exp, _, _ := setup(t)
		var calls atomic.Int32
		flaky := asynctool.NewWrapper("flaky", asynctooltest.Func(func(context.Context, int) (int, error) {
			if calls.Add(1) < 3 {
				return 0, errDown
			}
			return 7, nil
		}), 0).Retry(asynctool.RetryPolicy{Attempts: 3, Backoff: asynctool.ConstantBackoff(5 * time.Millisecond)})
		a := asynctool.New(asynctool.WithHooks(h))
		require.NoError(t, a.BeginWork(context.Background(), time.Second, flaky))
		require.NoError(t, a.Close())

		attempts := nodeSpans(exp, "flaky")
		require.Len(t, attempts, 3, "one span per attempt")
		for k, s := range attempts[:2] {
			at := attrs(s.Attributes)
			assert.Equal(t, "retried", at["asynctool.node.outcome"].AsString(), "attempt %d", k+1)
			assert.Equal(t, int64(k+1), at["asynctool.node.attempts"].AsInt64(), "attempt %d", k+1)
			assert.Equal(t, 5.0, at["asynctool.node.retry_in_ms"].AsFloat64(), "attempt %d", k+1)
			assert.Equal(t, codes.Error, s.Status.Code, "attempt %d", k+1)
			require.Len(t, s.Events, 1, "attempt %d", k+1)
			assert.Equal(t, "exception", s.Events[0].Name, "attempt %d: RecordError", k+1)
		}
		assert.Contains(t, attrs(attempts[0].Attributes), asynctoolotel.KeyNodeWaitMS, "the first attempt")
		for k, s := range attempts[1:] {
			assert.NotContains(t, attrs(s.Attributes), asynctoolotel.KeyNodeWaitMS, "attempt %d: its wait was the backoff", k+2)
		}
		last := attrs(attempts[2].Attributes)
		assert.Equal(t, "success", last["asynctool.node.outcome"].AsString())
		assert.Equal(t, int64(3), last["asynctool.node.attempts"].AsInt64())
		assert.Equal(t, codes.Unset, attempts[2].Status.Code)
	})
}

// TestConcurrentRuns checks that runs sharing the hooks keep their spans
// apart.
func TestConcurrentRuns(t *testing.T) {
	h, exp, _, _ := setup(t)
	a := asynctool.New(asynctool.WithHooks(h))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			x := asynctool.NewWrapper("x", asynctooltest.Sleeps[int](time.Millisecond, 1), 0)
			asynctool.NewWrapper("y", asynctooltest.Returns[int](2), 0).Depend(x, true)
			assert.NoError(t, a.BeginWork(context.Background(), 10*time.Second, x))
		})
	}
	wg.Wait()
	require.NoError(t, a.Close())

	runs := map[trace.SpanID]int{}
	var nodes []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == "asynctool.run" {
			runs[s.SpanContext.SpanID()] = 0
		} else {
			nodes = append(nodes, s)
		}
	}
	require.Len(t, runs, 8)
	require.Len(t, nodes, 16)
	for _, n := range nodes {
		runs[n.Parent.SpanID()]++
	}
	for id, n := range runs {
		assert.Equal(t, 2, n, "run %v has its two nodes", id)
	}
}

// TestConcurrentPlanRuns runs one plan 1,000 times at once, with a
// retried node, releasing each run for the next to reuse: every span
// ends, each node span is under its own run's span, and each node's
// outcome is counted once per run.
func TestConcurrentPlanRuns(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() {
		assert.NoError(t, tp.Shutdown(context.Background()))
		assert.NoError(t, mp.Shutdown(context.Background()))
	})
	h := asynctoolotel.Hooks(tp, mp)
	var calls atomic.Int32
	x := asynctool.NewWrapper("x", asynctooltest.Func(func(context.Context, int) (int, error) {
		if calls.Add(1)%3 == 0 {
			return 0, errDown
		}
		return 1, nil
	}), 0).Retry(asynctool.RetryPolicy{Attempts: 2})
	y := asynctool.NewWrapper("y", asynctooltest.Returns[int](2), 0)
	asynctool.NewWrapper("z", asynctooltest.Returns[int](3), 0).Depend(x, true).Depend(y, true)
	pl, err := asynctool.Compile(x, y)
	require.NoError(t, err)
	a := asynctool.New(asynctool.WithHooks(h))
	const runs = 1000
	var wg sync.WaitGroup
	for range runs {
		wg.Go(func() {
			r, err := a.RunPlan(context.Background(), pl, time.Minute)
			assert.NoError(t, err)
			r.Release()
		})
	}
	wg.Wait()
	require.NoError(t, a.Close())

	spans := sr.Ended()
	require.Len(t, spans, len(sr.Started()), "every span ended")
	nodes := map[trace.SpanID]int{} // run span -> its final node spans
	for _, s := range spans {
		if s.Name() == "asynctool.run" {
			nodes[s.SpanContext().SpanID()] += 0
		}
	}
	require.Len(t, nodes, runs)
	for _, s := range spans {
		if s.Name() == "asynctool.run" {
			continue
		}
		_, ok := nodes[s.Parent().SpanID()]
		require.True(t, ok, "%s is under a run span", s.Name())
		if attrs(s.Attributes())["asynctool.node.outcome"].AsString() != "retried" {
			nodes[s.Parent().SpanID()]++
		}
	}
	for id, n := range nodes {
		require.Equal(t, 3, n, "run %v has one final span per node", id)
	}

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	var counted int64
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name == "asynctool.node.outcomes" {
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				counted += dp.Value
			}
		}
	}
	assert.Equal(t, int64(3*runs), counted)
}

// TestMetrics checks the duration histogram and the outcome counter.
func TestMetrics(t *testing.T) {
	h, _, reader, _ := setup(t)
	ok := asynctool.NewWrapper("ok", asynctooltest.Sleeps[int](2*time.Millisecond, 1), 0)
	bad := asynctool.NewWrapper("bad", asynctooltest.Fails[int, int](errDown), 0)
	asynctool.NewWrapper("after", asynctooltest.Returns[int](1), 0).Depend(bad, true)
	a := asynctool.New(asynctool.WithHooks(h))
	require.NoError(t, a.BeginWork(context.Background(), 10*time.Second, ok, bad))
	require.NoError(t, a.Close())

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	require.Len(t, rm.ScopeMetrics, 1)
	assert.Equal(t, asynctoolotel.ScopeName, rm.ScopeMetrics[0].Scope.Name)
	got := map[string]metricdata.Metrics{}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		got[m.Name] = m
	}

	key := func(set attribute.Set) string {
		id, _ := set.Value("asynctool.node.id")
		out, _ := set.Value("asynctool.node.outcome")
		return id.AsString() + "/" + out.AsString()
	}
	outcomes := map[string]int64{}
	for _, dp := range got["asynctool.node.outcomes"].Data.(metricdata.Sum[int64]).DataPoints {
		outcomes[key(dp.Attributes)] = dp.Value
	}
	assert.Equal(t, map[string]int64{"ok/success": 1, "bad/failed": 1, "after/upstream_failed": 1}, outcomes)

	durations := map[string]metricdata.HistogramDataPoint[float64]{}
	for _, dp := range got["asynctool.node.duration"].Data.(metricdata.Histogram[float64]).DataPoints {
		durations[key(dp.Attributes)] = dp
	}
	require.Len(t, durations, 2, "only nodes that ran")
	assert.Equal(t, uint64(1), durations["ok/success"].Count)
	assert.GreaterOrEqual(t, durations["ok/success"].Sum, 0.002)
	assert.Equal(t, "s", got["asynctool.node.duration"].Unit)

	runs := got["asynctool.run.duration"].Data.(metricdata.Histogram[float64]).DataPoints
	require.Len(t, runs, 1)
	assert.Equal(t, uint64(1), runs[0].Count)
	assert.GreaterOrEqual(t, runs[0].Sum, 0.002, "the run lasted as long as ok at least")
}

// TestPerRunHooks checks the hooks installed on one run through its
// context.
func TestPerRunHooks(t *testing.T) {
	h, exp, _, _ := setup(t)
	a := asynctool.New()
	defer a.Close()
	x := asynctool.NewWrapper("x", asynctooltest.Returns[int](1), 0)
	require.NoError(t, a.BeginWork(asynctool.WithRunHooks(context.Background(), h), 0, x))
	assert.Len(t, exp.GetSpans(), 2)
}

// TestTwoHookSetsKeepTheirOwnSpans: the hooks of an Async and those a
// run's context adds, from two calls of Hooks with two providers, shared
// one key for the run's state in its context. The second set's state hid
// the first's, so the first provider's run span never ended and its node
// span ended as a "suspended" attempt with status Error, while the second
// provider got two spans for the node. Each set's node spans, the
// zero-length one of a node that never ran too, are children of its own
// run span.
func TestTwoHookSetsKeepTheirOwnSpans(t *testing.T) {
	var recs [2]*tracetest.SpanRecorder
	var hooks [2]*asynctool.Hooks
	for i := range recs {
		recs[i] = tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recs[i]))
		t.Cleanup(func() { assert.NoError(t, tp.Shutdown(context.Background())) })
		hooks[i] = asynctoolotel.Hooks(tp, nil)
	}
	a := asynctool.New(asynctool.WithHooks(hooks[0]))
	x := asynctool.NewWrapper("x", asynctooltest.Returns[int](1), 0)
	bad := asynctool.NewWrapper("bad", asynctooltest.Fails[int, int](errDown), 0)
	asynctool.NewWrapper("never", asynctooltest.Returns[int](1), 0).Depend(bad, true)
	ctx := asynctool.WithRunHooks(context.Background(), hooks[1])
	require.NoError(t, a.BeginWork(ctx, time.Minute, x, bad))
	require.NoError(t, a.Close())

	for i, rec := range recs {
		assert.Len(t, rec.Started(), 4, "provider %d: a run span and three node spans", i)
		ended := map[string]sdktrace.ReadOnlySpan{}
		for _, s := range rec.Ended() {
			ended[s.Name()] = s
		}
		require.Len(t, ended, 4, "provider %d: every span ended", i)
		run, node := ended["asynctool.run"], ended["asynctool.node x"]
		require.NotNil(t, run, "provider %d", i)
		require.NotNil(t, node, "provider %d", i)
		assert.Equal(t, "success", attrs(node.Attributes())["asynctool.node.outcome"].AsString(), "provider %d", i)
		assert.Equal(t, codes.Unset, node.Status().Code, "provider %d", i)
		// never's span, zero-length, begins as the node ends, in a
		// context that holds the last set's run span.
		for _, id := range []string{"x", "bad", "never"} {
			s := ended["asynctool.node "+id]
			require.NotNil(t, s, "provider %d: %s", i, id)
			assert.Equal(t, run.SpanContext().SpanID(), s.Parent().SpanID(), "provider %d: %s nests under its own run span", i, id)
		}
	}
}

// TestHookSetsNestRunsUnderTheirOwnSpans: with several sets of hooks on
// a run (two of the Async's and a run's own, with three providers), each
// set's run span is a child of the caller's span, and a sub-run's is a
// child of that set's span of the node that started it. The second set's
// run span
// was a child of the first set's, a span of another provider, and each
// set's sub-run span a child of a span of the other set, so that neither
// provider's trace held the sub-run under its node. A run that a worker
// starts under a span of its own still nests under that span.
func TestHookSetsNestRunsUnderTheirOwnSpans(t *testing.T) {
	var recs [3]*tracetest.SpanRecorder
	var hooks [3]*asynctool.Hooks
	for i := range recs {
		recs[i] = tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recs[i]))
		t.Cleanup(func() { assert.NoError(t, tp.Shutdown(context.Background())) })
		hooks[i] = asynctoolotel.Hooks(tp, nil)
	}
	app := sdktrace.NewTracerProvider()
	t.Cleanup(func() { assert.NoError(t, app.Shutdown(context.Background())) })
	tracer := app.Tracer("app")

	a := asynctool.New(asynctool.WithHooks(hooks[0]), asynctool.WithHooks(hooks[1]))
	in := asynctool.NewWrapper("in", asynctooltest.Returns[int](1), 0)
	pl, err := asynctool.Compile(in)
	require.NoError(t, err)
	sp := asynctool.NewWrapper("sp", asynctool.SubPlan[int, int]{Plan: pl, Output: in.ValueIn}, 0)
	var clientSpan trace.SpanContext
	asynctool.NewWrapper("own", asynctooltest.Func(func(ctx context.Context, _ int) (int, error) {
		ctx, span := tracer.Start(ctx, "client")
		defer span.End()
		clientSpan = span.SpanContext()
		r, err := a.RunPlan(ctx, pl, time.Minute)
		if err == nil {
			r.Release()
		}
		return 2, err
	}), 0).Depend(sp, true)
	ctx, caller := tracer.Start(context.Background(), "request")
	require.NoError(t, a.BeginWork(asynctool.WithRunHooks(ctx, hooks[2]), time.Minute, sp))
	caller.End()
	require.NoError(t, a.Close())

	for i, rec := range recs {
		byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
		for _, s := range rec.Ended() {
			byID[s.SpanContext().SpanID()] = s
		}
		require.Len(t, byID, 7, "provider %d: 3 runs, sp, own and in twice", i)
		var top, sub, byWorker sdktrace.ReadOnlySpan
		for _, s := range byID {
			if s.Name() != "asynctool.run" {
				continue
			}
			switch p := s.Parent().SpanID(); {
			case p == caller.SpanContext().SpanID():
				top = s
			case p == clientSpan.SpanID():
				byWorker = s
			case byID[p] != nil && byID[p].Name() == "asynctool.node sp":
				sub = s
			default:
				t.Errorf("provider %d: a run span under %v, none of its own nor the caller's", i, p)
			}
		}
		require.NotNil(t, top, "provider %d: the run under the caller's span", i)
		require.NotNil(t, sub, "provider %d: the sub-run under its own span of sp", i)
		require.NotNil(t, byWorker, "provider %d: the worker's run under the worker's span", i)
		for _, s := range byID {
			if s.Name() == "asynctool.node in" {
				p := byID[s.Parent().SpanID()]
				require.NotNil(t, p, "provider %d: in nests under a span of its own", i)
				assert.Contains(t, []trace.SpanID{sub.SpanContext().SpanID(), byWorker.SpanContext().SpanID()}, p.SpanContext().SpanID(), "provider %d", i)
			}
		}
	}
}

// TestRunContextHoldsItsSpanAndOneValue: a run's context gets from one
// set of hooks its span and one value, the run's mark, which also holds
// the run's state; each is an allocation on every run. The state had a
// value of its own beside the mark.
func TestRunContextHoldsItsSpanAndOneValue(t *testing.T) {
	h := asynctoolotel.Hooks(tracenoop.NewTracerProvider(), metricnoop.NewMeterProvider())
	ctx := h.OnRunStart(context.Background(), asynctool.RunInfo{Nodes: 1})
	// The no-op tracer's Start adds one value: the span.
	assert.Equal(t, 2, strings.Count(fmt.Sprint(ctx), ".WithValue("), "values in %v", ctx)
}

// TestSameHooksOnAsyncAndRunTraceOnce: the hooks given to an Async and
// again to a run's context fired twice for every event; the run's first
// span never ended, the node got a second span, the first ended as a
// "suspended" attempt, and its outcome was counted twice.
func TestSameHooksOnAsyncAndRunTraceOnce(t *testing.T) {
	h, exp, reader, _ := setup(t)
	a := asynctool.New(asynctool.WithHooks(h))
	x := asynctool.NewWrapper("x", asynctooltest.Returns[int](1), 0)
	require.NoError(t, a.BeginWork(asynctool.WithRunHooks(context.Background(), h), time.Minute, x))
	require.NoError(t, a.Close())

	var names []string
	for _, s := range exp.GetSpans() {
		names = append(names, s.Name)
	}
	assert.ElementsMatch(t, []string{"asynctool.run", "asynctool.node x"}, names)
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name == "asynctool.node.outcomes" {
			dps := m.Data.(metricdata.Sum[int64]).DataPoints
			require.Len(t, dps, 1)
			assert.Equal(t, int64(1), dps[0].Value)
		}
	}
}

// TestNodeStartedAfterItsRunEndedEndsItsSpan: a cancellation that
// ends a node while its OnNodeStart hooks run (here held open by an
// earlier hook until the whole run has ended) made nodeStart store a span
// after nodeEnd and runEnd had gone by, and nothing ever ended it.
func TestNodeStartedAfterItsRunEndedEndsItsSpan(t *testing.T) {
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

// TestCallbackPanicIsNotAStoppedRun: a run whose every node ended in
// time but whose Result callback panicked (BeginWork returns the
// *CallbackPanicError) was counted in asynctool.run.duration with
// outcome "stopped", as if it had been cut short.
func TestCallbackPanicIsNotAStoppedRun(t *testing.T) {
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

// TestSuspendedAttemptSpanSaysItFailed: the span of an attempt that
// failed and suspended its node, then rerun by Resume, ended with status
// Unset and no outcome, so the trace showed no failure at all.
func TestSuspendedAttemptSpanSaysItFailed(t *testing.T) {
	h, exp, _, _ := setup(t)
	x := suspendsOnce()
	a := asynctool.New(asynctool.WithHooks(h))
	run, err := a.Start(context.Background(), time.Minute, x)
	require.NoError(t, err)
	<-run.Suspended()
	require.NoError(t, run.Resume("x", asynctool.Rerun()))
	require.NoError(t, run.Wait(context.Background()))
	require.NoError(t, a.Close())

	spans := nodeSpans(exp, "x")
	require.Len(t, spans, 2, "one span per attempt")
	first := attrs(spans[0].Attributes)
	assert.Equal(t, codes.Error, spans[0].Status.Code)
	assert.Equal(t, "suspended", first["asynctool.node.outcome"].AsString())
	assert.Equal(t, int64(1), first["asynctool.node.attempts"].AsInt64())
	last := attrs(spans[1].Attributes)
	assert.Equal(t, "success", last["asynctool.node.outcome"].AsString())
	assert.Equal(t, int64(2), last["asynctool.node.attempts"].AsInt64())
}

// TestSuspendedAttemptSpanKeepsItsNumber: the span of an attempt that
// left its node pending, ended when a Resume reruns the node, said it
// was the attempt before the rerun. A rerun whose start an earlier
// set's OnNodeStart hook ended with runtime.Goexit (the node failed, and
// was pending again, without the otel hook's start) came between: the
// span of attempt 1 said 2.
func TestSuspendedAttemptSpanKeepsItsNumber(t *testing.T) {
	h, exp, _, _ := setup(t)
	x := suspendsOnce()
	exits := &asynctool.Hooks{OnNodeStart: func(_ context.Context, ev asynctool.NodeEvent) context.Context {
		if ev.Attempt == 2 {
			runtime.Goexit()
		}
		return nil
	}}
	a := asynctool.New(asynctool.WithHooks(exits))
	run, err := a.Start(asynctool.WithRunHooks(context.Background(), h), time.Minute, x)
	require.NoError(t, err)
	t.Cleanup(run.Cancel)
	<-run.Suspended()
	require.NoError(t, run.Resume("x", asynctool.Rerun())) // attempt 2, ended by the hook
	select {
	case <-run.Suspended():
	case <-time.After(10 * time.Second):
		t.Fatal("the run did not stall again after x's second attempt")
	}
	require.NoError(t, run.Resume("x", asynctool.Rerun())) // attempt 3
	require.ErrorIs(t, run.Wait(context.Background()), asynctool.ErrGoexit)
	require.NoError(t, a.Close())

	got := map[string]int64{} // outcome -> attempt
	for _, s := range nodeSpans(exp, "x") {
		at := attrs(s.Attributes)
		got[at[asynctoolotel.KeyNodeOutcome].AsString()] = at[asynctoolotel.KeyNodeAttempts].AsInt64()
	}
	assert.Equal(t, map[string]int64{"suspended": 1, "success": 3}, got)
}

// TestSetTracingOnlyASubRunNestsItUnderTheWorkersSpan: a set of hooks
// that a worker adds for the run it starts (WithRunHooks on its ctx) has
// no span of the worker's node, so its run span is a child of the span
// the worker's context holds: the node span of the outer run's last set,
// whether one set or two traced the outer run. Looking past the outer
// run's marks for a span of its own would make it a root span, or a
// child of another set's sub-run span.
func TestSetTracingOnlyASubRunNestsItUnderTheWorkersSpan(t *testing.T) {
	for _, outer := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d sets on the outer run", outer), func(t *testing.T) {
			var recs [3]*tracetest.SpanRecorder
			var opts []asynctool.Option
			var only *asynctool.Hooks
			for i := range recs {
				recs[i] = tracetest.NewSpanRecorder()
				tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recs[i]))
				t.Cleanup(func() { assert.NoError(t, tp.Shutdown(context.Background())) })
				switch h := asynctoolotel.Hooks(tp, nil); {
				case i == 2:
					only = h
				case i < outer:
					opts = append(opts, asynctool.WithHooks(h))
				}
			}
			a := asynctool.New(opts...)
			in := asynctool.NewWrapper("in", asynctooltest.Returns[int](1), 0)
			pl, err := asynctool.Compile(in)
			require.NoError(t, err)
			var workerSpan trace.SpanContext
			w := asynctool.NewWrapper("w", asynctooltest.Func(func(ctx context.Context, _ int) (int, error) {
				workerSpan = trace.SpanContextFromContext(ctx)
				r, err := a.RunPlan(asynctool.WithRunHooks(ctx, only), pl, time.Minute)
				if err == nil {
					r.Release()
				}
				return 1, err
			}), 0)
			require.NoError(t, a.BeginWork(context.Background(), time.Minute, w))
			require.NoError(t, a.Close())

			require.True(t, workerSpan.IsValid(), "the worker's context holds its node's span")
			var runs []sdktrace.ReadOnlySpan
			for _, s := range recs[2].Ended() {
				if s.Name() == "asynctool.run" {
					runs = append(runs, s)
				}
			}
			require.Len(t, runs, 1, "the set traced the sub-run only")
			assert.Equal(t, workerSpan.SpanID(), runs[0].Parent().SpanID(), "the sub-run nests under the worker's span")
		})
	}
}

// TestRunStartedFromAHookNestsUnderTheRunSpan: the context a run's hooks
// receive (all but OnRunStart) holds the run's span, and a run started
// with it (here by an OnNodeEnd hook) is nested: its span is a child of
// that run span, as any run's is of the span of its context, though the
// same set of hooks put it there.
func TestRunStartedFromAHookNestsUnderTheRunSpan(t *testing.T) {
	h, exp, _, _ := setup(t)
	inner := asynctool.New(asynctool.WithHooks(h))
	y := asynctool.NewWrapper("y", asynctooltest.Returns[int](2), 0)
	var innerErr error
	starter := &asynctool.Hooks{OnNodeEnd: func(ctx context.Context, ev asynctool.NodeEvent) {
		if ev.ID == "x" {
			innerErr = inner.BeginWork(ctx, time.Minute, y)
		}
	}}
	a := asynctool.New(asynctool.WithHooks(h), asynctool.WithHooks(starter))
	x := asynctool.NewWrapper("x", asynctooltest.Returns[int](1), 0)
	require.NoError(t, a.BeginWork(context.Background(), time.Minute, x))
	require.NoError(t, a.Close())
	require.NoError(t, inner.Close())
	require.NoError(t, innerErr)

	var outer, nested tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name != "asynctool.run" {
			continue
		}
		if attrs(s.Attributes)[asynctoolotel.KeyRunNested].AsBool() {
			nested = s
		} else {
			outer = s
		}
	}
	require.True(t, outer.SpanContext.IsValid(), "the outer run's span")
	require.True(t, nested.SpanContext.IsValid(), "the hook's run is nested")
	assert.Equal(t, outer.SpanContext.SpanID(), nested.Parent.SpanID())
}

// TestWorkerErrorsWrappingEngineSentinelsAreFailures: a worker that
// returns ErrSkipped or ErrNotTaken (an upstream's error passed on), or
// an *UpstreamError of its own, has failed: the engine stores its error
// wrapped, so that only a node the engine skipped, did not take or
// failed from upstream has the sentinel itself, or the UpstreamError of
// a node that never ran. Its outcome is failed, not skipped, not_taken or
// upstream_failed, with status Error.
func TestWorkerErrorsWrappingEngineSentinelsAreFailures(t *testing.T) {
	for name, err := range map[string]error{
		"ErrSkipped":    asynctool.ErrSkipped,
		"ErrNotTaken":   asynctool.ErrNotTaken,
		"UpstreamError": &asynctool.UpstreamError{ID: "u", Err: errDown},
	} {
		t.Run(name, func(t *testing.T) {
			h, exp, _, _ := setup(t)
			a := asynctool.New(asynctool.WithHooks(h))
			x := asynctool.NewWrapper("x", asynctooltest.Fails[int, int](err), 0)
			require.NoError(t, a.BeginWork(context.Background(), time.Minute, x))
			require.NoError(t, a.Close())
			require.ErrorIs(t, x.Result().Err, err)

			for _, s := range exp.GetSpans() {
				if s.Name == "asynctool.run" {
					assert.Equal(t, int64(1), attrs(s.Attributes)[asynctoolotel.KeyRunFailed].AsInt64(), "x failed")
				}
			}
			spans := nodeSpans(exp, "x")
			require.Len(t, spans, 1)
			at := attrs(spans[0].Attributes)
			assert.Equal(t, "failed", at[asynctoolotel.KeyNodeOutcome].AsString())
			assert.True(t, at[asynctoolotel.KeyNodeRan].AsBool())
			assert.Equal(t, codes.Error, spans[0].Status.Code)
		})
	}
}

// TestHooksIgnoreNodeIndexesTheRunDoesNotHave: hooks called with the
// index of no node of the run (the engine gives none; a caller of the
// hooks' functions might) touch no node's state and do not panic.
func TestHooksIgnoreNodeIndexesTheRunDoesNotHave(t *testing.T) {
	h := asynctoolotel.Hooks(tracenoop.NewTracerProvider(), metricnoop.NewMeterProvider())
	ctx := h.OnRunStart(context.Background(), asynctool.RunInfo{Nodes: 2})
	for _, i := range []int{-1, 2} {
		ev := asynctool.NodeEvent{ID: "x", Index: i, Attempt: 1}
		assert.NotPanics(t, func() {
			h.OnNodeStart(ctx, ev)
			h.OnNodeRetry(ctx, ev)
			h.OnNodePending(ctx, ev)
			h.OnNodeEnd(ctx, ev)
		}, "index %d", i)
	}
	assert.NotPanics(t, func() { h.OnRunEnd(ctx, &asynctool.Report{}) })
}
