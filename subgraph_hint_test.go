package asynctool

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A Depend, in a ForEach's Node, on a node of the outer graph fails the
// node with ErrReused and says what to do instead.
func TestForEachItemDependingOnAnOuterNodeSaysWhatToDo(t *testing.T) {
	a := New()
	defer a.Close()
	cart := NewWrapper("cart", WorkerFunc[int, []int](func(context.Context, int, Wrappers) ([]int, error) {
		return []int{1, 2}, nil
	}), 0)
	each := NewWrapper("each", ForEach[int, int, int]{
		Items: func(_ context.Context, _ int, all Wrappers) ([]int, error) {
			r, err := cart.ResultFrom(all)
			return r.Value, err
		},
		Worker: WorkerFunc[int, int](func(_ context.Context, i int, _ Wrappers) (int, error) { return i, nil }),
		Node:   func(_ int, _ int, n *WorkerWrapper[int, int]) { n.Depend(cart, true) },
	}, 0).Depend(cart, true)
	require.NoError(t, a.BeginWork(context.Background(), time.Second, cart))
	err := each.Result().Err
	require.ErrorIs(t, err, ErrReused)
	assert.ErrorContains(t, err, `ForEach's items: `)
	assert.ErrorContains(t, err, `"cart" was used in a run`)
	assert.ErrorContains(t, err, "read an outer node's result with the node's Wrappers, and pass it as a param")
}

// A SubGraph's Build that returns the wrappers of its earlier call fails
// the node's second run with ErrReused, and the same advice.
func TestSubGraphBuildReturningOldWrappersSaysWhatToDo(t *testing.T) {
	a := New()
	defer a.Close()
	x := NewWrapper("x", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 1, nil }), 0)
	sg := SubGraph[int, int]{Build: func(context.Context, int, Wrappers) (Built[int], error) {
		return Built[int]{Starts: []Wrapper{x}, Output: func() (int, error) { return x.Result().Value, nil }}, nil
	}}
	node := NewWrapper("sg", sg, 0)
	pl, err := Compile(node)
	require.NoError(t, err)
	run, err := a.RunPlan(context.Background(), pl, time.Second)
	require.NoError(t, err)
	require.NoError(t, node.ResultIn(run).Err)
	run.Release()
	run, err = a.RunPlan(context.Background(), pl, time.Second)
	require.NoError(t, err)
	defer run.Release()
	err = node.ResultIn(run).Err
	assert.ErrorIs(t, err, ErrReused)
	assert.ErrorContains(t, err, "its nodes must be made anew by each call")
}
