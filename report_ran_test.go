package asynctool

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBeginPanicRan pins what NodeReport.Ran means for a node whose
// Callback.Begin panicked: the node started (an attempt began, with its
// OnNodeStart hook and its start time), so Ran, Attempts, Started and
// the OnNodeEnd event's Attempt agree, though its worker was never
// called; its Reason is what tells the two apart. Ran's doc said "the
// worker's Action was called", which such a node contradicted.
func TestBeginPanicRan(t *testing.T) {
	started := make(chan NodeEvent, 1)
	ended := make(chan NodeEvent, 1)
	h := Hooks{
		OnNodeStart: func(ctx context.Context, ev NodeEvent) context.Context { started <- ev; return ctx },
		OnNodeEnd:   func(_ context.Context, ev NodeEvent) { ended <- ev },
	}
	a := newAsync(t, WithHooks(&h))
	called := false
	x := NewWrapper("x", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		called = true
		return 0, nil
	}), 0).Callback(callbackBeginPanics{})
	r, err := a.Start(context.Background(), time.Minute, x)
	require.NoError(t, err)
	var cpe *CallbackPanicError
	require.ErrorAs(t, r.Wait(context.Background()), &cpe)
	assert.False(t, called, "x's worker was called")
	n := r.Report().Nodes[0]
	assert.True(t, n.Ran, "Ran: the node started")
	assert.Equal(t, 1, n.Attempts)
	assert.False(t, n.Started.IsZero(), "Started is set with Attempts")
	assert.Equal(t, "callback Begin panicked", n.Reason)
	assert.Equal(t, 1, (<-started).Attempt)
	assert.Equal(t, 1, (<-ended).Attempt)
}
