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
			name := "none"
			if work > 0 {
				name = work.String()
			}
			call := func(ctx context.Context, item int) (int, error) {
				if work > 0 {
					select {
					case <-time.After(work):
					case <-ctx.Done():
						return 0, ctx.Err()
					}
				}
				return item * 2, nil
			}
			list := make([]int, n)
			for i := range list {
				list[i] = i
			}
			check := func(got func(i int) (int, error)) error {
				for i := range n {
					v, err := got(i)
					if err != nil || v != 2*i {
						return fmt.Errorf("item %d: %d, %v", i, v, err)
					}
				}
				return nil
			}
			b.Run(fmt.Sprintf("work=%s/items=%d/impl=errgroup", name, n), func(b *testing.B) {
				var res []int
				measure(b, n, func() {
					ctx, cancel := context.WithTimeout(context.Background(), groupDeadline)
					defer cancel()
					items := append([]int(nil), list...) // the root's call
					res = make([]int, len(items))
					g, gctx := errgroup.WithContext(ctx)
					for i, item := range items {
						g.Go(func() error {
							v, err := call(gctx, item)
							res[i] = v
							return err
						})
					}
					if err := g.Wait(); err != nil {
						panic(err)
					}
				}, func() error { return check(func(i int) (int, error) { return res[i], nil }) })
			})
			for _, impl := range []struct {
				name string
				join asynctool.Join
			}{{"foreach", asynctool.Join{}}, {"foreach-all", asynctool.AllSucceeded()}} {
				b.Run(fmt.Sprintf("work=%s/items=%d/impl=%s", name, n, impl.name), func(b *testing.B) {
					a := newAsync(b)
					root := asynctool.NewWrapper("items", asynctool.WorkerFunc[int, []int](
						func(context.Context, int, asynctool.Wrappers) ([]int, error) {
							return append([]int(nil), list...), nil
						}), 0)
					each := asynctool.NewWrapper("each", asynctool.ForEach[int, int, int]{
						Items: func(_ context.Context, _ int, all asynctool.Wrappers) ([]int, error) {
							r, err := root.ResultFrom(all)
							return r.Value, err
						},
						Worker: asynctool.WorkerFunc[int, int](func(ctx context.Context, item int, _ asynctool.Wrappers) (int, error) {
							return call(ctx, item)
						}),
						Join: impl.join,
					}, 0).Depend(root, true)
					pl, err := asynctool.Compile(root)
					if err != nil {
						b.Fatal(err)
					}
					var last []asynctool.WorkResult[int]
					ctx := context.Background()
					measure(b, n, func() {
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
						return check(func(i int) (int, error) { return last[i].Value, last[i].Err })
					})
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
		name := "none"
		if work > 0 {
			name = work.String()
		}
		call := func(ctx context.Context, item int) (int, error) {
			if work > 0 {
				select {
				case <-time.After(work):
				case <-ctx.Done():
					return 0, ctx.Err()
				}
			}
			return item * 2, nil
		}
		list := make([]int, n)
		for i := range list {
			list[i] = i
		}
		check := func(got func(i int) (int, error)) error {
			for i := range n {
				v, err := got(i)
				if err != nil || v != 2*i {
					return fmt.Errorf("item %d: %d, %v", i, v, err)
				}
			}
			return nil
		}
		b.Run(fmt.Sprintf("work=%s/impl=errgroup-limit", name), func(b *testing.B) {
			var res []int
			measure(b, n, func() {
				ctx, cancel := context.WithTimeout(context.Background(), groupDeadline)
				defer cancel()
				items := append([]int(nil), list...)
				res = make([]int, len(items))
				g, gctx := errgroup.WithContext(ctx)
				g.SetLimit(limit)
				for i, item := range items {
					g.Go(func() error {
						v, err := call(gctx, item)
						res[i] = v
						return err
					})
				}
				if err := g.Wait(); err != nil {
					panic(err)
				}
			}, func() error { return check(func(i int) (int, error) { return res[i], nil }) })
		})
		b.Run(fmt.Sprintf("work=%s/impl=foreach-limit", name), func(b *testing.B) {
			a := newAsync(b)
			root := asynctool.NewWrapper("items", asynctool.WorkerFunc[int, []int](
				func(context.Context, int, asynctool.Wrappers) ([]int, error) {
					return append([]int(nil), list...), nil
				}), 0)
			each := asynctool.NewWrapper("each", asynctool.ForEach[int, int, int]{
				Items: func(_ context.Context, _ int, all asynctool.Wrappers) ([]int, error) {
					r, err := root.ResultFrom(all)
					return r.Value, err
				},
				Worker: asynctool.WorkerFunc[int, int](func(ctx context.Context, item int, _ asynctool.Wrappers) (int, error) {
					return call(ctx, item)
				}),
				Limit: limit,
			}, 0).Depend(root, true)
			pl, err := asynctool.Compile(root)
			if err != nil {
				b.Fatal(err)
			}
			var last []asynctool.WorkResult[int]
			ctx := context.Background()
			measure(b, n, func() {
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
				return check(func(i int) (int, error) { return last[i].Value, last[i].Err })
			})
		})
	}
}
