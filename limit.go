package asynctool

import "sync"

// limiter bounds how many of a run's limited nodes work at once: a
// [ForEach]'s items, under its Limit. A limited node takes a slot when it
// starts and gives it back when it ends, so its retries and their
// backoffs keep it. A node that finds no slot free is parked, still
// ready, and the goroutine goes on with other work: no goroutine waits
// for a slot. The node that gives a slot back hands it to the first node
// parked, which the goroutine that ended it runs next (see finished), so
// the parked nodes start in the order they were parked, each as soon as
// a slot is free.
//
// Only exec starts a limited node. Limited nodes are roots of their run
// (a ForEach's items), so no goroutine claims one when its upstream ends
// (see worklist.claim), and only a retry, which keeps the node's slot,
// runs one again.
type limiter struct {
	nodes  []rnode // the run's
	mu     sync.Mutex
	free   int
	parked []int32 // first in, first out, from head
	head   int
	// limited[i]: node i counts against the limit. holds[i]: it started
	// and has not ended. granted[i]: a slot was handed to it while it was
	// parked, for its next exec.
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

// reserve gives limited node i a slot, if one is free, for its next
// exec: the goroutine that shares the roots runs one of them itself,
// and reserves its slot before the helpers it starts take theirs.
func (l *limiter) reserve(i int32) {
	if !l.limited[i] {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.free > 0 && !l.granted[i] && !l.holds[i] {
		l.free--
		l.granted[i] = true
	}
}

// room says how many slots are free, for share's count of helpers.
func (l *limiter) room() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.free
}
