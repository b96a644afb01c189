// Command runpicture runs a product page's fan-out once and prints its
// report as a picture: a Mermaid flowchart (the default), Graphviz DOT,
// or a Chrome trace for Perfetto. The README's "Seeing a run" section
// shows its output.
//
//	go run ./examples/runpicture                        # Mermaid
//	go run ./examples/runpicture -format dot | dot -Tpng > run.png
//	go run ./examples/runpicture -format trace > run.json   # open in ui.perfetto.dev
//
// The graph, whose RPCs are simulated with sleeps:
//
//	user ──must──▶ page, and ──must──▶ recs (slow: cut by the 100ms deadline)
//	cart ──must──▶ prices (one RPC per item: a ForEach) ──must──▶ total ──must──▶ page
//	recs ──optional──▶ page
//	mirror ──must──▶ reviews-c
//	reviews-a (down), reviews-b, reviews-c ──optional──▶ reviews (the first success) ──optional──▶ page
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/asynctool-go/asynctool"
)

// rpc simulates a call that takes d and then returns v, or err.
func rpc(d time.Duration, err error) asynctool.WorkerFunc[int64, string] {
	return func(ctx context.Context, _ int64, _ asynctool.Wrappers) (string, error) {
		select {
		case <-time.After(d):
			return "ok", err
		case <-ctx.Done():
			return "", context.Cause(ctx)
		}
	}
}

func main() {
	format := flag.String("format", "mermaid", "mermaid, dot or trace")
	flag.Parse()
	if err := run(*format); err != nil {
		fmt.Fprintln(os.Stderr, "runpicture:", err)
		os.Exit(1)
	}
}

// run runs the graph and prints its report in format. It checks format
// first, so as not to run the graph for nothing, and returns its errors
// rather than exit, so that its deferred Close runs.
func run(format string) error {
	switch format {
	case "mermaid", "dot", "trace":
	default:
		return fmt.Errorf("unknown format %q: want mermaid, dot or trace", format)
	}
	node := func(id string, d time.Duration, err error) *asynctool.WorkerWrapper[int64, string] {
		return asynctool.NewWrapper(id, rpc(d, err), 42)
	}
	user := node("user", 20*time.Millisecond, nil)
	cart := node("cart", 15*time.Millisecond, nil)
	prices := asynctool.NewWrapper("prices", asynctool.ForEach[int64, string, string]{
		Items: func(context.Context, int64, asynctool.Wrappers) ([]string, error) {
			return []string{"book", "lamp", "mug"}, nil // read from cart's result, in real life
		},
		Worker: asynctool.WorkerFunc[string, string](func(ctx context.Context, sku string, _ asynctool.Wrappers) (string, error) {
			select {
			case <-time.After(map[string]time.Duration{"book": 12, "lamp": 14, "mug": 9}[sku] * time.Millisecond):
				return "ok", nil
			case <-ctx.Done():
				return "", context.Cause(ctx)
			}
		}),
		ID:   func(_ int, sku string) string { return sku },
		Join: asynctool.AllSucceeded(),
	}, 42).Depend(cart, true)
	total := node("total", 2*time.Millisecond, nil).Depend(prices, true)
	recs := node("recs", 300*time.Millisecond, nil).Depend(user, true).Default("bestsellers")
	reviewsA := node("reviews-a", 2*time.Millisecond, errors.New("connection refused"))
	reviewsB := node("reviews-b", 8*time.Millisecond, nil)
	mirror := node("mirror", 30*time.Millisecond, nil)
	reviewsC := node("reviews-c", 5*time.Millisecond, nil).Depend(mirror, true)
	reviews := node("reviews", time.Millisecond, nil).
		Depend(reviewsA, false).Depend(reviewsB, false).Depend(reviewsC, false)
	node("page", 3*time.Millisecond, nil).
		Depend(user, true).Depend(total, true).Depend(recs, false).Depend(reviews, false)

	a := asynctool.New(asynctool.WithTimings(true))
	defer a.Close()
	r, err := a.Start(context.Background(), 100*time.Millisecond, user, cart, reviewsA, reviewsB, mirror)
	if err != nil {
		return err
	}
	_ = r.Wait(context.Background()) // the deadline cuts recs short: that is the point
	rep := r.Report()
	switch format {
	case "mermaid":
		fmt.Print(rep.Mermaid())
	case "dot":
		fmt.Print(rep.DOT())
	case "trace":
		return rep.WriteChromeTrace(os.Stdout)
	}
	return nil
}
