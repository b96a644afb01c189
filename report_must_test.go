package asynctool

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMustIsTheJoins: NodeReport.Must, and the edges DOT and Mermaid
// draw from it, showed Depend's must flag under joins that ignore it: a
// node with AnySucceeded over two upstreams declared must was drawn
// with two solid edges, though either upstream's failure alone changes
// nothing. Must now says how the node's join treats each edge, as it
// already did for AllSucceeded and NamedSucceeded.
func TestMustIsTheJoins(t *testing.T) {
	always := func(WorkResult[int]) bool { return true }
	tests := []struct {
		join Join
		want []bool // for Depend(u0, true).Depend(u1, false)
	}{
		{Join{}, []bool{true, false}},
		{AllSucceeded(), []bool{true, true}},
		{NamedSucceeded("u1"), []bool{false, true}},
		{When("u0", func(int) bool { return true }), []bool{true, true}},
		{AnySucceeded(), []bool{false, false}},
		{AtLeast(1), []bool{false, false}},
		{AtLeast(2), []bool{false, false}},
		{AllDone(), []bool{false, false}},
		{WhenResult("u0", always), []bool{false, false}},
		{CustomJoin(func([]Upstream) Decision { return DecideRun }), []bool{false, false}},
	}
	for _, tt := range tests {
		t.Run(tt.join.String(), func(t *testing.T) {
			u0, u1 := NewWrapper("u0", okWorker(), 0), NewWrapper("u1", okWorker(), 0)
			n := NewWrapper("n", okWorker(), 0).Depend(u0, true).Depend(u1, false)
			if tt.join.kind != joinDefault {
				n.Join(tt.join)
			}
			rep, err := Describe(u0, u1)
			require.NoError(t, err)
			got := rep.Nodes[2]
			require.Equal(t, "n", got.ID)
			assert.Equal(t, tt.want, got.Must)
			for k, must := range tt.want {
				line := fmt.Sprintf("n%d -> n2;", got.Deps[k])
				if !must {
					line = fmt.Sprintf("n%d -> n2 [style=dashed];", got.Deps[k])
				}
				assert.Contains(t, rep.DOT(), line)
			}
		})
	}
	// The run's report agrees with Describe's.
	u0, u1 := NewWrapper("u0", okWorker(), 0), NewWrapper("u1", okWorker(), 0)
	NewWrapper("n", okWorker(), 0).Depend(u0, true).Depend(u1, true).Join(AnySucceeded())
	a := newAsync(t)
	r, err := a.Start(context.Background(), 0, u0, u1)
	require.NoError(t, err)
	require.NoError(t, r.Wait(context.Background()))
	assert.Equal(t, []bool{false, false}, r.Report().Nodes[2].Must)
}
