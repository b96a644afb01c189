package asynctool

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync/atomic"
)

// edge is a declared dependency, kept by the upstream node: to depends on
// it.
type edge struct {
	to   *nodeCore
	must bool
}

// link records the edge from → to on from, where compile walks forward
// from the start nodes, and counts it on to, so that compile can tell
// that an upstream of to was not reached. An edge with a nil end, or an
// end that was used in a run (and may no longer change), is refused: the
// error is recorded on each end still free, so that a run started from
// either reports it instead of going ahead without the edge. An edge both
// of whose ends were used has no free end and is dropped, which no later
// call can tell: a used node is never free again (a compilation releases
// its claims only before its own call returns), every call that would
// take it returns ErrReused, and its run and plan keep the graph they
// had (TestEdgeBetweenUsedNodesIsRefusedWithoutTrace).
func link(from, to *nodeCore, must bool, method string) {
	var err *GraphError
	switch {
	case from == nil || to == nil:
		self := to
		if self == nil {
			self = from
		}
		if self != nil {
			err = graphErr(ErrNilWrapper, []string{self.id}, "%s on node %q got a nil wrapper", method, self.id)
		}
	case from.owner.Load() != nil || to.owner.Load() != nil:
		used := from
		if used.owner.Load() == nil {
			used = to
		}
		why := "was used in a run"
		if o := used.owner.Load(); o != nil && o.compiled.Load() {
			why = "belongs to a compiled Plan (a SubPlan node runs a plan inside another graph)"
		}
		err = graphErr(ErrReused, []string{from.id, to.id},
			"%s linking %q -> %q: %q %s", method, from.id, to.id, used.id, why)
	default:
		if len(from.out) == len(from.outBuf) && cap(from.out) == len(from.outBuf) {
			// Out of the inline buffer: room for a node of up to eight
			// successors in one allocation, as append's doubling would
			// take two.
			from.out = append(make([]edge, 0, 8), from.out...)
		}
		from.out = append(from.out, edge{to: to, must: must})
		to.inEdges++
		return
	}
	for _, c := range [2]*nodeCore{from, to} {
		if c != nil && c.owner.Load() == nil {
			c.misused(err)
		}
	}
}

// Join is a node's join strategy: when its upstream nodes' ends let it
// run, or make it fail. It is evaluated incrementally each time an
// upstream ends, never by waiting for all of them, and decides exactly
// once. No join hangs: when every upstream has ended and a join still
// waits, the node fails. Once a node's join has decided, to run it or
// not (it fails, or is not taken), upstream branches that only fed it and
// have not started are skipped (the short-circuit rule); a node its
// custom join suspends has not decided (see [DecideSuspend]).
//
// The zero Join is the default rule of [WorkerWrapper.Depend]: a node with
// must dependencies runs once all of them succeeded and fails as soon as
// one fails, its optional dependencies being ignored; a node whose
// dependencies are all optional runs on the first success and fails when
// all failed. The other strategies ignore Depend's must flag.
type Join struct {
	kind joinKind
	n    int
	ids  []string
	fn   func(ups []Upstream) Decision
	// when is set for a [When] or [WhenResult] join (kind joinCustom,
	// ids its one id): it decides in fn's place, with an error for the
	// node when it fails it. It is asked after each upstream end with
	// last, the upstream that ended (without its Value), and ups, every
	// upstream, once they have all ended (nil before). whenType is the type its condition
	// takes.
	when     func(last Upstream, ups []Upstream) (Decision, error)
	whenType reflect.Type
	// whenResult tells a WhenResult join from a When join.
	whenResult bool
}

type joinKind uint8

const (
	joinDefault joinKind = iota
	joinAll
	joinAllDone
	joinAny
	joinAtLeast
	joinNamed
	joinCustom
)

// String describes the join in words, as reports, pictures and errors
// show it: "all succeeded", `named ["a" "b"] succeeded`, `when "route"`,
// "custom".
func (j Join) String() string {
	switch j.kind {
	case joinDefault:
		return "default"
	case joinAll:
		return "all succeeded"
	case joinAllDone:
		return "all done"
	case joinAny:
		return "any succeeded"
	case joinAtLeast:
		return fmt.Sprintf("at least %d succeeded", j.n)
	case joinNamed:
		return fmt.Sprintf("named %q succeeded", j.ids)
	}
	switch {
	case j.whenType != nil && j.whenResult:
		return fmt.Sprintf("when result of %q", j.ids[0])
	case j.whenType != nil:
		return fmt.Sprintf("when %q", j.ids[0])
	}
	return "custom"
}

