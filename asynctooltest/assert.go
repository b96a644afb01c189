package asynctooltest

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/asynctool-go/asynctool"
)

// The assertions below check one fact about a run's report. Like
// testify's assert, each reports a failure with t.Errorf, lets the test go
// on, and returns whether the fact held. A node is named by its id; an id
// not in the report is a failure, whose message lists the report's paths.
// A node of the sub-run of a
// [asynctool.SubPlan], [asynctool.SubGraph] or [asynctool.ForEach] node
// is named by a path, that node's id, a slash and its id in the sub-run
// ("profile/name", "prices/2"; deeper sub-runs add more); an id of
// the report itself is found first, so ids that contain a slash still
// work. A node without an id is named as [asynctool.Run.Resume] and the
// report's pictures name it, "#" and its index in its run ("#0",
// "profile/#2"), unless a node has that id; the empty id names none.

func node(t testing.TB, rep *asynctool.Report, id string) (*asynctool.NodeReport, bool) {
	t.Helper()
	if rep == nil {
		t.Errorf("asynctooltest: nil report")
		return nil, false
	}
	if n := find(rep, id); n != nil {
		return n, true
	}
	if id == "" || strings.HasSuffix(id, "/") {
		// The empty id names no node: not the first without an id.
		t.Errorf("asynctooltest: no node %q in the report: name a node without an id by \"#\" and its index (its paths: %s)", id, paths(rep))
	} else {
		// Say which paths there are, the usual mistakes being a typo
		// and a sub-run's node named by its own id.
		t.Errorf("asynctooltest: no node %q in the report (its paths: %s)", id, paths(rep))
	}
	return nil, false
}

// paths lists, for an error, the ids and paths of rep's nodes, at most 20.
func paths(rep *asynctool.Report) string {
	var out []string
	more := false // a path past the 20th, which "..." stands for
	var walk func(rep *asynctool.Report, prefix string)
	walk = func(rep *asynctool.Report, prefix string) {
		for i := range rep.Nodes {
			if len(out) == 20 {
				more = true
				return
			}
			n := &rep.Nodes[i]
			out = append(out, prefix+name(n))
			if n.Sub != nil {
				walk(n.Sub, prefix+name(n)+"/")
			}
		}
	}
	walk(rep, "")
	if more {
		out = append(out, "...")
	}
	return strings.Join(out, ", ")
}

// find returns the node of rep with the given id, or with the given path
// through nodes' sub-runs (NodeReport.Sub), nil if there is none.
func find(rep *asynctool.Report, id string) *asynctool.NodeReport {
	if id == "" {
		return nil // a node without an id is "#" and its index (see name)
	}
	for i := range rep.Nodes {
		if rep.Nodes[i].ID == id {
			return &rep.Nodes[i]
		}
	}
	for i := range rep.Nodes {
		if n := &rep.Nodes[i]; n.ID == "" && name(n) == id {
			return n
		}
	}
	for i := range rep.Nodes {
		n := &rep.Nodes[i]
		if rest, ok := strings.CutPrefix(id, name(n)+"/"); ok && n.Sub != nil {
			if m := find(n.Sub, rest); m != nil {
				return m
			}
		}
	}
	return nil
}

// name is how the assertions name node n: its id, or "#" and its index
// for a node without one.
func name(n *asynctool.NodeReport) string {
	if n.ID == "" {
		return "#" + strconv.Itoa(n.Index)
	}
	return n.ID
}

// RanBefore checks that the nodes a and b both ran and that a ended no
// later than b started. It needs the report's times, which [Run] records.
// In a report of a run still going on, b may still be running; a must
// have ended. Under testing/synctest, nodes whose work takes no virtual
// time start and end in the same instant; such a tie fails when a must
// dependency, direct or through other nodes of the same graph, makes a
// run after b (its report's Deps and Must say so), and otherwise holds,
// though the nodes may have run in either order: to test an order there,
// give a a fake that takes time ([Sleeps]), so that b, had it started
// first, would have started before a ended.
func RanBefore(t testing.TB, rep *asynctool.Report, a, b string) bool {
	t.Helper()
	na, ok1 := node(t, rep, a)
	nb, ok2 := node(t, rep, b)
	if !ok1 || !ok2 {
		return false
	}
	for _, n := range []struct {
		id, other string
		n         *asynctool.NodeReport
	}{{a, b, na}, {b, a, nb}} {
		if !n.n.Ran {
			t.Errorf("%q did not run (%v/%v), want it to run before or after %q", n.id, n.n.State, n.n.Result, n.other)
			return false
		}
		if n.n.Started.IsZero() {
			t.Errorf("the report has no times for %q: run with asynctooltest.Run or asynctool.WithTimings", n.id)
			return false
		}
	}
	if na.Ended.IsZero() {
		t.Errorf("%q has not ended (%v), want it to end before %q started", a, na.Status, b)
		return false
	}
	if na.Ended.After(nb.Started) {
		t.Errorf("%q ended %v after %q started, want it to end before", a, na.Ended.Sub(nb.Started), b)
		return false
	}
	if na.Ended.Equal(nb.Started) && mustAfter(rep, na, nb) {
		t.Errorf("%q ended in the instant %q started, and it must depend on %q, so it ran after it", a, b, b)
		return false
	}
	return true
}

