// Package durable runs asynctool graphs as River jobs: each job is a row in
// a database (SQLite on one machine, PostgreSQL when several machines share
// the work), whose attempts River hands to one worker at a time, retried
// with River's backoff when the graph does not succeed, and resumed on a
// retry from the nodes that already succeeded.
//
// Several River clients, in one process or in several, may share one
// SQLite file, as machines share a PostgreSQL database: each *sql.DB
// with SetMaxOpenConns(1), as riversqlite advises, and with a busy
// timeout (modernc.org/sqlite: "file:river.db?_pragma=busy_timeout(10000)"),
// without which a client's write that meets another's fails at once with
// SQLITE_BUSY ("database is locked"), Client.Insert and Resume included.
//
// River (github.com/riverqueue/river) does the persistence, the claiming
// and the retry schedule; this package adds what a graph needs on top:
//
//   - [Worker] is a river.Worker that builds a graph for a job, runs it
//     with an [asynctool.Async] under a deadline, and fails the attempt
//     (so that River retries it) unless every sink of the graph (a node
//     no other node depends on) succeeded (see [Worker.Work] for the
//     rest of the rule);
//   - [Node] wraps a node whose result is checkpointed: when an attempt
//     fails, the results of the nodes that succeeded are stored in the
//     job's row (as the cursor of a River resumable step), and the next
//     attempt replays them instead of calling their workers again.
//
// What River promises still holds: delivery is at least once (a job
// rescued as stuck may run again while its first worker is still going),
// and a node that ignores its ctx may still be running after its attempt
// ended, when the retry starts, possibly on another machine. An error a
// node returns that River understands (river.JobSnooze, river.JobCancel)
// snoozes or cancels the whole job, even from a node the graph tolerates;
// a river.JobCancel outranks a snooze from another node; and in an
// attempt that parks the job (see below) a suspension
// outranks a snooze, which would run the suspended node again with nobody
// having looked at it; a river.JobCancel outranks the suspension, and the
// job is cancelled, not parked.
//
// A node under asynctool.PolicySuspend whose worker failed parks the job:
// the attempt stores the checkpoint and cancels the job with a
// [*SuspendedError] (see [Worker.Work]). [Resume] makes it run again,
// optionally deciding the results of checkpointed nodes, such as the
// suspended one, from outside the job (a nil result only for a node whose
// result type can be nil: [ErrNilValue]). To River a parked job is a
// cancelled one, which River's JobCleaner deletes, checkpoint and all,
// once the client's CancelledJobRetentionPeriod (24 hours by default) has
// passed: set it to -1, or to longer than a person may take, on every
// client of the database, as whichever client leads runs the cleaner
// (on PostgreSQL, a job the cleaner has picked is deleted even if [Resume]
// makes it available as the cleaner's DELETE runs).
// Nor is cancelled among River's default unique states: a unique job
// that parks frees its unique key, for a job with the same args to be
// inserted meanwhile, unless its UniqueOpts.ByState has
// rivertype.JobStateCancelled.
//
// A checkpointed result is stored as JSON, so a node's result must decode
// back into its type ([ErrUndecodableResult]: an error, or another
// interface with methods, holding a value does not; an any gets
// JSON's own types back, a float64 for an int). An asynctool.WorkResult,
// such as each item of a ForEach node's result, encodes its Err itself
// and comes back with it as an *asynctool.StoredError: the same message
// (a NUL character in it becomes U+FFFD), matching the same context and
// asynctool errors with errors.Is. A result must have no NUL character or
// unpaired surrogate in its strings, no bytes that are not UTF-8 (which
// a json.RawMessage or a MarshalJSON can hold, and which encoding/json
// writes as U+FFFD in a string, so that a replay would give another
// string) and no number out of the range of PostgreSQL's numeric, which
// PostgreSQL cannot store ([ErrUnstorableJSON]). Node ids are stored in
// the row too, so they must be valid UTF-8 without a NUL character
// ([ErrUnstorableID]); and River stores the text of the error an
// attempt ends with, in which a NUL character is written as U+FFFD (see
// [Worker.Work]).
// Checkpoints are stored when an attempt ends with an error (a suspension
// included) or a snooze (River stores a resumable step's cursor whenever
// Work returns an error). When an attempt's process dies, River rescues
// the job later and retries it from whatever checkpoint its row holds:
// the previous attempt's, unless the Worker saves each node as it
// succeeds ([Worker.SaveEach]). Later is once the job has run for longer
// than both the client's RescueStuckJobsAfter (an hour by default) and
// the job's timeout (see [NewWorker]), and never if the job has none (a
// timeout of 0 on a client whose JobTimeout is -1); no test in this
// package kills a process, but one leaves the row of a dead machine for
// another to rescue. The rescuer is that of whichever client working jobs
// leads, with its own settings and Workers: a stuck job whose kind that
// client has no worker for is discarded, not retried (its checkpoint
// stays in the row, for a Client.JobRetry), so register the Worker on
// every client that works jobs on the database.
// A checkpoint stays in the job's row after the job succeeds, so retrying
// a completed job by hand (Client.JobRetry) replays what the last stored
// checkpoint holds.
package durable

import (
	"bytes"
	"context"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/asynctool-go/asynctool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// stepName is the River resumable step a graph runs in; its cursor is the
// checkpoint. It is part of what is stored in jobs' rows: renaming it would
// make River reject every job that has a checkpoint under the old name.
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
	save    SaveFunc[A]
}

// SaveFunc stores cursor, the checkpoint of job, in the job's row at once,
// usually with river.ResumableSetStepCursorTx in a transaction it commits:
//
//	func(ctx context.Context, job *river.Job[A], cursor map[string]json.RawMessage) error {
//		tx, err := db.BeginTx(ctx, nil)
//		if err != nil {
//			return err
//		}
//		defer tx.Rollback()
//		if _, err := river.ResumableSetStepCursorTx[*riversqlite.Driver](ctx, tx, job, cursor); err != nil {
//			return err
//		}
//		return tx.Commit()
//	}
//
// ctx is the one River gave the attempt, which carries River's step.
type SaveFunc[A river.JobArgs] func(ctx context.Context, job *river.Job[A], cursor map[string]json.RawMessage) error

// SaveEach makes w store a job's checkpoint as soon as each checkpointed
// node succeeds, by calling save, and returns w. Without it, the
// checkpoint is stored when an attempt ends without success, so an
// attempt whose process dies loses what its nodes did; with it, a retry
// resumes from the last node saved, at the cost of a database write per
// checkpointed node (the transaction is save's own).
//
// Calls to save are made one at a time, from the goroutine of the node
// that succeeded. An error from save fails the node; if asynctool retries
// the node (its Retry policy), the retry saves the result again without
// calling the worker. When the attempt's run ends, the ctx of a save in
// progress is cancelled and the attempt waits for that save to return;
// no save starts after that.
//
// River's ResumableSetStepCursorTx writes the job's row whatever attempt
// now holds it: an attempt that River rescued as stuck while its machine
// still ran it (its process paused for longer than RescueStuckJobsAfter
// and the job's timeout, say) goes on saving, each save replacing the
// checkpoint of the attempt that took the job over, what that attempt
// saved and, if it parked the job, the mark [Resume] looks for (Resume
// then refuses the job with [ErrNotParked]). A save that first locks the
// job's row and, unless the row is running job.Attempt, returns nil
// without writing (on PostgreSQL, SELECT attempt, state FROM river_job
// WHERE id = $1 FOR UPDATE, in its transaction; on SQLite, UPDATE
// river_job SET id = id WHERE id = ? RETURNING attempt, state, which
// takes the write lock first: a SELECT first would make the write after
// it fail at once with SQLITE_BUSY, whatever the busy timeout, when
// another client wrote meanwhile) leaves the row to the attempt that
// holds it; what River itself stores when such an attempt ends is
// River's (see Resume).
//
// Call SaveEach before registering w with river.AddWorker: it sets a
// field that every attempt reads without a lock, so a call once River may
// run w's jobs is a data race.
func (w *Worker[A]) SaveEach(save SaveFunc[A]) *Worker[A] {
	w.save = save
	return w
}

// NewWorker returns a Worker that builds each job's graph with build and
// runs it on async with timeout as the group deadline. With a timeout of
// 0 the graph has no deadline of its own and River's job timeout (the
// client's JobTimeout, a minute by default) applies; otherwise the job's
// River timeout is the graph's plus a second, so that the graph's
// deadline, which fast-fails its leftover nodes, comes first. A nil async
// or build, or a negative timeout, is an error.
func NewWorker[A river.JobArgs](async *asynctool.Async, timeout time.Duration, build BuildFunc[A]) (*Worker[A], error) {
	switch {
	case async == nil:
		return nil, errors.New("durable: NewWorker with a nil Async")
	case build == nil:
		return nil, errors.New("durable: NewWorker with a nil BuildFunc")
	case timeout < 0:
		return nil, fmt.Errorf("durable: NewWorker with a negative timeout (%v)", timeout)
	}
	return &Worker[A]{async: async, timeout: timeout, build: build}, nil
}

