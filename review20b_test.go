package asynctool

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestS20BCancelRacingRelease: a Run's methods are safe for concurrent
// use, so a Cancel (from a watchdog, say) racing the owner's Release of
// the same handle must neither read the state's fields as they are
// recycled (a data race, or a call of the nil cancel) nor cancel the next
// run of the plan that reuses the state; nor may a second Release of the
// handle, at the same time, release that next run.
func TestS20BCancelRacingRelease(t *testing.T) {
	a := New()
	defer a.Close()
	n := NewWrapper("n", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 1, nil }), 0)
	pl, err := Compile(n)
	require.NoError(t, err)
	for range 2000 {
		run, err := a.RunPlan(context.Background(), pl, time.Minute)
		require.NoError(t, err)
		var wg sync.WaitGroup
		wg.Go(run.Cancel)
		wg.Go(func() { _ = run.Report() })
		wg.Go(func() { _ = n.ResultIn(run) })
		wg.Go(run.Release) // released twice at once: once only
		run.Release()
		next, err := a.StartPlan(context.Background(), pl, time.Minute)
		require.NoError(t, err)
		wg.Wait()
		require.NoError(t, next.Wait(context.Background()), "the next run was not cancelled by the stale handle")
		assert.Equal(t, 1, n.ResultIn(next).Value)
		next.Release()
	}
}

// TestS20BResumeRacingTheEarlyEnd: a SucceedWith that takes a pending
// node as the run ends with its EndsRun node (after the context is done,
// before the sweep reached the node) ends that node as the sweep would,
// stopped by the run's end; the run still ended as designed, so Wait and
// the report's RunErr are nil, as they are when the sweep gets there
// first. The sweep is held on an earlier node's OnNodeTimeout hook until
// the Resume has returned.
func TestS20BResumeRacingTheEarlyEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var run atomic.Pointer[Run]
		resumed := make(chan struct{})
		var resumeErr error
		a := New(WithHooks(&Hooks{
			OnNodeEnd: func(_ context.Context, ev NodeEvent) {
				if ev.ID == "page" {
					resumeErr = run.Load().Resume("sus", SucceedWith(5))
					close(resumed)
				}
			},
			OnNodeTimeout: func(_ context.Context, ev NodeEvent) {
				if ev.ID == "slow" {
					<-resumed // holds the sweep before it reaches sus
				}
			},
		}))
		defer a.Close()
		release := make(chan struct{})
		defer close(release) // before Close, which waits for slow
		slow := NewWrapper("slow", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			<-release // ignores its context: only the sweep ends it
			return 0, nil
		}), 0)
		sus := NewWrapper("sus", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			return 0, errors.New("later")
		}), 0).OnFailure(PolicySuspend)
		user := NewWrapper("user", endsSleeper(10*time.Millisecond, 1), 0)
		page := NewWrapper("page", endsSleeper(0, 2), 0).Depend(user, true).EndsRun()
		pl, err := Compile(slow, sus, user)
		require.NoError(t, err)
		h, err := a.StartPlan(context.Background(), pl, time.Minute)
		require.NoError(t, err)
		run.Store(h)
		rep := h.Report()
		require.Less(t, subIndex(t, rep, "slow"), subIndex(t, rep, "sus"), "the sweep meets slow first")
		require.NoError(t, h.Wait(context.Background()), "the run ended with page, as designed")
		assert.ErrorIs(t, resumeErr, ErrNotPending, "the Resume came after the run's end")
		assert.Equal(t, 2, page.ResultIn(h).Value)
		r := sus.ResultIn(h)
		assert.Equal(t, ResultTimeout, r.State)
		assert.ErrorIs(t, r.Err, ErrRunEnded)
		assert.NoError(t, h.Report().RunErr)
		h.Release()
	})
}

// subIndex returns the index of node id in rep.
func subIndex(t *testing.T, rep *Report, id string) int {
	t.Helper()
	for _, n := range rep.Nodes {
		if n.ID == id {
			return n.Index
		}
	}
	t.Fatalf("no node %q", id)
	return -1
}

// TestS20BPolicyEndOnTheMarkedNode: a node marked EndsRun that fails
// under PolicyEnd ends the run with its EndError, as PolicyEnd says:
// every node it stops fails with the EndError. The early end must not be
// seen first: a worker that notices its context at once (it spins on it
// here) returned into a run already labelled ended by EndsRun, and was
// stopped as a timeout wrapping ErrRunEnded, while Wait returned the
// EndError.
func TestS20BPolicyEndOnTheMarkedNode(t *testing.T) {
	a := New()
	defer a.Close()
	boom := errors.New("boom")
	for k := range 200 {
		started := make(chan struct{})
		spin := NewWrapper("spin", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
			close(started)
			for ctx.Err() == nil {
			}
			return 0, ctx.Err()
		}), 0)
		page := NewWrapper("page", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			<-started
			return 0, boom
		}), 0).OnFailure(PolicyEnd).EndsRun()
		err := a.BeginWork(context.Background(), time.Minute, spin, page)
		var ee *EndError
		require.ErrorAs(t, err, &ee, "run %d", k)
		require.Equal(t, "page", ee.ID)
		r := spin.Result()
		require.Equal(t, ResultException, r.State, "run %d: %v", k, r.Err)
		require.ErrorAs(t, r.Err, &ee, "run %d", k)
		require.NotErrorIs(t, r.Err, ErrRunEnded, "run %d", k)
	}
}
