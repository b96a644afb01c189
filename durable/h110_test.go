package durable

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynctool-go/asynctool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// notUTF8 is a result whose JSON holds a byte that is not UTF-8: 0xe9,
// "é" in Latin-1. encoding/json keeps a json.RawMessage's bytes as they
// are, and so decodes them back, but PostgreSQL refuses them in any text,
// jsonb included.
var notUTF8 = json.RawMessage("{\"name\":\"caf\xe9\"}")

// TestH110NotUTF8DoesNotWedgeTheJobOnPostgres: PostgreSQL refused River's
// update that records the attempt, whose checkpoint held notUTF8, and the
// job stayed running until River's rescuer (and the client's Stop waited
// for it), as with \u0000 (TestNulResultDoesNotWedgeTheJobOnPostgres).
func TestH110NotUTF8DoesNotWedgeTheJobOnPostgres(t *testing.T) {
	requireFailsOnPostgres(t, resultThenFailure(notUTF8), ErrUnstorableJSON)
}

// TestH110NotUTF8FailsTheNode: on SQLite, which stores such bytes, the
// node fails all the same, with ErrUnstorableJSON, and Resume refuses
// such a value, so that a job behaves the same on both databases.
func TestH110NotUTF8FailsTheNode(t *testing.T) {
	_, err := checkpointJSON(notUTF8)
	require.ErrorIs(t, err, ErrUnstorableJSON)

	var a, s atomic.Int32
	var approved atomic.Bool
	var got atomic.Int64
	client, id, _ := parkApproval(t, &a, &s, &approved, &got)
	_, err = Resume(context.Background(), client, id, map[string]any{"s": json.RawMessage("\"\xff\"")})
	require.ErrorIs(t, err, ErrUnstorableJSON)
	assert.Contains(t, err.Error(), `node "s"`)
	_, err = Resume(context.Background(), client, id, map[string]any{"s": 7})
	assert.NoError(t, err, "still parked")
}

// TestH110CheckpointedNodesInSubGraphs: a SubGraph's Build may make
// checkpointed nodes while the run goes on, and their ids key the job's
// one checkpoint, whereas asynctool checks ids only within each graph:
// with one id ("fetch") in two sub-graphs, the second node succeeded
// with the first one's result without calling its worker, in the first
// attempt already, and the sink read "LL" or "RR" (it now fails: see
// TestNodesSharingAnIDInTwoSubGraphsFail). Ids prefixed with the
// outer node's, as Node's doc says, keep each node's own result: each
// worker runs once, and the retry replays "L" and "R".
func TestH110CheckpointedNodesInSubGraphs(t *testing.T) {
	var left, right atomic.Int32
	var seen []string
	var mu sync.Mutex
	sub := func(cp *Checkpoint, outer, v string, runs *atomic.Int32) asynctool.SubGraph[int, string] {
		return asynctool.SubGraph[int, string]{Build: func(context.Context, int, asynctool.Wrappers) (asynctool.Built[string], error) {
			f := Node(cp, outer+"/fetch", asynctool.WorkerFunc[int, string](func(context.Context, int, asynctool.Wrappers) (string, error) {
				runs.Add(1)
				return v, nil
			}), 0)
			return asynctool.Built[string]{Starts: []asynctool.Wrapper{f}, Output: func() (string, error) {
				r := f.Result()
				return r.Value, r.Err
			}}, nil
		}}
	}
	evs := runJob(t, 3, 10*time.Second, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		l := asynctool.NewWrapper("left", sub(cp, "left", "L", &left), 0)
		r := asynctool.NewWrapper("right", sub(cp, "right", "R", &right), 0)
		asynctool.NewWrapper("sink", asynctool.WorkerFunc[int, int](func(_ context.Context, _ int, all asynctool.Wrappers) (int, error) {
			lv, _ := asynctool.ResultOf[string](all, "left")
			rv, _ := asynctool.ResultOf[string](all, "right")
			mu.Lock()
			seen = append(seen, lv.Value+rv.Value)
			mu.Unlock()
			if job.Attempt == 1 {
				return 0, errors.New("the sink fails the first attempt")
			}
			return 0, nil
		}), 0).Depend(l, true).Depend(r, true)
		return []asynctool.Wrapper{l, r}, nil
	})
	require.Len(t, evs, 2)
	assert.Equal(t, river.EventKindJobCompleted, evs[1].Kind)
	assert.Equal(t, []string{"LR", "LR"}, seen)
	assert.Equal(t, int32(1), left.Load(), "replayed on the retry")
	assert.Equal(t, int32(1), right.Load(), "replayed on the retry")
}

// TestH110UnstorableIDInASubGraphFailsTheNode is
// TestH110UnstorableIDInASubGraph on SQLite, which could store the id:
// the node fails all the same, so that a job behaves the same on both
// databases, and its worker does not run.
func TestH110UnstorableIDInASubGraphFailsTheNode(t *testing.T) {
	var runs atomic.Int32
	evs := runJob(t, 1, 10*time.Second, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		return []asynctool.Wrapper{asynctool.NewWrapper("sub", asynctool.SubGraph[int, int]{Build: func(context.Context, int, asynctool.Wrappers) (asynctool.Built[int], error) {
			f := intNode(cp, "fetch\xff", &runs, nil)
			return asynctool.Built[int]{Starts: []asynctool.Wrapper{f}, Output: func() (int, error) {
				r := f.Result()
				return r.Value, r.Err
			}}, nil
		}}, 0)}, nil
	})
	require.Len(t, evs, 1)
	assert.Equal(t, rivertype.JobStateDiscarded, evs[0].Job.State)
	assert.Contains(t, evs[0].Job.Errors[0].Error, ErrUnstorableID.Error())
	assert.Zero(t, runs.Load())
}
