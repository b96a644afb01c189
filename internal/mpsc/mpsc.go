// Package mpsc provides an unbounded, lock-free multi-producer
// single-consumer intake. Producers push one value at a time with a
// single compare-and-swap; the consumer takes everything pushed so far in
// one atomic swap and gets it back in push order. This is how a stream
// links appends from many goroutines in batches instead of taking a lock
// per append. (The serial executors keep a mutex-guarded double buffer
// instead, which allocates nothing per task.)
package mpsc

import "sync/atomic"

type node[T any] struct {
	value T
	next  *node[T]
}

// Queue is an intake of values of type T. Its zero value is an empty,
// open queue. Push is safe for concurrent use; TakeAll and Seal must be
// called by one goroutine at a time (the single consumer). A Queue must
// not be copied after first use.
type Queue[T any] struct {
	head   atomic.Pointer[node[T]] // most recent push first
	sealed node[T]                 // &sealed in head marks a sealed queue
}

// Push adds v. It reports whether the queue was empty before, so that the
// producer that makes it non-empty can wake the consumer, and whether v
// was added at all: it is not if the queue is sealed.
func (q *Queue[T]) Push(v T) (wasEmpty, ok bool) {
	n := &node[T]{value: v}
	for {
		h := q.head.Load()
		if h == &q.sealed {
			return false, false
		}
		n.next = h
		if q.head.CompareAndSwap(h, n) {
			return h == nil, true
		}
	}
}

// TakeAll removes every value pushed so far and appends them to buf in
// the order they were pushed.
func (q *Queue[T]) TakeAll(buf []T) []T {
	h := q.head.Load()
	if h == nil || h == &q.sealed {
		return buf
	}
	return appendReversed(buf, q.head.Swap(nil))
}

// Seal makes every later Push fail, and appends the values still in the
// queue to buf in push order. Sealing a sealed queue appends nothing.
func (q *Queue[T]) Seal(buf []T) []T {
	h := q.head.Swap(&q.sealed)
	if h == &q.sealed {
		return buf
	}
	return appendReversed(buf, h)
}

// Sealed reports whether Seal has been called.
func (q *Queue[T]) Sealed() bool {
	return q.head.Load() == &q.sealed
}

// appendReversed appends the list starting at h (newest first) to buf,
// oldest first.
func appendReversed[T any](buf []T, h *node[T]) []T {
	n := 0
	for p := h; p != nil; p = p.next {
		n++
	}
	start := len(buf)
	buf = append(buf, make([]T, n)...)
	for i, p := start+n-1, h; p != nil; i, p = i-1, p.next {
		buf[i] = p.value
	}
	return buf
}
