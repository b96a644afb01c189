package asynctool_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/asynctool-go/asynctool"
)

// Hooks observe every run of an Async: here, an outcome per node, as a
// metric would count it, and a line per run. Hooks run on the run's own
// goroutines, several at once, so they must be quick and safe for
// concurrent use; OnRunEnd runs once every node has ended, before
// BeginWork returns.
func ExampleWithHooks() {
	var mu sync.Mutex
	outcomes := map[string]asynctool.ResultState{}
	hooks := &asynctool.Hooks{
		OnNodeEnd: func(_ context.Context, ev asynctool.NodeEvent) {
			mu.Lock()
			defer mu.Unlock()
			outcomes[ev.ID] = ev.Result
		},
		OnRunEnd: func(_ context.Context, rep *asynctool.Report) {
			fmt.Printf("run of %d nodes ended: %v\n", len(rep.Nodes), rep.Err())
		},
	}
	a := asynctool.New(asynctool.WithHooks(hooks))
	defer a.Close()

	user := asynctool.NewWrapper("user", asynctool.WorkerFunc[int, string](
		func(context.Context, int, asynctool.Wrappers) (string, error) { return "ada", nil }), 42)
	ads := asynctool.NewWrapper("ads", asynctool.WorkerFunc[int, string](
		func(context.Context, int, asynctool.Wrappers) (string, error) {
			return "", errors.New("ad server down")
		}), 42)
	_ = a.BeginWork(context.Background(), time.Second, user, ads)

	ids := make([]string, 0, len(outcomes))
	for id := range outcomes {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		fmt.Println(id, outcomes[id])
	}
	// Output:
	// run of 2 nodes ended: node "ads": ad server down
	// ads exception
	// user success
}

// WithRunHooks installs hooks on one run only, through its context: here,
// a request's own log of the nodes that failed, beside whatever hooks the
// Async has for every run.
func ExampleWithRunHooks() {
	a := asynctool.New()
	defer a.Close()

	var mu sync.Mutex
	var failed []string
	ctx := asynctool.WithRunHooks(context.Background(), &asynctool.Hooks{
		OnNodeEnd: func(_ context.Context, ev asynctool.NodeEvent) {
			if ev.Err != nil {
				mu.Lock()
				defer mu.Unlock()
				failed = append(failed, ev.ID+": "+ev.Reason)
			}
		},
	})
	quote := asynctool.NewWrapper("quote", asynctool.WorkerFunc[string, float64](
		func(context.Context, string, asynctool.Wrappers) (float64, error) {
			return 0, errors.New("no such symbol")
		}), "XYZ")
	asynctool.NewWrapper("chart", asynctool.WorkerFunc[string, string](
		func(context.Context, string, asynctool.Wrappers) (string, error) { return "<svg>", nil }), "XYZ").
		Depend(quote, true)
	_ = a.BeginWork(ctx, time.Second, quote)

	slices.Sort(failed)
	for _, f := range failed {
		fmt.Println(f)
	}
	// Output:
	// chart: must upstream "quote" failed
	// quote: worker failed
}

// A ForEach's items (and a SubPlan's or SubGraph's nodes) run as a run
// of their own, and hooks see it as one: OnRunEnd is called for it too,
// with its report, before the request's, and OnNodeEnd gets its items as
// nodes "0", "1", ... A hook that keeps the request's report, or labels a
// metric by node id, tells the runs apart by RunInfo.Nested, which
// OnRunStart puts in the context every later hook of its run receives.
func ExampleHooks_nested() {
	type nestedKey struct{}
	var mu sync.Mutex
	var ends []string
	a := asynctool.New(asynctool.WithHooks(&asynctool.Hooks{
		OnRunStart: func(ctx context.Context, info asynctool.RunInfo) context.Context {
			return context.WithValue(ctx, nestedKey{}, info.Nested)
		},
		OnRunEnd: func(ctx context.Context, rep *asynctool.Report) {
			nested, _ := ctx.Value(nestedKey{}).(bool)
			ids := make([]string, 0, len(rep.Nodes))
			for _, n := range rep.Nodes {
				ids = append(ids, n.ID)
			}
			mu.Lock()
			defer mu.Unlock()
			ends = append(ends, fmt.Sprintf("nested=%v %v", nested, ids))
		},
	}))
	defer a.Close()

	cart := asynctool.NewWrapper("cart", asynctool.WorkerFunc[int, []string](
		func(context.Context, int, asynctool.Wrappers) ([]string, error) { return []string{"book", "lamp"}, nil }), 42)
	asynctool.NewWrapper("prices", asynctool.ForEach[int, string, int]{
		Items: func(_ context.Context, _ int, all asynctool.Wrappers) ([]string, error) {
			c, err := cart.ResultFrom(all)
			return c.Value, err
		},
		Worker: asynctool.WorkerFunc[string, int](
			func(_ context.Context, sku string, _ asynctool.Wrappers) (int, error) { return 100 * len(sku), nil }),
	}, 42).Depend(cart, true)
	_ = a.BeginWork(context.Background(), time.Second, cart)

	for _, e := range ends {
		fmt.Println(e)
	}
	// Output:
	// nested=true [0 1]
	// nested=false [cart prices]
}

