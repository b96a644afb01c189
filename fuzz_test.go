package asynctool

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"
)

// randomDAG is a generated graph with a predicted outcome per node.
type randomDAG struct {
	n        int
	deps     [][]int  // deps[j]: upstreams of j (all < j)
	must     [][]bool // must[j][k]: is deps[j][k] a must dependency
	fails    []bool   // the worker of node i returns an error
	starts   []int
	noSkip   bool
	workers  int
	expectOK []bool // the join rules' verdict, ignoring short-circuits
}

func genDAG(seed uint64, size, workers uint8, noSkip bool) *randomDAG {
	rng := rand.New(rand.NewPCG(seed, uint64(size)))
	g := &randomDAG{n: 1 + int(size)%40, noSkip: noSkip, workers: 1 + int(workers)%4}
	g.deps = make([][]int, g.n)
	g.must = make([][]bool, g.n)
	g.fails = make([]bool, g.n)
	g.expectOK = make([]bool, g.n)
	for j := range g.n {
		g.fails[j] = rng.IntN(4) == 0
		for i := range j {
			if rng.IntN(4) == 0 {
				g.deps[j] = append(g.deps[j], i)
				g.must[j] = append(g.must[j], rng.IntN(2) == 0)
			}
		}
		if len(g.deps[j]) == 0 || rng.IntN(8) == 0 {
			g.starts = append(g.starts, j) // roots, plus a few nodes with deps
		}
		// The oracle, in topological order.
		join, anyMust := true, false
		for k, i := range g.deps[j] {
			if g.must[j][k] {
				anyMust = true
				join = join && g.expectOK[i]
			}
		}
		if !anyMust && len(g.deps[j]) > 0 {
			join = false
			for _, i := range g.deps[j] {
				join = join || g.expectOK[i]
			}
		}
		g.expectOK[j] = join && !g.fails[j]
	}
	return g
}

// check runs g and returns the first broken invariant.
func (g *randomDAG) check() error {
	a := New(WithMaxWorkers(g.workers))
	defer a.Close()
	rec := newRecorder()
	id := func(i int) string { return fmt.Sprint("n", i) }
	var violation atomic.Pointer[string]
	ws := make([]*WorkerWrapper[int, int], g.n)
	for j := range g.n {
		ws[j] = rec.node(id(j), func(_ context.Context, all Wrappers) (int, error) {
			// No Action starts before its join is satisfied.
			anyMust, anyOK := false, false
			for k, i := range g.deps[j] {
				r, err := ResultOf[int](all, id(i))
				if err != nil {
					msg := err.Error()
					violation.Store(&msg)
				}
				if g.must[j][k] {
					anyMust = true
					if r.State != ResultSuccess {
						msg := fmt.Sprintf("%s started before must dependency %s succeeded (%v)", id(j), id(i), r.State)
						violation.Store(&msg)
					}
				}
				anyOK = anyOK || r.State == ResultSuccess
			}
			if !anyMust && len(g.deps[j]) > 0 && !anyOK {
				msg := fmt.Sprintf("%s started before any optional dependency succeeded", id(j))
				violation.Store(&msg)
			}
			if g.fails[j] {
				return 0, errBoom
			}
			return j, nil
		})
		if g.noSkip {
			ws[j].ShortCircuit(false)
		}
		for k, i := range g.deps[j] {
			ws[j].Depend(ws[i], g.must[j][k])
		}
	}
	starts := make([]Wrapper, len(g.starts))
	for k, i := range g.starts {
		starts[k] = ws[i]
	}
	// A generous deadline turns a scheduling hang into a failure.
	if err := a.BeginWork(context.Background(), 30*time.Second, starts...); err != nil {
		return fmt.Errorf("BeginWork: %w", err)
	}
	if v := violation.Load(); v != nil {
		return errors.New(*v)
	}
	// Every end was taken off the run's count exactly once, whether by
	// the goroutine that processed it or carried by a claimed node.
	if left := ws[g.starts[0]].singleRun().remaining.Load(); left != 0 {
		return fmt.Errorf("the run ended with a remaining count of %d", left)
	}
	hasSucc := make([]bool, g.n)
	for j := range g.n {
		for _, i := range g.deps[j] {
			hasSucc[i] = true
		}
	}
	for i, w := range ws {
		res := w.Result()
		if n := rec.count(rec.results, id(i)); n != 1 {
			return fmt.Errorf("%s: Result callback fired %d times", id(i), n)
		}
		acts, begins := rec.count(rec.actions, id(i)), rec.count(rec.begins, id(i))
		if acts > 1 || begins != acts {
			return fmt.Errorf("%s: %d actions, %d begins", id(i), acts, begins)
		}
		if errors.Is(res.Err, ErrSkipped) {
			if g.noSkip || !hasSucc[i] {
				return fmt.Errorf("%s was skipped (noSkip=%v, has successors=%v)", id(i), g.noSkip, hasSucc[i])
			}
			if acts != 0 {
				return fmt.Errorf("%s was skipped after it ran", id(i))
			}
			continue
		}
		if got := res.State == ResultSuccess; got != g.expectOK[i] {
			return fmt.Errorf("%s: success=%v, want %v (result %+v)", id(i), got, g.expectOK[i], res)
		}
		if g.expectOK[i] && res.Value != i {
			return fmt.Errorf("%s: value %d", id(i), res.Value)
		}
		if st := w.State(); st != StateFinish && st != StateError {
			return fmt.Errorf("%s: final state %v", id(i), st)
		}
	}
	return nil
}

// FuzzRandomDAG runs random graphs on small pools: every node ends
// exactly once, no Action starts before its join is satisfied, and every
// node that was not short-circuited ends as the join rules predict.
func FuzzRandomDAG(f *testing.F) {
	for s := range uint64(8) {
		f.Add(s, uint8(10+s*4), uint8(s), s%3 == 0)
	}
	f.Fuzz(func(t *testing.T, seed uint64, size, workers uint8, noSkip bool) {
		if err := genDAG(seed, size, workers, noSkip).check(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestRandomDAGs runs a fixed sample of the fuzz space on every test run.
func TestRandomDAGs(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for k := range 300 {
		seed, size, workers, noSkip := rng.Uint64(), uint8(rng.IntN(256)), uint8(rng.IntN(4)), k%4 == 0
		if err := genDAG(seed, size, workers, noSkip).check(); err != nil {
			t.Fatalf("seed=%d size=%d workers=%d noSkip=%v: %v", seed, size, workers, noSkip, err)
		}
	}
}