// AllSucceeded runs the node once every upstream succeeded and fails it as
// soon as one fails: every dependency is a must dependency.
func AllSucceeded() Join { return Join{kind: joinAll} }

// AllDone runs the node once every upstream has ended, whatever its
// outcome. It never fails the node.
func AllDone() Join { return Join{kind: joinAllDone} }

// AnySucceeded runs the node on the first upstream that succeeds, and
// fails it only once every upstream failed (asyncTool V1.5 failed on the
// first failure even when another upstream would still succeed).
func AnySucceeded() Join { return Join{kind: joinAny} }

// AtLeast runs the node on the n-th upstream success and fails it as soon
// as n successes have become impossible. n must be between 1 and the
// number of upstreams.
func AtLeast(n int) Join { return Join{kind: joinAtLeast, n: n} }

// NamedSucceeded runs the node once the upstreams with the given ids
// succeeded, and fails it as soon as one of them fails; other upstreams
// are ignored. Every id must be an upstream of the node, and the empty id
// may be named only when one upstream has it.
func NamedSucceeded(ids ...string) Join {
	return Join{kind: joinNamed, ids: slices.Clone(ids)} // the caller may reuse its slice
}

// CustomJoin decides with fn, called with the state of every upstream each
// time one of them ends, until fn decides. Calls for one node in one run
// never overlap; the runs of a [Plan] share fn, and call it concurrently.
// A panic in fn fails the node, and so does a Decision that is none of the
// five. fn should be quick: it runs as part of an upstream's end, which
// the run waits for as it waits for a Result callback, also past the
// group deadline. Since every call gets every upstream, a custom join
// over n upstreams costs O(n²) per run; the built-in joins, [When] and
// [WhenResult] included, cost O(n). Compile rejects CustomJoin on a
// node with no upstreams, whose fn would never be called, with
// [ErrBadJoin].
func CustomJoin(fn func(ups []Upstream) Decision) Join { return Join{kind: joinCustom, fn: fn} }

