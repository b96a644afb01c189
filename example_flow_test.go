package asynctool_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/asynctool-go/asynctool"
)

type requestKey struct{}

// Compile a graph once at start-up, then run it for every request: each
// run has its own results, and per-request data travels in the context.
func ExampleCompile() {
	greet := asynctool.NewWrapper("greet", asynctool.WorkerFunc[string, string](
		func(ctx context.Context, greeting string, _ asynctool.Wrappers) (string, error) {
			return greeting + ", " + ctx.Value(requestKey{}).(string), nil
		}), "hello")
	shout := asynctool.NewWrapper("shout", asynctool.WorkerFunc[string, string](
		func(ctx context.Context, _ string, all asynctool.Wrappers) (string, error) {
			g, err := asynctool.ResultOf[string](all, "greet")
			return g.Value + "!", err
		}), "").Depend(greet, true)

	plan, err := asynctool.Compile(greet)
	if err != nil {
		panic(err)
	}
	a := asynctool.New()
	defer a.Close()
	for _, user := range []string{"ada", "grace"} {
		ctx := context.WithValue(context.Background(), requestKey{}, user)
		run, err := a.RunPlan(ctx, plan, time.Second)
		if err != nil {
			panic(err)
		}
		fmt.Println(shout.ResultIn(run).Value)
		run.Release()
	}
	// Output:
	// hello, ada!
	// hello, grace!
}

// Set a node up before compiling it: once the wrappers are a plan's
// template, their chaining methods change nothing, and every run of the
// plan runs the graph as it was compiled. Here the Default set after
// Compile is ignored, and the node that times out reports the zero
// value; set before Compile, it would report -1.
func ExampleCompile_changesAfterCompile() {
	slow := asynctool.NewWrapper("slow", asynctool.WorkerFunc[int, int](
		func(ctx context.Context, _ int, _ asynctool.Wrappers) (int, error) {
			<-ctx.Done() // a backend that does not answer today
			return 0, context.Cause(ctx)
		}), 0)
	plan, err := asynctool.Compile(slow)
	if err != nil {
		panic(err)
	}
	slow.Default(-1) // too late: the plan is compiled

	a := asynctool.New()
	defer a.Close()
	run, _ := a.RunPlan(context.Background(), plan, 10*time.Millisecond)
	defer run.Release()
	fmt.Println(slow.ResultIn(run).State, slow.ResultIn(run).Value)
	// Output:
	// timeout 0
}

// A quorum read: the node runs on the second replica that answers, and
// fails only once two answers have become impossible.
func ExampleAtLeast() {
	replica := func(id string, err error) *asynctool.WorkerWrapper[string, string] {
		return asynctool.NewWrapper(id, asynctool.WorkerFunc[string, string](
			func(context.Context, string, asynctool.Wrappers) (string, error) { return "v1", err }), "key")
	}
	r1, r2, r3 := replica("r1", errors.New("down")), replica("r2", nil), replica("r3", nil)
	quorum := asynctool.NewWrapper("quorum", asynctool.WorkerFunc[string, string](
		func(context.Context, string, asynctool.Wrappers) (string, error) { return "agreed", nil }), "").
		Depend(r1, false).Depend(r2, false).Depend(r3, false).
		Join(asynctool.AtLeast(2))

	a := asynctool.New()
	defer a.Close()
	_ = a.BeginWork(context.Background(), time.Second, r1, r2, r3)
	fmt.Println(quorum.Result().State, quorum.Result().Value)
	// Output:
	// success agreed
}

// A flaky RPC retried with exponential backoff, within its own timeout.
func ExampleWorkerWrapper_Retry() {
	var calls atomic.Int32
	flaky := asynctool.NewWrapper("flaky", asynctool.WorkerFunc[int, int](
		func(context.Context, int, asynctool.Wrappers) (int, error) {
			if calls.Add(1) < 3 {
				return 0, errors.New("unavailable")
			}
			return 42, nil
		}), 0).
		Retry(asynctool.RetryPolicy{
			Attempts: 5,
			Backoff:  asynctool.ExponentialBackoff(time.Millisecond, 10*time.Millisecond, 0),
		}).
		Timeout(time.Second)

	a := asynctool.New()
	defer a.Close()
	r, _ := a.Start(context.Background(), time.Second, flaky)
	_ = r.Wait(context.Background())
	fmt.Println(flaky.Result().Value, r.Report().Nodes[0].Attempts)
	// Output:
	// 42 3
}

