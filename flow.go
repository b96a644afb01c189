package asynctool

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// FailurePolicy says what a node's failure does to the run, once its
// retries (if any) are exhausted. The zero value means PolicyFail.
//
// A policy applies to the node's own failure only: its worker's error or
// panic (an attempt's AttemptTimeout included) and, for PolicyContinue
// and PolicyEnd, its own Timeout (for a ForEach item under
// PolicyContinue, its Budget too: see [ForEach]). A node that does not
// run because an upstream it needed failed (an [*UpstreamError])
// applies none: its dependants see it failed, as under PolicyFail, and
// under PolicyEnd it does not end the run. Nor does a node that the
// group deadline, a Cancel or the run's end stops, a node that its own
// join fails ([DecideFail], [ErrJoinUndecided], a panic in a
// [CustomJoin] or a [When] condition) or does not take ([ErrNotTaken]),
// nor a pending node that [Run.Resume] ends with [FailWith]. So a
// fallback under PolicyContinue does not keep its dependants going when
// its own must upstream fails: make that edge optional, or give the
// upstream PolicyContinue too.
type FailurePolicy int

const (
	// PolicyFail: the node fails and its dependants apply their join rules
	// (the default).
	PolicyFail FailurePolicy = iota + 1
	// PolicyContinue: the node's result records the failure (exception,
	// default value, its error), but for its dependants' joins it counts
	// as done: they go on as if it had succeeded, and can read its result.
	PolicyContinue
	// PolicyEnd: the whole run stops now. Running workers' contexts are
	// cancelled, every node not yet ended (pending nodes included) fails
	// with an [*EndError], and BeginWork returns that error, naming the
	// node. For a node of a sub-run (a [SubPlan]'s or [SubGraph]'s graph,
	// a [ForEach] item) the run is that sub-run: it stops, its SubPlan,
	// SubGraph or ForEach node fails with an error wrapping the
	// EndError (unless a ForEach's Join has decided first), and the
	// outer run goes on under that node's own policy. A failure settled
	// once the run has stopped (its deadline or a Cancel, as its context
	// says, its end with its EndsRun nodes, or another PolicyEnd node)
	// stops nothing: the node keeps its own failure, or ends as that
	// stop says if the run's sweep reaches it first, and the run ends as
	// it was stopped. If that stop ended no node, this one being the
	// last, the run's error is nil, as for a run whose nodes all ended
	// on their own: the failure is in the node's result.
	PolicyEnd
	// PolicySuspend: the node becomes pending instead of failing; the
	// nodes that need it wait (pending too) while other branches go on. The
	// run stays open until the node is resumed with [Run.Resume] or the
	// deadline ends it. Resume needs the *Run: run such graphs with
	// [Async.Start] or [Async.StartPlan]. BeginWork and RunPlan give no
	// Run to resume with: once their run waits only on pending nodes,
	// they cancel it and return an error naming the pending node and
	// wrapping its failure (the nodes not ended end as timeouts).
	PolicySuspend
)

// String returns the policy's name: "fail" (for the zero value too, which
// means PolicyFail), "continue", "end" or "suspend" (FailurePolicy(n) for
// any other value).
func (p FailurePolicy) String() string {
	switch p {
	case 0, PolicyFail:
		return "fail"
	case PolicyContinue:
		return "continue"
	case PolicyEnd:
		return "end"
	case PolicySuspend:
		return "suspend"
	}
	return fmt.Sprintf("FailurePolicy(%d)", int(p))
}

// RetryPolicy makes a node try its work again when it fails: a graph
// node's worker ([WorkerWrapper.Retry]) or a stream node's function
// ([StreamRetry]), under the same rules.
type RetryPolicy struct {
	// Attempts is the total number of attempts, at least 1.
	Attempts int
	// Backoff gives the delay before attempt n+1 after attempt n failed
	// (n counts from 1). Nil means no delay, and so does a negative
	// delay. A retry whose delay would end after the node's Timeout or
	// the group deadline is not scheduled: the node fails at once with
	// its last attempt's error, under its FailurePolicy, after fewer than
	// Attempts attempts.
	Backoff Backoff
	// Retryable reports whether an error is worth another attempt. Nil
	// means every error except a panic or a runtime.Goexit: one that is or
	// wraps a [*PanicError] (errors.As) or [ErrGoexit] (errors.Is), so
	// also a failure that carries one from further in, such as a [Hedged]
	// worker's whose calls all failed and one of them panicked or called
	// Goexit.
	Retryable func(error) bool
	// AttemptTimeout bounds each attempt on its own; 0 means no bound
	// (an attempt then lasts as long as the node's [WorkerWrapper.Timeout]
	// and the group deadline allow), and it must not be negative (a
	// graph is then rejected with [ErrBadRetry] before anything runs; a
	// stream node ends at once with it).
	//
	// Each attempt's context ends at the earliest of the moment the
	// worker's Action (or the stream node's function) is called plus
	// AttemptTimeout, the node's own Timeout and the group deadline (for
	// a stream node, the end of Run's context). Callback.Begin and
	// OnNodeStart hooks run before the bound starts, and backoffs are
	// outside it. An attempt that has not returned when its own bound
	// passes fails with an [*AttemptTimeoutError], whatever the worker
	// returns then (a value or an error), unless it panicked: the panic
	// stays its error. This is an ordinary failure: Retryable sees it
	// (the default retries it), Backoff applies, and after the last
	// attempt the node's [FailurePolicy] does, with the
	// *AttemptTimeoutError as the node's Err. When the node's Timeout or
	// the group deadline passes first, the node ends as it does without
	// AttemptTimeout.
	//
	// The library cannot stop a worker that ignores its context: an
	// attempt ends when its worker returns, so the next attempt (and its
	// backoff) starts only then, and a node never runs two attempts at
	// once. Meanwhile the node's Timeout and the group deadline still end
	// the node at once, as they would without retries, and what the
	// worker returns later is dropped; [Async.Close] waits for it.
	//
	// A node with AttemptTimeout pays one context.WithTimeoutCause and
	// one *AttemptTimeoutError per attempt; nodes without it pay nothing.
	AttemptTimeout time.Duration
}

