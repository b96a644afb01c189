package asynctool

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
)

// SubGraph is a worker that builds a graph each time it runs, from the
// node's param and upstreams, and runs it as one node of the outer graph:
// a fan-out whose width, or a sub-graph whose shape, is known only at run
// time, such as one RPC per item of a list an upstream returned. Its run
// shows in the outer run's [Report] as the node's [NodeReport.Sub]. For
// one call per item, [ForEach] builds the graph for you; for a shape fixed
// in advance, [SubPlan] runs a compiled plan and builds nothing per call.
//
// Build makes the graph of single-use wrappers ([NewWrapper],
// [WorkerWrapper.Depend] and their options), made anew by each call,
// since a wrapper runs once. Their run is the node's sub-run, as a
// SubPlan's: it runs on the outer run's [Async] under the node's context
// (the group deadline, the node's Timeout, a retry's AttemptTimeout, the
// outer run's cancellation), and the worker's goroutine runs its first
// nodes itself. Once it has ended, [Built.Output] gives the node's value,
// read from the wrappers (with [WorkerWrapper.Result]); a node of the
// graph that failed fails the SubGraph node only if Output says so.
//
// The node fails without calling Output when Build returns an error, when
// the graph does not compile (a duplicate id, a cycle, a wrapper that ran
// before: the error wraps the [*GraphError]), and in the cases that fail a
// SubPlan node: the sub-run was stopped, a callback or hook panicked in
// it, a node of it suspended, which cancels it, or user code of its nodes
// that the worker's goroutine ran ended that goroutine with
// runtime.Goexit ([ErrGoexit]). Each start of the
// worker (each attempt of a [RetryPolicy]) builds and runs a graph of its
// own; the report shows the last one.
//
// [Compile] and [Async.BeginWork] reject a node whose SubGraph has no
// Build ([ErrNilWorker]).
type SubGraph[P, R any] struct {
	// Build makes the graph and says how to read the node's value from
	// it. Its ctx is the node's, for calls Build itself makes.
	Build func(ctx context.Context, param P, all Wrappers) (Built[R], error)
}

// Built is the graph a [SubGraph]'s Build made.
type Built[R any] struct {
	// Starts are the graph's start nodes, as [Async.BeginWork] takes
	// them. With none, there is nothing to run: Output is called at once.
	Starts []Wrapper
	// Output gives the node's value and error once the graph has run. A
	// nil Output fails the node, without running the graph, with an error
	// wrapping [ErrNilWorker].
	Output func() (R, error)
	// limit, if above 0, is how many of the start nodes may work at
	// once (ForEach's Limit).
	limit int
	// budget, if above 0, bounds the sub-run, which running out of it
	// does not fail (ForEach's Budget).
	budget time.Duration
}

// workerProblem says what makes s unusable, for Compile (see
// checkedWorker).
func (s SubGraph[P, R]) workerProblem() (string, error) {
	if s.Build == nil {
		return "its SubGraph has no Build", ErrNilWorker
	}
	return "", nil
}

// Action builds the graph, runs it and reads the node's value from it.
func (s SubGraph[P, R]) Action(ctx context.Context, param P, all Wrappers) (v R, err error) {
	if why, err := s.workerProblem(); err != nil {
		return v, fmt.Errorf("%w: %s", err, why) // only if Compile was bypassed
	}
	if all.r == nil {
		return v, fmt.Errorf("asynctool: SubGraph called outside a run (its Wrappers are empty)")
	}
	g, err := s.Build(ctx, param, all)
	if err != nil {
		return v, fmt.Errorf("asynctool: SubGraph's Build: %w", err)
	}
	if g.Output == nil {
		return v, fmt.Errorf("%w: SubGraph's Build returned no Output", ErrNilWorker)
	}
	return runBuilt(ctx, all, g, "SubGraph's graph")
}

