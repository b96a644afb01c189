package asynctool

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// Report explains a run: one entry per node, in the run's topological
// order. Times are recorded only when the run had hooks or its Async was
// created with [WithTimings]; otherwise they are zero.
//
// A nil *Report, such as the [NodeReport.Sub] of a node that started no
// sub-run, reads as an empty one: its String is empty, its Err and
// CriticalPath nil, DOT and Mermaid draw a graph without nodes, and
// WriteChromeTrace writes a trace without node events.
type Report struct {
	// Nodes has one entry per node.
	Nodes []NodeReport
	// Start and End bound the run (End is zero if it has not ended).
	Start, End time.Time
	// RunErr is what Wait returns (nil while the run is going on).
	RunErr error
	// Limit and Budget are those of the [ForEach] whose items' sub-run
	// (or static shape, see [NodeReport.Sub]) this is, zero if it had
	// none: they explain why items waited, or were stopped or never
	// started. [Report.String] shows them on the ForEach node's line
	// (limit=2 budget=150ms), the pictures under its box's title.
	Limit  int
	Budget time.Duration
}

// NodeReport is one node's line in a [Report].
type NodeReport struct {
	// ID is the node's id, empty for a node made without one (the
	// reports and [Run.Resume] name it "#" and its Index).
	ID string
	// Index is the node's position in its report's Nodes: the run's
	// topological order, which [NodeEvent.Index] and Deps use too.
	Index int
	// Deps are the indexes of the node's upstreams, Must says which of
	// them are must dependencies as the node's join treats them: one that
	// must succeed for the node to run, whose failure fails it. That is
	// Depend's flag under the default join only; the other joins ignore
	// the flag. Under [AllSucceeded] and [When] every upstream is a must
	// one, under [NamedSucceeded] the named ones, and under
	// [AnySucceeded], [AtLeast], [AllDone], [WhenResult] and a
	// [CustomJoin], which count successes or decide for themselves, none.
	// [Report.DOT] and [Report.Mermaid] draw edges as Must says (an
	// edge past the end of a short Must, in a report built by hand, as
	// optional).
	Deps []int
	Must []bool
	// Status is the node's state in finer terms than State: it tells
	// pending and skipped nodes apart.
	Status Status
	// State, Result, Err and Value are as the node's WorkResult and State
	// say; Value is boxed. For a pending node, Err is the failure that
	// suspended it.
	State  State
	Result ResultState
	Err    error
	Value  any
	// Ran reports whether the node started: a goroutine began an attempt
	// of it, which calls its OnNodeStart hooks, its Callback.Begin, then
	// its worker's Action; Attempts counts the attempts (a retry's and a
	// Rerun's included). Ran, Attempts above zero, a Started time (with
	// timings) and [NodeEvent.Attempt] above zero go together. A node
	// whose Begin panicked ran in this sense, though its Action was not
	// called: its Reason, "callback Begin panicked", tells it apart from
	// one whose worker failed. Without timings ([WithTimings], or hooks),
	// a node that the deadline stopped in the instant a goroutine took
	// it, before its attempt began, counts as run once, with a Reason of
	// "stopped while running": telling the two apart costs each node's
	// start a write, which the start time is.
	Ran      bool
	Attempts int
	// DecidedBy is the id of the upstream whose end decided this node's
	// join (triggered or failed it), empty for start nodes and for nodes
	// ended by the deadline or skipped before their join decided (a node
	// triggered, then skipped or stopped before it started, keeps it).
	// It is empty too when that upstream has no id; [Report.String] and
	// the Chrome trace then name it "#" and its index. In a snapshot of
	// a run going on, it is set once the node has ended: a node ready,
	// running or pending has none yet.
	DecidedBy string
	// decidedAt is 1 + the index of the upstream that decided the join
	// when it has no id (see nameAt), 0 otherwise.
	decidedAt int
	// Reason explains, in words, why a node did not succeed.
	Reason string
	// Join is the node's join strategy in words, as [Join.String] gives
	// it (`when "route"`, `at least 2 succeeded`), empty for the default
	// join of [WorkerWrapper.Depend].
	Join string
	// Ready, Started and Ended are when the node's join was satisfied,
	// when its worker started, and when its result became final. Wait is
	// Started-Ready, the time it waited for a goroutine (or, for an item
	// of a ForEach with a Limit, for its turn). With timings, Started is
	// set exactly when Attempts is above zero. Lane numbers the
	// chain of nodes run one after another by one goroutine.
	Ready, Started, Ended time.Time
	Wait                  time.Duration
	Lane                  int
	// Pending is how long the node was pending, waiting for
	// [Run.Resume], after its worker failed under [PolicySuspend]: in all,
	// over every time it was suspended, and up to now for a node still
	// pending. That time lies between Started and Ended, so Duration
	// includes it, and Duration-Pending is what its attempts took, with
	// their backoffs; [Report.String] shows it. A node that its
	// [CustomJoin] suspended was pending before it started, if it ever
	// does (Ready is when Resume reran it): that time is in no field.
	// Zero without timings.
	Pending time.Duration
	// Sub is the report of the plan a [SubPlan] node runs, or of the
	// graph a [SubGraph] or [ForEach] node built: of the last run of it
	// that the node started (for a [Hedged] worker, the winning call's),
	// ended in the report of a run that has ended or of a node that has.
	// While the node has not ended and started none (in [Describe]'s
	// report, for one), it is the static shape: a SubPlan's plan, as
	// [Plan.Describe] gives it; a ForEach's one node "each item", which
	// stands for the items not yet known, then its "join" node if it has
	// a Join, with its Limit and Budget. It is nil for a node that ended
	// without starting a sub-run, for a SubGraph not yet built, and for
	// other nodes. [Report.String], [Report.DOT], [Report.Mermaid]
	// and [Report.WriteChromeTrace] show it with the node;
	// [Report.CriticalPath] and [Report.Err] stay with the report's own
	// nodes.
	Sub *Report
}

