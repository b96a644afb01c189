package asynctool

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestResultFrom checks that a worker reads an upstream it holds with
// ResultFrom, in a single-use run and in concurrent runs of a plan, each
// run seeing its own value, and that a node of another run, the zero
// Wrappers and a nil wrapper give ErrUnknownID.
func TestResultFrom(t *testing.T) {
	a := newAsync(t)
	user := NewWrapper("user", WorkerFunc[int, string](func(ctx context.Context, _ int, _ Wrappers) (string, error) {
		return ctx.Value(ctxKey{}).(string), nil
	}), 0)
	other := NewWrapper("other", okWorker(), 0) // never in user's runs
	var nilNode *WorkerWrapper[int, int]
	page := NewWrapper("page", WorkerFunc[int, string](func(_ context.Context, _ int, all Wrappers) (string, error) {
		u, err := user.ResultFrom(all)
		if err != nil {
			return "", err
		}
		if _, err := other.ResultFrom(all); !assert.ErrorIs(t, err, ErrUnknownID) {
			return "", err
		}
		if _, err := nilNode.ResultFrom(all); !assert.ErrorIs(t, err, ErrUnknownID) {
			return "", err
		}
		return "hello " + u.Value, nil
	}), 0).Depend(user, true)
	pl, err := Compile(user)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for k := range 100 {
		wg.Go(func() {
			name := string(rune('a' + k%26))
			run, err := a.RunPlan(context.WithValue(context.Background(), ctxKey{}, name), pl, 0)
			if !assert.NoError(t, err) {
				return
			}
			defer run.Release()
			assert.Equal(t, WorkResult[string]{Value: "hello " + name, State: ResultSuccess}, page.ResultIn(run))
		})
	}
	wg.Wait()

	_, err = user.ResultFrom(Wrappers{})
	assert.ErrorIs(t, err, ErrUnknownID)
	assert.Contains(t, err.Error(), `node "user" is not part of this run`)

	// A single-use run, and an optional upstream that has not ended.
	gate := make(chan struct{})
	release := releaser(t, gate)
	slow := NewWrapper("slow", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
		return gated(gate, 1)(ctx, Wrappers{})
	}), 0).ShortCircuit(false)
	first := NewWrapper("first", okWorker(), 0)
	var seen WorkResult[int]
	reader := NewWrapper("reader", WorkerFunc[int, int](func(_ context.Context, _ int, all Wrappers) (int, error) {
		var err error
		seen, err = slow.ResultFrom(all)
		return 0, err
	}), 0).Depend(first, true).Depend(slow, false)
	run, err := a.Start(context.Background(), 0, first, slow)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return reader.State() == StateFinish }, 10*time.Second, time.Millisecond)
	release()
	require.NoError(t, run.Wait(context.Background()))
	assert.Equal(t, WorkResult[int]{}, seen, "an upstream not ended reads as zero")
	assert.Equal(t, WorkResult[int]{Value: 1, State: ResultSuccess}, slow.Result())
}

// TestResultInReadsASingleUseRun: ResultIn and ValueIn, documented for
// plans' runs, read the Run that Start returns for single-use wrappers
// just as well, by the rules the plan's runs have: nothing before the
// node ended, nothing for a run the node is not part of, and, since
// Release does nothing to such a run, its results after a Release too.
func TestResultInReadsASingleUseRun(t *testing.T) {
	a := newAsync(t)
	release := make(chan struct{})
	slow := NewWrapper("slow", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		<-release
		return 7, nil
	}), 0)
	run, err := a.Start(t.Context(), 0, slow)
	require.NoError(t, err)
	_, err = slow.ValueIn(run)
	require.EqualError(t, err, `asynctool: node has not ended: node "slow"`)
	require.ErrorIs(t, err, ErrNotEnded)
	assert.Equal(t, WorkResult[int]{}, slow.ResultIn(run))
	close(release)
	require.NoError(t, run.Wait(t.Context()))
	v, err := slow.ValueIn(run)
	require.NoError(t, err)
	assert.Equal(t, 7, v)
	assert.Equal(t, slow.Result(), slow.ResultIn(run))

	other := NewWrapper("other", okWorker(), 0)
	otherRun, err := a.Start(t.Context(), 0, other)
	require.NoError(t, err)
	require.NoError(t, otherRun.Wait(t.Context()))
	assert.Equal(t, WorkResult[int]{}, slow.ResultIn(otherRun), "a run slow is not part of")
	_, err = slow.ValueIn(otherRun)
	require.ErrorIs(t, err, ErrUnknownID)
	never := NewWrapper("never", okWorker(), 0)
	assert.Equal(t, WorkResult[int]{}, never.ResultIn(run), "a wrapper that never ran")

	run.Release()
	assert.Equal(t, 7, slow.ResultIn(run).Value, "Release does nothing to a single-use run")
}

