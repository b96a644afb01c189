package asynctooltest_test

import (
	"testing"

	"github.com/asynctool-go/asynctool"
	"github.com/asynctool-go/asynctool/asynctooltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRunRejectsBadGraphs checks that a graph that does not validate
// stops the test at once, for Run and Start.
func TestRunRejectsBadGraphs(t *testing.T) {
	for name, run := range map[string]func(s *spy){
		"Run":   func(s *spy) { asynctooltest.Run(s) },
		"Start": func(s *spy) { asynctooltest.Start(s, 0) },
	} {
		t.Run(name, func(t *testing.T) {
			s := onSpy(t, run)
			assert.True(t, s.fatal)
			require.Len(t, s.errors, 1)
			assert.Contains(t, s.errors[0], "asynctooltest: the graph was rejected: "+asynctool.ErrNoStart.Error())
		})
	}
}

// TestRunRecordsTimes checks that Run's report has the times the
// ordering assertions need.
func TestRunRecordsTimes(t *testing.T) {
	a := asynctool.NewWrapper("a", asynctooltest.Returns[int](1), 0)
	asynctool.NewWrapper("b", asynctooltest.Returns[int](2), 0).Depend(a, true)
	rep := asynctooltest.Run(t, a)
	require.NoError(t, rep.RunErr)
	for _, n := range rep.Nodes {
		assert.False(t, n.Started.IsZero(), "%s has a start time", n.ID)
	}
	asynctooltest.RanBefore(t, rep, "a", "b")
	assert.NoError(t, rep.Err())
}
