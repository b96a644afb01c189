package asynctool

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// The model stress below drives several Serials and a Keyed that share one
// executor with random operations from concurrent submitters, in a
// synctest bubble so that delays are exact, and checks what ran against
// the documented contracts: per Serial and per key, the order in which
// the submissions took effect, one task at a time, no delayed task before
// its due time nor after a cancel that reported true, every accepted task
// run once or dropped by a stop and counted so, refusals only once a stop
// has begun and always once one has returned, the panic handler before
// the next task, and the counters of Stats; for the shared Pool, its size,
// its full policy and its Close; and for a RunBatches on the same
// executor, its report.

// laneStressEnv sets the rounds of TestSerialsKeepSubmissionOrderUnderLoad;
// laneStressSeedEnv replays one round's operations (their interleaving is
// the scheduler's).
const (
	laneStressEnv     = "ASYNCTOOL_SERIAL_STRESS_RUNS"
	laneStressSeedEnv = "ASYNCTOOL_SERIAL_STRESS_SEED"
)

// laneStamp is when something happened: the bubble's clock, and a logical
// clock that orders events that happen one before the other.
type laneStamp struct {
	at time.Time
	n  uint64
}

// laneExecKind is the executor the round's Serials and Keyed share.
type laneExecKind int

const (
	laneGo laneExecKind = iota
	lanePoolCallerRuns
	lanePoolBlock
	lanePoolReject
	laneOuterSerial // another Serial, on goroutines
	laneInline      // runs each task inside Submit
	laneLate        // runs each task on a timer, refuses once closed
	laneExecKinds
)

func (k laneExecKind) String() string {
	return [...]string{"Go", "PoolCallerRuns", "PoolBlock", "PoolReject", "Serial", "Inline", "Late"}[k]
}

// What a task does when it runs.
const (
	laneTaskPlain = iota
	laneTaskPanic
	laneTaskGoexit
	laneTaskSpawn  // submits children to its own lane
	laneTaskCross  // submits a child to another lane
	laneTaskCancel // cancels a task of SubmitAfter
)

// How a group (a Serial or the Keyed) is stopped.
const (
	laneStopAtEnd            = iota // Shutdown once the submitters are done
	laneStopClose                   // Close at a random time
	laneStopShutdown                // Shutdown at a random time
	laneStopShutdownCtx             // Shutdown whose ctx may end first
	laneStopShutdownAndClose        // both at once
	laneStopTwoShutdowns            // two at once, then a third
	laneStopKinds
)

// laneTask is one task offered to a lane, and what became of it.
type laneTask struct {
	id     int
	lane   *laneState
	parent *laneTask // the task that submitted it, if any
	kind   int
	// delayed: submitted with SubmitAfter and d > 0.
	delayed    bool
	withCancel bool // SubmitAfter, whatever d
	d          time.Duration
	children   []laneChild

	// Written by the submitter once Submit returns.
	start, end laneStamp
	err        error
	cancel     func() bool
	target     *laneTask // the task a laneTaskCancel cancels
	// Cancels that reported true: by a submitter, or by a task.
	cancelled atomic.Int32
	// Written by the task.
	ran    atomic.Int32
	ranAt  laneStamp
	doneAt laneStamp // once it returned, panicked or exited
}

// laneChild is a task a running task submits.
type laneChild struct {
	lane  *laneState
	kind  int
	d     time.Duration
	after bool // SubmitAfter
}

func (tk *laneTask) String() string {
	return fmt.Sprintf("task %d: Submit %d-%d at %v, delay %v, parent %v",
		tk.id, tk.start.n, tk.end.n, tk.start.at.Format(time.StampMicro), tk.d, tk.parent != nil)
}

func (tk *laneTask) dueLo() time.Time { return tk.start.at.Add(tk.d) }
func (tk *laneTask) dueHi() time.Time { return tk.end.at.Add(tk.d) }
func (tk *laneTask) accepted() bool   { return tk.err == nil }

// lanePrecedes reports whether the contract makes a run before b, both
// accepted by the same lane: b was submitted from inside a; or both were
// queued at once and a's Submit returned before b's began; or a was
// queued (its Submit returned, or its delay passed) at a time of the
// bubble's clock before b was; or both were due at once and a's
// SubmitAfter returned before b's began. On a real clock a timer may
// fire late, so a delayed task need not precede a task submitted after
// its due time.
func lanePrecedes(a, b *laneTask, realClock bool) bool {
	switch {
	case b.parent == a:
		return true
	case !a.delayed && !b.delayed:
		return a.end.n < b.start.n
	case !a.delayed:
		return a.end.at.Before(b.dueLo())
	case !b.delayed:
		return !realClock && a.dueHi().Before(b.start.at)
	case a.dueHi().Before(b.dueLo()):
		return true
	}
	return a.dueLo().Equal(b.dueHi()) && a.dueHi().Equal(b.dueLo()) && a.end.n < b.start.n
}

// laneState is one lane: a Serial, or one key of the Keyed.
type laneState struct {
	name  string
	group *laneGroup
	key   int
	busy  atomic.Int32
	// Written only by the lane's tasks and its panic handler, without a
	// lock: the lane's order makes them safe (the race detector checks).
	log       []*laneTask
	panicsRun int
	handled   int
}

