package asynctool

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestH109CycleErrorQuotesIDs: a cycle's path was its ids joined with
// " -> " as they are, so a cycle of anonymous nodes read "dependency
// cycle:  ->  -> ", and one through an id holding " -> " could not be
// told from a longer cycle. Ids are quoted, as in every other
// GraphError (`"a" -> "b"` of a conflicting edge).
func TestH109CycleErrorQuotesIDs(t *testing.T) {
	n := func(id string) *WorkerWrapper[int, int] { return NewWrapper(id, okWorker(), 0) }
	tests := []struct {
		name  string
		build func() Wrapper
		msg   string
		nodes []string
	}{
		{"anonymous", func() Wrapper {
			s, b, c := n("s"), n(""), n("")
			b.Depend(s, true)
			c.Depend(b, true)
			b.Depend(c, true)
			return s
		}, `asynctool: dependency cycle: "" -> "" -> ""`, []string{"", "", ""}},
		{"arrow in an id", func() Wrapper {
			x, y := n("x -> y"), n("y")
			y.Depend(x, true)
			x.Depend(y, true)
			return x
		}, `asynctool: dependency cycle: "x -> y" -> "y" -> "x -> y"`, []string{"x -> y", "y", "x -> y"}},
		{"self", func() Wrapper { a := n("a"); a.Depend(a, false); return a }, `asynctool: dependency cycle: "a" -> "a"`, []string{"a", "a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Describe(tt.build())
			require.ErrorIs(t, err, ErrCycle)
			assert.EqualError(t, err, tt.msg)
			var ge *GraphError
			require.ErrorAs(t, err, &ge)
			assert.Equal(t, tt.nodes, ge.Nodes)
		})
	}
}
