package asynctool

import (
	"slices"
	"sync"
)

// limiter bounds how many of a run's limited nodes work at once: a
// [ForEach]'s items, under its Limit. A limited node takes a slot when it
// starts and gives it back when it ends, so its retries and their
// backoffs keep it. When the run starts, the first roots of the list get
// the slots and the others are parked, still ready, in the list's order
// (admit); a node that later finds no slot free (one of a batch that
// another goroutine took too, see takeBatch) is parked as well, and the
// goroutine goes on with other work: no goroutine waits for a slot. The
// node that gives a slot back hands it to the first node parked, which
// the goroutine that ended it runs next (see finished), so the parked
// nodes start in the order they were parked, each as soon as a slot is
// free.
//
// Only exec starts a limited node: no goroutine claims one when its
// upstream ends (an item that a ForEach's Node made depend on another;
// see upstreamEndedFrom), and only a retry, which keeps the node's slot,
// runs one again.
type limiter struct {
	nodes  []rnode // the run's
	mu     sync.Mutex
	free   int
	parked []int32 // first in, first out, from head
	head   int
	// limited[i]: node i counts against the limit. holds[i]: it started
	// and has not ended. granted[i]: a slot was given to it (by admit, or
	// handed on while it was parked), for its next exec.
	limited, holds, granted []bool
}

// newLimiter limits the start nodes of r, which have not started, to n
// at a time.
func newLimiter(r *runState, n int, starts []Wrapper) *limiter {
	k := len(r.nodes)
	b := make([]bool, 3*k)
	l := &limiter{nodes: r.nodes, free: n, limited: b[:k:k], holds: b[k : 2*k : 2*k], granted: b[2*k:]}
	for _, w := range starts {
		l.limited[w.core().idx] = true
	}
	return l
}

// start moves limited node i from ready to working if it gets a slot,
// as exec's move would, and reports whether it did. Without a slot, i is
// parked; with one, a node that is no longer ready (another goroutine
// started it, or it ended) gives the slot on, into wl.
func (l *limiter) start(i int32, wl *worklist) bool {
	n := &l.nodes[i]
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.granted[i]:
		l.granted[i] = false
	case l.free > 0:
		l.free--
	default:
		if n.st() == sReady {
			l.parked = append(l.parked, i)
		}
		return false
	}
	if n.move(sReady, sWorking, startedBit) {
		l.holds[i] = true
		return true
	}
	l.handOn(wl)
	return false
}

// end gives back the slot of node i, which has ended, if it holds one,
// or was handed one and ended before it started (skipped, stopped).
func (l *limiter) end(i int32, wl *worklist) {
	if !l.limited[i] {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.holds[i] || l.granted[i] {
		l.holds[i], l.granted[i] = false, false
		l.handOn(wl)
	}
}

// handOn gives a slot to the first parked node still ready, which goes in
// wl.ready, or frees it; l.mu is held. A node parked twice (a batch's
// holder and a taker of the same node both found no slot) is handed one
// once; a node that has ended or started since it was parked is passed
// over, and if it starts between this check and its exec, start hands
// the slot on again.
func (l *limiter) handOn(wl *worklist) {
	for l.head < len(l.parked) {
		j := l.parked[l.head]
		l.head++
		if l.granted[j] || l.holds[j] || l.nodes[j].st() != sReady {
			continue
		}
		l.granted[j] = true
		wl.ready = append(wl.ready, j)
		return
	}
	l.parked, l.head = l.parked[:0], 0
	l.free++
}

// admit takes the run's first ready list (its roots, last first: see
// plan.startOrder): the limited ones get the free slots in the list's
// order, and those left are parked, in that order. It returns the list
// with the roots that got no slot taken out, so that the goroutine and
// the helpers that share it start only roots that may run now, and the
// others start in the list's order as slots are handed on.
func (l *limiter) admit(ready []int32) []int32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	keep := make([]int32, 0, len(ready))
	for k := len(ready) - 1; k >= 0; k-- { // in the list's order
		i := ready[k]
		switch {
		case !l.limited[i]:
		case l.granted[i] || l.holds[i]:
			// Admitted before: the list again, from the worklist that
			// salvage gave a new goroutine after a runtime.Goexit.
		case l.free > 0:
			l.free--
			l.granted[i] = true
		default:
			l.parked = append(l.parked, i)
			continue
		}
		keep = append(keep, i)
	}
	slices.Reverse(keep)
	return append(ready[:0], keep...)
}