// laneGroup is a Serial or the Keyed, with how and when it is stopped.
type laneGroup struct {
	name    string
	serial  *Serial
	keyed   *Keyed[int]
	lanes   []*laneState
	handler bool
	calls   atomic.Uint64 // panic handler calls

	stop      int
	stopAfter time.Duration
	ctxAfter  time.Duration // laneStopShutdownCtx's timeout

	stopping atomic.Bool // set as the stop begins, for checkIdle
	// Written by the stopper.
	stopped        bool
	stopStart      laneStamp
	stopEnd        laneStamp
	shutdownErr    error
	shutdownCalled bool
}

// laneExecTask is one task handed to the shared executor.
type laneExecTask struct {
	start, end laneStamp
	err        error
	caller     uint64 // the goroutine that called Submit
	onCaller   atomic.Bool
	returned   atomic.Bool // Submit has returned
	ran        atomic.Int32
	doneAt     atomic.Uint64
}

type laneRound struct {
	t         *testing.T
	seed      uint64
	realClock bool // no bubble: timers fire late
	clock     atomic.Uint64

	kind     laneExecKind
	exec     Executor
	pool     *Pool
	poolSize int
	policy   FullPolicy
	outer    *Serial
	goexitOK bool // no loop of a lane runs on a submitter's goroutine
	crossOK  bool // a task may submit to another lane

	groups []*laneGroup
	lanes  []*laneState

	mu    sync.Mutex
	tasks []*laneTask
	execs []*laneExecTask
	// Submit calls of the wrapped executor under way, and their end: a
	// loop that carries on after a Goexit may still be in one once every
	// stop has returned (on the real clock, nothing waits for it).
	execsIn   int
	execsDone sync.Cond

	execBusy    atomic.Int32
	poolPanics  atomic.Uint64 // direct pool tasks that panicked
	poolHandled atomic.Uint64
	poolClose   bool
	poolAfter   time.Duration
	closeStart  laneStamp
	closeEnd    laneStamp
	poolClosed  bool
	poolClosing atomic.Bool // set as Close begins, for checkIdle
	poolIdle    time.Duration
	// When the last task run on a worker ended: a Pool's worker exits
	// between one and two idle timeouts after its last task.
	lastMu       sync.Mutex
	lastOnWorker time.Time

	lateMu      sync.Mutex // guards lateClosed, lateRand and lateHeld's Add
	lateClosed  bool
	lateRand    *rand.Rand
	lateHeld    sync.WaitGroup
	latePending atomic.Int32 // tasks the late executor has yet to run

	failures atomic.Int32
}

func (r *laneRound) stamp() laneStamp {
	return laneStamp{at: time.Now(), n: r.clock.Add(1)}
}

// fail reports a violation, at most 20 per round.
func (r *laneRound) fail(format string, args ...any) {
	if r.failures.Add(1) <= 20 {
		r.t.Errorf("seed %d, %v executor: %s", r.seed, r.kind, fmt.Sprintf(format, args...))
	}
}

// TestSerialsKeepSubmissionOrderUnderLoad runs random rounds of the model
// stress described above. ASYNCTOOL_SERIAL_STRESS_RUNS sets the rounds
// (150), ASYNCTOOL_SERIAL_STRESS_SEED replays one round.
func TestSerialsKeepSubmissionOrderUnderLoad(t *testing.T) {
	rounds := stressRuns(t, laneStressEnv, 150)
	base := rand.Uint64()
	if s := os.Getenv(laneStressSeedEnv); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: want a seed", laneStressSeedEnv, s)
		}
		base, rounds = seed, 1
	}
	for i := range rounds {
		seed := base + uint64(i)
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			// One round in five runs on the real clock, where timers
			// fire late and time passes inside a call.
			if seed%5 == 0 {
				laneStressRound(t, seed, true)
				return
			}
			synctest.Test(t, func(t *testing.T) { laneStressRound(t, seed, false) })
		})
		if t.Failed() {
			t.Logf("replay with %s=%d", laneStressSeedEnv, seed)
			return
		}
	}
}

