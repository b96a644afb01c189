package benchmarks

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/asynctool-go/asynctool"
	"github.com/asynctool-go/asynctool/benchmarks/internal/shapes"
)

// groupDeadline is the group deadline of every library and by-hand run:
// long enough never to fire, so its cost is paid but never its effect.
const groupDeadline = time.Minute

// node is the library node type of every benchmark: the parameter is the
// node's index in its shape, the result its value.
type node = asynctool.WorkerWrapper[int32, int64]

// libGraph is one build of a shape as library wrappers. nodes and roots
// are reused from build to build, so that a build allocates only what the
// library allocates.
type libGraph struct {
	s      *shape
	worker asynctool.Worker[int32, int64]
	cb     asynctool.Callback[int32, int64] // nil: the default no-op callback
	nodes  []*node
	roots  []asynctool.Wrapper
}

// newLibGraph prepares builds of s whose nodes compute into vals.
func newLibGraph(s *shape, vals []int64) *libGraph {
	return &libGraph{
		s: s,
		worker: asynctool.WorkerFunc[int32, int64](func(_ context.Context, i int32, _ asynctool.Wrappers) (int64, error) {
			return s.Work(vals, i), nil
		}),
		nodes: make([]*node, s.N()),
		roots: make([]asynctool.Wrapper, len(s.Roots)),
	}
}

// byID makes the graph's workers read their dependencies' values through
// the run's view with ResultOf, as request code does, instead of from
// vals; they still store their own value in vals.
func (g *libGraph) byID(vals []int64) *libGraph {
	s := g.s
	g.worker = asynctool.WorkerFunc[int32, int64](func(_ context.Context, i int32, all asynctool.Wrappers) (int64, error) {
		v := int64(1)
		for _, d := range s.Deps[i] {
			r, err := asynctool.ResultOf[int64](all, s.IDs[d])
			if err != nil {
				return 0, err
			}
			v += r.Value
		}
		vals[i] = v
		return v, nil
	})
	return g
}

// withCallback installs on every node a Result callback that stores the
// node's value in got.
func (g *libGraph) withCallback(got []int64) *libGraph {
	g.cb = asynctool.ResultFunc[int32, int64](func(ok bool, i int32, r asynctool.WorkResult[int64]) {
		if ok {
			got[i] = r.Value
		}
	})
	return g
}

// build makes fresh wrappers for every node, with every edge a must
// dependency, and returns the start nodes.
func (g *libGraph) build() []asynctool.Wrapper {
	s := g.s
	for i := range g.nodes {
		w := asynctool.NewWrapper(s.IDs[i], g.worker, int32(i))
		if g.cb != nil {
			w.Callback(g.cb)
		}
		for _, d := range s.Deps[i] {
			w.Depend(g.nodes[d], true)
		}
		g.nodes[i] = w
	}
	for k, r := range s.Roots {
		g.roots[k] = g.nodes[r]
	}
	return g.roots
}

// newAsync returns an Async with opts (none: the defaults), closed when
// tb ends.
func newAsync(tb testing.TB, opts ...asynctool.Option) *asynctool.Async {
	a := asynctool.New(opts...)
	tb.Cleanup(func() { a.Close() })
	return a
}

// measure runs body in a b.Loop and reports, besides the standard
// metrics, ns/node (elapsed time / (b.N × nodes)) and allocs/node: the
// runtime.MemStats.Mallocs delta across the loop, all goroutines included,
// divided by b.N × nodes. It then calls check, outside the measurement.
func measure(b *testing.B, nodes int, body func(), check func() error) {
	b.ReportAllocs()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for b.Loop() {
		body()
	}
	runtime.ReadMemStats(&after)
	per := float64(b.N) * float64(nodes)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/per, "ns/node")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/per, "allocs/node")
	if check != nil {
		if err := check(); err != nil {
			b.Fatal(err)
		}
	}
}

// checkSinks reports an error unless every sink of s has its reference
// value in vals.
func checkSinks(s *shape, ref, vals []int64) func() error {
	return func() error {
		for _, k := range s.Sinks {
			if vals[k] != ref[k] {
				return fmt.Errorf("%s: sink %d = %d, want %d", s.Name, k, vals[k], ref[k])
			}
		}
		return nil
	}
}