// When is the join of a conditional branch: it runs the node once every
// upstream succeeded and cond, called then with the value of the upstream
// with the given id, reports true. When cond reports false the node is
// not taken: it does not run, and it ends with [ErrNotTaken], its default
// value and its Result callback, as a short-circuited node does. Several
// nodes with When joins on one upstream make a switch: each runs or not
// as its condition says.
//
// Like [AllSucceeded], a failed upstream fails the node at once, whatever
// the others are doing (with an [*UpstreamError]), and an upstream that was
// not taken makes the node not taken too, without calling cond. An upstream
// that failed under [PolicyContinue] counts as a success, and cond gets its
// default value (T's zero value when that default is a nil interface).
//
// Compile rejects the join with [ErrBadJoin] when id is not an upstream
// of the node (or is the empty id, and several upstreams have it), when
// cond is nil, and when the upstream's result type can never hold a T. When the upstream's result type is an interface, its
// value is checked when cond would be called: a value that is not a T
// fails the node with an error wrapping [ErrResultType].
//
// cond runs as part of the last upstream's end, as a [CustomJoin]'s fn
// does: it should be quick, it is called at most once per node and run,
// the runs of a [Plan] call it concurrently, and a panic in it fails the
// node with a [*PanicError] (a runtime.Goexit, with an error wrapping
// [ErrGoexit]).
//
// Nodes downstream of one that was not taken apply their own joins: with
// the default join's must dependencies, AllSucceeded, NamedSucceeded and
// When, a must upstream not taken makes the node not taken; with
// AnySucceeded, AtLeast and optional dependencies, a node whose join can no
// longer be met only because upstreams were not taken is not taken, and it
// fails when one of those upstreams failed; AllDone runs the node whatever
// its upstreams did, and [WhenResult] asks its condition. A custom join
// sees a not-taken upstream as ended and not OK, with Err [ErrNotTaken],
// and may answer [DecideSkip]. These rules look at the upstreams that
// have ended when the join decides: a node with a must upstream that
// failed and another that was not taken fails or is not taken as the
// first of the two to end decides (a When join that sees both ended
// fails), and "only because upstreams were not taken" counts the
// upstreams ended by the time the join could no longer be met.
func When[T any](id string, cond func(v T) bool) Join {
	j := Join{kind: joinCustom, ids: []string{id}, whenType: reflect.TypeFor[T]()}
	if cond == nil {
		return j // refused by Compile, which names the node
	}
	j.when = func(last Upstream, ups []Upstream) (Decision, error) {
		// Each upstream's end is looked at as it comes, so that a failure
		// or a branch not taken decides at once whatever the others are
		// doing, as AllSucceeded does.
		switch {
		case !last.OK && last.Err == ErrNotTaken:
			return DecideSkip, nil
		case !last.OK:
			return DecideFail, &UpstreamError{ID: last.ID, Err: last.Err, at: last.at}
		case ups == nil:
			return DecideWait, nil
		}
		// Every upstream has ended. One whose own call is yet to come
		// (the ends raced) may have failed or not been taken: a failure
		// wins, as it would have had its call come first.
		var at *Upstream
		skip := false
		for k := range ups {
			u := &ups[k]
			switch {
			case !u.OK && u.Err == ErrNotTaken:
				skip = true
			case !u.OK:
				return DecideFail, &UpstreamError{ID: u.ID, Err: u.Err, at: u.at}
			case u.ID == id && at == nil:
				at = u
			}
		}
		if skip {
			return DecideSkip, nil
		}
		if at == nil {
			return DecideFail, fmt.Errorf("asynctool: When(%q): no such upstream", id) // Compile refuses it
		}
		t, err := upstreamAs[T]("When", id, at)
		if err != nil {
			return DecideFail, err
		}
		if cond(t) {
			return DecideRun, nil
		}
		return DecideSkip, nil
	}
	return j
}

// WhenResult is the join of a branch that looks at how an upstream
// ended, a fallback for example: it runs the node once every upstream
// has ended, whatever the outcome (as [AllDone]), and cond, called then
// with the result of the upstream with the given id, reports true. When
// cond reports false the node is not taken, as with [When].
//
// cond sees the upstream's whole result: its value (the worker's, or its
// default value when it did not succeed), its State and its Err, which
// is [ErrNotTaken] itself for an upstream not taken. So a fallback that
// runs only when the primary call failed or timed out, and not when the
// primary was a branch not taken (its whole path was not chosen), is
//
//	backup.Depend(primary, false).
//		Join(asynctool.WhenResult("primary", func(r asynctool.WorkResult[Price]) bool {
//			return r.Err != nil && r.Err != asynctool.ErrNotTaken
//		}))
//
// and the node that reads them depends on both as optional dependencies,
// so that it runs on the first of them to succeed. (The condition
// r.State != ResultSuccess would also call the backup for a primary not
// taken.) The condition compares with ==, as the engine tells a node not
// taken (see [ErrSkipped]): a primary whose worker ran and failed with an
// error wrapping ErrNotTaken (a SubPlan or ForEach passing on its
// sub-run's branch not taken, say) failed, and errors.Is would skip its
// backup.
//
// Compile checks id and T as for When, and a value that is not a T when
// the upstream's type is an interface fails the node with an error
// wrapping [ErrResultType], except a nil value of an upstream that did
// not succeed (an interface's zero value, its default when it has none),
// which cond gets as T's zero value. cond is user code called as When's
// is.
func WhenResult[T any](id string, cond func(r WorkResult[T]) bool) Join {
	j := Join{kind: joinCustom, ids: []string{id}, whenType: reflect.TypeFor[T](), whenResult: true}
	if cond == nil {
		return j // refused by Compile, which names the node
	}
	j.when = func(_ Upstream, ups []Upstream) (Decision, error) {
		if ups == nil {
			return DecideWait, nil // not every upstream has ended
		}
		var at *Upstream
		for k := range ups {
			if u := &ups[k]; u.ID == id && at == nil {
				at = u
			}
		}
		if at == nil {
			return DecideFail, fmt.Errorf("asynctool: WhenResult(%q): no such upstream", id) // Compile refuses it
		}
		t, err := upstreamAs[T]("WhenResult", id, at)
		if err != nil {
			return DecideFail, err
		}
		if cond(WorkResult[T]{Value: t, State: at.Result, Err: at.Err}) {
			return DecideRun, nil
		}
		return DecideSkip, nil
	}
	return j
}

