package asynctool

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNilAsyncIsAnError: a handler whose *Async field was never set (a
// Handler{} made without New) panicked with a nil dereference inside
// BeginWork, where the zero Async gets an error saying it was not made
// with New. The package's rule is that bad input gets an error: a nil
// *Async gets the zero Async's, from each way to start a run, and its
// Close and Shutdown, like the zero Async's, do nothing.
func TestNilAsyncIsAnError(t *testing.T) {
	var a *Async
	ctx := context.Background()
	assert.ErrorContains(t, a.BeginWork(ctx, time.Second, NewWrapper("x", okWorker(), 0)), "not made with New")
	r, err := a.Start(ctx, time.Second, NewWrapper("x", okWorker(), 0))
	assert.ErrorContains(t, err, "not made with New")
	assert.Nil(t, r)
	pl, err := Compile(NewWrapper("x", okWorker(), 0))
	require.NoError(t, err)
	r, err = a.RunPlan(ctx, pl, time.Second)
	assert.ErrorContains(t, err, "not made with New")
	assert.Nil(t, r)
	r, err = a.StartPlan(ctx, pl, time.Second)
	assert.ErrorContains(t, err, "not made with New")
	assert.Nil(t, r)
	assert.NoError(t, a.Close())
	assert.NoError(t, a.Shutdown(ctx))
	var zero Async
	assert.NoError(t, zero.Shutdown(ctx))
}