// TestReadingANilWrapper: the methods that read a node's result answer
// for a nil *WorkerWrapper (a variable never assigned, say a SubPlan
// Output of a node not built) as for a node the run does not have, as
// ResultFrom and State did; Result, ResultIn, ValueIn and ID panicked.
func TestReadingANilWrapper(t *testing.T) {
	a := newAsync(t)
	x := NewWrapper("x", okWorker(), 0)
	run, err := a.Start(t.Context(), 0, x)
	require.NoError(t, err)
	require.NoError(t, run.Wait(t.Context()))
	var w *WorkerWrapper[int, int]
	assert.Equal(t, WorkResult[int]{}, w.Result())
	assert.Equal(t, WorkResult[int]{}, w.ResultIn(run))
	_, err = w.ValueIn(run)
	assert.ErrorIs(t, err, ErrUnknownID)
	assert.Empty(t, w.ID())
	assert.Equal(t, StateInit, w.State())
	_, err = w.ResultFrom(Wrappers{})
	assert.ErrorIs(t, err, ErrUnknownID)
}

// TestReadingAnOuterNodeFromASubRunSaysSo: a ForEach item's worker, or a
// node of a SubGraph or a SubPlan, is given its sub-run's Wrappers, which
// hold none of the outer graph's nodes. Reading one of those there, with
// ResultFrom or ResultOf, fails with ErrUnknownID and an error that says
// the node belongs to a run outside the sub-run, names the reader's path,
// and says where to read it instead; an id that no run has gets the plain
// error.
func TestReadingAnOuterNodeFromASubRunSaysSo(t *testing.T) {
	type read func(all Wrappers) error
	for _, c := range []struct {
		name string
		// outer builds the outer graph, whose start is user, with a
		// sub-run whose node calls r.
		outer func(user *WorkerWrapper[int, string], r read) Wrapper
		path  string
	}{
		{"ForEach item", func(user *WorkerWrapper[int, string], r read) Wrapper {
			return NewWrapper("prices", ForEach[int, int, int]{
				Items: func(context.Context, int, Wrappers) ([]int, error) { return []int{1}, nil },
				Worker: WorkerFunc[int, int](func(_ context.Context, _ int, all Wrappers) (int, error) {
					return 0, r(all)
				}),
			}, 0).Depend(user, true)
		}, "prices/0"},
		{"SubGraph node", func(user *WorkerWrapper[int, string], r read) Wrapper {
			return NewWrapper("sub", SubGraph[int, int]{
				Build: func(context.Context, int, Wrappers) (Built[int], error) {
					inner := NewWrapper("inner", WorkerFunc[int, int](func(_ context.Context, _ int, all Wrappers) (int, error) {
						return 0, r(all)
					}), 0)
					return Built[int]{Starts: []Wrapper{inner}, Output: func() (int, error) { return 0, inner.Result().Err }}, nil
				},
			}, 0).Depend(user, true)
		}, "sub/inner"},
		{"SubPlan node", func(user *WorkerWrapper[int, string], r read) Wrapper {
			inner := NewWrapper("inner", WorkerFunc[int, int](func(_ context.Context, _ int, all Wrappers) (int, error) {
				return 0, r(all)
			}), 0)
			pl, err := Compile(inner)
			require.NoError(t, err)
			return NewWrapper("sub", SubPlan[int, int]{Plan: pl, Output: inner.ValueIn}, 0).Depend(user, true)
		}, "sub/inner"},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := newAsync(t)
			user := NewWrapper("user", WorkerFunc[int, string](func(context.Context, int, Wrappers) (string, error) {
				return "ada", nil
			}), 0)
			var fromErr, ofErr, unknownErr error
			sub := c.outer(user, func(all Wrappers) error {
				_, fromErr = user.ResultFrom(all)
				_, ofErr = ResultOf[string](all, "user")
				_, unknownErr = ResultOf[string](all, "nobody")
				return nil
			})
			require.NoError(t, a.BeginWork(context.Background(), 0, user))
			require.Equal(t, StateFinish, sub.State(), "the sub-run's node ran")
			for _, err := range []error{fromErr, ofErr} {
				assert.ErrorIs(t, err, ErrUnknownID)
				assert.ErrorContains(t, err, "belongs to a run outside this sub-run ("+c.path+")")
				assert.ErrorContains(t, err, "read it in Items, Build or Input")
			}
			assert.ErrorIs(t, unknownErr, ErrUnknownID)
			assert.NotContains(t, unknownErr.Error(), "outside", "no run has the node")
		})
	}
}