// runBuilt runs g, made for the node whose worker got all, as the node's
// sub-run under ctx, and returns its Output; what names g in errors.
func runBuilt[R any](ctx context.Context, all Wrappers, g Built[R], what string) (v R, err error) {
	if len(g.Starts) > 0 {
		var budget *BudgetError
		if g.budget > 0 {
			budget = &BudgetError{Budget: g.budget}
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeoutCause(ctx, g.budget, budget)
			defer cancel()
		}
		sub, err := all.r.a.compileSingleUse(g.Starts)
		if errors.Is(err, ErrReused) {
			// The likely mistakes: a Build that returns the wrappers of
			// an earlier call, or a Depend (in Build or a ForEach's Node)
			// on a node of the outer graph, which is running.
			return v, fmt.Errorf("asynctool: %s: %w (its nodes must be made anew by each call, and cannot depend on the outer graph's: read an outer node's result with the node's Wrappers, and pass it as a param)", what, err)
		}
		if err != nil {
			return v, fmt.Errorf("asynctool: %s: %w", what, err)
		}
		if g.limit > 0 && g.limit < len(g.Starts) {
			sub.lim = newLimiter(sub, g.limit, g.Starts)
		}
		sub.limit, sub.budget = g.limit, budget
		if _, err := runSub(ctx, all, sub, what); err != nil {
			return v, err
		}
	}
	return g.Output()
}

// ForEach is a worker that calls Worker once per item of a list known
// only at run time, concurrently, each call a node of a [SubGraph], and
// returns the items' results in the list's order: a fan-out of one RPC
// per item, shown item by item in the node's [NodeReport.Sub]. The item
// nodes' ids are their indexes, "0", "1", ..., unless ID names them, so
// item 2 of a node "prices" is "prices/2" in asynctooltest's assertions.
//
// The calls run on the outer run's [Async], whose pool bounds them
// ([WithMaxWorkers]), under the node's context. A call's Wrappers are the
// sub-run's, so it reads nothing of the outer graph: what it needs comes
// in its item. Each item's result is its node's: its value, or its
// default and error if it failed, timed out, panicked, or was stopped.
// A runtime.Goexit in an item's call fails that item with [ErrGoexit]
// too, but when the call ran on the ForEach worker's own goroutine, which
// runs items itself (the first, and on an idle pool often all of them:
// see [SubPlan]), it ends the worker: the node fails with ErrGoexit, and
// its sub-run is cancelled.
//
// With the zero Join, the node succeeds however its items ended, once they
// all have, and the caller reads their results. Two item policies (set by
// Node) end the items' sub-run instead, and fail the node unless its Join
// has decided first, as a node of a [SubGraph]'s graph does: an item under
// [PolicyEnd] that fails stops the other items with its [*EndError],
// which the node's error wraps (the outer run goes on), and an item that
// [PolicySuspend] leaves pending fails it once the other items have
// ended, since no [Run.Resume] reaches an item (give the ForEach node
// PolicySuspend, and a Rerun calls Items again). Another Join decides from
// the items as they end, as it would for a node whose upstreams they are,
// and the node returns as soon as it has decided: items still running are
// stopped (their error wraps [ErrRunEnded], see [WorkerWrapper.EndsRun]),
// and those not started never start: when the join succeeded, they end
// skipped ([ErrSkipped]: nothing needs them any more); when it failed,
// stopped as the running ones are. So [AllSucceeded]
// fails the node at the first failed item, with an error that wraps that
// item's, [AnySucceeded] returns at the first success, and [AtLeast] makes
// a quorum. A node its Join failed has its default value (the items'
// results are in its report). The report shows the join as a node of the
// sub-graph, "join".
//
// A ForEach node that its context ends (the group deadline, its own
// Timeout) ends as any node does, with its default value: the items that
// had arrived are in its report only. To go on with whatever arrived,
// bound the items rather than the node: Budget gives them a time in all,
// and Node a Default each, so that the node returns in time with every
// item's result (ExampleForEach_budget).
//
// In a durable graph (the durable module), a ForEach node's result is
// checkpointed as JSON: an item that failed or was stopped comes back on
// a replay with its Err as a [*StoredError], whose message is the same
// and which matches the same errors with errors.Is (see
// [WorkResult.MarshalJSON]), but not errors.As to its own type.
//
// [Compile] and [Async.BeginWork] reject a node whose ForEach has no Items
// or no Worker ([ErrNilWorker]), or a Join that no list of items fits
// ([ErrBadJoin]): AtLeast(n) with n < 1, a NamedSucceeded, When or
// WhenResult id that is no index, a When type the items' R cannot hold,
// a nil condition or CustomJoin(nil). A Join that only some lists fit
// (AtLeast(5) over 3 items, NamedSucceeded("7")) fails the node at run
// time with an error wrapping ErrBadJoin.
type ForEach[P, T, R any] struct {
	// Items returns the list, from the node's param and upstreams. An
	// error fails the node; an empty list gives an empty result, unless
	// the Join counts or names items (AnySucceeded, AtLeast,
	// NamedSucceeded, When, WhenResult), which too few items fail with
	// ErrBadJoin.
	Items func(ctx context.Context, param P, all Wrappers) ([]T, error)
	// Worker is called once per item, with the item as its param.
	Worker Worker[T, R]
	// ID, if not nil, names item i's node in reports and pictures, a SKU
	// rather than its index, for instance, and in a Join that names items.
	// The names must differ, and differ from "join" when Join is set: the
	// node fails with an error wrapping [ErrDuplicateID] otherwise. An
	// empty name fails it too, with an error that names the item and
	// wraps no sentinel. Hooks get the names as the items' node ids, and
	// the otel module's metrics label their series with them: names
	// from an open set (SKUs) make a series per name ever seen.
	ID func(i int, item T) string
	// Node, if not nil, sets up the node of item i before the run: its
	// Timeout, Retry, Default, OnFailure or Callback.
	Node func(i int, item T, n *WorkerWrapper[T, R])
	// Join, if not the zero Join, decides the node from its items' ends.
	Join Join
	// Limit, if above 0, is the most items that work at once, as
	// errgroup's SetLimit: a bulkhead for the service the items call,
	// tighter than the Async's pool. An item counts from its start to
	// its end, through its retries and their backoffs; an item's Timeout
	// counts from its start, not from the time it waits for its turn.
	// Items start in the list's order, each as soon as another ends (an
	// executor of the user's that runs tasks on the caller's goroutine,
	// which [Executor] allows, runs them one after another instead, in
	// another order). No goroutine waits for a turn: an item kept back
	// waits as a queued node does. A worker that ignores its context and
	// goes on after its item ended (its Timeout, the run's end) no longer
	// counts. The Limit is per start of the node: each attempt of a
	// RetryPolicy and each call of a [Hedged] ForEach runs items of its
	// own, under a Limit of its own. With 0, only the pool bounds the
	// calls; a negative Limit is refused by Compile and BeginWork
	// ([ErrBadLimit]).
	Limit int
	// Budget, if above 0, is the time the items have, from the moment
	// Items has returned and ID and Node, if set, have been called for
	// every item: when it runs out, the items still at work are
	// stopped and those not started never start, each with its default
	// and a [*BudgetError] (a timeout: it wraps
	// [context.DeadlineExceeded]), and the node goes on with every
	// item's result, as if they had ended so: an item under
	// PolicyContinue counts as done, as it would had its own Timeout
	// ended it (a success for the Join: AnySucceeded and AtLeast count
	// it, When's condition gets its default). With the zero Join or
	// [AllDone] it succeeds; another Join decides from them, and fails
	// the node if it has not decided (on the items as the Budget left
	// them, those that ended in the instant it ran out included). A
	// suspend in the items (an item's PolicySuspend, a custom join's
	// DecideSuspend) fails the node, as it does without a Budget.
	//
	// Budget is the way to keep whatever arrived when Limit makes items
	// wait for their turn, since an item's own Timeout counts from its
	// start. The node's own deadline (the group deadline, its Timeout, a
	// RetryPolicy's AttemptTimeout) still ends it with its default; a
	// Budget within it keeps the items. Each attempt of a node with a
	// RetryPolicy calls Items again, with a Budget of its own. A negative
	// Budget is refused by Compile and BeginWork ([ErrBadTimeout]).
	Budget time.Duration
}