// problem says what is wrong with p, or "" if nothing is: the one check
// of a retry policy, for graph nodes (Compile) and stream nodes alike.
func (p *RetryPolicy) problem() string {
	switch {
	case p.Attempts < 1:
		return fmt.Sprintf("RetryPolicy.Attempts is %d; it counts every attempt, the first included, so it must be at least 1", p.Attempts)
	case p.AttemptTimeout < 0:
		return fmt.Sprintf("AttemptTimeout(%v)", p.AttemptTimeout)
	}
	return ""
}

// Backoff returns the delay before the attempt after attempt n (n >= 1).
type Backoff func(n int) time.Duration

// ConstantBackoff waits d before every retry.
func ConstantBackoff(d time.Duration) Backoff {
	return func(int) time.Duration { return d }
}

// ExponentialBackoff waits base, 2×base, 4×base, ... capped at max, each
// delay then multiplied by a random factor in [1-jitter, 1+jitter] (jitter
// in [0, 1]; 0 for none: a jitter above 1 counts as 1, one below 0 or NaN
// as none). The cap comes before the jitter, so that capped delays still
// spread: a delay may reach max×(1+jitter). A max near the largest
// Duration, in effect no cap, is reached rather than overflowed; a max
// below base caps every delay at max; a base of 0 or less means no delay;
// an n below 1 counts as 1. Each call costs at most one step per doubling,
// whatever n.
func ExponentialBackoff(base, max time.Duration, jitter float64) Backoff {
	jitter = min(1, jitter)
	return func(n int) time.Duration {
		d := base
		for k := 1; k < n && d > 0 && d < max; k++ { // 0 doubles to 0: stop
			if d > max/2 {
				d = max // doubling d would pass max, or overflow
				break
			}
			d *= 2
		}
		d = min(d, max)
		if jitter > 0 {
			f := float64(d) * (1 - jitter + 2*jitter*rand.Float64())
			if f >= math.MaxInt64 {
				return math.MaxInt64 // the conversion of a larger float overflows
			}
			d = time.Duration(f)
		}
		return d
	}
}

// Timeout bounds the node: its context ends at the earlier of now+d (from
// its first start) and the group deadline, and when d passes the node ends
// at once with [ResultTimeout], its default value and a
// [*NodeTimeoutError]; whatever its worker returns later is dropped. The
// timeout covers every attempt and backoff of a retried node; to bound
// each attempt as well, set [RetryPolicy.AttemptTimeout]. It stops
// while the node is pending ([PolicySuspend]), and a [Rerun] starts it
// again, from the rerun's start. The node's end, and the nodes it makes
// ready, are processed on the timer's goroutine, outside the Async's pool
// or executor (see [WithMaxWorkers]). d must not be negative; 0 means no
// timeout of its own.
func (w *WorkerWrapper[P, R]) Timeout(d time.Duration) *WorkerWrapper[P, R] {
	if !w.checkBuildable("Timeout") {
		return w
	}
	w.flow().timeout = d
	return w
}

// Retry sets the node's retry policy and returns w. Begin fires before
// every attempt, Result once after the last. A retry never starts, and a
// backoff never sleeps, past the node's or the group's deadline. Attempts
// never overlap: the next one starts only after the worker returned from
// the last, even when p.AttemptTimeout ended that one's context.
func (w *WorkerWrapper[P, R]) Retry(p RetryPolicy) *WorkerWrapper[P, R] {
	if !w.checkBuildable("Retry") {
		return w
	}
	w.flow().retry = &p
	return w
}

// OnFailure sets what the node's failure does to the run and returns w.
func (w *WorkerWrapper[P, R]) OnFailure(p FailurePolicy) *WorkerWrapper[P, R] {
	if !w.checkBuildable("OnFailure") {
		return w
	}
	w.flow().policy = p
	return w
}

// EndsRun makes the run end as soon as w has ended, and returns w: mark
// the node a request waits for (the page), and the run returns with it
// instead of waiting, until the group deadline, for optional branches
// nobody reads any more. When every node marked EndsRun has ended
// (succeeded, failed, timed out, skipped or not taken; a pending node has
// not ended), the run's context is cancelled, every node that has not
// ended ends at once with [ResultTimeout], its default value and an error
// wrapping [ErrRunEnded] (its Result callback and OnNodeTimeout fire, as
// for the deadline), nodes that have not started never start, and
// BeginWork and Wait return nil, as for a run whose nodes all ended in
// time (a marked node that fails under [PolicyEnd] ends the run with its
// [*EndError] instead, as PolicyEnd says). Nodes after a marked node are
// stopped too, if it ends the run.
// Workers still running see their context cancelled (context.Canceled)
// and what they return later is dropped. If the run's context ends
// otherwise in the same instant as the last marked node (the group
// deadline passes, or ctx is cancelled with a cause of its own), the
// workers see that, and the run ends as that would end it.
//
// A node that has not started when the run ends, and one of whose must
// upstreams had already failed or was not taken, is not stopped: it ends
// as that upstream's end decided it, with an [*UpstreamError] naming the
// upstream (or [ErrNotTaken]), as it would have had the run gone on, and
// so do the nodes after it that need it. So when a failing upstream ends
// a marked node (which fails with its *UpstreamError) and with it the
// run, its other dependants report that failure too, whatever the order
// their edges were declared in, not ErrRunEnded. This holds for the
// joins that a must upstream's failure decides: the default join,
// [AllSucceeded], [NamedSucceeded] and [When]; a node with another join
// ([AllDone], [AnySucceeded], [AtLeast], [WhenResult], [CustomJoin]) is
// stopped as the others are. It holds for the run's end with its marked
// nodes only: the group deadline, a Cancel and a PolicyEnd failure stop
// every node that has not ended, as they say, whatever its upstreams.
// An upstream whose failure is still being recorded as the run ends, its
// worker's DefaultValue running, has failed already: the engine does
// not wait for the DefaultValue, which may itself wait for the run's
// end. So the run's sweep may end such a node before the failed
// upstream's DefaultValue has returned and its own Result callback and
// end hooks have run, and the node's callback may come first, as for a
// node the sweep stops.
func (w *WorkerWrapper[P, R]) EndsRun() *WorkerWrapper[P, R] {
	if !w.checkBuildable("EndsRun") {
		return w
	}
	w.flow().endsRun = true
	return w
}

