package asynctool

import "errors"

// edge is a declared dependency: to depends on from.
type edge struct {
	from, to *nodeCore
	must     bool
}

// link records the edge from → to on both nodes, so that the graph can be
// walked forward from the start nodes and checked backwards for
// dependencies that cannot be reached.
func link(from, to *nodeCore, must bool, method string) {
	if from == nil || to == nil {
		self := to
		if self == nil {
			self = from
		}
		if self != nil && self.buildErr == nil {
			self.buildErr = graphErr(ErrNilWrapper, []string{self.id}, "%s on node %q got a nil wrapper", method, self.id)
		}
		return
	}
	e := &edge{from: from, to: to, must: must}
	from.out = append(from.out, e)
	to.in = append(to.in, e)
}

// The default join, evaluated incrementally each time an upstream ends:
//
//   - A node with must dependencies runs once all of them succeeded and
//     fails as soon as one fails. Its optional dependencies are ignored.
//   - A node whose dependencies are all optional runs on the first one
//     that succeeds and fails once all of them failed.
//
// mustLeft counts the successes still needed (the number of must
// dependencies, or 1 for an optional-only node); optLeft counts the
// optional dependencies of an optional-only node that have not failed.

// upstreamEnded updates the join of every successor of the node i that
// just ended, triggering or failing those whose join is now decided.
func (r *Run) upstreamEnded(i int32, ok bool, wl *worklist) {
	for _, e := range r.p.nodes[i].out {
		s := e.to
		sn := &r.nodes[s]
		if sn.state.Load() != sInit {
			continue // already decided
		}
		counts := e.must || r.p.nodes[s].nMust == 0
		switch {
		case !counts:
			// An optional dependency of a node with must dependencies.
		case ok:
			if sn.mustLeft.Add(-1) == 0 {
				r.trigger(s, i, wl)
			}
		case e.must:
			r.failFromUpstream(s, i, r.upstreamErr(i), wl)
		default:
			if sn.optLeft.Add(-1) == 0 {
				r.failFromUpstream(s, i, r.allUpstreamErr(s), wl)
			}
		}
	}
}

func (r *Run) upstreamErr(i int32) error {
	pn := &r.p.nodes[i]
	return &UpstreamError{ID: pn.id, Err: pn.impl.resultErr(r.nodes[i].slot)}
}

// allUpstreamErr joins the errors of every (failed) upstream of s.
func (r *Run) allUpstreamErr(s int32) error {
	in := r.p.nodes[s].in
	errs := make([]error, 0, len(in))
	for _, j := range in {
		errs = append(errs, r.upstreamErr(j))
	}
	return errors.Join(errs...)
}