// upstreamAs returns the value of upstream u (whose id is id) as the T
// that join fn (When or WhenResult) takes. An upstream that did not
// succeed has its default value: the zero value of its result type when
// it has none, which for an interface is a nil that stands for T's zero
// value here.
func upstreamAs[T any](fn, id string, u *Upstream) (T, error) {
	if u.Value == nil && u.Result != ResultSuccess {
		var zero T
		return zero, nil
	}
	return valueAs[T](fn, id, u.Value)
}

// valueAs returns v, the value of upstream id, as the T that join fn
// (When or WhenResult) takes. A nil interface value (from an upstream
// whose result type is an interface) is T's zero value when T is an
// interface too.
func valueAs[T any](fn, id string, v any) (T, error) {
	t, ok := v.(T)
	if !ok && (v != nil || reflect.TypeFor[T]().Kind() != reflect.Interface) {
		return t, fmt.Errorf("%w: %s(%q) takes %v, and the upstream's value is %s", ErrResultType, fn, id, reflect.TypeFor[T](), describeValue(v))
	}
	return t, nil
}

// describeValue names v's type and shows v, for an error message: "a
// float64, 2", or "nil".
func describeValue(v any) string {
	if v == nil {
		return "nil"
	}
	return fmt.Sprintf("a %T, %#v", v, v)
}

// Upstream is one upstream node as a custom join sees it.
type Upstream struct {
	// ID is the upstream's id.
	ID string
	// Ended reports whether the upstream has a final result; OK whether it
	// counts as a success for joins (it succeeded, or failed under
	// PolicyContinue). An upstream that was not taken (see [When]) has
	// ended and is not OK, with Err [ErrNotTaken].
	Ended, OK bool
	// Pending reports whether the upstream itself is suspended: its
	// worker failed under PolicySuspend, or its custom join decided
	// [DecideSuspend]. An upstream that only waits on a suspended node
	// has not ended and is not Pending, though [Run.Report] may show it
	// [StatusPending].
	Pending bool
	// Result, Err and Value are the upstream's result once it ended:
	// its result state, its error (nil on success) and its value (the
	// worker's, or its default when it did not succeed). Before it ended
	// they are zero.
	Result ResultState
	Err    error
	Value  any
	// at is 1 + the upstream's index when it has no id, for the
	// UpstreamError a When join makes of it (see EndError).
	at int
}

// Decision is a custom join's answer.
type Decision int

const (
	// DecideWait: not yet; ask again when the next upstream ends.
	DecideWait Decision = iota
	// DecideRun: run the node now.
	DecideRun
	// DecideFail: fail the node with ErrJoinFailed.
	DecideFail
	// DecideSuspend: make the node pending, to be resumed by Run.Resume.
	// The node has not fired: its upstreams go on (none is
	// short-circuited for it) until Resume reruns or ends it. Nor is the
	// node itself short-circuited: it stays pending, and the run open,
	// until Resume or the run's end, even once none of its successors
	// needs it any more (their joins decided without it).
	DecideSuspend
	// DecideSkip: do not take this branch. The node does not run: it
	// ends with [ErrNotTaken], its default value and its Result
	// callback, as a short-circuited node does, and the nodes downstream
	// of it apply their joins (see [When]). Its upstreams that have not
	// started and that no other node needs are short-circuited.
	DecideSkip
)

// String returns the decision's name.
func (d Decision) String() string {
	switch d {
	case DecideWait:
		return "wait"
	case DecideRun:
		return "run"
	case DecideFail:
		return "fail"
	case DecideSuspend:
		return "suspend"
	case DecideSkip:
		return "skip"
	}
	return fmt.Sprintf("Decision(%d)", int(d))
}