func laneStressRound(t *testing.T, seed uint64, realClock bool) {
	rng := rand.New(rand.NewPCG(seed, 0x5e1a1))
	r := &laneRound{t: t, seed: seed, realClock: realClock, kind: laneExecKind(rng.IntN(int(laneExecKinds)))}
	r.setExecutor(rng)

	nSerials, nKeys := 2+rng.IntN(3), 2+rng.IntN(6)
	for i := range nSerials + 1 {
		g := &laneGroup{
			handler:   rng.IntN(4) != 0,
			stop:      rng.IntN(laneStopKinds),
			stopAfter: time.Duration(rng.IntN(8000)) * time.Microsecond,
			ctxAfter:  time.Duration(rng.IntN(4)) * time.Millisecond,
		}
		var opts []SerialOption
		if g.handler {
			opts = append(opts, SerialPanicHandler(func(pe *PanicError) {
				g.calls.Add(1)
				tk, ok := pe.Value.(*laneTask)
				if !ok {
					r.fail("%s: the panic handler got %v", g.name, pe.Value)
					return
				}
				tk.lane.handled++
			}))
		}
		if i < nSerials {
			g.name = fmt.Sprintf("serial %d", i)
			g.serial = NewSerial(r.exec, opts...)
			g.lanes = []*laneState{{name: g.name, group: g}}
		} else {
			g.name = "keyed"
			g.keyed = NewKeyed[int](r.exec, opts...)
			for k := range nKeys {
				g.lanes = append(g.lanes, &laneState{name: fmt.Sprintf("key %d", k), group: g, key: k})
			}
		}
		r.groups = append(r.groups, g)
		r.lanes = append(r.lanes, g.lanes...)
	}

	var wg sync.WaitGroup
	producers := 2 + rng.IntN(3)
	for p := range producers {
		prng := rand.New(rand.NewPCG(seed, uint64(p+1)))
		ops := 20 + prng.IntN(40)
		wg.Go(func() { r.produce(prng, ops) })
	}
	for _, g := range r.groups {
		if g.stop != laneStopAtEnd {
			wg.Go(func() {
				time.Sleep(g.stopAfter)
				r.stopGroup(g)
			})
		}
	}
	if r.poolClose {
		wg.Go(func() {
			time.Sleep(r.poolAfter)
			r.poolClosing.Store(true)
			r.closeStart = r.stamp()
			_ = r.pool.Close()
			r.closeEnd = r.stamp()
			r.poolClosed = true
		})
	}
	var batch *laneBatch
	if rng.IntN(4) != 0 {
		batch = newLaneBatch(r, rand.New(rand.NewPCG(seed, 0xba7c4)))
		wg.Go(batch.run)
	}
	if !realClock {
		wg.Go(func() {
			for range 3 {
				time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
				synctest.Wait()
				r.checkIdle(batch)
			}
		})
	}
	wg.Wait()
	if !realClock && r.pool != nil && !r.poolClosing.Load() {
		// Every worker must be gone two idle timeouts after the last
		// task on one.
		synctest.Wait()
		r.lastMu.Lock()
		last := r.lastOnWorker
		r.lastMu.Unlock()
		if !last.IsZero() {
			time.Sleep(time.Until(last.Add(2 * r.poolIdle)))
			synctest.Wait()
			r.checkIdle(batch)
		}
	}

	// Stop what is left, then the executor, and let the late drain loops
	// (which must find nothing) run.
	for _, g := range r.groups {
		if g.stop == laneStopAtEnd {
			r.stopGroup(g)
		}
	}
	for _, g := range r.groups {
		if g.serial != nil {
			g.serial.Close()
		} else {
			g.keyed.Close()
		}
	}
	if r.outer != nil {
		r.closeStart = r.stamp()
		if err := r.outer.Shutdown(context.Background()); err != nil {
			r.fail("the outer Serial's Shutdown: %v", err)
		}
		r.closeEnd = r.stamp()
	}
	if r.kind == laneLate {
		r.closeStart = r.stamp()
		r.lateMu.Lock()
		r.lateClosed = true
		r.lateMu.Unlock()
		r.closeEnd = r.stamp()
		r.lateHeld.Wait() // the loops it still holds run
	}
	if r.pool != nil && !r.poolClosed {
		r.closeStart = r.stamp()
		_ = r.pool.Close()
		r.closeEnd = r.stamp()
		r.poolClosed = true
	}
	if !realClock {
		synctest.Wait()
	}

	r.checkLanes()
	r.checkGroups()
	r.checkExecutor()
	if batch != nil {
		batch.check()
	}
}

// setExecutor makes the shared executor, wrapped to check what it
// promises: a Pool never runs more than its size on workers, runs a task
// on the caller only under CallerRuns, refuses only as its policy and
// Close say, and runs every task it accepted, before Close returns unless
// on a caller; another Serial runs one at a time.
func (r *laneRound) setExecutor(rng *rand.Rand) {
	var inner Executor
	switch r.kind {
	case laneGo:
		inner = GoExecutor{}
		r.goexitOK, r.crossOK = true, true
	case laneOuterSerial:
		r.outer = NewSerial(GoExecutor{})
		inner = r.outer
		r.goexitOK, r.crossOK = true, true
	case laneInline:
		r.exec = ExecutorFunc(func(task func()) error { task(); return nil })
		r.crossOK = true
		return
	case laneLate:
		r.lateRand = rand.New(rand.NewPCG(rng.Uint64(), 0))
		// A loop may start long after it was asked for, after its
		// Serial or Keyed has been stopped: it must find nothing. Once
		// closed, the executor refuses loops, as a closed Pool does.
		inner = ExecutorFunc(func(task func()) error {
			r.lateMu.Lock()
			defer r.lateMu.Unlock()
			if r.lateClosed {
				return ErrPoolClosed
			}
			r.latePending.Add(1)
			r.lateHeld.Add(1)
			time.AfterFunc(time.Duration(r.lateRand.IntN(3000))*time.Microsecond, func() {
				defer r.lateHeld.Done()
				defer r.latePending.Add(-1)
				task()
			})
			return nil
		})
		r.goexitOK, r.crossOK = true, true
	default:
		r.policy = [...]FullPolicy{lanePoolCallerRuns: CallerRuns, lanePoolBlock: Block, lanePoolReject: Reject}[r.kind]
		r.poolSize = 1 + rng.IntN(3)
		r.poolIdle = time.Duration(1+rng.IntN(3)) * time.Millisecond
		queue := rng.IntN(3)
		r.pool = NewPool(PoolSize(r.poolSize), PoolQueue(queue), PoolWhenFull(r.policy),
			PoolIdleTimeout(r.poolIdle),
			PoolPanicHandler(func(*PanicError) { r.poolHandled.Add(1) }))
		inner = r.pool
		r.goexitOK = r.policy != CallerRuns
		// Under Block a task that submits to an idle lane waits for a
		// worker while it holds one (see Serial): tasks submit only to
		// their own lane, which never asks the pool for a loop.
		r.crossOK = r.policy != Block
		r.poolClose = rng.IntN(3) == 0
		r.poolAfter = time.Duration(rng.IntN(8000)) * time.Microsecond
	}
	if r.kind == laneGo {
		r.exec = inner
		return
	}
	r.execsDone.L = &r.mu
	r.exec = ExecutorFunc(func(task func()) error {
		r.mu.Lock()
		r.execsIn++
		r.mu.Unlock()
		et := &laneExecTask{caller: goid()}
		et.start = r.stamp()
		err := inner.Submit(func() {
			// On the caller only while its Submit has not returned: a
			// worker (or the outer Serial's loop) that submitted the task
			// may take it from the queue later.
			if !et.returned.Load() && goid() == et.caller {
				et.onCaller.Store(true)
				if r.policy != CallerRuns {
					r.fail("the executor ran a task on the caller")
				}
			} else {
				limit := int32(1)
				switch {
				case r.pool != nil:
					limit = int32(r.poolSize)
				case r.kind == laneLate:
					limit = 1 << 30
				}
				if n := r.execBusy.Add(1); n > limit {
					r.fail("%d tasks ran at once on the executor's goroutines, above its %d", n, limit)
				}
				defer r.execBusy.Add(-1)
				defer func() {
					r.lastMu.Lock()
					r.lastOnWorker = time.Now()
					r.lastMu.Unlock()
				}()
			}
			et.ran.Add(1)
			defer func() { et.doneAt.Store(r.clock.Add(1)) }()
			task()
		})
		et.returned.Store(true)
		et.end = r.stamp()
		et.err = err
		r.mu.Lock()
		r.execs = append(r.execs, et)
		if r.execsIn--; r.execsIn == 0 {
			r.execsDone.Broadcast()
		}
		r.mu.Unlock()
		return err
	})
}

