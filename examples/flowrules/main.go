// Command flowrules runs one small graph per row of the README's flow
// rules table (every join strategy, branches, hedging, sub-plans,
// ForEach, timeouts, retries, EndsRun and every failure policy), whose
// workers are simulated RPCs, and prints each run's report.
package main

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/asynctool-go/asynctool"
)

// rpc simulates a call that takes d and then returns v, or err if not nil.
func rpc(d time.Duration, v int, err error) asynctool.WorkerFunc[string, int] {
	return func(ctx context.Context, _ string, _ asynctool.Wrappers) (int, error) {
		select {
		case <-time.After(d):
			return v, err
		case <-ctx.Done():
			return 0, context.Cause(ctx)
		}
	}
}

var errDown = errors.New("replica down")

// fanIn builds upstreams u0..u(n-1) (outcomes: 's' succeeds, 'f' fails,
// each 10 ms later than the previous) feeding one node with join j.
func fanIn(outcomes string, j asynctool.Join) ([]asynctool.Wrapper, *asynctool.WorkerWrapper[string, int]) {
	sink := asynctool.NewWrapper("sink", rpc(0, 1, nil), "").Join(j)
	var starts []asynctool.Wrapper
	for k, o := range outcomes {
		var err error
		if o == 'f' {
			err = errDown
		}
		u := asynctool.NewWrapper(fmt.Sprint("u", k), rpc(time.Duration(k+1)*10*time.Millisecond, k, err), "")
		sink.Depend(u, false)
		starts = append(starts, u)
	}
	return starts, sink
}

func run(title string, starts ...asynctool.Wrapper) {
	a := asynctool.New()
	defer a.Close()
	r, err := a.Start(context.Background(), time.Second, starts...)
	if err != nil {
		fmt.Println(title, "rejected:", err)
		return
	}
	werr := r.Wait(context.Background())
	fmt.Printf("== %s (run error: %v)\n%s\n", title, werr, r.Report())
}

