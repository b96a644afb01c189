package asynctool

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// FullPolicy says what [Pool.Submit] does with a task when every worker is
// busy and the queue is full. The zero value means the default,
// [CallerRuns].
type FullPolicy int

const (
	// CallerRuns runs the task on the goroutine that called Submit. The
	// submitter is slowed down to the pool's pace, which is the
	// backpressure a producer loop wants: it cannot fetch more work while
	// it is busy doing some. This is the default.
	//
	// The task runs before Submit returns, on the caller's stack: a
	// caller must not hold, as it calls Submit, a lock the task takes
	// (sync.Mutex is not reentrant), and a task that calls
	// runtime.Goexit ends the caller's goroutine (a panic is recovered,
	// as on a worker). A task of the pool that submits to it runs the
	// new task nested on its own worker, which takes no other task until
	// both have returned ([PoolStats.Running] counts both).
	CallerRuns FullPolicy = iota + 1
	// Block makes Submit wait until a worker or the queue takes the task
	// (a worker frees a place in the queue by taking a task from it), or
	// until the pool is closed, when Submit returns [ErrPoolClosed]
	// without running the task.
	Block
	// Reject makes Submit return [ErrPoolFull] without running the task.
	Reject
)

// String returns the policy's name.
func (p FullPolicy) String() string {
	switch p {
	case CallerRuns:
		return "CallerRuns"
	case Block:
		return "Block"
	case Reject:
		return "Reject"
	}
	return fmt.Sprintf("FullPolicy(%d)", int(p))
}

// PoolOption configures a [Pool] built by [NewPool]. A nil PoolOption
// does nothing.
type PoolOption interface {
	applyPool(*poolConfig)
}

type poolConfig struct {
	size    int
	queue   int
	policy  FullPolicy
	idle    time.Duration
	onPanic func(*PanicError)
}

type poolOptionFunc func(*poolConfig)

func (f poolOptionFunc) applyPool(c *poolConfig) { f(c) }

// PoolSize sets the maximum number of worker goroutines, and so of tasks
// running at once on workers (tasks run by callers under [CallerRuns] are
// not counted). The default is 16 × GOMAXPROCS: tasks in this package are
// usually blocked on I/O, not on the CPU. PoolSize panics if n < 1.
func PoolSize(n int) PoolOption {
	if n < 1 {
		panic(fmt.Sprintf("asynctool: PoolSize(%d): size must be at least 1", n))
	}
	return poolOptionFunc(func(c *poolConfig) { c.size = n })
}

// PoolQueue sets how many tasks may wait for a worker once every worker
// is busy. 0 means no queue: a task is handed straight to a worker or the
// [FullPolicy] applies. The default is 1024. The queue's memory grows
// with the number of tasks waiting, up to n slots (capped at 2^30), and is
// kept for reuse. PoolQueue panics if n < 0.
func PoolQueue(n int) PoolOption {
	if n < 0 {
		panic(fmt.Sprintf("asynctool: PoolQueue(%d): capacity must not be negative", n))
	}
	return poolOptionFunc(func(c *poolConfig) { c.queue = n })
}

// PoolWhenFull sets what Submit does when every worker is busy and the
// queue is full. The zero FullPolicy selects the default, [CallerRuns].
// PoolWhenFull panics on a value that is none of the policies, as the
// other option constructors do on values that can never work.
func PoolWhenFull(p FullPolicy) PoolOption {
	if p != 0 && (p < CallerRuns || p > Reject) {
		panic(fmt.Sprintf("asynctool: PoolWhenFull(%v): unknown policy", p))
	}
	return poolOptionFunc(func(c *poolConfig) { c.policy = p })
}

// PoolIdleTimeout sets how long a worker with nothing to do waits before
// it exits. A worker exits between d and 2d after its last task, so an
// idle pool holds no goroutine; the next task starts a new one. The
// default is 5 seconds. PoolIdleTimeout panics if d <= 0.
func PoolIdleTimeout(d time.Duration) PoolOption {
	if d <= 0 {
		panic(fmt.Sprintf("asynctool: PoolIdleTimeout(%v): timeout must be positive", d))
	}
	return poolOptionFunc(func(c *poolConfig) { c.idle = d })
}

