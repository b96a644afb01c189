package asynctool

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A Report encoded as JSON, to be logged, keeps its errors: their
// messages and the sentinels they match, in the run's nodes, the run's
// error and a sub-run's. encoding/json alone wrote {} for each.
func TestReportJSONKeepsItsErrors(t *testing.T) {
	a := newAsync(t)
	bad := NewWrapper("bad", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		return 0, fmt.Errorf("fetch: %w", errBoom)
	}), 0)
	inner, err := Compile(bad)
	require.NoError(t, err)
	sub := NewWrapper("sub", SubPlan[int, int]{Plan: inner, Output: bad.ValueIn}, 0)
	after := NewWrapper("after", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		return 1, nil
	}), 0).Depend(sub, true)
	run, err := a.Start(context.Background(), time.Minute, sub)
	require.NoError(t, err)
	require.NoError(t, run.Wait(context.Background()), "a node's failure is its result's, not the run's")
	_ = after

	b, err := json.Marshal(run.Report())
	require.NoError(t, err)
	type stored struct {
		Text    string
		Matches []string
	}
	var got struct {
		Nodes []struct {
			ID    string
			Err   *stored
			Value any
			Sub   *struct {
				Nodes []struct {
					ID  string
					Err *stored
				}
				RunErr *stored
			}
		}
		RunErr *stored
	}
	require.NoError(t, json.Unmarshal(b, &got), "%s", b)
	require.Len(t, got.Nodes, 2, "%s", b)
	assert.Equal(t, "sub", got.Nodes[0].ID)
	require.NotNil(t, got.Nodes[0].Err, "%s", b)
	assert.Equal(t, "fetch: boom", got.Nodes[0].Err.Text)
	require.NotNil(t, got.Nodes[0].Sub, "%s", b)
	require.Len(t, got.Nodes[0].Sub.Nodes, 1)
	require.NotNil(t, got.Nodes[0].Sub.Nodes[0].Err, "%s", b)
	assert.Equal(t, "fetch: boom", got.Nodes[0].Sub.Nodes[0].Err.Text)

	assert.Equal(t, "after", got.Nodes[1].ID)
	require.NotNil(t, got.Nodes[1].Err, "%s", b)
	assert.Equal(t, `asynctool: upstream "sub" failed: fetch: boom`, got.Nodes[1].Err.Text)
	assert.Empty(t, got.Nodes[1].Err.Matches, "it wraps errBoom, no sentinel")
	assert.Contains(t, string(b), `"RunErr":null`)

	// A node without an error encodes null, and the other fields as
	// encoding/json writes them; a run's error, as a node's.
	ok := NewWrapper("ok", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		return 7, nil
	}), 0)
	run, err = a.Start(context.Background(), time.Minute, ok)
	require.NoError(t, err)
	require.NoError(t, run.Wait(context.Background()))
	b, err = json.Marshal(run.Report())
	require.NoError(t, err)
	assert.Contains(t, string(b), `"Err":null`)
	assert.Contains(t, string(b), `"Value":7`)
	assert.Contains(t, string(b), `"Sub":null`)

	slow := NewWrapper("slow", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
		<-ctx.Done()
		return 0, ctx.Err()
	}), 0)
	run, err = a.Start(context.Background(), time.Millisecond, slow)
	require.NoError(t, err)
	require.ErrorIs(t, run.Wait(context.Background()), context.DeadlineExceeded)
	b, err = json.Marshal(run.Report())
	require.NoError(t, err)
	var timedOut struct{ RunErr *stored }
	require.NoError(t, json.Unmarshal(b, &timedOut), "%s", b)
	require.NotNil(t, timedOut.RunErr, "%s", b)
	assert.Equal(t, run.Report().RunErr.Error(), timedOut.RunErr.Text)
	assert.Contains(t, timedOut.RunErr.Matches, "context.DeadlineExceeded")
}
