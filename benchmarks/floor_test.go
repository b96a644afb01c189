package benchmarks

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/asynctool-go/asynctool"
)

// floor is limit plus the least that the library's contract asks of each
// node, to tell how much of the library's distance from limit that
// contract costs and how much its implementation does: it is not a
// baseline of the issue's, and no target is measured against it.
//
// On top of limit, every node has a state word that moves INIT → WORKING
// → FINISH by CAS (so that a deadline or a short circuit could take the
// node instead, and so that a node runs once); its worker is called
// through the library's Worker interface with the run's context; the run's
// deadline is checked before the worker starts and after it returns (a
// flag that context.AfterFunc sets, cheaper than a select on Done); the
// value is written to a per-run result slot. Each run makes its own
// context with the group deadline. As in limit, the run ends with its
// last sink: with no failures and no short circuit every other node has
// ended by then (the library counts every node, because a failure can
// end a sink before its other upstreams). Nothing is added that the
// contract does not need: the state CASes are what a deadline sweep
// would race, and a successor's state is not looked at before its
// counter, since exec's CAS decides anyway.
//
// A run of the library returns at its deadline even if a worker blocks,
// so the caller's goroutine runs no worker: it hands the roots to the
// pool and waits. limit runs a root on the caller, which for the chain
// means every node and no hand-off at all. floor does as the library
// does; with inline set it runs the last root on the caller, as limit
// does, which shows what the two hand-offs cost.
//
// Left out, though the library has them: callbacks, hooks, must and
// optional dependencies and the other joins (limit's counter is the
// all-succeeded join), the short-circuit rule, failures and default
// values, panics, retries, per-node timeouts, several runs of one plan at
// once, the pool's bounds and blocking nodes.
type floor struct {
	s       *shape
	worker  asynctool.Worker[int32, int64]
	state   []atomic.Int32 // fInit, fWorking, fFinish
	pending []atomic.Int32 // dependencies of each node not done yet
	results []int64        // each node's value in the current run
	sinks   atomic.Int32   // sinks not ended yet; the run ends at zero
	expired atomic.Bool    // set when the run's context is done
	ctx     context.Context
	buf     []int32
	cursor  atomic.Int32
	work    chan []int32
	done    chan struct{}
	scratch []int32
	workers int
	inline  bool          // run the last root on the caller's goroutine
	timeout time.Duration // the group deadline: groupDeadline
	wg      sync.WaitGroup
}

const (
	fInit int32 = iota
	fWorking
	fFinish
	fTimeout
)

// newFloor starts workers goroutines ready to run s with worker, whose
// values the run keeps as results. Call close to stop them.
func newFloor(s *shape, worker asynctool.Worker[int32, int64], workers int, inline bool) *floor {
	maxOut := 0
	for _, ss := range s.succ {
		maxOut = max(maxOut, len(ss))
	}
	f := &floor{
		s:       s,
		worker:  worker,
		state:   make([]atomic.Int32, s.n()),
		pending: make([]atomic.Int32, s.n()),
		results: make([]int64, s.n()),
		buf:     make([]int32, s.n()),
		work:    make(chan []int32, s.n()),
		done:    make(chan struct{}, 1),
		scratch: make([]int32, 0, maxOut+len(s.roots)),
		workers: workers,
		inline:  inline,
		timeout: groupDeadline,
	}
	for range workers {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			scratch := make([]int32, 0, maxOut)
			for batch := range f.work {
				for _, i := range batch {
					f.drive(i, &scratch)
				}
			}
		}()
	}
	return f
}

// run runs the shape once under a group deadline and returns when every
// node has ended.
func (f *floor) run() {
	for i := range f.pending {
		f.pending[i].Store(int32(len(f.s.deps[i])))
		f.state[i].Store(fInit)
	}
	f.cursor.Store(0)
	f.sinks.Store(int32(len(f.s.sinks)))
	f.expired.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	stop := context.AfterFunc(ctx, func() { f.expired.Store(true) })
	f.ctx = ctx
	if roots := f.s.roots; f.inline {
		f.handOff(roots[:len(roots)-1])
		f.drive(roots[len(roots)-1], &f.scratch)
		<-f.done
	} else {
		f.handOff(roots)
		select {
		case <-f.done:
		case <-ctx.Done():
			// The library returns here and leaves the nodes to end as
			// timeouts; floor's are about to, and the next run needs
			// them to have.
			<-f.done
		}
	}
	stop()
	cancel()
}

