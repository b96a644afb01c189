package asynctool_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/asynctool-go/asynctool"
)

type User struct{ Name string }
type Cart struct{ Items int }

// The quick start: two RPCs in parallel, a third node that needs both,
// one group deadline.
func Example() {
	fetchUser := asynctool.WorkerFunc[int64, *User](func(ctx context.Context, uid int64, _ asynctool.Wrappers) (*User, error) {
		return &User{Name: "ada"}, nil // an RPC, in real life
	})
	fetchCart := asynctool.WorkerFunc[int64, *Cart](func(ctx context.Context, uid int64, _ asynctool.Wrappers) (*Cart, error) {
		return &Cart{Items: 3}, nil
	})

	user := asynctool.NewWrapper("user", fetchUser, 42)
	cart := asynctool.NewWrapper("cart", fetchCart, 42)
	page := asynctool.NewWrapper("page", asynctool.WorkerFunc[int64, string](
		func(ctx context.Context, uid int64, all asynctool.Wrappers) (string, error) {
			// Typed by the compiler; the only error is a node not in this
			// run, and must upstreams have succeeded before page runs.
			u, _ := user.ResultFrom(all)
			c, _ := cart.ResultFrom(all)
			return fmt.Sprintf("%s has %d items", u.Value.Name, c.Value.Items), nil
		}), 42).
		Depend(user, true). // must: page needs user
		Depend(cart, true)  // must: page needs cart

	a := asynctool.New()
	defer a.Close()
	err := a.BeginWork(context.Background(), time.Second, user, cart)

	fmt.Println(err)
	fmt.Println(page.Result().Value)
	// Output:
	// <nil>
	// ada has 3 items
}

// A slow dependency with a fallback: the group deadline ends it with its
// default value, and BeginWork says the run was cut short.
func ExampleAsync_BeginWork_deadline() {
	ads := asynctool.NewWrapper("ads", asynctool.WorkerFunc[int64, []string](
		func(ctx context.Context, uid int64, _ asynctool.Wrappers) ([]string, error) {
			<-ctx.Done() // a very slow ad server
			return nil, ctx.Err()
		}), 42).
		Default([]string{"house ad"})

	a := asynctool.New()
	defer a.Close()
	err := a.BeginWork(context.Background(), 10*time.Millisecond, ads)

	fmt.Println(errors.Is(err, context.DeadlineExceeded))
	r := ads.Result()
	fmt.Println(r.State, r.Value)
	// Output:
	// true
	// timeout [house ad]
}

// An optional-only join runs on the first upstream that succeeds; the
// branches that have not started by then are skipped.
func ExampleWorkerWrapper_Depend_anyOf() {
	replica := func(name string, fail bool) *asynctool.WorkerWrapper[string, string] {
		return asynctool.NewWrapper(name, asynctool.WorkerFunc[string, string](
			func(ctx context.Context, key string, _ asynctool.Wrappers) (string, error) {
				if fail {
					return "", errors.New(name + " is down")
				}
				return name + ":" + key, nil
			}), "k")
	}
	a1, a2 := replica("r1", true), replica("r2", false)
	first := asynctool.NewWrapper("first", asynctool.WorkerFunc[string, string](
		func(ctx context.Context, _ string, all asynctool.Wrappers) (string, error) {
			for _, id := range []string{"r1", "r2"} {
				if r, _ := asynctool.ResultOf[string](all, id); r.State == asynctool.ResultSuccess {
					return r.Value, nil
				}
			}
			return "", errors.New("unreachable")
		}), "").
		Depend(a1, false).
		Depend(a2, false)

	a := asynctool.New(asynctool.WithMaxWorkers(1))
	defer a.Close()
	_ = a.BeginWork(context.Background(), time.Second, a1, a2)
	fmt.Println(first.Result().Value)
	// Output:
	// r2:k
}

// Callbacks see every node's final result exactly once, including nodes
// that never ran.
func ExampleCallback() {
	logResult := asynctool.ResultFunc[int, int](func(success bool, p int, r asynctool.WorkResult[int]) {
		fmt.Printf("success=%v value=%d state=%v err=%v\n", success, r.Value, r.State, r.Err)
	})
	bad := asynctool.NewWrapper("bad", asynctool.WorkerFunc[int, int](
		func(context.Context, int, asynctool.Wrappers) (int, error) { return 0, errors.New("boom") }), 1)
	next := asynctool.NewWrapper("next", asynctool.WorkerFunc[int, int](
		func(context.Context, int, asynctool.Wrappers) (int, error) { return 1, nil }), 2).
		Depend(bad, true).
		Default(-1).
		Callback(logResult)

	a := asynctool.New()
	defer a.Close()
	_ = a.BeginWork(context.Background(), 0, bad)
	_ = next
	// Output:
	// success=false value=-1 state=exception err=asynctool: upstream "bad" failed: boom
}