// PoolPanicHandler installs a function that receives every panic
// recovered from a task, with the panicking goroutine's stack. It is
// called on the goroutine that ran the task, after the task, and so from
// several goroutines at once when tasks panic together; it must not
// panic itself. Without a handler a task's panic is recovered and only
// counted in [PoolStats.Panicked]: it never kills a worker or the
// process.
func PoolPanicHandler(h func(*PanicError)) PoolOption {
	return poolOptionFunc(func(c *poolConfig) { c.onPanic = h })
}

// PoolStats is a snapshot of a [Pool]'s counters. The fields are read
// one by one while the pool runs, so they need not add up exactly.
type PoolStats struct {
	// Workers is the number of live worker goroutines, busy or idle.
	Workers int
	// Running is the number of tasks running now, on workers or, under
	// [CallerRuns], on callers.
	Running int
	// Queued is the number of tasks waiting for a worker.
	Queued int
	// Completed is the number of tasks that have finished, including
	// those that panicked or called runtime.Goexit.
	Completed uint64
	// CallerRan is the number of tasks that [CallerRuns] ran on the
	// submitting goroutine.
	CallerRan uint64
	// Rejected is the number of tasks refused with [ErrPoolFull].
	Rejected uint64
	// Panicked is the number of tasks that panicked.
	Panicked uint64
}

// Pool is a bounded pool of worker goroutines with a bounded queue. It is
// the [Executor] behind [Async], and can be sized and shared by users.
//
// Submit hands a task to an idle worker if there is one, otherwise starts
// a new worker if fewer than the maximum are alive, otherwise queues it,
// and when the queue is full applies the pool's [FullPolicy]. Idle
// workers are reused last in, first out, so a pool under light load keeps
// a few warm workers busy and lets the others time out. Workers take
// queued tasks before waiting for new ones, and exit after the idle
// timeout, so a pool that has nothing to do holds no goroutine.
//
// A task that panics does not kill its worker: the panic is recovered,
// counted in [PoolStats.Panicked] and passed to the [PoolPanicHandler] if
// one is installed. A task that calls runtime.Goexit ends its worker
// goroutine; a new goroutine takes the worker's place.
//
// A task must not wait for another task of the same pool, such as the
// drain loop of a [Serial] or [Keyed] made on it (a RunBatches process
// that submits to a Keyed on the batch's pool and waits for its task to
// run, for example): once every worker waits, the tasks in the queue
// never start, and nothing ends the wait. Give the inner work a pool of
// its own.
//
// A Pool is safe for concurrent use. It must be created with [NewPool]
// and must not be copied after first use. The zero Pool has no workers
// and no queue: Submit runs every task on the caller, as [CallerRuns]
// does when a pool is full (counted in [PoolStats.CallerRan]). A pool
// that is not closed releases its goroutines after the idle timeout;
// [Pool.Close] releases them at once.
//
// A nil *Pool is not the zero Pool: it is a pool that was never made (a
// field never set), and running its tasks on the caller would hide that.
// Its Submit refuses every task with an error naming the nil pool, its
// Close does nothing and its Stats are zero. Passed as an [Executor] to
// [NewSerial], [NewKeyed], [WithExecutor] or [RunBatches], a nil *Pool
// counts as a nil Executor, as each of them documents.
type Pool struct {
	size    int32
	qcap    int
	policy  FullPolicy
	idle    time.Duration
	onPanic func(*PanicError)

	// Counters written once per task, on cache lines of their own: the
	// mutex and the state it guards are written by every Submit.
	_         [64]byte
	started   atomic.Uint64
	completed atomic.Uint64
	callerRan atomic.Uint64
	rejected  atomic.Uint64
	panicked  atomic.Uint64
	_         [64]byte

	// Written under mu; read without it by Stats, and closed by fast
	// paths.
	closed  atomic.Bool
	workers atomic.Int32 // live workers, counted before their goroutine starts
	queued  atomic.Int32 // tasks in the queue

	mu sync.Mutex
	// idlers are the idle workers, each waiting on its own channel; the
	// most recently idle is last, and the longest idle first.
	idlers []*poolWorker
	// queue is a ring of at most qcap tasks, grown as tasks are queued
	// (see enqueue); head is the oldest, and queued.Load() of them are in
	// use.
	queue []func()
	head  int
	// nblocked counts Submit calls waiting under Block; they wait on
	// space, which is signalled whenever a worker goes idle or a queued
	// task is taken.
	nblocked int
	space    sync.Cond
	// The reaper retires idle workers: see reap.
	reaper      *time.Timer
	reaperArmed bool
	tick        uint64
	// live counts worker goroutines and an armed reaper, so that Close
	// can wait until none of them runs any more.
	live sync.WaitGroup
}

