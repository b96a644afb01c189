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
	"github.com/asynctool-go/asynctool/benchmarks/internal/shapes"
)

// floor is limit plus what the library's contract asks of each node, as
// cheaply as we found, to tell how much of the library's distance from
// limit that contract costs and how much its implementation does. It is
// not a baseline of the issue's, and no target is measured against it.
//
// On top of limit:
//   - Every node has a state word, INIT → READY → WORKING → FINISH (or
//     ERROR), in which, as in the library, the count of upstreams ended
//     is kept while the node is in INIT: the end that completes the count
//     moves the node out of INIT in the same CAS, straight to WORKING if
//     the goroutine runs it next (the library's claim), to READY if it is
//     handed off, and a handed-off node is moved to WORKING by a CAS when
//     taken. The worker's end moves it on by another CAS. Those CASes are
//     what the library's deadline sweep races when it fails leftover
//     nodes; floor has no sweep, but a state moved by plain stores could
//     not have one. So a node of one upstream costs two CASes where limit
//     has one add, and one more if it is handed off.
//   - Its worker is called through the library's Worker interface with
//     the run's context, and its value is written to a per-run result
//     slot.
//   - The worker, its parameter and the result are the node's own, and
//     of the node's own types: the library's API gives every node its
//     own (NewWrapper(id, worker, param), for any P and R), so the
//     type-blind scheduler reaches them through code for the node's
//     types, which it can only call indirectly. floor does it as cheaply
//     as we found: the nodes of one (P, R) form a group (fgroup) that
//     keeps their workers, parameters and results in dense typed arrays,
//     and each node has a dense record of its group and its index there.
//     The scheduler calls into a group's typed code (fgroup.drive) for a
//     node, and that code goes on with the next node the goroutine runs
//     for as long as it is of the same group, calling the type-blind
//     step between nodes (floor.after) directly. So a node its goroutine
//     runs right after a predecessor of the same group costs no indirect
//     call but the worker's, and a node taken from the queue, or of
//     another group than the node before, one more. The library
//     keeps them in each node's wrapper, a separate object, and calls its
//     execute method through an interface for every node. In the
//     benchmarks every node is of one type: floor has one group, and
//     floor-2groups puts the nodes in two groups by the parity of their
//     index, which on the chain changes group at every step (both groups
//     are of one Go type, so the indirect call always reaches the same
//     code, which groups of different types would not). The
//     fourteenth session's floor called one worker for every node, with
//     the node's index as its parameter, and kept results in one []int64;
//     the fifteenth's first two versions read typed records per node and
//     called one group's method per node (see docs/perf.md).
//   - The run's deadline is looked at before the worker starts (a node
//     not started by then never starts) and after it returns (a late
//     value is not a result), as a flag that context.AfterFunc sets. As
//     in the library, the look before is skipped for a node the same
//     goroutine runs right after a look that found the run alive (the
//     library's worklist.fresh). The flag is set by a goroutine some time
//     after the context is done, so it is a little cheaper than an exact
//     check, such as the library's non-blocking receive on Done: floor
//     understates that cost.
//   - Each run makes its own context with the group deadline, and its
//     own flag.
//
// A run of the library returns at its deadline even if a worker ignores
// its ctx, and Go cannot abandon a goroutine that runs one, so the
// caller's goroutine runs no worker: it hands the roots to the pool and
// waits. floor does the same. With inline set it runs the last root on the
// caller, as limit does (for the chain, every node), which shows what the
// two hand-offs cost: about nothing with one CPU, and with two,
// presumably, the runtime's waking of the idle one.
//
// Left out, though the library has them: callbacks, hooks, joins other
// than all-succeeded, the short-circuit rule, failure handling (a worker's
// error ends its node in ERROR like a timeout, and its successors still
// run), default values, panics, retries, per-node timeouts, concurrent
// runs of one plan, the pool's bounds and blocking nodes. As in limit the
// run ends with its last sink, which is enough while nothing fails; the
// library counts every node's end, because a failure can end a sink
// before its other upstreams (a node that claims its successor hands its
// end on to it, so the count costs nothing on a chain, but an add for
// each node that claims none: the fan's middle nodes, the tree's leaves),
// and floor understates that cost. floor waits for every worker, where the
// library returns at the deadline and ends the nodes left by a sweep.
type floor struct {
	s       *shape
	nodes   []fnode                 // each node's group and its index there
	groups  []*fgroup[int32, int64] // node i is in groups[i%len(groups)], for the tests
	need    []int32                 // upstreams of each node
	state   []atomic.Int32          // state (low bits) and, in fInit, upstreams ended
	sinks   atomic.Int32            // sinks not ended yet; the run ends at zero
	expired *atomic.Bool            // the current run's, set after its context is done
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
	fReady
	fWorking
	fFinish
	fError // the deadline, or the worker's error

	fStateBits       = 3
	fStateMask int32 = 1<<fStateBits - 1
)