// Join sets the node's join strategy and returns w (see [Join]).
func (w *WorkerWrapper[P, R]) Join(j Join) *WorkerWrapper[P, R] {
	if !w.checkBuildable("Join") {
		return w
	}
	w.flow().join = j
	return w
}

// flowSpec holds a node's flow rules (see nodeCore.spec).
type flowSpec struct {
	join    Join
	timeout time.Duration
	retry   *RetryPolicy
	policy  FailurePolicy
	endsRun bool // see EndsRun
}

func (c *nodeCore) flow() *flowSpec {
	if c.extra == nil {
		c.extra = &nodeExtra{}
	}
	c.extra.hasFlow = true
	return &c.extra.flow
}

// Resumption says how [Run.Resume] resumes a pending node: build one with
// [Rerun], [SucceedWith] or [FailWith].
type Resumption struct {
	kind  int
	value any
	err   error
}

const (
	resumeRerun = iota + 1
	resumeSucceed
	resumeFail
)

// zeroResumption is why Run.Resume and Stream.Resume refuse a
// Resumption{}.
const zeroResumption = "zero Resumption: make one with Rerun, SucceedWith or FailWith"

// Rerun runs the pending node's worker again, with a fresh set of
// attempts.
func Rerun() Resumption { return Resumption{kind: resumeRerun} }

// SucceedWith ends the pending node successfully with value v, which must
// have the node's result type.
func SucceedWith(v any) Resumption { return Resumption{kind: resumeSucceed, value: v} }

// FailWith ends the pending node with err, a plain failure for its
// dependants: its [FailurePolicy] is not applied, not again for a node
// that PolicySuspend made pending, nor at all for one its custom join
// suspended ([DecideSuspend]), so PolicyContinue does not count it as
// done and PolicyEnd does not end the run.
func FailWith(err error) Resumption { return Resumption{kind: resumeFail, err: err} }

// nodeExt is the per-run state of a node with flow rules, allocated only
// for such nodes.
type nodeExt struct {
	// join serialises a custom join's calls and guards decided. It is not
	// mu: the join is user code, and the sweep, which takes mu to stop
	// the node's timers, must not wait for it; nor does it wait for join
	// (see asks).
	join    sync.Mutex
	decided bool // the custom join has decided
	// joinSuspended: the custom join suspended the node, which has not
	// released its upstreams yet; Resume does (see customJoin).
	joinSuspended atomic.Bool
	mu            sync.Mutex // guards the fields below
	ctx           context.Context
	cancel        context.CancelFunc
	stop          func() bool // stops the timeout's AfterFunc
	base          int32       // attempts before the current round (Rerun starts a new one)
	lastErr       error       // the failure that made the node pending
	resumedFail   bool        // Resume ended the node with FailWith
	retries       *time.Timer
	// backedOff: the node waits for its next attempt, from the decision
	// to retry (its OnNodeRetry hooks run then) until its retries timer
	// fires, for the reason of a node that ends meanwhile (a timer that
	// fires as the node ends leaves it set). A node that
	// becomes pending (after a Goexit in one of those hooks, under
	// PolicySuspend) clears it, for the rounds a Rerun starts.
	backedOff bool
	// asking is the failure the node's retry policy is being asked
	// about, nil when it is not: a runtime.Goexit in its Retryable or
	// Backoff is the policy's, not the worker's (see endAborted). Only
	// the goroutine running the node's attempt uses it.
	asking error
	// With timings, pendingAt is the clock (see runState.clock) at which
	// the node, suspended after its worker failed, became pending, 0
	// while it is not, and pendingFor the time it was pending before (see
	// NodeReport.Pending).
	pendingAt, pendingFor int64
	// asks are the upstream ends the sweep found the custom join busy
	// with another's, for whoever holds join to ask it about (see
	// customJoin); nasks counts them, to be read without mu.
	asks  []joinAsk
	nasks atomic.Int32
}

// arm starts node i's own timeout, when it has one, for the round that is
// starting (its first start or a Rerun). The caller holds the node in
// sWorking.
func (r *runState) arm(i int32) {
	d := r.p.nodes[i].flow.timeout
	if d <= 0 {
		return
	}
	ext := r.exts[i]
	ctx, cancel := context.WithTimeout(r.ctx, d)
	r.taskStart() // the AfterFunc references the run
	stop := context.AfterFunc(ctx, func() {
		defer r.taskDone()
		r.nodeTimedOut(i)
	})
	ext.mu.Lock()
	ext.ctx, ext.cancel, ext.stop = ctx, cancel, stop
	ext.mu.Unlock()
}

