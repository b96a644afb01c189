package asynctool

import (
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
	CallerRuns FullPolicy = iota + 1
	// Block makes Submit wait until a worker is free to take the task, or
	// until the pool is closed.
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

// PoolOption configures a [Pool] built by [NewPool].
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
// [FullPolicy] applies. The default is 1024. PoolQueue panics if n < 0.
func PoolQueue(n int) PoolOption {
	if n < 0 {
		panic(fmt.Sprintf("asynctool: PoolQueue(%d): capacity must not be negative", n))
	}
	return poolOptionFunc(func(c *poolConfig) { c.queue = n })
}

// PoolWhenFull sets what Submit does when every worker is busy and the
// queue is full. The zero FullPolicy selects the default, [CallerRuns].
func PoolWhenFull(p FullPolicy) PoolOption {
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
// called on the goroutine that ran the task, after the task; it must not
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
	// those that panicked.
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
// Submit hands a task to an idle worker if there is one (one channel
// operation), otherwise starts a new worker if fewer than the maximum are
// alive, otherwise queues it, and when the queue is full applies the
// pool's [FullPolicy]. Workers take queued tasks before waiting for new
// ones, and exit after the idle timeout, so a pool that has nothing to do
// holds no goroutine. No lock is taken on any of these paths.
//
// A task that panics does not kill its worker: the panic is recovered,
// counted in [PoolStats.Panicked] and passed to the [PoolPanicHandler] if
// one is installed. A task that calls runtime.Goexit ends its worker
// goroutine; a new goroutine takes the worker's place.
//
// A Pool is safe for concurrent use. It must be created with [NewPool]
// and must not be copied after first use. A pool that is not closed
// releases its goroutines after the idle timeout; [Pool.Close] releases
// them at once.
type Pool struct {
	size    int32
	policy  FullPolicy
	idle    time.Duration
	onPanic func(*PanicError)

	handoff chan func()   // unbuffered: idle workers wait here
	queue   chan func()   // buffered; nil when the queue capacity is 0
	done    chan struct{} // closed by Close

	closed  atomic.Bool
	workers atomic.Int32 // live workers, counted before their goroutine starts
	blocked atomic.Int32 // Submit calls waiting under the Block policy
	// queued counts tasks in the queue, plus tasks about to be sent to
	// it: it is incremented before the send and decremented after the
	// receive, so it is never below the queue's length.
	queued atomic.Int64

	// Counters written once per task, kept off the cache line of the
	// fields above, which every Submit reads.
	_         [64]byte
	started   atomic.Uint64
	completed atomic.Uint64
	callerRan atomic.Uint64
	rejected  atomic.Uint64
	panicked  atomic.Uint64

	// mu guards changes to the number of workers and finished; exited
	// lets Close sleep until the last worker has gone.
	mu       sync.Mutex
	exited   sync.Cond
	finished bool // Close has seen no worker and nothing queued
}

// How the pool stays correct. The hot paths (handing a task to an idle
// worker, queueing, taking from the queue) take no lock. Changes to the
// number of workers (starting one, one exiting) and Close take mu, so that
// Close, which waits under mu, never sees a worker that is about to come
// back. The race between a submitter queueing a task and the last worker
// exiting is settled with sequentially consistent atomics:
//
//   - A submitter that queues a task increments queued, sends, and then
//     reads workers; if it reads 0 it starts a worker.
//   - A worker that wants to exit (idle, or draining after Close)
//     decrements workers and then reads queued (and blocked, when idle);
//     if either is positive it counts itself back in and stays.
//
// Whichever of the two reads comes first in the single order of atomic
// operations, one side sees the other's write, so a queued task always
// has a worker. Close sets closed and waits until workers and queued are
// both 0; a submitter that read closed as false before Close set it is
// still counted in one of the two, so Close waits for its task.

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
		o.applyPool(&c)
	}
	if c.policy == 0 {
		c.policy = CallerRuns
	}
	if c.policy < CallerRuns || c.policy > Reject {
		panic(fmt.Sprintf("asynctool: PoolWhenFull(%v): unknown policy", c.policy))
	}
	p := &Pool{
		size:    int32(min(c.size, 1<<30)),
		policy:  c.policy,
		idle:    c.idle,
		onPanic: c.onPanic,
		handoff: make(chan func()),
		done:    make(chan struct{}),
	}
	if c.queue > 0 {
		p.queue = make(chan func(), c.queue)
	}
	p.exited.L = &p.mu
	return p
}

