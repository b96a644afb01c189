package asynctool

import (
	"sync"
	"sync/atomic"
)

// history is what an Async remembers, by node id, of the nodes of its
// single-use runs: whether each one's Action was quick when it was last
// timed. A graph built per request has no plan to learn in, but its nodes
// usually keep their ids from one request to the next, so its runs can
// share ready nodes the way a plan's runs do (see Run.share): a goroutine
// each for nodes that block, one searching helper for quick ones. It
// steers only how many helper goroutines start, never what runs or when
// a run ends; a node whose id was last seen quick but now blocks only
// makes its siblings start one wake-up after another.
type history struct {
	runs atomic.Uint64 // single-use runs started, for sample
	size atomic.Int32  // ids remembered, at most maxHistory
	byID sync.Map      // node id → *timing
}

type timing struct{ quick atomic.Bool }

// maxHistory bounds the ids an Async remembers, for programs that give
// their nodes ids made per request.
const maxHistory = 4096

// sample reports whether the single-use run being started times its
// nodes: the first four of the Async and every 64th, as a plan does.
func (h *history) sample() bool {
	n := h.runs.Add(1)
	return n <= 4 || n%64 == 0
}

// recall marks node n of a single-use graph with its history, if its id
// has one. It is called for nodes about to be shared (see plan.notQuick),
// the only time a node's history matters, so that a run that shares few
// nodes (a chain) looks up few ids.
func (h *history) recall(n *pnode) {
	if n.core.id == "" || h.size.Load() == 0 {
		return
	}
	if v, ok := h.byID.Load(n.core.id); ok {
		n.quick.Store(v.(*timing).quick.Load())
		n.known.Store(true)
	}
}

// record remembers what a sampled single-use run of p timed.
func (h *history) record(p *plan) {
	for k := range p.nodes {
		n := &p.nodes[k]
		if n.core.id == "" || !n.known.Load() {
			continue
		}
		v, ok := h.byID.Load(n.core.id)
		if !ok {
			if h.size.Add(1) > maxHistory { // a place reserved, or none left
				h.size.Add(-1)
				continue
			}
			// Stored with its value: a recall must not find the id with
			// a value it never had.
			t := &timing{}
			t.quick.Store(n.quick.Load())
			if v, ok = h.byID.LoadOrStore(n.core.id, t); !ok {
				continue
			}
			h.size.Add(-1) // another run stored it first
		}
		v.(*timing).quick.Store(n.quick.Load())
	}
}
