package benchmarks

import "github.com/asynctool-go/asynctool/benchmarks/internal/shapes"

// shape is a graph shape of the suite, defined in internal/shapes, which
// the peer comparison (benchmarks/peers) imports too, so that both run
// the same graphs.
type shape = shapes.Shape
