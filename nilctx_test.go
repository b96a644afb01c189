package asynctool

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNilContextIsAnError checks that every entry point that takes a
// context returns ErrNilContext for a nil one, instead of panicking inside
// the context package or in a select on a nil Done, and starts or stops
// nothing.
func TestNilContextIsAnError(t *testing.T) {
	var noCtx context.Context // the misuse under test

	a := newAsync(t)
	assert.ErrorIs(t, a.BeginWork(noCtx, time.Second, NewWrapper("x", okWorker(), 0)), ErrNilContext)

	run, err := a.Start(context.Background(), time.Second, NewWrapper("y", okWorker(), 0))
	require.NoError(t, err)
	assert.ErrorIs(t, run.Wait(noCtx), ErrNilContext)
	require.NoError(t, run.Wait(context.Background()))
	assert.ErrorIs(t, a.Shutdown(noCtx), ErrNilContext)
	require.NoError(t, a.BeginWork(context.Background(), time.Second, NewWrapper("z", okWorker(), 0)), "a refused Shutdown closes nothing")

	processed := 0
	_, err = RunBatches(noCtx, GoExecutor{},
		func(context.Context, int) ([]int, error) { return []int{1}, nil },
		func(context.Context, int) error { processed++; return nil })
	assert.ErrorIs(t, err, ErrNilContext)
	assert.Zero(t, processed)

	s := NewStream[int](0)
	s.Append(func(_ context.Context, prev int) (int, error) { return prev + 1, nil })
	assert.ErrorIs(t, s.Run(noCtx), ErrNilContext)
	ranStream := make(chan error, 1)
	go func() { ranStream <- s.Run(context.Background()) }()
	require.NoError(t, s.Close())
	require.NoError(t, <-ranStream, "a nil context does not use up the stream's one Run")

	ser := NewSerial(GoExecutor{})
	assert.ErrorIs(t, ser.Shutdown(noCtx), ErrNilContext)
	ran := make(chan struct{})
	require.NoError(t, ser.Submit(func() { close(ran) }), "a refused Shutdown stops nothing")
	<-ran
	require.NoError(t, ser.Shutdown(context.Background()))

	k := NewKeyed[string](GoExecutor{})
	assert.ErrorIs(t, k.Shutdown(noCtx), ErrNilContext)
	ran = make(chan struct{})
	require.NoError(t, k.Submit("a", func() { close(ran) }))
	<-ran
	require.NoError(t, k.Shutdown(context.Background()))
}

// TestShutdownWithADoneContextIsDeterministic checks that a Shutdown
// whose ctx is already done reports it every time, even with nothing left
// to run: it used to depend on which of the two a select saw first.
func TestShutdownWithADoneContextIsDeterministic(t *testing.T) {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for range 100 {
		s := NewSerial(GoExecutor{})
		require.ErrorIs(t, s.Shutdown(done), context.Canceled)
		require.ErrorIs(t, s.Submit(func() {}), ErrSerialClosed)
		k := NewKeyed[int](GoExecutor{})
		require.ErrorIs(t, k.Shutdown(done), context.Canceled)
		require.ErrorIs(t, k.Submit(1, func() {}), ErrSerialClosed)
	}
}