// fnode is a node's group and its index in the group.
type fnode struct {
	g fdriver
	k int32
}

// fdriver is the typed code of a group, which the scheduler calls
// through this interface.
type fdriver interface {
	// drive runs node i, which is in fWorking and of this group, and
	// then the next node this goroutine runs for as long as it is of this
	// group too. It returns the next node, of another group, or -1, and
	// fresh (see exec).
	drive(f *floor, i int32, fresh bool, scratch *[]int32) (next int32, isFresh bool)
}

// fgroup holds the workers, parameters and results of the nodes of one
// (P, R), in dense arrays.
type fgroup[P, R any] struct {
	workers []asynctool.Worker[P, R]
	params  []P
	results []R // in the current run
}

func (g *fgroup[P, R]) drive(f *floor, i int32, fresh bool, scratch *[]int32) (int32, bool) {
	for {
		fresh = g.exec(f, i, fresh)
		next := f.after(i, scratch)
		if next < 0 || f.nodes[next].g != fdriver(g) {
			return next, fresh
		}
		i = next
	}
}

// exec runs node i's worker unless the deadline has passed; the node is
// in fWorking. A node that starts or returns after the deadline, or whose
// worker fails, ends in fError, and a late value is not a result. fresh
// says that this goroutine found the run alive a moment ago, after the
// previous node's worker returned, so the look before the start is
// skipped. exec reports whether it looked after the worker returned and
// found the run alive.
func (g *fgroup[P, R]) exec(f *floor, i int32, fresh bool) bool {
	st := &f.state[i]
	if !fresh && f.expired.Load() {
		st.CompareAndSwap(fWorking, fError)
		return false
	}
	k := f.nodes[i].k
	v, err := g.workers[k].Action(f.ctx, g.params[k], asynctool.Wrappers{})
	if f.expired.Load() {
		st.CompareAndSwap(fWorking, fError)
		return false
	}
	if err != nil {
		st.CompareAndSwap(fWorking, fError)
		return true
	}
	g.results[k] = v
	st.CompareAndSwap(fWorking, fFinish)
	return true
}

