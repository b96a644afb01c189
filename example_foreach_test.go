package asynctool_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynctool-go/asynctool"
)

// A cart's items are known only once the cart has been read: ForEach
// prices each item with its own call, all at once, under the node's
// deadline. The node's value holds one result per item, in the cart's
// order; an item that failed keeps its default and error, and the caller
// decides what to do with it. The report shows each item's call.
func ExampleForEach() {
	a := asynctool.New()
	defer a.Close()

	cart := asynctool.NewWrapper("cart", asynctool.WorkerFunc[int64, []string](
		func(context.Context, int64, asynctool.Wrappers) ([]string, error) {
			return []string{"apple", "pear", "fig"}, nil // an RPC, in real life
		}), 42)
	prices := asynctool.NewWrapper("prices", asynctool.ForEach[int64, string, int]{
		Items: func(_ context.Context, _ int64, all asynctool.Wrappers) ([]string, error) {
			items, err := cart.ResultFrom(all)
			return items.Value, err
		},
		Worker: asynctool.WorkerFunc[string, int](func(_ context.Context, item string, _ asynctool.Wrappers) (int, error) {
			if item == "fig" {
				return 0, errors.New("no price for fig")
			}
			return len(item) * 100, nil // an RPC per item, in real life
		}),
	}, 0).Depend(cart, true)

	run, err := a.Start(context.Background(), time.Second, cart)
	if err != nil {
		panic(err)
	}
	fmt.Println(run.Wait(context.Background()))
	for i, r := range prices.Result().Value {
		fmt.Println(i, r.State, r.Value, r.Err)
	}
	fmt.Print(run.Report())
	// Output:
	// <nil>
	// 0 success 500 <nil>
	// 1 success 400 <nil>
	// 2 exception 0 no price for fig
	// cart: succeeded
	// prices: succeeded by=cart
	//   0: succeeded
	//   1: succeeded
	//   2: failed (worker failed)
}

// A read from five replicas that needs three answers: with AtLeast(3),
// the node returns as soon as three replicas have answered, and the calls
// still running are cancelled (their error wraps ErrRunEnded; a call not
// started by then never starts). Had three failed, the node would have
// failed at once. Here replicas b and d hang until they are cancelled:
// the run ends well before its deadline all the same (Wait's nil error),
// on the answers of a, c and e.
func ExampleForEach_quorum() {
	a := asynctool.New()
	defer a.Close()

	hung := map[string]bool{"b": true, "d": true}
	read := asynctool.NewWrapper("read", asynctool.ForEach[string, string, string]{
		Items: func(context.Context, string, asynctool.Wrappers) ([]string, error) {
			return []string{"a", "b", "c", "d", "e"}, nil
		},
		Worker: asynctool.WorkerFunc[string, string](func(ctx context.Context, replica string, _ asynctool.Wrappers) (string, error) {
			if hung[replica] {
				<-ctx.Done() // a replica that does not answer
				return "", ctx.Err()
			}
			return "v1 from " + replica, nil
		}),
		Join: asynctool.AtLeast(3),
	}, "key")

	run, err := a.Start(context.Background(), time.Minute, read)
	if err != nil {
		panic(err)
	}
	fmt.Println(run.Wait(context.Background()))
	for _, r := range read.Result().Value {
		fmt.Printf("%q %v\n", r.Value, r.State == asynctool.ResultSuccess)
	}
	// Output:
	// <nil>
	// "v1 from a" true
	// "" false
	// "v1 from c" true
	// "" false
	// "v1 from e" true
}