// Duration is how long the node ran, from its first attempt's start to
// its end (zero if it never started, has not ended, or times were not
// recorded): its attempts, the backoffs between them and, for a node
// that was pending, the time it waited for a Resume, which Pending
// gives on its own.
func (n NodeReport) Duration() time.Duration {
	if n.Started.IsZero() || n.Ended.IsZero() {
		return 0
	}
	return n.Ended.Sub(n.Started)
}

// Report is Run.Report's, without the handle's check.
func (r *runState) Report() *Report {
	rep := &Report{Nodes: make([]NodeReport, len(r.nodes)), Start: r.began, Limit: r.limit}
	if r.budget != nil {
		rep.Budget = r.budget.Budget
	}
	select {
	case <-r.done: // nil, never ready, for a run that never started
		rep.RunErr = r.err()
		if r.times != nil {
			rep.End = r.wall(r.ended.Load())
		}
	default:
	}
	// The nodes' state words are read first, last node first: a node
	// moves out of sInit only after the upstreams its join counts, which
	// come before it in the order, have reached their final state, so a
	// node read as ready, started or ended by its join shows them ended.
	// Read first node first, an upstream could show running and a node
	// after it, which it ended meanwhile, succeeded.
	words := make([]int64, len(r.nodes))
	for i := len(r.nodes) - 1; i >= 0; i-- {
		words[i] = r.nodes[i].state.Load()
	}
	for i := range r.nodes {
		pn, n := &r.p.nodes[i], &r.nodes[i]
		nr := &rep.Nodes[i]
		nr.ID, nr.Index = pn.core.id, i
		in := r.p.in(int32(i))
		nr.Deps = make([]int, len(in))
		nr.Must = make([]bool, len(in))
		for k, v := range in {
			j, must := upstream(v)
			nr.Deps[k], nr.Must[k] = int(j), must
		}
		// One read of the node's state word classifies it, and what is
		// read after it (its attempts, its times) is made to agree with
		// it: the node moves on meanwhile, and a snapshot would otherwise
		// show a node waiting that ran, or ended without an end time.
		w := words[i]
		st := int32(w & stateMask)
		nr.State = publicState(st)
		nr.Status = r.status(int32(i), st, rep, words)
		if w&startedBit != 0 || st != sInit && st != sReady {
			nr.Attempts = int(r.attemptsOf(int32(i)))
		}
		nr.Ran = nr.Attempts > 0
		if pn.flow != nil && pn.joinKind != joinDefault {
			nr.Join = pn.flow.join.String()
		}
		if st == sPending && r.exts != nil && r.exts[i] != nil {
			ext := r.exts[i]
			ext.mu.Lock()
			nr.Err = ext.lastErr
			ext.mu.Unlock()
			nr.Reason = pendingReason(nr.Err)
		}
		if terminal(st) {
			nr.Value, nr.Result, nr.Err = pn.core.impl.resultAny(r.slot(int32(i)), st)
			nr.Reason = r.reason(int32(i))
			if by := n.decidedBy(); by >= 0 {
				nr.DecidedBy = r.p.nodes[by].core.id
				nr.decidedAt = anonymousAt(nr.DecidedBy, by)
			}
		}
		if r.times != nil {
			t := &r.times[i]
			end := int64(0) // a node not ended, as st says, has no end yet
			if terminal(st) {
				// The node's end time is written just after its final
				// state: one not written yet is now, as good a time
				// and kept for the node's end.
				if end = t.end.Load(); end == 0 {
					t.end.CompareAndSwap(0, r.clock())
					end = t.end.Load()
				}
			}
			ready := t.ready.Load()
			if ready == 0 && (st == sReady || st == sWorking) {
				// The goroutine that readied the node writes its ready
				// time just after its state: not written yet, it is now,
				// as for the end time (only shown: that goroutine's time
				// is kept).
				ready = r.clock()
			}
			nr.Ready, nr.Ended = r.wall(ready), r.wall(end)
			nr.Lane = int(t.lane.Load()) // written just after the start time
			if nr.Attempts > 0 && nr.Lane == 0 && !terminal(st) {
				// Its goroutine wrote the start time, not yet the lane,
				// and has not called the worker: not started yet, as a
				// node whose start time is not written (see attemptsOf),
				// rather than a node run on no lane.
				nr.Attempts, nr.Ran = 0, false
			}
			if nr.Attempts > 0 {
				// attemptsOf read the start time: a goroutine that
				// writes it after that look shows in the next report.
				nr.Started = r.wall(t.start.Load())
			}
			if !nr.Started.IsZero() && !nr.Ready.IsZero() {
				nr.Wait = nr.Started.Sub(nr.Ready)
			}
			nr.Pending = r.pendingTime(int32(i))
		}
	}
	r.reportSubs(rep)
	return rep
}