// Middleware returns no middleware, as river.WorkerDefaults does: a
// method of *Worker's own, so that River can call it on a nil *Worker,
// whose attempts fail (see Work).
func (w *Worker[A]) Middleware(*rivertype.JobRow) []rivertype.WorkerMiddleware { return nil }

// NextRetry returns the zero time, as river.WorkerDefaults does, so that
// the client's retry policy applies: a method of *Worker's own, so that
// River can call it on a nil *Worker, whose attempts fail (see Work).
func (w *Worker[A]) NextRetry(*river.Job[A]) time.Time { return time.Time{} }

// Timeout is the job's River timeout: see NewWorker. A graph timeout
// within a second of the largest time.Duration gives that largest
// Duration, not a sum that overflows to a negative timeout. It is 0 for a
// nil Worker.
func (w *Worker[A]) Timeout(*river.Job[A]) time.Duration {
	switch {
	case w == nil || w.timeout == 0:
		return 0
	case w.timeout > math.MaxInt64-time.Second:
		return math.MaxInt64
	}
	return w.timeout + time.Second
}

// Work runs one attempt of job. It returns nil when every sink of the
// graph (a node no other node depends on) succeeded or was a branch not
// taken (asynctool.ErrNotTaken, reported as skipped), so that a failure
// the graph tolerates (an optional upstream, a node under PolicyContinue
// that is not a sink) or the group deadline stopping a node no sink
// needed does not fail the job. It returns an error, a *GraphFailedError
// that names every node that did not succeed, after storing the
// checkpoint of the nodes that did, when a sink did not succeed, a node
// returned an error meant for River (river.JobCancel, river.JobSnooze),
// a node under PolicyEnd ended the run, or a callback panicked. A graph
// that cannot be built, or that asynctool rejects (a
// *asynctool.GraphError) or cannot start (asynctool.ErrClosed), fails the
// attempt with that error.
//
// A node that a run ended with asynctool.WorkerWrapper.EndsRun stopped
// has not failed either: the graph said it was not needed. One whose
// must upstream had failed before the run ended is not stopped but fails
// with that upstream's *asynctool.UpstreamError (see EndsRun), as it
// would in a run that went on: as a sink it fails the attempt.
//
// A node that did not run because it was short-circuited or not taken
// (a branch that its asynctool.When or asynctool.WhenResult join, or a
// custom join's DecideSkip, did not choose, or a node downstream of one)
// has not failed: as a sink it counts as done, and it is named neither in a
// *GraphFailedError nor in a *SuspendedError's Failed. A retry asks each
// When condition again, with its upstream's value replayed when that
// upstream is checkpointed: checkpoint the node a switch chooses by, or
// the retry may take another branch. Only successes are checkpointed: an
// asynctool.WhenResult condition (a fallback) sees a checkpointed
// upstream that succeeded replayed, and one that failed run again, so a
// retry may call the primary again and then not take the backup that
// the earlier attempt ran.
//
// A node under PolicySuspend whose worker failed parks the job: once
// every branch that does not need the node has ended (see
// asynctool.Run.Suspended), the run is cancelled, the checkpoint is
// stored, and the attempt returns river.JobCancel wrapping a
// *SuspendedError that names the suspended nodes and their errors. River
// then leaves the job cancelled, with that error in its row (until its
// JobCleaner deletes it: see the package's doc), until someone resumes
// it with [Resume] (or Client.JobRetry): the next attempt replays the
// checkpointed nodes and runs the suspended ones again, unless Resume
// gave them values. A checkpointed node that a custom join
// suspends again on that attempt (its upstreams still failing) succeeds
// with its stored result, if it has one, once the run stalls on it, and
// the run goes on; the job parks only on suspended nodes without one.
//
// Every node id of the graph, and of every checkpointed node made for
// it, must be valid UTF-8 without a NUL character ([ErrUnstorableID]):
// an attempt whose graph has one that is not fails before any node
// runs, with an error that names the id.
//
// River stores the text of the error Work returns in the job's row (its
// errors), and PostgreSQL cannot store a NUL character there: when the
// text holds one, Work returns an error whose text has U+FFFD instead of
// each NUL and which wraps the attempt's error, so that errors.Is,
// errors.As and River (a river.JobCancel, a river.JobSnooze) still find
// what it holds. Likewise, a panic of the BuildFunc (or of a result's
// UnmarshalJSON, which Work calls) whose value's text holds a NUL reaches
// River as a [*StorablePanic] that holds the value.
//
// A Worker that [NewWorker] did not make (a zero Worker), or a nil one
// (what NewWorker returns with an error), fails every attempt with an
// error that says so.
//
// Work is River's to call: the checkpoint is a River resumable step,
// which needs the state River puts in the attempt's ctx, so a direct
// call (from a unit test, say) panics with River's "resumable step can
// only be used within a Worker". Test a Worker with rivertest.Worker,
// which runs it as a client would, and a BuildFunc by calling it with a
// zero Checkpoint.
func (w *Worker[A]) Work(ctx context.Context, job *river.Job[A]) error {
	switch {
	case w == nil:
		return errNilWorker
	case w.build == nil || w.async == nil:
		return errZeroWorker
	}
	defer func() {
		if v := recover(); v != nil {
			panic(storablePanic(v)) // the stack still shows the first panic
		}
	}()
	var err error
	river.ResumableStepCursor(ctx, stepName, nil, func(ctx context.Context, saved map[string]json.RawMessage) error {
		err = w.attempt(ctx, job, saved)
		return err
	})
	return storable(err)
}

func (w *Worker[A]) attempt(ctx context.Context, job *river.Job[A], saved map[string]json.RawMessage) error {
	cp := newCheckpoint(saved)
	// Saves get a ctx that ends with the run, so that a save in progress
	// when the run ends (which close waits for) does not hold the attempt.
	saveCtx, endSaves := context.WithCancel(ctx)
	defer endSaves()
	if w.save != nil {
		cp.save = func(snapshot map[string]json.RawMessage) error { return w.save(saveCtx, job, snapshot) }
	}
	defer cp.close()
	starts, err := w.build(ctx, job, cp)
	if err != nil {
		return fmt.Errorf("durable: building the graph: %w", err)
	}
	if err := checkIDs(cp, starts); err != nil {
		return err
	}
	run, err := w.async.Start(ctx, w.timeout, starts...)
	if err != nil {
		return err
	}
	parked := await(run, cp)
	// The run has ended, or await cancelled it to park the job and it is
	// ending; its ctx derives from ctx, so it ends when ctx does. Wait
	// for its own error, with the callbacks' panics: Wait(ctx) would
	// return ctx.Err() instead once River's ctx has ended (a job timeout,
	// a JobCancel), while the run's sweep still calls its callbacks, or,
	// both being ready, at random.
	err = run.Wait(context.WithoutCancel(ctx))
	endSaves()
	cp.close() // a worker that outlived the run saves nothing now
	// Park unless the deadline came first (nothing suspended any more, or
	// the sweep ended a node that a replay was deciding),
	// the job's own ctx ended (River cancelled or timed out the job), or
	// a node, a suspended one included, asked River to cancel the job,
	// which a park would leave resumable.
	if parked != nil && len(parked.Suspended) > 0 && ctx.Err() == nil &&
		!errors.Is(err, context.DeadlineExceeded) &&
		!asksCancel(parked.Failed) && !asksCancel(parked.Suspended) {
		// The run's error is the Cancel above, unless a callback panicked.
		parked.RunErr = errors.Join(callbackPanics(err)...)
		if err := river.ResumableSetCursor(ctx, cp.parkedSnapshot(parked, job.Attempt)); err != nil {
			return river.JobCancel(errors.Join(parked, fmt.Errorf("durable: storing the checkpoint: %w", err)))
		}
		return river.JobCancel(parked)
	}
	rep := run.Report()
	fails := runFails(err)
	var failed []NodeFailure
	hasSucc := make([]bool, len(rep.Nodes))
	for _, n := range rep.Nodes {
		for _, d := range n.Deps {
			hasSucc[d] = true
		}
	}
	for i, n := range rep.Nodes {
		if ok(n) {
			continue
		}
		f := NodeFailure{ID: n.ID, Index: n.Index, Status: n.Status, Err: n.Err}
		if parked != nil {
			// A node that was suspended when the run stalled keeps the
			// error its worker failed with, not the Cancel's that ended
			// it: that error may be the river.JobCancel that kept the
			// attempt from parking the job.
			// A snooze is left out: River obeys a snooze anywhere in the
			// error before a cancellation, and a suspended node's snooze
			// must not outrank another node's JobCancel.
			if k := slices.IndexFunc(parked.Suspended, func(s NodeFailure) bool { return s.Index == n.Index }); k >= 0 {
				if own := parked.Suspended[k].Err; own != nil && !isJobSnooze(own) {
					f.Err = own
				}
			}
		}
		failed = append(failed, f)
		fails = fails || !hasSucc[i] || forRiver(f.Err)
	}
	if !fails {
		return nil
	}
	// Keep what this attempt and the earlier ones checkpointed, for the
	// next attempt. River stores the cursor because the attempt fails.
	if serr := river.ResumableSetCursor(ctx, cp.snapshot()); serr != nil {
		return errors.Join(&GraphFailedError{Failed: failed, RunErr: err}, fmt.Errorf("durable: storing the checkpoint: %w", serr))
	}
	return &GraphFailedError{Failed: failed, RunErr: err}
}