// workerProblem says what makes f unusable, for Compile (see
// checkedWorker).
func (f ForEach[P, T, R]) workerProblem() (string, error) {
	switch {
	case f.Items == nil:
		return "its ForEach has no Items", ErrNilWorker
	case noWorker(f.Worker):
		return "its ForEach has no Worker", ErrNilWorker
	case f.Limit < 0:
		return fmt.Sprintf("its ForEach's Limit is %d", f.Limit), ErrBadLimit
	case f.Budget < 0:
		return fmt.Sprintf("its ForEach's Budget is %v", f.Budget), ErrBadTimeout
	}
	if c, ok := f.Worker.(checkedWorker); ok {
		if why, err := c.workerProblem(); err != nil {
			// The Worker's problem, not this ForEach's own (a ForEach of
			// ForEach nodes, whose Limit is negative, for instance).
			return "its ForEach's Worker is refused: " + why, err
		}
	}
	return f.joinProblem()
}

// joinProblem says why no list of items fits f's Join, for Compile: the
// join node's upstreams are the items, whose ids are their indexes and
// whose results are R's, so a Join that no number of them satisfies is
// known before the run, as it would be on a node whose upstreams are
// known. What depends on the number of items (AtLeast(n) with n above
// it, an index past the end) is for the run to find.
func (f ForEach[P, T, R]) joinProblem() (string, error) {
	j := f.Join
	isItem := func(id string) bool {
		if f.ID != nil {
			return true // names known only when the items are
		}
		i, err := strconv.Atoi(id)
		return err == nil && i >= 0 && strconv.Itoa(i) == id
	}
	if why := j.ownProblem(); why != "" {
		return "its ForEach's Join is " + why, ErrBadJoin
	}
	switch j.kind {
	case joinNamed:
		for _, id := range j.ids {
			if !isItem(id) {
				return fmt.Sprintf("its ForEach's Join names %q, which is no item's id (items are \"0\", \"1\", ...)", id), ErrBadJoin
			}
		}
	case joinCustom:
		if j.whenType == nil {
			return "", nil
		}
		fn := j.whenName()
		switch id, up := j.ids[0], reflect.TypeFor[R](); {
		case !isItem(id):
			return fmt.Sprintf("its ForEach's Join is %s(%q), which is no item's id (items are \"0\", \"1\", ...)", fn, id), ErrBadJoin
		case !canHold(up, j.whenType):
			return fmt.Sprintf("its ForEach's Join is %s(%q), which takes %v, and the items return %v", fn, id, j.whenType, up), ErrBadJoin
		}
	}
	return "", nil
}