// errNilPool is the error of a nil *Pool's Submit.
var errNilPool = errors.New("asynctool: Submit on a nil *Pool")

// poolWorker is one worker goroutine's mailbox. An idle worker waits on
// ch; a nil task tells it to exit, and whoever sends the nil has already
// uncounted it.
type poolWorker struct {
	ch   chan func() // capacity 1: a send never blocks
	tick uint64      // the pool's tick when the worker last went idle
}

// How the pool stays correct. Every decision (which worker takes a task,
// starting a worker, queueing, a worker going idle or exiting) is made
// under mu, so these hold whenever mu is free:
//
//   - a worker is idle (in idlers) only while the queue is empty: a worker
//     takes from the queue before it goes idle, and a task is queued only
//     when no worker is idle;
//   - the queue is not empty only while workers > 0: a task is queued only
//     when the pool has its maximum number of workers, and a worker exits
//     only after finding the queue empty.
//
// So a queued task always has a worker to run it, even after Close, which
// waits until the last worker has drained the queue and exited. A task is
// handed to an idle worker by sending on the worker's own channel after mu
// is released: the worker was taken out of idlers under mu, so nobody
// else sends to it.

// NewPool returns a pool configured by opts. With no options it has
// 16 × GOMAXPROCS workers, a queue of 1024 tasks, the [CallerRuns]
// policy and a 5-second idle timeout. No goroutine starts until the first
// task is submitted.
func NewPool(opts ...PoolOption) *Pool {
	c := poolConfig{
		size:  16 * runtime.GOMAXPROCS(0),
		queue: 1024,
		idle:  5 * time.Second,
	}
	for _, o := range opts {
		if o != nil {
			o.applyPool(&c)
		}
	}
	if c.policy == 0 {
		c.policy = CallerRuns
	}
	p := &Pool{
		size:    int32(min(c.size, 1<<30)),
		qcap:    min(c.queue, 1<<30),
		policy:  c.policy,
		idle:    c.idle,
		onPanic: c.onPanic,
	}
	p.space.L = &p.mu
	return p
}

// Submit arranges for task to run once and returns nil, or returns an
// error without running it: [ErrPoolClosed] after [Pool.Close],
// [ErrPoolFull] when the pool is full under [Reject], [ErrNilTask] for a
// nil task, and an error naming the nil pool on a nil *Pool. Under
// [CallerRuns] a full pool runs task on the calling goroutine before
// Submit returns; under [Block] Submit waits until a worker or the queue
// takes the task. Submit is safe to call from inside a task (under Block,
// a task that waits for a full pool holds its own worker while it waits).
//
// A Submit that races with Close returns ErrPoolClosed, or has its task
// run by a worker before Close returns, or finds the pool full: then, as
// when the pool is full at any other time, CallerRuns runs the task on
// the caller (perhaps after Close returned) and Reject returns
// ErrPoolFull. Submit does not allocate, except to start a worker or to
// grow the queue's ring (see [PoolQueue]) the first times it fills.
func (p *Pool) Submit(task func()) error {
	if task == nil {
		return ErrNilTask
	}
	if p == nil {
		return errNilPool
	}
	switch p.offer(task, true) {
	case offerOK:
		return nil
	case offerClosed:
		return ErrPoolClosed
	}
	switch p.policy {
	case Reject:
		p.rejected.Add(1)
		return ErrPoolFull
	case Block:
		return p.submitBlocking(task)
	default:
		p.callerRan.Add(1)
		p.run(task)
		return nil
	}
}

// trySubmit hands task to the pool if it can take it now: to an idle
// worker, a new worker or the queue. It never blocks and never runs task
// on the caller; it reports false if the pool is full or closed.
func (p *Pool) trySubmit(task func()) bool {
	return p.offer(task, true) == offerOK
}

