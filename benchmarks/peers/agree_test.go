package peers

import (
	"fmt"
	"sync/atomic"
	"testing"
)

// TestImplementationsAgree runs every implementation on every shape of the
// benchmarks (the fan at 200 nodes instead of 1,000, to keep the test
// quick under -race) three times and checks that each run computed every
// node's reference value, running each node's work exactly once, so the
// benchmarks compare the same work.
func TestImplementationsAgree(t *testing.T) {
	shapes := []*shape{diamondShape(), fanShape(200), rpcShape(100)}
	all := append(impls(), impl{"goroutines", rawGoroutines})
	for _, s := range shapes {
		ref := s.Reference()
		for _, im := range all {
			if im.name == "goroutines" && !s.Sleep {
				continue
			}
			t.Run(fmt.Sprintf("%s/%s", s.Name, im.name), func(t *testing.T) {
				vals := make([]int64, s.N())
				s.calls = make([]atomic.Int32, s.N())
				t.Cleanup(func() { s.calls = nil })
				run := im.setup(t, s, vals)
				for round := range 3 {
					clear(vals)
					for i := range s.calls {
						s.calls[i].Store(0)
					}
					if err := run(); err != nil {
						t.Fatalf("round %d: %v", round, err)
					}
					for i := range s.calls {
						if c := s.calls[i].Load(); c != 1 {
							t.Fatalf("round %d: node %d ran %d times, want once", round, i, c)
						}
					}
					for i, want := range ref {
						if vals[i] != want {
							t.Fatalf("round %d: node %d = %d, want %d", round, i, vals[i], want)
						}
					}
				}
			})
		}
	}
}