// errZeroWorker is the error of every attempt of a Worker that NewWorker
// did not make: it has no BuildFunc nor Async.
var errZeroWorker = errors.New("durable: a Worker must be made with NewWorker: this one has no BuildFunc nor Async")

// errNilWorker is the error of every attempt of a nil *Worker, which
// NewWorker returns with its error.
var errNilWorker = errors.New("durable: the Worker is nil: make it with NewWorker, and check its error")

// ErrUnstorableID is the error, wrapped with the id, of an attempt whose
// graph has a node id that cannot be stored in the job's row: one with a
// NUL character, which PostgreSQL's jsonb cannot store, or one that is
// not valid UTF-8, which encoding/json would store with U+FFFD in place
// of its invalid bytes, so that the next attempt would not find the
// node's result under its id. Ids are stored as the keys of the
// checkpoint and in the mark of a parked job, which names its suspended
// nodes, checkpointed or not: the check covers every node of the graph.
// A checkpointed node that a SubGraph's Build makes during the run, after
// the check, fails with it when it runs, and the mark of a parked job
// leaves it out (Resume cannot give it a value).
var ErrUnstorableID = errors.New("a node id must be valid UTF-8 without a NUL character, to be stored in the job's row")

// ErrUndecodableResult is the error, wrapped with the node's id and its
// result type, of a checkpointed node ([Node]) whose result does not come
// back from its JSON: each result is decoded back as it is checkpointed,
// and one that does not decode (an error, a fmt.Stringer or another
// interface with methods holding a value, or a struct field of such a
// type) fails the node, which a retry would otherwise run again, its
// checkpoint unused.
var ErrUndecodableResult = errors.New("a checkpointed result must decode back into its type from its JSON")

// errAnonymousNode is the error of an attempt whose graph has a
// checkpointed node with the empty id.
var errAnonymousNode = errors.New("durable: a checkpointed node (Node) needs an id: its result is stored under it")

// checkIDs returns errAnonymousNode if a checkpointed node of cp has the
// empty id, or an error that names the first id, among those of cp's
// checkpointed nodes and then those of the graph reachable from starts,
// that cannot be stored (ErrUnstorableID). A graph that asynctool rejects
// is left to Start to report.
func checkIDs(cp *Checkpoint, starts []asynctool.Wrapper) error {
	cp.mu.Lock()
	ids := slices.Sorted(maps.Keys(cp.nodes))
	anonymous := cp.anonymous
	cp.mu.Unlock()
	if anonymous {
		return errAnonymousNode
	}
	if rep, err := asynctool.Describe(starts...); err == nil {
		top := make(map[string]bool, len(rep.Nodes))
		for _, n := range rep.Nodes {
			ids = append(ids, n.ID)
			top[n.ID] = true
		}
		cp.mu.Lock()
		cp.top = top
		cp.mu.Unlock()
	}
	for _, id := range ids {
		if err := storableID(id); err != nil {
			return err
		}
	}
	return nil
}

// storableID returns an error wrapping ErrUnstorableID if id cannot be
// stored in the job's row.
func storableID(id string) error {
	if strings.ContainsRune(id, 0) || !utf8.ValidString(id) {
		return fmt.Errorf("durable: node id %q: %w", id, ErrUnstorableID)
	}
	return nil
}

// decodesBack returns an error wrapping ErrUndecodableResult if raw, a
// result's JSON, does not decode into an R.
func decodesBack[R any](raw []byte) error {
	var back R
	if err := json.Unmarshal(raw, &back); err != nil {
		return fmt.Errorf("its JSON does not decode back into %v: %w: %w", reflect.TypeFor[R](), ErrUndecodableResult, err)
	}
	return nil
}

// storable returns err, unless its text holds a NUL character, which
// PostgreSQL cannot store in the job's row: then an error that wraps err
// and whose text has U+FFFD in place of each NUL.
func storable(err error) error {
	if err == nil || !strings.ContainsRune(err.Error(), 0) {
		return err
	}
	return &storableError{err: err}
}

// storableError is an error whose text, stored by River, holds no NUL.
type storableError struct{ err error }

func (e *storableError) Error() string { return storableText(e.err.Error()) }
func (e *storableError) Unwrap() error { return e.err }

// storableText is s with U+FFFD in place of each NUL character.
func storableText(s string) string { return strings.ReplaceAll(s, "\x00", "\uFFFD") }

// StorablePanic is the value a [Worker] panics with when a panic in its
// Work (one of the BuildFunc, say) has a value whose text, which River
// stores in the job's row, holds a NUL character, which PostgreSQL cannot
// store. River's ErrorHandler.HandlePanic receives it; Value is the value
// of the first panic, whose stack the trace still shows.
type StorablePanic struct {
	Value any
}

// Error returns the text of Value (as fmt's %v writes it) with U+FFFD in
// place of each NUL character.
func (p *StorablePanic) Error() string { return storableText(fmt.Sprint(p.Value)) }

// Unwrap returns Value if it is an error.
func (p *StorablePanic) Unwrap() error {
	err, _ := p.Value.(error)
	return err
}

// storablePanic returns v, a recovered panic value, or a *StorablePanic
// that holds it if its text holds a NUL.
func storablePanic(v any) any {
	if strings.ContainsRune(fmt.Sprint(v), 0) {
		return &StorablePanic{Value: v}
	}
	return v
}

// await waits for run to end or to stall. When it stalls, each suspended
// node with a stored result (an earlier attempt's, or a value Resume
// gave) succeeds with it, and the run goes on: a node that a custom join
// suspended needs this, since the join, asked again on every attempt,
// never lets the node's Action, which would replay the result, run. When
// a suspended node without one remains, await cancels the run and
// returns what stalled it: nothing else can happen in this attempt, as
// only a person can decide about the node, after the attempt ends.
func await(run *asynctool.Run, cp *Checkpoint) *SuspendedError {
	tried := make(map[string]error) // each node's stored result is tried once
	for {
		select {
		case <-run.Done():
			return nil
		case <-run.Suspended():
		}
		rep := run.Report()
		resumed := false
		for _, n := range rep.Nodes {
			if _, seen := tried[n.ID]; seen || !suspended(n) {
				continue
			}
			ok, err := cp.replay(run, n.ID)
			tried[n.ID] = err
			resumed = resumed || ok
		}
		if resumed {
			continue // Suspended, asked again, tells whether it stalls again
		}
		parked := stalledAt(rep)
		for k, f := range parked.Suspended {
			if f.Err == nil { // suspended by a custom join
				parked.Suspended[k].Err = tried[f.ID]
			}
		}
		run.Cancel()
		return parked
	}
}

// suspended reports whether n, a node of a stalled run's report, is
// suspended (not one that waits on a suspended node).
func suspended(n asynctool.NodeReport) bool {
	return n.Status == asynctool.StatusPending && n.State == asynctool.StateWorking
}

// stalledAt lists, from the report of a run that stalled, the nodes that
// suspended and the nodes that had already failed. None is suspended if
// the deadline came first.
func stalledAt(rep *asynctool.Report) *SuspendedError {
	e := &SuspendedError{}
	for _, n := range rep.Nodes {
		switch {
		case suspended(n):
			e.Suspended = append(e.Suspended, NodeFailure{ID: n.ID, Index: n.Index, Status: n.Status, Err: n.Err})
		case n.Status == asynctool.StatusFailed || n.Status == asynctool.StatusTimedOut:
			e.Failed = append(e.Failed, NodeFailure{ID: n.ID, Index: n.Index, Status: n.Status, Err: n.Err})
		}
	}
	return e
}