// A graph whose shape depends on the request, built by the node when it
// runs: here a chain of as many steps as the param says. Output reads the
// node's value from the graph's last node once the graph has run.
func ExampleSubGraph() {
	a := asynctool.New()
	defer a.Close()

	step := asynctool.WorkerFunc[int, int](func(_ context.Context, k int, all asynctool.Wrappers) (int, error) {
		if k == 0 {
			return 1, nil
		}
		prev, err := asynctool.ResultOf[int](all, fmt.Sprint("step", k-1))
		return prev.Value * 2, err
	})
	doubling := asynctool.NewWrapper("doubling", asynctool.SubGraph[int, int]{
		Build: func(_ context.Context, n int, _ asynctool.Wrappers) (asynctool.Built[int], error) {
			if n < 1 {
				return asynctool.Built[int]{}, fmt.Errorf("%d steps", n)
			}
			first := asynctool.NewWrapper("step0", step, 0)
			last := first
			for k := 1; k < n; k++ {
				last = asynctool.NewWrapper(fmt.Sprint("step", k), step, k).Depend(last, true)
			}
			return asynctool.Built[int]{
				Starts: []asynctool.Wrapper{first},
				Output: func() (int, error) { r := last.Result(); return r.Value, r.Err },
			}, nil
		},
	}, 4)

	run, err := a.Start(context.Background(), time.Second, doubling)
	if err != nil {
		panic(err)
	}
	fmt.Println(run.Wait(context.Background()), doubling.Result().Value)
	fmt.Print(run.Report())
	// Output:
	// <nil> 8
	// doubling: succeeded
	//   step0: succeeded
	//   step1: succeeded by=step0
	//   step2: succeeded by=step1
	//   step3: succeeded by=step2
}

// A page that shows whatever prices arrive within a second, calling the
// price service two at a time: Budget gives the items a second in all,
// and Node gives each a Default naming it, so the ForEach node returns by
// then with every item's result, the default of the sofa's, whose call
// hangs, among them. A Timeout on the ForEach node itself would end the
// node instead, with its own default, and the prices that had arrived
// would be lost to the page; a Timeout on each item counts from that
// item's start, which Limit delays. Wait's nil error says the node
// returned well before the run's deadline.
func ExampleForEach_budget() {
	a := asynctool.New()
	defer a.Close()

	prices := asynctool.NewWrapper("prices", asynctool.ForEach[int64, string, string]{
		Items: func(context.Context, int64, asynctool.Wrappers) ([]string, error) {
			return []string{"book", "lamp", "sofa", "mug"}, nil
		},
		Worker: asynctool.WorkerFunc[string, string](func(ctx context.Context, sku string, _ asynctool.Wrappers) (string, error) {
			if sku == "sofa" {
				<-ctx.Done() // a call that does not answer
				return "", ctx.Err()
			}
			return sku + ": 12.50", nil
		}),
		Node: func(_ int, sku string, n *asynctool.WorkerWrapper[string, string]) {
			n.Default(sku + ": price unavailable")
		},
		Limit:  2,
		Budget: time.Second,
	}, 42)

	run, err := a.Start(context.Background(), time.Minute, prices)
	if err != nil {
		panic(err)
	}
	fmt.Println(run.Wait(context.Background()))
	res := prices.Result()
	fmt.Println(res.State, res.Err)
	for _, r := range res.Value {
		fmt.Println(r.Value, r.State)
	}
	// Output:
	// <nil>
	// success <nil>
	// book: 12.50 success
	// lamp: 12.50 success
	// sofa: price unavailable timeout
	// mug: 12.50 success
}

// The price service allows four calls at a time from one request: with
// Limit 4, the twelve items run four at a time, each starting as soon as
// another ends, and no goroutine waits for its turn. The Async's pool
// bounds every node of every run; Limit bounds this node's items. (Each
// call here lasts until four have been at work at once, so that the most
// printed does not depend on how fast the machine starts them.)
func ExampleForEach_limit() {
	a := asynctool.New()
	defer a.Close()

	var now, most atomic.Int32
	var fourOnce sync.Once
	four := make(chan struct{}) // closed when four calls are at work
	skus := make([]string, 12)
	for i := range skus {
		skus[i] = fmt.Sprintf("sku-%02d", i)
	}
	prices := asynctool.NewWrapper("prices", asynctool.ForEach[[]string, string, int]{
		Items: func(_ context.Context, skus []string, _ asynctool.Wrappers) ([]string, error) {
			return skus, nil
		},
		Worker: asynctool.WorkerFunc[string, int](func(ctx context.Context, sku string, _ asynctool.Wrappers) (int, error) {
			n := now.Add(1)
			defer now.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			if n == 4 {
				fourOnce.Do(func() { close(four) })
			}
			select { // an RPC, in real life
			case <-four:
				return 100 + len(sku), nil
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}),
		Limit: 4,
	}, skus)

	if err := a.BeginWork(context.Background(), time.Minute, prices); err != nil {
		panic(err)
	}
	fmt.Println("items:", len(prices.Result().Value), "at most at once:", most.Load())
	// Output:
	// items: 12 at most at once: 4
}
