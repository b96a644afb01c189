// Package asynctoolotel reports asynctool runs to OpenTelemetry: a span
// per run, a span per node, and metrics of node durations and outcomes.
// It is built on [asynctool.Hooks] and lives in its own module, so that
// the core library keeps its three dependencies.
//
//	h := asynctoolotel.Hooks(tp, mp) // nil providers mean the global ones
//	a := asynctool.New(asynctool.WithHooks(h))
//
// # Spans
//
// Each run is a span named "asynctool.run", a child of the span in the
// context passed to BeginWork or Start. Each node is a span named
// "asynctool.node <id>" ("asynctool.node #3" for a node without an id:
// "#" and its index, as [asynctool.Report.String] and
// [asynctool.Run.Resume] name it), a child of the run's span. A node's
// span starts when its worker is about to run, and the worker's context
// carries it, so the spans of RPC clients called by the worker nest under
// their node. A node that never ran (it was skipped or not taken, an
// upstream it needed failed, or the deadline passed before it started)
// gets a zero-length span at the moment it ended, with
// asynctool.node.ran = false, so that every node of a run can be found in
// its trace.
//
// A run started from a worker's context, such as the sub-run of an
// [asynctool.SubPlan], [asynctool.SubGraph] or [asynctool.ForEach] node,
// is traced by the same hooks as a run of its own (the Async's hooks, and
// those of [asynctool.WithRunHooks], which its context inherits): its
// "asynctool.run" span is a child of the span of the node's attempt that
// started it, and its nodes' spans are children of it, so a retried
// SubPlan node shows one sub-run under each attempt, and a ForEach node's
// items (and its join) are node spans under its sub-run's.
//
// Node spans carry these attributes:
//
//	asynctool.node.id        the node's id
//	asynctool.node.index     its index in the run's report
//	asynctool.node.state     finish or error
//	asynctool.node.result    success, exception or timeout
//	asynctool.node.outcome   success, failed, upstream_failed, skipped, not_taken, timeout, run_ended, budget, retried or suspended
//	asynctool.node.ran       whether it started (asynctool.NodeReport.Ran:
//	                         true for a node whose Callback.Begin panicked,
//	                         whose worker was then not called)
//	asynctool.node.attempts  how many attempts it began
//	asynctool.node.reason    why it did not succeed, in words
//	asynctool.node.wait_ms   how long it waited for a goroutine once ready (first attempt's span only)
//	asynctool.node.retry_in_ms  the backoff before the next attempt (retried attempts only)
//
// A node that did not succeed has its error recorded on the span
// (RecordError) and the span's status set to Error; a node that had
// started and was then ended by the deadline, a cancellation or its own
// Timeout (while running, pending or between attempts) also gets a
// "timeout" event. A node not taken (its Err is [asynctool.ErrNotTaken]:
// a [asynctool.When] join or a custom join's DecideSkip chose another
// branch, or an upstream it needed was not taken) has not failed: its
// outcome is not_taken, its reason says why, and its span has no error
// and status Unset. Nor has a node
// stopped because the run had ended with its [asynctool.WorkerWrapper.EndsRun]
// nodes (its Err wraps [asynctool.ErrRunEnded]): its outcome is run_ended.
// Nor has an item of a [asynctool.ForEach] that its Budget stopped, or
// kept from starting (its Err is an [*asynctool.BudgetError]): its
// outcome is budget. A node that another node's [asynctool.PolicyEnd]
// failure stopped, running or before it started (its Err is an
// [*asynctool.EndError]), has failed, as the core reports it: its outcome
// is failed, its reason names the node that ended the run, and it gets
// no "timeout" event.
//
// A node with a retry policy gets one span per attempt, all with the same
// name. An attempt that failed and is retried ends its span with the
// attempt's error recorded, status Error, asynctool.node.attempts set to
// that attempt's number, asynctool.node.outcome = "retried" and
// asynctool.node.retry_in_ms the backoff before the next attempt. A node
// suspended by [asynctool.PolicySuspend] keeps its failed attempt's span
// open while it is pending, with a "pending" event (its
// asynctool.node.reason names the failure; a Resume that reruns the node
// before its OnNodePending hooks have run leaves the span without one,
// and the rerun's span is not marked); if Resume reruns it, that
// span ends when the rerun starts, with status Error,
// asynctool.node.outcome = "suspended" and the attempt's number. (A node
// of a SubPlan's, SubGraph's or ForEach's sub-run, which no Resume
// reaches, gets no "pending" event: see [asynctool.Hooks].OnNodePending.)
// The last attempt's span carries the node's outcome, as above. The run's
// span carries asynctool.run.nodes, asynctool.run.deadline (the group
// deadline, RFC 3339, when the run has one), asynctool.run.nested (true
// for a run started from inside a worker, a SubPlan's, SubGraph's or
// ForEach's sub-run for one, whose span is a child of that worker's
// node's, or of a span the worker started), asynctool.run.failed (the
// number of nodes that did not succeed, not counting those not taken or
// stopped by the run's end or a Budget) and, if the run has an error
// (the one BeginWork returns: it was cut short, or a callback or hook
// panicked), that error, recorded, with status Error. A
// ForEach's sub-run also carries asynctool.run.limit and
// asynctool.run.budget_ms, its Limit and Budget, when it has them; one
// that its Budget stopped gets a "budget" event, not status Error.
//
// # Metrics
//
//	asynctool.node.duration  histogram, seconds, of every node that ran,
//	                         by asynctool.node.id and asynctool.node.outcome,
//	                         without the time it was pending, waiting for
//	                         a Resume (asynctool.NodeEvent.Pending): a
//	                         person's wait is not the node's latency
//	asynctool.node.outcomes  counter of ended nodes, by the same attributes
//	asynctool.node.pending   counter of nodes that became pending
//	                         (asynctool.Hooks.OnNodePending), by
//	                         asynctool.node.id: the one to alert on
//	                         (a node of a sub-run, which no Resume
//	                         reaches, is not counted: its SubPlan,
//	                         SubGraph or ForEach node fails instead)
//	asynctool.run.duration   histogram, seconds, of every run, by
//	                         asynctool.run.outcome (ok; stopped: cut
//	                         short by its deadline, a cancellation or
//	                         PolicyEnd, a callback's panic is not; or
//	                         budget: a ForEach's sub-run its Budget
//	                         stopped)
//
// Node ids are metric attributes: keep them a fixed set per graph, not
// per-request values. A node without an id is recorded as "#" and its
// index ("#3"), as it is named in reports, so that each is a series of
// its own and an alert on asynctool.node.pending names the node to
// resume; its spans' asynctool.node.id stays empty (they carry
// asynctool.node.index). An id that is not UTF-8 is quoted
// (strconv.Quote), in span names and in asynctool.node.id, spans' and
// metrics', as [asynctool.Report.String] shows it: OTLP carries only
// UTF-8 strings, and its exporter drops a whole batch that holds another.
// A sub-run's nodes are recorded under their own ids, and the sub-run
// itself in asynctool.run.duration, as any run. So a ForEach's items are
// series of their own: named by its ID (a SKU, say), a series per name
// ever seen; without one, "0", "1", ..., series that the items of every
// ForEach share, whatever they call, with each other and with any node
// whose id is "0".
package asynctoolotel

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/asynctool-go/asynctool"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the tracer and meter.
const ScopeName = "github.com/asynctool-go/asynctool/otel"