// produce runs ops random operations: submissions, cancels, tasks handed
// to the executor directly, and pauses that let the bubble's clock move.
func (r *laneRound) produce(rng *rand.Rand, ops int) {
	var cancels []*laneTask
	for range ops {
		switch op := rng.IntN(100); {
		case op < 50:
			tk := r.newTask(rng, r.lanes[rng.IntN(len(r.lanes))], nil, true)
			if tk.kind == laneTaskCancel {
				if len(cancels) == 0 {
					tk.kind = laneTaskPlain
				} else {
					j := rng.IntN(len(cancels))
					tk.target = cancels[j]
					cancels[j] = cancels[len(cancels)-1]
					cancels = cancels[:len(cancels)-1]
				}
			}
			r.submit(tk)
			if tk.cancel != nil {
				cancels = append(cancels, tk)
			}
		case op < 65:
			if len(cancels) == 0 {
				continue
			}
			j := rng.IntN(len(cancels))
			tk := cancels[j]
			cancels[j] = cancels[len(cancels)-1]
			cancels = cancels[:len(cancels)-1]
			r.cancelTask(tk, rng.IntN(4) == 0)
		case op < 72:
			if r.pool != nil {
				r.submitDirect(rng)
			}
		default:
			if d := rng.IntN(1000); d < 100 {
				runtime.Gosched()
			} else {
				time.Sleep(time.Duration(d) * time.Microsecond)
			}
		}
	}
}

// cancelTask calls tk's cancel, twice if twice: the second must report
// false.
func (r *laneRound) cancelTask(tk *laneTask, twice bool) {
	if tk.cancel() {
		tk.cancelled.Add(1)
	}
	if twice && tk.cancel() {
		tk.cancelled.Add(1)
		r.fail("%s: task %d: a second cancel reported true", tk.lane.name, tk.id)
	}
}

// submitDirect hands the pool a task of its own, which may panic, or
// call runtime.Goexit where that ends no submitter.
func (r *laneRound) submitDirect(rng *rand.Rand) {
	kind := rng.IntN(10)
	_ = r.exec.Submit(func() {
		switch {
		case kind == 0:
			r.poolPanics.Add(1)
			panic("direct")
		case kind == 1 && r.policy != CallerRuns:
			runtime.Goexit()
		}
	})
}

// newTask makes a task for lane l, and what it submits when it runs.
func (r *laneRound) newTask(rng *rand.Rand, l *laneState, parent *laneTask, top bool) *laneTask {
	tk := &laneTask{lane: l, parent: parent, kind: laneTaskPlain}
	switch k := rng.IntN(100); {
	case k < 8:
		tk.kind = laneTaskPanic
	case k < 13 && r.goexitOK:
		tk.kind = laneTaskGoexit
	case k < 25 && top:
		tk.kind = laneTaskSpawn
		for range 1 + rng.IntN(2) {
			c := laneChild{lane: l, kind: laneTaskPlain}
			if rng.IntN(5) == 0 {
				c.kind = laneTaskPanic
			}
			if l.group.serial != nil && rng.IntN(3) == 0 {
				c.after, c.d = true, time.Duration(rng.IntN(3))*time.Millisecond
			}
			tk.children = append(tk.children, c)
		}
	case k < 32 && top && r.crossOK:
		tk.kind = laneTaskCross
		tk.children = []laneChild{{lane: r.lanes[rng.IntN(len(r.lanes))], kind: laneTaskPlain}}
	case k < 40 && top:
		tk.kind = laneTaskCancel // its submitter picks the target
	}
	if l.group.serial != nil && rng.IntN(2) == 0 {
		tk.withCancel = true
		if rng.IntN(5) != 0 {
			tk.d = time.Duration(1+rng.IntN(4000)) * time.Microsecond
		} else {
			tk.d = -time.Duration(rng.IntN(2)) * time.Millisecond
		}
	}
	r.register(tk)
	return tk
}

