package asynctool

import (
	"context"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A Report of the outer run, called from a Result callback of an item
// that succeeded before the ForEach node's own Timeout ended it, returns:
// the callback runs on a goroutine of the sub-run, not on its sweep, and
// Report waited for the sub-run's Done, which waits for that callback.
// Report and Close hung for good (on a loaded
// machine TestForEachReportFromAStoppedItemsCallback's items took this path
// and the suite hung). Under synctest such a hang is a deadlock the
// bubble reports. The report shows the sub-run as the sweep left it:
// every item ended.
func TestReportFromAnItemsCallbackAfterTheNodeTimedOut(t *testing.T) {
	for _, withHooks := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			var opts []Option
			if withHooks {
				opts = append(opts, WithHooks(&Hooks{OnNodeEnd: func(context.Context, NodeEvent) {}}))
			}
			a := New(opts...)
			defer a.Close()
			gate := make(chan struct{})
			runs := make(chan *Run, 1)
			reported := make(chan *Report, 1)
			var each *WorkerWrapper[int, []WorkResult[int]]
			each = NewWrapper("each", ForEach[int, int, int]{
				Items: func(context.Context, int, Wrappers) ([]int, error) { return []int{0, 1}, nil },
				Worker: WorkerFunc[int, int](func(_ context.Context, i int, _ Wrappers) (int, error) {
					if i == 1 {
						<-gate // ignores its ctx: the sub-run goes on
					}
					return i, nil
				}),
				Node: func(i int, _ int, n *WorkerWrapper[int, int]) {
					if i == 0 {
						n.Callback(reviewCallback[int, int](func(WorkResult[int]) {
							for each.State() == StateWorking {
								time.Sleep(time.Millisecond) // until each's Timeout ended it
							}
							reported <- (<-runs).Report()
						}))
					}
				},
			}, 0).Timeout(20 * time.Millisecond)
			run, err := a.Start(context.Background(), time.Minute, each)
			require.NoError(t, err)
			runs <- run
			rep := <-reported
			sub := subNode(t, rep, "each").Sub
			require.NotNil(t, sub)
			for _, n := range sub.Nodes {
				if n.ID == "0" {
					assert.Equal(t, StatusSucceeded, n.Status, "item 0")
				} else if n.ID == "1" {
					assert.Equal(t, StatusTimedOut, n.Status, "item 1, stopped by the sweep")
				}
			}
			close(gate)
			require.NoError(t, run.Wait(context.Background()))
		})
	}
}

// reportingDefault is an item worker that blocks until its context ends
// and whose DefaultValue, which the sub-run's sweep calls as it ends the
// item, waits until the ForEach node has ended and then takes a Report of
// the outer run.
type reportingDefault struct {
	each     chan *WorkerWrapper[int, []WorkResult[int]]
	runs     chan *Run
	reported chan *Report
}

func (w reportingDefault) Action(ctx context.Context, _ int, _ Wrappers) (int, error) {
	<-ctx.Done()
	return 0, ctx.Err()
}

func (w reportingDefault) DefaultValue() int {
	each, r := <-w.each, <-w.runs
	w.each <- each
	w.runs <- r
	for each.State() == StateWorking {
		time.Sleep(time.Millisecond) // until each's Timeout ended it
	}
	select {
	case w.reported <- r.Report():
	default: // the other item's
	}
	return -1
}

// The same, from user code that the sub-run's sweep itself runs as it
// ends an item: the item's DefaultValue. Report waited for the sweep,
// which was the caller.
func TestReportFromAnItemsDefaultValueInTheSweep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		w := reportingDefault{each: make(chan *WorkerWrapper[int, []WorkResult[int]], 1), runs: make(chan *Run, 1), reported: make(chan *Report, 1)}
		each := NewWrapper("each", ForEach[int, int, int]{
			Items:  func(context.Context, int, Wrappers) ([]int, error) { return []int{0, 1}, nil },
			Worker: w,
		}, 0).Timeout(20 * time.Millisecond)
		w.each <- each
		run, err := a.Start(context.Background(), time.Minute, each)
		require.NoError(t, err)
		w.runs <- run
		require.NoError(t, run.Wait(context.Background()))
		rep := <-w.reported
		require.NotNil(t, subNode(t, rep, "each").Sub)
	})
}

// The same, from a ForEach's custom join, which its sub-run's sweep asks
// as it ends the items (under a Budget the sweep leaves the join to
// decide): the items ignore their context, so only the sweep ends them.
func TestReportFromACustomJoinInTheSweep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		gate := make(chan struct{})
		runs := make(chan *Run, 1)
		nodes := make(chan *WorkerWrapper[int, []WorkResult[int]], 1)
		reported := make(chan *Report, 1)
		each := NewWrapper("each", ForEach[int, int, int]{
			Items: func(context.Context, int, Wrappers) ([]int, error) { return []int{0, 1}, nil },
			Worker: WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
				<-gate
				return 0, nil
			}),
			Budget: time.Hour,
			Join: CustomJoin(func(ups []Upstream) Decision {
				each, r := <-nodes, <-runs
				nodes <- each
				runs <- r
				for each.State() == StateWorking {
					time.Sleep(time.Millisecond) // until each's Timeout ended it
				}
				select {
				case reported <- r.Report():
				default:
				}
				for _, u := range ups {
					if !u.Ended {
						return DecideWait
					}
				}
				return DecideRun
			}),
		}, 0).Timeout(20 * time.Millisecond)
		nodes <- each
		run, err := a.Start(context.Background(), time.Minute, each)
		require.NoError(t, err)
		runs <- run
		rep := <-reported
		require.NotNil(t, subNode(t, rep, "each").Sub)
		close(gate)
		require.NoError(t, run.Wait(context.Background()))
	})
}