// Attribute keys, as listed in the package documentation.
const (
	KeyNodeID       = attribute.Key("asynctool.node.id")
	KeyNodeIndex    = attribute.Key("asynctool.node.index")
	KeyNodeState    = attribute.Key("asynctool.node.state")
	KeyNodeResult   = attribute.Key("asynctool.node.result")
	KeyNodeOutcome  = attribute.Key("asynctool.node.outcome")
	KeyNodeRan      = attribute.Key("asynctool.node.ran")
	KeyNodeAttempts = attribute.Key("asynctool.node.attempts")
	KeyNodeReason   = attribute.Key("asynctool.node.reason")
	KeyNodeWaitMS   = attribute.Key("asynctool.node.wait_ms")
	KeyNodeRetryMS  = attribute.Key("asynctool.node.retry_in_ms")
	KeyRunNodes     = attribute.Key("asynctool.run.nodes")
	KeyRunDeadline  = attribute.Key("asynctool.run.deadline")
	KeyRunNested    = attribute.Key("asynctool.run.nested")
	KeyRunFailed    = attribute.Key("asynctool.run.failed")
	KeyRunOutcome   = attribute.Key("asynctool.run.outcome")
	KeyRunLimit     = attribute.Key("asynctool.run.limit")
	KeyRunBudgetMS  = attribute.Key("asynctool.run.budget_ms")
)