func (r *laneRound) register(tk *laneTask) {
	tk.delayed = tk.withCancel && tk.d > 0
	if !tk.delayed {
		tk.d = 0 // queued at once: due as submitted
	}
	r.mu.Lock()
	tk.id = len(r.tasks)
	r.tasks = append(r.tasks, tk)
	r.mu.Unlock()
}

// submit offers tk to its lane.
func (r *laneRound) submit(tk *laneTask) {
	g := tk.lane.group
	fn := r.body(tk)
	tk.start = r.stamp()
	switch {
	case g.keyed != nil:
		tk.err = g.keyed.Submit(tk.lane.key, fn)
	case tk.withCancel:
		tk.cancel, tk.err = g.serial.SubmitAfter(tk.d, fn)
		if (tk.cancel == nil) != (tk.err != nil) {
			r.fail("%s: SubmitAfter returned cancel %v with error %v", g.name, tk.cancel != nil, tk.err)
		}
	default:
		tk.err = g.serial.Submit(fn)
	}
	tk.end = r.stamp()
}

// body is tk's task.
func (r *laneRound) body(tk *laneTask) func() {
	return func() {
		l := tk.lane
		if l.busy.Add(1) != 1 {
			r.fail("%s: two tasks ran at once", l.name)
		}
		defer l.busy.Add(-1)
		if l.group.handler && l.handled != l.panicsRun {
			r.fail("%s: task %d started before the panic handler had seen the panics before it (%d of %d)",
				l.name, tk.id, l.handled, l.panicsRun)
		}
		tk.ranAt = r.stamp()
		tk.ran.Add(1)
		defer func() { tk.doneAt = r.stamp() }()
		l.log = append(l.log, tk)
		switch tk.kind {
		case laneTaskCancel:
			r.cancelTask(tk.target, false)
		case laneTaskPanic:
			l.panicsRun++
			panic(tk)
		case laneTaskGoexit:
			runtime.Goexit()
		case laneTaskSpawn, laneTaskCross:
			for _, c := range tk.children {
				child := &laneTask{lane: c.lane, parent: tk, kind: c.kind, withCancel: c.after, d: c.d}
				r.register(child)
				r.submit(child)
			}
		}
	}
}

// stopGroup stops g as its stop says.
func (r *laneRound) stopGroup(g *laneGroup) {
	closeFn, shutdown := func() { g.keyed.Close() }, g.keyed.Shutdown
	if g.serial != nil {
		closeFn, shutdown = g.serial.Close, g.serial.Shutdown
	}
	g.stopping.Store(true)
	g.stopStart = r.stamp()
	switch g.stop {
	case laneStopClose:
		closeFn()
	case laneStopAtEnd, laneStopShutdown:
		g.shutdownCalled = true
		g.shutdownErr = shutdown(context.Background())
		if g.shutdownErr != nil {
			r.fail("%s: Shutdown: %v", g.name, g.shutdownErr)
		}
	case laneStopShutdownCtx:
		ctx, cancel := context.WithTimeout(context.Background(), g.ctxAfter)
		g.shutdownCalled = true
		g.shutdownErr = shutdown(ctx)
		cancel()
		switch {
		case g.ctxAfter == 0 && !errors.Is(g.shutdownErr, context.DeadlineExceeded):
			r.fail("%s: Shutdown with a ctx already done returned %v", g.name, g.shutdownErr)
		case g.shutdownErr != nil && !errors.Is(g.shutdownErr, context.DeadlineExceeded):
			r.fail("%s: Shutdown: %v", g.name, g.shutdownErr)
		}
	case laneStopTwoShutdowns:
		// Shutdowns called together all return nil; one that begins
		// after another has finished returns ErrSerialClosed.
		var (
			wg         sync.WaitGroup
			start, end laneStamp
			err        error
		)
		wg.Go(func() {
			start = r.stamp()
			err = shutdown(context.Background())
			end = r.stamp()
		})
		g.shutdownCalled = true
		s0 := r.stamp()
		g.shutdownErr = shutdown(context.Background())
		e0 := r.stamp()
		wg.Wait()
		// "Finished" is when the other set its flag, which may be a
		// moment before it returned: the one that saw it must have
		// returned after the other began.
		if g.shutdownErr != nil && !(errors.Is(g.shutdownErr, ErrSerialClosed) && err == nil && e0.n > start.n) {
			r.fail("%s: the first of two Shutdowns: %v (the second: %v)", g.name, g.shutdownErr, err)
		}
		if err != nil && !(errors.Is(err, ErrSerialClosed) && g.shutdownErr == nil && end.n > s0.n) {
			r.fail("%s: the second of two Shutdowns: %v (the first: %v)", g.name, err, g.shutdownErr)
		}
		if err == nil {
			g.shutdownErr = nil // one of them returned nil: every task ran
		}
		if err := shutdown(context.Background()); !errors.Is(err, ErrSerialClosed) {
			r.fail("%s: a Shutdown after two: %v", g.name, err)
		}
	case laneStopShutdownAndClose:
		var wg sync.WaitGroup
		wg.Go(closeFn)
		g.shutdownCalled = true
		g.shutdownErr = shutdown(context.Background())
		wg.Wait()
		if g.shutdownErr != nil && !errors.Is(g.shutdownErr, ErrSerialClosed) {
			r.fail("%s: Shutdown beside Close: %v", g.name, g.shutdownErr)
		}
	}
	g.stopEnd = r.stamp()
	g.stopped = true
}

