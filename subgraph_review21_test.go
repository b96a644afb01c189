package asynctool

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestS21RCompileRejectsAForEachJoinNoListFits: a ForEach Join that no list
// of items can satisfy is refused by Compile (and BeginWork) with
// ErrBadJoin, as the same Join on a node is, instead of failing every run
// of the plan at run time with a GraphError about a hidden node "join"
// (and succeeding on an empty list). Item ids are "0", "1", ...: a name
// that is no index can never be an upstream of the join, and R is fixed,
// so When's type is known too.
func TestS21RCompileRejectsAForEachJoinNoListFits(t *testing.T) {
	items := func(context.Context, int, Wrappers) ([]int, error) { return []int{1, 2, 3}, nil }
	a := newAsync(t)
	for name, j := range map[string]Join{
		"AtLeast(0)":             AtLeast(0),
		"AtLeast(-1)":            AtLeast(-1),
		"NamedSucceeded()":       NamedSucceeded(),
		`NamedSucceeded("join")`: NamedSucceeded("0", "join"),
		`NamedSucceeded("01")`:   NamedSucceeded("01"),
		`NamedSucceeded("-1")`:   NamedSucceeded("-1"),
		"CustomJoin(nil)":        CustomJoin(nil),
		"When nil cond":          When[int]("0", nil),
		"When a string":          When("0", func(string) bool { return true }),
		`When("x")`:              When("x", func(int) bool { return true }),
		"WhenResult a string":    WhenResult("1", func(WorkResult[string]) bool { return true }),
	} {
		w := NewWrapper("each", ForEach[int, int, int]{Items: items, Worker: okWorker(), Join: j}, 0)
		_, err := Compile(w)
		if assert.Error(t, err, name) {
			assert.ErrorIs(t, err, ErrBadJoin, name)
			assert.ErrorContains(t, err, `node "each"`, name)
			assert.ErrorContains(t, err, "ForEach's Join", name)
		}
		w = NewWrapper("each", ForEach[int, int, int]{Items: items, Worker: okWorker(), Join: j}, 0)
		assert.ErrorIs(t, a.BeginWork(context.Background(), 0, w), ErrBadJoin, name)
	}
	// Joins a list may fit are for the run to check, against its items.
	for name, j := range map[string]Join{
		"AtLeast(3)":                AtLeast(3),
		`NamedSucceeded("0", "10")`: NamedSucceeded("0", "10"),
		`When("2")`:                 When("2", func(int) bool { return true }),
		"When any":                  When("0", func(any) bool { return true }),
		"WhenResult":                WhenResult("0", func(WorkResult[int]) bool { return true }),
		"CustomJoin":                CustomJoin(func([]Upstream) Decision { return DecideRun }),
	} {
		_, err := Compile(NewWrapper("each", ForEach[int, int, int]{Items: items, Worker: okWorker(), Join: j}, 0))
		require.NoError(t, err, name)
	}
}
