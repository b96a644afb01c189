package asynctooltest_test

import (
	"testing"

	"github.com/asynctool-go/asynctool"
	"github.com/asynctool-go/asynctool/asynctooltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRecorder(t *testing.T) {
	var rec asynctooltest.Recorder
	bad := asynctool.NewWrapper("bad", asynctooltest.Fails[int, int](errDown), 0).
		Callback(asynctooltest.Callback[int, int](&rec, "bad"))
	after := asynctool.NewWrapper("after", asynctooltest.Returns[int](1), 0).
		Depend(bad, true).
		Default(-1).
		Callback(asynctooltest.Callback[int, int](&rec, "after"))
	rep := asynctooltest.Run(t, bad)
	asynctooltest.NeverStarted(t, rep, "after")
	_ = after

	assert.Equal(t, 1, rec.Count("bad", asynctooltest.Begin))
	assert.Equal(t, 1, rec.Count("bad", asynctooltest.Result))
	assert.Equal(t, 0, rec.Count("after", asynctooltest.Begin), "Begin only for nodes that run")
	assert.Equal(t, 1, rec.Count("after", asynctooltest.Result), "Result for every node")

	e, ok := rec.Last("after", asynctooltest.Result)
	require.True(t, ok)
	assert.False(t, e.Success)
	assert.Equal(t, -1, e.Value)
	assert.Equal(t, asynctool.ResultException, e.State)
	assert.ErrorIs(t, e.Err, errDown)

	events := rec.Events()
	require.Len(t, events, 3)
	assert.Equal(t, asynctooltest.Event{ID: "bad", Kind: asynctooltest.Begin}, events[0])
	assert.Equal(t, "bad", events[1].ID, "bad's result comes before its successor's")
	events[0].ID = "changed"
	assert.Equal(t, "bad", rec.Events()[0].ID, "Events returns a copy")
	_, ok = rec.Last("nobody", asynctooltest.Begin)
	assert.False(t, ok)
	assert.Equal(t, "begin", asynctooltest.Begin.String())
	assert.Equal(t, "result", asynctooltest.Result.String())

	// Last is the latest of the events for the id: here, of a second run
	// whose node records under the same id.
	again := asynctool.NewWrapper("again", asynctooltest.Returns[int](2), 0).
		Callback(asynctooltest.Callback[int, int](&rec, "bad"))
	asynctooltest.Succeeded(t, asynctooltest.Run(t, again), "again")
	e, ok = rec.Last("bad", asynctooltest.Result)
	require.True(t, ok)
	assert.True(t, e.Success)
	assert.Equal(t, 2, e.Value)
}