// checkIdle checks, while every goroutine of the round is durably
// blocked, the groups not yet stopping: unless a batch item holds the
// executor (it sleeps), every task accepted and due has run, nothing is
// queued, the delayed tasks are those not yet due, and Stats say so
// exactly; and nothing runs on the executor.
func (r *laneRound) checkIdle(batch *laneBatch) {
	if batch != nil && batch.inFlight.Load() != 0 || r.latePending.Load() != 0 {
		return
	}
	now := time.Now()
	if n := r.execBusy.Load(); n != 0 {
		r.fail("at %v, idle: %d tasks running on the executor", now, n)
	}
	if r.pool != nil && !r.poolClosing.Load() {
		st := r.pool.Stats()
		if st.Running != 0 || st.Queued != 0 || st.Workers > r.poolSize {
			r.fail("at %v, idle: pool Stats %+v", now, st)
		}
		r.lastMu.Lock()
		last := r.lastOnWorker
		r.lastMu.Unlock()
		switch idle := now.Sub(last); {
		case last.IsZero():
		case idle < r.poolIdle && st.Workers == 0:
			r.fail("at %v, idle: no worker left %v after the last task, with an idle timeout of %v", now, idle, r.poolIdle)
		case idle >= 2*r.poolIdle && st.Workers != 0:
			r.fail("at %v, idle: %d workers left %v after the last task, with an idle timeout of %v", now, st.Workers, idle, r.poolIdle)
		}
	}
	r.mu.Lock()
	tasks := r.tasks
	r.mu.Unlock()
	for _, g := range r.groups {
		if g.stopping.Load() {
			continue
		}
		var want SerialStats
		for _, tk := range tasks {
			if tk.lane.group != g || !tk.accepted() {
				continue
			}
			ran, cancelled := tk.ran.Load(), tk.cancelled.Load()
			switch {
			case ran == 1:
				want.Completed++
				if tk.kind == laneTaskPanic {
					want.Panicked++
				}
			case cancelled == 1:
			case tk.delayed && tk.dueLo().After(now):
				want.Delayed++
			default:
				r.fail("at %v, idle: %s: %s has not run", now, tk.lane.name, tk)
			}
			if cancelled == 1 {
				want.Cancelled++
			}
		}
		var st SerialStats
		if g.serial != nil {
			st = g.serial.Stats()
		} else {
			st = g.keyed.Stats()
		}
		if st != want {
			r.fail("at %v, idle: %s: Stats %+v, want %+v", now, g.name, st, want)
		}
	}
}

// checkLanes checks every task against its lane: refusals, runs, order,
// delays and cancels.
func (r *laneRound) checkLanes() {
	for _, tk := range r.tasks {
		g, l := tk.lane.group, tk.lane
		ran := tk.ran.Load()
		switch {
		case ran > 1:
			r.fail("%s: task %d ran %d times", l.name, tk.id, ran)
		case tk.err != nil && ran != 0:
			r.fail("%s: task %d ran although Submit returned %v", l.name, tk.id, tk.err)
		case tk.err != nil && !errors.Is(tk.err, ErrSerialClosed):
			r.fail("%s: task %d: Submit returned %v", l.name, tk.id, tk.err)
		case tk.err != nil && (!g.stopped || tk.end.n < g.stopStart.n):
			r.fail("%s: task %d was refused before any stop began", l.name, tk.id)
		case tk.err == nil && g.stopped && tk.start.n > g.stopEnd.n:
			r.fail("%s: task %d was accepted after the stop had returned", l.name, tk.id)
		case tk.cancelled.Load() > 1:
			r.fail("%s: task %d: two cancels reported true", l.name, tk.id)
		case tk.cancelled.Load() == 1 && ran != 0:
			r.fail("%s: task %d ran although its cancel reported true", l.name, tk.id)
		case ran == 1 && tk.ranAt.at.Before(tk.dueLo()):
			r.fail("%s: task %d ran %v before its delay of %v had passed", l.name, tk.id, tk.dueLo().Sub(tk.ranAt.at), tk.d)
		case ran == 1 && g.stopped && tk.doneAt.n > g.stopEnd.n:
			r.fail("%s: task %d ran after the stop had returned", l.name, tk.id)
		case tk.accepted() && tk.cancelled.Load() == 0 && ran == 0 && g.shutdownCalled && g.shutdownErr == nil:
			r.fail("%s: task %d never ran, yet Shutdown returned nil", l.name, tk.id)
		case ran == 1 && g.shutdownCalled && g.shutdownErr == nil && tk.ranAt.n > g.stopEnd.n:
			r.fail("%s: task %d ran after Shutdown had returned nil", l.name, tk.id)
		}
	}
	byLane := map[*laneState][]*laneTask{}
	for _, tk := range r.tasks {
		if tk.accepted() {
			byLane[tk.lane] = append(byLane[tk.lane], tk)
		}
	}
	for _, l := range r.lanes {
		for i, b := range l.log {
			for _, a := range l.log[i+1:] {
				if lanePrecedes(a, b, r.realClock) {
					r.fail("%s: task %d ran before task %d, which was queued first (%s; %s)", l.name, b.id, a.id, b, a)
				}
			}
			// The tasks that ran are those queued before a stop dropped
			// the rest: whatever had to run before a task that ran has
			// run, unless cancelled.
			for _, a := range byLane[l] {
				if a.ran.Load() == 0 && a.cancelled.Load() == 0 && lanePrecedes(a, b, r.realClock) {
					r.fail("%s: task %d ran but task %d, queued before it, never did", l.name, b.id, a.id)
				}
			}
		}
	}
}