// setThresholds computes node n's join thresholds: the number of counted
// upstream ends that trigger it (needOK) and that fail it (needFail). The
// run's counters count up from zero, so that resetting a run is one clear.
func (n *pnode) setThresholds() {
	total := int32(n.nIn())
	n.afterAll = n.joinKind == joinAll || n.joinKind == joinAllDone || n.joinKind == joinDefault && n.nOpt == 0
	switch n.joinKind {
	case joinAllDone, joinCustom:
		n.needOK = total
	case joinAny:
		n.needOK, n.needFail = 1, total
	case joinAtLeast:
		k := int32(n.flow.join.n) // a node with a join other than the default has flow rules
		n.needOK, n.needFail = k, total-k+1
	default:
		switch {
		case n.nMust > 0:
			n.needOK = n.nMust
		case n.nOpt > 0:
			n.needOK, n.needFail = 1, n.nOpt
		}
	}
}

// upstreamEndedFrom updates the join of every successor of the node i
// that just ended, triggering or failing those whose join is now decided.
// It goes through i's out-edges last first, skipping the last done of
// them (after a Goexit, see salvage). The first node it readies is
// claimed (see worklist.claim): going backwards, that is the node the
// goroutine ran when it readied them in order and ran the last one, which
// keeps the goroutine and its helpers at the two ends of a wide graph
// (see worklist.front); run-only benchmarks measured claiming the first
// in order 50-70 ns/node slower on tree and layered. ok says whether i
// counts as a success. ends is i's end and those i carried (see
// carriedBit): the node claimed here carries them on, or they are
// returned, to be taken off the run's remaining count.
// The worklist records the edge being looked at, so that a custom join
// that never returns (runtime.Goexit) can be skipped and the rest resumed.
func (r *runState) upstreamEndedFrom(i int32, done int, ok bool, ends int32, wl *worklist) int32 {
	out := r.p.out(i)
	wl.after = i
	// The first node readied here is claimed if the goroutine has none,
	// and no node carries i's end yet: a goroutine that a DefaultValue
	// ended below (see salvage) may have claimed one that still does. The
	// run has stopped then, which alone keeps it from claiming, but
	// nothing ties the two together.
	claim := wl.claim == 0 && !wl.carried && !r.stopped.Load()
	// The node claimed carries i's end (see carriedBit), so the run may
	// complete as soon as that node's end is processed, possibly by the
	// sweep while this loop goes on. So it carries nothing when what is
	// left of the loop matters to the run: a custom join, which is part
	// of i's end and which the run waits for, or a timed run's ready
	// times, which a report read at the run's end must include. Once a
	// node is claimed (which only a success does), the only other user
	// code here is the DefaultValue of a successor ended because the run
	// stopped, and that holds the run while its node is in sEnding.
	carry := r.times == nil && !r.p.nodes[i].customOut
	for k := len(out) - 1 - done; k >= 0; k-- {
		e := &out[k]
		wl.edge = int32(k)
		s := e.node
		// A success along a plain edge (see pedge) only counts: arrive
		// below refuses a node that has left sInit.
		if (!e.plain || !ok) && !r.joinCounts(s, i, e.must, ok, wl) {
			continue
		}
		sn, sp := &r.nodes[s], &r.p.nodes[s]
		// i's end counts toward s's join. If that satisfies it, s is
		// readied, or claimed: the same CAS moves it straight to
		// sWorking, and this goroutine runs it next (see
		// worklist.claim), which saves the CAS from sReady to sWorking
		// that a node taken from a queue needs. Nodes with flow rules
		// are not claimed (their start arms timers), nor is any node
		// once the run has stopped (it is ended as it is readied), nor
		// an item of a ForEach under its Limit, which starts through
		// the limiter (see exec).
		if claim && e.plain && (r.lim == nil || !r.lim.limited[s]) {
			// s carries i's end, and those i carried, off the run's
			// remaining count: whoever processes s's end (the sweep
			// included) takes them off with s's own, and the run
			// cannot complete before. That saves one locked operation
			// per claimed node on the run's most written counter.
			to := int64(sWorking) | startedBit
			if carry {
				to |= int64(ends)<<countShift | carriedBit
			}
			if _, moved := sn.arrive(sp.needOK, i, to); moved {
				wl.carried = carry
				if !sp.afterAll {
					wl.left = append(wl.left, s)
				}
				if r.times != nil {
					r.times[s].ready.Store(r.clock())
				}
				wl.claim = s + 1
				claim = false
			}
		} else if _, moved := sn.arrive(sp.needOK, i, int64(sReady)); moved {
			r.triggered(s, wl)
		}
	}
	wl.after = -1
	if wl.carried {
		wl.carried = false
		return 0
	}
	return ends
}