// disarm stops node i's timeout and pending retry, if any.
func (r *runState) disarm(i int32) {
	ext := r.exts[i]
	ext.mu.Lock()
	stop, cancel, t := ext.stop, ext.cancel, ext.retries
	ext.stop, ext.cancel, ext.retries = nil, nil, nil
	ext.mu.Unlock()
	if stop != nil && stop() {
		r.taskDone() // the AfterFunc will never run
	}
	if cancel != nil {
		cancel()
	}
	if t != nil && t.Stop() {
		r.taskDone() // the retry will never run
	}
}

// nodeTimedOut ends node i when its own timeout passes. When the whole run
// is stopping, the sweep does it instead.
func (r *runState) nodeTimedOut(i int32) {
	if _, _, late := r.expired(); late {
		return
	}
	pn := &r.p.nodes[i]
	wl := r.a.getWorklist()
	if r.end(i, sWorking, ResultTimeout, &NodeTimeoutError{ID: pn.core.id, Timeout: pn.flow.timeout, at: anonymousAt(pn.core.id, i)}, -1, wl) {
		r.loop(-1, wl) // settles and runs what became ready; returns wl
		return
	}
	r.a.putWorklist(wl)
}

// afterFailure applies node i's retry policy and PolicySuspend after its
// worker returned err. It reports true if the node did not end: a retry is
// scheduled, or the node is now pending. Otherwise it returns the node's
// error: err, or the panic of the policy's own Retryable or Backoff.
func (r *runState) afterFailure(i int32, err error, wl *worklist) (bool, error) {
	pn, n, ext := &r.p.nodes[i], &r.nodes[i], r.exts[i]
	f := pn.flow
	if rp := f.retry; rp != nil {
		done := int(n.attempts.Load() - ext.base)
		if done < rp.Attempts {
			ext.asking = err
			again, delay, perr := retryDecision(rp, err, done)
			ext.asking = nil
			switch {
			case perr != nil:
				// The policy itself failed: no retry, and the node fails
				// with its panic, under its failure policy as for any
				// failure (so PolicySuspend suspends it, below).
				err = &policyPanic{attempt: err, panic: perr}
			case again && r.fitsDeadline(i, delay):
				// The node waits for its next attempt from here on, its
				// OnNodeRetry hooks included: a stop before the timer
				// fires (see disarm and scheduleRetry) reads so in its
				// reason. The timer clears the mark as it fires. Not if
				// the node has ended already (a stop while the policy
				// was asked): it ended running, and its reason, which a
				// report or hook may have read already, must stay so.
				ext.mu.Lock()
				if r.nodes[i].st() == sWorking {
					ext.backedOff = true
				}
				ext.mu.Unlock()
				// The hook first: once scheduled, the retry may run, and
				// fail and call the hook again, before this call returns.
				if len(r.hooks) > 0 {
					r.nodeRetrying(i, err, delay)
				}
				r.scheduleRetry(i, delay)
				return true, err
			}
		}
	}
	if f.policy == PolicySuspend {
		r.suspend(i, err, wl)
		return true, err
	}
	return false, err
}

// suspend makes node i, whose worker failed with err, pending, unless the
// deadline or its own timeout ended it first.
//
// Its timers are stopped before it is pending, not after: once it is, a
// Resume(Rerun) may run it again at once and arm a new timeout, which a
// disarm that came later would stop (cancelling the rerun's context). If
// the node ends first instead, its end disarms it anyway.
//
// The move to pending and what it records (lastErr, and with timings the
// start of its pending time) are one step under the node's lock, under
// which everyone who reads them once the node is pending reads them: a
// Rerun (Resume), which would otherwise get this round's error in its
// bookkeeping, the end of its pending time (unpend), the sweep and a
// report's Reason (notePendingSwept, pendingWhy). So a node the sweep
// ended first (its worker's failure came as the run stopped) keeps the
// reason it ended with, "stopped while running", which its hooks and
// reports may have read already, and one the sweep ends after names the
// failure its worker returned.
func (r *runState) suspend(i int32, err error, wl *worklist) {
	r.disarm(i)
	ext := r.exts[i]
	attempt := r.attemptsOf(i) // before the move: once pending, a Rerun may begin the next
	ext.mu.Lock()
	if !r.nodes[i].move(sWorking, sPending, 0) {
		ext.mu.Unlock()
		return // ended meanwhile
	}
	ext.lastErr, ext.backedOff = err, false
	if r.times != nil {
		ext.pendingAt = r.clock()
	}
	ext.mu.Unlock()
	if len(r.hooks) > 0 {
		r.nodePending(i, attempt, err, wl)
	}
}

// pendingTime is node i's NodeReport.Pending: the time it was pending
// after its worker failed, until now if it still is. It is 0 without
// timings.
func (r *runState) pendingTime(i int32) time.Duration {
	if r.times == nil || r.exts == nil || r.exts[i] == nil {
		return 0
	}
	ext := r.exts[i]
	ext.mu.Lock()
	d := ext.pendingFor
	if ext.pendingAt != 0 {
		d += r.clock() - ext.pendingAt
	}
	ext.mu.Unlock()
	return time.Duration(d)
}

// unpend ends the pending time of node i, which leaves sPending (Resume
// moved it, or the sweep ends it), if it had one; the caller holds its
// ext's mu. Of two calls (the sweep's, then a Resume's that took the
// node first), the first ends it.
func (r *runState) unpend(ext *nodeExt) {
	if ext.pendingAt != 0 {
		ext.pendingFor += r.clock() - ext.pendingAt
		ext.pendingAt = 0
	}
}