// tryStart runs task at once on an idle worker or on a new one, if the
// pool has one to spare; unlike trySubmit it never queues the task. The
// scheduler uses it to start helpers only when a goroutine is free now.
func (p *Pool) tryStart(task func()) bool { return p.offer(task, false) == offerOK }

// hasRoom reports, without the lock, whether a worker could be started
// or fewer tasks were running than there are workers a moment ago: a hint
// that tryStart may succeed. It reads the counters Stats reads, so that
// the pool's own paths pay nothing for it; a worker that has finished a
// task but not yet gone idle counts as room, and a task run by a caller
// under CallerRuns as a worker busy.
func (p *Pool) hasRoom() bool {
	w := p.workers.Load()
	if w < p.size {
		return true
	}
	completed := p.completed.Load()
	started := p.started.Load() // after completed, so started >= completed
	return started-completed < uint64(w)
}

type offerResult uint8

const (
	offerOK offerResult = iota
	offerFull
	offerClosed
)

// offer is the non-blocking part of Submit; queue says whether task may
// wait in the queue.
func (p *Pool) offer(task func(), queue bool) offerResult {
	if p.closed.Load() {
		return offerClosed
	}
	p.mu.Lock()
	res, w, spawn := p.place(task, queue)
	p.mu.Unlock()
	p.deliver(task, w, spawn)
	return res
}

// place decides, with mu held, where task goes. It returns the idle
// worker to hand it to, or spawn for a new worker to start with it (its
// slot is counted here; deliver makes it, outside mu), or neither when it
// queued the task or refused it; the caller then calls deliver,
// preferably after releasing mu.
func (p *Pool) place(task func(), queue bool) (res offerResult, w *poolWorker, spawn bool) {
	if p.closed.Load() {
		return offerClosed, nil, false
	}
	if n := len(p.idlers); n > 0 {
		w = p.idlers[n-1]
		p.idlers[n-1] = nil
		p.idlers = p.idlers[:n-1]
		return offerOK, w, false
	}
	if p.workers.Load() < p.size {
		p.workers.Add(1)
		p.live.Add(1)
		return offerOK, nil, true
	}
	if !queue || int(p.queued.Load()) >= p.qcap {
		return offerFull, nil, false
	}
	p.enqueue(task)
	return offerOK, nil, false
}

// poolQueueMin is the ring's size when the first task is queued.
const poolQueueMin = 16

// enqueue adds task at the tail of the queue, which has room for it
// (fewer than qcap tasks); mu is held. The ring grows as needed, doubling
// up to qcap, so that a large PoolQueue costs memory only for the tasks
// that do wait; it never shrinks, so a pool under steady load does not
// allocate.
func (p *Pool) enqueue(task func()) {
	n := int(p.queued.Load())
	if n == len(p.queue) {
		ring := make([]func(), min(max(2*n, poolQueueMin), p.qcap))
		k := copy(ring, p.queue[p.head:])
		copy(ring[k:], p.queue[:p.head])
		p.queue, p.head = ring, 0
	}
	k := p.head + n
	if k >= len(p.queue) {
		k -= len(p.queue)
	}
	p.queue[k] = task
	p.queued.Add(1)
}

// deliver carries out place's decision.
func (p *Pool) deliver(task func(), w *poolWorker, spawn bool) {
	switch {
	case spawn:
		go p.worker(&poolWorker{ch: make(chan func(), 1)}, task)
	case w != nil:
		w.ch <- task
	}
}

// dequeue takes the oldest queued task, or returns nil; mu is held.
func (p *Pool) dequeue() func() {
	if p.queued.Load() == 0 {
		return nil
	}
	task := p.queue[p.head]
	p.queue[p.head] = nil
	if p.head++; p.head == len(p.queue) {
		p.head = 0
	}
	p.queued.Add(-1)
	return task
}

// submitBlocking waits until a worker or the queue takes task, or the
// pool closes.
func (p *Pool) submitBlocking(task func()) error {
	p.mu.Lock()
	p.nblocked++
	for {
		res, w, spawn := p.place(task, true)
		if res == offerFull {
			p.space.Wait()
			continue
		}
		p.nblocked--
		p.mu.Unlock()
		p.deliver(task, w, spawn)
		if res == offerClosed {
			return ErrPoolClosed
		}
		return nil
	}
}