// joinCounts is upstreamEndedFrom's step for an edge that is not plain, or
// along which upstream i did not succeed (ok), into successor s (must:
// the edge's flag). It applies s's join to i's end and reports whether
// the end counts toward it, for the caller to count with arrive; when
// it does not, the join has already done what the end asks for.
func (r *runState) joinCounts(s, i int32, must, ok bool, wl *worklist) bool {
	sn, sp := &r.nodes[s], &r.p.nodes[s]
	if sn.st() != sInit {
		return false // already decided
	}
	switch sp.joinKind {
	case joinAllDone:
		return true
	case joinAny, joinAtLeast:
		if ok {
			return true
		}
		if reached(&sn.failCount, sp.needFail) {
			r.cannotJoin(s, i, r.joinImpossible, wl)
		}
		return false
	case joinCustom:
		r.customJoin(s, i, wl)
		return false
	}
	switch {
	case !must && sp.nMust > 0:
		// An optional dependency of a node with must dependencies.
	case ok:
		return true
	case must:
		if r.isNotTaken(i) {
			r.notTaken(s, i, wl)
		} else {
			r.failFromUpstream(s, i, r.upstreamErr(i), wl)
		}
	default:
		if reached(&sn.failCount, sp.needFail) {
			r.cannotJoin(s, i, r.allUpstreamErr, wl)
		}
	}
	return false
}

// cannotJoin ends node s, whose join the end of upstream by has made
// impossible: not taken if only upstreams not taken made it so, failed
// with why(s) otherwise.
func (r *runState) cannotJoin(s, by int32, why func(s int32) error, wl *worklist) {
	if r.onlyNotTaken(s) {
		r.notTaken(s, by, wl)
		return
	}
	r.failFromUpstream(s, by, why(s), wl)
}

// reached counts one more upstream end on c and reports whether that makes
// need. A threshold of one needs no count: the CAS out of sInit that
// follows decides once.
func reached(c *atomic.Int32, need int32) bool {
	return need == 1 || c.Add(1) == need
}

func (r *runState) upstreamErr(i int32) error {
	return r.upstreamErrWith(i, r.p.nodes[i].core.impl.resultErr(r.slot(i), r.nodes[i].st()))
}

// upstreamErrWith is the [*UpstreamError] naming upstream i, which failed
// with err.
func (r *runState) upstreamErrWith(i int32, err error) error {
	id := r.p.nodes[i].core.id
	return &UpstreamError{ID: id, Err: err, at: anonymousAt(id, i)}
}

// allUpstreamErr joins the errors of the upstreams of s that failed:
// that ended without counting as a success, and were taken.
func (r *runState) allUpstreamErr(s int32) error {
	in := r.p.in(s)
	errs := make([]error, 0, len(in))
	for _, v := range in {
		j, _ := upstream(v)
		if st := r.nodes[j].st(); terminal(st) && !r.counts(j) && !r.isNotTaken(j) {
			errs = append(errs, r.upstreamErr(j))
		}
	}
	return errors.Join(errs...)
}

// counts reports whether node j, which has ended (or has its failure
// written: see failedMust), counts as a success.
func (r *runState) counts(j int32) bool {
	n := &r.nodes[j]
	return n.st() == sFinish || n.failMarks.Load()&failContinued != 0
}

func (r *runState) joinImpossible(s int32) error {
	pn := &r.p.nodes[s]
	return fmt.Errorf("asynctool: join %v of %s cannot be met: %w", pn.flow.join, errName(pn.core.id, int(s)), r.allUpstreamErr(s))
}