// endAborted ends node i, in sWorking, whose attempt ended its goroutine:
// its worker, Begin or OnNodeStart hook called runtime.Goexit (err is
// ErrGoexit), or a panic escaped. A node with flow rules ends as execute
// ends a failed attempt, under its failure policy (suspended, continued,
// or ending the run), though without a retry, as for a panic; after the
// deadline, as a timeout. A Goexit in the node's retry policy (its
// Retryable or Backoff, asked about a failed attempt) is the policy's
// failure, as a panic there is: err then wraps the attempt's error too.
func (r *runState) endAborted(i int32, err error, wl *worklist) {
	if r.exts != nil && r.exts[i] != nil {
		if ext := r.exts[i]; ext.asking != nil {
			if err == ErrGoexit {
				err = &policyPanic{attempt: ext.asking}
			}
			ext.asking = nil
		}
	}
	if st, cause, late := r.expiredNode(i); late {
		r.end(i, sWorking, st, cause, -1, wl)
		return
	}
	if f := r.p.nodes[i].flow; f != nil && f.policy == PolicySuspend {
		r.suspend(i, err, wl)
		return
	}
	r.failAttempt(i, err, wl)
}

// failAttempt ends node i, in sWorking, whose worker failed with err and
// will not be retried, under its failure policy (PolicyContinue,
// PolicyEnd; a pending node does not end here). If the deadline or its
// own timeout ended it first, the late failure is dropped.
func (r *runState) failAttempt(i int32, err error, wl *worklist) {
	// As end does, for the DefaultValue that setFailure calls.
	wl.fresh = false
	if wl.claim != 0 {
		r.unclaim(wl)
	}
	if !r.nodes[i].move(sWorking, sEnding, 0) {
		return
	}
	err = asFailure(err)
	// The policy applies before setFailure, which calls DefaultValue: user
	// code that may end this goroutine with runtime.Goexit, after which
	// the rescue in setFailure only finishes the node.
	r.failedFinally(i)
	if f := r.p.nodes[i].flow; f != nil && f.policy == PolicyEnd {
		// Before finish, which ends the run early if the node is marked
		// EndsRun: the run is PolicyEnd's to stop, and a worker that
		// returned in between would be stopped as ended early (see
		// expired) while the run returns the EndError. The node, in
		// sEnding, is left to this goroutine by the sweep.
		r.endRun(i, err)
	}
	r.p.nodes[i].core.impl.setFailure(r, i, r.slot(i), ResultException, err, false)
	r.finish(i, sError, wl)
}

// asFailure keeps the engine's own markers for a node that did not run,
// ErrSkipped and ErrNotTaken, which it stores as they are and tells by
// ==, apart from the same sentinel given as a failure: a worker that
// returns an upstream's ErrNotTaken, or a FailWith(ErrSkipped). Such an
// error is wrapped, with the same message, so errors.Is still finds the
// sentinel, and the node is reported, and treated by the nodes after
// it, as having failed.
func asFailure(err error) error {
	if err == ErrSkipped || err == ErrNotTaken {
		return &failedWith{err}
	}
	return err
}

// failedWith is a failure whose error is one of the engine's markers (see
// asFailure).
type failedWith struct{ err error }

func (e *failedWith) Error() string { return e.err.Error() }
func (e *failedWith) Unwrap() error { return e.err }

// callBounded calls f, one attempt of a graph or a stream node, with a
// context that ends bound.Timeout from now at the latest, and returns
// bound if that passed before f returned, whatever f returned. bound is
// the context's cause, which tells it apart from the end of ctx (which
// gives its own cause). A panic in f goes on up, the context cancelled.
func callBounded[R any](ctx context.Context, bound *AttemptTimeoutError, f func(context.Context) (R, error)) (R, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, bound.Timeout, bound)
	defer cancel()
	v, err := f(ctx)
	if context.Cause(ctx) == error(bound) {
		var zero R
		return zero, bound
	}
	return v, err
}

// policyPanic is the error of a node whose retry policy's Retryable or
// Backoff panicked, or called runtime.Goexit (panic is nil then), when
// asked about attempt's failure: the node fails with both, the panic
// first, so that errors.As finds the [*PanicError] (errors.Is finds
// [ErrGoexit]) and errors.Is the attempt's error, and its report blames
// the policy, not the worker.
type policyPanic struct {
	attempt error
	panic   *PanicError
}

func (e *policyPanic) Error() string {
	if e.panic == nil {
		return fmt.Sprintf("asynctool: retry policy called runtime.Goexit (asked about the attempt's error: %v)", e.attempt)
	}
	return fmt.Sprintf("asynctool: retry policy: %v (asked about the attempt's error: %v)", e.panic, e.attempt)
}

func (e *policyPanic) Unwrap() []error {
	if e.panic == nil {
		return []error{ErrGoexit, e.attempt}
	}
	return []error{e.panic, e.attempt}
}

// retryDecision asks the policy whether err is retryable and for the
// delay before attempt done+1; a panic in Retryable or Backoff is
// returned as a *PanicError.
func retryDecision(rp *RetryPolicy, err error, done int) (again bool, delay time.Duration, perr *PanicError) {
	defer func() {
		if p := recover(); p != nil {
			again, perr = false, newPanicError(p)
		}
	}()
	if rp.Retryable != nil {
		again = rp.Retryable(err)
	} else {
		var pe *PanicError
		again = !errors.As(err, &pe) && !errors.Is(err, ErrGoexit)
	}
	if again && rp.Backoff != nil {
		delay = max(0, rp.Backoff(done))
	}
	return again, delay, nil
}

