package asynctool_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/asynctool-go/asynctool"
)

// Describe draws a graph before it runs: must edges are solid, optional
// edges dotted.
func ExampleReport_Mermaid() {
	fetch := asynctool.WorkerFunc[int64, string](func(context.Context, int64, asynctool.Wrappers) (string, error) {
		return "ok", nil
	})
	user := asynctool.NewWrapper("user", fetch, 42)
	ads := asynctool.NewWrapper("ads", fetch, 42)
	asynctool.NewWrapper("page", fetch, 42).
		Depend(user, true).
		Depend(ads, false)

	rep, err := asynctool.Describe(user, ads)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(rep.Mermaid())
	// Output:
	// flowchart LR
	//   n0["user"]
	//   n1["ads"]
	//   n2["page"]
	//   n0 --> n2
	//   n1 -.-> n2
}

// After a run, each node is coloured by its outcome. With WithTimings the
// labels also show durations and the critical path is drawn thick.
func ExampleReport_DOT() {
	ok := asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) { return 1, nil })
	bad := asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
		return 0, errors.New("down")
	})
	user := asynctool.NewWrapper("user", ok, 1)
	recs := asynctool.NewWrapper("recs", bad, 1).Depend(user, true)
	asynctool.NewWrapper("page", ok, 1).Depend(recs, true)

	a := asynctool.New()
	defer a.Close()
	r, err := a.Start(context.Background(), 0, user)
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = r.Wait(context.Background())
	fmt.Print(r.Report().DOT()) // pipe into: dot -Tsvg > run.svg
	// Output:
	// digraph asynctool {
	//   rankdir=LR;
	//   node [shape=box, style="rounded,filled", fillcolor="#ffffff", fontname="Helvetica"];
	//   edge [fontname="Helvetica"];
	//   n0 [label="user\nsuccess", fillcolor="#a6d96a"];
	//   n1 [label="recs\nexception", fillcolor="#f4a582"];
	//   n2 [label="page\nexception", fillcolor="#f4a582"];
	//   n0 -> n1;
	//   n1 -> n2;
	// }
}

// WriteChromeTrace writes the timeline for Perfetto or chrome://tracing:
// one complete event per node that ran, one track per goroutine lane.
func ExampleReport_WriteChromeTrace() {
	work := asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) { return 1, nil })
	x := asynctool.NewWrapper("x", work, 1)
	asynctool.NewWrapper("y", work, 1).Depend(x, true)

	a := asynctool.New(asynctool.WithTimings(true)) // the trace needs times
	defer a.Close()
	r, err := a.Start(context.Background(), 0, x)
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = r.Wait(context.Background())
	f, err := os.CreateTemp("", "run-*.json")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.Remove(f.Name())
	defer f.Close()
	fmt.Println(r.Report().WriteChromeTrace(f))
	// Output:
	// <nil>
}
