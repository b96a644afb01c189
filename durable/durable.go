// Package durable runs asynctool graphs as River jobs: each job is a row in
// a database (SQLite on one machine, PostgreSQL when several machines share
// the work), claimed by one worker at a time, retried with River's backoff
// when its graph does not succeed, and resumed on a retry from the nodes
// that already succeeded.
//
// River (github.com/riverqueue/river) does the persistence, the claiming
// and the retry schedule; this package adds what a graph needs on top:
//
//   - [Worker] is a river.Worker that builds a graph for a job, runs it
//     with an [asynctool.Async] under a deadline, and fails the attempt
//     (so that River retries it) unless every node succeeded or was
//     skipped;
//   - [Node] wraps a node whose result is checkpointed: when an attempt
//     fails, the results of the nodes that succeeded are stored in the
//     job's row (as the cursor of a River resumable step), and the next
//     attempt replays them instead of calling their workers again.
//
// A checkpointed result is stored as JSON, so a node's result type must
// encode and decode with encoding/json. Checkpoints are written when an
// attempt ends with an error, which River persists with the job; an
// attempt that dies with its process (River rescues the job later) starts
// again from the previous attempt's checkpoint.
package durable

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/asynctool-go/asynctool"
	"github.com/riverqueue/river"
)

// stepName is the River resumable step a graph runs in; its cursor is the
// checkpoint.
const stepName = "asynctool-graph"

// BuildFunc builds the graph of one attempt of job and returns its start
// nodes. Nodes made with [Node] and cp are checkpointed; other nodes run
// again on every attempt.
type BuildFunc[A river.JobArgs] func(ctx context.Context, job *river.Job[A], cp *Checkpoint) ([]asynctool.Wrapper, error)

// Worker is a river.Worker that runs a graph per job. Build it with
// [NewWorker] and register it with river.AddWorker.
type Worker[A river.JobArgs] struct {
	river.WorkerDefaults[A]
	async   *asynctool.Async
	timeout time.Duration
	build   BuildFunc[A]
}

// NewWorker returns a Worker that builds each job's graph with build and
// runs it on async with timeout as the group deadline (0: none; River's
// own job timeout still applies).
func NewWorker[A river.JobArgs](async *asynctool.Async, timeout time.Duration, build BuildFunc[A]) *Worker[A] {
	return &Worker[A]{async: async, timeout: timeout, build: build}
}

// Work runs one attempt of job. It returns nil when every node of the
// graph succeeded or was skipped; otherwise an error that names the nodes
// that did not succeed (a *GraphFailedError), after storing the checkpoint
// of the nodes that did. A graph that cannot be built or is rejected
// (asynctool's *GraphError) fails the attempt with that error.
func (w *Worker[A]) Work(ctx context.Context, job *river.Job[A]) error {
	var err error
	river.ResumableStepCursor(ctx, stepName, nil, func(ctx context.Context, saved map[string]json.RawMessage) error {
		err = w.attempt(ctx, job, saved)
		return err
	})
	return err
}

func (w *Worker[A]) attempt(ctx context.Context, job *river.Job[A], saved map[string]json.RawMessage) error {
	cp := &Checkpoint{saved: saved, done: make(map[string]json.RawMessage)}
	starts, err := w.build(ctx, job, cp)
	if err != nil {
		return fmt.Errorf("durable: building the graph: %w", err)
	}
	run, err := w.async.Start(ctx, w.timeout, starts...)
	if err != nil {
		return err
	}
	err = run.Wait(ctx)
	rep := run.Report()
	var failed []NodeFailure
	for _, n := range rep.Nodes {
		if n.Status != asynctool.StatusSucceeded && n.Status != asynctool.StatusSkipped {
			failed = append(failed, NodeFailure{ID: n.ID, Status: n.Status, Err: n.Err})
		}
	}
	if err == nil && len(failed) == 0 {
		return nil
	}
	// Keep what this attempt and the earlier ones checkpointed, for the
	// next attempt. River stores the cursor because the attempt fails.
	if serr := river.ResumableSetCursor(ctx, cp.snapshot()); serr != nil {
		return errors.Join(&GraphFailedError{Failed: failed, RunErr: err}, fmt.Errorf("durable: storing the checkpoint: %w", serr))
	}
	return &GraphFailedError{Failed: failed, RunErr: err}
}

