package benchmarks

import (
	"fmt"
	"testing"

	"github.com/asynctool-go/asynctool"
	"github.com/asynctool-go/asynctool/benchmarks/internal/shapes"
)

// BenchmarkBuildPhases splits library-build+run, the target's "build +
// run", into its phases on the five 1,000-node shapes, to tell what its
// distance from run of a plan is made of:
//
//   - alloc: one zero wrapper allocated per node and kept until the next
//     iteration, as build keeps its wrappers: what the builder API's one
//     object per node costs before anything is written into it;
//   - build: NewWrapper and Depend for every node and edge (libGraph.build),
//     without a run;
//   - build+compile: build, then the public Compile, which allocates its
//     working arrays where BeginWork reuses arrays its Async pools, so
//     this overstates BeginWork's compile a little;
//   - library-build+run and library-run as in BenchmarkGraph.
//
// build+run − build is what BeginWork adds to building: compiling the
// graph and running it once.
func BenchmarkBuildPhases(b *testing.B) {
	for _, s := range shapes.Graph() {
		b.Run(fmt.Sprintf("shape=%s/n=%d", s.Name, s.N()), func(b *testing.B) {
			b.Run("impl=alloc", func(b *testing.B) {
				nodes := make([]*node, s.N())
				measure(b, s.N(), func() {
					for i := range nodes {
						nodes[i] = new(node)
					}
				}, nil)
			})
			vals := make([]int64, s.N())
			g := newLibGraph(s, vals)
			b.Run("impl=build", func(b *testing.B) {
				var roots []asynctool.Wrapper
				measure(b, s.N(), func() { roots = g.build() }, func() error {
					// The last build is a whole graph of the shape:
					// it compiles, with every node.
					p, err := asynctool.Compile(roots...)
					if err != nil {
						return err
					}
					if p.Len() != s.N() {
						return fmt.Errorf("the build compiles to %d nodes, want %d", p.Len(), s.N())
					}
					return nil
				})
			})
			b.Run("impl=build+compile", func(b *testing.B) {
				var p *asynctool.Plan
				measure(b, s.N(), func() {
					var err error
					if p, err = asynctool.Compile(g.build()...); err != nil {
						b.Fatal(err)
					}
				}, func() error {
					if p.Len() != s.N() {
						return fmt.Errorf("plan has %d nodes, want %d", p.Len(), s.N())
					}
					return nil
				})
			})
			runImpls(b, s, []impl{implLibraryBuildRun, implLibraryRun})
		})
	}
}
