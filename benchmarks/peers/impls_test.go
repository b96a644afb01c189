package peers

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	flow "github.com/Azure/go-workflow"
	"github.com/asynctool-go/asynctool"
	"github.com/cloudwego/eino/compose"
	gotaskflow "github.com/noneback/go-taskflow"
	"github.com/sourcegraph/conc/pool"
	"golang.org/x/sync/errgroup"
)

// groupDeadline is the group deadline of every run that has one: long
// enough never to fire, so its cost is paid but never its effect. It is
// the root suite's value (benchmarks/graph_bench_test.go).
const groupDeadline = time.Minute

// taskflowWorkers is go-taskflow's executor concurrency. Its README's
// example uses 1000; anything below the RPC shape's 100 nodes would cap
// its sleeps.
const taskflowWorkers = 1000

// impl is one way of running a shape: setup prepares it (once per
// benchmark or test) and returns one run's body, which reports the run's
// error. Every body runs every node's s.work(vals, i) exactly once.
type impl struct {
	name  string
	setup func(tb testing.TB, s *shape, vals []int64) func() error
}

// impls lists every implementation, in the order of the benchmark output.
// The "-compiled" and "-rerun" ones build the graph once and run it on
// every iteration; the others build it on every iteration, as a request
// handler does when its graph changes from request to request.
func impls() []impl {
	return []impl{
		{"asynctool-build+run", asynctoolBuildRun},
		{"asynctool-plan", asynctoolPlan},
		{"errgroup-byhand", errgroupByHand},
		{"conc-stages", concStages},
		{"taskflow-build+run", taskflowBuildRun},
		{"taskflow-rerun", taskflowRerun},
		{"goworkflow-build+run", goWorkflowBuildRun},
		{"goworkflow-rerun", goWorkflowRerun},
		{"eino-build+run", einoBuildRun},
		{"eino-compiled", einoCompiled},
	}
}

// ---- asynctool ----

type node = asynctool.WorkerWrapper[int32, int64]

func newAsync(tb testing.TB) *asynctool.Async {
	a := asynctool.New()
	tb.Cleanup(func() { a.Close() })
	return a
}

// asyncBuilder builds s as fresh asynctool wrappers, every edge a must
// dependency, as benchmarks/graph_bench_test.go's libGraph does.
func asyncBuilder(s *shape, vals []int64) func() []asynctool.Wrapper {
	worker := asynctool.WorkerFunc[int32, int64](func(_ context.Context, i int32, _ asynctool.Wrappers) (int64, error) {
		return s.work(vals, i), nil
	})
	nodes := make([]*node, s.N())
	roots := make([]asynctool.Wrapper, len(s.Roots))
	return func() []asynctool.Wrapper {
		for i := range nodes {
			w := asynctool.NewWrapper(s.IDs[i], worker, int32(i))
			for _, d := range s.Deps[i] {
				w.Depend(nodes[d], true)
			}
			nodes[i] = w
		}
		for k, r := range s.Roots {
			roots[k] = nodes[r]
		}
		return roots
	}
}

func asynctoolBuildRun(tb testing.TB, s *shape, vals []int64) func() error {
	a, build := newAsync(tb), asyncBuilder(s, vals)
	return func() error { return a.BeginWork(context.Background(), groupDeadline, build()...) }
}

func asynctoolPlan(tb testing.TB, s *shape, vals []int64) func() error {
	a := newAsync(tb)
	p, err := asynctool.Compile(asyncBuilder(s, vals)()...)
	if err != nil {
		tb.Fatal(err)
	}
	return func() error {
		r, err := a.RunPlan(context.Background(), p, groupDeadline)
		if r != nil {
			r.Release()
		}
		return err
	}
}

// ---- errgroup: by hand ----

// errgroupByHand is the root suite's "by hand" (benchmarks/baseline_test.go):
// one goroutine per node under errgroup.WithContext and a group deadline;
// each waits on its dependencies' done channels (or the context),
// computes, and closes its own channel.
func errgroupByHand(_ testing.TB, s *shape, vals []int64) func() error {
	return func() error {
		ctx, cancel := context.WithTimeout(context.Background(), groupDeadline)
		defer cancel()
		g, ctx := errgroup.WithContext(ctx)
		done := make([]chan struct{}, s.N())
		for i := range done {
			done[i] = make(chan struct{})
		}
		for i := range s.N() {
			g.Go(func() error {
				for _, d := range s.Deps[i] {
					select {
					case <-done[d]:
					case <-ctx.Done():
						return ctx.Err()
					}
				}
				s.work(vals, int32(i))
				close(done[i])
				return nil
			})
		}
		return g.Wait()
	}
}