func main() {
	// The default join: every must upstream succeeds; an optional one
	// does not hold the node back.
	user := asynctool.NewWrapper("user", rpc(10*time.Millisecond, 1, nil), "")
	recs := asynctool.NewWrapper("recs", rpc(50*time.Millisecond, 2, nil), "").Default(-1)
	asynctool.NewWrapper("page", rpc(0, 3, nil), "").Depend(user, true).Depend(recs, false)
	run("(default): page runs once user (must) succeeded, without waiting for recs (optional)", user, recs)

	joins := []struct {
		title    string
		outcomes string
		join     asynctool.Join
	}{
		{"AllSucceeded: fails at the first failure", "sfs", asynctool.AllSucceeded()},
		{"AllDone: runs once every upstream ended", "sfs", asynctool.AllDone()},
		{"AnySucceeded: runs on the first success, after a failure", "fss", asynctool.AnySucceeded()},
		{"AtLeast(2): runs on the second success", "sfss", asynctool.AtLeast(2)},
		{"NamedSucceeded(u1): ignores the others' failures", "fsf", asynctool.NamedSucceeded("u1")},
		{"CustomJoin: runs when the successes outnumber the failures by 2", "sssf", asynctool.CustomJoin(func(ups []asynctool.Upstream) asynctool.Decision {
			lead := 0
			for _, u := range ups {
				switch {
				case u.Ended && u.OK:
					lead++
				case u.Ended:
					lead--
				}
			}
			if lead >= 2 {
				return asynctool.DecideRun
			}
			return asynctool.DecideWait
		})},
	}
	for _, j := range joins {
		starts, _ := fanIn(j.outcomes, j.join)
		run(j.title, starts...)
	}

	// A branch: the route's value chooses which of the two calls runs;
	// the other is not taken, and so is the node that needed it, while
	// the page, whose dependencies are optional, runs on the one taken.
	routeTo := asynctool.NewWrapper("route", asynctool.WorkerFunc[string, string](func(context.Context, string, asynctool.Wrappers) (string, error) {
		return "db", nil
	}), "")
	cache := asynctool.NewWrapper("cache", rpc(5*time.Millisecond, 1, nil), "").
		Depend(routeTo, true).Join(asynctool.When("route", func(to string) bool { return to == "cache" }))
	decode := asynctool.NewWrapper("decode", rpc(0, 1, nil), "").Depend(cache, true)
	db := asynctool.NewWrapper("db", rpc(10*time.Millisecond, 2, nil), "").
		Depend(routeTo, true).Join(asynctool.When("route", func(to string) bool { return to == "db" }))
	asynctool.NewWrapper("page", rpc(0, 3, nil), "").Depend(decode, false).Depend(db, false)
	run(`When: route says "db", so cache and decode are not taken`, routeTo)

	// A fallback: the backup runs only because the primary timed out, and
	// the quote, whose dependencies are optional, runs on the backup's
	// success.
	primary := asynctool.NewWrapper("primary", rpc(time.Second, 100, nil), "").Timeout(20 * time.Millisecond)
	backup := asynctool.NewWrapper("backup", rpc(5*time.Millisecond, 101, nil), "").
		Depend(primary, false).
		Join(asynctool.WhenResult("primary", func(r asynctool.WorkResult[int]) bool {
			return r.Err != nil && r.Err != asynctool.ErrNotTaken // failed or timed out, not a branch not taken (== as WhenResult says)
		}))
	asynctool.NewWrapper("quote", rpc(0, 1, nil), "").Depend(primary, false).Depend(backup, false)
	run("WhenResult: the backup runs because the primary timed out", primary)

	// A hedged call: the first replica is stuck, so after 20 ms a second
	// call starts beside it and answers; the first is cancelled.
	var hedges atomic.Int32
	quoteOf := asynctool.WorkerFunc[string, int](func(ctx context.Context, s string, all asynctool.Wrappers) (int, error) {
		if hedges.Add(1) == 1 {
			return rpc(time.Second, 0, nil)(ctx, s, all)
		}
		return rpc(5*time.Millisecond, 42, nil)(ctx, s, all)
	})
	run("Hedged: a second call after 20ms answers for a stuck first one",
		asynctool.NewWrapper("hedged-quote", asynctool.Hedged(quoteOf, 20*time.Millisecond, 3), ""))

	// A sub-plan: a graph compiled once (here a two-node profile lookup)
	// runs as one node of another graph; the report shows its sub-run
	// under the node.
	name := asynctool.NewWrapper("name", rpc(5*time.Millisecond, 7, nil), "")
	card := asynctool.NewWrapper("card", rpc(5*time.Millisecond, 8, nil), "").Depend(name, true)
	profile, err := asynctool.Compile(name)
	if err != nil {
		panic(err)
	}
	run("SubPlan: a compiled plan runs as one node",
		asynctool.NewWrapper("profile", asynctool.SubPlan[string, int]{Plan: profile, Output: card.ValueIn}, ""))

	// A fan-out known only at run time: one price call per item of the
	// cart, at most two at a time, all of which must succeed.
	cart := asynctool.NewWrapper("cart", asynctool.WorkerFunc[string, []string](func(context.Context, string, asynctool.Wrappers) ([]string, error) {
		return []string{"book", "lamp", "mug"}, nil
	}), "")
	prices := asynctool.NewWrapper("prices", asynctool.ForEach[string, string, int]{
		Items: func(_ context.Context, _ string, all asynctool.Wrappers) ([]string, error) {
			c, err := cart.ResultFrom(all)
			return c.Value, err
		},
		Worker: rpc(10*time.Millisecond, 5, nil),
		ID:     func(_ int, sku string) string { return sku },
		Join:   asynctool.AllSucceeded(),
		Limit:  2,
	}, "").Depend(cart, true)
	_ = prices
	run("ForEach: one call per item of the cart, at most 2 at once", cart)

	// Retries with backoff, bounded by a node timeout.
	var calls atomic.Int32
	flaky := asynctool.NewWrapper("flaky", asynctool.WorkerFunc[string, int](func(ctx context.Context, _ string, _ asynctool.Wrappers) (int, error) {
		if calls.Add(1) < 3 {
			return 0, errDown
		}
		return 42, nil
	}), "").
		Retry(asynctool.RetryPolicy{Attempts: 5, Backoff: asynctool.ExponentialBackoff(5*time.Millisecond, 50*time.Millisecond, 0.2)}).
		Timeout(200 * time.Millisecond)
	run("Retry: succeeds on the third attempt", flaky)

	// A per-attempt timeout: the first try hangs, is cut at 20 ms and
	// retried, and the second answers in 5 ms; the node's own Timeout
	// (bounding all attempts together) is 200 ms.
	var tries atomic.Int32
	hung := asynctool.NewWrapper("replica", asynctool.WorkerFunc[string, int](func(ctx context.Context, s string, all asynctool.Wrappers) (int, error) {
		if tries.Add(1) == 1 {
			return rpc(time.Second, 0, nil)(ctx, s, all) // hangs past its bound
		}
		return rpc(5*time.Millisecond, 9, nil)(ctx, s, all)
	}), "").
		Retry(asynctool.RetryPolicy{Attempts: 3, AttemptTimeout: 20 * time.Millisecond}).
		Timeout(200 * time.Millisecond)
	run("Retry with AttemptTimeout(20ms): a hung first try is cut short and retried", hung)

	// A node timeout: the node ends at 20 ms with its default, while the
	// group deadline is a second.
	stuck := asynctool.NewWrapper("stuck", rpc(time.Second, 1, nil), "").
		Timeout(20 * time.Millisecond).Default(-1)
	run("Timeout(20ms): the node times out with its default", stuck)

	// The run ends with the page: recs, an optional branch still running
	// when the page is done, is stopped with its default instead of
	// holding the run until the group deadline (ShortCircuit(false)
	// makes it start whatever happens first).
	pageUser := asynctool.NewWrapper("user", rpc(10*time.Millisecond, 1, nil), "")
	slowRecs := asynctool.NewWrapper("recs", rpc(time.Second, 2, nil), "").Default(-1).ShortCircuit(false)
	asynctool.NewWrapper("page", rpc(0, 3, nil), "").Depend(pageUser, true).Depend(slowRecs, false).EndsRun()
	run("EndsRun: the run ends with the page, and recs is stopped", slowRecs, pageUser)

	// Failure policies.
	failed := asynctool.NewWrapper("inventory", rpc(5*time.Millisecond, 0, errDown), "").
		OnFailure(asynctool.PolicyFail)
	asynctool.NewWrapper("checkout", rpc(0, 1, nil), "").Depend(failed, true)
	run("PolicyFail (the default): the node fails, and so does checkout, which must have it", failed)

	cont := asynctool.NewWrapper("optional-enrich", rpc(5*time.Millisecond, 0, errDown), "").
		OnFailure(asynctool.PolicyContinue).Default(-1)
	after := asynctool.NewWrapper("render", rpc(0, 1, nil), "").Depend(cont, true)
	_ = after
	run("PolicyContinue: the failure is recorded, render still runs", cont)

	fatal := asynctool.NewWrapper("auth", rpc(5*time.Millisecond, 0, errors.New("token revoked")), "").
		OnFailure(asynctool.PolicyEnd)
	slow := asynctool.NewWrapper("slow", rpc(time.Second, 1, nil), "")
	run("PolicyEnd: the whole run stops", fatal, slow)

	// Suspend, then resume by hand.
	var attempts atomic.Int32
	payment := asynctool.NewWrapper("payment", asynctool.WorkerFunc[string, int](func(ctx context.Context, _ string, _ asynctool.Wrappers) (int, error) {
		if attempts.Add(1) == 1 {
			return 0, errors.New("needs manual review")
		}
		return 7, nil
	}), "").OnFailure(asynctool.PolicySuspend)
	receipt := asynctool.NewWrapper("receipt", rpc(0, 1, nil), "").Depend(payment, true)
	_ = receipt
	a := asynctool.New()
	defer a.Close()
	r, err := a.Start(context.Background(), time.Second, payment)
	if err != nil {
		fmt.Println("PolicySuspend rejected:", err)
		return
	}
	// Suspended is closed once the run can go no further without a
	// Resume; Done, if the run ended instead (its deadline, say).
	select {
	case <-r.Suspended():
	case <-r.Done():
	}
	fmt.Printf("== PolicySuspend: before Resume\n%s", r.Report())
	if err := r.Resume("payment", asynctool.Rerun()); err != nil {
		fmt.Println("resume:", err)
	}
	fmt.Printf("after Resume (run error: %v)\n%s", r.Wait(context.Background()), r.Report())
}
