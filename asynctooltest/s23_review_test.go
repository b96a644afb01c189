package asynctooltest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/asynctool-go/asynctool"
	"github.com/asynctool-go/asynctool/asynctooltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s23Prices is a ForEach of three items with a Join.
func s23Prices() asynctool.ForEach[int, int, int] {
	return asynctool.ForEach[int, int, int]{
		Items:  func(context.Context, int, asynctool.Wrappers) ([]int, error) { return []int{1, 2, 3}, nil },
		Worker: asynctooltest.Func(func(_ context.Context, i int) (int, error) { return i * 10, nil }),
		Join:   asynctool.AllSucceeded(),
		Budget: time.Minute,
	}
}

// A ForEach's static shape, in a snapshot taken before the node starts,
// is reached by path like its items later are: "prices/join" and
// "prices/each item" name its nodes, all not started; "prices/2", an item
// not known yet, is no node, and the failure lists the paths there are.
// Once the run has ended, the paths are the items'.
func TestS23RPathsIntoAStaticForEach(t *testing.T) {
	gate := asynctooltest.Blocks[int, int](1)
	g := asynctool.NewWrapper("gate", gate, 0)
	prices := asynctool.NewWrapper("prices", s23Prices(), 0)
	prices.Depend(g, true)
	run := asynctooltest.Start(t, time.Minute, g)
	<-gate.Started()
	rep := run.Report()
	s := onSpy(t, func(s *spy) {
		assert.True(t, asynctooltest.NeverStarted(s, rep, "prices/join"))
		assert.True(t, asynctooltest.NeverStarted(s, rep, "prices/each item"))
		assert.False(t, asynctooltest.Succeeded(s, rep, "prices/join"))
		assert.False(t, asynctooltest.NeverStarted(s, rep, "prices/2"))
	})
	require.Len(t, s.errors, 2)
	assert.Contains(t, s.errors[0], `"prices/join" ended`)
	assert.Contains(t, s.errors[1], `no node "prices/2" in the report (its paths: gate, prices, prices/each item, prices/join)`)

	gate.Release()
	require.NoError(t, run.Wait(context.Background()))
	rep = run.Report()
	s = onSpy(t, func(s *spy) {
		assert.True(t, asynctooltest.Succeeded(s, rep, "prices/2"))
		assert.True(t, asynctooltest.Succeeded(s, rep, "prices/join"))
		assert.False(t, asynctooltest.NeverStarted(s, rep, "prices/each item"))
	})
	require.Len(t, s.errors, 1)
	assert.True(t, strings.Contains(s.errors[0], `no node "prices/each item"`), s.errors[0])
}