// fitsDeadline reports whether a retry of node i after delay would start
// before the run's and the node's deadlines.
func (r *runState) fitsDeadline(i int32, delay time.Duration) bool {
	at := time.Now().Add(delay)
	if d, ok := r.ctx.Deadline(); ok && !at.Before(d) {
		return false
	}
	ext := r.exts[i]
	ext.mu.Lock()
	ctx := ext.ctx
	ext.mu.Unlock()
	if ctx != nil {
		if d, ok := ctx.Deadline(); ok && !at.Before(d) {
			return false
		}
	}
	return true
}

// scheduleRetry runs node i's next attempt after delay, on the pool. No
// goroutine waits meanwhile.
func (r *runState) scheduleRetry(i int32, delay time.Duration) {
	ext := r.exts[i]
	r.taskStart() // released by the retry task, or by disarm stopping the timer
	// The timer is recorded under the lock its function takes first: a
	// short delay could otherwise fire, retry, fail and record the next
	// round's timer before this one is recorded over it, and disarm would
	// then miss the next one, which holds the run until it fires.
	ext.mu.Lock()
	defer ext.mu.Unlock()
	ext.retries = time.AfterFunc(delay, func() {
		ext.mu.Lock()
		ext.retries = nil
		if r.nodes[i].st() == sWorking {
			// Not once the node has ended, which it may have in the
			// instant the timer fired: it ended waiting for this
			// attempt, and its reason, which a report or hook may have
			// read already, must stay so.
			ext.backedOff = false
		}
		ext.mu.Unlock()
		task := func() {
			defer r.taskDone()
			wl := r.a.getWorklist()
			wl.retry = true
			r.loop(i, wl)
		}
		if !r.submit(task) {
			task()
		}
	})
	if r.nodes[i].st() != sWorking {
		// Ended since its worker returned (the sweep, after a Cancel or a
		// PolicyEnd): its end may have disarmed it before the timer was
		// recorded, so stop the timer here.
		t := ext.retries
		ext.retries = nil
		if t.Stop() {
			r.taskDone()
		}
	}
}

// failedFinally applies PolicyContinue (before the final state is
// published) for node i, whose worker failed for good.
func (r *runState) failedFinally(i int32) {
	if f := r.p.nodes[i].flow; f != nil && f.policy == PolicyContinue {
		r.nodes[i].failMarks.Or(failContinued)
	}
}

// endedOne counts the end of node i, marked EndsRun: the last of them
// ends the run (see EndsRun).
func (r *runState) endedOne(i int32) {
	if r.endsLeft.Add(-1) != 0 || r.stopping() {
		return // more to come, or the deadline, a Cancel or PolicyEnd stops the run already
	}
	if r.remaining.Load() <= 1 {
		return // i is the last node: nothing to stop, no sweep to wait for
	}
	// The context is read again under r.mu (see firstStop): a Cancel or
	// the deadline since the look above may have ended nodes already.
	r.mu.Lock()
	ends := r.firstStop()
	if ends {
		r.early.Store(&runEnded{id: r.p.nodes[i].core.id, at: anonymousAt(r.p.nodes[i].core.id, i)})
	}
	r.mu.Unlock()
	if ends {
		r.cancel()
	}
}

// stopCause returns how node i, in state st, ends now that the run has
// stopped, the stop giving rs and err: as the stop says (by -1), or, for
// a node not started once the run ended with its EndsRun nodes, whose
// must upstream by had already failed or was not taken (failedMust), as
// that upstream decided, whichever of its successors the upstream's
// fan-out or the sweep reaches first (see EndsRun).
func (r *runState) stopCause(i, st int32, rs ResultState, err error) (ResultState, int32, error) {
	if st == sInit && isRunEnded(err) {
		if by := r.failedMust(i); by >= 0 {
			return ResultException, by, r.mustErr(by)
		}
	}
	return rs, -1, err
}

// mustErr is the error of a node whose must upstream j ended without
// succeeding, as failedMust found it (its failure written, its
// DefaultValue maybe still running): ErrNotTaken if j was not taken,
// else an [*UpstreamError] naming j. It is isNotTaken and upstreamErr,
// for a j that may not have stored its final state yet.
func (r *runState) mustErr(j int32) error {
	rs, err := r.p.nodes[j].core.impl.resultMeta(r.slot(j), sError)
	if rs == ResultException && err == ErrNotTaken {
		return ErrNotTaken
	}
	return r.upstreamErrWith(j, err)
}

// isRunEnded reports whether err, how expired says the nodes that end
// now end, is the run's end with its EndsRun nodes.
func isRunEnded(err error) bool {
	_, ok := err.(*runEnded)
	return ok
}

// failedMust returns the first must upstream of node s, in the order of
// its in-edges, that ended without succeeding for a reason of its own,
// not because the run stopped: it failed (its worker, its own Timeout,
// its join, its own must upstream) or was not taken. It returns -1 if
// there is none. Must is as s's join sees it (see effectiveMust): the
// joins a must upstream's failure decides (the default, AllSucceeded,
// NamedSucceeded, When) have must upstreams; AllDone, AnySucceeded,
// AtLeast, WhenResult and a custom join have none. It is asked once the
// run has ended with its EndsRun nodes, by the sweep and by the
// fan-outs still going on (failFromUpstream), which so end s alike.
//
// An upstream that another goroutine holds in sEnding is waited for
// until it leaves sEnding or its worker's DefaultValue is called
// (failWritten): the goroutine runs no user code before either, so the
// wait is short. Once the DefaultValue is called, what failedMust reads
// is decided (the upstream ends in sError, its PolicyContinue is marked,
// its State and Err are written) but for its value, which the
// DefaultValue, user code that may itself wait for the sweep, returns:
// failedMust reads the rest without waiting for it. (A node in sEnding
// that will succeed, Resume's SucceedWith, calls no DefaultValue.)
func (r *runState) failedMust(s int32) int32 {
	for _, v := range r.p.in(s) {
		j, must := upstream(v)
		if !must {
			continue
		}
		n := &r.nodes[j]
		for n.settling() {
			runtime.Gosched()
		}
		st := n.st()
		if st == sEnding {
			st = sError // failWritten: its DefaultValue runs
		}
		if st != sError || r.counts(j) {
			continue
		}
		rs, err := r.p.nodes[j].core.impl.resultMeta(r.slot(j), sError)
		if _, own := err.(*NodeTimeoutError); rs != ResultTimeout || own {
			return j
		}
	}
	return -1
}

