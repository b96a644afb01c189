package asynctool

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type h108BeginPanics struct{ NopCallback[int, int] }

func (h108BeginPanics) Begin() { panic("begin broke") }

// TestBeginPanicIsNotTheWorkers: a node whose Callback.Begin panics
// fails without its worker being called, yet its report and its
// OnNodeEnd event said "worker panicked", blaming code that never ran.
// The Reason now names Begin; a worker's own panic still says worker.
func TestBeginPanicIsNotTheWorkers(t *testing.T) {
	var mu sync.Mutex
	reasons := map[string]string{}
	h := Hooks{OnNodeEnd: func(_ context.Context, ev NodeEvent) {
		mu.Lock()
		reasons[ev.ID] = ev.Reason
		mu.Unlock()
	}}
	a := newAsync(t, WithHooks(&h))
	called := make(chan struct{}, 1)
	x := NewWrapper("x", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		called <- struct{}{}
		return 0, nil
	}), 0).Callback(h108BeginPanics{})
	y := NewWrapper("y", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		panic("worker broke")
	}), 0)
	r, err := a.Start(context.Background(), time.Minute, x, y)
	require.NoError(t, err)
	var cpe *CallbackPanicError
	require.ErrorAs(t, r.Wait(context.Background()), &cpe)
	assert.Empty(t, called, "x's worker was called")
	want := map[string]string{"x": "callback Begin panicked", "y": "worker panicked"}
	mu.Lock()
	defer mu.Unlock()
	for _, n := range r.Report().Nodes {
		assert.Equal(t, want[n.ID], n.Reason, "report of %s", n.ID)
		assert.Equal(t, want[n.ID], reasons[n.ID], "OnNodeEnd of %s", n.ID)
	}
}