// instruments are the tracer and meters shared by every run of the hooks.
type instruments struct {
	tracer   trace.Tracer
	duration metric.Float64Histogram
	outcomes metric.Int64Counter
	runDur   metric.Float64Histogram
	pending  metric.Int64Counter
}

// runState is one run's spans. It lives in the run's context, as its
// mark's (see state), since the hooks are shared by every run of an
// Async.
type runState struct {
	span  trace.Span
	start time.Time
	mark  spanMark // span's, in the run's context
	mu    sync.Mutex
	nodes []nodeSpan // by node index, RunInfo.Nodes of them
}

// spanMark records, in a context, a span that hooks of this package put
// there: the run span of a runStart, or the node span of a nodeStart that
// found another set's span in its context. A set's runStart reads the
// marks to find its own parent under the spans of the other sets (see
// runParent), and its other hooks read them to find their run's state.
type spanMark struct {
	span  trace.Span   // the span put in the context
	under trace.Span   // a run span's: the span the context had before it
	prev  *spanMark    // the mark the context had before this one
	in    *instruments // the set of hooks that put it
	st    *runState    // a run span's: the run's state; nil for a node span
}

// markKey is the context key of the latest spanMark, shared by every set
// of hooks.
type markKey struct{}

// nodeSpan is one node's part of a run's state.
type nodeSpan struct {
	span    trace.Span // the running attempt's span; nil when none runs
	attempt int        // the attempt span belongs to
	ended   bool       // OnNodeEnd has run for the node
}

// node returns node i's state, or nil for an index the run does not have
// (the engine gives none); st.mu is held.
func (st *runState) node(i int) *nodeSpan {
	if i < 0 || i >= len(st.nodes) {
		return nil
	}
	return &st.nodes[i]
}

// take returns node i's running span, if any, and forgets it; st.mu is
// held.
func (st *runState) take(i int) trace.Span {
	n := st.node(i)
	if n == nil {
		return nil
	}
	span := n.span
	n.span = nil
	return span
}

// state returns the state that in's runStart gave ctx's run, nil if
// none: that of in's latest run mark. Several sets of hooks on one run
// (an Async's and a run's own, with different providers) each keep their
// own spans. The run's mark is its only value in the context, so that a
// run costs one context value per set.
func (in *instruments) state(ctx context.Context) *runState {
	for m := markOf(ctx); m != nil; m = m.prev {
		if m.st != nil && m.in == in {
			return m.st
		}
	}
	return nil
}