// A worker reads an upstream it holds in a variable: the result's type
// is checked by the compiler, and there is no id to mistype.
func ExampleWorkerWrapper_ResultFrom() {
	user := asynctool.NewWrapper("user", asynctool.WorkerFunc[int, string](
		func(context.Context, int, asynctool.Wrappers) (string, error) { return "ada", nil }), 7)
	greet := asynctool.NewWrapper("greet", asynctool.WorkerFunc[string, string](
		func(_ context.Context, greeting string, all asynctool.Wrappers) (string, error) {
			u, err := user.ResultFrom(all) // a WorkResult[string]
			return greeting + ", " + u.Value, err
		}), "hello").Depend(user, true)

	a := asynctool.New()
	defer a.Close()
	if err := a.BeginWork(context.Background(), time.Second, user); err != nil {
		panic(err)
	}
	fmt.Println(greet.Result().Value)
	// Output:
	// hello, ada
}

// stock is a typed worker written before the graph: it takes the cart
// as its parameter.
type stock struct{}

func (stock) Action(_ context.Context, c *Cart, _ asynctool.Wrappers) (int, error) {
	return 10 - c.Items, nil // an inventory RPC for the cart's items, in real life
}

// A node's parameter is fixed when the node is made, before any upstream
// has run. A worker whose parameter is an upstream's value is called
// from a WorkerFunc that reads the upstream with ResultFrom and passes
// its value on; the node depends on that upstream as must, so it runs
// only after the upstream succeeded.
func ExampleWorkerWrapper_ResultFrom_upstreamAsParam() {
	cart := asynctool.NewWrapper("cart", asynctool.WorkerFunc[int64, *Cart](
		func(context.Context, int64, asynctool.Wrappers) (*Cart, error) { return &Cart{Items: 3}, nil }), 42)
	left := asynctool.NewWrapper("stock", asynctool.WorkerFunc[struct{}, int](
		func(ctx context.Context, _ struct{}, all asynctool.Wrappers) (int, error) {
			c, err := cart.ResultFrom(all)
			if err != nil {
				return 0, err
			}
			return stock{}.Action(ctx, c.Value, all)
		}), struct{}{}).Depend(cart, true)

	a := asynctool.New()
	defer a.Close()
	if err := a.BeginWork(context.Background(), time.Second, cart); err != nil {
		panic(err)
	}
	fmt.Println(left.Result().Value, "left in stock")
	// Output:
	// 7 left in stock
}

// A run started by hand from inside a worker: the total node builds a
// graph with one node per item in the cart and runs it on the same Async,
// under its own context, so the sub-graph has the request's deadline and
// is cancelled with it. A run started from inside a worker never waits
// behind the busy workers that wait for it. [asynctool.ForEach] does this
// for you, and shows the items in the outer run's report, which this run
// is not part of (see ExampleForEach).
func ExampleAsync_BeginWork_subGraph() {
	a := asynctool.New()
	defer a.Close()
	priceOf := asynctool.WorkerFunc[string, int](func(_ context.Context, item string, _ asynctool.Wrappers) (int, error) {
		return len(item) * 100, nil // an RPC per item, in real life
	})
	cart := asynctool.NewWrapper("cart", asynctool.WorkerFunc[int64, []string](
		func(context.Context, int64, asynctool.Wrappers) ([]string, error) {
			return []string{"apple", "pear", "fig"}, nil
		}), 42)
	total := asynctool.NewWrapper("total", asynctool.WorkerFunc[int64, int](
		func(ctx context.Context, _ int64, all asynctool.Wrappers) (int, error) {
			items, err := cart.ResultFrom(all)
			if err != nil {
				return 0, err
			}
			prices := make([]*asynctool.WorkerWrapper[string, int], len(items.Value))
			starts := make([]asynctool.Wrapper, len(items.Value))
			for k, item := range items.Value {
				prices[k] = asynctool.NewWrapper("price/"+item, priceOf, item)
				starts[k] = prices[k]
			}
			if err := a.BeginWork(ctx, 0, starts...); err != nil {
				return 0, err
			}
			sum := 0
			for _, p := range prices {
				r := p.Result()
				if r.Err != nil {
					return 0, r.Err
				}
				sum += r.Value
			}
			return sum, nil
		}), 42).Depend(cart, true)

	err := a.BeginWork(context.Background(), time.Second, cart)
	fmt.Println(err, total.Result().Value)
	// Output:
	// <nil> 1200
}

// A service stopping: Shutdown refuses new runs and waits for those in
// flight, for at most a grace period (in a service, after the ctx of
// signal.NotifyContext is done).
func ExampleAsync_Shutdown() {
	a := asynctool.New()
	report := asynctool.NewWrapper("report", asynctool.WorkerFunc[int, string](
		func(ctx context.Context, _ int, _ asynctool.Wrappers) (string, error) {
			time.Sleep(20 * time.Millisecond) // a request still being served
			return "sent", nil
		}), 0)
	if _, err := a.Start(context.Background(), time.Second, report); err != nil {
		fmt.Println(err)
		return
	}

	grace, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	fmt.Println(a.Shutdown(grace))
	fmt.Println(report.Result().Value)
	late := asynctool.NewWrapper("late", asynctool.WorkerFunc[int, string](
		func(context.Context, int, asynctool.Wrappers) (string, error) { return "", nil }), 0)
	fmt.Println(errors.Is(a.BeginWork(context.Background(), time.Second, late), asynctool.ErrClosed))
	// Output:
	// <nil>
	// sent
	// true
}