// impl is one way of running a shape in a benchmark: setup prepares it
// and returns one run's body.
type impl struct {
	name  string
	setup func(b *testing.B, s *shape, vals []int64) func()
}

var (
	implByHand = impl{"byhand", func(b *testing.B, s *shape, vals []int64) func() {
		return func() {
			if err := runByHand(context.Background(), s, vals, groupDeadline); err != nil {
				b.Fatal(err)
			}
		}
	}}
	implLimit = impl{"limit", func(b *testing.B, s *shape, vals []int64) func() {
		l := newLimit(s, vals, runtime.GOMAXPROCS(0))
		b.Cleanup(l.close)
		return l.run
	}}
	implLibraryRun = impl{"library-run", func(b *testing.B, s *shape, vals []int64) func() {
		return planRunner(b, newAsync(b), newLibGraph(s, vals))
	}}
	// implLibraryRunCPU is library-run on a pool of GOMAXPROCS goroutines,
	// the configuration for graphs of CPU-bound nodes.
	implLibraryRunCPU = impl{"library-run-cpu", func(b *testing.B, s *shape, vals []int64) func() {
		return planRunner(b, newAsync(b, asynctool.WithMaxWorkers(runtime.GOMAXPROCS(0))), newLibGraph(s, vals))
	}}
	implLibraryBuildRun = impl{"library-build+run", func(b *testing.B, s *shape, vals []int64) func() {
		return buildRunner(b, newAsync(b), newLibGraph(s, vals))
	}}
	// implLibraryHooks is library-run with a Result callback on every
	// node and an OnNodeEnd hook on the Async.
	implLibraryHooks = impl{"library-hooks", func(b *testing.B, s *shape, vals []int64) func() {
		a := newAsync(b, asynctool.WithHooks(endCounter(s.N())))
		return planRunner(b, a, newLibGraph(s, vals).withCallback(make([]int64, s.N())))
	}}
	// implLibraryByID is library-build+run with workers that read their
	// dependencies with ResultOf, as request code does.
	implLibraryByID = impl{"library-resultof", func(b *testing.B, s *shape, vals []int64) func() {
		return buildRunner(b, newAsync(b), newLibGraph(s, vals).byID(vals))
	}}
)

// planRunner compiles g once and returns a body that runs the plan and
// releases the run.
func planRunner(b *testing.B, a *asynctool.Async, g *libGraph) func() {
	p, err := asynctool.Compile(g.build()...)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	return func() {
		r, err := a.RunPlan(ctx, p, groupDeadline)
		if err != nil {
			b.Fatal(err)
		}
		r.Release()
	}
}

// endCounter returns hooks whose OnNodeEnd counts each node's ends in
// its own slot, so that the hook itself adds no contention.
func endCounter(n int) *asynctool.Hooks {
	ends := make([]int64, n)
	return &asynctool.Hooks{OnNodeEnd: func(_ context.Context, ev asynctool.NodeEvent) { ends[ev.Index]++ }}
}

// buildRunner returns a body that builds g afresh and runs it with
// BeginWork.
func buildRunner(b *testing.B, a *asynctool.Async, g *libGraph) func() {
	ctx := context.Background()
	return func() {
		if err := a.BeginWork(ctx, groupDeadline, g.build()...); err != nil {
			b.Fatal(err)
		}
	}
}

// runImpls runs one sub-benchmark impl=<name> per implementation on s.
func runImpls(b *testing.B, s *shape, impls []impl) {
	ref := s.Reference()
	for _, im := range impls {
		b.Run("impl="+im.name, func(b *testing.B) {
			vals := make([]int64, s.N())
			body := im.setup(b, s, vals)
			measure(b, s.N(), body, checkSinks(s, ref, vals))
		})
	}
}