// Hooks returns hooks that trace every run with tp and record metrics with
// mp; a nil provider means the global one (otel.GetTracerProvider,
// otel.GetMeterProvider), whether it is a nil interface or holds a nil
// pointer (a *sdktrace.TracerProvider variable never set). Install them
// with [asynctool.WithHooks] or, for one run, [asynctool.WithRunHooks].
// The hooks are safe for concurrent use by any number of runs. The hooks
// of several calls (an Async's and a run's, with different providers) may
// observe one run: each call's keep their own run and node spans, the
// node spans children of their own run span, the run span a child of
// the caller's span or, for a sub-run, of their own span of the node
// that started it (or of a span that the worker, or an OnNodeStart hook
// after theirs, started since). Another set's OnRunStart, called after
// theirs, that returns a context not derived from its own drops the
// run's state from the context: their node spans and the run's metrics
// (all but asynctool.node.pending) are then not recorded, and their run
// span never ends. Errors creating the
// instruments go to otel.Handle. A panic of the SDK's (a span
// processor's, for one) is a panic of the hook that called it, which the
// run reports as any hook's ([asynctool.CallbackPanicError]).
func Hooks(tp trace.TracerProvider, mp metric.MeterProvider) *asynctool.Hooks {
	if isNil(tp) {
		tp = otel.GetTracerProvider()
	}
	if isNil(mp) {
		mp = otel.GetMeterProvider()
	}
	meter := mp.Meter(ScopeName)
	in := &instruments{tracer: tp.Tracer(ScopeName)}
	var err1, err2, err3 error
	in.duration, err1 = meter.Float64Histogram("asynctool.node.duration",
		metric.WithUnit("s"), metric.WithDescription("How long each node's worker ran."))
	in.outcomes, err2 = meter.Int64Counter("asynctool.node.outcomes",
		metric.WithUnit("{node}"), metric.WithDescription("Nodes ended, by outcome."))
	in.runDur, err3 = meter.Float64Histogram("asynctool.run.duration",
		metric.WithUnit("s"), metric.WithDescription("How long each run took."))
	var err4 error
	in.pending, err4 = meter.Int64Counter("asynctool.node.pending",
		metric.WithUnit("{node}"), metric.WithDescription("Nodes that became pending, to wait for Resume."))
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		otel.Handle(err)
	}
	return &asynctool.Hooks{
		OnRunStart:    in.runStart,
		OnNodeStart:   in.nodeStart,
		OnNodeEnd:     in.nodeEnd,
		OnNodeRetry:   in.nodeRetry,
		OnNodePending: in.nodePending,
		OnRunEnd:      in.runEnd,
	}
}