// counted is n and the noun, one or many as n is 1 or not: "1 item",
// "0 items".
func counted(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// misfit says why j cannot be met by upstreams with these ids: it counts
// more successes than there are (AtLeast), or names an id that is none of
// them (NamedSucceeded, When, WhenResult); "" if it can. Such a join on a
// node with those upstreams is refused by Compile; with none, the others
// run. named says that the ids are the names a ForEach's ID gave, not
// indexes, which the error then lists: "0" is no item when ID names them.
func (j Join) misfit(ids []string, named bool) string {
	var wanted []string
	switch {
	case j.kind == joinAtLeast && j.n > len(ids):
		return fmt.Sprintf("%s cannot make %s", counted(len(ids), "item", "items"), counted(j.n, "success", "successes"))
	case j.kind == joinAny && len(ids) == 0:
		return "0 items cannot make 1 success" // as AtLeast(1)
	case j.kind == joinNamed, j.kind == joinCustom && j.whenType != nil:
		wanted = j.ids
	}
	for _, id := range wanted {
		if !slices.Contains(ids, id) {
			are := "are"
			if len(ids) == 1 {
				are = "is"
			}
			why := fmt.Sprintf("it names item %q, and there %s %s", id, are, counted(len(ids), "item", "items"))
			if named && len(ids) > 0 {
				why += ", which ID names " + quotedFew(ids, 5)
			}
			return why
		}
	}
	return ""
}

// quotedFew quotes the first n of ids, comma-separated, with "..." after
// them if there are more.
func quotedFew(ids []string, n int) string {
	var b strings.Builder
	for i, id := range ids {
		if i == n {
			b.WriteString(", ...")
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Quote(id))
	}
	return b.String()
}

// joinRanOutOfBudget reports whether join, the join node of a ForEach
// whose sub-run has ended, would have run but for the Budget, r being
// its result: the Budget's stop ended it as a timeout (r), after its
// join had decided to run (an item's end readied it, and it records that
// item), on the items as the Budget left them, since the stop leaves the
// join to decide (see runState.stop). A join that failed was ended from
// no item. The join's worker does nothing: the node goes on with the
// items.
func joinRanOutOfBudget(join *WorkerWrapper[struct{}, struct{}], r WorkResult[struct{}]) bool {
	if _, ok := r.Err.(*BudgetError); !ok || r.State != ResultTimeout {
		return false
	}
	sub := join.singleRun()
	return sub != nil && sub.nodes[join.idx].decidedBy() >= 0
}

// joinID is the id of the node that holds a ForEach's Join.
const joinID = "join"

// eachItemID is the id of the one node that stands for every item in a
// ForEach's static shape.
const eachItemID = "each item"

// staticSub is f's sub-run as far as it is known before Items returns,
// for reports (see staticWorker): one node, "each item", stands for the
// items, followed by the join node if f has a Join; the report carries
// f's Limit and Budget.
func (f ForEach[P, T, R]) staticSub() *Report {
	rep := &Report{Limit: f.Limit, Budget: f.Budget, Nodes: []NodeReport{
		{ID: eachItemID, Deps: []int{}, Must: []bool{}, Status: StatusWaiting},
	}}
	if f.Join.kind != joinDefault {
		rep.Nodes = append(rep.Nodes, NodeReport{ID: joinID, Index: 1, Deps: []int{0}, Must: []bool{true}, Status: StatusWaiting, Join: f.Join.String()})
	}
	return rep
}

// Action calls the worker once per item and returns their results.
func (f ForEach[P, T, R]) Action(ctx context.Context, param P, all Wrappers) ([]WorkResult[R], error) {
	if why, err := f.workerProblem(); err != nil {
		return nil, fmt.Errorf("%w: %s", err, why) // only if Compile was bypassed
	}
	if all.r == nil {
		return nil, fmt.Errorf("asynctool: ForEach called outside a run (its Wrappers are empty)")
	}
	g, err := f.build(ctx, param, all)
	if err != nil {
		return nil, err
	}
	v, err := runBuilt(ctx, all, g, "ForEach's items")
	if f.ID != nil && errors.Is(err, ErrDuplicateID) {
		err = namesClash(g.Starts, f.Join.kind != joinDefault, err)
	}
	return v, err
}

// namesClash explains err, an error wrapping ErrDuplicateID that a
// ForEach's items' sub-run ended with, by the names its ID gave: the
// GraphError alone speaks of two nodes, which the caller did not make.
// It returns err as it is if no two items share a name, nor one the
// join node's (an item's own error, which a Join's failure wraps).
func namesClash(starts []Wrapper, hasJoin bool, err error) error {
	seen := make(map[string]int, len(starts))
	for i, s := range starts {
		name := s.ID()
		if hasJoin && name == joinID {
			return fmt.Errorf("asynctool: ForEach's ID gave item %d the name %q, which its Join's node has: %w", i, name, err)
		}
		if j, ok := seen[name]; ok {
			return fmt.Errorf("asynctool: ForEach's ID gave items %d and %d the same name %q: %w", j, i, name, err)
		}
		seen[name] = i
	}
	return err
}

// build makes the graph of one node per item, and the join node if f has
// a Join.
func (f ForEach[P, T, R]) build(ctx context.Context, param P, all Wrappers) (Built[[]WorkResult[R]], error) {
	items, err := f.Items(ctx, param, all)
	if err != nil {
		return Built[[]WorkResult[R]]{}, fmt.Errorf("asynctool: ForEach's Items: %w", err)
	}
	ids := make([]string, len(items))
	for i, item := range items {
		if f.ID == nil {
			ids[i] = strconv.Itoa(i)
			continue
		}
		if ids[i] = f.ID(i, item); ids[i] == "" {
			// A path "prices/" would name no item in reports and asynctooltest.
			return Built[[]WorkResult[R]]{}, fmt.Errorf("asynctool: ForEach's ID gave item %d an empty name", i)
		}
	}
	if why := f.Join.misfit(ids, f.ID != nil); why != "" {
		// Too few items for the join (an empty list included): the join
		// node's Compile would refuse it, in words about a node the
		// caller did not make.
		return Built[[]WorkResult[R]]{Output: func() ([]WorkResult[R], error) {
			return nil, fmt.Errorf("asynctool: ForEach's join (%v): %w: %s", f.Join, ErrBadJoin, why)
		}}, nil
	}
	nodes := make([]*WorkerWrapper[T, R], len(items))
	starts := make([]Wrapper, len(items))
	for i, item := range items {
		n := NewWrapper(ids[i], f.Worker, item)
		if f.Node != nil {
			f.Node(i, item, n)
		}
		nodes[i], starts[i] = n, n
	}
	var join *WorkerWrapper[struct{}, struct{}]
	if f.Join.kind != joinDefault && len(items) > 0 {
		join = NewWrapper(joinID, WorkerFunc[struct{}, struct{}](func(context.Context, struct{}, Wrappers) (struct{}, error) {
			return struct{}{}, nil
		}), struct{}{}).Join(f.Join).EndsRun()
		for _, n := range nodes {
			join.Depend(n, true)
		}
	}
	return Built[[]WorkResult[R]]{Starts: starts, limit: f.Limit, budget: f.Budget, Output: func() ([]WorkResult[R], error) {
		if join != nil {
			if r := join.Result(); r.Err != nil && !joinRanOutOfBudget(join, r) {
				return nil, fmt.Errorf("asynctool: ForEach's join (%v): %w", f.Join, r.Err)
			}
		}
		res := make([]WorkResult[R], len(nodes))
		for i, n := range nodes {
			res[i] = n.Result()
		}
		return res, nil
	}}, nil
}