// callbackPanics returns the *asynctool.CallbackPanicError values in err,
// a run's error.
func callbackPanics(err error) []error {
	var out []error
	var walk func(error)
	walk = func(err error) {
		var p *asynctool.CallbackPanicError
		switch e := err.(type) {
		case nil:
		case interface{ Unwrap() []error }:
			for _, x := range e.Unwrap() {
				walk(x)
			}
		default:
			if errors.As(err, &p) {
				out = append(out, p)
			}
		}
	}
	walk(err)
	return out
}

// ok reports whether node n counts as done: a node short-circuited or
// not taken (both StatusSkipped), or stopped because the run had ended
// with its asynctool.WorkerWrapper.EndsRun nodes, has not failed.
func ok(n asynctool.NodeReport) bool {
	switch n.Status {
	case asynctool.StatusSucceeded, asynctool.StatusSkipped:
		return true
	case asynctool.StatusTimedOut:
		return errors.Is(n.Err, asynctool.ErrRunEnded)
	}
	return false
}

// runFails reports whether the run's own error fails the attempt whatever
// the sinks did: a node under PolicyEnd ended the run, or a callback
// panicked. That the deadline stopped nodes the sinks did not need is no
// failure.
func runFails(err error) bool {
	var end *asynctool.EndError
	var panicked *asynctool.CallbackPanicError
	return errors.As(err, &end) || errors.As(err, &panicked)
}

// asksCancel reports whether one of the nodes returned river.JobCancel.
func asksCancel(failed []NodeFailure) bool {
	return slices.ContainsFunc(failed, func(f NodeFailure) bool { return isJobCancel(f.Err) })
}

// isJobCancel reports whether err is or wraps river.JobCancel's error.
func isJobCancel(err error) bool {
	var cancel *rivertype.JobCancelError
	return errors.As(err, &cancel)
}

// forRiver reports whether a node's error is meant for River
// (river.JobCancel, river.JobSnooze): it then fails the attempt, so that
// River sees it, even when the graph tolerated the node.
func forRiver(err error) bool {
	return isJobCancel(err) || isJobSnooze(err)
}

// isJobSnooze reports whether err is or wraps river.JobSnooze's error.
// River obeys a snooze anywhere in the error Work returns before it looks
// for a cancellation.
func isJobSnooze(err error) bool {
	var snooze *rivertype.JobSnoozeError
	return errors.As(err, &snooze)
}

// NodeFailure is a node that did not succeed in an attempt.
type NodeFailure struct {
	// ID is the node's id, empty for a node made without one.
	ID string
	// Index is the node's index in the attempt's run, as in
	// [asynctool.NodeReport.Index]: the errors name a node without an id
	// by "#" and its Index, as asynctool's do.
	Index  int
	Status asynctool.Status
	Err    error
}

// name is how the errors name the node: its id quoted, or "#" and its
// index for a node without one.
func (f NodeFailure) name() string {
	if f.ID == "" {
		return "#" + strconv.Itoa(f.Index)
	}
	return strconv.Quote(f.ID)
}

// MarshalJSON encodes the failure as encoding/json would encode its
// fields, except its Err, which it encodes as an [asynctool.StoredError]
// (null if nil), as asynctool.NodeReport.MarshalJSON does: the error's
// message and the asynctool and context errors it matched. encoding/json
// alone writes an error's exported fields, {} for most errors, so a
// failure logged as JSON would lose its error. Nothing decodes it back.
func (f NodeFailure) MarshalJSON() ([]byte, error) {
	type fields NodeFailure // the same fields, without this method
	stored, err := storedOrNil(f.Err)
	if err != nil {
		return nil, err
	}
	return json.Marshal(struct {
		fields
		Err *asynctool.StoredError
	}{fields(f), stored})
}

// storedOrNil is err as asynctool.WorkResult.MarshalJSON stores it, nil
// for nil.
func storedOrNil(err error) (*asynctool.StoredError, error) {
	if err == nil {
		return nil, nil
	}
	raw, merr := asynctool.WorkResult[struct{}]{Err: err}.MarshalJSON()
	if merr != nil {
		return nil, merr
	}
	var back struct{ Err *asynctool.StoredError }
	if uerr := json.Unmarshal(raw, &back); uerr != nil {
		return nil, uerr
	}
	return back.Err, nil
}

// GraphFailedError is the error of an attempt whose graph did not
// succeed: every node that did not succeed, and the run's own error (the
// group deadline, a cancelled job's context, a panicking callback), if
// any.
type GraphFailedError struct {
	Failed []NodeFailure
	RunErr error
}

