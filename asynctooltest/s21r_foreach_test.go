package asynctooltest_test

import (
	"context"
	"errors"
	"testing"

	"github.com/asynctool-go/asynctool"
	"github.com/asynctool-go/asynctool/asynctooltest"
	"github.com/stretchr/testify/assert"
)

// TestS21RAssertionsReachIntoForEach names a ForEach node's items, and
// its join, by path: "each/1", "each/join".
func TestS21RAssertionsReachIntoForEach(t *testing.T) {
	errItem := errors.New("item 2 is down")
	each := asynctool.NewWrapper("each", asynctool.ForEach[int, int, int]{
		Items: func(context.Context, int, asynctool.Wrappers) ([]int, error) { return []int{1, 2, 3}, nil },
		Worker: asynctool.WorkerFunc[int, int](func(_ context.Context, i int, _ asynctool.Wrappers) (int, error) {
			if i == 2 {
				return 0, errItem
			}
			return i, nil
		}),
		Join: asynctool.AtLeast(2),
	}, 0)
	rep := asynctooltest.Run(t, each)
	s := onSpy(t, func(s *spy) {
		assert.True(t, asynctooltest.Succeeded(s, rep, "each"))
		assert.True(t, asynctooltest.Succeeded(s, rep, "each/0"))
		assert.True(t, asynctooltest.Failed(s, rep, "each/1", errItem))
		assert.True(t, asynctooltest.Succeeded(s, rep, "each/join"))
	})
	assert.Empty(t, s.errors)
}