// Describe checks a graph as BeginWork would, without running it or
// using up its wrappers: a unit test of the code that builds a graph can
// catch a mistake, here a start node left out, and the same wrappers can
// then run.
func ExampleDescribe() {
	user := asynctool.NewWrapper("user", asynctool.WorkerFunc[int, string](
		func(context.Context, int, asynctool.Wrappers) (string, error) { return "ada", nil }), 42)
	recs := asynctool.NewWrapper("recs", asynctool.WorkerFunc[int, string](
		func(context.Context, int, asynctool.Wrappers) (string, error) { return "books", nil }), 42)
	page := asynctool.NewWrapper("page", asynctool.WorkerFunc[int, string](
		func(context.Context, int, asynctool.Wrappers) (string, error) { return "<html>", nil }), 42).
		Depend(user, true).
		Depend(recs, false)

	_, err := asynctool.Describe(user) // recs forgotten
	var ge *asynctool.GraphError
	fmt.Println(errors.Is(err, asynctool.ErrUnreachableDependency), errors.As(err, &ge) && ge.Nodes[0] == "page")

	rep, err := asynctool.Describe(user, recs)
	fmt.Println(err, len(rep.Nodes), rep.Nodes[2].ID, rep.Nodes[2].Deps, rep.Nodes[2].Must)

	a := asynctool.New()
	defer a.Close()
	fmt.Println(a.BeginWork(context.Background(), time.Second, user, recs), page.Result().Value)
	// Output:
	// true true
	// <nil> 3 page [0 1] [true false]
	// <nil> <html>
}

// Run.Report explains a run, node by node: how each ended and why, which
// upstream decided a node's join (by=), and the errors of the nodes that
// did not succeed. A run of BeginWork has none to read; start it with
// Start and Wait instead, which is what BeginWork does.
func ExampleRun_Report() {
	user := asynctool.NewWrapper("user", asynctool.WorkerFunc[int, string](
		func(context.Context, int, asynctool.Wrappers) (string, error) { return "ada", nil }), 42)
	recs := asynctool.NewWrapper("recs", asynctool.WorkerFunc[int, []string](
		func(context.Context, int, asynctool.Wrappers) ([]string, error) {
			return nil, errors.New("recs down")
		}), 42).
		Depend(user, true)
	asynctool.NewWrapper("page", asynctool.WorkerFunc[int, string](
		func(context.Context, int, asynctool.Wrappers) (string, error) { return "<html>", nil }), 42).
		Depend(user, true).
		Depend(recs, true)

	a := asynctool.New()
	defer a.Close()
	run, err := a.Start(context.Background(), time.Second, user)
	if err != nil {
		panic(err)
	}
	fmt.Println(run.Wait(context.Background()))
	rep := run.Report()
	fmt.Print(rep)
	fmt.Println(rep.Err())
	// Output:
	// <nil>
	// user: succeeded
	// recs: failed by=user (worker failed)
	// page: failed by=recs (must upstream "recs" failed)
	// node "recs": recs down
	// node "page": asynctool: upstream "recs" failed: recs down
}