func (e *GraphFailedError) Error() string {
	if len(e.Failed) == 0 {
		return fmt.Sprintf("durable: the run failed: %v", e.RunErr)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "durable: %d node(s) did not succeed", len(e.Failed))
	for k, f := range e.Failed {
		sep := ", "
		if k == 0 {
			sep = ": "
		}
		fmt.Fprintf(&b, "%s%s %v", sep, f.name(), f.Status)
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
// When a node asked River to cancel the job (river.JobCancel), the nodes'
// river.JobSnooze errors are left out (one that asks for both gives its
// cancellation alone): River obeys a snooze anywhere in the error before
// it looks for a cancellation, and would snooze the job, running the
// cancelling node again, instead of cancelling it.
func (e *GraphFailedError) Unwrap() []error {
	var errs []error
	if e.RunErr != nil {
		errs = append(errs, e.RunErr)
	}
	cancel := asksCancel(e.Failed)
	for _, f := range e.Failed {
		switch {
		case f.Err == nil:
		case !cancel || !isJobSnooze(f.Err):
			errs = append(errs, f.Err)
		default:
			// A snooze beside a cancellation: left out, unless the error
			// asks for both, which gives only its cancellation, or River
			// would see the snooze first, or, with the error left out,
			// neither.
			var c *rivertype.JobCancelError
			if errors.As(f.Err, &c) {
				errs = append(errs, c)
			}
		}
	}
	return errs
}

// MarshalJSON encodes the error as encoding/json would encode its fields,
// except its RunErr, which it encodes as an [asynctool.StoredError] (null
// if nil), as asynctool.Report.MarshalJSON does; each of Failed is
// encoded by [NodeFailure.MarshalJSON]. encoding/json alone writes {} for
// most errors.
func (e GraphFailedError) MarshalJSON() ([]byte, error) {
	type fields GraphFailedError // the same fields, without this method
	stored, err := storedOrNil(e.RunErr)
	if err != nil {
		return nil, err
	}
	return json.Marshal(struct {
		fields
		RunErr *asynctool.StoredError
	}{fields(e), stored})
}

// SuspendedError is the error of an attempt whose graph stalled on
// suspended nodes (asynctool.PolicySuspend, or a custom join's
// DecideSuspend). The Worker returns it wrapped in river.JobCancel, so
// that the job waits, cancelled, for [Resume] (or Client.JobRetry).
type SuspendedError struct {
	// Suspended are the nodes that suspended, each with the error its
	// worker failed with; for a node a custom join suspended, nil, or
	// why the value Resume gave it cannot be used (it does not decode,
	// or is nil for a result type that cannot be: ErrNilValue), or why
	// none can (a checkpointed node of a sub-graph has its id:
	// asynctool.ErrDuplicateID, see [Node]). A checkpointed node
	// that a custom join suspended is listed only when it has no stored
	// result that decodes: one that does ends the node instead (see
	// [Worker.Work]).
	Suspended []NodeFailure
	// Failed are the nodes that had failed or timed out when the graph
	// stalled: failures it tolerated, or that the suspended nodes' own
	// branches would have met anyway. A retry runs them again unless they
	// are checkpointed.
	Failed []NodeFailure
	// RunErr joins the *asynctool.CallbackPanicError values of the run,
	// if a callback panicked; nil otherwise.
	RunErr error
}

func (e *SuspendedError) Error() string {
	var b strings.Builder
	b.WriteString("durable: the graph suspended at")
	writeNodes(&b, e.Suspended, ",")
	if len(e.Failed) > 0 {
		b.WriteString("; failed:")
		writeNodes(&b, e.Failed, ",")
	}
	if e.RunErr != nil {
		fmt.Fprintf(&b, "; run: %v", e.RunErr)
	}
	b.WriteString("; resume the job with durable.Resume")
	return b.String()
}

// writeNodes writes each node's id and error, if any, after a space,
// separated by sep.
func writeNodes(b *strings.Builder, nodes []NodeFailure, sep string) {
	for k, f := range nodes {
		if k > 0 {
			b.WriteString(sep)
		}
		fmt.Fprintf(b, " %s", f.name())
		if f.Err != nil {
			fmt.Fprintf(b, " (%v)", f.Err)
		}
	}
}

// Unwrap returns the suspended nodes' errors and the run's, for
// errors.Is. The errors of Failed are left out, and so is a suspended
// node's river.JobSnooze: River looks for a snooze anywhere in the
// error it is given before it looks for a cancellation, so it would obey
// the snooze over the cancellation that parks the job.
func (e *SuspendedError) Unwrap() []error {
	var errs []error
	for _, f := range e.Suspended {
		if f.Err != nil && !isJobSnooze(f.Err) {
			errs = append(errs, f.Err)
		}
	}
	if e.RunErr != nil {
		errs = append(errs, e.RunErr)
	}
	return errs
}

// MarshalJSON encodes the error as encoding/json would encode its fields,
// except its RunErr, which it encodes as an [asynctool.StoredError] (null
// if nil), as asynctool.Report.MarshalJSON does; each of Suspended and
// Failed is encoded by [NodeFailure.MarshalJSON]. encoding/json alone
// writes {} for most errors.
func (e SuspendedError) MarshalJSON() ([]byte, error) {
	type fields SuspendedError // the same fields, without this method
	stored, err := storedOrNil(e.RunErr)
	if err != nil {
		return nil, err
	}
	return json.Marshal(struct {
		fields
		RunErr *asynctool.StoredError
	}{fields(e), stored})
}

// Checkpoint holds the results of a job's checkpointed nodes: those stored
// by earlier attempts, and those this attempt's nodes produced. It is safe
// for concurrent use by the nodes of one attempt. A Worker gives each
// attempt's BuildFunc its own; a zero Checkpoint, which a test of a
// BuildFunc may make, is that of a first attempt.
type Checkpoint struct {
	saved   map[string]json.RawMessage // from earlier attempts; read only
	decided map[string]bool            // saved ids whose value Resume gave
	mu      sync.Mutex
	done    map[string]json.RawMessage // produced in this attempt
	// nodes are the checkpointed nodes made in this attempt, by id, each
	// with the function that ends it, suspended in a run, with its stored
	// result (see await). An id may have several: ids are unique within
	// one graph only, so a SubGraph's Build may make one with the id of a
	// node of the outer graph, and the BuildFunc may make one it leaves
	// out of the graph or compiles into a Plan. The function of a node
	// that is not in the run it is given declines (see
	// checkpointed.replay).
	nodes map[string][]func(run *asynctool.Run) (bool, error)
	// notNil are the checkpointed nodes whose result type does not take
	// JSON null (see nullable).
	notNil map[string]bool
	// replayedIDs are the checkpointed nodes that took a stored result
	// (see Replayed): a SubGraph retried replays its node again.
	replayedIDs map[string]bool
	// anonymous: a checkpointed node was made with the empty id, which
	// fails the attempt before any node runs (see checkIDs).
	anonymous bool
	// paths are the paths in the run (asynctool.Wrappers.Path) of the
	// checkpointed nodes that ran in this attempt, by id (see claim).
	paths map[string][]string
	// within are, for the stored results of checkpointed nodes that a
	// SubGraph's Build made in an earlier attempt, the path of the node
	// whose sub-run made them, by id (parkMark.Within); top are the ids
	// of this attempt's graph, before any sub-run (see checkIDs). Such a
	// result is kept while its outermost node is in the graph, though
	// its sub-run is not built in this attempt (see snapshot).
	within map[string][]string
	top    map[string]bool

	// save stores a snapshot at once (Worker.SaveEach), nil if not.
	// saveMu orders the saves and the close after which none is made.
	save   func(map[string]json.RawMessage) error
	saveMu sync.Mutex
	closed bool
}

// parkKey is the checkpoint entry, under an id no node can have, that
// says whether the attempt that stored the checkpoint parked the job, for
// which nodes Resume may then give values, and which stored values a
// person decided.
const parkKey = ""

// parkMark is the parkKey entry.
type parkMark struct {
	// Suspended are the nodes that suspended, if the attempt that stored
	// the checkpoint parked the job (empty otherwise, and once Resume
	// resumed it); Nodes the checkpointed nodes of the graph that parked,
	// for which Resume takes values.
	Suspended []string `json:"suspended,omitempty"`
	Nodes     []string `json:"nodes,omitempty"`
	// Attempt is the attempt that parked the job. The mark stays in the
	// row when a later attempt ends before it stores a checkpoint (its
	// BuildFunc fails, or the graph cannot start, after a
	// Client.JobRetry), so Resume takes the job for parked only if its
	// last attempt is this one.
	Attempt int `json:"attempt,omitempty"`
	// Decided are the nodes whose stored value Resume gave: one that does
	// not decode fails its node instead of running the worker again. They
	// stay decided in every later checkpoint, for as long as the value is
	// replayed.
	Decided []string `json:"decided,omitempty"`
	// NotNil are the checkpointed nodes of the graph that parked whose
	// result type cannot be nil, for which Resume refuses a nil value.
	NotNil []string `json:"notNil,omitempty"`
	// Within are, for the checkpointed nodes that a SubGraph's Build
	// made (those of a sub-run) and that ran in the attempt or have a
	// stored result, the path of the node whose sub-run made them, by id:
	// an attempt in which that sub-run is not built keeps their results,
	// a value Resume gave included, while the path's outermost node is in
	// the graph. They stay in every later checkpoint, as Decided do.
	Within map[string][]string `json:"within,omitempty"`
}

// newCheckpoint returns the checkpoint of an attempt that starts from
// saved, River's cursor.
func newCheckpoint(saved map[string]json.RawMessage) *Checkpoint {
	cp := &Checkpoint{saved: saved, done: make(map[string]json.RawMessage)}
	if raw, ok := saved[parkKey]; ok {
		var m parkMark
		if json.Unmarshal(raw, &m) == nil {
			if len(m.Decided) > 0 {
				cp.decided = make(map[string]bool, len(m.Decided))
				for _, id := range m.Decided {
					cp.decided[id] = true
				}
			}
			cp.within = m.Within
		}
	}
	return cp
}

// parkedSnapshot is snapshot with the mark of attempt, which parks the
// job on the nodes e names.
func (cp *Checkpoint) parkedSnapshot(e *SuspendedError, attempt int) map[string]json.RawMessage {
	cp.mu.Lock()
	all, m := cp.results()
	// A node a SubGraph's Build made with an id PostgreSQL cannot store
	// failed with ErrUnstorableID: listed, it would make PostgreSQL
	// refuse the whole checkpoint, and Resume could not decide it anyway.
	unstorable := func(id string) bool { return storableID(id) != nil }
	m.Nodes = slices.DeleteFunc(slices.Sorted(maps.Keys(cp.nodes)), unstorable)
	m.NotNil = slices.DeleteFunc(slices.Sorted(maps.Keys(cp.notNil)), unstorable)
	m.Attempt = attempt
	cp.mu.Unlock()
	for _, f := range e.Suspended {
		m.Suspended = append(m.Suspended, f.ID)
	}
	if raw, err := json.Marshal(m); err == nil {
		all[parkKey] = raw
	}
	return all
}

// saveNow stores the checkpoint at once, if the Worker saves each node.
func (cp *Checkpoint) saveNow() error {
	if cp.save == nil {
		return nil
	}
	cp.saveMu.Lock()
	defer cp.saveMu.Unlock()
	if cp.closed {
		return nil
	}
	return cp.save(cp.snapshot())
}

// close ends the saves: once the attempt's run has ended, River's step is
// the Work goroutine's again.
func (cp *Checkpoint) close() {
	cp.saveMu.Lock()
	cp.closed = true
	cp.saveMu.Unlock()
}

// Replayed returns how many nodes of this attempt took their result from
// an earlier attempt instead of running (a node that a SubGraph retried
// built again counts once); 0 for a nil Checkpoint. To asynctool, its
// report and its hooks (asynctoolotel's spans, with asynctool.node.ran =
// true), such a node ran and succeeded at once: the worker asynctool
// calls is Node's, which returns the stored result without calling the
// node's own. A node that a custom join suspended is the exception: the
// attempt ends it with its stored result once the run stalls (see
// [Worker.Work]), through asynctool.Run.Resume, so it succeeds without
// having run (its NodeEvent.Attempt and NodeReport.Attempts are 0).
func (cp *Checkpoint) Replayed() int {
	if cp == nil {
		return 0
	}
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return len(cp.replayedIDs)
}

// markReplayed records that the checkpointed node with id took its
// stored result.
func (cp *Checkpoint) markReplayed(id string) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.replayedIDs == nil {
		cp.replayedIDs = make(map[string]bool)
	}
	cp.replayedIDs[id] = true
}

// Has reports whether the checkpoint this attempt started from holds a
// result for id: one an earlier attempt stored, or a value [Resume] gave.
// Such a result is replayed only if it decodes into the node's result
// type (see [Node]). A nil Checkpoint (a BuildFunc called by a test
// without one) has none.
func (cp *Checkpoint) Has(id string) bool {
	if cp == nil {
		return false
	}
	_, ok := cp.saved[id]
	return ok && id != parkKey // the park mark is no node's result
}

// snapshot returns what the next attempt should replay: the results of
// this attempt's checkpointed nodes, from this attempt or an earlier one,
// and those of an earlier attempt's sub-runs that this attempt did not
// build (see results). Results of ids the graph no longer has are
// dropped.
func (cp *Checkpoint) snapshot() map[string]json.RawMessage {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	all, m := cp.results()
	if len(m.Decided) > 0 || len(m.Within) > 0 {
		if raw, err := json.Marshal(m); err == nil {
			all[parkKey] = raw
		}
	}
	return all
}

// results returns the results the next attempt should replay, by id, and
// the mark that goes with them: the decided ids whose Resume-given value
// is still replayed, and where the results of sub-runs' nodes were made.
// A result stored by an earlier attempt is kept if its node is in this
// attempt's graph, or if a sub-run made it in an earlier attempt and
// this attempt built no node of that sub-run (its SubGraph node did not
// run: an upstream failed, the run ended first) while the sub-run's
// outermost node is still in the graph: a sub-run builds its nodes only
// when it runs, so the graph still has them. cp.mu is held.
func (cp *Checkpoint) results() (map[string]json.RawMessage, parkMark) {
	all := make(map[string]json.RawMessage, len(cp.saved)+len(cp.done))
	var m parkMark
	within := func(id string, parent []string) {
		for _, p := range parent {
			if storableID(p) != nil {
				return // PostgreSQL could not store the mark: not kept
			}
		}
		if m.Within == nil {
			m.Within = make(map[string][]string)
		}
		m.Within[id] = parent
	}
	// The sub-runs that made checkpointed nodes in this attempt: a result
	// of one of them whose node it no longer makes is dropped.
	built := make(map[string]bool)
	for _, path := range cp.paths {
		if len(path) > 1 {
			built[strings.Join(path[:len(path)-1], "\x00")] = true
		}
	}
	for id, raw := range cp.saved {
		switch parent, sub := cp.within[id]; {
		case id == parkKey: // a retry is no longer parked
		case len(cp.nodes[id]) > 0:
			all[id] = raw
		case sub && len(parent) > 0 && cp.top[parent[0]] && !built[strings.Join(parent, "\x00")]:
			all[id] = raw
			within(id, parent)
		}
	}
	maps.Copy(all, cp.done)
	// Every node a sub-run made that ran in this attempt, with a result or
	// not: Resume may give one without a result a value, which the next
	// attempts keep as they keep a result.
	for id, path := range cp.paths {
		if len(path) > 1 {
			within(id, path[:len(path)-1])
		}
	}
	for id := range all {
		if parent, sub := cp.within[id]; sub && cp.paths[id] == nil {
			within(id, parent) // built again, but did not run in this attempt
		}
	}
	// A value Resume gave stays decided for as long as it is replayed.
	for id := range cp.decided {
		if _, kept := all[id]; kept {
			if _, redone := cp.done[id]; !redone {
				m.Decided = append(m.Decided, id)
			}
		}
	}
	slices.Sort(m.Decided)
	return all, m
}

// ErrNilValue is the error, wrapped, of a nil value (nil, or a nil
// pointer, slice or map) given to [Resume] for a node whose result type
// does not take JSON null (an int, a string, a struct that does not decode
// itself), as asynctool.SucceedWith(nil) is for such a node within one
// process: null would decode into it as its zero value. Resume refuses a
// nil value when the graph that parked the job says the node's type does
// not take null. A node whose given value is null on replay (a nil value
// for a type that changed since the job parked, or a value that is not nil
// but encodes as null, such as json.RawMessage("null")) fails with it,
// rather than take the zero value; a type whose UnmarshalJSON handles null
// gets the null.
var ErrNilValue = errors.New("a nil value is no result for a node whose result type cannot be nil")

// nullable reports whether JSON null is a value of t: t can be nil, or
// decodes itself (its UnmarshalJSON gets the null, and a nullable type
// makes its own "no value" of it). Into any other type, null decodes as
// the zero value, which nobody gave.
func nullable(t reflect.Type) bool {
	return canBeNil(t) || reflect.PointerTo(t).Implements(reflect.TypeFor[json.Unmarshaler]())
}

// canBeNil reports whether a value of type t can be nil.
func canBeNil(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Interface, reflect.Pointer, reflect.Slice, reflect.Map, reflect.Chan, reflect.Func:
		return true
	}
	return false
}

