// Command rpcfanout renders a product page the way a Go service would:
// one request fans out to several RPCs with dependencies between them,
// fallbacks for the optional ones, and one deadline for the whole group.
// The run ends with the page (EndsRun): a slow optional RPC that the page
// could not wait for is stopped then, not waited for until the deadline.
//
//	user ─────────────────────────────────────────── must ──▶ page
//	cart ──must──▶ prices (2 RPCs at a time) ──must──▶ total ── must ──▶ page
//	recs (slow, fallback) ────────────────────── optional ──▶ page
//	reviews-a (down) ─┐ optional
//	reviews-b ────────┴──▶ reviews ───────────── optional ──▶ page
//
// user, cart, recs, reviews-a, reviews-b and one price per item in the
// cart (at most two at a time) are the RPCs; total, reviews and page are
// computed locally. The number of price calls is known only once the
// cart has been read: prices is a ForEach node. The RPCs are simulated
// with sleeps so the program runs anywhere.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/asynctool-go/asynctool"
)

type (
	User    struct{ Name string }
	Cart    struct{ SKUs []string }
	Total   struct{ Sum float64 }
	Reviews struct{ Stars float64 }
)

// rpc simulates a remote call that takes d, or fails after d with err.
func rpc[R any](d time.Duration, v R, err error) asynctool.WorkerFunc[int64, R] {
	return func(ctx context.Context, uid int64, _ asynctool.Wrappers) (R, error) {
		select {
		case <-time.After(d):
			return v, err
		case <-ctx.Done():
			var zero R
			return zero, ctx.Err()
		}
	}
}

func main() {
	const uid = 42
	user := asynctool.NewWrapper("user", rpc(20*time.Millisecond, &User{"ada"}, nil), uid)
	cart := asynctool.NewWrapper("cart", rpc(15*time.Millisecond, &Cart{[]string{"book", "lamp", "mug"}}, nil), uid)

	// One price RPC per item of the cart, at most two at a time (the
	// price service's quota per request: Limit); a price call that fails
	// (none does here) fails the node at once (AllSucceeded), and the
	// page with it.
	priceOf := map[string]float64{"book": 12.5, "lamp": 30, "mug": 7}
	prices := asynctool.NewWrapper("prices", asynctool.ForEach[int64, string, float64]{
		Items: func(_ context.Context, _ int64, all asynctool.Wrappers) ([]string, error) {
			c, err := cart.ResultFrom(all)
			return c.Value.SKUs, err
		},
		Worker: asynctool.WorkerFunc[string, float64](func(ctx context.Context, sku string, _ asynctool.Wrappers) (float64, error) {
			select {
			case <-time.After(10 * time.Millisecond):
				return priceOf[sku], nil
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}),
		Join:  asynctool.AllSucceeded(),
		Limit: 2,
	}, uid).
		Depend(cart, true)
	total := asynctool.NewWrapper("total", asynctool.WorkerFunc[int64, *Total](
		func(ctx context.Context, uid int64, all asynctool.Wrappers) (*Total, error) {
			p, err := prices.ResultFrom(all)
			t := &Total{}
			for _, item := range p.Value {
				t.Sum += item.Value
			}
			return t, err
		}), uid).
		Depend(prices, true)

	// Optional, slow, with a fallback: the page will not wait for it.
	recs := asynctool.NewWrapper("recs", rpc(300*time.Millisecond, []string{"personalised"}, nil), uid).
		Default([]string{"bestsellers"})

	// Two review replicas, both optional: reviews runs on the first one
	// that succeeds (reviews-a answers first, with an error, and is
	// passed over).
	reviewsA := asynctool.NewWrapper("reviews-a", rpc(5*time.Millisecond, &Reviews{}, errors.New("replica a is down")), uid)
	reviewsB := asynctool.NewWrapper("reviews-b", rpc(12*time.Millisecond, &Reviews{Stars: 4.5}, nil), uid)
	reviews := asynctool.NewWrapper("reviews", asynctool.WorkerFunc[int64, *Reviews](
		func(ctx context.Context, uid int64, all asynctool.Wrappers) (*Reviews, error) {
			for _, id := range []string{"reviews-a", "reviews-b"} {
				r, err := asynctool.ResultOf[*Reviews](all, id) // by id: checked at run time
				if err != nil {
					return nil, err
				}
				if r.State == asynctool.ResultSuccess {
					return r.Value, nil
				}
			}
			return nil, errors.New("no replica answered")
		}), uid).
		Depend(reviewsA, false).
		Depend(reviewsB, false).
		Default(&Reviews{})

	page := asynctool.NewWrapper("page", asynctool.WorkerFunc[int64, string](
		func(ctx context.Context, uid int64, all asynctool.Wrappers) (string, error) {
			u, _ := user.ResultFrom(all) // must upstreams: ended, and typed by the compiler
			t, _ := total.ResultFrom(all)
			var b strings.Builder
			fmt.Fprintf(&b, "Hello %s, your cart costs %.2f.", u.Value.Name, t.Value.Sum)
			// Optional dependencies may not have ended yet: use them if ready.
			if r, _ := reviews.ResultFrom(all); r.State == asynctool.ResultSuccess {
				fmt.Fprintf(&b, " Rated %.1f stars.", r.Value.Stars)
			}
			if r, _ := recs.ResultFrom(all); r.State == asynctool.ResultSuccess {
				fmt.Fprintf(&b, " You may like: %v.", r.Value)
			} else {
				b.WriteString(" You may like: our bestsellers.")
			}
			return b.String(), nil
		}), uid).
		Depend(user, true).
		Depend(total, true).
		Depend(reviews, false).
		Depend(recs, false).
		EndsRun() // the run returns with the page; recs, still running, is stopped with its default

	a := asynctool.New(asynctool.WithMaxWorkers(64))
	defer a.Close()

	start := time.Now()
	err := a.BeginWork(context.Background(), 100*time.Millisecond,
		user, cart, recs, reviewsA, reviewsB)
	elapsed := time.Since(start)

	fmt.Println(page.Result().Value)
	fmt.Println()
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "node\tstate\tresult\terror")
	row := func(id string, st any, rs asynctool.ResultState, err error) {
		e := ""
		if err != nil {
			e = err.Error()
		}
		fmt.Fprintf(tw, "%s\t%v\t%v\t%s\n", id, st, rs, e)
	}
	row("user", user.State(), user.Result().State, user.Result().Err)
	row("cart", cart.State(), cart.Result().State, cart.Result().Err)
	row("prices", prices.State(), prices.Result().State, prices.Result().Err)
	for i, item := range prices.Result().Value {
		row(fmt.Sprintf("  prices/%d", i), "", item.State, item.Err) // an item's result; its node is inside prices
	}
	row("total", total.State(), total.Result().State, total.Result().Err)
	row("reviews-a", reviewsA.State(), reviewsA.Result().State, reviewsA.Result().Err)
	row("reviews-b", reviewsB.State(), reviewsB.Result().State, reviewsB.Result().Err)
	row("reviews", reviews.State(), reviews.Result().State, reviews.Result().Err)
	row("recs", recs.State(), recs.Result().State, recs.Result().Err)
	row("page", page.State(), page.Result().State, page.Result().Err)
	tw.Flush()
	fmt.Printf("\nrecs fell back to %v; BeginWork returned after %v (the deadline was 100ms): %v\n",
		recs.Result().Value, elapsed.Round(10*time.Millisecond), err)
}
