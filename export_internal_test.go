package asynctool

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCriticalPathSkipsDependenciesStillRunning guards CriticalPath and
// the thick edges of the pictures against going through a dependency the
// node never waited for: with racing optional replicas (any-of), the slow
// loser, still running when the sink started, is not on the path, and
// the path's durations fit in the run.
func TestCriticalPathSkipsDependenciesStillRunning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New(WithTimings(true))
		defer a.Close()
		sleeper := func(d time.Duration) WorkerFunc[int, int] {
			return func(ctx context.Context, _ int, _ Wrappers) (int, error) {
				time.Sleep(d)
				return 1, nil
			}
		}
		fast := NewWrapper("fast", sleeper(10*time.Millisecond), 0)
		slow := NewWrapper("slow", sleeper(50*time.Millisecond), 0)
		sink := NewWrapper("sink", sleeper(50*time.Millisecond), 0).
			Depend(fast, false).Depend(slow, false) // any of the replicas
		run, err := a.Start(context.Background(), time.Second, fast, slow)
		require.NoError(t, err)
		require.NoError(t, run.Wait(context.Background()))
		rep := run.Report()
		require.Equal(t, ResultSuccess, sink.Result().State)
		var path []string
		var sum time.Duration
		for _, i := range rep.CriticalPath() {
			path = append(path, rep.Nodes[i].ID)
			sum += rep.Nodes[i].Duration()
		}
		assert.Equal(t, []string{"fast", "sink"}, path)
		assert.LessOrEqual(t, sum, rep.End.Sub(rep.Start), "a chain run one after another fits in the run")
		fastI, slowI, sinkI := reportIndex(t, run, "fast"), reportIndex(t, run, "slow"), reportIndex(t, run, "sink")
		assert.Contains(t, rep.Mermaid(), fmt.Sprintf("n%d ==> n%d\n", fastI, sinkI))
		assert.Contains(t, rep.Mermaid(), fmt.Sprintf("n%d -.-> n%d\n", slowI, sinkI), "the loser's edge is not thick")
	})
}

// TestChromeTraceOfSuspendedRun guards WriteChromeTrace on a snapshot
// report (Run.Report is one at any time): a run with timings whose node
// is pending exported nothing, with an error saying the report had no
// times. The pending node is now a begin event without an end, tagged
// with its status.
func TestChromeTraceOfSuspendedRun(t *testing.T) {
	a := newAsync(t, WithTimings(true))
	var calls atomic.Int32
	p := NewWrapper("p", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
		if calls.Add(1) == 1 {
			return 0, errBoom
		}
		return 1, nil
	}), 0).OnFailure(PolicySuspend)
	run, err := a.Start(context.Background(), 10*time.Second, p)
	require.NoError(t, err)
	<-run.Suspended()
	rep := run.Report()
	var buf bytes.Buffer
	terr := rep.WriteChromeTrace(&buf)
	require.NoError(t, run.Resume("p", Rerun()))
	require.NoError(t, run.Wait(context.Background()))
	require.NoError(t, terr, "a snapshot report of a suspended run, with timings on")

	var trace struct {
		TraceEvents []traceEvent `json:"traceEvents"`
	}
	require.NoError(t, json.Unmarshal(buf.Bytes(), &trace), "got %s", buf.Bytes())
	var begins []traceEvent
	for _, e := range trace.TraceEvents {
		assert.NotEqual(t, "X", e.Ph, "nothing has ended: %+v", e)
		if e.Ph == "B" {
			begins = append(begins, e)
		}
	}
	require.Len(t, begins, 1)
	assert.Equal(t, "p", begins[0].Name)
	assert.Nil(t, begins[0].Dur, "not ended")
	assert.Equal(t, "pending", begins[0].Args["status"])
	assert.Equal(t, rep.Nodes[0].Lane, begins[0].Tid)

	// Once the run ended, the node is a complete event.
	buf.Reset()
	require.NoError(t, run.Report().WriteChromeTrace(&buf))
	assert.Contains(t, buf.String(), `"ph":"X"`)
	assert.NotContains(t, buf.String(), `"ph":"B"`)
}