// isNil reports whether v, a value given to Resume, is nil.
func isNil(v any) bool {
	rv := reflect.ValueOf(v)
	return !rv.IsValid() || canBeNil(rv.Type()) && rv.IsNil()
}

// Node returns a node with the given id that runs worker with param
// unless an earlier attempt of the job stored its result in cp, in which
// case the node succeeds with that result without calling the worker.
// When the worker succeeds, its result is added to cp. The id must not be
// empty: it is the key of the stored result (the attempt of a graph with
// such a node fails before any node runs). It must be unique among the
// checkpointed nodes of the job, those a SubGraph's Build makes while the
// run goes on included, which asynctool checks only within each graph:
// of two checkpointed nodes with one id, in two sub-graphs, the one that
// runs second fails with an error that wraps asynctool.ErrDuplicateID
// and names both nodes' paths (asynctool.Wrappers.Path), where it would
// otherwise take the other's stored result; prefix the ids of a
// sub-graph's checkpointed nodes with the outer node's id or item. A
// sub-graph builds its nodes only when its node runs: the stored results
// of those an earlier attempt's sub-graph made are kept through an
// attempt in which it does not run (an upstream failed), as long as the
// graph has its outermost node, and dropped once it runs without making
// them. And,
// like every id of the graph, it must be valid UTF-8 without a NUL
// character, or the attempt fails before any node runs
// ([ErrUnstorableID]; a node that a SubGraph's Build makes during the run
// fails with it when it runs). cp must be the Checkpoint the BuildFunc
// was given: a node made with a nil one fails when it runs. A worker that asynctool refuses before a run (nil, a nil
// WorkerFunc, a ForEach without Items or Worker or with a negative Limit,
// a Hedged of nil) is reported as asynctool reports it for any node: the
// attempt fails before any node runs, with a *asynctool.GraphError
// naming the node (asynctool.ErrNilWorker, asynctool.ErrBadLimit).
//
// R's values must come back from their JSON: each result is decoded back
// as it is checkpointed, and one that does not decode (an error, or
// another interface with methods, holding a value, or a struct whose
// exported field of such a type does) fails the node with
// [ErrUndecodableResult]: a retry would otherwise run its worker again,
// the checkpoint unused. An asynctool.WorkResult (a ForEach's items)
// decodes, its Err an *asynctool.StoredError (see
// asynctool.WorkResult.MarshalJSON). JSON records no Go type: an any, or a
// map[string]any, comes back with JSON's own types (a float64 where the
// worker returned an int, a map[string]any for a struct), as encoding/json
// gives them. Use the concrete type, or json.RawMessage for JSON whose
// shape is not known, which comes back as the same JSON value, not
// always the same bytes: on SQLite compacted, with <, > and & escaped;
// on PostgreSQL as jsonb writes it (keys reordered, duplicate keys
// dropped, spaces added). Keep bytes that must not change in a []byte. An [asynctool.When] or [asynctool.WhenResult]
// condition on such a node gets them too: a When[int] on an any that
// held an int takes its branch on the first attempt and, on a replay,
// where the value is a float64, fails its node with
// asynctool.ErrResultType. A condition on a concrete type
// (a string, a struct) sees on a replay the value its JSON decodes to.
// Nor does JSON hold a struct's unexported fields (encoding/json leaves
// them out): a replay gives them their zero values, without an error,
// so a result type's state belongs in exported fields (or in a
// MarshalJSON and UnmarshalJSON of its own).
//
// A result that does not encode as JSON fails the node, and so does one
// whose JSON PostgreSQL cannot store ([ErrUnstorableJSON]: a string with
// a NUL character, or an unpaired surrogate escape, or bytes that are not
// UTF-8 (from a json.RawMessage or a MarshalJSON; in a string, which
// encoding/json would store with U+FFFD in their place, and a replay give
// back changed), or a number out of the range of PostgreSQL's numeric):
// encode such bytes as a []byte (base64), and such numbers as strings,
// instead. A stored result that does not decode into R (a string stored
// where R is an int) makes the node run its worker again; but JSON
// decoding ignores unknown fields and leaves missing ones zero, so when
// the shape of R changes between deployments, change the node's id too
// (say "price/v2"), or the new code replays results of the old shape.
func Node[P, R any](cp *Checkpoint, id string, worker asynctool.Worker[P, R], param P) *asynctool.WorkerWrapper[P, R] {
	// A worker asynctool refuses is left unwrapped for asynctool to
	// report, as for any node, before any node runs: wrapped, it would
	// be hidden from asynctool's checks, and fail only when it ran.
	if probe := asynctool.NewWrapper(id, worker, param); refused(probe) {
		return probe
	}
	c := &checkpointed[P, R]{cp: cp, id: id, worker: worker}
	c.self = asynctool.NewWrapper[P, R](id, c, param)
	if id == "" && cp != nil {
		// The attempt fails before any node runs (see checkIDs).
		cp.mu.Lock()
		cp.anonymous = true
		cp.mu.Unlock()
	}
	if id != "" && cp != nil { // an anonymous node, or one without a Checkpoint, fails in Action and is never checkpointed
		cp.mu.Lock()
		if cp.nodes == nil {
			cp.nodes = make(map[string][]func(*asynctool.Run) (bool, error))
		}
		cp.nodes[id] = append(cp.nodes[id], c.replay)
		if nullable(reflect.TypeFor[R]()) {
			delete(cp.notNil, id)
		} else {
			if cp.notNil == nil {
				cp.notNil = make(map[string]bool)
			}
			cp.notNil[id] = true
		}
		cp.mu.Unlock()
	}
	return c.self
}