// NodeFailure is a node that did not succeed in an attempt.
type NodeFailure struct {
	ID     string
	Status asynctool.Status
	Err    error
}

// GraphFailedError is the error of an attempt whose graph did not
// succeed: the nodes that did not, and the run's own error (a cancelled
// job's context, for example), if any.
type GraphFailedError struct {
	Failed []NodeFailure
	RunErr error
}

func (e *GraphFailedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "durable: %d node(s) did not succeed", len(e.Failed))
	for k, f := range e.Failed {
		sep := ", "
		if k == 0 {
			sep = ": "
		}
		fmt.Fprintf(&b, "%s%q %v", sep, f.ID, f.Status)
		if f.Err != nil {
			fmt.Fprintf(&b, " (%v)", f.Err)
		}
	}
	if e.RunErr != nil {
		fmt.Fprintf(&b, "; run: %v", e.RunErr)
	}
	return b.String()
}

// Unwrap returns the run's error and the nodes' errors, for errors.Is.
func (e *GraphFailedError) Unwrap() []error {
	var errs []error
	if e.RunErr != nil {
		errs = append(errs, e.RunErr)
	}
	for _, f := range e.Failed {
		if f.Err != nil {
			errs = append(errs, f.Err)
		}
	}
	return errs
}

// Checkpoint holds the results of a job's checkpointed nodes: those stored
// by earlier attempts, and those this attempt's nodes produced. It is safe
// for concurrent use by the nodes of one attempt.
type Checkpoint struct {
	saved map[string]json.RawMessage // from earlier attempts; read only
	mu    sync.Mutex
	done  map[string]json.RawMessage // produced in this attempt
	hits  int
}

// Replayed returns how many nodes of this attempt took their result from
// an earlier attempt instead of running.
func (cp *Checkpoint) Replayed() int {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return cp.hits
}

// Has reports whether an earlier attempt stored a result for id.
func (cp *Checkpoint) Has(id string) bool {
	_, ok := cp.saved[id]
	return ok
}

func (cp *Checkpoint) snapshot() map[string]json.RawMessage {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	all := make(map[string]json.RawMessage, len(cp.saved)+len(cp.done))
	maps.Copy(all, cp.saved)
	maps.Copy(all, cp.done)
	return all
}

// Node returns a node with the given id that runs worker with param
// unless an earlier attempt of the job stored its result in cp, in which
// case the node succeeds with that result without calling the worker.
// When the worker succeeds, its result is added to cp. The id must not be
// empty: it is the key of the stored result.
//
// A result that does not encode as JSON fails the node, and one stored
// result that no longer decodes into R (the type changed between
// deployments) makes the node run its worker again.
func Node[P, R any](cp *Checkpoint, id string, worker asynctool.Worker[P, R], param P) *asynctool.WorkerWrapper[P, R] {
	return asynctool.NewWrapper[P, R](id, &checkpointed[P, R]{cp: cp, id: id, worker: worker}, param)
}

type checkpointed[P, R any] struct {
	cp     *Checkpoint
	id     string
	worker asynctool.Worker[P, R]
}

func (c *checkpointed[P, R]) Action(ctx context.Context, p P, all asynctool.Wrappers) (R, error) {
	var v R
	if c.id == "" {
		return v, errors.New("durable: a checkpointed node needs an id")
	}
	if raw, ok := c.cp.saved[c.id]; ok {
		if err := json.Unmarshal(raw, &v); err == nil {
			c.cp.mu.Lock()
			c.cp.hits++
			c.cp.mu.Unlock()
			return v, nil
		}
		var zero R
		v = zero // a stale checkpoint: run the worker
	}
	if c.worker == nil {
		return v, fmt.Errorf("durable: node %q has a nil worker", c.id)
	}
	v, err := c.worker.Action(ctx, p, all)
	if err != nil {
		return v, err
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return v, fmt.Errorf("durable: node %q: result cannot be checkpointed: %w", c.id, err)
	}
	c.cp.mu.Lock()
	c.cp.done[c.id] = raw
	c.cp.mu.Unlock()
	return v, nil
}