// customJoin asks node s's custom join, after upstream from ended.
//
// Calls of one node's join never overlap (ext.join). The sweep does not
// wait for a call that another goroutine is making, which may be waiting
// for the sweep: a Report of an outer run, called from the join, waits
// for this run's sweep (see waitSwept). It leaves its ask to that
// goroutine instead (ext.asks): whoever asks the join takes up the asks
// left, once its own call has returned, as long as it gets the join's
// lock without waiting; the goroutine that holds the lock then does.
func (r *runState) customJoin(s, from int32, wl *worklist) {
	// The join is user code.
	wl.fresh = false
	if wl.claim != 0 {
		r.unclaim(wl)
	}
	sn, pn := &r.nodes[s], &r.p.nodes[s]
	c, _ := sn.arrive(0, from, int64(sReady))
	all := c == pn.needOK
	ext := r.exts[s]
	if wl.sweep {
		ext.mu.Lock()
		ext.asks = append(ext.asks, joinAsk{from: from, all: all})
		ext.nasks.Add(1)
		ext.mu.Unlock()
	} else {
		ext.join.Lock()
		r.decideJoin(s, from, all, wl)
	}
	for {
		if ext.nasks.Load() == 0 || !ext.join.TryLock() {
			return // none, or the goroutine holding the lock takes them up
		}
		ext.mu.Lock()
		if len(ext.asks) == 0 {
			ext.mu.Unlock()
			ext.join.Unlock()
			continue // taken up meanwhile: look again, as any holder does
		}
		a := ext.asks[0]
		ext.asks = ext.asks[1:]
		ext.nasks.Add(-1)
		ext.mu.Unlock()
		r.decideJoin(s, a.from, a.all, wl)
	}
}

// joinAsk is an ask of a custom join that the sweep left to the
// goroutine calling it (see customJoin): upstream from ended, and all
// says whether that was the last.
type joinAsk struct {
	from int32
	all  bool
}

// decideJoin asks node s's custom join, whose lock (ext.join) the caller
// holds and which askJoin lets go of, after upstream from ended (all:
// the last), and acts on what it decides.
func (r *runState) decideJoin(s, from int32, all bool, wl *worklist) {
	sn, pn := &r.nodes[s], &r.p.nodes[s]
	if wl.sweep {
		r.sweepCall.Store(true) // the join (cleared by sweepFrom if it ends the goroutine)
	}
	d, perr, ok := r.askJoin(s, from, all)
	if wl.sweep {
		r.sweepCall.Store(false)
	}
	if !ok {
		return
	}
	// Act outside ext.mu: ending the node takes it.
	switch {
	case perr != nil && r.budget != nil && r.stopping():
		// A ForEach's join under a Budget, which decides once the run is
		// stopping (see stop): its panic is the node's failure, not the
		// timeout failFromUpstream would make of it.
		r.end(s, sInit, ResultException, perr, from, wl)
	case perr != nil:
		r.failFromUpstream(s, from, perr, wl)
	case d == DecideRun:
		r.trigger(s, from, wl)
	case d == DecideFail:
		r.failFromUpstream(s, from, fmt.Errorf("%w: node %s", ErrJoinFailed, errName(pn.core.id, int(s))), wl)
	case d == DecideSkip:
		r.notTaken(s, from, wl)
	case d == DecideSuspend && r.budget != nil && r.stopping():
		// A ForEach's join under a Budget that suspends once the run is
		// stopping: the sweep, which leaves it to decide (see stop), would
		// not end it as a pending node. It ends here as the sweep would.
		r.notePendingSwept(s)
		r.failFromUpstream(s, from, fmt.Errorf("%w: node %s", ErrJoinUndecided, errName(pn.core.id, int(s))), wl)
	case d == DecideSuspend:
		// The node has not fired: its upstreams are not released (their
		// results are what a Rerun reads) until Resume decides.
		ext := r.exts[s]
		attempt := r.attemptsOf(s) // before the move: once pending, a Rerun may begin an attempt
		// The mark is set before the move, as a SucceedWith or FailWith
		// reads it without the node's lock once the node is pending (see
		// settleResumed); the move and the mark are one step under the
		// lock, under which a Rerun and a report's Reason read them (see
		// pendingWhy), so a node the sweep ends first never reads as
		// suspended by its join.
		ext.mu.Lock()
		ext.joinSuspended.Store(true)
		moved := sn.move(sInit, sPending, 0)
		if !moved {
			ext.joinSuspended.Store(false)
		}
		ext.mu.Unlock()
		if moved && len(r.hooks) > 0 && !wl.sweep {
			r.nodePending(s, attempt, nil, wl)
		}
	case all:
		r.failFromUpstream(s, from, fmt.Errorf("%w: node %s", ErrJoinUndecided, errName(pn.core.id, int(s))), wl)
	}
}

