package asynctool

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOptionalSuccessDoesNotStartANodeWaitingForAMust checks a join that
// plain edges (see pedge) must leave alone: an optional upstream that
// succeeds first does not count toward a node that has a must upstream,
// so the node waits for the must one, and its failure fails the node
// without running it.
func TestOptionalSuccessDoesNotStartANodeWaitingForAMust(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		gate := make(chan struct{})
		opt := NewWrapper("opt", okWorker(), 0)
		must := NewWrapper("must", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			<-gate
			return 0, errBoom
		}), 0)
		var ran atomic.Bool
		n := NewWrapper("n", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			ran.Store(true)
			return 1, nil
		}), 0).Depend(opt, false).Depend(must, true)
		r, err := a.Start(context.Background(), time.Minute, opt, must)
		require.NoError(t, err)
		synctest.Wait() // opt has succeeded; must waits for gate
		require.Equal(t, ResultSuccess, opt.Result().State)
		assert.False(t, ran.Load(), "n started on its optional upstream alone")
		close(gate)
		require.NoError(t, r.Wait(context.Background()))
		assert.False(t, ran.Load(), "n ran although its must upstream failed")
		res := n.Result()
		assert.Equal(t, ResultException, res.State)
		assert.True(t, errors.Is(res.Err, errBoom), "n's error: %v", res.Err)
	})
}

// TestNodeWithTimeoutReadiedBySuccessKeepsItsTimeout checks that a node
// with flow rules, readied by an upstream's success, starts through its
// flow rules (which arm its Timeout) and is not claimed by the goroutine
// that readied it, which would skip them.
func TestNodeWithTimeoutReadiedBySuccessKeepsItsTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		up := NewWrapper("up", okWorker(), 0)
		slow := NewWrapper("slow", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
			<-ctx.Done()
			return 0, ctx.Err()
		}), 0).Timeout(10*time.Millisecond).Depend(up, true)
		start := time.Now()
		err := a.BeginWork(context.Background(), time.Minute, up)
		assert.Equal(t, 10*time.Millisecond, time.Since(start), "slow's Timeout ended the run, not the group deadline")
		var nte *NodeTimeoutError
		assert.True(t, errors.As(slow.Result().Err, &nte), "slow's error: %v (BeginWork: %v)", slow.Result().Err, err)
	})
}

// TestArriveClearsTheCountOnAMove checks the state word arrive leaves:
// the count grows while the node is in sInit; the move out of it clears
// the count, which under carriedBit holds the ends the claimed node
// carries instead (see carried).
func TestArriveClearsTheCountOnAMove(t *testing.T) {
	var n rnode
	c, moved := n.arrive(3, 0, int64(sReady))
	assert.Equal(t, int32(1), c)
	assert.False(t, moved)
	c, moved = n.arrive(3, 1, int64(sReady))
	assert.Equal(t, int32(2), c)
	assert.False(t, moved)
	c, moved = n.arrive(3, 2, int64(sReady))
	assert.Equal(t, int32(3), c)
	assert.True(t, moved)
	assert.Equal(t, sReady, n.st())
	assert.Zero(t, n.carried(), "no carriedBit: nothing carried")
	assert.Zero(t, n.state.Load()>>countShift&countMax, "the count is cleared on the move")
	assert.Equal(t, int32(2), n.decidedBy())
	c, moved = n.arrive(3, 0, int64(sReady))
	assert.Equal(t, int32(0), c, "a node out of sInit counts nothing")
	assert.False(t, moved)

	var m rnode
	m.arrive(2, 0, int64(sReady))
	to := int64(sWorking) | startedBit | 5<<countShift | carriedBit
	_, moved = m.arrive(2, 1, to)
	require.True(t, moved)
	assert.Equal(t, sWorking, m.st())
	assert.Equal(t, int32(5), m.carried(), "the claimed node carries the ends in to, not the count")
}