// drive runs node i, then, for as long as there is one, the last
// successor it made ready; the others are handed off.
func (f *floor) drive(i int32, scratch *[]int32) {
	for i >= 0 {
		f.exec(i)
		succ := f.s.succ[i]
		if len(succ) == 0 {
			if f.sinks.Add(-1) == 0 {
				f.done <- struct{}{}
			}
			return
		}
		ready := (*scratch)[:0]
		for _, s := range succ {
			if f.pending[s].Add(-1) == 0 {
				ready = append(ready, s)
			}
		}
		*scratch = ready
		i = -1
		if n := len(ready); n > 0 {
			i = ready[n-1]
			f.handOff(ready[:n-1])
		}
	}
}

// exec runs node i's worker unless the deadline has passed. A node that
// starts or returns after the deadline ends as a timeout, and so do its
// successors, each as it is readied; a benchmark run never gets there.
func (f *floor) exec(i int32) {
	st := &f.state[i]
	if !st.CompareAndSwap(fInit, fWorking) {
		return
	}
	if f.expired.Load() {
		st.Store(fTimeout)
		return
	}
	v, err := f.worker.Action(f.ctx, i, asynctool.Wrappers{})
	if err != nil || f.expired.Load() {
		st.Store(fTimeout)
		return
	}
	f.results[i] = v
	st.CompareAndSwap(fWorking, fFinish)
}

// handOff is limit.handOff.
func (f *floor) handOff(ready []int32) {
	k := int32(len(ready))
	if k == 0 {
		return
	}
	end := f.cursor.Add(k)
	b := f.buf[end-k : end : end]
	copy(b, ready)
	per := (len(b) + f.workers - 1) / f.workers
	for len(b) > 0 {
		m := min(per, len(b))
		f.work <- b[:m:m]
		b = b[m:]
	}
}

// close stops the workers and waits for them.
func (f *floor) close() {
	close(f.work)
	f.wg.Wait()
}

func implFloor(inline bool) impl {
	name := "floor"
	if inline {
		name = "floor-inline"
	}
	return impl{name, func(b *testing.B, s *shape, vals []int64) func() {
		f := newFloor(s, newLibGraph(s, vals).worker, runtime.GOMAXPROCS(0), inline)
		b.Cleanup(f.close)
		return f.run
	}}
}

// BenchmarkFloor puts floor between limit and the library's run of a
// plan on the 1,000-node shapes (see floor).
func BenchmarkFloor(b *testing.B) {
	impls := []impl{implLimit, implFloor(true), implFloor(false), implLibraryRun}
	for _, s := range graphShapes() {
		b.Run(fmt.Sprintf("shape=%s/n=%d", s.name, s.n()), func(b *testing.B) {
			runImpls(b, s, impls)
		})
	}
}

// TestFloorDeadline checks floor's deadline path, whose cost BenchmarkFloor
// counts: nodes that start or return after the deadline end as timeouts,
// and the run still ends. In a synctest bubble, nodes that do not sleep
// take no time.
func TestFloorDeadline(t *testing.T) {
	s := chainShape(20)
	for _, inline := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			var calls atomic.Int32
			worker := asynctool.WorkerFunc[int32, int64](func(context.Context, int32, asynctool.Wrappers) (int64, error) {
				if calls.Add(1) == 3 {
					time.Sleep(20 * time.Millisecond) // past the deadline
				}
				return 1, nil
			})
			f := newFloor(s, worker, 2, inline)
			f.timeout = time.Millisecond
			f.run()
			f.close()
			var got []int32
			for i := range f.state {
				got = append(got, f.state[i].Load())
			}
			want := slices.Repeat([]int32{fTimeout}, s.n())
			want[0], want[1] = fFinish, fFinish
			assert.Equal(t, want, got, "inline=%v", inline)
			assert.Equal(t, int32(3), calls.Load(), "inline=%v: no worker starts after the deadline", inline)
		})
	}
}