// ---- conc: stage by stage ----

// concStages runs the graph level by level, as conc's users write a
// fan-out: a node alone in its level runs on the caller, a level of
// several nodes runs on a pool.New().WithContext(ctx) pool (unbounded,
// cancelled on the first error), whose Wait is the barrier before the
// next level. All three shapes here are layered, so the barrier delays no
// node; on a graph that is not, a node would wait for its whole level.
func concStages(_ testing.TB, s *shape, vals []int64) func() error {
	levels := s.levels()
	return func() error {
		ctx, cancel := context.WithTimeout(context.Background(), groupDeadline)
		defer cancel()
		for _, level := range levels {
			if len(level) == 1 {
				if err := ctx.Err(); err != nil {
					return err
				}
				s.work(vals, level[0])
				continue
			}
			p := pool.New().WithContext(ctx).WithCancelOnError()
			for _, i := range level {
				p.Go(func(ctx context.Context) error {
					if err := ctx.Err(); err != nil {
						return err
					}
					s.work(vals, i)
					return nil
				})
			}
			if err := p.Wait(); err != nil {
				return err
			}
		}
		return nil
	}
}

// ---- go-taskflow ----

// deadlineTask is a go-taskflow task body: go-taskflow's tasks are
// func() and its executor takes no context, so each task checks the run's
// context itself and records the first error.
func deadlineTask(s *shape, vals []int64, i int32, ctx *context.Context, first *atomic.Pointer[error]) func() {
	return func() {
		if err := (*ctx).Err(); err != nil {
			first.CompareAndSwap(nil, &err)
			return
		}
		s.work(vals, i)
	}
}

// buildTaskflow builds s as a go-taskflow TaskFlow whose tasks read the
// run's context through ctx.
func buildTaskflow(s *shape, vals []int64, ctx *context.Context, first *atomic.Pointer[error]) *gotaskflow.TaskFlow {
	tf := gotaskflow.NewTaskFlow(s.Name)
	tasks := make([]*gotaskflow.Task, s.N())
	for i := range tasks {
		tasks[i] = tf.NewTask(s.IDs[i], deadlineTask(s, vals, int32(i), ctx, first))
		for _, d := range s.Deps[i] {
			tasks[d].Precede(tasks[i])
		}
	}
	return tf
}

// runTaskflow runs tf once on e under a group deadline.
func runTaskflow(e gotaskflow.Executor, tf *gotaskflow.TaskFlow, ctx *context.Context, first *atomic.Pointer[error]) error {
	c, cancel := context.WithTimeout(context.Background(), groupDeadline)
	defer cancel()
	*ctx = c
	first.Store(nil)
	e.Run(tf).Wait()
	if err := first.Load(); err != nil {
		return *err
	}
	return nil
}

func taskflowBuildRun(_ testing.TB, s *shape, vals []int64) func() error {
	e := gotaskflow.NewExecutor(taskflowWorkers)
	return func() error {
		var ctx context.Context
		var first atomic.Pointer[error]
		return runTaskflow(e, buildTaskflow(s, vals, &ctx, &first), &ctx, &first)
	}
}

// taskflowRerun builds the TaskFlow once and runs it again on every
// iteration, as go-taskflow's own benchmarks do. One TaskFlow holds the
// state of its run, so its runs must not overlap.
func taskflowRerun(_ testing.TB, s *shape, vals []int64) func() error {
	e := gotaskflow.NewExecutor(taskflowWorkers)
	var ctx context.Context
	var first atomic.Pointer[error]
	tf := buildTaskflow(s, vals, &ctx, &first)
	return func() error { return runTaskflow(e, tf, &ctx, &first) }
}

// ---- Azure/go-workflow ----

// buildGoWorkflow builds s as a go-workflow Workflow of flow.Func steps.
func buildGoWorkflow(s *shape, vals []int64) *flow.Workflow {
	steps := make([]flow.Steper, s.N())
	w := new(flow.Workflow)
	for i := range steps {
		steps[i] = flow.Func(s.IDs[i], func(context.Context) error {
			s.work(vals, int32(i))
			return nil
		})
		ups := make([]flow.Steper, len(s.Deps[i]))
		for k, d := range s.Deps[i] {
			ups[k] = steps[d]
		}
		w.Add(flow.Steps(steps[i]).DependsOn(ups...))
	}
	return w
}