// Err joins the errors of every node that did not succeed, each wrapped
// with its id (an anonymous node's "#" and index, as in String), so
// errors.Is and errors.As see every cause. It is nil when every node
// succeeded. In a snapshot of a run going on, it joins the errors of the
// nodes that have failed so far and of those pending after a failure
// (the failure that suspended each), and is nil while there are none.
//
// It does not look into sub-reports. A [SubPlan] or [SubGraph] node's
// Err is what its Output decided from the sub-run, a [ForEach] node's
// what its Join decided (or, for each, why the sub-run stopped, which it
// wraps), so a sub-run's failure that Output or the Join tolerated does
// not make the run's Err non-nil, and one that it passed on is not
// counted twice; the errors of the sub-run's own nodes are its
// [NodeReport.Sub]'s Err.
func (rep *Report) Err() error {
	if rep == nil {
		return nil
	}
	var errs []error
	for i := range rep.Nodes {
		if n := &rep.Nodes[i]; n.Err != nil {
			errs = append(errs, fmt.Errorf("node %s: %w", errName(n.ID, n.Index), n.Err))
		}
	}
	return errors.Join(errs...)
}

// MarshalJSON encodes the report as encoding/json would encode its
// fields, except its RunErr, which it encodes as a [StoredError] (null if
// nil), as [WorkResult.MarshalJSON] encodes an error: its message and the
// sentinel errors it matched. encoding/json alone writes an error's
// exported fields, {} for most errors, so a report logged as JSON would
// lose every error. Each node is encoded by [NodeReport.MarshalJSON], a
// Sub by this method. A Value that encoding/json cannot encode (a func,
// a channel) makes it fail as json.Marshal does. It is meant for logs:
// nothing decodes a report back (the errors would come back as
// StoredErrors, and the values as JSON has them).
func (rep Report) MarshalJSON() ([]byte, error) {
	type fields Report // the same fields, without this method
	return json.Marshal(struct {
		fields
		RunErr *StoredError
	}{fields(rep), storedOrNil(rep.RunErr)})
}

// MarshalJSON encodes the node's report as encoding/json would encode its
// fields, except its Err, which it encodes as a [StoredError] (null if
// nil), as [Report.MarshalJSON] says.
func (n NodeReport) MarshalJSON() ([]byte, error) {
	type fields NodeReport // the same fields, without this method
	return json.Marshal(struct {
		fields
		Err *StoredError
	}{fields(n), storedOrNil(n.Err)})
}