// A node of a sub-run inside a sub-run that reads a node of the sub-run
// around it, not of the outermost run, gets the error that says the node
// belongs to a run outside its own, as one that reads the outermost run's
// node does.
func TestReadingANodeOfTheEnclosingSubRunSaysSo(t *testing.T) {
	a := newAsync(t)
	var fromErr, ofErr error
	sub := NewWrapper("sub", SubGraph[int, int]{
		Build: func(context.Context, int, Wrappers) (Built[int], error) {
			mid := NewWrapper("mid", WorkerFunc[int, string](func(context.Context, int, Wrappers) (string, error) {
				return "ada", nil
			}), 0)
			deeper := NewWrapper("deeper", SubGraph[int, int]{
				Build: func(context.Context, int, Wrappers) (Built[int], error) {
					leaf := NewWrapper("leaf", WorkerFunc[int, int](func(_ context.Context, _ int, all Wrappers) (int, error) {
						_, fromErr = mid.ResultFrom(all)
						_, ofErr = ResultOf[string](all, "mid")
						return 0, nil
					}), 0)
					return Built[int]{Starts: []Wrapper{leaf}, Output: func() (int, error) { return 0, leaf.Result().Err }}, nil
				},
			}, 0).Depend(mid, true)
			return Built[int]{Starts: []Wrapper{mid}, Output: func() (int, error) { return 0, deeper.Result().Err }}, nil
		},
	}, 0)
	require.NoError(t, a.BeginWork(context.Background(), 0, sub))
	require.Equal(t, StateFinish, sub.State(), "the sub-runs' nodes ran")
	for _, err := range []error{fromErr, ofErr} {
		assert.ErrorIs(t, err, ErrUnknownID)
		assert.ErrorContains(t, err, "belongs to a run outside this sub-run (sub/deeper/leaf)")
	}
}

// A node that has not ended reads as a zero result. For an upstream of
// the reader (an optional one) that is the reader's choice, and the
// error is nil; for a node the reader does not depend on, it is what a
// forgotten Depend looks like, and the error says so, rather than pass
// the zero value off as the node's result. A node the reader does not
// depend on but that has ended reads as it ended, and a node reading
// itself is told its result is not final.
func TestReadingANodeNotEndedThatTheReaderDoesNotDependOn(t *testing.T) {
	a := newAsync(t)
	release := make(chan struct{})
	wait := WorkerFunc[int, int](func(ctx context.Context, v int, _ Wrappers) (int, error) {
		select {
		case <-release:
			return v, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	})
	first := NewWrapper("first", okWorker(), 1)
	slow := NewWrapper("slow", wait, 2)
	opt := NewWrapper("opt", wait, 3)
	type read struct {
		res WorkResult[int]
		err error
	}
	got := map[string]read{}
	var self *WorkerWrapper[int, int]
	self = NewWrapper("reader", WorkerFunc[int, int](func(_ context.Context, _ int, all Wrappers) (int, error) {
		defer close(release)
		for _, w := range []*WorkerWrapper[int, int]{first, slow, opt, self} {
			res, err := w.ResultFrom(all)
			got[w.ID()] = read{res, err}
			byID, errByID := ResultOf[int](all, w.ID())
			assert.Equal(t, res, byID, w.ID())
			assert.Equal(t, fmt.Sprint(err), fmt.Sprint(errByID), w.ID())
		}
		return 0, nil
	}), 0)
	mid := NewWrapper("mid", okWorker(), 4).Depend(first, true)
	self.Depend(mid, true).Depend(opt, false)
	NewWrapper("keep", okWorker(), 5).Depend(opt, true) // so that opt is not skipped when the reader starts
	run, err := a.Start(context.Background(), time.Minute, first, slow, opt)
	require.NoError(t, err)
	require.NoError(t, run.Wait(context.Background()))

	assert.Equal(t, read{res: WorkResult[int]{Value: 1, State: ResultSuccess}}, got["first"], "a transitive must upstream has ended")
	assert.Equal(t, read{}, got["opt"], "an optional upstream not ended yet")
	assert.Equal(t, WorkResult[int]{}, got["slow"].res)
	assert.EqualError(t, got["slow"].err, `asynctool: node has not ended: node "slow", read by node "reader", which does not depend on it: declare the dependency with Depend, so that its result is final (a must one) or may be read (an optional one) when the reader runs`)
	assert.ErrorIs(t, got["slow"].err, ErrNotEnded)
	assert.EqualError(t, got["reader"].err, `asynctool: node has not ended: node "reader" read its own result, which is not final while it runs`)
	assert.ErrorIs(t, got["reader"].err, ErrNotEnded)
	assert.Equal(t, WorkResult[int]{Value: 2, State: ResultSuccess}, slow.Result(), "the run went on")
}
