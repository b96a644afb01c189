package asynctool

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

type inputAllocsKey struct{}

// An Input that adds a value to the node's context, its usual use, costs
// a SubPlan call that value's allocation and no more: the sub-run ends
// with the node's context already, so nothing ties the two together
// (see SubPlan.Action). Once it cost 8 allocations more.
func TestSubPlanInputWithAValueAllocatesOneObjectMore(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	a := newAsync(t, WithMaxWorkers(2))
	perRun := func(input func(context.Context, int, Wrappers) (context.Context, error)) float64 {
		root := NewWrapper("root", okWorker(), 0)
		inner, err := Compile(root)
		if err != nil {
			t.Fatal(err)
		}
		node := NewWrapper("sub", SubPlan[int, int]{Plan: inner, Input: input, Output: root.ValueIn}, 0)
		outer, err := Compile(node)
		if err != nil {
			t.Fatal(err)
		}
		run := func() {
			r, err := a.RunPlan(context.Background(), outer, time.Minute)
			if err != nil || node.ResultIn(r).Err != nil {
				panic(fmt.Sprint(err, node.ResultIn(r).Err))
			}
			r.Release()
		}
		for range 50 {
			run() // warm the pools
		}
		return testing.AllocsPerRun(300, run)
	}
	without := perRun(nil)
	with := perRun(func(ctx context.Context, _ int, _ Wrappers) (context.Context, error) {
		return context.WithValue(ctx, inputAllocsKey{}, 1), nil
	})
	t.Logf("%.1f allocations per run without Input, %.1f with", without, with)
	assert.LessOrEqual(t, with, without+1)
}