// refused reports whether asynctool refuses n, a node alone, for what
// its worker is.
func refused(n asynctool.Wrapper) bool {
	_, err := asynctool.Describe(n)
	return err != nil
}

// replay ends the node with id, suspended in run, with its stored
// result, if it has one: see await. It reports whether it did; the error
// says why a value Resume gave could not be used.
func (cp *Checkpoint) replay(run *asynctool.Run, id string) (bool, error) {
	cp.mu.Lock()
	fs := cp.nodes[id] // none: not checkpointed
	cp.mu.Unlock()
	// At most one is a node of run (ids are unique within one graph); the
	// others, a sub-run's or a Plan's, decline.
	for _, f := range fs {
		if ok, err := f(run); ok || err != nil {
			return ok, err
		}
	}
	return false, nil
}

type checkpointed[P, R any] struct {
	cp     *Checkpoint
	id     string
	worker asynctool.Worker[P, R]
	// self is the node Node made: replay tells by it whether the node is
	// one of the run's own, not one of a Plan's with the same id.
	self *asynctool.WorkerWrapper[P, R]
}

func (c *checkpointed[P, R]) Action(ctx context.Context, p P, all asynctool.Wrappers) (R, error) {
	var v R
	if c.id == "" {
		return v, errors.New("durable: a checkpointed node needs an id")
	}
	if c.cp == nil {
		return v, fmt.Errorf("durable: node %q was made with a nil *Checkpoint: make checkpointed nodes with the cp the BuildFunc is given", c.id)
	}
	// The ids of the graph were checked before the run, but not those of
	// the nodes a SubGraph's Build makes during it.
	if err := storableID(c.id); err != nil {
		return v, err
	}
	if err := c.cp.claim(c.id, all.Path()); err != nil {
		return v, err
	}
	// Produced earlier in this attempt: the node is being retried
	// (asynctool's Retry) because saving its result failed.
	c.cp.mu.Lock()
	raw, again := c.cp.done[c.id]
	c.cp.mu.Unlock()
	if again {
		if err := json.Unmarshal(raw, &v); err != nil {
			return v, fmt.Errorf("durable: node %q: %w", c.id, err)
		}
		return v, c.save()
	}
	if raw, ok := c.cp.saved[c.id]; ok {
		sv, err := c.decodeSaved(raw)
		if err == nil {
			c.cp.markReplayed(c.id)
			return sv, nil
		}
		if c.cp.decided[c.id] {
			// A person decided this result with Resume: running the
			// worker instead (charging a card again) is not theirs.
			return v, err
		}
		// A stale checkpoint: run the worker.
	}
	if c.worker == nil {
		return v, fmt.Errorf("durable: node %q has a nil worker", c.id)
	}
	v, err := c.worker.Action(ctx, p, all)
	if err != nil {
		return v, err
	}
	raw, err = checkpointJSON(v)
	if err == nil {
		err = decodesBack[R](raw)
	}
	if err != nil {
		return v, fmt.Errorf("durable: node %q: result cannot be checkpointed: %w", c.id, err)
	}
	c.cp.mu.Lock()
	if c.cp.done == nil { // a zero Checkpoint, made outside a Worker
		c.cp.done = make(map[string]json.RawMessage)
	}
	c.cp.done[c.id] = raw
	c.cp.mu.Unlock()
	return v, c.save()
}

// claim records that the checkpointed node with id runs at path in the
// run, and fails if another checkpointed node, elsewhere in the run, has
// the same id: ids are unique within one graph, but two sub-graphs may
// each have a node with it, and the two would share one stored result.
// The same node built again (its SubGraph retried) has the same path. A
// worker called outside a run (a test's) has no path, and is not checked.
func (cp *Checkpoint) claim(id string, path []string) error {
	if path == nil {
		return nil
	}
	cp.mu.Lock()
	defer cp.mu.Unlock()
	first, ok := cp.paths[id]
	if !ok {
		if cp.paths == nil {
			cp.paths = make(map[string][]string)
		}
		cp.paths[id] = path
		return nil
	}
	if slices.Equal(first, path) {
		return nil
	}
	return fmt.Errorf("durable: %w: the checkpointed nodes at %q and %q both have id %q, which keys one stored result per job: prefix the ids of a sub-graph's checkpointed nodes with the outer node's id", asynctool.ErrDuplicateID, first, path, id)
}

// ErrUnstorableJSON is the error, wrapped, of a checkpointed result or a
// Resume value whose JSON PostgreSQL's jsonb cannot store: it holds the
// escape \u0000 (a NUL character in a string) or a surrogate escape
// without its pair (such as \ud83d alone, from a json.RawMessage or a
// MarshalJSON that cut an emoji in two), or bytes that are not UTF-8
// (PostgreSQL refuses them in any text, as those of a json.RawMessage or
// a MarshalJSON are kept; encoding/json writes U+FFFD for them in a
// string, a struct's field, a map's key, an encoding.TextMarshaler's
// text or an asynctool.WorkResult's Value, which PostgreSQL stores, but
// a replay would give another string than the worker's, so such a value
// is refused too), or a number out of the range of PostgreSQL's numeric, in
// which jsonb stores numbers (such as 1e200000 from a json.Number; see
// numericOverflows). River keeps a job's checkpoint
// in its metadata, which PostgreSQL stores as jsonb: PostgreSQL would
// reject the update that ends the attempt, and the job would stay running
// until River's rescuer. The node fails (or Resume refuses the value) on
// SQLite too, so that a job behaves the same on both.
var ErrUnstorableJSON = errors.New(`the JSON holds \u0000 (a NUL character), an unpaired surrogate escape, bytes that are not UTF-8 or a number out of the range of PostgreSQL's numeric, which PostgreSQL's jsonb, where River stores the checkpoint, cannot store`)

