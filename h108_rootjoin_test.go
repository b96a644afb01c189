package asynctool

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestH108CustomJoinOnAStartNodeIsRefused: a start node has no upstreams,
// so its CustomJoin is never asked: the node ran as if it had none, even
// when fn would have failed or skipped it. Compile now refuses it with
// ErrBadJoin naming the node, as it refuses AtLeast(1), NamedSucceeded
// and When on such a node, and nothing runs.
func TestH108CustomJoinOnAStartNodeIsRefused(t *testing.T) {
	a := newAsync(t)
	var asked, ran atomic.Int32
	c := NewWrapper("gate", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		ran.Add(1)
		return 1, nil
	}), 0).Join(CustomJoin(func([]Upstream) Decision { asked.Add(1); return DecideFail }))
	err := a.BeginWork(context.Background(), time.Second, c)
	require.ErrorIs(t, err, ErrBadJoin, "got %v, want ErrBadJoin", err)
	var ge *GraphError
	require.ErrorAs(t, err, &ge)
	assert.Equal(t, []string{"gate"}, ge.Nodes)
	assert.Contains(t, err.Error(), `"gate"`)
	assert.Zero(t, ran.Load(), "the node ran")
	assert.Zero(t, asked.Load())

	// With an upstream it is asked, and decides.
	u := NewWrapper("u", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 1, nil }), 0)
	d := NewWrapper("d", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		ran.Add(1)
		return 1, nil
	}), 0).Depend(u, true).Join(CustomJoin(func([]Upstream) Decision { asked.Add(1); return DecideFail }))
	require.NoError(t, a.BeginWork(context.Background(), time.Second, u))
	assert.ErrorIs(t, d.Result().Err, ErrJoinFailed)
	assert.Equal(t, int32(1), asked.Load())
	assert.Zero(t, ran.Load())
}