// checkGroups checks each Serial's and the Keyed's Stats against what ran.
func (r *laneRound) checkGroups() {
	for _, g := range r.groups {
		var accepted, ran, cancelled, panicked uint64
		for _, tk := range r.tasks {
			if tk.lane.group != g || !tk.accepted() {
				continue
			}
			accepted++
			if tk.ran.Load() == 1 {
				ran++
				if tk.kind == laneTaskPanic {
					panicked++
				}
			}
			if tk.cancelled.Load() == 1 {
				cancelled++
			}
		}
		var st SerialStats
		if g.serial != nil {
			st = g.serial.Stats()
		} else {
			st = g.keyed.Stats()
			assertNoKeyQueues(r.t, g.keyed)
		}
		want := SerialStats{
			Completed: ran,
			Cancelled: cancelled,
			Panicked:  panicked,
			Dropped:   accepted - ran - cancelled,
		}
		if st != want {
			r.fail("%s: Stats %+v, want %+v (stop %d, Shutdown %v)", g.name, st, want, g.stop, g.shutdownErr)
		}
		if g.shutdownCalled && g.shutdownErr == nil && st.Dropped != 0 {
			r.fail("%s: %d tasks dropped, yet Shutdown returned nil", g.name, st.Dropped)
		}
		if g.handler && g.calls.Load() != panicked {
			r.fail("%s: the panic handler was called %d times for %d panics", g.name, g.calls.Load(), panicked)
		}
	}
}

// checkExecutor checks the wrapped executor's tasks and a Pool's Stats.
func (r *laneRound) checkExecutor() {
	var ran, callerRan, rejected uint64
	r.mu.Lock()
	for r.execsIn > 0 {
		r.execsDone.Wait()
	}
	// A later Submit finds the executor closed and changes nothing.
	execs := r.execs
	r.mu.Unlock()
	for _, et := range execs {
		n := et.ran.Load()
		switch {
		case et.err == nil && n != 1:
			r.fail("an executor task accepted ran %d times", n)
		case et.err != nil && n != 0:
			r.fail("an executor task refused with %v ran", et.err)
		case errors.Is(et.err, ErrPoolFull) && r.policy != Reject:
			r.fail("the pool returned ErrPoolFull under %v", r.policy)
		case errors.Is(et.err, ErrPoolClosed) && (r.closeStart.n == 0 || et.end.n < r.closeStart.n):
			r.fail("the pool returned ErrPoolClosed before Close began")
		case errors.Is(et.err, ErrSerialClosed) && (r.outer == nil || r.closeStart.n == 0 || et.end.n < r.closeStart.n):
			r.fail("the outer Serial refused a task before its Shutdown began")
		case et.err != nil && !errors.Is(et.err, ErrPoolFull) && !errors.Is(et.err, ErrPoolClosed) && !errors.Is(et.err, ErrSerialClosed):
			r.fail("the executor returned %v", et.err)
		case et.err == nil && r.pool != nil && et.start.n > r.closeEnd.n:
			r.fail("the pool took a task after Close had returned")
		case et.err == nil && r.pool != nil && !et.onCaller.Load() && et.doneAt.Load() > r.closeEnd.n:
			r.fail("a task the pool took finished after Close had returned")
		}
		ran += uint64(n)
		if et.onCaller.Load() {
			callerRan++
		}
		if errors.Is(et.err, ErrPoolFull) {
			rejected++
		}
	}
	if r.pool == nil {
		return
	}
	want := PoolStats{Completed: ran, CallerRan: callerRan, Rejected: rejected, Panicked: r.poolPanics.Load()}
	if st := r.pool.Stats(); st != want {
		r.fail("pool Stats %+v, want %+v", st, want)
	}
	if r.poolHandled.Load() != r.poolPanics.Load() {
		r.fail("the pool's panic handler was called %d times for %d panics", r.poolHandled.Load(), r.poolPanics.Load())
	}
}

// laneBatch is a RunBatches on the round's executor, over pages of items
// each with what its process does, whose ctx may end and whose fetch may
// fail.
type laneBatch struct {
	r        *laneRound
	pages    [][]laneItem
	failAt   int // the page whose fetch fails, or -1
	cancelAt time.Duration
	goexitOK bool

	fetched    []int // the pages fetched without an error
	processed  []atomic.Int32
	inFlight   atomic.Int32
	atReturn   int32 // items processed when RunBatches returned
	report     BatchReport
	err        error
	cancelled  atomic.Bool
	fetchFails bool
}

type laneItem struct {
	id, page, index int
	outcome         int // 0 ok, 1 error, 2 panic, 3 Goexit
	pause           time.Duration
}

var (
	errLaneItem  = errors.New("item failed")
	errLaneFetch = errors.New("fetch failed")
	errLaneStop  = errors.New("batch stopped")
)