// An RPC whose first try hangs: each attempt is bounded on its own, so
// the hung try fails after 20 ms and the retry answers, well within the
// node's one-second Timeout, which a hung try would otherwise use up.
func ExampleRetryPolicy_attemptTimeout() {
	var calls atomic.Int32
	rpc := asynctool.NewWrapper("rpc", asynctool.WorkerFunc[int, int](
		func(ctx context.Context, _ int, _ asynctool.Wrappers) (int, error) {
			if calls.Add(1) == 1 {
				<-ctx.Done() // a hung connection, until the attempt's bound
				return 0, ctx.Err()
			}
			return 42, nil
		}), 0).
		Retry(asynctool.RetryPolicy{Attempts: 3, AttemptTimeout: 20 * time.Millisecond}).
		Timeout(time.Second)

	a := asynctool.New(asynctool.WithHooks(&asynctool.Hooks{
		OnNodeRetry: func(_ context.Context, ev asynctool.NodeEvent) { fmt.Println("retry after:", ev.Err) },
	}))
	defer a.Close()
	_ = a.BeginWork(context.Background(), time.Minute, rpc)
	fmt.Println(rpc.Result().Value, calls.Load())
	// Output:
	// retry after: asynctool: attempt 1 of node "rpc" exceeded its attempt timeout of 20ms
	// 42 2
}

// A node that needs a human: it suspends on failure, the run stays open,
// and an operator resumes it with a value.
func ExampleRun_Resume() {
	payment := asynctool.NewWrapper("payment", asynctool.WorkerFunc[int, string](
		func(context.Context, int, asynctool.Wrappers) (string, error) {
			return "", errors.New("needs manual review")
		}), 0).OnFailure(asynctool.PolicySuspend)
	receipt := asynctool.NewWrapper("receipt", asynctool.WorkerFunc[int, string](
		func(_ context.Context, _ int, all asynctool.Wrappers) (string, error) {
			p, err := asynctool.ResultOf[string](all, "payment")
			return "receipt for " + p.Value, err
		}), 0).Depend(payment, true)

	a := asynctool.New()
	defer a.Close()
	r, _ := a.Start(context.Background(), time.Minute, payment)
	<-r.Suspended() // nothing else can happen until someone resumes payment
	fmt.Println(r.Report().Nodes[1].Status)
	if err := r.Resume("payment", asynctool.SucceedWith("approved by ops")); err != nil {
		panic(err)
	}
	_ = r.Wait(context.Background())
	fmt.Println(receipt.Result().Value)
	// Output:
	// pending
	// receipt for approved by ops
}

// A hedged RPC: the first call is slow today, so after 100ms a second one
// starts beside it; the second answers first, and the first is
// cancelled. (With more attempts, a third call would start 100ms after
// the second, should the second not have answered by then.)
func ExampleHedged() {
	var calls atomic.Int32
	price := asynctool.WorkerFunc[string, string](func(ctx context.Context, sku string, _ asynctool.Wrappers) (string, error) {
		n := calls.Add(1)
		d := time.Millisecond
		if n == 1 {
			d = 10 * time.Second // a replica stuck in a GC pause
		}
		select {
		case <-time.After(d):
			return fmt.Sprintf("%s: 9.99 (call %d)", sku, n), nil
		case <-ctx.Done():
			return "", context.Cause(ctx)
		}
	})
	quote := asynctool.NewWrapper("quote", asynctool.Hedged(price, 100*time.Millisecond, 2), "sku-1")

	a := asynctool.New()
	defer a.Close()
	err := a.BeginWork(context.Background(), 5*time.Second, quote)
	fmt.Println(err, quote.Result().Value, calls.Load())
	// Output:
	// <nil> sku-1: 9.99 (call 2) 2
}

// A slow backend with a fallback, the way a handler wants it: wait for
// recommendations up to 50ms, then go on with the bestsellers. The recs
// node is a must dependency with its own Timeout, a Default and
// PolicyContinue, so the page always waits for it, and never longer
// than its budget. (As an optional dependency, recs would not delay the
// page at all: the page would read it as not ended yet and the run would
// still wait for it until the group deadline.) Here recs hangs until
// its context ends: BeginWork's nil error says the page was done well
// before the group deadline.
func ExampleWorkerWrapper_OnFailure_fallback() {
	recs := asynctool.NewWrapper("recs", asynctool.WorkerFunc[int64, []string](
		func(ctx context.Context, uid int64, _ asynctool.Wrappers) ([]string, error) {
			<-ctx.Done() // a backend that does not answer today
			return nil, context.Cause(ctx)
		}), 42).
		Timeout(50 * time.Millisecond).
		Default([]string{"bestsellers"}).
		OnFailure(asynctool.PolicyContinue)
	page := asynctool.NewWrapper("page", asynctool.WorkerFunc[int64, string](
		func(_ context.Context, _ int64, all asynctool.Wrappers) (string, error) {
			r, _ := recs.ResultFrom(all) // its value, or the default once it failed or timed out
			return fmt.Sprintf("%v (%v)", r.Value, r.State), nil
		}), 42).
		Depend(recs, true)

	a := asynctool.New()
	defer a.Close()
	err := a.BeginWork(context.Background(), time.Minute, recs)
	fmt.Println(err, page.Result().Value)
	// Output:
	// <nil> [bestsellers] (timeout)
}

