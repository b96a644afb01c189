package asynctool

import (
	"errors"
	"fmt"
	"strings"
)

// runStop is what stopped a run, as a node it ended shows it: a
// PolicyEnd failure (end, the *EndError the engine stores once), the
// run's end with its EndsRun nodes (ended, the error the engine makes
// once), or its context (cause: the group deadline's or a Cancel's, or
// in a ForEach's sub-run its Budget's *BudgetError).
type runStop struct {
	end   *EndError
	ended *runEnded
	cause error
}

func (s runStop) String() string {
	switch {
	case s.end != nil:
		return fmt.Sprintf("PolicyEnd of %s (%p)", s.end.ID, s.end)
	case s.ended != nil:
		return fmt.Sprintf("the run's end with %s (%p)", s.ended.id, s.ended)
	}
	return fmt.Sprintf("its context (%v)", s.cause)
}

// stopOfNode returns the stop that ended node n, if a stop did, rather
// than its own outcome. A stop ends a node so (see WorkResult):
//   - "an [*EndError] if a [PolicyEnd] node ended the run first": Err is
//     the EndError itself, ResultException. A SubPlan, SubGraph or
//     ForEach node whose sub-run a PolicyEnd node ended fails with an
//     error wrapping it: that is the node's own failure ("the outer run
//     goes on under that node's own policy"), not a stop of its run.
//   - "an error wrapping [ErrRunEnded] if the run ended with its
//     [WorkerWrapper.EndsRun] nodes first": a timeout.
//   - "the run context's cause ([context.DeadlineExceeded] for the group
//     deadline) if it timed out, or a [*NodeTimeoutError] if its own
//     [WorkerWrapper.Timeout] passed": a timeout whose error is not a
//     *NodeTimeoutError is the context's cause (a Cancel's
//     context.Canceled: "Cancel stops the run as if its deadline had
//     passed: nodes not yet ended end with ResultTimeout and the cause
//     [context.Canceled]"), a ForEach's *BudgetError among them.
//
// Not stops: a node that "does not run because an upstream it needed
// failed (an [*UpstreamError])" ends with its upstream's failure, and
// once the run ended with its EndsRun nodes, one "one of whose must
// upstreams had already failed or was not taken, is not stopped: it
// ends as that upstream's end decided it" (EndsRun); an attempt's
// AttemptTimeout fails it ("an attempt that passed its RetryPolicy's
// AttemptTimeout fails so too", ResultException); a worker that returns
// its context's error fails with its own error; a retry refused past
// the deadline applies the node's failure policy ("the failure policy
// applies at once instead"). A node that ended before the stop keeps
// its outcome, and a pending node has not ended.
func stopOfNode(n *NodeReport) (runStop, bool) {
	var ee *EndError
	var re *runEnded
	var nte *NodeTimeoutError
	switch {
	case n.Result == ResultException && errors.As(n.Err, &ee) && n.Err == error(ee):
		return runStop{end: ee}, true
	case n.Result != ResultTimeout:
		return runStop{}, false
	case errors.As(n.Err, &re) && n.Err == error(re):
		return runStop{ended: re}, true
	case errors.As(n.Err, &nte) && n.Err == error(nte):
		return runStop{}, false
	}
	return runStop{cause: n.Err}, true
}

// sameStop reports whether a and b are one stop: the same EndError or
// run's end (the engine makes each once per run), or the same cause.
func sameStop(a, b runStop) bool {
	return a.end == b.end && a.ended == b.ended && a.cause == b.cause
}

// checkOneStop checks the rule that the first stop of a run decides,
// once, in rep, the report of a run that has ended, and err, the run's
// error (what Wait returned; rep.RunErr for a sub-run): every node that
// a stop ended carries the same stop, and err is that stop's. For
// each stop, its doc:
//   - PolicyEnd: "every node not yet ended (pending nodes included) fails
//     with an [*EndError], and BeginWork returns that error, naming the
//     node"; "A failure settled once the run has stopped ... stops
//     nothing: the node keeps its own failure ... and the run ends as it
//     was stopped". So err is that EndError, and node ID ended on its
//     own (no node stopped it). An EndError in err while no node carries
//     it is no violation: the PolicyEnd node may have been the last one.
//   - EndsRun: "every node that has not ended ends at once with
//     [ResultTimeout] ... an error wrapping [ErrRunEnded] ... and
//     BeginWork and Wait return nil, as for a run whose nodes all ended in
//     time": err carries neither an EndError nor the context's cause. "If
//     the run's context ends otherwise in the same instant as the last
//     marked node ..., the run ends as that would end it": the nodes
//     then carry the context's cause, all of them.
//   - the deadline or a Cancel: nodes end as timeouts with the cause, and
//     Wait's error wraps it ("run stopped before every node ended");
//     that error says some node timed out so (see runState.err).
//
// Each sub-run in a node's Sub is a run of its own for the rule, checked
// with its RunErr: its nodes carry the stop its own context showed
// (the outer run's stop, which ends the outer node's context, or the
// outer node's own Timeout, or a ForEach's Budget, whichever came first:
// their order across the two runs is no rule), or its own PolicyEnd
// or EndsRun nodes'.
//
// It returns the violations, in words, with where (the run's name).
func checkOneStop(rep *Report, err error, where string) []string {
	if rep == nil {
		return nil
	}
	var bad []string
	say := func(format string, args ...any) {
		bad = append(bad, fmt.Sprintf("%s: %s\n%v", where, fmt.Sprintf(format, args...), rep))
	}
	var first runStop
	var by string // the node that first showed first
	for k := range rep.Nodes {
		n := &rep.Nodes[k]
		s, ok := stopOfNode(n)
		if !ok {
			continue
		}
		if by == "" {
			first, by = s, n.ID
		} else if !sameStop(first, s) {
			say("node %s was ended by %v, node %s by %v", by, first, n.ID, s)
		}
	}
	var werr *EndError
	errEnd := errors.As(err, &werr)
	stoppedErr := err != nil && strings.Contains(err.Error(), "run stopped before every node ended")
	switch {
	case by == "":
		if stoppedErr {
			say("no node was stopped by its context, and the run's error is %v", err)
		}
		if errEnd {
			for k := range rep.Nodes {
				n := &rep.Nodes[k]
				if n.ID == werr.ID {
					if _, ok := stopOfNode(n); ok || n.Result == ResultSuccess {
						say("the run's error is %v, and node %s did not end the run: %v %v", err, n.ID, n.Status, n.Err)
					}
				}
			}
		}
	case first.end != nil:
		if !errEnd || werr != first.end {
			say("nodes were ended by %v, and the run's error is %v", first, err)
		}
	case first.ended != nil:
		if errEnd || stoppedErr {
			say("nodes were ended by %v, and the run's error is %v", first, err)
		}
	default:
		if errEnd || !stoppedErr || !errors.Is(err, first.cause) {
			say("nodes were ended by %v, and the run's error is %v", first, err)
		}
	}
	for k := range rep.Nodes {
		n := &rep.Nodes[k]
		if n.Sub == nil || n.Sub.End.IsZero() && n.Sub.RunErr == nil {
			continue // no sub-run, or one not known to have ended
		}
		bad = append(bad, checkOneStop(n.Sub, n.Sub.RunErr, where+"/"+n.ID)...)
	}
	return bad
}