// checkpointJSON encodes v, a result to store in a checkpoint. A value
// that is not a pointer is encoded through a pointer to a copy, as the
// replay decodes it: encoding/json calls a MarshalJSON (or MarshalText)
// with a pointer receiver only on an addressable value, and would
// otherwise encode the value's fields, which the UnmarshalJSON that
// decodes it does not expect.
func checkpointJSON(v any) ([]byte, error) {
	if rv := reflect.ValueOf(v); rv.IsValid() && rv.Kind() != reflect.Pointer {
		p := reflect.New(rv.Type())
		p.Elem().Set(rv)
		v = p.Interface()
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	if jsonbRejects(raw) {
		return nil, ErrUnstorableJSON
	}
	// encoding/json writes the escape \ufffd for each byte of a string
	// that is not UTF-8 (and U+FFFD itself as it is): the JSON is
	// storable, but it would replay another string than v's.
	if bytes.Contains(raw, []byte(`\ufffd`)) && textNotUTF8(reflect.ValueOf(v)) {
		return nil, fmt.Errorf("a string in it holds bytes that are not UTF-8, which encoding/json writes as U+FFFD, so that a replay would not give them back: %w", ErrUnstorableJSON)
	}
	return raw, nil
}

// asynctoolPkg is the import path of asynctool's WorkResult.
var asynctoolPkg = reflect.TypeFor[asynctool.WorkResult[int]]().PkgPath()

var (
	jsonMarshaler = reflect.TypeFor[json.Marshaler]()
	textMarshaler = reflect.TypeFor[encoding.TextMarshaler]()
)

// textNotUTF8 reports whether v, a value that encoding/json encodes, holds
// text that is not UTF-8 where encoding/json writes a string from a Go
// value: a string (a struct's field, a map's key, an item), or the text
// of an encoding.TextMarshaler. A json.Marshaler's JSON is its own, kept
// as it is: jsonbRejects finds bytes in it that are not UTF-8. It follows
// encoding/json's rules: only the fields it encodes, a []byte in base64,
// a method with a pointer receiver on an addressable value only.
func textNotUTF8(v reflect.Value) bool {
	if !v.IsValid() {
		return false
	}
	if k := v.Kind(); k == reflect.Pointer || k == reflect.Interface {
		// Through the pointer, its elem is addressable: a method on the
		// pointer is found below, as encoding/json calls it.
		return !v.IsNil() && textNotUTF8(v.Elem())
	}
	t := v.Type()
	has := func(iface reflect.Type) bool {
		return t.Implements(iface) || v.CanAddr() && reflect.PointerTo(t).Implements(iface)
	}
	if has(jsonMarshaler) {
		if t.PkgPath() == asynctoolPkg && strings.HasPrefix(t.Name(), "WorkResult[") {
			// Its MarshalJSON encodes its Value as encoding/json does (its
			// Err's text is a message, which may change: see
			// asynctool.WorkResult.MarshalJSON).
			return textNotUTF8(v.FieldByName("Value"))
		}
		return false
	}
	if has(textMarshaler) {
		if !v.CanInterface() {
			return false // out of reach
		}
		m, ok := v.Interface().(encoding.TextMarshaler)
		if !ok {
			m = v.Addr().Interface().(encoding.TextMarshaler)
		}
		text, err := m.MarshalText()
		return err == nil && !utf8.Valid(text)
	}
	switch v.Kind() {
	case reflect.String:
		return !utf8.ValidString(v.String())
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			if f.Tag.Get("json") == "-" {
				continue
			}
			if !f.IsExported() {
				ft := f.Type
				if ft.Kind() == reflect.Pointer {
					ft = ft.Elem()
				}
				if !f.Anonymous || ft.Kind() != reflect.Struct {
					continue // encoding/json leaves it out
				}
			}
			if textNotUTF8(v.Field(i)) {
				return true
			}
		}
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 && !reflect.PointerTo(t.Elem()).Implements(jsonMarshaler) && !reflect.PointerTo(t.Elem()).Implements(textMarshaler) {
			return false // base64
		}
		fallthrough
	case reflect.Array:
		for i := range v.Len() {
			if textNotUTF8(v.Index(i)) {
				return true
			}
		}
	case reflect.Map:
		for it := v.MapRange(); it.Next(); {
			if k := it.Key(); k.Kind() == reflect.String && !utf8.ValidString(k.String()) || k.Kind() != reflect.String && textNotUTF8(k) || textNotUTF8(it.Value()) {
				return true
			}
		}
	}
	return false
}

// jsonbRejects reports whether raw, valid JSON, holds what jsonb
// refuses: bytes that are not UTF-8; in a string, the escape \u0000, a
// low surrogate (\udc00-\udfff) not right after a high one, or a high
// surrogate (\ud800-\udbff) not followed by a low one; outside strings,
// a number out of the range of PostgreSQL's numeric (see
// numericOverflows). In JSON a backslash starts an escape, and an
// escaped backslash is skipped whole: `\\u0000`, a backslash and
// "u0000", holds none.
func jsonbRejects(raw []byte) bool {
	if !utf8.Valid(raw) {
		return true
	}
	inString := false
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; {
		case c == '"':
			inString = !inString
		case inString && c == '\\':
			i++ // the escaped character
			u, ok := hexEscape(raw, i)
			if !ok {
				continue
			}
			switch {
			case u == 0, u >= 0xdc00 && u <= 0xdfff:
				return true
			case u >= 0xd800 && u <= 0xdbff:
				if i+6 >= len(raw) || raw[i+5] != '\\' {
					return true
				}
				if lo, ok := hexEscape(raw, i+6); !ok || lo < 0xdc00 || lo > 0xdfff {
					return true
				}
				i += 6 // the pair's low half
			}
			i += 4
		case !inString && (c == '-' || '0' <= c && c <= '9'):
			j := i + 1
			for j < len(raw) && strings.IndexByte("0123456789.eE+-", raw[j]) >= 0 {
				j++
			}
			if numericOverflows(string(raw[i:j])) {
				return true
			}
			i = j - 1
		}
	}
	return false
}

// numericOverflows reports whether num, a valid JSON number, is out of
// the range of PostgreSQL's numeric, in which jsonb stores numbers: its
// first nonzero digit more than 131071 places before the decimal point,
// or more than 16383 digits after the point (an exponent shifts both),
// or an exponent PostgreSQL does not even read (from 2^30-1 up, in
// magnitude). encoding/json writes no such number for a float or an
// integer, but a json.Number, a json.RawMessage, a MarshalJSON or a
// *big.Int can.
func numericOverflows(num string) bool {
	const maxExp = math.MaxInt32 / 2 // PostgreSQL's own limit on the exponent
	mant, exp, _ := strings.Cut(strings.ToLower(strings.TrimPrefix(num, "-")), "e")
	e := 0
	if exp != "" {
		neg := exp[0] == '-'
		for _, d := range strings.TrimLeft(exp, "+-") {
			if e = e*10 + int(d-'0'); e >= maxExp {
				return true
			}
		}
		if neg {
			e = -e
		}
	}
	whole, frac, _ := strings.Cut(mant, ".")
	if len(frac)-e > 16383 { // the digits after the point
		return true
	}
	first := strings.IndexFunc(whole+frac, func(r rune) bool { return r != '0' })
	return first >= 0 && len(whole)-1-first+e > 131071 // the first nonzero digit's power of ten
}

// hexEscape returns the code unit of the escape uXXXX at raw[i:], if it
// is one.
func hexEscape(raw []byte, i int) (uint16, bool) {
	if i+5 > len(raw) || raw[i] != 'u' {
		return 0, false
	}
	v, err := strconv.ParseUint(string(raw[i+1:i+5]), 16, 16)
	return uint16(v), err == nil
}

// replay is Checkpoint.replay for this node: it does for a node that a
// custom join suspended what Action does for one that runs. A stored
// result that does not decode leaves the node suspended, for a person to
// decide; if Resume gave it, the error says so.
func (c *checkpointed[P, R]) replay(run *asynctool.Run) (bool, error) {
	// The node may be one of a sub-run (a SubGraph's Build made it) or of
	// a Plan the BuildFunc compiled, or out of the graph: the suspended
	// node with its id is then another one.
	if _, err := c.self.ValueIn(run); errors.Is(err, asynctool.ErrUnknownID) {
		return false, nil
	}
	// A node of the outer graph (see Checkpoint.replay): its path is its
	// id. Its Action, which claims it, does not run.
	if err := c.cp.claim(c.id, []string{c.id}); err != nil {
		return false, err
	}
	raw, ok := c.cp.saved[c.id]
	if !ok {
		return false, nil
	}
	v, err := c.decodeSaved(raw)
	if err != nil {
		if c.cp.decided[c.id] {
			return false, err
		}
		return false, nil // a stale result: running the worker is not the join's decision
	}
	if err := run.Resume(c.id, asynctool.SucceedWith(v)); err != nil {
		return false, fmt.Errorf("durable: node %q: replaying its stored result: %w", c.id, err)
	}
	c.cp.markReplayed(c.id)
	return true, nil
}

// decodeSaved decodes raw, the node's result stored by an earlier
// attempt or given by Resume. The error says why a value Resume gave
// cannot be used: it does not decode into R, or it is JSON null and R
// cannot be nil (ErrNilValue), which null would leave R's zero value.
func (c *checkpointed[P, R]) decodeSaved(raw json.RawMessage) (R, error) {
	var v R
	if c.cp.decided[c.id] && string(bytes.TrimSpace(raw)) == "null" && !nullable(reflect.TypeFor[R]()) {
		return v, fmt.Errorf("durable: node %q: the value Resume gave is null, and %v cannot be nil: %w", c.id, reflect.TypeFor[R](), ErrNilValue)
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		var zero R
		return zero, fmt.Errorf("durable: node %q: the value Resume gave does not decode into %v: %w", c.id, reflect.TypeFor[R](), err)
	}
	return v, nil
}

// save stores the checkpoint at once if the Worker saves each node.
func (c *checkpointed[P, R]) save() error {
	if err := c.cp.saveNow(); err != nil {
		return fmt.Errorf("durable: node %q: saving the checkpoint: %w", c.id, err)
	}
	return nil
}