// newFloor starts workers goroutines ready to run s with worker as every
// node's worker, called with the node's index as its parameter, whose
// values the run keeps as results. Node i is in group i%groups. Call
// close to stop them.
func newFloor(s *shape, worker asynctool.Worker[int32, int64], workers int, inline bool, groups int) *floor {
	maxOut := 0
	need := make([]int32, s.N())
	for i, ss := range s.Succ {
		maxOut = max(maxOut, len(ss))
		need[i] = int32(len(s.Deps[i]))
	}
	gs := make([]*fgroup[int32, int64], groups)
	for gi := range gs {
		size := (s.N() - gi + groups - 1) / groups
		gs[gi] = &fgroup[int32, int64]{
			workers: make([]asynctool.Worker[int32, int64], size),
			params:  make([]int32, size),
			results: make([]int64, size),
		}
	}
	nodes := make([]fnode, s.N())
	for i := range nodes {
		g, k := gs[i%groups], i/groups
		g.workers[k], g.params[k] = worker, int32(i)
		nodes[i] = fnode{g: g, k: int32(k)}
	}
	f := &floor{
		s:       s,
		nodes:   nodes,
		groups:  gs,
		need:    need,
		state:   make([]atomic.Int32, s.N()),
		buf:     make([]int32, s.N()),
		work:    make(chan []int32, s.N()),
		done:    make(chan struct{}, 1),
		scratch: make([]int32, 0, maxOut+len(s.Roots)),
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
					if f.state[i].CompareAndSwap(fReady, fWorking) {
						f.drive(i, &scratch)
					}
				}
			}
		}()
	}
	return f
}

// run runs the shape once under a group deadline and returns when every
// node has ended.
func (f *floor) run() {
	for i := range f.state {
		w := fInit
		if f.need[i] == 0 {
			w = fReady
		}
		f.state[i].Store(w)
	}
	f.cursor.Store(0)
	f.sinks.Store(int32(len(f.s.Sinks)))
	// A flag per run: the AfterFunc of a run whose deadline passed may
	// set its flag after that run has returned.
	expired := new(atomic.Bool)
	f.expired = expired
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	stop := context.AfterFunc(ctx, func() { expired.Store(true) })
	f.ctx = ctx
	if roots := f.s.Roots; f.inline {
		f.handOff(roots[:len(roots)-1])
		last := roots[len(roots)-1]
		if f.state[last].CompareAndSwap(fReady, fWorking) {
			f.drive(last, &f.scratch)
		}
		<-f.done
	} else {
		f.handOff(roots)
		select {
		case <-f.done:
		case <-ctx.Done():
			// The library returns here and leaves the nodes to its
			// sweep. floor waits for its workers; a benchmark never gets
			// here.
			<-f.done
		}
	}
	stop()
	cancel()
}

// arrive counts one upstream end into node s's state word; the end that
// completes the count moves s to the state to, and arrive reports it.
func (f *floor) arrive(s, to int32) bool {
	st := &f.state[s]
	for {
		w := st.Load()
		if w&fStateMask != fInit {
			return false
		}
		c := w>>fStateBits + 1
		nw := c << fStateBits
		if c == f.need[s] {
			nw = to
		}
		if st.CompareAndSwap(w, nw) {
			return nw == to
		}
	}
}

// drive runs node i, which is in fWorking, and then, for as long as there
// is one, the first successor it made ready, which the same CAS claims;
// the others are handed off. Each node runs in its group's typed code,
// which goes on by itself while the next node is of the same group.
func (f *floor) drive(i int32, scratch *[]int32) {
	fresh := false
	for i >= 0 {
		i, fresh = f.nodes[i].g.drive(f, i, fresh, scratch)
	}
}