// runEnded is the error of the nodes stopped because the run ended with
// node id (see EndsRun); at is 1 + its index when it has no id.
type runEnded struct {
	id string
	at int
}

func (e *runEnded) Error() string {
	return fmt.Sprintf("asynctool: the run ended with node %s", nameAt(e.id, e.at))
}

func (e *runEnded) Is(target error) bool { return target == ErrRunEnded }

// anonymousAt is 1 + i for node i whose id is empty, 0 otherwise: how
// EndError and runEnded keep the index of a node without an id, for
// their messages.
func anonymousAt(id string, i int32) int {
	if id != "" {
		return 0
	}
	return int(i) + 1
}

// endRun stops the run because node i failed under PolicyEnd, unless
// the run has stopped already (its deadline, a Cancel, its end with its
// EndsRun nodes, another PolicyEnd): it stopped nothing, and the node
// keeps its own failure.
func (r *runState) endRun(i int32, err error) {
	r.mu.Lock()
	ends := r.firstStop()
	if ends {
		id := r.p.nodes[i].core.id
		r.endErr.Store(&EndError{ID: id, Err: err, at: anonymousAt(id, i)})
	}
	r.mu.Unlock()
	if ends {
		r.cancel()
	}
}

// firstStop reports whether nothing has stopped the run yet: neither its
// end with its EndsRun nodes (early) nor a PolicyEnd failure (endErr) is
// stored, and its context is not done (the deadline, a Cancel). The
// caller holds r.mu, and stores its own stop under it if so: endedOne
// and endRun decide that way, and expired reads the two stores under
// r.mu until the sweep has begun, so that the first stop decides once,
// for every node it ends and for the run's error.
func (r *runState) firstStop() bool {
	return r.early.Load() == nil && r.endErr.Load() == nil && !r.stopping()
}

// Resume resumes the pending node with the given id: it runs it again,
// ends it with a value, or fails it, as how says. A node without an id is
// named as [Report.DOT] shows it, "#" and its index in the run
// ([NodeReport.Index], [NodeEvent.Index]): "#3" (unless a node has the
// id "#3", which that names). It returns an error
// wrapping [ErrUnknownID], [ErrNotPending] (the node is not pending, for
// example because the deadline ended it first, or it only waits on a
// pending upstream, which the error then names; once the run's context
// is done, a SucceedWith or FailWith ends the node as a timeout instead,
// as the sweep would, and a Rerun does not call the worker again, and
// each returns it too) or [ErrResultType] (a
// SucceedWith value of the wrong type). FailWith(nil) and a zero
// Resumption are refused with an error too. A Rerun accepted just before
// the run's context ends makes the node ready, and the node then ends as
// a timeout if it has not started by then, as any ready node does.
func (h *Run) Resume(id string, how Resumption) error {
	if h == nil || h.runState == nil {
		return fmt.Errorf("asynctool: Resume(%q) on a nil or zero Run (Start and StartPlan return one)", id)
	}
	s := h.live()
	if s == nil {
		return fmt.Errorf("asynctool: Resume(%q) on a released run", id)
	}
	defer s.unref()
	return s.Resume(id, how)
}

// anonymous returns the index of the node that name names as the
// pictures name a node without an id: "#" and its index, in decimal
// without a sign or leading zeros, of a node whose id is empty.
func (p *plan) anonymous(name string) (int32, bool) {
	digits, ok := strings.CutPrefix(name, "#")
	if !ok {
		return 0, false
	}
	k, err := strconv.Atoi(digits)
	if err != nil || k < 0 || k >= len(p.nodes) || strconv.Itoa(k) != digits || p.nodes[k].core.id != "" {
		return 0, false
	}
	return int32(k), true
}

