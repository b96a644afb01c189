package asynctool

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// firstRunDefaulter fails every attempt; its DefaultValue ends the
// goroutine (runtime.Goexit) in the plan's first run, and gives 7 in the
// others.
type firstRunDefaulter struct{ first *atomic.Bool }

func (firstRunDefaulter) Action(context.Context, int, Wrappers) (int, error) { return 0, errBoom }
func (d firstRunDefaulter) DefaultValue() int {
	if d.first.Load() {
		runtime.Goexit()
	}
	return 7
}

// waitForRun waits for the run's context to end and returns its error.
func waitForRun(ctx context.Context) (int, error) {
	<-ctx.Done()
	return 0, ctx.Err()
}

// TestPlanRunStartsClean: a run of a Plan that reuses the state of a
// released run carries nothing of that run over. Each case's first run
// leaves its mark on the state (a timeout, an end with its EndsRun node,
// a DefaultValue that ended its goroutine, a Result callback's panic);
// the second run, on the same state, must end as if it were the plan's
// first.
func TestPlanRunStartsClean(t *testing.T) {
	cases := []struct {
		name string
		opts []Option // the Async's
		// graph builds the plan; first says whether the run is the first.
		graph func(first *atomic.Bool) []Wrapper
		// cancel says which of the two runs the test cancels once its
		// workers wait.
		cancel [2]bool
		// during, if set, looks at the second run once its workers
		// wait, before the test cancels it.
		during func(t *testing.T, r *Run)
		check  func(t *testing.T, r *Run, err error, nodes []Wrapper)
	}{{
		name: "after a run stopped by its cancellation",
		graph: func(first *atomic.Bool) []Wrapper {
			return []Wrapper{NewWrapper("w", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
				if first.Load() {
					return waitForRun(ctx)
				}
				return 1, nil
			}), 0)}
		},
		cancel: [2]bool{true, false},
		check: func(t *testing.T, r *Run, err error, nodes []Wrapper) {
			assert.NoError(t, err, "every node of the second run ended in time")
			assert.Equal(t, ResultSuccess, nodes[0].(*WorkerWrapper[int, int]).ResultIn(r).State)
		},
	}, {
		name: "after a run ended by its EndsRun node",
		graph: func(first *atomic.Bool) []Wrapper {
			e := NewWrapper("e", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
				if first.Load() {
					return 1, nil // ends the run, stopping x
				}
				return waitForRun(ctx)
			}), 0).EndsRun()
			x := NewWrapper("x", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
				return waitForRun(ctx)
			}), 0)
			return []Wrapper{e, x}
		},
		cancel: [2]bool{false, true},
		check: func(t *testing.T, r *Run, err error, nodes []Wrapper) {
			assert.ErrorIs(t, err, context.Canceled, "the second run was cancelled, not ended by e")
			res := nodes[1].(*WorkerWrapper[int, int]).ResultIn(r)
			assert.Equal(t, ResultTimeout, res.State)
			assert.ErrorIs(t, res.Err, context.Canceled)
			assert.NotErrorIs(t, res.Err, ErrRunEnded)
		},
	}, {
		name: "after a run that its sweep ended",
		graph: func(*atomic.Bool) []Wrapper {
			return []Wrapper{NewWrapper("w", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
				return waitForRun(ctx)
			}), 0)}
		},
		cancel: [2]bool{true, true},
		during: func(t *testing.T, r *Run) {
			// A Report of an outer run waits so for a sub-run's sweep
			// (see reportSubs): it must not take the first run's sweep
			// for the second's.
			var swept atomic.Bool
			go func() {
				r.waitSwept()
				swept.Store(true)
			}()
			synctest.Wait()
			assert.False(t, swept.Load(), "waitSwept returned before the second run was swept or ended")
		},
		check: func(t *testing.T, r *Run, err error, nodes []Wrapper) {
			assert.ErrorIs(t, err, context.Canceled)
		},
	}, {
		name: "after a timed run",
		opts: []Option{WithTimings(true)},
		graph: func(first *atomic.Bool) []Wrapper {
			return []Wrapper{NewWrapper("w", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
				if first.Load() {
					time.Sleep(time.Hour)
				}
				return 1, nil
			}), 0)}
		},
		check: func(t *testing.T, r *Run, err error, nodes []Wrapper) {
			require.NoError(t, err)
			n := r.Report().Nodes[0]
			assert.Equal(t, 1, n.Attempts)
			assert.False(t, n.Started.Before(n.Ready), "started at %v, before it was ready at %v", n.Started, n.Ready)
			assert.Zero(t, n.Ended.Sub(n.Started), "the second run's worker returned at once: the hour is the first run's")
		},
	}, {
		name: "after a run whose DefaultValue ended its goroutine",
		graph: func(first *atomic.Bool) []Wrapper {
			return []Wrapper{NewWrapper("f", firstRunDefaulter{first}, 0)}
		},
		check: func(t *testing.T, r *Run, err error, nodes []Wrapper) {
			assert.NoError(t, err, "no DefaultValue ended a goroutine in the second run")
			res := nodes[0].(*WorkerWrapper[int, int]).ResultIn(r)
			assert.ErrorIs(t, res.Err, errBoom)
			assert.Equal(t, 7, res.Value, "the second run calls the DefaultValue")
		},
	}, {
		name: "after a run whose Result callback panicked",
		graph: func(first *atomic.Bool) []Wrapper {
			return []Wrapper{NewWrapper("c", okWorker(), 0).Callback(ResultFunc[int, int](func(bool, int, WorkResult[int]) {
				if first.Load() {
					panic("first run's callback")
				}
			}))}
		},
		check: func(t *testing.T, r *Run, err error, nodes []Wrapper) {
			assert.NoError(t, err, "no callback of the second run panicked")
		},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a := New(c.opts...)
				defer a.Close()
				var first atomic.Bool
				nodes := c.graph(&first)
				pl, err := Compile(nodes...)
				require.NoError(t, err)
				var reused *runState // the state the second run must reuse
				run := func(i int) (*Run, error) {
					first.Store(i == 0)
					r, err := a.StartPlan(context.Background(), pl, 0)
					require.NoError(t, err)
					if i == 1 && c.during != nil && r.runState == reused {
						synctest.Wait()
						c.during(t, r)
					}
					if c.cancel[i] {
						synctest.Wait() // its workers wait for the run's end
						r.Cancel()
					}
					err = r.Wait(context.Background())
					synctest.Wait() // every worker has returned: the state can be reused
					return r, err
				}
				// A sync.Pool may drop the state (it does at random under
				// -race): try until the second run reuses the first's.
				for try := 0; ; try++ {
					require.Less(t, try, 100, "no run reused the state of the run before")
					r1, _ := run(0)
					reused = r1.runState
					r1.Release()
					r2, err := run(1)
					ok := r2.runState == reused
					if ok {
						c.check(t, r2, err, nodes)
					}
					r2.Release()
					if ok {
						break
					}
				}
			})
		})
	}
}