// after counts node i's end into its successors, hands off those it made
// ready but the first, and returns that one, which the same CAS claimed
// for this goroutine, or -1. The end of a sink may end the run.
func (f *floor) after(i int32, scratch *[]int32) int32 {
	succ := f.s.Succ[i]
	if len(succ) == 0 {
		if f.sinks.Add(-1) == 0 {
			f.done <- struct{}{}
		}
		return -1
	}
	ready := (*scratch)[:0]
	next := int32(-1)
	for _, s := range succ {
		if next < 0 {
			if f.arrive(s, fWorking) {
				next = s
			}
		} else if f.arrive(s, fReady) {
			ready = append(ready, s)
		}
	}
	*scratch = ready
	f.handOff(ready)
	return next
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

func implFloor(inline bool, groups int) impl {
	name := "floor"
	if inline {
		name += "-inline"
	}
	if groups > 1 {
		name += fmt.Sprintf("-%dgroups", groups)
	}
	return impl{name, func(b *testing.B, s *shape, vals []int64) func() {
		f := newFloor(s, newLibGraph(s, vals).worker, runtime.GOMAXPROCS(0), inline, groups)
		b.Cleanup(f.close)
		return f.run
	}}
}

// BenchmarkFloor puts floor between limit and the library's run of a
// plan on the 1,000-node shapes (see floor).
func BenchmarkFloor(b *testing.B) {
	impls := []impl{implLimit, implFloor(true, 1), implFloor(false, 1), implFloor(false, 2), implLibraryRun}
	for _, s := range shapes.Graph() {
		b.Run(fmt.Sprintf("shape=%s/n=%d", s.Name, s.N()), func(b *testing.B) {
			runImpls(b, s, impls)
		})
	}
}

// TestFloorDeadline checks floor's deadline path, whose cost BenchmarkFloor
// counts: nodes that start or return after the deadline end in fError,
// and the run still ends. Then it checks that the next run on the same
// floor has a flag of its own: a late AfterFunc of the first run, which
// its workers stand in for by setting the first run's flag, does not end
// the second run's nodes. In a synctest bubble, nodes that do not sleep
// take no time.
func TestFloorDeadline(t *testing.T) {
	s := shapes.Chain(20)
	for _, c := range []struct {
		inline bool
		groups int
	}{{false, 1}, {true, 1}, {false, 2}} {
		inline := c.inline
		synctest.Test(t, func(t *testing.T) {
			var calls atomic.Int32
			var stale atomic.Pointer[atomic.Bool]
			worker := asynctool.WorkerFunc[int32, int64](func(context.Context, int32, asynctool.Wrappers) (int64, error) {
				if calls.Add(1) == 3 {
					time.Sleep(20 * time.Millisecond) // past the deadline
				}
				if flag := stale.Load(); flag != nil {
					flag.Store(true)
				}
				return 1, nil
			})
			f := newFloor(s, worker, 2, inline, c.groups)
			defer f.close()
			f.timeout = time.Millisecond
			f.run()
			want := slices.Repeat([]int32{fError}, s.N())
			want[0], want[1] = fFinish, fFinish
			assert.Equal(t, want, states(f), "inline=%v groups=%d", inline, c.groups)
			assert.Equal(t, int32(3), calls.Load(), "inline=%v groups=%d: no worker starts after the deadline", inline, c.groups)
			values := make([]int64, s.N())
			values[0], values[1] = 1, 1 // node 2's value came late: not a result
			assert.Equal(t, values, f.values(), "inline=%v groups=%d: results", inline, c.groups)

			stale.Store(f.expired)
			f.timeout = time.Minute
			f.run()
			assert.Equal(t, slices.Repeat([]int32{fFinish}, s.N()), states(f), "inline=%v groups=%d: the next run", inline, c.groups)
			assert.Equal(t, slices.Repeat([]int64{1}, s.N()), f.values(), "inline=%v groups=%d: the next run's results", inline, c.groups)
		})
	}
}

// values returns each node's result in the last run.
func (f *floor) values() []int64 {
	out := make([]int64, len(f.nodes))
	for i := range out {
		out[i] = f.groups[i%len(f.groups)].results[f.nodes[i].k]
	}
	return out
}

// set makes worker node i's worker and param its parameter.
func (f *floor) set(i int, worker asynctool.Worker[int32, int64], param int32) {
	g, k := f.groups[i%len(f.groups)], f.nodes[i].k
	g.workers[k], g.params[k] = worker, param
}

// clearValues zeroes every node's result.
func (f *floor) clearValues() {
	for _, g := range f.groups {
		clear(g.results)
	}
}

// states returns the state of each of f's nodes.
func states(f *floor) []int32 {
	out := make([]int32, len(f.state))
	for i := range f.state {
		out[i] = f.state[i].Load() & fStateMask
	}
	return out
}