// worker runs task (if any), then queued and handed-off tasks, until the
// pool retires it for idleness or closes.
func (p *Pool) worker(w *poolWorker, task func()) {
	normal := false
	defer func() {
		if !normal {
			// A task called runtime.Goexit on this goroutine: let a
			// fresh goroutine take over this worker's slot.
			go p.worker(w, nil)
			return
		}
		p.live.Done()
	}()
	for {
		if task != nil {
			p.run(task)
		}
		p.mu.Lock()
		if task = p.dequeue(); task != nil {
			if p.nblocked > 0 {
				p.space.Signal()
			}
			p.mu.Unlock()
			continue
		}
		if p.closed.Load() {
			p.workers.Add(-1)
			p.mu.Unlock()
			normal = true
			return
		}
		w.tick = p.tick
		p.idlers = append(p.idlers, w)
		if p.nblocked > 0 {
			p.space.Signal()
		}
		if !p.reaperArmed {
			p.reaperArmed = true
			p.live.Add(1)
			if p.reaper == nil {
				p.reaper = time.AfterFunc(p.idle, p.reap)
			} else {
				p.reaper.Reset(p.idle)
			}
		}
		p.mu.Unlock()
		if task = <-w.ch; task == nil {
			normal = true
			return
		}
	}
}

// reap runs once per idle timeout while some worker is idle. It retires
// the workers that have been idle since before its previous run, so a
// worker exits between one and two idle timeouts after its last task.
// Idle workers are in the order they went idle, so those are a prefix.
func (p *Pool) reap() {
	defer p.live.Done()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reaperArmed = false
	if p.closed.Load() {
		return
	}
	k := 0
	for k < len(p.idlers) && p.idlers[k].tick < p.tick {
		p.idlers[k].ch <- nil
		k++
	}
	p.workers.Add(-int32(k))
	n := copy(p.idlers, p.idlers[k:])
	clear(p.idlers[n:])
	p.idlers = p.idlers[:n]
	p.tick++
	if n > 0 {
		p.reaperArmed = true
		p.live.Add(1)
		p.reaper.Reset(p.idle)
	}
}

// run runs one task, recovering and reporting a panic.
func (p *Pool) run(task func()) {
	p.started.Add(1)
	defer p.completed.Add(1)
	defer func() {
		if r := recover(); r != nil {
			p.panicked.Add(1)
			if p.onPanic != nil {
				p.onPanic(newPanicError(r))
			}
		}
	}()
	task()
}

// Close stops the pool taking tasks, lets the workers run every task
// already queued, and waits until every worker goroutine has exited.
// Tasks being run by callers under [CallerRuns] are not waited for. After
// Close, Submit returns [ErrPoolClosed], and Submit calls blocked under
// [Block] return it too. Close is idempotent, safe for concurrent use,
// and always returns nil; on a nil *Pool it does nothing. It must not be
// called from inside one of the pool's tasks, which would wait for itself.
func (p *Pool) Close() error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	if !p.closed.Load() {
		p.closed.Store(true)
		if p.reaperArmed && p.reaper.Stop() {
			p.live.Done() // the reap it was armed for will not run
		}
		p.reaperArmed = false
		for _, w := range p.idlers {
			w.ch <- nil
		}
		p.workers.Add(-int32(len(p.idlers)))
		p.idlers = nil
		p.space.Broadcast()
	}
	p.mu.Unlock()
	// Every worker goroutine (busy, idle, or retired by the reaper but
	// not yet returned) and a reap that already fired are counted in live.
	p.live.Wait()
	return nil
}

// Stats returns a snapshot of the pool's counters, all zero for a nil
// *Pool. It does not lock.
func (p *Pool) Stats() PoolStats {
	if p == nil {
		return PoolStats{}
	}
	completed := p.completed.Load()
	started := p.started.Load() // after completed, so started >= completed
	return PoolStats{
		Workers:   int(p.workers.Load()),
		Running:   int(started - completed),
		Queued:    int(p.queued.Load()),
		Completed: completed,
		CallerRan: p.callerRan.Load(),
		Rejected:  p.rejected.Load(),
		Panicked:  p.panicked.Load(),
	}
}