// BenchmarkGraph compares the library with the two baselines on the
// 1,000-node shapes: run of a pre-built graph, build + run, and run with
// hooks installed.
func BenchmarkGraph(b *testing.B) {
	impls := []impl{implLibraryRun, implLibraryRunCPU, implByHand, implLimit, implLibraryBuildRun, implLibraryHooks}
	for _, s := range shapes.Graph() {
		b.Run(fmt.Sprintf("shape=%s/n=%d", s.Name, s.N()), func(b *testing.B) {
			runImpls(b, s, impls)
		})
	}
}

// BenchmarkDiamond measures the common small request graph, a → b, c → d,
// where per-run overhead dominates: library-build+run is the target's
// "build + run with a group deadline".
func BenchmarkDiamond(b *testing.B) {
	runImpls(b, shapes.Diamond(), []impl{implByHand, implLimit, implLibraryBuildRun, implLibraryByID, implLibraryRun})
}

// BenchmarkSizes runs chains and fans of growing size: ns/node should
// stay flat, showing no work quadratic in the graph's size.
func BenchmarkSizes(b *testing.B) {
	for _, mk := range []func(int) *shape{shapes.Chain, shapes.Fan} {
		for _, n := range []int{100, 1000, 10000} {
			s := mk(n)
			b.Run(fmt.Sprintf("shape=%s/n=%d", s.Name, n), func(b *testing.B) {
				runImpls(b, s, []impl{implLibraryRun, implLibraryBuildRun})
			})
		}
	}
}

// BenchmarkRPCFanout is the realistic case: 1 → 100 nodes that each sleep
// 1 ms → 1, with the default Async. ns/op is the wall time of one run;
// impl=goroutines is the floor: 100 raw goroutines and a WaitGroup.
func BenchmarkRPCFanout(b *testing.B) {
	s := shapes.RPC(100)
	goroutines := impl{"goroutines", func(b *testing.B, s *shape, vals []int64) func() {
		return func() { runGoroutines(s, vals) }
	}}
	library := implLibraryBuildRun
	library.name = "library"
	runImpls(b, s, []impl{goroutines, library, implLibraryRun, implByHand})
}

// BenchmarkRPCFanoutPaired measures the RPC target's difference itself.
// Each iteration runs the shape on 100 raw goroutines and with the
// library, in alternating order, and the benchmark reports the median and
// the mean of the per-iteration differences in µs (us-over-goroutines,
// mean-us-over-goroutines). Pairing cancels the drift of a shared
// machine, which moves the separate sub-benchmarks of BenchmarkRPCFanout
// by more than the target's 100 µs from one run to the next. ns/op is the
// time of both runs together.
func BenchmarkRPCFanoutPaired(b *testing.B) {
	s := shapes.RPC(100)
	library := implLibraryBuildRun
	library.name = "library"
	ref := s.Reference()
	for _, im := range []impl{library, implLibraryRun} {
		b.Run("impl="+im.name, func(b *testing.B) {
			vals := make([]int64, s.N())
			body := im.setup(b, s, vals)
			timed := func(f func()) time.Duration {
				t0 := time.Now()
				f()
				return time.Since(t0)
			}
			var diffs []float64
			raw := func() { runGoroutines(s, vals) }
			for b.Loop() {
				var d time.Duration
				if len(diffs)%2 == 0 {
					d = -timed(raw)
					d += timed(body)
				} else {
					d = timed(body)
					d -= timed(raw)
				}
				diffs = append(diffs, float64(d)/1e3)
			}
			slices.Sort(diffs)
			var sum float64
			for _, d := range diffs {
				sum += d
			}
			b.ReportMetric(diffs[len(diffs)/2], "us-over-goroutines")
			b.ReportMetric(sum/float64(len(diffs)), "mean-us-over-goroutines")
			if err := checkSinks(s, ref, vals)(); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// runGoroutines runs a 1 → n → 1 shape with one raw goroutine per middle
// node and a WaitGroup: the source and the sink run on the caller.
func runGoroutines(s *shape, vals []int64) {
	s.Work(vals, 0)
	var wg sync.WaitGroup
	last := int32(s.N() - 1)
	for i := int32(1); i < last; i++ {
		wg.Go(func() { s.Work(vals, i) })
	}
	wg.Wait()
	s.Work(vals, last)
}