// storedOrNil is err as a StoredError, nil for nil.
func storedOrNil(err error) *StoredError {
	if err == nil {
		return nil
	}
	return storeError(err)
}

// String renders the report compactly, one node per line, for logs. The
// nodes of a node's Sub (a [SubPlan], [SubGraph] or [ForEach] node's)
// follow it, indented. An id is shown as it is, unless it could be read
// as something else: one that holds a newline or another character that
// is not printable, or bytes that are not UTF-8, or ": ", or starts with
// '#', '"' or a space, is quoted, and so is a node's reason, or the run's
// error on the last line, that holds a newline or another character that
// is not printable (errors.Join's error, say), so that each keeps to its
// line; the empty id is "#" and the node's index, as in [Report.DOT]. A
// node's line has its Duration ("ran 3h0m1.2s") and, if it was pending,
// its Pending, which that includes ("pending 3h0m0s"): a worker that
// failed, then succeeded once a person had it rerun, ran for 1.2s. It
// names the upstream that decided the node's join after "by=" (its
// [NodeReport.DecidedBy], or "#" and the index of one without an id).
func (rep *Report) String() string {
	if rep == nil {
		return ""
	}
	var b strings.Builder
	rep.write(&b, "")
	return b.String()
}

// write writes String's lines, each after indent.
func (rep *Report) write(b *strings.Builder, indent string) {
	for i := range rep.Nodes {
		n := &rep.Nodes[i]
		b.WriteString(indent)
		name := displayID(n) // "#" and the index, for the empty id
		if n.ID != "" {
			name = lineID(n.ID)
		}
		fmt.Fprintf(b, "%s: %v", name, n.Status)
		if d := n.Duration(); d > 0 {
			fmt.Fprintf(b, " ran %v", d)
		}
		if n.Pending > 0 {
			fmt.Fprintf(b, " pending %v", n.Pending)
		}
		if n.Wait > 0 {
			fmt.Fprintf(b, " waited %v", n.Wait)
		}
		if n.Attempts > 1 {
			fmt.Fprintf(b, " attempts=%d", n.Attempts)
		}
		if by := n.decidedByName(); by != "" {
			fmt.Fprintf(b, " by=%s", by)
		}
		if n.Sub != nil && n.Sub.Limit > 0 {
			fmt.Fprintf(b, " limit=%d", n.Sub.Limit)
		}
		if n.Sub != nil && n.Sub.Budget > 0 {
			fmt.Fprintf(b, " budget=%v", n.Sub.Budget)
		}
		if n.Reason != "" {
			fmt.Fprintf(b, " (%s)", lineText(n.Reason))
		}
		b.WriteByte('\n')
		if n.Sub != nil {
			n.Sub.write(b, indent+"  ")
		}
	}
	if rep.RunErr != nil {
		// As fmt prints it: it recovers an Error method that panics.
		fmt.Fprintf(b, "%srun: %s\n", indent, lineText(fmt.Sprint(rep.RunErr)))
	}
}

// lineText is s, a node's reason or the run's error, as String writes it
// on a line: quoted if it holds a character that is not printable, such
// as the newline that errors.Join puts between two errors, which would
// break the line in two, the second one read as a line of its own.
func lineText(s string) string {
	if strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) {
		return strconv.Quote(s)
	}
	return s
}

// decidedByName is the upstream that decided n's join as String names
// it: its id (see lineID), or "#" and its index when it has none; ""
// when no upstream did.
func (n *NodeReport) decidedByName() string {
	switch {
	case n.DecidedBy != "":
		return lineID(n.DecidedBy)
	case n.decidedAt > 0:
		return errName("", n.decidedAt-1)
	}
	return ""
}

// lineID is id, not empty, as String shows it: quoted if it holds a
// character that is not printable (a newline, which would break the
// node's line in two) or bytes that are not UTF-8 (which a reader shows
// as U+FFFD, whatever they are), or ": " (which ends the id on its line),
// or if it starts with '#' (an anonymous node's name), '"' (a quoted id)
// or a space (the indentation of a sub-run's node).
func lineID(id string) string {
	if readsAsAnother(id) || strings.ContainsFunc(id, func(r rune) bool { return !unicode.IsPrint(r) }) ||
		strings.Contains(id, ": ") || strings.HasPrefix(id, " ") {
		return strconv.Quote(id)
	}
	return id
}