// Resume is Run.Resume's, without the handle's check.
func (r *runState) Resume(id string, how Resumption) error {
	i, ok := r.p.lookup(id)
	if !ok {
		i, ok = r.p.anonymous(id)
	}
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownID, id)
	}
	n, pn := &r.nodes[i], &r.p.nodes[i]
	switch how.kind {
	case resumeRerun:
		// Take the task's reference first: once the node is ready the run
		// may otherwise end and be recycled before the task is handed on.
		if !r.resumeStart() {
			return r.notPending(i, id)
		}
		// The started bit, set as for a node that ran, keeps the node
		// from being skipped once ready: the rerun is promised (see skip).
		// The move and the new round's bookkeeping are one step under
		// the node's lock, under which its reason reads them (see
		// pendingWhy): a sweep that ends the node, still pending or just
		// made ready, gives it the reason it keeps.
		ext := r.exts[i]
		if ext != nil {
			ext.mu.Lock()
		}
		moved := n.move(sPending, sReady, startedBit)
		release := false
		if moved && ext != nil {
			ext.base = n.attempts.Load()
			ext.lastErr = nil
			r.unpend(ext)
			release = ext.joinSuspended.Swap(false)
		}
		if ext != nil {
			ext.mu.Unlock()
		}
		if !moved {
			r.taskDone()
			return r.notPending(i, id)
		}
		if r.times != nil {
			// A node its custom join suspended becomes ready now; one
			// that ran keeps its first ready time, as it keeps its
			// first start time.
			r.times[i].ready.CompareAndSwap(0, r.clock())
		}
		task := r.nodeTask(i)
		if release {
			// Released now that it runs, as a triggered node is; then run.
			wl := r.a.getWorklist()
			wl.left = append(wl.left, i)
			wl.ready = append(wl.ready, i)
			task = func() {
				defer r.taskDone()
				r.loop(-1, wl)
			}
		}
		// Looked at before the hand-off: once the task runs, the rerun may
		// end the run, whose context is then done too, and the node that
		// ran again would look stopped first.
		_, _, late := r.expired()
		if !r.submit(task) {
			go task()
		}
		if late {
			// The task ends the node without calling its worker (see
			// attempt), unless the sweep does first.
			return errStoppedFirst(id)
		}
		return nil
	case resumeSucceed:
		if err := pn.core.impl.checkValue(how.value); err != nil {
			return fmt.Errorf("%w: node %q: %v", ErrResultType, id, err)
		}
		if err := r.takePending(i, id); err != nil {
			return err
		}
		pn.core.impl.setSuccess(r.slot(i), how.value)
		r.settleResumed(i, sFinish)
		return nil
	case resumeFail:
		if how.err == nil {
			return fmt.Errorf("asynctool: Resume(%q): FailWith(nil): a failed node needs an error", id)
		}
		if err := r.takePending(i, id); err != nil {
			return err
		}
		if ext := r.exts[i]; ext != nil {
			ext.mu.Lock()
			ext.resumedFail = true
			ext.mu.Unlock()
		}
		r.failResumed(i, ResultException, asFailure(how.err))
		return nil
	}
	return fmt.Errorf("asynctool: Resume(%q): %s", id, zeroResumption)
}

// takePending moves pending node i to sEnding for a SucceedWith or
// FailWith, with a task's references (handed to settleResumed), or says
// why it cannot: the node is not pending, or the run's context is done,
// in which case the node has ended as the sweep would end it.
func (r *runState) takePending(i int32, id string) error {
	if !r.resumeStart() {
		return r.notPending(i, id)
	}
	if !r.nodes[i].move(sPending, sEnding, 0) {
		r.taskDone()
		return r.notPending(i, id)
	}
	if ext := r.exts[i]; ext != nil {
		ext.mu.Lock()
		r.unpend(ext)
		ext.mu.Unlock()
	}
	if r.endedLate(i) {
		return errStoppedFirst(id)
	}
	return nil
}

// errStoppedFirst is Resume's error once the run's context is done.
func errStoppedFirst(id string) error {
	return fmt.Errorf("%w: %q: the run was stopped first", ErrNotPending, id)
}

// endedLate ends node i, which Resume holds in sEnding, as the sweep
// would if the run's context is done (the sweep may not have reached it
// yet): a timeout, or the EndError of a PolicyEnd node, as a worker that
// returns then does. It reports whether it did.
func (r *runState) endedLate(i int32) bool {
	st, err, late := r.expired()
	if !late {
		return false
	}
	r.noteTimeout(st, err)
	r.failResumed(i, st, err)
	return true
}

// failResumed writes a failure into node i, which Resume holds in
// sEnding, and settles it with the reference Resume took. The failure's
// default value is user code (DefaultValue): if it ends the goroutine
// with runtime.Goexit, the node is ended by the rescue in setFailure, and
// the reference is given back here.
func (r *runState) failResumed(i int32, st ResultState, err error) {
	normal := false
	defer func() {
		if !normal {
			r.taskDone()
		}
	}()
	r.p.nodes[i].core.impl.setFailure(r, i, r.slot(i), st, err, false)
	normal = true
	r.settleResumed(i, sError)
}

// resumeStart takes a task's references for Resume, unless the run has
// ended (see Run.enter): a late Resume must not add to the Async's
// inflight count while Close may be waiting for it to reach zero.
func (r *runState) resumeStart() bool {
	if !r.enter() {
		return false
	}
	r.taskStart()
	r.leave()
	return true
}

// notPending is Resume's error for node i, which is not pending: it names
// the pending node i waits on, if any.
func (r *runState) notPending(i int32, id string) error {
	if r.nodes[i].st() == sInit {
		seen := make(map[int32]bool)
		stack := []int32{i}
		for len(stack) > 0 {
			j := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			for _, v := range r.p.in(j) {
				k, _ := upstream(v)
				switch st := r.nodes[k].st(); {
				case st == sPending:
					return fmt.Errorf("%w: %q waits on pending node %s: resume that one", ErrNotPending, id, errName(r.p.nodes[k].core.id, int(k)))
				case st == sInit && !seen[k]:
					seen[k] = true
					stack = append(stack, k)
				}
			}
		}
	}
	return fmt.Errorf("%w: %q", ErrNotPending, id)
}

// settleResumed publishes the final state of node i, which Resume holds
// in sEnding, and processes its consequences on the pool, with the
// reference Resume took. A node its custom join suspended releases its
// upstreams now, as a node that ends before it started does.
func (r *runState) settleResumed(i int32, final int32) {
	wl := r.a.getWorklist()
	if ext := r.exts[i]; ext != nil && ext.joinSuspended.Swap(false) {
		wl.left = append(wl.left, i)
	}
	r.finish(i, final, wl)
	task := func() {
		defer r.taskDone()
		r.loop(-1, wl)
	}
	if !r.submit(task) {
		go task()
	}
}
