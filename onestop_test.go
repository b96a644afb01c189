package asynctool

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lockedIn reports whether a goroutine, as allStacks shows it, waits
// for a sync.Mutex that fn (a method of runState) locks itself.
func lockedIn(fn string) bool {
	for _, g := range strings.Split(allStacks(), "\n\n") {
		lines := strings.Split(g, "\n")
		for k, l := range lines {
			if strings.HasPrefix(l, "sync.(*Mutex).Lock(") && k+2 < len(lines) &&
				strings.Contains(lines[k+2], ".(*runState)."+fn+"(") {
				return true
			}
		}
	}
	return false
}

// pollFor returns a wait that polls until its ok holds, and fails t
// when 10 s in all have passed: for a goroutine to reach a lock, seen in
// the goroutines' stacks (lockedIn, allStacks). A test that holds a lock
// while it waits unlocks it in a deferred call, which runs as t fails.
func pollFor(t *testing.T) func(what string, ok func() bool) {
	limit := time.Now().Add(10 * time.Second)
	return func(what string, ok func() bool) {
		t.Helper()
		for !ok() {
			if time.Now().After(limit) {
				t.Fatalf("%s: not in 10s", what)
			}
			runtime.Gosched()
		}
	}
}

// TestCancelThatMeetsTheRunsEndStopsEveryNodeOnce: a Cancel that comes
// as the last EndsRun node ends, after the end read the run's context
// and before it stored the run's end, decides the run alone: every node
// the sweep ends carries context.Canceled, and Wait returns the Cancel's
// error. The run's end was stored after the sweep had ended the first
// nodes with context.Canceled, and the nodes it ended after that carried
// the run's end (ErrRunEnded), while Wait said the run was cancelled.
// The test holds the run's lock, under which the end is stored, until
// the sweep has ended x (its DefaultValue runs) or waits for the lock,
// and lets the sweep go on to y once the end has decided.
func TestCancelThatMeetsTheRunsEndStopsEveryNodeOnce(t *testing.T) {
	a := New()
	defer a.Close()
	done, release := make(chan struct{}), make(chan struct{})
	defer close(done)
	var released sync.Once
	let := func() { released.Do(func() { close(release) }) }
	defer let()
	started, after := make(chan struct{}), make(chan struct{})
	var once sync.Once
	goOn := func() { once.Do(func() { close(after) }) }
	defer goOn()
	running := make(chan struct{}, 2)
	wait := WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		running <- struct{}{}
		<-done // only the sweep ends it
		return 1, nil
	})
	page := NewWrapper("page", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		<-release
		return 1, nil
	}), 0).EndsRun()
	x := NewWrapper("x", Worker[int, int](heldDefault{act: wait, started: started, after: after}), 0)
	y := NewWrapper("y", wait, 0)
	r, err := a.Start(context.Background(), time.Minute, page, x, y)
	require.NoError(t, err)
	require.Less(t, indexOf(r, "x"), indexOf(r, "y"), "the sweep reaches x first")
	s := r.runState
	locked := false
	defer func() {
		if locked {
			s.mu.Unlock()
		}
	}()
	waitFor := pollFor(t)
	<-running // x and y run: only the sweep ends them
	<-running
	s.mu.Lock()
	locked = true
	let()
	// page's end read the context, not done, and waits for the lock.
	waitFor("page's end waits for the lock", func() bool { return lockedIn("endedOne") })
	go r.Cancel()
	waitFor("the context is done", func() bool { return s.inner.Err() != nil })
	// The sweep ends x, or waits for the lock first.
	waitFor("the sweep reaches x", func() bool {
		select {
		case <-started:
			return true
		default:
			return lockedIn("sweep")
		}
	})
	s.mu.Unlock()
	locked = false
	waitFor("page's end decided", func() bool { return !strings.Contains(allStacks(), ".(*runState).endedOne(") })
	goOn() // the sweep goes on to y
	err = r.Wait(context.Background())
	rep := r.Report()
	assert.ErrorIs(t, err, context.Canceled)
	for _, id := range []string{"x", "y"} {
		n := rep.Nodes[indexOf(r, id)]
		assert.Equal(t, ResultTimeout, n.Result, "%s: %v", id, n.Err)
		assert.ErrorIs(t, n.Err, context.Canceled, id)
		assert.NotErrorIs(t, n.Err, ErrRunEnded, id)
	}
	assert.Empty(t, checkOneStop(rep, err, "run"))
}

// TestPolicyEndAfterAStopThatEndedNoOtherNode: a PolicyEnd failure
// settled once a Cancel has stopped the run stops nothing, and when the
// failing node was the only one left, so that the Cancel ended no node,
// the run's error is nil, as for a run whose nodes all ended on their
// own (PolicyEnd's doc): the failure is in the node's result. The test
// holds the run's lock, under which the stop is decided, until the sweep
// and the failure both wait for it.
func TestPolicyEndAfterAStopThatEndedNoOtherNode(t *testing.T) {
	a := New()
	defer a.Close()
	asking, answer := make(chan struct{}), make(chan bool, 1)
	critical := NewWrapper("critical", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		return 0, errBoom
	}), 0).Retry(RetryPolicy{Attempts: 2, Retryable: func(error) bool {
		close(asking)
		return <-answer
	}}).OnFailure(PolicyEnd)
	r, err := a.Start(context.Background(), time.Minute, critical)
	require.NoError(t, err)
	<-asking
	s := r.runState
	s.mu.Lock()
	locked := true
	defer func() {
		if locked {
			s.mu.Unlock()
		}
	}()
	waitFor := pollFor(t)
	r.Cancel()
	waitFor("the sweep waits for the lock", func() bool { return lockedIn("sweep") })
	answer <- false // critical's failure is settled now, under PolicyEnd
	waitFor("the failure waits for the lock", func() bool { return lockedIn("endRun") })
	s.mu.Unlock()
	locked = false
	err = r.Wait(context.Background())
	assert.NoError(t, err, "critical's failure came after the Cancel, which ended no node")
	res := critical.ResultIn(r)
	assert.Equal(t, ResultException, res.State, "its own failure: %v", res.Err)
	assert.ErrorIs(t, res.Err, errBoom)
	assert.Empty(t, checkOneStop(r.Report(), err, "run"))
}