// bounds describes what a ForEach's items ran under (its Limit and
// Budget), for the pictures: "" if nothing.
func (rep *Report) bounds() string {
	var parts []string
	if rep.Limit > 0 {
		parts = append(parts, fmt.Sprintf("at most %d at once", rep.Limit))
	}
	if rep.Budget > 0 {
		parts = append(parts, fmt.Sprintf("within %v", rep.Budget))
	}
	return strings.Join(parts, ", ")
}

// isSkip reports whether err is a short-circuited node's: the engine
// stores ErrSkipped itself, and wraps it when a worker returns it (see
// asFailure).
func isSkip(err error) bool { return err == ErrSkipped }

// didNotRun reports whether a node's result is one the engine stores for
// a node that ended without running: short-circuited or not taken.
func didNotRun(rs ResultState, err error) bool {
	return rs == ResultException && (isSkip(err) || err == ErrNotTaken)
}

// Status is a node's state as a [Report] shows it. The zero value means
// unknown.
type Status int

const (
	// StatusWaiting: its join is not decided yet.
	StatusWaiting Status = iota + 1
	// StatusReady: its join is satisfied; it waits for a goroutine (or,
	// for an item of a ForEach with a Limit, for its turn).
	StatusReady
	// StatusRunning: its worker is running, or a retry is scheduled. In
	// a snapshot of a run with timings ([WithTimings], or hooks), it is
	// also a node that a goroutine has taken but whose first attempt has
	// not begun: one that has not run yet (Ran false, Attempts 0).
	StatusRunning
	// StatusPending: suspended, or waiting on a pending upstream it
	// cannot run without, so that it runs only after a Resume (it may
	// still fail without one). Which pending upstreams count depends on
	// the join: for the default join with must dependencies,
	// AllSucceeded and NamedSucceeded, a pending must (or named)
	// upstream; for AllDone, any pending upstream; for an any-of join
	// (the default with optional dependencies only, AnySucceeded) and
	// AtLeast, pending upstreams once those that succeeded or have not
	// ended are too few to meet the join; for a custom join, pending
	// upstreams once every other one has ended. A node that some other
	// upstream can still decide is StatusWaiting.
	StatusPending
	// StatusSucceeded: ended with ResultSuccess.
	StatusSucceeded
	// StatusFailed: ended with ResultException, other than skipped.
	StatusFailed
	// StatusSkipped: did not run because it was short-circuited (Err
	// [ErrSkipped]) or not taken ([ErrNotTaken]).
	StatusSkipped
	// StatusTimedOut: ended with ResultTimeout.
	StatusTimedOut
)

// String returns the status in words: "waiting", "ready", "running",
// "pending", "succeeded", "failed", "skipped" or "timed out" ("unknown"
// for the zero Status, and "Status(9)" for a value out of range), as
// [Report.String] shows it.
func (s Status) String() string {
	names := [...]string{"unknown", "waiting", "ready", "running", "pending", "succeeded", "failed", "skipped", "timed out"}
	if s >= 0 && int(s) < len(names) {
		return names[s]
	}
	return fmt.Sprintf("Status(%d)", int(s))
}

// status classifies node i, in state st, whose upstreams (earlier in
// topological order) rep already classified; words are the nodes' state
// words as Report read them.
func (r *runState) status(i int32, st int32, rep *Report, words []int64) Status {
	switch st {
	case sReady:
		return StatusReady
	case sWorking, sEnding:
		return StatusRunning
	case sPending:
		return StatusPending
	case sFinish:
		return StatusSucceeded
	case sError:
		rs, err := r.p.nodes[i].core.impl.resultMeta(r.slot(i), st)
		switch {
		case rs == ResultTimeout:
			return StatusTimedOut
		case didNotRun(rs, err):
			return StatusSkipped
		}
		return StatusFailed
	}
	if r.waitsOnPending(i, rep, words) {
		return StatusPending
	}
	return StatusWaiting
}

