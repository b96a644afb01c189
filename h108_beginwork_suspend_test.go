package asynctool

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestH108BeginWorkDoesNotWaitForAResumeThatCannotCome: BeginWork and
// RunPlan give the caller no Run, so nothing can resume a node their run
// suspends. Such a run waited for its deadline, doing nothing, and for
// ever without one (a context without a deadline and timeout 0, the
// common call): BeginWork, and Close after it, hung. It now ends once the
// run has stalled on its pending nodes, with an error naming the node and
// wrapping its failure, as a SubPlan's sub-run does; the other branches
// still run to their end first.
func TestH108BeginWorkDoesNotWaitForAResumeThatCannotCome(t *testing.T) {
	work := func(v int, err error) Worker[int, int] {
		return WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return v, err })
	}
	graph := func() (start []Wrapper, p, d, other *WorkerWrapper[int, int]) {
		p = NewWrapper("p", work(0, errBoom), 0).OnFailure(PolicySuspend)
		d = NewWrapper("d", work(2, nil), 0).Depend(p, true)
		other = NewWrapper("other", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			time.Sleep(10 * time.Millisecond) // still running when p suspends
			return 3, nil
		}), 0)
		return []Wrapper{p, other}, p, d, other
	}
	call := func(t *testing.T, f func() error) error {
		t.Helper()
		errc := make(chan error, 1)
		go func() { errc <- f() }()
		select {
		case err := <-errc:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("still waiting after 10s for a Resume nothing can make")
			return nil
		}
	}
	check := func(t *testing.T, err error, p, d, other *WorkerWrapper[int, int], in *Run) {
		t.Helper()
		require.Error(t, err)
		assert.ErrorIs(t, err, errBoom)
		assert.Contains(t, err.Error(), `suspended at node "p"`)
		res := func(w *WorkerWrapper[int, int]) WorkResult[int] {
			if in != nil {
				return w.ResultIn(in)
			}
			return w.Result()
		}
		assert.Equal(t, ResultSuccess, res(other).State, "the other branch ran to its end")
		assert.Equal(t, ResultTimeout, res(p).State)
		assert.Equal(t, ResultTimeout, res(d).State)
	}

	t.Run("BeginWork", func(t *testing.T) {
		a := newAsync(t)
		ctx, cancel := context.WithCancel(context.Background()) // no deadline
		t.Cleanup(cancel)                                       // before Close, should BeginWork still wait
		starts, p, d, other := graph()
		err := call(t, func() error { return a.BeginWork(ctx, 0, starts...) })
		t.Log(err)
		check(t, err, p, d, other, nil)
	})
	t.Run("RunPlan", func(t *testing.T) {
		a := newAsync(t)
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		starts, p, d, other := graph()
		pl, err := Compile(starts...)
		require.NoError(t, err)
		var r *Run
		err = call(t, func() error {
			var err error
			r, err = a.RunPlan(ctx, pl, 0)
			return err
		})
		require.NotNil(t, r)
		check(t, err, p, d, other, r)
		r.Release()
	})
	t.Run("Start still waits for Resume", func(t *testing.T) {
		a := newAsync(t)
		starts, p, _, _ := graph()
		r, err := a.Start(context.Background(), 0, starts...)
		require.NoError(t, err)
		<-r.Suspended()
		select {
		case <-r.Done():
			t.Fatal("a run with a handle ended while pending")
		case <-time.After(50 * time.Millisecond):
		}
		require.NoError(t, r.Resume("p", SucceedWith(1)))
		require.NoError(t, r.Wait(context.Background()))
		assert.Equal(t, 1, p.Result().Value)
	})
}