// TestReportDoesNotWaitForASweepInAHookElsewhere pins what Run.Report's
// doc says: while a sub-run's sweep runs user code (here OnNodeEnd of
// the node it ended), a Report does not wait for the sweep, whichever
// goroutine calls it, also after the run's Wait returned: the node the
// sweep has not reached shows as not ended.
func TestReportDoesNotWaitForASweepInAHookElsewhere(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hold := make(chan struct{})    // the sub-plan's first node ignores its ctx until then
		started := make(chan struct{}) // the first node is running
		inHook := make(chan struct{})  // the sub-run's sweep is in the hook for "a"
		release := make(chan struct{}) // lets the hook return
		a := New(WithHooks(&Hooks{OnNodeEnd: func(_ context.Context, ev NodeEvent) {
			if ev.ID == "a" {
				close(inHook)
				<-release
			}
		}}))
		defer a.Close()
		first := NewWrapper("a", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			close(started)
			<-hold
			return 1, nil
		}), 0)
		NewWrapper("b", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			return 2, nil
		}), 0).Depend(first, true)
		pl, err := Compile(first)
		require.NoError(t, err)
		sub := NewWrapper("sub", SubPlan[int, int]{Plan: pl, Output: first.ValueIn}, 0)
		run, err := a.Start(context.Background(), 0, sub)
		require.NoError(t, err)
		<-started
		run.Cancel()
		<-inHook // the sweep of the sub-run ended "a" and is in its hook
		require.Error(t, run.Wait(context.Background()))

		rep := run.Report() // returns: it does not wait for the hook
		s := subNode(t, rep, "sub").Sub
		require.NotNil(t, s)
		for _, n := range s.Nodes {
			if n.ID == "b" {
				assert.NotContains(t, []State{StateFinish, StateError}, n.State, "b: the sweep has not reached it")
			}
		}
		close(release)
		close(hold)
	})
}

// lateReportingDefault is a sub-run's worker that returns once its run's
// context has ended, late, so that its own goroutine ends its node and
// calls its DefaultValue, which holds the node in sEnding. The
// DefaultValue waits until the sub-run's sweep has gone through every
// node (it passes this one by), then takes a Report of the outer run.
type lateReportingDefault struct {
	sub       chan *runState // the sub-run, sent by the Action
	acting    chan struct{}  // closed by the Action
	inDefault chan struct{}
	runs      chan *Run
	reported  chan *Report // nil if the Report did not return in 10 s
}

func (d lateReportingDefault) Action(ctx context.Context, _ int, all Wrappers) (int, error) {
	d.sub <- all.r
	close(d.acting)
	<-ctx.Done()
	return 0, ctx.Err()
}

func (d lateReportingDefault) DefaultValue() int {
	close(d.inDefault)
	sub := <-d.sub
	for {
		sub.mu.Lock()
		over := sub.sweepOver
		sub.mu.Unlock()
		if over {
			break
		}
		runtime.Gosched()
	}
	got := make(chan *Report, 1)
	r := <-d.runs
	go func() { got <- r.Report() }()
	select {
	case rep := <-got:
		d.reported <- rep
	case <-time.After(10 * time.Second):
		d.reported <- nil // it waits for this call to return
	}
	return -1
}

// A Report of the outer run, taken from a DefaultValue that a sub-run's
// worker calls as it ends its node late, after the sub-run's sweep went
// by that node (held in sEnding), returns: Report does not wait for a
// node the sweep passed by whose DefaultValue runs, as this one may be
// the caller. The run is cancelled once late's worker runs; the
// sub-run's sweep is held in first's Result callback until late is in its
// DefaultValue, so that late's own goroutine ends it.
func TestReportFromAWorkersDefaultValueAfterTheSweep(t *testing.T) {
	a := newAsync(t)
	gate := make(chan struct{})
	open := releaser(t, gate)
	d := lateReportingDefault{sub: make(chan *runState, 1), acting: make(chan struct{}), inDefault: make(chan struct{}), runs: make(chan *Run, 1), reported: make(chan *Report, 1)}
	sub := NewWrapper("sub", SubGraph[int, int]{Build: func(context.Context, int, Wrappers) (Built[int], error) {
		first := NewWrapper("first", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			<-gate // ignores its ctx: the sweep ends it
			return 1, nil
		}), 0).Callback(reviewCallback[int, int](func(WorkResult[int]) { <-d.inDefault }))
		late := NewWrapper("late", d, 0)
		return Built[int]{Starts: []Wrapper{first, late}, Output: func() (int, error) { return 0, nil }}, nil
	}}, 0)
	run, err := a.Start(context.Background(), 0, sub)
	require.NoError(t, err)
	d.runs <- run
	<-d.acting
	run.Cancel()
	rep := <-d.reported
	require.NotNil(t, rep, "the Report waited for the DefaultValue that called it")
	s := subNode(t, rep, "sub").Sub
	require.NotNil(t, s)
	for _, n := range s.Nodes {
		if n.ID == "first" {
			assert.Equal(t, StateError, n.State, "first, ended by the sweep")
		}
	}
	open()
	assert.ErrorIs(t, run.Wait(context.Background()), context.Canceled)
}
