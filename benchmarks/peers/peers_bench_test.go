package peers

import (
	"fmt"
	"runtime"
	"testing"
)

// measure runs body in a b.Loop and reports, besides the standard
// metrics, ns/node (elapsed time / (b.N × nodes)) and allocs/node: the
// runtime.MemStats.Mallocs delta across the loop, all goroutines included,
// divided by b.N × nodes, as the root suite's measure does
// (benchmarks/graph_bench_test.go). It then checks every node's value.
func measure(b *testing.B, s *shape, vals []int64, body func() error) {
	b.ReportAllocs()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for b.Loop() {
		if err := body(); err != nil {
			b.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	per := float64(b.N) * float64(s.N())
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/per, "ns/node")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/per, "allocs/node")
	for i, want := range s.Reference() {
		if vals[i] != want {
			b.Fatalf("%s: node %d = %d, want %d", s.Name, i, vals[i], want)
		}
	}
}

// runImpls runs one sub-benchmark impl=<name> per implementation on s.
func runImpls(b *testing.B, s *shape, list []impl) {
	for _, im := range list {
		b.Run("impl="+im.name, func(b *testing.B) {
			vals := make([]int64, s.N())
			measure(b, s, vals, im.setup(b, s, vals))
		})
	}
}

// BenchmarkDiamond is the small request graph a → b, c → d, where per-run
// overhead dominates; every run has a one-minute group deadline (see
// groupDeadline), as in the root suite's BenchmarkDiamond.
func BenchmarkDiamond(b *testing.B) {
	runImpls(b, diamondShape(), impls())
}

// BenchmarkFan is the 1 → 1000 → 1 fan of the root suite's
// BenchmarkGraph, with trivial work per node: the schedulers' own cost.
func BenchmarkFan(b *testing.B) {
	s := fanShape(1000)
	b.Run(fmt.Sprintf("n=%d", s.N()), func(b *testing.B) { runImpls(b, s, impls()) })
}

// BenchmarkRPCFanout is 1 → 100 nodes that each sleep 1 ms → 1: ns/op is
// the wall time of one run. impl=goroutines is the floor, 100 raw
// goroutines and a WaitGroup, as in the root suite's BenchmarkRPCFanout.
func BenchmarkRPCFanout(b *testing.B) {
	runImpls(b, rpcShape(100), append([]impl{{"goroutines", rawGoroutines}}, impls()...))
}