// waitsOnPending reports whether node i, whose join has not decided,
// cannot run until a pending upstream is resumed (see StatusPending), as
// rep and the state words that Report read (words) show its upstreams.
func (r *runState) waitsOnPending(i int32, rep *Report, words []int64) bool {
	pn := &r.p.nodes[i]
	var pending, ok, live int32
	mustPending := false
	for _, v := range r.p.in(i) {
		j, must := upstream(v) // must as the join sees it (see effectiveMust)
		switch st := int32(words[j] & stateMask); {
		case rep.Nodes[j].Status == StatusPending:
			pending++
			mustPending = mustPending || must
		case !terminal(st):
			live++
		case r.counts(j):
			ok++
		}
	}
	switch {
	case pending == 0:
		return false
	case pn.joinKind == joinAllDone:
		return true
	case pn.joinKind == joinCustom:
		return live == 0
	case pn.nMust > 0 && pn.joinKind != joinAny && pn.joinKind != joinAtLeast:
		return mustPending // the default join with must edges, AllSucceeded, NamedSucceeded
	}
	return ok+live < pn.needOK // any-of joins and AtLeast
}

// reason explains why node i, which has ended, did not succeed.
func (r *runState) reason(i int32) string {
	pn := &r.p.nodes[i]
	st, err := pn.core.impl.resultMeta(r.slot(i), r.nodes[i].st())
	switch st {
	case ResultSuccess:
		return ""
	case ResultTimeout:
		if why := r.pendingWhy(i); why != "" {
			return fmt.Sprintf("stopped while pending %s: %v", why, err)
		}
		if r.attemptsOf(i) > 0 {
			if r.backedOff(i) {
				return fmt.Sprintf("stopped while waiting to retry: %v", err)
			}
			return fmt.Sprintf("stopped while running: %v", err)
		}
		return fmt.Sprintf("stopped before it started: %v", err)
	}
	if r.exts != nil && r.exts[i] != nil {
		ext := r.exts[i]
		ext.mu.Lock()
		failed := ext.resumedFail
		ext.mu.Unlock()
		if failed {
			return "failed by Resume"
		}
	}
	var ee *EndError
	switch {
	case errors.As(err, &ee) && err == error(ee):
		return fmt.Sprintf("stopped: node %s ended the run", ee.name())
	case isSkip(err):
		return "no successor needed it any more"
	case err == ErrNotTaken:
		// A WhenResult join does not pass an upstream's not being taken
		// on: its condition decided, whichever upstream ended last.
		propagated := pn.flow == nil || !pn.flow.join.whenResult
		if by := r.nodes[i].decidedBy(); by >= 0 && propagated && r.isNotTaken(by) {
			return fmt.Sprintf("upstream %s was not taken", errName(r.p.nodes[by].core.id, int(by)))
		}
		if pn.flow != nil {
			return fmt.Sprintf("not taken: join %v decided so", pn.flow.join)
		}
		return "not taken"
	}
	if r.attemptsOf(i) == 0 {
		if why := joinReason(pn, err); why != "" {
			return why
		}
	}
	if ate, ok := err.(*AttemptTimeoutError); ok && ate.ID == pn.core.id && int32(ate.Attempt) == r.attemptsOf(i) {
		// Its own last attempt's bound (see WorkerWrapper.call), not an
		// error of another run's node that the worker returned.
		return fmt.Sprintf("attempt %d passed its attempt timeout of %v", ate.Attempt, ate.Timeout)
	}
	if pp, ok := err.(*policyPanic); ok {
		if pp.panic == nil {
			return "retry policy called runtime.Goexit"
		}
		return "retry policy panicked"
	}
	if err == errHookCtx {
		return "hook OnNodeStart returned a context that does not derive from the node's; the worker was not called"
	}
	if errors.Is(err, ErrGoexit) {
		if by := r.beforeWorker(i, nil); by != "" {
			return by + " called runtime.Goexit"
		}
		return "worker called runtime.Goexit"
	}
	var pe *PanicError
	if errors.As(err, &pe) {
		if by := r.beforeWorker(i, pe); by != "" {
			return by + " panicked"
		}
		return "worker panicked"
	}
	return "worker failed"
}

// beforeWorker names the call before node i's worker, or after it and
// before its next attempt, that ended its attempt ("callback Begin",
// "hook OnNodeStart", "hook OnNodeRetry"), or returns "": with pe,
// the panic the node failed with; without, a runtime.Goexit. Each is
// recorded as a CallbackPanicError too (see WorkerWrapper.call and
// nodeStarted), the panic by the same pointer.
func (r *runState) beforeWorker(i int32, pe *PanicError) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.callbacks {
		c, ok := e.(*CallbackPanicError)
		if !ok || c.Index != int(i) || c.Panic == nil {
			continue
		}
		if pe != nil && c.Panic != pe || pe == nil && c.Panic.Value != ErrGoexit {
			continue
		}
		switch c.Method {
		case "Begin":
			return "callback Begin"
		case "OnNodeStart":
			return "hook OnNodeStart"
		case "OnNodeRetry":
			return "hook OnNodeRetry"
		}
	}
	return ""
}

