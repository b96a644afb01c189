package asynctool

import (
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGoExecutorRunsTask(t *testing.T) {
	var wg sync.WaitGroup
	wg.Add(1)
	ran := false
	require.NoError(t, GoExecutor{}.Submit(func() { ran = true; wg.Done() }))
	wg.Wait()
	assert.True(t, ran)
}

func TestExecutorFuncPassesThrough(t *testing.T) {
	errFull := errors.New("full")
	var got int
	e := ExecutorFunc(func(task func()) error { task(); got++; return errFull })
	err := e.Submit(func() {})
	assert.ErrorIs(t, err, errFull)
	assert.Equal(t, 1, got)
}