// A page that should not wait for an optional backend once it is
// rendered: EndsRun returns the run with the page, and stops recs,
// which ends with its default value. Without it, BeginWork would wait
// for recs until the group deadline and then report the deadline:
// BeginWork's nil error says the run ended with the page.
// ShortCircuit(false) makes recs run whatever happens first: an
// optional start node that has no goroutine yet when the page runs is
// skipped, not stopped (see ShortCircuit).
func ExampleWorkerWrapper_EndsRun() {
	user := asynctool.NewWrapper("user", asynctool.WorkerFunc[int64, string](
		func(context.Context, int64, asynctool.Wrappers) (string, error) {
			time.Sleep(10 * time.Millisecond) // an RPC
			return "ada", nil
		}), 42)
	recs := asynctool.NewWrapper("recs", asynctool.WorkerFunc[int64, []string](
		func(ctx context.Context, _ int64, _ asynctool.Wrappers) ([]string, error) {
			<-ctx.Done() // a very slow backend
			return nil, ctx.Err()
		}), 42).
		Default([]string{"bestsellers"}).
		ShortCircuit(false)
	page := asynctool.NewWrapper("page", asynctool.WorkerFunc[int64, string](
		func(_ context.Context, _ int64, all asynctool.Wrappers) (string, error) {
			u, _ := user.ResultFrom(all)
			return "hello " + u.Value, nil
		}), 42).
		Depend(user, true).
		Depend(recs, false).
		EndsRun()

	a := asynctool.New()
	defer a.Close()
	err := a.BeginWork(context.Background(), time.Minute, recs, user)
	fmt.Println(err, page.Result().Value)
	fmt.Println(recs.Result().Value, errors.Is(recs.Result().Err, asynctool.ErrRunEnded))
	// Output:
	// <nil> hello ada
	// [bestsellers] true
}

// A custom join decides from every upstream's state each time one of
// them ends: here, the node runs as soon as two of three replicas agree
// on a value, and fails once they have all answered without two agreeing.
func ExampleCustomJoin() {
	twoAgree := asynctool.CustomJoin(func(ups []asynctool.Upstream) asynctool.Decision {
		seen := map[any]int{}
		ended := 0
		for _, u := range ups {
			if !u.Ended {
				continue
			}
			ended++
			if u.OK {
				if seen[u.Value]++; seen[u.Value] == 2 {
					return asynctool.DecideRun
				}
			}
		}
		if ended == len(ups) {
			return asynctool.DecideFail
		}
		return asynctool.DecideWait
	})
	a := asynctool.New()
	defer a.Close()
	for _, answers := range [][]int{{7, 9, 7}, {1, 2, 3}} {
		var replicas []asynctool.Wrapper
		vote := asynctool.NewWrapper("vote", asynctool.WorkerFunc[int, int](
			func(_ context.Context, _ int, all asynctool.Wrappers) (int, error) {
				seen := map[int]int{}
				for _, r := range replicas {
					v, _ := asynctool.ResultOf[int](all, r.ID())
					if v.State == asynctool.ResultSuccess {
						if seen[v.Value]++; seen[v.Value] == 2 {
							return v.Value, nil
						}
					}
				}
				return 0, errors.New("no two replicas agree")
			}), 0).Join(twoAgree)
		for i, answer := range answers {
			replica := asynctool.NewWrapper(fmt.Sprint("replica", i), asynctool.WorkerFunc[int, int](
				func(context.Context, int, asynctool.Wrappers) (int, error) { return answer, nil }), 0)
			vote.Depend(replica, false) // a custom join ignores the must flag
			replicas = append(replicas, replica)
		}
		_ = a.BeginWork(context.Background(), time.Second, replicas...)
		r := vote.Result()
		fmt.Println(answers, r.Value, errors.Is(r.Err, asynctool.ErrJoinFailed))
	}
	// Output:
	// [7 9 7] 7 false
	// [1 2 3] 0 true
}

// A node's own Timeout bounds that node alone: the slow recommendations
// call ends with its default value and a *NodeTimeoutError, and, under
// PolicyContinue, the page that needs it goes on with that default, well
// before the group deadline.
func ExampleWorkerWrapper_Timeout() {
	recs := asynctool.NewWrapper("recs", asynctool.WorkerFunc[int64, string](
		func(ctx context.Context, uid int64, _ asynctool.Wrappers) (string, error) {
			<-ctx.Done() // a recommendation service that does not answer today
			return "", ctx.Err()
		}), 42).
		Timeout(20 * time.Millisecond).
		Default("bestsellers").
		OnFailure(asynctool.PolicyContinue)
	page := asynctool.NewWrapper("page", asynctool.WorkerFunc[int64, string](
		func(_ context.Context, uid int64, all asynctool.Wrappers) (string, error) {
			r, err := recs.ResultFrom(all)
			return "page with " + r.Value, err
		}), 42).Depend(recs, true)

	a := asynctool.New()
	defer a.Close()
	err := a.BeginWork(context.Background(), time.Minute, recs)

	r := recs.Result()
	var timeout *asynctool.NodeTimeoutError
	fmt.Println(err)
	fmt.Println(r.State, r.Value, errors.As(r.Err, &timeout), timeout.Timeout)
	fmt.Println(page.Result().Value)
	// Output:
	// <nil>
	// timeout bestsellers true 20ms
	// page with bestsellers
}