// Submit arranges for task to run once and returns nil, or returns an
// error without running it: [ErrPoolClosed] after [Pool.Close],
// [ErrPoolFull] when the pool is full under [Reject], [ErrNilTask] for a
// nil task. Under [CallerRuns] a full pool runs task on the calling
// goroutine before Submit returns; under [Block] Submit waits until a
// worker takes the task. Submit is safe to call from inside a task (under
// Block, a task that waits for a full pool holds its own worker while it
// waits).
//
// A Submit that races with Close either has its task run before Close
// returns or returns ErrPoolClosed. Submit does not allocate.
func (p *Pool) Submit(task func()) error {
	if task == nil {
		return ErrNilTask
	}
	switch p.offer(task) {
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
	return p.offer(task) == offerOK
}

type offerResult uint8

const (
	offerOK offerResult = iota
	offerFull
	offerClosed
)

// offer is the non-blocking part of Submit.
func (p *Pool) offer(task func()) offerResult {
	if r := p.startNow(task); r != offerFull {
		return r
	}
	if p.queue == nil {
		return offerFull
	}
	p.queued.Add(1)
	if p.closed.Load() {
		p.unqueue()
		return offerClosed
	}
	select {
	case p.queue <- task:
	default:
		p.unqueue()
		return offerFull
	}
	// Every worker may have exited since the size check; make sure one
	// is left to take the task (even after Close, which waits for it).
	if p.workers.Load() == 0 {
		p.mu.Lock()
		if p.workers.Load() == 0 && p.queued.Load() > 0 && !p.finished {
			p.workers.Add(1)
			go p.worker(nil)
		}
		p.mu.Unlock()
	}
	return offerOK
}

// startWorker starts a worker running task, unless the pool is closed or
// already has its maximum number of workers.
func (p *Pool) startWorker(task func()) offerResult {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed.Load() {
		return offerClosed
	}
	if p.workers.Load() >= p.size {
		return offerFull
	}
	p.workers.Add(1)
	go p.worker(task)
	return offerOK
}

// unqueue takes back the increment of queued for a task that was not
// queued after all.
func (p *Pool) unqueue() {
	p.queued.Add(-1)
	if p.closed.Load() {
		p.mu.Lock()
		p.exited.Broadcast()
		p.mu.Unlock()
	}
}

// submitBlocking waits until a worker takes task or the pool closes.
func (p *Pool) submitBlocking(task func()) error {
	p.blocked.Add(1)
	defer p.blocked.Add(-1)
	// While blocked > 0 no worker exits for idleness, so once a worker is
	// known to exist one will come to the handoff.
	if p.workers.Load() == 0 {
		p.mu.Lock()
		if p.workers.Load() == 0 && !p.closed.Load() {
			p.workers.Add(1)
			go p.worker(nil)
		}
		p.mu.Unlock()
	}
	select {
	case p.handoff <- task:
		return nil
	case <-p.done:
		return ErrPoolClosed
	}
}

// retire uncounts the calling worker and reports true, unless a queued
// task (or, for an idle worker, a blocked submitter) still needs a
// worker: then the worker stays counted and retire reports false.
func (p *Pool) retire(idle bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.workers.Add(-1)
	if p.queued.Load() > 0 || (idle && p.blocked.Load() > 0) {
		p.workers.Add(1)
		return false
	}
	if p.closed.Load() {
		p.exited.Broadcast()
	}
	return true
}

// worker runs task (if any), then queued and handed-off tasks until it
// has been idle for the idle timeout or the pool closes.
func (p *Pool) worker(task func()) {
	normal := false
	defer func() {
		if !normal {
			// A task called runtime.Goexit on this goroutine: let a
			// fresh goroutine take over this worker's slot.
			go p.worker(nil)
		}
	}()
	idle := time.NewTimer(p.idle)
	defer idle.Stop()
	busy := true // ran a task since the timer last fired
	for {
		if task != nil {
			p.run(task)
			busy = true
		}
		select {
		case task = <-p.queue:
			p.queued.Add(-1)
			continue
		default:
		}
		select {
		case task = <-p.handoff:
		case task = <-p.queue:
			p.queued.Add(-1)
		case <-p.done:
			for {
				p.drainQueue()
				if p.retire(false) {
					normal = true
					return
				}
				// A submitter that raced with Close is between its
				// increment of queued and its send.
				runtime.Gosched()
			}
		case <-idle.C:
			task = nil
			// Resetting the timer for every task would cost a timer
			// operation per task; instead a worker exits when a whole
			// period went by without work.
			if !busy && p.retire(true) {
				normal = true
				return
			}
			busy = false
			idle.Reset(p.idle)
		}
	}
}

// drainQueue runs what is left in the queue after Close.
func (p *Pool) drainQueue() {
	for {
		select {
		case task := <-p.queue:
			p.queued.Add(-1)
			p.run(task)
		default:
			return
		}
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
// and always returns nil. It must not be called from inside one of the
// pool's tasks, which would wait for itself.
func (p *Pool) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed.Load() {
		p.closed.Store(true)
		close(p.done)
	}
	for p.workers.Load() > 0 || p.queued.Load() > 0 {
		p.exited.Wait()
	}
	p.finished = true
	return nil
}

// Stats returns a snapshot of the pool's counters. It does not lock.
func (p *Pool) Stats() PoolStats {
	completed := p.completed.Load()
	started := p.started.Load() // after completed, so started >= completed
	return PoolStats{
		Workers:   int(p.workers.Load()),
		Running:   int(started - completed),
		Queued:    int(max(p.queued.Load(), 0)),
		Completed: completed,
		CallerRan: p.callerRan.Load(),
		Rejected:  p.rejected.Load(),
		Panicked:  p.panicked.Load(),
	}
}

// startNow hands task to an idle worker, or starts a new worker with it
// if the pool has room; it never queues the task.
func (p *Pool) startNow(task func()) offerResult {
	if p.closed.Load() {
		return offerClosed
	}
	select {
	case p.handoff <- task:
		return offerOK
	default:
	}
	if p.workers.Load() < p.size {
		return p.startWorker(task)
	}
	return offerFull
}

// tryStart runs task at once on an idle worker or on a new one, if the
// pool has one to spare; unlike trySubmit it never queues the task. The
// scheduler uses it to start helpers only when a goroutine is free now.
func (p *Pool) tryStart(task func()) bool { return p.startNow(task) == offerOK }