// pendingWhy says why node i, which ended as a timeout, was pending when
// it ended ("after" its worker's failure, or "(its join suspended it)"),
// or returns "" if it was not: the sweep ends a pending node as it ends
// one that is running, and its worker's failure, which its report showed
// while it was pending, would otherwise be lost.
func (r *runState) pendingWhy(i int32) string {
	if r.exts == nil || r.exts[i] == nil {
		return ""
	}
	ext := r.exts[i]
	ext.mu.Lock() // under which a Rerun clears both as it readies the node
	joinSuspended := ext.joinSuspended.Load()
	why := ext.lastErr // set as it suspends, cleared by a Rerun
	ext.mu.Unlock()
	if joinSuspended {
		return "(its join suspended it)" // Resume clears it, so the sweep ended it pending
	}
	if why == nil {
		return ""
	}
	return fmt.Sprintf("after %v", why)
}

// backedOff reports whether node i ended while it waited for its next
// attempt.
func (r *runState) backedOff(i int32) bool {
	if r.exts == nil || r.exts[i] == nil {
		return false
	}
	ext := r.exts[i]
	ext.mu.Lock()
	defer ext.mu.Unlock()
	return ext.backedOff
}

// joinReason explains how the join of node pn, which never ran, failed
// it with err, in the words of the engine's errors (see
// upstreamEndedFrom and customJoin); "" if its join did not.
func joinReason(pn *pnode, err error) string {
	var up *UpstreamError
	switch pn.joinKind {
	case joinAtLeast:
		if errors.As(err, &up) {
			return fmt.Sprintf("join %v cannot be met", pn.flow.join)
		}
	case joinCustom:
		var pe *PanicError
		if pn.flow.join.when != nil {
			switch {
			case errors.As(err, &up) && err == error(up):
				return fmt.Sprintf("must upstream %s failed", nameAt(up.ID, up.at))
			case errors.As(err, &pe) && err == error(pe):
				return fmt.Sprintf("join %v: its condition panicked", pn.flow.join)
			case errors.Is(err, ErrResultType):
				return fmt.Sprintf("join %v: upstream's value has another type", pn.flow.join)
			case errors.Is(err, ErrGoexit): // see salvage
				return fmt.Sprintf("join %v: its condition called runtime.Goexit", pn.flow.join)
			}
			return ""
		}
		switch {
		case errors.Is(err, ErrJoinFailed):
			return "custom join decided to fail"
		case errors.Is(err, ErrJoinUndecided):
			return "custom join undecided after every upstream ended"
		case errors.As(err, &pe) && err == error(pe):
			return "custom join panicked"
		default: // a Decision that is none of the five (see askJoin)
			return fmt.Sprintf("custom join failed: %v", err)
		}
	default: // the default join, AllSucceeded, NamedSucceeded, AnySucceeded
		switch {
		case !errors.As(err, &up):
		case pn.joinKind == joinAny:
			return "every upstream failed" // AnySucceeded ignores the must flags
		case pn.nMust == 0:
			return "every optional upstream failed"
		default:
			return fmt.Sprintf("must upstream %s failed", nameAt(up.ID, up.at))
		}
	}
	return ""
}

// Describe validates the graph reachable from starts, as BeginWork would,
// and returns a report of its static shape: every node in topological
// order with its dependencies, all in StateInit, and the static shape of
// the sub-runs that [SubPlan] and [ForEach] nodes start (see
// [NodeReport.Sub]). It does not consume the wrappers. Use it to export
// or inspect a graph before running it: a graph with a node compiled into
// a Plan, or part of a run, is refused ([ErrReused]); [Plan.Describe] and
// [Run.Report] describe those.
func Describe(starts ...Wrapper) (*Report, error) {
	p, err := compileGraph(starts, false, nil) // reads the wrappers, claims nothing
	if err != nil {
		return nil, err
	}
	return newRun(p, false).Report(), nil
}

// Describe returns a report of the plan's static shape, as [Describe]:
// a report without nodes for a nil or zero Plan.
func (pl *Plan) Describe() *Report {
	if pl == nil || pl.p == nil {
		return &Report{Nodes: []NodeReport{}}
	}
	return newRun(pl.p, false).Report()
}
