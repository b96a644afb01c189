package asynctool

import (
	"strings"
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
//
// recall runs for every node a single-use run shares, on the goroutine
// that is about to start their helpers, so it reads a snapshot without a
// lock: ids holds an immutable index from id to slot, replaced (under mu)
// only when a sampled run brings ids not remembered yet, and what each
// slot learned is an atomic in quick, which every index shares.
type history struct {
	runs atomic.Uint64 // single-use runs started, for sample
	ids  atomic.Pointer[historyIndex]
	mu   sync.Mutex // held by add, which replaces ids
}

// historyIndex maps the ids remembered to their slots in quick, which
// the indexes of one history share. Its keys share one string, so that
// looking up a run's ids reads bytes next to each other rather than
// strings spread over the heap (and keeps no request's strings alive).
type historyIndex struct {
	slot  map[string]int32
	quick *[maxHistory]atomic.Bool
}

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
	x := h.ids.Load()
	if x == nil || n.core.id == "" {
		return
	}
	if s, ok := x.slot[n.core.id]; ok {
		n.quick.Store(x.quick[s].Load())
		n.known.Store(true)
	}
}

// record remembers what a sampled single-use run of p timed.
func (h *history) record(p *plan) {
	x := h.ids.Load()
	var added []int32
	for k := range p.nodes {
		n := &p.nodes[k]
		if n.core.id == "" || !n.known.Load() {
			continue
		}
		if x != nil {
			if s, ok := x.slot[n.core.id]; ok {
				x.quick[s].Store(n.quick.Load())
				continue
			}
			if len(x.slot) == maxHistory {
				continue
			}
		}
		added = append(added, int32(k))
	}
	if len(added) > 0 {
		h.add(p, added)
	}
}

// add remembers the ids of p's nodes added, which the index did not
// hold when record looked, as far as maxHistory allows. A plan's ids are
// unique (compile refuses duplicates), so added names each id once.
func (h *history) add(p *plan, added []int32) {
	h.mu.Lock()
	defer h.mu.Unlock()
	old := h.ids.Load()
	var keep map[string]int32
	var quick *[maxHistory]atomic.Bool
	if old != nil {
		keep, quick = old.slot, old.quick
	} else {
		quick = new([maxHistory]atomic.Bool)
	}
	ids := make([]string, 0, len(added))
	for _, k := range added {
		n := &p.nodes[k]
		if s, ok := keep[n.core.id]; ok { // another run added it since
			quick[s].Store(n.quick.Load())
			continue
		}
		if len(keep)+len(ids) == maxHistory {
			break
		}
		quick[len(keep)+len(ids)].Store(n.quick.Load())
		ids = append(ids, n.core.id)
	}
	if len(ids) == 0 {
		return
	}
	// One string holds every key, in slot order.
	var b strings.Builder
	all := make([]string, len(keep), len(keep)+len(ids))
	for id, s := range keep {
		all[s] = id
	}
	all = append(all, ids...)
	for _, id := range all {
		b.WriteString(id)
	}
	keys := b.String()
	next := &historyIndex{slot: make(map[string]int32, len(all)), quick: quick}
	off := 0
	for s, id := range all {
		next.slot[keys[off:off+len(id)]] = int32(s)
		off += len(id)
	}
	h.ids.Store(next)
}
