package asynctool

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A custom join that returns a value that is not a Decision fails its
// node, as a panicking join does. It counted as decided without acting,
// so the join was never asked again and the node, neither run nor
// failed, kept the run open for ever (with no deadline).
func TestCustomJoinUnknownDecisionFailsTheNode(t *testing.T) {
	a := newAsync(t)
	rec := newRecorder()
	u1 := rec.node("u1", ok(1))
	u2 := rec.node("u2", ok(2))
	c := rec.node("c", ok(3)).Depend(u1, true).Depend(u2, true).
		Join(CustomJoin(func([]Upstream) Decision { return Decision(42) }))
	r, err := a.Start(context.Background(), 0, u1, u2)
	require.NoError(t, err)
	t.Cleanup(r.Cancel) // before newAsync's Close, if the run hangs
	requireEnds(t, r, "the run hangs on a join that returned Decision(42)")
	require.NoError(t, r.Wait(context.Background()))
	assert.Equal(t, ResultException, c.Result().State)
	assert.ErrorContains(t, c.Result().Err, "Decision(42)")
	assert.Zero(t, rec.count(rec.actions, "c"))
	// Its worker never ran: the report says the join failed it.
	assert.Contains(t, r.Report().Nodes[indexOf(r, "c")].Reason, "custom join failed")
}
