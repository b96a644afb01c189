package asynctool

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A report taken while goroutines claim a fan's nodes reads each node's
// attempt count and its start time; a node must not show a start time
// beside zero attempts, nor be counted as run without one.
func TestReportSnapshotAgreesOnAStart(t *testing.T) {
	fanSnapshots(t, func(_ *Report, nr *NodeReport) bool {
		return (nr.Attempts == 0) != nr.Started.IsZero() || nr.Ran != (nr.Attempts > 0)
	})
}

// fanSnapshots starts a root with a fan of 64 nodes under it, up to 300
// times, reads reports until each run ends, and fails the test on the
// first node of a report for which bad is true.
func fanSnapshots(t *testing.T, bad func(rep *Report, nr *NodeReport) bool) {
	t.Helper()
	const n = 64
	a := New(WithTimings(true))
	defer func() { require.NoError(t, a.Close()) }()
	found := ""
	for iter := 0; iter < 300 && found == ""; iter++ {
		work := WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 0, nil })
		root := NewWrapper("root", work, 0)
		for k := range n {
			NewWrapper(fmt.Sprint("n", k), work, 0).Depend(root, true)
		}
		run, err := a.Start(context.Background(), time.Minute, root)
		require.NoError(t, err)
		for {
			rep := run.Report()
			for i := range rep.Nodes {
				if nr := &rep.Nodes[i]; found == "" && bad(rep, nr) {
					found = fmt.Sprintf("iteration %d, node %s: %v, ran %v (%d attempts) on lane %d, started %v, ended %v",
						iter, nr.ID, nr.Status, nr.Ran, nr.Attempts, nr.Lane, nr.Started, nr.Ended)
				}
			}
			if !rep.End.IsZero() {
				break
			}
		}
		require.NoError(t, run.Wait(context.Background()))
	}
	if found != "" {
		t.Fatal(found)
	}
}

// TestSnapshotTraceOfATimedRun: a snapshot taken while a node starts
// (its started bit set, its start time not yet written) made
// WriteChromeTrace fail with "ran but the report has no times for it"
// before; the report now shows such a node as not having run yet.
func TestSnapshotTraceOfATimedRun(t *testing.T) {
	a := New(WithTimings(true), WithMaxWorkers(4))
	defer a.Close()
	var failures, snapshots atomic.Int64
	var firstErr atomic.Value
	for round := 0; round < 300 && failures.Load() == 0; round++ {
		quick := WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 0, nil })
		root := NewWrapper("root", quick, 0)
		prev := root
		for k := 0; k < 64; k++ {
			n := NewWrapper("n"+string(rune('A'+k%26))+string(rune('a'+k/26)), quick, 0)
			n.Depend(prev, true)
			prev = n
		}
		run, err := a.Start(context.Background(), time.Minute, root)
		require.NoError(t, err)
		for {
			select {
			case <-run.Done():
			default:
				snapshots.Add(1)
				rep := run.Report()
				if err := rep.WriteChromeTrace(discard{}); err != nil {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
				continue
			}
			break
		}
	}
	assert.Zero(t, failures.Load(), "of %d snapshots: %v", snapshots.Load(), firstErr.Load())
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// A report taken while goroutines run a fan's nodes classifies each node
// by one read of its state, and the rest of its line must agree with
// that: a node waiting or ready has not run and has no start or end
// time, one running has no end time, and one that has ended has one; a
// node that ran has a lane (the trace puts it on that lane's track).
// Before, the attempts and times were read after the state, so a node
// that moved on meanwhile showed waiting with an attempt and an end time,
// or succeeded without an end time.
func TestReportSnapshotAgreesWithItsState(t *testing.T) {
	fanSnapshots(t, func(_ *Report, nr *NodeReport) bool {
		ended := nr.Status >= StatusSucceeded
		notYet := nr.Status == StatusWaiting || nr.Status == StatusReady
		return ended == nr.Ended.IsZero() || notYet && (nr.Ran || !nr.Started.IsZero()) ||
			nr.Ran == nr.Started.IsZero() || ended && nr.Ended.Before(nr.Started) || nr.Ran && nr.Lane == 0
	})
}

// A report taken while goroutines run a fan's nodes shows a node that is
// ready, running or ended with its must upstream ended, and ready no
// earlier than that upstream's end. Before, the nodes were read first
// node first, so the root could be read running, the fan's nodes, which
// it started meanwhile, after it succeeded.
func TestReportSnapshotShowsMustUpstreamsEnded(t *testing.T) {
	fanSnapshots(t, func(rep *Report, nr *NodeReport) bool {
		if nr.Status == StatusWaiting || nr.Status == StatusPending {
			return false
		}
		for k, d := range nr.Deps {
			up := &rep.Nodes[d]
			if nr.Must[k] && (up.Status < StatusSucceeded || nr.Ready.Before(up.Ended)) {
				return true
			}
		}
		return false
	})
}

// A report taken while a failed root fails a fan of SubPlan nodes
// upstream shows each node's Sub as its status says: the plan's static
// shape for a node not ended, none for a node that ended without a
// sub-run. Before, the Sub was decided on a second read of the node's
// state, so a node shown waiting could have no Sub, as the doc says it
// has.
func TestReportSnapshotShowsTheStaticSubOfANodeNotEnded(t *testing.T) {
	const n = 64
	a := New()
	defer func() { require.NoError(t, a.Close()) }()
	inner := NewWrapper("in", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 0, nil }), 0)
	pl, err := Compile(inner)
	require.NoError(t, err)
	var bad atomic.Value
	for iter := 0; iter < 300 && bad.Load() == nil; iter++ {
		root := NewWrapper("root", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			return 0, errBoom
		}), 0)
		for k := range n {
			NewWrapper(fmt.Sprint("n", k), SubPlan[int, int]{Plan: pl, Output: inner.ValueIn}, 0).Depend(root, true)
		}
		run, err := a.Start(context.Background(), time.Minute, root)
		require.NoError(t, err)
		for done := false; !done; {
			select {
			case <-run.Done():
				done = true
			default:
			}
			for _, nr := range run.Report().Nodes[1:] {
				if (nr.Status < StatusSucceeded) != (nr.Sub != nil) {
					bad.Store(fmt.Sprintf("iteration %d, node %s: %v, has a Sub: %v", iter, nr.ID, nr.Status, nr.Sub != nil))
				}
			}
		}
		require.NoError(t, run.Wait(context.Background()))
	}
	if s := bad.Load(); s != nil {
		t.Fatal(s)
	}
}
