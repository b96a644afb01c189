package benchmarks

import (
	"context"
	"fmt"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/asynctool-go/asynctool"
)

// BenchmarkForEach measures a dynamic fan-out: a root returns a list of
// items, then one call per item, its width known only at run time.
//   - impl=foreach: a compiled plan of the root and a ForEach node
//     (zero Join), run with RunPlan and released;
//   - impl=foreach-all: the same with Join AllSucceeded (a join node);
//   - impl=errgroup: what a Go user writes without the library, the
//     root's call, then one goroutine per item under errgroup.WithContext
//     and a deadline, results into a slice.
//
// ns/node and allocs/node are per item. work=none calls return at once,
// so they are the cost of the fan-out itself; work=1ms calls sleep a millisecond, as an RPC would, and ns/op
// is the wall time of one request. Items of the list are what calls
// receive; every implementation checks its results.
func BenchmarkForEach(b *testing.B) {
	for _, work := range []time.Duration{0, time.Millisecond} {
		for _, n := range []int{10, 100} {
			fe := newForEachBench(work, n)
			b.Run(fmt.Sprintf("work=%s/items=%d/impl=errgroup", fe.name, n), func(b *testing.B) {
				fe.errgroup(b, 0)
			})
			for _, impl := range []struct {
				name string
				join asynctool.Join
			}{{"foreach", asynctool.Join{}}, {"foreach-all", asynctool.AllSucceeded()}} {
				b.Run(fmt.Sprintf("work=%s/items=%d/impl=%s", fe.name, n, impl.name), func(b *testing.B) {
					fe.forEach(b, impl.join, 0)
				})
			}
		}
	}
}

// BenchmarkForEachLimit measures ForEach's Limit against errgroup's
// SetLimit: 100 items, at most 8 at work at once.
//   - impl=errgroup-limit: the root's call, then errgroup.WithContext with
//     SetLimit(8) and a deadline (g.Go blocks the caller while 8 run);
//   - impl=foreach-limit: a compiled plan of the root and a ForEach node
//     with Limit 8, run with RunPlan and released.
//
// work=1ms calls sleep a millisecond: the wall time is about 13 rounds of
// 1 ms for both, and what the benchmark shows is the difference. work=none
// is the cost of the fan-out and of its limit.
func BenchmarkForEachLimit(b *testing.B) {
	const n, limit = 100, 8
	for _, work := range []time.Duration{0, time.Millisecond} {
		fe := newForEachBench(work, n)
		b.Run(fmt.Sprintf("work=%s/impl=errgroup-limit", fe.name), func(b *testing.B) {
			fe.errgroup(b, limit)
		})
		b.Run(fmt.Sprintf("work=%s/impl=foreach-limit", fe.name), func(b *testing.B) {
			fe.forEach(b, asynctool.Join{}, limit)
		})
	}
}

// forEachBench is the fan-out both benchmarks measure: n items, each a
// call that takes work.
type forEachBench struct {
	name string // work, as the benchmark names it
	n    int
	work time.Duration
	list []int
}

func newForEachBench(work time.Duration, n int) *forEachBench {
	fe := &forEachBench{name: "none", n: n, work: work, list: make([]int, n)}
	if work > 0 {
		fe.name = work.String()
	}
	for i := range fe.list {
		fe.list[i] = i
	}
	return fe
}

// call is one item's call: it waits work (or ctx) and doubles the item.
func (fe *forEachBench) call(ctx context.Context, item int) (int, error) {
	if fe.work > 0 {
		select {
		case <-time.After(fe.work):
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return item * 2, nil
}

// check says whether got gives every item's doubled value.
func (fe *forEachBench) check(got func(i int) (int, error)) error {
	for i := range fe.n {
		v, err := got(i)
		if err != nil || v != 2*i {
			return fmt.Errorf("item %d: %d, %v", i, v, err)
		}
	}
	return nil
}

// errgroup runs the fan-out by hand: the root's call, then one goroutine
// per item under errgroup.WithContext and a deadline, SetLimit(limit) if
// limit > 0.
func (fe *forEachBench) errgroup(b *testing.B, limit int) {
	var res []int
	measure(b, fe.n, func() {
		ctx, cancel := context.WithTimeout(context.Background(), groupDeadline)
		defer cancel()
		items := append([]int(nil), fe.list...) // the root's call
		res = make([]int, len(items))
		g, gctx := errgroup.WithContext(ctx)
		if limit > 0 {
			g.SetLimit(limit)
		}
		for i, item := range items {
			g.Go(func() error {
				v, err := fe.call(gctx, item)
				res[i] = v
				return err
			})
		}
		if err := g.Wait(); err != nil {
			panic(err)
		}
	}, func() error { return fe.check(func(i int) (int, error) { return res[i], nil }) })
}

// forEach runs a compiled plan of the root and a ForEach node with join
// and limit, with RunPlan, and releases each run.
func (fe *forEachBench) forEach(b *testing.B, join asynctool.Join, limit int) {
	a := newAsync(b)
	root := asynctool.NewWrapper("items", asynctool.WorkerFunc[int, []int](
		func(context.Context, int, asynctool.Wrappers) ([]int, error) {
			return append([]int(nil), fe.list...), nil
		}), 0)
	each := asynctool.NewWrapper("each", asynctool.ForEach[int, int, int]{
		Items: func(_ context.Context, _ int, all asynctool.Wrappers) ([]int, error) {
			r, err := root.ResultFrom(all)
			return r.Value, err
		},
		Worker: asynctool.WorkerFunc[int, int](fe.callWorker),
		Join:   join,
		Limit:  limit,
	}, 0).Depend(root, true)
	pl, err := asynctool.Compile(root)
	if err != nil {
		b.Fatal(err)
	}
	var last []asynctool.WorkResult[int]
	ctx := context.Background()
	measure(b, fe.n, func() {
		run, err := a.RunPlan(ctx, pl, groupDeadline)
		if err != nil {
			panic(err)
		}
		r := each.ResultIn(run)
		if r.Err != nil {
			panic(r.Err)
		}
		last = r.Value
		run.Release()
	}, func() error {
		return fe.check(func(i int) (int, error) { return last[i].Value, last[i].Err })
	})
}

// callWorker is call as a worker.
func (fe *forEachBench) callWorker(ctx context.Context, item int, _ asynctool.Wrappers) (int, error) {
	return fe.call(ctx, item)
}