func newLaneBatch(r *laneRound, rng *rand.Rand) *laneBatch {
	b := &laneBatch{r: r, failAt: -1, goexitOK: r.kind == laneGo || r.kind == laneOuterSerial}
	id := 0
	for p := range rng.IntN(6) {
		var page []laneItem
		for i := range 1 + rng.IntN(6) {
			it := laneItem{id: id, page: p, index: i}
			switch o := rng.IntN(10); {
			case o == 0:
				it.outcome = 1
			case o == 1:
				it.outcome = 2
			case o == 2 && b.goexitOK:
				it.outcome = 3
			}
			if rng.IntN(3) == 0 {
				it.pause = time.Duration(rng.IntN(1000)) * time.Microsecond
			}
			page = append(page, it)
			id++
		}
		b.pages = append(b.pages, page)
	}
	b.processed = make([]atomic.Int32, id)
	if rng.IntN(4) == 0 {
		b.failAt = rng.IntN(len(b.pages) + 1)
	}
	if rng.IntN(2) == 0 {
		b.cancelAt = time.Duration(1+rng.IntN(5000)) * time.Microsecond
	}
	return b
}

func (b *laneBatch) run() {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	if b.cancelAt > 0 {
		stop := time.AfterFunc(b.cancelAt, func() {
			b.cancelled.Store(true)
			cancel(errLaneStop)
		})
		defer stop.Stop()
	}
	fetch := func(_ context.Context, page int) ([]laneItem, error) {
		if page == b.failAt {
			// Items returned with an error are ignored.
			b.fetchFails = true
			if page < len(b.pages) {
				return b.pages[page], errLaneFetch
			}
			return nil, errLaneFetch
		}
		if page >= len(b.pages) {
			return nil, nil
		}
		b.fetched = append(b.fetched, page)
		return b.pages[page], nil
	}
	process := func(_ context.Context, it laneItem) error {
		b.inFlight.Add(1)
		defer b.inFlight.Add(-1)
		b.processed[it.id].Add(1)
		if it.pause > 0 {
			time.Sleep(it.pause)
		}
		switch it.outcome {
		case 1:
			return errLaneItem
		case 2:
			panic(errLaneItem)
		case 3:
			runtime.Goexit()
		}
		return nil
	}
	b.report, b.err = RunBatches(ctx, b.r.exec, fetch, process)
	if n := b.inFlight.Load(); n != 0 {
		b.r.fail("RunBatches returned with %d items still in process", n)
	}
	for i := range b.processed {
		b.atReturn += b.processed[i].Load()
	}
}

// check checks the report: every fetched item processed once or skipped,
// the counts, the failures and the error.
func (b *laneBatch) check() {
	r, rep := b.r, b.report
	var processed, final int32
	succeeded, failed := 0, 0
	wantFailures := map[[2]int]int{}
	for _, p := range b.fetched {
		for _, it := range b.pages[p] {
			c := b.processed[it.id].Load()
			if c > 1 {
				r.fail("batch: item %d processed %d times", it.id, c)
			}
			if c == 0 {
				continue
			}
			processed++
			if it.outcome == 0 {
				succeeded++
			} else {
				failed++
				wantFailures[[2]int{it.page, it.index}] = it.outcome
			}
		}
	}
	if b.fetchFails && b.failAt < len(b.pages) {
		for _, it := range b.pages[b.failAt] {
			if c := b.processed[it.id].Load(); c != 0 {
				r.fail("batch: item %d, returned by a fetch that failed, processed %d times", it.id, c)
			}
		}
	}
	for i := range b.processed {
		final += b.processed[i].Load()
	}
	if final != b.atReturn {
		r.fail("batch: %d items processed after RunBatches returned", final-b.atReturn)
	}
	items := 0
	for _, p := range b.fetched {
		items += len(b.pages[p])
	}
	if rep.Pages != len(b.fetched) || rep.Items != items || rep.Succeeded != succeeded ||
		rep.Failed != failed || rep.Skipped != items-int(processed) || len(rep.Failures) != failed {
		r.fail("batch: report %+v, want %d pages, %d items, %d succeeded, %d failed, %d skipped",
			rep, len(b.fetched), items, succeeded, failed, items-int(processed))
	}
	for i, f := range rep.Failures {
		if i > 0 && (f.Page < rep.Failures[i-1].Page || f.Page == rep.Failures[i-1].Page && f.Index <= rep.Failures[i-1].Index) {
			r.fail("batch: failures out of order at %d", i)
		}
		var pe *PanicError
		switch wantFailures[[2]int{f.Page, f.Index}] {
		case 1:
			if !errors.Is(f.Err, errLaneItem) || errors.As(f.Err, &pe) {
				r.fail("batch: item %d/%d failed with %v", f.Page, f.Index, f.Err)
			}
		case 2:
			if !errors.As(f.Err, &pe) {
				r.fail("batch: item %d/%d panicked but failed with %v", f.Page, f.Index, f.Err)
			}
		case 3:
			if !errors.Is(f.Err, ErrGoexit) {
				r.fail("batch: item %d/%d called Goexit but failed with %v", f.Page, f.Index, f.Err)
			}
		default:
			r.fail("batch: a failure for item %d/%d, which did not fail", f.Page, f.Index)
		}
	}
	switch {
	case rep.Skipped > 0 && !errors.Is(b.err, errLaneStop):
		r.fail("batch: %d skipped, error %v", rep.Skipped, b.err)
	case b.fetchFails && !errors.Is(b.err, errLaneFetch):
		r.fail("batch: fetch failed, error %v", b.err)
	case !b.fetchFails && !b.cancelled.Load() && (b.err != nil || rep.Skipped != 0):
		r.fail("batch: nothing stopped it, error %v, %d skipped", b.err, rep.Skipped)
	case b.err != nil && !errors.Is(b.err, errLaneFetch) && !errors.Is(b.err, errLaneStop):
		r.fail("batch: error %v", b.err)
	}
}