// mustAfter reports whether node a, of rep or of a sub-run's report in
// it, depends on node b of the same report through must dependencies
// only, directly or through other nodes: then b ended before a started.
func mustAfter(rep *asynctool.Report, a, b *asynctool.NodeReport) bool {
	if a.Index >= len(rep.Nodes) || &rep.Nodes[a.Index] != a {
		for i := range rep.Nodes {
			if sub := rep.Nodes[i].Sub; sub != nil && mustAfter(sub, a, b) {
				return true
			}
		}
		return false
	}
	if b.Index >= len(rep.Nodes) || &rep.Nodes[b.Index] != b {
		return false // not of the same graph
	}
	seen := make([]bool, len(rep.Nodes))
	next := []int{a.Index}
	for len(next) > 0 {
		n := &rep.Nodes[next[len(next)-1]]
		next = next[:len(next)-1]
		for k, d := range n.Deps {
			if k >= len(n.Must) || !n.Must[k] || d < 0 || d >= len(seen) || seen[d] {
				continue
			}
			if d == b.Index {
				return true
			}
			seen[d] = true
			next = append(next, d)
		}
	}
	return false
}

// RanOnce checks that the node started exactly once: one attempt, as
// [asynctool.NodeReport.Attempts] counts them (see its Ran for an
// attempt whose Callback.Begin panicked before the worker was called).
func RanOnce(t testing.TB, rep *asynctool.Report, id string) bool {
	t.Helper()
	n, ok := node(t, rep, id)
	if !ok {
		return false
	}
	if n.Attempts != 1 {
		t.Errorf("%q ran %d times, want once", id, n.Attempts)
		return false
	}
	return true
}

// NeverStarted checks that the node never started, whatever its outcome
// (skipped, not taken, failed upstream, timed out before it started, or
// not ended): [asynctool.NodeReport.Ran] is false. A node whose
// Callback.Begin panicked started, though its worker was not called.
func NeverStarted(t testing.TB, rep *asynctool.Report, id string) bool {
	t.Helper()
	n, ok := node(t, rep, id)
	if !ok {
		return false
	}
	if n.Ran {
		t.Errorf("%q started (%d times, ended %v/%v), want it never to start", id, n.Attempts, n.State, n.Result)
		return false
	}
	return true
}

// WasSkipped checks that the node was short-circuited: it never started
// and its error is [asynctool.ErrSkipped] itself (not an error that wraps
// it: a worker that returned it, or a pending node resumed with
// FailWith(ErrSkipped), failed). Such a node also ends in error, so
// [Failed] holds for it too. Whether a start node was skipped or ran can
// depend on goroutine scheduling (see the package documentation).
func WasSkipped(t testing.TB, rep *asynctool.Report, id string) bool {
	t.Helper()
	n, ok := node(t, rep, id)
	if !ok {
		return false
	}
	if n.Ran || n.Err != asynctool.ErrSkipped {
		t.Errorf("%q ended %v/%v, ran=%v, err=%v, want it skipped", id, n.State, n.Result, n.Ran, n.Err)
		return false
	}
	return true
}

// NotTaken checks that the node was a branch not taken: it never started
// and its error is [asynctool.ErrNotTaken] itself (not an error that
// wraps it), because its join ([asynctool.When], a custom join's
// DecideSkip) decided not to run it or an upstream it needed was not
// taken. Such a node also ends in error, so [Failed] holds for it too.
func NotTaken(t testing.TB, rep *asynctool.Report, id string) bool {
	t.Helper()
	n, ok := node(t, rep, id)
	if !ok {
		return false
	}
	if n.Ran || n.Err != asynctool.ErrNotTaken || n.Result != asynctool.ResultException {
		t.Errorf("%q ended %v/%v, ran=%v, err=%v, want it not taken", id, n.State, n.Result, n.Ran, n.Err)
		return false
	}
	return true
}

// Succeeded checks that the node finished with a result from its worker.
func Succeeded(t testing.TB, rep *asynctool.Report, id string) bool {
	t.Helper()
	n, ok := node(t, rep, id)
	if !ok {
		return false
	}
	if n.State != asynctool.StateFinish || n.Result != asynctool.ResultSuccess {
		t.Errorf("%q ended %v/%v (%s, err=%v), want finish/success", id, n.State, n.Result, n.Reason, n.Err)
		return false
	}
	return true
}

// Failed checks that the node ended in error (failed, panicked, failed
// upstream, skipped, not taken or timed out) with an error that matches target under
// errors.Is; a nil target matches any error.
func Failed(t testing.TB, rep *asynctool.Report, id string, target error) bool {
	t.Helper()
	n, ok := node(t, rep, id)
	if !ok {
		return false
	}
	if n.State != asynctool.StateError {
		t.Errorf("%q ended %v/%v, want error", id, n.State, n.Result)
		return false
	}
	if target != nil && !errors.Is(n.Err, target) {
		t.Errorf("%q failed with %v, want an error matching %v", id, n.Err, target)
		return false
	}
	return true
}

// TimedOut checks that the node ended with asynctool.ResultTimeout: by
// the group deadline, the run's cancellation, its own
// WorkerWrapper.Timeout, the run's end with its
// WorkerWrapper.EndsRun nodes (its error then wraps
// asynctool.ErrRunEnded), or, for an item of a ForEach ("prices/2"),
// its ForEach's Budget (a *asynctool.BudgetError).
func TimedOut(t testing.TB, rep *asynctool.Report, id string) bool {
	t.Helper()
	n, ok := node(t, rep, id)
	if !ok {
		return false
	}
	if n.Result != asynctool.ResultTimeout {
		t.Errorf("%q ended %v/%v (err=%v), want timeout", id, n.State, n.Result, n.Err)
		return false
	}
	return true
}