// isNil reports whether p, a provider, is nil or holds a nil pointer,
// whose methods would dereference it.
func isNil(p any) bool {
	if p == nil {
		return true
	}
	v := reflect.ValueOf(p)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

func (in *instruments) runStart(ctx context.Context, info asynctool.RunInfo) context.Context {
	attrs := []attribute.KeyValue{KeyRunNodes.Int(info.Nodes)}
	if !info.Deadline.IsZero() {
		attrs = append(attrs, KeyRunDeadline.String(info.Deadline.Format(time.RFC3339Nano)))
	}
	if info.Nested {
		attrs = append(attrs, KeyRunNested.Bool(true))
	}
	under, prev := trace.SpanFromContext(ctx), markOf(ctx)
	if parent, moved := in.runParent(under, prev); moved {
		ctx = trace.ContextWithSpan(ctx, parent)
	}
	ctx, span := in.tracer.Start(ctx, "asynctool.run", trace.WithAttributes(attrs...))
	st := &runState{span: span, start: time.Now(), nodes: make([]nodeSpan, info.Nodes)}
	st.mark = spanMark{span: span, under: under, prev: prev, in: in, st: st}
	return context.WithValue(ctx, markKey{}, &st.mark)
}

// markOf returns the latest spanMark in ctx, nil if none.
func markOf(ctx context.Context) *spanMark {
	m, _ := ctx.Value(markKey{}).(*spanMark)
	return m
}

// runParent returns the parent of in's span of a run started with a
// context whose span is cur and whose latest mark is m, and whether it
// is not cur: it is cur, unless another set of hooks put cur there.
// Another set's run span of the same run start gives way to the span it
// was started under; a node span that a set put over another set's, in
// a worker's context, gives way to in's own span of that node, so that
// each set's sub-run nests under its own node span. A span the worker or
// a hook started since is no mark's, and stays the parent. (Spans are
// compared by their SpanContext, never with ==, which panics on a span
// not sampled.)
func (in *instruments) runParent(cur trace.Span, m *spanMark) (trace.Span, bool) {
	moved := false
	for m != nil && m.st != nil && m.in != in && m.span.SpanContext().Equal(cur.SpanContext()) {
		cur, m, moved = m.under, m.prev, true
	}
	if m == nil || m.st != nil || !m.span.SpanContext().Equal(cur.SpanContext()) {
		return cur, moved
	}
	for ; m != nil && m.st == nil; m = m.prev {
		if m.in == in {
			return m.span, true
		}
	}
	return cur, moved
}

func (in *instruments) nodeStart(ctx context.Context, ev asynctool.NodeEvent) context.Context {
	st := in.state(ctx)
	if st == nil {
		return ctx
	}
	ctx, old, oldAttempt := in.startNode(ctx, st, ev)
	if old != nil {
		// An earlier attempt that nodeRetry did not end: it failed, the
		// node was suspended, and Resume reruns it now. It is the one
		// before this, unless an attempt in between had no span (a hook
		// of an earlier set ended its start with runtime.Goexit).
		old.SetAttributes(
			KeyNodeOutcome.String("suspended"),
			KeyNodeRan.Bool(true),
			KeyNodeAttempts.Int(oldAttempt),
		)
		old.SetStatus(codes.Error, "failed and suspended; rerun by Resume")
		old.End()
	}
	return ctx
}

// startNode starts the span of the node's attempt, unless the node has
// ended, and returns the worker's context and the span of an earlier
// attempt that it replaces, if any, with that attempt's number.
//
// The span is started under st.mu, so that nodeEnd, which takes it,
// comes either before (and the node gets no second span) or after (and
// ends this one with the node's outcome). The lock is released by a
// defer: a span processor that panics in OnStart makes the hook panic,
// which the run reports, and must not leave the lock held, for the
// node's OnNodeEnd would wait on it for ever.
func (in *instruments) startNode(ctx context.Context, st *runState, ev asynctool.NodeEvent) (context.Context, trace.Span, int) {
	st.mu.Lock()
	defer st.mu.Unlock()
	n := st.node(ev.Index)
	if n == nil || n.ended {
		// The deadline, a cancellation or the run's end ended the node
		// while this hook was on its way: nodeEnd has been, and gave the
		// node its span (zero-length, as a node that never ran). A second
		// span, which no one would give an outcome, is left out.
		return ctx, nil, 0
	}
	startAttrs := []attribute.KeyValue{KeyNodeID.String(idText(ev.ID)), KeyNodeIndex.Int(ev.Index)}
	if ev.Attempt <= 1 {
		// The core measures the wait for a goroutine at the first
		// start: a later attempt's event has none (the wait before it
		// is the backoff, retry_in_ms on the attempt's span before).
		startAttrs = append(startAttrs, KeyNodeWaitMS.Float64(float64(ev.Wait)/float64(time.Millisecond)))
	}
	foreign := !trace.SpanContextFromContext(ctx).Equal(st.span.SpanContext())
	var prev *spanMark
	if foreign {
		// Another set of hooks on the run put its own span in ctx: the
		// node's span is still a child of this set's run span. (Spans
		// are not compared with !=: a span not sampled is a struct that
		// the comparison panics on.)
		prev = markOf(ctx)
		ctx = trace.ContextWithSpan(ctx, st.span)
	}
	ctx, span := in.tracer.Start(ctx, spanName(ev), trace.WithAttributes(startAttrs...))
	if foreign {
		// The worker's context ends up with the last set's node span: a
		// mark lets this set's runStart of a sub-run find its own.
		ctx = context.WithValue(ctx, markKey{}, &spanMark{span: span, prev: prev, in: in})
	}
	old, oldAttempt := n.span, n.attempt
	n.span, n.attempt = span, ev.Attempt
	return ctx, old, oldAttempt
}

// nodeName is node ev's name in span names and in metrics'
// asynctool.node.id: its id (see idText), or "#" and its index for a node
// without an id, as the core's reports and Run.Resume name it, so that
// such nodes, which metrics cannot tell apart by index, are series of
// their own.
func nodeName(ev asynctool.NodeEvent) string {
	if ev.ID == "" {
		return "#" + strconv.Itoa(ev.Index)
	}
	return idText(ev.ID)
}

// idText is id as spans and metrics carry it: as it is, or quoted if it
// is not UTF-8, as Report.String shows it. OTLP carries only UTF-8
// strings: its exporter fails a whole batch that holds another.
func idText(id string) string {
	if utf8.ValidString(id) {
		return id
	}
	return strconv.Quote(id)
}

// spanName is the name of node ev's spans.
func spanName(ev asynctool.NodeEvent) string { return "asynctool.node " + nodeName(ev) }

// nodeRetry ends the span of an attempt that failed and will be retried,
// with the attempt's error; the next attempt starts a span of its own.
func (in *instruments) nodeRetry(ctx context.Context, ev asynctool.NodeEvent) {
	st := in.state(ctx)
	if st == nil {
		return
	}
	st.mu.Lock()
	span := st.take(ev.Index)
	st.mu.Unlock()
	if span == nil {
		return
	}
	now := time.Now()
	span.SetAttributes(
		KeyNodeOutcome.String("retried"),
		KeyNodeRan.Bool(true),
		KeyNodeAttempts.Int(ev.Attempt),
		KeyNodeRetryMS.Float64(float64(ev.Wait)/float64(time.Millisecond)),
	)
	if ev.Err != nil {
		span.RecordError(ev.Err, trace.WithTimestamp(now))
		span.SetStatus(codes.Error, ev.Err.Error())
	}
	span.End(trace.WithTimestamp(now))
}

// nodePending counts a node that became pending and marks the span of
// its failed attempt, which stays open while it waits (see nodeStart),
// with a "pending" event. A node its custom join suspended has no span
// yet: it is counted only. The node is resumable before its hooks run:
// a span of a later attempt, which a Rerun started meanwhile, is not
// marked.
func (in *instruments) nodePending(ctx context.Context, ev asynctool.NodeEvent) {
	in.pending.Add(ctx, 1, metric.WithAttributes(KeyNodeID.String(nodeName(ev))))
	st := in.state(ctx)
	if st == nil {
		return
	}
	st.mu.Lock()
	var span trace.Span
	if n := st.node(ev.Index); n != nil && n.attempt == ev.Attempt {
		span = n.span
	}
	st.mu.Unlock()
	if span != nil {
		span.AddEvent("pending", trace.WithAttributes(KeyNodeReason.String(ev.Reason)))
	}
}

// outcome names how a node ended, for spans and metrics.
func outcome(ev asynctool.NodeEvent) string {
	var up *asynctool.UpstreamError
	var be *asynctool.BudgetError
	switch {
	case ev.Result == asynctool.ResultSuccess:
		return "success"
	case ev.Result == asynctool.ResultTimeout && errors.Is(ev.Err, asynctool.ErrRunEnded):
		return "run_ended"
	case ev.Result == asynctool.ResultTimeout && errors.As(ev.Err, &be):
		return "budget"
	case ev.Result == asynctool.ResultTimeout:
		return "timeout"
	case ev.Err == asynctool.ErrSkipped: // not errors.Is: a worker's error may wrap a skipped upstream's
		return "skipped"
	case ev.Err == asynctool.ErrNotTaken: // likewise: the sentinel itself, as the core stores it
		return "not_taken"
	case ev.Attempt == 0 && errors.As(ev.Err, &up):
		return "upstream_failed"
	}
	return "failed"
}

func (in *instruments) nodeEnd(ctx context.Context, ev asynctool.NodeEvent) {
	st := in.state(ctx)
	if st == nil {
		return
	}
	now := time.Now()
	st.mu.Lock()
	span := st.take(ev.Index)
	if n := st.node(ev.Index); n != nil {
		n.ended = true
	}
	st.mu.Unlock()
	ran, out := ev.Attempt > 0, outcome(ev)
	// The metrics before any span starts or ends: a span processor may
	// panic in either (a syncer's exporter as a span ends), and the
	// hook's panic, which the run reports, must not cost the node its
	// outcome.
	set := metric.WithAttributes(KeyNodeID.String(nodeName(ev)), KeyNodeOutcome.String(out))
	if ran {
		in.duration.Record(ctx, (ev.Duration - ev.Pending).Seconds(), set)
	}
	in.outcomes.Add(ctx, 1, set)
	if span == nil {
		// Never ran, or its start's span never began: a zero-length
		// span, so that the node is in the trace.
		_, span = in.tracer.Start(trace.ContextWithSpan(ctx, st.span), spanName(ev),
			trace.WithTimestamp(now), trace.WithAttributes(KeyNodeID.String(idText(ev.ID)), KeyNodeIndex.Int(ev.Index)))
	}
	attrs := []attribute.KeyValue{
		KeyNodeState.String(ev.State.String()),
		KeyNodeResult.String(ev.Result.String()),
		KeyNodeOutcome.String(out),
		KeyNodeRan.Bool(ran),
		KeyNodeAttempts.Int(ev.Attempt),
	}
	if ev.Reason != "" {
		attrs = append(attrs, KeyNodeReason.String(ev.Reason))
	}
	span.SetAttributes(attrs...)
	if ev.Err != nil && out != "not_taken" && out != "run_ended" && out != "budget" {
		if ran && ev.Result == asynctool.ResultTimeout {
			span.AddEvent("timeout", trace.WithTimestamp(now))
		}
		span.RecordError(ev.Err, trace.WithTimestamp(now))
		span.SetStatus(codes.Error, ev.Reason)
	}
	span.End(trace.WithTimestamp(now))
}

// cutShort reports whether a run's error says it was stopped before every
// node ended: the run's error joins that cause, if any, with the panics of
// callbacks and hooks, which do not stop a run.
func cutShort(err error) bool {
	return slices.ContainsFunc(runErrParts(err), func(e error) bool { return !isCallbackPanic(e) })
}

// budgetRanOut reports whether a run's error says that a ForEach's
// Budget stopped it, and nothing else: no callback or hook panicked.
func budgetRanOut(err error) bool {
	var be *asynctool.BudgetError
	return errors.As(err, &be) && !slices.ContainsFunc(runErrParts(err), isCallbackPanic)
}

// isCallbackPanic reports whether e, one of the errors a run's error
// joins, is a callback's or hook's panic.
func isCallbackPanic(e error) bool {
	_, panicked := e.(*asynctool.CallbackPanicError)
	return panicked
}

// runErrParts returns the errors a run's error joins (see cutShort),
// joins within it flattened.
func runErrParts(err error) []error {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var parts []error
	for _, e := range j.Unwrap() {
		parts = append(parts, runErrParts(e)...)
	}
	return parts
}

func (in *instruments) runEnd(ctx context.Context, rep *asynctool.Report) {
	st := in.state(ctx)
	if st == nil {
		return
	}
	failed := 0
	for i := range rep.Nodes {
		// A branch not taken is not a failure: counting it would make
		// every switch report failures.
		n := &rep.Nodes[i]
		notTaken := n.Err == asynctool.ErrNotTaken && n.Result == asynctool.ResultException
		// Nor is a node stopped because the run had ended (EndsRun), or
		// by its ForEach's Budget.
		var be *asynctool.BudgetError
		stopped := n.Result == asynctool.ResultTimeout && (errors.Is(n.Err, asynctool.ErrRunEnded) || errors.As(n.Err, &be))
		if n.State != asynctool.StateFinish && !notTaken && !stopped {
			failed++
		}
	}
	st.span.SetAttributes(KeyRunFailed.Int(failed))
	if rep.Limit > 0 {
		st.span.SetAttributes(KeyRunLimit.Int(rep.Limit))
	}
	if rep.Budget > 0 {
		st.span.SetAttributes(KeyRunBudgetMS.Float64(float64(rep.Budget) / float64(time.Millisecond)))
	}
	outcome := "ok"
	switch {
	case rep.RunErr == nil:
	case budgetRanOut(rep.RunErr):
		// The ForEach goes on with what arrived: the Budget did its job.
		outcome = "budget"
		st.span.AddEvent("budget", trace.WithAttributes(attribute.String("error", rep.RunErr.Error())))
	default:
		if cutShort(rep.RunErr) {
			outcome = "stopped"
		}
		st.span.RecordError(rep.RunErr)
		st.span.SetStatus(codes.Error, rep.RunErr.Error())
	}
	end := time.Now()
	if !rep.End.IsZero() {
		end = rep.End
	}
	// The metric before any span ends (see nodeEnd).
	in.runDur.Record(ctx, end.Sub(st.start).Seconds(), metric.WithAttributes(KeyRunOutcome.String(outcome)))
	// Spans of nodes still open (the set's OnNodeEnd was not called for
	// them: a user's copy of the hooks left it out, for one) end with the
	// run, so that none leaks; outside the lock, which
	// a panicking span processor must not leave held. Each End is
	// deferred, the run span's last, so that one whose processor panics
	// leaves none of the others open.
	defer st.span.End(trace.WithTimestamp(end))
	st.mu.Lock()
	var open []trace.Span
	for i := range st.nodes {
		if span := st.take(i); span != nil {
			open = append(open, span)
		}
	}
	st.mu.Unlock()
	for _, span := range open {
		defer span.End()
	}
}