// doGoWorkflow runs w once under a group deadline.
func doGoWorkflow(w *flow.Workflow) error {
	ctx, cancel := context.WithTimeout(context.Background(), groupDeadline)
	defer cancel()
	return w.Do(ctx)
}

func goWorkflowBuildRun(_ testing.TB, s *shape, vals []int64) func() error {
	return func() error { return doGoWorkflow(buildGoWorkflow(s, vals)) }
}

// goWorkflowRerun builds the Workflow once and calls Do on every
// iteration; Do resets it first. A Workflow refuses a Do while another
// runs (ErrWorkflowIsRunning).
func goWorkflowRerun(_ testing.TB, s *shape, vals []int64) func() error {
	w := buildGoWorkflow(s, vals)
	return func() error { return doGoWorkflow(w) }
}

// ---- eino compose ----

// compileEino builds s as an eino compose.Workflow[int64, int64] and
// compiles it. Values flow along the edges: a node with one dependency
// takes its int64 output as input; a node with several takes a
// map[string]any with one key per dependency (compose.ToField); roots
// take the workflow's input; the sink's output is the workflow's. Each
// node still computes with s.work, from vals, as every implementation
// here does; its typed input must agree with it (checked in the test).
func compileEino(s *shape, vals []int64) (compose.Runnable[int64, int64], error) {
	if len(s.Sinks) != 1 {
		return nil, fmt.Errorf("eino: shape %s has %d sinks, want 1", s.Name, len(s.Sinks))
	}
	wf := compose.NewWorkflow[int64, int64]()
	for i := range s.N() {
		i := int32(i)
		var n *compose.WorkflowNode
		switch deps := s.Deps[i]; len(deps) {
		case 0, 1:
			n = wf.AddLambdaNode(s.IDs[i], compose.InvokableLambda(func(_ context.Context, in int64) (int64, error) {
				return s.work(vals, i), nil
			}))
			if len(deps) == 0 {
				n.AddInput(compose.START)
			} else {
				n.AddInput(s.IDs[deps[0]])
			}
		default:
			n = wf.AddLambdaNode(s.IDs[i], compose.InvokableLambda(func(_ context.Context, in map[string]any) (int64, error) {
				if len(in) != len(s.Deps[i]) {
					return 0, fmt.Errorf("node %d: %d inputs, want %d", i, len(in), len(s.Deps[i]))
				}
				return s.work(vals, i), nil
			}))
			for _, d := range deps {
				n.AddInput(s.IDs[d], compose.ToField(s.IDs[d]))
			}
		}
	}
	wf.End().AddInput(s.IDs[s.Sinks[0]])
	return wf.Compile(context.Background())
}

// invokeEino runs r once under a group deadline and checks that the
// workflow's output, carried along the edges, is the sink's value.
func invokeEino(r compose.Runnable[int64, int64], s *shape, vals []int64) error {
	ctx, cancel := context.WithTimeout(context.Background(), groupDeadline)
	defer cancel()
	out, err := r.Invoke(ctx, 0)
	if err != nil {
		return err
	}
	if want := vals[s.Sinks[0]]; out != want {
		return fmt.Errorf("eino: output %d, sink's value %d", out, want)
	}
	return nil
}

func einoBuildRun(_ testing.TB, s *shape, vals []int64) func() error {
	return func() error {
		r, err := compileEino(s, vals)
		if err != nil {
			return err
		}
		return invokeEino(r, s, vals)
	}
}

func einoCompiled(tb testing.TB, s *shape, vals []int64) func() error {
	r, err := compileEino(s, vals)
	if err != nil {
		tb.Fatal(err)
	}
	return func() error { return invokeEino(r, s, vals) }
}

// ---- floor for the RPC shape ----

// rawGoroutines runs a 1 → n → 1 shape with one raw goroutine per middle
// node and a sync.WaitGroup, the source and the sink on the caller: the
// root suite's floor for the RPC target (benchmarks/graph_bench_test.go).
func rawGoroutines(_ testing.TB, s *shape, vals []int64) func() error {
	return func() error {
		s.work(vals, 0)
		var wg sync.WaitGroup
		last := int32(s.N() - 1)
		for i := int32(1); i < last; i++ {
			wg.Go(func() { s.work(vals, i) })
		}
		wg.Wait()
		s.work(vals, last)
		return nil
	}
}