// askJoin calls node s's custom join with its upstreams' current state,
// unless it already decided, after upstream from ended; all says whether
// every upstream has ended. The caller holds the join's lock, which is
// let go of here, also if the join ends the goroutine; ok is false if the
// join was not asked.
func (r *runState) askJoin(s, from int32, all bool) (d Decision, perr error, ok bool) {
	sn, pn := &r.nodes[s], &r.p.nodes[s]
	ext := r.exts[s]
	defer ext.join.Unlock()
	if ext.decided || sn.st() != sInit {
		return 0, nil, false
	}
	j := &pn.flow.join
	var last Upstream
	var ups []Upstream
	if j.when != nil {
		// A When or WhenResult join decides on the upstream that just
		// ended alone until every upstream has: a call per upstream end
		// that looked at every upstream would make a wide join
		// quadratic.
		last = r.upstreamView(from, false)
	}
	if j.when == nil || all {
		in := r.p.in(s)
		ups = make([]Upstream, len(in))
		for k, v := range in {
			u, _ := upstream(v)
			ups[k] = r.upstreamView(u, true)
		}
	}
	d, perr = callJoin(j, last, ups)
	if perr == nil && (d < DecideWait || d > DecideSkip) {
		// Not one of the five: it would decide nothing, and the node
		// would wait for ever. It fails the node, as a panic does.
		perr = fmt.Errorf("asynctool: custom join of %s returned Decision(%d), which is none of the five", errName(pn.core.id, int(s)), int(d))
	}
	ext.decided = perr != nil || d != DecideWait
	return d, perr, true
}

// upstreamView is upstream j as a custom join sees it now; without its
// Value unless value is set (boxing it may allocate).
func (r *runState) upstreamView(j int32, value bool) Upstream {
	id := r.p.nodes[j].core.id
	up := Upstream{ID: id, at: anonymousAt(id, j)}
	st := r.nodes[j].st()
	up.Pending = st == sPending
	if terminal(st) {
		up.Ended, up.OK = true, r.counts(j)
		impl := r.p.nodes[j].core.impl
		if value {
			up.Value, up.Result, up.Err = impl.resultAny(r.slot(j), st)
		} else {
			up.Result, up.Err = impl.resultMeta(r.slot(j), st)
		}
	}
	return up
}

// callJoin asks j, a custom or a When join (see Join.when for last and
// ups); perr is set when it failed the node: a panic, or a When join's
// reason.
func callJoin(j *Join, last Upstream, ups []Upstream) (d Decision, perr error) {
	defer func() {
		if v := recover(); v != nil {
			perr = newPanicError(v)
		}
	}()
	if j.when != nil {
		return j.when(last, ups)
	}
	return j.fn(ups), nil
}

// notTaken ends node s, which has not fired, as a branch not taken: its
// join decided so, after upstream by ended (see DecideSkip).
func (r *runState) notTaken(s, by int32, wl *worklist) {
	r.failFromUpstream(s, by, ErrNotTaken, wl)
}

// isNotTaken reports whether node j, which has ended, was not taken.
func (r *runState) isNotTaken(j int32) bool {
	st := r.nodes[j].st()
	if st != sError {
		return false
	}
	// An exception: a node the run's context ended has its cause for Err,
	// which may be any error, this one too.
	rs, err := r.p.nodes[j].core.impl.resultMeta(r.slot(j), st)
	return rs == ResultException && err == ErrNotTaken
}

// onlyNotTaken reports whether every upstream of s that ended without
// counting as a success was not taken: then s, whose join can no longer
// be met, is not taken either instead of failing.
func (r *runState) onlyNotTaken(s int32) bool {
	for _, v := range r.p.in(s) {
		j, _ := upstream(v)
		if st := r.nodes[j].st(); terminal(st) && !r.counts(j) && !r.isNotTaken(j) {
			return false
		}
	}
	return true
}
