package benchmarks

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
)

// runByHand runs s the way a Go programmer does without a library: one
// goroutine per node under an errgroup bound to the request's context with
// a group deadline; each goroutine waits on its dependencies' done
// channels (or the context), computes, and closes its own channel.
func runByHand(ctx context.Context, s *shape, vals []int64, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	g, ctx := errgroup.WithContext(ctx)
	done := make([]chan struct{}, s.N())
	for i := range done {
		done[i] = make(chan struct{})
	}
	for i := range s.N() {
		g.Go(func() error {
			for _, d := range s.Deps[i] {
				select {
				case <-done[d]:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			s.Work(vals, int32(i))
			close(done[i])
			return nil
		})
	}
	return g.Wait()
}

// limit is the lower bound the library is measured against: a minimal
// scheduler for one fixed shape with nothing but what scheduling needs.
// Each node has an atomic counter of dependencies not yet done; the
// goroutine that finishes a node runs its last newly ready successor
// inline and hands the others, split into at most one batch per worker,
// to a fixed set of worker goroutines over a channel. Per-run state is
// reset, never reallocated, so a run allocates nothing. There are no
// callbacks, no states, no deadline, no error handling, and one run at a
// time.
type limit struct {
	s         *shape
	vals      []int64
	pending   []atomic.Int32 // dependencies of each node not done yet
	sinksLeft atomic.Int32   // sinks not done yet; the run ends at zero
	buf       []int32        // backing store of every batch handed off in a run
	cursor    atomic.Int32   // how much of buf the run has used
	work      chan []int32   // batches of ready nodes for the workers
	done      chan struct{}  // receives once per run, when the last sink is done
	scratch   []int32        // the caller's list of ready nodes
	workers   int
	wg        sync.WaitGroup
}

// newLimit starts workers goroutines ready to run s; vals receives the
// nodes' values. Call close to stop them.
func newLimit(s *shape, vals []int64, workers int) *limit {
	maxOut := 0
	for _, ss := range s.Succ {
		maxOut = max(maxOut, len(ss))
	}
	l := &limit{
		s:       s,
		vals:    vals,
		pending: make([]atomic.Int32, s.N()),
		buf:     make([]int32, s.N()),
		// Every node is handed off at most once, in a batch of at least
		// one, so a send never blocks.
		work:    make(chan []int32, s.N()),
		done:    make(chan struct{}, 1),
		scratch: make([]int32, 0, maxOut+len(s.Roots)),
		workers: workers,
	}
	for range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			scratch := make([]int32, 0, maxOut)
			for batch := range l.work {
				for _, i := range batch {
					l.drive(i, &scratch)
				}
			}
		}()
	}
	return l
}

// run runs the shape once and returns when every node is done. The
// caller hands the roots but one to the workers and drives the last one.
func (l *limit) run() {
	for i := range l.pending {
		l.pending[i].Store(int32(len(l.s.Deps[i])))
	}
	l.cursor.Store(0)
	l.sinksLeft.Store(int32(len(l.s.Sinks)))
	roots := l.s.Roots
	l.handOff(roots[:len(roots)-1])
	l.drive(roots[len(roots)-1], &l.scratch)
	<-l.done
}

// drive runs node i, then, for as long as there is one, the last
// successor it made ready; the others are handed off.
func (l *limit) drive(i int32, scratch *[]int32) {
	for i >= 0 {
		l.s.Work(l.vals, i)
		succ := l.s.Succ[i]
		if len(succ) == 0 {
			if l.sinksLeft.Add(-1) == 0 {
				l.done <- struct{}{}
			}
			return
		}
		ready := (*scratch)[:0]
		for _, s := range succ {
			if l.pending[s].Add(-1) == 0 {
				ready = append(ready, s)
			}
		}
		*scratch = ready
		i = -1
		if n := len(ready); n > 0 {
			i = ready[n-1]
			l.handOff(ready[:n-1])
		}
	}
}

// handOff copies ready into the run's buffer and sends it to the workers
// in at most one batch per worker.
func (l *limit) handOff(ready []int32) {
	k := int32(len(ready))
	if k == 0 {
		return
	}
	end := l.cursor.Add(k)
	b := l.buf[end-k : end : end]
	copy(b, ready)
	per := (len(b) + l.workers - 1) / l.workers
	for len(b) > 0 {
		m := min(per, len(b))
		l.work <- b[:m:m]
		b = b[m:]
	}
}

// close stops the workers and waits for them.
func (l *limit) close() {
	close(l.work)
	l.wg.Wait()
}
